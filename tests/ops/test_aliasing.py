"""Outputs that alias: an expanded (stride-0) output, or one that overlaps an input, is refused by name before
anything is written; exact in place is accepted where the op documents it, and the views a caller really passes
(the two halves of a joint KV cache) still are."""

import pytest
import torch
from conftest import DEVICE

from tritonkit.ops import fused_moe, paged_attention, reshape_and_cache, rms_norm, silu_and_mul, vllm


def _randn(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    return torch.randn(*shape, generator=g, device=DEVICE).to(dtype)


def _refused(match, call, *watched):
    """``call()`` raises a ValueError matching ``match`` and leaves every tensor in ``watched`` as it was."""
    before = [t.clone() for t in watched]
    with pytest.raises(ValueError, match=match):
        call()
    for t, b in zip(watched, before):
        assert torch.equal(t.view(torch.uint8), b.view(torch.uint8)), "a refused call wrote"


# -- rms_norm, fused_add_rms_norm, silu_and_mul (vLLM's forms) ------------------------------------------------------
def test_rms_norm_refuses_an_expanded_out():
    x, w = _randn(4, 8), _randn(8, seed=1)
    row = torch.zeros(1, 8, device=DEVICE)
    _refused("^out must not have elements that share memory", lambda: vllm.rms_norm(row.expand(4, 8), x, w, 1e-6), row)


def test_rms_norm_refuses_an_out_overlapping_input_or_weight():
    base = _randn(9, 8)
    w = _randn(8, seed=1)
    _refused("^out must not overlap input", lambda: vllm.rms_norm(base[1:], base[:8], w, 1e-6), base)
    wbuf = _randn(2, 8, seed=2)
    _refused("^out must not overlap weight", lambda: vllm.rms_norm(wbuf, _randn(2, 8), wbuf[1], 1e-6), wbuf)


@pytest.mark.parametrize("hidden", [8, 16384], ids=["one_pass", "two_pass"])
def test_rms_norm_exactly_in_place(hidden):
    x, w = _randn(3, hidden), _randn(hidden, seed=1)
    want = rms_norm(x, w, 1e-6)
    vllm.rms_norm(x, x, w, 1e-6)
    assert torch.equal(x, want)


def test_fused_add_rms_norm_refuses_expanded_or_weight_sharing_buffers():
    w = _randn(8, seed=1)
    row = _randn(1, 8, seed=2)
    res = _randn(4, 8, seed=3)
    _refused(
        "^input must not have elements that share memory",
        lambda: vllm.fused_add_rms_norm(row.expand(4, 8), res, w, 1e-6),
        row,
        res,
    )
    x = _randn(4, 8, seed=4)
    _refused(
        "^residual must not have elements that share memory",
        lambda: vllm.fused_add_rms_norm(x, row.expand(4, 8), w, 1e-6),
        row,
        x,
    )
    _refused("^input must not overlap weight", lambda: vllm.fused_add_rms_norm(x, res, x[2], 1e-6), x, res)
    _refused("^residual must not overlap input", lambda: vllm.fused_add_rms_norm(x, x, w, 1e-6), x)


def test_silu_and_mul_refuses_an_expanded_out_or_one_overlapping_input():
    x = _randn(4, 16)
    row = torch.zeros(1, 8, device=DEVICE)
    _refused("^out must not have elements that share memory", lambda: vllm.silu_and_mul(row.expand(4, 8), x), row)
    _refused("^out must not overlap input", lambda: vllm.silu_and_mul(x[:, 4:12], x), x)
    out = torch.empty(4, 8, device=DEVICE)
    vllm.silu_and_mul(out, x)
    assert torch.equal(out, silu_and_mul(x))


# -- paged_attention(out=...) ---------------------------------------------------------------------------------------
def _attention_args(tokens=3):
    k = _randn(2, 16, 1, 8, dtype=torch.bfloat16, seed=5)
    v = _randn(2, 16, 1, 8, dtype=torch.bfloat16, seed=6)
    return (
        k,
        v,
        dict(
            cu_seqlens_q=torch.tensor([0, tokens], dtype=torch.int32, device=DEVICE),
            seqused_k=torch.tensor([5], dtype=torch.int32, device=DEVICE),
            block_table=torch.tensor([[1]], dtype=torch.int32, device=DEVICE),
            max_seqlen_q=tokens,
            max_seqlen_k=5,
        ),
    )


def test_paged_attention_refuses_an_out_overlapping_q_or_the_cache():
    k, v, kw = _attention_args()
    base = _randn(4, 2, 8, dtype=torch.bfloat16)
    _refused("^out must not overlap q", lambda: paged_attention(base[:3], k, v, out=base[1:], **kw), base)
    q = base[:3].clone()
    _refused("^out must not overlap q", lambda: paged_attention(q, k, v, out=q, **kw), q)
    _refused(
        "^out must not overlap v_cache", lambda: paged_attention(q, k, v, out=v.view(-1)[:48].view(3, 2, 8), **kw), v
    )


def test_paged_attention_refuses_an_expanded_out():
    k, v, kw = _attention_args()
    q = _randn(3, 2, 8, dtype=torch.bfloat16)
    row = torch.zeros(1, 2, 8, dtype=torch.bfloat16, device=DEVICE)
    _refused(
        "^out must not have elements that share memory",
        lambda: paged_attention(q, k, v, out=row.expand(3, 2, 8), **kw),
        row,
    )
    out = torch.empty(3, 2, 8, dtype=torch.bfloat16, device=DEVICE)
    assert torch.equal(paged_attention(q, k, v, out=out, **kw), paged_attention(q, k, v, **kw))


# -- reshape_and_cache ----------------------------------------------------------------------------------------------
def _kv(tokens=3):
    return _randn(tokens, 2, 8, seed=7), _randn(tokens, 2, 8, seed=8), torch.tensor([0, 5, 9], device=DEVICE)


def test_reshape_and_cache_refuses_one_cache_for_both():
    key, value, slots = _kv()
    cache = torch.zeros(3, 4, 2, 8, device=DEVICE)
    _refused(
        "^value_cache must not overlap key_cache",
        lambda: vllm.reshape_and_cache_flash(key, value, cache, cache, slots, "auto", None, None),
        cache,
    )


def test_reshape_and_cache_refuses_an_expanded_cache_or_one_over_its_inputs():
    key, value, slots = _kv()
    block = torch.zeros(1, 4, 2, 8, device=DEVICE)
    other = torch.zeros(3, 4, 2, 8, device=DEVICE)
    _refused(
        "^key_cache must not have elements that share memory",
        lambda: reshape_and_cache(key, value, block.expand(3, 4, 2, 8), other, slots),
        block,
        other,
    )
    buf = torch.zeros(4 * 2 * 8 * 3 + 48, device=DEVICE)
    k_in = buf[:48].view(3, 2, 8)
    _refused(
        "^key_cache must not overlap key",
        lambda: reshape_and_cache(k_in, value, buf[:-48].view(3, 4, 2, 8), other, slots),
        buf,
        other,
    )


def test_reshape_and_cache_writes_the_two_halves_of_a_joint_cache():
    key, value, slots = _kv()
    kv = torch.zeros(3, 2, 4, 2, 8, device=DEVICE)  # [num_blocks, 2, block_size, heads, head_dim]
    reshape_and_cache(key, value, kv[:, 0], kv[:, 1], slots)
    for t, s in enumerate(slots.tolist()):
        assert torch.equal(kv[s // 4, 0, s % 4], key[t]) and torch.equal(kv[s // 4, 1, s % 4], value[t])


# -- fused_moe(out=...) ---------------------------------------------------------------------------------------------
def _moe_inputs(quant="none"):
    from tritonkit.ops.fused_moe import spec as moe_spec
    from tritonkit.testing import Fill

    shape = moe_spec.Shape(num_tokens=2, hidden=32, inter=16, experts=4, topk=2, quant=quant, local=3)
    inputs = moe_spec.make_inputs(shape, torch.bfloat16, Fill("randn", DEVICE, 0))
    inputs.pop("act_dtype")
    pos, kw = moe_spec._split(inputs)
    return dict(zip(("hidden_states", "w1", "w2", "topk_weights", "topk_ids"), pos)) | kw


def _moe_sequence(args, out):
    pos = ("hidden_states", "w1", "w2", "topk_weights", "topk_ids")
    return fused_moe(*(args[k] for k in pos), **{k: v for k, v in args.items() if k not in pos}, out=out)


def _at_the_start_of_out(t, m, k):
    """A copy of ``t`` whose first bytes are also the first bytes of a bf16 ``[m, k]`` out; (buffer, copy, out)."""
    nbytes = t.numel() * t.element_size()
    buf = torch.zeros(max(nbytes, m * k * 2), dtype=torch.uint8, device=DEVICE)
    shared = buf[:nbytes].view(t.dtype).view(t.shape)
    shared.copy_(t)
    return buf, shared, buf[: m * k * 2].view(torch.bfloat16).view(m, k)


# decode's slot blocks (M <= 2) write out while reading topk_weights and topk_ids: a shared byte was a wrong result
_MOE_SHARED = [
    ("none", "topk_weights"),
    ("none", "topk_ids"),
    ("none", "expert_map"),
    ("none", "w1"),
    ("none", "w2"),
    ("fp8_channel", "w1_scale"),
    ("fp8_channel", "w2_scale"),
]


@pytest.mark.parametrize("quant, name", _MOE_SHARED, ids=[n for _, n in _MOE_SHARED])
def test_fused_moe_refuses_an_out_overlapping_an_input(quant, name):
    args = _moe_inputs(quant)
    m, k = args["hidden_states"].shape
    buf, args[name], out = _at_the_start_of_out(args[name], m, k)
    _refused(f"^out must not overlap {name}", lambda: _moe_sequence(args, out), buf)


def test_fused_moe_refuses_an_out_over_part_of_hidden_states_but_takes_it_exactly():
    args = _moe_inputs()
    x = args["hidden_states"]
    m, k = x.shape
    buf = torch.zeros(m + 1, k, dtype=x.dtype, device=DEVICE)
    buf[:m] = x
    args["hidden_states"] = buf[:m]
    _refused("^out must not overlap hidden_states", lambda: _moe_sequence(args, buf[1:]), buf)
    want = _moe_sequence(dict(args, hidden_states=x), None)
    out = buf[:m]
    assert _moe_sequence(args, out) is out
    assert torch.equal(out, want)
