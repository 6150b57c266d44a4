import triton
import triton.language as tl

# Triton 3.6's interpreter converts float32 to bfloat16 by truncation and float32 to e4m3 with the wrong ties; under
# it (CPU tests only) both roundings are done to nearest even by hand, as the GPU does them.
_INTERPRETING = tl.constexpr(bool(triton.knobs.runtime.interpret))
FP8_MAX = tl.constexpr(448.0)
# vLLM's min_scaling_factor for e4m3: 1 / (448 * 512), the float32 nearest
MIN_SCALE = tl.constexpr(4.359654017857143e-06)
# QUANT: STATIC y * (1 / scale); TOKEN one dynamic scale per row, y / scale; GROUP one per GROUP_SIZE columns
STATIC = tl.constexpr(0)
TOKEN = tl.constexpr(1)
GROUP = tl.constexpr(2)


@triton.jit
def _round_to(v, dtype: tl.constexpr):
    """float32 ``v`` rounded to ``dtype`` (nearest even) and widened back: one of vLLM's rounding points."""
    if dtype == tl.float32:
        return v
    if dtype == tl.bfloat16 and _INTERPRETING:
        bits = v.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return bits.to(tl.float32, bitcast=True)
    return v.to(dtype).to(tl.float32)


@triton.jit
def _to_fp8(v):
    """vLLM's fp8 conversion of the float32 ``v``: clamped to +-448 with NaN to +448 (its fminf/fmaxf), then
    rounded to the nearest even e4m3 value."""
    v = tl.where(v != v, FP8_MAX, v)  # noqa: PLR0124 - the NaN test
    v = tl.minimum(tl.maximum(v, -FP8_MAX), FP8_MAX)
    if _INTERPRETING:
        # to 3 mantissa bits for normals, to multiples of 2^-9 below 2^-6 (subnormals, on |v|: a negative value that
        # rounds to zero stays -0, as the GPU's conversion keeps it): the conversion is then exact
        bits = v.to(tl.uint32, bitcast=True)
        normal = ((bits + 0x7FFFF + ((bits >> 20) & 1)) & 0xFFF00000).to(tl.float32, bitcast=True)
        sub = ((tl.abs(v) + 24576.0) - 24576.0).to(tl.uint32, bitcast=True) | (bits & 0x80000000)
        v = tl.where(tl.abs(v) < 0.015625, sub.to(tl.float32, bitcast=True), normal)
    return v.to(tl.float8e4nv)


@triton.jit
def _scale(amax, ub_ptr, HAS_UB: tl.constexpr, UB_ON_SCALE: tl.constexpr):
    """The float32 dynamic scale: ``max(min(amax, ub) / 448, MIN_SCALE)``, or with UB_ON_SCALE (vLLM's
    silu_and_mul_per_block_quant) ``max(min(amax / 448, ub), MIN_SCALE)``; a NaN ub bounds nothing (C's fminf)."""
    if HAS_UB and not UB_ON_SCALE:
        ub = tl.load(ub_ptr)
        amax = tl.where(ub != ub, amax, tl.minimum(amax, ub))  # noqa: PLR0124 - the NaN test
    s = tl.math.div_rn(amax, FP8_MAX)
    if HAS_UB and UB_ON_SCALE:
        ub = tl.load(ub_ptr)
        s = tl.where(ub != ub, s, tl.minimum(s, ub))  # noqa: PLR0124 - the NaN test
    return tl.maximum(s, MIN_SCALE)


