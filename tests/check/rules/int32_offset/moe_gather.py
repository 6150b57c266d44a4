"""Fused MoE's gather: each routed token's hidden row (sorted_token_ids index token * top_k + k) copied out.

Seeded bug (int32-offset): the int32 routed-token id, divided by top_k, is multiplied by the row stride in
int32. The twin casts the id to int64.
"""

import torch
import triton
import triton.language as tl

import tritonkit


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


TOP_K = 2
EXPERTS = 8


def _routing(num_tokens):
    topk_ids = torch.empty(num_tokens, TOP_K, device="meta", dtype=torch.int32)
    counts = torch.empty(EXPERTS, device="meta", dtype=torch.int32)
    sorted_ids = torch.empty(num_tokens * TOP_K + EXPERTS * 63, device="meta", dtype=torch.int32)
    return topk_ids, counts, sorted_ids


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
