import triton
import triton.language as tl

from .._fp8_jit import (
    FP8_MAX,
    abs_max,
    div_by_scale,
    dynamic_scale,
    dynamic_scale_of,
    nan_dropped_abs,
    recip_rn,
    round_to,
    to_fp8,
)

# QUANT: how y becomes fp8. STATIC: y * (1 / scale) with the float32 scale at scale_ptr. TOKEN: one dynamic scale per
# row, y / scale. GROUP: one per GROUP columns. TENSOR_AMAX: no fp8 written, max over rows of amax / 448 folded into
# s_ptr (zeroed by the host; the quantization is a STATIC launch by that scale). GRID: static scales of a tensor
# indexed by (row // group_m, column // group_n) through their strides.
STATIC = tl.constexpr(0)
TOKEN = tl.constexpr(1)
GROUP = tl.constexpr(2)
TENSOR_AMAX = tl.constexpr(3)
GRID = tl.constexpr(4)


@triton.jit
def _norm_row(x_row, res_row, offs, mask, HAS_RESIDUAL: tl.constexpr, ROUND_RESIDUAL: tl.constexpr):
    """``(x, r)``: the float32 row the statistics and the norm read, and the residual to store (x + residual
    rounded to x's dtype). With ROUND_RESIDUAL the norm reads that rounded sum (vLLM's static forms), otherwise the
    float32 sum (its dynamic forms)."""
    x = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
    r = x
    if HAS_RESIDUAL:
        x = x + tl.load(res_row + offs, mask=mask, other=0.0).to(tl.float32)
        r = round_to(x, x_row.dtype.element_ty)
        if ROUND_RESIDUAL:
            x = r
    return x, r


@triton.jit
def _normed(x, rstd, w_row, offs, mask, NORM: tl.constexpr, dtype: tl.constexpr, ONE_ROUND: tl.constexpr):
    """``y = (x * rstd rounded to dtype) * w``, rounded to dtype: the two rounding points of vLLM's dynamic forms;
    ONE_ROUND (its static forms): ``x * rstd * w`` in float32, rounded to dtype once. ``x`` without NORM."""
    if not NORM:
        return x
    return _normed_by(x, rstd, tl.load(w_row + offs, mask=mask, other=0.0).to(tl.float32), dtype, ONE_ROUND)


@triton.jit
def _normed_by(x, rstd, w, dtype: tl.constexpr, ONE_ROUND: tl.constexpr):
    """:func:`_normed` with the float32 weight already loaded."""
    if ONE_ROUND:
        return round_to(x * rstd * w, dtype)
    return round_to(round_to(x * rstd, dtype) * w, dtype)


@triton.jit
def _inverse(scale, ZERO_INV: tl.constexpr):
    """``RN(1 / scale)``, the factor a static scale is applied by. ZERO_INV: 0 for a zero scale, as vLLM's vectorized
    plain quantization takes it (an all-zero input's dynamic scale is 0, and its codes must be 0, not 0 * inf)."""
    inv = tl.math.div_rn(1.0, scale)
    if ZERO_INV:
        inv = tl.where(scale == 0.0, 0.0, inv)
    return inv


