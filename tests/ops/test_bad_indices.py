"""Hostile index values (slots, cu_seqlens_q, seqused_k, block ids, positions, max_seqlen_q): no kernel writes
outside its outputs or reads outside its inputs, nothing crashes, and ``TRITONKIT_CHECK_INDICES=1`` names the
argument, the first bad value and its position.

Every output lives inside a larger buffer whose guard bytes are compared after the call; every input a bad index
could reach lives inside NaN (an out-of-bounds read would turn up as NaN where the op promises finite values)."""

import math
import re

import pytest
import torch
from conftest import DEVICE

from tritonkit.ops import vllm
from tritonkit.ops import paged_attention, reshape_and_cache, rotary_embedding

GUARD = 4096  # elements each side of a tensor under test
INT32_MAX = 2**31 - 1


def guarded(shape, dtype, poison):
    """``(buffer, view)``: a ``shape`` view in the middle of a buffer filled with ``poison``, GUARD elements each
    side, so a stray write changes guard bytes and a stray read meets ``poison``."""
    n = math.prod(shape)
    buf = torch.full((n + 2 * GUARD,), poison, dtype=dtype, device=DEVICE)
    return buf, buf[GUARD : GUARD + n].view(shape)


def assert_guards_intact(buf, before, name):
    b = buf.view(torch.uint8)
    a = before.view(torch.uint8)
    g = GUARD * buf.element_size()
    for part, lo, hi in (("before", 0, g), ("after", b.numel() - g, b.numel())):
        changed = (b[lo:hi] != a[lo:hi]).nonzero()
        assert not changed.numel(), f"{name}: the guard {part} it changed at byte {int(changed[0]) + lo - g}"


@pytest.fixture
def check_indices(monkeypatch):
    monkeypatch.setenv("TRITONKIT_CHECK_INDICES", "1")


# -- reshape_and_cache ----------------------------------------------------------------------------------------------
NUM_BLOCKS, BLOCK_SIZE, HEADS, D = 3, 4, 2, 8
NUM_SLOTS = NUM_BLOCKS * BLOCK_SIZE
SLOTS = {  # slots of tokens 1 and 2 (tokens 0 and 3 keep slots 5 and 0, which must land)
    "one_past_the_cache": (NUM_SLOTS, -1),
    "2^40": (2**40, 7),
    "int32_max": (INT32_MAX, NUM_SLOTS + 1000),
    "negative_padding": (-1, -7),
}


def _reshape_inputs(slot_dtype, bad, num_blocks=NUM_BLOCKS, fp8=False):
    g = torch.Generator(device=DEVICE).manual_seed(0)
    key = torch.randn(4, HEADS, D, generator=g, device=DEVICE)
    value = torch.randn(4, HEADS, D, generator=g, device=DEVICE)
    shape = (num_blocks, BLOCK_SIZE, HEADS, D)
    dtype, poison = (torch.uint8, 0xA5) if fp8 else (torch.float32, math.nan)
    kbuf, kc = guarded(shape, dtype, poison)
    vbuf, vc = guarded(shape, dtype, poison)
    slots = torch.tensor([5, *bad, 0], dtype=slot_dtype, device=DEVICE)
    return key, value, (kbuf, kc), (vbuf, vc), slots


@pytest.mark.parametrize("slot_dtype", [torch.int64, torch.int32], ids=str)
@pytest.mark.parametrize("case", SLOTS)
@pytest.mark.parametrize("fp8", [False, True], ids=["auto", "fp8"])
def test_reshape_and_cache_drops_slots_outside_the_cache(case, slot_dtype, fp8):
    bad = SLOTS[case]
    if slot_dtype == torch.int32 and max(bad) > INT32_MAX:
        pytest.skip("not an int32 value")
    key, value, (kbuf, kc), (vbuf, vc), slots = _reshape_inputs(slot_dtype, bad, fp8=fp8)
    before_k, before_v = kbuf.clone(), vbuf.clone()
    scale = torch.ones(1, device=DEVICE)
    reshape_and_cache(key, value, kc, vc, slots, kv_cache_dtype="fp8" if fp8 else "auto", k_scale=scale, v_scale=scale)
    assert_guards_intact(kbuf, before_k, "key_cache")
    assert_guards_intact(vbuf, before_v, "value_cache")
    want_k, want_v = before_k[GUARD:-GUARD].clone().view(kc.shape), before_v[GUARD:-GUARD].clone().view(vc.shape)
    for t, s in enumerate(slots.tolist()):
        if 0 <= s < NUM_SLOTS:
            for want, src in ((want_k, key), (want_v, value)):
                want[s // BLOCK_SIZE, s % BLOCK_SIZE] = (
                    src[t].to(torch.float8_e4m3fn).view(torch.uint8) if fp8 else src[t]
                )
    # the good tokens landed, and nothing else in the caches changed (bitwise: NaN poison included)
    assert torch.equal(kc.view(torch.uint8), want_k.view(torch.uint8))
    assert torch.equal(vc.view(torch.uint8), want_v.view(torch.uint8))


