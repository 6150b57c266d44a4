"""Offsets the range analysis cannot bound: a non-inlined helper's result (tt.call) and an integer carried by a
while loop. They are reported as notes naming the construct, not as findings, and not as crashes."""

import torch
import triton
import triton.language as tl

import tritonkit


@triton.jit(noinline=True)
def _row_offset(row, stride):
    return row * stride


@triton.jit(do_not_specialize=["n"])
def _noinline_offset_kernel(x_ptr, stride, n):
    row = tl.program_id(0)
    off = _row_offset(row, stride)
    j = 0
    while j < n:
        j += 3
    offs = tl.arange(0, 64)
    tl.store(x_ptr + off + offs, tl.zeros([64], tl.float32))
    tl.store(x_ptr + j + offs, tl.zeros([64], tl.float32))


@tritonkit.case(rows=[4, 64])
def noinline(rows):
    x = torch.empty(rows, 64, device="meta", dtype=torch.float32)
    _noinline_offset_kernel[(rows,)](x, x.stride(0), rows)
