"""Expert-parallel MoE combine: for each token, the weighted sum of its top-k expert outputs, gathered from the
expert-major permuted activations by a per-(token, k) source row. Modeled on vLLM's DeepGEMM `ep_gather`. See
SOURCES.md: vllm-project/vllm#48398.

Grid (hidden / BLOCK_D, min(num_tokens, 1024)); each program strides over tokens. The source row is loaded as
int32; in the `i32row` kernel it is multiplied by the row stride in int32: DeepSeek-V3 (hidden 7168, top-8) at
65,536 tokens permutes into 557,056 rows (4.0e9 elements). The twin widens the row to int64, as the fix did.
"""

import math

import torch
import triton
import triton.language as tl

import tritonkit


@triton.jit
def _ep_gather_i32row_kernel(
    num_tokens, x_ptr, stride_x, topk_ids_ptr, stride_ids, topk_w_ptr, stride_w, src_row_ptr, stride_src,
    out_ptr, stride_out, TOP_K: tl.constexpr, BLOCK_D: tl.constexpr,
):
    pid_d = tl.program_id(0)
    offs_d = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    for tok in range(tl.program_id(1), num_tokens, tl.num_programs(1)):
        acc = tl.zeros([BLOCK_D], dtype=tl.float32)
        for j in range(TOP_K):
            expert = tl.load(topk_ids_ptr + tok * stride_ids + j)
            if expert >= 0:
                row = tl.load(src_row_ptr + tok * stride_src + j)
                w = tl.load(topk_w_ptr + tok * stride_w + j)
                x = tl.load(x_ptr + row * stride_x + offs_d)  # expect: int32-offset
                acc += x.to(tl.float32) * w
        tl.store(out_ptr + tok * stride_out + offs_d, acc.to(out_ptr.dtype.element_ty))


@triton.jit
def _ep_gather_kernel(
    num_tokens, x_ptr, stride_x, topk_ids_ptr, stride_ids, topk_w_ptr, stride_w, src_row_ptr, stride_src,
    out_ptr, stride_out, TOP_K: tl.constexpr, BLOCK_D: tl.constexpr,
):
    pid_d = tl.program_id(0)
    offs_d = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    for tok in range(tl.program_id(1), num_tokens, tl.num_programs(1)):
        acc = tl.zeros([BLOCK_D], dtype=tl.float32)
        for j in range(TOP_K):
            expert = tl.load(topk_ids_ptr + tok * stride_ids + j)
            if expert >= 0:
                # rows of the permuted input pass 2^31 elements at large batches
                row = tl.load(src_row_ptr + tok * stride_src + j).to(tl.int64)
                w = tl.load(topk_w_ptr + tok * stride_w + j)
                x = tl.load(x_ptr + row * stride_x + offs_d)
                acc += x.to(tl.float32) * w
        tl.store(out_ptr + tok * stride_out + offs_d, acc.to(out_ptr.dtype.element_ty))


def ep_gather(kernel, x, topk_ids, topk_w, src_row, out):
    """x [rows, hidden] permuted expert inputs; topk_ids int64 [num_tokens, k] (-1: not on this rank);
    topk_w fp32 and src_row int32 [num_tokens, k]; out [num_tokens, hidden]."""
    num_tokens, hidden = out.shape
    block_d = math.gcd(hidden, 1024)
    kernel[(hidden // block_d, min(num_tokens, 1024))](
        num_tokens, x, x.stride(0), topk_ids, topk_ids.stride(0), topk_w, topk_w.stride(0), src_row,
        src_row.stride(0), out, out.stride(0), TOP_K=topk_ids.shape[1], BLOCK_D=block_d, num_warps=2)


MAX_ROWS = 65_536 * 8 + 256 * 128


def _run(kernel, num_tokens):
    # DeepSeek-V3: hidden 7168, top-8 of 256 experts; rows = tokens x 8, padded per expert to 128
    hidden, k = 7168, 8
    x = torch.empty(num_tokens * k + 256 * 128, hidden, device="meta", dtype=torch.bfloat16)
    out = torch.empty(num_tokens, hidden, device="meta", dtype=torch.bfloat16)
    ep_gather(kernel, x, torch.empty(num_tokens, k, device="meta", dtype=torch.int64),
              torch.empty(num_tokens, k, device="meta", dtype=torch.float32),
              torch.empty(num_tokens, k, device="meta", dtype=torch.int32), out)


# source rows index the permuted input (< MAX_ROWS at 65,536 tokens); expert ids are < 256 or -1
@tritonkit.case(num_tokens=[128, 4096, 65_536],
                loaded_bounds={"src_row_ptr": (0, MAX_ROWS - 1), "topk_ids_ptr": (-1, 255)})
def ep_gather_row_int32(num_tokens):
    _run(_ep_gather_i32row_kernel, num_tokens)


@tritonkit.case(num_tokens=[128, 4096, 65_536],
                loaded_bounds={"src_row_ptr": (0, MAX_ROWS - 1), "topk_ids_ptr": (-1, 255)})
def ep_gather_row_int64(num_tokens):
    _run(_ep_gather_kernel, num_tokens)
