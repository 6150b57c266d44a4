"""Write each token's K and V into a paged cache [num_blocks, block_size, kv_heads, head_size] at the token's slot:
the clean pattern of vLLM's Triton reshape_and_cache_flash (see SOURCES.md). Must stay free of findings.

What keeps it correct: the slot is loaded and widened to int64 before it is split into (block, offset) and scaled
by the block stride; the strides are annotated tl.int64; a padding token (slot -1) returns before anything is
divided or written, so `slot // BLOCK_SIZE` only ever sees a non-negative slot. The grid is (tokens, tiles of
heads x head_size): tokens in grid[0]. K and V may be column views of one fused qkv tensor.
"""

import torch
import triton
import triton.language as tl

import tritonkit


@triton.jit
def _slot_write_kernel(
    key_ptr, value_ptr, key_cache_ptr, value_cache_ptr, slot_ptr, k_scale_ptr, v_scale_ptr,
    stride_key: tl.int64, stride_value: tl.int64, stride_block: tl.int64, stride_slot: tl.int64,
    NUM_HEADS: tl.constexpr, HEAD_SIZE: tl.constexpr, BLOCK_SIZE: tl.constexpr, FP8: tl.constexpr,
    TILE: tl.constexpr,
):
    tok = tl.program_id(0)
    slot = tl.load(slot_ptr + tok).to(tl.int64)
    if slot < 0:
        return
    block = slot // BLOCK_SIZE
    in_block = slot % BLOCK_SIZE
    offs = tl.program_id(1) * TILE + tl.arange(0, TILE)
    mask = offs < NUM_HEADS * HEAD_SIZE
    head = offs // HEAD_SIZE
    dim = offs % HEAD_SIZE
    dst = block * stride_block + in_block * stride_slot + head * HEAD_SIZE + dim
    k = tl.load(key_ptr + tok * stride_key + offs, mask=mask)
    v = tl.load(value_ptr + tok * stride_value + offs, mask=mask)
    if FP8:
        k = k.to(tl.float32) / tl.load(k_scale_ptr)
        v = v.to(tl.float32) / tl.load(v_scale_ptr)
    tl.store(key_cache_ptr + dst, k.to(key_cache_ptr.dtype.element_ty), mask=mask)
    tl.store(value_cache_ptr + dst, v.to(value_cache_ptr.dtype.element_ty), mask=mask)


def slot_write(key, value, key_cache, value_cache, slots, k_scale, v_scale):
    """key/value [num_tokens, kv_heads, head_size] (row stride may exceed kv_heads * head_size); caches
    [num_blocks, block_size, kv_heads, head_size], bf16 or fp8 e4m3 (scaled); slots int64 [num_tokens], -1 = pad."""
    num_tokens, heads, head_size = key.shape
    fp8 = key_cache.dtype == torch.float8_e4m3fn
    tile = 1024 if heads * head_size >= 1024 else triton.next_power_of_2(heads * head_size)
    slot_write_grid = (num_tokens, triton.cdiv(heads * head_size, tile))
    _slot_write_kernel[slot_write_grid](
        key, value, key_cache, value_cache, slots, k_scale, v_scale, key.stride(0), value.stride(0),
        key_cache.stride(0), key_cache.stride(1), NUM_HEADS=heads, HEAD_SIZE=head_size,
        BLOCK_SIZE=key_cache.shape[1], FP8=fp8, TILE=tile)


NUM_BLOCKS = 200_000  # x 16 slots x 8 KV heads x 128 = 3.3e9 elements
BOUNDS = {"slot_ptr": (-1, NUM_BLOCKS * 16 - 1)}  # block * 16 + offset, or -1 for a padding token


def _caches(dtype):
    m = dict(device="meta", dtype=dtype)
    return torch.empty(NUM_BLOCKS, 16, 8, 128, **m), torch.empty(NUM_BLOCKS, 16, 8, 128, **m)


# Llama-3-8B / 70B KV shape (8 heads x 128), block 16, bf16 and fp8 caches
@tritonkit.case(num_tokens=[1, 16, 17, 8192, 65_536], cache=["bf16", "fp8"], loaded_bounds=BOUNDS)
def slot_write_cache(num_tokens, cache):
    m = dict(device="meta", dtype=torch.bfloat16)
    scale = torch.empty(1, device="meta", dtype=torch.float32)
    k_cache, v_cache = _caches(torch.bfloat16 if cache == "bf16" else torch.float8_e4m3fn)
    slot_write(torch.empty(num_tokens, 8, 128, **m), torch.empty(num_tokens, 8, 128, **m), k_cache, v_cache,
               torch.empty(num_tokens, device="meta", dtype=torch.int64), scale, scale)


# K and V as column views of Llama-3-8B's fused qkv output [num_tokens, (32 + 8 + 8) x 128]
@tritonkit.case(num_tokens=[1, 8192, 65_536], loaded_bounds=BOUNDS)
def slot_write_qkv_views(num_tokens):
    qkv = torch.empty(num_tokens, 48 * 128, device="meta", dtype=torch.bfloat16)
    scale = torch.empty(1, device="meta", dtype=torch.float32)
    k_cache, v_cache = _caches(torch.bfloat16)
    slot_write(qkv[:, 32 * 128:40 * 128].view(num_tokens, 8, 128), qkv[:, 40 * 128:].view(num_tokens, 8, 128),
               k_cache, v_cache, torch.empty(num_tokens, device="meta", dtype=torch.int64), scale, scale)
