import triton
import triton.language as tl
from triton.language.extra import libdevice

from .._fp8_jit import (
    INTERPRETING,
    abs_max,
    div_by_scale,
    dynamic_scale,
    dynamic_scale_of,
    nan_dropped_abs,
    recip_rn,
    round_to,
    to_fp8,
    widen,
)

try:  # programmatic dependent launch (sm_90+); Triton releases without it never set PDL
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
except ImportError:  # pragma: no cover - older Triton
    gdc_launch_dependents = gdc_wait = None

# QUANT: STATIC y * (1 / scale); TOKEN one dynamic scale per row, y / scale; GROUP one per GROUP_SIZE columns
STATIC = tl.constexpr(0)
TOKEN = tl.constexpr(1)
GROUP = tl.constexpr(2)

# exp(-g) in float32 for bfloat16 g (_exp_neg_bf16); every constant is a float32 value, written out exactly.
# t = 1.5 * 2^23 + n keeps n = rint(-g log2(e)) in its low mantissa bits
_SHIFT = tl.constexpr(12582912.0)
_LOG2E = tl.constexpr(1.4426950216293335)  # float32 nearest log2(e)
_LN2 = tl.constexpr(0.6931471824645996)  # float32 nearest ln(2)
# -128 * _LN2: there s = 0, the polynomial is 1 and 2^128 * 1 is +inf (exp(88.72...) overflows float32); bf16 below
# it (-89, ...) has exp(-g) = inf, and -88.5 above it the finite 2.7e38
_G_INF = tl.constexpr(-88.72283935546875)
# above 20, exp(-g) < 2^-28 and 1 + e rounds to 1 in float32 as the reference's does
_G_ONE = tl.constexpr(20.0)
# exp(-s) on |s| <= ln(2) / 2: a near-minimax degree-5 fit rounded to float32 (the activation is proven exact for
# every bfloat16 g by tests/ops/test_silu_and_mul_quant_fp8_fast.py; degree 4 misses one, g = -3.046875)
_C1 = tl.constexpr(-0.9999997019767761)
_C2 = tl.constexpr(0.4999915063381195)
_C3 = tl.constexpr(-0.1666763722896576)
_C4 = tl.constexpr(0.041897963732481)
_C5 = tl.constexpr(-0.008290305733680725)


@triton.jit
def _exp_neg_bf16(g):
    """``exp(-g)`` in float32 within 5.1 ulp (2.3 for |g| < 16): not correctly rounded, but for every bfloat16 ``g``
    the STATIC and TOKEN activation ``rnd_bf16(g / (1 + e))`` comes out bit for bit the reference's (proven over all
    65536 by the tests). IEEE-exact float32 operations only, so the result is the same on every GPU and on a CPU:
    each product that feeds a sum is an explicit ``tl.fma`` (FMA contraction changes nothing), no MUFU, and 2^n goes
    into the exponent field by an integer add."""
    x = tl.minimum(tl.maximum(g, _G_INF), _G_ONE)
    t = tl.fma(x, -_LOG2E, _SHIFT)
    n = t - _SHIFT
    # s = x + n ln2, |s| <= ln(2) / 2 (+ ulps); exp(-g) = 2^n exp(-s). A one-part ln2 is off by 2^-29: 2 ulp of e
    # at |n| = 128, which the activation absorbs (a second part would cost an FMA)
    s = tl.fma(n, _LN2, x)
    p = tl.fma(tl.fma(tl.fma(tl.fma(tl.fma(_C5, s, _C4), s, _C3), s, _C2), s, _C1), s, 1.0)
    # n is in t's low bits: shifted into the exponent field, the rest of t's pattern shifts out of the 32 bits
    bits = p.to(tl.int32, bitcast=True) + (t.to(tl.int32, bitcast=True) << 23)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _act(x_ptrs, d, mask, QUANT: tl.constexpr, dtype: tl.constexpr, FUSED_FMA: tl.constexpr, FAST_EXP: tl.constexpr):
    """``silu(g) * u`` at vLLM's rounding points, with ``e = exp(-g)`` the float32 nearest (the float64 reference's
    ``e``) or, for bfloat16 STATIC and TOKEN on a GPU (FUSED_FMA), :func:`_exp_neg_bf16`, whose activation is the
    same bit for bit. STATIC and TOKEN as vLLM's silu_and_mul kernels: ``(g / (1 + e))`` rounded to dtype, times u
    rounded to dtype; GROUP as silu_and_mul_per_block_quant: ``g * (1 / (1 + e)) * u`` in float32 (its ``1 + e``
    must be exact, so float64 ``exp`` there)."""
    g = tl.load(x_ptrs, mask=mask, other=0.0)
    return _act_of(g, tl.load(x_ptrs + d, mask=mask, other=0.0), QUANT, dtype, FUSED_FMA, FAST_EXP)


