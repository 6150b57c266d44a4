import triton
import triton.language as tl

FP8_E4M3_MAX = tl.constexpr(448.0)


@triton.jit
def _e4m3_bits(q):
    """float32 ``q`` (already within +-448, or NaN) -> e4m3fn bits as uint8, rounding to nearest, ties to even.

    Integer and exact float32 arithmetic only, for where Triton's own conversion is unusable: the 3.6 interpreter
    rounds ties away and drops mantissa carries, sm_89 goes through an fp16 truncation first, sm_80 has no e4m3."""
    bits = q.to(tl.int32, bitcast=True)
    mag = bits & 0x7FFFFFFF
    sign = tl.where(bits < 0, 0x80, 0)
    # |q| >= 2^-6 (normal e4m3): round the fp32 mantissa to 3 bits, ties to even; a carry bumps the exponent.
    # Then rebias the exponent from 127 to 7: subtract 120 << 3 from the (exponent, mantissa) field.
    normal = ((mag + 0x7FFFF + ((mag >> 20) & 1)) >> 20) - 960
    # |q| < 2^-6: the e4m3 step is 2^-9, so round |q| * 512 to an integer; adding 2^23 rounds ties to even in fp32
    small = mag < 0x3C800000
    sub = ((tl.where(small, tl.abs(q), 0.0) * 512.0 + 8388608.0) - 8388608.0).to(tl.int32)
    code = tl.where(small, sub, normal)
    code = tl.where(mag > 0x7F800000, 0x7F, code)
    return (code | sign).to(tl.uint8)


@triton.jit
def _load_f32(ptrs, mask, EXACT_BF16: tl.constexpr):
    x = tl.load(ptrs, mask=mask, other=0.0)
    if EXACT_BF16 and x.dtype == tl.bfloat16:
        # the 3.6 interpreter flushes bf16 subnormals when widening; the bit pattern shifted up is exact anywhere
        return (x.to(tl.int16, bitcast=True).to(tl.int32) << 16).to(tl.float32, bitcast=True)
    return x.to(tl.float32)


@triton.jit
def _quantize_e4m3(x, scale, SOFT_FP8: tl.constexpr):
    """``x / scale`` correctly rounded in float32, saturated to +-448 (NaN stays NaN), rounded to e4m3fn."""
    # tl.math.div_rn: a plain '/' is div.full.f32 on NVIDIA, up to 2 ulp off, which the reference cannot reproduce
    q = tl.math.div_rn(x, tl.broadcast_to(scale, x.shape))
    q = tl.clamp(q, -FP8_E4M3_MAX, FP8_E4M3_MAX, propagate_nan=tl.PropagateNan.ALL)
    if SOFT_FP8:
        # the caches arrive as uint8 views: fp8e4nv pointers do not exist before sm_89
        out = _e4m3_bits(q)
    else:
        # sm_90+: cvt.rn.satfinite.e4m3x2.f32, two elements an instruction
        out = q.to(tl.float8e4nv)
    return out


# num_tokens changes every call: specializing it (==1, %16) would compile again mid-serving; num_slots is the
# cache's size, compared and never multiplied: a specialization would buy nothing
@triton.jit(do_not_specialize=["num_tokens", "num_slots"])
def _reshape_and_cache_kernel(
    key_ptr,
    value_ptr,
    key_cache_ptr,
    value_cache_ptr,
    slot_ptr,
    k_scale_ptr,
    v_scale_ptr,
    num_tokens,
    num_slots,
    num_heads,
    block_size,
    stride_k_t,
    stride_k_h,
    stride_v_t,
    stride_v_h,
    stride_kc_b,
    stride_kc_r,
    stride_kc_h,
    stride_vc_b,
    stride_vc_r,
    stride_vc_h,
    HEAD_DIM: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_D: tl.constexpr,
    FP8: tl.constexpr,
    SOFT_FP8: tl.constexpr,
):
    """BLOCK_T tokens x BLOCK_H kv heads per program: token t's key and value rows go to cache block
    ``slot[t] // block_size``, row ``slot[t] % block_size``; ``slot < 0`` is padding: read with the rest, not written.
    A slot at or past ``num_slots`` (the cache's blocks x block_size) is dropped the same way: no slot value
    writes outside the caches.
    Both tiles are loaded before either is stored, so all loads of a program are in flight together."""
    pid_t = tl.program_id(0).to(tl.int64)
    pid_h = tl.program_id(1)
    offs_t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)  # [BLOCK_T], int64
    offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)  # [BLOCK_H]
    offs_d = tl.arange(0, BLOCK_D)  # [BLOCK_D]
    mask_t = offs_t < num_tokens
    t3 = offs_t[:, None, None]
    h3 = offs_h[None, :, None]
    d3 = offs_d[None, None, :]
    mask_hd = (offs_h < num_heads)[None, :, None] & (offs_d < HEAD_DIM)[None, None, :]
    # key/value loads do not wait for the slot: a padding token's row is read (it is inside key) and dropped at
    # the store, so the slot load and the row loads are in flight together instead of one after the other
    mask_in = mask_t[:, None, None] & mask_hd  # [BLOCK_T, BLOCK_H, BLOCK_D]
    k_ptrs = key_ptr + t3 * stride_k_t + h3 * stride_k_h + d3
    v_ptrs = value_ptr + t3 * stride_v_t + h3 * stride_v_h + d3
    slot = tl.load(slot_ptr + offs_t, mask=mask_t, other=-1).to(tl.int64)
    if FP8:
        k = _load_f32(k_ptrs, mask_in, SOFT_FP8)
        v = _load_f32(v_ptrs, mask_in, SOFT_FP8)
    else:
        # a copy: no conversion, every bit (NaN payloads, subnormals, -0) lands as it was
        k = tl.load(k_ptrs, mask=mask_in)
        v = tl.load(v_ptrs, mask=mask_in)
    # one compare per token (a [BLOCK_T] vector, not per element): slots past the cache are dropped like padding
    valid = (slot >= 0) & (slot < num_slots)
    # a dropped slot divides as 0: -1 (and the -1 of tokens past num_tokens) has its high word set, which sends the
    # int64 division down its 64-bit subroutine instead of the 32-bit path (H200, one token, same tile: 1.97 against
    # 1.76 us; docs/notes/reshape-and-cache.md)
    slot = tl.where(valid, slot, 0)
    blk = slot // block_size
    row = slot - blk * block_size
    mask = valid[:, None, None] & mask_hd
    kc_ptrs = key_cache_ptr + (blk * stride_kc_b + row * stride_kc_r)[:, None, None] + h3 * stride_kc_h + d3
    vc_ptrs = value_cache_ptr + (blk * stride_vc_b + row * stride_vc_r)[:, None, None] + h3 * stride_vc_h + d3
    if FP8:
        k = _quantize_e4m3(k, tl.load(k_scale_ptr), SOFT_FP8)
        v = _quantize_e4m3(v, tl.load(v_scale_ptr), SOFT_FP8)
    tl.store(kc_ptrs, k, mask=mask)
    tl.store(vc_ptrs, v, mask=mask)
