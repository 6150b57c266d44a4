"""Test helper: `tritonkit check --op OP` (or over case files) in a process of its own, with an op's switches set
in its environment (the switches are read at import), the interpreter off and an IR cache of the test's own."""

import json
import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).parents[2] / "src"


def check_op(op: str, switches: dict[str, str], cache_dir, timeout: int = 600) -> tuple[dict, str, int]:
    """(the JSON report, stderr, exit code) of `tritonkit check --op op` with ``switches`` in its environment."""
    return check(["--op", op], switches, cache_dir, timeout)


def check(args: list[str], switches: dict[str, str], cache_dir, timeout: int = 600) -> tuple[dict, str, int]:
    """(the JSON report, stderr, exit code) of `tritonkit check ARGS` with ``switches`` in its environment."""
    env = {**os.environ, **switches, "TRITON_INTERPRET": "0", "TRITONKIT_CACHE_DIR": str(cache_dir),
           "PYTHONPATH": str(SRC)}  # fmt: skip
    r = subprocess.run(
        [sys.executable, "-m", "tritonkit", "check", *args, "--format", "json"],
        capture_output=True, text=True, env=env, timeout=timeout,
    )  # fmt: skip
    assert r.stdout, r.stderr[-2000:]
    return json.loads(r.stdout), r.stderr, r.returncode