@triton.jit
def _act_of(g, u, QUANT: tl.constexpr, dtype: tl.constexpr, FUSED_FMA: tl.constexpr, FAST_EXP: tl.constexpr):
    """:func:`_act` of the loaded halves ``g`` and ``u`` (x's dtype)."""
    g = widen(g)
    u = widen(u)
    if QUANT != GROUP and FUSED_FMA and FAST_EXP and dtype == tl.bfloat16:
        e = _exp_neg_bf16(g)
    else:
        e = tl.exp(-(g.to(tl.float64))).to(tl.float32)
    if QUANT == GROUP:
        # rcp.rn: the same correctly rounded 1 / (1 + e) as div_rn, 2 instructions a value fewer (sm_90 SASS); the
        # interpreter has no libdevice
        sig = tl.math.div_rn(1.0, 1.0 + e) if INTERPRETING else libdevice.rcp_rn(1.0 + e)
        return g * sig * u
    return round_to(round_to(tl.math.div_rn(g, 1.0 + e), dtype) * u, dtype)


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
    NUM_CHUNKS: tl.constexpr,
    SINGLE_PASS: tl.constexpr,
    FUSED_FMA: tl.constexpr,
    FAST_EXP: tl.constexpr,
):
    """fp8 of ``silu(x[r, :d]) * x[r, d:]`` over one ``[BLOCK_M, BLOCK_N]`` tile. GROUP tiles hold whole groups
    (BLOCK_N a multiple of GROUP_SIZE); TOKEN programs hold whole rows with SINGLE_PASS, as NUM_CHUNKS tiles of
    BLOCK_N columns kept in registers (a 14336-wide row is 7 x 2048, not 16384); otherwise a program walks its rows'
    BLOCK_N-column chunks twice (the amax, then the quantization: the activation is recomputed, not stored). The scale
    of row ``r`` and group ``g`` is at ``r * stride_st + g * stride_sg`` (plain or column-major). FUSED_FMA: tl.fma
    rounds once (every GPU; not Triton 3.6's interpreter), which the float32 ``exp`` and the division through the
    scale's reciprocal need to be exact."""
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
            y = _act(x_rows + offs_n[None, :], d, mask, QUANT, dtype, FUSED_FMA, FAST_EXP)
            amax = tl.maximum(amax, abs_max(y, 1))
        s = dynamic_scale(amax, ub_ptr, HAS_UB, UB_ON_SCALE)
        tl.store(s_ptr + offs_m * stride_st, s, mask=mask_m)
        r = recip_rn(s, FUSED_FMA)[:, None]
        for start in range(0, d, BLOCK_N):
            offs_n = start + tl.arange(0, BLOCK_N)
            mask = mask_m[:, None] & (offs_n < d)[None, :]
            y = _act(x_rows + offs_n[None, :], d, mask, QUANT, dtype, FUSED_FMA, FAST_EXP)
            tl.store(q_rows + offs_n[None, :], to_fp8(div_by_scale(y, s[:, None], r, FUSED_FMA)), mask=mask)
    elif QUANT == TOKEN:
        # the row's chunks stay in registers: their elementwise max first, one reduction for the row. Every chunk
        # (and scale_ub) is loaded before any is computed on, and a CTA barrier keeps the loads there: ptxas otherwise
        # issues later chunks' loads after earlier chunks' arithmetic, several memory round trips in a row of a
        # decode-sized call, whose one program a row is all the grid there is (docs/notes/fused-fp8-small.md)
        ub = 0.0
        if HAS_UB:
            ub = tl.load(ub_ptr)
        gs = ()
        us = ()
        for c in tl.static_range(NUM_CHUNKS):
            offs_n = c * BLOCK_N + tl.arange(0, BLOCK_N)
            mask = mask_m[:, None] & (offs_n < d)[None, :]
            gs = gs + (tl.load(x_rows + offs_n[None, :], mask=mask, other=0.0),)
            us = us + (tl.load(x_rows + offs_n[None, :] + d, mask=mask, other=0.0),)
        tl.debug_barrier()
        ys = ()
        big = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for c in tl.static_range(NUM_CHUNKS):
            y = _act_of(gs[c], us[c], QUANT, dtype, FUSED_FMA, FAST_EXP)  # [BLOCK_M, BLOCK_N]
            big = tl.maximum(big, nan_dropped_abs(y))
            ys = ys + (y,)
        s = dynamic_scale_of(tl.max(big, 1), ub, HAS_UB, UB_ON_SCALE)  # [BLOCK_M]
        tl.store(s_ptr + offs_m * stride_st, s, mask=mask_m)
        r = recip_rn(s, FUSED_FMA)[:, None]
        for c in tl.static_range(NUM_CHUNKS):
            offs_n = c * BLOCK_N + tl.arange(0, BLOCK_N)
            mask = mask_m[:, None] & (offs_n < d)[None, :]
            tl.store(q_rows + offs_n[None, :], to_fp8(div_by_scale(ys[c], s[:, None], r, FUSED_FMA)), mask=mask)
    else:
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        mask = mask_m[:, None] & (offs_n < d)[None, :]
        y = _act(x_rows + offs_n[None, :], d, mask, QUANT, dtype, FUSED_FMA, FAST_EXP)  # [BLOCK_M, BLOCK_N]
        q_ptrs = q_rows + offs_n[None, :]
        if QUANT == STATIC:
            inv = tl.math.div_rn(1.0, tl.load(scale_ptr))
            tl.store(q_ptrs, to_fp8(y * inv), mask=mask)
        else:
            NG: tl.constexpr = BLOCK_N // GROUP_SIZE
            y3 = tl.reshape(y, (BLOCK_M, NG, GROUP_SIZE))
            s = dynamic_scale(abs_max(y3, 2), ub_ptr, HAS_UB, UB_ON_SCALE)  # [BLOCK_M, NG]
            g = pid_n * NG + tl.arange(0, NG)
            tl.store(
                s_ptr + offs_m[:, None] * stride_st + g[None, :] * stride_sg,
                s,
                mask=mask_m[:, None] & (g * GROUP_SIZE < d)[None, :],
            )
            q3 = div_by_scale(y3, s[:, :, None], recip_rn(s, FUSED_FMA)[:, :, None], FUSED_FMA)
            tl.store(q_ptrs, tl.reshape(to_fp8(q3), (BLOCK_M, BLOCK_N)), mask=mask)


