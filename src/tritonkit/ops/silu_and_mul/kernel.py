import triton
import triton.language as tl


@triton.jit(do_not_specialize=["n_rows"])
def _silu_and_mul_fwd_kernel(
    x_ptr,
    y_ptr,
    n_rows,
    d,
    stride_x,
    stride_y,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """``y[r, j] = silu(x[r, j]) * x[r, d + j]`` over one ``[BLOCK_M, BLOCK_N]`` tile of rows x columns, in float32
    with one rounding at the store. ``silu(g) = g / (1 + exp(-g))`` as in torch: ``silu(-inf)`` is NaN."""
    pid_m = tl.program_id(0).to(tl.int64)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # int64: row * stride passes 2^31 on large inputs
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_m < n_rows)[:, None] & (offs_n < d)[None, :]
    gate_ptrs = x_ptr + offs_m[:, None] * stride_x + offs_n[None, :]  # [BLOCK_M, BLOCK_N]
    gate = tl.load(gate_ptrs, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(gate_ptrs + d, mask=mask, other=0.0).to(tl.float32)
    y = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(y_ptr + offs_m[:, None] * stride_y + offs_n[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)
