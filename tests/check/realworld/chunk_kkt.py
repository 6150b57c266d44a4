"""Chunked beta * K K^T (strictly lower triangle, with gate decay) of gated delta-rule linear attention, one
program per (chunk, batch x value head), modeled on flash-linear-attention's chunk_scaled_dot_kkt. See SOURCES.md:
fla-org/flash-linear-attention#1080 / #1082. Upstream reads K and writes A through block pointers, which Triton 3.9
removed: here they are tensor descriptors built in the kernel over the same base pointers (a descriptor's last stride
is 1, so the strided per-row beta and g are plain loads).

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
    b_beta = tl.load(beta_ptr + (bos + o_t) * HV + i_h, mask=m_t, other=0)
    b_a = tl.zeros([BT, BT], dtype=tl.float32)
    d_k = tl.make_tensor_descriptor(k_ptr + (bos * H + i_h // (HV // H)) * K,  # expect: int32-offset
                                    [T, K], [H * K, 1], [BT, BK])
    for i_k in range(tl.cdiv(K, BK)):
        b_k = d_k.load([i_t * BT, i_k * BK])
        b_a += tl.dot(b_k, tl.trans(b_k))
    b_g = tl.load(g_ptr + (bos + o_t) * HV + i_h, mask=m_t, other=0)
    b_a *= tl.exp(b_g[:, None] - b_g[None, :])
    b_a *= b_beta[:, None]
    b_a = tl.where((o_t[:, None] > o_t[None, :]) & (m_t[:, None] & m_t), b_a, 0)
    d_a = tl.make_tensor_descriptor(a_ptr + (bos * HV + i_h) * BT,  # expect: int32-offset
                                    [T, BT], [BT * HV, 1], [BT, BT])
    d_a.store([i_t * BT, 0], b_a.to(a_ptr.dtype.element_ty))


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
    b_beta = tl.load(beta_ptr + (bos + o_t) * HV + i_h, mask=m_t, other=0)
    b_a = tl.zeros([BT, BT], dtype=tl.float32)
    d_k = tl.make_tensor_descriptor(k_ptr + (bos * H + i_h // (HV // H)) * K,
                                    [T, K], [H * K, 1], [BT, BK])
    for i_k in range(tl.cdiv(K, BK)):
        b_k = d_k.load([i_t * BT, i_k * BK])
        b_a += tl.dot(b_k, tl.trans(b_k))
    b_g = tl.load(g_ptr + (bos + o_t) * HV + i_h, mask=m_t, other=0)
    b_a *= tl.exp(b_g[:, None] - b_g[None, :])
    b_a *= b_beta[:, None]
    b_a = tl.where((o_t[:, None] > o_t[None, :]) & (m_t[:, None] & m_t), b_a, 0)
    d_a = tl.make_tensor_descriptor(a_ptr + (bos * HV + i_h) * BT,
                                    [T, BT], [BT * HV, 1], [BT, BT])
    d_a.store([i_t * BT, 0], b_a.to(a_ptr.dtype.element_ty))


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
