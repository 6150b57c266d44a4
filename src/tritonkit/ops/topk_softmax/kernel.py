import triton
import triton.language as tl

# below every key of a real expert: lanes past num_experts and experts already chosen
_KEY_NONE = tl.constexpr(-(2**63))


@triton.jit(do_not_specialize=["num_tokens"])
def _topk_softmax_kernel(
    g_ptr,
    w_ptr,
    ids_ptr,
    num_tokens,
    num_experts,
    stride_g,
    bias_ptr,
    pad_ptr,
    TOPK: tl.constexpr,
    RENORMALIZE: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_PADDING: tl.constexpr,
    BF16_BITS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """Softmax over the experts of ``BLOCK_M`` rows in float32, then the ``TOPK`` largest, descending.

    Without a bias the choice is made on the float32 logits, converted exactly from the input, not on the rounded
    probabilities: softmax is strictly increasing in the logit, so this is the order of the exact probabilities, and
    equal logits (only they) tie, broken toward the lower expert. Each (score, expert) pair becomes one distinct int64
    key (the score's order-preserving bits above, ``2^16 - 1 - expert`` below), so one max per pick finds both.

    ``HAS_BIAS``: the score is the float32 sum ``probability + bias[expert]`` (``bias_ptr``: float32 ``[E]``), and
    the weight written is the chosen expert's unbiased probability. ``HAS_PADDING``: rows whose ``pad_ptr`` entry
    (bool ``[num_tokens]``) is true get expert id -1 in every slot; their weights are computed as any row's."""
    pid_m = tl.program_id(0).to(tl.int64)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # int64: row * stride
    offs_e = tl.arange(0, BLOCK_E)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m < num_tokens
    mask_e = offs_e < num_experts
    g_ptrs = g_ptr + offs_m[:, None] * stride_g + offs_e[None, :]  # [BLOCK_M, BLOCK_E]
    mask = mask_m[:, None] & mask_e[None, :]
    if BF16_BITS:
        # bfloat16 passed as its int16 bits: float32 is those bits shifted up, exact for subnormals too (Triton's
        # CPU interpreter flushes bfloat16 subnormals in .to(tl.float32))
        raw = tl.load(g_ptrs, mask=mask, other=0).to(tl.int32)
        x = (raw << 16).to(tl.float32, bitcast=True)
    else:
        x = tl.load(g_ptrs, mask=mask, other=0.0).to(tl.float32)
    x = tl.where(mask_e[None, :], x, float("-inf"))
    row_max = tl.max(x, axis=1)
    denom = tl.sum(tl.exp(x - row_max[:, None]), axis=1)

    if HAS_BIAS:
        prob = tl.exp(x - row_max[:, None]) / denom[:, None]  # [BLOCK_M, BLOCK_E], 0 past num_experts
        bias = tl.load(bias_ptr + offs_e, mask=mask_e, other=0.0)  # [BLOCK_E]
        score = prob + bias[None, :]
    else:
        score = x
    bits = score.to(tl.int32, bitcast=True)
    # -0.0 and +0.0 must tie: give both the bits of +0.0 (an integer test: a float one may flush subnormals)
    bits = tl.where(bits == -2147483648, 0, bits)
    ordered = tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)  # signed int order == float order
    key = ordered.to(tl.int64) * 65536 + (65535 - offs_e).to(tl.int64)[None, :]  # [BLOCK_M, BLOCK_E]
    key = tl.where(mask_e[None, :], key, _KEY_NONE)

    w = tl.zeros((BLOCK_M, BLOCK_K), dtype=tl.float32)
    ids = tl.zeros((BLOCK_M, BLOCK_K), dtype=tl.int32)
    for j in range(TOPK):
        best = tl.max(key, axis=1)  # [BLOCK_M]
        chosen = key == best[:, None]  # one lane a row: keys are distinct
        key = tl.where(chosen, _KEY_NONE, key)
        expert = 65535 - (best & 65535).to(tl.int32)
        if HAS_BIAS:
            p = tl.sum(tl.where(chosen, prob, 0.0), axis=1)  # the unbiased probability of the chosen expert
        else:
            hi = (best >> 16).to(tl.int32)
            logit = tl.where(hi >= 0, hi, hi ^ 0x7FFFFFFF).to(tl.float32, bitcast=True)
            p = tl.exp(logit - row_max) / denom
        w = tl.where(offs_k[None, :] == j, p[:, None], w)
        ids = tl.where(offs_k[None, :] == j, expert[:, None], ids)
    if RENORMALIZE:
        total = tl.sum(w, axis=1)
        if HAS_BIAS:
            # the bias may choose experts of probability 0 only: their weights stay 0 (a sum of 0 divides by 1)
            total = tl.where(total > 0.0, total, 1.0)
        w = w / total[:, None]
    if HAS_PADDING:
        pad = tl.load(pad_ptr + offs_m, mask=mask_m, other=0).to(tl.int1)  # [BLOCK_M]
        ids = tl.where(pad[:, None], -1, ids)
    mask_out = mask_m[:, None] & (offs_k < TOPK)[None, :]
    offs_out = offs_m[:, None] * TOPK + offs_k[None, :]
    tl.store(w_ptr + offs_out, w, mask=mask_out)
    tl.store(ids_ptr + offs_out, ids, mask=mask_out)
