"""Block-fp8 GEMM2 for Hopper (sm_90) in Gluon: the scaling of each K block overlapped with the next block's wgmma.

kernel._fused_moe_gemm2_kernel with block-wise fp8 (DeepSeek-V3's 1 x 128 activation and 128 x 128 weight scales)
waits for each K block's dot before it scales it into the accumulator: plain Triton has no way to issue the next
block's dot first (docs/notes/fused-moe-fp8-ceiling.md: a third of the fp8 rate lost to that). Here, per program
of BLOCK_M sorted slots x 256 output columns:

- a load warp brings h's [BLOCK_M, 128] tile and w2's two [128, 128] tiles of each K block through TMA into a ring of
  ``STAGES`` stages, each on its ready/empty mbarriers;
- two consumer warpgroups (the default partition and a worker), one per 128 output columns (one weight-scale block),
  issue K block kb's wgmma into a fresh float32 tile and, while it runs, add K block kb - 1's tile into the
  accumulator scaled by its row scales and its weight scale: ``acc += t * (h_s[:, None] * w_s)``, the plain kernel's
  expression in the plain kernel's K order;
- the epilogue weights each row by its top-k weight and stores it, rounded once, to the slot's row of c.

Taken (api, ``config.GEMM2_HOPPER``) for sorted blocks of 64 rows on sm_90 with h and w2 TMA can address and the
intermediate width a whole number of 128-wide K blocks; everything else keeps kernel.py's GEMM2.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from ... import _triton_compat
from .kernel import _act_mul, _block_expert, _block_slots, _grouped_tile, _h_fp8_amax, _h_group_scale, _quant_fp8

gluon_tma_load = _triton_compat.gluon_tma_load()
gluon_async_load = _triton_compat.gluon_async_load()

# the load warp (scalar work and TMA issues) and the second consumer warpgroup, a worker beside the default partition
LOAD_WARPS = gl.constexpr(1)
LOAD_REGS = gl.constexpr(32)
# GEMM1's loader also gathers the activation rows by cp.async: a warpgroup (the padding the one warp takes anyway),
# 16 bytes a thread, four rows each, at 40 registers (what two consumers at 232 leave)
GATHER_WARPS = gl.constexpr(4)
GATHER_REGS = gl.constexpr(40)
CONSUMER_WARPS = gl.constexpr(4)
CONSUMER_REGS = gl.constexpr(232)
# a consumer's columns: one 128 x 128 weight-scale block
WG_N = gl.constexpr(128)


@gluon.jit
def _gemm2_load_partition(
    h_desc, w_desc, a_bufs, b_bufs, ready, empty, h_row, w_row, NK: gl.constexpr, STAGES: gl.constexpr
):
    """The load warp: K blocks 0 .. NK - 1 of h's rows and the two consumers' w2 rows into the stage ring."""
    BLOCK_K: gl.constexpr = h_desc.block_type.shape[1]
    stage_bytes: gl.constexpr = h_desc.block_type.nbytes + 2 * w_desc.block_type.nbytes
    for kb in range(NK):
        s = kb % STAGES
        # a fresh mbarrier counts as having completed the phase before phase 0: the first STAGES waits pass
        mbarrier.wait(empty.index(s), ((kb // STAGES) & 1) ^ 1)
        mbarrier.expect(ready.index(s), stage_bytes)
        gluon_tma_load(h_desc, [h_row, kb * BLOCK_K], ready.index(s), a_bufs.index(s))
        gluon_tma_load(w_desc, [w_row, kb * BLOCK_K], ready.index(s), b_bufs.index(s).slice(0, WG_N))
        gluon_tma_load(w_desc, [w_row + WG_N, kb * BLOCK_K], ready.index(s), b_bufs.index(s).slice(WG_N, WG_N))


@gluon.jit
def _k_issue(a_bufs, b_bufs, ready, zero, kb, WG: gl.constexpr, STAGES: gl.constexpr, FENCE: gl.constexpr):
    """K block kb's dot (the activation tile by the consumer's weight tile) issued into a fresh float32 tile once its
    stage is in: (the tile, the stage, the weight tile). FENCE: the activation tile was written by cp.async (the
    generic proxy), which wgmma (the async proxy) reads only after a proxy fence."""
    s = kb % STAGES
    mbarrier.wait(ready.index(s), (kb // STAGES) & 1)
    if FENCE:
        fence_async_shared()
    b_tile = b_bufs.index(s).slice(WG * WG_N, WG_N).permute((1, 0))
    t = warpgroup_mma(a_bufs.index(s), b_tile, zero, use_acc=False, is_async=True)
    return t, s, b_tile


@gluon.jit
def _k_block(a_bufs, b_bufs, ready, empty, zero, as_rows, mask_rows, ws_base, kb, stride_ask, stride_wsk,
             WG: gl.constexpr, STAGES: gl.constexpr, FENCE: gl.constexpr):  # fmt: skip
    """K block kb's finished tile and its scales (the row scales, padding rows reading none as in kernel.py, and
    the weight scale)."""
    t, s, b_tile = _k_issue(a_bufs, b_bufs, ready, zero, kb, WG, STAGES, FENCE)
    a_s = gl.load(as_rows + kb * stride_ask, mask=mask_rows, other=0.0)
    w_s = gl.load(ws_base + kb * stride_wsk)
    t, _, _ = warpgroup_mma_wait(0, deps=(t, a_bufs.index(s), b_tile))
    # both consumers' arrives free the stage for the loader
    mbarrier.arrive(empty.index(s), count=1)
    return t, a_s, w_s


@gluon.jit
def _k_step(a_bufs, b_bufs, ready, empty, zero, as_rows, mask_rows, ws_base, kb, stride_ask, stride_wsk, acc, t,
            a_s, w_s, WG: gl.constexpr, STAGES: gl.constexpr, FENCE: gl.constexpr):  # fmt: skip
    """K block kb's dot issued, K block kb - 1's finished tile ``t`` added into ``acc`` scaled by its row scales and
    weight scale while it runs (the plain kernel's ``acc += dot * (a_s[:, None] * w_s)``), then kb's tile waited."""
    t_next, s, b_tile = _k_issue(a_bufs, b_bufs, ready, zero, kb, WG, STAGES, FENCE)
    a_s_next = gl.load(as_rows + kb * stride_ask, mask=mask_rows, other=0.0)
    w_s_next = gl.load(ws_base + kb * stride_wsk)
    acc += t * (a_s[:, None] * w_s)
    t_next, _, _ = warpgroup_mma_wait(0, deps=(t_next, a_bufs.index(s), b_tile))
    mbarrier.arrive(empty.index(s), count=1)
    return acc, t_next, a_s_next, w_s_next


@gluon.jit
def _k_loop(a_bufs, b_bufs, ready, empty, zero, as_rows, mask_rows, ws_base, stride_ask, stride_wsk, WG: gl.constexpr,
            NK: gl.constexpr, STAGES: gl.constexpr, FENCE: gl.constexpr):  # fmt: skip
    """The consumer's float32 sum over NK K blocks, each block's tile scaled by its row scales (``as_rows``, a K
    block's stride apart) and its weight scale (``ws_base``) under the next block's dot."""
    # K block 0: issued and finished before the loop, which then always has the previous block's tile to scale (the
    # two float32 tiles trade places by register copies: unrolled by two to avoid them, the build spills)
    t, a_s, w_s = _k_block(a_bufs, b_bufs, ready, empty, zero, as_rows, mask_rows, ws_base, 0, stride_ask,
                           stride_wsk, WG, STAGES, FENCE)  # fmt: skip
    acc = zero
    for kb in range(1, NK):
        acc, t, a_s, w_s = _k_step(a_bufs, b_bufs, ready, empty, zero, as_rows, mask_rows, ws_base, kb, stride_ask,
                                   stride_wsk, acc, t, a_s, w_s, WG, STAGES, FENCE)  # fmt: skip
    acc += t * (a_s[:, None] * w_s)
    return acc


@gluon.jit
def _gemm2_consumer(
    a_bufs,
    b_bufs,
    ready,
    empty,
    h_scale_ptr,
    w_scale_ptr,
    c_ptr,
    topk_weights_ptr,
    sorted_ids_ptr,
    pid_m,
    expert,
    col0,
    num_post,
    numel,
    K,
    stride_hsm,
    stride_hsk,
    stride_wse,
    stride_wsk,
    stride_wsn,
    stride_cm,
    WG: gl.constexpr,
    BLOCK_M: gl.constexpr,
    NK: gl.constexpr,
    STAGES: gl.constexpr,
    MUL_WEIGHT: gl.constexpr,
    num_warps: gl.constexpr,
):
    """Output columns [col0 + WG * 128, +128) of the program's BLOCK_M rows: the K loop (the module's docstring),
    then the weighted, rounded rows stored to c."""
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, WG_N, 32]
    )
    offs_m = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, acc_layout))
    # h's rows are the block's sorted positions (kernel._h_rows); its scales one float32 a row and K block
    hs_rows = h_scale_ptr + (pid_m.to(gl.int64) * BLOCK_M + offs_m) * stride_hsm
    cols = col0 + WG * WG_N
    # the tile's weight-scale block; a tile past K (the last program of a K not a multiple of 256) reads block 0
    # and stores nothing
    cb = gl.where(cols < K, cols // WG_N, 0)
    ws_base = w_scale_ptr + expert * stride_wse + cb * stride_wsk
    zero = gl.zeros([BLOCK_M, WG_N], gl.float32, acc_layout)
    slot, mask_m = _block_slots(sorted_ids_ptr, pid_m * BLOCK_M + offs_m, num_post, numel)

    acc = _k_loop(a_bufs, b_bufs, ready, empty, zero, hs_rows, mask_m, ws_base, stride_hsk, stride_wsn, WG, NK,
                  STAGES, False)  # fmt: skip
    if MUL_WEIGHT:
        wt = gl.load(topk_weights_ptr + slot, mask=mask_m, other=0.0).to(gl.float32)
        acc = acc * wt[:, None]
    offs_n = cols + gl.arange(0, WG_N, layout=gl.SliceLayout(0, acc_layout))
    mask = mask_m[:, None] & (offs_n < K)[None, :]
    gl.store(c_ptr + slot[:, None] * stride_cm + offs_n[None, :], acc.to(c_ptr.dtype.element_ty), mask=mask)


@gluon.jit(do_not_specialize=["numel", "num_pid_m"])
def _fused_moe_gemm2_fp8_hopper_kernel(  # tritonkit: ignore[recompile] K blocks and the ring follow the model
    h_desc,
    w_desc,
    h_scale_ptr,
    w_scale_ptr,
    c_ptr,
    topk_weights_ptr,
    sorted_ids_ptr,
    expert_ids_ptr,
    num_post_ptr,
    numel,
    num_pid_m,
    K,
    num_experts,
    stride_hsm,
    stride_hsk,
    stride_wse,
    stride_wsk,
    stride_wsn,
    stride_cm,
    NK: gl.constexpr,
    GROUP_M: gl.constexpr,
    STAGES: gl.constexpr,
    MUL_WEIGHT: gl.constexpr,
    num_warps: gl.constexpr,
):
    """``c[slot, k] = topk_weight[slot] * (h[row] . w2[e, k])`` of kernel._fused_moe_gemm2_kernel (block-wise fp8,
    sorted blocks) for BLOCK_M sorted slots of one expert x 256 output columns; h_desc: h [rows, N] fp8 in boxes of
    [BLOCK_M, 128]; w_desc: w2 as [E * K, N] fp8 in boxes of [128, 128]; NK = N / 128."""
    BLOCK_M: gl.constexpr = h_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = h_desc.block_type.shape[1]
    pid_m, pid_n = _grouped_tile(gl.program_id(0), num_pid_m, gl.cdiv(K, 2 * WG_N), GROUP_M)
    num_post, expert, busy = _block_expert(expert_ids_ptr, num_post_ptr, pid_m, num_experts, BLOCK_M)
    if busy:
        col0 = pid_n * (2 * WG_N)
        dtype: gl.constexpr = h_desc.dtype
        a_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, BLOCK_K], h_desc.layout)
        b_bufs = gl.allocate_shared_memory(dtype, [STAGES, 2 * WG_N, BLOCK_K], w_desc.layout)
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(STAGES):
            mbarrier.init(ready.index(i), count=1)
            # both consumers free every stage
            mbarrier.init(empty.index(i), count=2)
        w_row = (expert * K + col0).to(gl.int32)
        h_row = (pid_m * BLOCK_M).to(gl.int32)
        gl.warp_specialize(
            [
                (
                    _gemm2_consumer,
                    (
                        a_bufs, b_bufs, ready, empty, h_scale_ptr, w_scale_ptr, c_ptr, topk_weights_ptr,
                        sorted_ids_ptr, pid_m, expert, col0, num_post, numel, K, stride_hsm, stride_hsk, stride_wse,
                        stride_wsk, stride_wsn, stride_cm, 0, BLOCK_M, NK, STAGES, MUL_WEIGHT, num_warps,
                    ),
                ),
                (
                    _gemm2_consumer,
                    (
                        a_bufs, b_bufs, ready, empty, h_scale_ptr, w_scale_ptr, c_ptr, topk_weights_ptr,
                        sorted_ids_ptr, pid_m, expert, col0, num_post, numel, K, stride_hsm, stride_hsk, stride_wse,
                        stride_wsk, stride_wsn, stride_cm, 1, BLOCK_M, NK, STAGES, MUL_WEIGHT, CONSUMER_WARPS,
                    ),
                ),
                (
                    _gemm2_load_partition,
                    (h_desc, w_desc, a_bufs, b_bufs, ready, empty, h_row, w_row, NK, STAGES),
                ),
            ],
            [CONSUMER_WARPS, LOAD_WARPS],
            [CONSUMER_REGS, LOAD_REGS],
        )  # fmt: skip


# -- GEMM1 -------------------------------------------------------------------------------------------------------------
@gluon.jit
def _gemm1_load_partition(
    a_ptr,
    w_desc,
    a_bufs,
    b_bufs,
    ready,
    empty,
    sorted_ids_ptr,
    pid_m,
    num_post,
    numel,
    stride_am,
    gate_row,
    up_row,
    TOPK: gl.constexpr,
    NK: gl.constexpr,
    STAGES: gl.constexpr,
    num_warps: gl.constexpr,
):
    """The loader: each K block's activation rows gathered by token (cp.async, 16 bytes a thread; each thread's
    arrive on the stage's ready barrier fires when its copies land) and the gate's and up half's w1 tiles by TMA."""
    BLOCK_M: gl.constexpr = a_bufs.shape[1]
    BLOCK_K: gl.constexpr = a_bufs.shape[2]
    rows: gl.constexpr = gl.BlockedLayout([1, 16], [4, 8], [num_warps, 1], [1, 0])
    offs_r = pid_m * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, rows))
    offs_k = gl.arange(0, BLOCK_K, layout=gl.SliceLayout(0, rows))
    # a padding row (numel, or any id outside [0, numel)) copies nothing (zeros)
    slot, valid = _block_slots(sorted_ids_ptr, offs_r, num_post, numel)
    a_rows = a_ptr + (gl.where(valid, slot, 0) // TOPK) * stride_am
    w_bytes: gl.constexpr = 2 * w_desc.block_type.nbytes
    for kb in range(NK):
        s = kb % STAGES
        # a fresh mbarrier counts as having completed the phase before phase 0: the first STAGES waits pass
        mbarrier.wait(empty.index(s), ((kb // STAGES) & 1) ^ 1)
        gluon_async_load(a_bufs.index(s), a_rows[:, None] + (kb * BLOCK_K + offs_k)[None, :], mask=valid[:, None])
        # counted in the barrier's arrivals (one a loader thread), so the phase cannot end before the copies land
        async_copy.mbarrier_arrive(ready.index(s), increment_count=False)
        mbarrier.expect(ready.index(s), w_bytes)
        gluon_tma_load(w_desc, [gate_row, kb * BLOCK_K], ready.index(s), b_bufs.index(s).slice(0, WG_N))
        gluon_tma_load(w_desc, [up_row, kb * BLOCK_K], ready.index(s), b_bufs.index(s).slice(WG_N, WG_N))


@gluon.jit
def _gemm1_consumer(
    a_bufs,
    b_bufs,
    ready,
    empty,
    up_smem,
    up_ready,
    a_scale_ptr,
    w_scale_ptr,
    h_ptr,
    h_scale_ptr,
    topk_weights_ptr,
    sorted_ids_ptr,
    pid_m,
    pid_n,
    expert,
    num_post,
    numel,
    N,
    stride_asm,
    stride_ask,
    stride_wse,
    stride_wsn,
    stride_wsk,
    stride_hm,
    stride_hsm,
    WG: gl.constexpr,
    TOPK: gl.constexpr,
    NK: gl.constexpr,
    STAGES: gl.constexpr,
    ROUTED_ON_INPUT: gl.constexpr,
    GELU: gl.constexpr,
    ACT_BF16: gl.constexpr,
    num_warps: gl.constexpr,
):
    """WG 0: the gate's 128 columns of h's group pid_n; WG 1: the up half's. The up warpgroup hands its float32 sums
    over in shared memory; the gate warpgroup forms h = act(gate) * up in the activation dtype and stores it
    quantized per row to fp8 with the row's scale (kernel._fused_moe_gemm1_kernel's H_FP8 epilogue)."""
    BLOCK_M: gl.constexpr = a_bufs.shape[1]
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, WG_N, 32]
    )
    offs_m = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, acc_layout))
    slot, mask_m = _block_slots(sorted_ids_ptr, pid_m * BLOCK_M + offs_m, num_post, numel)
    # masked rows divide 0, not a negative slot (C division), though nothing reads through them
    token = gl.where(mask_m, slot, 0) // TOPK
    as_rows = a_scale_ptr + token * stride_asm
    n0 = pid_n * WG_N
    # the weight-scale block of this warpgroup's w1 rows: the gate's columns n0 ..., the up half's N + n0 ...
    ws_base = w_scale_ptr + expert * stride_wse + (n0 // WG_N + WG * (N // WG_N)) * stride_wsn
    zero = gl.zeros([BLOCK_M, WG_N], gl.float32, acc_layout)
    acc = _k_loop(a_bufs, b_bufs, ready, empty, zero, as_rows, mask_m, ws_base, stride_ask, stride_wsk, WG, NK,
                  STAGES, True)  # fmt: skip
    if ROUTED_ON_INPUT:
        # the router weight scales x (topk == 1): GEMM1 is linear, so it scales both halves' float32 sums
        wt = gl.load(topk_weights_ptr + slot, mask=mask_m, other=0.0).to(gl.float32)
        acc = acc * wt[:, None]
    if WG == 1:
        up_smem.store(acc)
        mbarrier.arrive(up_ready, count=1)
    else:
        mbarrier.wait(up_ready, 0)
        h = _act_mul(acc, up_smem.load(acc_layout), GELU, ACT_BF16)
        offs_n = n0 + gl.arange(0, WG_N, layout=gl.SliceLayout(0, acc_layout))
        # N is a whole number of 128-column groups here: every column of the group is h's
        mask = mask_m[:, None] & (offs_n < N)[None, :]
        s = _h_group_scale(_h_fp8_amax(h, mask))
        h_row = pid_m.to(gl.int64) * BLOCK_M + offs_m
        q = _quant_fp8(gl.where(mask, h.to(gl.float32), 0.0), s[:, None])
        gl.store(h_ptr + h_row[:, None] * stride_hm + offs_n[None, :], q, mask=mask)
        gl.store(h_scale_ptr + h_row * stride_hsm + pid_n, s, mask=mask_m)


@gluon.jit(do_not_specialize=["numel", "num_pid_m"])
def _fused_moe_gemm1_fp8_hopper_kernel(  # tritonkit: ignore[recompile] K blocks and the ring follow the model
    a_ptr,
    a_scale_ptr,
    w_desc,
    w_scale_ptr,
    h_ptr,
    h_scale_ptr,
    topk_weights_ptr,
    sorted_ids_ptr,
    expert_ids_ptr,
    num_post_ptr,
    numel,
    num_pid_m,
    N,
    num_experts,
    stride_am,
    stride_asm,
    stride_ask,
    stride_wse,
    stride_wsn,
    stride_wsk,
    stride_hm,
    stride_hsm,
    TOPK: gl.constexpr,
    NK: gl.constexpr,
    GROUP_M: gl.constexpr,
    STAGES: gl.constexpr,
    ROUTED_ON_INPUT: gl.constexpr,
    GELU: gl.constexpr,
    ACT_BF16: gl.constexpr,
    num_warps: gl.constexpr,
):
    """h's 128-column group pid_n for BLOCK_M = 64 sorted slots of one expert (kernel._fused_moe_gemm1_kernel with
    block-wise fp8, sorted blocks): ``h = act(x W1g^T) * (x W1u^T)`` quantized per row to fp8 with its scale.
    a_ptr: the activations in fp8 [M, K] (rows gathered by token), a_scale_ptr their [M, K / 128] scales; w_desc:
    w1 as [E * 2N, K] fp8 in boxes of [128, 128]; NK = K / 128."""
    BLOCK_M: gl.constexpr = 64
    BLOCK_K: gl.constexpr = w_desc.block_type.shape[1]
    pid_m, pid_n = _grouped_tile(gl.program_id(0), num_pid_m, N // WG_N, GROUP_M)
    num_post, expert, busy = _block_expert(expert_ids_ptr, num_post_ptr, pid_m, num_experts, BLOCK_M)
    if busy:
        dtype: gl.constexpr = w_desc.dtype
        a_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_K], dtype)
        a_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, BLOCK_K], a_layout)
        b_bufs = gl.allocate_shared_memory(dtype, [STAGES, 2 * WG_N, BLOCK_K], w_desc.layout)
        up_smem = gl.allocate_shared_memory(
            gl.float32, [BLOCK_M, WG_N], gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1, order=[1, 0])
        )
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        up_ready = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(STAGES):
            # the TMA bytes' expect, and one cp.async arrive a loader thread
            mbarrier.init(ready.index(i), count=1 + 32 * GATHER_WARPS)
            # both consumers free every stage
            mbarrier.init(empty.index(i), count=2)
        mbarrier.init(up_ready.index(0), count=1)
        gate_row = (expert * 2 * N + pid_n * WG_N).to(gl.int32)
        gl.warp_specialize(
            [
                (
                    _gemm1_consumer,
                    (
                        a_bufs, b_bufs, ready, empty, up_smem, up_ready.index(0), a_scale_ptr, w_scale_ptr, h_ptr,
                        h_scale_ptr, topk_weights_ptr, sorted_ids_ptr, pid_m, pid_n, expert, num_post, numel, N,
                        stride_asm, stride_ask, stride_wse, stride_wsn, stride_wsk, stride_hm, stride_hsm, 0, TOPK,
                        NK, STAGES, ROUTED_ON_INPUT, GELU, ACT_BF16, num_warps,
                    ),
                ),
                (
                    _gemm1_consumer,
                    (
                        a_bufs, b_bufs, ready, empty, up_smem, up_ready.index(0), a_scale_ptr, w_scale_ptr, h_ptr,
                        h_scale_ptr, topk_weights_ptr, sorted_ids_ptr, pid_m, pid_n, expert, num_post, numel, N,
                        stride_asm, stride_ask, stride_wse, stride_wsn, stride_wsk, stride_hm, stride_hsm, 1, TOPK,
                        NK, STAGES, ROUTED_ON_INPUT, GELU, ACT_BF16, CONSUMER_WARPS,
                    ),
                ),
                (
                    _gemm1_load_partition,
                    (
                        a_ptr, w_desc, a_bufs, b_bufs, ready, empty, sorted_ids_ptr, pid_m, num_post, numel,
                        stride_am, gate_row, gate_row + N, TOPK, NK, STAGES, GATHER_WARPS,
                    ),
                ),
            ],
            [CONSUMER_WARPS, GATHER_WARPS],
            [CONSUMER_REGS, GATHER_REGS],
        )  # fmt: skip
