"""Unified (prefill + decode) paged attention, 2D path, trimmed from vLLM 0.33.0's `kernel_unified_attention` and
its helpers (vllm/v1/attention/ops/triton_unified_attention.py, triton_attention_helpers.py; Apache-2.0, vLLM
contributors). See SOURCES.md.

A binary search over `query_start_len` finds the program's sequence; the query length is the difference of two of
its entries, the context length the loaded `seq_len` minus it, and the tile loop runs to `cdiv_fn(min(context_len
+ the block's last query + 1, seq_len), TILE_SIZE)`. Correct upstream: every length is >= 0, and a quotient of a
negative prefix would only give a loop of no iteration. No case declares anything (issue 40).
"""

import torch
import triton
import triton.language as tl

import tritonkit


@triton.jit
def cdiv_fn(x, y):
    return (x + y - 1) // y


@triton.jit
def find_seq_idx(query_start_len_ptr, target_idx, num_seqs, BLOCK_Q: tl.constexpr):
    left: tl.int32 = 0
    right = num_seqs
    while left < right:
        mid = (left + right) // 2
        val = tl.load(query_start_len_ptr + mid)
        mid_val = val // BLOCK_Q + mid
        if mid_val <= target_idx:
            left = mid + 1
        else:
            right = mid
    return left - 1


@triton.jit
def compute_tile_loop_bounds(context_len, seq_len, q_block_local_idx, segm_idx, tiles_per_segment,
                             TILE_SIZE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_Q: tl.constexpr,
                             num_queries_per_kv: tl.constexpr, IS_3D: tl.constexpr):
    max_seq_prefix_len = context_len + q_block_local_idx * BLOCK_Q + (BLOCK_M - 1) // num_queries_per_kv + 1
    max_seq_prefix_len = tl.minimum(max_seq_prefix_len, seq_len)
    num_tiles = cdiv_fn(max_seq_prefix_len, TILE_SIZE)
    tile_start = 0
    tile_end = num_tiles
    if IS_3D:
        loop_lo = max(segm_idx * tiles_per_segment, tile_start)
        loop_hi = min((segm_idx + 1) * tiles_per_segment, tile_end)
    else:
        loop_lo = tile_start
        loop_hi = tile_end
    return loop_lo, loop_hi, max_seq_prefix_len


