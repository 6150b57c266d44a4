"""vLLM's call forms (``tritonkit.ops.vllm``) held to what vLLM's own kernel tests check, over their shape grids.

The semantics and parameter grids are ported from vLLM 0.33.0's ``tests/kernels/core/test_layernorm.py``,
``tests/kernels/core/test_activation.py``, ``tests/kernels/core/test_pos_encoding.py``,
``tests/kernels/attention/test_cache.py`` (the flash-layout ``reshape_and_cache_flash`` tests) and
``tests/kernels/attention/test_triton_unified_attention.py``; the code is our own. Where vLLM compares with its
eager layer at a loose tolerance, these compare with tritonkit's float64 references under the op's tolerance
table, poison outputs first, and check that nothing outside what vLLM writes changes.

Unmarked tests run on a CPU under Triton's interpreter with reduced grids that keep every semantic; the ``gpu``
tests run the same checks at vLLM's own sizes (``pytest -m gpu tests/ops/test_vllm_forms.py``).
"""

import ast
import enum
import inspect
import math
import os
import random

import pytest
import torch
from conftest import DEVICE

from tritonkit.ops import get_spec
from tritonkit.ops import vllm as ops
from tritonkit.ops.paged_attention.reference import paged_attention_reference
from tritonkit.ops.reshape_and_cache.reference import quantize_e4m3
from tritonkit.ops.rms_norm.reference import rms_norm_reference
from tritonkit.ops.rotary_embedding.reference import rotary_embedding_reference
from tritonkit.ops.rotary_embedding.spec import _cos_sin_cache
from tritonkit.ops.silu_and_mul.reference import silu_and_mul_reference
from tritonkit.testing import compare

E4M3 = torch.float8_e4m3fn
SENTINEL = 7.0
ALL_DTYPES = [torch.float16, torch.bfloat16, torch.float32]


def _gen(seed=0):
    return torch.Generator(DEVICE).manual_seed(seed)


def _randn(*shape, g, dtype=torch.float32, scale=1.0):
    return (torch.randn(*shape, generator=g, device=DEVICE) * scale).to(dtype)


def _bits(t):
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def _assert_close(op, out, ref, scale=None):
    c = compare(out, ref, get_spec(op).tolerance_for(out.dtype), scale)
    assert c.passed, c.describe()


# --- rms_norm / fused_add_rms_norm (test_layernorm.py) -------------------------------------------------------------


def _check_rms_norm(num_tokens, hidden, add_residual, dtype, strided_input):
    """vLLM's inputs: x ~ N(0, 1) / (2 hidden), weight ~ N(1, 0.1), residual ~ N(0, 1/(2 hidden)); with
    ``strided_input`` x (and residual) are the first ``hidden`` columns of ``[T, 2 hidden]`` rows."""
    g = _gen()
    eps = 1e-6
    scale = 1 / (2 * hidden)
    width = 2 * hidden if strided_input else hidden
    x_base = _randn(num_tokens, width, g=g, dtype=dtype, scale=scale)
    x_base[:, hidden:] = SENTINEL
    x = x_base[:, :hidden]
    weight = (1 + 0.1 * torch.randn(hidden, generator=g, device=DEVICE)).to(dtype)
    if not add_residual:
        x_before = x_base.clone()
        out = torch.full((num_tokens, hidden), math.nan, dtype=dtype, device=DEVICE)
        assert ops.rms_norm(out, x, weight, eps) is None
        _assert_close("rms_norm", out, rms_norm_reference(x.double(), weight.double(), eps))
        assert torch.equal(_bits(x_base), _bits(x_before)), "rms_norm wrote into its input"
        return
    r_base = _randn(num_tokens, width, g=g, dtype=dtype, scale=scale)
    r_base[:, hidden:] = SENTINEL
    residual = r_base[:, :hidden]
    x0, r0 = x.clone(), residual.clone()
    assert ops.fused_add_rms_norm(x, residual, weight, eps) is None
    # vLLM: residual <- input + residual rounded to the dtype, input <- rms_norm(that rounded sum) * weight
    ref_y, ref_r = rms_norm_reference(x0.double(), weight.double(), eps, residual=r0.double(), dtype=dtype)
    _assert_close("rms_norm", residual, ref_r)
    _assert_close("rms_norm", x, ref_y)
    if strided_input:
        # the columns between the strided rows belong to someone else
        assert (x_base[:, hidden:] == SENTINEL).all() and (r_base[:, hidden:] == SENTINEL).all()


@pytest.mark.parametrize("strided_input", [False, True], ids=["contiguous", "strided"])
@pytest.mark.parametrize("add_residual", [False, True], ids=["plain", "residual"])
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("hidden", [8, 80, 769])
@pytest.mark.parametrize("num_tokens", [1, 7])
def test_rms_norm(num_tokens, hidden, add_residual, dtype, strided_input):
    _check_rms_norm(num_tokens, hidden, add_residual, dtype, strided_input)


@pytest.mark.gpu
@pytest.mark.parametrize("strided_input", [False, True], ids=["contiguous", "strided"])
@pytest.mark.parametrize("add_residual", [False, True], ids=["plain", "residual"])
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("hidden", [8, 768, 769, 5120, 5125, 8192])
@pytest.mark.parametrize("num_tokens", [7, 83, 4096])
def test_rms_norm_vllm_grid(num_tokens, hidden, add_residual, dtype, strided_input):
    _check_rms_norm(num_tokens, hidden, add_residual, dtype, strided_input)


def test_rms_norm_writes_only_the_rows_of_a_strided_out_and_takes_leading_dims():
    g = _gen(1)
    x = _randn(2, 3, 96, g=g, dtype=torch.bfloat16)
    weight = _randn(96, g=g, dtype=torch.bfloat16)
    base = torch.full((2, 3, 100), SENTINEL, dtype=torch.bfloat16, device=DEVICE)
    out = base[..., :96]
    out.fill_(math.nan)
    ops.rms_norm(out, x, weight, 1e-5)
    _assert_close("rms_norm", out, rms_norm_reference(x.double(), weight.double(), 1e-5))
    assert (base[..., 96:] == SENTINEL).all()


