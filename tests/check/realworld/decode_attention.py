"""Split-KV paged decode attention, stage 1 (one program per sequence, query head and KV split), modeled on vLLM's
Triton decode attention. See SOURCES.md: vllm-project/vllm#47671.

The page number comes from an int32 block table. In the `i32page` kernel it stays int32 and is multiplied by the
page stride in int32: a cache past 2^31 elements (150,000 pages x 16 slots x 32 heads x 128) wraps the offset.
The twin widens the page number to int64 as it is loaded, as the upstream fix did.

Both kernels (as upstream, on its MHA path) sum q.k over head_dim in bfloat16: a true, minor finding that the fix
left in place.
"""

import torch
import triton
import triton.language as tl

import tritonkit


@triton.jit
def _decode_split_kv_i32page_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, block_table_ptr, seq_lens_ptr, partial_ptr, sm_scale,
    stride_bt_seq, stride_q_seq, stride_q_head,
    stride_kc_page, stride_kc_slot, stride_kc_head, stride_vc_page, stride_vc_slot, stride_vc_head,
    stride_p_seq, stride_p_head, stride_p_split,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, NUM_SPLITS: tl.constexpr,
    PAGE: tl.constexpr,
):
    pid_seq = tl.program_id(0)
    pid_head = tl.program_id(1)
    pid_split = tl.program_id(2)
    kv_head = pid_head // GROUP
    offs_d = tl.arange(0, HEAD_DIM)
    seq_len = tl.load(seq_lens_ptr + pid_seq)
    q = tl.load(q_ptr + pid_seq * stride_q_seq + pid_head * stride_q_head + offs_d)  # [HEAD_DIM], bf16
    per_split = tl.cdiv(seq_len, NUM_SPLITS)
    lo = per_split * pid_split
    hi = tl.minimum(lo + per_split, seq_len)
    m_i = -float("inf")
    l_i = 0.0
    acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
    if hi > lo:
        for start in range(lo, hi, BLOCK_N):
            offs_n = start + tl.arange(0, BLOCK_N)
            mask_n = offs_n < hi
            page = tl.load(block_table_ptr + stride_bt_seq * pid_seq + offs_n // PAGE, mask=mask_n, other=0)
            in_page = offs_n % PAGE
            offs_k = (page * stride_kc_page + in_page * stride_kc_slot)[:, None]  # expect: int32-offset
            k = tl.load(k_cache_ptr + offs_k + kv_head * stride_kc_head + offs_d[None, :], mask=mask_n[:, None],
                        other=0.0)  # [BLOCK_N, HEAD_DIM]
            qk = tl.sum(q[None, :] * k, 1)  # expect: low-precision-accumulation
            qk = tl.where(mask_n, qk.to(tl.float32) * sm_scale, float("-inf"))
            offs_v = (page * stride_vc_page + in_page * stride_vc_slot)[:, None]  # expect: int32-offset
            v = tl.load(v_cache_ptr + offs_v + kv_head * stride_vc_head + offs_d[None, :], mask=mask_n[:, None],
                        other=0.0)
            m_new = tl.maximum(tl.max(qk, 0), m_i)
            alpha = tl.exp(m_i - m_new)
            p = tl.exp(qk - m_new)
            acc = acc * alpha + tl.sum(p[:, None] * v.to(tl.float32), 0)
            l_i = l_i * alpha + tl.sum(p, 0)
            m_i = m_new
        out = partial_ptr + pid_seq * stride_p_seq + pid_head * stride_p_head + pid_split * stride_p_split
        tl.store(out + offs_d, acc / l_i)
        tl.store(out + HEAD_DIM, m_i + tl.log(l_i))


@triton.jit
def _decode_split_kv_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, block_table_ptr, seq_lens_ptr, partial_ptr, sm_scale,
    stride_bt_seq, stride_q_seq, stride_q_head,
    stride_kc_page, stride_kc_slot, stride_kc_head, stride_vc_page, stride_vc_slot, stride_vc_head,
    stride_p_seq, stride_p_head, stride_p_split,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, NUM_SPLITS: tl.constexpr,
    PAGE: tl.constexpr,
):
    pid_seq = tl.program_id(0)
    pid_head = tl.program_id(1)
    pid_split = tl.program_id(2)
    kv_head = pid_head // GROUP
    offs_d = tl.arange(0, HEAD_DIM)
    seq_len = tl.load(seq_lens_ptr + pid_seq)
    q = tl.load(q_ptr + pid_seq * stride_q_seq + pid_head * stride_q_head + offs_d)
    per_split = tl.cdiv(seq_len, NUM_SPLITS)
    lo = per_split * pid_split
    hi = tl.minimum(lo + per_split, seq_len)
    m_i = -float("inf")
    l_i = 0.0
    acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
    if hi > lo:
        for start in range(lo, hi, BLOCK_N):
            offs_n = start + tl.arange(0, BLOCK_N)
            mask_n = offs_n < hi
            # a page number times the page stride passes 2^31 on large caches: widen it as it is loaded
            page = tl.load(block_table_ptr + stride_bt_seq * pid_seq + offs_n // PAGE, mask=mask_n,
                           other=0).to(tl.int64)
            in_page = offs_n % PAGE
            offs_k = (page * stride_kc_page + in_page * stride_kc_slot)[:, None]
            k = tl.load(k_cache_ptr + offs_k + kv_head * stride_kc_head + offs_d[None, :], mask=mask_n[:, None],
                        other=0.0)
            qk = tl.sum(q[None, :] * k, 1)  # expect: low-precision-accumulation
            qk = tl.where(mask_n, qk.to(tl.float32) * sm_scale, float("-inf"))
            offs_v = (page * stride_vc_page + in_page * stride_vc_slot)[:, None]
            v = tl.load(v_cache_ptr + offs_v + kv_head * stride_vc_head + offs_d[None, :], mask=mask_n[:, None],
                        other=0.0)
            m_new = tl.maximum(tl.max(qk, 0), m_i)
            alpha = tl.exp(m_i - m_new)
            p = tl.exp(qk - m_new)
            acc = acc * alpha + tl.sum(p[:, None] * v.to(tl.float32), 0)
            l_i = l_i * alpha + tl.sum(p, 0)
            m_i = m_new
        out = partial_ptr + pid_seq * stride_p_seq + pid_head * stride_p_head + pid_split * stride_p_split
        tl.store(out + offs_d, acc / l_i)
        tl.store(out + HEAD_DIM, m_i + tl.log(l_i))


