"""The prefill kernel for Hopper (sm_90) in Gluon: K/V pages through TMA, one load warp, two consumer warpgroups.

Same programs, tile bounds, masks, splits and epilogue as kernel._paged_attention_prefill_kernel, so the two are
interchangeable per launch (config.prefill_hopper chooses). What differs is how K/V reach the tensor cores:

- a worker warp (32 registers) walks the program's KV tiles and issues one TMA box a page run (``PAGE_ROWS`` keys
  x head_dim of one KV head, named by the block table) into a ring of ``STAGES`` K and V buffers, each signalled on
  its own mbarrier, so the score dot of a tile starts while its V is still in flight;
- the default partition (8 warps: two warpgroups of 64 query rows, up to 240 registers a thread) runs S = Q K^T
  from shared Q, the online softmax in registers, and O += P V with P as the register operand, then frees the
  stage. The 16-warp Triton kernel sits at a 128-register cap at head_dim 128 and spills in its KV loops
  (docs/notes/prefill-registers.md). With OVERLAP each warpgroup issues the next tile's score dot before this
  tile's softmax, so the tensor cores work while the exp2s run.

TMA writes shared memory in the async proxy, which is what wgmma reads: no proxy fence a tile (Triton 3.8 and 3.9
put one before every wgmma whose operands cp.async wrote; docs/notes/triton-versions-h200.md). Keys past seqlen_k in
the last tile come from whatever page the block table (or page 0) names: their scores are masked to -inf and their
V rows are zeroed in shared memory before the P x V dot (0 x NaN would otherwise reach the output).

Host side (api): each cache is viewed as 2D ``[num_blocks * block_size, num_kv_heads * head_dim]`` (the flash-attn
layout, heads and head_dim contiguous) under a TensorDescriptor with a ``[PAGE_ROWS, head_dim]`` box.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from ... import _triton_compat
from .kernel import _find_seq, _online_softmax, _out_scale, _prefill_key_tiles, _prefill_rows

gluon_tma_load = _triton_compat.gluon_tma_load()
gluon_barrier = _triton_compat.gluon_barrier()

# worker warps and their registers: one warp of scalar work. 8 x 240 + 4 x 32 registers a thread are the SM's 64K;
# at 24 Triton 3.9's build spills 8 values in the load loop (3.6 and 3.8 fit)
LOAD_WARPS = gl.constexpr(1)
LOAD_REGS = gl.constexpr(32)
# PINGPONG's second consumer warpgroup, a worker partition beside the default one (whose warps the launch names)
CONSUMER_WARPS = gl.constexpr(4)
CONSUMER_REGS = gl.constexpr(240)


@gluon.jit
def _page_row(bt_row, pos, seqlen_k, num_blocks, BLOCK_SIZE: gl.constexpr):
    """Cache row (page * BLOCK_SIZE + slot, int32) of key position ``pos``: the block table's page, read only below
    seqlen_k; a position at or past it, or an id outside [0, num_blocks), reads page 0 (its keys are masked)."""
    inside = pos < seqlen_k
    page = gl.load(bt_row + gl.where(inside, pos, 0) // BLOCK_SIZE)
    page = gl.where(inside & (page.to(gl.uint32, bitcast=True) < num_blocks), page, 0)
    return page * BLOCK_SIZE + pos % BLOCK_SIZE


@gluon.jit
def _tile_rows(
    bt_row, j, seqlen_k, num_blocks, BLOCK_N: gl.constexpr, BLOCK_SIZE: gl.constexpr, PAGE_ROWS: gl.constexpr
):
    """Tile j's cache rows, one a box (_page_row of each box's first key), as a vector every lane of the load warp
    holds whole: its block-table loads issue together, and a box's row is read out of it without a shuffle."""
    CHUNKS: gl.constexpr = BLOCK_N // PAGE_ROWS
    layout: gl.constexpr = gl.BlockedLayout([CHUNKS], [32], [1], [0])
    c = gl.arange(0, CHUNKS, layout=layout)
    return c, _page_row(bt_row, j * BLOCK_N + c * PAGE_ROWS, seqlen_k, num_blocks, BLOCK_SIZE)


@gluon.jit
def _box_row(
    c_idx, rows, c: gl.constexpr, bt_row, j, seqlen_k, num_blocks, BLOCK_N: gl.constexpr, BLOCK_SIZE: gl.constexpr,
    PAGE_ROWS: gl.constexpr, EARLY_PAGES: gl.constexpr,
):  # fmt: skip
    """Box c of tile j's cache row: read out of _tile_rows' vector (EARLY_PAGES), else loaded here."""
    if EARLY_PAGES:
        # rows are >= 0 (pages clamped into [0, num_blocks)): the max over the one lane that is c is that row
        return gl.max(gl.where(c_idx == c, rows, -1), axis=0)
    return _page_row(bt_row, j * BLOCK_N + c * PAGE_ROWS, seqlen_k, num_blocks, BLOCK_SIZE)


