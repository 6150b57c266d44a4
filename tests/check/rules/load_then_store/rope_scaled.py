"""In-place rotary embedding scaled by the head's RMS, on q [num_tokens, num_heads, head_size], neox style (rotate
halves), cos/sin cache [max_position, rot_dim] indexed by an int64 position per token.

Seeded bug (load-then-store): the whole head is loaded in one layout for its norm, then the rotated halves are
stored in another, over elements other lanes may not have loaded yet, with no barrier between.
The twin puts a tl.debug_barrier() between the last load of the head and the stores.
"""

import torch
import triton
import triton.language as tl

import tritonkit


@triton.jit
def _rope_scaled_racy_kernel(
    q_ptr, pos_ptr, cos_sin_ptr, stride_q_tok, stride_q_head, stride_cs, eps,
    HEAD_SIZE: tl.constexpr, HALF: tl.constexpr,
):
    pid_tok = tl.program_id(0)
    pid_head = tl.program_id(1)
    base = q_ptr + pid_tok.to(tl.int64) * stride_q_tok + pid_head * stride_q_head
    offs = tl.arange(0, HEAD_SIZE)
    x = tl.load(base + offs).to(tl.float32)  # [HEAD_SIZE]
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / HEAD_SIZE + eps)
    offs_h = tl.arange(0, HALF)
    pos = tl.load(pos_ptr + pid_tok)
    cos = tl.load(cos_sin_ptr + pos * stride_cs + offs_h).to(tl.float32)
    sin = tl.load(cos_sin_ptr + pos * stride_cs + HALF + offs_h).to(tl.float32)
    x1 = tl.load(base + offs_h).to(tl.float32)
    x2 = tl.load(base + HALF + offs_h).to(tl.float32)
    y1 = (x1 * cos - x2 * sin) * rstd
    y2 = (x2 * cos + x1 * sin) * rstd
    tl.store(base + offs_h, y1.to(q_ptr.dtype.element_ty))  # seeded bug: load-then-store
    tl.store(base + HALF + offs_h, y2.to(q_ptr.dtype.element_ty))  # seeded bug: load-then-store


@triton.jit
def _rope_scaled_kernel(
    q_ptr, pos_ptr, cos_sin_ptr, stride_q_tok, stride_q_head, stride_cs, eps,
    HEAD_SIZE: tl.constexpr, HALF: tl.constexpr,
):
    pid_tok = tl.program_id(0)
    pid_head = tl.program_id(1)
    base = q_ptr + pid_tok.to(tl.int64) * stride_q_tok + pid_head * stride_q_head
    offs = tl.arange(0, HEAD_SIZE)
    x = tl.load(base + offs).to(tl.float32)  # [HEAD_SIZE]
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / HEAD_SIZE + eps)
    offs_h = tl.arange(0, HALF)
    pos = tl.load(pos_ptr + pid_tok)
    cos = tl.load(cos_sin_ptr + pos * stride_cs + offs_h).to(tl.float32)
    sin = tl.load(cos_sin_ptr + pos * stride_cs + HALF + offs_h).to(tl.float32)
    x1 = tl.load(base + offs_h).to(tl.float32)
    x2 = tl.load(base + HALF + offs_h).to(tl.float32)
    y1 = (x1 * cos - x2 * sin) * rstd
    y2 = (x2 * cos + x1 * sin) * rstd
    # every lane has loaded the whole head before any lane overwrites part of it
    tl.debug_barrier()
    tl.store(base + offs_h, y1.to(q_ptr.dtype.element_ty))
    tl.store(base + HALF + offs_h, y2.to(q_ptr.dtype.element_ty))


def _inputs(num_tokens):
    q = torch.empty(num_tokens, 32, 128, device="meta", dtype=torch.bfloat16)
    pos = torch.empty(num_tokens, device="meta", dtype=torch.int64)
    cos_sin = torch.empty(131072, 128, device="meta", dtype=torch.float32)
    return q, pos, cos_sin


TOKENS = [1, 16, 17, 8192, 70_000]


@tritonkit.case(num_tokens=TOKENS)
def rope_scaled_racy(num_tokens):
    q, pos, cs = _inputs(num_tokens)
    _rope_scaled_racy_kernel[(num_tokens, q.shape[1])](
        q, pos, cs, q.stride(0), q.stride(1), cs.stride(0), 1e-6, HEAD_SIZE=128, HALF=64)


@tritonkit.case(num_tokens=TOKENS)
def rope_scaled(num_tokens):
    q, pos, cs = _inputs(num_tokens)
    _rope_scaled_kernel[(num_tokens, q.shape[1])](
        q, pos, cs, q.stride(0), q.stride(1), cs.stride(0), 1e-6, HEAD_SIZE=128, HALF=64)
