"""qk_norm_rope_cache: the spec's shapes against the float64 oracle, the fp8 cache to the bit, hostile slots, argument
errors before any write, vLLM 0.34's two call forms, tracing, one compile over the sweep, the unfused peer.

The op is imported from its folder (not yet registered in ``tritonkit.ops``)."""

import math

import pytest
import torch
from compile_keys import Recorder, specialization_keys
from conftest import DEVICE

from tritonkit.bench import providers as P
from tritonkit.models import MODELS, NUM_TOKENS_SWEEP
from tritonkit.ops.qk_norm_rope_cache import api, vllm
from tritonkit.ops.qk_norm_rope_cache.api import qk_norm_rope_cache
from tritonkit.ops.qk_norm_rope_cache.reference import norm_rope, quantize_e4m3
from tritonkit.ops.qk_norm_rope_cache.spec import SPEC, _cos_sin_cache, _shape
from tritonkit.testing import Fill, MetaFill, assert_valid

DTYPES = [torch.float16, torch.bfloat16, torch.float32]
E4M3 = torch.float8_e4m3fn


@pytest.mark.parametrize("shape", SPEC.boundary, ids=lambda s: s.id)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_boundary_randn(shape, dtype):
    assert_valid(SPEC, shape, dtype, "randn", device=DEVICE)


HARD = [
    _shape(3, 4, 1, 256, 256, kv="fp8", bs=4, padding=3, w_fp32=1),
    _shape(7, 6, 2, 128, 64, neox=0, kv="fp8", padding=4, pos_int32=1),
    _shape(5, 4, 2, 128, 128, norm=0, kv="fp8", padding=2),
    _shape(6, 2, 2, 80, 32, gemma=1, bs=8, w_fp32=1),
]


