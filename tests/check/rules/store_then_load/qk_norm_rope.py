"""In-place per-head RMS norm then rotary embedding on q [num_tokens, num_heads, head_size], neox style (rotate
halves), cos/sin cache [max_position, rot_dim] indexed by an int64 position per token.

Seeded bug (store-then-load): the normalized head is written back in place and its two halves re-read for the
rotation, with no barrier between the store and the loads. The rotated halves then overwrite the head that every
lane loaded whole at the top: no race, the norm's sum over the head spans warps, and Triton reduces it through
shared memory behind a CTA barrier that every lane passes after its loads and before any store.
The twin puts a tl.debug_barrier() between the store and the re-read.
"""

import torch
import triton
import triton.language as tl

import tritonkit


@triton.jit
def _qk_norm_rope_racy_kernel(
    q_ptr, w_ptr, pos_ptr, cos_sin_ptr, stride_q_tok, stride_q_head, stride_cs, eps,
    HEAD_SIZE: tl.constexpr, HALF: tl.constexpr,
):
    pid_tok = tl.program_id(0)
    pid_head = tl.program_id(1)
    base = q_ptr + pid_tok.to(tl.int64) * stride_q_tok + pid_head * stride_q_head
    offs = tl.arange(0, HEAD_SIZE)
    x = tl.load(base + offs).to(tl.float32)  # [HEAD_SIZE]
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / HEAD_SIZE + eps)
    w = tl.load(w_ptr + offs).to(tl.float32)
    tl.store(base + offs, (x * rstd * w).to(q_ptr.dtype.element_ty))
    offs_h = tl.arange(0, HALF)
    pos = tl.load(pos_ptr + pid_tok)
    cos = tl.load(cos_sin_ptr + pos * stride_cs + offs_h).to(tl.float32)
    sin = tl.load(cos_sin_ptr + pos * stride_cs + HALF + offs_h).to(tl.float32)
    x1 = tl.load(base + offs_h).to(tl.float32)  # seeded bug: store-then-load
    x2 = tl.load(base + HALF + offs_h).to(tl.float32)  # seeded bug: store-then-load
    # these overwrite what every lane loaded whole at the top, before the barrier of the norm's sum
    tl.store(base + offs_h, (x1 * cos - x2 * sin).to(q_ptr.dtype.element_ty))
    tl.store(base + HALF + offs_h, (x2 * cos + x1 * sin).to(q_ptr.dtype.element_ty))


@triton.jit
def _qk_norm_rope_kernel(
    q_ptr, w_ptr, pos_ptr, cos_sin_ptr, stride_q_tok, stride_q_head, stride_cs, eps,
    HEAD_SIZE: tl.constexpr, HALF: tl.constexpr,
):
    pid_tok = tl.program_id(0)
    pid_head = tl.program_id(1)
    base = q_ptr + pid_tok.to(tl.int64) * stride_q_tok + pid_head * stride_q_head
    offs = tl.arange(0, HEAD_SIZE)
    x = tl.load(base + offs).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / HEAD_SIZE + eps)
    w = tl.load(w_ptr + offs).to(tl.float32)
    tl.store(base + offs, (x * rstd * w).to(q_ptr.dtype.element_ty))
    # the halves below re-read what this program just stored, in another layout
    tl.debug_barrier()
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
def qk_norm_rope_racy(num_tokens):
    q, pos, cs = _inputs(num_tokens)
    w = torch.empty(128, device="meta", dtype=torch.bfloat16)
    _qk_norm_rope_racy_kernel[(num_tokens, q.shape[1])](
        q, w, pos, cs, q.stride(0), q.stride(1), cs.stride(0), 1e-6, HEAD_SIZE=128, HALF=64)


@tritonkit.case(num_tokens=TOKENS)
def qk_norm_rope(num_tokens):
    q, pos, cs = _inputs(num_tokens)
    w = torch.empty(128, device="meta", dtype=torch.bfloat16)
    _qk_norm_rope_kernel[(num_tokens, q.shape[1])](
        q, w, pos, cs, q.stride(0), q.stride(1), cs.stride(0), 1e-6, HEAD_SIZE=128, HALF=64)
