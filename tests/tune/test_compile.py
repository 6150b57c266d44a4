"""The compile workers: their small launches compile what the timing loop launches, and a failing config is dropped
with its error instead of stopping the run."""

import pytest
import torch

import tritonkit.ops.fused_moe.api as api
import tritonkit.ops.fused_moe.kernel as KERNELS
import tritonkit.ops.moe_align_block_size.api as align
from tritonkit.models import MODELS
from tritonkit.ops.fused_moe.config import FusedMoeConfig, GemmConfig
from tritonkit.ops.fused_moe.spec import make_inputs, sweep_shape
from tritonkit.testing import Fill
from tritonkit.tune import fused_moe as fm
from tritonkit.tune.space import GEMM1, GEMM2

GEMMS = ("_fused_moe_gemm1_kernel", "_fused_moe_gemm2_kernel")
MOE = [m for m in MODELS.values() if m.is_moe]


class _Recorder:
    def __init__(self):
        self.launches = []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launches.append((args, kwargs))


def _keys(kernel, launches) -> set:
    """The specializations Triton compiles these launches under on sm_90 (its JIT cache key, less the source)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import JITFunction, create_function_from_signature

    if not isinstance(kernel, JITFunction):  # the interpreter's wrapper keeps the decorator's arguments
        kernel = JITFunction(kernel.fn, do_not_specialize=kernel.kwargs.get("do_not_specialize"))
    binder = create_function_from_signature(kernel.signature, kernel.params, make_backend(GPUTarget("cuda", 90, 32)))
    return {repr(binder(*a, **kw)[1:]) for a, kw in launches}


def _record(monkeypatch, inputs, cfgs):
    for n in (
        "_moe_align_small_kernel",
        "_moe_align_count_kernel",
        "_moe_align_scan_kernel",
        "_moe_align_place_kernel",
    ):
        monkeypatch.setattr(align, n, _Recorder())
    recs = {n: _Recorder() for n in (*GEMMS, "_fused_moe_quant_kernel", "_fused_moe_sum_kernel")}
    for n in recs:
        monkeypatch.setattr(api, n, recs[n])
    for cfg in cfgs:
        fm._call(inputs, cfg)
    return recs


def _cfgs(layer, M):
    d = layer.default(M)
    wide = FusedMoeConfig(GemmConfig(64, 128, 128, 8, 4, 3), GemmConfig(64, 256, 128, 16, 8, 2))
    return [d, wide]


@pytest.mark.parametrize("model", MOE, ids=lambda m: m.name)
def test_worker_launches_compile_the_timed_specializations(monkeypatch, model):
    layer = fm.Layer.of(model)
    meta = Fill("randn", "meta", 0)
    for M in (1, 4096):
        cfgs = _cfgs(layer, M)
        real = make_inputs(sweep_shape(model, M), torch.bfloat16, meta)
        small = fm.compile_inputs(layer, torch.bfloat16, torch.device("meta"))
        assert small["w1"].shape[0] == fm.compile_experts(layer.E) <= layer.E
        timed, compiled = _record(monkeypatch, real, cfgs), _record(monkeypatch, small, cfgs)
        for n in GEMMS:
            kernel = getattr(KERNELS, n)
            assert len(timed[n].launches) == len(cfgs)
            assert _keys(kernel, compiled[n].launches) == _keys(kernel, timed[n].launches), (model.name, M, n)


def test_the_specialization_check_sees_the_expert_count(monkeypatch):
    # 17 experts (not a multiple of 16) specialize differently from 16: the comparison above can fail
    model = MODELS["qwen3-30b-a3b"]
    layer = fm.Layer.of(model)
    meta = Fill("randn", "meta", 0)
    cfgs = _cfgs(layer, 1)
    shape = sweep_shape(model, 1)
    a = _record(monkeypatch, make_inputs(shape.replace(experts=16), torch.bfloat16, meta), cfgs)
    b = _record(monkeypatch, make_inputs(shape.replace(experts=17), torch.bfloat16, meta), cfgs)
    kernel = KERNELS._fused_moe_gemm1_kernel
    assert _keys(kernel, a["_fused_moe_gemm1_kernel"].launches) != _keys(kernel, b["_fused_moe_gemm1_kernel"].launches)


@pytest.mark.parametrize("E,want", [(256, 16), (128, 16), (16, 16), (8, 8), (17, 17), (1, 1)])
def test_compile_experts(E, want):
    assert fm.compile_experts(E) == want


def test_workers_drop_a_failing_config_and_keep_the_rest():
    # two spawned workers under the interpreter (on a GPU they compile for it); block_k 8 is refused by validate
    layer = fm.Layer(E=4, N=32, K=64, topk=2, quant="none")
    d = layer.default(1)
    bad = GemmConfig(16, 32, 8, 1, 4, 2)
    units = {
        (GEMM1, d.gemm1): d,
        (GEMM2, GemmConfig(16, 64, 64, 1, 4, 2)): FusedMoeConfig(d.gemm1, GemmConfig(16, 64, 64, 1, 4, 2)),
        (GEMM1, bad): FusedMoeConfig(bad, d.gemm2),
    }
    lines = []
    device = "cuda" if torch.cuda.is_available() else "cpu"
    failed = fm.precompile(units, layer, torch.bfloat16, torch.device(device), 2, log=lines.append)
    assert list(failed) == [(GEMM1, bad)] and "block_k" in failed[(GEMM1, bad)]
    assert len(lines) == 1 and "compiled 3 GEMM tiles" in lines[0] and "1 dropped" in lines[0]
