"""Ranges narrowed by branch conditions: both arms of an `if`, `elif` chains, early returns, bounds on a `min`.

The kernels tests/check/test_rules.py checks; each test names its kernels.
"""

import torch
import triton
import triton.language as tl

import tritonkit

M = dict(device="meta")


@triton.jit
def _state_shift_kernel(state_ptr, seqlen, state_len, stride, BLOCK: tl.constexpr):
    # in the branch, state_len - seqlen is in [1, state_len - 1]: far from int32's limit whatever seqlen is
    offs = tl.arange(0, BLOCK)
    if seqlen < state_len:
        shift = state_len - seqlen
        tl.store(state_ptr + shift * stride + offs, tl.zeros([BLOCK], tl.float32))


@triton.jit
def _state_shift_else_kernel(state_ptr, seqlen, state_len, stride, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    if seqlen >= state_len:
        tl.store(state_ptr + offs, tl.zeros([BLOCK], tl.float32))
    else:
        shift = state_len - seqlen
        tl.store(state_ptr + shift * stride + offs, tl.zeros([BLOCK], tl.float32))


@triton.jit
def _state_shift_wide_kernel(state_ptr, seqlen, state_len, stride, BLOCK: tl.constexpr):
    # the branch bounds the shift by state_len, which is large here: the overflow is real
    offs = tl.arange(0, BLOCK)
    if seqlen < state_len:
        shift = state_len - seqlen
        tl.store(state_ptr + shift * stride + offs, tl.zeros([BLOCK], tl.float32))


@triton.jit
def _chunk_return_kernel(state_ptr, len_ptr, stride, BLOCK_M: tl.constexpr, BLOCK: tl.constexpr):
    # past the early return min(BLOCK_M, seqlen - chunk * BLOCK_M) > 0, so seqlen > chunk * BLOCK_M >= 0
    chunk = tl.program_id(1)
    seqlen = tl.load(len_ptr + tl.program_id(0))
    seg = min(BLOCK_M, seqlen - chunk * BLOCK_M)
    if seg <= 0:
        return
    offs = tl.arange(0, BLOCK)
    if seqlen < 4:
        tl.store(state_ptr + (offs + seqlen) * stride, tl.zeros([BLOCK], tl.float32))


@triton.jit
def _chunk_noreturn_kernel(state_ptr, len_ptr, stride, BLOCK_M: tl.constexpr, BLOCK: tl.constexpr):
    # the same without the early return: a loaded seqlen may be negative, and (offs + seqlen) * stride wraps
    seqlen = tl.load(len_ptr + tl.program_id(0))
    offs = tl.arange(0, BLOCK)
    if seqlen < 4:
        tl.store(state_ptr + (offs + seqlen) * stride, tl.zeros([BLOCK], tl.float32))


@triton.jit
def _elif_else_kernel(state_ptr, len_ptr, stride, STATE_LEN: tl.constexpr, BLOCK: tl.constexpr):
    # the else arm of an elif chain holds where every earlier condition failed: 2 <= seqlen < STATE_LEN
    seqlen = tl.load(len_ptr + tl.program_id(0))
    offs = tl.arange(0, BLOCK)
    if seqlen <= 0:
        return
    if seqlen >= STATE_LEN:
        tl.store(state_ptr + offs, tl.zeros([BLOCK], tl.float32))
    elif seqlen == 1:
        tl.store(state_ptr + BLOCK + offs, tl.zeros([BLOCK], tl.float32))
    else:
        VAL = STATE_LEN - seqlen
        tl.store(state_ptr + (offs + VAL) * stride, tl.zeros([BLOCK], tl.float32))


@tritonkit.case(chunks=[1, 64])
def negated_conditions(chunks):
    state, lens = torch.empty(2**33, **M), torch.empty(8, dtype=torch.int32, **M)
    _chunk_return_kernel[(8, chunks)](state, lens, 2**26, BLOCK_M=64, BLOCK=16)
    _chunk_noreturn_kernel[(8, chunks)](state, lens, 2**26, BLOCK_M=64, BLOCK=16)
    _elif_else_kernel[(8,)](state, lens, 2**26, STATE_LEN=4, BLOCK=16)


@tritonkit.case(seqlen=[1, 3, 4096, 65536])
def state_shift(seqlen):
    state = torch.empty(4 * 70_000, **M)
    _state_shift_kernel[(1,)](state, seqlen, 4, 70_000, BLOCK=16)
    _state_shift_else_kernel[(1,)](state, seqlen, 4, 70_000, BLOCK=16)
    _state_shift_wide_kernel[(1,)](torch.empty(100_000 * 70_000, **M), seqlen, 100_000, 70_000, BLOCK=16)
