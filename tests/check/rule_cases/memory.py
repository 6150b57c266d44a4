"""store-then-load and load-then-store: lane mappings, loops, aliased views, barriers, reductions, masks.

The kernels tests/check/test_rules.py checks; each test names its kernels.
"""

import torch
import triton
import triton.language as tl

import tritonkit

M = dict(device="meta")


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


@triton.jit
def _rows_flipped_kernel(x_ptr, ROWS: tl.constexpr, D: tl.constexpr):
    # each row normed by its own sum, then written over the mirrored row: ordered only where that sum combines
    # warps (warps along the columns: its shared-memory step behind bar.sync), a race where each warp holds a row
    rows = tl.arange(0, ROWS)[:, None]
    cols = tl.arange(0, D)[None, :]
    x = tl.load(x_ptr + rows * D + cols)
    ss = tl.sum(x * x, axis=1)
    tl.store(x_ptr + (ROWS - 1 - rows) * D + cols, x / tl.sqrt(ss)[:, None])


@triton.jit
def _rows_flipped_max_kernel(x_ptr, ROWS: tl.constexpr, D: tl.constexpr):
    # the same with the rows' maxima taken straight off the load (whose value has its pointers' layout)
    rows = tl.arange(0, ROWS)[:, None]
    cols = tl.arange(0, D)[None, :]
    x = tl.load(x_ptr + rows * D + cols)
    tl.store(x_ptr + (ROWS - 1 - rows) * D + cols, x / tl.max(x, axis=1)[:, None])


@triton.jit
def _either(a, b):
    return a | b


@triton.jit
def _rows_flipped_any_kernel(x_ptr, ROWS: tl.constexpr, D: tl.constexpr):
    # the same with a reduction of a comparison (a value the IR reader types without its layout)
    rows = tl.arange(0, ROWS)[:, None]
    cols = tl.arange(0, D)[None, :]
    x = tl.load(x_ptr + rows * D + cols)
    any_positive = tl.reduce(x > 0, 1, _either)
    tl.store(x_ptr + (ROWS - 1 - rows) * D + cols, tl.where(any_positive[:, None], x, 0.0))


@triton.jit
def _early_return_sum_kernel(x_ptr, y_ptr, flag):
    # the reduction across warps runs only in the branch that returns: the path on to the flipped store has none
    rows = tl.arange(0, 2)[:, None]
    cols = tl.arange(0, 512)[None, :]
    x = tl.load(x_ptr + rows * 512 + cols)
    if flag:
        tl.store(y_ptr + tl.arange(0, 2), tl.sum(tl.load(y_ptr + rows * 512 + cols), axis=1))
        return
    tl.store(x_ptr + (1 - rows) * 512 + cols, x * 2)


@triton.jit
def _early_return_barrier_kernel(x_ptr, y_ptr, flag):
    # the same with the barrier itself in that branch
    rows = tl.arange(0, 2)[:, None]
    cols = tl.arange(0, 512)[None, :]
    x = tl.load(x_ptr + rows * 512 + cols)
    if flag:
        tl.debug_barrier()
        tl.store(y_ptr + rows * 512 + cols, x)
        return
    tl.store(x_ptr + (1 - rows) * 512 + cols, x * 2)


@triton.jit
def _blocks_ahead_kernel(x_ptr, y_ptr, n, ROWS: tl.constexpr, D: tl.constexpr, STAGES: tl.constexpr):
    # iteration i reads block i and writes block i + 1 (rows flipped), then sums block i's rows across warps: that
    # sum's barrier lies between the write and the next iteration's read in the source, but with STAGES the
    # pipeliner issues block i + 1's read (cp.async) iterations ahead, before the write
    rows = tl.arange(0, ROWS)[:, None]
    cols = tl.arange(0, D)[None, :]
    acc = tl.zeros([ROWS], tl.float32)
    for i in tl.range(0, n, num_stages=STAGES):
        x = tl.load(x_ptr + i * ROWS * D + rows * D + cols)
        tl.store(x_ptr + (i + 1) * ROWS * D + (ROWS - 1 - rows) * D + cols, x * 2)
        acc += tl.sum(x * x, axis=1)
    tl.store(y_ptr + tl.arange(0, ROWS), acc)


@tritonkit.case(rows=[2, 4])
def rows_flipped(rows):
    # 2 x 512 on 4 warps: the layout puts the warps along the columns; 4 x 32: one row a warp (sm_90 PTX: two
    # bar.sync between the loads and the stores, and none)
    d = {2: 512, 4: 32}[rows]
    _rows_flipped_kernel[(1,)](torch.empty(rows, d, **M), ROWS=rows, D=d, num_warps=4)
    _rows_flipped_max_kernel[(1,)](torch.empty(rows, d, **M), ROWS=rows, D=d, num_warps=4)
    _rows_flipped_any_kernel[(1,)](torch.empty(rows, d, **M), ROWS=rows, D=d, num_warps=4)


