"""Split-KV decode attention over a token-level KV pool, trimmed from SGLang's `_fwd_kernel_stage1` and
`_fwd_kernel_stage2` (sglang/srt/layers/attention/triton_ops/decode_attention.py, later
sglang/kernels/ops/attention/decode_attention.py; Apache-2.0, itself adapted from LightLLM). See SOURCES.md.

A sequence's length is the difference of two entries of `kv_indptr` (cumulative offsets into `kv_indices`); the
length is split over `num_kv_splits` programs (`tl.cdiv(tl.cdiv(seq_len, splits), MIN_BLOCK_KV) * MIN_BLOCK_KV`
keys each), a token's KV slot is loaded from `kv_indices` and split into a page and a position in it
(`kv_loc // PAGE_SIZE`, `kv_loc % PAGE_SIZE`), and stage 2 merges the splits. Correct upstream: the offsets never
decrease, so every dividend is >= 0; no case declares it (issue 40: a newcomer's case does not).
"""

import torch
import triton
import triton.language as tl

import tritonkit


@triton.jit
def _sgl_decode_stage1_kernel(
    Q, K_Buffer, V_Buffer, sm_scale, kv_indptr, kv_indices, Att_Out, Att_Lse, num_kv_splits,
    stride_qbs, stride_qh, stride_buf_kpage, stride_buf_ktok, stride_buf_kh, stride_buf_vpage, stride_buf_vtok,
    stride_buf_vh, stride_mid_ob, stride_mid_oh, stride_mid_os,
    kv_group_num: tl.constexpr, BLOCK_DMODEL: tl.constexpr, BLOCK_N: tl.constexpr, MIN_BLOCK_KV: tl.constexpr,
    Lv: tl.constexpr, PAGE_SIZE: tl.constexpr,
):
    cur_batch = tl.program_id(0).to(tl.int64)
    cur_head = tl.program_id(1)
    split_kv_id = tl.program_id(2)
    cur_kv_head = cur_head // kv_group_num
    offs_d = tl.arange(0, BLOCK_DMODEL)
    cur_batch_kv_start_idx = tl.load(kv_indptr + cur_batch)
    cur_batch_seq_len = tl.load(kv_indptr + cur_batch + 1) - cur_batch_kv_start_idx
    kv_splits = tl.load(num_kv_splits + cur_batch)
    off_q = cur_batch * stride_qbs + cur_head * stride_qh + offs_d
    kv_len_per_split = tl.cdiv(tl.cdiv(cur_batch_seq_len, kv_splits), MIN_BLOCK_KV) * MIN_BLOCK_KV
    split_kv_start = kv_len_per_split * split_kv_id
    split_kv_end = tl.minimum(split_kv_start + kv_len_per_split, cur_batch_seq_len)
    e_max = -float("inf")
    e_sum = 0.0
    acc = tl.zeros([BLOCK_DMODEL], dtype=tl.float32)
    if split_kv_end > split_kv_start:
        q = tl.load(Q + off_q)
        for start_n in range(split_kv_start, split_kv_end, BLOCK_N):
            offs_n = start_n + tl.arange(0, BLOCK_N)
            kv_loc = tl.load(kv_indices + cur_batch_kv_start_idx + offs_n, mask=offs_n < split_kv_end, other=0)
            page_id = kv_loc // PAGE_SIZE
            tok_in_p = kv_loc % PAGE_SIZE
            offs_buf_k = (page_id[:, None].to(tl.int64) * stride_buf_kpage + tok_in_p[:, None] * stride_buf_ktok
                          + cur_kv_head * stride_buf_kh + offs_d[None, :])
            k = tl.load(K_Buffer + offs_buf_k, mask=offs_n[:, None] < split_kv_end, other=0.0)
            qk = tl.sum((q[None, :] * k).to(tl.float32), 1) * sm_scale
            qk = tl.where(offs_n < split_kv_end, qk, float("-inf"))
            offs_buf_v = (page_id[:, None].to(tl.int64) * stride_buf_vpage + tok_in_p[:, None] * stride_buf_vtok
                          + cur_kv_head * stride_buf_vh + offs_d[None, :])
            v = tl.load(V_Buffer + offs_buf_v, mask=offs_n[:, None] < split_kv_end, other=0.0)
            n_e_max = tl.maximum(tl.max(qk, 0), e_max)
            re_scale = tl.exp(e_max - n_e_max)
            p = tl.exp(qk - n_e_max)
            acc *= re_scale
            acc += tl.sum(p[:, None] * v.to(tl.float32), 0)
            e_sum = e_sum * re_scale + tl.sum(p, 0)
            e_max = n_e_max
        offs_mid_o = cur_batch * stride_mid_ob + cur_head * stride_mid_oh + split_kv_id * stride_mid_os + offs_d
        tl.store(Att_Out + offs_mid_o, acc / e_sum)
        offs_mid_o_1 = (cur_batch * stride_mid_ob + cur_head * stride_mid_oh + split_kv_id * stride_mid_os) // Lv
        tl.store(Att_Lse + offs_mid_o_1, e_max + tl.log(e_sum))


