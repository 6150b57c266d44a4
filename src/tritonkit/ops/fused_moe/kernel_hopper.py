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
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, warpgroup_mma, warpgroup_mma_wait

from ... import _triton_compat
from .kernel import _grouped_tile

gluon_tma_load = _triton_compat.gluon_tma_load()

# the load warp (scalar work and TMA issues) and the second consumer warpgroup, a worker beside the default partition
LOAD_WARPS = gl.constexpr(1)
LOAD_REGS = gl.constexpr(32)
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
def _k_block(a_bufs, b_bufs, ready, empty, zero, hs_rows, ws_base, kb, stride_hsk, stride_wsn, WG: gl.constexpr,
             STAGES: gl.constexpr):  # fmt: skip
    """K block kb's dot (h's tile by the consumer's w2 tile) issued into a fresh float32 tile, and its scales."""
    s = kb % STAGES
    mbarrier.wait(ready.index(s), (kb // STAGES) & 1)
    b_tile = b_bufs.index(s).slice(WG * WG_N, WG_N).permute((1, 0))
    t = warpgroup_mma(a_bufs.index(s), b_tile, zero, use_acc=False, is_async=True)
    h_s = gl.load(hs_rows + kb * stride_hsk)
    w_s = gl.load(ws_base + kb * stride_wsn)
    t, _, _ = warpgroup_mma_wait(0, deps=(t, a_bufs.index(s), b_tile))
    # both consumers' arrives free the stage for the load warp
    mbarrier.arrive(empty.index(s), count=1)
    return t, h_s, w_s


@gluon.jit
def _k_step(a_bufs, b_bufs, ready, empty, zero, hs_rows, ws_base, kb, stride_hsk, stride_wsn, acc, t, h_s, w_s,
            WG: gl.constexpr, STAGES: gl.constexpr):  # fmt: skip
    """K block kb's dot issued, K block kb - 1's finished tile ``t`` added into ``acc`` scaled by its row scales and
    weight scale while it runs (the plain kernel's ``acc += dot * (a_s[:, None] * w_s)``), then kb's tile waited."""
    s = kb % STAGES
    mbarrier.wait(ready.index(s), (kb // STAGES) & 1)
    b_tile = b_bufs.index(s).slice(WG * WG_N, WG_N).permute((1, 0))
    t_next = warpgroup_mma(a_bufs.index(s), b_tile, zero, use_acc=False, is_async=True)
    h_s_next = gl.load(hs_rows + kb * stride_hsk)
    w_s_next = gl.load(ws_base + kb * stride_wsn)
    acc += t * (h_s[:, None] * w_s)
    t_next, _, _ = warpgroup_mma_wait(0, deps=(t_next, a_bufs.index(s), b_tile))
    mbarrier.arrive(empty.index(s), count=1)
    return acc, t_next, h_s_next, w_s_next


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

    # K block 0: issued and finished before the loop, which then always has the previous block's tile to scale (the
    # two float32 tiles trade places by register copies: unrolled by two to avoid them, the build spills)
    t, h_s, w_s = _k_block(a_bufs, b_bufs, ready, empty, zero, hs_rows, ws_base, 0, stride_hsk, stride_wsn, WG,
                           STAGES)  # fmt: skip
    acc = zero
    for kb in range(1, NK):
        acc, t, h_s, w_s = _k_step(a_bufs, b_bufs, ready, empty, zero, hs_rows, ws_base, kb, stride_hsk, stride_wsn,
                                   acc, t, h_s, w_s, WG, STAGES)  # fmt: skip
    acc += t * (h_s[:, None] * w_s)

    offs = pid_m * BLOCK_M + offs_m
    # sorted_ids holds max_padded entries, not a whole number of blocks: an idle last block reads none of them;
    # padding holds numel, and anything outside [0, numel) is masked (kernel._block_rows)
    slot = gl.load(sorted_ids_ptr + offs, mask=offs < num_post, other=numel).to(gl.int64)
    mask_m = (slot >= 0) & (slot < numel)
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
    num_post = gl.load(num_post_ptr)
    expert = gl.load(expert_ids_ptr + pid_m).to(gl.int64)
    # a block past num_tokens_post_padded, or of an expert not this rank's (-1, or out of range), has no work
    busy = (pid_m * BLOCK_M < num_post) & (expert >= 0) & (expert < num_experts)
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
