"""One compile per (dtype, model config) over the whole num_tokens sweep, for every memory-bound op: launches are
recorded on meta tensors and their JIT cache keys computed as Triton would for sm_90 (no GPU needed; the GPU-side
count is in test_gpu.py)."""

import pytest
import torch
from compile_keys import Recorder, specialization_keys
from triton.runtime.jit import JITFunction

import tritonkit.ops
from tritonkit.models import MODELS, NUM_TOKENS_SWEEP
from tritonkit.spec import Shape
from tritonkit.ops import get_spec
from tritonkit.testing import MetaFill

OPS = {
    "rms_norm": "_rms_norm_fwd_kernel",
    "silu_and_mul": "_silu_and_mul_fwd_kernel",
    "rotary_embedding": "_rotary_embedding_fwd_kernel",
    "reshape_and_cache": "_reshape_and_cache_kernel",
    "topk_softmax": "_topk_softmax_kernel",
}


def _record(monkeypatch, name, model, dtype, tokens):
    api = getattr(tritonkit.ops, name).api
    kernel = getattr(api, OPS[name])
    spec = get_spec(name)
    rec = Recorder()
    monkeypatch.setattr(api, OPS[name], rec)
    for t in tokens:
        spec.call(spec.make_inputs(spec.sweep_shape(model, t), dtype, MetaFill()))
    monkeypatch.setattr(api, OPS[name], kernel)
    assert len(rec.launches) == len(tokens)
    return kernel, rec.launches


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("name", OPS)
def test_one_compile_across_num_tokens(monkeypatch, name, dtype):
    for model in MODELS.values():
        if not get_spec(name).has_layer(model):
            continue
        kernel, launches = _record(monkeypatch, name, model, dtype, NUM_TOKENS_SWEEP)
        # the grid grows on grid[0] only; grid[1], where used, is fixed by the model and within CUDA's limit
        grids = [tuple(g) + (1, 1) for g, _, _ in launches]
        assert len({g[1:3] for g in grids}) == 1 and max(g[1] for g in grids) <= 65535
        keys = specialization_keys(kernel, launches)
        assert len(keys) == 1, f"{name} on {model.name}: {len(keys)} compiles over num_tokens {NUM_TOKENS_SWEEP}"


# rms_norm is left out: it passes no per-call integer at all (the row count lives only in its grid)
@pytest.mark.parametrize("name", [n for n in OPS if n != "rms_norm"])
def test_the_check_fails_without_do_not_specialize(monkeypatch, name):
    # the same launches through the kernel minus its do_not_specialize split into several keys (1, 16, 17 tokens
    # land in different specialization classes): the test above can fail
    model = next(m for m in MODELS.values() if get_spec(name).has_layer(m))  # Llama-3-8B, or the first MoE model
    kernel, launches = _record(monkeypatch, name, model, torch.float16, (1, 16, 17))
    assert len(specialization_keys(JITFunction(kernel.fn), launches)) > 1


