"""vLLM's call forms of the ops: swap ``vllm._custom_ops`` / ``unified_attention`` for these by changing an import.

Each function takes vLLM's arguments in vLLM's order, names and defaults (as of vLLM 0.34.0) and has vLLM's
semantics: outputs are written into the tensors passed (``out``, or the inputs themselves for the fused and
in-place forms) and nothing is returned (``fused_experts`` returns its output, as vLLM's does). Arguments are
checked before anything is written, and a rejected call writes nothing; an argument whose feature no kernel here
implements is refused by name (NotImplementedError) when it is not its default.

========================  ===============================================================================
``rms_norm``              ``(out, input, weight, epsilon)``: ``out = input * rsqrt(mean(input^2) + eps) * weight``;
                          weight None: no scale
``fused_add_rms_norm``    ``(input, residual, weight, epsilon)``: ``residual += input``, then
                          ``input = rms_norm(residual)``, both in place; weight may be None
``silu_and_mul``          ``(out, input)``: ``out = silu(input[..., :d]) * input[..., d:]``
``rotary_embedding``      ``(positions, query, key, head_size, cos_sin_cache, is_neox, rope_dim_offset=0,
                          inverse=False)``, in place; query/key ``[T, H * head_size]`` or ``[T, H, head_size]``, key
                          may be None; the rotated dims start at rope_dim_offset; inverse undoes the rotation
``reshape_and_cache_flash``  ``(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale,
                          v_scale)``: key/value may hold more rows than slot_mapping has entries
``unified_attention``     vLLM's Triton attention entry point (``vllm/v1/attention/ops/triton_unified_attention``)
``topk_softmax``          ``(topk_weights, topk_ids, token_expert_indices, gating_output, renormalize=False,
                          e_score_correction_bias=None, is_padding=None)``: the router's softmax and top-k, into the
                          three ``[M, topk]`` buffers; the bias chooses (weights stay unbiased), padding rows get id -1
``moe_align_block_size``  ``(topk_ids, num_experts, block_size, sorted_token_ids, experts_ids,
                          num_tokens_post_pad, expert_map=None, scatter_idx=None)``: slots sorted by expert, into the
                          buffers; scatter_idx is refused (NotImplementedError)
``fused_experts``         ``(hidden_states, w1, w2, topk_weights, topk_ids, activation, apply_router_weight_on_input,
                          global_num_experts, expert_map, quant_config)`` (``vllm.model_executor.layers.fused_moe``):
                          returns the MoE layer's output
``fused_qk_norm_rope``    ``(qkv, num_heads_q, num_heads_k, num_heads_v, head_dim, eps, q_weight, k_weight,
                          cos_sin_cache, is_neox, position_ids, forced_token_heads_per_warp=-1)``: per-head
                          RMSNorm and rotary of q and k in place in the fused qkv
``fused_qknorm_rope_cache``  ``(qkv, q_weight, k_weight, cos_sin_cache, positions, slot_mapping, key_cache,
                          value_cache, num_q_heads, num_kv_heads, head_dim, rotary_dim, eps, norm_weight_bias=0.0,
                          kv_cache_dtype="auto", k_scale=None, v_scale=None)``: norm, NeoX rotary and the
                          KV-cache write; returns (q, k, v)
``rms_norm_dynamic_per_token_quant``  ``(input, weight, epsilon, quant_dtype, scale_ub, residual)``: returns (fp8,
                          scales [rows, 1]); ``residual += input`` in place
``rms_norm_per_block_quant``  ``(input, weight, epsilon, quant_dtype, group_size, scale_ub, residual,
                          is_scale_transposed, tma_alignment)``: returns (fp8, group scales)
``rms_norm_static_fp8_quant``, ``fused_add_rms_norm_static_fp8_quant``  ``(result, input, [residual,] weight,
                          scale, epsilon)``: into result (vLLM's ``torch.ops._C`` ops)
``scaled_fp8_quant``      ``(input, scale, num_token_padding, scale_ub, use_per_token_if_dynamic, output,
                          group_shape)``: returns (fp8, scale)
``silu_and_mul_per_block_quant``  ``(input, group_size, quant_dtype, scale_ub, is_scale_transposed)``: returns
                          (fp8, group scales)
``silu_and_mul_quant``    ``(result, input, scale)``: static, into result (vLLM's ``torch.ops._C`` op)
========================  ===============================================================================

Under ``torch.compile``, ``make_fx`` or ``FakeTensorMode`` each call goes through a ``tritonkit::vllm_*`` op that
declares what it mutates.

Each form lives in its op's folder (``tritonkit/ops/<op>/vllm.py``); this module gathers them under one import.
"""

from __future__ import annotations

from .fused_moe.vllm import fused_experts
from .moe_align_block_size.vllm import moe_align_block_size
from .paged_attention.vllm import unified_attention
from .qk_norm_rope_cache.vllm import fused_qk_norm_rope, fused_qknorm_rope_cache
from .reshape_and_cache.vllm import reshape_and_cache_flash
from .rms_norm.vllm import fused_add_rms_norm, rms_norm
from .rms_norm_quant_fp8.vllm import (
    fused_add_rms_norm_static_fp8_quant,
    rms_norm_dynamic_per_token_quant,
    rms_norm_per_block_quant,
    rms_norm_static_fp8_quant,
    scaled_fp8_quant,
)
from .rotary_embedding.vllm import rotary_embedding
from .silu_and_mul.vllm import silu_and_mul
from .silu_and_mul_quant_fp8.vllm import silu_and_mul_per_block_quant, silu_and_mul_quant
from .topk_softmax.vllm import topk_softmax

__all__ = [
    "fused_add_rms_norm",
    "fused_add_rms_norm_static_fp8_quant",
    "fused_experts",
    "fused_qk_norm_rope",
    "fused_qknorm_rope_cache",
    "moe_align_block_size",
    "reshape_and_cache_flash",
    "rms_norm",
    "rms_norm_dynamic_per_token_quant",
    "rms_norm_per_block_quant",
    "rms_norm_static_fp8_quant",
    "rotary_embedding",
    "scaled_fp8_quant",
    "silu_and_mul",
    "silu_and_mul_per_block_quant",
    "silu_and_mul_quant",
    "topk_softmax",
    "unified_attention",
]

#: the vLLM release whose call forms these follow
VLLM_VERSION = "0.34.0"
