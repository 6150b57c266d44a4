"""Triton device functions the fused fp8 ops share (imports only Triton, as an op's kernel.py): vLLM's rounding
points, its fp8 e4m3 conversion and its dynamic scale.

Triton 3.6's interpreter converts float32 to bfloat16 by truncation, float32 to e4m3 with the wrong ties and bfloat16
subnormals to float32 wrongly; under it (CPU tests only) these conversions are done by hand, as the GPU does them.
"""

import triton
import triton.language as tl

INTERPRETING = tl.constexpr(bool(triton.knobs.runtime.interpret))
# tl.fma rounds once on every GPU; Triton 3.6's interpreter rounds x * y + z twice, so the fused fp8 kernels' FUSED_FMA
# paths (recip_rn / div_by_scale, silu's float32 exp) stay off there unless a test makes the interpreter's fma fused
# and sets INTERPRETER_FMA_FUSED through tritonkit.ops.overrides (tests/ops/fused_fma.py)
GPU_FMA = not INTERPRETING.value
INTERPRETER_FMA_FUSED = False


def fused_fma() -> bool:
    """A fused fp8 launch's FUSED_FMA: on every GPU; under the interpreter where a test fused its fma."""
    return GPU_FMA or INTERPRETER_FMA_FUSED


FP8_MAX = tl.constexpr(448.0)
# vLLM's min_scaling_factor for e4m3: 1 / (448 * 512), the float32 nearest
MIN_SCALE = tl.constexpr(4.359654017857143e-06)


@triton.jit
def widen(v):
    """``v`` (a float16, bfloat16 or float32 load) as float32, exactly: bfloat16 through its bits under the
    interpreter."""
    if v.dtype == tl.bfloat16 and INTERPRETING:
        return (v.to(tl.int16, bitcast=True).to(tl.int32) << 16).to(tl.float32, bitcast=True)
    return v.to(tl.float32)


@triton.jit
def round_to(v, dtype: tl.constexpr):
    """float32 ``v`` rounded to ``dtype`` (nearest even) and widened back: one of vLLM's rounding points."""
    if dtype == tl.float32:
        return v
    if dtype == tl.bfloat16 and INTERPRETING:
        bits = v.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return bits.to(tl.float32, bitcast=True)
    return v.to(dtype).to(tl.float32)


@triton.jit
def to_fp8(v):
    """vLLM's fp8 conversion of the float32 ``v``: clamped to +-448 with NaN to +448 (its fminf/fmaxf), then
    rounded to the nearest even e4m3 value."""
    v = tl.where(v != v, FP8_MAX, v)  # noqa: PLR0124 - the NaN test
    v = tl.minimum(tl.maximum(v, -FP8_MAX), FP8_MAX)
    if INTERPRETING:
        # to 3 mantissa bits for normals, to multiples of 2^-9 below 2^-6 (subnormals, on |v|: a negative value that
        # rounds to zero stays -0, as the GPU's conversion keeps it): the conversion is then exact
        bits = v.to(tl.uint32, bitcast=True)
        normal = ((bits + 0x7FFFF + ((bits >> 20) & 1)) & 0xFFF00000).to(tl.float32, bitcast=True)
        sub = ((tl.abs(v) + 24576.0) - 24576.0).to(tl.uint32, bitcast=True) | (bits & 0x80000000)
        v = tl.where(tl.abs(v) < 0.015625, sub.to(tl.float32, bitcast=True), normal)
    return v.to(tl.float8e4nv)


@triton.jit
def nan_dropped_abs(y):
    """``|y|`` with NaN as 0: what vLLM's fmaxf amax reduction sees."""
    return tl.where(y == y, tl.abs(y), 0.0)  # noqa: PLR0124 - the NaN test


@triton.jit
def abs_max(y, axis: tl.constexpr):
    """max |y| along ``axis``, NaNs skipped (vLLM's fmaxf reduction); 0 where all are NaN."""
    return tl.max(nan_dropped_abs(y), axis=axis)


