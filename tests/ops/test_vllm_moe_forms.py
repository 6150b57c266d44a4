"""vLLM's MoE call forms (``tritonkit.ops.vllm``: topk_softmax, moe_align_block_size, fused_experts).

The call forms and semantics are vLLM 0.34.0's (``vllm._custom_ops.topk_softmax`` / ``moe_align_block_size`` and
``vllm.model_executor.layers.fused_moe.fused_experts``); the grids follow vLLM's ``tests/kernels/moe`` tests
(tokens 1..222, K 128..1024 with a ragged 511, 8 and 64 experts, topk 2 and 6), reduced on a CPU, at vLLM's sizes
on a GPU (``pytest -m gpu``). Outputs are compared with tritonkit's float64 references under the op's tolerance,
caller buffers start poisoned, and a refused call writes nothing.
"""

import types

import pytest
import torch
from conftest import DEVICE

from tritonkit.ops import get_spec
from tritonkit.ops import vllm as ops
from tritonkit.ops.fused_moe.reference import fused_moe_reference
from tritonkit.ops.fused_moe.spec import _quantize_weight
from tritonkit.ops.moe_align_block_size.reference import moe_align_block_size_reference
from tritonkit.ops.topk_softmax.reference import topk_softmax_reference
from tritonkit.testing import compare

GPU = DEVICE != "cpu"


def _gen(seed=0):
    return torch.Generator(DEVICE).manual_seed(seed)


def _routing(m, e, topk, g, dtype=torch.int32):
    logits = torch.randn(m, e, generator=g, device=DEVICE)
    w, ids = torch.topk(torch.softmax(logits, dim=-1), topk, dim=-1)
    return w, ids.to(dtype)


# --- topk_softmax ----------------------------------------------------------------------------------------------------
def _topk_buffers(m, k, ids_dtype=torch.int32):
    return (
        torch.full((m, k), float("nan"), device=DEVICE),
        torch.full((m, k), -7, dtype=ids_dtype, device=DEVICE),
        torch.full((m, k), -7, dtype=torch.int32, device=DEVICE),
    )


@pytest.mark.parametrize("ids_dtype", [torch.int32, torch.int64], ids=["i32", "i64"])
@pytest.mark.parametrize("renormalize", [False, True])
@pytest.mark.parametrize("m,e,k", [(1, 8, 2), (33, 64, 6), (7, 256, 8)])
def test_topk_softmax(m, e, k, renormalize, ids_dtype):
    logits = torch.randn(m, e, generator=_gen(m), device=DEVICE, dtype=torch.bfloat16)
    w, ids, src = _topk_buffers(m, k, ids_dtype)
    assert ops.topk_softmax(w, ids, src, logits, renormalize) is None
    ref_w, ref_ids = topk_softmax_reference(logits.double(), k, renormalize)
    assert torch.equal(ids, ref_ids.to(ids_dtype))
    c = compare(w, ref_w, get_spec("topk_softmax").tolerance_for(torch.float32))
    assert c.passed, c.describe()
    # slot (m, j)'s row in expert-major order, as vLLM's kernel writes it
    expect = torch.arange(k, device=DEVICE)[None, :] * m + torch.arange(m, device=DEVICE)[:, None]
    assert torch.equal(src, expect.int())


@pytest.mark.parametrize(
    "make,exc,name",
    [
        (lambda w, i, s, x: (w.double(), i, s, x), TypeError, "topk_weights"),
        (lambda w, i, s, x: (w, i.float(), s, x), TypeError, "topk_ids"),
        (lambda w, i, s, x: (w, i[:, :1], s, x), ValueError, "topk_ids"),
        (lambda w, i, s, x: (w, i, s[:2], x), ValueError, "token_expert_indices"),
        (lambda w, i, s, x: (w, i, s, x[:3]), ValueError, "gating_output"),
        (lambda w, i, s, x: (*_topk_buffers(5, 9), x), ValueError, "topk"),
    ],
    ids=["weights-dtype", "ids-dtype", "ids-shape", "indices-shape", "rows", "topk-past-experts"],
)
def test_topk_softmax_names_the_bad_argument_and_writes_nothing(make, exc, name):
    x = torch.randn(5, 8, device=DEVICE)
    bufs = _topk_buffers(5, 2)
    before = [b.clone() for b in bufs]
    with pytest.raises(exc, match=rf"^{name}"):
        ops.topk_softmax(*make(*bufs, x), False)
    for b, old in zip(bufs, before):
        assert torch.equal(b, old) or (b.isnan().all() and old.isnan().all())


