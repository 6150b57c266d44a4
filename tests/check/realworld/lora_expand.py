"""LoRA expand (shrunk activations times each adapter's B, added into the output rows of its tokens), modeled on
vLLM's Triton `lora_expand` kernel. See SOURCES.md.

Tokens are sorted by adapter: a program takes BLOCK_M of one adapter's tokens, gathers their row ids
(`ram = tl.load(token_indices_sorted + ...)`) and adds its tile into those rows of the output: a load, an add and
a store through one pointer expression, with one mask. Each lane stores the element it loaded, so no barrier is
needed whatever the row ids are. The adapter's token count comes from a per-adapter count and a start offset
into the sorted list.
"""

import torch
import triton
import triton.language as tl

import tritonkit


@triton.jit
def _lora_expand_kernel(
    x_ptr, b_ptr, out_ptr, token_indices_sorted_ptr, num_tokens_per_lora_ptr, lora_token_start_loc_ptr,
    lora_ids_ptr, N, K, stride_x_tok, stride_b_lora, stride_b_n, stride_out_tok,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, ADD_INPUTS: tl.constexpr,
):
    pid_mn = tl.program_id(0)
    lora_idx = tl.program_id(1)
    cta_n_num = tl.cdiv(N, BLOCK_N)
    pid_m = pid_mn // cta_n_num
    pid_n = pid_mn % cta_n_num
    lora_id = tl.load(lora_ids_ptr + lora_idx)
    if lora_id == -1:
        return
    lora_m_size = tl.load(num_tokens_per_lora_ptr + lora_idx)
    cta_m_offset = pid_m * BLOCK_M
    if cta_m_offset >= lora_m_size:
        return
    cta_m_len = min(BLOCK_M, lora_m_size - cta_m_offset)
    lora_m_start = tl.load(lora_token_start_loc_ptr + lora_idx)
    offs_m = tl.arange(0, BLOCK_M) % cta_m_len
    ram = tl.load(token_indices_sorted_ptr + lora_m_start + cta_m_offset + offs_m)  # [BLOCK_M]
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = x_ptr + ram[:, None] * stride_x_tok + offs_k[None, :]
    b_ptrs = b_ptr + lora_id.to(tl.int64) * stride_b_lora + offs_n[None, :] * stride_b_n + offs_k[:, None]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        mask_k = offs_k < K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=mask_k[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=mask_k[:, None] & (offs_n < N)[None, :], other=0.0)
        acc += tl.dot(a, b)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K
    c_ptrs = out_ptr + ram[:, None] * stride_out_tok + offs_n[None, :]
    c_mask = (tl.arange(0, BLOCK_M) < cta_m_len)[:, None] & (offs_n < N)[None, :]
    tiled_c = acc.to(out_ptr.dtype.element_ty)
    if ADD_INPUTS:
        # read-modify-write of the rows this program owns: each lane stores what it loaded
        tiled_out = tl.load(c_ptrs, mask=c_mask)
        tiled_c += tiled_out
    tl.store(c_ptrs, tiled_c, mask=c_mask)


def lora_expand(x, lora_b, out, token_indices_sorted, num_tokens_per_lora, lora_token_start_loc, lora_ids,
                add_inputs=True):
    """x [num_tokens, rank] (the shrunk activations); lora_b [num_loras, hidden, rank]; out [num_tokens, hidden]
    (added into); token_indices_sorted int32 [num_tokens]; num_tokens_per_lora, lora_token_start_loc, lora_ids
    int32 [max_loras + 1] (-1: no adapter)."""
    num_tokens, rank = x.shape
    hidden = lora_b.shape[1]
    grid = (triton.cdiv(num_tokens, 16) * triton.cdiv(hidden, 128), lora_ids.shape[0])
    _lora_expand_kernel[grid](
        x, lora_b, out, token_indices_sorted, num_tokens_per_lora, lora_token_start_loc, lora_ids, hidden, rank,
        x.stride(0), lora_b.stride(0), lora_b.stride(1), out.stride(0),
        BLOCK_M=16, BLOCK_N=128, BLOCK_K=16, ADD_INPUTS=add_inputs)


@tritonkit.case(num_tokens=[1, 16, 4096, 65_536], sweep=[])
def lora_expand_add(num_tokens):
    # Llama-3-8B q projection, rank 16, 8 adapters
    m = dict(device="meta", dtype=torch.bfloat16)
    i32 = dict(device="meta", dtype=torch.int32)
    lora_expand(torch.empty(num_tokens, 16, **m), torch.empty(8, 4096, 16, **m), torch.empty(num_tokens, 4096, **m),
                torch.empty(num_tokens, **i32), torch.empty(9, **i32), torch.empty(9, **i32), torch.empty(9, **i32))
