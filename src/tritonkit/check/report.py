"""Render a :class:`~tritonkit.check.runner.Report` as text, JSON or SARIF 2.1.0."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

from .rules import all_rules, rule_page, source_line
from .runner import Report

_DOCS = "tritonkit check --explain {}"


def _rel(path: str) -> str:
    try:
        p = Path(path).resolve()
        return str(p.relative_to(Path.cwd()))
    except (ValueError, OSError):
        return path


def _case(case: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in case.items()) or "(no parameters)"


#: the text report fits a terminal this wide: messages, reasons and fixes are wrapped, continuations indented
WIDTH = 120


def _wrapped(text: str, lead: str = "  ") -> str:
    """``text`` after ``lead``, wrapped at :data:`WIDTH` with its continuation lines indented two more; a word (a
    number, an expression in backticks) is never cut."""
    return textwrap.fill(
        text,
        WIDTH,
        initial_indent=lead,
        subsequent_indent=lead + "  ",
        break_long_words=False,
        break_on_hyphens=False,
    )


def to_text(rep: Report, color: bool = False) -> str:
    rules = all_rules()
    paint = (lambda s, c: f"\033[{c}m{s}\033[0m") if color else (lambda s, c: s)
    tone = {"error": "31;1", "warning": "33;1", "info": "36"}
    out = []
    for f in (f for f in rep.findings if f.active):
        loc = f"{_rel(f.file)}:{f.line}"
        out.append(f"{paint(loc, '1')}: {paint(f.severity, tone.get(f.severity, '0'))} [{f.rule}] in {f.kernel}")
        src = source_line(f.file, f.line)
        if src.strip():
            head = f"  {f.line:>5} | "
            # a long source line wraps under itself, the gutter kept: the flagged expression may sit at its end
            out.append(
                textwrap.fill(
                    src,
                    WIDTH,
                    initial_indent=head,
                    subsequent_indent=" " * (len(head) - 2) + "| ",
                    replace_whitespace=False,
                    drop_whitespace=False,
                )
                if len(head) + len(src) > WIDTH
                else head + src
            )
        out.append(_wrapped(f.message))
        info = rules.get(f.rule)
        if info is not None:
            out.append(_wrapped(f"why: {info.RULE.why}"))
        if f.fix:
            out.append(_wrapped(f"fix: {f.fix}"))
        more = f"  (seen {f.count} times)" if f.count > 1 else ""
        out.append(_wrapped(f"case: {_case(f.case)}{more}"))
        out.append(f"  docs: {_DOCS.format(f.rule)}")
        out.append("")
    quiet = [f for f in rep.findings if not f.active]
    if quiet:
        out.append(f"suppressed or in the baseline ({len(quiet)}):")
        out += [
            f"  {_rel(f.file)}:{f.line} [{f.rule}] in {f.kernel}: "
            + (f"ignored: {f.suppressed}" if f.suppressed is not None else "in the baseline")
            for f in quiet
        ]
        out.append("")
    fatal = [p for p in rep.problems if p.fatal]
    notes = [p for p in rep.problems if not p.fatal]
    if fatal:
        out.append(paint(f"could not check ({len(fatal)}):", "31"))
        out += [_wrapped(f"[{p.kind}] {p.where}: {p.message}") for p in fatal]
        out.append("")
    if notes:
        out.append(f"notes ({len(notes)}):")
        out += [_wrapped(f"[{p.kind}] {p.where}: {p.message}") for p in notes]
        out.append("")
    n = {s: sum(1 for f in rep.findings if f.severity == s and f.active) for s in ("error", "warning", "info")}
    counts = ", ".join(f"{v} {k}{'s' if v != 1 else ''}" for k, v in n.items())
    n_sup = sum(1 for f in rep.findings if f.suppressed is not None)
    n_base = sum(1 for f in rep.findings if f.baseline)
    extra = [x for x in (f"{n_sup} suppressed" if n_sup else "", f"{n_base} in the baseline" if n_base else "") if x]
    counts += f" ({', '.join(extra)})" if extra else ""
    st = rep.stats
    summary = (
        f"tritonkit check: {counts} in {len(rep.kernels)} kernels ({st.get('cases', 0)} cases, "
        f"{st.get('launches', 0)} launches, {st.get('compiles', 0)} compiles) for {st.get('arch')} "
        f"with Triton {st.get('triton')} in {st.get('seconds', 0):.1f} s"
    )
    if fatal:
        # the line a reader stops at must not read clean when part of the run went unchecked
        summary += f"; incomplete: {len(fatal)} could not be checked (listed above)"
    out.append(_wrapped(summary, lead=""))
    return "\n".join(out)


def to_json(rep: Report) -> str:
    return json.dumps(
        {
            "findings": [f.as_json() for f in rep.findings],
            "kernels": [{k: v for k, v in kd.items() if k != "line"} for kd in rep.kernels],
            "problems": [p.as_json() for p in rep.problems],
            "stats": rep.stats,
        },
        indent=2,
        default=str,
    )


def to_sarif(rep: Report) -> str:
    from .. import __version__

    rules = all_rules()
    ids = list(rules)
    level = {"error": "error", "warning": "warning", "info": "note"}
    root = Path.cwd().resolve().as_uri() + "/"

    def location(file: str, line: int, col: int = 0) -> dict:
        p = Path(file)
        try:
            art = {"uri": p.resolve().relative_to(Path.cwd().resolve()).as_posix(), "uriBaseId": "%SRCROOT%"}
        except (ValueError, OSError):
            art = {"uri": p.resolve().as_uri() if p.is_absolute() else p.as_posix()}
        region = {"startLine": max(int(line), 1)}
        if col > 0:
            region["startColumn"] = col + 1
        return {"physicalLocation": {"artifactLocation": art, "region": region}}

    target = rep.stats.get("arch")
    results = []
    for f in rep.findings:
        res = {
            "ruleId": f.rule,
            "ruleIndex": ids.index(f.rule) if f.rule in ids else -1,
            "level": level.get(f.severity, "note"),
            "message": {"text": f"{f.message}. Fix: {f.fix}" if f.fix else f.message},
            "locations": [location(f.file, f.line, f.col)],
            "properties": {"kernel": f.kernel, "case": f.case, "count": f.count},
        }
        if f.suppressed is not None:
            res["suppressions"] = [{"kind": "inSource", "justification": f.suppressed}]
        elif f.baseline:
            res["suppressions"] = [{"kind": "external", "justification": "listed in the tritonkit baseline"}]
        if rep.stats.get("baseline"):
            res["baselineState"] = "unchanged" if f.baseline else "new"
        results.append(res)
    notifications = [
        {
            "level": "error" if p.fatal else "note",
            "message": {"text": f"{p.where}: {p.message}"},
            "descriptor": {"id": p.kind},
        }
        for p in rep.problems
    ]
    doc = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "tritonkit",
                        "version": __version__,
                        "rules": [
                            {
                                "id": rid,
                                "name": "".join(w.capitalize() for w in rid.split("-")),
                                "shortDescription": {"text": m.RULE.title},
                                "fullDescription": {"text": m.RULE.why},
                                "help": {
                                    "text": f"Run `{_DOCS.format(rid)}` for the bug, a failing kernel and the fix.",
                                    "markdown": rule_page(rid),
                                },
                                "defaultConfiguration": {"level": level[m.RULE.severity]},
                            }
                            for rid, m in rules.items()
                        ],
                    },
                    # the findings are Triton's IR read by tritonkit: the Triton that compiled it, and for which GPU
                    "extensions": [
                        {"name": "triton", "version": str(rep.stats.get("triton")), "properties": {"target": target}}
                    ],
                },
                "originalUriBaseIds": {"%SRCROOT%": {"uri": root}},
                "invocations": [
                    {"executionSuccessful": rep.exit_code() != 2, "toolExecutionNotifications": notifications}
                ],
                "results": results,
                "properties": {"stats": rep.stats},
            }
        ],
    }
    return json.dumps(doc, indent=2, default=str)


def render(rep: Report, fmt: str) -> str:
    if fmt == "json":
        return to_json(rep)
    if fmt == "sarif":
        return to_sarif(rep)
    return to_text(rep, color=os.environ.get("NO_COLOR") is None and os.isatty(1))
