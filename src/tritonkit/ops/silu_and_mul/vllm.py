"""silu_and_mul in vLLM's call form (``vllm._custom_ops.silu_and_mul``): into the caller's ``out``.

:mod:`tritonkit.ops.vllm` re-exports it (vLLM's release: its ``VLLM_VERSION``). Arguments are checked before anything is
written.
"""

from __future__ import annotations

import torch

from .. import _checks
from .._library import mutating_op, through_dispatcher
from . import api


@mutating_op("vllm_silu_and_mul", ("out",))
def _silu_and_mul_op(out: torch.Tensor, input: torch.Tensor) -> None:
    api.forward(input, out)


def silu_and_mul(out: torch.Tensor, input: torch.Tensor) -> None:
    """``out [..., d] = silu(input[..., :d]) * input[..., d:]``, in float32 with one rounding."""
    api.check_args(input, x_name="input")
    _checks.inference_only(out=out)
    _checks.tensor("out", out, dtypes=(input.dtype,), last_contiguous=True)
    _checks.shape_equal(
        "out", out, (*input.shape[:-1], input.shape[-1] // 2), "input's shape with half its last dimension"
    )
    _checks.same_device(out=out, input=input)
    _checks.distinct_elements("out", out)
    _checks.no_overlap("out", out, input=input)
    if through_dispatcher(out, input):
        torch.ops.tritonkit.vllm_silu_and_mul(out, input)
    else:
        api.forward(input, out)
