"""Prefill attention over a cached prefix, trimmed from vLLM 0.25.0's `_fwd_kernel`
(vllm/v1/attention/ops/prefix_prefill.py; Apache-2.0, vLLM contributors, adapted from LightLLM's
context_attention_fwd). See SOURCES.md.

One program per (sequence, head, block of queries). The context is read through the block table in
`tl.range(0, ctx_len, BLOCK_SIZE, loop_unroll_factor=num_unroll_cache)`, then the query block attends to the
new tokens, causally, in `tl.range(0, block_mask * (start_m + 1) * BLOCK_M, BLOCK_N, loop_unroll_factor=...)`.
Triton's loop unroller rewrites each loop into an unrolled main loop, bounded by `lb + (trips - trips % N) *
step` with `trips = (ub - lb + step - 1) /u step`, and a remainder loop: the induction variable still never goes
below 0. Correct upstream.
"""

import torch
import triton
import triton.language as tl

import tritonkit


@triton.jit
def _prefix_prefill_kernel(
    Q, K, V, K_cache, V_cache, B_Loc, sm_scale, B_Start_Loc, B_Seqlen, x: tl.constexpr, Out,
    stride_b_loc_b, stride_b_loc_s, stride_qbs, stride_qh, stride_kbs, stride_kh, stride_vbs, stride_vh,
    stride_obs, stride_oh, stride_k_cache_bs, stride_k_cache_h, stride_k_cache_d, stride_k_cache_bl: tl.constexpr,
    stride_k_cache_x, stride_v_cache_bs, stride_v_cache_h, stride_v_cache_d, stride_v_cache_bl,
    num_queries_per_kv: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_DMODEL: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, PHYSICAL_BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr,
    num_unroll_cache: tl.constexpr, num_unroll_request: tl.constexpr,
):
    cur_batch = tl.program_id(0)
    cur_head = tl.program_id(1)
    start_m = tl.program_id(2)
    cur_kv_head = cur_head // num_queries_per_kv
    cur_batch_seq_len = tl.load(B_Seqlen + cur_batch)
    cur_batch_in_all_start_index = tl.load(B_Start_Loc + cur_batch)
    cur_batch_in_all_stop_index = tl.load(B_Start_Loc + cur_batch + 1)
    cur_batch_query_len = cur_batch_in_all_stop_index - cur_batch_in_all_start_index
    cur_batch_ctx_len = cur_batch_seq_len - cur_batch_query_len
    block_start_loc = BLOCK_M * start_m
    offs_bs_n = tl.arange(0, BLOCK_SIZE)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_DMODEL)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    off_q = (cur_batch_in_all_start_index + offs_m[:, None]) * stride_qbs + cur_head * stride_qh + offs_d[None, :]
    q = tl.load(Q + off_q, mask=offs_m[:, None] < cur_batch_query_len, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DMODEL], dtype=tl.float32)
    for start_n in tl.range(0, cur_batch_ctx_len, BLOCK_SIZE, loop_unroll_factor=num_unroll_cache):
        token_indices = start_n + offs_bs_n
        bn_logical_indices = token_indices // PHYSICAL_BLOCK_SIZE
        bn = tl.load(B_Loc + cur_batch * stride_b_loc_b + bn_logical_indices * stride_b_loc_s).to(tl.int64)
        internal_offsets = token_indices % PHYSICAL_BLOCK_SIZE
        off_k = (bn[None, :] * stride_k_cache_bs + cur_kv_head * stride_k_cache_h
                 + (offs_d[:, None] // x) * stride_k_cache_d + internal_offsets[None, :] * stride_k_cache_bl
                 + (offs_d[:, None] % x) * stride_k_cache_x)
        off_v = (bn[:, None] * stride_v_cache_bs + cur_kv_head * stride_v_cache_h
                 + offs_d[None, :] * stride_v_cache_d + internal_offsets[:, None] * stride_v_cache_bl)
        k = tl.load(K_cache + off_k, mask=(start_n + offs_bs_n[None, :]) < cur_batch_ctx_len, other=0.0)
        qk = sm_scale * tl.dot(q, k)
        qk = tl.where((start_n + offs_bs_n[None, :]) < cur_batch_ctx_len, qk, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, axis=1))
        p = tl.exp(qk - m_ij[:, None])
        p = tl.where(m_ij[:, None] == float("-inf"), 0.0, p)
        alpha = tl.where(m_i == float("-inf"), 0.0, tl.exp(m_i - m_ij))
        acc = acc * alpha[:, None]
        v = tl.load(V_cache + off_v, mask=(start_n + offs_bs_n[:, None]) < cur_batch_ctx_len, other=0.0)
        acc = tl.dot(p.to(v.dtype), v, acc=acc)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        m_i = m_ij
    k_ptrs = K + offs_n[None, :] * stride_kbs + cur_kv_head * stride_kh + offs_d[:, None]
    v_ptrs = V + offs_n[:, None] * stride_vbs + cur_kv_head * stride_vh + offs_d[None, :]
    block_mask = tl.where(block_start_loc < cur_batch_query_len, 1, 0)
    for start_n in tl.range(0, block_mask * (start_m + 1) * BLOCK_M, BLOCK_N, loop_unroll_factor=num_unroll_request):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = tl.load(k_ptrs + (cur_batch_in_all_start_index + start_n) * stride_kbs,
                    mask=(start_n + offs_n[None, :]) < cur_batch_query_len, other=0.0)
        qk = tl.dot(q, k) * sm_scale
        mask = ((start_n + offs_n[None, :]) < cur_batch_query_len) & (offs_m[:, None] >= (start_n + offs_n[None, :]))
        qk = tl.where(mask, qk, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, axis=1))
        p = tl.exp(qk - m_ij[:, None])
        p = tl.where(m_ij[:, None] == float("-inf"), 0.0, p)
        alpha = tl.where(m_i == float("-inf"), 0.0, tl.exp(m_i - m_ij))
        acc = acc * alpha[:, None]
        v = tl.load(v_ptrs + (cur_batch_in_all_start_index + start_n) * stride_vbs,
                    mask=(start_n + offs_n[:, None]) < cur_batch_query_len, other=0.0)
        acc = tl.dot(p.to(v.dtype), v, acc=acc)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        m_i = m_ij
    acc = acc / (l_i[:, None] + 1e-10)
    off_o = (cur_batch_in_all_start_index + offs_m[:, None]) * stride_obs + cur_head * stride_oh + offs_d[None, :]
    tl.store(Out + off_o, acc, mask=offs_m[:, None] < cur_batch_query_len)


