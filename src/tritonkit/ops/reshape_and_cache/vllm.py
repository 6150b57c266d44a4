"""reshape_and_cache_flash in vLLM's call form (``vllm._custom_ops.reshape_and_cache_flash``).

:mod:`tritonkit.ops.vllm` re-exports it (vLLM's release: its ``VLLM_VERSION``). Arguments are checked before anything is
written.
"""

from __future__ import annotations

import torch

from .api import reshape_and_cache


def reshape_and_cache_flash(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    kv_cache_dtype: str,
    k_scale: torch.Tensor,
    v_scale: torch.Tensor,
) -> None:
    """Write key/value rows into the flash-layout caches ``[num_blocks, block_size, num_kv_heads, head_size]`` at
    ``slot_mapping`` (``-1``: padding, skipped). key/value ``[num_rows, num_kv_heads, head_size]`` may hold more
    rows than slot_mapping has entries (vLLM pads them to a CUDA-graph size): only the first
    ``slot_mapping.shape[0]`` are written. ``kv_cache_dtype`` "auto" copies, "fp8"/"fp8_e4m3" stores ``x / scale``
    in float8_e4m3fn (or uint8) caches; k_scale/v_scale are one-element float32 tensors."""
    reshape_and_cache(
        key,
        value,
        key_cache,
        value_cache,
        slot_mapping,
        kv_cache_dtype=kv_cache_dtype,
        k_scale=k_scale,
        v_scale=v_scale,
    )
