import triton
import triton.language as tl

try:  # programmatic dependent launch (sm_90+); Triton releases without it never set PDL
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
except ImportError:  # pragma: no cover - older Triton
    gdc_launch_dependents = gdc_wait = None

LOG2E = tl.constexpr(1.4426950408889634)
# Triton 3.6's interpreter multiplies the raw uint16 bits of bfloat16 dot operands; under it (CPU tests only) the
# dots widen bf16 to float32 first, which is exact. Compiled kernels never see this branch.
_INTERPRETER_BF16_DOT = tl.constexpr(bool(triton.knobs.runtime.interpret))


@triton.jit
def _dot(a, b, acc):
    if _INTERPRETER_BF16_DOT and a.dtype == tl.bfloat16:
        acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc)
    else:
        acc = tl.dot(a, b, acc)
    return acc


@triton.jit
def _tanh(x):
    # 1 - 2 / (exp(2x) + 1): one exp2, saturates cleanly to +-1 where exp overflows (no inf / inf)
    return 1.0 - 2.0 / (tl.math.exp2(x * 2.8853900817779268) + 1.0)


@triton.jit
def _first_tile(q_start, seq, BLOCK_Q: tl.constexpr):
    """Index of sequence ``seq``'s first query tile in the prefill grid: ``(q_start + seq * (BLOCK_Q - 1)) //
    BLOCK_Q``. Sequence s owns tiles ``[_first_tile(cu[s], s), _first_tile(cu[s], s) + ceil(n_s / BLOCK_Q))``, which
    end at or before ``_first_tile(cu[s + 1], s + 1)``: the sequences' tiles never overlap, and the batch's last
    tile is below ``(T + num_seqs * (BLOCK_Q - 1)) // BLOCK_Q``, the grid's count (config.prefill_grid_tiles). In
    int64: ``num_seqs * (BLOCK_Q - 1)`` need not fit int32."""
    return (q_start.to(tl.int64) + seq.to(tl.int64) * (BLOCK_Q - 1)) // BLOCK_Q


@triton.jit
def _find_seq(cu_seqlens_q_ptr, pid_q, num_seqs, BLOCK_Q: tl.constexpr):
    """The sequence whose query tiles hold tile ``pid_q`` of the prefill grid: the last s with ``_first_tile(cu[s],
    s) <= pid_q``, by a binary search over cu_seqlens_q, no host sync. Of sequences that share a first tile, all
    but the last are empty, and the last is found; a tile between a sequence's last tile and the next sequence's
    first goes to the sequence before it, which does not own it (_prefill_tile)."""
    lo = pid_q * 0
    hi = lo + num_seqs
    while hi - lo > 1:
        mid = (lo + hi) // 2
        go_right = _first_tile(tl.load(cu_seqlens_q_ptr + mid), mid, BLOCK_Q) <= pid_q
        lo = tl.where(go_right, mid, lo)
        hi = tl.where(go_right, hi, mid)
    return lo


@triton.jit
def _prefill_tile(pid_q, seq, q_start, q_end, num_tokens, decode_max_q, BLOCK_Q: tl.constexpr):
    """(first token of tile ``pid_q`` within sequence ``seq``, as int64 for the q/out strides; whether the prefill
    path owns it). It does not when the sequence is the decode kernel's (at most ``decode_max_q`` tokens), the tile
    lies outside the sequence's tiles, or the sequence's rows lie outside q: scalar compares, once a program. An
    owned tile's rows ``q_start + t0 + i < q_end <= num_tokens`` lie in q and out whatever cu_seqlens_q holds."""
    q_len = q_end - q_start
    t0 = (pid_q - _first_tile(q_start, seq, BLOCK_Q)) * BLOCK_Q
    mine = (q_len > decode_max_q) & (t0 < q_len) & (t0 >= 0) & (q_start >= 0) & (q_end <= num_tokens)
    return t0, mine


@triton.jit
def _prefill_rows(
    pid_q, seq, q_start, q_end, seqlen_k, num_tokens, decode_max_q, bt_width, BLOCK_Q: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):  # fmt: skip
    """(first token of the tile, query length, key count) a prefill program works on: the tile's, or 0 queries and
    0 keys for a program that owns no tile (no early return, which would let the compiler sink earlier loads past
    it); a seqused_k that is negative or past the block-table row reads as no key."""
    t0, mine = _prefill_tile(pid_q, seq, q_start, q_end, num_tokens, decode_max_q, BLOCK_Q)
    keys_ok = (seqlen_k >= 0) & (seqlen_k.to(tl.int64) <= bt_width.to(tl.int64) * BLOCK_SIZE)
    q_len = tl.where(mine, q_end - q_start, 0)
    seqlen_k = tl.where(mine & keys_ok, seqlen_k, 0)
    # t0 = 0 with q_len = 0: every row fails `tok < q_len`, so a program with no tile stores nothing (t0 < 0 would
    # pass rows below 0). A scalar select, not `mine` in the row mask: that AND on 8 row predicates costs the fp8
    # build 6% at 8K on the H200 (docs/notes/paged-attention-prologue.md)
    t0 = tl.where(mine, t0, 0)
    return t0, q_len, seqlen_k


@triton.jit
def _prefill_key_tiles(
    t0, q_len, ctx, seqlen_k, win_left, win_right, num_splits, split, BLOCK_Q: tl.constexpr, BLOCK_N: tl.constexpr,
    LIMIT_LEFT: tl.constexpr, LIMIT_RIGHT: tl.constexpr, SPLIT: tl.constexpr,
):  # fmt: skip
    """_key_tiles of a prefill tile's query rows [t0, min(t0 + BLOCK_Q, q_len)); with SPLIT, the even share of
    split ``split`` (the masked edges stay masked wherever they fall)."""
    first = t0.to(tl.int32)
    last = tl.minimum(first + BLOCK_Q, q_len) - 1
    lo, a, b, hi = _key_tiles(ctx + first, ctx + last, seqlen_k, win_left, win_right, BLOCK_N, LIMIT_LEFT, LIMIT_RIGHT)
    if SPLIT:
        per_split = (hi - lo + num_splits - 1) // num_splits
        s_lo = tl.minimum(lo + split * per_split, hi)
        s_hi = tl.minimum(s_lo + per_split, hi)
        a = tl.maximum(tl.minimum(a, s_hi), s_lo)
        b = tl.maximum(tl.minimum(b, s_hi), s_lo)
        lo = s_lo
        hi = s_hi
    return lo, a, b, hi


