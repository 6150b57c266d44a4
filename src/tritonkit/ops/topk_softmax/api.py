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
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    gating_output: torch.Tensor,
    topk: int,
    renormalize: bool,
    e_score_correction_bias: torch.Tensor | None = None,
    is_padding: torch.Tensor | None = None,
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
        (
            logits,
            topk_weights,
            topk_ids,
            num_tokens,
            num_experts,
            gating_output.stride(0),
            e_score_correction_bias,
            is_padding,
        ),
        {
            "TOPK": topk,
            "RENORMALIZE": renormalize,
            "HAS_BIAS": e_score_correction_bias is not None,
            "HAS_PADDING": is_padding is not None,
            "BF16_BITS": bf16_bits,
            "BLOCK_M": cfg.block_m,
            "BLOCK_E": cfg.block_e,
            "BLOCK_K": cfg.block_k,
        },
        cfg.num_warps,
    )


def _alloc_outputs(
    gating_output: torch.Tensor,
    topk: int,
    renormalize: bool,
    e_score_correction_bias: torch.Tensor | None = None,
    is_padding: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    num_tokens, dev = gating_output.shape[0], gating_output.device
    return _alloc.empty((num_tokens, topk), torch.float32, dev), _alloc.empty((num_tokens, topk), torch.int32, dev)


def forward(
    gating_output: torch.Tensor,
    topk: int,
    renormalize: bool,
    e_score_correction_bias: torch.Tensor | None = None,
    is_padding: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The op's named surface: (topk_weights, topk_ids) on arguments check_args accepted."""
    weights, ids = _alloc_outputs(gating_output, topk, renormalize)
    launch_into(weights, ids, gating_output, topk, renormalize, e_score_correction_bias, is_padding)
    return weights, ids


@op_with_outputs("topk_softmax", _alloc_outputs, outs=("topk_weights", "topk_ids"))
def _topk_softmax_out_op(
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    gating_output: torch.Tensor,
    topk: int,
    renormalize: bool,
    e_score_correction_bias: torch.Tensor | None = None,
    is_padding: torch.Tensor | None = None,
) -> None:
    launch_into(topk_weights, topk_ids, gating_output, topk, renormalize, e_score_correction_bias, is_padding)


def check_args(gating_output, topk, renormalize, e_score_correction_bias=None, is_padding=None) -> None:
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
    if e_score_correction_bias is not None:
        _check_bias(e_score_correction_bias, gating_output)
    if is_padding is not None:
        _check_padding(is_padding, gating_output)


def _check_bias(bias, gating_output: torch.Tensor) -> None:
    name = "e_score_correction_bias"
    _checks.inference_only(e_score_correction_bias=bias)
    _checks.tensor(name, bias, dtypes=(torch.float32,), ndim=1)
    num_experts = gating_output.shape[1]
    if bias.shape[0] != num_experts:
        raise ValueError(
            f"{name} must have shape ({num_experts},) (one entry per expert of gating_output), got {tuple(bias.shape)}"
        )
    if num_experts > 1 and bias.stride(0) != 1:
        raise ValueError(f"{name} must be contiguous, got stride {bias.stride(0)}")
    _checks.same_device(gating_output=gating_output, e_score_correction_bias=bias)


def _check_padding(is_padding, gating_output: torch.Tensor) -> None:
    _checks.tensor("is_padding", is_padding, dtypes=(torch.bool,), ndim=1)
    num_tokens = gating_output.shape[0]
    if is_padding.shape[0] != num_tokens:
        raise ValueError(
            f"is_padding must have shape ({num_tokens},) (one entry per row of gating_output), got "
            f"{tuple(is_padding.shape)}"
        )
    if num_tokens > 1 and is_padding.stride(0) != 1:
        raise ValueError(f"is_padding must be contiguous, got stride {is_padding.stride(0)}")
    _checks.same_device(gating_output=gating_output, is_padding=is_padding)


def topk_softmax(
    gating_output: torch.Tensor,
    topk: int,
    *,
    renormalize: bool = False,
    e_score_correction_bias: torch.Tensor | None = None,
    is_padding: torch.Tensor | None = None,
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
    e_score_correction_bias  ``[num_experts]`` float32, contiguous, on gating_output's device, finite (vLLM's
                   bias router): experts are chosen by the float32 score ``probability + bias`` instead, and the
                   weights are still the chosen experts' unbiased probabilities (renormalize divides them by their
                   sum; a sum of 0, where the bias chose only experts of probability 0, leaves them 0).
    is_padding     ``[num_tokens]`` bool, contiguous, on gating_output's device (vLLM's CUDA-graph / DP padding
                   mask): a true row gets expert id -1 in every slot, so dispatch and experts skip it; its weights
                   are computed as any row's. Read on the device (no host sync).

    Returns ``(topk_weights, topk_ids)``: ``[num_tokens, topk]`` float32 and int32, contiguous, each row in
    descending order of probability (of score, with the bias). Experts are ranked by their logit (the order of the
    exact probabilities); equal logits tie and the lower expert index comes first. Where two different logits give
    the same float32 probability (both underflow to 0, say) the larger logit comes first, with the same weight either
    way. With the bias, equal float32 scores tie and the lower expert comes first, as in vLLM's kernel.
    """
    check_args(gating_output, topk, renormalize, e_score_correction_bias, is_padding)
    if through_dispatcher(gating_output):
        return torch.ops.tritonkit.topk_softmax(gating_output, topk, renormalize, e_score_correction_bias, is_padding)
    # forward's two steps, one call fewer on the host path
    weights, ids = _alloc_outputs(gating_output, topk, renormalize)
    launch_into(weights, ids, gating_output, topk, renormalize, e_score_correction_bias, is_padding)
    return weights, ids
