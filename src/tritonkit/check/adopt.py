"""Adopting the checker on an existing codebase: in-source suppressions and a baseline of accepted findings.

A finding is *suppressed* by a comment on its line, ``# tritonkit: ignore[int32-offset] slots are < 2^20``, and is
*in the baseline* when a baseline file lists its rule, kernel, the flagged line's code and the function that line
is in (not its number, which moves with every edit above it): the same launch line copied into another function is
another call site, and a finding of its own. Neither counts toward the exit code; both stay in JSON and SARIF,
marked.
"""

from __future__ import annotations

import ast
import json
import linecache
import re
from pathlib import Path

from .findings import Finding, Problem
from .._fileio import write_atomic
from .capture.target import CheckError

_IGNORE = re.compile(r"#\s*tritonkit:\s*ignore\[([^\]]*)\]\s*(.*)$")
BASELINE_VERSION = 1


def _code(file: str, line: int) -> str:
    """The flagged line's code, comment and spacing left out: what a baseline entry matches."""
    text = linecache.getline(file, line) if line > 0 else ""
    return " ".join(text.split("#", 1)[0].split())


def suppress(findings: list[Finding]) -> None:
    """Mark the findings whose line carries ``# tritonkit: ignore[<rule>, ...] reason``."""
    for file in {f.file for f in findings}:
        linecache.checkcache(file)  # a file edited since an earlier run in this process is read again
    for f in findings:
        m = _IGNORE.search(linecache.getline(f.file, f.line) if f.line > 0 else "")
        if m and f.rule in {r.strip() for r in m.group(1).split(",")}:
            f.suppressed = m.group(2).strip() or "(no reason given)"


def unknown_suppressions(files, known) -> list[Problem]:
    """A problem (exit 2) for each ``# tritonkit: ignore[...]`` in ``files`` that names no rule in ``known``: a
    misspelt id would otherwise leave its finding failing, or a later one unsuppressed, with no word why."""
    out = []
    for file in sorted(set(files)):
        for i, text in enumerate(linecache.getlines(file), 1):
            m = _IGNORE.search(text)
            bad = [r.strip() for r in m.group(1).split(",") if r.strip() not in known] if m else []
            if bad:
                out.append(
                    Problem(
                        "suppression",
                        f"{_rel(file)}:{i}",
                        f"ignore[...] names {', '.join(map(repr, bad))}, which is no rule; rules: {', '.join(known)}",
                    )
                )
    return out


_SCOPES: dict[str, tuple[tuple[str, ...], list[tuple[int, int, str]]]] = {}


def _scope(file: str, line: int) -> str:
    """The dotted name of the innermost function or class holding ``line`` of ``file`` ("" at module level, or
    when the file does not parse)."""
    lines = tuple(linecache.getlines(file))
    cached = _SCOPES.get(file)
    if cached is None or cached[0] != lines:
        spans: list[tuple[int, int, str]] = []

        def walk(node, prefix):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    name = f"{prefix}{child.name}"
                    spans.append((child.lineno, child.end_lineno or child.lineno, name))
                    walk(child, name + ".")
                else:
                    walk(child, prefix)

        try:
            walk(ast.parse("".join(lines)), "")
        except (SyntaxError, ValueError, RecursionError):
            spans = []
        cached = _SCOPES[file] = (lines, spans)
    # nested spans come after their parents: the last one that holds the line is the innermost
    return next((name for lo, hi, name in reversed(cached[1]) if lo <= line <= hi), "")


def key(f: Finding) -> tuple[str, str, str, str | None]:
    return f.rule, f.kernel, _code(f.file, f.line), _scope(f.file, f.line)


def write_baseline(path: str, findings: list[Finding], replace: bool = True) -> int:
    """Write the findings a baseline accepts (the unsuppressed ones); returns how many. ``replace=False``: a file
    there (one that appeared since the caller looked included) is left as it is, CheckError."""
    rows = []
    for f in findings:
        if f.suppressed is None:
            rule, kernel, code, scope = key(f)
            rows.append(
                {
                    "rule": rule,
                    "kernel": kernel,
                    "code": code,
                    "scope": scope,
                    "file": _rel(f.file),
                    "message": f.message,
                }
            )
    rows.sort(key=lambda r: (r["file"], r["rule"], r["kernel"], r["scope"], r["code"]))
    try:
        text = json.dumps({"tritonkit_baseline": BASELINE_VERSION, "findings": rows}, indent=1) + "\n"
        write_atomic(path, text, replace=replace)
    except OSError as e:
        raise CheckError(f"cannot write the baseline to {path}: {e.strerror or e}") from None
    return len(rows)


def read_baseline(path: str) -> set[tuple[str, str, str, str | None]]:
    """The baseline's entries, each a :func:`key`; an entry written before baselines named the function (no "scope")
    matches its code in any function."""
    try:
        d = json.loads(Path(path).read_text())
        if d.get("tritonkit_baseline") != BASELINE_VERSION:
            raise ValueError(f"not a tritonkit baseline (version {BASELINE_VERSION})")
        out = set()
        for r in d["findings"]:
            scope = r.get("scope")
            if not all(isinstance(v, str) for v in (r["rule"], r["kernel"], r["code"])) or not isinstance(
                scope, (str, type(None))
            ):
                raise ValueError("an entry's rule, kernel, code and scope must be strings")
            out.add((r["rule"], r["kernel"], r["code"], scope))
        return out
    except OSError as e:
        raise CheckError(f"cannot read the baseline {path}: {e.strerror or e}") from None
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
        raise CheckError(f"the baseline {path} is malformed: {e}; write one with --write-baseline") from None


def apply_baseline(
    path: str,
    accepted: set[tuple[str, str, str, str | None]],
    findings: list[Finding],
    problems: list[Problem],
    rules=None,
    kernels=None,
) -> None:
    """Mark the findings the baseline (read from ``path``) lists; note entries that no longer match anything
    among the ``rules`` that ran on the ``kernels`` checked (None: all): an entry of a rule left out by --rule, or
    of a kernel in another file, is not stale."""
    seen = set()
    for f in findings:
        k = key(f)
        entry = k if k in accepted else (*k[:3], None)
        if f.suppressed is None and entry in accepted:
            f.baseline = True
            seen.add(entry)
    stale = {k for k in accepted - seen if (rules is None or k[0] in rules) and (kernels is None or k[1] in kernels)}
    if stale:
        shown = "; ".join(
            f"{r} in {k}: `{c}`" + (f" (in {s})" if s and s != k else "") for r, k, c, s in sorted(stale, key=str)[:5]
        )
        more = f" and {len(stale) - 5} more" if len(stale) > 5 else ""
        match = "entry matches" if len(stale) == 1 else "entries match"
        problems.append(
            Problem(
                "baseline",
                path,
                f"{len(stale)} {match} no finding any more (fixed, or the line "
                f"changed): {shown}{more}; --write-baseline rewrites it",
                fatal=False,
            )
        )


def _rel(path: str) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return path