def decode_split_kv(kernel, q, k_cache, v_cache, block_table, seq_lens, partial, num_splits):
    """q [num_seqs, num_heads, head_dim]; caches [num_pages, page, kv_heads, head_dim]; block_table int32
    [num_seqs, max_pages]; partial fp32 [num_seqs, num_heads, num_splits, head_dim + 1] (output, then its LSE)."""
    num_seqs, num_heads, head_dim = q.shape
    _, page, kv_heads, _ = k_cache.shape
    kernel[(num_seqs, num_heads, num_splits)](
        q, k_cache, v_cache, block_table, seq_lens, partial, head_dim ** -0.5,
        block_table.stride(0), q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), v_cache.stride(0), v_cache.stride(1),
        v_cache.stride(2), partial.stride(0), partial.stride(1), partial.stride(2),
        GROUP=num_heads // kv_heads, HEAD_DIM=head_dim, BLOCK_N=32, NUM_SPLITS=num_splits, PAGE=page,
    )


def _run(kernel, num_seqs, num_pages):
    # MHA, 32 heads x 128 (Llama-2-7B shape, the non-grouped path): 150,000 pages x 16 x 32 x 128 = 9.8e9 elements
    m = dict(device="meta", dtype=torch.bfloat16)
    q = torch.empty(num_seqs, 32, 128, **m)
    k_cache = torch.empty(num_pages, 16, 32, 128, **m)
    v_cache = torch.empty(num_pages, 16, 32, 128, **m)
    block_table = torch.empty(num_seqs, 2048, device="meta", dtype=torch.int32)
    seq_lens = torch.empty(num_seqs, device="meta", dtype=torch.int32)
    partial = torch.empty(num_seqs, 32, 8, 129, device="meta", dtype=torch.float32)
    decode_split_kv(kernel, q, k_cache, v_cache, block_table, seq_lens, partial, num_splits=8)


# loaded_bounds: block-table entries are page ids of this cache; sequence lengths fit the 2048-page table.
@tritonkit.case(num_seqs=[1, 17, 256], loaded_bounds={"block_table_ptr": (0, 149_999), "seq_lens_ptr": (0, 32_768)})
def decode_page_number_int32(num_seqs):
    _run(_decode_split_kv_i32page_kernel, num_seqs, 150_000)


@tritonkit.case(num_seqs=[1, 17, 256], loaded_bounds={"block_table_ptr": (0, 149_999), "seq_lens_ptr": (0, 32_768)})
def decode_page_number_int64(num_seqs):
    _run(_decode_split_kv_kernel, num_seqs, 150_000)
