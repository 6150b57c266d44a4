"""Fused MoE's grouped GEMM: gathered rows times their expert's weight [E, N, K].

Seeded bug (autotune-cost): the GEMM autotunes 4 configs per (N, K) key (reported as info). The twin launches
one config chosen ahead.
"""

import torch
import triton
import triton.language as tl

import tritonkit


@triton.jit
def _moe_gemm_body(a_ptr, b_ptr, c_ptr, sorted_ids_ptr, expert_ids_ptr, num_routed, N, K,
                   stride_am, stride_be, stride_bn, stride_cm,
                   TOP_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   ACC_DTYPE: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    routed = tl.load(sorted_ids_ptr + offs_m, mask=offs_m < num_routed, other=0).to(tl.int64)
    expert = tl.load(expert_ids_ptr + pid_m).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + (routed // TOP_K)[:, None] * stride_am + offs_k[None, :]  # [BLOCK_M, BLOCK_K]
    b_ptrs = b_ptr + expert * stride_be + offs_n[None, :] * stride_bn + offs_k[:, None]  # [BLOCK_K, BLOCK_N]
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=ACC_DTYPE)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < num_routed) & (offs_k[None, :] < K - k * BLOCK_K), other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
        acc = tl.dot(a, b, acc, out_dtype=ACC_DTYPE)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < num_routed) & (offs_n[None, :] < N))


@triton.autotune(
    configs=[triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": 64}, num_warps=w, num_stages=3)
             for m, n, w in ((16, 64, 4), (32, 64, 4), (64, 128, 4), (64, 128, 8))],
    key=["N", "K"],
)
@triton.jit(do_not_specialize=["num_routed"])
def _moe_gemm_autotuned_kernel(a_ptr, b_ptr, c_ptr, sorted_ids_ptr, expert_ids_ptr,  # seeded bug: autotune-cost
                               num_routed, N, K,
                               stride_am, stride_be, stride_bn, stride_cm,
                               TOP_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                               BLOCK_K: tl.constexpr):
    _moe_gemm_body(a_ptr, b_ptr, c_ptr, sorted_ids_ptr, expert_ids_ptr, num_routed, N, K,
                   stride_am, stride_be, stride_bn, stride_cm, TOP_K, BLOCK_M, BLOCK_N, BLOCK_K, tl.float32)


@triton.jit(do_not_specialize=["num_routed"])
def _moe_gemm_one_config_kernel(a_ptr, b_ptr, c_ptr, sorted_ids_ptr, expert_ids_ptr, num_routed, N, K,
                                stride_am, stride_be, stride_bn, stride_cm,
                                TOP_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                BLOCK_K: tl.constexpr):
    _moe_gemm_body(a_ptr, b_ptr, c_ptr, sorted_ids_ptr, expert_ids_ptr, num_routed, N, K,
                   stride_am, stride_be, stride_bn, stride_cm, TOP_K, BLOCK_M, BLOCK_N, BLOCK_K, tl.float32)


TOP_K = 2
EXPERTS = 8


def _routing(num_tokens):
    topk_ids = torch.empty(num_tokens, TOP_K, device="meta", dtype=torch.int32)
    counts = torch.empty(EXPERTS, device="meta", dtype=torch.int32)
    sorted_ids = torch.empty(num_tokens * TOP_K + EXPERTS * 63, device="meta", dtype=torch.int32)
    return topk_ids, counts, sorted_ids


# routed-token ids are token * TOP_K + k, or the padding id num_routed: never negative
SORTED = {"sorted_ids_ptr": (0, 600_000 * TOP_K + EXPERTS * 63)}


def _gemm(kernel, num_tokens, n, k, dtype, **blocks):
    _, _, sorted_ids = _routing(num_tokens)
    a = torch.empty(num_tokens, k, device="meta", dtype=dtype)
    b = torch.empty(EXPERTS, n, k, device="meta", dtype=dtype)
    c = torch.empty(sorted_ids.shape[0], n, device="meta", dtype=dtype)
    expert_ids = torch.empty(triton.cdiv(sorted_ids.shape[0], 16), device="meta", dtype=torch.int32)
    rows = sorted_ids.shape[0]
    grid = lambda meta: (triton.cdiv(rows, meta["BLOCK_M"]), triton.cdiv(n, meta["BLOCK_N"]))  # noqa: E731
    kernel[grid](a, b, c, sorted_ids, expert_ids, sorted_ids.shape[0], n, k,
                 a.stride(0), b.stride(0), b.stride(1), c.stride(0), TOP_K=TOP_K, **blocks)


@tritonkit.case(num_tokens=[1, 4096], nk=[(14336, 4096), (4096, 7168)], loaded_bounds=SORTED)
def gemm_autotuned(num_tokens, nk):
    _gemm(_moe_gemm_autotuned_kernel, num_tokens, nk[0], nk[1], torch.bfloat16)


@tritonkit.case(num_tokens=[1, 4096], nk=[(14336, 4096), (4096, 7168)], loaded_bounds=SORTED)
def gemm_one_config(num_tokens, nk):
    _gemm(_moe_gemm_one_config_kernel, num_tokens, nk[0], nk[1], torch.bfloat16, BLOCK_M=16, BLOCK_N=64, BLOCK_K=64)
