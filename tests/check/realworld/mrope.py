"""Multimodal rotary embedding (M-RoPE: temporal / height / width sections of the rotary dims) applied in place to
q and k, one program per token, modeled on Liger-Kernel's Qwen2-VL M-RoPE. See SOURCES.md:
linkedin/Liger-Kernel#1335.

The token's q row starts at `pid * (NUM_Q_HEADS * HEAD_DIM)`; in the `i32row` kernel pid is int32, and at
1,048,576 tokens x 28 heads x 128 the product wraps (the k row, 4 heads x 128, stays below 2^31). The twin widens
pid to int64, as the fix did. Both take the batch size as a tl.constexpr, as upstream did: one compile per batch
size, a true, minor finding the fix did not touch.
"""

import torch
import triton
import triton.language as tl

import tritonkit


@triton.jit
def _mrope_fwd_i32row_kernel(  # expect: recompile
    q_ptr, k_ptr, cos_ptr, sin_ptr, seq_len,
    BATCH: tl.constexpr, NUM_Q_HEADS: tl.constexpr, NUM_K_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr,
    PAD_Q_HEADS: tl.constexpr, PAD_K_HEADS: tl.constexpr, PAD_HALF: tl.constexpr,
    SECTION_T: tl.constexpr, SECTION_H: tl.constexpr,
):
    pid = tl.program_id(0)
    q_ptr = q_ptr + pid * (NUM_Q_HEADS * HEAD_DIM)  # expect: int32-offset
    k_ptr = k_ptr + pid * (NUM_K_HEADS * HEAD_DIM)
    # cos/sin [3, batch * seq_len, HEAD_DIM]: pick each rotary dim's section (t, h or w)
    plane = BATCH * seq_len * HEAD_DIM
    offs_r = tl.arange(0, PAD_HALF)
    in_t = offs_r < SECTION_T
    in_h = (offs_r >= SECTION_T) & (offs_r < SECTION_T + SECTION_H)
    in_w = (offs_r >= SECTION_T + SECTION_H) & (offs_r < HEAD_DIM // 2)
    row = pid * HEAD_DIM + offs_r
    cos = (tl.load(cos_ptr + row, mask=in_t, other=0) + tl.load(cos_ptr + plane + row, mask=in_h, other=0)
           + tl.load(cos_ptr + 2 * plane + row, mask=in_w, other=0))
    sin = (tl.load(sin_ptr + row, mask=in_t, other=0) + tl.load(sin_ptr + plane + row, mask=in_h, other=0)
           + tl.load(sin_ptr + 2 * plane + row, mask=in_w, other=0))
    offs_qh = tl.arange(0, PAD_Q_HEADS)
    offs_kh = tl.arange(0, PAD_K_HEADS)
    q1_offs = offs_qh[:, None] * HEAD_DIM + offs_r[None, :]  # [PAD_Q_HEADS, PAD_HALF]
    k1_offs = offs_kh[:, None] * HEAD_DIM + offs_r[None, :]
    q_mask = (offs_qh[:, None] < NUM_Q_HEADS) & (offs_r[None, :] < HEAD_DIM // 2)
    k_mask = (offs_kh[:, None] < NUM_K_HEADS) & (offs_r[None, :] < HEAD_DIM // 2)
    q1 = tl.load(q_ptr + q1_offs, mask=q_mask, other=0).to(cos.dtype)
    q2 = tl.load(q_ptr + q1_offs + HEAD_DIM // 2, mask=q_mask, other=0).to(cos.dtype)
    k1 = tl.load(k_ptr + k1_offs, mask=k_mask, other=0).to(cos.dtype)
    k2 = tl.load(k_ptr + k1_offs + HEAD_DIM // 2, mask=k_mask, other=0).to(cos.dtype)
    tl.store(q_ptr + q1_offs, q1 * cos - q2 * sin, mask=q_mask)
    tl.store(q_ptr + q1_offs + HEAD_DIM // 2, q2 * cos + q1 * sin, mask=q_mask)
    tl.store(k_ptr + k1_offs, k1 * cos - k2 * sin, mask=k_mask)
    tl.store(k_ptr + k1_offs + HEAD_DIM // 2, k2 * cos + k1 * sin, mask=k_mask)


@triton.jit
def _mrope_fwd_kernel(  # expect: recompile
    q_ptr, k_ptr, cos_ptr, sin_ptr, seq_len,
    BATCH: tl.constexpr, NUM_Q_HEADS: tl.constexpr, NUM_K_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr,
    PAD_Q_HEADS: tl.constexpr, PAD_K_HEADS: tl.constexpr, PAD_HALF: tl.constexpr,
    SECTION_T: tl.constexpr, SECTION_H: tl.constexpr,
):
    pid = tl.program_id(0).to(tl.int64)
    q_ptr = q_ptr + pid * (NUM_Q_HEADS * HEAD_DIM)
    k_ptr = k_ptr + pid * (NUM_K_HEADS * HEAD_DIM)
    plane = BATCH * seq_len * HEAD_DIM
    offs_r = tl.arange(0, PAD_HALF)
    in_t = offs_r < SECTION_T
    in_h = (offs_r >= SECTION_T) & (offs_r < SECTION_T + SECTION_H)
    in_w = (offs_r >= SECTION_T + SECTION_H) & (offs_r < HEAD_DIM // 2)
    row = pid * HEAD_DIM + offs_r
    cos = (tl.load(cos_ptr + row, mask=in_t, other=0) + tl.load(cos_ptr + plane + row, mask=in_h, other=0)
           + tl.load(cos_ptr + 2 * plane + row, mask=in_w, other=0))
    sin = (tl.load(sin_ptr + row, mask=in_t, other=0) + tl.load(sin_ptr + plane + row, mask=in_h, other=0)
           + tl.load(sin_ptr + 2 * plane + row, mask=in_w, other=0))
    offs_qh = tl.arange(0, PAD_Q_HEADS)
    offs_kh = tl.arange(0, PAD_K_HEADS)
    q1_offs = offs_qh[:, None] * HEAD_DIM + offs_r[None, :]
    k1_offs = offs_kh[:, None] * HEAD_DIM + offs_r[None, :]
    q_mask = (offs_qh[:, None] < NUM_Q_HEADS) & (offs_r[None, :] < HEAD_DIM // 2)
    k_mask = (offs_kh[:, None] < NUM_K_HEADS) & (offs_r[None, :] < HEAD_DIM // 2)
    q1 = tl.load(q_ptr + q1_offs, mask=q_mask, other=0).to(cos.dtype)
    q2 = tl.load(q_ptr + q1_offs + HEAD_DIM // 2, mask=q_mask, other=0).to(cos.dtype)
    k1 = tl.load(k_ptr + k1_offs, mask=k_mask, other=0).to(cos.dtype)
    k2 = tl.load(k_ptr + k1_offs + HEAD_DIM // 2, mask=k_mask, other=0).to(cos.dtype)
    # each half is written back by the same offsets (and layout) it was read with
    tl.store(q_ptr + q1_offs, q1 * cos - q2 * sin, mask=q_mask)
    tl.store(q_ptr + q1_offs + HEAD_DIM // 2, q2 * cos + q1 * sin, mask=q_mask)
    tl.store(k_ptr + k1_offs, k1 * cos - k2 * sin, mask=k_mask)
    tl.store(k_ptr + k1_offs + HEAD_DIM // 2, k2 * cos + k1 * sin, mask=k_mask)


def mrope_fwd(kernel, q, k, cos, sin, section):
    """q [batch, seq_len, q_heads, head_dim], k [.., k_heads, ..] contiguous, roped in place; cos/sin
    [3, batch, seq_len, head_dim]; section: rotary dims (of head_dim / 2) per t / h / w."""
    batch, seq_len, q_heads, head_dim = q.shape
    k_heads = k.shape[2]
    kernel[(batch * seq_len,)](
        q, k, cos, sin, seq_len, BATCH=batch, NUM_Q_HEADS=q_heads, NUM_K_HEADS=k_heads, HEAD_DIM=head_dim,
        PAD_Q_HEADS=triton.next_power_of_2(q_heads), PAD_K_HEADS=triton.next_power_of_2(k_heads),
        PAD_HALF=triton.next_power_of_2(head_dim) // 2, SECTION_T=section[0], SECTION_H=section[1])


def _run(kernel, batch, seq_len):
    # Qwen2-VL-7B: 28 query heads, 4 KV heads, head_dim 128, mrope_section [16, 24, 24]
    m = dict(device="meta", dtype=torch.bfloat16)
    q = torch.empty(batch, seq_len, 28, 128, **m)
    k = torch.empty(batch, seq_len, 4, 128, **m)
    cos = torch.empty(3, batch, seq_len, 128, **m)
    mrope_fwd(kernel, q, k, cos, torch.empty_like(cos), [16, 24, 24])


# 8 x 4096 tokens, and 64 x 16,384 = 1,048,576 tokens: pid * 3584 reaches 3.8e9
@tritonkit.case(batch=[8, 64], seq_len=[4096, 16_384])
def mrope_row_int32(batch, seq_len):
    _run(_mrope_fwd_i32row_kernel, batch, seq_len)


@tritonkit.case(batch=[8, 64], seq_len=[4096, 16_384])
def mrope_row_int64(batch, seq_len):
    _run(_mrope_fwd_kernel, batch, seq_len)
