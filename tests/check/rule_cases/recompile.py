"""recompile: specialization splits within a sweep, alignment, heuristics, warmup, constexprs from sizes.

The kernels tests/check/test_rules.py checks; each test names its kernels.
"""

import torch
import triton
import triton.language as tl

import tritonkit

M = dict(device="meta")


@triton.jit
def _aligned_kernel(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) + 1)


@triton.jit
def _width_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK).to(tl.int64)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


@tritonkit.case(start=[0, 1], n=[1000, 2**31 + 1000])
def specialization(start, n):
    base = torch.empty(4096, dtype=torch.bfloat16, **M)
    _aligned_kernel[(1,)](base[start:], BLOCK=64)
    _width_kernel[(1,)](base, n, BLOCK=64)


@triton.heuristics({"BLOCK": lambda args: triton.next_power_of_2(args["n"])})
@triton.jit
def _heuristic_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


@triton.jit
def _warmup_kernel(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) * 2)


@tritonkit.case(n=[100, 1000])
def launch_styles(n):
    x = torch.empty(1024, **M)
    _heuristic_kernel[(1,)](x, n)
    _warmup_kernel.warmup(x, BLOCK=64, grid=(1, 70_000))


@triton.jit
def _sweep_default_kernel(x_ptr, n, heads, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n * heads), mask=offs < n * heads)


@triton.jit
def _sweep_named_kernel(x_ptr, n, heads, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n * heads), mask=offs < n * heads)


@tritonkit.case(num_tokens=[16, 17], heads=[16, 17])
def sweep_default(num_tokens, heads):
    # num_tokens is a per-call size, heads a model constant: only num_tokens may not split the compile
    _sweep_default_kernel[(1,)](torch.empty(1024, **M), num_tokens, heads, BLOCK=64)


@tritonkit.case(num_tokens=[16, 17], heads=[16, 17], sweep=["heads"])
def sweep_named(num_tokens, heads):
    _sweep_named_kernel[(1,)](torch.empty(1024, **M), num_tokens, heads, BLOCK=64)


@triton.jit(do_not_specialize=["n"])
def _bucketed_kernel(x_ptr, n, BLOCK_R: tl.constexpr, BACKWARD: tl.constexpr):
    offs = tl.arange(0, BLOCK_R)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(x_ptr + offs, -x if BACKWARD else x * 2, mask=offs < n)


@triton.jit(do_not_specialize=["n"])
def _warps_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


@tritonkit.case(num_reqs=[1, 2, 3, 7, 16, 17, 64])
def per_call_constexpr(num_reqs):
    x = torch.empty(64, **M)
    # a forward and a backward launch in every call: BACKWARD is a use of the kernel, not churn
    for backward in (0, 1):
        _bucketed_kernel[(1,)](x, num_reqs, BLOCK_R=triton.next_power_of_2(num_reqs), BACKWARD=backward)
    _warps_kernel[(1,)](x, num_reqs, BLOCK=64, num_warps=4 if num_reqs < 16 else 8)
    _fusion_kernel[(1,)](x, BLOCK=64, enable_fp_fusion=num_reqs > 16)


@triton.jit
def _fusion_kernel(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) * 2.0 + 1.0)


@tritonkit.case(model=["llama"])
def bucketed_in_one_call(model):
    # another case launching the kernel several times in one call: its BLOCK_R values are uses of that case,
    # they must not hide the churn of the sweep above
    x = torch.empty(64, **M)
    for n in (1, 3):
        _bucketed_kernel[(1,)](x, n, BLOCK_R=triton.next_power_of_2(n), BACKWARD=0)