def context_attention_fwd(q, k, v, o, k_cache, v_cache, b_loc, b_start_loc, b_seq_len, max_input_len):
    """q/o [num_tokens, Hq, 128], k/v [num_tokens, Hk, 128] (the new tokens); k_cache [blocks, Hk, 128 / x, 16, x],
    v_cache [blocks, Hk, 128, 16]; b_loc int32 [batch, max_blocks]; b_start_loc int32 [batch + 1] (cumulative);
    b_seq_len int32 [batch] (context + new tokens)."""
    batch, head = b_seq_len.shape[0], q.shape[1]
    BLOCK = 128
    grid = (batch, head, triton.cdiv(max_input_len, BLOCK))
    _prefix_prefill_kernel[grid](
        q, k, v, k_cache, v_cache, b_loc, 0.088, b_start_loc, b_seq_len, k_cache.shape[4], o,
        b_loc.stride(0), b_loc.stride(1), q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0),
        v.stride(1), o.stride(0), o.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        k_cache.stride(3), k_cache.stride(4), v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        v_cache.stride(3), num_queries_per_kv=q.shape[1] // k.shape[1], BLOCK_M=BLOCK, BLOCK_DMODEL=128,
        BLOCK_SIZE=32, PHYSICAL_BLOCK_SIZE=v_cache.shape[3], BLOCK_N=64, num_unroll_cache=4, num_unroll_request=1,
        num_warps=8)


@tritonkit.case(batch=[1, 16, 256])
def prefix_prefill_case(batch):
    m = dict(device="meta", dtype=torch.bfloat16)
    i32 = dict(device="meta", dtype=torch.int32)
    q = torch.empty(4096, 32, 128, **m)
    k = torch.empty(4096, 8, 128, **m)
    kc = torch.empty(50_000, 8, 16, 16, 8, **m)
    vc = torch.empty(50_000, 8, 128, 16, **m)
    context_attention_fwd(q, k, k, torch.empty_like(q), kc, vc, torch.empty(batch, 4096, **i32),
                          torch.empty(batch + 1, **i32), torch.empty(batch, **i32), 4096)
