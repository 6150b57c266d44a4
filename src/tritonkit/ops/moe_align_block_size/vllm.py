"""moe_align_block_size in vLLM's call form (``vllm._custom_ops.moe_align_block_size``).

:mod:`tritonkit.ops.vllm` re-exports it (vLLM's release: its ``VLLM_VERSION``). Arguments are checked before anything is
written.
"""

from __future__ import annotations

import torch

from .. import _checks
from .._ints import cdiv
from .._library import through_dispatcher
from . import api
from .config import max_padded


def moe_align_block_size(
    topk_ids: torch.Tensor,
    num_experts: int,
    block_size: int,
    sorted_token_ids: torch.Tensor,
    experts_ids: torch.Tensor,
    num_tokens_post_pad: torch.Tensor,
    expert_map: torch.Tensor | None = None,
    scatter_idx: torch.Tensor | None = None,
) -> None:
    """``vllm._custom_ops.moe_align_block_size``: slots ``m * topk + j`` of ``topk_ids`` sorted by expert, each
    expert's run padded to a multiple of block_size with ``numel``, into the caller's int32 buffers
    ``sorted_token_ids`` (at least ``min(numel * block_size, numel + num_experts * (block_size - 1))`` long, as
    vLLM sizes it; entries past the padded runs hold numel), ``experts_ids`` (one expert per block; -1 past the
    runs) and ``num_tokens_post_pad [1]``. With ``expert_map`` (global id -> local index or -1) slots of experts on
    other ranks are left out and experts_ids holds local indices, as vLLM's op with a map does. ``scatter_idx``
    is not supported (pass None)."""
    if scatter_idx is not None:
        raise NotImplementedError(
            f"moe_align_block_size: scatter_idx={_given(scatter_idx)} is not supported (pass None): tritonkit's "
            f"alignment has no kernel for it"
        )
    api.check_args(topk_ids, block_size, num_experts, expert_map)
    numel = topk_ids.numel()
    need = max_padded(numel, block_size, num_experts)
    for name, t, n in (
        ("sorted_token_ids", sorted_token_ids, need),
        ("experts_ids", experts_ids, cdiv(need, block_size)),
        ("num_tokens_post_pad", num_tokens_post_pad, 1),
    ):
        _checks.inference_only(**{name: t})
        _checks.tensor(name, t, dtypes=(torch.int32,), ndim=1)
        if t.shape[0] < n:
            raise ValueError(
                f"{name} must hold at least {n} entries for {numel} slots, {num_experts} experts and "
                f"block_size {block_size}, got shape {tuple(t.shape)}"
            )
    _checks.same_device(
        topk_ids=topk_ids,
        sorted_token_ids=sorted_token_ids,
        experts_ids=experts_ids,
        num_tokens_post_pad=num_tokens_post_pad,
        expert_map=expert_map,
    )
    _checks.distinct_outputs(
        sorted_token_ids=sorted_token_ids, experts_ids=experts_ids, num_tokens_post_pad=num_tokens_post_pad
    )
    ids = topk_ids
    if expert_map is not None:
        # slots of other ranks' experts drop out (local -1 is out of range); the run ids are local indices
        valid = (topk_ids >= 0) & (topk_ids < num_experts)
        ids = torch.where(valid, expert_map[torch.where(valid, topk_ids, 0)].to(topk_ids.dtype), -1)
    # the ids were checked above as the caller passed them: the mapped ones (-1 for other ranks) are not re-checked
    if through_dispatcher(ids):
        s, e, n = torch.ops.tritonkit.moe_align_block_size(ids, block_size, num_experts, None)
    else:
        s, e, n = api.forward(ids, block_size, num_experts, None)
    sorted_token_ids[:need].copy_(s)
    sorted_token_ids[need:].fill_(numel)
    experts_ids[: e.shape[0]].copy_(e)
    experts_ids[e.shape[0] :].fill_(-1)
    num_tokens_post_pad[:1].copy_(n)


def _given(value) -> str:
    """The refused value, named without printing a tensor's data."""
    if isinstance(value, torch.Tensor):
        return f"<{str(value.dtype).removeprefix('torch.')} tensor of shape {tuple(value.shape)}>"
    return repr(value)
