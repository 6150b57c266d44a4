"""silu_and_mul_quant_fp8 in vLLM 0.34.0's call forms: ``vllm._custom_ops.silu_and_mul_per_block_quant`` (same
arguments, same returns) and ``torch.ops._C.silu_and_mul_quant`` (static scale, into ``result``), the op vLLM's
activation-quant fusion substitutes.

:mod:`tritonkit.ops.vllm` re-exports them. Arguments are checked before anything is written (where vLLM asserts,
these raise; int8 ``quant_dtype`` is not supported: fp8 only).
"""

from __future__ import annotations

import torch

from .. import _alloc, _checks, _fp8
from .._library import mutating_op, through_dispatcher
from . import api


@mutating_op("vllm_silu_and_mul_quant_fp8", ("out", "scales"))
def _op(
    out: torch.Tensor,
    input: torch.Tensor,
    scales: torch.Tensor | None,
    scale: torch.Tensor | None,
    scale_ub: torch.Tensor | None,
    quant: str,
    group_size: int,
) -> None:
    api.launch_into(input, out, scales, quant, scale, scale_ub, group_size, quant == "group")


def _launch(out, input, scales, scale, scale_ub, quant: str, group_size: int) -> None:
    if through_dispatcher(out, input, scales):
        torch.ops.tritonkit.vllm_silu_and_mul_quant_fp8(out, input, scales, scale, scale_ub, quant, group_size)
    else:
        api.launch_into(input, out, scales, quant, scale, scale_ub, group_size, quant == "group")


def silu_and_mul_per_block_quant(
    input: torch.Tensor,
    group_size: int,
    quant_dtype: torch.dtype,
    scale_ub: torch.Tensor | None = None,
    is_scale_transposed: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(output [T, d], scales)`` of ``input [T, 2d]``: one dynamic scale per ``group_size`` (64 or 128)
    columns, ``max(min(amax / 448, scale_ub), 1 / (448 * 512))``, ``[T, d / group_size]`` or column-major
    (``is_scale_transposed``: a ``[groups, T]`` buffer seen as its transpose)."""
    if quant_dtype != _fp8.FP8_DTYPE:
        raise TypeError(f"quant_dtype must be torch.float8_e4m3fn (tritonkit's fp8 forms), got {quant_dtype!r}")
    if isinstance(input, torch.Tensor) and input.dim() != 2:
        raise ValueError(f"input must be 2-d [batch, 2 * hidden], got shape {tuple(input.shape)}")
    api.check_args(input, "group", None, scale_ub, group_size, "input")
    t, d = input.shape[0], input.shape[1] // 2
    out = _alloc.empty((t, d), _fp8.FP8_DTYPE, input.device)
    groups = d // group_size
    if is_scale_transposed:
        scales = _alloc.empty((groups, t), torch.float32, input.device).t()
    else:
        scales = _alloc.empty((t, groups), torch.float32, input.device)
    _launch(out, input, scales, None, scale_ub, "group", group_size)
    return out, scales


def silu_and_mul_quant(result: torch.Tensor, input: torch.Tensor, scale: torch.Tensor) -> None:
    """``result [..., d] = fp8((silu(input[..., :d]) * input[..., d:]) * (1 / scale))`` with vLLM's roundings
    (``torch.ops._C.silu_and_mul_quant``); ``scale`` a float32 tensor of one element."""
    api.check_args(input, "static", scale, None, 0, "input")
    _checks.inference_only(result=result)
    _checks.tensor("result", result, dtypes=(_fp8.FP8_DTYPE,), last_contiguous=True)
    _checks.shape_equal(
        "result", result, (*input.shape[:-1], input.shape[-1] // 2), "input's shape with half its last dimension"
    )
    _checks.same_device(result=result, input=input)
    _checks.distinct_elements("result", result)
    _checks.no_overlap("result", result, input=input, scale=scale)
    _launch(result, input, None, scale, None, "static", 1)
