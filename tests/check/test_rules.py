"""Rule semantics on small kernels: what each rule must flag and what it must leave alone."""

import textwrap

import pytest

from tritonkit.check import Options, run_check

KERNELS = '''
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
def _state_shift_kernel(state_ptr, seqlen, state_len, stride, BLOCK: tl.constexpr):
    # in the branch, state_len - seqlen is in [1, state_len - 1]: far from int32's limit whatever seqlen is
    offs = tl.arange(0, BLOCK)
    if seqlen < state_len:
        shift = state_len - seqlen
        tl.store(state_ptr + shift * stride + offs, tl.zeros([BLOCK], tl.float32))


@triton.jit
def _state_shift_else_kernel(state_ptr, seqlen, state_len, stride, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    if seqlen >= state_len:
        tl.store(state_ptr + offs, tl.zeros([BLOCK], tl.float32))
    else:
        shift = state_len - seqlen
        tl.store(state_ptr + shift * stride + offs, tl.zeros([BLOCK], tl.float32))


@triton.jit
def _state_shift_wide_kernel(state_ptr, seqlen, state_len, stride, BLOCK: tl.constexpr):
    # the branch bounds the shift by state_len, which is large here: the overflow is real
    offs = tl.arange(0, BLOCK)
    if seqlen < state_len:
        shift = state_len - seqlen
        tl.store(state_ptr + shift * stride + offs, tl.zeros([BLOCK], tl.float32))


@triton.jit
def _chunk_return_kernel(state_ptr, len_ptr, stride, BLOCK_M: tl.constexpr, BLOCK: tl.constexpr):
    # past the early return min(BLOCK_M, seqlen - chunk * BLOCK_M) > 0, so seqlen > chunk * BLOCK_M >= 0
    chunk = tl.program_id(1)
    seqlen = tl.load(len_ptr + tl.program_id(0))
    seg = min(BLOCK_M, seqlen - chunk * BLOCK_M)
    if seg <= 0:
        return
    offs = tl.arange(0, BLOCK)
    if seqlen < 4:
        tl.store(state_ptr + (offs + seqlen) * stride, tl.zeros([BLOCK], tl.float32))


@triton.jit
def _chunk_noreturn_kernel(state_ptr, len_ptr, stride, BLOCK_M: tl.constexpr, BLOCK: tl.constexpr):
    # the same without the early return: a loaded seqlen may be negative, and (offs + seqlen) * stride wraps
    seqlen = tl.load(len_ptr + tl.program_id(0))
    offs = tl.arange(0, BLOCK)
    if seqlen < 4:
        tl.store(state_ptr + (offs + seqlen) * stride, tl.zeros([BLOCK], tl.float32))


@triton.jit
def _elif_else_kernel(state_ptr, len_ptr, stride, STATE_LEN: tl.constexpr, BLOCK: tl.constexpr):
    # the else arm of an elif chain holds where every earlier condition failed: 2 <= seqlen < STATE_LEN
    seqlen = tl.load(len_ptr + tl.program_id(0))
    offs = tl.arange(0, BLOCK)
    if seqlen <= 0:
        return
    if seqlen >= STATE_LEN:
        tl.store(state_ptr + offs, tl.zeros([BLOCK], tl.float32))
    elif seqlen == 1:
        tl.store(state_ptr + BLOCK + offs, tl.zeros([BLOCK], tl.float32))
    else:
        VAL = STATE_LEN - seqlen
        tl.store(state_ptr + (offs + VAL) * stride, tl.zeros([BLOCK], tl.float32))


@tritonkit.case(chunks=[1, 64])
def negated_conditions(chunks):
    state, lens = torch.empty(2**33, **M), torch.empty(8, dtype=torch.int32, **M)
    _chunk_return_kernel[(8, chunks)](state, lens, 2**26, BLOCK_M=64, BLOCK=16)
    _chunk_noreturn_kernel[(8, chunks)](state, lens, 2**26, BLOCK_M=64, BLOCK=16)
    _elif_else_kernel[(8,)](state, lens, 2**26, STATE_LEN=4, BLOCK=16)


@tritonkit.case(seqlen=[1, 3, 4096, 65536])
def state_shift(seqlen):
    state = torch.empty(4 * 70_000, **M)
    _state_shift_kernel[(1,)](state, seqlen, 4, 70_000, BLOCK=16)
    _state_shift_else_kernel[(1,)](state, seqlen, 4, 70_000, BLOCK=16)
    _state_shift_wide_kernel[(1,)](torch.empty(100_000 * 70_000, **M), seqlen, 100_000, 70_000, BLOCK=16)


@triton.jit
def _halves_kernel(x_ptr, HALF: tl.constexpr):
    offs = tl.arange(0, HALF)
    tl.store(x_ptr + offs, tl.zeros([HALF], tl.float32))
    y = tl.load(x_ptr + HALF + offs)
    tl.store(x_ptr + HALF + offs, y * 2)


@triton.jit
def _loop_reload_kernel(x_ptr, iters, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    for i in range(0, iters):
        y = tl.load(x_ptr + offs)
        tl.store(x_ptr + offs, y + 1)


@triton.jit
def _loop_reload_barrier_kernel(x_ptr, iters, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    for i in range(0, iters):
        y = tl.load(x_ptr + offs)
        tl.store(x_ptr + offs, y + 1)
        tl.debug_barrier()


@triton.jit
def _parity_kernel(x_ptr, out_ptr, n, D: tl.constexpr):
    # even iterations write a scratch row, odd ones read it reversed: the branches of one iteration exclude each
    # other, those of two iterations do not
    offs = tl.arange(0, D)
    acc = tl.zeros([D], dtype=tl.float32)
    for i in range(0, n):
        if i % 2 == 0:
            tl.store(x_ptr + offs, acc)
        else:
            acc += tl.load(x_ptr + (D - 1 - offs))
    tl.store(out_ptr + offs, acc)


@triton.jit
def _per_iteration_rows_kernel(x_ptr, stride, iters, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    for i in range(0, iters):
        y = tl.load(x_ptr + i * stride + offs)
        tl.store(x_ptr + i * stride + offs, y + 1)


@triton.jit
def _while_carried_kernel(x_ptr, n, step, BLOCK: tl.constexpr):
    # the pointer is carried by an scf.while; with step 0 every iteration reads what the last one stored
    offs = tl.arange(0, BLOCK)
    p = x_ptr
    i = 0
    while i < n:
        y = tl.load(p + offs)
        tl.store(p + offs, y + 1)
        p += step
        i += 1


@triton.jit
def _branches_kernel(x_ptr, flag, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    if flag > 0:
        tl.store(x_ptr + offs, tl.zeros([BLOCK], tl.float32))
    else:
        tl.store(x_ptr + BLOCK + offs, tl.load(x_ptr + offs))


@triton.jit
def _early_return_kernel(x_ptr, label_ptr, ignore, n, BLOCK: tl.constexpr):
    # a row whose label is ignored is zeroed and the program returns: the loads below never follow that store
    row = tl.program_id(0).to(tl.int64)
    x_ptr += row * n
    if tl.load(label_ptr + row) == ignore:
        for i in range(0, n, BLOCK):
            offs = i + tl.arange(0, BLOCK)
            tl.store(x_ptr + offs, 0.0, mask=offs < n)
        return
    for i in range(0, n, BLOCK):
        offs = i + tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


@triton.jit
def _no_return_kernel(x_ptr, label_ptr, ignore, n, BLOCK: tl.constexpr):
    # the same without the return: the loads below do follow the store
    row = tl.program_id(0).to(tl.int64)
    x_ptr += row * n
    if tl.load(label_ptr + row) == ignore:
        for i in range(0, n, BLOCK):
            offs = i + tl.arange(0, BLOCK)
            tl.store(x_ptr + offs, 0.0, mask=offs < n)
    for i in range(0, n, BLOCK):
        offs = i + tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


@triton.jit
def _copy_kernel(src_ptr, dst_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs) * 2)
    # in place, elements BLOCK/2..BLOCK-1 of this load are the store's above
    tl.store(dst_ptr + BLOCK + offs, tl.load(src_ptr + BLOCK // 2 + offs) * 2)


@triton.jit
def _disjoint_halves_kernel(src_ptr, dst_ptr, BLOCK: tl.constexpr):
    # in place, the second load reads the half the first store did not write
    offs = tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs) * 2)
    tl.store(dst_ptr + BLOCK + offs, tl.load(src_ptr + BLOCK + offs) * 2)


@triton.jit
def _rows_kernel(a_ptr, b_ptr, stride_a, stride_b, D: tl.constexpr):
    # normalize a row of `a` in place, then read the same row of `b`
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, D)
    x = tl.load(a_ptr + row * stride_a + cols)
    tl.store(a_ptr + row * stride_a + cols, x * 2)
    y = tl.load(b_ptr + row * stride_b + cols)
    tl.store(b_ptr + row * stride_b + cols, y * 2)


@tritonkit.case(layout=["qkv_slices", "shifted_by_one_column", "separate"])
def views(layout):
    qkv = torch.empty(16, 6 * 128, **M)
    if layout == "qkv_slices":
        a, b = qkv[:, :4 * 128], qkv[:, 4 * 128:5 * 128]
    elif layout == "shifted_by_one_column":
        a, b = qkv[:, :128], qkv[:, 1:129]
    else:
        a, b = torch.empty(16, 128, **M), torch.empty(16, 128, **M)
    _rows_kernel[(16,)](a, b, a.stride(0), b.stride(0), D=128)


@tritonkit.case(inplace=[0, 1])
def memory(inplace):
    x = torch.empty(64, **M)
    _halves_kernel[(1,)](x, HALF=32)
    _loop_reload_kernel[(1,)](x, 8, BLOCK=32)
    _loop_reload_barrier_kernel[(1,)](x, 8, BLOCK=32)
    _per_iteration_rows_kernel[(1,)](x, 32, 2, BLOCK=32)
    _parity_kernel[(1,)](torch.empty(128, **M), torch.empty(128, **M), 8, D=128)
    _while_carried_kernel[(1,)](x, 2, 0, BLOCK=32)
    _branches_kernel[(1,)](x, inplace, BLOCK=32)
    _copy_kernel[(1,)](x, x if inplace else torch.empty(64, **M), BLOCK=32)
    _disjoint_halves_kernel[(1,)](x, x if inplace else torch.empty(64, **M), BLOCK=32)
    labels = torch.empty(4, dtype=torch.int64, **M)
    _early_return_kernel[(4,)](torch.empty(4, 100, **M), labels, -100, 100, BLOCK=32)
    _no_return_kernel[(4,)](torch.empty(4, 100, **M), labels, -100, 100, BLOCK=32)


@triton.jit
def _state_roll_kernel(state_ptr, x_ptr, seqlen, stride_t, ROWS: tl.constexpr, D: tl.constexpr):
    # roll a [ROWS, D] state left by seqlen rows in place: row t is stored by the lane that loaded row t + seqlen
    rows = tl.arange(0, ROWS)
    cols = tl.arange(0, D)
    old = tl.load(state_ptr + (rows + seqlen)[:, None] * stride_t + cols[None, :],
                  mask=(rows + seqlen < ROWS)[:, None], other=0.0)
    new = tl.load(x_ptr + rows[:, None] * D + cols[None, :])
    tl.store(state_ptr + rows[:, None] * stride_t + cols[None, :], tl.where((rows + seqlen < ROWS)[:, None], old, new))


@triton.jit
def _state_roll_fixed_kernel(state_ptr, x_ptr, seqlen, stride_t, ROWS: tl.constexpr, D: tl.constexpr):
    rows = tl.arange(0, ROWS)
    cols = tl.arange(0, D)
    old = tl.load(state_ptr + (rows + seqlen)[:, None] * stride_t + cols[None, :],
                  mask=(rows + seqlen < ROWS)[:, None], other=0.0)
    new = tl.load(x_ptr + rows[:, None] * D + cols[None, :])
    tl.debug_barrier()
    tl.store(state_ptr + rows[:, None] * stride_t + cols[None, :], tl.where((rows + seqlen < ROWS)[:, None], old, new))


@triton.jit
def _transpose_inplace_kernel(x_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tile = tl.load(x_ptr + offs[:, None] * N + offs[None, :])
    tl.store(x_ptr + offs[None, :] * N + offs[:, None], tile)


@triton.jit
def _scale_inplace_kernel(x_ptr, n, BLOCK: tl.constexpr):
    # load-compute-store, one element per lane: never reported
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


@triton.jit
def _two_pass_kernel(x_ptr, n, BLOCK: tl.constexpr):
    # pass 1 reads the row (a scalar max per block: a CTA barrier with more than one warp), pass 2 rewrites it
    first = tl.load(x_ptr)
    m = float("-inf")
    for i in range(0, n, BLOCK):
        offs = i + tl.arange(0, BLOCK)
        m = tl.maximum(m, tl.max(tl.load(x_ptr + offs, mask=offs < n, other=float("-inf"))))
    for i in range(0, n, BLOCK):
        offs = i + tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) - m - first, mask=offs < n)


@triton.jit
def _flag_branches_kernel(x_ptr, flag_ptr, BLOCK: tl.constexpr):
    # two `if`s on one flag: the load runs only where the store does not
    offs = tl.arange(0, BLOCK)
    use = tl.load(flag_ptr) != 0
    y = tl.zeros([BLOCK], tl.float32)
    if use:
        y = tl.load(x_ptr + BLOCK - 1 - offs)
    if use:
        y = y * 2
    else:
        tl.store(x_ptr + offs, y)


@triton.jit
def _ring_row_kernel(state_ptr, seen_ptr, stride_row, CAP: tl.constexpr, BLOCK: tl.constexpr):
    # read row (seen - 1) % CAP, write row seen % CAP of the same [BLOCK] columns: a lane meets only itself
    offs = tl.arange(0, BLOCK)
    seen = tl.load(seen_ptr)
    old = tl.load(state_ptr + ((seen + CAP - 1) % CAP) * stride_row + offs)
    tl.store(state_ptr + (seen % CAP) * stride_row + offs, old * 2)


@triton.jit
def _shift_left_kernel(x_ptr, BLOCK: tl.constexpr):
    # x[i] = x[i + 1] in place: lane i reads what lane i + 1 overwrites
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + 1 + offs))


@triton.jit
def _broadcast_rows_kernel(x_ptr, ROWS: tl.constexpr, D: tl.constexpr):
    # every row of the tile reads and writes the same D elements: lanes of one column are different threads
    rows = tl.arange(0, ROWS)
    cols = tl.arange(0, D)
    ptrs = x_ptr + tl.zeros([ROWS, D], tl.int32) + cols[None, :]
    v = tl.load(ptrs)
    tl.store(ptrs, v + rows[:, None])


@triton.jit
def _histogram_kernel(hist_ptr, idx_ptr, BLOCK: tl.constexpr):
    # a non-atomic histogram: lanes holding the same index read and write one counter
    idx = tl.load(idx_ptr + tl.arange(0, BLOCK))
    tl.store(hist_ptr + idx, tl.load(hist_ptr + idx) + 1)


@triton.jit
def _gather_other_mask_kernel(x_ptr, row_ptr, BLOCK: tl.constexpr):
    # rows gathered by a loaded index; lanes of the first half load, lanes of the second half store
    rows = tl.load(row_ptr + tl.arange(0, BLOCK))
    offs = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + rows * 0 + offs // 2, mask=offs < BLOCK // 2)
    tl.store(x_ptr + rows * 0 + offs // 2, v + 1, mask=offs >= BLOCK // 2)


@triton.jit
def _pairs_kernel(x_ptr, BLOCK: tl.constexpr):
    # lanes 2i and 2i + 1 address element i
    offs = tl.arange(0, BLOCK) // 2
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) + 1)


@tritonkit.case(seqlen=[1, 2])
def write_after_read(seqlen):
    state = torch.empty(8, 64, **M)
    _state_roll_kernel[(1,)](state, torch.empty(8, 64, **M), seqlen, 64, ROWS=8, D=64)
    _state_roll_fixed_kernel[(1,)](state, torch.empty(8, 64, **M), seqlen, 64, ROWS=8, D=64)
    _transpose_inplace_kernel[(1,)](torch.empty(32, 32, **M), N=32)
    _scale_inplace_kernel[(4,)](torch.empty(4096, **M), 4096, BLOCK=1024)
    row = torch.empty(5000, **M)
    _two_pass_kernel[(1,)](row, 5000, BLOCK=1024, num_warps=4)
    _flag_branches_kernel[(1,)](torch.empty(64, **M), torch.empty(1, dtype=torch.int32, **M), BLOCK=64)
    _ring_row_kernel[(1,)](torch.empty(4, 256, **M), torch.empty(1, dtype=torch.int32, **M), 256, CAP=4, BLOCK=256)
    _shift_left_kernel[(1,)](torch.empty(257, **M), BLOCK=256)
    _broadcast_rows_kernel[(1,)](torch.empty(65, **M), ROWS=4, D=64)
    _histogram_kernel[(1,)](torch.empty(256, dtype=torch.int32, **M), torch.empty(64, dtype=torch.int32, **M),
                            BLOCK=64)
    _pairs_kernel[(1,)](torch.empty(32, **M), BLOCK=64)
    _gather_other_mask_kernel[(1,)](torch.empty(32, **M), torch.empty(64, dtype=torch.int32, **M), BLOCK=64)


@triton.jit
def _two_pass_one_warp_kernel(x_ptr, n, BLOCK: tl.constexpr):
    first = tl.load(x_ptr)
    m = float("-inf")
    for i in range(0, n, BLOCK):
        offs = i + tl.arange(0, BLOCK)
        m = tl.maximum(m, tl.max(tl.load(x_ptr + offs, mask=offs < n, other=float("-inf"))))
    for i in range(0, n, BLOCK):
        offs = i + tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) - m - first, mask=offs < n)


@triton.jit
def _reverse_after_small_sum_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    # a 32-element sum is reduced within one warp: no bar.sync (sm_90 PTX), so it orders nothing
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(y_ptr + offs) * 2)
    s = tl.sum(tl.load(y_ptr + offs), axis=0)
    tl.store(y_ptr + offs, tl.load(x_ptr + BLOCK - 1 - offs) + s)


@tritonkit.case(n=[5000])
def one_warp(n):
    _reverse_after_small_sum_kernel[(1,)](torch.empty(32, **M), torch.empty(32, **M), BLOCK=32, num_warps=4)
    # one warp: its shuffles order nothing, so the reduction is no barrier
    _two_pass_one_warp_kernel[(1,)](torch.empty(n, **M), n, BLOCK=1024, num_warps=1)


@triton.jit
def _rows_backward_kernel(dy_ptr, dx_ptr, stride_dy, stride_dx, rows_per_program, D: tl.constexpr):
    # in place (dx is dy): iteration i stores row i, iteration i + 1 loads row i + 1 (both pointers move a row)
    start = tl.program_id(0).to(tl.int64) * rows_per_program
    dy_ptr += start * stride_dy
    dx_ptr += start * stride_dx
    cols = tl.arange(0, D)
    for _ in range(0, rows_per_program):
        g = tl.load(dy_ptr + cols)
        tl.store(dx_ptr + cols, g * 2)
        dy_ptr += stride_dy
        dx_ptr += stride_dx


@triton.jit
def _sliding_kernel(x_ptr, steps, BLOCK: tl.constexpr):
    # the pointer moves one element an iteration: the next load reads 31 of the elements this one stored
    offs = tl.arange(0, BLOCK)
    p = x_ptr
    for _ in range(0, steps):
        tl.store(p + offs, tl.load(p + offs) + 1)
        p += 1


@triton.jit
def _row_index_loop_kernel(x_ptr, n, D: tl.constexpr):
    # iterations 2k and 2k + 1 work on one row: the next iteration reads reversed what this one stored
    offs = tl.arange(0, D)
    for i in range(0, n):
        r = i // 2
        v = tl.load(x_ptr + r * D + (D - 1 - offs))
        tl.debug_barrier()
        tl.store(x_ptr + r * D + offs, v + 1.0)


@triton.jit
def _two_pass_tiles_kernel(x_ptr, n_rows, N, stride, BM: tl.constexpr, BN: tl.constexpr):
    # pass 1 reads every column tile, pass 2 rewrites them in place: each element keeps its lane in both loops
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    base = x_ptr + rows[:, None].to(tl.int64) * stride
    acc = tl.zeros([BM], dtype=tl.float32)
    for off in range(0, N, BN):
        cols = off + tl.arange(0, BN)
        acc += tl.sum(tl.load(base + cols[None, :], mask=(rows[:, None] < n_rows) & (cols[None, :] < N)), axis=1)
    for off in range(0, N, BN):
        cols = off + tl.arange(0, BN)
        m = (rows[:, None] < n_rows) & (cols[None, :] < N)
        tl.store(base + cols[None, :], tl.load(base + cols[None, :], mask=m) / acc[:, None], mask=m)


@triton.jit
def _block_ptr_tiles_kernel(x_ptr, M, N, sm, sn, STEP: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    # a block pointer moved STEP columns an iteration: a whole tile never meets the next; half a tile does
    p = tl.make_block_ptr(x_ptr, (M, N), (sm, sn), (tl.program_id(0) * BM, 0), (BM, BN), (1, 0))
    for _ in range(0, tl.cdiv(N, STEP)):
        tl.store(p, tl.load(p, boundary_check=(0, 1)) * 2, boundary_check=(0, 1))
        p = tl.advance(p, (0, STEP))


@tritonkit.case(rows=[64, 4096])
def carried(rows):
    dy = torch.empty(rows, 256, **M)
    _rows_backward_kernel[(4,)](dy, dy, 256, 256, rows // 4, D=256)
    _sliding_kernel[(1,)](torch.empty(4096, **M), 100, BLOCK=32)
    _row_index_loop_kernel[(1,)](torch.empty(64, 128, **M), 8, D=128)
    x = torch.empty(rows, 1024, **M)
    _two_pass_tiles_kernel[(triton.cdiv(rows, 4),)](x, rows, 1024, 1024, BM=4, BN=256)


@triton.jit
def _square_tile_shift_kernel(x_ptr, S, ncols, B: tl.constexpr):
    # one arange for rows and columns, only the columns masked: lane (i, j) reads row i + 1, writes row i
    r = tl.arange(0, B)
    mask = r[None, :] < ncols
    v = tl.load(x_ptr + (r[:, None] + 1) * S + r[None, :], mask=mask)
    tl.store(x_ptr + r[:, None] * S + r[None, :], v * 2, mask=mask)


@triton.jit
def _masked_column_halves_kernel(x_ptr, n_rows, n, S, R: tl.constexpr, B: tl.constexpr):
    # columns [0, n) are stored, [n, 2n) read back: the column mask, built 1-D and laid along axis 1, keeps
    # them apart
    rows = tl.arange(0, R)
    cols = tl.arange(0, B)
    cmask = cols < n
    mask = (rows < n_rows)[:, None] & cmask[None, :]
    tl.store(x_ptr + rows[:, None] * S + cols[None, :], tl.zeros([R, B], tl.float32), mask=mask)
    y = tl.load(x_ptr + rows[:, None] * S + (cols[None, :] + n), mask=mask)
    tl.store(x_ptr + rows[:, None] * S + 2 * n + cols[None, :], y, mask=mask)


@tritonkit.case(ncols=[1])
def mask_axes(ncols):
    x = torch.empty(64, 64, **M)
    _square_tile_shift_kernel[(1,)](x, 64, ncols, B=32)
    _masked_column_halves_kernel[(1,)](x, 64, 5, 64, R=64, B=16)


@tritonkit.case(step=[128, 64])
def block_ptr(step):
    x = torch.empty(64, 1024, **M)
    _block_ptr_tiles_kernel[(4,)](x, 64, 1024, 1024, 1, STEP=step, BM=16, BN=128)


@triton.jit
def _ring_negmod_kernel(ring_ptr, out_ptr, pos, window, CAP: tl.constexpr, BLOCK: tl.constexpr):
    # the slot `window` steps back in a ring of CAP rows: negative while pos < window
    slot = (pos - window) % CAP
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(ring_ptr + slot * BLOCK + offs))


@triton.jit
def _ring_kernel(ring_ptr, out_ptr, pos, window, CAP: tl.constexpr, BLOCK: tl.constexpr):
    slot = (pos - window + CAP) % CAP
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(ring_ptr + slot * BLOCK + offs))


@triton.jit
def _slot_unguarded_kernel(cache_ptr, slot_ptr, BS: tl.constexpr, D: tl.constexpr):
    slot = tl.load(slot_ptr + tl.program_id(0)).to(tl.int64)
    tl.store(cache_ptr + (slot // BS) * (BS * D) + (slot % BS) * D + tl.arange(0, D), tl.zeros([D], tl.float32))


@triton.jit
def _slot_guarded_kernel(cache_ptr, slot_ptr, BS: tl.constexpr, D: tl.constexpr):
    # the four ways a padding slot of -1 is kept from the division: return, reload after return, where, mask
    slot = tl.load(slot_ptr + tl.program_id(0)).to(tl.int64)
    if tl.load(slot_ptr + tl.program_id(1)) < 0:
        return
    again = tl.load(slot_ptr + tl.program_id(1)).to(tl.int64)
    tl.store(cache_ptr + (again // BS) * (BS * D) + tl.arange(0, D), tl.zeros([D], tl.float32))
    clamped = tl.where(slot >= 0, slot, 0)
    tl.store(cache_ptr + (clamped // BS) * (BS * D) + tl.arange(0, D), tl.zeros([D], tl.float32))
    mask = (tl.arange(0, D) < D) & (slot >= 0)
    tl.store(cache_ptr + (slot // BS) * (BS * D) + (slot % BS) * D + tl.arange(0, D), tl.zeros([D], tl.float32),
             mask=mask)
    if slot < 0:
        return
    tl.store(cache_ptr + (slot % BS) * D + tl.arange(0, D), tl.zeros([D], tl.float32))


@triton.jit
def _reload_kernel(cache_ptr, slot_ptr, BS: tl.constexpr, D: tl.constexpr):
    # a guard on one load of the slot covers a reload after stores to other arguments
    i = tl.program_id(0)
    if tl.load(slot_ptr + i) < 0:
        return
    tl.store(cache_ptr + tl.arange(0, D), tl.zeros([D], tl.float32))
    slot = tl.load(slot_ptr + i)
    tl.store(cache_ptr + (slot // BS) * (BS * D) + tl.arange(0, D), tl.zeros([D], tl.float32))


@triton.jit
def _reload_rewritten_kernel(cache_ptr, slot_ptr, BS: tl.constexpr, D: tl.constexpr):
    # ... not after a store to the slots themselves
    i = tl.program_id(0)
    if tl.load(slot_ptr + i) < 0:
        return
    tl.store(slot_ptr + i, -1)
    slot = tl.load(slot_ptr + i)
    tl.store(cache_ptr + (slot // BS) * (BS * D) + tl.arange(0, D), tl.zeros([D], tl.float32))


@triton.jit
def _countdown_kernel(pos_ptr, out_ptr, steps, W: tl.constexpr):
    # the guard covers the first read; the loop's own store makes later reads smaller, past zero
    pid = tl.program_id(0)
    if tl.load(pos_ptr + pid) < 0:
        return
    for i in range(steps):
        q = tl.load(pos_ptr + pid)
        tl.store(out_ptr + pid * steps + i, q % W)
        tl.store(pos_ptr + pid, q - 5)
        tl.debug_barrier()


@triton.jit
def _cdiv_kernel(x_ptr, len_ptr, SPLITS: tl.constexpr, BLOCK: tl.constexpr):
    n = tl.load(len_ptr + tl.program_id(0))
    per = tl.cdiv(n, SPLITS)
    tl.store(x_ptr + tl.arange(0, BLOCK), tl.zeros([BLOCK], tl.float32) + per)


@triton.jit
def _loop_count_kernel(x_ptr, seqlen, W: tl.constexpr, BLOCK: tl.constexpr):
    # range(0, q) runs nothing for q <= 0 however a negative dividend was rounded ...
    offs = tl.arange(0, BLOCK)
    for b in range(0, seqlen // BLOCK):
        tl.store(x_ptr + b * BLOCK + offs, tl.zeros([BLOCK], tl.float32))
    # ... but not once 1 is added (seqlen = 0: no block in Python, one here), nor for a remainder (-1 vs W - 1)
    for b in range(0, (seqlen - 1) // BLOCK + 1):
        tl.store(x_ptr + b * BLOCK + offs, tl.zeros([BLOCK], tl.float32))
    for b in range(0, seqlen % W):
        tl.store(x_ptr + b * BLOCK + offs, tl.zeros([BLOCK], tl.float32))


@triton.jit
def _tiles_kernel(x_ptr, lo, n, splits, BLOCK: tl.constexpr):
    # hi >= lo by construction (a max): the tile count per split is never negative
    hi = tl.maximum(n // BLOCK, lo)
    per_split = (hi - lo + splits - 1) // splits
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + per_split * 0 + offs // 4, tl.zeros([BLOCK], tl.float32))


@triton.jit
def _varlen_cdiv_kernel(x_ptr, cu_seqlens_ptr, BLOCK: tl.constexpr):
    # a length as the difference of two cumulative offsets: negative only if the offsets could decrease
    i = tl.program_id(0)
    seqlen = tl.load(cu_seqlens_ptr + i + 1) - tl.load(cu_seqlens_ptr + i)
    tl.store(x_ptr + i, tl.cdiv(seqlen, BLOCK))


@triton.jit
def _varlen_reversed_kernel(x_ptr, cu_seqlens_ptr, BLOCK: tl.constexpr):
    # the smaller index minus the larger: the declaration makes it <= 0, never a length
    i = tl.program_id(0)
    back = tl.load(cu_seqlens_ptr + i) - tl.load(cu_seqlens_ptr + i + 1)
    tl.store(x_ptr + i, tl.cdiv(back, BLOCK))


@tritonkit.case(n=[4])
def division_varlen_undeclared(n):
    _varlen_cdiv_kernel[(n,)](torch.empty(n, dtype=torch.int32, **M), torch.empty(n + 1, dtype=torch.int32, **M),
                              BLOCK=64)


@tritonkit.case(n=[4], nondecreasing=["cu_seqlens_ptr"])
def division_varlen_declared(n):
    _varlen_reversed_kernel[(n,)](torch.empty(n, dtype=torch.int32, **M),
                                  torch.empty(n + 1, dtype=torch.int32, **M), BLOCK=64)


@tritonkit.case(n=[4])
def division_unknown_loads(n):
    # loaded with no declared bounds: a length, a slot, a page number are taken as >= 0 (no warning)
    cache, slots = torch.empty(1000 * 16 * 64, **M), torch.empty(4, dtype=torch.int32, **M)
    _unknown_slot_kernel[(4,)](cache, slots, BS=16, D=64)
    _unknown_cdiv_kernel[(4,)](torch.empty(64, **M), slots, SPLITS=8, BLOCK=64)


@triton.jit
def _unknown_slot_kernel(cache_ptr, slot_ptr, BS: tl.constexpr, D: tl.constexpr):
    slot = tl.load(slot_ptr + tl.program_id(0)).to(tl.int64)
    tl.store(cache_ptr + (slot // BS) * (BS * D) + (slot % BS) * D + tl.arange(0, D), tl.zeros([D], tl.float32))


@triton.jit
def _unknown_cdiv_kernel(x_ptr, len_ptr, SPLITS: tl.constexpr, BLOCK: tl.constexpr):
    n = tl.load(len_ptr + tl.program_id(0))
    tl.store(x_ptr + tl.arange(0, BLOCK), tl.zeros([BLOCK], tl.float32) + tl.cdiv(n, SPLITS))


# the slot table holds -1 for padding tokens: a declared negative bound is what makes a loaded dividend negative
@tritonkit.case(pos=[0, 3, 100], loaded_bounds={"slot_ptr": (-1, 15_999), "len_ptr": (-64, 15_999),
                                                "pos_ptr": (-1, 15_999)})
def division(pos):
    ring = torch.empty(8 * 64, **M)
    _ring_negmod_kernel[(1,)](ring, torch.empty(64, **M), pos, 5, CAP=8, BLOCK=64)
    _ring_kernel[(1,)](ring, torch.empty(64, **M), pos, 5, CAP=8, BLOCK=64)
    cache, slots = torch.empty(1000 * 16 * 64, **M), torch.empty(4, dtype=torch.int32, **M)
    _slot_unguarded_kernel[(4,)](cache, slots, BS=16, D=64)
    _slot_guarded_kernel[(4, 4)](cache, slots, BS=16, D=64)
    _tiles_kernel[(4,)](torch.empty(4096, **M), pos, 4096, 3, BLOCK=64)
    _loop_count_kernel[(1,)](torch.empty(8192, **M), pos - 3, W=8, BLOCK=64)
    _reload_kernel[(4,)](cache, slots, BS=16, D=64)
    _reload_rewritten_kernel[(4,)](cache, slots, BS=16, D=64)
    _cdiv_kernel[(4,)](torch.empty(64, **M), slots, SPLITS=8, BLOCK=64)
    _countdown_kernel[(4,)](slots, torch.empty(16, dtype=torch.int32, **M), 4, W=16)


@tritonkit.case(n=[4], loaded_bounds={"slot_ptr": (0, 15_999)})
def division_declared(n):
    _slot_unguarded_kernel[(n,)](torch.empty(1000 * 16 * 64, **M), torch.empty(n, dtype=torch.int32, **M),
                                 BS=16, D=64)


@triton.jit
def _acc_f16_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float16)
    for i in range(0, n, BLOCK):
        acc += tl.load(x_ptr + i + offs)
    tl.store(y_ptr + offs, acc)


@triton.jit
def _max_f16_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr, tl.max(tl.load(x_ptr + offs), axis=0))


@tritonkit.case(n=[4096])
def precision(n):
    x = torch.empty(n, dtype=torch.float16, **M)
    _acc_f16_kernel[(1,)](x, torch.empty(64, dtype=torch.float16, **M), n, BLOCK=64)
    _max_f16_kernel[(1,)](x, torch.empty(1, dtype=torch.float16, **M), BLOCK=64)


@triton.jit
def _aligned_kernel(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) + 1)


@triton.jit
def _width_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK).to(tl.int64)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


@tritonkit.case(start=[0, 1], n=[1000, 2**31 + 1000])
def specialization(start, n):
    base = torch.empty(4096, dtype=torch.bfloat16, **M)
    _aligned_kernel[(1,)](base[start:], BLOCK=64)
    _width_kernel[(1,)](base, n, BLOCK=64)


@triton.heuristics({"BLOCK": lambda args: triton.next_power_of_2(args["n"])})
@triton.jit
def _heuristic_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


@triton.jit
def _warmup_kernel(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) * 2)


@tritonkit.case(n=[100, 1000])
def launch_styles(n):
    x = torch.empty(1024, **M)
    _heuristic_kernel[(1,)](x, n)
    _warmup_kernel.warmup(x, BLOCK=64, grid=(1, 70_000))


@triton.jit
def _sweep_default_kernel(x_ptr, n, heads, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n * heads), mask=offs < n * heads)


@triton.jit
def _sweep_named_kernel(x_ptr, n, heads, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n * heads), mask=offs < n * heads)


@tritonkit.case(num_tokens=[16, 17], heads=[16, 17])
def sweep_default(num_tokens, heads):
    # num_tokens is a per-call size, heads a model constant: only num_tokens may not split the compile
    _sweep_default_kernel[(1,)](torch.empty(1024, **M), num_tokens, heads, BLOCK=64)


@tritonkit.case(num_tokens=[16, 17], heads=[16, 17], sweep=["heads"])
def sweep_named(num_tokens, heads):
    _sweep_named_kernel[(1,)](torch.empty(1024, **M), num_tokens, heads, BLOCK=64)


@triton.jit(do_not_specialize=["n"])
def _bucketed_kernel(x_ptr, n, BLOCK_R: tl.constexpr, BACKWARD: tl.constexpr):
    offs = tl.arange(0, BLOCK_R)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(x_ptr + offs, -x if BACKWARD else x * 2, mask=offs < n)


@triton.jit(do_not_specialize=["n"])
def _warps_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


@tritonkit.case(num_reqs=[1, 2, 3, 7, 16, 17, 64])
def per_call_constexpr(num_reqs):
    x = torch.empty(64, **M)
    # a forward and a backward launch in every call: BACKWARD is a use of the kernel, not churn
    for backward in (0, 1):
        _bucketed_kernel[(1,)](x, num_reqs, BLOCK_R=triton.next_power_of_2(num_reqs), BACKWARD=backward)
    _warps_kernel[(1,)](x, num_reqs, BLOCK=64, num_warps=4 if num_reqs < 16 else 8)
    _fusion_kernel[(1,)](x, BLOCK=64, enable_fp_fusion=num_reqs > 16)


@triton.jit
def _fusion_kernel(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) * 2.0 + 1.0)


@tritonkit.case(model=["llama"])
def bucketed_in_one_call(model):
    # another case launching the kernel several times in one call: its BLOCK_R values are uses of that case,
    # they must not hide the churn of the sweep above
    x = torch.empty(64, **M)
    for n in (1, 3):
        _bucketed_kernel[(1,)](x, n, BLOCK_R=triton.next_power_of_2(n), BACKWARD=0)


@triton.jit
def _grid_kernel(x_ptr):
    tl.store(x_ptr + tl.program_id(0) * 0, 1.0)


@tritonkit.case(grid=[(1, 65_535, 65_535), (2**31, 1, 1), (1, 1, 65_536)])
def grids(grid):
    _grid_kernel[grid](torch.empty(1, **M))
'''


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    d = tmp_path_factory.mktemp("rules")
    (d / "rule_cases.py").write_text(textwrap.dedent(KERNELS))
    rep = run_check([str(d / "rule_cases.py")], Options(disk_cache=False))
    assert not [p for p in rep.problems if p.fatal], rep.problems
    return rep