@pytest.mark.parametrize("add_residual", [False, True], ids=["plain", "residual"])
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("hidden", [8, 769, 16385], ids=["h8", "h769", "h16385-streamed"])
def test_rms_norm_weight_none_applies_no_scale(hidden, dtype, add_residual):
    # vLLM 0.34: weight=None is y = x * rsqrt(mean(x^2) + eps), no scale (its native op skips the multiply)
    g = _gen(3)
    eps = 1e-6
    tokens = 2 if hidden > 1024 else 5
    x = _randn(tokens, hidden, g=g, dtype=dtype)
    ones = torch.ones(hidden, dtype=dtype, device=DEVICE)
    if not add_residual:
        out = torch.full_like(x, math.nan)
        out_ones = torch.full_like(x, math.nan)
        ops.rms_norm(out, x, None, eps)
        ops.rms_norm(out_ones, x, ones, eps)
        _assert_close("rms_norm", out, rms_norm_reference(x.double(), ones.double(), eps))
        # a scale of one is exact in float32: no weight and a weight of ones round the same
        assert torch.equal(_bits(out), _bits(out_ones))
        return
    residual = _randn(tokens, hidden, g=g, dtype=dtype)
    x0, r0 = x.clone(), residual.clone()
    x1, r1 = x.clone(), residual.clone()
    ops.fused_add_rms_norm(x, residual, None, eps)
    ops.fused_add_rms_norm(x1, r1, ones, eps)
    ref_y, ref_r = rms_norm_reference(x0.double(), ones.double(), eps, residual=r0.double(), dtype=dtype)
    _assert_close("rms_norm", residual, ref_r)
    _assert_close("rms_norm", x, ref_y)
    assert torch.equal(_bits(x), _bits(x1)) and torch.equal(_bits(residual), _bits(r1))


# --- silu_and_mul (test_activation.py) ------------------------------------------------------------------------------