@gluon.jit
def _load_partition(
    k_desc,
    v_desc,
    k_bufs,
    v_bufs,
    k_ready,
    v_ready,
    k_empty,
    v_empty,
    bt_row,
    lo,
    hi,
    seqlen_k,
    num_blocks,
    col,
    BLOCK_N: gl.constexpr,
    BLOCK_SIZE: gl.constexpr,
    PAGE_ROWS: gl.constexpr,
    STAGES: gl.constexpr,
    EARLY_PAGES: gl.constexpr,
    it0,
):
    """The load warp: tiles [lo, hi) into the stage ring from its step ``it0`` on (the ring's steps before this
    program tile's, PERSISTENT), K then V, each waiting for its buffer to be freed.
    EARLY_PAGES: a tile's block-table entries are loaded together before the wait for its K buffer (their latency
    under the wait, read once for K and V); otherwise each box's entry is loaded where its TMA is issued."""
    tile_bytes: gl.constexpr = k_desc.block_type.nbytes * (BLOCK_N // PAGE_ROWS)
    for j in range(lo, hi):
        it = it0 + (j - lo)
        s = it % STAGES
        # a fresh mbarrier counts as having completed the phase before phase 0: the first STAGES waits pass
        free_phase = ((it // STAGES) & 1) ^ 1
        c_idx = 0
        rows = 0
        if EARLY_PAGES:
            c_idx, rows = _tile_rows(bt_row, j, seqlen_k, num_blocks, BLOCK_N, BLOCK_SIZE, PAGE_ROWS)
        mbarrier.wait(k_empty.index(s), free_phase)
        mbarrier.expect(k_ready.index(s), tile_bytes)
        for c in gl.static_range(BLOCK_N // PAGE_ROWS):
            row = _box_row(c_idx, rows, c, bt_row, j, seqlen_k, num_blocks, BLOCK_N, BLOCK_SIZE, PAGE_ROWS, EARLY_PAGES)
            gluon_tma_load(k_desc, [row, col], k_ready.index(s), k_bufs.index(s).slice(c * PAGE_ROWS, PAGE_ROWS))
        mbarrier.wait(v_empty.index(s), free_phase)
        mbarrier.expect(v_ready.index(s), tile_bytes)
        for c in gl.static_range(BLOCK_N // PAGE_ROWS):
            row = _box_row(c_idx, rows, c, bt_row, j, seqlen_k, num_blocks, BLOCK_N, BLOCK_SIZE, PAGE_ROWS, EARLY_PAGES)
            gluon_tma_load(v_desc, [row, col], v_ready.index(s), v_bufs.index(s).slice(c * PAGE_ROWS, PAGE_ROWS))


@gluon.jit
def _snake_tile(band, nprog):
    """The tile a persistent program takes in ``band`` (its band-th round over the grid of ``nprog`` programs):
    ``band * nprog + program_id(0)`` on even bands, mirrored on odd ones. The tiles come heaviest first, so each
    program's sum over two bands is about the same whichever program it is (in grid order, program 0 would take
    the heaviest tile of every band)."""
    c = gl.program_id(0)
    # >= 0 as program_id < nprog; the maximum says so to the checker's sign analysis
    return gl.maximum(band * nprog + c + (band & 1) * (nprog - 1 - 2 * c), 0)


# HANDOFF: a program tile's bounds as the load warp publishes them to the consumers (one int32 each; t0 is int64
# where _tile_bounds computes it, and below 2^31 as a token index)
INFO_FIELDS = gl.constexpr(16)
INFO_SLOTS = gl.constexpr(2)


@gluon.jit
def _publish_tile(
    info, info_ready, info_empty, k, pid_kvh, q_start, q_len, t0, ctx, seqlen_k, lo, a, b, hi, x, split
):  # fmt: skip
    """The load warp's k-th tile's bounds into info slot k % INFO_SLOTS, once both consumer partitions have read
    what that slot held before, then signalled on the slot's ready barrier."""
    slot = k % INFO_SLOTS
    mbarrier.wait(info_empty.index(slot), ((k // INFO_SLOTS) & 1) ^ 1)
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
    i = gl.arange(0, INFO_FIELDS, layout=layout)
    v = gl.where(i == 0, pid_kvh.to(gl.int32), 0)
    v = gl.where(i == 1, q_start.to(gl.int32), v)
    v = gl.where(i == 2, q_len.to(gl.int32), v)
    v = gl.where(i == 3, t0.to(gl.int32), v)
    v = gl.where(i == 4, ctx.to(gl.int32), v)
    v = gl.where(i == 5, seqlen_k.to(gl.int32), v)
    v = gl.where(i == 6, lo.to(gl.int32), v)
    v = gl.where(i == 7, a.to(gl.int32), v)
    v = gl.where(i == 8, b.to(gl.int32), v)
    v = gl.where(i == 9, hi.to(gl.int32), v)
    v = gl.where(i == 10, x.to(gl.int32), v)
    v = gl.where(i == 11, split.to(gl.int32), v)
    info.index(slot).store(v)
    # every lane's stores before the one arrive (release: the consumers' wait acquires them)
    gluon_barrier()
    mbarrier.arrive(info_ready.index(slot), count=1)


@gluon.jit
def _field(v, i, n: gl.constexpr):
    """Field n of a published tile: every thread holds all of them, so a reduction within the thread."""
    return gl.sum(gl.where(i == n, v, 0), axis=0)


@gluon.jit
def _take_tile(info, info_ready, info_empty, k, num_warps: gl.constexpr):
    """A consumer partition's k-th tile as the load warp published it: (pid_kvh, q_start, q_len, t0 as int64, ctx,
    seqlen_k, lo, a, b, hi, x, split); the slot is freed once every warp of the partition has read it. DYNAMIC's
    last tile has q_len -1."""
    slot = k % INFO_SLOTS
    mbarrier.wait(info_ready.index(slot), (k // INFO_SLOTS) & 1)
    layout: gl.constexpr = gl.BlockedLayout([INFO_FIELDS], [32], [num_warps], [0])
    v = info.index(slot).load(layout)
    gluon_barrier()
    mbarrier.arrive(info_empty.index(slot), count=1)
    i = gl.arange(0, INFO_FIELDS, layout=layout)
    return (
        _field(v, i, 0), _field(v, i, 1), _field(v, i, 2), _field(v, i, 3).to(gl.int64), _field(v, i, 4),
        _field(v, i, 5), _field(v, i, 6), _field(v, i, 7), _field(v, i, 8), _field(v, i, 9), _field(v, i, 10),
        _field(v, i, 11),
    )  # fmt: skip


@gluon.jit
def _tile_bounds(
    x, split, grid0, cu_seqlens_q_ptr, seqused_k_ptr, block_table_ptr, num_seqs, num_kv_heads, bt_width, num_tokens,
    win_left, win_right, stride_bt, num_splits, decode_max_q, BLOCK_Q: gl.constexpr, BLOCK_N: gl.constexpr,
    BLOCK_SIZE: gl.constexpr, LIMIT_LEFT: gl.constexpr, LIMIT_RIGHT: gl.constexpr, SPLIT: gl.constexpr,
):  # fmt: skip
    """Program tile (x, split) of kernel._paged_attention_prefill_kernel's grid (``grid0`` programs along x, taken
    from the last one down), found and bounded as that kernel does: (KV head, block-table row, the sequence's first
    query row, its query length, the tile's first token, context length, key count, key tiles lo <= a <= b <= hi)."""
    pid = grid0 - 1 - x
    pid_q = pid // num_kv_heads
    pid_kvh = pid % num_kv_heads
    seq = _find_seq(cu_seqlens_q_ptr, pid_q, num_seqs, BLOCK_Q)
    bt_row = block_table_ptr + seq.to(gl.int64) * stride_bt
    seqlen_k = gl.load(seqused_k_ptr + seq)
    q_start = gl.load(cu_seqlens_q_ptr + seq)
    q_end = gl.load(cu_seqlens_q_ptr + seq + 1)
    t0, q_len, seqlen_k = _prefill_rows(
        pid_q, seq, q_start, q_end, seqlen_k, num_tokens, decode_max_q, bt_width, BLOCK_Q, BLOCK_SIZE
    )
    ctx = seqlen_k - q_len
    lo, a, b, hi = _prefill_key_tiles(
        t0, q_len, ctx, seqlen_k, win_left, win_right, num_splits, split, BLOCK_Q, BLOCK_N, LIMIT_LEFT, LIMIT_RIGHT,
        SPLIT,
    )  # fmt: skip
    return pid_kvh, bt_row, q_start, q_len, t0, ctx, seqlen_k, lo, a, b, hi


@gluon.jit
def _load_persistent(
    k_desc, v_desc, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, cu_seqlens_q_ptr, seqused_k_ptr,
    block_table_ptr, num_seqs, num_kv_heads, bt_width, num_tokens, num_blocks, win_left, win_right, stride_bt,
    num_splits, decode_max_q, num_tiles, grid0, HEAD_DIM: gl.constexpr, BLOCK_Q: gl.constexpr, BLOCK_N: gl.constexpr,
    BLOCK_SIZE: gl.constexpr, PAGE_ROWS: gl.constexpr, STAGES: gl.constexpr, LIMIT_LEFT: gl.constexpr,
    LIMIT_RIGHT: gl.constexpr, SPLIT: gl.constexpr, EARLY_PAGES: gl.constexpr, HANDOFF: gl.constexpr, info,
    info_ready, info_empty, DYNAMIC: gl.constexpr, tile_ctr_ptr,
):  # fmt: skip
    """PERSISTENT's load warp: _load_partition over the program's tiles (_snake_tile), one stage ring across them,
    so a tile's first K/V loads run under the previous tile's last steps and epilogue. HANDOFF: it publishes each
    tile's bounds to the consumers (_publish_tile) before its loads. DYNAMIC (with HANDOFF): the program's tiles
    are those it takes from the launch's counter (``tile_ctr_ptr``, zero at the launch), heaviest first across the
    grid, the empty ones (no query row: a decode sequence's slot, the grid's slack) skipped unpublished; a tile of
    q_len -1 ends the consumers' loop."""
    nprog = gl.num_programs(0)
    it0 = 0
    k = 0
    if DYNAMIC:
        # the counter starts at 0 and only grows (by num_tiles + nprog a launch): the maxima say so to the checker's
        # sign analysis
        t = gl.maximum(gl.atomic_add(tile_ctr_ptr, 1), 0)
        while t < num_tiles:
            x = t % grid0
            split = t // grid0
            pid_kvh, bt_row, q_start, q_len, t0, ctx, seqlen_k, lo, a, b, hi = _tile_bounds(
                x, split, grid0, cu_seqlens_q_ptr, seqused_k_ptr, block_table_ptr, num_seqs, num_kv_heads, bt_width,
                num_tokens, win_left, win_right, stride_bt, num_splits, decode_max_q, BLOCK_Q, BLOCK_N, BLOCK_SIZE,
                LIMIT_LEFT, LIMIT_RIGHT, SPLIT,
            )  # fmt: skip
            if q_len > 0:
                # k, it0 >= 0 (counts): the maxima say so to the checker's sign analysis
                _publish_tile(
                    info, info_ready, info_empty, gl.maximum(k, 0), pid_kvh, q_start, q_len, t0, ctx, seqlen_k, lo,
                    a, b, hi, x, split,
                )  # fmt: skip
                k += 1
                _load_partition(
                    k_desc, v_desc, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, bt_row, lo, hi, seqlen_k,
                    num_blocks, pid_kvh * HEAD_DIM, BLOCK_N, BLOCK_SIZE, PAGE_ROWS, STAGES, EARLY_PAGES,
                    gl.maximum(it0, 0),
                )  # fmt: skip
                it0 += hi - lo
            t = gl.maximum(gl.atomic_add(tile_ctr_ptr, 1), 0)
        z = t * 0
        _publish_tile(info, info_ready, info_empty, gl.maximum(k, 0), z, z, z - 1, z, z, z, z, z, z, z, z, z)
        return
    for band in range(0, (num_tiles + nprog - 1) // nprog):
        t = _snake_tile(band, nprog)
        if t < num_tiles:
            pid_kvh, bt_row, q_start, q_len, t0, ctx, seqlen_k, lo, a, b, hi = _tile_bounds(
                t % grid0, t // grid0, grid0, cu_seqlens_q_ptr, seqused_k_ptr, block_table_ptr, num_seqs,
                num_kv_heads, bt_width, num_tokens, win_left, win_right, stride_bt, num_splits, decode_max_q, BLOCK_Q,
                BLOCK_N, BLOCK_SIZE, LIMIT_LEFT, LIMIT_RIGHT, SPLIT,
            )  # fmt: skip
            if HANDOFF:
                # k >= 0 (a count): the maximum says so to the checker's sign analysis
                _publish_tile(
                    info, info_ready, info_empty, gl.maximum(k, 0), pid_kvh, q_start, q_len, t0, ctx, seqlen_k, lo,
                    a, b, hi, t % grid0, t // grid0,
                )  # fmt: skip
                k += 1
            # it0 >= 0 (a sum of hi - lo >= 0): the maximum says so to the checker's sign analysis, as below
            _load_partition(
                k_desc, v_desc, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, bt_row, lo, hi, seqlen_k,
                num_blocks, pid_kvh * HEAD_DIM, BLOCK_N, BLOCK_SIZE, PAGE_ROWS, STAGES, EARLY_PAGES, gl.maximum(it0, 0),
            )  # fmt: skip
            it0 += hi - lo


@gluon.jit
def _softmax_step(
    s,
    m_i,
    l_i,
    j,
    qpos,
    seqlen_k,
    win_left,
    win_right,
    qk_scale,
    softcap_in,
    softcap_out,
    BLOCK_N: gl.constexpr,
    HEAD_DIM: gl.constexpr,
    MASKED: gl.constexpr,
    LIMIT_LEFT: gl.constexpr,
    LIMIT_RIGHT: gl.constexpr,
    SOFTCAP: gl.constexpr,
    num_warps: gl.constexpr,
):
    """kernel._online_softmax on tile j's finished scores ``s``, alpha in the accumulator's row layout."""
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BLOCK_N, 16]
    )
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, HEAD_DIM, 16]
    )
    offs_n = j * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
    p, m_new, l_i, alpha = _online_softmax(
        s, m_i, l_i, offs_n, qpos, seqlen_k, win_left, win_right, qk_scale, softcap_in, softcap_out, MASKED,
        LIMIT_LEFT, LIMIT_RIGHT, SOFTCAP,
    )  # fmt: skip
    return p, m_new, l_i, gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))


@gluon.jit
def _p_operand(p, dtype: gl.constexpr, HEAD_DIM: gl.constexpr, num_warps: gl.constexpr):
    """P in the input dtype as the P x V dot's register operand."""
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, HEAD_DIM, 16]
    )
    return gl.convert_layout(p.to(dtype), gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2))


@gluon.jit
def _zero_rows_past(v_buf, j, seqlen_k, BLOCK_N: gl.constexpr, num_warps: gl.constexpr):
    """Zero the rows of tile j's V buffer at keys past seqlen_k (another page's, or stale, values: 0 x NaN would
    reach the output through the P x V dot), then order the stores before the async proxy's reads."""
    v_rows: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [num_warps, 1], [1, 0])
    offs_r = j * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, v_rows))
    v = v_buf.load(v_rows)
    v_buf.store(gl.where((offs_r < seqlen_k)[:, None], v, gl.zeros_like(v)))
    fence_async_shared()
    gluon_barrier()


