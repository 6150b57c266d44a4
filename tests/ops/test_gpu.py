"""GPU-only properties every op must have: CUDA-graph capture, torch.compile with Inductor, and one compile per
(dtype, model config) across the whole num_tokens sweep. Run on the H200 through the device tool."""

import inspect

import pytest
import torch

from tritonkit import ops
from tritonkit.models import MODELS, NUM_TOKENS_SWEEP
from tritonkit.testing import Fill

pytestmark = pytest.mark.gpu
OPS = list(ops.OP_NAMES)


def _kernels(name):
    mod = getattr(ops, name).kernel
    return {n: k for n, k in inspect.getmembers(mod) if hasattr(k, "device_caches")}


def _compiles(name):
    dev = torch.cuda.current_device()
    return {n: len(k.device_caches[dev][0]) for n, k in _kernels(name).items()}


def _model(spec, which=0):
    """The sweep's model for ``spec``: Llama-3-8B / Qwen2-7B, or for the expert ops Qwen3-30B-A3B / Mixtral."""
    for m in (("llama3-8b", "qwen2-7b"), ("qwen3-30b-a3b", "mixtral-8x7b")):
        if spec.has_layer(MODELS[m[which]]):
            return MODELS[m[which]]
    raise AssertionError(f"no test model has a layer of {spec.name}")


def _outputs(spec, inputs):
    return {k: v.clone() for k, v in spec.call(inputs).items()}


@pytest.mark.parametrize("name", OPS)
def test_cuda_graph_capture_matches_eager(name):
    spec = ops.get_spec(name)
    shape = spec.sweep_shape(_model(spec), 37)
    inputs = spec.make_inputs(shape, torch.bfloat16, Fill("randn", "cuda", seed=1))
    eager = _outputs(spec, {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()})
    static = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
    snapshot = {k: v.clone() for k, v in static.items() if isinstance(v, torch.Tensor)}
    spec.call(static)  # warm up (compile) outside the capture
    for k, v in snapshot.items():
        static[k].copy_(v)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        captured = spec.call(static)
    for k, v in snapshot.items():  # in-place ops: restore the inputs the graph will read
        static[k].copy_(v)
    g.replay()
    torch.cuda.synchronize()
    for k in eager:
        torch.testing.assert_close(captured[k], eager[k], rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("name", OPS)
def test_torch_compile_inductor(name):
    spec = ops.get_spec(name)
    shape = spec.sweep_shape(_model(spec), 33)
    inputs = spec.make_inputs(shape, torch.bfloat16, Fill("randn", "cuda", seed=2))
    copy = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
    eager = _outputs(spec, copy)
    compiled = torch.compile(spec.call, fullgraph=True)
    out = compiled(inputs)
    for k in eager:
        torch.testing.assert_close(out[k], eager[k], rtol=0, atol=0, equal_nan=True)


@pytest.mark.gpu_alone  # up to 16384 tokens of every op (paged attention there: 5 GB more)
@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("which", [0, 1])
def test_one_compile_across_num_tokens_sweep(name, which):
    spec = ops.get_spec(name)
    model = _model(spec, which).name
    for k in _kernels(name).values():
        k.device_caches.clear()
    for t in NUM_TOKENS_SWEEP[:-2]:  # up to 16384: every size class a specialization could split on
        inputs = spec.make_inputs(spec.sweep_shape(MODELS[model], t), torch.bfloat16, Fill("randn", "cuda"))
        spec.call(inputs)
    counts = _compiles(name)
    want = {k: 1 for k in counts}
    if name == "fused_moe":
        # its GEMMs compile once per tile config the default rule picks over the sweep (tiles follow rows per
        # expert), and no more
        want.update(_fused_moe_configs(spec, MODELS[model], NUM_TOKENS_SWEEP[:-2]))
    if name == "paged_attention":
        # the decode kernel once per stage count the sweep's batches take (config.decode_stages: 4 past a wave from
        # Triton 3.7)
        want["_paged_attention_decode_kernel"] = _decode_stage_picks(spec, MODELS[model], NUM_TOKENS_SWEEP[:-2])
    assert counts and all(counts[k] <= want[k] for k in counts) and max(counts.values()) >= 1, (
        f"{name} on {model}: compiles per kernel over the sweep {counts}, at most {want}"
    )


def _decode_stage_picks(spec, model, tokens) -> int:
    """Distinct num_stages of the decode launches paged_attention plans over ``tokens`` of its sweep on this card."""
    from tritonkit.ops.paged_attention import config

    picks = set()
    for t in tokens:
        s = spec.sweep_shape(model, t)
        n, group = s["num_seqs"], s["num_heads"] // s["num_kv_heads"]
        q = s["q_len"] if isinstance(s["q_len"], tuple) else (s["q_len"],) * n
        c = s["context"] if isinstance(s["context"], tuple) else (s["context"],) * n
        keys = max(a + b for a, b in zip(q, c))
        dev = torch.device("cuda")
        sm90 = torch.cuda.get_device_capability(dev) == (9, 0)
        plan = config.launch_plan(
            group, s["head_dim"], 2, n, sum(q), s["num_kv_heads"], max(q), keys, config.num_sms(dev), False, sm90
        )
        if plan.decode is not None:
            picks.add(plan.decode.num_stages)
    return max(len(picks), 1)


def _fused_moe_configs(spec, model, tokens) -> dict:
    """Distinct GEMM1 and GEMM2 configs (with their layout) fused_moe's lookup picks over ``tokens`` for ``model``:
    this card's tuned table where one ships, else the default rule."""
    from tritonkit.ops.fused_moe.config import fused_moe_config

    picks = []
    for t in tokens:
        s = spec.sweep_shape(model, t)
        picks.append(
            fused_moe_config(
                s["num_tokens"],
                s["experts"],
                s["inter"],
                s["hidden"],
                s["topk"],
                "bfloat16",
                s.get("quant", "none"),
                torch.cuda.get_device_name(),
            )
        )
    # the layout is a constexpr of both kernels: one tile in blocks of one slot and in sorted blocks compiles twice
    return {
        "_fused_moe_gemm1_kernel": len({(c.gemm1, c.slots) for c in picks}),
        "_fused_moe_gemm2_kernel": len({(c.gemm2, c.slots) for c in picks}),
    }


@pytest.mark.parametrize(
    "shape",
    [
        dict(num_seqs=1, q_len=1, context=4095),  # a split decode and its merge
        dict(num_seqs=3, q_len=(1, 1, 40), context=(4095, 2000, 0)),  # both paths split, one scratch allocation
    ],
    ids=["decode-split", "mixed"],
)
def test_paged_attention_repeats_a_layout_bit_exactly(shape, monkeypatch):
    # the second call of a layout hands the launchers data pointers as ints (ops/paged_attention/replay.py): the
    # CUDA launcher must take them as it takes the tensors of the first call, which an empty memo makes normal
    from tritonkit.ops import _checks
    from tritonkit.ops.paged_attention import api
    from tritonkit.spec import Shape

    monkeypatch.setattr(api, "_CHECKED", _checks.CheckedLayouts())

    spec = ops.get_spec("paged_attention")
    full = Shape(num_heads=32, num_kv_heads=8, head_dim=128, block_size=16, **shape)
    inputs = spec.make_inputs(full, torch.bfloat16, Fill("randn", "cuda", seed=3))
    first = _outputs(spec, inputs)["out"]
    assert any(v.replay is not None for v in api._CHECKED.keys.values())
    for _ in range(2):
        torch.testing.assert_close(_outputs(spec, inputs)["out"], first, rtol=0, atol=0, equal_nan=True)
