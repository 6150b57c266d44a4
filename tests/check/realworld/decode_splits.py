"""Split-KV paged decode attention over a token-indexed page table, stage 1 and the merge of the splits (stage 2),
modeled on vLLM's Triton decode attention after its int64 fix. See SOURCES.md.

Every integer division here divides a length or an index that is never negative: `tl.cdiv(seq_len,
NUM_KV_SPLITS)` (the keys per split), `offs_n // PAGE_SIZE` and `offs_n % PAGE_SIZE` (page and slot of a key),
`(seq_len + BLOCK_N - 1) // BLOCK_N` (the blocks of the last split). The sequence lengths are loaded with no
declared bounds, as most users leave them.
"""

import torch
import triton
import triton.language as tl

import tritonkit


@triton.jit
def _decode_stage1_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, req_to_page_ptr, seq_lens_ptr, partial_ptr, sm_scale,
    stride_rp_seq, stride_q_seq, stride_q_head, stride_kc_slot, stride_kc_head, stride_vc_slot, stride_vc_head,
    stride_p_seq, stride_p_head, stride_p_split,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, NUM_KV_SPLITS: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
):
    cur_batch = tl.program_id(0)
    cur_head = tl.program_id(1)
    split_kv_id = tl.program_id(2)
    cur_kv_head = cur_head // GROUP
    offs_d = tl.arange(0, HEAD_DIM)
    cur_batch_seq_len = tl.load(seq_lens_ptr + cur_batch)
    q = tl.load(q_ptr + cur_batch * stride_q_seq + cur_head * stride_q_head + offs_d).to(tl.float32)
    kv_len_per_split = tl.cdiv(cur_batch_seq_len, NUM_KV_SPLITS)
    split_kv_start = kv_len_per_split * split_kv_id
    split_kv_end = tl.minimum(split_kv_start + kv_len_per_split, cur_batch_seq_len)
    e_max = -float("inf")
    e_sum = 0.0
    acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
    if split_kv_end > split_kv_start:
        for start_n in range(split_kv_start, split_kv_end, BLOCK_N):
            offs_n = start_n + tl.arange(0, BLOCK_N)
            mask_n = offs_n < split_kv_end
            page = tl.load(req_to_page_ptr + stride_rp_seq * cur_batch + offs_n // PAGE_SIZE, mask=mask_n,
                           other=0).to(tl.int64)
            kv_loc = page * PAGE_SIZE + offs_n % PAGE_SIZE
            k = tl.load(k_cache_ptr + kv_loc[:, None] * stride_kc_slot + cur_kv_head * stride_kc_head
                        + offs_d[None, :], mask=mask_n[:, None], other=0.0)
            qk = tl.sum(q[None, :] * k.to(tl.float32), 1) * sm_scale
            qk = tl.where(mask_n, qk, float("-inf"))
            v = tl.load(v_cache_ptr + kv_loc[:, None] * stride_vc_slot + cur_kv_head * stride_vc_head
                        + offs_d[None, :], mask=mask_n[:, None], other=0.0)
            n_e_max = tl.maximum(tl.max(qk, 0), e_max)
            re_scale = tl.exp(e_max - n_e_max)
            p = tl.exp(qk - n_e_max)
            acc = acc * re_scale + tl.sum(p[:, None] * v.to(tl.float32), 0)
            e_sum = e_sum * re_scale + tl.sum(p, 0)
            e_max = n_e_max
        out = partial_ptr + cur_batch * stride_p_seq + cur_head * stride_p_head + split_kv_id * stride_p_split
        tl.store(out + offs_d, acc / e_sum)
        tl.store(out + HEAD_DIM, e_max + tl.log(e_sum))


