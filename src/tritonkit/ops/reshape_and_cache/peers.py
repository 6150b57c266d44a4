"""reshape_and_cache's bench peers (``OpSpec.peers``): vLLM's Triton kernel for the flash-layout cache write.

Optional, never a dependency: put vLLM, or its Triton kernels extracted by ``shared/peers/vllm-triton-kernels.sh``, on
PYTHONPATH; otherwise the peer is :class:`~tritonkit.spec.Unavailable`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import torch

from ...spec import OpSpec, Peer, Unavailable


def vllm(outputs: Callable[[dict], dict]) -> Callable[[OpSpec, torch.dtype], Peer]:
    """The ``vllm`` peer: vLLM's ``triton_reshape_and_cache_flash``, judged on ``outputs`` (the spec's view of what a
    call wrote: the caches and the guard regions around them)."""

    def factory(spec: OpSpec, dtype: torch.dtype) -> Peer:
        mod_name = "vllm.v1.attention.ops.triton_reshape_and_cache_flash"
        try:
            mod = importlib.import_module(mod_name)
            kernel = mod.triton_reshape_and_cache_flash
        except Exception as e:  # noqa: BLE001 - ImportError, or a stand-in module vLLM's file does not agree with
            raise Unavailable(f"vLLM not importable ({type(e).__name__}: {e})") from None
        scales: dict[torch.device, torch.Tensor] = {}

        def fn(inputs: dict) -> dict:
            key = inputs["key"]
            one = scales.get(key.device)
            if one is None:
                one = scales[key.device] = torch.ones((), dtype=torch.float32, device=key.device)
            k_scale = inputs.get("k_scale")
            v_scale = inputs.get("v_scale")
            kernel(
                key,
                inputs["value"],
                inputs["key_cache"],
                inputs["value_cache"],
                inputs["slot_mapping"],
                inputs.get("kv_cache_dtype", "auto"),
                one if k_scale is None else k_scale,
                one if v_scale is None else v_scale,
            )
            return outputs(inputs)

        return Peer(f"{mod_name}.triton_reshape_and_cache_flash", fn, (mod_name,))

    return factory
