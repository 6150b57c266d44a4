"""Eager PyTorch oracle for topk_softmax, in float64 for float64 inputs (float32 otherwise, as the op)."""

import torch


def topk_softmax_reference(
    gating_output: torch.Tensor, topk: int, renormalize: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(topk_weights, topk_ids)``: weights in the compute dtype, ids int32.

    The experts are ranked by their logits, stable and descending: softmax is strictly increasing in the logit,
    so that is the order of the exact probabilities, and only equal logits tie (the lower expert first). Ranking
    the float64 probabilities instead would let two different logits tie where both underflow to 0."""
    compute = torch.float64 if gating_output.dtype == torch.float64 else torch.float32
    x = gating_output.to(compute)
    ids = torch.sort(x, dim=-1, descending=True, stable=True).indices[:, :topk]
    weights = torch.softmax(x, dim=-1).gather(-1, ids)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, ids.to(torch.int32)
