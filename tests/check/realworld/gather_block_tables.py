"""Per-step block-table gather and slot mapping of a GPU model runner, modeled on vLLM's model-runner-v2 block
tables. See SOURCES.md: vllm-project/vllm#37645.

`_gather_block_tables_*`: one program per (KV-cache group, batch row) copies the request's block-table row into the
batch's table and zeroes the rows past the live request count `num_reqs`. That count changes every step; the
`specialized` kernel lets Triton specialize it (num_reqs == 1, divisible by 16, neither: three compiles while
serving), the twin names it in do_not_specialize as the fix did.

`_slot_mapping_kernel` (clean upstream pattern): token positions -> slots through the block table; the last program
pads the tail of the slot mapping with -1. Positions are loaded with `other=0`, and bounded, so `positions //
block_size` divides a non-negative value.
"""

import torch
import triton
import triton.language as tl

import tritonkit


@triton.jit
def _gather_block_tables_specialized_kernel(  # expect: recompile
    batch_to_req_ptr, src_ptr, dst_ptr, num_blocks_ptr, stride_src_group, stride_src_req, stride_dst_group,
    stride_dst_row, stride_nb_group, num_reqs, max_blocks, BLOCK: tl.constexpr,
):
    group = tl.program_id(0)
    row = tl.program_id(1)
    dst_row = dst_ptr + group * stride_dst_group + row * stride_dst_row
    if row >= num_reqs:
        for i in tl.range(0, max_blocks, BLOCK):
            offs = i + tl.arange(0, BLOCK)
            tl.store(dst_row + offs, 0, mask=offs < max_blocks)
        return
    req = tl.load(batch_to_req_ptr + row)
    n = tl.load(num_blocks_ptr + group * stride_nb_group + req)
    src_row = src_ptr + group * stride_src_group + req * stride_src_req
    for i in tl.range(0, n, BLOCK):
        offs = i + tl.arange(0, BLOCK)
        blocks = tl.load(src_row + offs, mask=offs < n)
        tl.store(dst_row + offs, blocks, mask=offs < n)


@triton.jit(do_not_specialize=["num_reqs"])
def _gather_block_tables_kernel(
    batch_to_req_ptr, src_ptr, dst_ptr, num_blocks_ptr, stride_src_group, stride_src_req, stride_dst_group,
    stride_dst_row, stride_nb_group, num_reqs, max_blocks, BLOCK: tl.constexpr,
):
    group = tl.program_id(0)
    row = tl.program_id(1)
    dst_row = dst_ptr + group * stride_dst_group + row * stride_dst_row
    if row >= num_reqs:
        for i in tl.range(0, max_blocks, BLOCK):
            offs = i + tl.arange(0, BLOCK)
            tl.store(dst_row + offs, 0, mask=offs < max_blocks)
        return
    req = tl.load(batch_to_req_ptr + row)
    n = tl.load(num_blocks_ptr + group * stride_nb_group + req)
    src_row = src_ptr + group * stride_src_group + req * stride_src_req
    for i in tl.range(0, n, BLOCK):
        offs = i + tl.arange(0, BLOCK)
        blocks = tl.load(src_row + offs, mask=offs < n)
        tl.store(dst_row + offs, blocks, mask=offs < n)


@triton.jit
def _slot_mapping_kernel(
    req_state_ptr, query_start_ptr, pos_ptr, block_table_ptr, block_size_ptr, slots_ptr, stride_bt_group,
    stride_bt_req, stride_slots_group, max_num_tokens, PAD: tl.constexpr, BLOCK: tl.constexpr,
):
    group = tl.program_id(0)
    batch = tl.program_id(1)
    slots = slots_ptr + group * stride_slots_group
    if batch == tl.num_programs(1) - 1:
        # the last program pads the rest: stale slots of an earlier, longer step must not survive into a graph replay
        for i in range(tl.load(query_start_ptr + batch), max_num_tokens, BLOCK):
            offs = i + tl.arange(0, BLOCK)
            tl.store(slots + offs, PAD, mask=offs < max_num_tokens)
        return
    table = block_table_ptr + group * stride_bt_group + tl.load(req_state_ptr + batch) * stride_bt_req
    block_size = tl.load(block_size_ptr + group)
    start = tl.load(query_start_ptr + batch)
    end = tl.load(query_start_ptr + batch + 1)
    for i in range(start, end, BLOCK):
        offs = i + tl.arange(0, BLOCK)
        mask = offs < end
        pos = tl.load(pos_ptr + offs, mask=mask, other=0)
        block = tl.load(table + pos // block_size, mask=mask, other=0).to(tl.int64)
        tl.store(slots + offs, block * block_size + pos % block_size, mask=mask)


GROUPS, MAX_REQS, MAX_BLOCKS, MAX_TOKENS = 2, 1024, 8192, 16384


def gather_block_tables(kernel, num_reqs):
    """Two KV-cache groups (full + sliding window), tables [groups, 1024 requests, 8192 blocks] int32; the batch's
    table is padded to the CUDA-graph size (next power of two)."""
    m = dict(device="meta", dtype=torch.int32)
    src = torch.empty(GROUPS, MAX_REQS, MAX_BLOCKS, **m)
    dst = torch.empty(GROUPS, MAX_REQS, MAX_BLOCKS, **m)
    num_blocks = torch.empty(GROUPS, MAX_REQS, **m)
    batch_to_req = torch.empty(num_reqs, **m)
    padded = triton.next_power_of_2(num_reqs)
    kernel[(GROUPS, padded)](batch_to_req, src, dst, num_blocks, src.stride(0), src.stride(1), dst.stride(0),
                             dst.stride(1), num_blocks.stride(0), num_reqs, MAX_BLOCKS, BLOCK=1024)


REQS = [1, 7, 16, 33, 256]
# requests index rows of the 1024-request table; a request holds at most 8192 blocks
GATHER_BOUNDS = {"batch_to_req_ptr": (0, MAX_REQS - 1), "num_blocks_ptr": (0, MAX_BLOCKS)}


@tritonkit.case(num_reqs=REQS, loaded_bounds=GATHER_BOUNDS)
def gather_block_tables_specialized(num_reqs):
    gather_block_tables(_gather_block_tables_specialized_kernel, num_reqs)


@tritonkit.case(num_reqs=REQS, loaded_bounds=GATHER_BOUNDS)
def gather_block_tables_any_count(num_reqs):
    gather_block_tables(_gather_block_tables_kernel, num_reqs)


# positions < max_model_len 131,072; query_start_loc <= 16,384 tokens; block size 16; block ids < 500,000
@tritonkit.case(num_reqs=REQS, loaded_bounds={
    "req_state_ptr": (0, MAX_REQS - 1), "query_start_ptr": (0, MAX_TOKENS), "pos_ptr": (0, 131_071),
    "block_size_ptr": (16, 16), "block_table_ptr": (0, 499_999)})
def slot_mapping(num_reqs):
    m = dict(device="meta", dtype=torch.int32)
    table = torch.empty(GROUPS, MAX_REQS, MAX_BLOCKS, **m)
    slots = torch.empty(GROUPS, MAX_TOKENS, device="meta", dtype=torch.int64)
    _slot_mapping_kernel[(GROUPS, num_reqs + 1)](
        torch.empty(num_reqs, **m), torch.empty(num_reqs + 1, **m),
        torch.empty(MAX_TOKENS, device="meta", dtype=torch.int64), table, torch.empty(GROUPS, **m), slots,
        table.stride(0), table.stride(1), slots.stride(0), MAX_TOKENS, PAD=-1, BLOCK=1024)