@pytest.mark.parametrize("shape", HARD, ids=lambda s: s.id)
@pytest.mark.parametrize("family", [f for f in SPEC.families if f != "randn"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_hard_families(shape, dtype, family):
    assert_valid(SPEC, shape, dtype, family, device=DEVICE)


def _bits(t):
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def _setup(t=6, hq=4, hk=2, d=64, rot=64, bs=4, nb=4, dtype=torch.bfloat16, fp8=False, seed=0, slots=None):
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    qkv = torch.randn(t, (hq + 2 * hk) * d, generator=g, device=DEVICE).to(dtype)
    pos = torch.randint(0, 64, (t,), generator=g, device=DEVICE)
    cs = _cos_sin_cache(64, rot, torch.float32, DEVICE)
    cdt = E4M3 if fp8 else dtype
    kc = torch.zeros(nb, bs, hk, d, dtype=cdt, device=DEVICE)
    vc = torch.zeros_like(kc)
    if slots is None:
        slots = torch.randperm(nb * bs, generator=g, device=DEVICE)[:t]
    qw = 1 + 0.1 * torch.randn(d, generator=g, device=DEVICE).to(dtype)
    kw = 1 + 0.1 * torch.randn(d, generator=g, device=DEVICE).to(dtype)
    return dict(qkv=qkv, positions=pos, cos_sin_cache=cs, key_cache=kc, value_cache=vc, slot_mapping=slots,
                num_q_heads=hq, num_kv_heads=hk, q_weight=qw, k_weight=kw)  # fmt: skip


def _call(a, **kw):
    a = {**a, **kw}
    pos = [a.pop(n) for n in ("qkv", "positions", "cos_sin_cache", "key_cache", "value_cache", "slot_mapping")]
    return qk_norm_rope_cache(*pos, **a)


def _scales():
    return torch.tensor([0.05], device=DEVICE), torch.tensor([0.0731], device=DEVICE)


def _fp8_cache_call(a, ks, vs):
    """vLLM's fused_qknorm_rope_cache on ``_setup``'s 6 tokens (4 q and 2 kv heads of 64) into its fp8 caches; asserts
    each written cache row holds the reference's quantization of the returned k and of v, bit for bit, and returns
    the returned v."""
    t, hk, d = 6, 2, 64
    q, k, v = vllm.fused_qknorm_rope_cache(
        a["qkv"], a["q_weight"], a["k_weight"], a["cos_sin_cache"], a["positions"], a["slot_mapping"],
        a["key_cache"], a["value_cache"], 4, hk, d, 64, 1e-6, 0.0, "fp8", ks, vs,
    )  # fmt: skip
    s = a["slot_mapping"]
    ok = s >= 0
    got_k = a["key_cache"][s[ok] // 4, s[ok] % 4]
    got_v = a["value_cache"][s[ok] // 4, s[ok] % 4]
    assert torch.equal(_bits(got_k), _bits(quantize_e4m3(k.view(t, hk, d)[ok], ks)))
    assert torch.equal(_bits(got_v), _bits(quantize_e4m3(v.view(t, hk, d)[ok], vs)))
    return v


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fp8_cache_holds_the_quantized_k_and_v_the_op_returns(dtype):
    # k in the cache is exactly the returned k (qkv's dtype) quantized, v exactly the input v quantized: bit for bit
    a = _setup(dtype=dtype, fp8=True, slots=torch.tensor([5, -1, 0, 15, 3, 9], device=DEVICE))
    v = _fp8_cache_call(a, *_scales())
    # v is the input's v, every bit
    assert torch.equal(_bits(v), _bits(a["qkv"][:, 6 * 64 :].contiguous()))


@pytest.mark.parametrize("scale", [7.0, 0.05, 4.36e-6, 3.0e-7, 1.0e30], ids=["7", "0.05", "min", "below", "huge"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fp8_cache_divided_through_the_reciprocal_holds_the_reference_bits(monkeypatch, dtype, scale):
    """The GPU's division of an fp8 cache's values by the scale (Markstein's correction from RN(1 / scale), where
    the scale is in the proven range; div_rn outside it), run under the interpreter with its fma fused: the codes
    equal the reference's quantization of the returned k and of v, bit for bit, for values spread over e4m3's
    binades (subnormal codes, ties, saturation) and scales at, below and far above the proven range."""
    from fused_fma import fused_fma

    with fused_fma(monkeypatch):
        g = torch.Generator(device=DEVICE).manual_seed(7)
        a = _setup(t=6, dtype=dtype, fp8=True, slots=torch.tensor([5, -1, 0, 15, 3, 9], device=DEVICE))
        spread = torch.exp2(torch.randint(-14, 11, a["qkv"].shape, generator=g, device=DEVICE).float())
        a["qkv"] = (a["qkv"].float() * spread * scale).to(dtype)
        if scale == 7.0:
            # v exactly 7 x an e4m3 midpoint (normal and subnormal, both signs): y * RN(1 / 7) lands an ulp off the
            # quotient, on the tie's wrong side half the time; only the corrected quotient rounds as the reference
            m = (16 + 2 * torch.randint(0, 8, (6, 2 * 64), generator=g, device=DEVICE) + 1) / 32.0
            e = torch.randint(-9, 9, (6, 2 * 64), generator=g, device=DEVICE).float()
            sign = torch.where(torch.rand((6, 2 * 64), generator=g, device=DEVICE) < 0.5, -1.0, 1.0)
            a["qkv"][:, 6 * 64 :] = (7.0 * sign * m * torch.exp2(e)).to(dtype)
        s = torch.tensor([scale], device=DEVICE)
        _fp8_cache_call(a, s, s)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_auto_cache_holds_the_returned_k_and_v_bit_for_bit(dtype):
    a = _setup(dtype=dtype, slots=torch.tensor([5, -1, 0, 15], device=DEVICE))  # 2 tokens past the slot list
    q, k, v = vllm.fused_qknorm_rope_cache(
        a["qkv"], a["q_weight"], a["k_weight"], a["cos_sin_cache"], a["positions"], a["slot_mapping"],
        a["key_cache"], a["value_cache"], 4, 2, 64, 64, 1e-6,
    )  # fmt: skip
    expect_k = torch.zeros_like(a["key_cache"])
    expect_v = torch.zeros_like(a["value_cache"])
    for i, slot in enumerate([5, -1, 0, 15]):
        if slot >= 0:
            expect_k[slot // 4, slot % 4] = k.view(6, 2, 64)[i]
            expect_v[slot // 4, slot % 4] = v.view(6, 2, 64)[i]
    assert torch.equal(_bits(a["key_cache"]), _bits(expect_k)) and torch.equal(_bits(a["value_cache"]), _bits(expect_v))
    # q is what the public op returns for the same call, bit for bit
    kc2, vc2 = torch.zeros_like(a["key_cache"]), torch.zeros_like(a["value_cache"])
    q2 = _call({**a, "key_cache": kc2, "value_cache": vc2})
    assert torch.equal(_bits(q2.reshape(6, -1)), _bits(q))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_a_cache_named_by_its_dtype_is_the_auto_cache(dtype):
    # vLLM's kv_cache_dtype "bfloat16" / "float16" (its cache config's names) keep k and v in qkv's dtype, as "auto"
    name = {torch.float16: "float16", torch.bfloat16: "bfloat16"}[dtype]
    caches = []
    for kv in ("auto", name):
        a = _setup(dtype=dtype, slots=torch.tensor([5, -1, 0, 15, 3, 9], device=DEVICE))
        vllm.fused_qknorm_rope_cache(
            a["qkv"], a["q_weight"], a["k_weight"], a["cos_sin_cache"], a["positions"], a["slot_mapping"],
            a["key_cache"], a["value_cache"], 4, 2, 64, 64, 1e-6, 0.0, kv,
        )  # fmt: skip
        caches.append((a["key_cache"], a["value_cache"]))
    assert all(torch.equal(_bits(x), _bits(y)) for x, y in zip(*caches))
    assert caches[0][0].abs().sum() > 0
    # the cache must still be qkv's dtype
    a = _setup(dtype=dtype)
    with pytest.raises(TypeError, match="key_cache must have dtype qkv's dtype"):
        _call({**a, "key_cache": a["key_cache"].float(), "value_cache": a["value_cache"].float()}, kv_cache_dtype=name)


@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
def test_the_rotation_rounds_where_vllms_fused_cache_kernel_does(monkeypatch, is_neox):
    # vLLM 0.34's fused_qknorm_rope_cache: o1 = RN(RN(x1 c) - RN(x2 s)), o2 = fma(x1, s, RN(x2 c)) (explicit
    # __fmul_rn / __fsub_rn / __fmaf_rn); with FP fusion left to the compiler the GPU made fma(x1, c, -RN(x2 s)) and
    # fma(x2, c, RN(x1 s)). No norm, float32 heads: the rotation's own rounding is the output's (a bf16 output
    # rounds it away but at the rare bf16 midpoint).
    import numpy as np
    from fused_fma import F32, fma_rn32, fused_fma

    t, hq, hk, d = 64, 4, 2, 64
    g = torch.Generator(device=DEVICE).manual_seed(3)
    qkv = 4 * torch.randn(t, (hq + 2 * hk) * d, generator=g, device=DEVICE)
    pos = torch.randint(0, 512, (t,), generator=g, device=DEVICE)
    cs = _cos_sin_cache(512, d, torch.float32, DEVICE)
    kc = torch.zeros(64, 4, hk, d, device=DEVICE)
    with fused_fma(monkeypatch):
        q = qk_norm_rope_cache(
            qkv, pos, cs, kc, torch.zeros_like(kc), torch.arange(t, device=DEVICE),
            num_q_heads=hq, num_kv_heads=hk, is_neox=is_neox,
        )  # fmt: skip
    x = qkv.view(t, hq + 2 * hk, d)[:, :hq].cpu().numpy()
    c = cs[pos][:, None, : d // 2].cpu().numpy()
    s_ = cs[pos][:, None, d // 2 :].cpu().numpy()
    x1, x2 = (x[..., : d // 2], x[..., d // 2 :]) if is_neox else (x[..., 0::2], x[..., 1::2])
    o1 = (x1 * c).astype(F32) - (x2 * s_).astype(F32)
    o2 = fma_rn32(x1, s_, (x2 * c).astype(F32))
    # the contracted order, to show the test tells them apart
    o1_c = fma_rn32(x1, c, -(x2 * s_).astype(F32))
    want = np.empty_like(x)
    if is_neox:
        want[..., : d // 2], want[..., d // 2 :] = o1, o2
    else:
        want[..., 0::2], want[..., 1::2] = o1, o2
    assert np.array_equal(q.view(t, hq, d).cpu().numpy().view(np.int32), want.view(np.int32))
    assert not np.array_equal(o1, o1_c)


@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
def test_the_in_place_form_rounds_where_vllms_fused_qk_norm_rope_does(monkeypatch, is_neox):
    # vLLM 0.34's fused_qk_norm_rope (its sm_90 SASS, NeoX and GPT-J alike): x' = x * RN(rstd w) kept in float32,
    # o1 = fma(x1', c, -RN(x2' s)), o2 = fma(x2', c, RN(x1' s)). float32 heads of 64 dims, 32 rotated; dim 32 of
    # every head is 1 with weight 1, so the op's output there is its own rstd, from which the rest is emulated.
    import numpy as np
    from fused_fma import F32, fma_rn32, fused_fma

    t, hq, hk, d, rot = 64, 4, 2, 64, 32
    g = torch.Generator(device=DEVICE).manual_seed(5)
    qkv = 4 * torch.randn(t, (hq + 2 * hk) * d, generator=g, device=DEVICE)
    qkv.view(t, hq + 2 * hk, d)[:, : hq + hk, rot] = 1.0
    # signed zeros: dim 2 (a pair's first member in both styles) -0 at position 0 (cos 1, sin +0), where
    # fma(x1, c, -RN(x2 s)) is -0 only if the product's negation is exact
    qkv.view(t, hq + 2 * hk, d)[:8, : hq + hk, 2] = -0.0
    w = [1 + 0.3 * torch.randn(d, generator=g, device=DEVICE) for _ in range(2)]
    for wi in w:
        wi[rot] = 1.0
    pos = torch.randint(0, 512, (t,), generator=g, device=DEVICE)
    pos[:8] = 0
    cs = _cos_sin_cache(512, rot, torch.float32, DEVICE)
    x = qkv.view(t, hq + 2 * hk, d)[:, : hq + hk].cpu().numpy().copy()
    v0 = qkv[:, (hq + hk) * d :].clone()
    with fused_fma(monkeypatch):
        vllm.fused_qk_norm_rope(qkv, hq, hk, hk, d, 1e-6, w[0], w[1], cs, is_neox, pos)
    got = qkv.view(t, hq + 2 * hk, d)[:, : hq + hk].cpu().numpy()
    r = got[..., rot : rot + 1]
    wn = np.concatenate([np.broadcast_to(wi.cpu().numpy(), (hn, d)) for wi, hn in zip(w, (hq, hk))])
    xr = x * (r * wn).astype(F32)
    c = cs[pos][:, None, : rot // 2].cpu().numpy()
    s_ = cs[pos][:, None, rot // 2 :].cpu().numpy()
    pair = (slice(0, rot // 2), slice(rot // 2, rot)) if is_neox else (slice(0, rot, 2), slice(1, rot, 2))

    def rotated(xr, inplace):
        out = xr.copy()
        x1, x2 = xr[..., pair[0]], xr[..., pair[1]]
        if inplace:
            out[..., pair[0]] = fma_rn32(x1, c, -(x2 * s_).astype(F32))
            out[..., pair[1]] = fma_rn32(x2, c, (x1 * s_).astype(F32))
        else:  # the fused cache kernel's order
            out[..., pair[0]] = (x1 * c).astype(F32) - (x2 * s_).astype(F32)
            out[..., pair[1]] = fma_rn32(x1, s_, (x2 * c).astype(F32))
        return out

    want = rotated(xr, True)
    assert np.array_equal(got.view(np.int32), want.view(np.int32))
    assert torch.equal(_bits(qkv[:, (hq + hk) * d :]), _bits(v0))  # v untouched
    # the test tells the other orders apart: RN(x rstd) w, and the fused cache kernel's rotation
    assert not np.array_equal(rotated((x * r).astype(F32) * wn, True), want)
    assert not np.array_equal(rotated(xr, False), want)


def test_the_norm_is_rounded_to_the_model_dtype_before_the_rotation():
    # bf16 inputs: the op matches the oracle that rounds the normed head (within one bf16 rounding of the result),
    # and differs from the one that does not somewhere (the rounding point is observable)
    a = _setup(t=16, hq=8, hk=2, d=128, rot=128, nb=8, dtype=torch.bfloat16)
    q = _call(a).float()
    x = a["qkv"].view(16, 12, 128)[:, :8].double()
    args = (a["positions"], a["cos_sin_cache"].double(), a["q_weight"].double(), 1e-6, 0.0, True, torch.bfloat16)
    rounded = norm_rope(x, *args, round_norm=True).to(torch.bfloat16).double()
    unrounded = norm_rope(x, *args, round_norm=False).to(torch.bfloat16).double()
    assert not torch.equal(rounded, unrounded)
    # within one bf16 ulp of the rounded oracle (the interpreter truncates where the GPU rounds: one ulp, not half)
    ulp = 2.0 ** (torch.floor(torch.log2(rounded.abs().clamp(min=1e-30))) - 7)
    assert ((q.double() - rounded).abs() <= ulp * 1.01 + 1e-6).float().mean() > 0.999


def test_gemma_weight_bias_adds_one_in_float32():
    a = _setup(dtype=torch.float32)
    zero = {**a, "q_weight": a["q_weight"] - 1, "k_weight": a["k_weight"] - 1}
    q1 = _call(a)
    kc2, vc2 = torch.zeros_like(a["key_cache"]), torch.zeros_like(a["value_cache"])
    q2 = _call({**zero, "key_cache": kc2, "value_cache": vc2}, weight_bias=1.0)
    torch.testing.assert_close(q1, q2, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(kc2, a["key_cache"], rtol=1e-6, atol=1e-6)


def test_without_norm_and_rotary_it_is_a_copy():
    a = _setup(dtype=torch.bfloat16)
    q = _call(a, q_weight=None, k_weight=None, cos_sin_cache=None)
    assert torch.equal(_bits(q.reshape(6, -1)), _bits(a["qkv"][:, : 4 * 64]))
    s = a["slot_mapping"]
    assert torch.equal(_bits(a["key_cache"][s // 4, s % 4]), _bits(a["qkv"][:, 256:384].reshape(6, 2, 64)))


def test_inputs_are_never_written_and_caches_only_at_slots():
    a = _setup(slots=torch.tensor([5, -1, 0, 15, -1, 9], device=DEVICE))
    a["key_cache"].fill_(7.0)
    a["value_cache"].fill_(-7.0)
    qkv0 = a["qkv"].clone()
    _call(a)
    assert torch.equal(a["qkv"], qkv0)
    touched = torch.zeros(16, dtype=torch.bool)
    touched[[5, 0, 15, 9]] = True
    for cache, fill in ((a["key_cache"], 7.0), (a["value_cache"], -7.0)):
        flat = cache.view(16, -1)
        assert (flat[~touched] == fill).all() and not (flat[touched] == fill).all(dim=1).any()


def _grids_bits(monkeypatch, fp8, settings, bad_position=False):
    """The op and vLLM's in-place form on 7 tokens (40 q heads of 128: two q blocks and a k/v block a token;
    padding and out-of-range slots) under each of ``settings`` (config overrides): the grids launched, and the bits
    of q, both caches and the in-place qkv per setting. ``bad_position``: token 2's position past the rotary cache
    (NaN in its rotated dims)."""
    from tritonkit.ops import overrides
    from tritonkit.ops.qk_norm_rope_cache import config

    grids = []
    real = api.launch
    monkeypatch.setattr(api, "launch", lambda kernel, grid, *a, **k: grids.append(grid) or real(kernel, grid, *a, **k))
    slots = torch.tensor([5, -1, 0, 15, 9, 99, 3], device=DEVICE)
    hq, hk, d = 40, 8, 128
    outs = []
    for values in settings:
        with overrides(config, **values):
            a = _setup(t=7, hq=hq, hk=hk, d=d, rot=d, fp8=fp8, slots=slots)
            if bad_position:
                a["positions"][2] = 64
            ks, vs = _scales()
            q = _call(a, kv_cache_dtype="fp8" if fp8 else "auto", k_scale=ks, v_scale=vs)
            qkv = a["qkv"].clone()
            w = torch.ones(d, dtype=qkv.dtype, device=DEVICE)
            vllm.fused_qk_norm_rope(qkv, hq, hk, hk, d, 1e-6, w, w, a["cos_sin_cache"], True, a["positions"])
            outs.append([_bits(x) for x in (q, a["key_cache"], a["value_cache"], qkv)])
    return grids, outs


@pytest.mark.parametrize("fp8", [False, True], ids=["auto", "fp8"])
def test_the_heads_first_grid_writes_the_same_bits(monkeypatch, fp8):
    """config.HEADS_FIRST (a 1-D grid, each token's q and k/v programs side by side) launches one axis and writes the
    2-D grid's bits: q, both caches, padding slots skipped, and vLLM's in-place form. Two q blocks and a k/v block a
    token (GRID_H 3), one token a program: 7 token blocks, so a wrong token or head index lands in another program's
    rows."""
    grids, (two_d, one_d) = _grids_bits(
        monkeypatch, fp8, [dict(HEADS_FIRST=False, KV_TOKENS=1), dict(HEADS_FIRST=True, KV_TOKENS=1)]
    )
    assert all(torch.equal(x, y) for x, y in zip(two_d, one_d))
    # the same calls on each grid: 7 token blocks x 3 head blocks, as a 2-D grid and then as one axis
    half = len(grids) // 2
    assert set(grids[:half]) == {(7, 3)} and set(grids[half:]) == {(21,)}, grids


@pytest.mark.parametrize("kv_tokens", [2, 4])
@pytest.mark.parametrize("fp8", [False, True], ids=["auto", "fp8"])
def test_kv_programs_over_several_token_blocks_write_the_same_bits(monkeypatch, fp8, kv_tokens):
    """config.KV_TOKENS (on the 1-D grid a k/v program takes several tokens, after their q programs) writes the
    one-token grid's bits: q, both caches with padding and out-of-range slots skipped, a position outside the rotary
    cache, and vLLM's in-place form. 7 tokens: the last group is partial, so a wrong token, head or slot lands in
    another program's rows or past the tokens."""
    grids, (one, several) = _grids_bits(
        monkeypatch, fp8, [dict(KV_TOKENS=1), dict(KV_TOKENS=kv_tokens)], bad_position=True
    )
    assert all(torch.equal(x, y) for x, y in zip(one, several))
    # 7 token blocks x 3 head blocks; then cdiv(7, n) groups of n x 2 q programs and a k/v program
    half = len(grids) // 2
    groups = -(-7 // kv_tokens)
    assert set(grids[:half]) == {(21,)} and set(grids[half:]) == {(groups * (2 * kv_tokens + 1),)}, grids


# -- hostile slots ------------------------------------------------------------------------------------------------
GUARD = 4096
INT32_MAX = 2**31 - 1


@pytest.mark.parametrize("fp8", [False, True], ids=["auto", "fp8"])
@pytest.mark.parametrize(
    "bad", [(16, -1), (2**40, 7), (INT32_MAX, 1000), (-1, -7)], ids=["one_past", "2^40", "int32_max", "negative"]
)
def test_slots_outside_the_cache_write_nothing_anywhere(bad, fp8):
    a = _setup(t=4, fp8=fp8, slots=torch.tensor([5, *bad, 0], device=DEVICE))
    shape = a["key_cache"].shape
    n = math.prod(shape)
    dtype, poison = (torch.uint8, 0xA5) if fp8 else (torch.bfloat16, math.nan)
    bufs = [torch.full((n + 2 * GUARD,), poison, dtype=dtype, device=DEVICE) for _ in range(2)]
    kc, vc = (b[GUARD : GUARD + n].view(shape) for b in bufs)
    before = [b.clone() for b in bufs]
    ks, vs = _scales()
    _call({**a, "key_cache": kc, "value_cache": vc}, kv_cache_dtype="fp8" if fp8 else "auto", k_scale=ks, v_scale=vs)
    for b, b0 in zip(bufs, before):
        g = b.view(torch.uint8)
        g0 = b0.view(torch.uint8)
        edge = GUARD * b.element_size()
        assert torch.equal(g[:edge], g0[:edge]) and torch.equal(g[-edge:], g0[-edge:])
    # the good slots landed; every other row of the cache kept its poison
    rows = _bits(kc.reshape(16, -1))
    rows0 = _bits(before[0][GUARD : GUARD + n].view(shape).reshape(16, -1))
    changed = set((rows != rows0).any(dim=1).nonzero().view(-1).tolist())
    assert changed == {0, 5} | {b for b in bad if 0 <= b < 16}


def test_check_indices_names_the_bad_slot(monkeypatch):
    monkeypatch.setenv("TRITONKIT_CHECK_INDICES", "1")
    a = _setup(slots=torch.tensor([5, 99, 0, 1, 2, 3], device=DEVICE))
    with pytest.raises(ValueError, match=r"slot_mapping must hold cache slots .* got 99 at \(1,\)"):
        _call(a)
    b = _setup()
    b["positions"][2] = 64
    with pytest.raises(ValueError, match=r"positions must hold rows of cos_sin_cache \(64\) in \[0, 64\), got 64"):
        _call(b)


# -- bad arguments ------------------------------------------------------------------------------------------------
def _f8(a, name):
    return torch.zeros(a[name].shape, dtype=E4M3, device=DEVICE)


_S = torch.tensor([1.0], device=DEVICE)
BAD = [
    (dict(qkv=lambda a: a["qkv"].to(torch.int32)), TypeError, "qkv must have dtype float16/bfloat16/float32"),
    (dict(qkv=lambda a: a["qkv"][:, :-1]), ValueError, r"qkv must be \[num_tokens, \(num_q_heads"),
    (dict(qkv=lambda a: a["qkv"].view(6, 8, 64)), ValueError, "qkv must have 2 dimensions"),
    (dict(num_q_heads=0), ValueError, "num_q_heads must be a positive int"),
    (dict(num_kv_heads=True), ValueError, "num_kv_heads must be a positive int"),
    (dict(positions=lambda a: a["positions"][:5]), ValueError, r"positions must have shape \(6,\)"),
    (dict(positions=lambda a: a["positions"].float()), TypeError, "positions must have dtype int32/int64"),
    (dict(cos_sin_cache=lambda a: a["cos_sin_cache"][:, :63]), ValueError, "cos_sin_cache must be"),
    (dict(cos_sin_cache=lambda a: torch.ones(4, 66, device=DEVICE)), ValueError, "2 <= rot_dim <= head_dim"),
    (dict(q_weight=None), ValueError, "q_weight and k_weight must be given together"),
    (dict(k_weight=lambda a: a["k_weight"][:32]), ValueError, r"k_weight must have shape \(64,\)"),
    (dict(eps=-1.0), ValueError, "eps must be a non-negative float"),
    (dict(weight_bias=math.inf), ValueError, "weight_bias must be a finite float"),
    (dict(is_neox=1), TypeError, "is_neox must be a bool"),
    (dict(key_cache=lambda a: a["key_cache"][..., :32]), ValueError, "key_cache must have shape"),
    (dict(value_cache=lambda a: a["value_cache"].float()), TypeError, "value_cache must have dtype"),
    (dict(key_cache=lambda a: a["key_cache"][:, :0]), ValueError, "key_cache must have a block_size"),
    (dict(value_cache=lambda a: a["value_cache"][:2]), ValueError, "value_cache must have shape"),
    (dict(slot_mapping=lambda a: torch.arange(7, device=DEVICE)), ValueError, "slot_mapping must have at most 6"),
    (dict(slot_mapping=lambda a: a["slot_mapping"].float()), TypeError, "slot_mapping must have dtype int32/int64"),
    (
        dict(kv_cache_dtype="fp8_e5m2"),
        ValueError,
        "kv_cache_dtype must be one of 'auto', 'bfloat16', 'float16', 'fp8', 'fp8_e4m3'",
    ),
    (dict(kv_cache_dtype="fp8", k_scale=_S, v_scale=_S), TypeError, "key_cache must have dtype float8_e4m3fn"),
    (
        dict(
            kv_cache_dtype="fp8",
            key_cache=lambda a: _f8(a, "key_cache"),
            value_cache=lambda a: _f8(a, "value_cache"),
            v_scale=_S,
        ),
        ValueError,
        "kv_cache_dtype='fp8' needs k_scale",
    ),  # fmt: skip
    (
        dict(
            kv_cache_dtype="fp8",
            key_cache=lambda a: _f8(a, "key_cache"),
            value_cache=lambda a: _f8(a, "value_cache"),
            k_scale=_S,
            v_scale=_S.double(),
        ),
        TypeError,
        "v_scale must have dtype float32",
    ),  # fmt: skip
    (dict(slot_mapping=lambda a: a["slot_mapping"].to("meta")), ValueError, "slot_mapping is on meta"),
    (dict(value_cache=lambda a: a["key_cache"]), ValueError, "value_cache must not overlap key_cache"),
]


@pytest.mark.parametrize("over,exc,needle", BAD, ids=[b[2] for b in BAD])
def test_bad_input_is_rejected_before_any_write(over, exc, needle):
    a = _setup()
    a.update({k: (v(a) if callable(v) else v) for k, v in over.items()})
    caches = [t for t in (a["key_cache"], a["value_cache"]) if t.device.type != "meta"]
    for c in caches:
        c.view(torch.uint8).fill_(0x3C)
    before = [c.clone() for c in caches]
    with pytest.raises(exc, match=needle):
        _call(a)
    for b, c in zip(before, caches):
        assert torch.equal(_bits(b), _bits(c))


# -- vLLM's call forms --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("rot", [64, 32], ids=["full", "partial"])
def test_vllm_fused_qk_norm_rope_in_place(is_neox, rot):
    a = _setup(t=5, hq=4, hk=2, d=64, rot=rot, dtype=torch.bfloat16)
    qkv = a["qkv"]
    x0 = qkv.clone()
    cs = a["cos_sin_cache"].to(torch.bfloat16)
    ret = vllm.fused_qk_norm_rope(qkv, 4, 2, 2, 64, 1e-6, a["q_weight"], a["k_weight"], cs, is_neox, a["positions"])
    assert ret is None
    x = x0.view(5, 8, 64).double()
    args = (a["positions"], cs.double())
    for first, n, w in ((0, 4, a["q_weight"]), (4, 2, a["k_weight"])):
        # vLLM's fused_qk_norm_rope keeps the normed head in float32 through the rotation
        want = norm_rope(
            x[:, first : first + n], *args, w.double(), 1e-6, 0.0, is_neox, torch.bfloat16, round_norm=False
        )
        got = qkv.view(5, 8, 64)[:, first : first + n].double()
        torch.testing.assert_close(got, want, rtol=1.6e-2, atol=1e-2)
    assert torch.equal(_bits(qkv[:, 6 * 64 :]), _bits(x0[:, 6 * 64 :]))  # v untouched


_IN_PLACE_CASES = """
import torch

import tritonkit
from tritonkit.ops.qk_norm_rope_cache import vllm

M = dict(device="meta", dtype=torch.bfloat16)


def _call(t, hq, hk, d, rot, neox):
    qkv = torch.empty(t, (hq + 2 * hk) * d, **M)
    w = torch.empty(d, **M)
    cs = torch.empty(65536, rot, **M)
    pos = torch.empty(t, device="meta", dtype=torch.int64)
    vllm.fused_qk_norm_rope(qkv, hq, hk, hk, d, 1e-6, w, w, cs, neox, pos)


@tritonkit.case(num_tokens=[1, 16, 4096, 65536])
def qwen3_neox(num_tokens):
    _call(num_tokens, 32, 8, 128, 128, True)


@tritonkit.case(num_tokens=[1, 17, 65536])
def gptj_partial_256(num_tokens):
    _call(num_tokens, 8, 2, 256, 128, False)
"""


def test_check_finds_nothing_in_the_in_place_form(tmp_path):
    # q and k are stored over the qkv they were loaded from, through other lanes: every load is ordered before every
    # store by the norm's reductions across warps (the programs' heads and the overflow test), which the checker
    # reads in the TTGIR's layouts. The CLI in a process of its own, as a user runs it (the kernels compiled)
    from op_check import check

    case = tmp_path / "in_place_cases.py"
    case.write_text(_IN_PLACE_CASES)
    d, _err, rc = check([str(case)], {}, tmp_path / "ir")
    assert not d["problems"], d["problems"]
    assert {k["kernel"] for k in d["kernels"]} == {"_qk_norm_rope_cache_kernel"}
    assert d["findings"] == [], [(f["rule"], f["line"], f["message"]) for f in d["findings"]]
    assert rc == 0


def test_vllm_fused_qk_norm_rope_rejects_unequal_v_heads_before_writing():
    a = _setup()
    x0 = a["qkv"].clone()
    with pytest.raises(ValueError, match="num_heads_v must equal num_heads_k"):
        vllm.fused_qk_norm_rope(a["qkv"], 4, 2, 1, 64, 1e-6, a["q_weight"], a["k_weight"], a["cos_sin_cache"], True,
                                a["positions"])  # fmt: skip
    with pytest.raises(ValueError, match=r"qkv must have \(num_q_heads \+ 2 \* num_kv_heads\) \* head_dim"):
        vllm.fused_qk_norm_rope(a["qkv"], 4, 2, 2, 32, 1e-6, a["q_weight"], a["k_weight"], a["cos_sin_cache"], True,
                                a["positions"])  # fmt: skip
    assert torch.equal(a["qkv"], x0)


def test_vllm_fused_qknorm_rope_cache_partial_rotary_reads_sin_from_the_caches_second_half():
    # rotary_dim 32 of a 64-wide cos/sin cache: cos from columns [0, 16), sin from [32, 48) (vLLM chunks the cache)
    a = _setup(dtype=torch.float32)
    q, k, v = vllm.fused_qknorm_rope_cache(
        a["qkv"], a["q_weight"], a["k_weight"], a["cos_sin_cache"], a["positions"], a["slot_mapping"],
        a["key_cache"], a["value_cache"], 4, 2, 64, 32, 1e-6,
    )  # fmt: skip
    x = a["qkv"].view(6, 8, 64)[:, :4].double()
    want = norm_rope(x, a["positions"], a["cos_sin_cache"].double(), a["q_weight"].double(), 1e-6, 0.0, True,
                     torch.float32, rotary_dim=32)  # fmt: skip
    torch.testing.assert_close(q.view(6, 4, 64).double(), want, rtol=1e-5, atol=1e-5)
    assert q.shape == (6, 256) and k.shape == v.shape == (6, 128) and q.is_contiguous()


def test_vllm_fused_qknorm_rope_cache_checks_rotary_dim_as_vllm_does():
    a = _setup()
    for bad in (12, -8, 72):
        with pytest.raises(ValueError, match="rotary_dim must be a multiple of 8 in"):
            vllm.fused_qknorm_rope_cache(
                a["qkv"], a["q_weight"], a["k_weight"], a["cos_sin_cache"], a["positions"], a["slot_mapping"],
                a["key_cache"], a["value_cache"], 4, 2, 64, bad, 1e-6,
            )  # fmt: skip


def test_vllm_fused_qknorm_rope_cache_without_rotary_norms_only():
    a = _setup(dtype=torch.float32)
    q, _, _ = vllm.fused_qknorm_rope_cache(
        a["qkv"], a["q_weight"], a["k_weight"], a["cos_sin_cache"], a["positions"], a["slot_mapping"],
        a["key_cache"], a["value_cache"], 4, 2, 64, 0, 1e-6, 1.0,
    )  # fmt: skip
    x = a["qkv"].view(6, 8, 64)[:, :4]
    want = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-6) * (a["q_weight"] + 1.0)
    torch.testing.assert_close(q.view(6, 4, 64), want, rtol=1e-5, atol=1e-6)


# -- tracing ------------------------------------------------------------------------------------------------------
def test_torch_compile_aot_eager_records_the_op_and_mutates_the_caches():
    from torch._dynamo.backends.registry import lookup_backend

    a = _setup(dtype=torch.float32)
    b = {**a, "key_cache": a["key_cache"].clone(), "value_cache": a["value_cache"].clone()}
    want = _call(b)
    seen = []

    def backend(gm, example_inputs):
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return lookup_backend("aot_eager")(gm, example_inputs)

    def fn(qkv, pos, cs, kc, vc, slots, qw, kw):
        q = qk_norm_rope_cache(qkv, pos, cs, kc, vc, slots, num_q_heads=4, num_kv_heads=2, q_weight=qw, k_weight=kw)
        return q * 2

    got = torch.compile(fn, backend=backend, fullgraph=True)(
        a["qkv"], a["positions"], a["cos_sin_cache"], a["key_cache"], a["value_cache"], a["slot_mapping"],
        a["q_weight"], a["k_weight"],
    )  # fmt: skip
    assert any("tritonkit.qk_norm_rope_cache" in s for s in seen)
    torch.testing.assert_close(got, want * 2)
    assert torch.equal(a["key_cache"], b["key_cache"]) and torch.equal(a["value_cache"], b["value_cache"])


def test_custom_op_schemas():
    a = _setup(dtype=torch.float32)
    torch.library.opcheck(
        torch.ops.tritonkit.qk_norm_rope_cache.default,
        (a["qkv"], a["positions"], a["cos_sin_cache"], a["key_cache"], a["value_cache"], a["slot_mapping"], 4, 2,
         a["q_weight"], a["k_weight"], 1e-6, 0.0, True, "auto", None, None),
        test_utils=("test_schema", "test_faketensor"),
    )  # fmt: skip
    torch.library.opcheck(
        torch.ops.tritonkit.vllm_fused_qknorm_rope_cache.default,
        (a["qkv"], a["q_weight"], a["k_weight"], a["cos_sin_cache"], a["positions"], a["slot_mapping"],
         a["key_cache"], a["value_cache"], 4, 2, 64, 64, 1e-6, 0.0, "auto", None, None),
        test_utils=("test_schema", "test_faketensor"),
    )  # fmt: skip
    torch.library.opcheck(
        torch.ops.tritonkit.vllm_fused_qk_norm_rope.default,
        (a["qkv"], 4, 2, 64, 1e-6, a["q_weight"], a["k_weight"], a["cos_sin_cache"], True, a["positions"]),
        test_utils=("test_schema", "test_faketensor"),
    )


# -- one compile over the sweep ------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_one_compile_across_num_tokens(monkeypatch, dtype):
    kernel = api._qk_norm_rope_cache_kernel
    for model in MODELS.values():
        if not SPEC.has_layer(model):
            continue
        rec = Recorder()
        monkeypatch.setattr(api, "_qk_norm_rope_cache_kernel", rec)
        for t in NUM_TOKENS_SWEEP:
            SPEC.call(SPEC.make_inputs(SPEC.sweep_shape(model, t), dtype, MetaFill()))
        monkeypatch.setattr(api, "_qk_norm_rope_cache_kernel", kernel)
        assert len(rec.launches) == len(NUM_TOKENS_SWEEP)
        grids = [tuple(g) + (1,) for g, _, _ in rec.launches]
        assert len({g[1] for g in grids}) == 1 and max(g[1] for g in grids) <= 65535
        assert len(specialization_keys(kernel, rec.launches)) == 1, model.name


# -- the unfused peer ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "shape",
    [_shape(5, 4, 2, 64, 64, kv="fp8", padding=2, short=1), _shape(3, 4, 2, 64, 32, norm=0, neox=0, layout="views")],
    ids=["norm-fp8", "rope-only"],
)
def test_the_unfused_peer_passes_the_benchs_check(shape):
    # float16: under the CPU interpreter rms_norm's bf16 output truncates, which the rotation then magnifies
    dtype = torch.float16 if not torch.cuda.is_available() else torch.bfloat16
    prov = P.make_provider("unfused", SPEC, dtype)
    inputs = SPEC.make_inputs(shape, dtype, Fill("randn", DEVICE))
    result = P.check(prov, SPEC, dtype, inputs, P.reference(SPEC, dtype, inputs))
    assert result.passed, result


@pytest.mark.parametrize("dtype, bits", [(torch.bfloat16, 8), (torch.float16, 11)], ids=["bf16", "fp16"])
def test_the_flip_allowance_covers_a_midpoint_below_a_power_of_two(dtype, bits):
    # a normed value just above the midpoint under 1.0 (1 - ulp_below / 2, ulp_below = 2^-bits) rounds up to 1.0;
    # float32 arithmetic can round it down to 1 - ulp_below. The allowance is that move, ulp_below: 1.0's own spacing
    # above is twice it, and measured against that the value looked half an ulp from any midpoint (issue 39's bench
    # reported every provider wrong on 1-4 of 67-268M q elements at 16K-64K tokens on the H200)
    d = 8
    x = torch.ones(1, 1, d, dtype=torch.float64)
    w = torch.ones(d, dtype=torch.float64)
    w[0] = 1 - 2.0 ** -(bits + 1) + 2.0**-20  # above the midpoint by ~4.5e-7 after rstd = (1 + eps)^-1/2
    kw = dict(eps=1e-6, weight_bias=0.0, is_neox=True, dtype=dtype)
    normed = norm_rope(x, None, None, w, **kw)
    assert normed[0, 0, 0].to(dtype).item() == 1.0
    flips = norm_rope(x, None, None, w, terms="flip", **kw)
    assert flips[0, 0, 0].item() == 2.0**-bits
    assert torch.all(flips[0, 0, 1:] == 0)


def test_the_config_gives_a_power_of_two_warps_at_four_vectors_a_thread():
    """num_warps is a power of two whatever the head (3 heads of 96 elements, 64 rotated: a 6 KB tile, which once
    asked for 3 warps), at most MAX_WARPS, and no more than gives each thread four 16-byte vectors of the q tile
    (Llama-3-8B's bf16 tile: 4)."""
    from tritonkit.ops.qk_norm_rope_cache import config

    heads = [(32, 8, 128, 128, 2), (32, 8, 96, 96, 2), (16, 4, 192, 96, 2), (40, 8, 128, 64, 2), (64, 8, 80, 80, 4),
             (8, 1, 64, 32, 2), (1, 1, 16, 0, 2), (28, 4, 128, 128, 4), (3, 1, 96, 64, 2)]  # fmt: skip
    for hq, hk, d, rot, elem in heads:
        c = config.qk_norm_rope_cache_config(hq, hk, d, rot, elem)
        tile = c.block_t * c.block_hq * ((2 * c.block_half if rot else 0) + (c.block_tail if d > rot else 0)) * elem
        assert c.num_warps & (c.num_warps - 1) == 0 and 1 <= c.num_warps <= config.MAX_WARPS, (hq, d, rot, c)
        assert c.num_warps == 1 or tile >= c.num_warps * 32 * config.BYTES_PER_THREAD, (hq, d, rot, c)
    assert config.qk_norm_rope_cache_config(32, 8, 128, 128, 2).num_warps == 4


def test_kv_programs_take_two_tokens_where_q_has_four_times_their_heads():
    """The rule for a k/v program's tokens: 2 where q's head block is at least 4x k's (GQA 4 and up: Llama-3-8B,
    Qwen3-30B-A3B, MQA), else 1 (MHA, GQA 2), whatever the element size."""
    from tritonkit.ops.qk_norm_rope_cache import config

    cases = {(32, 8, 128): 2, (32, 4, 128): 2, (64, 8, 128): 2, (32, 1, 128): 2, (32, 32, 128): 1, (16, 8, 128): 1,
             (40, 8, 128): 2, (8, 4, 64): 1}  # fmt: skip
    for (hq, hk, d), want in cases.items():
        for elem in (2, 4):
            assert config.qk_norm_rope_cache_config(hq, hk, d, d, elem).kv_tokens == want, (hq, hk, d, elem)
