"""A user's Gluon kernel for tests/check/test_gluon.py: `tritonkit check` reads `gluon.jit` kernels too (in a process
without the interpreter: Gluon does not import under it)."""

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

import tritonkit


@gluon.jit
def _gluon_copy_kernel(x_ptr, y_ptr, n, stride, BLOCK: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    offs = gl.program_id(0) * stride + gl.arange(0, BLOCK, layout=layout)
    mask = offs < n
    gl.store(y_ptr + offs, gl.load(x_ptr + offs, mask=mask), mask=mask)


@gluon.jit
def _gluon_copy64_kernel(x_ptr, y_ptr, n, stride, BLOCK: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    offs = gl.program_id(0).to(gl.int64) * stride + gl.arange(0, BLOCK, layout=layout)
    mask = offs < n
    gl.store(y_ptr + offs, gl.load(x_ptr + offs, mask=mask), mask=mask)


@tritonkit.case(grid=[70_000])
def gluon_copy(grid):
    x = torch.empty(grid << 16, device="meta")
    _gluon_copy_kernel[(grid,)](x, torch.empty_like(x), x.numel(), 1 << 16, BLOCK=128, num_warps=4)
    _gluon_copy64_kernel[(grid,)](x, torch.empty_like(x), x.numel(), 1 << 16, BLOCK=128, num_warps=4)
