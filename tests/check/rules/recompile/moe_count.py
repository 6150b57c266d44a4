"""Fused MoE's routing count: tokens per expert, from topk_ids [num_tokens, top_k].

Seeded bug (recompile): the count kernel takes num_tokens without do_not_specialize, so the sweep compiles it
once per divisibility class. The twin puts num_tokens in do_not_specialize.
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
