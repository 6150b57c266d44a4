"""Eager PyTorch oracle for topk_softmax, in float64 for float64 inputs (float32 otherwise, as the op)."""

import torch


def topk_softmax_reference(
    gating_output: torch.Tensor,
    topk: int,
    renormalize: bool = False,
    e_score_correction_bias: torch.Tensor | None = None,
    is_padding: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(topk_weights, topk_ids)``: weights in the compute dtype, ids int32.

    The experts are ranked by their logits, stable and descending: softmax is strictly increasing in the logit,
    so that is the order of the exact probabilities, and only equal logits tie (the lower expert first). Ranking
    the float64 probabilities instead would let two different logits tie where both underflow to 0.

    With ``e_score_correction_bias`` ``[E]`` the ranking is of the op's float32 score: the probability rounded to
    float32 plus the bias, added in float32 (stable, so equal scores tie toward the lower expert); the weights are
    the chosen experts' unbiased probabilities, and renormalize divides them by their sum unless that sum is 0.
    Rows where ``is_padding`` ``[M]`` is true get id -1 in every slot, their weights computed as any row's."""
    compute = torch.float64 if gating_output.dtype == torch.float64 else torch.float32
    x = gating_output.to(compute)
    probs = torch.softmax(x, dim=-1)
    if e_score_correction_bias is None:
        order_by = x
    else:
        order_by = probs.to(torch.float32) + e_score_correction_bias.to(torch.float32)
    ids = torch.sort(order_by, dim=-1, descending=True, stable=True).indices[:, :topk]
    weights = probs.gather(-1, ids)
    if renormalize:
        total = weights.sum(dim=-1, keepdim=True)
        weights = weights / torch.where(total > 0, total, torch.ones_like(total))
    ids = ids.to(torch.int32)
    if is_padding is not None:
        ids = ids.masked_fill(is_padding.to(torch.bool)[:, None], -1)
    return weights, ids
