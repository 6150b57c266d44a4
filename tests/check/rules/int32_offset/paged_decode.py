"""Paged decode attention with a block table, GQA: one program per (sequence, kv head), online softmax over the
sequence's cache blocks. Cache layout [num_blocks, block_size, kv_heads, head_size]; block_table int32.

Seeded bug (int32-offset): the int32 block id from the block table is multiplied by the block stride in int32.
The twin casts the block id to int64.
"""

import torch
import triton
import triton.language as tl

import tritonkit


@triton.jit
def _paged_decode_bt32_kernel(
    out_ptr, q_ptr, k_cache_ptr, v_cache_ptr, block_table_ptr, seq_lens_ptr, scale,
    stride_q_seq, stride_q_head, stride_o_seq, stride_o_head,
    stride_kc_block, stride_kc_slot, stride_kc_head, stride_bt_seq,
    GROUP: tl.constexpr, BLOCK_SIZE: tl.constexpr, HEAD_SIZE: tl.constexpr,
):
    pid_seq = tl.program_id(0)
    pid_kv = tl.program_id(1)
    seq_len = tl.load(seq_lens_ptr + pid_seq)
    offs_d = tl.arange(0, HEAD_SIZE)
    offs_n = tl.arange(0, BLOCK_SIZE)
    q_heads = pid_kv * GROUP + tl.arange(0, GROUP)
    q = tl.load(q_ptr + pid_seq.to(tl.int64) * stride_q_seq + q_heads[:, None] * stride_q_head
                + offs_d[None, :]).to(tl.float32)  # [GROUP, HEAD_SIZE]
    m_i = tl.full([GROUP], float("-inf"), tl.float32)
    l_i = tl.zeros([GROUP], tl.float32)
    acc = tl.zeros([GROUP, HEAD_SIZE], tl.float32)
    for j in range(0, tl.cdiv(seq_len, BLOCK_SIZE)):
        block = tl.load(block_table_ptr + pid_seq.to(tl.int64) * stride_bt_seq + j)
        kv = (block * stride_kc_block  # seeded bug: int32-offset
              + offs_n[:, None] * stride_kc_slot + pid_kv * stride_kc_head + offs_d[None, :])
        mask_n = j * BLOCK_SIZE + offs_n < seq_len
        k = tl.load(k_cache_ptr + kv, mask=mask_n[:, None], other=0.0).to(tl.float32)  # [BLOCK_SIZE, HEAD_SIZE]
        v = tl.load(v_cache_ptr + kv, mask=mask_n[:, None], other=0.0).to(tl.float32)
        s = tl.sum(q[:, None, :] * k[None, :, :], axis=2) * scale  # [GROUP, BLOCK_SIZE]
        s = tl.where(mask_n[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(out_ptr + pid_seq.to(tl.int64) * stride_o_seq + q_heads[:, None] * stride_o_head + offs_d[None, :],
             out.to(out_ptr.dtype.element_ty))


@triton.jit
def _paged_decode_kernel(
    out_ptr, q_ptr, k_cache_ptr, v_cache_ptr, block_table_ptr, seq_lens_ptr, scale,
    stride_q_seq, stride_q_head, stride_o_seq, stride_o_head,
    stride_kc_block, stride_kc_slot, stride_kc_head, stride_bt_seq,
    GROUP: tl.constexpr, BLOCK_SIZE: tl.constexpr, HEAD_SIZE: tl.constexpr,
):
    pid_seq = tl.program_id(0)
    pid_kv = tl.program_id(1)
    seq_len = tl.load(seq_lens_ptr + pid_seq)
    offs_d = tl.arange(0, HEAD_SIZE)
    offs_n = tl.arange(0, BLOCK_SIZE)
    q_heads = pid_kv * GROUP + tl.arange(0, GROUP)
    q = tl.load(q_ptr + pid_seq.to(tl.int64) * stride_q_seq + q_heads[:, None] * stride_q_head
                + offs_d[None, :]).to(tl.float32)  # [GROUP, HEAD_SIZE]
    m_i = tl.full([GROUP], float("-inf"), tl.float32)
    l_i = tl.zeros([GROUP], tl.float32)
    acc = tl.zeros([GROUP, HEAD_SIZE], tl.float32)
    for j in range(0, tl.cdiv(seq_len, BLOCK_SIZE)):
        block = tl.load(block_table_ptr + pid_seq.to(tl.int64) * stride_bt_seq + j).to(tl.int64)
        kv = (block * stride_kc_block + offs_n[:, None] * stride_kc_slot + pid_kv * stride_kc_head
              + offs_d[None, :])
        mask_n = j * BLOCK_SIZE + offs_n < seq_len
        k = tl.load(k_cache_ptr + kv, mask=mask_n[:, None], other=0.0).to(tl.float32)
        v = tl.load(v_cache_ptr + kv, mask=mask_n[:, None], other=0.0).to(tl.float32)
        s = tl.sum(q[:, None, :] * k[None, :, :], axis=2) * scale
        s = tl.where(mask_n[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(out_ptr + pid_seq.to(tl.int64) * stride_o_seq + q_heads[:, None] * stride_o_head + offs_d[None, :],
             out.to(out_ptr.dtype.element_ty))


def paged_decode(kernel, out, q, k_cache, v_cache, block_table, seq_lens, scale):
    num_seqs, num_heads, head_size = q.shape
    _, block_size, kv_heads, _ = k_cache.shape
    kernel[(num_seqs, kv_heads)](
        out, q, k_cache, v_cache, block_table, seq_lens, scale,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), block_table.stride(0),
        GROUP=num_heads // kv_heads, BLOCK_SIZE=block_size, HEAD_SIZE=head_size,
    )


def _run(kernel, num_seqs, max_blocks):
    m = dict(device="meta", dtype=torch.bfloat16)
    q = torch.empty(num_seqs, 32, 128, **m)
    out = torch.empty_like(q)
    # 200,000 blocks x 16 x 8 x 128 = 3.3e9 elements: block ids past 131,071 address beyond 2^31
    k_cache = torch.empty(200_000, 16, 8, 128, **m)
    v_cache = torch.empty(200_000, 16, 8, 128, **m)
    block_table = torch.empty(num_seqs, max_blocks, device="meta", dtype=torch.int32)
    seq_lens = torch.empty(num_seqs, device="meta", dtype=torch.int32)
    paged_decode(kernel, out, q, k_cache, v_cache, block_table, seq_lens, 128 ** -0.5)


@tritonkit.case(num_seqs=[1, 7, 256], max_blocks=[64, 2048])
def decode_block_table_int32(num_seqs, max_blocks):
    _run(_paged_decode_bt32_kernel, num_seqs, max_blocks)


@tritonkit.case(num_seqs=[1, 7, 256], max_blocks=[64, 2048])
def decode(num_seqs, max_blocks):
    _run(_paged_decode_kernel, num_seqs, max_blocks)