@tritonkit.case(flag=[0])
def early_return(flag):
    x, y = torch.empty(1024, **M), torch.empty(1024, **M)
    _early_return_sum_kernel[(1,)](x, y, flag, num_warps=4)
    _early_return_barrier_kernel[(1,)](x, y, flag, num_warps=4)


@tritonkit.case(stages=[1, 3])
def blocks_ahead(stages):
    x, y = torch.empty(5 * 2 * 512, **M), torch.empty(2, **M)
    _blocks_ahead_kernel[(1,)](x, y, 4, ROWS=2, D=512, STAGES=stages, num_warps=4)


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
def _desc_tiles_kernel(x_ptr, M, N, sm, STEP: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    # a tensor descriptor's tile moved STEP columns an iteration: a whole tile never meets the next; half a tile does
    desc = tl.make_tensor_descriptor(x_ptr, [M, N], [sm, 1], [BM, BN])
    row = tl.program_id(0) * BM
    for k in range(0, tl.cdiv(N, STEP)):
        desc.store([row, k * STEP], desc.load([row, k * STEP]) * 2)


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
def descriptor_tiles(step):
    x = torch.empty(64, 1024, **M)
    _desc_tiles_kernel[(4,)](x, 64, 1024, 1024, STEP=step, BM=16, BN=128)


@triton.jit
def _reread_own_kernel(buf_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # store a tile, then load it back through the same pointer tile and mask: [1024] over 4 warps is 8 elements a
    # thread in one layout for both (sm_90 TTGIR), so each thread re-reads what it stored itself
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(buf_ptr + offs, tl.load(out_ptr + offs, mask=m) * 2, mask=m)
    y = tl.load(buf_ptr + offs, mask=m)
    tl.store(out_ptr + offs, y + 1, mask=m)


@triton.jit
def _reread_replicated_kernel(buf_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # the same with a [64] tile over 4 warps: two warps hold each element, one stores it, both load it
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(buf_ptr + offs, tl.load(out_ptr + offs, mask=m) * 2, mask=m)
    y = tl.load(buf_ptr + offs, mask=m)
    tl.store(out_ptr + offs, y + 1, mask=m)


@triton.jit
def _reread_row_sums_kernel(buf_ptr, x_ptr, R: tl.constexpr, C: tl.constexpr):
    # row sums stored, then re-loaded: the load is given the 2-D tile's sliced layout, where the 16 threads of a
    # row hold its sum, and the store a blocked one: another thread stores what a thread loads
    r = tl.arange(0, R)
    c = tl.arange(0, C)
    t = tl.load(x_ptr + r[:, None] * C + c[None, :])
    tl.store(buf_ptr + r, tl.sum(t, axis=1))
    y = tl.load(buf_ptr + r)
    tl.store(x_ptr + r[:, None] * C + c[None, :], t + y[:, None])


@triton.jit
def _reread_mixed_width_kernel(buf_ptr, h_ptr, out_ptr, BLOCK: tl.constexpr):
    # one pointer tile, two layouts: the fp16 accesses beside it make Triton give the fp32 load 8 elements a
    # thread and the store 4
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(buf_ptr + offs, tl.load(h_ptr + offs).to(tl.float32) * 2)
    y = tl.load(buf_ptr + offs)
    tl.store(out_ptr + offs, (y + 1).to(tl.float16))


@triton.jit
def _reread_transposed_kernel(buf_ptr, out_ptr, N: tl.constexpr):
    # the stored tile re-read through its transpose: lane (i, j) reads what lane (j, i) stored
    r = tl.arange(0, N)
    p = buf_ptr + r[:, None] * N + r[None, :]
    tl.store(p, tl.load(out_ptr + r[:, None] * N + r[None, :]) * 2)
    y = tl.load(tl.trans(p))
    tl.store(out_ptr + r[:, None] * N + r[None, :], tl.trans(y))


@tritonkit.case(n=[4096])
def reread(n):
    buf, out = torch.empty(n, **M), torch.empty(n, **M)
    _reread_own_kernel[(4,)](buf, out, n, BLOCK=1024, num_warps=4)
    _reread_replicated_kernel[(64,)](buf, out, n, BLOCK=64, num_warps=4)
    _reread_row_sums_kernel[(1,)](buf, torch.empty(64 * 64, **M), R=64, C=64, num_warps=4)
    half = torch.empty(n, dtype=torch.float16, **M)
    _reread_mixed_width_kernel[(4,)](buf, half, torch.empty_like(half), BLOCK=1024, num_warps=4)
    _reread_transposed_kernel[(1,)](buf, out, N=32)