@triton.jit(do_not_specialize=["stride_sb", "stride_st", "stride_sg", "rows_per_batch"])
def _rms_norm_quant_fp8_kernel(
    x_ptr,
    res_ptr,
    w_ptr,
    q_ptr,
    r_ptr,
    s_ptr,
    scale_ptr,
    ub_ptr,
    stride_x,
    stride_res,
    stride_q,
    stride_r,
    stride_sb,
    stride_st,
    stride_sg,
    rows_per_batch,
    group_m,
    group_n,
    hidden,
    eps,
    NORM: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
    ROUND_RESIDUAL: tl.constexpr,
    QUANT: tl.constexpr,
    GROUP_SIZE: tl.constexpr,
    HAS_UB: tl.constexpr,
    BLOCK: tl.constexpr,
    SINGLE_PASS: tl.constexpr,
    EARLY_W: tl.constexpr,
    FUSED_FMA: tl.constexpr,
    ZERO_INV: tl.constexpr,
):
    """One row per program: ``y = rms_norm(x (+ residual)) * w`` at vLLM's rounding points (NORM off: ``y = x``,
    plain quantization), quantized to fp8 by QUANT. The sum of squares and ``1 / sqrt(mean + eps)`` are float64
    (one float32 rounding of rstd, so the fp8 codes are those of the float64 reference, and no overflow below
    float64's range); everything after is float32 as in vLLM. A scale of row ``t`` and group ``g`` sits at
    ``(t // rows_per_batch) * stride_sb + (t % rows_per_batch) * stride_st + g * stride_sg`` (vLLM's plain,
    transposed and TMA-aligned layouts). SINGLE_PASS holds the row in registers; otherwise the row streams in
    BLOCK chunks, read once for the statistics, once more for a per-token amax, and once to write (the residual is
    written only in that last pass: in vLLM's in-place form it is also an input). TOKEN and GROUP divide by their
    scale through its reciprocal with Markstein's correction where FUSED_FMA (tl.fma rounds once: every GPU), the
    same quotient as ``div_rn`` in three float32 operations a value. EARLY_W (SINGLE_PASS with NORM): the weight is
    loaded with x, before the row's reduction, instead of after it. The static modes round the norm once
    (ONE_ROUND, vLLM's static forms) and apply their scale by :func:`_inverse` (ZERO_INV: the host's choice); GROUP
    with NORM multiplies by each group's reciprocal (vLLM's rms_norm_per_block_quant), without NORM divides."""
    ONE_ROUND: tl.constexpr = QUANT == STATIC
    GROUP_RECIP: tl.constexpr = NORM
    pid = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + pid * stride_x
    res_row = res_ptr + pid * stride_res
    q_row = q_ptr + pid * stride_q
    r_row = r_ptr + pid * stride_r
    s_row = s_ptr + (pid // rows_per_batch) * stride_sb + (pid % rows_per_batch) * stride_st
    dtype: tl.constexpr = x_ptr.dtype.element_ty
    if QUANT == STATIC:
        scale = tl.load(scale_ptr)
    if SINGLE_PASS:
        offs = tl.arange(0, BLOCK)
        mask = offs < hidden
        # Every load x does not feed is issued before x's, and a CTA barrier keeps it there: ptxas otherwise issues
        # each where it is used (the static scale's reciprocal before x's load, the weight and scale_ub after the
        # row's reduction), one memory round trip of a decode-sized call each. EARLY_W (the host's choice, config.
        # early_weight): the weight too; TOKEN and GROUP hold it through two reductions, under a register cap
        ub = 0.0
        if HAS_UB:
            ub = tl.load(ub_ptr)
        if EARLY_W:
            w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        if QUANT == GRID:
            gs = tl.load(scale_ptr + (pid // group_m) * stride_st + (offs // group_n) * stride_sg, mask=mask, other=1.0)
        if QUANT == STATIC or QUANT == GRID or HAS_UB or EARLY_W:
            tl.debug_barrier()
        x, r = _norm_row(x_row, res_row, offs, mask, HAS_RESIDUAL, ROUND_RESIDUAL)  # [BLOCK]
        if HAS_RESIDUAL:
            tl.store(r_row + offs, r.to(dtype), mask=mask)
        y = x
        if NORM:
            x64 = x.to(tl.float64)
            rstd = (1.0 / tl.sqrt(tl.sum(x64 * x64, axis=0) / hidden + eps)).to(tl.float32)
            if not EARLY_W:
                w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            y = _normed_by(x, rstd, w, dtype, ONE_ROUND)
        if QUANT == STATIC:
            tl.store(q_row + offs, to_fp8(y * _inverse(scale, ZERO_INV)), mask=mask)
        elif QUANT == TOKEN:
            s = dynamic_scale_of(abs_max(y, 0), ub, HAS_UB, False)
            tl.store(s_row, s)
            tl.store(q_row + offs, to_fp8(div_by_scale(y, s, recip_rn(s, FUSED_FMA), FUSED_FMA)), mask=mask)
        elif QUANT == GROUP:
            y2 = tl.reshape(y, (BLOCK // GROUP_SIZE, GROUP_SIZE))  # [groups, GROUP_SIZE]
            s = dynamic_scale_of(abs_max(y2, 1), ub, HAS_UB, False)
            g = tl.arange(0, BLOCK // GROUP_SIZE)
            tl.store(s_row + g * stride_sg, s, mask=g * GROUP_SIZE < hidden)
            if GROUP_RECIP:
                q2 = y2 * tl.math.div_rn(1.0, s)[:, None]
            else:
                q2 = div_by_scale(y2, s[:, None], recip_rn(s, FUSED_FMA)[:, None], FUSED_FMA)
            tl.store(q_row + offs, tl.reshape(to_fp8(q2), (BLOCK,)), mask=mask)
        elif QUANT == TENSOR_AMAX:
            # amax >= 0: the float max is the integer max of the bits, as vLLM's atomicMaxFloat does it
            tl.atomic_max(s_ptr, tl.math.div_rn(abs_max(y, 0), FP8_MAX))
        else:
            tl.store(q_row + offs, to_fp8(y * _inverse(gs, ZERO_INV)), mask=mask)
    else:
        if QUANT == STATIC:
            inv = _inverse(scale, ZERO_INV)
        rstd = 1.0
        if NORM:
            acc = tl.zeros([BLOCK], dtype=tl.float64)
            for start in range(0, hidden, BLOCK):
                offs = start + tl.arange(0, BLOCK)
                x, r = _norm_row(x_row, res_row, offs, offs < hidden, HAS_RESIDUAL, ROUND_RESIDUAL)
                x64 = x.to(tl.float64)
                acc += x64 * x64
            rstd = (1.0 / tl.sqrt(tl.sum(acc, axis=0) / hidden + eps)).to(tl.float32)
        if QUANT == TOKEN or QUANT == TENSOR_AMAX:
            amax = tl.zeros([BLOCK], dtype=tl.float32)
            for start in range(0, hidden, BLOCK):
                offs = start + tl.arange(0, BLOCK)
                mask = offs < hidden
                x, r = _norm_row(x_row, res_row, offs, mask, HAS_RESIDUAL, ROUND_RESIDUAL)
                y = _normed(x, rstd, w_ptr, offs, mask, NORM, dtype, ONE_ROUND)
                amax = tl.maximum(amax, nan_dropped_abs(y))
            if QUANT == TOKEN:
                s = dynamic_scale(tl.max(amax, axis=0), ub_ptr, HAS_UB, False)
                s_inv = recip_rn(s, FUSED_FMA)
                tl.store(s_row, s)
            else:
                tl.atomic_max(s_ptr, tl.math.div_rn(tl.max(amax, axis=0), FP8_MAX))
        if QUANT != TENSOR_AMAX:
            for start in range(0, hidden, BLOCK):
                offs = start + tl.arange(0, BLOCK)
                mask = offs < hidden
                x, r = _norm_row(x_row, res_row, offs, mask, HAS_RESIDUAL, ROUND_RESIDUAL)
                y = _normed(x, rstd, w_ptr, offs, mask, NORM, dtype, ONE_ROUND)
                if QUANT == STATIC:
                    q = to_fp8(y * inv)
                elif QUANT == TOKEN:
                    q = to_fp8(div_by_scale(y, s, s_inv, FUSED_FMA))
                elif QUANT == GROUP:
                    # BLOCK is a multiple of GROUP_SIZE: a chunk holds whole groups
                    y2 = tl.reshape(y, (BLOCK // GROUP_SIZE, GROUP_SIZE))
                    sg = dynamic_scale(abs_max(y2, 1), ub_ptr, HAS_UB, False)
                    g = start // GROUP_SIZE + tl.arange(0, BLOCK // GROUP_SIZE)
                    tl.store(s_row + g * stride_sg, sg, mask=g * GROUP_SIZE < hidden)
                    if GROUP_RECIP:
                        q2 = y2 * tl.math.div_rn(1.0, sg)[:, None]
                    else:
                        q2 = div_by_scale(y2, sg[:, None], recip_rn(sg, FUSED_FMA)[:, None], FUSED_FMA)
                    q = tl.reshape(to_fp8(q2), (BLOCK,))
                else:
                    gs = tl.load(
                        scale_ptr + (pid // group_m) * stride_st + (offs // group_n) * stride_sg, mask=mask, other=1.0
                    )
                    q = to_fp8(y * _inverse(gs, ZERO_INV))
                if HAS_RESIDUAL:
                    tl.store(r_row + offs, r.to(dtype), mask=mask)
                tl.store(q_row + offs, q, mask=mask)
