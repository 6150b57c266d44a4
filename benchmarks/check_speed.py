"""How long `tritonkit check` takes over every built-in op (boundary, sweep and large shapes), on this machine.

The budget is 60 s on the 2-core CI machine. Cold: an empty on-disk IR cache (every specialization compiled to TTIR
here); warm: the cache the cold run left. Per op, the time splits into building meta inputs and capturing launches
(the op's own Python), compiling, and the rules.

    python benchmarks/check_speed.py [--op NAME ...] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time


def _run(ops, cache_dir):
    os.environ["TRITONKIT_CACHE_DIR"] = cache_dir
    from tritonkit.check.runner import Options, run_check

    t = time.perf_counter()
    rep = run_check([], Options(ops=tuple(ops) if ops else None))
    wall = time.perf_counter() - t
    sev = {s: sum(1 for f in rep.findings if f.severity == s) for s in ("error", "warning", "info")}
    return {
        "seconds": round(wall, 2),
        "compile_seconds": rep.stats["compile_seconds"],
        "capture_seconds": rep.stats["capture_seconds"],
        "cases": rep.stats["cases"],
        "launches": rep.stats["launches"],
        "compiles": rep.stats["compiles"],
        "compiled_now": rep.stats["compiled_now"],
        "findings": sev,
        "fatal_problems": sum(1 for p in rep.problems if p.fatal),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--op", action="append", dest="ops")
    ap.add_argument("--per-op", action="store_true", help="also time each op alone (cold)")
    ap.add_argument("--json", help="write the numbers here too")
    args = ap.parse_args(argv)
    os.environ.pop("TRITON_INTERPRET", None)
    import torch
    import triton

    out = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "triton": triton.__version__,
        }
    }
    with tempfile.TemporaryDirectory() as d:
        out["cold"] = _run(args.ops, d)
        out["warm"] = _run(args.ops, d)
    if args.per_op:
        from tritonkit.ops import OP_NAMES

        out["per_op_cold"] = {}
        for name in args.ops or OP_NAMES:
            with tempfile.TemporaryDirectory() as d:
                out["per_op_cold"][name] = _run([name], d)
    text = json.dumps(out, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as fh:
            fh.write(text + "\n")
    return 0 if out["cold"]["seconds"] <= 60 else 1


if __name__ == "__main__":
    sys.exit(main())