@gluon.jit
def _attend_tile(
    acc,
    m_i,
    l_i,
    s_cur,
    j,
    lo,
    q_smem,
    k_bufs,
    v_bufs,
    k_ready,
    v_ready,
    k_empty,
    v_empty,
    qpos,
    seqlen_k,
    win_left,
    win_right,
    qk_scale,
    softcap_in,
    softcap_out,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    HEAD_DIM: gl.constexpr,
    STAGES: gl.constexpr,
    MASKED: gl.constexpr,
    LIMIT_LEFT: gl.constexpr,
    LIMIT_RIGHT: gl.constexpr,
    SOFTCAP: gl.constexpr,
    OVERLAP: gl.constexpr,
    ISSUE_NEXT: gl.constexpr,
    num_warps: gl.constexpr,
):
    """One online-softmax step over keys [j * BLOCK_N, (j + 1) * BLOCK_N) (_softmax_step). OVERLAP: ``s_cur``
    holds this tile's finished scores, and (ISSUE_NEXT: every tile but the program's last) the next tile's score dot
    runs on the tensor cores while this tile's softmax runs, returned finished as the next step's ``s_cur``;
    otherwise S is computed and waited here."""
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BLOCK_N, 16]
    )
    it = j - lo
    s_idx = it % STAGES
    phase = (it // STAGES) & 1
    k_buf = k_bufs.index(s_idx)
    v_buf = v_bufs.index(s_idx)

    if OVERLAP:
        s = s_cur
        # the previous step's wait finished this tile's score dot
        mbarrier.arrive(k_empty.index(s_idx), count=1)
        s_next = s_cur
        if ISSUE_NEXT:
            n_idx = (it + 1) % STAGES
            mbarrier.wait(k_ready.index(n_idx), ((it + 1) // STAGES) & 1)
            s_next = warpgroup_mma(
                q_smem, k_bufs.index(n_idx).permute((1, 0)), gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout),
                use_acc=False, is_async=True,
            )  # fmt: skip
    else:
        mbarrier.wait(k_ready.index(s_idx), phase)
        s = warpgroup_mma(
            q_smem, k_buf.permute((1, 0)), gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout), use_acc=False,
            is_async=True,
        )  # fmt: skip
        s, _, _ = warpgroup_mma_wait(0, deps=(s, q_smem, k_buf))
        # every consumer warp is past its wait (the arrive is one thread's, after a partition barrier)
        mbarrier.arrive(k_empty.index(s_idx), count=1)
        s_next = s

    p, m_new, l_i, alpha = _softmax_step(
        s, m_i, l_i, j, qpos, seqlen_k, win_left, win_right, qk_scale, softcap_in, softcap_out, BLOCK_N, HEAD_DIM,
        MASKED, LIMIT_LEFT, LIMIT_RIGHT, SOFTCAP, num_warps,
    )  # fmt: skip
    acc = acc * alpha[:, None]
    p_op = _p_operand(p, q_smem.dtype, HEAD_DIM, num_warps)

    mbarrier.wait(v_ready.index(s_idx), phase)
    if MASKED:
        if (j + 1) * BLOCK_N > seqlen_k:
            _zero_rows_past(v_buf, j, seqlen_k, BLOCK_N, num_warps)
    acc = warpgroup_mma(p_op, v_buf, acc, is_async=True)
    # with OVERLAP this also finishes the next tile's score dot, issued before the softmax
    acc, s_next, _ = warpgroup_mma_wait(0, deps=(acc, s_next, v_buf))
    mbarrier.arrive(v_empty.index(s_idx), count=1)
    return acc, m_new, l_i, s_next


@gluon.jit
def _pingpong_tile(
    acc,
    m_i,
    l_i,
    p_op,
    j,
    it,
    q_smem,
    k_bufs,
    v_bufs,
    k_ready,
    v_ready,
    k_empty,
    v_empty,
    my_turn,
    next_turn,
    qpos,
    seqlen_k,
    win_left,
    win_right,
    qk_scale,
    softcap_in,
    softcap_out,
    FIRST_WG: gl.constexpr,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    HEAD_DIM: gl.constexpr,
    STAGES: gl.constexpr,
    MASKED: gl.constexpr,
    LIMIT_LEFT: gl.constexpr,
    LIMIT_RIGHT: gl.constexpr,
    SOFTCAP: gl.constexpr,
    TURNS: gl.constexpr,
    WITH_PV: gl.constexpr,
    num_warps: gl.constexpr,
):
    """Step j (the program's it-th tile) of one warpgroup partition in FA3's order: on its turn it issues tile j's
    score dot and (WITH_PV: every step but the program's first) tile j - 1's P x V, hands the turn to the other
    warpgroup, runs tile j's softmax, and scales the accumulator by tile j's alpha once P x V is done. ptxas waits for
    both dots before the exp2s (docs/notes/prefill-pingpong.md), so what runs under a warpgroup's softmax is the other
    warpgroup's dots: TURNS makes them alternate (``my_turn`` / ``next_turn`` mbarriers, one arrive a step each)."""
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BLOCK_N, 16]
    )
    s_idx = it % STAGES
    # the step's tiles first, then the turn: a load still in flight keeps only this warpgroup waiting
    mbarrier.wait(k_ready.index(s_idx), (it // STAGES) & 1)
    if WITH_PV:
        p_idx = (it - 1) % STAGES
        mbarrier.wait(v_ready.index(p_idx), ((it - 1) // STAGES) & 1)
    if TURNS:
        # the first warpgroup's first wait passes on the fresh barrier (the phase before phase 0 counts as done);
        # from then on each waits for the other's arrive of the step before
        if FIRST_WG:
            mbarrier.wait(my_turn, (it & 1) ^ 1)
        else:
            mbarrier.wait(my_turn, it & 1)
    k_buf = k_bufs.index(s_idx)
    s = warpgroup_mma(
        q_smem, k_buf.permute((1, 0)), gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout), use_acc=False,
        is_async=True,
    )  # fmt: skip
    if WITH_PV:
        v_buf = v_bufs.index(p_idx)
        acc = warpgroup_mma(p_op, v_buf, acc, is_async=True)
    if TURNS:
        mbarrier.arrive(next_turn, count=1)
    # the score dot was issued first: with P x V behind it, one group left outstanding means it is done
    s, _, _ = warpgroup_mma_wait(1 if WITH_PV else 0, deps=(s, q_smem, k_buf))
    mbarrier.arrive(k_empty.index(s_idx), count=1)
    p, m_new, l_i, alpha = _softmax_step(
        s, m_i, l_i, j, qpos, seqlen_k, win_left, win_right, qk_scale, softcap_in, softcap_out, BLOCK_N, HEAD_DIM,
        MASKED, LIMIT_LEFT, LIMIT_RIGHT, SOFTCAP, num_warps,
    )  # fmt: skip
    p_new = _p_operand(p, q_smem.dtype, HEAD_DIM, num_warps)
    if WITH_PV:
        acc, _ = warpgroup_mma_wait(0, deps=(acc, v_buf))
        mbarrier.arrive(v_empty.index(p_idx), count=1)
    acc = acc * alpha[:, None]
    return acc, m_new, l_i, p_new


@gluon.jit
def _pingpong_last(
    acc,
    p_op,
    j,
    it,
    v_bufs,
    v_ready,
    v_empty,
    v_fixed,
    fix_phase,
    seqlen_k,
    FIRST_WG: gl.constexpr,
    BLOCK_N: gl.constexpr,
    STAGES: gl.constexpr,
    num_warps: gl.constexpr,
):
    """The program tile's last P x V (tile j, the ring's it-th step). On the tile that crosses seqlen_k the first
    warpgroup zeroes the V rows past it and completes phase ``fix_phase`` of ``v_fixed``; the second waits for that
    before its dot (one writer: no race).
    Only the last tile can cross seqlen_k: _key_tiles' hi is at most cdiv(seqlen_k, BLOCK_N), and a split's range
    ends at or before it, so the tiles before it (_pingpong_tile's P x V) hold no key past seqlen_k."""
    s_idx = it % STAGES
    v_buf = v_bufs.index(s_idx)
    mbarrier.wait(v_ready.index(s_idx), (it // STAGES) & 1)
    if (j + 1) * BLOCK_N > seqlen_k:
        if FIRST_WG:
            _zero_rows_past(v_buf, j, seqlen_k, BLOCK_N, num_warps)
            mbarrier.arrive(v_fixed, count=1)
        else:
            mbarrier.wait(v_fixed, fix_phase)
    acc = warpgroup_mma(p_op, v_buf, acc, is_async=True)
    acc, _ = warpgroup_mma_wait(0, deps=(acc, v_buf))
    mbarrier.arrive(v_empty.index(s_idx), count=1)
    return acc


@gluon.jit
def _attend_rows(
    q_ptr,
    out_ptr,
    part_acc_ptr,
    part_m_ptr,
    part_l_ptr,
    sinks_ptr,
    q_smem,
    k_bufs,
    v_bufs,
    k_ready,
    v_ready,
    k_empty,
    v_empty,
    my_turn,
    next_turn,
    v_fixed,
    q_start,
    q_len,
    t0,
    ctx,
    pid_kvh,
    lo,
    a,
    b,
    hi,
    seqlen_k,
    win_left,
    win_right,
    qk_scale,
    softcap_in,
    softcap_out,
    stride_qt,
    stride_qh,
    stride_ot,
    stride_oh,
    num_splits,
    it0,
    fix_bits,
    prog_x,
    split_id,
    GROUP: gl.constexpr,
    HEAD_DIM: gl.constexpr,
    BLOCK_M: gl.constexpr,
    ROW0: gl.constexpr,
    ROWS: gl.constexpr,
    BLOCK_Q: gl.constexpr,
    BLOCK_N: gl.constexpr,
    STAGES: gl.constexpr,
    LIMIT_LEFT: gl.constexpr,
    LIMIT_RIGHT: gl.constexpr,
    SOFTCAP: gl.constexpr,
    SINKS: gl.constexpr,
    SPLIT: gl.constexpr,
    OVERLAP: gl.constexpr,
    PINGPONG: gl.constexpr,
    TURNS: gl.constexpr,
    PERSISTENT: gl.constexpr,
    num_warps: gl.constexpr,
):
    """Consumer warps of rows [ROW0, ROW0 + BLOCK_M) of a ROWS-row program tile: their Q rows into shared
    memory, tiles [lo, a) and [b, hi) masked, [a, b) not, then their output rows (or the split's partials, at
    program tile (``prog_x``, ``split_id``) with PERSISTENT, else at the program's ids). Without PINGPONG one
    partition of two warpgroups holds all rows; with it each of two 4-warp partitions holds 64 rows and runs
    _pingpong_tile's order, its steps the ring's from ``it0`` on. ``v_fixed``: PERSISTENT's STAGES mbarriers (a
    stage's for a last tile in that stage; ``fix_bits``' bit s counts stage s's completed phases mod 2), else one.
    Returns fix_bits after this tile's."""
    gl.static_assert(not PERSISTENT or PINGPONG, "PERSISTENT runs the ping-pong order")
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BLOCK_N, 16]
    )
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, HEAD_DIM, 16]
    )
    # 16-byte vectors along head_dim for the Q gather and the output rows
    io_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [num_warps, 1], [1, 0])
    FIRST_WG: gl.constexpr = ROW0 == 0

    offs_m = ROW0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, io_layout))
    offs_d = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, io_layout))
    tok = t0 + offs_m // GROUP
    head = pid_kvh * GROUP + offs_m % GROUP
    mask_m = (offs_m < BLOCK_Q * GROUP) & (tok < q_len)
    q_rows = (q_start + tok) * stride_qt + head.to(gl.int64) * stride_qh
    q = gl.load(q_ptr + q_rows[:, None] + offs_d[None, :], mask=mask_m[:, None], other=0.0)
    q_smem.store(q)
    # the generic-proxy stores, then every warp's, before a wgmma of this partition reads Q
    fence_async_shared()
    gluon_barrier()

    offs_ms = ROW0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
    qpos = (ctx + t0 + offs_ms // GROUP).to(gl.int32)
    acc = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, o_layout)
    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, gl.SliceLayout(1, s_layout))
    l_i = gl.zeros([BLOCK_M], gl.float32, gl.SliceLayout(1, s_layout))
    if PINGPONG:
        # step lo issues no P x V; steps lo + 1 .. hi - 1 each issue the step before's; the last one's runs after
        p_op = gl.zeros(
            [BLOCK_M, BLOCK_N], q_smem.dtype, gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
        )
        # counted from the program's first tile (it = j - lo) so that the ring's indices are visibly >= 0 (the
        # last tile's max(n - 1, 0) is n - 1 where it runs, lo < hi)
        n = hi - lo
        if lo < hi:
            acc, m_i, l_i, p_op = _pingpong_tile(
                acc, m_i, l_i, p_op, lo, it0, q_smem, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, my_turn,
                next_turn, qpos, seqlen_k, win_left, win_right, qk_scale, softcap_in, softcap_out, FIRST_WG, BLOCK_M,
                BLOCK_N, HEAD_DIM, STAGES, True, LIMIT_LEFT, LIMIT_RIGHT, SOFTCAP, TURNS, False, num_warps,
            )  # fmt: skip
        for it in range(1, a - lo):
            acc, m_i, l_i, p_op = _pingpong_tile(
                acc, m_i, l_i, p_op, lo + it, it0 + it, q_smem, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty,
                my_turn, next_turn, qpos, seqlen_k, win_left, win_right, qk_scale, softcap_in, softcap_out, FIRST_WG,
                BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, True, LIMIT_LEFT, LIMIT_RIGHT, SOFTCAP, TURNS, True, num_warps,
            )  # fmt: skip
        for it in range(gl.maximum(a - lo, 1), b - lo):
            acc, m_i, l_i, p_op = _pingpong_tile(
                acc, m_i, l_i, p_op, lo + it, it0 + it, q_smem, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty,
                my_turn, next_turn, qpos, seqlen_k, win_left, win_right, qk_scale, softcap_in, softcap_out, FIRST_WG,
                BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, False, LIMIT_LEFT, LIMIT_RIGHT, SOFTCAP, TURNS, True, num_warps,
            )  # fmt: skip
        for it in range(gl.maximum(b - lo, 1), n):
            acc, m_i, l_i, p_op = _pingpong_tile(
                acc, m_i, l_i, p_op, lo + it, it0 + it, q_smem, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty,
                my_turn, next_turn, qpos, seqlen_k, win_left, win_right, qk_scale, softcap_in, softcap_out, FIRST_WG,
                BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, True, LIMIT_LEFT, LIMIT_RIGHT, SOFTCAP, TURNS, True, num_warps,
            )  # fmt: skip
        if lo < hi:
            # the ring's stage of the last tile; only a tile that crosses seqlen_k completes a phase of its barrier
            if PERSISTENT:
                # it0 >= 0 and n >= 1 here: the ring's last step, as a maximum the checker's sign analysis reads
                last_it = gl.maximum(it0 + n - 1, 0)
                s_last = last_it % STAGES
                acc = _pingpong_last(
                    acc, p_op, hi - 1, last_it, v_bufs, v_ready, v_empty, v_fixed.index(s_last),
                    (fix_bits >> s_last) & 1, seqlen_k, FIRST_WG, BLOCK_N, STAGES, num_warps,
                )  # fmt: skip
                fix_bits = fix_bits ^ ((hi * BLOCK_N > seqlen_k).to(gl.int32) << s_last)
            else:
                acc = _pingpong_last(
                    acc, p_op, hi - 1, gl.maximum(n - 1, 0), v_bufs, v_ready, v_empty, v_fixed, 0, seqlen_k,
                    FIRST_WG, BLOCK_N, STAGES, num_warps,
                )  # fmt: skip
    else:
        s_cur = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)
        if OVERLAP:
            # the first tile's scores, before the loop hands each step the next tile's
            if lo < hi:
                mbarrier.wait(k_ready.index(0), 0)
                s_cur = warpgroup_mma(q_smem, k_bufs.index(0).permute((1, 0)), s_cur, use_acc=False, is_async=True)
                s_cur, _ = warpgroup_mma_wait(0, deps=(s_cur, k_bufs.index(0)))
        # tiles [lo, a) and [b, hi) masked, [a, b) not. OVERLAP: every tile but the last issues the next one's score
        # dot; the last runs after the loops, masked (a superset of the math) and issuing none
        a_end = a
        b_end = b
        last = hi
        if OVERLAP:
            last = gl.maximum(hi - 1, lo)
            a_end = gl.minimum(a, last)
            b_end = gl.minimum(b, last)
        for j in range(lo, a_end):
            acc, m_i, l_i, s_cur = _attend_tile(
                acc, m_i, l_i, s_cur, j, lo, q_smem, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, qpos,
                seqlen_k, win_left, win_right, qk_scale, softcap_in, softcap_out, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES,
                True, LIMIT_LEFT, LIMIT_RIGHT, SOFTCAP, OVERLAP, OVERLAP, num_warps,
            )  # fmt: skip
        for j in range(a, b_end):
            acc, m_i, l_i, s_cur = _attend_tile(
                acc, m_i, l_i, s_cur, j, lo, q_smem, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, qpos,
                seqlen_k, win_left, win_right, qk_scale, softcap_in, softcap_out, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES,
                False, LIMIT_LEFT, LIMIT_RIGHT, SOFTCAP, OVERLAP, OVERLAP, num_warps,
            )  # fmt: skip
        for j in range(b, last):
            acc, m_i, l_i, s_cur = _attend_tile(
                acc, m_i, l_i, s_cur, j, lo, q_smem, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, qpos,
                seqlen_k, win_left, win_right, qk_scale, softcap_in, softcap_out, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES,
                True, LIMIT_LEFT, LIMIT_RIGHT, SOFTCAP, OVERLAP, OVERLAP, num_warps,
            )  # fmt: skip
        if OVERLAP:
            if lo < hi:
                acc, m_i, l_i, s_cur = _attend_tile(
                    acc, m_i, l_i, s_cur, last, lo, q_smem, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, qpos,
                    seqlen_k, win_left, win_right, qk_scale, softcap_in, softcap_out, BLOCK_M, BLOCK_N, HEAD_DIM,
                    STAGES, True, LIMIT_LEFT, LIMIT_RIGHT, SOFTCAP, True, False, num_warps,
                )  # fmt: skip

    m_o = gl.convert_layout(m_i, gl.SliceLayout(1, o_layout))
    l_o = gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))
    offs_mo = ROW0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, o_layout))
    offs_do = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
    tok_o = t0 + offs_mo // GROUP
    head_o = pid_kvh * GROUP + offs_mo % GROUP
    mask_o = (offs_mo < BLOCK_Q * GROUP) & (tok_o < q_len)
    if SPLIT:
        if PERSISTENT:
            row = (prog_x.to(gl.int64) * num_splits + split_id) * ROWS + offs_mo
        else:
            row = (gl.program_id(0).to(gl.int64) * num_splits + gl.program_id(1)) * ROWS + offs_mo
        gl.store(part_m_ptr + row, m_o, mask=mask_o)
        gl.store(part_l_ptr + row, l_o, mask=mask_o)
        gl.store(part_acc_ptr + row[:, None] * HEAD_DIM + offs_do[None, :], acc, mask=mask_o[:, None])
    else:
        # no fp8 cache here: the value-scale pointer is never read
        o = acc * _out_scale(m_o, l_o, sinks_ptr, head_o, sinks_ptr, SINKS, False)[:, None]
        o_rows = (q_start + tok_o) * stride_ot + head_o.to(gl.int64) * stride_oh
        gl.store(out_ptr + o_rows[:, None] + offs_do[None, :], o.to(out_ptr.dtype.element_ty), mask=mask_o[:, None])
    return fix_bits


