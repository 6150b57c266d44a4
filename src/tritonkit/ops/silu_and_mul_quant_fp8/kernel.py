import triton
import triton.language as tl

from .._fp8_jit import abs_max, dynamic_scale, round_to, to_fp8

# QUANT: STATIC y * (1 / scale); TOKEN one dynamic scale per row, y / scale; GROUP one per GROUP_SIZE columns
STATIC = tl.constexpr(0)
TOKEN = tl.constexpr(1)
GROUP = tl.constexpr(2)


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
            amax = tl.maximum(amax, abs_max(_act(x_rows + offs_n[None, :], d, mask, QUANT, dtype), 1))
        s = dynamic_scale(amax, ub_ptr, HAS_UB, UB_ON_SCALE)
        tl.store(s_ptr + offs_m * stride_st, s, mask=mask_m)
        for start in range(0, d, BLOCK_N):
            offs_n = start + tl.arange(0, BLOCK_N)
            mask = mask_m[:, None] & (offs_n < d)[None, :]
            y = _act(x_rows + offs_n[None, :], d, mask, QUANT, dtype)
            tl.store(q_rows + offs_n[None, :], to_fp8(tl.math.div_rn(y, s[:, None])), mask=mask)
    else:
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        mask = mask_m[:, None] & (offs_n < d)[None, :]
        y = _act(x_rows + offs_n[None, :], d, mask, QUANT, dtype)  # [BLOCK_M, BLOCK_N]
        q_ptrs = q_rows + offs_n[None, :]
        if QUANT == STATIC:
            inv = tl.math.div_rn(1.0, tl.load(scale_ptr))
            tl.store(q_ptrs, to_fp8(y * inv), mask=mask)
        elif QUANT == TOKEN:
            s = dynamic_scale(abs_max(y, 1), ub_ptr, HAS_UB, UB_ON_SCALE)  # [BLOCK_M]
            tl.store(s_ptr + offs_m * stride_st, s, mask=mask_m)
            tl.store(q_ptrs, to_fp8(tl.math.div_rn(y, s[:, None])), mask=mask)
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
            q = tl.reshape(to_fp8(tl.math.div_rn(y3, s[:, :, None])), (BLOCK_M, BLOCK_N))
            tl.store(q_ptrs, q, mask=mask)