def _vllm_softmax_routing(logits, k, renormalize, bias=None, pad=None):
    # what vLLM 0.34's router computes (the eager fallback of fused_topk_bias and the CUDA kernel's semantics):
    # choose on softmax + bias, weigh with the unbiased softmax, renormalize those, padding rows' ids -1
    p = torch.softmax(logits.double(), dim=-1)
    score = p.float() + (0 if bias is None else bias)
    ids = torch.sort(score, dim=-1, descending=True, stable=True).indices[:, :k]
    w = p.gather(1, ids)
    if renormalize:
        w = w / w.sum(dim=-1, keepdim=True)
    if pad is not None:
        ids = ids.masked_fill(pad[:, None], -1)
    return w, ids


@pytest.mark.parametrize("ids_dtype", [torch.int32, torch.int64], ids=["i32", "i64"])
@pytest.mark.parametrize("renormalize", [False, True])
@pytest.mark.parametrize("m,e,k", [(1, 8, 2), (33, 64, 6), (7, 256, 8)])
def test_topk_softmax_bias_and_padding(m, e, k, renormalize, ids_dtype):
    g = _gen(m + 1)
    logits = torch.randn(m, e, generator=g, device=DEVICE, dtype=torch.bfloat16)
    bias = torch.randn(e, generator=g, device=DEVICE) * (2.0 / e)
    pad = torch.rand(m, generator=g, device=DEVICE) < 0.4
    pad[0] = m > 1  # one-row case: a real token
    w, ids, src = _topk_buffers(m, k, ids_dtype)
    assert ops.topk_softmax(w, ids, src, logits, renormalize, bias, pad) is None
    ref_w, ref_ids = _vllm_softmax_routing(logits, k, renormalize, bias, pad)
    assert torch.equal(ids, ref_ids.to(ids_dtype))
    if m > 1:
        assert (ids[pad] == -1).all() and (ids[~pad] >= 0).all() and pad.any()
    c = compare(w, ref_w, get_spec("topk_softmax").tolerance_for(torch.float32))
    assert c.passed, c.describe()
    # the same from tritonkit's reference, and token_expert_indices as without the mask (padding rows included)
    t_w, t_ids = topk_softmax_reference(logits.double(), k, renormalize, bias.double(), pad)
    assert torch.equal(ids, t_ids.to(ids_dtype))
    expect = torch.arange(k, device=DEVICE)[None, :] * m + torch.arange(m, device=DEVICE)[:, None]
    assert torch.equal(src, expect.int())


def test_topk_softmax_bias_selects_weights_stay_unbiased():
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0]], device=DEVICE)
    bias = torch.tensor([0.0, 0.0, 0.0, 0.9], device=DEVICE)
    w, ids, src = _topk_buffers(1, 2)
    ops.topk_softmax(w, ids, src, logits, False, bias)
    p = torch.softmax(logits.double(), dim=-1)[0]
    assert ids.tolist() == [[3, 0]]
    torch.testing.assert_close(w.double(), p[[3, 0]][None], rtol=1e-6, atol=0)
    ops.topk_softmax(w, ids, src, logits, True, bias)
    torch.testing.assert_close(w.double(), (p[[3, 0]] / p[[3, 0]].sum())[None], rtol=1e-6, atol=0)


def test_topk_softmax_all_padding():
    w, ids, src = _topk_buffers(3, 2, torch.int64)
    ops.topk_softmax(
        w, ids, src, torch.randn(3, 8, device=DEVICE), True, None, torch.ones(3, dtype=torch.bool, device=DEVICE)
    )
    assert (ids == -1).all() and torch.isfinite(w).all() and (src >= 0).all()


