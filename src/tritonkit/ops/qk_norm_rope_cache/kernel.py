import triton
import triton.language as tl

from .._fp8_jit import INTERPRETING, div_by_given_scale

FP8_E4M3_MAX = tl.constexpr(448.0)
FLT_MAX = tl.constexpr(3.4028234663852886e38)


@triton.jit
def _widen(x, EXACT: tl.constexpr):
    """``x`` as float32. EXACT: bf16 through its bit pattern (the 3.6 interpreter flushes bf16 subnormals when it
    widens them; the shifted pattern is exact anywhere)."""
    if EXACT and x.dtype == tl.bfloat16:
        return (x.to(tl.int16, bitcast=True).to(tl.int32) << 16).to(tl.float32, bitcast=True)
    return x.to(tl.float32)


@triton.jit
def _round(x, dtype, EXACT: tl.constexpr):
    """float32 ``x`` rounded to nearest-even in ``dtype`` (the model dtype), as float32. EXACT: bf16 rounded in
    integer ops (the 3.6 interpreter truncates float32 -> bf16 and mishandles its subnormals)."""
    if EXACT and dtype == tl.bfloat16:
        bits = x.to(tl.int32, bitcast=True)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536  # -65536: 0xFFFF0000
        return tl.where(x != x, x, rounded.to(tl.float32, bitcast=True))
    return x.to(dtype).to(tl.float32)


@triton.jit
def _rn(op: tl.constexpr, a, b):
    """``a op b`` (``op`` "mul" or "sub") rounded once to float32 in a PTX instruction ptxas never contracts into an
    fma (``mul.rn.f32``, ``sub.rn.f32``; not libdevice's ``__nv_fmul_rn``, which flushes subnormals under Triton's
    FTZ reflection). The interpreter, which has no inline PTX, rounds each numpy product and difference already."""
    if INTERPRETING:
        if op == "mul":
            return a * b
        return a - b
    return tl.inline_asm_elementwise(
        op + ".rn.f32 $0, $1, $2;", "=f,f,f", [a, b], dtype=tl.float32, is_pure=True, pack=1
    )


@triton.jit
def _rotate(x1, x2, cos, sin, INPLACE: tl.constexpr):
    """``(x1 cos - x2 sin, x2 cos + x1 sin)`` in float32, each rounded where the vLLM 0.34 kernel of the form rounds.
    Its fused_qknorm_rope_cache (``__fmul_rn``, ``__fsub_rn``, ``__fmaf_rn``; its kernel matches CuTeDSL's PTX):
    ``RN(RN(x1 cos) - RN(x2 sin))`` and ``fma(x1, sin, RN(x2 cos))``. Its fused_qk_norm_rope (INPLACE: plain
    products left to nvcc, read in the wheel's sm_90 SASS, NeoX and GPT-J alike): ``fma(x1, cos, -RN(x2 sin))`` and
    ``fma(x2, cos, RN(x1 sin))``, the product negated exactly (``* -1.0``: Triton 3.6 spells unary minus ``0 - x``,
    which negates +0 to +0). Under the interpreter the fma is fused only by the tests' fixture
    (tests/ops/fused_fma.py)."""
    if INPLACE:
        return tl.fma(x1, cos, _rn("mul", x2, sin) * -1.0), tl.fma(x2, cos, _rn("mul", x1, sin))
    return _rn("sub", _rn("mul", x1, cos), _rn("mul", x2, sin)), tl.fma(x1, sin, _rn("mul", x2, cos))


@triton.jit
def _e4m3_bits(q):
    """float32 ``q`` (within +-448, or NaN) -> e4m3fn bits as uint8, nearest-even, in integer and exact float32
    arithmetic: where Triton's own conversion is unusable (the 3.6 interpreter, sm_89's fp16 detour, sm_80)."""
    bits = q.to(tl.int32, bitcast=True)
    mag = bits & 0x7FFFFFFF
    sign = tl.where(bits < 0, 0x80, 0)
    # normal e4m3 (|q| >= 2^-6): the fp32 mantissa rounded to 3 bits, ties to even, then the exponent rebiased
    # from 127 to 7 (120 << 3 off the exponent-and-mantissa field)
    normal = ((mag + 0x7FFFF + ((mag >> 20) & 1)) >> 20) - 960
    # subnormal e4m3: steps of 2^-9, |q| * 512 rounded to an integer by adding and removing 2^23
    small = mag < 0x3C800000
    sub = ((tl.where(small, tl.abs(q), 0.0) * 512.0 + 8388608.0) - 8388608.0).to(tl.int32)
    code = tl.where(small, sub, normal)
    code = tl.where(mag > 0x7F800000, 0x7F, code)
    return (code | sign).to(tl.uint8)