def _check_silu_and_mul(shape, d, dtype):
    x = _randn(*shape, 2 * d, g=_gen(), dtype=dtype)
    x0 = x.clone()
    out = torch.full((*shape, d), math.nan, dtype=dtype, device=DEVICE)
    assert ops.silu_and_mul(out, x) is None
    _assert_close("silu_and_mul", out, silu_and_mul_reference(x.double()))
    assert torch.equal(_bits(x), _bits(x0))


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("d", [64, 80])
@pytest.mark.parametrize("shape", [(1,), (7,), (2, 3)], ids=["1", "7", "2x3"])
def test_silu_and_mul(shape, d, dtype):
    _check_silu_and_mul(shape, d, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("d", [512, 13824])
@pytest.mark.parametrize("num_tokens", [7, 83, 2048])
def test_silu_and_mul_vllm_grid(num_tokens, d, dtype):
    _check_silu_and_mul((num_tokens,), d, dtype)


# --- rotary_embedding (test_pos_encoding.py) ------------------------------------------------------------------------


def _rope_query(form, tokens, heads, head_size, dtype, g):
    """vLLM's layouts of one [T, H, D] tensor: ``(tensor passed, its [T, H, D] view, padded storage or None)``."""
    if form == "flat":
        t = _randn(tokens, heads * head_size, g=g, dtype=dtype)
        return t, t.view(tokens, heads, head_size), None
    if form == "heads":
        t = _randn(tokens, heads, head_size, g=g, dtype=dtype)
        return t, t, None
    # "padded": each head is the start of a wider row (vLLM slices [..., head_size + 64] down to head_size)
    base = _randn(tokens, heads, head_size + 64, g=g, dtype=dtype)
    base[..., head_size:] = SENTINEL
    return base[..., :head_size], base[..., :head_size], base


def _check_rotary(is_neox, form, batch, seq_len, num_heads, head_size, rotary_dim, dtype, use_key, max_position=8192):
    g = _gen()
    rot = rotary_dim or head_size
    cache = _cos_sin_cache(max_position, rot, dtype, DEVICE)  # vLLM casts the rope module, cache included
    positions = torch.randint(0, max_position, (batch, seq_len), generator=g, device=DEVICE)
    tokens = batch * seq_len
    query, q3, q_store = _rope_query(form, tokens, num_heads, head_size, dtype, g)
    key, k3, k_store = _rope_query(form, tokens, num_heads, head_size, dtype, g) if use_key else (None,) * 3
    q0, k0 = q3.clone(), k3.clone() if use_key else None

    # positions [B, S] read as B * S tokens, as vLLM's op does
    assert ops.rotary_embedding(positions, query, key, head_size, cache, is_neox) is None

    flat_pos = positions.reshape(-1)
    ref_q, ref_k = rotary_embedding_reference(
        flat_pos, q0.double(), None if k0 is None else k0.double(), cache, is_neox
    )
    mag_q, mag_k = rotary_embedding_reference(
        flat_pos, q0.double(), None if k0 is None else k0.double(), cache, is_neox, magnitude=True
    )
    _assert_close("rotary_embedding", q3, ref_q, mag_q)
    checks = [(q3, q0, q_store)]
    if use_key:
        _assert_close("rotary_embedding", k3, ref_k, mag_k)
        checks.append((k3, k0, k_store))
    for view, before, store in checks:
        # partial rotary leaves the tail of every head bit for bit; padded rows keep the columns past head_size
        assert torch.equal(_bits(view[..., rot:]), _bits(before[..., rot:]))
        if store is not None:
            assert (store[..., head_size:] == SENTINEL).all()


@pytest.mark.parametrize("use_key", [True, False], ids=["key", "key_none"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("head_size,rotary_dim", [(64, None), (80, 32)], ids=["d64", "d80-rot32"])
@pytest.mark.parametrize("form", ["flat", "heads", "padded"])
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
def test_rotary_embedding(is_neox, form, head_size, rotary_dim, dtype, use_key):
    _check_rotary(is_neox, form, 2, 5, 3, head_size, rotary_dim, dtype, use_key, max_position=512)


@pytest.mark.gpu
@pytest.mark.parametrize("use_key", [True, False], ids=["key", "key_none"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("rotary_dim", [None, 32], ids=["full", "rot32"])
@pytest.mark.parametrize("head_size", [64, 80, 120, 256])
@pytest.mark.parametrize("seq_len", [11, 8192])
@pytest.mark.parametrize("form", ["flat", "heads", "padded"])
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
def test_rotary_embedding_vllm_grid(is_neox, form, seq_len, head_size, rotary_dim, dtype, use_key):
    _check_rotary(is_neox, form, 5, seq_len, 17, head_size, rotary_dim, dtype, use_key)


@pytest.mark.parametrize("form", ["batch_flat", "batch_heads"])
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
def test_rotary_embedding_batched_query_forms(is_neox, form):
    # vLLM's op also takes query/key as [B, S, H * head_size] and [B, S, H, head_size] with positions [B, S]
    # (test_pos_encoding.py passes both): rotated as B * S tokens, in place
    b, s, h, d = 2, 3, 2, 64
    g = _gen(2)
    cache = _cos_sin_cache(64, d, torch.float32, DEVICE)
    positions = torch.randint(0, 64, (b, s), generator=g, device=DEVICE)
    shape = (b, s, h * d) if form == "batch_flat" else (b, s, h, d)
    query, key = _randn(*shape, g=g), _randn(*shape, g=g)
    q0, k0 = query.reshape(b * s, h, d).clone(), key.reshape(b * s, h, d).clone()
    assert ops.rotary_embedding(positions, query, key, d, cache, is_neox) is None
    ref_q, ref_k = rotary_embedding_reference(positions.reshape(-1), q0.double(), k0.double(), cache, is_neox)
    _assert_close("rotary_embedding", query.reshape(b * s, h, d), ref_q)
    _assert_close("rotary_embedding", key.reshape(b * s, h, d), ref_k)


@pytest.mark.parametrize(
    "shape, positions, words",
    [
        ((2, 4, 128), (2, 3), "query must be [2, 3, num_heads * head_size] or [2, 3, num_heads, head_size]"),
        ((6, 100), (6,), "query must be [6, num_heads * head_size]"),
        ((6, 2, 32), (6,), "with head_size 64, got shape (6, 2, 32)"),
        ((6, 128), (2, 3, 1), "positions must be [num_tokens] or [batch_size, seq_len]"),
    ],
)
def test_rotary_embedding_names_the_bad_argument_and_writes_nothing(shape, positions, words):
    g = _gen(5)
    query = _randn(*shape, g=g)
    before = query.clone()
    pos = torch.zeros(positions, dtype=torch.int64, device=DEVICE)
    with pytest.raises(ValueError) as e:
        ops.rotary_embedding(pos, query, None, 64, _cos_sin_cache(64, 64, torch.float32, DEVICE), True)
    assert words in str(e.value)
    assert torch.equal(query, before)


def test_rotary_embedding_refuses_a_batch_it_cannot_view_in_place():
    # [B, S, H * D] whose rows are not evenly strided across the batch: a copy would drop the rotation
    g = _gen(6)
    base = _randn(2, 5, 128, g=g)
    query = base[:, :3]  # batch stride 640, token stride 128: B * S tokens are not one stride apart
    pos = torch.zeros(2, 3, dtype=torch.int64, device=DEVICE)
    with pytest.raises(ValueError, match=r"query of shape \(2, 3, 128\) .* cannot be viewed"):
        ops.rotary_embedding(pos, query, None, 64, _cos_sin_cache(64, 64, torch.float32, DEVICE), True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
def test_rotary_embedding_inverse_rotates_by_the_opposite_angle_and_undoes_the_forward(is_neox, dtype):
    # vLLM 0.34's inverse=True negates sin: the rotation by the cache with its sin half negated, bit for bit
    g = _gen(7)
    t, h, d = 6, 3, 64
    cache = _cos_sin_cache(32, d, torch.float32, DEVICE)
    cos, sin = cache.chunk(2, dim=-1)
    negated = torch.cat((cos, -sin), dim=-1)
    positions = torch.randint(0, 32, (t,), generator=g, device=DEVICE)
    query, key = _randn(t, h * d, g=g, dtype=dtype), _randn(t, 2 * d, g=g, dtype=dtype)
    q0, k0 = query.clone(), key.clone()
    assert ops.rotary_embedding(positions, query, key, d, cache, is_neox, 0, True) is None
    q_neg, k_neg = q0.clone(), k0.clone()
    ops.rotary_embedding(positions, q_neg, k_neg, d, negated, is_neox)
    assert torch.equal(_bits(query), _bits(q_neg)) and torch.equal(_bits(key), _bits(k_neg))
    ref_q, ref_k = rotary_embedding_reference(
        positions, q0.view(t, h, d).double(), k0.view(t, 2, d).double(), negated, is_neox
    )
    _assert_close("rotary_embedding", query.view(t, h, d), ref_q)
    _assert_close("rotary_embedding", key.view(t, 2, d), ref_k)
    # forward then inverse at the same positions gives the input back, up to the two roundings
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    q1, k1 = q0.clone(), k0.clone()
    ops.rotary_embedding(positions, q1, k1, d, cache, is_neox)
    ops.rotary_embedding(positions, q1, k1, d, cache, is_neox, inverse=True)
    torch.testing.assert_close(q1.float(), q0.float(), atol=tol, rtol=tol)
    torch.testing.assert_close(k1.float(), k0.float(), atol=tol, rtol=tol)


@pytest.mark.parametrize("inverse", [False, True], ids=["forward", "inverse"])
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("offset,rot", [(64, 64), (16, 32)], ids=["rot-last", "rot-middle"])
def test_rotary_embedding_rope_dim_offset_rotates_the_dims_from_the_offset(offset, rot, is_neox, inverse):
    # vLLM 0.34: dims [rope_dim_offset, rope_dim_offset + rot_dim) of every head rotate (DeepSeek's indexer: the
    # last rot_dim), the others keep their bits
    g = _gen(8)
    t, h, d = 5, 2, 128
    cache = _cos_sin_cache(16, rot, torch.float32, DEVICE)
    cos, sin = cache.chunk(2, dim=-1)
    used = torch.cat((cos, -sin), dim=-1) if inverse else cache
    positions = torch.randint(0, 16, (t,), generator=g, device=DEVICE)
    query, key = _randn(t, h * d, g=g, dtype=torch.bfloat16), _randn(t, h, d, g=g, dtype=torch.bfloat16)
    q0, k0 = query.view(t, h, d).clone(), key.clone()
    ops.rotary_embedding(positions, query, key, d, cache, is_neox, rope_dim_offset=offset, inverse=inverse)
    for got, before in ((query.view(t, h, d), q0), (key, k0)):
        ref, _ = rotary_embedding_reference(positions, before[..., offset:].double(), None, used, is_neox)
        _assert_close("rotary_embedding", got[..., offset : offset + rot], ref[..., :rot])
        assert torch.equal(_bits(got[..., :offset]), _bits(before[..., :offset]))
        assert torch.equal(_bits(got[..., offset + rot :]), _bits(before[..., offset + rot :]))


@pytest.mark.parametrize(
    "kwargs, exc, words",
    [
        ({"rope_dim_offset": 48}, ValueError, "rope_dim_offset 48 + rot_dim 32 (cos_sin_cache's width) must be at"),
        ({"rope_dim_offset": -2}, ValueError, "rope_dim_offset must be an int in [0, head_size 64), got -2"),
        ({"rope_dim_offset": 2.0}, ValueError, "rope_dim_offset must be an int in [0, head_size 64), got 2.0"),
        ({"inverse": 1}, TypeError, "inverse must be a bool, got int"),
    ],
)
def test_rotary_embedding_names_a_bad_offset_or_inverse_and_writes_nothing(kwargs, exc, words):
    g = _gen(9)
    query, key = _randn(4, 128, g=g), _randn(4, 64, g=g)
    before = query.clone(), key.clone()
    pos = torch.zeros(4, dtype=torch.int64, device=DEVICE)
    with pytest.raises(exc) as e:
        ops.rotary_embedding(pos, query, key, 64, _cos_sin_cache(8, 32, torch.float32, DEVICE), True, **kwargs)
    assert words in str(e.value)
    assert torch.equal(query, before[0]) and torch.equal(key, before[1])


@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
def test_rotary_embedding_rotates_q_and_k_views_of_fused_qkv_in_place(is_neox):
    # vLLM's attention layers split one qkv projection and rotate q and k through their [T, H * D] views
    t, hq, hk, d, rot = 7, 6, 2, 80, 48
    g = _gen(3)
    qkv = _randn(t, (hq + 2 * hk) * d, g=g, dtype=torch.bfloat16)
    qkv0 = qkv.clone()
    q, k, v = qkv.split([hq * d, hk * d, hk * d], dim=-1)
    assert not q.is_contiguous() and not k.is_contiguous()
    positions = torch.randint(0, 256, (t,), generator=g, device=DEVICE, dtype=torch.int32)
    cache = _cos_sin_cache(256, rot, torch.float32, DEVICE)
    assert ops.rotary_embedding(positions, q, k, d, cache, is_neox) is None
    q_before = qkv0[:, : hq * d].reshape(t, hq, d).double()
    k_before = qkv0[:, hq * d : (hq + hk) * d].reshape(t, hk, d).double()
    ref_q, ref_k = rotary_embedding_reference(positions, q_before, k_before, cache, is_neox)
    mag_q, mag_k = rotary_embedding_reference(positions, q_before, k_before, cache, is_neox, magnitude=True)
    _assert_close("rotary_embedding", qkv[:, : hq * d].reshape(t, hq, d), ref_q, mag_q)
    _assert_close("rotary_embedding", qkv[:, hq * d : (hq + hk) * d].reshape(t, hk, d), ref_k, mag_k)
    assert torch.equal(_bits(v), _bits(qkv0[:, (hq + hk) * d :])), "v was written"


# --- reshape_and_cache_flash (test_cache.py) ------------------------------------------------------------------------

# kv_cache_dtype as vLLM names it, and the cache storage: vLLM's test allocates fp8 caches as uint8 bytes; its
# attention backends view them as float8_e4m3fn
KV_MODES = {"auto": ("auto", None), "fp8": ("fp8", torch.uint8), "fp8_e4m3": ("fp8_e4m3", E4M3)}


def _flash_caches(num_blocks, block_size, num_heads, head_size, dtype, storage, g):
    """vLLM's flash layout: key and value caches are kv[:, 0] and kv[:, 1] of one [N, 2, block_size, H, D] tensor,
    filled with random values (random fp8 bytes for an fp8 cache)."""
    shape = (num_blocks, 2, block_size, num_heads, head_size)
    if storage is None:
        kv = _randn(*shape, g=g, dtype=dtype)
    else:
        kv = _randn(*shape, g=g).clamp(-448, 448).to(E4M3).view(storage)
    return kv[:, 0], kv[:, 1]


def _expected_cache(cache, src, slots, block_size, quant_scale, storage):
    """``cache`` with ``src[i]`` at block ``slot // block_size``, offset ``slot % block_size`` for every slot >= 0,
    one token at a time (vLLM's reference), quantized to e4m3 as ``x / scale`` for an fp8 cache."""
    out = cache.clone()
    for i, slot in enumerate(slots.tolist()):
        if slot < 0:
            continue
        row = src[i]
        if storage is not None:
            row = quantize_e4m3(row, quant_scale).view(storage)
        out[slot // block_size, slot % block_size] = row
    return out


def _check_reshape_and_cache_flash(
    num_tokens, num_heads, head_size, block_size, num_blocks, dtype, mode, extra_rows=0, padding_slots=0, seed=0
):
    kv_cache_dtype, storage = KV_MODES[mode]
    g = _gen(seed)
    rows = num_tokens + extra_rows
    # key and value are strided views of one [T, 3, H, D] qkv tensor, as vLLM's test unbinds them
    qkv = _randn(rows, 3, num_heads, head_size, g=g, dtype=dtype)
    _, key, value = qkv.unbind(dim=1)
    key_cache, value_cache = _flash_caches(num_blocks, block_size, num_heads, head_size, dtype, storage, g)
    rng = random.Random(seed)
    slots = rng.sample(range(num_blocks * block_size), num_tokens)
    for i in rng.sample(range(num_tokens), padding_slots):
        slots[i] = -1
    slot_mapping = torch.tensor(slots, dtype=torch.long, device=DEVICE)
    # vLLM's per-tensor scales: amax / 64, 0-d float32 tensors
    k_scale = (key.amax() / 64.0).to(torch.float32)
    v_scale = (value.amax() / 64.0).to(torch.float32)
    want_k = _expected_cache(key_cache, key, slot_mapping, block_size, k_scale, storage)
    want_v = _expected_cache(value_cache, value, slot_mapping, block_size, v_scale, storage)
    qkv0 = qkv.clone()

    assert (
        ops.reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale, v_scale)
        is None
    )

    # every element of both caches: written slots hold the token, all others (padding, rows past slot_mapping,
    # untouched slots) keep their bytes
    assert torch.equal(_bits(key_cache), _bits(want_k)), "key_cache differs from the slot-by-slot reference"
    assert torch.equal(_bits(value_cache), _bits(want_v)), "value_cache differs from the slot-by-slot reference"
    assert torch.equal(_bits(qkv), _bits(qkv0)), "key/value were written"
    if storage is not None:
        # vLLM's own check of an fp8 cache: dequantized written rows match the inputs within e4m3's rounding
        valid = slot_mapping >= 0
        s = slot_mapping[valid]
        for cache, src, scale in ((key_cache, key, k_scale), (value_cache, value, v_scale)):
            got = cache.view(E4M3)[s // block_size, s % block_size].float() * scale
            torch.testing.assert_close(got, src[:num_tokens][valid].float(), atol=1e-3, rtol=0.1)


@pytest.mark.parametrize("mode", list(KV_MODES))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("block_size", [8, 16, 32])
@pytest.mark.parametrize("head_size", [64, 80])
def test_reshape_and_cache_flash(head_size, block_size, dtype, mode):
    _check_reshape_and_cache_flash(21, 2, head_size, block_size, 12, dtype, mode)


@pytest.mark.parametrize("mode", list(KV_MODES))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_reshape_and_cache_flash_skips_padding_slots_and_rows_past_slot_mapping(dtype, mode):
    # vLLM pads key/value to a CUDA-graph size and passes only the real tokens' slots, -1 for padding tokens
    _check_reshape_and_cache_flash(9, 2, 64, 16, 4, dtype, mode, extra_rows=5, padding_slots=3, seed=1)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", list(KV_MODES))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("num_blocks", [512, 5000])
@pytest.mark.parametrize("block_size", [8, 16, 32])
@pytest.mark.parametrize("head_size", [64, 80, 256])
def test_reshape_and_cache_flash_vllm_grid(head_size, block_size, num_blocks, dtype, mode):
    # vLLM halves its NUM_TOKENS (42) and NUM_BLOCKS (1024, 10000) for the flash test; 8 heads
    _check_reshape_and_cache_flash(21, 8, head_size, block_size, num_blocks, dtype, mode)
    _check_reshape_and_cache_flash(
        21, 8, head_size, block_size, num_blocks, dtype, mode, extra_rows=11, padding_slots=4, seed=1
    )


# --- unified_attention (test_triton_unified_attention.py) -----------------------------------------------------------


class KVQuantMode(enum.IntEnum):
    """Stand-in for ``vllm.v1.kv_cache_interface.KVQuantMode`` (the call reads its name)."""

    NONE = 0
    FP8_PER_TENSOR = 1
    INT8_PER_TOKEN_HEAD = 2


PAD_ROWS = 2  # CUDA-graph padding: query rows past cu_seqlens_q[-1]
NUM_SEGMENTS = 16


def _attention_call(
    seq_lens,
    num_heads,
    head_size,
    block_size,
    num_blocks,
    dtype=torch.bfloat16,
    sliding_window=None,
    soft_cap=None,
    fp8=None,
    sinks=False,
    seq_threshold_3D=8,
    seed=0,
):
    """The arguments of vLLM's test for one case (random block tables, random caches, scales 0.5 / 0.25 for an
    fp8 cache), plus PAD_ROWS padding query rows, NaN-poisoned real rows and sentinel padding rows in ``out``.
    ``fp8``: None, "one" (one-element descales) or "expanded" (the scale expanded to [num_seqs, num_kv_heads])."""
    g = _gen(seed)
    hq, hkv = num_heads
    q_lens = [q for q, _ in seq_lens]
    kv_lens = [k for _, k in seq_lens]
    num_seqs, tokens = len(seq_lens), sum(q_lens)
    q = _randn(tokens + PAD_ROWS, hq, head_size, g=g, dtype=dtype)
    k_cache = _randn(num_blocks, block_size, hkv, head_size, g=g, dtype=dtype)
    v_cache = _randn(num_blocks, block_size, hkv, head_size, g=g, dtype=dtype)
    max_blocks = -(-max(kv_lens) // block_size)
    block_table = torch.randint(0, num_blocks, (num_seqs, max_blocks), generator=g, device=DEVICE, dtype=torch.int32)
    out = torch.full_like(q, math.nan)
    out[tokens:] = SENTINEL
    d_pad = 1 << (head_size - 1).bit_length()
    kw = {
        "q": q,
        "k": k_cache,
        "v": v_cache,
        "out": out,
        "cu_seqlens_q": torch.tensor([0] + q_lens, dtype=torch.int32, device=DEVICE).cumsum(0, dtype=torch.int32),
        "max_seqlen_q": max(q_lens),
        "seqused_k": torch.tensor(kv_lens, dtype=torch.int32, device=DEVICE),
        "max_seqlen_k": max(kv_lens),
        "softmax_scale": head_size**-0.5,
        "causal": True,
        "window_size": (sliding_window - 1, 0) if sliding_window else (-1, -1),
        "block_table": block_table,
        "softcap": soft_cap or 0,
        "q_descale": None,
        "k_descale": None,
        "v_descale": None,
        "seq_threshold_3D": seq_threshold_3D,
        "num_par_softmax_segments": NUM_SEGMENTS,
        "softmax_segm_output": torch.full((seq_threshold_3D, hq, NUM_SEGMENTS, d_pad), math.nan, device=DEVICE),
        "softmax_segm_max": torch.full((seq_threshold_3D, hq, NUM_SEGMENTS), math.nan, device=DEVICE),
        "softmax_segm_expsum": torch.full((seq_threshold_3D, hq, NUM_SEGMENTS), math.nan, device=DEVICE),
        "kv_quant_mode": KVQuantMode.NONE,
    }
    if sinks:
        kw["sinks"] = _randn(hq, g=g, scale=2.0)
    if fp8:
        k_scale = torch.tensor(0.5, device=DEVICE)
        v_scale = torch.tensor(0.25, device=DEVICE)
        kw["k"] = (k_cache.float() / k_scale).to(E4M3)
        kw["v"] = (v_cache.float() / v_scale).to(E4M3)
        if fp8 == "one":
            kw["k_descale"], kw["v_descale"] = k_scale.reshape(1), v_scale.reshape(1)
        else:
            kw["k_descale"] = k_scale.expand(num_seqs, hkv)
            kw["v_descale"] = v_scale.expand(num_seqs, hkv)
        kw["kv_quant_mode"] = KVQuantMode.FP8_PER_TENSOR
    return kw


def _attention_reference(kw, magnitude=False):
    """Float64 attention over what the cache holds (dequantized, for fp8), with vLLM's masks: causal and
    bottom-right aligned, a sliding window of ``window_size[0] + 1`` keys, tanh softcap, sinks in the denominator."""
    fp8 = kw["k"].dtype == E4M3
    tokens = int(kw["cu_seqlens_q"][-1])
    # a float64 q makes the oracle compute in float64 (it upcasts only the pages each sequence reads)
    return paged_attention_reference(
        kw["q"][:tokens].double(),
        kw["k"],
        kw["v"],
        cu_seqlens_q=kw["cu_seqlens_q"],
        seqused_k=kw["seqused_k"],
        block_table=kw["block_table"],
        softmax_scale=kw["softmax_scale"],
        causal=True,
        window_size=kw["window_size"],
        softcap=kw["softcap"],
        sinks=kw.get("sinks"),
        k_scale=kw["k_descale"].reshape(-1)[:1] if fp8 else None,
        v_scale=kw["v_descale"].reshape(-1)[:1] if fp8 else None,
        magnitude=magnitude,
    )


def _check_unified_attention(kw):
    tokens = int(kw["cu_seqlens_q"][-1])
    assert ops.unified_attention(**kw) is None
    out = kw["out"]
    # the spec's error scale: sum(p |v|) / sum(p), the oracle over |v|
    _assert_close("paged_attention", out[:tokens], _attention_reference(kw), _attention_reference(kw, magnitude=True))
    assert (out[tokens:] == SENTINEL).all(), "query rows past cu_seqlens_q[-1] were written"


MIXED = [(1, 37), (5, 18), (19, 40)]  # decode, a short chunk over a context, a prefill chunk
DECODE = [(1, 23), (1, 7), (1, 50)]

UA_CASES = {
    "mixed-gqa4-d64": {"seq_lens": MIXED, "num_heads": (8, 2), "head_size": 64},
    "mixed-gqa5-d80-window8-softcap2": {
        "seq_lens": MIXED,
        "num_heads": (5, 1),
        "head_size": 80,
        "sliding_window": 8,
        "soft_cap": 2.0,
        "seq_threshold_3D": 0,
    },
    "decode-mha-softcap2-fp16": {
        "seq_lens": DECODE,
        "num_heads": (4, 4),
        "head_size": 64,
        "soft_cap": 2.0,
        "dtype": torch.float16,
    },
    "decode-gqa4-d80-window8-fp8-expanded": {
        "seq_lens": DECODE,
        "num_heads": (8, 2),
        "head_size": 80,
        "sliding_window": 8,
        "fp8": "expanded",
    },
    "mixed-gqa4-fp8-one": {
        "seq_lens": MIXED,
        "num_heads": (8, 2),
        "head_size": 64,
        "fp8": "one",
        "seq_threshold_3D": 0,
    },
    "mixed-gqa5-sinks": {"seq_lens": MIXED, "num_heads": (5, 1), "head_size": 64, "sinks": True},
}


@pytest.mark.parametrize("case", list(UA_CASES))
def test_unified_attention(case):
    _check_unified_attention(_attention_call(**UA_CASES[case], block_size=16, num_blocks=64))


@pytest.mark.gpu
@pytest.mark.parametrize("fp8", [None, "expanded"], ids=["bf16-kv", "fp8-kv"])
@pytest.mark.parametrize("num_blocks", [32768, 2048])
@pytest.mark.parametrize("soft_cap", [None, 50.0], ids=["no-softcap", "softcap50"])
@pytest.mark.parametrize("sliding_window", [None, 64, 128, 256], ids=lambda w: f"window{w}")
@pytest.mark.parametrize("head_size", [128, 256])
@pytest.mark.parametrize("num_heads", [(4, 4), (8, 2), (5, 1)], ids=lambda h: f"{h[0]}q{h[1]}kv")
@pytest.mark.parametrize(
    "seq_lens", [[(1, 1328), (5, 18), (129, 463)], [(1, 523), (1, 37), (1, 2011)]], ids=["mixed", "decode"]
)
def test_unified_attention_vllm_grid(seq_lens, num_heads, head_size, sliding_window, soft_cap, num_blocks, fp8):
    _check_unified_attention(
        _attention_call(
            seq_lens, num_heads, head_size, 16, num_blocks, sliding_window=sliding_window, soft_cap=soft_cap, fp8=fp8
        )
    )


@pytest.mark.gpu
@pytest.mark.parametrize("seq_lens", [[(1, 1)] * 533, [(533, 533)] * 533], ids=["533-decode", "533-prefill"])
def test_unified_attention_many_sequences(seq_lens):
    _check_unified_attention(_attention_call(seq_lens, (8, 2), 128, 16, 32768, sliding_window=256, soft_cap=50.0))


def test_unified_attention_fp8_descales_as_vllms_test_passes_them():
    # vLLM's test materializes the per-tensor scale as torch.full((num_seqs, num_kv_heads), scale); vLLM's kernel
    # reads its first element
    kw = _attention_call(MIXED, (8, 2), 64, 16, 64, fp8="one", seed=4)
    num_seqs = kw["seqused_k"].shape[0]
    kw["k_descale"] = torch.full((num_seqs, 2), 0.5, device=DEVICE)
    kw["v_descale"] = torch.full((num_seqs, 2), 0.25, device=DEVICE)
    _check_unified_attention(kw)


def test_unified_attention_refuses_a_descale_that_is_not_a_float32_tensor():
    kw = _attention_call(MIXED, (8, 2), 64, 16, 64, fp8="one", seed=4)
    kw["out"].fill_(SENTINEL)
    for bad, words in ((0.5, "got float"), (torch.ones(1, dtype=torch.float16, device=DEVICE), "torch.float16")):
        kw["k_descale"] = bad
        with pytest.raises(TypeError, match=f"k_descale must be a float32 tensor.*{words}"):
            ops.unified_attention(**kw)
    assert (kw["out"] == SENTINEL).all()


def test_unified_attention_accepts_and_ignores_the_scratch_arguments():
    # vLLM sizes softmax_segm_* for its 3D decode kernel; tritonkit needs none of them: the result is the same
    # bit for bit with them, without them, and with use_td, and the scratch tensors are not written
    kw = _attention_call(MIXED, (8, 2), 64, 16, 64, seed=5)
    ops.unified_attention(**kw)
    with_scratch = kw["out"].clone()
    scratch = {k: kw[k] for k in ("softmax_segm_output", "softmax_segm_max", "softmax_segm_expsum")}
    assert all(torch.isnan(t).all() for t in scratch.values())
    for k in ("seq_threshold_3D", "num_par_softmax_segments", *scratch, "kv_quant_mode"):
        kw.pop(k)
    kw["out"] = torch.full_like(with_scratch, SENTINEL)
    ops.unified_attention(**kw)
    assert torch.equal(_bits(kw["out"]), _bits(with_scratch))
    kw["out"].fill_(SENTINEL)
    ops.unified_attention(**kw, use_td=True)
    assert torch.equal(_bits(kw["out"]), _bits(with_scratch))


def test_unified_attention_names_a_window_size_of_none():
    # vLLM's own function indexes window_size[0], so None is no window there either: a TypeError naming the
    # argument and the spelling of no window, before anything is written (it was "'NoneType' is not iterable")
    kw = _attention_call(MIXED, (8, 2), 64, 16, 64, seed=6)
    kw["out"].fill_(SENTINEL)
    kw["window_size"] = None
    with pytest.raises(TypeError, match=r"^window_size must be a pair of ints .*\(-1, -1\): no window.*got None"):
        ops.unified_attention(**kw)
    assert (kw["out"] == SENTINEL).all(), "a refused call wrote out"
    kw["window_size"] = [-1, -1]
    ops.unified_attention(**kw)
    assert not (kw["out"][: kw["cu_seqlens_q"][-1]] == SENTINEL).any()


def _ONE():
    return torch.ones(1, device=DEVICE)


REFUSED = {
    "q_descale": lambda kw: {"q_descale": _ONE()},
    "output_scale": lambda kw: {"output_scale": _ONE()},
    "alibi_slopes": lambda kw: {"alibi_slopes": torch.ones(8, device=DEVICE)},
    "use_alibi_sqrt": lambda kw: {"use_alibi_sqrt": True},
    "qq_bias": lambda kw: {"qq_bias": torch.zeros(64, 64, device=DEVICE)},
    "mm_prefix_range": lambda kw: {"mm_prefix_range": torch.zeros(3, 1, 2, dtype=torch.int32, device=DEVICE)},
    "rswa_prefix_lens": lambda kw: {"rswa_prefix_lens": torch.zeros(3, dtype=torch.int32, device=DEVICE)},
    "rswa_window": lambda kw: {"rswa_window": 16},
    "chunk_lookback": lambda kw: {"chunk_lookback": 4},
    "k_scale_cache": lambda kw: {"k_scale_cache": _ONE()},
    "v_scale_cache": lambda kw: {"v_scale_cache": _ONE()},
    "causal": lambda kw: {"causal": torch.ones(3, dtype=torch.bool, device=DEVICE)},
    "kv_quant_mode": lambda kw: {"kv_quant_mode": KVQuantMode.INT8_PER_TOKEN_HEAD},
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_unified_attention_refuses_unsupported_features_by_name(name):
    kw = _attention_call(MIXED, (8, 2), 64, 16, 64, seed=6)
    kw["out"].fill_(SENTINEL)
    kw.update(REFUSED[name](kw))
    with pytest.raises(NotImplementedError, match=name):
        ops.unified_attention(**kw)
    assert (kw["out"] == SENTINEL).all(), "a refused call wrote out"


# --- the call forms' signatures against vLLM 0.34.0 ------------------------------------------------------------------

# Each form's parameters as vLLM 0.34.0 declares them (its wheel: vllm/_custom_ops.py,
# vllm/v1/attention/ops/triton_unified_attention.py, vllm/model_executor/layers/fused_moe/fused_moe.py): (name,
# default as vLLM's source writes it, or None for a required parameter). silu_and_mul is torch.ops._C's, whose schema
# lives in the C++ bindings: its two positional tensors.
VLLM_SIGNATURES = {
    "rms_norm": [("out", None), ("input", None), ("weight", None), ("epsilon", None)],
    "fused_add_rms_norm": [("input", None), ("residual", None), ("weight", None), ("epsilon", None)],
    "silu_and_mul": [("out", None), ("input", None)],
    "rotary_embedding": [
        ("positions", None),
        ("query", None),
        ("key", None),
        ("head_size", None),
        ("cos_sin_cache", None),
        ("is_neox", None),
        ("rope_dim_offset", "0"),
        ("inverse", "False"),
    ],
    "reshape_and_cache_flash": [
        ("key", None),
        ("value", None),
        ("key_cache", None),
        ("value_cache", None),
        ("slot_mapping", None),
        ("kv_cache_dtype", None),
        ("k_scale", None),
        ("v_scale", None),
    ],
    "unified_attention": [
        *[
            (n, None)
            for n in (
                "q k v out cu_seqlens_q max_seqlen_q seqused_k max_seqlen_k softmax_scale causal window_size "
                "block_table softcap q_descale k_descale v_descale"
            ).split()
        ],
        *[
            (n, "None")
            for n in (
                "seq_threshold_3D num_par_softmax_segments softmax_segm_output softmax_segm_max softmax_segm_expsum "
                "alibi_slopes output_scale qq_bias sinks mm_prefix_range rswa_prefix_lens rswa_window"
            ).split()
        ],
        ("use_alibi_sqrt", "False"),
        ("kv_quant_mode", "KVQuantMode.NONE"),
        ("k_scale_cache", "None"),
        ("v_scale_cache", "None"),
        ("chunk_lookback", "-1"),
        ("use_td", "False"),
        ("mm_prefix_clamp_sliding_window", "False"),
    ],
    "topk_softmax": [
        ("topk_weights", None),
        ("topk_ids", None),
        ("token_expert_indices", None),
        ("gating_output", None),
        ("renormalize", "False"),
        ("e_score_correction_bias", "None"),
        ("is_padding", "None"),
    ],
    "moe_align_block_size": [
        ("topk_ids", None),
        ("num_experts", None),
        ("block_size", None),
        ("sorted_token_ids", None),
        ("experts_ids", None),
        ("num_tokens_post_pad", None),
        ("expert_map", "None"),
        ("scatter_idx", "None"),
    ],
    "fused_experts": [
        ("hidden_states", None),
        ("w1", None),
        ("w2", None),
        ("topk_weights", None),
        ("topk_ids", None),
        ("activation", "MoEActivation.SILU"),
        ("apply_router_weight_on_input", "False"),
        ("global_num_experts", "-1"),
        ("expert_map", "None"),
        ("quant_config", "None"),
    ],
}
# vLLM's enum defaults, which tritonkit cannot import: the forms default to the value each reads from the member
# (unified_attention reads kv_quant_mode's name, fused_experts activation's value)
_ENUM_STAND_INS = {"KVQuantMode.NONE": None, "MoEActivation.SILU": "silu"}
_VLLM_SRC = os.environ.get("TRITONKIT_VLLM_SRC", "/tmp/vllm-wheel/src/vllm")
_VLLM_FILES = {
    "_custom_ops.py": (
        "rms_norm",
        "fused_add_rms_norm",
        "rotary_embedding",
        "reshape_and_cache_flash",
        "topk_softmax",
        "moe_align_block_size",
    ),
    "v1/attention/ops/triton_unified_attention.py": ("unified_attention",),
    "model_executor/layers/fused_moe/fused_moe.py": ("fused_experts",),
}


def test_vllm_version_is_the_one_the_signatures_record():
    assert ops.VLLM_VERSION == "0.34.0"


@pytest.mark.parametrize("name", VLLM_SIGNATURES)
def test_form_takes_vllms_parameters_in_order_with_its_defaults(name):
    params = list(inspect.signature(getattr(ops, name)).parameters.values())
    assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params), name
    got = [(p.name, p.default) for p in params]
    want = [
        (
            n,
            inspect.Parameter.empty
            if d is None
            else _ENUM_STAND_INS[d]
            if d in _ENUM_STAND_INS
            else ast.literal_eval(d),
        )
        for n, d in VLLM_SIGNATURES[name]
    ]
    assert got == want


@pytest.mark.skipif(not os.path.isdir(_VLLM_SRC), reason=f"no unpacked vLLM 0.34.0 wheel at {_VLLM_SRC}")
def test_recorded_signatures_are_the_unpacked_vllm_wheels():
    # the literals above against the wheel's source, where one is unpacked (TRITONKIT_VLLM_SRC; CI has none)
    seen = {}
    for path, names in _VLLM_FILES.items():
        for node in ast.parse(open(os.path.join(_VLLM_SRC, path)).read()).body:
            if isinstance(node, ast.FunctionDef) and node.name in names:
                a = node.args
                assert not (a.posonlyargs or a.vararg or a.kwonlyargs or a.kwarg), node.name
                defaults = [None] * (len(a.args) - len(a.defaults)) + [ast.unparse(d) for d in a.defaults]
                seen[node.name] = [(p.arg, d) for p, d in zip(a.args, defaults)]
    assert seen == {n: s for n, s in VLLM_SIGNATURES.items() if n != "silu_and_mul"}
