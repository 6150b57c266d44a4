"""SwiGLU forward and backward, one program per row, modeled on Liger-Kernel's SwiGLU. See SOURCES.md:
linkedin/Liger-Kernel#251.

The row pointer is `base + program_id * stride`. In the `i32row` kernels the program id is int32, so the product
wraps once rows x intermediate passes 2^31 (Gemma2-27B, 36,864 wide, at 81,920 tokens: 3.0e9 elements). The twins
cast the program id to int64, as the fix did. The backward overwrites a and b in place with their gradients,
through the same offsets it loaded them with: each thread writes only what it read, no race.
"""

import torch
import triton
import triton.language as tl

import tritonkit


@triton.jit
def _swiglu_fwd_i32row_kernel(a_ptr, b_ptr, c_ptr, stride, N_COLS: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    a_ptr += row * stride  # expect: int32-offset
    b_ptr += row * stride
    c_ptr += row * stride
    offs = tl.arange(0, BLOCK)
    mask = offs < N_COLS
    a = tl.load(a_ptr + offs, mask=mask, other=0).to(tl.float32)
    b = tl.load(b_ptr + offs, mask=mask, other=0)
    tl.store(c_ptr + offs, a * tl.sigmoid(a) * b, mask=mask)


@triton.jit
def _swiglu_bwd_i32row_kernel(dc_ptr, a_ptr, b_ptr, stride, N_COLS: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    dc_ptr += row * stride  # expect: int32-offset
    a_ptr += row * stride
    b_ptr += row * stride
    offs = tl.arange(0, BLOCK)
    mask = offs < N_COLS
    dc = tl.load(dc_ptr + offs, mask=mask, other=0)
    a = tl.load(a_ptr + offs, mask=mask, other=0).to(tl.float32)
    b = tl.load(b_ptr + offs, mask=mask, other=0)
    sig = tl.sigmoid(a)
    silu = a * sig
    tl.store(a_ptr + offs, dc * (silu * (1 - sig) + sig) * b, mask=mask)
    tl.store(b_ptr + offs, dc * silu, mask=mask)


@triton.jit
def _swiglu_fwd_kernel(a_ptr, b_ptr, c_ptr, stride, N_COLS: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).cast(tl.int64)
    a_ptr += row * stride
    b_ptr += row * stride
    c_ptr += row * stride
    offs = tl.arange(0, BLOCK)
    mask = offs < N_COLS
    a = tl.load(a_ptr + offs, mask=mask, other=0).to(tl.float32)
    b = tl.load(b_ptr + offs, mask=mask, other=0)
    tl.store(c_ptr + offs, a * tl.sigmoid(a) * b, mask=mask)


@triton.jit
def _swiglu_bwd_kernel(dc_ptr, a_ptr, b_ptr, stride, N_COLS: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).cast(tl.int64)
    dc_ptr += row * stride
    a_ptr += row * stride
    b_ptr += row * stride
    offs = tl.arange(0, BLOCK)
    mask = offs < N_COLS
    dc = tl.load(dc_ptr + offs, mask=mask, other=0)
    a = tl.load(a_ptr + offs, mask=mask, other=0).to(tl.float32)
    b = tl.load(b_ptr + offs, mask=mask, other=0)
    sig = tl.sigmoid(a)
    silu = a * sig
    # gradients overwrite the inputs in place, element by element
    tl.store(a_ptr + offs, dc * (silu * (1 - sig) + sig) * b, mask=mask)
    tl.store(b_ptr + offs, dc * silu, mask=mask)


def _settings(n_cols):
    block = triton.next_power_of_2(n_cols)
    return block, (32 if block >= 32768 else 16 if block >= 8192 else 8 if block >= 2048 else 4)


def swiglu_fwd_bwd(fwd, bwd, num_tokens, intermediate):
    m = dict(device="meta", dtype=torch.bfloat16)
    a = torch.empty(num_tokens, intermediate, **m)
    b = torch.empty(num_tokens, intermediate, **m)
    c = torch.empty_like(a)
    block, warps = _settings(intermediate)
    fwd[(num_tokens,)](a, b, c, a.stride(0), N_COLS=intermediate, BLOCK=block, num_warps=warps)
    bwd[(num_tokens,)](torch.empty_like(c), a, b, a.stride(0), N_COLS=intermediate, BLOCK=block, num_warps=warps)


# Llama-3-8B (intermediate 14,336) and Gemma2-27B (36,864); rows = batch x seq_len of a training step
@tritonkit.case(num_tokens=[4096, 81_920], intermediate=[14_336, 36_864])
def swiglu_row_int32(num_tokens, intermediate):
    swiglu_fwd_bwd(_swiglu_fwd_i32row_kernel, _swiglu_bwd_i32row_kernel, num_tokens, intermediate)


@tritonkit.case(num_tokens=[4096, 81_920], intermediate=[14_336, 36_864])
def swiglu_row_int64(num_tokens, intermediate):
    swiglu_fwd_bwd(_swiglu_fwd_kernel, _swiglu_bwd_kernel, num_tokens, intermediate)