@pytest.mark.parametrize(
    "extra, exc, name",
    [
        ((torch.zeros(8, dtype=torch.bfloat16),), TypeError, "e_score_correction_bias must have dtype float32"),
        ((torch.zeros(7),), ValueError, r"e_score_correction_bias must have shape \(8,\)"),
        ((torch.zeros(16)[::2],), ValueError, "e_score_correction_bias must be contiguous"),
        ((None, torch.zeros(2, dtype=torch.int32)), TypeError, "is_padding must have dtype bool"),
        ((None, torch.zeros(3, dtype=torch.bool)), ValueError, r"is_padding must have shape \(2,\)"),
        ((None, torch.zeros(2, dtype=torch.bool, device="meta")), ValueError, "is_padding is on meta"),
    ],
    ids=["bias-dtype", "bias-shape", "bias-strided", "pad-dtype", "pad-shape", "pad-device"],
)
def test_topk_softmax_names_a_bad_bias_or_padding_and_writes_nothing(extra, exc, name):
    bufs = _topk_buffers(2, 2)
    before = [b.clone() for b in bufs]
    extra = tuple(t if t is None or t.device.type == "meta" else t.to(DEVICE) for t in extra)
    with pytest.raises(exc, match=rf"^{name}"):
        ops.topk_softmax(*bufs, torch.randn(2, 8, device=DEVICE), False, *extra)
    for b, old in zip(bufs, before):
        assert torch.equal(b, old) or (b.isnan().all() and old.isnan().all())


