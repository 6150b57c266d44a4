"""``tritonkit check | validate | bench | inductor | tune``: each verb lives with its tool; this only routes."""

from __future__ import annotations

import importlib
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


def main(argv: list[str] | None = None) -> int:
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
        # the reader went away (`tritonkit check --explain RULE | head`): not an error of ours, and no traceback
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