@triton.jit
def fminf(a, b):
    """C's fminf: a NaN operand gives the other one (tl.minimum leaves NaN to the target)."""
    return tl.where(b != b, a, tl.minimum(a, b))  # noqa: PLR0124 - the NaN test


@triton.jit
def dynamic_scale(amax, ub_ptr, HAS_UB: tl.constexpr, UB_ON_SCALE: tl.constexpr):
    """``max(min(amax, ub) / 448, MIN_SCALE)`` in float32; with UB_ON_SCALE ``max(min(amax / 448, ub), MIN_SCALE)``
    (vLLM's silu_and_mul_per_block_quant bounds the scale, its norm and plain quants bound the amax)."""
    ub = 0.0
    if HAS_UB:
        ub = tl.load(ub_ptr)
    return dynamic_scale_of(amax, ub, HAS_UB, UB_ON_SCALE)


@triton.jit
def dynamic_scale_of(amax, ub, HAS_UB: tl.constexpr, UB_ON_SCALE: tl.constexpr):
    """:func:`dynamic_scale` with the bound ``ub`` already loaded (a kernel that loads it with its first reads
    saves the round trip a load after the row's reduction costs)."""
    if HAS_UB and not UB_ON_SCALE:
        amax = fminf(amax, ub)
    s = tl.math.div_rn(amax, FP8_MAX)
    if HAS_UB and UB_ON_SCALE:
        s = fminf(s, ub)
    return tl.maximum(s, MIN_SCALE)


@triton.jit
def recip_rn(s, FUSED_FMA: tl.constexpr):
    """``1 / s`` correctly rounded, once a row or a group, for :func:`div_by_scale` (``s`` itself, unused, without
    FUSED_FMA)."""
    if FUSED_FMA:
        return tl.math.div_rn(1.0, s)
    return s


@triton.jit
def div_by_scale(y, s, r, FUSED_FMA: tl.constexpr):
    """``y / s`` correctly rounded (``div_rn``). FUSED_FMA: from ``r = RN(1 / s)`` (:func:`recip_rn`) by Markstein's
    correction, three float32 operations instead of a division: ``q0 = RN(y r)``, ``q1 = RN(q0 - r RN(s q0 - y))``
    (the remainder negated so that y = -0 gives -0). Where ``y r`` overflows (|q| saturates to 448 all the same) or
    ``s`` is inf (q is +-0), the correction is NaN and ``q0`` is the answer; NaN y stays NaN. Proven against float32
    division, specials included, by tests/ops/test_silu_and_mul_quant_fp8_fast.py."""
    if FUSED_FMA:
        q0 = y * r
        # x * -1.0, not -x: Triton's -x is 0 - x (+0 for -0), and the product folds into the FMA as a sign
        q1 = tl.fma(tl.fma(s, q0, y * -1.0) * -1.0, r, q0)
        return tl.where(q1 == q1, q1, q0)  # noqa: PLR0124 - the NaN test
    return tl.math.div_rn(y, s)


# the scales div_by_scale is proven on (tests/ops/test_silu_and_mul_quant_fp8_fast.py): [MIN_SCALE, FLT_MAX / 448]
MAX_PROVEN_SCALE = tl.constexpr(7.595e35)


@triton.jit
def div_by_given_scale(y, s, FUSED_FMA: tl.constexpr):
    """``y / s`` correctly rounded for a scalar scale the caller gave (any float32, read on the device): FUSED_FMA
    and ``s`` in the range div_by_scale is proven on, through RN(1 / s) once and div_by_scale; else ``div_rn``
    (a uniform branch: one of the two runs)."""
    if FUSED_FMA:
        if (s >= MIN_SCALE) & (s <= MAX_PROVEN_SCALE):
            q = div_by_scale(y, s, recip_rn(s, FUSED_FMA), FUSED_FMA)
        else:
            q = tl.math.div_rn(y, tl.broadcast_to(s, y.shape))
    else:
        q = tl.math.div_rn(y, tl.broadcast_to(s, y.shape))
    return q