@triton.jit
def _decode_stage2_kernel(
    partial_ptr, seq_lens_ptr, o_ptr, stride_p_seq, stride_p_head, stride_p_split, stride_o_seq, stride_o_head,
    HEAD_DIM: tl.constexpr, NUM_KV_SPLITS: tl.constexpr, BLOCK_N: tl.constexpr,
):
    cur_batch = tl.program_id(0)
    cur_head = tl.program_id(1)
    cur_batch_seq_len = tl.load(seq_lens_ptr + cur_batch)
    offs_d = tl.arange(0, HEAD_DIM)
    # splits that hold at least one block of BLOCK_N keys
    num_blocks = (cur_batch_seq_len + BLOCK_N - 1) // BLOCK_N
    kv_len_per_split = tl.cdiv(cur_batch_seq_len, NUM_KV_SPLITS)
    e_sum = 0.0
    e_max = -float("inf")
    acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
    base = partial_ptr + cur_batch * stride_p_seq + cur_head * stride_p_head
    for split_kv_id in range(0, tl.minimum(NUM_KV_SPLITS, num_blocks)):
        split_kv_start = kv_len_per_split * split_kv_id
        split_kv_end = tl.minimum(split_kv_start + kv_len_per_split, cur_batch_seq_len)
        if split_kv_end > split_kv_start:
            tv = tl.load(base + split_kv_id * stride_p_split + offs_d)
            tlogic = tl.load(base + split_kv_id * stride_p_split + HEAD_DIM)
            n_e_max = tl.maximum(tlogic, e_max)
            old_scale = tl.exp(e_max - n_e_max)
            exp_logic = tl.exp(tlogic - n_e_max)
            acc = acc * old_scale + exp_logic * tv
            e_sum = e_sum * old_scale + exp_logic
            e_max = n_e_max
    tl.store(o_ptr + cur_batch * stride_o_seq + cur_head * stride_o_head + offs_d, acc / e_sum)


def decode(q, k_cache, v_cache, req_to_page, seq_lens, partial, out, num_splits):
    """q [num_seqs, heads, head_dim]; caches [num_slots, kv_heads, head_dim] (a page is PAGE_SIZE consecutive
    slots); req_to_page int32 [num_seqs, max_pages]; seq_lens int32 [num_seqs]; partial fp32 [num_seqs, heads,
    num_splits, head_dim + 1]; out fp32 [num_seqs, heads, head_dim]."""
    num_seqs, heads, head_dim = q.shape
    kv_heads = k_cache.shape[1]
    _decode_stage1_kernel[(num_seqs, heads, num_splits)](
        q, k_cache, v_cache, req_to_page, seq_lens, partial, head_dim ** -0.5, req_to_page.stride(0),
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), v_cache.stride(0), v_cache.stride(1),
        partial.stride(0), partial.stride(1), partial.stride(2),
        GROUP=heads // kv_heads, HEAD_DIM=head_dim, BLOCK_N=32, NUM_KV_SPLITS=num_splits, PAGE_SIZE=16)
    _decode_stage2_kernel[(num_seqs, heads)](
        partial, seq_lens, out, partial.stride(0), partial.stride(1), partial.stride(2), out.stride(0),
        out.stride(1), HEAD_DIM=head_dim, NUM_KV_SPLITS=num_splits, BLOCK_N=32)


@tritonkit.case(num_seqs=[1, 17, 256])
def decode_splits(num_seqs):
    # Llama-3-8B: 32 query heads, 8 KV heads of 128; 2M cache slots (2.1e9 elements per cache)
    m = dict(device="meta", dtype=torch.bfloat16)
    q = torch.empty(num_seqs, 32, 128, **m)
    caches = [torch.empty(2_097_152, 8, 128, **m) for _ in range(2)]
    partial = torch.empty(num_seqs, 32, 8, 129, device="meta", dtype=torch.float32)
    decode(q, *caches, torch.empty(num_seqs, 2048, device="meta", dtype=torch.int32),
           torch.empty(num_seqs, device="meta", dtype=torch.int32), partial,
           torch.empty(num_seqs, 32, 128, device="meta", dtype=torch.float32), num_splits=8)
