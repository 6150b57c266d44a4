"""In-place rotary embedding on q [num_tokens, num_heads, head_size], neox style (rotate halves), cos/sin cache
[max_position, rot_dim] indexed by an int64 position per token.

Seeded bug (grid-limit): a per-head grid laid out (num_heads, num_tokens) puts the token count in grid[1].
The twin puts tokens in grid[0].
"""

import torch
import triton
import triton.language as tl

import tritonkit


@triton.jit
def _rope_head_major_kernel(
    q_ptr, pos_ptr, cos_sin_ptr, stride_q_tok, stride_q_head, stride_cs, HALF: tl.constexpr,
):
    pid_head = tl.program_id(0)
    pid_tok = tl.program_id(1)
    base = q_ptr + pid_tok.to(tl.int64) * stride_q_tok + pid_head * stride_q_head
    offs_h = tl.arange(0, HALF)
    pos = tl.load(pos_ptr + pid_tok)
    cos = tl.load(cos_sin_ptr + pos * stride_cs + offs_h).to(tl.float32)
    sin = tl.load(cos_sin_ptr + pos * stride_cs + HALF + offs_h).to(tl.float32)
    x1 = tl.load(base + offs_h).to(tl.float32)
    x2 = tl.load(base + HALF + offs_h).to(tl.float32)
    tl.store(base + offs_h, (x1 * cos - x2 * sin).to(q_ptr.dtype.element_ty))
    tl.store(base + HALF + offs_h, (x2 * cos + x1 * sin).to(q_ptr.dtype.element_ty))


@triton.jit
def _rope_kernel(
    q_ptr, pos_ptr, cos_sin_ptr, stride_q_tok, stride_q_head, stride_cs, HALF: tl.constexpr,
):
    pid_tok = tl.program_id(0)
    pid_head = tl.program_id(1)
    base = q_ptr + pid_tok.to(tl.int64) * stride_q_tok + pid_head * stride_q_head
    offs_h = tl.arange(0, HALF)
    pos = tl.load(pos_ptr + pid_tok)
    cos = tl.load(cos_sin_ptr + pos * stride_cs + offs_h).to(tl.float32)
    sin = tl.load(cos_sin_ptr + pos * stride_cs + HALF + offs_h).to(tl.float32)
    x1 = tl.load(base + offs_h).to(tl.float32)
    x2 = tl.load(base + HALF + offs_h).to(tl.float32)
    tl.store(base + offs_h, (x1 * cos - x2 * sin).to(q_ptr.dtype.element_ty))
    tl.store(base + HALF + offs_h, (x2 * cos + x1 * sin).to(q_ptr.dtype.element_ty))


def _inputs(num_tokens):
    q = torch.empty(num_tokens, 32, 128, device="meta", dtype=torch.bfloat16)
    pos = torch.empty(num_tokens, device="meta", dtype=torch.int64)
    cos_sin = torch.empty(131072, 128, device="meta", dtype=torch.float32)
    return q, pos, cos_sin


TOKENS = [1, 16, 17, 8192, 70_000]


@tritonkit.case(num_tokens=TOKENS)
def rope_head_major_grid(num_tokens):
    q, pos, cs = _inputs(num_tokens)
    grid = (q.shape[1], num_tokens)
    _rope_head_major_kernel[grid](q, pos, cs, q.stride(0), q.stride(1), cs.stride(0), HALF=64)  # seeded bug: grid-limit


@tritonkit.case(num_tokens=TOKENS)
def rope(num_tokens):
    q, pos, cs = _inputs(num_tokens)
    _rope_kernel[(num_tokens, q.shape[1])](q, pos, cs, q.stride(0), q.stride(1), cs.stride(0), HALF=64)