def _on(report, kernel, rule=None):
    # a rule's silence only counts for a kernel that launched and whose IR the analysis read without giving up
    assert any(k["kernel"] == kernel and k["launches"] > 0 for k in report.kernels), f"{kernel} never launched"
    assert not [p for p in report.problems if kernel in p.where + " " + p.message], report.problems
    return [f for f in report.findings if f.kernel == kernel and (rule is None or f.rule == rule)]


def test_elementwise_indexing_silent_while_the_grid_keeps_it_in_int32(report):
    assert _on(report, "_flat_kernel") == []


def test_elementwise_indexing_flagged_once_the_grid_pushes_it_past_int32(report):
    (f,) = _on(report, "_flat_big_kernel", "int32-offset")
    assert f.case == {"n": 2**31 + 1}
    assert "program id" in f.message


def test_an_overflow_only_an_out_of_bounds_index_reaches_is_not_reported(report):
    # into an allocation of 2^20 elements any in-bounds offset fits int32 (and a wrapped product comes back
    # exact); into 2^33 elements a valid slot can need 64 bits
    (f,) = _on(report, "_slot_sized_kernel", "int32-offset")
    assert f.case == {"cache_elements": 2**33}
    (g,) = _on(report, "_wrap_then_divide_kernel", "int32-offset")
    assert g.message.startswith("`slot * stride`")
    # the filter is for loaded indices: a grid-derived tail past 2^31 overflows into an allocation under 2^31
    (h,) = _on(report, "_fill_tail_kernel", "int32-offset")
    assert "2,147,483,747" in h.message


