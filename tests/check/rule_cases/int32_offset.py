"""int32-offset: flat and 2D indexing against the grid, in-bounds loaded indices, source terms, loop
carried integers, loaded_bounds per case.

The kernels tests/check/test_rules.py checks; each test names its kernels.
"""

import torch
import triton
import triton.language as tl

import tritonkit

M = dict(device="meta")


@triton.jit
def _flat_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


@tritonkit.case(n=[1024, 2**31 - 4096])
def flat_fits(n):
    _flat_kernel[(triton.cdiv(n, 1024),)](torch.empty(n, dtype=torch.int8, **M), n, BLOCK=1024)


@triton.jit
def _flat_big_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


@tritonkit.case(n=[1024, 2**31 + 1])
def flat_overflows(n):
    _flat_big_kernel[(triton.cdiv(n, 1024),)](torch.empty(n, dtype=torch.int8, **M), n, BLOCK=1024)


@triton.jit
def _slot_sized_kernel(cache_ptr, slot_ptr, stride, BLOCK: tl.constexpr):
    slot = tl.load(slot_ptr + tl.program_id(0))
    tl.store(cache_ptr + slot * stride + tl.arange(0, BLOCK), tl.zeros([BLOCK], tl.float32))


@triton.jit
def _wrap_then_divide_kernel(x_ptr, slot_ptr, stride, BLOCK: tl.constexpr):
    # the wrapped product is divided: no longer exact modulo 2^32, whatever the final offset
    slot = tl.load(slot_ptr + tl.program_id(0))
    tl.store(x_ptr + (slot * stride) // 4096 + tl.arange(0, BLOCK), tl.zeros([BLOCK], tl.float32))


@triton.jit
def _fill_tail_kernel(x_ptr, start, end, BLOCK: tl.constexpr):
    # the last block's tail lanes pass the end of x; past 2^31 they wrap negative and pass the mask
    offs = start + tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.zeros([BLOCK], tl.float16), mask=offs < end)


@tritonkit.case(n=[2**31 - 10])
def fill_tail(n):
    _fill_tail_kernel[(triton.cdiv(n - 100, 1024),)](torch.empty(n, dtype=torch.float16, **M), 100, n, BLOCK=1024)


@tritonkit.case(cache_elements=[2**20, 2**33])
def sized(cache_elements):
    slots = torch.empty(4, dtype=torch.int32, **M)
    _slot_sized_kernel[(4,)](torch.empty(cache_elements, **M), slots, 512, BLOCK=16)
    _wrap_then_divide_kernel[(4,)](torch.empty(2**20, **M), slots, 512, BLOCK=16)


def _make_nested_kernel():
    # defined inside a function: Triton reads its columns in the dedented source
    @triton.jit
    def _nested_kernel(x_ptr, q_ptr, stride, H, BLOCK: tl.constexpr):
        row = tl.program_id(1)
        i_h = tl.program_id(2)
        bos = row * 4
        x_ptr += (bos * H + i_h) * stride
        q_ptr += BLOCK * tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(q_ptr + offs))
    return _nested_kernel


_nested_kernel = _make_nested_kernel()


@triton.jit
def _folded_kernel(cache_ptr, n_blocks, D: tl.constexpr, BS: tl.constexpr):
    blk = tl.program_id(0) % n_blocks
    tl.store(cache_ptr + blk * BS * D + tl.arange(0, D), tl.zeros([D], tl.float16))


@tritonkit.case(rows=[60_000])
def nested(rows):
    _nested_kernel[(3_000_000, rows, 8)](torch.empty(2**31 + 2**30, dtype=torch.int8, **M),
                                        torch.empty(2**33, dtype=torch.int8, **M), 2048, 8, BLOCK=1024)
    # Triton folds BS * D: the IR multiplies blk by 2048, which is neither BS nor D
    _folded_kernel[(2**20 + 8,)](torch.empty((2**20 + 8) * 2048, dtype=torch.float16, **M), 2**20 + 8, D=128, BS=16)


@triton.jit
def _mixed_kernel(x_ptr, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + row * stride + offs, tl.zeros([BLOCK], tl.float32))