@triton.jit
def _key_tiles(
    qpos_lo,
    qpos_hi,
    seqlen_k,
    win_left,
    win_right,
    BLOCK_N: tl.constexpr,
    LIMIT_LEFT: tl.constexpr,
    LIMIT_RIGHT: tl.constexpr,
):
    """KV tile bounds ``lo <= a <= b <= hi`` for query rows at positions [qpos_lo, qpos_hi]: every row sees every
    key of tiles [a, b) (no mask needed); tiles [lo, a) and [b, hi) hold some keys a row must not see."""
    key_hi = seqlen_k
    full_hi = seqlen_k
    key_lo = qpos_lo * 0
    full_lo = qpos_lo * 0
    if LIMIT_RIGHT:
        key_hi = tl.minimum(key_hi, qpos_hi + win_right + 1)
        full_hi = tl.minimum(full_hi, qpos_lo + win_right + 1)
    if LIMIT_LEFT:
        key_lo = tl.maximum(key_lo, qpos_lo - win_left)
        full_lo = tl.maximum(full_lo, qpos_hi - win_left)
    lo = key_lo // BLOCK_N
    hi = tl.maximum((key_hi + BLOCK_N - 1) // BLOCK_N, lo)
    a = tl.minimum(tl.maximum((full_lo + BLOCK_N - 1) // BLOCK_N, lo), hi)
    b = tl.minimum(tl.maximum(full_hi // BLOCK_N, a), hi)
    return lo, a, b, hi


@triton.jit
def _load_kv_tile(
    base,
    page,
    slot,
    stride_page,
    stride_slot,
    offs_d,
    mask_n,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PAD: tl.constexpr,
    MASKED: tl.constexpr,
):
    ptrs = base + (page * stride_page + slot * stride_slot)[:, None] + offs_d[None, :]  # [BLOCK_N, HEAD_DIM_PAD]
    return _load_rows(ptrs, mask_n[:, None], offs_d[None, :], HEAD_DIM, HEAD_DIM_PAD, MASKED)


@triton.jit
def _load_rows(ptrs, mask_rows, offs_d, HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, MASKED: tl.constexpr):
    """K or V rows at ``ptrs`` (any rank, head_dim last): masked by ``mask_rows`` (keys) on MASKED tiles and by
    ``offs_d < HEAD_DIM`` where the head is padded; ``mask_rows`` and ``offs_d`` broadcast against ``ptrs``."""
    if MASKED:
        if HEAD_DIM == HEAD_DIM_PAD:
            x = tl.load(ptrs, mask=mask_rows, other=0.0)
        else:
            x = tl.load(ptrs, mask=mask_rows & (offs_d < HEAD_DIM), other=0.0)
    else:
        if HEAD_DIM == HEAD_DIM_PAD:
            x = tl.load(ptrs)
        else:
            x = tl.load(ptrs, mask=offs_d < HEAD_DIM, other=0.0)
    return x


@triton.jit
def _load_pages(bt_row, offs_n, limit, num_blocks, BLOCK_SIZE: tl.constexpr):
    """Physical page of each key position (masked to positions < limit), as int64 for the stride product. An id
    outside ``[0, num_blocks)`` reads as page 0, so no block id reads outside the caches: one unsigned compare and
    a select per entry of the [BLOCK_N] page vector, not per loaded element. Widening the checked id as unsigned
    saves what they cost: every sm_90 build's KV loops come out a few instructions shorter than before the check
    (decode bf16 interior 294 -> 288 SASS instructions a tile)."""
    page = tl.load(bt_row + offs_n // BLOCK_SIZE, mask=offs_n < limit, other=0)
    page = tl.where(page.to(tl.uint32, bitcast=True) < num_blocks, page, 0)
    return page.to(tl.uint32, bitcast=True).to(tl.int64)


@triton.jit
def _online_softmax(
    s,
    m_i,
    l_i,
    offs_n,
    qpos,
    seqlen_k,
    win_left,
    win_right,
    qk_scale,
    softcap_in,
    softcap_out,
    MASKED: tl.constexpr,
    LIMIT_LEFT: tl.constexpr,
    LIMIT_RIGHT: tl.constexpr,
    SOFTCAP: tl.constexpr,
):
    """One online-softmax step on a tile's raw scores ``s`` for keys ``offs_n``, in the log2 domain: (P in
    float32, the new row max, the new row sum, alpha = the factor the accumulator takes before P V is added).
    MASKED tiles mask keys past seqlen_k and outside each row's causal/window range. kernel_hopper's Gluon prefill
    calls it too: both kernels do the same operations."""
    return _softmax_step(
        s, m_i, l_i, (offs_n < seqlen_k)[None, :], offs_n[None, :], qpos[:, None], win_left, win_right, qk_scale,
        softcap_in, softcap_out, MASKED, LIMIT_LEFT, LIMIT_RIGHT, SOFTCAP, 1,
    )  # fmt: skip


@triton.jit
def _softmax_step(
    s,
    m_i,
    l_i,
    in_range,
    key,
    qpos,
    win_left,
    win_right,
    qk_scale,
    softcap_in,
    softcap_out,
    MASKED: tl.constexpr,
    LIMIT_LEFT: tl.constexpr,
    LIMIT_RIGHT: tl.constexpr,
    SOFTCAP: tl.constexpr,
    AXIS: tl.constexpr,
):
    """_online_softmax over scores ``s`` whose keys run along AXIS (the last): ``in_range`` (keys below seqlen_k),
    ``key`` and ``qpos`` (key and query positions) are expanded to broadcast against ``s``; m_i and l_i are ``s``
    reduced along AXIS."""
    if SOFTCAP:
        # capped logits in log2 units; the scale is inside softcap_in
        s = _tanh(s * softcap_in) * softcap_out
        s_scale = 1.0
    else:
        # the scale is applied inside the exponent below (one FMA per score)
        s_scale = qk_scale
    if MASKED:
        keep = in_range
        if LIMIT_RIGHT:
            keep = keep & (key <= qpos + win_right)
        if LIMIT_LEFT:
            keep = keep & (key >= qpos - win_left)
        s = tl.where(keep, s, float("-inf"))
    # s_scale > 0 (the API checks softmax_scale), so the max commutes with it
    m_new = tl.maximum(m_i, tl.max(s, AXIS) * s_scale)
    if MASKED:
        # a row with no visible key yet keeps m = -inf; subtract 0 instead so exp2 sees -inf, not NaN
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_use = m_new
    p = tl.math.exp2(s * s_scale - tl.expand_dims(m_use, AXIS))
    alpha = tl.math.exp2(m_i - m_use)
    l_i = l_i * alpha + tl.sum(p, AXIS)
    return p, m_new, l_i, alpha


@triton.jit
def _attend_tile(
    acc,
    m_i,
    l_i,
    q,
    qpos,
    k_base,
    v_base,
    page,
    start_n,
    seqlen_k,
    win_left,
    win_right,
    qk_scale,
    softcap_in,
    softcap_out,
    stride_kb,
    stride_ks,
    stride_vb,
    stride_vs,
    BLOCK_N: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PAD: tl.constexpr,
    MASKED: tl.constexpr,
    LIMIT_LEFT: tl.constexpr,
    LIMIT_RIGHT: tl.constexpr,
    SOFTCAP: tl.constexpr,
):
    """One online-softmax step over keys [start_n, start_n + BLOCK_N), scores in the log2 domain. MASKED tiles
    mask keys past seqlen_k (their loads too) and outside each row's causal/window range; interior tiles do
    neither."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    mask_n = offs_n < seqlen_k
    slot = (offs_n % BLOCK_SIZE).to(tl.int64)
    k = _load_kv_tile(k_base, page, slot, stride_kb, stride_ks, offs_d, mask_n, HEAD_DIM, HEAD_DIM_PAD, MASKED)
    # fp8 caches: exact widening to q's dtype; the per-tensor scale is folded into qk_scale and the epilogue
    s = _dot(q, tl.trans(k.to(q.dtype)), tl.zeros([q.shape[0], BLOCK_N], dtype=tl.float32))  # [BLOCK_M, BLOCK_N]
    p, m_new, l_i, alpha = _online_softmax(
        s, m_i, l_i, offs_n, qpos, seqlen_k, win_left, win_right, qk_scale, softcap_in, softcap_out, MASKED,
        LIMIT_LEFT, LIMIT_RIGHT, SOFTCAP,
    )  # fmt: skip
    v = _load_kv_tile(v_base, page, slot, stride_vb, stride_vs, offs_d, mask_n, HEAD_DIM, HEAD_DIM_PAD, MASKED)
    v = v.to(q.dtype)
    acc = acc * alpha[:, None]
    # P rounded to the value dtype for the tensor-core dot: the one rounding the spec's tolerance accounts for
    acc = _dot(p.to(v.dtype), v, acc)
    return acc, m_new, l_i


@triton.jit
def _attend_range(
    acc,
    m_i,
    l_i,
    q,
    qpos,
    k_base,
    v_base,
    bt_row,
    num_blocks,
    page_first,
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
    stride_kb,
    stride_ks,
    stride_vb,
    stride_vs,
    BLOCK_N: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PAD: tl.constexpr,
    LIMIT_LEFT: tl.constexpr,
    LIMIT_RIGHT: tl.constexpr,
    SOFTCAP: tl.constexpr,
):
    """Tiles [lo, hi) with the edges [lo, a) and [b, hi) masked and the interior [a, b) not. ``page_first``: the
    pages of tile ``a`` (read only when a < b), loaded by the caller so the load can start as early as it knows a."""
    offs_n = tl.arange(0, BLOCK_N)
    for j in range(lo, a):
        page = _load_pages(bt_row, j * BLOCK_N + offs_n, seqlen_k, num_blocks, BLOCK_SIZE)
        acc, m_i, l_i = _attend_tile(
            acc,
            m_i,
            l_i,
            q,
            qpos,
            k_base,
            v_base,
            page,
            j * BLOCK_N,
            seqlen_k,
            win_left,
            win_right,
            qk_scale,
            softcap_in,
            softcap_out,
            stride_kb,
            stride_ks,
            stride_vb,
            stride_vs,
            BLOCK_N,
            BLOCK_SIZE,
            HEAD_DIM,
            HEAD_DIM_PAD,
            True,
            LIMIT_LEFT,
            LIMIT_RIGHT,
            SOFTCAP,
        )
    # the interior reads each tile's block-table entries one iteration ahead, so the K/V loads of a tile do not
    # wait on a load issued in the same iteration (deeper software pipelining of the paged gathers); Triton's own
    # pipelining of these indirect loads was slower (docs/notes/paged-attention-kv-loop.md)
    page_next = page_first
    for j in range(a, b):
        page = page_next
        page_next = _load_pages(bt_row, (j + 1) * BLOCK_N + offs_n, b * BLOCK_N, num_blocks, BLOCK_SIZE)
        acc, m_i, l_i = _attend_tile(
            acc,
            m_i,
            l_i,
            q,
            qpos,
            k_base,
            v_base,
            page,
            j * BLOCK_N,
            seqlen_k,
            win_left,
            win_right,
            qk_scale,
            softcap_in,
            softcap_out,
            stride_kb,
            stride_ks,
            stride_vb,
            stride_vs,
            BLOCK_N,
            BLOCK_SIZE,
            HEAD_DIM,
            HEAD_DIM_PAD,
            False,
            LIMIT_LEFT,
            LIMIT_RIGHT,
            SOFTCAP,
        )
    for j in range(b, hi):
        page = _load_pages(bt_row, j * BLOCK_N + offs_n, seqlen_k, num_blocks, BLOCK_SIZE)
        acc, m_i, l_i = _attend_tile(
            acc,
            m_i,
            l_i,
            q,
            qpos,
            k_base,
            v_base,
            page,
            j * BLOCK_N,
            seqlen_k,
            win_left,
            win_right,
            qk_scale,
            softcap_in,
            softcap_out,
            stride_kb,
            stride_ks,
            stride_vb,
            stride_vs,
            BLOCK_N,
            BLOCK_SIZE,
            HEAD_DIM,
            HEAD_DIM_PAD,
            True,
            LIMIT_LEFT,
            LIMIT_RIGHT,
            SOFTCAP,
        )
    return acc, m_i, l_i


@triton.jit
def _attend_tile_warps(
    acc,
    m_i,
    l_i,
    q3,
    qpos3,
    k_base,
    v_base,
    page,
    start_n,
    seqlen_k,
    win_left,
    win_right,
    qk_scale,
    softcap_in,
    softcap_out,
    stride_kb,
    stride_ks,
    stride_vb,
    stride_vs,
    KEY_WARPS: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PAD: tl.constexpr,
    MASKED: tl.constexpr,
    LIMIT_LEFT: tl.constexpr,
    LIMIT_RIGHT: tl.constexpr,
    SOFTCAP: tl.constexpr,
):
    """_attend_tile with the tile's keys dealt out to KEY_WARPS warps: warp w takes keys [start_n + w * NW, start_n +
    (w + 1) * NW) and keeps its own online-softmax state (acc [W, M, D], m and l [W, M]), so a tile's row max and row
    sum stay inside a warp (batched dots whose batch is the warp). ``page``: [W, NW] pages of those keys."""
    NW: tl.constexpr = BLOCK_N // KEY_WARPS
    keys = start_n + tl.arange(0, KEY_WARPS)[:, None] * NW + tl.arange(0, NW)[None, :]  # [W, NW]
    offs_d = tl.arange(0, HEAD_DIM_PAD)[None, None, :]
    mask_n = (keys < seqlen_k)[:, :, None]
    slot = (keys % BLOCK_SIZE).to(tl.int64)
    k_ptrs = k_base + (page * stride_kb + slot * stride_ks)[:, :, None] + offs_d  # [W, NW, D]
    v_ptrs = v_base + (page * stride_vb + slot * stride_vs)[:, :, None] + offs_d
    k = _load_rows(k_ptrs, mask_n, offs_d, HEAD_DIM, HEAD_DIM_PAD, MASKED)
    s = _dot(q3, tl.permute(k.to(q3.dtype), (0, 2, 1)), tl.zeros([KEY_WARPS, q3.shape[1], NW], dtype=tl.float32))
    p, m_new, l_i, alpha = _softmax_step(
        s, m_i, l_i, (keys < seqlen_k)[:, None, :], keys[:, None, :], qpos3, win_left, win_right, qk_scale, softcap_in,
        softcap_out, MASKED, LIMIT_LEFT, LIMIT_RIGHT, SOFTCAP, 2,
    )  # fmt: skip
    v = _load_rows(v_ptrs, mask_n, offs_d, HEAD_DIM, HEAD_DIM_PAD, MASKED)
    v = v.to(q3.dtype)
    acc = acc * alpha[:, :, None]
    acc = _dot(p.to(v.dtype), v, acc)
    return acc, m_new, l_i


@triton.jit
def _attend_range_warps(
    q,
    qpos,
    k_base,
    v_base,
    bt_row,
    num_blocks,
    page_first,
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
    stride_kb,
    stride_ks,
    stride_vb,
    stride_vs,
    KEY_WARPS: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PAD: tl.constexpr,
    LIMIT_LEFT: tl.constexpr,
    LIMIT_RIGHT: tl.constexpr,
    SOFTCAP: tl.constexpr,
):
    """_attend_range over warp-dealt tiles (_attend_tile_warps); the warps' states are merged once at the end into
    the (acc, m, l) _attend_range returns. ``page_first``: tile ``a``'s pages, [W, NW], loaded by the caller."""
    NW: tl.constexpr = BLOCK_N // KEY_WARPS
    BLOCK_M: tl.constexpr = q.shape[0]
    q3 = tl.broadcast_to(q[None, :, :], (KEY_WARPS, BLOCK_M, HEAD_DIM_PAD))
    qpos3 = qpos[None, :, None]
    offs_n = tl.arange(0, KEY_WARPS)[:, None] * NW + tl.arange(0, NW)[None, :]
    acc = tl.zeros([KEY_WARPS, BLOCK_M, HEAD_DIM_PAD], dtype=tl.float32)
    m_i = tl.full([KEY_WARPS, BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([KEY_WARPS, BLOCK_M], dtype=tl.float32)
    for j in range(lo, a):
        page = _load_pages(bt_row, j * BLOCK_N + offs_n, seqlen_k, num_blocks, BLOCK_SIZE)
        acc, m_i, l_i = _attend_tile_warps(
            acc, m_i, l_i, q3, qpos3, k_base, v_base, page, j * BLOCK_N, seqlen_k, win_left, win_right, qk_scale,
            softcap_in, softcap_out, stride_kb, stride_ks, stride_vb, stride_vs, KEY_WARPS, BLOCK_N, BLOCK_SIZE,
            HEAD_DIM, HEAD_DIM_PAD, True, LIMIT_LEFT, LIMIT_RIGHT, SOFTCAP,
        )  # fmt: skip
    page_next = page_first
    for j in range(a, b):
        page = page_next
        page_next = _load_pages(bt_row, (j + 1) * BLOCK_N + offs_n, b * BLOCK_N, num_blocks, BLOCK_SIZE)
        acc, m_i, l_i = _attend_tile_warps(
            acc, m_i, l_i, q3, qpos3, k_base, v_base, page, j * BLOCK_N, seqlen_k, win_left, win_right, qk_scale,
            softcap_in, softcap_out, stride_kb, stride_ks, stride_vb, stride_vs, KEY_WARPS, BLOCK_N, BLOCK_SIZE,
            HEAD_DIM, HEAD_DIM_PAD, False, LIMIT_LEFT, LIMIT_RIGHT, SOFTCAP,
        )  # fmt: skip
    for j in range(b, hi):
        page = _load_pages(bt_row, j * BLOCK_N + offs_n, seqlen_k, num_blocks, BLOCK_SIZE)
        acc, m_i, l_i = _attend_tile_warps(
            acc, m_i, l_i, q3, qpos3, k_base, v_base, page, j * BLOCK_N, seqlen_k, win_left, win_right, qk_scale,
            softcap_in, softcap_out, stride_kb, stride_ks, stride_vb, stride_vs, KEY_WARPS, BLOCK_N, BLOCK_SIZE,
            HEAD_DIM, HEAD_DIM_PAD, True, LIMIT_LEFT, LIMIT_RIGHT, SOFTCAP,
        )  # fmt: skip
    # one exchange between the warps a program: the largest max, each warp's state rescaled to it and summed
    m = tl.max(m_i, 0)
    m_use = tl.where(m == float("-inf"), 0.0, m)
    scale = tl.math.exp2(m_i - m_use[None, :])
    l_out = tl.sum(l_i * scale, 0)
    acc_out = tl.sum(acc * scale[:, :, None], 0)
    return acc_out, m, l_out


@triton.jit
def _out_scale(m_i, l_i, sinks_ptr, head, v_scale_ptr, SINKS: tl.constexpr, KV_FP8: tl.constexpr):
    """The factor that turns a row's acc into its output: 1 / l, with the head's sink logit added to the
    denominator (and the fp8 value scale); 0 for a row that saw no key."""
    if SINKS:
        sink = tl.load(sinks_ptr + head).to(tl.float32) * LOG2E
        m_f = tl.maximum(m_i, sink)
        m_f = tl.where(m_f == float("-inf"), 0.0, m_f)
        keep = tl.math.exp2(m_i - m_f)
        l_f = l_i * keep + tl.math.exp2(sink - m_f)
        inv = tl.where(l_f > 0, keep / tl.where(l_f > 0, l_f, 1.0), 0.0)
    else:
        inv = tl.where(l_i > 0, 1.0 / tl.where(l_i > 0, l_i, 1.0), 0.0)
    if KV_FP8:
        inv = inv * tl.load(v_scale_ptr)
    return inv


@triton.jit(
    do_not_specialize=[
        "num_splits",
        "tiles_per_split",
        "bt_width",
        "num_tokens",
        "num_blocks",
        "win_left",
        "win_right",
        "stride_bt",
    ]
)
def _paged_attention_decode_kernel(  # tritonkit: ignore[recompile] rows by longest query, stages by waves
    q_ptr,
    k_ptr,
    v_ptr,
    out_ptr,
    part_acc_ptr,
    part_m_ptr,
    part_l_ptr,
    cu_seqlens_q_ptr,
    seqused_k_ptr,
    block_table_ptr,
    sinks_ptr,
    k_scale_ptr,
    v_scale_ptr,
    num_splits,
    tiles_per_split,
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
    stride_kb,
    stride_ks,
    stride_kh,
    stride_vb,
    stride_vs,
    stride_vh,
    stride_bt,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PAD: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    MAX_Q: tl.constexpr,
    LIMIT_LEFT: tl.constexpr,
    LIMIT_RIGHT: tl.constexpr,
    SOFTCAP: tl.constexpr,
    SINKS: tl.constexpr,
    KV_FP8: tl.constexpr,
    KEY_WARPS: tl.constexpr,
    PDL_TRIGGER: tl.constexpr,
):
    """Flash-decoding: program (sequence, KV head, split) attends the split's share of the sequence's KV tiles
    for all ``q_len <= MAX_Q`` query tokens x GROUP query heads of that KV head (BLOCK_M rows), so each KV tile
    is loaded once. With one split it writes the output; otherwise unnormalized partials for the merge kernel.

    Without a left window, split s covers tiles [s * tiles_per_split, (s + 1) * tiles_per_split) (the host's count
    from max_seqlen_k; the last split also takes any tiles past that, so an understated max_seqlen_k costs balance,
    never keys). The split's first block-table entries are then known before any load returns and are read together
    with the sequence lengths: the first K/V tile waits on two memory round trips instead of three."""
    if PDL_TRIGGER:
        # the merge kernel (launched as this kernel's programmatic dependent) may start its prologue once every
        # program here has started; it waits for this grid's completion before reading the partials
        gdc_launch_dependents()
    pid_seq = tl.program_id(0)
    pid_kvh = tl.program_id(1)
    pid_split = tl.program_id(2)
    if KEY_WARPS > 1:
        # a warp's keys are a row: the [W, NW] page vectors _attend_range_warps takes
        offs_n = tl.arange(0, KEY_WARPS)[:, None] * (BLOCK_N // KEY_WARPS) + tl.arange(0, BLOCK_N // KEY_WARPS)[None, :]
    else:
        offs_n = tl.arange(0, BLOCK_N)
    bt_row = block_table_ptr + pid_seq.to(tl.int64) * stride_bt
    if not LIMIT_LEFT:
        first_keys = pid_split * tiles_per_split * BLOCK_N + offs_n
        # in bounds of the block-table row whatever the sequence's length; entries past it are never used
        page_first = _load_pages(bt_row, first_keys, bt_width * BLOCK_SIZE, num_blocks, BLOCK_SIZE)
    seqlen_k = tl.load(seqused_k_ptr + pid_seq)
    # Loads do not cross a CTA barrier, and the barrier does not wait for them: without it ptxas issues the two
    # loads above only after cu_seqlens_q's values have arrived (sm_90 SASS), one more memory round trip before the
    # first K/V tile (docs/notes/paged-attention-prologue.md)
    tl.debug_barrier()
    q_start = tl.load(cu_seqlens_q_ptr + pid_seq)
    q_end = tl.load(cu_seqlens_q_ptr + pid_seq + 1)
    q_len = q_end - q_start
    # longer sequences are the prefill kernel's: their programs see no query row and no key, so they run no tile
    # and store nothing. Not an early return: the compiler sinks loads past a return into the branch that uses them.
    # So are sequences whose rows lie outside q (bad cu_seqlens_q); one whose seqused_k is negative or past its
    # block-table row sees no key (its rows are 0). Scalar compares, once per program.
    mine = (q_len > 0) & (q_len <= MAX_Q) & (q_start >= 0) & (q_end <= num_tokens)
    keys_ok = (seqlen_k >= 0) & (seqlen_k.to(tl.int64) <= bt_width.to(tl.int64) * BLOCK_SIZE)
    q_len = tl.where(mine, q_len, 0)
    seqlen_k = tl.where(mine & keys_ok, seqlen_k, 0)
    ctx = seqlen_k - q_len

    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    tok = offs_m // GROUP
    head = pid_kvh * GROUP + offs_m % GROUP
    mask_m = tok < q_len
    mask_d = offs_d < HEAD_DIM
    qpos = ctx + tok
    q_rows = (q_start + tok).to(tl.int64) * stride_qt + head.to(tl.int64) * stride_qh
    q = tl.load(q_ptr + q_rows[:, None] + offs_d[None, :], mask=mask_m[:, None] & mask_d[None, :], other=0.0)

    qk_scale_k = qk_scale
    softcap_in_k = softcap_in
    if KV_FP8:
        k_scale = tl.load(k_scale_ptr)
        qk_scale_k = qk_scale * k_scale
        softcap_in_k = softcap_in * k_scale

    lo, a, b, hi = _key_tiles(ctx, ctx + q_len - 1, seqlen_k, win_left, win_right, BLOCK_N, LIMIT_LEFT, LIMIT_RIGHT)
    if LIMIT_LEFT:
        # the window's first tile depends on the sequence: splits of its own range
        per_split = (hi - lo + num_splits - 1) // num_splits
        s_lo = lo + pid_split * per_split
        s_hi = tl.minimum(s_lo + per_split, hi)
    else:
        # lo is 0 here
        s_lo = pid_split * tiles_per_split
        s_hi = tl.where(pid_split == num_splits - 1, hi, tl.minimum(s_lo + tiles_per_split, hi))
    s_a = tl.maximum(tl.minimum(a, s_hi), s_lo)
    s_b = tl.maximum(tl.minimum(b, s_hi), s_lo)
    if LIMIT_LEFT:
        page_first = _load_pages(bt_row, s_a * BLOCK_N + offs_n, s_b * BLOCK_N, num_blocks, BLOCK_SIZE)

    kvh = pid_kvh.to(tl.int64)
    k_base = k_ptr + kvh * stride_kh
    v_base = v_ptr + kvh * stride_vh
    if KEY_WARPS > 1:
        acc, m_i, l_i = _attend_range_warps(
            q, qpos, k_base, v_base, bt_row, num_blocks, page_first, s_lo, s_a, s_b, s_hi, seqlen_k, win_left,
            win_right, qk_scale_k, softcap_in_k, softcap_out, stride_kb, stride_ks, stride_vb, stride_vs, KEY_WARPS,
            BLOCK_N, BLOCK_SIZE, HEAD_DIM, HEAD_DIM_PAD, LIMIT_LEFT, LIMIT_RIGHT, SOFTCAP,
        )  # fmt: skip
    else:
        acc = tl.zeros([BLOCK_M, HEAD_DIM_PAD], dtype=tl.float32)
        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc, m_i, l_i = _attend_range(
            acc,
            m_i,
            l_i,
            q,
            qpos,
            k_base,
            v_base,
            bt_row,
            num_blocks,
            page_first,
            s_lo,
            s_a,
            s_b,
            s_hi,
            seqlen_k,
            win_left,
            win_right,
            qk_scale_k,
            softcap_in_k,
            softcap_out,
            stride_kb,
            stride_ks,
            stride_vb,
            stride_vs,
            BLOCK_N,
            BLOCK_SIZE,
            HEAD_DIM,
            HEAD_DIM_PAD,
            LIMIT_LEFT,
            LIMIT_RIGHT,
            SOFTCAP,
        )

    if num_splits == 1:
        o = acc * _out_scale(m_i, l_i, sinks_ptr, head, v_scale_ptr, SINKS, KV_FP8)[:, None]
        o_rows = (q_start + tok).to(tl.int64) * stride_ot + head.to(tl.int64) * stride_oh
        tl.store(
            out_ptr + o_rows[:, None] + offs_d[None, :],
            o.to(out_ptr.dtype.element_ty),
            mask=mask_m[:, None] & mask_d[None, :],
        )
    else:
        # partials [num_seqs, num_kv_heads, BLOCK_M, num_splits] (+ [HEAD_DIM]): one row's splits are contiguous
        row = ((pid_seq.to(tl.int64) * tl.num_programs(1) + pid_kvh) * BLOCK_M + offs_m) * num_splits + pid_split
        tl.store(part_m_ptr + row, m_i, mask=mask_m)
        tl.store(part_l_ptr + row, l_i, mask=mask_m)
        tl.store(part_acc_ptr + row[:, None] * HEAD_DIM + offs_d[None, :], acc, mask=mask_m[:, None] & mask_d[None, :])


@triton.jit
def _merge_row(
    part_acc_ptr,
    part_m_ptr,
    part_l_ptr,
    row,
    num_splits,
    offs_s,
    offs_d,
    mask_d,
    HEAD_DIM: tl.constexpr,
    SPLIT_STRIDE: tl.constexpr,
):
    """Merged (unnormalized acc, max, sum) of one query row's splits, whose partials sit at rows ``row + s *
    SPLIT_STRIDE`` of the partial buffers: every split's m, l and acc loaded at once."""
    mask_s = offs_s < num_splits
    rows = row + offs_s * SPLIT_STRIDE  # [MAX_SPLITS]
    m_s = tl.load(part_m_ptr + rows, mask=mask_s, other=float("-inf"))
    l_s = tl.load(part_l_ptr + rows, mask=mask_s, other=0.0)
    part = tl.load(
        part_acc_ptr + rows[:, None] * HEAD_DIM + offs_d[None, :],
        mask=mask_s[:, None] & mask_d[None, :],
        other=0.0,
    )  # [MAX_SPLITS, HEAD_DIM_PAD]
    m_max = tl.max(m_s, 0)
    m_use = tl.where(m_max == float("-inf"), 0.0, m_max)
    w = tl.math.exp2(m_s - m_use)
    return tl.sum(part * w[:, None], 0), m_max, tl.sum(l_s * w, 0)


@triton.jit(do_not_specialize=["num_splits", "num_tokens"])
def _paged_attention_merge_kernel(  # tritonkit: ignore[recompile] rows follow the longest query: 2 buckets
    out_ptr,
    part_acc_ptr,
    part_m_ptr,
    part_l_ptr,
    cu_seqlens_q_ptr,
    sinks_ptr,
    v_scale_ptr,
    num_splits,
    num_tokens,
    stride_ot,
    stride_oh,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PAD: tl.constexpr,
    BLOCK_M: tl.constexpr,
    MAX_Q: tl.constexpr,
    MAX_SPLITS: tl.constexpr,
    SINKS: tl.constexpr,
    KV_FP8: tl.constexpr,
    PDL: tl.constexpr,
):
    """Merges the decode kernel's splits: program (sequence, query head, query token) rescales each split's
    partial sum of its row by exp2(m_split - m_max) and divides by the rescaled sum of l (plus the head's sink).
    The token is grid[2] (at most MAX_Q programs; more than one with speculative decoding): the merges of a
    sequence's tokens run side by side, not one after another in one program. A program whose token lies past its
    sequence's query, or whose sequence is not the decode kernel's, stores nothing.

    PDL (launched as the decode kernel's programmatic dependent, sm_90+): the program starts while the decode
    grid runs, reads cu_seqlens_q, then waits for that grid to complete (its partials visible) before touching
    them, and loads them only for a row it stores; every program waits, so this grid never completes before the
    decode grid. Otherwise the row's partials are loaded together with cu_seqlens_q, not after it: the partial
    buffers hold every (sequence, row) slot, and row t * GROUP + head % GROUP < BLOCK_M for every t < MAX_Q, so the
    read is in bounds whatever the sequence is, and a row that is not the decode kernel's (it holds garbage) is
    dropped at the store. One memory round trip instead of three."""
    pid_seq = tl.program_id(0)
    pid_head = tl.program_id(1)
    t = tl.program_id(2)
    kvh = pid_head // GROUP
    num_kv_heads = tl.num_programs(1) // GROUP
    offs_s = tl.arange(0, MAX_SPLITS)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    mask_d = offs_d < HEAD_DIM
    row = ((pid_seq.to(tl.int64) * num_kv_heads + kvh) * BLOCK_M + t * GROUP + pid_head % GROUP) * num_splits
    if PDL:
        q_start = tl.load(cu_seqlens_q_ptr + pid_seq)
        q_end = tl.load(cu_seqlens_q_ptr + pid_seq + 1)
        # before any return: a program that exited without waiting could let this grid complete first
        gdc_wait()
    else:
        acc, m_max, l_tot = _merge_row(
            part_acc_ptr, part_m_ptr, part_l_ptr, row, num_splits, offs_s, offs_d, mask_d, HEAD_DIM, 1
        )
        q_start = tl.load(cu_seqlens_q_ptr + pid_seq)
        q_end = tl.load(cu_seqlens_q_ptr + pid_seq + 1)
    q_len = q_end - q_start
    # as in the decode kernel: a sequence whose rows lie outside out is dropped, and so is a token past its query
    if (t >= q_len) | (q_len > MAX_Q) | (q_start < 0) | (q_end > num_tokens):
        return
    if PDL:
        # q_len arrived before the wait: a dropped row loads no partial
        acc, m_max, l_tot = _merge_row(
            part_acc_ptr, part_m_ptr, part_l_ptr, row, num_splits, offs_s, offs_d, mask_d, HEAD_DIM, 1
        )
    o = acc * _out_scale(m_max, l_tot, sinks_ptr, pid_head, v_scale_ptr, SINKS, KV_FP8)
    o_row = (q_start + t).to(tl.int64) * stride_ot + pid_head.to(tl.int64) * stride_oh
    tl.store(out_ptr + o_row + offs_d, o.to(out_ptr.dtype.element_ty), mask=mask_d)


@triton.jit(
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
    ]
)
def _paged_attention_prefill_kernel(  # tritonkit: ignore[recompile] tile rows and splitting follow the batch
    q_ptr,
    k_ptr,
    v_ptr,
    out_ptr,
    part_acc_ptr,
    part_m_ptr,
    part_l_ptr,
    cu_seqlens_q_ptr,
    seqused_k_ptr,
    block_table_ptr,
    sinks_ptr,
    k_scale_ptr,
    v_scale_ptr,
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
    stride_kb,
    stride_ks,
    stride_kh,
    stride_vb,
    stride_vs,
    stride_vh,
    stride_bt,
    num_splits,
    decode_max_q,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PAD: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    LIMIT_LEFT: tl.constexpr,
    LIMIT_RIGHT: tl.constexpr,
    SOFTCAP: tl.constexpr,
    SINKS: tl.constexpr,
    KV_FP8: tl.constexpr,
    SPLIT: tl.constexpr,
):
    """Program (query tile, KV head[, KV split]): BLOCK_Q consecutive query tokens of one sequence x the GROUP query
    heads of the KV head (BLOCK_M rows) against the KV tiles they can see. grid[0] is (query tiles, KV heads)
    flattened with the KV head fastest, over (T + num_seqs * (BLOCK_Q - 1)) // BLOCK_Q query tiles, sequence s's
    from _first_tile(cu[s], s) (exactly ceil(T / BLOCK_Q) for one sequence); programs past a sequence's last tile,
    or of a decode sequence, run no tile and store nothing.

    SPLIT (a batch of few query tiles over many keys: chunked prefill): grid[1] splits each tile's KV range into
    num_splits even shares, and each program writes its rows' unnormalized partials (acc, max, sum) at
    ``(program_id(0) * num_splits + split) * BLOCK_M + row`` for the prefill merge kernel.

    The sequence's key count and (without a left window, where the first interior tile is tile 0) the block-table
    entries of its first tile are read together with cu_seqlens_q (both in bounds whatever the sequence): after the
    binary search for the sequence (log2(num_seqs) dependent loads), the first K/V tile waits on two memory round
    trips instead of four."""
    # the last tiles of a sequence see the most keys under causal masking: start them first, for every KV head
    # before any lighter tile (launch order is program order; heavy programs started late make the tail)
    pid = tl.num_programs(0) - 1 - tl.program_id(0)
    pid_q = pid // num_kv_heads
    pid_kvh = pid % num_kv_heads
    seq = _find_seq(cu_seqlens_q_ptr, pid_q, num_seqs, BLOCK_Q)
    bt_row = block_table_ptr + seq.to(tl.int64) * stride_bt
    if not LIMIT_LEFT and not SPLIT:
        page_first = _load_pages(bt_row, tl.arange(0, BLOCK_N), bt_width * BLOCK_SIZE, num_blocks, BLOCK_SIZE)
    seqlen_k = tl.load(seqused_k_ptr + seq)
    # as in the decode kernel: the barrier keeps the two loads above ahead of cu_seqlens_q's
    tl.debug_barrier()
    q_start = tl.load(cu_seqlens_q_ptr + seq)
    q_end = tl.load(cu_seqlens_q_ptr + seq + 1)
    t0, q_len, seqlen_k = _prefill_rows(
        pid_q, seq, q_start, q_end, seqlen_k, num_tokens, decode_max_q, bt_width, BLOCK_Q, BLOCK_SIZE
    )
    ctx = seqlen_k - q_len

    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    tok = t0 + offs_m // GROUP
    head = pid_kvh * GROUP + offs_m % GROUP
    mask_m = (offs_m < BLOCK_Q * GROUP) & (tok < q_len)
    mask_d = offs_d < HEAD_DIM
    # positions fit int32 (they are < seqlen_k); the masks compare them with int32 key offsets
    qpos = (ctx + tok).to(tl.int32)
    q_rows = (q_start + tok) * stride_qt + head.to(tl.int64) * stride_qh
    q = tl.load(q_ptr + q_rows[:, None] + offs_d[None, :], mask=mask_m[:, None] & mask_d[None, :], other=0.0)

    qk_scale_k = qk_scale
    softcap_in_k = softcap_in
    if KV_FP8:
        k_scale = tl.load(k_scale_ptr)
        qk_scale_k = qk_scale * k_scale
        softcap_in_k = softcap_in * k_scale

    lo, a, b, hi = _prefill_key_tiles(
        t0, q_len, ctx, seqlen_k, win_left, win_right, num_splits, tl.program_id(1), BLOCK_Q, BLOCK_N, LIMIT_LEFT,
        LIMIT_RIGHT, SPLIT,
    )  # fmt: skip
    kvh = pid_kvh.to(tl.int64)
    if LIMIT_LEFT or SPLIT:
        page_first = _load_pages(bt_row, a * BLOCK_N + tl.arange(0, BLOCK_N), b * BLOCK_N, num_blocks, BLOCK_SIZE)
    acc = tl.zeros([BLOCK_M, HEAD_DIM_PAD], dtype=tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc, m_i, l_i = _attend_range(
        acc,
        m_i,
        l_i,
        q,
        qpos,
        k_ptr + kvh * stride_kh,
        v_ptr + kvh * stride_vh,
        bt_row,
        num_blocks,
        page_first,
        lo,
        a,
        b,
        hi,
        seqlen_k,
        win_left,
        win_right,
        qk_scale_k,
        softcap_in_k,
        softcap_out,
        stride_kb,
        stride_ks,
        stride_vb,
        stride_vs,
        BLOCK_N,
        BLOCK_SIZE,
        HEAD_DIM,
        HEAD_DIM_PAD,
        LIMIT_LEFT,
        LIMIT_RIGHT,
        SOFTCAP,
    )

    if SPLIT:
        row = (tl.program_id(0).to(tl.int64) * num_splits + tl.program_id(1)) * BLOCK_M + offs_m
        tl.store(part_m_ptr + row, m_i, mask=mask_m)
        tl.store(part_l_ptr + row, l_i, mask=mask_m)
        tl.store(part_acc_ptr + row[:, None] * HEAD_DIM + offs_d[None, :], acc, mask=mask_m[:, None] & mask_d[None, :])
    else:
        o = acc * _out_scale(m_i, l_i, sinks_ptr, head, v_scale_ptr, SINKS, KV_FP8)[:, None]
        o_rows = (q_start + tok) * stride_ot + head.to(tl.int64) * stride_oh
        tl.store(
            out_ptr + o_rows[:, None] + offs_d[None, :],
            o.to(out_ptr.dtype.element_ty),
            mask=mask_m[:, None] & mask_d[None, :],
        )


@triton.jit
def _prefill_merge_rows(
    out_ptr,
    part_acc_ptr,
    part_m_ptr,
    part_l_ptr,
    sinks_ptr,
    v_scale_ptr,
    p,
    r,
    pid_kvh,
    t0,
    q_start,
    q_len,
    num_splits,
    stride_ot,
    stride_oh,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PAD: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    ROWS: tl.constexpr,
    SINKS: tl.constexpr,
    KV_FP8: tl.constexpr,
):
    """The prefill merge of rows [r * ROWS, (r + 1) * ROWS) of prefill program p's tile, which the prefill path
    owns: the splits folded one at a time in one online pass (a [ROWS, head_dim] float32 tile a split in flight),
    rows past the sequence's query unread and unwritten."""
    offs_r = r * ROWS + tl.arange(0, ROWS)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    mask_d = offs_d < HEAD_DIM
    tok = t0 + offs_r // GROUP
    head = pid_kvh * GROUP + offs_r % GROUP
    mask_r = (offs_r < BLOCK_Q * GROUP) & (tok < q_len)
    row0 = p.to(tl.int64) * num_splits * BLOCK_M + offs_r
    acc = tl.zeros([ROWS, HEAD_DIM_PAD], dtype=tl.float32)
    m_i = tl.full([ROWS], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([ROWS], dtype=tl.float32)
    for s in range(0, num_splits):
        row = row0 + s * BLOCK_M
        m_s = tl.load(part_m_ptr + row, mask=mask_r, other=float("-inf"))
        l_s = tl.load(part_l_ptr + row, mask=mask_r, other=0.0)
        acc_s = tl.load(
            part_acc_ptr + row[:, None] * HEAD_DIM + offs_d[None, :], mask=mask_r[:, None] & mask_d[None, :], other=0.0
        )
        m_new = tl.maximum(m_i, m_s)
        # rows with no key in any split so far keep m = -inf: subtract 0 so exp2 sees -inf, not NaN
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.math.exp2(m_i - m_use)
        beta = tl.math.exp2(m_s - m_use)
        acc = acc * alpha[:, None] + acc_s * beta[:, None]
        l_i = l_i * alpha + l_s * beta
        m_i = m_new
    o = acc * _out_scale(m_i, l_i, sinks_ptr, head, v_scale_ptr, SINKS, KV_FP8)[:, None]
    o_rows = (q_start + tok) * stride_ot + head.to(tl.int64) * stride_oh
    tl.store(
        out_ptr + o_rows[:, None] + offs_d[None, :],
        o.to(out_ptr.dtype.element_ty),
        mask=mask_r[:, None] & mask_d[None, :],
    )


@triton.jit(do_not_specialize=["num_seqs", "num_splits", "num_tokens", "decode_max_q"])
def _paged_attention_prefill_merge_kernel(  # tritonkit: ignore[recompile] one per prefill tile-row bucket
    out_ptr,
    part_acc_ptr,
    part_m_ptr,
    part_l_ptr,
    cu_seqlens_q_ptr,
    sinks_ptr,
    v_scale_ptr,
    num_seqs,
    num_kv_heads,
    num_splits,
    num_tokens,
    decode_max_q,
    stride_ot,
    stride_oh,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PAD: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    MAX_SPLITS: tl.constexpr,
    ROWS: tl.constexpr,
    SINKS: tl.constexpr,
    KV_FP8: tl.constexpr,
    PDL: tl.constexpr,
):
    """Merges the split prefill kernel's partials: program (prefill program, slice r of ROWS rows of its tile's
    BLOCK_Q * GROUP) finds its query tile as that prefill program did. ROWS == 1 merges row r's splits as the decode
    merge does (every split's m, l and acc loaded at once, _merge_row; splits of a row lie BLOCK_M rows apart);
    more rows fold the splits one at a time in one online pass (few splits: config.prefill_merge_rows). Rows the
    prefill program did not own (past the sequence, a decode sequence, rows outside q) are neither read nor written,
    exactly as that program's row mask had them.

    PDL (launched as the prefill kernel's programmatic dependent, sm_90+; the prefill kernel triggers it implicitly
    as each of its programs exits): the tile search over cu_seqlens_q, which the prefill kernel does not write, runs
    while the last prefill programs finish; every program then waits for the prefill grid's completion (its
    partials visible) before any return or partial load, so this grid never completes before the prefill grid."""
    p = tl.program_id(0)
    r = tl.program_id(1)
    pid = tl.num_programs(0) - 1 - p
    pid_q = pid // num_kv_heads
    pid_kvh = pid % num_kv_heads
    seq = _find_seq(cu_seqlens_q_ptr, pid_q, num_seqs, BLOCK_Q)
    q_start = tl.load(cu_seqlens_q_ptr + seq)
    q_end = tl.load(cu_seqlens_q_ptr + seq + 1)
    t0, mine = _prefill_tile(pid_q, seq, q_start, q_end, num_tokens, decode_max_q, BLOCK_Q)
    if PDL:
        gdc_wait()
    if not mine:
        return
    if ROWS > 1:
        _prefill_merge_rows(
            out_ptr, part_acc_ptr, part_m_ptr, part_l_ptr, sinks_ptr, v_scale_ptr, p, r, pid_kvh, t0, q_start,
            q_end - q_start, num_splits, stride_ot, stride_oh, GROUP, HEAD_DIM, HEAD_DIM_PAD, BLOCK_M, BLOCK_Q, ROWS,
            SINKS, KV_FP8,
        )  # fmt: skip
        return
    tok = t0 + r // GROUP
    if tok >= q_end - q_start:
        return
    head = pid_kvh * GROUP + r % GROUP
    offs_s = tl.arange(0, MAX_SPLITS)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    mask_d = offs_d < HEAD_DIM
    # the prefill program's partial rows (p * num_splits + split) * BLOCK_M + r
    row = p.to(tl.int64) * num_splits * BLOCK_M + r
    acc, m_max, l_tot = _merge_row(
        part_acc_ptr, part_m_ptr, part_l_ptr, row, num_splits, offs_s, offs_d, mask_d, HEAD_DIM, BLOCK_M
    )
    o = acc * _out_scale(m_max, l_tot, sinks_ptr, head, v_scale_ptr, SINKS, KV_FP8)
    o_row = (q_start + tok) * stride_ot + head.to(tl.int64) * stride_oh
    tl.store(out_ptr + o_row + offs_d, o.to(out_ptr.dtype.element_ty), mask=mask_d)
