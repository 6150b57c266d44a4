"""reshape_and_cache: scatter each token's K/V into a paged cache [num_blocks, block_size, kv_heads, head_size].

Seeded bug (int32-offset): the slot is narrowed to int32 before it is split into (block, offset) and multiplied
by the block stride; a cache past 2^31 elements wraps the offset. The twin keeps the slot in int64.
"""

import torch
import triton
import triton.language as tl

import tritonkit


@triton.jit(do_not_specialize=["num_tokens"])
def _kv_write_i32_kernel(
    key_ptr, value_ptr, key_cache_ptr, value_cache_ptr, slot_mapping_ptr,
    stride_key_tok, stride_value_tok, stride_cache_block, stride_cache_slot, num_tokens, block_size,
    ROW: tl.constexpr,
):
    pid_tok = tl.program_id(0)
    slot = tl.load(slot_mapping_ptr + pid_tok).to(tl.int32)
    blk = slot // block_size
    off = slot % block_size
    offs = tl.arange(0, ROW)  # [ROW] = kv_heads * head_size
    mask = (offs < ROW) & (slot >= 0)
    k = tl.load(key_ptr + pid_tok.to(tl.int64) * stride_key_tok + offs)
    v = tl.load(value_ptr + pid_tok.to(tl.int64) * stride_value_tok + offs)
    dst = blk * stride_cache_block + off * stride_cache_slot  # seeded bug: int32-offset
    tl.store(key_cache_ptr + dst + offs, k, mask=mask)
    tl.store(value_cache_ptr + dst + offs, v, mask=mask)


@triton.jit(do_not_specialize=["num_tokens"])
def _kv_write_kernel(
    key_ptr, value_ptr, key_cache_ptr, value_cache_ptr, slot_mapping_ptr,
    stride_key_tok, stride_value_tok, stride_cache_block, stride_cache_slot, num_tokens, block_size,
    ROW: tl.constexpr,
):
    pid_tok = tl.program_id(0)
    slot = tl.load(slot_mapping_ptr + pid_tok)  # int64 slot_mapping stays int64
    blk = slot // block_size
    off = slot % block_size
    offs = tl.arange(0, ROW)
    mask = (offs < ROW) & (slot >= 0)
    k = tl.load(key_ptr + pid_tok.to(tl.int64) * stride_key_tok + offs)
    v = tl.load(value_ptr + pid_tok.to(tl.int64) * stride_value_tok + offs)
    dst = blk * stride_cache_block + off * stride_cache_slot
    tl.store(key_cache_ptr + dst + offs, k, mask=mask)
    tl.store(value_cache_ptr + dst + offs, v, mask=mask)


def write_kv(kernel, key, value, key_cache, value_cache, slot_mapping):
    num_tokens, kv_heads, head_size = key.shape
    kernel[(num_tokens,)](
        key, value, key_cache, value_cache, slot_mapping,
        key.stride(0), value.stride(0), key_cache.stride(0), key_cache.stride(1), num_tokens, key_cache.shape[1],
        ROW=kv_heads * head_size,
    )


def _inputs(num_tokens, num_blocks, dtype=torch.bfloat16):
    m = dict(device="meta", dtype=dtype)
    key = torch.empty(num_tokens, 8, 128, **m)
    value = torch.empty(num_tokens, 8, 128, **m)
    key_cache = torch.empty(num_blocks, 16, 8, 128, **m)
    value_cache = torch.empty(num_blocks, 16, 8, 128, **m)
    slot_mapping = torch.empty(num_tokens, device="meta", dtype=torch.int64)
    return key, value, key_cache, value_cache, slot_mapping


@tritonkit.case(num_tokens=[1, 16, 17, 70_000], num_blocks=[4096, 200_000])
def kv_write_i32(num_tokens, num_blocks):
    write_kv(_kv_write_i32_kernel, *_inputs(num_tokens, num_blocks))


@tritonkit.case(num_tokens=[1, 16, 17, 70_000], num_blocks=[4096, 200_000])
def kv_write(num_tokens, num_blocks):
    write_kv(_kv_write_kernel, *_inputs(num_tokens, num_blocks))