@triton.jit
def _quantize(x, scale_ptr, SOFT_FP8: tl.constexpr, FUSED_FMA: tl.constexpr):
    """float32 ``x / scale`` correctly rounded, saturated to +-448 (NaN stays NaN), to e4m3fn (or its bits). The
    division: _fp8_jit.div_by_given_scale (FUSED_FMA: RN(1 / scale) and Markstein's correction, three float32
    operations a value, where the scale is in their proven range; else div_rn, since '/' is div.full.f32 on NVIDIA,
    up to 2 ulp off, which a reference cannot reproduce)."""
    q = div_by_given_scale(x, tl.load(scale_ptr), FUSED_FMA)
    q = tl.clamp(q, -FP8_E4M3_MAX, FP8_E4M3_MAX, propagate_nan=tl.PropagateNan.ALL)
    if SOFT_FP8:
        return _e4m3_bits(q)
    return q.to(tl.float8e4nv)


@triton.jit
def _to_cache(x, cache_ptr, scale_ptr, FP8: tl.constexpr, SOFT_FP8: tl.constexpr, FUSED_FMA: tl.constexpr):
    """What a cache stores for ``x`` (a value of the model dtype, in float32 or in that dtype): the same value, or
    its fp8 quantization."""
    if FP8:
        return _quantize(_widen(x, SOFT_FP8), scale_ptr, SOFT_FP8, FUSED_FMA)
    return x.to(cache_ptr.dtype.element_ty)


@triton.jit
def _sum_rows(x):
    return tl.sum(x * x, axis=2)


@triton.jit
def _amax_rows(x):
    return tl.max(tl.abs(x), axis=2)


@triton.jit
def _load_cos_sin(cs_row, sin_offset, mask_cs, BLOCK_H: tl.constexpr, PER_HEAD: tl.constexpr):
    """The tokens' cos and sin rows in the cache's dtype (NaN for a position outside the cache): ``[BLOCK_T, 1,
    BLOCK_HALF]``, or with PER_HEAD ``[BLOCK_T, BLOCK_H, BLOCK_HALF]``, each head's copy loaded in the heads' own
    layout (the same lines, from L1) rather than one row converted to it through shared memory."""
    ptrs = cs_row[:, None, :]
    mask = mask_cs[:, None, :]
    if PER_HEAD:
        zero = tl.zeros((1, BLOCK_H, 1), dtype=tl.int32)
        ptrs = ptrs + zero
        mask = mask & (zero == 0)
    cos = tl.load(ptrs, mask=mask, other=float("nan"))
    return cos, tl.load(ptrs + sin_offset, mask=mask, other=float("nan"))


