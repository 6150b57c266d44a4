"""The batched paged_attention oracle against the per-sequence loop it replaced (kept below as _loop_reference):
the same numbers on every boundary shape and family, in float64 and in the native dtypes, with every step inside
the memory budget."""

import math

import pytest
import torch

from tritonkit.ops import get_spec
from tritonkit.ops.paged_attention import reference
from tritonkit.ops.paged_attention.reference import paged_attention_reference
from tritonkit.spec import Shape
from tritonkit.testing.inputs import Fill
from tritonkit.spec import upcast

SPEC = get_spec("paged_attention")
BOUNDARY = SPEC.boundary
FAMILIES = ("randn", "near_max", "constant")
_ARGS = ("cu_seqlens_q", "seqused_k", "block_table", "causal", "window_size", "softcap", "sinks", "k_scale", "v_scale")


# The implementation before batching (one Python iteration and a [Hq, n, L] score tensor per sequence), verbatim:
# the oracle of the oracle.
def _loop_reference(
    q,
    k_cache,
    v_cache,
    *,
    cu_seqlens_q,
    seqused_k,
    block_table,
    softmax_scale=None,
    causal=True,
    window_size=(-1, -1),
    softcap=0.0,
    sinks=None,
    k_scale=None,
    v_scale=None,
):
    compute = torch.float64 if q.dtype == torch.float64 else torch.float32
    out_dtype = torch.float64 if q.dtype == torch.float64 else q.dtype
    num_tokens, num_heads, head_dim = q.shape
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = num_heads // num_kv_heads
    scale = head_dim**-0.5 if softmax_scale is None else float(softmax_scale)
    left, right = window_size
    if causal:
        right = 0  # flash-attn: causal is a window whose right edge is the query itself
    ks = 1.0 if k_scale is None else k_scale.reshape(()).to(compute)
    vs = 1.0 if v_scale is None else v_scale.reshape(()).to(compute)
    # tokens past cu_seqlens_q[-1] belong to no sequence: the kernel leaves them alone, the oracle says 0
    out = torch.zeros(num_tokens, num_heads, head_dim, dtype=compute, device=q.device)
    cu = cu_seqlens_q.tolist()
    lens = seqused_k.tolist()
    for s in range(len(lens)):
        a, b, n_keys = cu[s], cu[s + 1], lens[s]
        n = b - a
        if n <= 0 or n_keys <= 0:
            continue
        pages = block_table[s, : math.ceil(n_keys / block_size)].long()
        k = k_cache[pages].reshape(-1, num_kv_heads, head_dim)[:n_keys].to(compute) * ks
        v = v_cache[pages].reshape(-1, num_kv_heads, head_dim)[:n_keys].to(compute) * vs
        k = k.repeat_interleave(group, dim=1)  # [L, Hq, D]
        v = v.repeat_interleave(group, dim=1)
        scores = torch.einsum("nhd,khd->hnk", q[a:b].to(compute), k) * scale  # [Hq, n, L]
        if softcap > 0:
            scores = softcap * torch.tanh(scores / softcap)
        # bottom-right alignment: query j of n sits at position L - n + j
        qpos = torch.arange(n_keys - n, n_keys, device=q.device)[:, None]
        kpos = torch.arange(n_keys, device=q.device)[None, :]
        visible = torch.ones(n, n_keys, dtype=torch.bool, device=q.device)
        if right >= 0:
            visible &= kpos <= qpos + right
        if left >= 0:
            visible &= kpos >= qpos - left
        scores = scores.masked_fill(~visible, float("-inf"))
        if sinks is not None:
            # the sink is one more logit per head in the denominator, with no value
            sink_col = sinks.to(compute)[:, None, None].expand(num_heads, n, 1)
            probs = torch.softmax(torch.cat([scores, sink_col], dim=-1), dim=-1)[..., :n_keys]
        else:
            probs = torch.softmax(scores, dim=-1)
        # a row that sees no key (and has no sink) is 0, not NaN
        probs = torch.nan_to_num(probs, nan=0.0)
        out[a:b] = torch.einsum("hnk,khd->nhd", probs, v)
    return out.to(out_dtype)