# --- moe_align_block_size --------------------------------------------------------------------------------------------
def _align_buffers(numel, e, bs, extra=0):
    n = min(numel * bs, numel + e * (bs - 1)) + extra
    return (
        torch.full((n,), -5, dtype=torch.int32, device=DEVICE),
        torch.full((-(-n // bs),), -5, dtype=torch.int32, device=DEVICE),
        torch.full((1,), -5, dtype=torch.int32, device=DEVICE),
    )


@pytest.mark.parametrize("extra", [0, 37])
@pytest.mark.parametrize("m,topk,e,bs", [(1, 2, 8, 16), (33, 6, 64, 16), (222, 2, 8, 64), (4, 8, 256, 32)])
def test_moe_align_block_size(m, topk, e, bs, extra):
    _, ids = _routing(m, e, topk, _gen(m))
    sorted_ids, experts, total = bufs = _align_buffers(ids.numel(), e, bs, extra)
    assert ops.moe_align_block_size(ids, e, bs, *bufs) is None
    rs, re, rn = moe_align_block_size_reference(ids, bs, e)
    assert torch.equal(total, rn)
    assert torch.equal(sorted_ids[: rs.numel()], rs) and (sorted_ids[rs.numel() :] == ids.numel()).all()
    assert torch.equal(experts[: re.numel()], re) and (experts[re.numel() :] == -1).all()


def test_moe_align_block_size_with_an_expert_map_keeps_only_this_ranks_slots():
    # vLLM's op with a map: slots of other ranks' experts are left out, block experts are local indices
    e, bs = 16, 16
    _, ids = _routing(40, e, 4, _gen(3))
    emap = torch.full((e,), -1, dtype=torch.int32, device=DEVICE)
    emap[torch.tensor([3, 9, 0, 12, 5], device=DEVICE)] = torch.arange(5, dtype=torch.int32, device=DEVICE)
    bufs = _align_buffers(ids.numel(), e, bs)
    ops.moe_align_block_size(ids, e, bs, *bufs, expert_map=emap)
    local = torch.where(emap[ids.long()] >= 0, emap[ids.long()], -1)
    rs, re, rn = moe_align_block_size_reference(local, bs, e)
    assert torch.equal(bufs[2], rn) and torch.equal(bufs[0][: rs.numel()], rs)
    assert torch.equal(bufs[1][: re.numel()], re)
    busy = bufs[1][: int(rn) // bs]
    assert busy.numel() and (busy >= 0).all() and (busy < 5).all()


def test_moe_align_block_size_refuses_short_buffers_and_scatter_idx():
    _, ids = _routing(9, 8, 2, _gen(1))
    sorted_ids, experts, total = bufs = _align_buffers(ids.numel(), 8, 16)
    before = [b.clone() for b in bufs]
    with pytest.raises(ValueError, match="^sorted_token_ids must hold at least"):
        ops.moe_align_block_size(ids, 8, 16, sorted_ids[:-1], experts, total)
    with pytest.raises(ValueError, match="^experts_ids must hold at least"):
        ops.moe_align_block_size(ids, 8, 16, sorted_ids, experts[:-1], total)
    with pytest.raises(TypeError, match="^num_tokens_post_pad"):
        ops.moe_align_block_size(ids, 8, 16, sorted_ids, experts, total.long())
    with pytest.raises(NotImplementedError, match=r"scatter_idx=<int32 tensor of shape \(18, 1\)> is not supported"):
        ops.moe_align_block_size(ids, 8, 16, *bufs, scatter_idx=torch.empty(18, 1, dtype=torch.int32, device=DEVICE))
    assert all(torch.equal(b, old) for b, old in zip(bufs, before))


# --- fused_experts ---------------------------------------------------------------------------------------------------
class _Act:
    """Stands in for vLLM's MoEActivation enum: fused_experts reads ``.value``."""

    def __init__(self, value):
        self.value = value


def _quant_config(**kw):
    """An object with FusedMoEQuantConfig's fields (vLLM's dataclass is not importable here)."""
    fields = dict(
        use_fp8_w8a8=False,
        use_int8_w8a8=False,
        use_int8_w8a16=False,
        use_int4_w4a16=False,
        ocp_mx_scheme=None,
        per_act_token_quant=False,
        w1_scale=None,
        w2_scale=None,
        w1_zp=None,
        w2_zp=None,
        a1_scale=None,
        a2_scale=None,
        block_shape=None,
        w1_bias=None,
        w2_bias=None,
    )
    fields.update(kw)
    return types.SimpleNamespace(**fields)


def _layer(m, k, n, e, topk, dtype, quant="none", seed=0):
    g = _gen(seed)
    x = torch.randn(m, k, generator=g, device=DEVICE).to(dtype)
    w1 = torch.randn(e, 2 * n, k, generator=g, device=DEVICE) / k**0.5
    w2 = torch.randn(e, k, n, generator=g, device=DEVICE) / n**0.5
    w, ids = _routing(m, e, topk, g)
    if quant == "none":
        return x, w1.to(dtype), w2.to(dtype), w, ids, None
    (q1, s1), (q2, s2) = _quantize_weight(w1, quant), _quantize_weight(w2, quant)
    return x, q1, q2, w, ids, (s1, s2)


def _expect(x, w1, w2, w, ids, **kw):
    f64 = {k: (v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v) for k, v in kw.items()}
    return fused_moe_reference(
        x.double(),
        w1 if w1.dtype == torch.float8_e4m3fn else w1.double(),
        w2 if w2.dtype == torch.float8_e4m3fn else w2.double(),
        w.double(),
        ids,
        act_dtype=x.dtype,
        **f64,
    )


def _assert_moe(out, ref, x):
    spec = get_spec("fused_moe")
    c = compare(out, ref, spec.tolerance_for(x.dtype), None)
    # the spec's error_scale needs the spec's inputs; these layers are O(1), so the table's tolerance plus an
    # absolute term of a few bf16 ulps of the output's magnitude bounds a rounding-point flip
    if not c.passed:
        c = compare(out, ref, spec.tolerance_for(x.dtype), torch.full_like(ref, 4 * 2.0**-8))
    assert c.passed, c.describe()


MOE_CPU = [(1, 128, 128, 8, 2), (33, 96, 80, 8, 6), (64, 511, 128, 8, 2)]
MOE_GPU = [
    (m, k, n, e, topk)
    for m in (1, 33, 64, 222)
    for k in (128, 511, 1024)
    for n in (128, 1024)
    for e in (8, 64)
    for topk in (2, 6)
]


def _run_bf16(m, k, n, e, topk, dtype, activation):
    x, w1, w2, w, ids, _ = _layer(m, k, n, e, topk, dtype)
    before = x.clone()
    out = ops.fused_experts(x, w1, w2, w, ids, activation=_Act(activation))
    assert out.shape == x.shape and out.dtype == dtype and torch.equal(x, before)  # out of place, as vLLM's
    _assert_moe(out, _expect(x, w1, w2, w, ids, activation=activation), x)


@pytest.mark.parametrize("activation", ["silu", "gelu"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("m,k,n,e,topk", MOE_CPU)
def test_fused_experts(m, k, n, e, topk, dtype, activation):
    _run_bf16(m, k, n, e, topk, dtype, activation)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("m,k,n,e,topk", MOE_GPU)
def test_fused_experts_vllm_grid(m, k, n, e, topk, dtype):
    _run_bf16(m, k, n, e, topk, dtype, "silu")


@pytest.mark.parametrize(
    "quant,per_token", [("fp8_tensor", False), ("fp8_tensor", True), ("fp8_channel", True), ("fp8_block128", False)]
)
def test_fused_experts_fp8(quant, per_token):
    x, w1, w2, w, ids, (s1, s2) = _layer(17, 256, 160, 8, 2, torch.bfloat16, quant)
    block = [128, 128] if quant == "fp8_block128" else None
    qc = _quant_config(use_fp8_w8a8=True, per_act_token_quant=per_token, w1_scale=s1, w2_scale=s2, block_shape=block)
    out = ops.fused_experts(x, w1, w2, w, ids, quant_config=qc)
    # vLLM's default for per-tensor scales without static ones: one dynamic activation scale per tensor
    per_token_ref = per_token or block is not None
    ref = _expect(x, w1, w2, w, ids, w1_scale=s1, w2_scale=s2, block_shape=block, per_act_token_quant=per_token_ref)
    _assert_moe(out, ref, x)


def test_fused_experts_expert_map_and_global_num_experts():
    x, w1, w2, w, ids, _ = _layer(20, 96, 80, 8, 2, torch.bfloat16)
    emap = torch.full((12,), -1, dtype=torch.int32, device=DEVICE)
    emap[torch.tensor([1, 4, 6, 7, 9, 10, 11, 0], device=DEVICE)] = torch.arange(8, dtype=torch.int32, device=DEVICE)
    _, gids = _routing(20, 12, 2, _gen(5))
    out = ops.fused_experts(x, w1, w2, w, gids, global_num_experts=12, expert_map=emap)
    _assert_moe(out, _expect(x, w1, w2, w, gids, expert_map=emap), x)
    with pytest.raises(ValueError, match="^global_num_experts"):
        ops.fused_experts(x, w1, w2, w, gids, global_num_experts=8, expert_map=emap)


@pytest.mark.parametrize("field", ["use_int8_w8a8", "use_int8_w8a16", "use_int4_w4a16", "w1_zp", "w1_bias"])
def test_fused_experts_refuses_other_schemes_by_name(field):
    x, w1, w2, w, ids, _ = _layer(3, 96, 80, 8, 2, torch.bfloat16)
    value = True if field.startswith("use_") else torch.zeros(1, device=DEVICE)
    with pytest.raises(NotImplementedError, match=f"quant_config.{field}"):
        ops.fused_experts(x, w1, w2, w, ids, quant_config=_quant_config(**{field: value}))


def test_fused_experts_names_a_scheme_that_disagrees_with_the_weights():
    x, w1, w2, w, ids, (s1, s2) = _layer(3, 96, 80, 8, 2, torch.bfloat16, "fp8_channel")
    with pytest.raises(ValueError, match="^quant_config must describe"):
        ops.fused_experts(x, w1, w2, w, ids)
    with pytest.raises(ValueError, match="^quant_config.use_fp8_w8a8 is False"):
        ops.fused_experts(x, w1, w2, w, ids, quant_config=_quant_config(w1_scale=s1, w2_scale=s2))
    with pytest.raises(ValueError, match="^activation"):
        xb, w1b, w2b, wb, idsb, _ = _layer(3, 96, 80, 8, 2, torch.bfloat16)
        ops.fused_experts(xb, w1b, w2b, wb, idsb, activation=_Act("relu2"))


def test_forms_trace_under_torch_compile():
    # fullgraph: every form goes through tritonkit's custom ops and plain copies, no graph break or host sync
    x = torch.randn(6, 8, device=DEVICE)
    bufs = _topk_buffers(6, 2)
    torch.compile(ops.topk_softmax, fullgraph=True, backend="aot_eager")(*bufs, x, True)
    w, ids = topk_softmax_reference(x.double(), 2, True)
    assert torch.equal(bufs[1], ids)
    abufs = _align_buffers(12, 8, 16)
    torch.compile(ops.moe_align_block_size, fullgraph=True, backend="aot_eager")(bufs[1], 8, 16, *abufs)
    assert torch.equal(abufs[0][: 12 + 8 * 15], moe_align_block_size_reference(bufs[1], 16, 8)[0])
    xl, w1, w2, wl, idl, _ = _layer(5, 96, 80, 8, 2, torch.bfloat16)
    got = torch.compile(ops.fused_experts, fullgraph=True, backend="aot_eager")(xl, w1, w2, wl, idl)
    assert torch.equal(got, ops.fused_experts(xl, w1, w2, wl, idl))


def test_moe_align_block_size_with_a_map_and_the_id_check(monkeypatch):
    # the caller's global ids are checked; the mapped ones (-1 for other ranks' experts) are not checked again
    monkeypatch.setenv("TRITONKIT_CHECK_INDICES", "1")
    e, bs = 16, 16
    _, ids = _routing(12, e, 2, _gen(4))
    emap = torch.full((e,), -1, dtype=torch.int32, device=DEVICE)
    emap[:4] = torch.arange(4, dtype=torch.int32, device=DEVICE)
    bufs = _align_buffers(ids.numel(), e, bs)
    ops.moe_align_block_size(ids, e, bs, *bufs, expert_map=emap)
    local = torch.where(emap[ids.long()] >= 0, emap[ids.long()], -1)
    assert torch.equal(bufs[2], moe_align_block_size_reference(local, bs, e)[2])
    bad = ids.clone()
    bad[3, 1] = e
    with pytest.raises(ValueError, match=r"^topk_ids must hold expert ids in \[0, 16\), got 16 at \(3, 1\)"):
        ops.moe_align_block_size(bad, e, bs, *_align_buffers(ids.numel(), e, bs), expert_map=emap)


def test_moe_align_block_size_checks_the_map_on_request(monkeypatch):
    # the vLLM form's map is checked too, before any buffer is written
    monkeypatch.setenv("TRITONKIT_CHECK_INDICES", "1")
    e, bs = 16, 16
    _, ids = _routing(12, e, 2, _gen(4))
    emap = torch.full((e,), -1, dtype=torch.int32, device=DEVICE)
    emap[:4] = torch.arange(4, dtype=torch.int32, device=DEVICE)
    emap[9] = 1000
    bufs = _align_buffers(ids.numel(), e, bs)
    with pytest.raises(
        ValueError, match=r"^expert_map must hold local expert indices .* in \[-1, 16\), got 1000 at \(9,\)"
    ):
        ops.moe_align_block_size(ids, e, bs, *bufs, expert_map=emap)
    assert all((b == -5).all() for b in bufs)


def test_output_buffers_that_share_memory_are_refused_before_any_write():
    x = torch.randn(4, 8, device=DEVICE)
    w, ids, src = _topk_buffers(4, 2)
    with pytest.raises(ValueError, match="^topk_ids must not have elements that share memory"):
        ops.topk_softmax(w, torch.zeros(1, 1, dtype=torch.int32, device=DEVICE).expand(4, 2), src, x, False)
    assert w.isnan().all()
    with pytest.raises(ValueError, match="^token_expert_indices must not overlap topk_ids"):
        ops.topk_softmax(w, ids, ids, x, False)
    assert w.isnan().all() and (ids == -7).all()
    _, tids = _routing(9, 8, 2, _gen(1))
    sorted_ids, experts, total = _align_buffers(tids.numel(), 8, 16)
    with pytest.raises(ValueError, match="^experts_ids must not have elements that share memory"):
        ops.moe_align_block_size(tids, 8, 16, sorted_ids, experts[:1].expand(experts.shape[0]), total)
    assert (sorted_ids == -5).all()
    with pytest.raises(ValueError, match="^num_tokens_post_pad must not overlap sorted_token_ids"):
        ops.moe_align_block_size(tids, 8, 16, sorted_ids, experts, sorted_ids[:1])
    assert (sorted_ids == -5).all() and (experts == -5).all()