def test_int32_offset_speaks_in_source_terms(report):
    (f,) = _on(report, "_flat_big_kernel", "int32-offset")
    assert f.message.startswith("`tl.program_id(0) * BLOCK` is computed in int32")
    assert "`tl.program_id(0)` in [0, 2,097,152]" in f.message and "`BLOCK` = 1,024" in f.message
    assert "`tl.program_id(0).to(tl.int64) * BLOCK`" in f.fix
    fs = {f.line: f for f in _on(report, "_nested_kernel", "int32-offset")}
    aug = fs[_line_after("_nested_kernel", "x_ptr += (bos")]
    # the int32 operand of `p * stride` is a parenthesized sum: quoted as written, never an IR name
    assert aug.message.startswith("`(bos * H + i_h) * stride` is computed in int32")
    assert "`bos * H + i_h` in [0," in aug.message and "`(bos * H + i_h).to(tl.int64) * stride`" in aug.fix
    swapped = fs[_line_after("_nested_kernel", "q_ptr += BLOCK")]
    # a constant on the left: canonicalization puts it on the right in the IR; the source order is kept
    assert swapped.message.startswith("`BLOCK * tl.program_id(0)` is computed")
    assert "`BLOCK * tl.program_id(0).to(tl.int64)`" in swapped.fix
    # constants folded into one are named as such, and the cast goes where the source names the operand
    (fo,) = _on(report, "_folded_kernel", "int32-offset")
    assert fo.message.startswith("`blk * BS * D` is computed in int32 and can reach 2,147,497,984")
    assert "`blk` in [0, 1,048,583]" in fo.message and "times 2,048, the expression's constants folded" in fo.message
    assert "`D` = 2,048" not in fo.message and "`blk.to(tl.int64) * BS * D`" in fo.fix
    assert not any("%" in f.message or "_i32" in f.message for f in report.findings if f.rule == "int32-offset")


