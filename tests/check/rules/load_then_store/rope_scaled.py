"""In-place rotary embedding on q [num_tokens, num_heads, head_size] with YaRN's attention scaling (cos and sin
times mscale), cos/sin cache [max_position, rot_dim] indexed by an int64 position per token. It reads NeoX halves
and writes the rotated pairs back interleaved (element 2j, 2j + 1 <- pair j), the layout a GPT-J-style consumer
reads.

Seeded bug (load-then-store): the halves are loaded through one index mapping and the pairs stored through
another, so a lane writes elements 2j and 2j + 1, which other lanes load as their x1 or x2, with nothing ordering
the two: no barrier, and no exchange between lanes (each pair is computed from its own lane's loads).
The twin puts a tl.debug_barrier() between the loads of the head and the stores.
"""

import torch
import triton
import triton.language as tl

import tritonkit


@triton.jit
def _rope_scaled_racy_kernel(
    q_ptr, pos_ptr, cos_sin_ptr, stride_q_tok, stride_q_head, stride_cs, mscale,
    HEAD_SIZE: tl.constexpr, HALF: tl.constexpr,
):
    pid_tok = tl.program_id(0)
    pid_head = tl.program_id(1)
    base = q_ptr + pid_tok.to(tl.int64) * stride_q_tok + pid_head * stride_q_head
    offs_h = tl.arange(0, HALF)
    pos = tl.load(pos_ptr + pid_tok)
    cos = tl.load(cos_sin_ptr + pos * stride_cs + offs_h).to(tl.float32) * mscale
    sin = tl.load(cos_sin_ptr + pos * stride_cs + HALF + offs_h).to(tl.float32) * mscale
    x1 = tl.load(base + offs_h).to(tl.float32)
    x2 = tl.load(base + HALF + offs_h).to(tl.float32)
    y1 = x1 * cos - x2 * sin
    y2 = x2 * cos + x1 * sin
    tl.store(base + 2 * offs_h, y1.to(q_ptr.dtype.element_ty))  # seeded bug: load-then-store
    tl.store(base + 2 * offs_h + 1, y2.to(q_ptr.dtype.element_ty))  # seeded bug: load-then-store


@triton.jit
def _rope_scaled_kernel(
    q_ptr, pos_ptr, cos_sin_ptr, stride_q_tok, stride_q_head, stride_cs, mscale,
    HEAD_SIZE: tl.constexpr, HALF: tl.constexpr,
):
    pid_tok = tl.program_id(0)
    pid_head = tl.program_id(1)
    base = q_ptr + pid_tok.to(tl.int64) * stride_q_tok + pid_head * stride_q_head
    offs_h = tl.arange(0, HALF)
    pos = tl.load(pos_ptr + pid_tok)
    cos = tl.load(cos_sin_ptr + pos * stride_cs + offs_h).to(tl.float32) * mscale
    sin = tl.load(cos_sin_ptr + pos * stride_cs + HALF + offs_h).to(tl.float32) * mscale
    x1 = tl.load(base + offs_h).to(tl.float32)
    x2 = tl.load(base + HALF + offs_h).to(tl.float32)
    y1 = x1 * cos - x2 * sin
    y2 = x2 * cos + x1 * sin
    # every lane has loaded both halves before any lane overwrites them in the interleaved order
    tl.debug_barrier()
    tl.store(base + 2 * offs_h, y1.to(q_ptr.dtype.element_ty))
    tl.store(base + 2 * offs_h + 1, y2.to(q_ptr.dtype.element_ty))


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
        q, pos, cs, q.stride(0), q.stride(1), cs.stride(0), 1.2, HEAD_SIZE=128, HALF=64)


@tritonkit.case(num_tokens=TOKENS)
def rope_scaled(num_tokens):
    q, pos, cs = _inputs(num_tokens)
    _rope_scaled_kernel[(num_tokens, q.shape[1])](
        q, pos, cs, q.stride(0), q.stride(1), cs.stride(0), 1.2, HEAD_SIZE=128, HALF=64)
