"""A case that raises for one parameter value: reported with the parameters and the line; the other values run."""

import torch
import triton
import triton.language as tl

import tritonkit


@triton.jit
def _scale_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


@tritonkit.case(n=[1024, -1])
def scale(n):
    if n < 0:
        raise ValueError("n must be non-negative")
    x = torch.empty(n, device="meta", dtype=torch.float32)
    _scale_kernel[(triton.cdiv(n, 256),)](x, n, BLOCK=256)