def test_witness_is_a_real_launch_not_the_union_of_launches(report):
    assert _on(report, "_mixed_kernel") == []


def test_loop_carried_integers_are_extrapolated_over_the_trip_count(report):
    (f,) = _on(report, "_loop_carried_kernel", "int32-offset")
    assert f.case == {"iters": 3000}


def test_loaded_index_times_stride_is_flagged_unless_bounds_are_declared(report):
    (f,) = _on(report, "_slot_kernel", "int32-offset")
    assert "cast `slot` to tl.int64" in f.fix
    assert _on(report, "_slot_declared_kernel") == []


@pytest.mark.parametrize("kernel", ["_slot_mixed_kernel", "_slot_mixed_late_kernel"])
def test_a_bound_declared_by_one_case_does_not_hide_another_cases_overflow(report, kernel):
    (f,) = _on(report, kernel, "int32-offset")
    assert f.case == {"n": 5} and "loaded from memory" in f.message


def test_ranges_narrow_under_the_branch_condition(report):
    assert _on(report, "_state_shift_kernel", "int32-offset") == []
    assert _on(report, "_state_shift_else_kernel", "int32-offset") == []
    (f,) = _on(report, "_state_shift_wide_kernel", "int32-offset")
    assert f.case == {"seqlen": 1}


