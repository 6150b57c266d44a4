import triton
import triton.language as tl


@triton.jit
def _rotate_heads(
    x_ptr,
    stride_t,
    stride_h,
    num_heads,
    head_start,
    offs_t,
    mask_t,
    cs,
    mask_cs,
    ROT_HALF: tl.constexpr,
    IS_NEOX: tl.constexpr,
    INVERSE: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
):
    """Rotate dims ``[0, 2 * ROT_HALF)`` of heads ``[head_start, head_start + BLOCK_H)`` of the tokens ``offs_t``
    in place, with cos/sin at ``cs`` (``[BLOCK_T, BLOCK_HALF]`` pointers); INVERSE rotates by the opposite angle.
    Every element is loaded before any is stored, so nothing is re-read after a write; q/k are loaded before
    cos/sin, whose address waits on the position load, so the two round trips overlap."""
    offs_h = head_start.to(tl.int64) + tl.arange(0, BLOCK_H)
    heads = x_ptr + offs_t[:, None, None] * stride_t + offs_h[None, :, None] * stride_h  # [BLOCK_T, BLOCK_H, 1]
    mask_th = mask_t[:, None, None] & (offs_h < num_heads)[None, :, None]
    if IS_NEOX:
        # first half / second half: two contiguous loads
        offs_j = tl.arange(0, BLOCK_HALF)[None, None, :]
        mask = mask_th & (offs_j < ROT_HALF)
        x1 = tl.load(heads + offs_j, mask=mask, other=0.0).to(tl.float32)  # [BLOCK_T, BLOCK_H, BLOCK_HALF]
        x2 = tl.load(heads + ROT_HALF + offs_j, mask=mask, other=0.0).to(tl.float32)
        cos = tl.load(cs, mask=mask_cs, other=float("nan")).to(tl.float32)[:, None, :]  # [BLOCK_T, 1, BLOCK_HALF]
        sin = tl.load(cs + ROT_HALF, mask=mask_cs, other=float("nan")).to(tl.float32)[:, None, :]
        if INVERSE:
            sin = -sin
        tl.store(heads + offs_j, (x1 * cos - x2 * sin).to(x_ptr.dtype.element_ty), mask=mask)
        tl.store(heads + ROT_HALF + offs_j, (x2 * cos + x1 * sin).to(x_ptr.dtype.element_ty), mask=mask)
    else:
        # interleaved pairs: one contiguous load, split into even/odd in registers (strided loads would not vectorize)
        offs_d = tl.arange(0, 2 * BLOCK_HALF)[None, None, :]
        mask = mask_th & (offs_d < 2 * ROT_HALF)
        x = tl.load(heads + offs_d, mask=mask, other=0.0).to(tl.float32)  # [BLOCK_T, BLOCK_H, 2 * BLOCK_HALF]
        cos = tl.load(cs, mask=mask_cs, other=float("nan")).to(tl.float32)[:, None, :]  # [BLOCK_T, 1, BLOCK_HALF]
        sin = tl.load(cs + ROT_HALF, mask=mask_cs, other=float("nan")).to(tl.float32)[:, None, :]
        if INVERSE:
            sin = -sin
        x1, x2 = tl.split(tl.reshape(x, (BLOCK_T, BLOCK_H, BLOCK_HALF, 2)))
        out = tl.join(x1 * cos - x2 * sin, x2 * cos + x1 * sin)  # [BLOCK_T, BLOCK_H, BLOCK_HALF, 2]
        out = tl.reshape(out, (BLOCK_T, BLOCK_H, 2 * BLOCK_HALF))
        tl.store(heads + offs_d, out.to(x_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["num_tokens"])
def _rotary_embedding_fwd_kernel(
    pos_ptr,
    q_ptr,
    k_ptr,
    cache_ptr,
    num_tokens,
    num_q_heads,
    num_k_heads,
    max_position,
    stride_pos,
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_cache,
    ROT_HALF: tl.constexpr,
    IS_NEOX: tl.constexpr,
    INVERSE: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_HQ: tl.constexpr,
    BLOCK_HK: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
):
    """In-place rotary embedding of BLOCK_T tokens: program ``(i, j)`` rotates q's head block j, or for
    ``j >= cdiv(num_q_heads, BLOCK_HQ)`` one of k's, with the tokens' cos/sin rows loaded once and shared by all
    heads. Rotation in float32, one rounding at the store; INVERSE (vLLM's ``inverse``) negates sin, undoing it.
    A position outside ``[0, max_position)`` reads no cache memory: its rows rotate by NaN, so the caller's bug
    shows instead of stray memory being read."""
    pid_t = tl.program_id(0).to(tl.int64)
    pid_h = tl.program_id(1)
    offs_t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)  # int64: token * stride passes 2^31 on large inputs
    mask_t = offs_t < num_tokens
    pos = tl.load(pos_ptr + offs_t * stride_pos, mask=mask_t, other=0).to(tl.int64)  # [BLOCK_T]
    in_range = mask_t & (pos >= 0) & (pos < max_position)
    offs_j = tl.arange(0, BLOCK_HALF)
    mask_cs = in_range[:, None] & (offs_j < ROT_HALF)[None, :]
    cs = cache_ptr + pos[:, None] * stride_cache + offs_j[None, :]  # [BLOCK_T, BLOCK_HALF]
    n_q_blocks = tl.cdiv(num_q_heads, BLOCK_HQ)
    if pid_h < n_q_blocks:
        _rotate_heads(
            q_ptr,
            stride_qt,
            stride_qh,
            num_q_heads,
            pid_h * BLOCK_HQ,
            offs_t,
            mask_t,
            cs,
            mask_cs,
            ROT_HALF,
            IS_NEOX,
            INVERSE,
            BLOCK_T,
            BLOCK_HQ,
            BLOCK_HALF,
        )
    else:
        _rotate_heads(
            k_ptr,
            stride_kt,
            stride_kh,
            num_k_heads,
            (pid_h - n_q_blocks) * BLOCK_HK,
            offs_t,
            mask_t,
            cs,
            mask_cs,
            ROT_HALF,
            IS_NEOX,
            INVERSE,
            BLOCK_T,
            BLOCK_HK,
            BLOCK_HALF,
        )