@gluon.jit
def _attend_partition(
    q_ptr, out_ptr, part_acc_ptr, part_m_ptr, part_l_ptr, sinks_ptr, q_smem, k_bufs, v_bufs, k_ready, v_ready,
    k_empty, v_empty, my_turn, next_turn, v_fixed, q_start, q_len, t0, ctx, pid_kvh, lo, a, b, hi, seqlen_k, win_left,
    win_right, qk_scale, softcap_in, softcap_out, stride_qt, stride_qh, stride_ot, stride_oh, num_splits,
    GROUP: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, ROW0: gl.constexpr, ROWS: gl.constexpr,
    BLOCK_Q: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, LIMIT_LEFT: gl.constexpr,
    LIMIT_RIGHT: gl.constexpr, SOFTCAP: gl.constexpr, SINKS: gl.constexpr, SPLIT: gl.constexpr, OVERLAP: gl.constexpr,
    PINGPONG: gl.constexpr, TURNS: gl.constexpr, num_warps: gl.constexpr,
):  # fmt: skip
    """A consumer partition of one program tile (the program's own): _attend_rows from the ring's first step, with
    ``v_fixed`` one mbarrier (a one-entry ring)."""
    _attend_rows(
        q_ptr, out_ptr, part_acc_ptr, part_m_ptr, part_l_ptr, sinks_ptr, q_smem, k_bufs, v_bufs, k_ready, v_ready,
        k_empty, v_empty, my_turn, next_turn, v_fixed, q_start, q_len, t0, ctx, pid_kvh, lo, a, b, hi, seqlen_k,
        win_left, win_right, qk_scale, softcap_in, softcap_out, stride_qt, stride_qh, stride_ot, stride_oh, num_splits,
        0, 0, 0, 0, GROUP, HEAD_DIM, BLOCK_M, ROW0, ROWS, BLOCK_Q, BLOCK_N, STAGES, LIMIT_LEFT, LIMIT_RIGHT, SOFTCAP,
        SINKS, SPLIT, OVERLAP, PINGPONG, TURNS, False, num_warps,
    )  # fmt: skip


