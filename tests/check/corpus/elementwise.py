"""Ordinary kernels that must produce no finding: flat elementwise indexing `pid * BLOCK + tl.arange(0, BLOCK)`
whose grid keeps it below 2^31, a per-row kernel with an int64 row offset, and a 2D grid whose int32 row offset
stays in range for every captured size (70,000 tokens x 28,672 = 2.007e9 < 2^31)."""

import torch
import triton
import triton.language as tl

import tritonkit


@triton.jit(do_not_specialize=["n_elements"])
def _silu_and_mul_flat_kernel(x_ptr, out_ptr, n_elements, d, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    row = offs // d
    col = offs % d
    gate = tl.load(x_ptr + row * 2 * d + col, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * 2 * d + d + col, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, (gate / (1.0 + tl.exp(-gate)) * up).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _silu_and_mul_2d_kernel(x_ptr, out_ptr, stride_x, stride_out, d, BLOCK: tl.constexpr):
    pid_tok = tl.program_id(0)
    pid_blk = tl.program_id(1)
    offs = pid_blk * BLOCK + tl.arange(0, BLOCK)
    mask = offs < d
    gate = tl.load(x_ptr + pid_tok * stride_x + offs, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + pid_tok * stride_x + d + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + pid_tok * stride_out + offs, (gate / (1.0 + tl.exp(-gate)) * up).to(out_ptr.dtype.element_ty),
             mask=mask)


@triton.jit
def _rms_norm_rows_kernel(x_ptr, w_ptr, y_ptr, stride_x, stride_y, hidden, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, hidden, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_x + offs, mask=offs < hidden, other=0.0).to(tl.float32)
        acc += x * x
    rstd = tl.rsqrt(tl.sum(acc, axis=0) / hidden + eps)
    for start in range(0, hidden, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < hidden
        x = tl.load(x_ptr + row * stride_x + offs, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * stride_y + offs, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


TOKENS = [1, 16, 17, 4096, 70_000]


@tritonkit.case(num_tokens=TOKENS, d=[14336, 1792])
def silu_and_mul_flat(num_tokens, d):
    x = torch.empty(num_tokens, 2 * d, device="meta", dtype=torch.bfloat16)
    out = torch.empty(num_tokens, d, device="meta", dtype=torch.bfloat16)
    n = num_tokens * d
    _silu_and_mul_flat_kernel[(triton.cdiv(n, 1024),)](x, out, n, d, BLOCK=1024)


@tritonkit.case(num_tokens=TOKENS, d=[14336, 1792])
def silu_and_mul_2d(num_tokens, d):
    x = torch.empty(num_tokens, 2 * d, device="meta", dtype=torch.bfloat16)
    out = torch.empty(num_tokens, d, device="meta", dtype=torch.bfloat16)
    _silu_and_mul_2d_kernel[(num_tokens, triton.cdiv(d, 1024))](x, out, x.stride(0), out.stride(0), d, BLOCK=1024)


@tritonkit.case(num_tokens=TOKENS, hidden=[4096, 8192])
def rms_norm_rows(num_tokens, hidden):
    x = torch.empty(num_tokens, hidden, device="meta", dtype=torch.bfloat16)
    w = torch.empty(hidden, device="meta", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    _rms_norm_rows_kernel[(num_tokens,)](x, w, y, x.stride(0), y.stride(0), hidden, 1e-6, BLOCK=1024)
