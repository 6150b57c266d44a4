"""SiLU-and-mul of a fused gate/up projection, in place, trimmed from LightLLM's `_silu_and_mul_kernel` at the
commit that fixed its int32 overflow (lightllm/models/llama/triton_kernel/silu_and_mul.py, ModelTC/lightllm
e2b5168a, #354; Apache-2.0). See SOURCES.md.

The input [M, 2N] holds gate in columns [0, N) and up in [N, 2N); the result goes over the gate half. Each lane
loads gate and up of one (row, column) and stores the result at that gate element, through the same formula
with strides that are equal in every call (`stride_output_m` is `stride_input_m`): no lane reads what another
stores. Correct upstream.
"""

import torch
import triton
import triton.language as tl

import tritonkit


@triton.jit
def _silu_and_mul_inplace_kernel(  # expect: recompile
    input_ptr, stride_input_m, stride_input_n, stride_output_m, stride_output_n, size_m, size_n,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    stride_input_m = stride_input_m.to(tl.int64)
    stride_output_m = stride_output_m.to(tl.int64)
    tid = tl.program_id(0)
    input_m_offsets = tid * BLOCK_M + tl.arange(0, BLOCK_M)
    output_m_offsets = tid * BLOCK_M + tl.arange(0, BLOCK_M)
    pid = tl.program_id(1)
    input_n_offsets = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    output_n_offsets = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    up_offsets = input_m_offsets[:, None] * stride_input_m + (input_n_offsets[None, :] + size_n) * stride_input_n
    gate_offsets = input_m_offsets[:, None] * stride_input_m + input_n_offsets[None, :] * stride_input_n
    res_offsets = output_m_offsets[:, None] * stride_output_m + output_n_offsets[None, :] * stride_output_n
    up = tl.load(input_ptr + up_offsets,
                 mask=(input_n_offsets < size_n)[None, :] * (input_m_offsets < size_m)[:, None], other=0.0)
    gate = tl.load(input_ptr + gate_offsets,
                   mask=(input_n_offsets < size_n)[None, :] * (input_m_offsets < size_m)[:, None],
                   other=0.0).to(tl.float32)
    gate = gate / (1 + tl.exp(-gate))
    gate = gate.to(tl.float16)
    tl.store(input_ptr + res_offsets, up * gate,
             mask=(output_n_offsets < size_n)[None, :] * (output_m_offsets < size_m)[:, None])


def silu_and_mul_fwd(input):
    """input float16 [M, 2N], gate then up; the result is written over input[:, :N]."""
    size_m, size_n = input.shape[0], input.shape[-1] // 2
    BLOCK_M, BLOCK_N = 128, 128
    grid = (triton.cdiv(size_m, BLOCK_M), triton.cdiv(size_n, BLOCK_N))
    _silu_and_mul_inplace_kernel[grid](input, input.stride(0), input.stride(1), input.stride(0), input.stride(1),
                                       size_m, size_n, BLOCK_M, BLOCK_N)


@tritonkit.case(num_tokens=[1, 17, 4096, 300_000])
def silu_and_mul_case(num_tokens):
    # Llama-3-70B-like intermediate size 28,672 (gate and up: 57,344 columns)
    silu_and_mul_fwd(torch.empty(num_tokens, 2 * 28_672, dtype=torch.float16, device="meta"))