def _ids(shapes):
    return [s.id for s in shapes]


def _inputs(shape, dtype=torch.float64, family="randn", seed=0):
    """Spec inputs on the CPU (unused cache slots NaN); float64 is the float32 inputs upcast, as validate does."""
    if dtype == torch.float64:
        return upcast(SPEC.make_inputs(shape, torch.float32, Fill(family, "cpu", seed)))
    return SPEC.make_inputs(shape, dtype, Fill(family, "cpu", seed))


def _both(inp):
    kw = {k: inp[k] for k in _ARGS if k in inp}
    new = paged_attention_reference(inp["q"], inp["k_cache"], inp["v_cache"], **kw)
    old = _loop_reference(inp["q"], inp["k_cache"], inp["v_cache"], **kw)
    return new, old


def _assert_same_float64(new, old):
    assert new.dtype == old.dtype == torch.float64
    # a finite output also says no NaN-poisoned cache slot was read
    assert bool(torch.isfinite(new).all())
    scale = max(1.0, old.abs().max().item())
    assert (new - old).abs().max().item() <= 1e-12 * scale


# Native dtypes compute in float32 in both, with the same dot products summed in another order (batched matmul
# blocking): each logit moves by a few ulps of its own size (u = 2^-24, |logit| up to ~200 in near_max) and exp
# turns that into the same relative change of a weight: 200 u ~ 1.2e-5, x4 headroom (measured worst 3.8e-6).
# bf16 output: that float32 difference can flip the final rounding by one bf16 ulp (at most 2^-7 relative).
_NATIVE_TOL = {torch.float32: {"rtol": 5e-5, "atol": 5e-5}, torch.bfloat16: {"rtol": 2.0**-7, "atol": 1e-5}}


def _set_budget(monkeypatch, nbytes):
    monkeypatch.setattr(reference, "STEP_BUDGET_BYTES", nbytes)
    monkeypatch.setattr(reference, "CPU_STEP_BUDGET_BYTES", nbytes)


class _Steps:
    """Wraps reference._attend: counts the steps and checks each one's tensors against the (CPU) budget: a batch
    of sequences with its keys and values, or one sequence's chunk of query rows with its scores alone."""

    def __init__(self, monkeypatch):
        self.calls = 0
        self.real = reference._attend
        monkeypatch.setattr(reference, "_attend", self)

    def __call__(self, q, k, v, visible, *a):
        self.calls += 1
        b, hkv, g, r, _ = q.shape
        scores = b * hkv * g * r * k.shape[2]  # [B, Hkv, group, R, L]
        nbytes = (scores if b == 1 else scores + k.numel() + v.numel()) * k.element_size()
        assert nbytes <= reference.CPU_STEP_BUDGET_BYTES or (b, r) == (1, 1)
        return self.real(q, k, v, visible, *a)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("shape", BOUNDARY, ids=_ids(BOUNDARY))