def test_ranges_narrow_after_an_early_return_through_min_and_in_elif_chains(report):
    assert _on(report, "_chunk_return_kernel", "int32-offset") == []
    assert _on(report, "_elif_else_kernel", "int32-offset") == []
    (f,) = _on(report, "_chunk_noreturn_kernel", "int32-offset")
    # the extreme is negative: printed with its sign, and said to wrap below -2^31
    assert "can reach -" in f.message and "below the int32 limit of -2,147,483,648, where it wraps" in f.message


def test_store_then_load_disjoint_halves_are_not_flagged(report):
    assert _on(report, "_halves_kernel") == []


def _line_after(kernel: str, text: str) -> int:
    """1-based line, in the written case file, of the first line holding ``text`` after ``def kernel``."""
    lines = textwrap.dedent(KERNELS).splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith(f"def {kernel}("))
    return next(i for i in range(start, len(lines)) if text in lines[i]) + 1


def test_store_then_load_across_loop_iterations(report):
    (f,) = _on(report, "_loop_reload_kernel", "store-then-load")
    # the loop's own line (a closing `} loc(...)` was misread: the kernel's def line was named)
    assert f"next iteration of the loop at line {_line_after('_loop_reload_kernel', 'for i in')}" in f.message
    assert _on(report, "_loop_reload_barrier_kernel") == []
    # each iteration works on its own row
    assert _on(report, "_per_iteration_rows_kernel") == []
    # a pointer carried by a while loop is followed back to its argument as one carried by a for loop is
    (f,) = _on(report, "_while_carried_kernel", "store-then-load")
    assert f"next iteration of the loop at line {_line_after('_while_carried_kernel', 'while i')}" in f.message


