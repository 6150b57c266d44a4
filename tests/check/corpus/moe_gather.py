"""Fused MoE pieces: count tokens per expert, gather each routed token's hidden row (sorted_token_ids index
token * top_k + k), and the grouped GEMM that multiplies gathered rows by their expert's weight [E, N, K].

Seeded bugs:
- int32-offset: the int32 routed-token id, divided by top_k, is multiplied by the row stride in int32.
- low-precision-accumulation: the GEMM accumulates tl.dot in float16.
- recompile: the expert-count kernel takes num_tokens without do_not_specialize.
- autotune-cost: an autotuned variant of the GEMM (reported as info).
The twins cast token and expert ids to int64, accumulate in float32, and put num_tokens in do_not_specialize.
"""

import torch
import triton
import triton.language as tl

import tritonkit


@triton.jit
def _moe_count_specialized_kernel(topk_ids_ptr, counts_ptr, num_tokens,  # seeded bug: recompile
                                  TOP_K: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < num_tokens * TOP_K
    expert = tl.load(topk_ids_ptr + offs, mask=mask, other=0)
    tl.atomic_add(counts_ptr + expert, 1, mask=mask)


@triton.jit(do_not_specialize=["num_tokens"])
def _moe_count_kernel(topk_ids_ptr, counts_ptr, num_tokens, TOP_K: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < num_tokens * TOP_K
    expert = tl.load(topk_ids_ptr + offs, mask=mask, other=0)
    tl.atomic_add(counts_ptr + expert, 1, mask=mask)


@triton.jit(do_not_specialize=["num_routed"])
def _moe_gather_i32_kernel(x_ptr, out_ptr, sorted_ids_ptr, num_routed, stride_x, stride_out, hidden,
                           TOP_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    offs_m = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    routed = tl.load(sorted_ids_ptr + offs_m, mask=offs_m < num_routed, other=0)  # [BLOCK_M] int32
    row = routed // TOP_K
    for k in range(0, hidden, BLOCK_K):
        offs_k = k + tl.arange(0, BLOCK_K)
        mask = (offs_m[:, None] < num_routed) & (offs_k[None, :] < hidden)
        x = tl.load(x_ptr + row[:, None] * stride_x + offs_k[None, :], mask=mask)  # seeded bug: int32-offset
        tl.store(out_ptr + offs_m[:, None] * stride_out + offs_k[None, :], x, mask=mask)


@triton.jit(do_not_specialize=["num_routed"])
def _moe_gather_kernel(x_ptr, out_ptr, sorted_ids_ptr, num_routed, stride_x, stride_out, hidden,
                       TOP_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    offs_m = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    routed = tl.load(sorted_ids_ptr + offs_m, mask=offs_m < num_routed, other=0).to(tl.int64)
    row = routed // TOP_K
    for k in range(0, hidden, BLOCK_K):
        offs_k = k + tl.arange(0, BLOCK_K)
        mask = (offs_m[:, None] < num_routed) & (offs_k[None, :] < hidden)
        x = tl.load(x_ptr + row[:, None] * stride_x + offs_k[None, :], mask=mask)
        tl.store(out_ptr + offs_m[:, None] * stride_out + offs_k[None, :], x, mask=mask)


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
        acc = tl.dot(a, b, acc, out_dtype=ACC_DTYPE)  # seeded bug: low-precision-accumulation
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < num_routed) & (offs_n[None, :] < N))


@triton.jit(do_not_specialize=["num_routed"])
def _moe_gemm_f16acc_kernel(a_ptr, b_ptr, c_ptr, sorted_ids_ptr, expert_ids_ptr, num_routed, N, K,
                            stride_am, stride_be, stride_bn, stride_cm,
                            TOP_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    _moe_gemm_body(a_ptr, b_ptr, c_ptr, sorted_ids_ptr, expert_ids_ptr, num_routed, N, K,
                   stride_am, stride_be, stride_bn, stride_cm, TOP_K, BLOCK_M, BLOCK_N, BLOCK_K, tl.float16)


@triton.jit(do_not_specialize=["num_routed"])
def _moe_gemm_kernel(a_ptr, b_ptr, c_ptr, sorted_ids_ptr, expert_ids_ptr, num_routed, N, K,
                     stride_am, stride_be, stride_bn, stride_cm,
                     TOP_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    _moe_gemm_body(a_ptr, b_ptr, c_ptr, sorted_ids_ptr, expert_ids_ptr, num_routed, N, K,
                   stride_am, stride_be, stride_bn, stride_cm, TOP_K, BLOCK_M, BLOCK_N, BLOCK_K, tl.float32)


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


TOP_K = 2
EXPERTS = 8


def _routing(num_tokens):
    topk_ids = torch.empty(num_tokens, TOP_K, device="meta", dtype=torch.int32)
    counts = torch.empty(EXPERTS, device="meta", dtype=torch.int32)
    sorted_ids = torch.empty(num_tokens * TOP_K + EXPERTS * 63, device="meta", dtype=torch.int32)
    return topk_ids, counts, sorted_ids


@tritonkit.case(num_tokens=[1, 16, 17, 4096])
def count_specialized(num_tokens):
    topk_ids, counts, _ = _routing(num_tokens)
    grid = (triton.cdiv(num_tokens * TOP_K, 256),)
    _moe_count_specialized_kernel[grid](topk_ids, counts, num_tokens, TOP_K=TOP_K, BLOCK=256)


@tritonkit.case(num_tokens=[1, 16, 17, 4096])
def count(num_tokens):
    topk_ids, counts, _ = _routing(num_tokens)
    _moe_count_kernel[(triton.cdiv(num_tokens * TOP_K, 256),)](topk_ids, counts, num_tokens, TOP_K=TOP_K, BLOCK=256)


def _gather(kernel, num_tokens):
    _, _, sorted_ids = _routing(num_tokens)
    x = torch.empty(num_tokens, 4096, device="meta", dtype=torch.bfloat16)
    out = torch.empty(sorted_ids.shape[0], 4096, device="meta", dtype=torch.bfloat16)
    kernel[(triton.cdiv(sorted_ids.shape[0], 16),)](x, out, sorted_ids, sorted_ids.shape[0], x.stride(0),
                                                    out.stride(0), 4096, TOP_K=TOP_K, BLOCK_M=16, BLOCK_K=256)


# routed-token ids are token * TOP_K + k, or the padding id num_routed: never negative
SORTED = {"sorted_ids_ptr": (0, 600_000 * TOP_K + EXPERTS * 63)}


# 600,000 tokens x 4096 = 2.5e9 elements of x (a large data-parallel prefill): rows past 524,287 need 64 bits
@tritonkit.case(num_tokens=[1, 17, 4096, 600_000], loaded_bounds=SORTED)
def gather_int32(num_tokens):
    _gather(_moe_gather_i32_kernel, num_tokens)


@tritonkit.case(num_tokens=[1, 17, 4096, 600_000], loaded_bounds=SORTED)
def gather(num_tokens):
    _gather(_moe_gather_kernel, num_tokens)


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


@tritonkit.case(num_tokens=[1, 4096], loaded_bounds=SORTED)
def gemm_f16_accumulator(num_tokens):
    _gemm(_moe_gemm_f16acc_kernel, num_tokens, 14336, 4096, torch.float16, BLOCK_M=16, BLOCK_N=64, BLOCK_K=64)


@tritonkit.case(num_tokens=[1, 4096], loaded_bounds=SORTED)
def gemm(num_tokens):
    _gemm(_moe_gemm_kernel, num_tokens, 14336, 4096, torch.float16, BLOCK_M=16, BLOCK_N=64, BLOCK_K=64)


@tritonkit.case(num_tokens=[1, 4096], nk=[(14336, 4096), (4096, 7168)], loaded_bounds=SORTED)
def gemm_autotuned(num_tokens, nk):
    _gemm(_moe_gemm_autotuned_kernel, num_tokens, nk[0], nk[1], torch.bfloat16)
