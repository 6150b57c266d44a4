"""topk_softmax in vLLM's call form (``vllm._custom_ops.topk_softmax``): into the three buffers.

:mod:`tritonkit.ops.vllm` re-exports it (vLLM's release: its ``VLLM_VERSION``). Arguments are checked before anything is
written.
"""

from __future__ import annotations

import torch

from .. import _checks
from . import api


def topk_softmax(
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    token_expert_indices: torch.Tensor,
    gating_output: torch.Tensor,
    renormalize: bool = False,
    e_score_correction_bias: torch.Tensor | None = None,
    is_padding: torch.Tensor | None = None,
) -> None:
    """The router's float32 softmax over ``gating_output [M, E]`` and its top ``topk`` experts, written into
    ``topk_weights [M, topk]`` float32, ``topk_ids [M, topk]`` int32/int64 and ``token_expert_indices [M, topk]``
    int32 (``j * M + m``: slot (m, j)'s row in the expert-major order, as vLLM's kernel writes it). Ties go to the
    lower expert. ``e_score_correction_bias`` and ``is_padding`` are not supported (pass None)."""
    for name, value in (("e_score_correction_bias", e_score_correction_bias), ("is_padding", is_padding)):
        if value is not None:
            raise NotImplementedError(
                f"topk_softmax: {name}={_given(value)} is not supported (pass None): tritonkit's router "
                f"has no kernel for it"
            )
    _checks.inference_only(topk_weights=topk_weights, topk_ids=topk_ids, token_expert_indices=token_expert_indices)
    _checks.tensor("topk_weights", topk_weights, dtypes=(torch.float32,), ndim=2)
    m, k = topk_weights.shape
    _checks.tensor("topk_ids", topk_ids, dtypes=_checks.INDEX_DTYPES, ndim=2)
    _checks.shape_equal("topk_ids", topk_ids, (m, k), "topk_weights's [M, topk]")
    _checks.tensor("token_expert_indices", token_expert_indices, dtypes=_checks.INDEX_DTYPES, ndim=2)
    _checks.shape_equal("token_expert_indices", token_expert_indices, (m, k), "topk_weights's [M, topk]")
    _checks.tensor("gating_output", gating_output, ndim=2)
    if gating_output.shape[0] != m:
        raise ValueError(f"gating_output must have topk_weights's {m} rows, got shape {tuple(gating_output.shape)}")
    _checks.same_device(
        topk_weights=topk_weights,
        topk_ids=topk_ids,
        token_expert_indices=token_expert_indices,
        gating_output=gating_output,
    )
    _checks.distinct_outputs(topk_weights=topk_weights, topk_ids=topk_ids, token_expert_indices=token_expert_indices)
    api.check_args(gating_output, k, bool(renormalize))
    w, ids = api.topk_softmax(gating_output, k, renormalize=bool(renormalize))
    topk_weights.copy_(w)
    topk_ids.copy_(ids)
    rows = torch.arange(m, dtype=token_expert_indices.dtype, device=token_expert_indices.device)
    token_expert_indices.copy_(torch.arange(k, dtype=rows.dtype, device=rows.device)[None, :] * m + rows[:, None])


def _given(value) -> str:
    """The refused value, named without printing a tensor's data."""
    if isinstance(value, torch.Tensor):
        return f"<{str(value.dtype).removeprefix('torch.')} tensor of shape {tuple(value.shape)}>"
    return repr(value)
