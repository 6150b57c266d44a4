import triton
import triton.language as tl

FLT_MAX = tl.constexpr(3.4028234663852886e38)


@triton.jit
def _rms_norm_fwd_kernel(
    x_ptr,
    res_ptr,
    w_ptr,
    y_ptr,
    r_ptr,
    stride_x,
    stride_res,
    stride_y,
    stride_r,
    hidden,
    eps,
    HAS_RESIDUAL: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    BLOCK: tl.constexpr,
    SINGLE_PASS: tl.constexpr,
):
    """One row per program: ``y = r * rsqrt(mean(r^2) + eps) * w`` (no ``* w`` without HAS_WEIGHT: vLLM's
    weight=None) with ``r = x (+ residual, rounded to x's dtype)``, statistics in float32. SINGLE_PASS keeps the
    row in registers; otherwise it streams the row in BLOCK chunks and reads it twice. When the float32 sum of
    squares overflows (|x| past ~1e19, bf16/fp32 only) the sum is redone on x / max|x|: on the common path that
    costs one compare."""
    pid_row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + pid_row * stride_x
    y_row = y_ptr + pid_row * stride_y
    res_row = res_ptr + pid_row * stride_res
    r_row = r_ptr + pid_row * stride_r
    if SINGLE_PASS:
        offs = tl.arange(0, BLOCK)
        mask = offs < hidden
        # The weight is loaded with x, not after it: a second memory round trip is most of a decode-sized call's
        # time. Loads do not cross a CTA barrier, and the barrier does not wait for them: without it ptxas issues
        # w's load only once x has arrived (sm_90 SASS: after the reduction's first shuffles, or after x + residual;
        # docs/notes/rms-norm.md)
        if HAS_WEIGHT:
            w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            tl.debug_barrier()
        x = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)  # [BLOCK]
        if HAS_RESIDUAL:
            r = (x + tl.load(res_row + offs, mask=mask, other=0.0).to(tl.float32)).to(r_ptr.dtype.element_ty)
            tl.store(r_row + offs, r, mask=mask)
            x = r.to(tl.float32)
        sum_sq = tl.sum(x * x, axis=0)
        rstd = tl.rsqrt(sum_sq / hidden + eps)
        if sum_sq > FLT_MAX:
            inv = 1.0 / tl.max(tl.abs(x), axis=0)
            xs = x * inv
            rstd = tl.rsqrt(tl.sum(xs * xs, axis=0) / hidden + eps * inv * inv) * inv
        if HAS_WEIGHT:
            y = x * rstd * w
        else:
            y = x * rstd
        tl.store(y_row + offs, y.to(y_ptr.dtype.element_ty), mask=mask)
    else:
        if HAS_RESIDUAL:
            src_row = r_row
        else:
            src_row = x_row
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        amax = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, hidden, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < hidden
            x = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
            if HAS_RESIDUAL:
                r = (x + tl.load(res_row + offs, mask=mask, other=0.0).to(tl.float32)).to(r_ptr.dtype.element_ty)
                tl.store(r_row + offs, r, mask=mask)
                x = r.to(tl.float32)
            acc += x * x
            amax = tl.maximum(amax, tl.abs(x))
        sum_sq = tl.sum(acc, axis=0)
        rstd = tl.rsqrt(sum_sq / hidden + eps)
        # the passes below re-read r, which this program just stored
        tl.debug_barrier()
        if sum_sq > FLT_MAX:
            inv = 1.0 / tl.max(amax, axis=0)
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            for start in range(0, hidden, BLOCK):
                offs = start + tl.arange(0, BLOCK)
                xs = tl.load(src_row + offs, mask=offs < hidden, other=0.0).to(tl.float32) * inv
                acc += xs * xs
            rstd = tl.rsqrt(tl.sum(acc, axis=0) / hidden + eps * inv * inv) * inv
        for start in range(0, hidden, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < hidden
            x = tl.load(src_row + offs, mask=mask, other=0.0).to(tl.float32)
            if HAS_WEIGHT:
                w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
                y = x * rstd * w
            else:
                y = x * rstd
            tl.store(y_row + offs, y.to(y_ptr.dtype.element_ty), mask=mask)
