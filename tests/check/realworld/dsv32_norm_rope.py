"""DeepSeek-V3.2-style fused prologue kernels, modeled on vLLM's DeepSeek-V3.2 Triton kernels. See SOURCES.md:
vllm-project/vllm#52381.

`_mla_prologue_*`: one program per (role, token): role 0 RMS-normalizes the compressed query, role 1 normalizes the
compressed KV, ropes k_pe (interleaved pairs, in registers) and writes both into the paged MLA cache at the token's
slot, role 2 fills the token's top-k index row with -1. `_q_pack_*`: one program per (role, token, head pair):
role 0 quantizes the NoPE query to fp8 into the front of the packed MQA query, role 1 ropes q_pe into its tail.

Before the fix both grids put the token count in grid[1] (65,536 tokens: over the 65,535 limit) and the token
program id stayed int32 (the packed query row stride 128 x 576 times 65,535 passes 2^31). The twins put tokens in
grid[0] and widen the token id. As upstream, the fixed prologue checks the slot for padding after the query norm
(which must run for every token) and loads the slot again where it computes the cache block: a non-negative slot
that the `< 0` test of the first load guarantees, not the second load's own range.
"""

import torch
import triton
import triton.language as tl

import tritonkit


@triton.jit
def _rms(x_ptr, w_ptr, offs, mask, n, eps):
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    return x * tl.rsqrt(tl.sum(x * x, axis=0) / n + eps) * w