@triton.jit(do_not_specialize=["stride_st"])
def _silu_and_mul_quant_fp8_split_kernel(
    x_ptr,
    q_ptr,
    s_ptr,
    part_ptr,
    ub_ptr,
    d,
    stride_x,
    stride_q,
    stride_st,
    AMAX: tl.constexpr,
    HAS_UB: tl.constexpr,
    UB_ON_SCALE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SPLITS: tl.constexpr,
    SPLITS_P2: tl.constexpr,
    PDL: tl.constexpr,
    FUSED_FMA: tl.constexpr,
    FAST_EXP: tl.constexpr,
):
    """TOKEN rows split across programs: program ``(r, p)`` takes row ``r``'s columns ``[p * BLOCK_N, (p + 1) *
    BLOCK_N)`` of its SPLITS (SPLITS_P2 the next power of 2). Two launches of this kernel: AMAX writes each
    program's amax to ``part[r, p]``; the second recomputes its activation, reads the row's SPLITS amaxes, and
    stores the scale (program 0) and its fp8 columns. The row's amax is the max of the parts' (exact), so codes and
    scales are those of the one-program row. PDL (sm_90+): the second launch is the first's programmatic dependent;
    its loads and activation run before ``gdc_wait``, under the first launch, which lets it start as soon as each of
    its programs has."""
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride passes 2^31 on large inputs
    pid_n = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = offs_n < d
    dtype: tl.constexpr = x_ptr.dtype.element_ty
    parts = part_ptr + row * SPLITS
    x_ptrs = x_ptr + row * stride_x + offs_n
    if AMAX:
        if PDL:
            gdc_launch_dependents()
        y = _act(x_ptrs, d, mask, TOKEN, dtype, FUSED_FMA, FAST_EXP)
        tl.store(parts + pid_n, abs_max(y, 0))
    else:
        ub = 0.0
        if HAS_UB:
            ub = tl.load(ub_ptr)
        y = _act(x_ptrs, d, mask, TOKEN, dtype, FUSED_FMA, FAST_EXP)
        if PDL:
            # before any read of the parts: the first launch is complete and its stores are visible past here
            gdc_wait()
        offs_p = tl.arange(0, SPLITS_P2)
        amax = tl.max(tl.load(parts + offs_p, mask=offs_p < SPLITS, other=0.0), 0)
        s = dynamic_scale_of(amax, ub, HAS_UB, UB_ON_SCALE)
        tl.store(s_ptr + row * stride_st, s, mask=pid_n == 0)
        r = recip_rn(s, FUSED_FMA)
        tl.store(q_ptr + row * stride_q + offs_n, to_fp8(div_by_scale(y, s, r, FUSED_FMA)), mask=mask)
