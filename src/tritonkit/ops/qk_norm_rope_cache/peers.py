"""qk_norm_rope_cache's bench peers (``OpSpec.peers``): the unfused sequence of tritonkit's own ops it replaces.

``unfused`` is what a serving engine runs without the fused op (vLLM's own fallback path): rms_norm over each head
of q and of k (each a copy of its qkv slice, as ``.contiguous()`` makes it), rotary_embedding in place on the normed
q and k, reshape_and_cache of k and v. Four launches and four host paths where the op has one.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ...spec import OpSpec, Peer
from ..reshape_and_cache.api import reshape_and_cache
from ..rms_norm.api import rms_norm
from ..rotary_embedding.api import rotary_embedding


def unfused(outputs: Callable[[dict, torch.Tensor], dict], eps: float) -> Callable[[OpSpec, torch.dtype], Peer]:
    """The ``unfused`` peer, judged on ``outputs(inputs, q)`` (the spec's view of what a call wrote: q, the caches
    and the guard regions around them)."""

    def factory(spec: OpSpec, dtype: torch.dtype) -> Peer:
        def prepare(inputs: dict) -> dict:
            # rms_norm has no weight bias: Gemma's 1 + w, formed once in float32 (the fused op adds it in float32)
            out = dict(inputs)
            for name in ("q_weight", "k_weight"):
                w = inputs.get(name)
                if w is not None:
                    out[name] = w.float() + inputs["weight_bias"]
            return out

        def fn(inputs: dict) -> dict:
            qkv, hq, hk = inputs["qkv"], inputs["num_q_heads"], inputs["num_kv_heads"]
            t = qkv.shape[0]
            d = qkv.shape[1] // (hq + 2 * hk)
            q = qkv[:, : hq * d].view(t, hq, d)
            k = qkv[:, hq * d : (hq + hk) * d].view(t, hk, d)
            v = qkv[:, (hq + hk) * d :].view(t, hk, d)
            # without the norm, vLLM's path rotates the qkv projection in place
            if inputs.get("q_weight") is not None:
                q = rms_norm(q, inputs["q_weight"], eps)
                k = rms_norm(k, inputs["k_weight"], eps)
            if inputs["cos_sin_cache"] is not None:
                rotary_embedding(inputs["positions"], q, k, inputs["cos_sin_cache"], is_neox=inputs["is_neox"])
            reshape_and_cache(
                k,
                v,
                inputs["key_cache"],
                inputs["value_cache"],
                inputs["slot_mapping"],
                kv_cache_dtype=inputs["kv_cache_dtype"],
                k_scale=inputs.get("k_scale"),
                v_scale=inputs.get("v_scale"),
            )
            return outputs(inputs, q)

        return Peer(
            "tritonkit's unfused sequence: rms_norm of q and k per head, rotary_embedding, reshape_and_cache",
            fn,
            ("tritonkit.ops.rms_norm", "tritonkit.ops.rotary_embedding", "tritonkit.ops.reshape_and_cache"),
            prepare=prepare,
        )

    return factory