@triton.jit
def _mla_prologue_token_major_y_kernel(
    q_c_ptr, q_w_ptr, q_out_ptr, kv_c_ptr, kv_w_ptr, k_pe_ptr, pos_ptr, cos_sin_ptr, slot_ptr, cache_ptr, topk_ptr,
    stride_q_c, stride_q_out, stride_kv_c, stride_k_pe, stride_cs, stride_cache_block, stride_cache_entry,
    stride_topk, eps,
    Q_DIM: tl.constexpr, Q_BLOCK: tl.constexpr, KV_DIM: tl.constexpr, HALF_ROT: tl.constexpr,
    CACHE_BLOCK: tl.constexpr, TOPK: tl.constexpr, TOPK_BLOCK: tl.constexpr,
):
    role = tl.program_id(0)
    tok = tl.program_id(1)
    if role == 2:
        for i in range(0, TOPK, TOPK_BLOCK):
            offs = i + tl.arange(0, TOPK_BLOCK)
            tl.store(topk_ptr + tok * stride_topk + offs, -1, mask=offs < TOPK)
        return
    slot = tl.load(slot_ptr + tok)
    if slot < 0:
        return
    if role == 0:
        offs_q = tl.arange(0, Q_BLOCK)
        mask_q = offs_q < Q_DIM
        q = _rms(q_c_ptr + tok * stride_q_c, q_w_ptr, offs_q, mask_q, Q_DIM, eps)
        tl.store(q_out_ptr + tok * stride_q_out + offs_q, q.to(q_out_ptr.dtype.element_ty), mask=mask_q)
    else:
        offs_kv = tl.arange(0, KV_DIM)
        kv = _rms(kv_c_ptr + tok * stride_kv_c, kv_w_ptr, offs_kv, offs_kv < KV_DIM, KV_DIM, eps)
        pos = tl.load(pos_ptr + tok)
        offs_r = tl.arange(0, HALF_ROT)
        cos = tl.load(cos_sin_ptr + pos * stride_cs + offs_r)
        sin = tl.load(cos_sin_ptr + pos * stride_cs + HALF_ROT + offs_r)
        x1 = tl.load(k_pe_ptr + tok * stride_k_pe + 2 * offs_r).to(tl.float32)
        x2 = tl.load(k_pe_ptr + tok * stride_k_pe + 2 * offs_r + 1).to(tl.float32)
        dst = cache_ptr + (slot // CACHE_BLOCK) * stride_cache_block + (slot % CACHE_BLOCK) * stride_cache_entry
        tl.store(dst + offs_kv, kv.to(cache_ptr.dtype.element_ty))
        tl.store(dst + KV_DIM + 2 * offs_r, (x1 * cos - x2 * sin).to(cache_ptr.dtype.element_ty))
        tl.store(dst + KV_DIM + 2 * offs_r + 1, (x2 * cos + x1 * sin).to(cache_ptr.dtype.element_ty))


@triton.jit
def _mla_prologue_kernel(
    q_c_ptr, q_w_ptr, q_out_ptr, kv_c_ptr, kv_w_ptr, k_pe_ptr, pos_ptr, cos_sin_ptr, slot_ptr, cache_ptr, topk_ptr,
    stride_q_c, stride_q_out, stride_kv_c, stride_k_pe, stride_cs, stride_cache_block, stride_cache_entry,
    stride_topk, eps,
    Q_DIM: tl.constexpr, Q_BLOCK: tl.constexpr, KV_DIM: tl.constexpr, HALF_ROT: tl.constexpr,
    CACHE_BLOCK: tl.constexpr, TOPK: tl.constexpr, TOPK_BLOCK: tl.constexpr,
):
    tok = tl.program_id(0).to(tl.int64)
    role = tl.program_id(1)
    if role == 2:
        for i in range(0, TOPK, TOPK_BLOCK):
            offs = i + tl.arange(0, TOPK_BLOCK)
            tl.store(topk_ptr + tok * stride_topk + offs, -1, mask=offs < TOPK)
        return
    if role == 0:
        # every token needs its query, padded or not: normalize before looking at the slot
        offs_q = tl.arange(0, Q_BLOCK)
        mask_q = offs_q < Q_DIM
        q = _rms(q_c_ptr + tok * stride_q_c, q_w_ptr, offs_q, mask_q, Q_DIM, eps)
        tl.store(q_out_ptr + tok * stride_q_out + offs_q, q.to(q_out_ptr.dtype.element_ty), mask=mask_q)
        return
    if tl.load(slot_ptr + tok) < 0:
        return
    offs_kv = tl.arange(0, KV_DIM)
    kv = _rms(kv_c_ptr + tok * stride_kv_c, kv_w_ptr, offs_kv, offs_kv < KV_DIM, KV_DIM, eps)
    pos = tl.load(pos_ptr + tok)
    offs_r = tl.arange(0, HALF_ROT)
    cos = tl.load(cos_sin_ptr + pos * stride_cs + offs_r)
    sin = tl.load(cos_sin_ptr + pos * stride_cs + HALF_ROT + offs_r)
    x1 = tl.load(k_pe_ptr + tok * stride_k_pe + 2 * offs_r).to(tl.float32)
    x2 = tl.load(k_pe_ptr + tok * stride_k_pe + 2 * offs_r + 1).to(tl.float32)
    slot = tl.load(slot_ptr + tok)
    dst = cache_ptr + (slot // CACHE_BLOCK) * stride_cache_block + (slot % CACHE_BLOCK) * stride_cache_entry
    tl.store(dst + offs_kv, kv.to(cache_ptr.dtype.element_ty))
    tl.store(dst + KV_DIM + 2 * offs_r, (x1 * cos - x2 * sin).to(cache_ptr.dtype.element_ty))
    tl.store(dst + KV_DIM + 2 * offs_r + 1, (x2 * cos + x1 * sin).to(cache_ptr.dtype.element_ty))


@triton.jit
def _q_pack_token_major_y_kernel(
    q_nope_ptr, q_pe_ptr, pos_ptr, cos_sin_ptr, scale_ptr, out_ptr,
    stride_nope_tok, stride_nope_head, stride_pe_tok, stride_pe_head, stride_cs, stride_out_tok, stride_out_head,
    NUM_HEADS: tl.constexpr, NOPE: tl.constexpr, HALF_ROT: tl.constexpr,
):
    role = tl.program_id(0)
    tok = tl.program_id(1)
    pair = tl.program_id(2)
    inv_scale = 1.0 / tl.load(scale_ptr)
    if role == 0:
        offs = tl.arange(0, NOPE)
        for j in range(2):
            head = 2 * pair + j
            if head < NUM_HEADS:
                x = tl.load(q_nope_ptr + tok * stride_nope_tok + head * stride_nope_head + offs)  # expect: int32-offset
                tl.store(out_ptr + tok * stride_out_tok + head * stride_out_head + offs,  # expect: int32-offset
                         (x.to(tl.float32) * inv_scale).to(out_ptr.dtype.element_ty))
    else:
        pos = tl.load(pos_ptr + tok)
        offs_r = tl.arange(0, HALF_ROT)
        cos = tl.load(cos_sin_ptr + pos * stride_cs + offs_r)
        sin = tl.load(cos_sin_ptr + pos * stride_cs + HALF_ROT + offs_r)
        for j in range(2):
            head = 2 * pair + j
            if head < NUM_HEADS:
                src = q_pe_ptr + tok * stride_pe_tok + head * stride_pe_head + 2 * offs_r
                x1 = tl.load(src).to(tl.float32)
                x2 = tl.load(src + 1).to(tl.float32)
                dst = (out_ptr + tok * stride_out_tok  # expect: int32-offset
                       + head * stride_out_head + NOPE + 2 * offs_r)
                tl.store(dst, ((x1 * cos - x2 * sin) * inv_scale).to(out_ptr.dtype.element_ty))
                tl.store(dst + 1, ((x2 * cos + x1 * sin) * inv_scale).to(out_ptr.dtype.element_ty))


@triton.jit
def _q_pack_kernel(
    q_nope_ptr, q_pe_ptr, pos_ptr, cos_sin_ptr, scale_ptr, out_ptr,
    stride_nope_tok, stride_nope_head, stride_pe_tok, stride_pe_head, stride_cs, stride_out_tok, stride_out_head,
    NUM_HEADS: tl.constexpr, NOPE: tl.constexpr, HALF_ROT: tl.constexpr,
):
    tok = tl.program_id(0).to(tl.int64)
    role = tl.program_id(1)
    pair = tl.program_id(2)
    inv_scale = 1.0 / tl.load(scale_ptr)
    if role == 0:
        offs = tl.arange(0, NOPE)
        for j in range(2):
            head = 2 * pair + j
            if head < NUM_HEADS:
                x = tl.load(q_nope_ptr + tok * stride_nope_tok + head * stride_nope_head + offs)
                tl.store(out_ptr + tok * stride_out_tok + head * stride_out_head + offs,
                         (x.to(tl.float32) * inv_scale).to(out_ptr.dtype.element_ty))
    else:
        pos = tl.load(pos_ptr + tok)
        offs_r = tl.arange(0, HALF_ROT)
        cos = tl.load(cos_sin_ptr + pos * stride_cs + offs_r)
        sin = tl.load(cos_sin_ptr + pos * stride_cs + HALF_ROT + offs_r)
        for j in range(2):
            head = 2 * pair + j
            if head < NUM_HEADS:
                src = q_pe_ptr + tok * stride_pe_tok + head * stride_pe_head + 2 * offs_r
                x1 = tl.load(src).to(tl.float32)
                x2 = tl.load(src + 1).to(tl.float32)
                dst = out_ptr + tok * stride_out_tok + head * stride_out_head + NOPE + 2 * offs_r
                tl.store(dst, ((x1 * cos - x2 * sin) * inv_scale).to(out_ptr.dtype.element_ty))
                tl.store(dst + 1, ((x2 * cos + x1 * sin) * inv_scale).to(out_ptr.dtype.element_ty))


def _prologue_args(num_tokens):
    """DeepSeek-V3.2: q_lora_rank 1536, kv_lora_rank 512, rope 64, top-k 2048, bf16 MLA cache of 64-token blocks."""
    m = dict(device="meta", dtype=torch.bfloat16)
    q_c = torch.empty(num_tokens, 1536, **m)
    kv_c = torch.empty(num_tokens, 512, **m)
    k_pe = torch.empty(num_tokens, 64, **m)
    cos_sin = torch.empty(163_840, 64, device="meta", dtype=torch.float32)
    cache = torch.empty(20_000, 64, 576, **m)
    topk = torch.empty(num_tokens, 2048, device="meta", dtype=torch.int32)
    q_out = torch.empty_like(q_c)
    args = (q_c, torch.empty(1536, **m), q_out, kv_c, torch.empty(512, **m), k_pe,
            torch.empty(num_tokens, device="meta", dtype=torch.int64), cos_sin,
            torch.empty(num_tokens, device="meta", dtype=torch.int64), cache, topk,
            q_c.stride(0), q_out.stride(0), kv_c.stride(0), k_pe.stride(0), cos_sin.stride(0), cache.stride(0),
            cache.stride(1), topk.stride(0), 1e-6)
    return args, dict(Q_DIM=1536, Q_BLOCK=2048, KV_DIM=512, HALF_ROT=32, CACHE_BLOCK=64, TOPK=2048, TOPK_BLOCK=1024)


def _q_pack_args(num_tokens):
    """128 query heads (TP1): NoPE 512 + rope 64 packed into fp8 rows of 576."""
    m = dict(device="meta", dtype=torch.bfloat16)
    q_nope = torch.empty(num_tokens, 128, 512, **m)
    q_pe = torch.empty(num_tokens, 128, 64, **m)
    cos_sin = torch.empty(163_840, 64, device="meta", dtype=torch.float32)
    out = torch.empty(num_tokens, 128, 576, device="meta", dtype=torch.float8_e4m3fn)
    args = (q_nope, q_pe, torch.empty(num_tokens, device="meta", dtype=torch.int64), cos_sin,
            torch.empty(1, device="meta", dtype=torch.float32), out, q_nope.stride(0), q_nope.stride(1),
            q_pe.stride(0), q_pe.stride(1), cos_sin.stride(0), out.stride(0), out.stride(1))
    return args, dict(NUM_HEADS=128, NOPE=512, HALF_ROT=32)


TOKENS = [1, 8192, 65536]
# slots are block * 64 + offset of the 20,000-block cache, or -1 for padding; positions < 163,840
BOUNDS = {"slot_ptr": (-1, 20_000 * 64 - 1), "pos_ptr": (0, 163_839)}


@tritonkit.case(num_tokens=TOKENS, loaded_bounds=BOUNDS)
def mla_prologue_tokens_in_grid_y(num_tokens):
    args, meta = _prologue_args(num_tokens)
    _mla_prologue_token_major_y_kernel[(3, num_tokens)](*args, **meta)  # expect: grid-limit


@tritonkit.case(num_tokens=TOKENS, loaded_bounds=BOUNDS)
def mla_prologue(num_tokens):
    args, meta = _prologue_args(num_tokens)
    _mla_prologue_kernel[(num_tokens, 3)](*args, **meta)


@tritonkit.case(num_tokens=TOKENS, loaded_bounds={"pos_ptr": (0, 163_839)})
def q_pack_tokens_in_grid_y(num_tokens):
    args, meta = _q_pack_args(num_tokens)
    _q_pack_token_major_y_kernel[(2, num_tokens, 64)](*args, **meta)  # expect: grid-limit


@tritonkit.case(num_tokens=TOKENS, loaded_bounds={"pos_ptr": (0, 163_839)})
def q_pack(num_tokens):
    args, meta = _q_pack_args(num_tokens)
    _q_pack_kernel[(num_tokens, 2, 64)](*args, **meta)
