import triton
import triton.language as tl

try:  # programmatic dependent launch (sm_90+); Triton releases without it never set PDL
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
except ImportError:  # pragma: no cover - older Triton
    gdc_launch_dependents = gdc_wait = None

# Triton 3.6's interpreter multiplies the raw uint16 bits of bfloat16 dot operands and converts float32 to bfloat16
# by truncation; under it (CPU tests only) dots widen bf16 to float32 (exact) and the bf16 roundings are done to
# nearest-even by hand, as the GPU does them. Compiled kernels never see these branches.
_INTERPRETING = tl.constexpr(bool(triton.knobs.runtime.interpret))
FP8_MAX = tl.constexpr(448.0)
# floor of a dynamic activation scale's amax: an all-zero row or group quantizes to zeros, not 0 / 0
AMAX_FLOOR = tl.constexpr(1e-10)
# QUANT: the weight scheme. 0: weights in the activation dtype. 1: fp8, one scale per output column (per-tensor
# scales are per-channel ones with a zero column stride), applied in the epilogue. 2: fp8, 128 x 128 blocks,
# applied per K tile.
QUANT_NONE = tl.constexpr(0)
QUANT_CHANNEL = tl.constexpr(1)
QUANT_BLOCK = tl.constexpr(2)
SCALE_BLOCK = tl.constexpr(128)


@triton.jit
def _fp8_widen(x):
    """e4m3 -> float32 under the interpreter, whose conversion turns NaN (0x7F / 0xFF) into a number."""
    nan = (x.to(tl.uint8, bitcast=True) & 0x7F) == 0x7F
    return tl.where(nan, float("nan"), x.to(tl.float32))


@triton.jit
def _dot(a, b):
    if _INTERPRETING and a.dtype == tl.bfloat16:
        return tl.dot(a.to(tl.float32), b.to(tl.float32))
    if _INTERPRETING and a.dtype == tl.float8e4nv:
        return tl.dot(_fp8_widen(a), _fp8_widen(b))
    return tl.dot(a, b)


@triton.jit
def _dot_acc(a, b, acc):
    if _INTERPRETING and a.dtype == tl.bfloat16:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc)
    return tl.dot(a, b, acc)


@triton.jit
def _mma(a, w, acc, a_s, w_s, QUANT: tl.constexpr, SWAP_AB: tl.constexpr, W_SCALAR: tl.constexpr = False):
    """One K tile into the float32 accumulator: ``a [BLOCK_M, BLOCK_K] . w [BLOCK_K, BLOCK_N]``, or with SWAP_AB
    ``w [BLOCK_N, BLOCK_K] . a^T`` into ``acc^T [BLOCK_N, BLOCK_M]``, so a tile of few rows is wgmma's N and the
    weights its M (>= 64): Hopper's fp8 MMA is wgmma only, and a 16-row fp8 tile otherwise runs as f16 mma.sync
    behind a conversion of every weight. Block-wise fp8 scales each tile's dot by its row (a_s) and column (w_s)
    scales; per-channel fp8 adds a fresh dot per tile in float32 (Hopper's fp8 MMA accumulates with fewer mantissa
    bits, and the sum over K runs to 7168 for DeepSeek-V3). W_SCALAR: the tile's block-wise weight scale is one
    number (all its columns in one 128 block), so no per-column vector is loaded or laid out."""
    if SWAP_AB:
        if QUANT == QUANT_BLOCK and W_SCALAR:
            acc += _dot(w, tl.trans(a)) * (w_s * a_s[None, :])
        elif QUANT == QUANT_BLOCK:
            acc += _dot(w, tl.trans(a)) * (w_s[:, None] * a_s[None, :])
        elif QUANT == QUANT_CHANNEL:
            acc += _dot(w, tl.trans(a))
        else:
            acc = _dot_acc(w, tl.trans(a), acc)
    else:
        if QUANT == QUANT_BLOCK and W_SCALAR:
            acc += _dot(a, w) * (a_s[:, None] * w_s)
        elif QUANT == QUANT_BLOCK:
            acc += _dot(a, w) * (a_s[:, None] * w_s[None, :])
        elif QUANT == QUANT_CHANNEL:
            acc += _dot(a, w)
        else:
            acc = _dot_acc(a, w, acc)
    return acc


@triton.jit
def _w_tile(base, offs_n, offs_k, stride_n, SWAP_AB: tl.constexpr):
    """Pointers of a weight tile, rows ``offs_n`` of a row-major matrix contiguous along K: ``[BLOCK_K, BLOCK_N]``
    (its transpose, for ``a . w``), or ``[BLOCK_N, BLOCK_K]`` with SWAP_AB."""
    if SWAP_AB:
        ptrs = base + offs_n[:, None] * stride_n + offs_k[None, :]
    else:
        ptrs = base + offs_n[None, :] * stride_n + offs_k[:, None]
    return ptrs


@triton.jit
def _w_desc_tile(desc, offsets, ROWS: tl.constexpr, BLOCK_K: tl.constexpr, SWAP_AB: tl.constexpr):
    """A weight tile of ROWS rows through a tensor descriptor (its block's leading dims flattened into the rows;
    rows past the tensor read as zeros): ``[BLOCK_K, ROWS]`` for ``a . w``, ``[ROWS, BLOCK_K]`` with SWAP_AB."""
    w = tl.reshape(desc.load(offsets), (ROWS, BLOCK_K))
    if not SWAP_AB:
        w = tl.trans(w)
    return w


