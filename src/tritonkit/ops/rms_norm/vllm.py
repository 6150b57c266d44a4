"""rms_norm and fused_add_rms_norm in vLLM's call form (``vllm._custom_ops``): into the caller's tensors.

:mod:`tritonkit.ops.vllm` re-exports it (vLLM's release: its ``VLLM_VERSION``). Arguments are checked before anything is
written.
"""

from __future__ import annotations

import torch

from .. import _checks
from .._library import mutating_op, through_dispatcher
from . import api


@mutating_op("vllm_rms_norm", ("out",))
def _rms_norm_op(out: torch.Tensor, input: torch.Tensor, weight: torch.Tensor | None, epsilon: float) -> None:
    api.launch_into(input, weight, epsilon, None, out, None)


def rms_norm(out: torch.Tensor, input: torch.Tensor, weight: torch.Tensor | None, epsilon: float) -> None:
    """``out [..., hidden] = input * rsqrt(mean(input^2, -1) + epsilon) * weight`` (input's dtype; statistics in
    float32; weight None: no scale, as vLLM's op). ``out`` has input's shape and dtype; its rows may be strided,
    its last dim contiguous. ``out`` may be ``input`` itself (exactly in place: each row is read before it is
    written) but may not otherwise overlap it or weight."""
    api.check_args(input, weight, epsilon, None, x_name="input", eps_name="epsilon", weight_optional=True)
    _out("out", out, input)
    _checks.distinct_elements("out", out)
    _checks.no_overlap("out", out, in_place_ok=True, input=input)
    _checks.no_overlap("out", out, weight=weight)
    if through_dispatcher(out, input, weight):
        torch.ops.tritonkit.vllm_rms_norm(out, input, weight, float(epsilon))
    else:
        api.launch_into(input, weight, float(epsilon), None, out, None)


@mutating_op("vllm_fused_add_rms_norm", ("input", "residual"))
def _fused_add_rms_norm_op(
    input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None, epsilon: float
) -> None:
    api.launch_into(input, weight, epsilon, residual, input, residual)


def fused_add_rms_norm(
    input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None, epsilon: float
) -> None:
    """In place: ``residual <- input + residual`` (rounded to input's dtype), then ``input <- rms_norm(residual) *
    weight`` (weight None: no scale, as vLLM's op). Each row is read before it is written, so the two may not
    overlap each other but are their own outputs."""
    api.check_args(input, weight, epsilon, residual, x_name="input", eps_name="epsilon", weight_optional=True)
    _checks.distinct_elements("input", input, "it is written in place")
    _checks.distinct_elements("residual", residual, "it is written in place")
    _checks.no_overlap("residual", residual, input=input)
    _checks.no_overlap("input", input, weight=weight)
    _checks.no_overlap("residual", residual, weight=weight)
    if through_dispatcher(input, residual, weight):
        torch.ops.tritonkit.vllm_fused_add_rms_norm(input, residual, weight, float(epsilon))
    else:
        api.launch_into(input, weight, float(epsilon), residual, input, residual)


def _out(name: str, out, input: torch.Tensor) -> None:
    _checks.inference_only(**{name: out})
    _checks.tensor(name, out, dtypes=(input.dtype,), last_contiguous=True)
    _checks.shape_equal(name, out, tuple(input.shape), "input's shape")
    _checks.same_device(**{name: out, "input": input})