@pytest.mark.parametrize("stages_release", [False, True], ids=["3-stages", "4-past-a-wave"])
@pytest.mark.parametrize("pdl", [False, True], ids=["no-pdl", "pdl"])
def test_paged_attention_one_compile_per_path_across_batch_context_and_tokens(monkeypatch, pdl, stages_release):
    # decode batches, context lengths, prefill lengths and a mixed batch: one key per kernel (path), three for the
    # decode kernel's rows (they follow the longest query: DECODE_BLOCK_M, or the wide 64 and 128 rows for short
    # queries of batches that fill the card, which never split: one for the merge), one more where a release takes 4
    # stages past a wave (config.decode_stages), with the merge as a programmatic dependent launch (sm_90+ CUDA
    # devices) or not (this CPU, older GPUs)
    api = tritonkit.ops.paged_attention.api
    monkeypatch.setattr(tritonkit.ops.paged_attention.config, "merge_pdl", lambda device: pdl)
    cfg = tritonkit.ops.paged_attention.config
    monkeypatch.setattr(cfg, "DECODE_STAGES_RELEASE", stages_release)
    # the stage rule holds on sm_90 only; these meta launches stand for an sm_90 card whatever Triton's driver says
    stages = cfg.decode_stages
    monkeypatch.setattr(cfg, "decode_stages", lambda h, e, w, p, n, sm90=False: stages(h, e, w, p, n, True))
    spec = get_spec("paged_attention")
    names = (
        "_paged_attention_decode_kernel",
        "_paged_attention_merge_kernel",
        "_paged_attention_prefill_kernel",
        "_paged_attention_prefill_merge_kernel",
    )
    kernels = {n: getattr(api, n) for n in names}
    recs = {n: Recorder() for n in names}
    for n in names:
        monkeypatch.setattr(api, n, recs[n])
    heads = dict(num_heads=32, num_kv_heads=8, head_dim=128, block_size=16, causal=1)
    shapes = [spec.sweep_shape(MODELS["llama3-8b"], t) for t in (1, 2, 16, 17, 256)]
    shapes += [Shape(num_seqs=b, q_len=1, context=c, **heads) for b in (1, 3) for c in (0, 100, 4095, 32767)]
    shapes += [Shape(num_seqs=1, q_len=t, context=0, **heads) for t in (1024, 4097)]
    shapes += [Shape(num_seqs=3, q_len=(1, 700, 1), context=(5000, 2000, 17), **heads)]
    # short queries of batches that fill the card (wide decode rows: 64, and 128 past 64 query rows); of smaller
    # batches and longer chunks (prefill, with and without KV splits)
    shapes += [
        Shape(num_seqs=b, q_len=t, context=c, **heads)
        for b, t, c in ((17, 8, 1100), (17, 20, 300), (1, 16, 16368), (2, 20, 2000), (1, 64, 16320), (1, 256, 16128))
    ]
    for shape in shapes:
        spec.call(spec.make_inputs(shape, torch.bfloat16, MetaFill()))
    # the prefill kernel: one compile per (tile rows, split or not) its config picks; its merge, one per split rows
    cfgs = [c for c in (_prefill_pick(s) for s in shapes) if c is not None]
    picks = {(c.block_m, c.num_splits > 1) for c in cfgs}
    # its merge, one per (tile rows, rows a merge program) of the split configs
    merge_rows = tritonkit.ops.paged_attention.config.prefill_merge_rows
    merges = {(c.block_m, merge_rows(c.num_splits)) for c in cfgs if c.num_splits > 1}
    decodes = {(d.block_m, d.num_stages) for d in (_plan(s).decode for s in shapes) if d is not None}
    assert len({rows for rows, _ in decodes}) == 3
    assert {stages for _, stages in decodes} == ({3, 4} if stages_release else {3})
    want = {
        "_paged_attention_decode_kernel": len(decodes),
        "_paged_attention_merge_kernel": 1,
        "_paged_attention_prefill_kernel": len(picks),
        "_paged_attention_prefill_merge_kernel": len(merges),
    }
    # both merges: a program a row (many splits) and row slices (few)
    assert want["_paged_attention_prefill_kernel"] >= 3 and {r for _, r in merges} == {1, 16}
    for n in names:
        assert recs[n].launches, f"{n} never launched"
        keys = specialization_keys(kernels[n], recs[n].launches)
        assert len(keys) == want[n], f"{n}: {len(keys)} compiles over {len(recs[n].launches)} launches"


def _plan(shape):
    """The launch plan of a llama3-8b-headed shape on this CPU (DEFAULT_NUM_SMS)."""
    cfg = tritonkit.ops.paged_attention.config
    n = shape["num_seqs"]
    q = shape["q_len"] if isinstance(shape["q_len"], tuple) else (shape["q_len"],) * n
    c = shape["context"] if isinstance(shape["context"], tuple) else (shape["context"],) * n
    keys = max(a + b for a, b in zip(q, c))
    return cfg.launch_plan(4, 128, 2, n, sum(q), 8, max(q), keys, cfg.DEFAULT_NUM_SMS)


def _prefill_pick(shape):
    """The prefill config a llama3-8b-headed shape launches with, or None where only the decode path runs."""
    return _plan(shape).prefill


