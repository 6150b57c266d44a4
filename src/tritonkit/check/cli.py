"""``tritonkit check [PATH_OR_MODULE ...]``: find Triton bug classes statically, on a CPU."""

from __future__ import annotations

import argparse
import os
import sys

from .. import _vocab
from .capture.isolate import DEFAULT_CASE_TIMEOUT, parse_seconds
from .registry import rule_ids

DESCRIPTION = """\
Capture the Triton launches of every @tritonkit.case (and OpSpec) in the given files, directories or modules,
compile each distinct launch for the target GPU on this CPU and apply the rules. With no argument, check every
built-in op over its boundary, sweep and large shapes.

exit codes: 0 no error or warning; 1 at least one error or warning; 2 could not run (a usage error, or a file,
case or kernel that could not be checked: then the findings of everything else are still reported)."""


#: the rules, in report order, read from the rule modules' source (so --help needs no Triton import)
RULE_IDS = rule_ids()


def _positive(v: str) -> int:
    try:
        n = int(v)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number of processes, got {v!r}")
    return n


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tritonkit check", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "targets",
        nargs="*",
        metavar="PATH_OR_MODULE",
        help="python files, directories or dotted module names holding @tritonkit.case functions",
    )
    p.add_argument("--arch", default="sm_90", help="target GPU: sm_80, sm_90 (default) or sm_100")
    p.add_argument("--format", choices=("text", "json", "sarif"), default="text")
    p.add_argument(
        "--rule",
        action="append",
        dest="rules",
        metavar="ID",
        help="apply only this rule (repeatable): " + ", ".join(RULE_IDS),
    )
    p.add_argument(
        "--op",
        action="append",
        dest="ops",
        metavar="NAME",
        help="with no PATH: check only this built-in op (repeatable)",
    )
    p.add_argument(
        "--space",
        action="append",
        dest="spaces",
        choices=_vocab.SHAPE_SPACES,
        help="with no PATH: shape spaces of the built-in ops (default: all three)",
    )
    p.add_argument("--no-cache", action="store_true", help="compile everything again (ignore the on-disk IR cache)")
    p.add_argument(
        "-j",
        "--jobs",
        type=_positive,
        metavar="N",
        help="processes lowering kernels to TTIR (default: one per CPU, at most 8)",
    )
    p.add_argument(
        "--case-timeout",
        type=parse_seconds,
        default=DEFAULT_CASE_TIMEOUT,
        metavar="SECONDS",
        help=f"stop a case (or the import of a case file) that runs longer, as a problem naming it "
        f"(default {DEFAULT_CASE_TIMEOUT:g}; 0: no limit); one that cannot be stopped (a loop in C) ends the run "
        f"naming it, exit 2",
    )
    p.add_argument(
        "--explain", metavar="RULE", help="print the rule's page (the bug, a failing kernel, the fix) and exit"
    )
    p.add_argument(
        "--baseline",
        metavar="FILE",
        help="findings this file lists (by rule, kernel and the flagged line's code) do not fail the run",
    )
    p.add_argument(
        "--write-baseline",
        metavar="FILE",
        help="write every current finding (not suppressed in source) to FILE as the accepted baseline",
    )
    p.add_argument("-o", "--output", help="write the report to this file instead of stdout")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    # the checker compiles: with the interpreter on, Triton would import its jit library as Python functions
    prev = os.environ.get("TRITON_INTERPRET")
    if prev not in (None, "", "0"):
        print(
            "tritonkit check: ignoring TRITON_INTERPRET=1 (the checker compiles kernels, it does not run them)",
            file=sys.stderr,
        )
        os.environ["TRITON_INTERPRET"] = "0"
    try:
        return _main(args)
    finally:
        if prev is not None:
            os.environ["TRITON_INTERPRET"] = prev


def _explain(rule: str) -> int:
    from .rules import all_rules, rule_page

    rules = all_rules()
    if rule not in rules:
        print(f"tritonkit check: unknown rule {rule!r}; rules: {', '.join(rules)}", file=sys.stderr)
        return 2
    print(rule_page(rule).rstrip())
    return 0


def _main(args) -> int:
    # a case may call os.chdir: the files the run writes (and the baseline it reads) stay where they were named
    output, write_to = (os.path.abspath(p) if p else None for p in (args.output, args.write_baseline))
    if args.explain:
        return _explain(args.explain)
    beside = [f for f, v in (("--op", args.ops), ("--space", args.spaces)) if v]
    if args.targets and beside:
        print(
            f"tritonkit check: {' and '.join(beside)} select built-in ops, and apply only with no PATH; a PATH "
            f"checks every case and OpSpec in it",
            file=sys.stderr,
        )
        return 2
    try:
        from .adopt import write_baseline
        from .._fileio import write_atomic
        from .report import render
        from .runner import Options, run_check
        from .capture.target import CheckError
    except Exception as e:  # noqa: BLE001 - a broken Triton/torch install is "could not run"
        print(f"tritonkit check: could not start: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    opts = Options(
        arch=args.arch,
        rules=tuple(args.rules) if args.rules else None,
        spaces=tuple(args.spaces) if args.spaces else Options.spaces,
        ops=tuple(args.ops) if args.ops else None,
        disk_cache=not args.no_cache,
        baseline=os.path.abspath(args.baseline) if args.baseline else None,
        jobs=args.jobs,
        case_timeout=args.case_timeout or None,
        progress=sys.stderr.isatty(),
    )
    for path, what in ((args.output, "the report"), (args.write_baseline, "the baseline")):
        if path and (why := _unwritable(path)):
            print(f"tritonkit check: cannot write {what} to {path}: {why}", file=sys.stderr)
            return 2
    try:
        rep = run_check(args.targets, opts)
        if write_to:
            n = write_baseline(write_to, rep.findings)
            for f in rep.findings:
                f.baseline = f.suppressed is None
            print(f"tritonkit check: wrote {n} findings to the baseline {args.write_baseline}", file=sys.stderr)
    except CheckError as e:
        print(f"tritonkit check: {e}", file=sys.stderr)
        return 2
    text = render(rep, args.format)
    if output:
        try:
            write_atomic(output, text + "\n")
        except OSError as e:
            print(f"tritonkit check: cannot write the report to {args.output}: {e.strerror or e}", file=sys.stderr)
            return 2
    else:
        print(text)
    return rep.exit_code()


def _unwritable(path: str) -> str | None:
    """Why ``path`` cannot take the report (checked before a run that may take minutes), or None."""
    from .._fileio import refusal

    d = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        return "it is a directory"
    if why := refusal(path):
        return why
    if not os.path.isdir(d):
        return f"no such directory {d}"
    if not os.access(path if os.path.exists(path) else d, os.W_OK):
        return "permission denied"
    return None


if __name__ == "__main__":
    sys.exit(main())
