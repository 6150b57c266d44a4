"""RMSNorm forward (one program per row) and backward (a fixed grid of one program per SM, each walking a run of
rows with pointers advanced by one row per iteration), modeled on Liger-Kernel's RMSNorm. See SOURCES.md:
linkedin/Liger-Kernel#803 / #804.

In the `i32row` kernels the row index (forward) and the program's first row (backward) are int32 and multiplied
by the row stride: 1,048,576 rows x 4096 (long-context training) wraps. The twins widen them to int64, as the fix
did. The backward computes dX in place of dY (the default in-place mode: dX is dY): iteration i loads row i and
stores row i through the same offsets, then both pointers move one row on, so no two iterations touch the same
row. `ROWS_PER_PROGRAM = cdiv(n_rows, sm_count)` is a tl.constexpr in both, as upstream at these releases: one
compile per row count, a true, minor finding (a later release made it a runtime argument).
"""

import torch
import triton
import triton.language as tl

import tritonkit

SM_COUNT = 132  # H100 SXM: the backward's grid


@triton.jit
def _rms_norm_fwd_i32row_kernel(y_ptr, stride_y, x_ptr, stride_x, w_ptr, rstd_ptr, n_cols, eps,
                                BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    y_ptr += row * stride_y  # expect: int32-offset
    x_ptr += row * stride_x  # expect: int32-offset
    x = tl.load(x_ptr + offs, mask=mask, other=0).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=mask, other=0)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(rstd_ptr + row, rstd)
    tl.store(y_ptr + offs, (x * rstd).to(w.dtype) * w, mask=mask)


@triton.jit
def _rms_norm_bwd_i32row_kernel(  # expect: recompile
    dy_ptr, stride_dy, dx_ptr, stride_dx, x_ptr, stride_x, w_ptr, rstd_ptr, dw_ptr, stride_dw, n_rows, n_cols,
    ROWS_PER_PROGRAM: tl.constexpr, BLOCK: tl.constexpr,
):
    pid = tl.program_id(0)
    row_start = pid * ROWS_PER_PROGRAM
    row_end = tl.minimum(row_start + ROWS_PER_PROGRAM, n_rows)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    dw = tl.zeros([BLOCK], dtype=tl.float32)
    dy_ptr += row_start * stride_dy  # expect: int32-offset
    dx_ptr += row_start * stride_dx  # expect: int32-offset
    x_ptr += row_start * stride_x  # expect: int32-offset
    rstd_ptr += row_start
    w = tl.load(w_ptr + offs, mask=mask, other=0.0)
    for _ in range(row_start, row_end):
        dy = tl.load(dy_ptr + offs, mask=mask, other=0.0)
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(rstd_ptr)
        m = (dy * w).to(tl.float32)
        dx = rstd * m - rstd * rstd * rstd * (tl.sum(m * x, axis=0) / n_cols) * x
        dw += dy * (x * rstd).to(dy.dtype)
        tl.store(dx_ptr + offs, dx.to(dx_ptr.dtype.element_ty), mask=mask)
        dy_ptr += stride_dy
        dx_ptr += stride_dx
        x_ptr += stride_x
        rstd_ptr += 1
    tl.store(dw_ptr + pid * stride_dw + offs, dw, mask=mask)


@triton.jit
def _rms_norm_fwd_kernel(y_ptr, stride_y, x_ptr, stride_x, w_ptr, rstd_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    y_ptr += row * stride_y
    x_ptr += row * stride_x
    x = tl.load(x_ptr + offs, mask=mask, other=0).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=mask, other=0)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(rstd_ptr + row, rstd)
    tl.store(y_ptr + offs, (x * rstd).to(w.dtype) * w, mask=mask)


@triton.jit
def _rms_norm_bwd_kernel(  # expect: recompile
    dy_ptr, stride_dy, dx_ptr, stride_dx, x_ptr, stride_x, w_ptr, rstd_ptr, dw_ptr, stride_dw, n_rows, n_cols,
    ROWS_PER_PROGRAM: tl.constexpr, BLOCK: tl.constexpr,
):
    pid = tl.program_id(0).to(tl.int64)
    row_start = pid * ROWS_PER_PROGRAM
    row_end = tl.minimum(row_start + ROWS_PER_PROGRAM, n_rows)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    dw = tl.zeros([BLOCK], dtype=tl.float32)
    dy_ptr += row_start * stride_dy
    dx_ptr += row_start * stride_dx
    x_ptr += row_start * stride_x
    rstd_ptr += row_start
    w = tl.load(w_ptr + offs, mask=mask, other=0.0)
    for _ in range(row_start, row_end):
        dy = tl.load(dy_ptr + offs, mask=mask, other=0.0)
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(rstd_ptr)
        m = (dy * w).to(tl.float32)
        dx = rstd * m - rstd * rstd * rstd * (tl.sum(m * x, axis=0) / n_cols) * x
        dw += dy * (x * rstd).to(dy.dtype)
        # in place: dx_ptr may be dy_ptr; this row's dy was loaded above, the next iteration reads the next row
        tl.store(dx_ptr + offs, dx.to(dx_ptr.dtype.element_ty), mask=mask)
        dy_ptr += stride_dy
        dx_ptr += stride_dx
        x_ptr += stride_x
        rstd_ptr += 1
    tl.store(dw_ptr + pid * stride_dw + offs, dw, mask=mask)


def rms_norm_fwd_bwd(fwd, bwd, num_tokens, hidden):
    """x [num_tokens, hidden] bf16; the backward writes dX over dY."""
    m = dict(device="meta", dtype=torch.bfloat16)
    x = torch.empty(num_tokens, hidden, **m)
    w = torch.empty(hidden, **m)
    y = torch.empty_like(x)
    rstd = torch.empty(num_tokens, device="meta", dtype=torch.float32)
    block = triton.next_power_of_2(hidden)
    fwd[(num_tokens,)](y, y.stride(0), x, x.stride(0), w, rstd, hidden, 1e-6, BLOCK=block, num_warps=8)
    dy = torch.empty_like(y)
    dw = torch.empty(SM_COUNT, hidden, device="meta", dtype=torch.float32)
    bwd[(SM_COUNT,)](dy, dy.stride(0), dy, dy.stride(0), x, x.stride(0), w, rstd, dw, dw.stride(0), num_tokens,
                     hidden, ROWS_PER_PROGRAM=triton.cdiv(num_tokens, SM_COUNT), BLOCK=block, num_warps=8)


# Llama-3-8B hidden 4096: 4096 rows, and 1,048,576 rows (32 sequences x 32K tokens: 4.3e9 elements)
@tritonkit.case(num_tokens=[4096, 1_048_576])
def rms_norm_row_int32(num_tokens):
    rms_norm_fwd_bwd(_rms_norm_fwd_i32row_kernel, _rms_norm_bwd_i32row_kernel, num_tokens, 4096)


@tritonkit.case(num_tokens=[4096, 1_048_576])
def rms_norm_row_int64(num_tokens):
    rms_norm_fwd_bwd(_rms_norm_fwd_kernel, _rms_norm_bwd_kernel, num_tokens, 4096)
