"""low-precision-accumulation: an fp16 loop accumulator (reported) and an fp16 max (not).

The kernels tests/check/test_rules.py checks; each test names its kernels.
"""

import torch
import triton
import triton.language as tl

import tritonkit

M = dict(device="meta")


@triton.jit
def _acc_f16_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float16)
    for i in range(0, n, BLOCK):
        acc += tl.load(x_ptr + i + offs)
    tl.store(y_ptr + offs, acc)


@triton.jit
def _max_f16_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr, tl.max(tl.load(x_ptr + offs), axis=0))


@tritonkit.case(n=[4096])
def precision(n):
    x = torch.empty(n, dtype=torch.float16, **M)
    _acc_f16_kernel[(1,)](x, torch.empty(64, dtype=torch.float16, **M), n, BLOCK=64)
    _max_f16_kernel[(1,)](x, torch.empty(1, dtype=torch.float16, **M), BLOCK=64)