def test_reshape_and_cache_into_a_cache_of_no_blocks_writes_nothing():
    key, value, (kbuf, kc), (vbuf, vc), slots = _reshape_inputs(torch.int64, (1, 2**40), num_blocks=0)
    before_k, before_v = kbuf.clone(), vbuf.clone()
    one = torch.ones(1, device=DEVICE)
    vllm.reshape_and_cache_flash(key, value, kc, vc, slots, "auto", one, one)
    assert_guards_intact(kbuf, before_k, "key_cache")
    assert_guards_intact(vbuf, before_v, "value_cache")


@pytest.mark.parametrize("case", ["one_past_the_cache", "2^40", "int32_max"])
def test_checked_slot_mapping_names_the_first_bad_slot(check_indices, case):
    key, value, (kbuf, kc), (vbuf, vc), slots = _reshape_inputs(torch.int64, SLOTS[case])
    before = kbuf.clone()
    with pytest.raises(ValueError, match=rf"slot_mapping .*below {NUM_SLOTS}, got {SLOTS[case][0]} at \(1,\)"):
        reshape_and_cache(key, value, kc, vc, slots)
    assert torch.equal(kbuf.view(torch.uint8), before.view(torch.uint8))


def test_checked_slot_mapping_lets_padding_through(check_indices):
    key, value, (_, kc), (_, vc), slots = _reshape_inputs(torch.int64, (-1, 7))
    reshape_and_cache(key, value, kc, vc, slots)
    assert torch.equal(kc[1, 3], key[2])


# -- rotary_embedding -----------------------------------------------------------------------------------------------
def _rotary_inputs(positions):
    g = torch.Generator(device=DEVICE).manual_seed(1)
    max_pos, rot = 5, 8
    cbuf, cache = guarded((max_pos, rot), torch.float32, 7.0)  # a stray read would rotate by 7, not NaN
    cache.copy_(torch.randn(max_pos, rot, generator=g, device=DEVICE))
    qbuf, q = guarded((len(positions), 2, rot), torch.float32, math.nan)
    q.copy_(torch.randn(q.shape, generator=g, device=DEVICE))
    return torch.tensor(positions, dtype=torch.int64, device=DEVICE), qbuf, q, cache


@pytest.mark.parametrize("bad", [5, -1, 2**40, INT32_MAX])
def test_rotary_embedding_position_past_the_cache_is_nan_and_reads_nothing_else(bad):
    positions, qbuf, q, cache = _rotary_inputs([3, bad, 0])
    before = qbuf.clone()
    good = q.clone()
    rotary_embedding(positions[[0, 2]], good[[0, 2]].contiguous(), None, cache)
    rotary_embedding(positions, q, None, cache)
    assert_guards_intact(qbuf, before, "q")
    assert torch.isnan(q[1]).all()  # documented: the bug shows; 7.0 from the guard would be finite
    ref = good[[0, 2]].clone()
    rotary_embedding(positions[[0, 2]], ref, None, cache)
    assert torch.equal(q[[0, 2]], ref)


def test_checked_positions_name_the_first_bad_position(check_indices):
    positions, qbuf, q, cache = _rotary_inputs([3, 4, 9, -1])
    before = qbuf.clone()
    with pytest.raises(
        ValueError,
        match=r"positions must hold rows of cos_sin_cache \(5\) in \[0, 5\), got 9 at "
        r"\(2,\)",
    ):
        vllm.rotary_embedding(positions, q.view(4, 16), None, 8, cache, True)
    assert torch.equal(qbuf.view(torch.uint8), before.view(torch.uint8))