def test_float64_equals_the_loop_on_boundary_shapes(shape, family):
    _assert_same_float64(*_both(_inputs(shape, torch.float64, family)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("shape", BOUNDARY, ids=_ids(BOUNDARY))
def test_native_dtypes_match_the_loop_on_boundary_shapes(shape, family, dtype):
    new, old = _both(_inputs(shape, dtype, family))
    assert new.dtype == old.dtype == dtype
    assert bool(torch.isfinite(new).all())
    torch.testing.assert_close(new, old, **_NATIVE_TOL[dtype])


_HEADS = {"num_heads": 4, "num_kv_heads": 2, "head_dim": 64, "block_size": 16}
DECODE_64 = Shape(num_seqs=64, q_len=1, context=36, **_HEADS)
# empty sequences of every kind (no query, no key, neither), two equal decode sequences sharing a bucket, prefills
MIXED_EMPTY = Shape(num_seqs=8, q_len=(1, 0, 30, 0, 1, 7, 0, 1), context=(20, 0, 10, 9, 20, 0, 0, 5), **_HEADS)
# a decode sequence between two prefills, with every feature that shapes a row's keys
PREFILL = Shape(num_seqs=3, q_len=(70, 1, 33), context=(10, 40, 50), window_left=12, softcap=6.0, sinks=1, **_HEADS)


# one step per (query tokens, keys) bucket at the default budget: MIXED_EMPTY has (1, 21) twice, (30, 40), (7, 7)
# and (1, 6)
@pytest.mark.parametrize(
    "shape, buckets", [(DECODE_64, 1), (MIXED_EMPTY, 4), (PREFILL, 3)], ids=["decode64", "mixed-empty", "prefill"]
)
def test_float64_equals_the_loop_on_batches(shape, buckets, monkeypatch):
    steps = _Steps(monkeypatch)
    _assert_same_float64(*_both(_inputs(shape)))
    assert steps.calls == buckets


def test_a_small_budget_cuts_prefill_rows_and_decode_batches(monkeypatch):
    # 4000 float64 elements: 12 rows of a prefill's scores (4 heads x 80 or 83 keys) a step; the decode sequence's
    # keys and values (2 x 2 x 41 x 64) pass the budget too, so it runs alone
    _set_budget(monkeypatch, 4000 * 8)
    steps = _Steps(monkeypatch)
    _assert_same_float64(*_both(_inputs(PREFILL, family="near_max")))
    assert steps.calls == math.ceil(70 / 12) + math.ceil(33 / 12) + 1
    # 24000 elements: two decode sequences of 37 keys a step (2 x 2 x 37 x 64 + 4 x 37 = 9620 elements each)
    _set_budget(monkeypatch, 24000 * 8)
    steps.calls = 0
    _assert_same_float64(*_both(_inputs(DECODE_64)))
    assert steps.calls == 64 // 2


def test_a_budget_below_one_row_still_runs_a_row_at_a_time(monkeypatch):
    _set_budget(monkeypatch, 8)
    steps = _Steps(monkeypatch)
    _assert_same_float64(*_both(_inputs(PREFILL)))
    assert steps.calls == 70 + 1 + 33


def test_rows_outside_every_sequence_and_rows_that_see_no_key_are_zero():
    for sinks in (0, 1):
        inp = _inputs(Shape(num_seqs=2, q_len=(1, 12), context=(9, 3), sinks=sinks, **_HEADS))
        # 5 rows before the first sequence and 3 past the last; sequence 1 keeps 4 of its 15 keys, so its first 8
        # (causal, bottom-right aligned) rows see none
        q = inp["q"]
        before, after = (torch.randn(m, *q.shape[1:], dtype=q.dtype) for m in (5, 3))
        inp["q"] = torch.cat([before, q, after])
        inp["cu_seqlens_q"] = inp["cu_seqlens_q"] + 5
        inp["seqused_k"] = torch.tensor([10, 4], dtype=torch.int32)
        new, old = _both(inp)
        _assert_same_float64(new, old)
        assert bool((new[:5] == 0).all()) and bool((new[-3:] == 0).all())
        assert bool((new[6:14] == 0).all()) and bool((new[14:18] != 0).all())


def test_a_large_decode_batch_takes_few_steps(monkeypatch):
    """2048 decode sequences of 64 keys, which the loop took 2048 Python iterations for: a few dozen steps at the
    CPU budget (8448 float64 elements a sequence), one at the GPU's."""
    shape = Shape(num_seqs=2048, q_len=1, context=63, num_heads=4, num_kv_heads=2, head_dim=32, block_size=16)
    inp = _inputs(shape)
    steps = _Steps(monkeypatch)
    new, old = _both(inp)
    _assert_same_float64(new, old)
    assert steps.calls <= 32
    _set_budget(monkeypatch, reference.STEP_BUDGET_BYTES)
    steps.calls = 0
    kw = {k: inp[k] for k in _ARGS if k in inp}
    _assert_same_float64(paged_attention_reference(inp["q"], inp["k_cache"], inp["v_cache"], **kw), old)
    assert steps.calls == 1
