"""fused_moe's Gluon GEMMs for block-wise fp8 on sm_90 (ops/fused_moe/kernel_hopper.py): which calls take them, that
the op's launches of them compile for sm_90 on this CPU within the SM's shared memory with no spill and asynchronous
wgmmas (on each supported Triton through .ci/triton-matrix), that the checker reads them clean, and, on a Hopper GPU,
that the layer's output is kernel.py's GEMMs' bit for bit."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tritonkit.ops.fused_moe.api as api
import tritonkit.ops.fused_moe.hopper as hopper
import tritonkit.ops.fused_moe.config as config
from tritonkit.ops import overrides
from op_check import check_op

SRC = Path(__file__).parents[2] / "src"
HOPPER = "_fused_moe_gemm2_fp8_hopper_kernel"
HOPPER1 = "_fused_moe_gemm1_fp8_hopper_kernel"


def test_the_gluon_gemms_are_off_unless_turned_on():
    for flag, var in (
        (config.GEMM1_HOPPER, "TRITONKIT_MOE_GEMM1_HOPPER"),
        (config.GEMM2_HOPPER, "TRITONKIT_MOE_GEMM2_HOPPER"),
    ):
        assert flag is (os.environ.get(var, "0").strip() not in ("", "0"))


@pytest.mark.parametrize(
    "block_m, N, capability, rows_ok, takes",
    [
        (64, 2048, (9, 0), True, True),
        (16, 2048, (9, 0), True, False),  # decode tiles: kernel.py's swapped 16-row tiles
        (128, 2048, (9, 0), True, False),  # the kernel's blocks are the 64-row alignment
        (64, 2000, (9, 0), True, False),  # K blocks of 128 whole
        (64, 2048, (10, 0), True, False),  # Blackwell: tcgen05, not wgmma
        (64, 2048, (8, 0), True, False),
        (64, 2048, None, True, False),  # the interpreter
        (64, 2048, (9, 0), False, False),  # more weight rows than int32 TMA coordinates reach
    ],
)
def test_which_calls_take_the_gluon_gemm2(monkeypatch, block_m, N, capability, rows_ok, takes):
    from tritonkit.ops import _device

    monkeypatch.setattr(_device, "capability", lambda device: capability)
    g2 = config.GemmConfig(block_m, 128, 128, 16, 4, 4)
    E, K = (256, 7168) if rows_ok else (2**16, 2**15)
    h = torch.empty(64 * 40, N, dtype=torch.float8_e4m3fn, device="meta")
    w2 = torch.empty(E, K, N, dtype=torch.float8_e4m3fn, device="meta")
    with overrides(config, GEMM2_HOPPER=True):
        assert hopper.gemm2_ok(g2, N, h, w2) is takes
        # a table's 64-wide K steps: kernel.py scales each one's dot, which rounds differently
        assert not hopper.gemm2_ok(config.GemmConfig(block_m, 128, 64, 16, 4, 4), N, h, w2)
    with overrides(config, GEMM2_HOPPER=False):
        assert not hopper.gemm2_ok(g2, N, h, w2)


@pytest.mark.parametrize(
    "block_m, N, K, capability, takes",
    [
        (64, 2048, 7168, (9, 0), True),
        (16, 2048, 7168, (9, 0), False),  # decode tiles
        (64, 2000, 7168, (9, 0), False),  # whole 128-column groups of h
        (64, 2048, 7000, (9, 0), False),  # whole 128-wide K blocks
        (64, 2048, 7168, (10, 0), False),
        (64, 2048, 7168, None, False),
    ],
)
def test_which_calls_take_the_gluon_gemm1(monkeypatch, block_m, N, K, capability, takes):
    from tritonkit.ops import _device

    monkeypatch.setattr(_device, "capability", lambda device: capability)
    g1 = config.GemmConfig(block_m, 64, 128, 16, 4, 4)
    act = torch.empty(300, K, dtype=torch.float8_e4m3fn, device="meta")
    w1 = torch.empty(256, 2 * N, K, dtype=torch.float8_e4m3fn, device="meta")
    with overrides(config, GEMM1_HOPPER=True):
        assert hopper.gemm1_ok(g1, N, K, act, w1) is takes
        assert not hopper.gemm1_ok(config.GemmConfig(block_m, 64, 64, 16, 4, 4), N, K, act, w1)
        # activation rows cp.async cannot copy 16 bytes at a time
        assert not hopper.gemm1_ok(g1, N, K, act[:, 8:], w1)
    with overrides(config, GEMM1_HOPPER=False):
        assert not hopper.gemm1_ok(g1, N, K, act, w1)


_COMPILE = r"""
import json, sys, torch
from tritonkit.ops import overrides
from tritonkit.ops.fused_moe import api, config
from tritonkit.check.resources import record_launches, compile_for, resources_of, sass_counts