@triton.jit
def _w_mask(mask_n, mask_k, SWAP_AB: tl.constexpr):
    """The mask of :func:`_w_tile`'s tile."""
    if SWAP_AB:
        mask = mask_n[:, None] & mask_k[None, :]
    else:
        mask = mask_k[:, None] & mask_n[None, :]
    return mask


@triton.jit
def _round(x, ACT_BF16: tl.constexpr):
    """float32 -> the activation dtype, round to nearest even (finite values; the interpreter's bf16 truncation
    replaced by the same rounding done on the bits)."""
    if ACT_BF16:
        if _INTERPRETING:
            bits = x.to(tl.uint32, bitcast=True)
            bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
            x = bits.to(tl.float32, bitcast=True)
        y = x.to(tl.bfloat16)
    else:
        y = x.to(tl.float16)
    return y


@triton.jit
def _quant_fp8(x, scale):
    """``x / scale`` (IEEE division, as the reference's float32 division) clamped to e4m3's range, rounded to fp8."""
    # NaN stays NaN (an intermediate that overflowed the activation dtype gives inf / inf), as torch.clamp keeps it
    q = tl.clamp(tl.math.div_rn(x, scale), -FP8_MAX, FP8_MAX, propagate_nan=tl.PropagateNan.ALL)
    if _INTERPRETING:
        # Triton 3.6's interpreter rounds float32 -> e4m3 wrongly (ties away, and 31 -> 16 across a binade): round to
        # nearest even by hand, to 3 mantissa bits for normals, to multiples of 2^-9 below 2^-6 (subnormals), so the
        # conversion below is exact
        bits = q.to(tl.uint32, bitcast=True)
        normal = ((bits + 0x7FFFF + ((bits >> 20) & 1)) & 0xFFF00000).to(tl.float32, bitcast=True)
        q = tl.where(tl.abs(q) < 0.015625, (q + 24576.0) - 24576.0, normal)
        # and it turns NaN into a number: write e4m3fn's NaN (0x7F) itself
        nan = tl.full(q.shape, 0x7F, tl.uint8).to(tl.float8e4nv, bitcast=True)
        return tl.where(q != q, nan, q.to(tl.float8e4nv))  # noqa: PLR0124 - the NaN test
    return q.to(tl.float8e4nv)


