"""Chunked beta * K K^T (strictly lower triangle, with gate decay) of gated delta-rule linear attention, one
program per (chunk, batch x value head), block pointers over [B, T, H, K], modeled on flash-linear-attention's
chunk_scaled_dot_kkt. See SOURCES.md: fla-org/flash-linear-attention#1080 / #1082.

The sequence's first row is `bos = i_b * T` with i_b from tl.program_id(1). In the `i32bh` kernel that program id
is int32, so `(bos * H + head) * K` wraps at B=128, T=32,768 (8.6e9 elements); the twin widens the program id to
int64, as the fix did. Both are autotuned, as upstream (here over two configs): reported as info.
"""

import torch
import triton
import triton.language as tl

import tritonkit

CONFIGS = [triton.Config({"BK": 64}, num_warps=4), triton.Config({"BK": 128}, num_warps=8)]


@triton.autotune(configs=CONFIGS, key=["H", "HV", "K", "BT"])
@triton.jit(do_not_specialize=["T"])
def _chunk_kkt_i32bh_kernel(  # expect: autotune-cost
    k_ptr, g_ptr, beta_ptr, a_ptr, T,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
):
    i_t = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b, i_h = i_bh // HV, i_bh % HV
    bos = i_b * T
    o_t = i_t * BT + tl.arange(0, BT)
    m_t = o_t < T
    p_beta = tl.make_block_ptr(beta_ptr + bos * HV + i_h, (T,), (HV,), (i_t * BT,), (BT,), (0,))
    b_beta = tl.load(p_beta, boundary_check=(0,))
    b_a = tl.zeros([BT, BT], dtype=tl.float32)
    for i_k in range(tl.cdiv(K, BK)):
        p_k = tl.make_block_ptr(k_ptr + (bos * H + i_h // (HV // H)) * K, (T, K), (H * K, 1),  # expect: int32-offset
                                (i_t * BT, i_k * BK), (BT, BK), (1, 0))
        b_k = tl.load(p_k, boundary_check=(0, 1))
        b_a += tl.dot(b_k, tl.trans(b_k))
    p_g = tl.make_block_ptr(g_ptr + bos * HV + i_h, (T,), (HV,), (i_t * BT,), (BT,), (0,))
    b_g = tl.load(p_g, boundary_check=(0,))
    b_a *= tl.exp(b_g[:, None] - b_g[None, :])
    b_a *= b_beta[:, None]
    b_a = tl.where((o_t[:, None] > o_t[None, :]) & (m_t[:, None] & m_t), b_a, 0)
    p_a = tl.make_block_ptr(a_ptr + (bos * HV + i_h) * BT, (T, BT), (BT * HV, 1), (i_t * BT, 0),  # expect: int32-offset
                            (BT, BT), (1, 0))
    tl.store(p_a, b_a.to(p_a.dtype.element_ty), boundary_check=(0, 1))


@triton.autotune(configs=CONFIGS, key=["H", "HV", "K", "BT"])
@triton.jit(do_not_specialize=["T"])
def _chunk_kkt_kernel(  # expect: autotune-cost
    k_ptr, g_ptr, beta_ptr, a_ptr, T,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
):
    i_t = tl.program_id(0)
    # (batch, head) -> bos * H * K passes 2^31 on long batches: widen before it is multiplied
    i_bh = tl.program_id(1).to(tl.int64)
    i_b, i_h = i_bh // HV, i_bh % HV
    bos = i_b * T
    o_t = i_t * BT + tl.arange(0, BT)
    m_t = o_t < T
    p_beta = tl.make_block_ptr(beta_ptr + bos * HV + i_h, (T,), (HV,), (i_t * BT,), (BT,), (0,))
    b_beta = tl.load(p_beta, boundary_check=(0,))
    b_a = tl.zeros([BT, BT], dtype=tl.float32)
    for i_k in range(tl.cdiv(K, BK)):
        p_k = tl.make_block_ptr(k_ptr + (bos * H + i_h // (HV // H)) * K, (T, K), (H * K, 1),
                                (i_t * BT, i_k * BK), (BT, BK), (1, 0))
        b_k = tl.load(p_k, boundary_check=(0, 1))
        b_a += tl.dot(b_k, tl.trans(b_k))
    p_g = tl.make_block_ptr(g_ptr + bos * HV + i_h, (T,), (HV,), (i_t * BT,), (BT,), (0,))
    b_g = tl.load(p_g, boundary_check=(0,))
    b_a *= tl.exp(b_g[:, None] - b_g[None, :])
    b_a *= b_beta[:, None]
    b_a = tl.where((o_t[:, None] > o_t[None, :]) & (m_t[:, None] & m_t), b_a, 0)
    p_a = tl.make_block_ptr(a_ptr + (bos * HV + i_h) * BT, (T, BT), (BT * HV, 1), (i_t * BT, 0),
                            (BT, BT), (1, 0))
    tl.store(p_a, b_a.to(p_a.dtype.element_ty), boundary_check=(0, 1))


def chunk_kkt(kernel, k, g, beta, chunk=64):
    """k [B, T, H, K] bf16; g (cumulative gate) and beta [B, T, HV]; returns A [B, T, HV, chunk] fp32."""
    b, t, h, kd = k.shape
    hv = beta.shape[2]
    a = torch.empty(b, t, hv, chunk, device=k.device, dtype=torch.float32)
    kernel[(triton.cdiv(t, chunk), b * hv)](k, g, beta, a, t, H=h, HV=hv, K=kd, BT=chunk)
    return a


def _run(kernel, batch, seq_len):
    # Qwen3-Next Gated DeltaNet: 16 key heads, 32 value heads, head_dim 128, chunk 64
    k = torch.empty(batch, seq_len, 16, 128, device="meta", dtype=torch.bfloat16)
    beta = torch.empty(batch, seq_len, 32, device="meta", dtype=torch.bfloat16)
    g = torch.empty(batch, seq_len, 32, device="meta", dtype=torch.float32)
    chunk_kkt(kernel, k, g, beta)


# B x T: 1 x 32,768 (6.7e7 elements of k) and 128 x 32,768 (8.6e9: the offsets wrap)
@tritonkit.case(batch=[1, 128], seq_len=[32_768])
def chunk_kkt_bh_int32(batch, seq_len):
    _run(_chunk_kkt_i32bh_kernel, batch, seq_len)


@tritonkit.case(batch=[1, 128], seq_len=[32_768])
def chunk_kkt_bh_int64(batch, seq_len):
    _run(_chunk_kkt_kernel, batch, seq_len)
