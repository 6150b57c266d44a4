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
    lower expert.

    ``e_score_correction_bias`` (float32 ``[E]``, contiguous): experts are chosen by the float32 score
    ``softmax + bias``, the weights are the chosen experts' unbiased probabilities (renormalized over them when
    ``renormalize``). ``is_padding`` (bool ``[M]``, contiguous): padding rows get expert id -1 in every slot of
    ``topk_ids`` (their weights and ``token_expert_indices`` are written as any row's), read on the device. Both as
    vLLM 0.34.0's kernel (``csrc/moe/topk_softmax_kernels.cu``)."""
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
    renormalize = bool(renormalize)
    api.check_args(gating_output, k, renormalize, e_score_correction_bias, is_padding)
    w, ids = api.topk_softmax(
        gating_output,
        k,
        renormalize=renormalize,
        e_score_correction_bias=e_score_correction_bias,
        is_padding=is_padding,
    )
    topk_weights.copy_(w)
    topk_ids.copy_(ids)
    rows = torch.arange(m, dtype=token_expert_indices.dtype, device=token_expert_indices.device)
    token_expert_indices.copy_(torch.arange(k, dtype=rows.dtype, device=rows.device)[None, :] * m + rows[:, None])