@triton.jit
def _sgl_decode_stage2_kernel(
    Mid_O, Mid_O_1, Out, kv_indptr, num_kv_splits, stride_mid_ob, stride_mid_oh, stride_mid_os, stride_obs,
    stride_oh, MAX_KV_SPLITS: tl.constexpr, MIN_BLOCK_KV: tl.constexpr, BLOCK_DV: tl.constexpr, Lv: tl.constexpr,
):
    cur_batch = tl.program_id(0).to(tl.int64)
    cur_head = tl.program_id(1)
    cur_batch_seq_len = tl.load(kv_indptr + cur_batch + 1) - tl.load(kv_indptr + cur_batch)
    kv_splits = tl.load(num_kv_splits + cur_batch)
    offs_d = tl.arange(0, BLOCK_DV)
    e_sum = 0.0
    e_max = -float("inf")
    acc = tl.zeros([BLOCK_DV], dtype=tl.float32)
    offs_v = cur_batch * stride_mid_ob + cur_head * stride_mid_oh + offs_d
    offs_logic = (cur_batch * stride_mid_ob + cur_head * stride_mid_oh) // Lv
    kv_len_per_split = tl.cdiv(tl.cdiv(cur_batch_seq_len, kv_splits), MIN_BLOCK_KV) * MIN_BLOCK_KV
    for split_kv_id in range(0, MAX_KV_SPLITS):
        split_kv_start = kv_len_per_split * split_kv_id
        split_kv_end = tl.minimum(split_kv_start + kv_len_per_split, cur_batch_seq_len)
        if split_kv_end > split_kv_start:
            tv = tl.load(Mid_O + offs_v + split_kv_id * stride_mid_os)
            tlogic = tl.load(Mid_O_1 + offs_logic + split_kv_id * stride_mid_os // Lv)
            n_e_max = tl.maximum(tlogic, e_max)
            old_scale = tl.exp(e_max - n_e_max)
            acc *= old_scale
            exp_logic = tl.exp(tlogic - n_e_max)
            acc += exp_logic * tv
            e_sum = e_sum * old_scale + exp_logic
            e_max = n_e_max
    tl.store(Out + cur_batch * stride_obs + cur_head * stride_oh + offs_d, acc / e_sum)


def decode_attention(q, k_buffer, v_buffer, o, kv_indptr, kv_indices, num_kv_splits, max_kv_splits, page_size):
    """q [batch, heads, 128]; k/v_buffer [pages, page_size, kv_heads, 128]; kv_indptr int32 [batch + 1] (cumulative,
    non-decreasing); kv_indices int32 [kv_indptr[-1]] (token slots); num_kv_splits int32 [batch]."""
    batch, heads, D = q.shape
    kv_group_num = heads // k_buffer.shape[2]
    att_out = torch.empty(batch, heads, max_kv_splits, D, dtype=torch.float32, device=q.device)
    att_lse = torch.empty(batch, heads, max_kv_splits, dtype=torch.float32, device=q.device)
    _sgl_decode_stage1_kernel[(batch, heads, max_kv_splits)](
        q, k_buffer, v_buffer, 0.088, kv_indptr, kv_indices, att_out, att_lse, num_kv_splits,
        q.stride(0), q.stride(1), k_buffer.stride(0), k_buffer.stride(1), k_buffer.stride(2),
        v_buffer.stride(0), v_buffer.stride(1), v_buffer.stride(2), att_out.stride(0), att_out.stride(1),
        att_out.stride(2), kv_group_num=kv_group_num, BLOCK_DMODEL=D, BLOCK_N=32, MIN_BLOCK_KV=32, Lv=D,
        PAGE_SIZE=page_size)
    _sgl_decode_stage2_kernel[(batch, heads)](
        att_out, att_lse, o, kv_indptr, num_kv_splits, att_out.stride(0), att_out.stride(1), att_out.stride(2),
        o.stride(0), o.stride(1), MAX_KV_SPLITS=max_kv_splits, MIN_BLOCK_KV=32, BLOCK_DV=D, Lv=D)


# what the pool and the scheduler guarantee (offsets into a pool of 2^20 tokens, 1 to 16 splits); that the offsets
# never decrease is not declared: a difference of two of them is taken as a length
@tritonkit.case(batch=[1, 16, 256], loaded_bounds={"kv_indptr": (0, 1 << 20), "num_kv_splits": (1, 16)})
def sglang_decode_case(batch):
    # Llama-3-8B-like: 32 query heads over 8 KV heads, head_dim 128; a pool of 1M tokens in pages of 16
    m = dict(device="meta")
    q = torch.empty(batch, 32, 128, dtype=torch.bfloat16, **m)
    kv = torch.empty(65_536, 16, 8, 128, dtype=torch.bfloat16, **m)
    i32 = dict(dtype=torch.int32, **m)
    decode_attention(q, kv, kv, torch.empty_like(q), torch.empty(batch + 1, **i32), torch.empty(1 << 20, **i32),
                     torch.empty(batch, **i32), 16, 16)
