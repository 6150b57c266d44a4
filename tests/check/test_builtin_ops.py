"""Self-application: `tritonkit check` over every built-in op reports no error or warning.

Runs the CLI in a subprocess with TRITON_INTERPRET=1 (as the rest of this suite sets it), as a user would run it.
About 35 s cold on the 2-core CI machine (benchmarks/check_speed.py), a few seconds with the IR cache warm.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tritonkit.ops import OP_NAMES

SRC = Path(__file__).parents[2] / "src"


def _check(*args):
    path = str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", "")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": path}
    r = subprocess.run(
        [sys.executable, "-m", "tritonkit", "check", "--format", "json", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert r.stdout, r.stderr
    return r.returncode, json.loads(r.stdout)


@pytest.mark.slow
def test_builtin_ops_have_no_error_or_warning():
    rc, d = _check()
    bad = [f for f in d["findings"] if f["severity"] in ("error", "warning") and not f["suppressed"]]
    assert not bad, json.dumps(bad, indent=1)
    # the one accepted split: fused_moe's GEMM tiles follow the M bucket by design, one compile per tile config
    # (tests/ops/test_compile_once.py holds the count to the configs')
    quiet = {(f["rule"], f["kernel"]) for f in d["findings"] if f["suppressed"]}
    assert quiet == {("recompile", "_fused_moe_gemm1_kernel"), ("recompile", "_fused_moe_gemm2_kernel")}, quiet
    assert not [p for p in d["problems"] if p["fatal"]], d["problems"]
    assert rc == 0
    files = {Path(k["file"]).parent.name for k in d["kernels"]}
    assert files == set(OP_NAMES)
    assert d["stats"]["launches"] > 1000 and all(k["launches"] > 0 for k in d["kernels"])


@pytest.mark.parametrize("arch,pdl", [("sm_90", True), ("sm_80", False)])
def test_paged_attention_merge_launch_follows_the_check_target(arch, pdl):
    # the merge kernel is a programmatic dependent launch on sm_90+ only: under the checker, meta tensors take the
    # target's capability (Triton's active driver, which the checker stubs for its --arch, on a GPU machine too), so
    # an sm_90 check compiles that variant and an sm_80 check the plain one
    import torch
    from tritonkit.check.capture import Capture
    from tritonkit.check.target import Compiler, parse_arch
    import tritonkit.ops.paged_attention.config as cfg

    outside = cfg.merge_pdl(torch.device("meta"))
    assert outside is (torch.cuda.is_available() and torch.cuda.get_device_capability() >= (9, 0))
    with Capture(Compiler(parse_arch(arch), disk_cache=False)):
        assert cfg.merge_pdl(torch.device("meta")) is pdl
    assert cfg.merge_pdl(torch.device("meta")) is outside