def test_moe_align_block_size_one_compile_per_kernel_across_the_sweep(monkeypatch):
    # the one-program path (few slots) and the three-launch path (count, scan, place), over every MoE model's
    # sweep, block sizes 16 and 64 and both id dtypes: each kernel compiles once per (id dtype, expert map)
    api = tritonkit.ops.moe_align_block_size.api
    spec = get_spec("moe_align_block_size")
    names = ("_moe_align_small_kernel", "_moe_align_count_kernel", "_moe_align_scan_kernel", "_moe_align_place_kernel")
    kernels = {n: getattr(api, n) for n in names}
    for model in (m for m in MODELS.values() if spec.has_layer(m)):
        shapes = [spec.sweep_shape(model, t) for t in NUM_TOKENS_SWEEP]
        assert len({s["block_size"] for s in shapes}) > 1
        for ids_dtype in ("int32", "int64"):
            recs = {n: Recorder() for n in names}
            for n in names:
                monkeypatch.setattr(api, n, recs[n])
            for shape in shapes:
                spec.call(spec.make_inputs(Shape({**shape, "ids_dtype": ids_dtype}), torch.bfloat16, MetaFill()))
            for n in names:
                assert recs[n].launches, f"{n} never launched on {model.name}"
                keys = specialization_keys(kernels[n], recs[n].launches)
                assert len(keys) == 1, f"{n} on {model.name}: {len(keys)} compiles over {len(recs[n].launches)}"


def test_fused_moe_compiles_once_per_config_across_the_sweep(monkeypatch):
    # the GEMMs compile once per distinct tile config of the sweep's M buckets (the default rule here: no table on
    # a CPU), the quant and sum kernels once per (dtype, model): per-call integers are in do_not_specialize
    api = tritonkit.ops.fused_moe.api
    align = tritonkit.ops.moe_align_block_size.api
    cfg_mod = tritonkit.ops.fused_moe.config
    spec = get_spec("fused_moe")
    names = ("_fused_moe_gemm1_kernel", "_fused_moe_gemm2_kernel", "_fused_moe_quant_kernel", "_fused_moe_sum_kernel")
    kernels = {n: getattr(api, n) for n in names}
    for n in (
        "_moe_align_small_kernel",
        "_moe_align_count_kernel",
        "_moe_align_scan_kernel",
        "_moe_align_place_kernel",
    ):
        monkeypatch.setattr(align, n, Recorder())
    models = [m for m in MODELS.values() if spec.has_layer(m)]
    assert {m.moe_quant or "none" for m in models} == {"none", "fp8_block128"}
    for model in models:
        recs = {n: Recorder() for n in names}
        for n in names:
            monkeypatch.setattr(api, n, recs[n])
        configs = set()
        for t in NUM_TOKENS_SWEEP:
            shape = spec.sweep_shape(model, t)
            spec.call(spec.make_inputs(shape, torch.bfloat16, MetaFill()))
            configs.add(
                cfg_mod.fused_moe_config(
                    t,
                    model.num_experts,
                    model.moe_intermediate,
                    model.hidden,
                    model.topk,
                    "bfloat16",
                    shape["quant"],
                    None,
                )
            )
        assert len(recs["_fused_moe_gemm1_kernel"].launches) == len(NUM_TOKENS_SWEEP)
        for n, field in (("_fused_moe_gemm1_kernel", "gemm1"), ("_fused_moe_gemm2_kernel", "gemm2")):
            keys = specialization_keys(kernels[n], recs[n].launches)
            assert len(keys) == len({getattr(c, field) for c in configs}), f"{n} on {model.name}"
        assert len(specialization_keys(kernels["_fused_moe_sum_kernel"], recs["_fused_moe_sum_kernel"].launches)) == 1
        quant = recs["_fused_moe_quant_kernel"].launches
        # block-wise fp8 quantizes x only (h is quantized in GEMM1's epilogue); bf16 weights never
        assert len(quant) == (len(NUM_TOKENS_SWEEP) if model.moe_quant else 0)
        if quant:
            assert len(specialization_keys(kernels["_fused_moe_quant_kernel"], quant)) == 1