def test_branches_on_a_condition_the_loop_recomputes_meet_across_iterations(report):
    (f,) = _on(report, "_parity_kernel", "store-then-load")
    assert "next iteration of the loop" in f.message
    (g,) = _on(report, "_parity_kernel", "load-then-store")
    assert "previous iteration of the loop" in g.message


def test_store_then_load_in_exclusive_branches_is_not_flagged(report):
    assert _on(report, "_branches_kernel", "store-then-load") == []
    # a runtime flag alternating between 0 and 1 is a recompile, though
    (f,) = _on(report, "_branches_kernel", "recompile")
    assert "`flag`" in f.message


def test_a_store_before_an_early_return_is_not_followed_by_the_loads_after_it(report):
    assert _on(report, "_early_return_kernel", "store-then-load") == []
    (f,) = _on(report, "_no_return_kernel", "store-then-load")
    assert f.line == _line_after("_no_return_kernel", "tl.store(x_ptr + offs, tl.load(")


def test_store_then_load_through_aliased_arguments(report):
    fs = _on(report, "_copy_kernel", "store-then-load")
    assert len(fs) == 1 and fs[0].case == {"inplace": 1}
    assert "whose view shares bytes with `dst_ptr`'s" in fs[0].message
    assert _on(report, "_disjoint_halves_kernel", "store-then-load") == []