@triton.jit
def _norm_rope_heads(
    qkv_ptr,
    col0,
    num_heads,
    head_start,
    w_ptr,
    out_ptr,
    stride_out_t,
    stride_out_h,
    cache_ptr,
    scale_ptr,
    cache_rows,
    stride_c_h,
    mask_cache,
    offs_t,
    mask_t,
    stride_qkv_t,
    cs_row,
    sin_offset,
    mask_cs,
    eps,
    weight_bias,
    HEAD_DIM: tl.constexpr,
    ROT_HALF: tl.constexpr,
    IS_NEOX: tl.constexpr,
    HAS_NORM: tl.constexpr,
    INPLACE: tl.constexpr,
    WRITE_OUT: tl.constexpr,
    WRITE_CACHE: tl.constexpr,
    FP8: tl.constexpr,
    SOFT_FP8: tl.constexpr,
    FUSED_FMA: tl.constexpr,
    EXACT: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    BLOCK_TAIL: tl.constexpr,
    EARLY_LOADS: tl.constexpr,
    PER_HEAD_CS: tl.constexpr,
):
    """Heads ``[head_start, head_start + BLOCK_H)`` of q (or k) for the tokens ``offs_t``: RMSNorm over each head
    (HAS_NORM), rotary on dims ``[0, 2 * ROT_HALF)``, the result rounded once to the model dtype and stored to
    ``out`` (WRITE_OUT) and to the cache rows ``cache_rows`` (WRITE_CACHE, fp8-quantized where FP8). A head is read
    as its rotated pairs and its tail ``[2 * ROT_HALF, HEAD_DIM)``, each element once, all before any store (out may
    be the input itself). EARLY_LOADS: cos/sin are loaded with the head, before the norm's reductions. INPLACE: the
    arithmetic of vLLM's fused_qk_norm_rope (normed head kept in float32, its rotation order), else of its
    fused_qknorm_rope_cache (normed head rounded to the model dtype first)."""
    dtype = qkv_ptr.dtype.element_ty
    TAIL: tl.constexpr = HEAD_DIM - 2 * ROT_HALF
    offs_h = head_start + tl.arange(0, BLOCK_H)  # [BLOCK_H]
    mask_th = mask_t[:, None, None] & (offs_h < num_heads)[None, :, None]
    src = qkv_ptr + offs_t[:, None, None] * stride_qkv_t + (col0 + offs_h * HEAD_DIM)[None, :, None]
    dst = out_ptr + offs_t[:, None, None] * stride_out_t + (offs_h * stride_out_h)[None, :, None]
    cdst = cache_ptr + cache_rows[:, None, None] + (offs_h * stride_c_h)[None, :, None]
    mask_c = mask_cache[:, None, None] & (offs_h < num_heads)[None, :, None]
    offs_j = tl.arange(0, BLOCK_HALF)[None, None, :]
    offs_d = tl.arange(0, 2 * BLOCK_HALF)[None, None, :]
    offs_r = tl.arange(0, BLOCK_TAIL)[None, None, :]
    if ROT_HALF > 0:
        if IS_NEOX:
            mask_p = mask_th & (offs_j < ROT_HALF)
            x1 = _widen(tl.load(src + offs_j, mask=mask_p, other=0.0), EXACT)  # [BLOCK_T, BLOCK_H, BLOCK_HALF]
            x2 = _widen(tl.load(src + ROT_HALF + offs_j, mask=mask_p, other=0.0), EXACT)
        else:
            # interleaved pairs: one contiguous load split in registers (strided loads would not vectorize)
            mask_p = mask_th & (offs_d < 2 * ROT_HALF)
            xi = _widen(tl.load(src + offs_d, mask=mask_p, other=0.0), EXACT)  # [BLOCK_T, BLOCK_H, 2 * BLOCK_HALF]
            x1, x2 = tl.split(tl.reshape(xi, (BLOCK_T, BLOCK_H, BLOCK_HALF, 2)))
    if TAIL > 0:
        mask_r = mask_th & (offs_r < TAIL)
        xt_raw = tl.load(src + 2 * ROT_HALF + offs_r, mask=mask_r, other=0.0)  # [BLOCK_T, BLOCK_H, BLOCK_TAIL]
        xt = _widen(xt_raw, EXACT)
    if ROT_HALF > 0:
        if EARLY_LOADS:
            cos_raw, sin_raw = _load_cos_sin(cs_row, sin_offset, mask_cs, BLOCK_H, PER_HEAD_CS)
    if HAS_NORM:
        # weights are shared by every token and head of the program: [1, 1, BLOCK_*]
        ss = tl.zeros((BLOCK_T, BLOCK_H), dtype=tl.float32)
        if ROT_HALF > 0:
            ss += _sum_rows(x1) + _sum_rows(x2)
            if IS_NEOX:
                w1 = tl.load(w_ptr + offs_j, mask=offs_j < ROT_HALF, other=0.0).to(tl.float32) + weight_bias
                w2 = tl.load(w_ptr + ROT_HALF + offs_j, mask=offs_j < ROT_HALF, other=0.0).to(tl.float32)
                w2 = w2 + weight_bias
            else:
                wi = tl.load(w_ptr + offs_d, mask=offs_d < 2 * ROT_HALF, other=0.0).to(tl.float32) + weight_bias
                w1, w2 = tl.split(tl.reshape(wi, (1, 1, BLOCK_HALF, 2)))
        if TAIL > 0:
            ss += _sum_rows(xt)
            wt = tl.load(w_ptr + 2 * ROT_HALF + offs_r, mask=offs_r < TAIL, other=0.0).to(tl.float32) + weight_bias
        rstd = tl.rsqrt(ss / HEAD_DIM + eps)  # [BLOCK_T, BLOCK_H]
        if tl.max(tl.max(ss, axis=1), axis=0) > FLT_MAX:
            # a head whose float32 sum of squares overflows (|x| past ~1e18: bf16, fp32): redo it on x / max|x|
            amax = tl.zeros((BLOCK_T, BLOCK_H), dtype=tl.float32)
            if ROT_HALF > 0:
                amax = tl.maximum(amax, tl.maximum(_amax_rows(x1), _amax_rows(x2)))
            if TAIL > 0:
                amax = tl.maximum(amax, _amax_rows(xt))
            inv = 1.0 / tl.where(amax > 0, amax, 1.0)
            ss2 = tl.zeros((BLOCK_T, BLOCK_H), dtype=tl.float32)
            if ROT_HALF > 0:
                ss2 += _sum_rows(x1 * inv[:, :, None]) + _sum_rows(x2 * inv[:, :, None])
            if TAIL > 0:
                ss2 += _sum_rows(xt * inv[:, :, None])
            rstd = tl.where(ss > FLT_MAX, tl.rsqrt(ss2 / HEAD_DIM + eps * inv * inv) * inv, rstd)
        r3 = rstd[:, :, None]
        if ROT_HALF > 0:
            if INPLACE:
                # vLLM's fused_qk_norm_rope: x * RN(rstd w), kept in float32 through the rotation
                x1 = x1 * (r3 * w1)
                x2 = x2 * (r3 * w2)
            else:
                # its fused cache op (and rms_norm then rotary_embedding): RN(x rstd) w, in the model dtype before
                # the rotation
                x1 = _round(x1 * r3 * w1, dtype, EXACT)
                x2 = _round(x2 * r3 * w2, dtype, EXACT)
        if TAIL > 0:
            if INPLACE:
                xt = xt * (r3 * wt)
            else:
                xt = xt * r3 * wt
    if ROT_HALF > 0:
        if not EARLY_LOADS:
            cos_raw, sin_raw = _load_cos_sin(cs_row, sin_offset, mask_cs, BLOCK_H, PER_HEAD_CS)
        cos = cos_raw.to(tl.float32)  # [BLOCK_T, 1 or BLOCK_H, BLOCK_HALF]
        sin = sin_raw.to(tl.float32)
        o1, o2 = _rotate(x1, x2, cos, sin, INPLACE)
        o1 = _round(o1, dtype, EXACT)
        o2 = _round(o2, dtype, EXACT)
        if IS_NEOX:
            if WRITE_OUT:
                tl.store(dst + offs_j, o1.to(out_ptr.dtype.element_ty), mask=mask_p)
                tl.store(dst + ROT_HALF + offs_j, o2.to(out_ptr.dtype.element_ty), mask=mask_p)
            if WRITE_CACHE:
                mask_cp = mask_c & (offs_j < ROT_HALF)
                tl.store(cdst + offs_j, _to_cache(o1, cache_ptr, scale_ptr, FP8, SOFT_FP8, FUSED_FMA), mask=mask_cp)
                tl.store(
                    cdst + ROT_HALF + offs_j,
                    _to_cache(o2, cache_ptr, scale_ptr, FP8, SOFT_FP8, FUSED_FMA),
                    mask=mask_cp,
                )
        else:
            oi = tl.reshape(tl.join(o1, o2), (BLOCK_T, BLOCK_H, 2 * BLOCK_HALF))
            if WRITE_OUT:
                tl.store(dst + offs_d, oi.to(out_ptr.dtype.element_ty), mask=mask_p)
            if WRITE_CACHE:
                mask_cp = mask_c & (offs_d < 2 * ROT_HALF)
                tl.store(cdst + offs_d, _to_cache(oi, cache_ptr, scale_ptr, FP8, SOFT_FP8, FUSED_FMA), mask=mask_cp)
    if TAIL > 0:
        if HAS_NORM:
            ot = _round(xt, dtype, EXACT)
        else:
            # neither normed nor rotated: the input's bits
            ot = xt_raw
        if WRITE_OUT:
            tl.store(dst + 2 * ROT_HALF + offs_r, ot.to(out_ptr.dtype.element_ty), mask=mask_r)
        if WRITE_CACHE:
            mask_cr = mask_c & (offs_r < TAIL)
            tl.store(
                cdst + 2 * ROT_HALF + offs_r,
                _to_cache(ot, cache_ptr, scale_ptr, FP8, SOFT_FP8, FUSED_FMA),
                mask=mask_cr,
            )