# -- paged_attention / unified_attention ----------------------------------------------------------------------------
# three sequences: a long decode (KV splits and their merge), a prefill (9 queries > decode's 8 at group 2), a short
# decode; 11 query tokens
PA_BLOCKS, PA_BS, PA_WIDTH, PA_D = 48, 16, 40, 16
CLEAN = {"cu": [0, 1, 10, 11], "seqused": [600, 12, 3], "max_q": 9}
ROWS = {0: slice(0, 1), 1: slice(1, 10), 2: slice(10, 11)}
# name: (change, sequences whose rows must equal the clean run's, must be 0, must be written and finite (a read
# of the NaN around the caches would make them NaN), must be left unwritten; the error TRITONKIT_CHECK_INDICES=1
# gives)
HOSTILE = {
    "cu_seqlens_q_past_the_tokens": (
        {"cu": [0, 1, 10, 16]},
        (0, 1),
        (),
        (),
        (2,),
        r"cu_seqlens_q must hold token offsets into q \(11 tokens\) in \[0, 12\), got "
        r"16 at \(3,\)",
    ),
    "cu_seqlens_q_negative": (
        {"cu": [0, 1, -512, 11]},
        (0,),
        (),
        (),
        (1, 2),
        r"cu_seqlens_q .* in \[0, 12\), got -512 at \(2,\)",
    ),
    "cu_seqlens_q_decreasing": (
        {"cu": [0, 5, 1, 11]},
        (),
        (),
        (),
        (),
        r"cu_seqlens_q must be non-decreasing, got 1 at \(2,\) after 5 at \(1,\)",
    ),
    "seqused_k_past_the_block_table": (
        {"seqused": [600, 647, 3]},
        (0, 2),
        (1,),
        (),
        (),
        r"seqused_k must hold key counts .* in \[0, 641\), got 647 at \(1,\)",
    ),
    "seqused_k_negative": ({"seqused": [600, 12, -5]}, (0, 1), (2,), (), (), r"seqused_k .* got -5 at \(2,\)"),
    "block_id_num_blocks": (
        {"block": (1, 0, PA_BLOCKS)},
        (0, 2),
        (),
        (1,),
        (),
        rf"block_table must hold block ids of k_cache's {PA_BLOCKS} blocks in \[0, {PA_BLOCKS}\), "
        rf"got {PA_BLOCKS} at \(1, 0\)",
    ),
    "block_id_minus_one": ({"block": (1, 0, -1)}, (0, 2), (), (1,), (), r"block_table .* got -1 at \(1, 0\)"),
    "block_id_int32_max": (
        {"block": (0, 30, INT32_MAX)},
        (1, 2),
        (),
        (0,),
        (),
        rf"block_table .* got {INT32_MAX} at \(0, 30\)",
    ),
    "max_seqlen_q_below_the_longest_query": (
        {"max_q": 1},
        (0, 2),
        (),
        (),
        (),
        r"max_seqlen_q must be at least every query length .* it is 1, but the "
        r"query length .* at \(1,\) is 9",
    ),
}

# cases whose change moves the launch plan, so the kept sequences match the clean run up to rounding, not bit for bit:
# max_seqlen_q 1 puts the batch on the narrow decode rows, split from 32 keys, where 9 took the wide rows from 256
PLAN_CHANGES = {"max_seqlen_q_below_the_longest_query"}


def _attention(change=None, form="paged_attention"):
    """The case with ``change`` applied; returns (out, out's buffer and its copy before the call, the call)."""
    change = change or {}
    g = torch.Generator(device=DEVICE).manual_seed(2)
    cache_shape = (PA_BLOCKS, PA_BS, 1, PA_D)
    _, k = guarded(cache_shape, torch.bfloat16, math.nan)  # a stray read brings NaN into the output
    _, v = guarded(cache_shape, torch.bfloat16, math.nan)
    k.copy_(torch.randn(cache_shape, generator=g, device=DEVICE))
    v.copy_(torch.randn(cache_shape, generator=g, device=DEVICE))
    _, q = guarded((11, 2, PA_D), torch.bfloat16, math.nan)
    q.copy_(torch.randn(q.shape, generator=g, device=DEVICE))
    table = torch.randint(0, PA_BLOCKS, (3, PA_WIDTH), generator=g, device=DEVICE, dtype=torch.int32)
    if "block" in change:
        s, j, bid = change["block"]
        table[s, j] = bid
    cu = torch.tensor(change.get("cu", CLEAN["cu"]), dtype=torch.int32, device=DEVICE)
    seqused = torch.tensor(change.get("seqused", CLEAN["seqused"]), dtype=torch.int32, device=DEVICE)
    obuf, out = guarded(q.shape, torch.bfloat16, math.nan)
    before = obuf.clone()
    max_q = change.get("max_q", CLEAN["max_q"])
    if form == "paged_attention":
        paged_attention(
            q,
            k,
            v,
            cu_seqlens_q=cu,
            seqused_k=seqused,
            block_table=table,
            max_seqlen_q=max_q,
            max_seqlen_k=600,
            out=out,
        )
    else:
        vllm.unified_attention(
            q, k, v, out, cu, max_q, seqused, 600, PA_D**-0.5, True, (-1, -1), table, 0, None, None, None
        )
    return out, obuf, before


@pytest.fixture(scope="module")
def clean_out():
    return _attention()[0]


