"""One kernel that cannot compile (tl.arange needs a power-of-two length) beside one that compiles and has a
grid-limit bug: the failure is reported by name, the other kernel is still checked."""

import torch
import triton
import triton.language as tl

import tritonkit


@triton.jit
def _bad_arange_kernel(x_ptr, n):
    offs = tl.arange(0, 100)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


@triton.jit
def _per_token_y_kernel(x_ptr, stride):
    tok = tl.program_id(1)
    offs = tl.arange(0, 128)
    tl.store(x_ptr + tok.to(tl.int64) * stride + offs, tl.zeros([128], tl.float32))


@tritonkit.case(num_tokens=[16, 100_000])
def both(num_tokens):
    x = torch.empty(num_tokens, 128, device="meta", dtype=torch.float32)
    _bad_arange_kernel[(1,)](x, num_tokens)
    _per_token_y_kernel[(1, num_tokens)](x, x.stride(0))