@tritonkit.case(rows_stride=[(100_000, 16), (16, 100_000)])
def mixed(rows_stride):
    # the union of the two launches would overflow (100_000 * 100_000); neither launch does
    rows, stride = rows_stride
    _mixed_kernel[(rows,)](torch.empty(rows * stride + 64, **M), stride, BLOCK=16)


@triton.jit
def _loop_carried_kernel(x_ptr, stride, iters, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    off = tl.program_id(0) * 0
    for i in range(0, iters):
        tl.store(x_ptr + off + offs, tl.zeros([BLOCK], tl.float32))
        off += stride


@tritonkit.case(iters=[1000, 3000])
def loop_carried(iters):
    _loop_carried_kernel[(1,)](torch.empty(64, **M), 1_000_000, iters, BLOCK=16)


@triton.jit
def _while_fresh_row_kernel(x_ptr, ctr_ptr, n, BLOCK: tl.constexpr):
    # a row taken afresh each iteration (a tile from a counter) beside a count that grows without bound
    offs = tl.arange(0, BLOCK)
    row = tl.maximum(tl.atomic_add(ctr_ptr, 1), 0) % 64
    k = 0
    while row < n:
        tl.store(x_ptr + row * BLOCK + offs, tl.zeros([BLOCK], tl.float32) + k)
        k += 1
        row = tl.maximum(tl.atomic_add(ctr_ptr, 1), 0) % 64


@triton.jit
def _while_growing_offset_kernel(x_ptr, ctr_ptr, n, BLOCK: tl.constexpr):
    # the same loop, the growing count in the offset
    offs = tl.arange(0, BLOCK)
    row = tl.maximum(tl.atomic_add(ctr_ptr, 1), 0) % 64
    k = 0
    while row < n:
        tl.store(x_ptr + k * BLOCK + offs, tl.zeros([BLOCK], tl.float32))
        k += 1
        row = tl.maximum(tl.atomic_add(ctr_ptr, 1), 0) % 64


@tritonkit.case(n=[64])
def while_fresh(n):
    ctr = torch.zeros(1, dtype=torch.int32, **M)
    _while_fresh_row_kernel[(1,)](torch.empty(64 * 16, **M), ctr, n, BLOCK=16)
    _while_growing_offset_kernel[(1,)](torch.empty(64 * 16, **M), ctr, n, BLOCK=16)


@triton.jit
def _slot_kernel(cache_ptr, slot_ptr, stride, BLOCK: tl.constexpr):
    slot = tl.load(slot_ptr + tl.program_id(0))
    offs = tl.arange(0, BLOCK)
    tl.store(cache_ptr + slot * stride + offs, tl.zeros([BLOCK], tl.float32))


@triton.jit
def _slot_declared_kernel(cache_ptr, slot_ptr, stride, BLOCK: tl.constexpr):
    slot = tl.load(slot_ptr + tl.program_id(0))
    offs = tl.arange(0, BLOCK)
    tl.store(cache_ptr + slot * stride + offs, tl.zeros([BLOCK], tl.float32))


def _slot_args(n):
    # a cache of 2^33 elements: a slot index times its 512-element stride can need more than 31 bits
    return torch.empty(2**33, **M), torch.empty(n, dtype=torch.int32, **M), 512


@tritonkit.case(n=[4])
def slot_undeclared(n):
    _slot_kernel[(n,)](*_slot_args(n), BLOCK=16)


@tritonkit.case(n=[4], loaded_bounds={"_slot_declared_kernel.slot_ptr": (0, 4095)})
def slot_declared(n):
    _slot_declared_kernel[(n,)](*_slot_args(n), BLOCK=16)


@triton.jit
def _slot_mixed_kernel(cache_ptr, slot_ptr, stride, BLOCK: tl.constexpr):
    slot = tl.load(slot_ptr + tl.program_id(0))
    offs = tl.arange(0, BLOCK)
    tl.store(cache_ptr + slot * stride + offs, tl.zeros([BLOCK], tl.float32))


@triton.jit
def _slot_mixed_late_kernel(cache_ptr, slot_ptr, stride, BLOCK: tl.constexpr):
    slot = tl.load(slot_ptr + tl.program_id(0))
    offs = tl.arange(0, BLOCK)
    tl.store(cache_ptr + slot * stride + offs, tl.zeros([BLOCK], tl.float32))


# one case bounds the loaded slots, another of the same kernel does not: the bound covers only its own launches
@tritonkit.case(n=[4, 8], loaded_bounds={"slot_ptr": (0, 4095)})
def slot_bounded_first(n):
    _slot_mixed_kernel[(n,)](*_slot_args(n), BLOCK=16)


@tritonkit.case(n=[5])
def slot_unbounded_second(n):
    _slot_mixed_kernel[(n,)](*_slot_args(n), BLOCK=16)


@tritonkit.case(n=[5])
def slot_unbounded_first(n):
    _slot_mixed_late_kernel[(n,)](*_slot_args(n), BLOCK=16)


@tritonkit.case(n=[4, 8], loaded_bounds={"slot_ptr": (0, 4095)})
def slot_bounded_second(n):
    _slot_mixed_late_kernel[(n,)](*_slot_args(n), BLOCK=16)


@triton.jit
def _packed_keys_kernel(out_ptr, ids_ptr, table_ptr, n_cols, BLOCK: tl.constexpr):
    # bit packing: (id << 16 | lane) in uint32 drops the id's high bits by design (-1 becomes 0xFFFF), and the id
    # comes back through >> 16 before it offsets the table (Liger-Kernel sorts the packed keys between the two; no
    # tl.sort here: from Triton 3.8 it lowers to a reduction the range analysis does not model)
    lanes = tl.arange(0, BLOCK)
    ids = tl.load(ids_ptr + lanes, mask=lanes < n_cols, other=-1).to(tl.uint32)
    packed = ((ids << 16) | lanes).to(tl.uint32)
    key = packed >> 16
    tl.store(out_ptr + lanes, tl.load(table_ptr + key, mask=key != 0xFFFF, other=0.0))


@triton.jit
def _packed_key_as_offset_kernel(out_ptr, ids_ptr, table_ptr, BLOCK: tl.constexpr):
    # the shifted id itself offsets the table: a wrap there lands elsewhere
    lanes = tl.arange(0, BLOCK)
    ids = tl.load(ids_ptr + lanes).to(tl.uint32)
    tl.store(out_ptr + lanes, tl.load(table_ptr + (ids << 16)))


@triton.jit
def _wrap_then_shift_kernel(out_ptr, ids_ptr, table_ptr, stride, BLOCK: tl.constexpr):
    # a product that wraps, then halved: the right shift does not make the wrapped product right
    lanes = tl.arange(0, BLOCK)
    ids = tl.load(ids_ptr + lanes).to(tl.uint32)
    tl.store(out_ptr + lanes, tl.load(table_ptr + ((ids * stride) >> 1)))


@tritonkit.case()
def packed_keys():
    table = torch.empty(2**20, dtype=torch.float32, **M)
    ids, out = torch.empty(128, dtype=torch.int32, **M), torch.empty(128, dtype=torch.float32, **M)
    _packed_keys_kernel[(1,)](out, ids, table, 100, BLOCK=128)
    _packed_key_as_offset_kernel[(1,)](out, ids, torch.empty(2**33, dtype=torch.int8, **M), BLOCK=128)
    _wrap_then_shift_kernel[(1,)](out, ids, torch.empty(2**33, dtype=torch.int8, **M), 2**20, BLOCK=128)


@triton.jit
def _widened_late_kernel(x_ptr, stride, BLOCK: tl.constexpr):
    # the row offset is computed in int32, then widened: the cast comes after the wrap
    row = (tl.program_id(0) * stride).to(tl.int64)
    tl.store(x_ptr + row + tl.arange(0, BLOCK), tl.zeros([BLOCK], tl.float16))


@triton.jit
def _widened_early_kernel(x_ptr, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64) * stride
    tl.store(x_ptr + row + tl.arange(0, BLOCK), tl.zeros([BLOCK], tl.float16))


@tritonkit.case(rows=[16, 2**20])
def widened_rows(rows):
    x = torch.empty(rows * 4096, dtype=torch.float16, **M)
    _widened_late_kernel[(rows,)](x, 4096, BLOCK=64)
    _widened_early_kernel[(rows,)](x, 4096, BLOCK=64)


@triton.jit
def _split_range_kernel(out_ptr, indptr_ptr, splits_ptr, BLOCK: tl.constexpr):
    # a split of a sequence's range, both from loaded integers: per x split id overflows unless they are bounded
    b = tl.program_id(0)
    start = tl.load(indptr_ptr + b)
    per = tl.cdiv(tl.load(indptr_ptr + b + 1) - start, tl.load(splits_ptr + b))
    tl.store(out_ptr + start + per * tl.program_id(1) + tl.arange(0, BLOCK), tl.zeros([BLOCK], tl.float32))


@tritonkit.case(n=[4])
def split_range(n):
    out = torch.empty(3_000_000_000, device="meta")  # a buffer past 2^31 elements: an offset may need that range
    ints = dict(dtype=torch.int32, device="meta")
    _split_range_kernel[(n, 8)](out, torch.empty(n + 1, **ints), torch.empty(n, **ints), BLOCK=16)


@triton.jit
def _row_masked_tile_kernel(x_ptr, out_ptr, M, N, stride, BM: tl.constexpr, BN: tl.constexpr):
    # the matmul tutorial's tail rows: rows past M compute offsets past 2^31, but the row mask keeps them from
    # memory, and a row the mask keeps has rows * stride + cols < M * stride
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.arange(0, BN)
    m = (rows[:, None] < M) & (cols[None, :] < N)
    p = rows[:, None] * stride + cols[None, :]
    tl.store(out_ptr + p, tl.load(x_ptr + p, mask=m), mask=m)


@triton.jit
def _row_masked_tall_kernel(x_ptr, out_ptr, M, N, stride, BM: tl.constexpr, BN: tl.constexpr):
    # the same kernel on a tensor of more than 2^31 elements: a row the mask keeps overflows
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.arange(0, BN)
    m = (rows[:, None] < M) & (cols[None, :] < N)
    p = rows[:, None] * stride + cols[None, :]
    tl.store(out_ptr + p, tl.load(x_ptr + p, mask=m), mask=m)


@triton.jit
def _offset_masked_tile_kernel(x_ptr, out_ptr, M, N, stride, BM: tl.constexpr, BN: tl.constexpr):
    # a mask on the offset itself: a tail row's wrapped, negative offset passes it
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.arange(0, BN)
    p = rows[:, None] * stride + cols[None, :]
    m = (p < M * stride) & (cols[None, :] < N)
    tl.store(out_ptr + p, tl.load(x_ptr + p, mask=m), mask=m)


@triton.jit
def _row_masked_load_only_kernel(x_ptr, out_ptr, M, N, stride, BM: tl.constexpr, BN: tl.constexpr):
    # the load is masked, the store through the same offsets is not: a tail row stores at its wrapped offset
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.arange(0, BN)
    m = (rows[:, None] < M) & (cols[None, :] < N)
    p = rows[:, None] * stride + cols[None, :]
    tl.store(out_ptr + p, tl.load(x_ptr + p, mask=m))


@tritonkit.case(rows=[715_827])
def row_masked_tiles(rows):
    # 715,827 rows of 3,000: 2,147,481,000 elements, under 2^31; the last program's 64 rows reach 2,147,517,000
    x = torch.empty(rows, 3000, dtype=torch.float16, **M)
    for k in (_row_masked_tile_kernel, _offset_masked_tile_kernel, _row_masked_load_only_kernel):
        k[(triton.cdiv(rows, 64),)](x, torch.empty_like(x), rows, 3000, x.stride(0), BM=64, BN=4096)
    tall = torch.empty(rows + 200, 3000, dtype=torch.float16, **M)  # 2,148,081,000 elements
    _row_masked_tall_kernel[(triton.cdiv(rows + 200, 64),)](tall, torch.empty_like(tall), rows + 200, 3000,
                                                            tall.stride(0), BM=64, BN=4096)
