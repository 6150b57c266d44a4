"""Token gather + weighted sum of a fused MoE (the combine step), trimmed from Liger-Kernel's
`_token_gather_weighted_sum_kernel` (src/liger_kernel/ops/fused_moe_kernels.py; Copyright 2024 LinkedIn
Corporation, BSD-2-Clause). See SOURCES.md: linkedin/Liger-Kernel#1248.

One program per token gathers its K expert outputs from Y [T * K, H] (rows in expert-sorted order, found through
the reverse permutation `s_rev`) and sums them with the routing weights. In 0.8.0 the program id and the loaded
sorted position were cast to `tl.uint32`: `perm_idx * stride_Y_TK` is then computed in 32 bits and wraps past
2^32 - 1 once T * K * H does (Qwen3.5-MoE training, T ~ 140k, K = 8, H = 4096: 4.6e9), before Triton zero-extends
it to offset the pointer. 0.8.1 casts both to `tl.int64`. The autotune configs are cut to two (upstream: 40).
"""

import torch
import triton
import triton.language as tl

import tritonkit


def _configs():
    return [triton.Config({"BLOCK_H": bh, "BLOCK_K": 8}, num_warps=4, num_stages=4) for bh in (256, 512)]


@triton.autotune(configs=_configs(), key=["H_dim", "K_dim", "w_is_None"])
@triton.jit
def _token_gather_u32_kernel(  # expect: autotune-cost
    Y_ptr, w_ptr, s_rev_ptr, out_ptr,
    H_dim: tl.constexpr, K_dim: tl.constexpr, stride_Y_TK, stride_Y_H: tl.constexpr, stride_out_T,
    stride_out_H: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr, w_is_None: tl.constexpr,
):
    t = tl.program_id(0).to(tl.uint32)
    for h_tile in tl.static_range(triton.cdiv(H_dim, BLOCK_H)):
        h_idx = (h_tile * BLOCK_H + tl.arange(0, BLOCK_H)).to(tl.uint32)
        h_mask = h_idx < H_dim
        acc = tl.zeros([BLOCK_H], dtype=tl.float32)
        for k_tile in tl.range(triton.cdiv(K_dim, BLOCK_K)):
            k_offs = (k_tile * BLOCK_K + tl.arange(0, BLOCK_K)).to(tl.uint32)
            k_mask = k_offs < K_dim
            flat_idx = t * K_dim + k_offs
            perm_idx = tl.load(s_rev_ptr + flat_idx, mask=k_mask, other=0).to(tl.uint32)
            y_ptrs = Y_ptr + perm_idx[:, None] * stride_Y_TK + h_idx[None, :] * stride_Y_H  # expect: int32-offset
            y_vals = tl.load(y_ptrs, mask=k_mask[:, None] & h_mask[None, :], other=0.0).to(tl.float32)
            if w_is_None:
                acc += tl.sum(y_vals, axis=0)
            else:
                w_vals = tl.load(w_ptr + flat_idx, mask=k_mask, other=0.0).to(tl.float32)
                acc += tl.sum(y_vals * w_vals[:, None], axis=0)
        out_ptrs = out_ptr + t * stride_out_T + h_idx * stride_out_H
        tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=h_mask)


@triton.autotune(configs=_configs(), key=["H_dim", "K_dim", "w_is_None"])
@triton.jit
def _token_gather_kernel(  # expect: autotune-cost
    Y_ptr, w_ptr, s_rev_ptr, out_ptr,
    H_dim: tl.constexpr, K_dim: tl.constexpr, stride_Y_TK, stride_Y_H: tl.constexpr, stride_out_T,
    stride_out_H: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr, w_is_None: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    for h_tile in tl.static_range(triton.cdiv(H_dim, BLOCK_H)):
        h_idx = (h_tile * BLOCK_H + tl.arange(0, BLOCK_H)).to(tl.uint32)
        h_mask = h_idx < H_dim
        acc = tl.zeros([BLOCK_H], dtype=tl.float32)
        for k_tile in tl.range(triton.cdiv(K_dim, BLOCK_K)):
            k_offs = (k_tile * BLOCK_K + tl.arange(0, BLOCK_K)).to(tl.uint32)
            k_mask = k_offs < K_dim
            flat_idx = t * K_dim + k_offs
            perm_idx = tl.load(s_rev_ptr + flat_idx, mask=k_mask, other=0).to(tl.int64)
            y_ptrs = Y_ptr + perm_idx[:, None] * stride_Y_TK + h_idx[None, :] * stride_Y_H
            y_vals = tl.load(y_ptrs, mask=k_mask[:, None] & h_mask[None, :], other=0.0).to(tl.float32)
            if w_is_None:
                acc += tl.sum(y_vals, axis=0)
            else:
                w_vals = tl.load(w_ptr + flat_idx, mask=k_mask, other=0.0).to(tl.float32)
                acc += tl.sum(y_vals * w_vals[:, None], axis=0)
        out_ptrs = out_ptr + t * stride_out_T + h_idx * stride_out_H
        tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=h_mask)


def token_aggregation(kernel, Y, w, s_rev, T, K, H):
    """Y [T * K, H] expert outputs in sorted order; w [T * K] routing weights (None: the backward's plain sum);
    s_rev int32 [T * K]: flat (token, k) -> sorted row. Returns out [T, H]."""
    out = torch.empty(T, H, dtype=Y.dtype, device=Y.device)
    kernel[(T,)](Y, w if w is not None else Y, s_rev, out, H_dim=H, K_dim=K, stride_Y_TK=Y.stride(0),
                 stride_Y_H=Y.stride(1), stride_out_T=out.stride(0), stride_out_H=out.stride(1),
                 w_is_None=w is None)
    return out


@tritonkit.case(num_tokens=[1, 4096, 140_000], version=["0.8.0", "0.8.1"])
def token_gather_case(num_tokens, version):
    kernel = _token_gather_u32_kernel if version == "0.8.0" else _token_gather_kernel
    # Qwen3.5-MoE-like: top-8 of the experts, hidden 4096
    K, H = 8, 4096
    m = dict(device="meta")
    Y = torch.empty(num_tokens * K, H, dtype=torch.bfloat16, **m)
    s_rev = torch.empty(num_tokens * K, dtype=torch.int32, **m)
    token_aggregation(kernel, Y, torch.empty(num_tokens * K, dtype=torch.float32, **m), s_rev, num_tokens, K, H)