FP8 = torch.float8_e4m3fn
out = []
for case in json.loads(sys.argv[1]):
    M, E, N, K, topk = case["M"], case["E"], case["N"], case["K"], case["topk"]
    meta = lambda *s, dtype=torch.bfloat16: torch.empty(*s, dtype=dtype, device="meta")
    x, w1, w2 = meta(M, K), meta(E, 2 * N, K, dtype=FP8), meta(E, K, N, dtype=FP8)
    w1_s, w2_s = meta(E, 2 * N // 128, K // 128, dtype=torch.float32), meta(E, K // 128, N // 128, dtype=torch.float32)
    tw, ids = meta(M, topk, dtype=torch.float32), meta(M, topk, dtype=torch.int32)
    with overrides(config, GEMM1_HOPPER=case["on"], GEMM2_HOPPER=case["on"]):
        launches = record_launches(lambda: api.fused_moe(x, w1, w2, tw, ids, w1_scale=w1_s, w2_scale=w2_s,
                                                         block_shape=[128, 128], activation=case.get("act", "silu")))
    names = [ln.kernel.fn.__name__ for ln in launches]
    row = {"names": names}
    for ln in launches:
        name = ln.kernel.fn.__name__
        if name.endswith("_hopper_kernel"):
            ck = compile_for(ln.kernel, *ln.args, **ln.kwargs)
            r = resources_of(ck)
            counts, _ = sass_counts(ck.asm["cubin"])
            row[name] = dict(shared=r.shared_bytes, max_shared=r.max_shared_bytes, stack=r.stack_bytes,
                             local=r.local_bytes, warps=r.num_warps, wgmma=r.wgmma, gmma=counts["GMMA"],
                             wait_all=counts["wait_all"], loop_spills=counts["loop_STL"] + counts["loop_LDL"])
    out.append(row)
print(json.dumps(out))
"""


def _compile(cases: list[dict]) -> list[dict]:
    # a process of its own with the interpreter off before Triton loads: Gluon does not import under it
    env = {**os.environ, "TRITON_INTERPRET": "0", "PYTHONPATH": str(SRC)}
    proc = subprocess.run(
        [sys.executable, "-c", _COMPILE, json.dumps(cases)], capture_output=True, text=True, env=env, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_ops_gluon_gemm_launches_compile_for_sm_90():
    deepseek = dict(M=4096, E=256, N=2048, K=7168, topk=8)
    # odd K-block counts (3), output columns that end half way through a 256-column GEMM2 program, GELU
    odd = dict(M=512, E=8, N=384, K=384, topk=2, act="gelu")
    on, off, odd_on = _compile([{**deepseek, "on": True}, {**deepseek, "on": False}, {**odd, "on": True}])
    for row in (on, odd_on):
        assert HOPPER in row["names"] and HOPPER1 in row["names"], row["names"]
        assert "_fused_moe_gemm1_kernel" not in row["names"] and "_fused_moe_gemm2_kernel" not in row["names"]
    assert HOPPER not in off["names"] and HOPPER1 not in off["names"], off["names"]
    for row in (on, odd_on):
        for name in (HOPPER1, HOPPER):
            r = row[name]
            assert r["shared"] <= r["max_shared"] and r["wgmma"], (name, r)
            assert r["warps"] == 12, (name, r)  # two consumer warpgroups + the loader's warpgroup
            assert r["stack"] == 0 and r["local"] == 0 and r["loop_spills"] == 0, (name, r)
            # a K block's four wgmmas go out together, then one wait: not a wait after each (serialized)
            assert 0 < r["wait_all"] * 4 <= r["gmma"], (name, r)


def test_the_checker_reads_the_gluon_gemms(tmp_path):
    d, err, rc = check_op(
        "fused_moe", {"TRITONKIT_MOE_GEMM1_HOPPER": "1", "TRITONKIT_MOE_GEMM2_HOPPER": "1"}, tmp_path, timeout=900
    )
    assert {HOPPER, HOPPER1} <= {k["kernel"] for k in d["kernels"]}, err[-2000:]
    assert [f for f in d["findings"] if f["kernel"] in (HOPPER, HOPPER1)] == [] and d["problems"] == [], d["findings"]
    assert rc == 0, err[-2000:]


# -- on a Hopper GPU -------------------------------------------------------------------------------------------------
_GPU_CASES = [
    dict(id="deepseek-like", M=1024, E=16, N=512, K=1024, topk=4),
    dict(id="odd-k-blocks", M=700, E=8, N=384, K=384, topk=2),
    dict(id="routed-on-input", M=512, E=8, N=256, K=512, topk=2, routed=True),
    dict(id="gelu", M=512, E=8, N=256, K=512, topk=2, gelu=True),
    dict(id="expert-map", M=600, E=8, N=256, K=512, topk=2, mapped=True),
]


@pytest.mark.gpu
@pytest.mark.parametrize("gemms", [(1,), (2,), (1, 2)], ids=["gemm1", "gemm2", "both"])
@pytest.mark.parametrize("case", _GPU_CASES, ids=[c["id"] for c in _GPU_CASES])
def test_the_gluon_gemms_match_the_plain_ones(case, gemms):
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("needs a Hopper GPU")
    from tritonkit.check.resources import record_launches

    gen = torch.Generator(device="cuda").manual_seed(0)
    M, E, N, K, topk = case["M"], case["E"], case["N"], case["K"], case["topk"]
    fp8 = torch.float8_e4m3fn

    def randn(*s):
        return torch.randn(*s, generator=gen, device="cuda")

    x = randn(M, K).to(torch.bfloat16)
    w1, w2 = (randn(E, 2 * N, K) * 0.5).to(fp8), (randn(E, K, N) * 0.5).to(fp8)
    w1_s = randn(E, 2 * N // 128, K // 128).abs() * 0.01 + 0.01
    w2_s = randn(E, K // 128, N // 128).abs() * 0.01 + 0.01
    tw = torch.rand(M, topk, generator=gen, device="cuda")
    ids = torch.stack([torch.randperm(E, generator=gen, device="cuda")[:topk] for _ in range(M)]).to(torch.int32)
    kw = dict(w1_scale=w1_s, w2_scale=w2_s, block_shape=[128, 128], apply_router_weight_on_input=False)
    if case.get("routed"):
        tw = tw[:, :1].contiguous()
        ids = ids[:, :1].contiguous()
        kw["apply_router_weight_on_input"] = True
    if case.get("gelu"):
        kw["activation"] = "gelu"
    if case.get("mapped"):
        # this rank holds experts 0, 2, 4, 6 of 8: the others' blocks have no work in either GEMM2
        emap = torch.full((E,), -1, dtype=torch.int32, device="cuda")
        emap[0::2] = torch.arange(E // 2, dtype=torch.int32, device="cuda")
        kw["expert_map"] = emap
        w1, w2, w1_s, w2_s = w1[: E // 2], w2[: E // 2], w1_s[: E // 2], w2_s[: E // 2]
        kw.update(w1_scale=w1_s, w2_scale=w2_s)
    args = (x, w1, w2, tw, ids)
    with overrides(config, GEMM1_HOPPER=1 in gemms, GEMM2_HOPPER=2 in gemms):
        out = api.fused_moe(*args, **kw)
        meta = [t.to("meta") for t in args]
        names = [ln.kernel.fn.__name__ for ln in record_launches(lambda: api.fused_moe(
            *meta, **{k: (v.to("meta") if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}))]  # fmt: skip
    assert (HOPPER1 in names) == (1 in gemms) and (HOPPER in names) == (2 in gemms), names
    with overrides(config, GEMM1_HOPPER=False, GEMM2_HOPPER=False):
        base = api.fused_moe(*args, **kw)
    assert torch.isfinite(out).all()
    # per element the same float operations in the same K order as kernel.py's GEMMs
    assert torch.equal(out, base), (out.float() - base.float()).abs().max().item()