@triton.jit
def _grouped_tile(pid, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of a flat program id, GROUP_M row blocks at a time so programs running together share the
    weight tiles of one expert in L2."""
    in_group = GROUP_M * num_pid_n
    first_m = (pid // in_group) * GROUP_M
    size_m = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % in_group) % size_m
    pid_n = (pid % in_group) // size_m
    return pid_m, pid_n


@triton.jit
def _block_rows(sorted_ids_ptr, expert_ids_ptr, num_post_ptr, pid_m, numel, num_experts, BLOCK_M: tl.constexpr):
    """The expert (int64) and the slots of sorted block ``pid_m``, and whether the block has work: it lies below
    num_tokens_post_padded and its expert is one of this rank's (-1, or any id out of range, is no work)."""
    num_post, expert, busy = _block_expert(expert_ids_ptr, num_post_ptr, pid_m, num_experts, BLOCK_M)
    slot, mask_m = _block_slots(sorted_ids_ptr, pid_m * BLOCK_M + tl.arange(0, BLOCK_M), num_post, numel)
    return expert, busy, slot, mask_m


@triton.jit
def _block_expert(expert_ids_ptr, num_post_ptr, pid_m, num_experts, BLOCK_M: tl.constexpr):
    """(num_tokens_post_padded, the expert (int64) of sorted block ``pid_m``, whether the block has work: it lies
    below num_tokens_post_padded and its expert is one of this rank's; -1, or any id out of range, is no work).
    Scalars only: kernel_hopper's Gluon GEMMs call it too."""
    num_post = tl.load(num_post_ptr)
    expert = tl.load(expert_ids_ptr + pid_m).to(tl.int64)
    busy = (pid_m * BLOCK_M < num_post) & (expert >= 0) & (expert < num_experts)
    return num_post, expert, busy


@triton.jit
def _block_slots(sorted_ids_ptr, offs, num_post, numel):
    """(slot ids (int64), which are real) at sorted positions ``offs`` (the caller's layout: kernel_hopper calls it
    too). sorted_ids holds max_padded entries, not a whole number of blocks: an idle last block reads none of them;
    padding holds numel, and anything outside [0, numel) is masked, so no id value addresses out of bounds."""
    slot = tl.load(sorted_ids_ptr + offs, mask=offs < num_post, other=numel).to(tl.int64)
    return slot, (slot >= 0) & (slot < numel)


@triton.jit
def _slot_expert(topk_ids_ptr, expert_map_ptr, m, j, stride_idm, num_global, num_local, HAS_MAP: tl.constexpr):
    """The local expert (int64) of slot (m, j) and whether it is one of this rank's: an id out of [0, num_global),
    or one the map sends to no local expert, is no work and addresses nothing."""
    e = tl.load(topk_ids_ptr + m.to(tl.int64) * stride_idm + j).to(tl.int64)
    ok = (e >= 0) & (e < num_global)
    if HAS_MAP:
        e = tl.load(expert_map_ptr + tl.where(ok, e, 0), mask=ok, other=-1).to(tl.int64)
        ok = ok & (e >= 0) & (e < num_local)
    return e, ok


@triton.jit
def _rows(
    sorted_ids_ptr,
    expert_ids_ptr,
    num_post_ptr,
    topk_ids_ptr,
    expert_map_ptr,
    pid_m,
    numel,
    num_global,
    num_experts,
    stride_idm,
    TOPK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    SLOTS: tl.constexpr,
    HAS_MAP: tl.constexpr,
):
    """:func:`_block_rows` of the sorted layout; with SLOTS, block ``pid_m`` is slot ``pid_m`` alone (its row 0),
    its expert read from ``topk_ids`` (no alignment launch)."""
    if SLOTS:
        expert, busy = _slot_expert(
            topk_ids_ptr, expert_map_ptr, pid_m // TOPK, pid_m % TOPK, stride_idm, num_global, num_experts, HAS_MAP
        )
        first = tl.arange(0, BLOCK_M) == 0
        slot = tl.where(first, pid_m, numel).to(tl.int64)
        mask_m = first
    else:
        expert, busy, slot, mask_m = _block_rows(
            sorted_ids_ptr, expert_ids_ptr, num_post_ptr, pid_m, numel, num_experts, BLOCK_M
        )
    return expert, busy, slot, mask_m


@triton.jit
def _h_rows(pid_m, slot, BLOCK_M: tl.constexpr, SLOTS: tl.constexpr):
    """h's rows of a block: the block's sorted positions, or with SLOTS the slot itself (h in slot order)."""
    if SLOTS:
        rows = slot
    else:
        rows = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    return rows


@triton.jit
def _topk_sum_last(
    c_ptr,
    out_ptr,
    counters_ptr,
    topk_ids_ptr,
    expert_map_ptr,
    pid_m,
    pid_n,
    offs_n,
    mask_n,
    busy,
    num_pid_n,
    num_global,
    num_experts,
    stride_idm,
    stride_cm,
    stride_om,
    TOPK: tl.constexpr,
    HAS_MAP: tl.constexpr,
    ACT_BF16: tl.constexpr,
):
    """GEMM2's top-k sum with blocks of one slot: the program that stores the last of token m's rows of c for this
    column tile (a counter per token and tile, zeroed by GEMM1) sums them, ``out[m] = sum_j c[m * TOPK + j]`` in
    float32 in j order, as the sum kernel does; a token none of whose slots is this rank's gets zeros from its
    j = 0 program."""
    m = pid_m // TOPK
    valid = 0
    for j in tl.static_range(TOPK):
        _, ok = _slot_expert(topk_ids_ptr, expert_map_ptr, m, j, stride_idm, num_global, num_experts, HAS_MAP)
        valid += ok.to(tl.int32)
    if busy:
        # every thread's row of c is stored before the release: the last program reads them all
        tl.debug_barrier()
        arrived = tl.atomic_add(counters_ptr + m * num_pid_n + pid_n, 1, sem="acq_rel", scope="gpu")
        last = arrived == valid - 1
    else:
        last = (valid == 0) & (pid_m % TOPK == 0)
    if last:
        # this program's own row of c too: every thread's store before any thread's load
        tl.debug_barrier()
        acc = tl.zeros(offs_n.shape, dtype=tl.float32)
        for j in tl.static_range(TOPK):
            _, ok = _slot_expert(topk_ids_ptr, expert_map_ptr, m, j, stride_idm, num_global, num_experts, HAS_MAP)
            # other programs' rows: from L2, past this SM's L1
            row = c_ptr + (m.to(tl.int64) * TOPK + j) * stride_cm
            # where(), not `mask_n & ok`: see _fused_moe_sum_kernel
            acc += tl.load(row + offs_n, mask=tl.where(ok, mask_n, False), other=0.0, cache_modifier=".cg").to(
                tl.float32
            )
        tl.store(out_ptr + m.to(tl.int64) * stride_om + offs_n, _round(acc, ACT_BF16), mask=mask_n)


@triton.jit
def _half_scaled(d, a_s, wsg, wsu, offs_r, BLOCK_N: tl.constexpr):
    """A gate/up dot tile ``d`` scaled by its rows' activation scales and each half's weight scale (LAZY_SCALE)."""
    return d * (a_s[:, None] * tl.where(offs_r < BLOCK_N, wsg, wsu)[None, :])


@triton.jit
def _gemm1_h(
    a_ptr,
    a_scale_ptr,
    w_ptr,
    w_scale_ptr,
    topk_weights_ptr,
    expert,
    token,
    slot,
    mask_m,
    n0,
    N,
    K,
    stride_am,
    stride_asm,
    stride_ask,
    stride_we,
    stride_wn,
    stride_wse,
    stride_wsn,
    stride_wsk,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    QUANT: tl.constexpr,
    ROUTED_ON_INPUT: tl.constexpr,
    GELU: tl.constexpr,
    ACT_BF16: tl.constexpr,
    SWAP_AB: tl.constexpr,
    W_TMA: tl.constexpr,
    W_HALF_SCALES: tl.constexpr,
    LAZY_SCALE: tl.constexpr = False,
):
    """``h [BLOCK_M, BLOCK_N]`` of columns ``n0 + [0, BLOCK_N)`` for one block's rows, rounded to the activation
    dtype: one weight tile holds the gate's BLOCK_N rows and then the up half's, one dot of 2 x BLOCK_N columns into
    one float32 accumulator, split in the epilogue. W_HALF_SCALES (block-wise fp8, N a multiple of 128): each half's
    rows lie in one 128 block, so a K tile's weight scales are two numbers, not a loaded vector."""
    # the tile's rows: gate columns n0 + [0, BLOCK_N), then up columns the same (w1[e] is [2N, K] row-major)
    offs_r = tl.arange(0, 2 * BLOCK_N)
    col_r = n0 + offs_r % BLOCK_N
    mask_r = col_r < N
    row_r = (offs_r // BLOCK_N) * N + col_r
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + token[:, None] * stride_am + offs_k[None, :]  # [BLOCK_M, BLOCK_K]
    if not W_TMA:
        w_ptrs = _w_tile(w_ptr + expert * stride_we, row_r, offs_k, stride_wn, SWAP_AB)
    if QUANT == QUANT_BLOCK:
        if W_HALF_SCALES:
            wsg_ptr = w_scale_ptr + expert * stride_wse + (n0 // SCALE_BLOCK) * stride_wsn
            wsu_ptr = w_scale_ptr + expert * stride_wse + ((N + n0) // SCALE_BLOCK) * stride_wsn
        else:
            ws_ptrs = w_scale_ptr + expert * stride_wse + (row_r // SCALE_BLOCK) * stride_wsn  # [2 * BLOCK_N]
        as_ptrs = a_scale_ptr + token * stride_asm  # [BLOCK_M]
    if SWAP_AB:
        acc = tl.zeros((2 * BLOCK_N, BLOCK_M), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, 2 * BLOCK_N), dtype=tl.float32)
    if LAZY_SCALE:
        tl.static_assert(QUANT == QUANT_BLOCK and W_HALF_SCALES and not SWAP_AB, "LAZY_SCALE: block fp8, half scales")
        d_prev = tl.zeros((BLOCK_M, 2 * BLOCK_N), dtype=tl.float32)
        as_prev = tl.zeros((BLOCK_M,), dtype=tl.float32)
        wsg_prev = 0.0
        wsu_prev = 0.0
    for k0 in range(0, K, BLOCK_K):
        mask_k = offs_k < K - k0
        a = tl.load(a_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        if W_TMA:
            # rows and columns past w1 read as zeros; columns past N of the gate are up rows, never stored
            w = _w_desc_tile(w_ptr, [expert.to(tl.int32), 0, n0, k0], 2 * BLOCK_N, BLOCK_K, SWAP_AB)
        else:
            w = tl.load(w_ptrs, mask=_w_mask(mask_r, mask_k, SWAP_AB), other=0.0)
            w_ptrs += BLOCK_K
        if QUANT == QUANT_BLOCK:
            # BLOCK_K divides 128: one scale per row and per column for this tile
            kb = k0 // SCALE_BLOCK
            a_s = tl.load(as_ptrs + kb * stride_ask, mask=mask_m, other=0.0)
            if W_HALF_SCALES:
                wsg = tl.load(wsg_ptr + kb * stride_wsk)
                wsu = tl.load(wsu_ptr + kb * stride_wsk)
                w_s = tl.where(offs_r < BLOCK_N, wsg, wsu)
            else:
                w_s = tl.load(ws_ptrs + kb * stride_wsk, mask=mask_r, other=0.0)
        else:
            a_s, w_s = 0.0, 0.0  # no per-tile scales
        if LAZY_SCALE:
            # the previous K block's tile scaled in before this block's dot: the same FMAs in the same K order
            acc += _half_scaled(d_prev, as_prev, wsg_prev, wsu_prev, offs_r, BLOCK_N)
            d_prev = _dot(a, w)
            as_prev = a_s
            wsg_prev = wsg
            wsu_prev = wsu
        else:
            acc = _mma(a, w, acc, a_s, w_s, QUANT, SWAP_AB)
        a_ptrs += BLOCK_K
    if LAZY_SCALE:
        acc += _half_scaled(d_prev, as_prev, wsg_prev, wsu_prev, offs_r, BLOCK_N)
    if SWAP_AB:
        acc = tl.trans(acc)
    if QUANT == QUANT_CHANNEL:
        # per-token (or static: stride 0) activation scale x per-column (or per-tensor: stride 0) weight scale
        a_s = tl.load(a_scale_ptr + token * stride_asm, mask=mask_m, other=0.0)
        w_s = tl.load(w_scale_ptr + expert * stride_wse + row_r * stride_wsn, mask=mask_r, other=0.0)
        acc = acc * a_s[:, None] * w_s[None, :]
    if ROUTED_ON_INPUT:
        # the router weight scales x (topk == 1): GEMM1 is linear, so it scales both halves' float32 sums
        wt = tl.load(topk_weights_ptr + slot, mask=mask_m, other=0.0).to(tl.float32)
        acc = acc * wt[:, None]
    # columns [0, BLOCK_N) are the gate's, [BLOCK_N, 2 BLOCK_N) the up half's
    acc_g, acc_u = tl.split(tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N)), (0, 2, 1)))
    return _act_mul(acc_g, acc_u, GELU, ACT_BF16)


@triton.jit
def _act_mul(acc_g, acc_u, GELU: tl.constexpr, ACT_BF16: tl.constexpr):
    """h = act(gate) * up from the two float32 sums, rounded once to the activation dtype (kernel_hopper's GEMM1
    calls it too: the same operations)."""
    if GELU:
        act = 0.5 * acc_g * (1.0 + tl.math.erf(acc_g * 0.7071067811865476))
    else:
        act = acc_g / (1.0 + tl.exp(-acc_g))
    return _round(act * acc_u, ACT_BF16)


@triton.jit
def _h_group_scale(amax):
    """The float32 scale of an h row's 128-column group from its amax: ``max(amax, floor) / 448``, IEEE division."""
    return tl.math.div_rn(tl.maximum(amax, AMAX_FLOOR), FP8_MAX)


@triton.jit
def _h_fp8_amax(h, mask):
    """Row amax ``[BLOCK_M]`` (float32) of h's masked elements."""
    return tl.max(tl.abs(tl.where(mask, h.to(tl.float32), 0.0)), axis=1)


@triton.jit(do_not_specialize=["numel", "num_pid_m"])
def _fused_moe_gemm1_kernel(  # tritonkit: ignore[recompile] tiles follow the M bucket: a compile per config
    a_ptr,
    a_scale_ptr,
    w_ptr,
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
    K,
    num_experts,
    stride_am,
    stride_asm,
    stride_ask,
    stride_we,
    stride_wn,
    stride_wse,
    stride_wsn,
    stride_wsk,
    stride_hm,
    stride_hsm,
    topk_ids_ptr,
    expert_map_ptr,
    counters_ptr,
    num_global,
    num_counters,
    stride_idm,
    TOPK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    QUANT: tl.constexpr,
    ROUTED_ON_INPUT: tl.constexpr,
    GELU: tl.constexpr,
    ACT_BF16: tl.constexpr,
    H_FP8: tl.constexpr,
    SWAP_AB: tl.constexpr,
    W_TMA: tl.constexpr,
    SLOTS: tl.constexpr,
    HAS_MAP: tl.constexpr,
    ZERO_BLOCK: tl.constexpr,
    W_HALF_SCALES: tl.constexpr = False,
    LAZY_SCALE: tl.constexpr = False,
    PDL_TRIGGER: tl.constexpr = False,
):
    """``h[row, n] = act(x[slot // TOPK] . w1[e, n]) * (x[slot // TOPK] . w1[e, N + n])`` for one block of BLOCK_M
    sorted slots (one expert) and BLOCK_N columns of each half (:func:`_gemm1_h`), h's rows in sorted order (row =
    the slot's sorted position). W_TMA: ``w_ptr`` is a tensor descriptor of w1 as [E, 2, N, K] that loads both
    halves' rows at once. With H_FP8 (block-wise fp8) h is quantized per 128-column group in the epilogue: h in fp8
    and one float32 scale per (row, group); a program then holds a whole group, as one BLOCK_N = 128 tile or, at
    BLOCK_N = 64, as two tiles computed one after the other (a 128-row tile of 2 x 128 columns spills at 8 warps;
    two of 2 x 64 do not). SLOTS: blocks of one slot (:func:`_rows`), h in slot order, and the programs zero GEMM2's
    top-k counters (ZERO_BLOCK each). PDL_TRIGGER: GEMM2, launched as this launch's programmatic dependent, may
    start once every program has begun."""
    # columns of one program: a whole fp8 scale group with H_FP8
    PASSES: tl.constexpr = SCALE_BLOCK // BLOCK_N if H_FP8 else 1
    tl.static_assert(not H_FP8 or (BLOCK_N * PASSES == SCALE_BLOCK and PASSES <= 2), "H_FP8 needs BLOCK_N 128 or 64")
    if PDL_TRIGGER:
        gdc_launch_dependents()
    pid_m, pid_n = _grouped_tile(tl.program_id(0), num_pid_m, tl.cdiv(N, BLOCK_N * PASSES), GROUP_M)
    if SLOTS:
        offs_z = tl.program_id(0) * ZERO_BLOCK + tl.arange(0, ZERO_BLOCK)
        tl.store(counters_ptr + offs_z, tl.zeros((ZERO_BLOCK,), dtype=tl.int32), mask=offs_z < num_counters)
    expert, busy, slot, mask_m = _rows(
        sorted_ids_ptr, expert_ids_ptr, num_post_ptr, topk_ids_ptr, expert_map_ptr, pid_m, numel, num_global,
        num_experts, stride_idm, TOPK, BLOCK_M, SLOTS, HAS_MAP,
    )  # fmt: skip
    if busy:
        # masked rows divide 0, not a negative slot (C division), though nothing reads through them
        token = tl.where(mask_m, slot, 0) // TOPK
        n0 = pid_n * (BLOCK_N * PASSES)
        offs_n = n0 + tl.arange(0, BLOCK_N)
        mask = mask_m[:, None] & (offs_n < N)[None, :]
        h = _gemm1_h(
            a_ptr, a_scale_ptr, w_ptr, w_scale_ptr, topk_weights_ptr, expert, token, slot, mask_m, n0, N, K,
            stride_am, stride_asm, stride_ask, stride_we, stride_wn, stride_wse, stride_wsn, stride_wsk,
            BLOCK_M, BLOCK_N, BLOCK_K, QUANT, ROUTED_ON_INPUT, GELU, ACT_BF16, SWAP_AB, W_TMA, W_HALF_SCALES,
            LAZY_SCALE,
        )  # fmt: skip
        h_row = _h_rows(pid_m, slot, BLOCK_M, SLOTS)
        h_ptrs = h_ptr + h_row[:, None] * stride_hm + offs_n[None, :]
        if H_FP8:
            # this program holds the whole 128-column group of its rows: the group scale needs no other program
            amax = _h_fp8_amax(h, mask)
            if PASSES == 2:
                mask2 = mask_m[:, None] & (offs_n + BLOCK_N < N)[None, :]
                if n0 + BLOCK_N < N:
                    h2 = _gemm1_h(
                        a_ptr, a_scale_ptr, w_ptr, w_scale_ptr, topk_weights_ptr, expert, token, slot, mask_m,
                        n0 + BLOCK_N, N, K, stride_am, stride_asm, stride_ask, stride_we, stride_wn, stride_wse,
                        stride_wsn, stride_wsk, BLOCK_M, BLOCK_N, BLOCK_K, QUANT, ROUTED_ON_INPUT, GELU, ACT_BF16,
                        SWAP_AB, W_TMA, W_HALF_SCALES, LAZY_SCALE,
                    )  # fmt: skip
                else:
                    # the group's second tile lies wholly past N (N % 128 in (0, 64]): no K loop for masked columns
                    h2 = tl.zeros((BLOCK_M, BLOCK_N), dtype=h.dtype)
                amax = tl.maximum(amax, _h_fp8_amax(h2, mask2))
            s = _h_group_scale(amax)  # [BLOCK_M]
            tl.store(h_ptrs, _quant_fp8(tl.where(mask, h.to(tl.float32), 0.0), s[:, None]), mask=mask)
            if PASSES == 2:
                tl.store(h_ptrs + BLOCK_N, _quant_fp8(tl.where(mask2, h2.to(tl.float32), 0.0), s[:, None]), mask=mask2)
            tl.store(h_scale_ptr + h_row * stride_hsm + pid_n, s, mask=mask_m)
        else:
            tl.store(h_ptrs, h, mask=mask)


@triton.jit
def _store_c(acc, c_ptr, topk_weights_ptr, slot, mask_m, offs_n, mask_n, stride_cm, MUL_WEIGHT: tl.constexpr,
             ACT_BF16: tl.constexpr):  # fmt: skip
    """GEMM2's rows of c: the float32 tile ``acc`` [BLOCK_M, BLOCK_N] times each slot's top-k weight (MUL_WEIGHT),
    rounded once to the activation dtype."""
    if MUL_WEIGHT:
        wt = tl.load(topk_weights_ptr + slot, mask=mask_m, other=0.0).to(tl.float32)
        acc = acc * wt[:, None]
    tl.store(
        c_ptr + slot[:, None] * stride_cm + offs_n[None, :],
        _round(acc, ACT_BF16),
        mask=mask_m[:, None] & mask_n[None, :],
    )


@triton.jit(do_not_specialize=["numel", "num_pid_m"])
def _fused_moe_gemm2_kernel(  # tritonkit: ignore[recompile] tiles follow the M bucket: a compile per config
    h_ptr,
    h_scale_ptr,
    w_ptr,
    w_scale_ptr,
    c_ptr,
    topk_weights_ptr,
    sorted_ids_ptr,
    expert_ids_ptr,
    num_post_ptr,
    numel,
    num_pid_m,
    K,
    N,
    num_experts,
    stride_hm,
    stride_hsm,
    stride_hsk,
    stride_we,
    stride_wk,
    stride_wse,
    stride_wsk,
    stride_wsn,
    stride_cm,
    out_ptr,
    topk_ids_ptr,
    expert_map_ptr,
    counters_ptr,
    num_global,
    stride_idm,
    stride_om,
    TOPK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    QUANT: tl.constexpr,
    MUL_WEIGHT: tl.constexpr,
    ACT_BF16: tl.constexpr,
    SWAP_AB: tl.constexpr,
    TMA: tl.constexpr,
    SLOTS: tl.constexpr,
    HAS_MAP: tl.constexpr,
    LAZY_SCALE: tl.constexpr = False,
    PDL: tl.constexpr = False,
    W_EARLY: tl.constexpr = False,
    N_PAD: tl.constexpr = 16,
):
    """``c[slot, k] = topk_weight[slot] * (h[row] . w2[e, k])`` for one block of BLOCK_M sorted slots (one expert)
    and BLOCK_N output columns (of K), h's rows in sorted order (a block's rows are contiguous); the reduction runs
    over the intermediate width N in BLOCK_K steps. TMA: ``h_ptr`` and ``w_ptr`` are tensor descriptors (h as is,
    w2 as [E * K, N]). float32 accumulation and weighting, one rounding to the activation dtype at the store.
    SLOTS: blocks of one slot (:func:`_rows`), h in slot order, and the top-k sum into ``out`` by the last program
    of each token and column tile (:func:`_topk_sum_last`). PDL (with SLOTS): launched as GEMM1's programmatic
    dependent; the slot's expert (from ``topk_ids``, the call's input) is read before ``gdc_wait``, h, its scales,
    the counters and c only after it. W_EARLY (with SLOTS, 16-bit, pointer loads): the program's whole w2 tile
    (BLOCK_N rows of N, padded to N_PAD) is loaded into registers before ``gdc_wait`` and the slot's one row of h
    multiplied into it on the CUDA cores after: as GEMM1's dependent, GEMM2's weight stream starts under GEMM1's."""
    num_pid_n = tl.cdiv(K, BLOCK_N)
    pid_m, pid_n = _grouped_tile(tl.program_id(0), num_pid_m, num_pid_n, GROUP_M)
    expert, busy, slot, mask_m = _rows(
        sorted_ids_ptr, expert_ids_ptr, num_post_ptr, topk_ids_ptr, expert_map_ptr, pid_m, numel, num_global,
        num_experts, stride_idm, TOPK, BLOCK_M, SLOTS, HAS_MAP,
    )  # fmt: skip
    if W_EARLY:
        tl.static_assert(SLOTS and QUANT == QUANT_NONE and not TMA and not SWAP_AB, "W_EARLY: 16-bit slot blocks")
        e_rows = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        e_k = tl.arange(0, N_PAD)
        # no expert (busy false) loads nothing: its expert id may be anything. where(), not `& busy`: Triton 3.9's
        # interpreter refuses a block & a scalar-born i1 as a load mask (_fused_moe_sum_kernel says more)
        e_mask = tl.where(busy, (e_rows < K)[:, None] & (e_k < N)[None, :], False)
        w_early = tl.load(
            w_ptr + expert * stride_we + e_rows.to(tl.int64)[:, None] * stride_wk + e_k[None, :], mask=e_mask, other=0.0
        )
    if PDL:
        tl.static_assert(SLOTS, "PDL: the sorted layout's block ids are written by the launch before GEMM1")
        # GEMM1 is complete and its stores (h, h's scales, the zeroed counters) visible past here
        gdc_wait()
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # output columns, rows of w2[e]
    mask_n = offs_n < K
    if W_EARLY:
        if busy:
            # h in slot order: the slot's row is pid_m
            h_one = tl.load(h_ptr + pid_m.to(tl.int64) * stride_hm + e_k, mask=e_k < N, other=0.0)
            acc_n = tl.sum(w_early.to(tl.float32) * h_one.to(tl.float32)[None, :], axis=1)  # [BLOCK_N]
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32) + acc_n[None, :]
            _store_c(acc, c_ptr, topk_weights_ptr, slot, mask_m, offs_n, mask_n, stride_cm, MUL_WEIGHT, ACT_BF16)
    elif busy:
        offs_k = tl.arange(0, BLOCK_K)  # the reduction, over N
        h_row = _h_rows(pid_m, slot, BLOCK_M, SLOTS)
        if not TMA:
            h_ptrs = h_ptr + h_row[:, None] * stride_hm + offs_k[None, :]  # [BLOCK_M, BLOCK_K]
            # w2[e] is [K, N] row-major: rows offs_n (output columns), contiguous along the reduction
            w_ptrs = _w_tile(w_ptr + expert * stride_we, offs_n, offs_k, stride_wk, SWAP_AB)
        # the descriptor's rows: expert e's output columns start at e * K (rows past K are never stored)
        w_row = (expert * K + pid_n * BLOCK_N).to(tl.int32)
        if QUANT == QUANT_BLOCK:
            if BLOCK_N <= SCALE_BLOCK:
                # BLOCK_N divides 128: the tile's output columns lie in one 128 block, one weight scale a K tile
                ws_ptrs = w_scale_ptr + expert * stride_wse + ((pid_n * BLOCK_N) // SCALE_BLOCK) * stride_wsk
            else:
                ws_ptrs = w_scale_ptr + expert * stride_wse + (offs_n // SCALE_BLOCK) * stride_wsk  # [BLOCK_N]
            hs_ptrs = h_scale_ptr + h_row * stride_hsm  # [BLOCK_M]
        if SWAP_AB:
            acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
        else:
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        if LAZY_SCALE:
            tl.static_assert(QUANT == QUANT_BLOCK and not SWAP_AB and BLOCK_N <= SCALE_BLOCK, "LAZY_SCALE: block fp8")
            d_prev = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            s_prev = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for k0 in range(0, N, BLOCK_K):
            mask_k = offs_k < N - k0
            if TMA:
                # a padding row of the block reads whatever h holds there: its output row is never stored
                h = h_ptr.load([(pid_m * BLOCK_M).to(tl.int32), k0])
                w = _w_desc_tile(w_ptr, [w_row, k0], BLOCK_N, BLOCK_K, SWAP_AB)
            else:
                h = tl.load(h_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
                w = tl.load(w_ptrs, mask=_w_mask(mask_n, mask_k, SWAP_AB), other=0.0)
                h_ptrs += BLOCK_K
                w_ptrs += BLOCK_K
            if QUANT == QUANT_BLOCK:
                kb = k0 // SCALE_BLOCK
                h_s = tl.load(hs_ptrs + kb * stride_hsk, mask=mask_m, other=0.0)
                if BLOCK_N <= SCALE_BLOCK:
                    w_s = tl.load(ws_ptrs + kb * stride_wsn)
                else:
                    w_s = tl.load(ws_ptrs + kb * stride_wsn, mask=mask_n, other=0.0)
            else:
                h_s, w_s = 0.0, 0.0  # no per-tile scales
            if LAZY_SCALE:
                # the previous K block's tile scaled in before this block's dot (the same FMAs in the same K order,
                # so the same bits): the dot's wait is then followed by the next stage's loads, not by the FMAs
                acc += d_prev * s_prev[:, None]
                d_prev = _dot(h, w)
                s_prev = h_s * w_s
            else:
                acc = _mma(h, w, acc, h_s, w_s, QUANT, SWAP_AB, BLOCK_N <= SCALE_BLOCK)
        if LAZY_SCALE:
            acc += d_prev * s_prev[:, None]
        if SWAP_AB:
            acc = tl.trans(acc)
        if QUANT == QUANT_CHANNEL:
            h_s = tl.load(h_scale_ptr + h_row * stride_hsm, mask=mask_m, other=0.0)
            w_s = tl.load(w_scale_ptr + expert * stride_wse + offs_n * stride_wsk, mask=mask_n, other=0.0)
            acc = acc * h_s[:, None] * w_s[None, :]
        _store_c(acc, c_ptr, topk_weights_ptr, slot, mask_m, offs_n, mask_n, stride_cm, MUL_WEIGHT, ACT_BF16)
    if SLOTS:
        _topk_sum_last(
            c_ptr, out_ptr, counters_ptr, topk_ids_ptr, expert_map_ptr, pid_m, pid_n, offs_n, mask_n, busy,
            num_pid_n, num_global, num_experts, stride_idm, stride_cm, stride_om, TOPK, HAS_MAP, ACT_BF16,
        )  # fmt: skip


@triton.jit(do_not_specialize=["num_tokens"])
def _fused_moe_sum_kernel(
    c_ptr,
    out_ptr,
    topk_ids_ptr,
    expert_map_ptr,
    num_tokens,
    K,
    num_global,
    num_local,
    stride_cm,
    stride_om,
    stride_idm,
    TOPK: tl.constexpr,
    BLOCK: tl.constexpr,
    HAS_MAP: tl.constexpr,
    ACT_BF16: tl.constexpr,
):
    """``out[m] = sum_j c[m * TOPK + j]`` in float32, in j order (deterministic), rounded once. A slot whose id is
    out of [0, num_global), or maps to no expert of this rank, adds nothing: its row of c is never read (no GEMM
    block wrote it)."""
    pid_m = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < K
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for j in tl.static_range(TOPK):
        _, ok = _slot_expert(topk_ids_ptr, expert_map_ptr, pid_m, j, stride_idm, num_global, num_local, HAS_MAP)
        # where(), not `mask & ok`: Triton 3.9's interpreter makes a block & a scalar-born i1 an int32 block, which
        # it refuses as a load mask (the compiled code is the same)
        c = tl.load(c_ptr + (pid_m * TOPK + j) * stride_cm + offs, mask=tl.where(ok, mask, False), other=0.0)
        acc += c.to(tl.float32)
    tl.store(out_ptr + pid_m * stride_om + offs, _round(acc, ACT_BF16), mask=mask)


@triton.jit(do_not_specialize=["rows"])
def _fused_moe_quant_kernel(
    x_ptr,
    q_ptr,
    s_ptr,
    static_ptr,
    rows,
    cols,
    stride_xm,
    stride_qm,
    stride_sm,
    BLOCK: tl.constexpr,
    MODE: tl.constexpr,
    GROUPS: tl.constexpr,
):
    """fp8 e4m3 activations of one row: MODE 0 one dynamic scale per row, 1 one per BLOCK-column group (GROUPS
    groups per program along grid axis 1; the other modes launch one program per row), 2 the static
    per-tensor scale at static_ptr. A dynamic per-tensor scale takes two launches: MODE 3 folds each row's amax into
    the float32 at static_ptr (zeroed first; atomic max), then MODE 4 quantizes by ``max(amax, 1e-10) / 448`` and
    program 0 stores that scale at s_ptr. A dynamic scale is ``max(amax, 1e-10) / 448`` in float32; ``q = x /
    scale`` clamped to +-448, rounded to nearest."""
    pid = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    x_row = x_ptr + pid * stride_xm
    q_row = q_ptr + pid * stride_qm
    if MODE == 0:
        amax = tl.zeros((), dtype=tl.float32)
        for c0 in range(0, cols, BLOCK):
            x = tl.load(x_row + c0 + offs, mask=offs < cols - c0, other=0.0).to(tl.float32)
            amax = tl.maximum(amax, tl.max(tl.abs(x)))
        s = tl.math.div_rn(tl.maximum(amax, AMAX_FLOOR), FP8_MAX)
        tl.store(s_ptr + pid * stride_sm, s)
        for c0 in range(0, cols, BLOCK):
            mask = offs < cols - c0
            x = tl.load(x_row + c0 + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(q_row + c0 + offs, _quant_fp8(x, s), mask=mask)
    elif MODE == 1:
        # GROUPS groups of BLOCK columns per program, side by side (grid axis 1 walks the row): one row's groups
        # in parallel, not in a loop (DeepSeek-V3's 56 groups of one token took 35 us one after another)
        g = tl.program_id(1) * GROUPS + tl.arange(0, GROUPS)  # [GROUPS]
        cols2 = g[:, None] * BLOCK + offs[None, :]  # [GROUPS, BLOCK]
        mask = cols2 < cols
        x = tl.load(x_row + cols2, mask=mask, other=0.0).to(tl.float32)
        s = tl.math.div_rn(tl.maximum(tl.max(tl.abs(x), axis=1), AMAX_FLOOR), FP8_MAX)  # [GROUPS]
        tl.store(s_ptr + pid * stride_sm + g, s, mask=g * BLOCK < cols)
        tl.store(q_row + cols2, _quant_fp8(x, s[:, None]), mask=mask)
    elif MODE == 3:
        amax = tl.zeros((), dtype=tl.float32)
        for c0 in range(0, cols, BLOCK):
            x = tl.load(x_row + c0 + offs, mask=offs < cols - c0, other=0.0).to(tl.float32)
            amax = tl.maximum(amax, tl.max(tl.abs(x)))
        # amax >= 0 (NaN aside): the float max is the integer max of the bits, as atomic_max does it
        tl.atomic_max(static_ptr, amax)
    else:
        if MODE == 2:
            s = tl.load(static_ptr)
        else:
            s = tl.math.div_rn(tl.maximum(tl.load(static_ptr), AMAX_FLOOR), FP8_MAX)
            if pid == 0:
                tl.store(s_ptr, s)
        for c0 in range(0, cols, BLOCK):
            mask = offs < cols - c0
            x = tl.load(x_row + c0 + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(q_row + c0 + offs, _quant_fp8(x, s), mask=mask)