@triton.jit
def _load_v(qkv_ptr, offs_t, mask_t, stride_qkv_t, num_q_heads, num_kv_heads, head_start, HEAD_DIM: tl.constexpr,
            BLOCK_HKV: tl.constexpr, BLOCK_D: tl.constexpr):  # fmt: skip
    """v heads ``[head_start, head_start + BLOCK_HKV)`` of the tokens ``offs_t``: ([BLOCK_T, BLOCK_HKV, BLOCK_D] in
    the model dtype, the heads, the dims [1, 1, BLOCK_D], the heads' and dims' mask)."""
    offs_h = head_start + tl.arange(0, BLOCK_HKV)
    offs_d = tl.arange(0, BLOCK_D)[None, None, :]
    mask_hd = (offs_h < num_kv_heads)[None, :, None] & (offs_d < HEAD_DIM)
    col = (num_q_heads + num_kv_heads) * HEAD_DIM + offs_h * HEAD_DIM
    v = tl.load(
        qkv_ptr + offs_t[:, None, None] * stride_qkv_t + col[None, :, None] + offs_d,
        mask=mask_t[:, None, None] & mask_hd,
    )
    return v, offs_h, offs_d, mask_hd


@triton.jit
def _tokens(pid_t, num_tokens, pos_ptr, cs_ptr, stride_pos, stride_cs, max_position, BLOCK_T: tl.constexpr,
            TOKENS: tl.constexpr, ROT_HALF: tl.constexpr, BLOCK_HALF: tl.constexpr):  # fmt: skip
    """A program's TOKENS tokens from token block ``pid_t`` (int64: token * stride passes 2^31), their mask, and
    their cos rows ``[TOKENS, BLOCK_HALF]`` with their mask: a position outside ``[0, max_position)`` reads none (its
    rotated dims become NaN). Without rotary: the cache's base and the tokens' mask, which nothing reads."""
    offs_t = pid_t * BLOCK_T + tl.arange(0, TOKENS)
    mask_t = offs_t < num_tokens
    cs_row = cs_ptr
    mask_cs = mask_t
    if ROT_HALF > 0:
        pos = tl.load(pos_ptr + offs_t * stride_pos, mask=mask_t, other=0).to(tl.int64)
        in_range = mask_t & (pos >= 0) & (pos < max_position)
        pos = tl.where(in_range, pos, 0)
        offs_j = tl.arange(0, BLOCK_HALF)
        mask_cs = in_range[:, None] & (offs_j < ROT_HALF)[None, :]
        cs_row = cs_ptr + pos[:, None] * stride_cs + offs_j[None, :]
    return offs_t, mask_t, cs_row, mask_cs