@gluon.jit
def _attend_persistent(
    q_ptr, out_ptr, part_acc_ptr, part_m_ptr, part_l_ptr, sinks_ptr, q_smem, k_bufs, v_bufs, k_ready, v_ready,
    k_empty, v_empty, my_turn, next_turn, v_fixed, cu_seqlens_q_ptr, seqused_k_ptr, block_table_ptr, num_seqs,
    num_kv_heads, bt_width, num_tokens, win_left, win_right, qk_scale, softcap_in, softcap_out, stride_qt, stride_qh,
    stride_ot, stride_oh, stride_bt, num_splits, decode_max_q, num_tiles, grid0, GROUP: gl.constexpr,
    HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, ROW0: gl.constexpr, ROWS: gl.constexpr, BLOCK_Q: gl.constexpr,
    BLOCK_N: gl.constexpr, BLOCK_SIZE: gl.constexpr, STAGES: gl.constexpr, LIMIT_LEFT: gl.constexpr,
    LIMIT_RIGHT: gl.constexpr, SOFTCAP: gl.constexpr, SINKS: gl.constexpr, SPLIT: gl.constexpr, TURNS: gl.constexpr,
    HANDOFF: gl.constexpr, info, info_ready, info_empty, DYNAMIC: gl.constexpr, num_warps: gl.constexpr,
):  # fmt: skip
    """PERSISTENT's consumer partition (ping-pong): _attend_rows over the program's tiles in _load_persistent's
    order, the ring's steps and the V-fix barriers' phases carried from tile to tile. HANDOFF: each tile's bounds
    come from the load warp (_take_tile), which found them ahead, instead of this partition's own chain of loads
    (the sequence's binary search, its lengths) before the tile's Q. DYNAMIC: the tiles the load warp took from
    the launch's counter, in its order, until one of q_len -1."""
    nprog = gl.num_programs(0)
    it0 = 0
    fix_bits = 0
    k = 0
    if DYNAMIC:
        pid_kvh, q_start, q_len, t0, ctx, seqlen_k, lo, a, b, hi, x, split = _take_tile(
            info, info_ready, info_empty, 0, num_warps
        )
        while q_len >= 0:
            fix_bits = _attend_rows(
                q_ptr, out_ptr, part_acc_ptr, part_m_ptr, part_l_ptr, sinks_ptr, q_smem, k_bufs, v_bufs, k_ready,
                v_ready, k_empty, v_empty, my_turn, next_turn, v_fixed, q_start, q_len, t0, ctx, pid_kvh, lo, a, b, hi,
                seqlen_k, win_left, win_right, qk_scale, softcap_in, softcap_out, stride_qt, stride_qh, stride_ot,
                stride_oh, num_splits, gl.maximum(it0, 0), fix_bits, x, split, GROUP, HEAD_DIM, BLOCK_M, ROW0, ROWS,
                BLOCK_Q, BLOCK_N, STAGES, LIMIT_LEFT, LIMIT_RIGHT, SOFTCAP, SINKS, SPLIT, True, True, TURNS, True,
                num_warps,
            )  # fmt: skip
            it0 += hi - lo
            k += 1
            pid_kvh, q_start, q_len, t0, ctx, seqlen_k, lo, a, b, hi, x, split = _take_tile(
                info, info_ready, info_empty, gl.maximum(k, 0), num_warps
            )
        return
    for band in range(0, (num_tiles + nprog - 1) // nprog):
        t = _snake_tile(band, nprog)
        if t < num_tiles:
            x = t % grid0
            split = t // grid0
            if HANDOFF:
                pid_kvh, q_start, q_len, t0, ctx, seqlen_k, lo, a, b, hi, _x, _split = _take_tile(
                    info, info_ready, info_empty, gl.maximum(k, 0), num_warps
                )
                k += 1
            else:
                pid_kvh, bt_row, q_start, q_len, t0, ctx, seqlen_k, lo, a, b, hi = _tile_bounds(
                    x, split, grid0, cu_seqlens_q_ptr, seqused_k_ptr, block_table_ptr, num_seqs, num_kv_heads,
                    bt_width, num_tokens, win_left, win_right, stride_bt, num_splits, decode_max_q, BLOCK_Q, BLOCK_N,
                    BLOCK_SIZE, LIMIT_LEFT, LIMIT_RIGHT, SPLIT,
                )  # fmt: skip
            fix_bits = _attend_rows(
                q_ptr, out_ptr, part_acc_ptr, part_m_ptr, part_l_ptr, sinks_ptr, q_smem, k_bufs, v_bufs, k_ready,
                v_ready, k_empty, v_empty, my_turn, next_turn, v_fixed, q_start, q_len, t0, ctx, pid_kvh, lo, a, b, hi,
                seqlen_k, win_left, win_right, qk_scale, softcap_in, softcap_out, stride_qt, stride_qh, stride_ot,
                stride_oh, num_splits, gl.maximum(it0, 0), fix_bits, x, split, GROUP, HEAD_DIM, BLOCK_M, ROW0, ROWS,
                BLOCK_Q, BLOCK_N, STAGES, LIMIT_LEFT, LIMIT_RIGHT, SOFTCAP, SINKS, SPLIT, True, True, TURNS, True,
                num_warps,
            )  # fmt: skip
            it0 += hi - lo


@gluon.jit(
    do_not_specialize=[
        "num_seqs",
        "bt_width",
        "num_tokens",
        "num_blocks",
        "win_left",
        "win_right",
        "stride_bt",
        "num_splits",
        "decode_max_q",
        "num_tiles",
        "grid0",
    ]
)
def _paged_attention_prefill_hopper_kernel(  # tritonkit: ignore[recompile] tile rows and splitting follow the batch
    q_ptr,
    k_desc,
    v_desc,
    out_ptr,
    part_acc_ptr,
    part_m_ptr,
    part_l_ptr,
    cu_seqlens_q_ptr,
    seqused_k_ptr,
    block_table_ptr,
    sinks_ptr,
    tile_ctr_ptr,
    num_seqs,
    num_kv_heads,
    bt_width,
    num_tokens,
    num_blocks,
    win_left,
    win_right,
    qk_scale,
    softcap_in,
    softcap_out,
    stride_qt,
    stride_qh,
    stride_ot,
    stride_oh,
    stride_bt,
    num_splits,
    decode_max_q,
    num_tiles,
    grid0,
    GROUP: gl.constexpr,
    HEAD_DIM: gl.constexpr,
    BLOCK_M: gl.constexpr,
    BLOCK_Q: gl.constexpr,
    BLOCK_N: gl.constexpr,
    BLOCK_SIZE: gl.constexpr,
    PAGE_ROWS: gl.constexpr,
    STAGES: gl.constexpr,
    LIMIT_LEFT: gl.constexpr,
    LIMIT_RIGHT: gl.constexpr,
    SOFTCAP: gl.constexpr,
    SINKS: gl.constexpr,
    SPLIT: gl.constexpr,
    OVERLAP: gl.constexpr,
    PINGPONG: gl.constexpr,
    TURNS: gl.constexpr,
    EARLY_PAGES: gl.constexpr,
    PERSISTENT: gl.constexpr,
    HANDOFF: gl.constexpr,
    DYNAMIC: gl.constexpr,
    num_warps: gl.constexpr,
):
    """Program (query tile, KV head[, KV split]) of kernel._paged_attention_prefill_kernel's grid, found and bounded
    as that kernel does; the KV loop runs warp-specialized (the module's docstring). BLOCK_M = 128 rows at 8 warps
    (PINGPONG: at 4 warps, the default partition and one worker partition holding 64 rows each), HEAD_DIM 64 or
    128, bf16/fp16 caches, BLOCK_SIZE a multiple of 16. PERSISTENT (with PINGPONG): a grid of at most one program a
    SM, each taking that grid's ``num_tiles`` program tiles (``grid0`` along x, then the splits) in turn
    (_snake_tile), its load warp running ahead across them; DYNAMIC, as the load warp takes them from
    ``tile_ctr_ptr`` (an int32, zero at the launch; never read otherwise)."""
    if not PERSISTENT:
        pid_kvh, bt_row, q_start, q_len, t0, ctx, seqlen_k, lo, a, b, hi = _tile_bounds(
            gl.program_id(0), gl.program_id(1), gl.num_programs(0), cu_seqlens_q_ptr, seqused_k_ptr, block_table_ptr,
            num_seqs, num_kv_heads, bt_width, num_tokens, win_left, win_right, stride_bt, num_splits, decode_max_q,
            BLOCK_Q, BLOCK_N, BLOCK_SIZE, LIMIT_LEFT, LIMIT_RIGHT, SPLIT,
        )  # fmt: skip

    dtype: gl.constexpr = q_ptr.dtype.element_ty
    # PINGPONG: each consumer partition holds half the rows (and its own Q buffer), and both free every stage
    PARTS: gl.constexpr = 2 if PINGPONG else 1
    WG_ROWS: gl.constexpr = BLOCK_M // PARTS
    # PINGPONG: the launch's warps are the first warpgroup's, each warpgroup 64 rows (OVERLAP does not apply)
    gl.static_assert(not PINGPONG or (num_warps == CONSUMER_WARPS and WG_ROWS == 64), "PINGPONG: 4 warps, 128 rows")
    gl.static_assert(not DYNAMIC or (PERSISTENT and HANDOFF), "DYNAMIC takes persistent programs and the hand-off")
    q_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([WG_ROWS, HEAD_DIM], dtype)
    if PINGPONG:
        q_smem = gl.allocate_shared_memory(dtype, [PARTS, WG_ROWS, HEAD_DIM], q_layout)
    else:
        q_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, HEAD_DIM], q_layout)
    kv_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, HEAD_DIM], dtype)
    k_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], kv_layout)
    v_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], kv_layout)
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=PARTS)
        mbarrier.init(v_empty.index(i), count=PARTS)
    if PERSISTENT:
        # the warpgroups' turns, and a V-fix barrier a stage: the first warpgroup can be at most one fix ahead of
        # the second on a stage (the stage is loaded again only once both have freed it)
        sync = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        v_fixed = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(2):
            mbarrier.init(sync.index(i), count=1)
        for i in gl.static_range(STAGES):
            mbarrier.init(v_fixed.index(i), count=1)
        # HANDOFF: the published tiles' slots and their barriers; without it, unused stand-ins
        info = v_fixed
        info_ready = v_fixed
        info_empty = v_fixed
        if HANDOFF:
            info = gl.allocate_shared_memory(gl.int32, [INFO_SLOTS, INFO_FIELDS], gl.SwizzledSharedLayout(1, 1, 1, [0]))
            info_ready = gl.allocate_shared_memory(gl.int64, [INFO_SLOTS, 1], mbarrier.MBarrierLayout())
            info_empty = gl.allocate_shared_memory(gl.int64, [INFO_SLOTS, 1], mbarrier.MBarrierLayout())
            for i in gl.static_range(INFO_SLOTS):
                mbarrier.init(info_ready.index(i), count=1)
                mbarrier.init(info_empty.index(i), count=PARTS)
        gl.warp_specialize(
            [
                (
                    _attend_persistent,
                    (
                        q_ptr, out_ptr, part_acc_ptr, part_m_ptr, part_l_ptr, sinks_ptr, q_smem.index(0), k_bufs,
                        v_bufs, k_ready, v_ready, k_empty, v_empty, sync.index(0), sync.index(1), v_fixed,
                        cu_seqlens_q_ptr, seqused_k_ptr, block_table_ptr, num_seqs, num_kv_heads, bt_width,
                        num_tokens, win_left, win_right, qk_scale, softcap_in, softcap_out, stride_qt, stride_qh,
                        stride_ot, stride_oh, stride_bt, num_splits, decode_max_q, num_tiles, grid0, GROUP, HEAD_DIM,
                        WG_ROWS, 0, BLOCK_M, BLOCK_Q, BLOCK_N, BLOCK_SIZE, STAGES, LIMIT_LEFT, LIMIT_RIGHT, SOFTCAP,
                        SINKS, SPLIT, TURNS, HANDOFF, info, info_ready, info_empty, DYNAMIC, num_warps,
                    ),
                ),
                (
                    _attend_persistent,
                    (
                        q_ptr, out_ptr, part_acc_ptr, part_m_ptr, part_l_ptr, sinks_ptr, q_smem.index(1), k_bufs,
                        v_bufs, k_ready, v_ready, k_empty, v_empty, sync.index(1), sync.index(0), v_fixed,
                        cu_seqlens_q_ptr, seqused_k_ptr, block_table_ptr, num_seqs, num_kv_heads, bt_width,
                        num_tokens, win_left, win_right, qk_scale, softcap_in, softcap_out, stride_qt, stride_qh,
                        stride_ot, stride_oh, stride_bt, num_splits, decode_max_q, num_tiles, grid0, GROUP, HEAD_DIM,
                        WG_ROWS, WG_ROWS, BLOCK_M, BLOCK_Q, BLOCK_N, BLOCK_SIZE, STAGES, LIMIT_LEFT, LIMIT_RIGHT,
                        SOFTCAP, SINKS, SPLIT, TURNS, HANDOFF, info, info_ready, info_empty, DYNAMIC,
                        CONSUMER_WARPS,
                    ),
                ),
                (
                    _load_persistent,
                    (
                        k_desc, v_desc, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, cu_seqlens_q_ptr,
                        seqused_k_ptr, block_table_ptr, num_seqs, num_kv_heads, bt_width, num_tokens, num_blocks,
                        win_left, win_right, stride_bt, num_splits, decode_max_q, num_tiles, grid0, HEAD_DIM, BLOCK_Q,
                        BLOCK_N, BLOCK_SIZE, PAGE_ROWS, STAGES, LIMIT_LEFT, LIMIT_RIGHT, SPLIT, EARLY_PAGES, HANDOFF,
                        info, info_ready, info_empty, DYNAMIC, tile_ctr_ptr,
                    ),
                ),
            ],
            [CONSUMER_WARPS, LOAD_WARPS],
            [CONSUMER_REGS, LOAD_REGS],
        )  # fmt: skip
    else:
        col = pid_kvh * HEAD_DIM
        if PINGPONG:
            # the warpgroups' turns (0: the default partition's, 1: the worker's) and the last tile's V rows zeroed (2)
            sync = gl.allocate_shared_memory(gl.int64, [3, 1], mbarrier.MBarrierLayout())
            for i in gl.static_range(3):
                mbarrier.init(sync.index(i), count=1)
            gl.warp_specialize(
                [
                    (
                        _attend_partition,
                        (
                            q_ptr, out_ptr, part_acc_ptr, part_m_ptr, part_l_ptr, sinks_ptr, q_smem.index(0), k_bufs,
                            v_bufs, k_ready, v_ready, k_empty, v_empty, sync.index(0), sync.index(1), sync.index(2),
                            q_start, q_len, t0, ctx, pid_kvh, lo, a, b, hi, seqlen_k, win_left, win_right, qk_scale,
                            softcap_in, softcap_out, stride_qt, stride_qh, stride_ot, stride_oh, num_splits, GROUP,
                            HEAD_DIM, WG_ROWS, 0, BLOCK_M, BLOCK_Q, BLOCK_N, STAGES, LIMIT_LEFT, LIMIT_RIGHT, SOFTCAP,
                            SINKS, SPLIT, OVERLAP, PINGPONG, TURNS, num_warps,
                        ),
                    ),
                    (
                        _attend_partition,
                        (
                            q_ptr, out_ptr, part_acc_ptr, part_m_ptr, part_l_ptr, sinks_ptr, q_smem.index(1), k_bufs,
                            v_bufs, k_ready, v_ready, k_empty, v_empty, sync.index(1), sync.index(0), sync.index(2),
                            q_start, q_len, t0, ctx, pid_kvh, lo, a, b, hi, seqlen_k, win_left, win_right, qk_scale,
                            softcap_in, softcap_out, stride_qt, stride_qh, stride_ot, stride_oh, num_splits, GROUP,
                            HEAD_DIM, WG_ROWS, WG_ROWS, BLOCK_M, BLOCK_Q, BLOCK_N, STAGES, LIMIT_LEFT, LIMIT_RIGHT,
                            SOFTCAP, SINKS, SPLIT, OVERLAP, PINGPONG, TURNS, CONSUMER_WARPS,
                        ),
                    ),
                    (
                        _load_partition,
                        (
                            k_desc, v_desc, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, bt_row, lo, hi,
                            seqlen_k, num_blocks, col, BLOCK_N, BLOCK_SIZE, PAGE_ROWS, STAGES, EARLY_PAGES, 0,
                        ),
                    ),
                ],
                [CONSUMER_WARPS, LOAD_WARPS],
                [CONSUMER_REGS, LOAD_REGS],
            )  # fmt: skip
        else:
            gl.warp_specialize(
                [
                    (
                        _attend_partition,
                        (
                            # no turns and no second warpgroup to signal: the barrier arguments are never used
                            q_ptr, out_ptr, part_acc_ptr, part_m_ptr, part_l_ptr, sinks_ptr, q_smem, k_bufs, v_bufs,
                            k_ready, v_ready, k_empty, v_empty, k_ready.index(0), k_ready.index(0), k_ready.index(0),
                            q_start, q_len, t0, ctx, pid_kvh, lo, a, b, hi, seqlen_k, win_left, win_right, qk_scale,
                            softcap_in, softcap_out, stride_qt, stride_qh, stride_ot, stride_oh, num_splits, GROUP,
                            HEAD_DIM, BLOCK_M, 0, BLOCK_M, BLOCK_Q, BLOCK_N, STAGES, LIMIT_LEFT, LIMIT_RIGHT, SOFTCAP,
                            SINKS, SPLIT, OVERLAP, PINGPONG, TURNS, num_warps,
                        ),
                    ),
                    (
                        _load_partition,
                        (
                            k_desc, v_desc, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, bt_row, lo, hi,
                            seqlen_k, num_blocks, col, BLOCK_N, BLOCK_SIZE, PAGE_ROWS, STAGES, EARLY_PAGES, 0,
                        ),
                    ),
                ],
                [LOAD_WARPS],
                [LOAD_REGS],
            )  # fmt: skip