@triton.jit
def _unified_attention_kernel(  # expect: recompile
    output_ptr, segm_output_ptr, query_ptr, key_cache_ptr, value_cache_ptr, block_tables_ptr, seq_lens_ptr,
    query_start_len_ptr,
    scale, num_seqs,
    num_query_heads: tl.constexpr, num_queries_per_kv: tl.constexpr, block_table_stride: tl.int64,
    query_stride_0: tl.int64, query_stride_1: tl.int64, output_stride_0: tl.int64, output_stride_1: tl.int64,
    stride_k_cache_0: tl.int64, stride_k_cache_1: tl.int64, stride_k_cache_2: tl.int64,
    stride_k_cache_3: tl.constexpr, stride_v_cache_0: tl.int64, stride_v_cache_1: tl.int64,
    stride_v_cache_2: tl.int64, stride_v_cache_3: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, TILE_SIZE: tl.constexpr, HEAD_SIZE: tl.constexpr, BLOCK_Q: tl.constexpr,
    BLOCK_M: tl.constexpr, NUM_SEGMENTS_PER_SEQ: tl.constexpr, IS_3D: tl.constexpr,
):
    q_block_global_idx = tl.program_id(0)
    kv_head_idx = tl.program_id(1)
    segm_idx = tl.program_id(2) if IS_3D else 0
    seq_idx = find_seq_idx(query_start_len_ptr, q_block_global_idx, num_seqs, BLOCK_Q)
    q_block_start_idx = tl.load(query_start_len_ptr + seq_idx) // BLOCK_Q + seq_idx
    q_block_local_idx = q_block_global_idx - q_block_start_idx
    cur_batch_in_all_start_index = tl.load(query_start_len_ptr + seq_idx)
    cur_batch_in_all_stop_index = tl.load(query_start_len_ptr + seq_idx + 1)
    cur_batch_query_len = cur_batch_in_all_stop_index - cur_batch_in_all_start_index
    seq_len = tl.load(seq_lens_ptr + seq_idx)
    if q_block_local_idx * BLOCK_Q >= cur_batch_query_len:
        return
    if IS_3D:
        tiles_per_segment = cdiv_fn(seq_len, NUM_SEGMENTS_PER_SEQ * TILE_SIZE)
        if segm_idx * tiles_per_segment * TILE_SIZE >= seq_len:
            return
    else:
        tiles_per_segment = 0
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_SIZE)
    offs_t = tl.arange(0, TILE_SIZE)
    query_pos = q_block_local_idx * BLOCK_Q + offs_m // num_queries_per_kv
    query_offset_0 = cur_batch_in_all_start_index + query_pos
    query_offset_1 = kv_head_idx * num_queries_per_kv + offs_m % num_queries_per_kv
    query_offset = (query_offset_0[:, None] * query_stride_0 + query_offset_1[:, None] * query_stride_1
                    + offs_d[None, :])
    query_mask_0 = query_pos < cur_batch_query_len
    query_mask_1 = query_offset_1 < num_query_heads
    Q = tl.load(query_ptr + query_offset, mask=query_mask_0[:, None] & query_mask_1[:, None], other=0.0)
    block_table_offset = seq_idx * block_table_stride
    M = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    L = tl.full([BLOCK_M], 1.0, dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_SIZE], dtype=tl.float32)
    context_len = seq_len - cur_batch_query_len
    loop_lo, loop_hi, max_seq_prefix_len = compute_tile_loop_bounds(
        context_len, seq_len, q_block_local_idx, segm_idx, tiles_per_segment, TILE_SIZE, BLOCK_M, BLOCK_Q,
        num_queries_per_kv, IS_3D)
    for j in range(loop_lo, loop_hi):
        seq_offset = j * TILE_SIZE + offs_t
        tile_mask = seq_offset < max_seq_prefix_len
        physical_block_idx = tl.load(block_tables_ptr + block_table_offset + seq_offset // BLOCK_SIZE).to(tl.int64)
        v_offset = (physical_block_idx[:, None] * stride_v_cache_0 + kv_head_idx * stride_v_cache_2
                    + offs_d[None, :] * stride_v_cache_3 + (seq_offset % BLOCK_SIZE)[:, None] * stride_v_cache_1)
        k_offset = (physical_block_idx[None, :] * stride_k_cache_0 + kv_head_idx * stride_k_cache_2
                    + offs_d[:, None] * stride_k_cache_3 + (seq_offset % BLOCK_SIZE)[None, :] * stride_k_cache_1)
        K = tl.load(key_cache_ptr + k_offset, mask=tile_mask[None, :], other=0.0)
        V = tl.load(value_cache_ptr + v_offset, mask=tile_mask[:, None], other=0.0)
        seq_mask = seq_offset[None, :] < context_len + query_pos[:, None] + 1
        S = tl.where(query_mask_1[:, None] & query_mask_0[:, None] & seq_mask, scale * tl.dot(Q, K), float("-inf"))
        m_j = tl.maximum(M, tl.max(S, axis=1))
        m_j = tl.where(m_j > float("-inf"), m_j, 0.0)
        P = tl.exp(S - m_j[:, None])
        alpha = tl.exp(M - m_j)
        acc = acc * alpha[:, None]
        L = L * alpha + tl.sum(P, axis=1)
        M = m_j
        acc += tl.dot(P.to(V.dtype), V)
    if IS_3D:
        segm_output_offset = (
            query_offset_0[:, None].to(tl.int64) * (num_query_heads * NUM_SEGMENTS_PER_SEQ * HEAD_SIZE)
            + query_offset_1[:, None] * (NUM_SEGMENTS_PER_SEQ * HEAD_SIZE) + segm_idx * HEAD_SIZE + offs_d[None, :])
        tl.store(segm_output_ptr + segm_output_offset, acc, mask=query_mask_0[:, None] & query_mask_1[:, None])
    else:
        acc = acc / L[:, None]
        output_offset = (query_offset_0[:, None] * output_stride_0 + query_offset_1[:, None] * output_stride_1
                         + offs_d[None, :])
        tl.store(output_ptr + output_offset, acc, mask=query_mask_0[:, None] & query_mask_1[:, None])


def unified_attention(q, k_cache, v_cache, out, cu_seqlens_q, seq_lens, block_table, segm_output):
    """q/out [num_tokens, Hq, 128]; k/v_cache [num_blocks, 16, Hk, 128]; cu_seqlens_q int32 [num_seqs + 1]
    (cumulative, non-decreasing); seq_lens int32 [num_seqs]; block_table int32 [num_seqs, max_blocks];
    segm_output float32 [num_tokens, Hq, 16, 128]: decode batches (one query a sequence) split each sequence's
    keys over 16 segments, as vLLM's Triton backend does."""
    num_seqs, num_query_heads, num_kv_heads = seq_lens.shape[0], q.shape[1], k_cache.shape[2]
    num_queries_per_kv = num_query_heads // num_kv_heads
    BLOCK_M = 16 if num_queries_per_kv <= 16 else triton.next_power_of_2(num_queries_per_kv)
    BLOCK_Q = BLOCK_M // num_queries_per_kv
    total_num_q_blocks = q.shape[0] // BLOCK_Q + num_seqs
    is_3d = q.shape[0] == num_seqs
    grid = (total_num_q_blocks, num_kv_heads) + ((segm_output.shape[2],) if is_3d else ())
    _unified_attention_kernel[grid](
        out, segm_output, q, k_cache, v_cache, block_table, seq_lens, cu_seqlens_q, 0.088, num_seqs,
        num_query_heads=num_query_heads, num_queries_per_kv=num_queries_per_kv,
        block_table_stride=block_table.stride(0), query_stride_0=q.stride(0), query_stride_1=q.stride(1),
        output_stride_0=out.stride(0), output_stride_1=out.stride(1), stride_k_cache_0=k_cache.stride(0),
        stride_k_cache_1=k_cache.stride(1), stride_k_cache_2=k_cache.stride(2), stride_k_cache_3=k_cache.stride(3),
        stride_v_cache_0=v_cache.stride(0), stride_v_cache_1=v_cache.stride(1), stride_v_cache_2=v_cache.stride(2),
        stride_v_cache_3=v_cache.stride(3), BLOCK_SIZE=16, TILE_SIZE=32, HEAD_SIZE=128, BLOCK_Q=BLOCK_Q,
        BLOCK_M=BLOCK_M, NUM_SEGMENTS_PER_SEQ=segm_output.shape[2], IS_3D=is_3d)


@tritonkit.case(num_seqs=[1, 17, 256], prefill=[0, 1], sweep=["num_seqs"])
def unified_attention_case(num_seqs, prefill):
    num_tokens = num_seqs * (512 if prefill else 1)
    # Llama-3-8B-like: 32 query heads over 8 KV heads; 200,000 blocks of 16 tokens
    m = dict(device="meta")
    q = torch.empty(num_tokens, 32, 128, dtype=torch.bfloat16, **m)
    kv = torch.empty(200_000, 16, 8, 128, dtype=torch.bfloat16, **m)
    i32 = dict(dtype=torch.int32, **m)
    unified_attention(q, kv, kv, torch.empty_like(q), torch.empty(num_seqs + 1, **i32), torch.empty(num_seqs, **i32),
                      torch.empty(num_seqs, 4096, **i32), torch.empty(num_tokens, 32, 16, 128, **m))
