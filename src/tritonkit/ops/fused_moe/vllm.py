"""fused_experts in vLLM's call form (``vllm.model_executor.layers.fused_moe``): returns the layer's output.

:mod:`tritonkit.ops.vllm` re-exports it (vLLM's release: its ``VLLM_VERSION``). Arguments are checked before anything is
written.
"""

from __future__ import annotations

import torch

from . import api


# FusedMoEQuantConfig fields vLLM reads in fused_experts that tritonkit has no kernel for: refused when set
_QUANT_REFUSED = (
    "use_int8_w8a8",
    "use_int8_w8a16",
    "use_int4_w4a16",
    "ocp_mx_scheme",
    "w1_zp",
    "w2_zp",
    "w1_bias",
    "w2_bias",
)


def fused_experts(
    hidden_states: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    activation="silu",
    apply_router_weight_on_input: bool = False,
    global_num_experts: int = -1,
    expert_map: torch.Tensor | None = None,
    quant_config=None,
) -> torch.Tensor:
    """``vllm.model_executor.layers.fusedapi.fused_experts``: the MoE layer, returned as a new ``[M, K]`` tensor.

    hidden_states ``[M, K]`` bf16/fp16 (vLLM also takes float32; tritonkit does not); w1 ``[E, 2N, K]`` (gate rows
    then up rows), w2 ``[E, K, N]``; topk_* ``[M, topk]``. ``activation``: "silu" or "gelu", or vLLM's
    ``MoEActivation`` member of that value. ``quant_config``: None (weights in the activation dtype) or vLLM's
    ``FusedMoEQuantConfig`` (any object with its fields): fp8 w8a8 with per-tensor, per-channel or 128 x 128
    block weight scales, static ``a1_scale``/``a2_scale`` or dynamic activation scales (per token when
    ``per_act_token_quant``, else one per tensor, as vLLM). int8/int4/MX schemes, zero points and biases are
    refused by name. See :func:`tritonkit.ops.fused_moe` for the arithmetic."""
    act = getattr(activation, "value", activation)
    if global_num_experts not in (-1, None):
        e_global = expert_map.shape[0] if isinstance(expert_map, torch.Tensor) else w1.shape[0]
        if global_num_experts != e_global:
            raise ValueError(
                f"global_num_experts must be -1 or the number of global experts {e_global} "
                f"(expert_map's length, else w1.shape[0]), got {global_num_experts}"
            )
    q = {}
    if quant_config is not None:
        # "is", not "in": a zero-point tensor compared with False would be an elementwise test
        bad = [
            f
            for f in _QUANT_REFUSED
            if getattr(quant_config, f, None) is not None and getattr(quant_config, f) is not False
        ]
        if bad:
            raise NotImplementedError(
                f"fused_experts: quant_config.{', quant_config.'.join(bad)} not supported (bf16/fp16 and fp8 w8a8 only)"
            )
        fp8 = bool(getattr(quant_config, "use_fp8_w8a8", False))
        is_fp8 = isinstance(w1, torch.Tensor) and w1.dtype == api.FP8_DTYPE
        if fp8 != is_fp8:
            raise ValueError(
                f"quant_config.use_fp8_w8a8 is {fp8} but w1 is "
                f"{w1.dtype if isinstance(w1, torch.Tensor) else type(w1).__name__}"
            )
        q = {k: getattr(quant_config, k, None) for k in ("w1_scale", "w2_scale", "a1_scale", "a2_scale", "block_shape")}
        q["per_act_token_quant"] = bool(getattr(quant_config, "per_act_token_quant", False))
        if q["block_shape"] is not None:
            q["per_act_token_quant"] = True  # block-wise: per 128-column group whatever the flag
    elif isinstance(w1, torch.Tensor) and w1.dtype == api.FP8_DTYPE:
        raise ValueError("quant_config must describe the fp8 scheme: w1 is float8_e4m3fn")
    return api.fused_moe(
        hidden_states,
        w1,
        w2,
        topk_weights,
        topk_ids,
        activation=act,
        apply_router_weight_on_input=bool(apply_router_weight_on_input),
        expert_map=expert_map,
        **q,
    )
