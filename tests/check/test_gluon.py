"""`tritonkit check` on a user's `gluon.jit` kernels: captured and lowered like `triton.jit` ones (Gluon's frontend IR;
it has no TTIR stage), and the rules apply: an int32 `program_id * stride` is found, its int64 twin is clean."""

import json
import os
import subprocess
import sys
from pathlib import Path

CASE = Path(__file__).parent / "gluon_cases" / "gluon_copy.py"


def test_a_gluon_kernels_int32_offset_is_found(tmp_path):
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITONKIT_CACHE_DIR": str(tmp_path)}
    r = subprocess.run(
        [sys.executable, "-m", "tritonkit", "check", str(CASE), "--format", "json"],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    d = json.loads(r.stdout)
    assert {k["kernel"] for k in d["kernels"]} == {"_gluon_copy_kernel", "_gluon_copy64_kernel"}, r.stderr[-2000:]
    assert d["problems"] == [], d["problems"]
    (f,) = d["findings"]
    assert (f["rule"], f["kernel"], f["severity"]) == ("int32-offset", "_gluon_copy_kernel", "error"), f
    assert "program_id(0) * stride" in f["message"] or "* stride" in f["message"], f["message"]
    assert r.returncode == 1