def test_views_of_one_storage_alias_only_where_their_bytes_meet(report):
    # q and k as column slices of one fused projection share no byte; a buffer and itself shifted by one column do
    (f,) = _on(report, "_rows_kernel", "store-then-load")
    assert f.case == {"layout": "shifted_by_one_column"}
    assert f.line == _line_after("_rows_kernel", "y = tl.load(")
    assert "`a_ptr[0, 1]` is `b_ptr[0, 0]`" in f.message
    assert "`a_ptr` [16, 128] with strides (768, 1)" in f.message


def test_load_then_store_through_another_row_mapping(report):
    # the state roll of SGLang's causal conv1d update before sgl-project/sglang#16899 restored its barrier
    fs = [f for f in _on(report, "_state_roll_kernel", "load-then-store")]
    (f,) = fs
    assert f.line == _line_after("_state_roll_kernel", "tl.store(state_ptr")
    assert f"load at line {_line_after('_state_roll_kernel', 'old = tl.load(')}" in f.message
    assert "tl.debug_barrier()" in f.fix
    assert _on(report, "_state_roll_fixed_kernel", "load-then-store") == []
    (t,) = _on(report, "_transpose_inplace_kernel", "load-then-store")
    assert _on(report, "_flag_branches_kernel") == []


def test_load_compute_store_of_one_element_per_lane_is_not_reported(report):
    assert _on(report, "_scale_inplace_kernel") == []
    # the same lane mapping shifted by a uniform row: two lanes never meet, a lane meeting itself is one thread
    assert _on(report, "_ring_row_kernel", "load-then-store") == []
    (f,) = _on(report, "_shift_left_kernel", "load-then-store")
    # several lanes, one element: a broadcast axis, a loaded index, offs // 2
    (g,) = _on(report, "_broadcast_rows_kernel", "load-then-store")
    (p,) = _on(report, "_pairs_kernel", "load-then-store")
    assert "several lanes (threads) one element" in p.message and "another index mapping" not in p.message
    # one pointer expression and one mask: lanes meet only where loaded indices repeat, a lost update that no
    # barrier fixes (a non-atomic histogram); not an ordering bug
    assert _on(report, "_histogram_kernel", "load-then-store") == []
    # ... but under another mask the lanes that store are not those that load
    (m,) = _on(report, "_gather_other_mask_kernel", "load-then-store")
    assert "through the same pointer expression under another mask" in m.message


def test_a_scalar_reduction_orders_memory_only_with_more_than_one_warp(report):
    assert _on(report, "_two_pass_kernel") == []
    (g,) = _on(report, "_reverse_after_small_sum_kernel", "store-then-load")
    (f,) = _on(report, "_two_pass_one_warp_kernel", "load-then-store")
    assert f"load at line {_line_after('_two_pass_one_warp_kernel', 'first = tl.load(')}" in f.message


def test_pointers_a_loop_advances_are_followed_across_iterations(report):
    # rows one stride apart never meet (Liger's in-place RMSNorm backward); one element apart they do
    assert _on(report, "_rows_backward_kernel") == []
    (f,) = _on(report, "_sliding_kernel", "store-then-load")
    assert "next iteration of the loop" in f.message


def test_a_mask_bounds_an_integer_only_along_the_axis_it_masks(report):
    # masking the columns says nothing of the rows laid from the same arange: the race is there for one column
    (f,) = _on(report, "_square_tile_shift_kernel", "load-then-store")
    assert f.case == {"ncols": 1}
    assert _on(report, "_masked_column_halves_kernel") == []


