import triton
import triton.language as tl


@triton.jit
def _udiv(a, b):
    """``a // b`` for counts and positions (``a >= 0``, ``b >= 1``), divided as unsigned: what they are."""
    return (a.to(tl.uint32) // b.to(tl.uint32)).to(tl.int32)


@triton.jit
def _load_experts(ids_ptr, offs, numel, num_experts):
    """The experts of slots ``offs`` as int32, and which of them count: in the tensor and in [0, num_experts)
    (tested in the ids' own dtype, so an int64 id past 2^32 cannot alias a small one). Others read as expert 0."""
    e = tl.load(ids_ptr + offs, mask=offs < numel, other=-1)
    valid = (e >= 0) & (e < num_experts)
    return tl.where(valid, e, 0).to(tl.int32), valid


@triton.jit
def _padded_starts(counts, block_size):
    """Each expert's run padded up to a multiple of block_size: where each run starts (exclusive prefix sum in
    expert order), and the padded total."""
    padded = _udiv(counts + block_size - 1, block_size) * block_size
    ends = tl.cumsum(padded, axis=0)
    return ends - padded, tl.sum(padded, axis=0)


@triton.jit
def _place(
    ids_ptr,
    sorted_ptr,
    expert_ids_ptr,
    map_ptr,
    running,
    start,
    end,
    num_experts,
    block_size,
    HAS_MAP: tl.constexpr,
    SUB: tl.constexpr,
    BLOCK_E: tl.constexpr,
):
    """Write slots ``[start, end)`` to ``sorted_ptr`` in ascending order within each expert. ``running[e]`` is
    where expert e's next slot goes; the slot that opens a block (every block of a run opens with a real slot:
    padding only ends a run) writes that block's expert id."""
    offs_s = tl.arange(0, SUB)
    for s0 in range(start, end, SUB):
        offs = s0 + offs_s
        e, valid = _load_experts(ids_ptr, offs, end, num_experts)
        # stable rank within this step: earlier valid slots of the same expert  [SUB, SUB]
        before = (e[:, None] == e[None, :]) & (offs_s[None, :] < offs_s[:, None]) & valid[None, :]
        dest = tl.gather(running, e, 0) + tl.sum(before.to(tl.int32), axis=1)
        tl.store(sorted_ptr + dest, offs, mask=valid)
        block = _udiv(dest, block_size)
        opens = valid & (dest == block * block_size)
        if HAS_MAP:
            block_expert = tl.load(map_ptr + e, mask=opens, other=-1)
        else:
            block_expert = e
        tl.store(expert_ids_ptr + block, block_expert, mask=opens)
        running += tl.histogram(e, BLOCK_E, mask=valid)


@triton.jit
def _fill(ptr, start, end, step, value, FILL_BLOCK: tl.constexpr):
    """``ptr[q] = value`` for q in [start, end), FILL_BLOCK at a time, ``step`` apart."""
    offs = tl.arange(0, FILL_BLOCK)
    for q0 in range(start, end, step):
        q = q0 + offs
        tl.store(ptr + q, tl.full((FILL_BLOCK,), value, tl.int32), mask=q < end)


@triton.jit(do_not_specialize=["numel", "max_padded", "num_blocks", "block_size"])
def _moe_align_small_kernel(
    ids_ptr,
    sorted_ptr,
    expert_ids_ptr,
    post_padded_ptr,
    map_ptr,
    numel,
    num_experts,
    block_size,
    max_padded,
    num_blocks,
    HAS_MAP: tl.constexpr,
    CHUNK: tl.constexpr,
    SUB: tl.constexpr,
    BLOCK_E: tl.constexpr,
    FILL_BLOCK: tl.constexpr,
):
    """The whole op in one program, for few slots: count, pad, fill, place."""
    counts = tl.zeros((BLOCK_E,), dtype=tl.int32)
    for s0 in range(0, numel, CHUNK):
        e, valid = _load_experts(ids_ptr, s0 + tl.arange(0, CHUNK), numel, num_experts)
        counts += tl.histogram(e, BLOCK_E, mask=valid)
    starts, total = _padded_starts(counts, block_size)
    _fill(sorted_ptr, 0, max_padded, FILL_BLOCK, numel, FILL_BLOCK)
    _fill(expert_ids_ptr, _udiv(total, block_size), num_blocks, FILL_BLOCK, -1, FILL_BLOCK)
    tl.store(post_padded_ptr, total)
    # the fill above and the placement below write the same sorted_ptr elements, from different threads
    tl.debug_barrier()
    _place(
        ids_ptr, sorted_ptr, expert_ids_ptr, map_ptr, starts, 0, numel, num_experts, block_size, HAS_MAP, SUB, BLOCK_E
    )


@triton.jit(do_not_specialize=["numel", "max_padded", "num_blocks"])
def _moe_align_count_kernel(
    ids_ptr,
    counts_ptr,
    sorted_ptr,
    expert_ids_ptr,
    numel,
    num_experts,
    max_padded,
    num_blocks,
    CHUNK: tl.constexpr,
    BLOCK_E: tl.constexpr,
    FILL_BLOCK: tl.constexpr,
):
    """Per chunk of CHUNK slots: its experts' counts, ``counts[chunk, e]``. Every program also fills its share of
    sorted_ptr with the padding value (numel) and of expert_ids with -1, for the placement launch to overwrite."""
    pid_c = tl.program_id(0)
    e, valid = _load_experts(ids_ptr, pid_c * CHUNK + tl.arange(0, CHUNK), numel, num_experts)
    offs_e = tl.arange(0, BLOCK_E)
    tl.store(counts_ptr + pid_c * num_experts + offs_e, tl.histogram(e, BLOCK_E, mask=valid), mask=offs_e < num_experts)
    step = tl.num_programs(0) * FILL_BLOCK
    _fill(sorted_ptr, pid_c * FILL_BLOCK, max_padded, step, numel, FILL_BLOCK)
    _fill(expert_ids_ptr, pid_c * FILL_BLOCK, num_blocks, step, -1, FILL_BLOCK)


@triton.jit(do_not_specialize=["num_chunks"])
def _moe_align_scan_kernel(
    counts_ptr,
    prefix_ptr,
    totals_ptr,
    num_chunks,
    num_experts,
    BLOCK_C: tl.constexpr,
    BLOCK_ES: tl.constexpr,
):
    """For BLOCK_ES experts: ``prefix[c, e]`` = the expert's slots in chunks before c, and ``totals[e]``."""
    pid_e = tl.program_id(0)
    offs_e = pid_e * BLOCK_ES + tl.arange(0, BLOCK_ES)
    mask_e = offs_e < num_experts
    carry = tl.zeros((BLOCK_ES,), dtype=tl.int32)
    for c0 in range(0, num_chunks, BLOCK_C):
        offs_c = c0 + tl.arange(0, BLOCK_C)
        mask = (offs_c < num_chunks)[:, None] & mask_e[None, :]
        offs = offs_c[:, None] * num_experts + offs_e[None, :]  # [BLOCK_C, BLOCK_ES]
        counts = tl.load(counts_ptr + offs, mask=mask, other=0)
        tl.store(prefix_ptr + offs, tl.cumsum(counts, axis=0) - counts + carry[None, :], mask=mask)
        carry += tl.sum(counts, axis=0)
    tl.store(totals_ptr + offs_e, carry, mask=mask_e)


@triton.jit(do_not_specialize=["numel", "block_size"])
def _moe_align_place_kernel(
    ids_ptr,
    prefix_ptr,
    totals_ptr,
    sorted_ptr,
    expert_ids_ptr,
    post_padded_ptr,
    map_ptr,
    numel,
    num_experts,
    block_size,
    HAS_MAP: tl.constexpr,
    CHUNK: tl.constexpr,
    SUB: tl.constexpr,
    BLOCK_E: tl.constexpr,
):
    """Place one chunk's slots: expert e's next position starts at its padded run's start plus its slots in the
    chunks before this one."""
    pid_c = tl.program_id(0)
    offs_e = tl.arange(0, BLOCK_E)
    mask_e = offs_e < num_experts
    starts, total = _padded_starts(tl.load(totals_ptr + offs_e, mask=mask_e, other=0), block_size)
    running = starts + tl.load(prefix_ptr + pid_c * num_experts + offs_e, mask=mask_e, other=0)
    if pid_c == 0:
        tl.store(post_padded_ptr, total)
    start = pid_c * CHUNK
    _place(
        ids_ptr,
        sorted_ptr,
        expert_ids_ptr,
        map_ptr,
        running,
        start,
        tl.minimum(start + CHUNK, numel),
        num_experts,
        block_size,
        HAS_MAP,
        SUB,
        BLOCK_E,
    )
