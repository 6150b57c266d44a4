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
        help="write every current finding (not suppressed in source) to FILE as the accepted baseline, after a run "
        "that checked everything (exit 0 or 1; a FILE that exists: with --force)",
    )
    p.add_argument(
        "-o", "--output", help="write the report to this file instead of stdout (one that exists: with --force)"
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="replace an existing -o or --write-baseline file (never a file the run reads: a checked source, the "
        "--baseline)",
    )
    return p


#: how the options whose name is not their destination are spelt on the command line
_FLAGS = {"targets": "PATH_OR_MODULE", "rules": "--rule", "ops": "--op", "spaces": "--space", "output": "-o"}


def _given(args) -> list[str]:
    """The options (and PATHs) given with other values than their defaults, as spelt on the command line."""
    defaults = vars(parser().parse_args([]))
    return [_FLAGS.get(k, "--" + k.replace("_", "-")) for k, v in vars(args).items() if v != defaults.get(k)]


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
    if args.explain:
        others = [o for o in _given(args) if o != "--explain"]
        if others:
            print(
                f"tritonkit check: --explain prints a rule's page and checks nothing: {', '.join(others)} "
                f"{'does' if len(others) == 1 else 'do'} not apply beside it",
                file=sys.stderr,
            )
            return 2
        return _explain(args.explain)
    beside = [f for f, v in (("--op", args.ops), ("--space", args.spaces)) if v]
    if args.targets and beside:
        print(
            f"tritonkit check: {' and '.join(beside)} select built-in ops, and apply only with no PATH; a PATH "
            f"checks every case and OpSpec in it",
            file=sys.stderr,
        )
        return 2
    # a case may call os.chdir: the files the run writes (and the baseline it reads) stay where they were named
    outputs = [
        (os.path.abspath(path), flag, what, path)
        for path, flag, what in (
            (args.write_baseline, "--write-baseline", "the baseline"),
            (args.output, "-o", "the report"),
        )
        if path
    ]
    if why := _conflict(args):
        print(f"tritonkit check: {why}", file=sys.stderr)
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
    inputs = _inputs(args)
    # checked before a run that may take minutes, and again just before writing: a file may appear meanwhile
    for path, flag, what, given in outputs:
        if why := _unwritable(path, args.force, inputs):
            print(f"tritonkit check: {flag} {given}: cannot write {what} there: {why}", file=sys.stderr)
            return 2
    try:
        rep = run_check(args.targets, opts)
    except CheckError as e:
        print(f"tritonkit check: {e}", file=sys.stderr)
        return 2
    # the kernels' own files are inputs too, known once their launches were captured
    inputs += [(k["file"], f"the source of the checked kernel {k['kernel']}") for k in rep.kernels if k.get("file")]
    code = rep.exit_code()
    for path, flag, what, given in outputs:
        if flag == "--write-baseline" and code == 2:
            print(
                f"tritonkit check: the baseline {given} was not written (left as it was): {_incomplete(rep)}; a "
                "baseline must come from a run that checked everything",
                file=sys.stderr,
            )
            continue
        if why := _unwritable(path, args.force, inputs):
            print(f"tritonkit check: {flag} {given}: cannot write {what} there: {why}", file=sys.stderr)
            return 2
        if flag == "--write-baseline":
            try:
                n = write_baseline(path, rep.findings, replace=args.force)
            except CheckError as e:
                print(f"tritonkit check: {e}", file=sys.stderr)
                return 2
            for f in rep.findings:
                f.baseline = f.suppressed is None
            print(f"tritonkit check: wrote {n} findings to the baseline {given}", file=sys.stderr)
            continue
        try:
            write_atomic(path, render(rep, args.format) + "\n", replace=args.force)
        except OSError as e:
            print(f"tritonkit check: cannot write the report to {given}: {e.strerror or e}", file=sys.stderr)
            return 2
    if not args.output:
        print(render(rep, args.format))
    return rep.exit_code()


def _conflict(args) -> str | None:
    """Why two of the files named are one (the report written over the baseline read or written), or None. Two
    outputs into one stream (``/dev/stdout``, a FIFO) are written one after the other."""
    from .._fileio import is_stream, same_file

    named = [
        (flag, path)
        for flag, path in (
            ("--baseline", args.baseline),
            ("--write-baseline", args.write_baseline),
            ("-o", args.output),
        )
        if path
    ]
    for i, (flag, path) in enumerate(named):
        for other_flag, other in named[i + 1 :]:
            if not same_file(path, other):
                continue
            if flag == "--baseline":
                refresh = "--write-baseline FILE --force, without --baseline, rewrites it"
                hint = f"; {refresh}" if other_flag == "--write-baseline" else ""
                return f"{other_flag} {other} is the --baseline file this run reads: it is not written over{hint}"
            if not is_stream(path):
                return f"{flag} {path} and {other_flag} {other} name one file: each output needs its own"
    return None


def _inputs(args) -> list[tuple[str, str]]:
    """The files the run reads, as (path, what it is): the checked files (those under a directory; a module's
    file), the built-in ops' files with no PATH, and the baseline."""
    from .runner import expand_paths, source_file

    if args.targets:
        found = [(source_file(t), f"the checked source {t}") for t in expand_paths(list(args.targets))]
    else:
        ops = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ops")
        found = [(f, "a source of the built-in ops") for f in expand_paths([ops])]
    if args.baseline:
        found.append((os.path.abspath(args.baseline), "the --baseline file"))
    return [(f, what) for f, what in found if f]


def _incomplete(rep) -> str:
    """Why a report's exit code is 2, in a clause."""
    fatal = [p for p in rep.problems if p.fatal]
    if not fatal:
        return "nothing was checked"
    first = f"{fatal[0].where}: {fatal[0].message}"
    first = first if len(first) <= 160 else first[:157] + "..."
    more = f" and {len(fatal) - 1} more" if len(fatal) > 1 else ""
    return f"part of the code could not be checked ({first}{more})"


def _unwritable(path: str, force: bool = False, inputs=()) -> str | None:
    """Why ``path`` cannot take the report or the baseline, or None: a directory, a device, a missing folder, no
    permission; a file there already (without ``force``), one the run reads, a link to a file elsewhere."""
    from .._fileio import refusal, replace_refusal

    d = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path) and not os.path.islink(path):
        return "it is a directory"
    if why := refusal(path) or replace_refusal(path, force, inputs):
        return why
    if not os.path.isdir(d):
        return f"no such directory {d}"
    if not os.access(path if os.path.exists(path) else d, os.W_OK):
        return "permission denied"
    return None


if __name__ == "__main__":
    sys.exit(main())
