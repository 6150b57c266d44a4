"""grid-limit: each grid dimension against its CUDA limit.

The kernels tests/check/test_rules.py checks; each test names its kernels.
"""

import torch
import triton
import triton.language as tl

import tritonkit

M = dict(device="meta")


@triton.jit
def _grid_kernel(x_ptr):
    tl.store(x_ptr + tl.program_id(0) * 0, 1.0)


@tritonkit.case(grid=[(1, 65_535, 65_535), (2**31, 1, 1), (1, 1, 65_536)])
def grids(grid):
    _grid_kernel[grid](torch.empty(1, **M))