@triton.jit
def _act(x_ptrs, d, mask, QUANT: tl.constexpr, dtype: tl.constexpr):
    """``silu(g) * u`` at vLLM's rounding points, ``exp`` in float64 rounded once to float32 (a correctly rounded
    expf, so the float64 reference is matched bit for bit). STATIC and TOKEN as its silu_and_mul kernels:
    ``(g / (1 + e))`` rounded to dtype, times u rounded to dtype; GROUP as silu_and_mul_per_block_quant: ``g * (1 /
    (1 + e)) * u`` in float32."""
    g = tl.load(x_ptrs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(x_ptrs + d, mask=mask, other=0.0).to(tl.float32)
    e = tl.exp(-(g.to(tl.float64))).to(tl.float32)
    if QUANT == GROUP:
        return g * tl.math.div_rn(1.0, 1.0 + e) * u
    return _round_to(_round_to(tl.math.div_rn(g, 1.0 + e), dtype) * u, dtype)


@triton.jit
def _amax(y, axis: tl.constexpr):
    """max |y| along ``axis``, NaNs skipped (vLLM's fmaxf reduction)."""
    return tl.max(tl.where(y == y, tl.abs(y), 0.0), axis=axis)  # noqa: PLR0124 - the NaN test


@triton.jit(do_not_specialize=["n_rows", "stride_st", "stride_sg"])
def _silu_and_mul_quant_fp8_kernel(
    x_ptr,
    q_ptr,
    s_ptr,
    scale_ptr,
    ub_ptr,
    n_rows,
    d,
    stride_x,
    stride_q,
    stride_st,
    stride_sg,
    QUANT: tl.constexpr,
    GROUP_SIZE: tl.constexpr,
    HAS_UB: tl.constexpr,
    UB_ON_SCALE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SINGLE_PASS: tl.constexpr,
):
    """fp8 of ``silu(x[r, :d]) * x[r, d:]`` over one ``[BLOCK_M, BLOCK_N]`` tile. GROUP tiles hold whole groups
    (BLOCK_N a multiple of GROUP_SIZE); TOKEN tiles whole rows with SINGLE_PASS (BLOCK_N >= d), otherwise a program
    walks its rows' BLOCK_N-column chunks twice (the amax, then the quantization: the activation is recomputed, not
    stored). The scale of row ``r`` and group ``g`` is at ``r * stride_st + g * stride_sg`` (plain or
    column-major)."""
    pid_m = tl.program_id(0).to(tl.int64)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # int64: row * stride passes 2^31 on large inputs
    mask_m = offs_m < n_rows
    x_rows = x_ptr + offs_m[:, None] * stride_x
    q_rows = q_ptr + offs_m[:, None] * stride_q
    dtype: tl.constexpr = x_ptr.dtype.element_ty
    if QUANT == TOKEN and not SINGLE_PASS:
        amax = tl.zeros([BLOCK_M], dtype=tl.float32)
        for start in range(0, d, BLOCK_N):
            offs_n = start + tl.arange(0, BLOCK_N)
            mask = mask_m[:, None] & (offs_n < d)[None, :]
            amax = tl.maximum(amax, _amax(_act(x_rows + offs_n[None, :], d, mask, QUANT, dtype), 1))
        s = _scale(amax, ub_ptr, HAS_UB, UB_ON_SCALE)
        tl.store(s_ptr + offs_m * stride_st, s, mask=mask_m)
        for start in range(0, d, BLOCK_N):
            offs_n = start + tl.arange(0, BLOCK_N)
            mask = mask_m[:, None] & (offs_n < d)[None, :]
            y = _act(x_rows + offs_n[None, :], d, mask, QUANT, dtype)
            tl.store(q_rows + offs_n[None, :], _to_fp8(tl.math.div_rn(y, s[:, None])), mask=mask)
    else:
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        mask = mask_m[:, None] & (offs_n < d)[None, :]
        y = _act(x_rows + offs_n[None, :], d, mask, QUANT, dtype)  # [BLOCK_M, BLOCK_N]
        q_ptrs = q_rows + offs_n[None, :]
        if QUANT == STATIC:
            inv = tl.math.div_rn(1.0, tl.load(scale_ptr))
            tl.store(q_ptrs, _to_fp8(y * inv), mask=mask)
        elif QUANT == TOKEN:
            s = _scale(_amax(y, 1), ub_ptr, HAS_UB, UB_ON_SCALE)  # [BLOCK_M]
            tl.store(s_ptr + offs_m * stride_st, s, mask=mask_m)
            tl.store(q_ptrs, _to_fp8(tl.math.div_rn(y, s[:, None])), mask=mask)
        else:
            NG: tl.constexpr = BLOCK_N // GROUP_SIZE
            y3 = tl.reshape(y, (BLOCK_M, NG, GROUP_SIZE))
            s = _scale(_amax(y3, 2), ub_ptr, HAS_UB, UB_ON_SCALE)  # [BLOCK_M, NG]
            g = pid_n * NG + tl.arange(0, NG)
            tl.store(
                s_ptr + offs_m[:, None] * stride_st + g[None, :] * stride_sg,
                s,
                mask=mask_m[:, None] & (g * GROUP_SIZE < d)[None, :],
            )
            q = tl.reshape(_to_fp8(tl.math.div_rn(y3, s[:, :, None])), (BLOCK_M, BLOCK_N))
            tl.store(q_ptrs, q, mask=mask)