@pytest.mark.parametrize("case", HOSTILE)
def test_paged_attention_stays_inside_its_tensors_whatever_the_indices(case, clean_out):
    change, kept, zero, finite, unwritten, _ = HOSTILE[case]
    out, obuf, before = _attention(change)
    assert_guards_intact(obuf, before, "out")
    for s in kept:
        if case in PLAN_CHANGES:
            # another launch plan (other split points): the same sums up to rounding
            torch.testing.assert_close(out[ROWS[s]], clean_out[ROWS[s]], rtol=0, atol=1e-2, msg=f"sequence {s} changed")
        else:
            assert torch.equal(out[ROWS[s]], clean_out[ROWS[s]]), f"sequence {s} changed"
    for s in zero:
        assert torch.equal(out[ROWS[s]], torch.zeros_like(out[ROWS[s]])), f"sequence {s} saw keys"
    for s in finite:
        assert torch.isfinite(out[ROWS[s]]).all(), f"sequence {s} read outside the caches"
    for s in unwritten:
        assert torch.isnan(out[ROWS[s]]).all(), f"sequence {s} was written"
    # whatever a hostile sequence got, it read nothing outside q and the caches: their NaN guards never show up
    written = ~torch.isnan(out).all(dim=(1, 2))
    assert torch.isfinite(out[written]).all()


def test_unified_attention_drops_a_sequence_past_the_tokens(clean_out):
    out, obuf, before = _attention(HOSTILE["cu_seqlens_q_past_the_tokens"][0], form="unified_attention")
    assert_guards_intact(obuf, before, "out")
    assert torch.equal(out[:10], clean_out[:10]) and torch.isnan(out[10]).all()


@pytest.mark.parametrize("case", HOSTILE)
def test_checked_attention_indices_name_the_argument_value_and_position(check_indices, case):
    change, *_, message = HOSTILE[case]
    with pytest.raises(ValueError, match=message):
        _attention(change)


def test_paged_attention_refuses_a_cache_of_no_blocks():
    q = torch.zeros(1, 1, 8, dtype=torch.bfloat16, device=DEVICE)
    k = torch.zeros(0, 16, 1, 8, dtype=torch.bfloat16, device=DEVICE)
    one = torch.ones(1, dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError, match="k_cache must have num_blocks >= 1"):
        paged_attention(
            q,
            k,
            k,
            cu_seqlens_q=torch.tensor([0, 1], dtype=torch.int32, device=DEVICE),
            seqused_k=one,
            block_table=one.view(1, 1),
            max_seqlen_q=1,
            max_seqlen_k=1,
        )


# -- fp8 scale tensors ----------------------------------------------------------------------------------------------
def _fp8_attention_inputs():
    from tritonkit.ops import get_spec
    from tritonkit.spec import Shape
    from tritonkit.testing import Fill

    shape = Shape(
        num_seqs=2,
        q_len=(1, 5),
        context=(20, 3),
        num_heads=4,
        num_kv_heads=2,
        head_dim=32,
        block_size=16,
        kv_dtype="fp8",
    )
    inp = get_spec("paged_attention").make_inputs(shape, torch.bfloat16, Fill("randn", DEVICE, 0))
    kw = {k: inp[k] for k in ("cu_seqlens_q", "seqused_k", "block_table", "max_seqlen_q", "max_seqlen_k")}
    return inp["q"], inp["k_cache"], inp["v_cache"], kw, inp["k_scale"]


def test_a_zero_k_scale_tensor_makes_every_row_nan_unchecked():
    # documented: the value is not read on the host; 0 times a masked key's -inf logit is NaN
    q, k, v, kw, scale = _fp8_attention_inputs()
    out = paged_attention(q, k, v, k_scale=torch.zeros_like(scale), v_scale=scale, **kw)
    assert torch.isnan(out).all()


@pytest.mark.parametrize("value, needle", [(0.0, "> 0"), (-1.0, "> 0"), (math.inf, "finite"), (math.nan, "finite")])
@pytest.mark.parametrize("name", ["k_scale", "v_scale"])
def test_checked_scale_tensor_is_refused_as_a_float_scale_is(check_indices, name, value, needle):
    q, k, v, kw, scale = _fp8_attention_inputs()
    scales = {"k_scale": scale, "v_scale": scale, name: torch.full_like(scale, value)}
    out = torch.full_like(q, 7.0)
    with pytest.raises(ValueError, match=rf"{name} must be {re.escape(needle)}, got {value} at \(0,\)"):
        paged_attention(q, k, v, out=out, **scales, **kw)
    assert bool((out == 7.0).all())
    # the float form of the same value: the same words
    with pytest.raises(ValueError, match=rf"{name} must be {re.escape(needle)}, got {value}"):
        paged_attention(q, k, v, **{**scales, name: value}, **kw)
