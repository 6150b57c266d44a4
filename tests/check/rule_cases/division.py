"""int-division-sign: negative dividends from arithmetic and declared bounds, guards, masks, loaded lengths.

The kernels tests/check/test_rules.py checks; each test names its kernels.
"""

import torch
import triton
import triton.language as tl

import tritonkit

M = dict(device="meta")


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
def _ring_stages_kernel(x_ptr, lo_ptr, STAGES: tl.constexpr, BLOCK: tl.constexpr):
    # a pipeline's stage from the iterations done: `j - lo` in a loop counting up from lo, or from a start at least
    # lo, is never negative; from a start that can be below lo it can be
    lo = tl.load(lo_ptr)
    hi = tl.load(lo_ptr + 1)
    offs = tl.arange(0, BLOCK)
    for j in range(lo, hi):
        tl.store(x_ptr + ((j - lo) % STAGES) * BLOCK + offs, tl.zeros([BLOCK], tl.float32))
    for j in range(tl.maximum(tl.load(lo_ptr + 2), lo), hi):
        tl.store(x_ptr + ((j - lo) // STAGES % STAGES) * BLOCK + offs, tl.zeros([BLOCK], tl.float32))
    for j in range(tl.load(lo_ptr + 2), hi):
        tl.store(x_ptr + ((j - lo) % STAGES) * BLOCK + offs, tl.zeros([BLOCK], tl.float32))


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
                                                "pos_ptr": (-1, 15_999),
                                                "lo_ptr": (0, 15_999)})
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
    _ring_stages_kernel[(1,)](torch.empty(2 * 64, **M), slots, STAGES=2, BLOCK=64)


@tritonkit.case(n=[4], loaded_bounds={"slot_ptr": (0, 15_999)})
def division_declared(n):
    _slot_unguarded_kernel[(n,)](torch.empty(1000 * 16 * 64, **M), torch.empty(n, dtype=torch.int32, **M),
                                 BS=16, D=64)


@triton.jit
def _prev_half_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # (offs - 1) // 2 read only under a mask that keeps offs - 1 >= 0, said of offs: offs > 0, offs >= 1
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    src = (offs - 1) // 2
    a = tl.load(x_ptr + src, mask=(offs > 0) & (offs < n), other=0.0)
    b = tl.load(x_ptr + src, mask=(offs >= 1) & (offs < n), other=0.0)
    tl.store(out_ptr + offs, a + b, mask=offs < n)


@triton.jit
def _prev_half_quotient_mask_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # a mask on the quotient: -1 // 2 is 0 here, so lane 0 reads element 0 where Python's -1 would be masked off
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    src = (offs - 1) // 2
    x = tl.load(x_ptr + src, mask=(src >= 0) & (offs < n), other=0.0)
    tl.store(out_ptr + offs, x, mask=offs < n)


@triton.jit
def _prev_half_loose_mask_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # offs >= 0 leaves offs - 1 = -1 in lane 0
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    src = (offs - 1) // 2
    x = tl.load(x_ptr + src, mask=(offs >= 0) & (offs < n), other=0.0)
    tl.store(out_ptr + offs, x, mask=offs < n)


@tritonkit.case(n=[4096])
def division_shifted_masks(n):
    x = torch.empty(n, **M)
    for k in (_prev_half_kernel, _prev_half_quotient_mask_kernel, _prev_half_loose_mask_kernel):
        k[(triton.cdiv(n, 256),)](x, torch.empty_like(x), n, BLOCK=256)
