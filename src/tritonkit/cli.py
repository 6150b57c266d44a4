"""``tritonkit check | validate | bench | inductor | tune``: each verb lives with its tool; this only routes."""

from __future__ import annotations

import importlib
import os
import sys

VERBS = {
    "check": ("tritonkit.check.cli", "find Triton bug classes statically, on a CPU"),
    "validate": ("tritonkit.testing.cli", "compare ops with float64 references at boundary shapes and hard inputs"),
    "bench": ("tritonkit.bench.cli", "num_tokens sweeps against the card's measured speed-of-light"),
    "inductor": ("tritonkit.bench.inductor_cli", "write the Triton code Inductor generates for an op's reference"),
    "tune": ("tritonkit.tune.cli", "time an op's tile configs on this GPU and write the table its lookup reads"),
}

USAGE = (
    "usage: tritonkit {"
    + ",".join(VERBS)
    + "} [options]\n       tritonkit --version\n\n"
    + "\n".join(f"  {v:<9} {doc}" for v, (_, doc) in VERBS.items())
)


class _UntilTheReaderLeaves:
    """``sys.stdout`` while a verb runs: once the reader has gone (``| head``, ``| true``), what is left to print
    is dropped and the run goes on to its own exit code (findings are still exit 1) instead of a BrokenPipeError
    ending it as if it had passed."""

    def __init__(self, stream):
        self._stream = stream
        self.gone = False

    def write(self, text):
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._leave()
            return len(text)

    def flush(self):
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._leave()

    def _leave(self):
        self.gone = True
        # later writes, and the flush at exit, go nowhere instead of raising again
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, self._stream.fileno())
        os.close(null)

    def __getattr__(self, name):
        return getattr(self._stream, name)


#: verbs that run user code case by case under --case-timeout: as a program, they run watched (check/capture/watch.py)
WATCHED = ("check", "validate")


def main(argv: list[str] | None = None) -> int:
    stdout = sys.stdout
    guarded = _UntilTheReaderLeaves(stdout) if stdout is not None and _has_fd(stdout) else None
    if guarded is not None:
        sys.stdout = guarded
    try:
        return _main(argv)
    finally:
        if guarded is not None:
            guarded.flush()
            if sys.stdout is guarded:
                sys.stdout = stdout


def _has_fd(stream) -> bool:
    try:
        stream.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    return True


def _main(argv: list[str] | None) -> int:
    program = argv is None  # run as `tritonkit ...`, not called from Python
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    if argv[0] == "--version":
        from . import __version__

        print(f"tritonkit {__version__}")
        return 0
    verb, rest = argv[0], argv[1:]
    if verb not in VERBS:
        print(f"tritonkit: unknown command {verb!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    if program and verb in WATCHED:
        from .check.capture.isolate import watch_interrupts
        from .check.capture.watch import watched

        # a case past --case-timeout that nothing inside the process can stop (a loop in C) still ends the run
        return watched(lambda: _run(verb, rest), verb, watch_interrupts)
    return _run(verb, rest)


def _run(verb: str, rest: list[str]) -> int:
    module_name = VERBS[verb][0]
    try:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name != module_name:
                raise
            print(f"tritonkit {verb}: not implemented yet", file=sys.stderr)
            return 2
        return int(module.main(rest) or 0)
    except KeyboardInterrupt:
        # Ctrl-C: one line, not the traceback of wherever the run happened to be
        print(f"\ntritonkit {verb}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # written past sys.stdout (its .buffer) after the reader went away: no traceback, and since the run was cut
        # short, no pass either
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.__stdout__.fileno())
        print(f"tritonkit {verb}: stdout was closed before the run finished", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
