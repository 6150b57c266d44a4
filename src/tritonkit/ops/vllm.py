"""vLLM's call forms of the ops: swap ``vllm._custom_ops`` / ``unified_attention`` for these by changing an import.

Each function takes vLLM's arguments in vLLM's order (as of vLLM 0.33.0) and has vLLM's semantics: outputs are
written into the tensors passed (``out``, or the inputs themselves for the fused and in-place forms) and nothing is
returned (``fused_experts`` returns its output, as vLLM's does). Arguments are checked before anything is written,
and a rejected call writes nothing.

========================  ===============================================================================
``rms_norm``              ``(out, input, weight, epsilon)``: ``out = input * rsqrt(mean(input^2) + eps) * weight``
``fused_add_rms_norm``    ``(input, residual, weight, epsilon)``: ``residual += input``, then
                          ``input = rms_norm(residual)``, both in place
``silu_and_mul``          ``(out, input)``: ``out = silu(input[..., :d]) * input[..., d:]``
``rotary_embedding``      ``(positions, query, key, head_size, cos_sin_cache, is_neox)``, in place; query/key
                          ``[T, H * head_size]`` or ``[T, H, head_size]``, key may be None
``reshape_and_cache_flash``  ``(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale,
                          v_scale)``: key/value may hold more rows than slot_mapping has entries
``unified_attention``     vLLM's Triton attention entry point (``vllm/v1/attention/ops/triton_unified_attention``)
``topk_softmax``          ``(topk_weights, topk_ids, token_expert_indices, gating_output, renormalize)``: the
                          router's softmax and top-k, into the three ``[M, topk]`` buffers
``moe_align_block_size``  ``(topk_ids, num_experts, block_size, sorted_token_ids, experts_ids,
                          num_tokens_post_pad, expert_map)``: slots sorted by expert, into the buffers
``fused_experts``         ``(hidden_states, w1, w2, topk_weights, topk_ids, activation, apply_router_weight_on_input,
                          global_num_experts, expert_map, quant_config)`` (``vllm.model_executor.layers.fused_moe``):
                          returns the MoE layer's output
========================  ===============================================================================

Under ``torch.compile``, ``make_fx`` or ``FakeTensorMode`` each call goes through a ``tritonkit::vllm_*`` op that
declares what it mutates.

Each form lives in its op's folder (``tritonkit/ops/<op>/vllm.py``); this module gathers them under one import.
"""

from __future__ import annotations

from .fused_moe.vllm import fused_experts
from .moe_align_block_size.vllm import moe_align_block_size
from .paged_attention.vllm import unified_attention
from .reshape_and_cache.vllm import reshape_and_cache_flash
from .rms_norm.vllm import fused_add_rms_norm, rms_norm
from .rotary_embedding.vllm import rotary_embedding
from .silu_and_mul.vllm import silu_and_mul
from .topk_softmax.vllm import topk_softmax

__all__ = [
    "fused_add_rms_norm",
    "fused_experts",
    "moe_align_block_size",
    "reshape_and_cache_flash",
    "rms_norm",
    "rotary_embedding",
    "silu_and_mul",
    "topk_softmax",
    "unified_attention",
]

#: the vLLM release whose call forms these follow
VLLM_VERSION = "0.33.0"
