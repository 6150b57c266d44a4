import math

import pytest
import torch
from conftest import DEVICE

from tritonkit.ops import reshape_and_cache
from tritonkit.ops.reshape_and_cache.spec import LARGE, SPEC, _shape
from tritonkit.testing import assert_valid

DTYPES = [torch.float16, torch.bfloat16, torch.float32]
E4M3 = torch.float8_e4m3fn


@pytest.mark.parametrize("shape", SPEC.boundary, ids=lambda s: s.id)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_boundary_randn(shape, dtype):
    assert_valid(SPEC, shape, dtype, "randn", device=DEVICE)


HARD = [
    _shape(7, 3, 80, 16, 2, padding=3, slot_dtype="int32"),
    _shape(16, 2, 96, 16, 2, "fp8"),
    _shape(17, 8, 128, 16, 3, "fp8", layout="odd_views", padding=5, slot_dtype="int32"),
]


@pytest.mark.parametrize("shape", HARD, ids=lambda s: s.id)
@pytest.mark.parametrize("family", [f for f in SPEC.families if f != "randn"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_hard_families(shape, dtype, family):
    assert_valid(SPEC, shape, dtype, family, device=DEVICE)


def _expected(src, cache, slots):
    """``cache`` with ``src[t]`` at slot ``slots[t]`` for every non-negative slot, built one token at a time."""
    out = cache.clone()
    bs = cache.shape[1]
    for t, s in enumerate(slots.tolist()):
        if s >= 0:
            out[s // bs, s % bs] = src[t]
    return out


def _bits(t):
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def _setup(t=6, h=3, d=64, bs=4, nb=3, dtype=torch.float16, slots=None):
    key = torch.randn(t, h, d, device=DEVICE).to(dtype)
    value = torch.randn(t, h, d, device=DEVICE).to(dtype)
    kc = torch.full((nb, bs, h, d), 7.0, device=DEVICE, dtype=dtype)
    vc = torch.full((nb, bs, h, d), -7.0, device=DEVICE, dtype=dtype)
    if slots is None:
        slots = torch.randperm(nb * bs, device=DEVICE)[:t]
    return key, value, kc, vc, torch.as_tensor(slots, device=DEVICE)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_writes_land_only_in_target_slots_and_padding_is_skipped(dtype):
    key, value, kc, vc, slots = _setup(dtype=dtype, slots=[5, -1, 0, 11, -1, 6])
    ek, ev = _expected(key, kc, slots), _expected(value, vc, slots)
    assert reshape_and_cache(key, value, kc, vc, slots) is None
    assert torch.equal(kc, ek) and torch.equal(vc, ev)
    # rows no slot names keep what they held (7.0 / -7.0): padding tokens wrote nothing anywhere
    assert (kc[0, 1] == 7.0).all() and (vc[2, 2] == -7.0).all()


def test_key_rows_past_slot_mapping_are_not_written():
    # vLLM V1 pads key/value to a captured CUDA-graph size and passes the real tokens' slots only
    key, value, kc, vc, slots = _setup(t=6, slots=[5, 0, 11, 6, 1, 2])
    ek, ev = _expected(key[:4], kc, slots[:4]), _expected(value[:4], vc, slots[:4])
    reshape_and_cache(key, value, kc, vc, slots[:4])
    assert torch.equal(kc, ek) and torch.equal(vc, ev)
    assert (kc[0, 1] == 7.0).all() and (kc[0, 2] == 7.0).all()  # slots 1 and 2 belong to rows 4 and 5


def test_all_padding_writes_nothing():
    key, value, kc, vc, _ = _setup()
    k0, v0 = kc.clone(), vc.clone()
    reshape_and_cache(key, value, kc, vc, torch.full((6,), -1, dtype=torch.int32, device=DEVICE))
    assert torch.equal(kc, k0) and torch.equal(vc, v0)


def test_empty_num_tokens_is_a_no_op():
    key, value, kc, vc, _ = _setup(t=0)
    k0 = kc.clone()
    reshape_and_cache(key, value, kc, vc, torch.empty(0, dtype=torch.int64, device=DEVICE))
    assert torch.equal(kc, k0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_copy_preserves_every_bit(dtype):
    # every fp16/bf16 bit pattern (NaN payloads, +-inf, -0, subnormals), random patterns for fp32
    n = 8 * 128 * 64
    if dtype == torch.float32:
        pattern = torch.randint(-(2**31), 2**31, (n,), dtype=torch.int64, device=DEVICE).to(torch.int32)
    else:
        pattern = torch.arange(-(2**15), 2**15, dtype=torch.int32, device=DEVICE).to(torch.int16)
    key = pattern.view(dtype).view(64, 8, 128)
    value = key.flip(0)
    kc = torch.zeros(5, 16, 8, 128, dtype=dtype, device=DEVICE)
    vc = torch.zeros_like(kc)
    slots = torch.randperm(80, device=DEVICE)[:64]
    reshape_and_cache(key, value, kc, vc, slots)
    assert torch.equal(_bits(kc)[slots // 16, slots % 16], _bits(key))
    assert torch.equal(_bits(vc)[slots // 16, slots % 16], _bits(value))


def test_strided_key_value_views_of_fused_qkv():
    t, hq, h, d = 9, 6, 2, 80
    qkv = torch.randn(t, (hq + 2 * h) * d + 3, device=DEVICE, dtype=torch.bfloat16)  # odd token stride
    qkv0 = qkv.clone()
    key = qkv[:, hq * d : (hq + h) * d].view(t, h, d)
    value = qkv[:, (hq + h) * d : (hq + 2 * h) * d].view(t, h, d)
    assert not key.is_contiguous()
    kc = torch.zeros(3, 4, h, d, dtype=torch.bfloat16, device=DEVICE)
    vc = torch.zeros_like(kc)
    slots = torch.tensor([3, 0, -1, 7, 11, 1, 2, -1, 8], device=DEVICE)
    ek, ev = _expected(key, kc, slots), _expected(value, vc, slots)
    reshape_and_cache(key, value, kc, vc, slots)
    assert torch.equal(kc, ek) and torch.equal(vc, ev)
    assert torch.equal(qkv, qkv0)  # inputs are never written


def test_padded_cache_strides_touch_nothing_around_the_caches():
    t, h, d, bs, nb = 7, 3, 64, 4, 3
    key = torch.randn(t, h, d, device=DEVICE)
    value = torch.randn(t, h, d, device=DEVICE)
    # k and v interleaved per block, an extra row per block, odd padding per head, a guard block on each side
    base = torch.full((nb + 2, 2, bs + 1, h, d + 5), math.nan, device=DEVICE)
    kc, vc = base[1:-1, 0, :bs, :, :d], base[1:-1, 1, :bs, :, :d]
    slots = torch.tensor([0, 11, -1, 4, 3, 8, 5], dtype=torch.int32, device=DEVICE)
    expected = base.clone()
    expected[1:-1, 0, :bs, :, :d] = _expected(key, kc, slots)
    expected[1:-1, 1, :bs, :, :d] = _expected(value, vc, slots)
    reshape_and_cache(key, value, kc, vc, slots)
    torch.testing.assert_close(base, expected, rtol=0, atol=0, equal_nan=True)


def _e4m3_expected(x, scale):
    """The fp8 contract written independently of reference.py: float32 x / scale, saturate, round to e4m3fn."""
    q = x.float() / torch.tensor(scale, dtype=torch.float32, device=x.device)
    return q.clamp(-448.0, 448.0).to(E4M3)


def _assert_same_e4m3(got, want):
    nan = torch.isnan(want.float())
    assert torch.equal(torch.isnan(got.float()), nan)
    # NaN may be 0x7f or 0xff (the GPU's cvt does not promise a sign); every other byte must match exactly
    assert torch.equal(_bits(got)[~nan], _bits(want)[~nan])


@pytest.mark.parametrize("scale", [1.0, 0.37, 2.0**-9, 300.0])
def test_fp8_every_fp16_value_rounds_like_torch(scale):
    # 65536 fp16 bit patterns: ties to even at every e4m3 binade, subnormals, saturation, inf and NaN
    key = torch.arange(-(2**15), 2**15, dtype=torch.int32, device=DEVICE).to(torch.int16).view(torch.float16)
    key = key.view(64, 8, 128)
    value = key.flip(0)
    kc = torch.zeros(4, 16, 8, 128, dtype=E4M3, device=DEVICE)
    vc = torch.zeros_like(kc)
    slots = torch.randperm(64, device=DEVICE)
    ks = torch.tensor([scale], device=DEVICE)
    vs = torch.tensor(scale * 1.37, device=DEVICE)  # a 0-d scale works as well as [1]
    reshape_and_cache(key, value, kc, vc, slots, kv_cache_dtype="fp8", k_scale=ks, v_scale=vs)
    _assert_same_e4m3(kc[slots // 16, slots % 16], _e4m3_expected(key, scale))
    _assert_same_e4m3(vc[slots // 16, slots % 16], _e4m3_expected(value, scale * 1.37))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fp8_saturates_keeps_nan_and_rounds_ties_to_even(dtype):
    vals = [
        1000.0,
        -1000.0,
        math.inf,
        -math.inf,
        math.nan,
        464.0,
        447.0,
        -449.0,
        1.0625,
        1.1875,
        17.0,
        19.0,
        2.0**-10,
        3 * 2.0**-10,
        -(2.0**-12),
        0.0,
    ]
    want = [
        448.0,
        -448.0,
        448.0,
        -448.0,
        math.nan,
        448.0,
        448.0,
        -448.0,
        1.0,
        1.25,
        16.0,
        20.0,
        0.0,
        2.0**-8,
        -0.0,
        0.0,
    ]
    key = torch.tensor(vals, device=DEVICE).to(dtype).view(1, 1, len(vals))
    kc = torch.zeros(1, 1, 1, len(vals), dtype=E4M3, device=DEVICE)
    vc = torch.zeros_like(kc)
    one = torch.ones(1, device=DEVICE)
    reshape_and_cache(
        key, key * 2, kc, vc, torch.tensor([0], device=DEVICE), kv_cache_dtype="fp8", k_scale=one, v_scale=one * 2
    )
    torch.testing.assert_close(kc.float().view(-1).cpu(), torch.tensor(want), rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(vc.float(), kc.float(), rtol=0, atol=0, equal_nan=True)
    assert torch.signbit(kc.float().view(-1)[14])  # -2^-12 rounds to -0


def test_fp8_alias_and_uint8_caches_store_the_same_bytes():
    key, value, _, _, slots = _setup(dtype=torch.bfloat16)
    s = torch.tensor([0.05], device=DEVICE)
    out = {}
    for name, kv, cdt in (("fp8", "fp8", E4M3), ("alias", "fp8_e4m3", E4M3), ("uint8", "fp8", torch.uint8)):
        kc = torch.zeros(3, 4, 3, 64, dtype=cdt, device=DEVICE)
        vc = torch.zeros_like(kc)
        reshape_and_cache(key, value, kc, vc, slots, kv_cache_dtype=kv, k_scale=s, v_scale=s * 3)
        out[name] = (_bits(kc), _bits(vc))
    ek = _e4m3_expected(key, 0.05)
    _assert_same_e4m3(out["fp8"][0].view(E4M3)[slots // 4, slots % 4], ek)
    for name in ("alias", "uint8"):
        assert torch.equal(out[name][0], out["fp8"][0]) and torch.equal(out[name][1], out["fp8"][1])


def test_auto_mode_accepts_and_ignores_scales():
    key, value, kc, vc, slots = _setup()
    ek = _expected(key, kc, slots)
    reshape_and_cache(
        key,
        value,
        kc,
        vc,
        slots,
        k_scale=torch.tensor([3.0], device=DEVICE),
        v_scale=torch.tensor([5.0], device=DEVICE),
    )
    assert torch.equal(kc, ek)


def _args(**over):
    key, value, kc, vc, slots = _setup()
    a = {"key": key, "value": value, "key_cache": kc, "value_cache": vc, "slot_mapping": slots}
    a.update({k: (v(a) if callable(v) else v) for k, v in over.items()})
    return a


def _f8(a, name):
    return torch.zeros(a[name].shape, dtype=E4M3, device=DEVICE)


_S = torch.tensor([1.0], device=DEVICE)
BAD = [
    (dict(key=lambda a: a["key"].to(torch.int32)), TypeError, "key must have dtype float16/bfloat16/float32"),
    (dict(key=lambda a: a["key"].double()), TypeError, "key must have dtype"),
    (dict(key=lambda a: a["key"].reshape(6, -1)), ValueError, "key must have 3 dimensions"),
    (
        dict(key=lambda a: a["key"].transpose(1, 2).contiguous().transpose(1, 2)),
        ValueError,
        "key must be contiguous in its last dimension",
    ),
    (dict(key=[1.0]), TypeError, "key must be a torch.Tensor"),
    (dict(value=lambda a: a["value"].float()), TypeError, "value must have key's dtype"),
    (dict(value=lambda a: a["value"][:5]), ValueError, "value must have shape"),
    (dict(key_cache=lambda a: a["key_cache"][..., :32]), ValueError, "key_cache must have shape"),
    (
        dict(key_cache=lambda a: a["key_cache"][:, :, :2], value_cache=lambda a: a["value_cache"][:, :, :2]),
        ValueError,
        r"key_cache must have shape \[num_blocks, block_size, 3, 64\]",
    ),
    (dict(key_cache=lambda a: a["key_cache"][0]), ValueError, "key_cache must have 4 dimensions"),
    (dict(key_cache=lambda a: a["key_cache"].float()), TypeError, "key_cache must have dtype key's dtype"),
    (
        dict(key_cache=lambda a: a["key_cache"].transpose(2, 3).contiguous().transpose(2, 3)),
        ValueError,
        "key_cache must be contiguous in its last dimension",
    ),
    (
        dict(key_cache=lambda a: a["key_cache"][:, :0], value_cache=lambda a: a["value_cache"][:, :0]),
        ValueError,
        "key_cache must have a block_size",
    ),
    (dict(value_cache=lambda a: a["value_cache"][:2]), ValueError, "value_cache must have shape"),
    (dict(value_cache=lambda a: a["value_cache"].float()), TypeError, "value_cache must have dtype"),
    (dict(slot_mapping=lambda a: a["slot_mapping"].float()), TypeError, "slot_mapping must have dtype int32/int64"),
    (
        dict(slot_mapping=lambda a: torch.cat([a["slot_mapping"], a["slot_mapping"][:1]])),
        ValueError,
        "slot_mapping must have at most 6 entries",
    ),
    (dict(slot_mapping=lambda a: a["slot_mapping"].view(6, 1)), ValueError, "slot_mapping must have 1 dimensions"),
    (dict(slot_mapping=lambda a: a["slot_mapping"].to("meta")), ValueError, "slot_mapping is on meta"),
    (dict(kv_cache_dtype="fp8_e5m2"), ValueError, "kv_cache_dtype must be one of 'auto', 'fp8', 'fp8_e4m3'"),
    (
        dict(
            kv_cache_dtype="fp8",
            key_cache=lambda a: _f8(a, "key_cache"),
            value_cache=lambda a: _f8(a, "value_cache"),
            v_scale=_S,
        ),
        ValueError,
        "kv_cache_dtype='fp8' needs k_scale",
    ),
    (dict(kv_cache_dtype="fp8", k_scale=_S, v_scale=_S), TypeError, "key_cache must have dtype float8_e4m3fn"),
    (
        dict(
            kv_cache_dtype="fp8",
            key_cache=lambda a: _f8(a, "key_cache"),
            value_cache=lambda a: _f8(a, "value_cache"),
            k_scale=1.0,
            v_scale=_S,
        ),
        TypeError,
        "k_scale must be a float32 tensor of one element",
    ),
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
    ),
    (
        dict(
            kv_cache_dtype="fp8",
            key_cache=lambda a: _f8(a, "key_cache"),
            value_cache=lambda a: _f8(a, "value_cache"),
            k_scale=torch.ones(2, device=DEVICE),
            v_scale=_S,
        ),
        ValueError,
        "k_scale must have exactly one element",
    ),
    (
        dict(
            kv_cache_dtype="fp8",
            key_cache=lambda a: _f8(a, "key_cache"),
            value_cache=lambda a: _f8(a, "value_cache"),
            k_scale=_S,
            v_scale=torch.ones(1, device="meta"),
        ),
        ValueError,
        "v_scale is on meta",
    ),
]


@pytest.mark.parametrize("over,exc,needle", BAD, ids=[b[2] for b in BAD])
def test_bad_input_is_rejected_before_any_write(over, exc, needle):
    a = _args(**over)
    before = [t.clone() for t in (a["key_cache"], a["value_cache"]) if t.device.type != "meta"]
    kw = {k: a.pop(k) for k in ("kv_cache_dtype", "k_scale", "v_scale") if k in a}
    with pytest.raises(exc, match=needle):
        reshape_and_cache(a["key"], a["value"], a["key_cache"], a["value_cache"], a["slot_mapping"], **kw)
    after = [t for t in (a["key_cache"], a["value_cache"]) if t.device.type != "meta"]
    for b, t in zip(before, after):
        assert torch.equal(_bits(b.contiguous()), _bits(t.contiguous()))


def test_torch_compile_aot_eager_records_the_op_and_mutates_the_caches():
    from torch._dynamo.backends.registry import lookup_backend

    key, value, kc, vc, slots = _setup(dtype=torch.float32)
    ek, ev = _expected(key, kc, slots), _expected(value, vc, slots)
    seen = []

    def backend(gm, example_inputs):
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return lookup_backend("aot_eager")(gm, example_inputs)

    def fn(key, value, kc, vc, slots):
        reshape_and_cache(key, value, kc, vc, slots)
        return kc.sum() + vc.sum()

    total = torch.compile(fn, backend=backend, fullgraph=True)(key, value, kc, vc, slots)
    assert any("tritonkit.reshape_and_cache" in s for s in seen)
    assert torch.equal(kc, ek) and torch.equal(vc, ev)
    torch.testing.assert_close(total, ek.sum() + ev.sum())


def test_torch_compile_aot_eager_backend_fp8():
    key, value, _, _, slots = _setup()
    kc = torch.zeros(3, 4, 3, 64, dtype=E4M3, device=DEVICE)
    vc = torch.zeros_like(kc)
    ks, vs = torch.tensor([0.05], device=DEVICE), torch.tensor([0.07], device=DEVICE)
    fn = torch.compile(
        lambda *a: reshape_and_cache(*a, kv_cache_dtype="fp8", k_scale=ks, v_scale=vs),
        backend="aot_eager",
        fullgraph=True,
    )
    fn(key, value, kc, vc, slots)
    _assert_same_e4m3(kc[slots // 4, slots % 4], _e4m3_expected(key, 0.05))
    _assert_same_e4m3(vc[slots // 4, slots % 4], _e4m3_expected(value, 0.07))


def test_custom_op_schema_declares_the_cache_mutation():
    key, value, kc, vc, slots = _setup()
    torch.library.opcheck(
        torch.ops.tritonkit.reshape_and_cache.default,
        (key, value, kc, vc, slots, "auto", None, None),
        test_utils=("test_schema", "test_faketensor"),
    )


@pytest.mark.gpu
@pytest.mark.gpu_alone  # caches past 2^31 elements
@pytest.mark.parametrize("shape", LARGE, ids=lambda s: s.id)
def test_large_past_int32_offsets(shape):
    # caches of 2^31 + 2^20 elements written at their far end; key/value token offsets past 2^31
    assert_valid(SPEC, shape, torch.bfloat16, "randn", device="cuda")
    torch.cuda.empty_cache()