def test_loop_counters_are_followed_as_k_times_step(report):
    # a row index derived from the counter (i // 2) repeats across iterations: the next one reads what this stored
    (f,) = _on(report, "_row_index_loop_kernel", "store-then-load")
    assert "next iteration of the loop" in f.message
    # two loops over the same column tiles (off = k * BN): an element is read and rewritten by one lane
    assert _on(report, "_two_pass_tiles_kernel") == []
    # a block pointer's offset carried as x + STEP: a whole tile per step never meets the next, half a tile does
    (f,) = _on(report, "_block_ptr_tiles_kernel", "store-then-load")
    assert f.case == {"step": 64} and "next iteration of the loop" in f.message


def test_division_of_a_value_that_can_be_negative(report):
    (f,) = _on(report, "_ring_negmod_kernel", "int-division-sign")
    assert f.severity == "warning" and f.case == {"pos": 0}
    assert f.message.startswith("`(pos - window) % CAP` divides like C, not like Python, and `pos - window` can be "
                                "as low as -5: -5 % 8 is -5 in the kernel, 3 in Python")
    assert _on(report, "_ring_kernel", "int-division-sign") == []
    fs = _on(report, "_slot_unguarded_kernel", "int-division-sign")
    assert {f.tag for f in fs} == {"//", "%"} and all("`loaded_bounds`" in f.message for f in fs)
    # an unknown loaded integer is taken as >= 0: no warning without a declared negative bound
    assert _on(report, "_unknown_slot_kernel") == [] and _on(report, "_unknown_cdiv_kernel") == []
    # a guard, a reload after it, a where, a mask, and a bound the case declares all keep it quiet
    assert _on(report, "_slot_guarded_kernel", "int-division-sign") == []
    assert all(f.case != {"n": 4} for f in fs)
    assert _on(report, "_tiles_kernel", "int-division-sign") == []
    lines = {f.line for f in _on(report, "_loop_count_kernel", "int-division-sign")}
    assert lines == {_line_after("_loop_count_kernel", "(seqlen - 1) // BLOCK + 1"),
                     _line_after("_loop_count_kernel", "seqlen % W")}
    assert _on(report, "_reload_kernel", "int-division-sign") == []
    (r,) = _on(report, "_reload_rewritten_kernel", "int-division-sign")
    (cd,) = _on(report, "_countdown_kernel", "int-division-sign")
    # a division inlined from tl.cdiv is quoted as the call, never by IR names
    (c,) = _on(report, "_cdiv_kernel", "int-division-sign")
    assert c.message.startswith("`tl.cdiv(n, SPLITS)` divides like C, not like Python, and its dividend")


def test_a_difference_of_offsets_is_a_length_once_declared_non_decreasing(report):
    # undeclared, the difference of two loaded offsets can be negative: the finding names the declaration
    (f,) = _on(report, "_varlen_cdiv_kernel", "int-division-sign")
    assert "difference of two elements of `cu_seqlens_ptr`" in f.message
    assert "nondecreasing=['cu_seqlens_ptr']" in f.message
    # declared, the larger index minus the smaller is >= 0; the other way round it is <= 0 and still reported
    (g,) = _on(report, "_varlen_reversed_kernel", "int-division-sign")
    assert "nondecreasing" not in g.message


def test_loop_accumulator_in_fp16_is_flagged_but_fp16_max_is_not(report):
    (f,) = _on(report, "_acc_f16_kernel", "low-precision-accumulation")
    assert "loop accumulates" in f.message and "float16" in f.message
    assert _on(report, "_max_f16_kernel") == []


def test_pointer_alignment_split_suggests_do_not_specialize_on_alignment(report):
    (f,) = _on(report, "_aligned_kernel", "recompile")
    assert "`x_ptr`" in f.message and "not 16-byte aligned" in f.message
    assert "do_not_specialize_on_alignment=['x_ptr']" in f.fix


def test_int32_to_int64_argument_split_is_not_a_recompile_finding(report):
    assert _on(report, "_width_kernel") == []


def test_grid_limits_per_dimension(report):
    fs = {f.tag: f for f in _on(report, "_grid_kernel", "grid-limit")}
    assert set(fs) == {"grid[0]", "grid[2]"}
    assert fs["grid[0]"].case == {"grid": (2**31, 1, 1)} and "2,147,483,648" in fs["grid[0]"].message
    assert fs["grid[2]"].case == {"grid": (1, 1, 65_536)}


def test_heuristics_and_warmup_launches_are_captured(report):
    k = {d["kernel"]: d for d in report.kernels}
    # BLOCK from the heuristic: 128 for n=100, 1024 for n=1000
    assert k["_heuristic_kernel"]["launches"] == 2 and k["_heuristic_kernel"]["compiles"] == 2
    # warmup compiles without running; its grid is still checked
    assert k["_warmup_kernel"]["compiles"] == 1
    (f,) = _on(report, "_warmup_kernel", "grid-limit")
    assert "grid[1] = 70,000" in f.message


def test_recompile_compares_launches_within_a_sweep_of_per_call_sizes(report):
    (f,) = _on(report, "_sweep_default_kernel", "recompile")
    assert "`n`" in f.message and "`heads`" not in f.message
    # once for each of the two sweeps (heads 16 and 17), reported as one finding seen twice
    assert f.count == 2
    (g,) = _on(report, "_sweep_named_kernel", "recompile")
    assert "`heads`" in g.message and "`n`" not in g.message and g.count == 2


def test_recompile_counts_constexprs_and_options_a_per_call_size_chooses(report):
    (f,) = _on(report, "_bucketed_kernel", "recompile")
    # 1, 2, 4, 8, 16, 32, 64: one compile per power of two, for the forward and the backward alike
    assert "compiles 7 times" in f.message and "constexpr `BLOCK_R` (7 values: 1, 2, 4, 8, …)" in f.message
    assert "#3 num_reqs=3 (BLOCK_R=4)" in f.message and "BACKWARD" not in f.message
    assert f.count == 2  # the forward's sweep and the backward's, merged
    assert "`BLOCK_R` a function of the model's sizes" in f.fix
    (g,) = _on(report, "_warps_kernel", "recompile")
    assert "compiles 2 times" in g.message and "launch option num_warps (4, 8)" in g.message
    assert "#2 num_reqs=16, 17, 64 (num_warps=8)" in g.message
    # any option that enters the compile, not just the usual four
    (o,) = _on(report, "_fusion_kernel", "recompile")
    assert "split by launch option enable_fp_fusion (False, True)" in o.message
    assert "#2 num_reqs=17, 64 (enable_fp_fusion=True)" in o.message
    # a heuristic's constexpr is the same churn
    (h,) = _on(report, "_heuristic_kernel", "recompile")
    assert "constexpr `BLOCK` (2 values: 128, 1024)" in h.message


def test_case_rejects_a_sweep_that_names_no_parameter():
    import tritonkit

    with pytest.raises(ValueError, match="sweep names"):
        tritonkit.case(num_tokens=[1, 2], sweep=["num_seqs"])(lambda num_tokens: None)