# num_tokens and num_slot_tokens change every call: specializing them (==1, %16) would compile again mid-serving;
# num_slots is the cache's size, compared and never multiplied
@triton.jit(do_not_specialize=["num_tokens", "num_slot_tokens", "num_slots"])
def _qk_norm_rope_cache_kernel(
    qkv_ptr,
    pos_ptr,
    cs_ptr,
    q_w_ptr,
    k_w_ptr,
    q_out_ptr,
    k_out_ptr,
    v_out_ptr,
    key_cache_ptr,
    value_cache_ptr,
    slot_ptr,
    k_scale_ptr,
    v_scale_ptr,
    num_tokens,
    num_slot_tokens,
    num_slots,
    num_q_heads,
    num_kv_heads,
    max_position,
    block_size,
    eps,
    weight_bias,
    stride_qkv_t,
    stride_pos,
    stride_cs,
    sin_offset,
    stride_qo_t,
    stride_qo_h,
    stride_ko_t,
    stride_ko_h,
    stride_vo_t,
    stride_vo_h,
    stride_kc_b,
    stride_kc_r,
    stride_kc_h,
    stride_vc_b,
    stride_vc_r,
    stride_vc_h,
    HEAD_DIM: tl.constexpr,
    ROT_HALF: tl.constexpr,
    IS_NEOX: tl.constexpr,
    HAS_NORM: tl.constexpr,
    INPLACE: tl.constexpr,
    WRITE_Q: tl.constexpr,
    WRITE_K: tl.constexpr,
    WRITE_V: tl.constexpr,
    WRITE_CACHE: tl.constexpr,
    FP8: tl.constexpr,
    SOFT_FP8: tl.constexpr,
    FUSED_FMA: tl.constexpr,
    EXACT: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_HQ: tl.constexpr,
    BLOCK_HKV: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    BLOCK_TAIL: tl.constexpr,
    BLOCK_D: tl.constexpr,
    EARLY_LOADS: tl.constexpr,
    GRID_H: tl.constexpr,
    KV_T: tl.constexpr,
):
    """BLOCK_T tokens of a fused qkv row ``[q heads | k heads | v heads]`` per program: program ``(i, j)`` norms and
    rotates q's head block j, or for ``j >= cdiv(num_q_heads, BLOCK_HQ)`` k's head block and copies the same v
    heads, writing k and v to the paged caches at the tokens' slots. A slot below 0 (padding), at or past
    ``num_slots``, or of a token past ``num_slot_tokens`` writes no cache row. A position outside
    ``[0, max_position)`` reads no cos/sin: that token's rotated dims become NaN. On the 1-D grid a k/v program
    takes KV_T token blocks: GRID_H programs a group of KV_T token blocks, first their q programs (token block by
    token block, head block fastest), then the group's k/v programs."""
    n_q_blocks = tl.cdiv(num_q_heads, BLOCK_HQ)
    if GRID_H > 0:
        # a 1-D grid, a token group's GRID_H head blocks side by side: q and k/v programs share the SMs throughout
        pid = tl.program_id(0)
        group = (pid // GRID_H).to(tl.int64)
        r = pid % GRID_H
        if KV_T == 1:
            # no runtime division where each k/v program takes one token block
            pid_t = group
            pid_h = r
        else:
            is_q = r < KV_T * n_q_blocks
            pid_t = group * KV_T + tl.where(is_q, r // n_q_blocks, 0)
            pid_h = tl.where(is_q, r % n_q_blocks, r - (KV_T - 1) * n_q_blocks)
    else:
        tl.static_assert(KV_T == 1, "a k/v program takes KV_T token blocks on the 1-D grid only")
        pid_t = tl.program_id(0).to(tl.int64)
        pid_h = tl.program_id(1)
    if pid_h < n_q_blocks:
        offs_t, mask_t, cs_row, mask_cs = _tokens(
            pid_t, num_tokens, pos_ptr, cs_ptr, stride_pos, stride_cs, max_position, BLOCK_T, BLOCK_T, ROT_HALF,
            BLOCK_HALF,
        )  # fmt: skip
        _norm_rope_heads(
            qkv_ptr,
            0,
            num_q_heads,
            pid_h * BLOCK_HQ,
            q_w_ptr,
            q_out_ptr,
            stride_qo_t,
            stride_qo_h,
            key_cache_ptr,
            k_scale_ptr,
            offs_t,
            stride_kc_h,
            mask_t,
            offs_t,
            mask_t,
            stride_qkv_t,
            cs_row,
            sin_offset,
            mask_cs,
            eps,
            weight_bias,
            HEAD_DIM,
            ROT_HALF,
            IS_NEOX,
            HAS_NORM,
            INPLACE,
            WRITE_Q,
            False,
            FP8,
            SOFT_FP8,
            FUSED_FMA,
            EXACT,
            BLOCK_T,
            BLOCK_HQ,
            BLOCK_HALF,
            BLOCK_TAIL,
            EARLY_LOADS,
            False,
        )
    else:
        head_start = (pid_h - n_q_blocks) * BLOCK_HKV
        # the group's KV_T token blocks
        offs_tk, mask_tk, cs_rowk, mask_csk = _tokens(
            pid_t, num_tokens, pos_ptr, cs_ptr, stride_pos, stride_cs, max_position, BLOCK_T, KV_T * BLOCK_T,
            ROT_HALF, BLOCK_HALF,
        )  # fmt: skip
        if WRITE_CACHE:
            slot = tl.load(slot_ptr + offs_tk, mask=offs_tk < num_slot_tokens, other=-1).to(tl.int64)
            # one compare per token: slots past the cache are dropped like padding
            valid = (slot >= 0) & (slot < num_slots)
            # a dropped slot divides as 0: -1's high word would send the int64 division down its slow path
            # (docs/notes/reshape-and-cache.md)
            slot = tl.where(valid, slot, 0)
            blk = slot // block_size
            row = slot - blk * block_size
            k_rows = blk * stride_kc_b + row * stride_kc_r  # [KV_T * BLOCK_T], int64
            v_rows = blk * stride_vc_b + row * stride_vc_r
        else:
            valid = offs_tk < 0
            k_rows = offs_tk
            v_rows = offs_tk
        if EARLY_LOADS:
            if WRITE_V or WRITE_CACHE:
                # v in flight with k's loads rather than loaded after k's stores
                v, offs_hv, offs_dv, mask_hd = _load_v(
                    qkv_ptr, offs_tk, mask_tk, stride_qkv_t, num_q_heads, num_kv_heads, head_start, HEAD_DIM, BLOCK_HKV,
                    BLOCK_D,
                )  # fmt: skip
        _norm_rope_heads(
            qkv_ptr,
            num_q_heads * HEAD_DIM,
            num_kv_heads,
            head_start,
            k_w_ptr,
            k_out_ptr,
            stride_ko_t,
            stride_ko_h,
            key_cache_ptr,
            k_scale_ptr,
            k_rows,
            stride_kc_h,
            valid,
            offs_tk,
            mask_tk,
            stride_qkv_t,
            cs_rowk,
            sin_offset,
            mask_csk,
            eps,
            weight_bias,
            HEAD_DIM,
            ROT_HALF,
            IS_NEOX,
            HAS_NORM,
            INPLACE,
            WRITE_K,
            WRITE_CACHE,
            FP8,
            SOFT_FP8,
            FUSED_FMA,
            EXACT,
            KV_T * BLOCK_T,
            BLOCK_HKV,
            BLOCK_HALF,
            BLOCK_TAIL,
            EARLY_LOADS,
            KV_T > 1,
        )
        if WRITE_V or WRITE_CACHE:
            # v: a copy into v_out and the cache, quantized there where FP8
            if not EARLY_LOADS:
                v, offs_hv, offs_dv, mask_hd = _load_v(
                    qkv_ptr, offs_tk, mask_tk, stride_qkv_t, num_q_heads, num_kv_heads, head_start, HEAD_DIM, BLOCK_HKV,
                    BLOCK_D,
                )  # fmt: skip
            if WRITE_V:
                vo = v_out_ptr + offs_tk[:, None, None] * stride_vo_t + (offs_hv * stride_vo_h)[None, :, None] + offs_dv
                tl.store(vo, v, mask=mask_tk[:, None, None] & mask_hd)
            if WRITE_CACHE:
                vc = value_cache_ptr + v_rows[:, None, None] + (offs_hv * stride_vc_h)[None, :, None] + offs_dv
                tl.store(
                    vc,
                    _to_cache(v, value_cache_ptr, v_scale_ptr, FP8, SOFT_FP8, FUSED_FMA),
                    mask=valid[:, None, None] & mask_hd,
                )
