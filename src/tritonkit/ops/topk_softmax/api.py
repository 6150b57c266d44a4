"""topk_softmax: a mixture-of-experts router's softmax over the experts and its top-k choice (vLLM's
``topk_softmax``)."""

from __future__ import annotations

import torch

from .. import _alloc, _checks
from .._ints import cdiv
from .._launch import launch
from .._library import op_with_outputs, through_dispatcher
from .config import MAX_EXPERTS, topk_softmax_config
from .kernel import _topk_softmax_kernel


def launch_into(
    topk_weights: torch.Tensor, topk_ids: torch.Tensor, gating_output: torch.Tensor, topk: int, renormalize: bool
) -> None:
    """Write (topk_weights, topk_ids) of arguments check_args accepted into the caller's ``[num_tokens, topk]``
    float32 and int32 tensors, contiguous."""
    num_tokens, num_experts = gating_output.shape
    if num_tokens == 0:
        return
    cfg = topk_softmax_config(num_experts, topk)
    bf16_bits = gating_output.dtype == torch.bfloat16
    logits = gating_output.view(torch.int16) if bf16_bits else gating_output
    launch(
        _topk_softmax_kernel,
        (cdiv(num_tokens, cfg.block_m),),
        (logits, topk_weights, topk_ids, num_tokens, num_experts, gating_output.stride(0)),
        {
            "TOPK": topk,
            "RENORMALIZE": renormalize,
            "BF16_BITS": bf16_bits,
            "BLOCK_M": cfg.block_m,
            "BLOCK_E": cfg.block_e,
            "BLOCK_K": cfg.block_k,
        },
        cfg.num_warps,
    )


def _alloc_outputs(gating_output: torch.Tensor, topk: int, renormalize: bool) -> tuple[torch.Tensor, torch.Tensor]:
    num_tokens, dev = gating_output.shape[0], gating_output.device
    return _alloc.empty((num_tokens, topk), torch.float32, dev), _alloc.empty((num_tokens, topk), torch.int32, dev)


def forward(gating_output: torch.Tensor, topk: int, renormalize: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The op's named surface: (topk_weights, topk_ids) on arguments check_args accepted."""
    weights, ids = _alloc_outputs(gating_output, topk, renormalize)
    launch_into(weights, ids, gating_output, topk, renormalize)
    return weights, ids


@op_with_outputs("topk_softmax", _alloc_outputs, outs=("topk_weights", "topk_ids"))
def _topk_softmax_out_op(
    topk_weights: torch.Tensor, topk_ids: torch.Tensor, gating_output: torch.Tensor, topk: int, renormalize: bool
) -> None:
    launch_into(topk_weights, topk_ids, gating_output, topk, renormalize)


def check_args(gating_output, topk, renormalize) -> None:
    """The op's named surface: every argument checked on metadata alone (no device sync), a ValueError or TypeError
    naming the bad one; nothing is written."""
    _checks.inference_only(gating_output=gating_output)
    _checks.tensor("gating_output", gating_output, dtypes=_checks.FLOAT_DTYPES, ndim=2, last_contiguous=True)
    num_experts = gating_output.shape[1]
    if num_experts == 0:
        raise ValueError(
            f"gating_output must have at least one expert (shape [num_tokens, num_experts]), got shape "
            f"{tuple(gating_output.shape)}"
        )
    if num_experts > MAX_EXPERTS:
        raise ValueError(
            f"gating_output must have at most {MAX_EXPERTS} experts (one row is one tile), got shape "
            f"{tuple(gating_output.shape)}"
        )
    if isinstance(topk, bool) or not isinstance(topk, int):
        raise TypeError(f"topk must be an int, got {type(topk).__name__}")
    if not 1 <= topk <= num_experts:
        raise ValueError(f"topk must be in [1, num_experts={num_experts}], got {topk}")
    if not isinstance(renormalize, bool):
        raise TypeError(f"renormalize must be a bool, got {type(renormalize).__name__}")


def topk_softmax(
    gating_output: torch.Tensor, topk: int, *, renormalize: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Route each token to its ``topk`` most probable experts: ``softmax(gating_output)`` over the experts in
    float32, then the ``topk`` largest probabilities in descending order.

    gating_output  ``[num_tokens, num_experts]`` float16/bfloat16/float32 router logits, contiguous in the last
                   dimension (rows may be strided). ``num_experts <= 4096``. Rows must hold finite logits; ``-inf``
                   masks an expert (probability 0) as long as one logit of the row is finite. NaN and ``+inf``
                   are undefined.
    topk           experts per token, ``1 <= topk <= num_experts``.
    renormalize    divide each row's chosen weights by their sum (Mixtral, Qwen-MoE) instead of keeping the
                   softmax probabilities.

    Returns ``(topk_weights, topk_ids)``: ``[num_tokens, topk]`` float32 and int32, contiguous, each row in
    descending order of probability. Experts are ranked by their logit (the order of the exact probabilities);
    equal logits tie and the lower expert index comes first. Where two different logits give the same float32
    probability (both underflow to 0, say) the larger logit comes first, with the same weight either way.
    """
    check_args(gating_output, topk, renormalize)
    if through_dispatcher(gating_output):
        return torch.ops.tritonkit.topk_softmax(gating_output, topk, renormalize)
    # forward's two steps, one call fewer on the host path
    weights, ids = _alloc_outputs(gating_output, topk, renormalize)
    launch_into(weights, ids, gating_output, topk, renormalize)
    return weights, ids
