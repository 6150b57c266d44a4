"""Eager PyTorch oracle for qk_norm_rope_cache. Imports no Triton.

Float64 inputs (the validation harness's upcast copies) compute in float64; other dtypes in float32, as eager
PyTorch would. ``dtype`` is the op's dtype: the normalized head is rounded to it before the rotation (the op's
contract), and an fp8 cache quantizes k and v as they are in that dtype. The quantization reproduces the op's
exactly: ``x / scale`` correctly rounded to float32 (float64 division rounded once to float32 is the same number),
clamped to +-448 with NaN kept, rounded to nearest-even e4m3fn by PyTorch."""

import torch

FP8_E4M3_MAX = 448.0
# tokens per step, so a reference over a 2^31-element qkv does not hold several full-size float64 temporaries
_CHUNK_TOKENS = 1 << 14


def quantize_e4m3(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``x / scale`` as the op stores it in an fp8 cache, as float8_e4m3fn."""
    wide = torch.float64 if x.dtype == torch.float64 else torch.float32
    q = (x.to(wide) / scale.to(wide).reshape(())).to(torch.float32)
    # clamp propagates NaN; without it PyTorch would turn |q| >= 464 into NaN (e4m3fn has no inf)
    return q.clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn)


def _rotate(x1, x2, cos, sin, sign: float):
    """``(x1 cos - x2 sin, x2 cos + x1 sin)``; ``sign=+1`` (on magnitudes) gives the size of the terms instead."""
    return x1 * cos + sign * x2 * sin, x2 * cos + x1 * sin


_MANTISSA_BITS = {torch.float16: 10, torch.bfloat16: 7, torch.float32: 23}


def ulp(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The spacing of ``dtype`` at ``|x|`` (its subnormal spacing below its smallest normal), in x's dtype."""
    fi = torch.finfo(dtype)
    e = torch.floor(torch.log2(x.abs().clamp(min=fi.tiny)))
    return torch.exp2(e - _MANTISSA_BITS[dtype])


def _near_midpoint(x: torch.Tensor, rounded: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Where ``x`` lies within ``2^-16 |x|`` of the midpoint between ``rounded`` and its neighbour in ``dtype`` on x's
    side (float32 arithmetic could round it to that neighbour), the distance to the neighbour, else 0. That is the
    spacing at x, not at ``rounded``: x just under 2^k rounds to 2^k from the midpoint 2^k - ulp(x) / 2, half the
    spacing above 2^k away (``rounded`` past the dtype's range keeps its infinite spacing)."""
    u = torch.where(torch.isfinite(rounded), ulp(x, dtype), ulp(rounded, dtype))
    near = (x - rounded).abs() >= 0.5 * u - 2.0**-16 * x.abs()
    return torch.where(near & torch.isfinite(x), u, torch.zeros_like(u))


def norm_rope(
    x: torch.Tensor,
    positions: torch.Tensor,
    cos_sin_cache,
    weight,
    eps: float,
    weight_bias: float,
    is_neox: bool,
    dtype: torch.dtype,
    rotary_dim=None,
    round_norm: bool = True,
    terms: str = "",
) -> torch.Tensor:
    """Heads ``x [T, H, D]`` normed (``weight`` not None) and rotated (``cos_sin_cache`` not None), in the compute
    dtype, not rounded at the end. ``terms="abs"``: ``|x1 cos| + |x2 sin|`` per rotated element (0 elsewhere), the
    size of the terms whose difference each output is. ``terms="flip"``: how far each output moves if the rounding
    of the normalized head to ``dtype`` went the other way where float32 arithmetic could tip it (one ulp of dtype
    for a value within 2^-16 of a rounding midpoint, carried through the rotation; 0 without the rounding)."""
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    x = x.to(compute)
    flips = torch.zeros_like(x)
    if weight is not None:
        w = weight.to(compute) + weight_bias
        x = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps) * w
        if round_norm:
            rounded = x.to(dtype).to(compute)
            if terms == "flip":
                flips = _near_midpoint(x, rounded, dtype)
            x = rounded
    rot = 0 if cos_sin_cache is None else (cos_sin_cache.shape[1] if rotary_dim is None else rotary_dim)
    if terms == "flip":
        x = flips
        out = flips.clone()
    elif terms == "abs":
        x = x.abs()
        out = torch.zeros_like(x)
    else:
        out = x.clone()
    if rot == 0:
        return out
    half, sin_at = rot // 2, cos_sin_cache.shape[1] // 2
    rows = cos_sin_cache[positions.long()].to(compute)
    cos, sin = rows[:, None, :half], rows[:, None, sin_at : sin_at + half]
    if terms:
        cos, sin = cos.abs(), sin.abs()
    sign = 1.0 if terms else -1.0
    if is_neox:
        o1, o2 = _rotate(x[..., :half], x[..., half:rot], cos, sin, sign)
        out[..., :half], out[..., half:rot] = o1, o2
    else:
        o1, o2 = _rotate(x[..., 0:rot:2], x[..., 1:rot:2], cos, sin, sign)
        out[..., 0:rot:2], out[..., 1:rot:2] = o1, o2
    return out


def qk_norm_rope_cache_reference(
    qkv,
    positions,
    cos_sin_cache,
    key_cache,
    value_cache,
    slot_mapping,
    num_q_heads,
    num_kv_heads,
    q_weight=None,
    k_weight=None,
    eps=1e-6,
    weight_bias=0.0,
    is_neox=True,
    kv_cache_dtype="auto",
    k_scale=None,
    v_scale=None,
    dtype=None,
    rotary_dim=None,
    round_norm=True,
):
    """``(q, k, v)``, each ``[T, H, D]`` (float64 for float64 inputs, else qkv's dtype), with k and v written into
    ``key_cache``/``value_cache`` in place at ``slot_mapping`` (``None`` caches: no write). An "auto" cache holds k
    and v as computed (float64 caches unrounded); an fp8 one their quantization in ``dtype``."""
    dtype = dtype or qkv.dtype
    t = qkv.shape[0]
    hq, hk = num_q_heads, num_kv_heads
    d = qkv.shape[1] // (hq + 2 * hk)
    x = qkv.view(t, hq + 2 * hk, d)
    out_dtype = torch.float64 if qkv.dtype == torch.float64 else dtype
    q = torch.empty((t, hq, d), dtype=out_dtype, device=qkv.device)
    k = torch.empty((t, hk, d), dtype=out_dtype, device=qkv.device)
    v = x[:, hq + hk :].to(out_dtype)
    for start in range(0, t, _CHUNK_TOKENS):
        rows = slice(start, start + _CHUNK_TOKENS)
        pos = positions[rows]
        common = (pos, cos_sin_cache)
        tail = (eps, weight_bias, is_neox, dtype, rotary_dim, round_norm)
        q[rows] = norm_rope(x[rows, :hq], *common, q_weight, *tail).to(out_dtype)
        k[rows] = norm_rope(x[rows, hq : hq + hk], *common, k_weight, *tail).to(out_dtype)
    if key_cache is not None:
        s = slot_mapping.shape[0]
        num_slots = key_cache.shape[0] * key_cache.shape[1]
        valid = (slot_mapping >= 0) & (slot_mapping < num_slots)
        slots = slot_mapping[valid].long()
        bs = key_cache.shape[1]
        for src, cache, scale in ((k, key_cache, k_scale), (v, value_cache, v_scale)):
            rows = src[:s][valid]
            if kv_cache_dtype in ("fp8", "fp8_e4m3"):
                rows = quantize_e4m3(rows.to(dtype), scale)
                if cache.dtype == torch.uint8:
                    rows = rows.view(torch.uint8)
            cache[slots // bs, slots % bs] = rows.to(cache.dtype)
    return q, k, v
