"""rms_norm: ``y = x * rsqrt(mean(x^2) + eps) * weight`` over the last dimension, optionally fused with a
residual add."""

from __future__ import annotations

import torch

from .. import _alloc, _checks
from .._launch import launch
from .._library import op_with_outputs, through_dispatcher
from .config import rms_norm_config
from .kernel import _rms_norm_fwd_kernel


def launch_into(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float,
    residual: torch.Tensor | None,
    y: torch.Tensor,
    r: torch.Tensor | None,
) -> None:
    """``y`` and ``r`` are outputs of x's shape whose rows can be addressed by one stride (fresh contiguous ones,
    or the caller's, which may be x and residual themselves: each row is read before it is written). ``weight``
    None: no scale (vLLM's forms allow it)."""
    hidden = x.shape[-1]
    n_rows = y.numel() // hidden
    if n_rows == 0:
        return
    cfg = rms_norm_config(hidden, x.element_size())
    x, stride_x = _checks.rows_and_stride("x", x)
    y, stride_y = _checks.rows_and_stride("out", y, output=True)
    has_res = residual is not None
    if has_res:
        residual, stride_res = _checks.rows_and_stride("residual", residual)
        r, stride_r = _checks.rows_and_stride("residual", r, output=True)
    launch(
        _rms_norm_fwd_kernel,
        (n_rows,),
        (
            x,
            residual if has_res else x,
            x if weight is None else weight,
            y,
            r if has_res else y,
            stride_x,
            stride_res if has_res else 0,
            stride_y,
            stride_r if has_res else 0,
            hidden,
            eps,
        ),
        {"HAS_RESIDUAL": has_res, "HAS_WEIGHT": weight is not None, "BLOCK": cfg.block, "SINGLE_PASS": cfg.single_pass},
        cfg.num_warps,
    )


def forward(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The op's named surface: launch on arguments check_args accepted into a fresh output."""
    y = _alloc_y(x)
    launch_into(x, weight, eps, None, y, None)
    return y


def _forward_fused(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    y, r = _alloc_y_r(x)
    launch_into(x, weight, eps, residual, y, r)
    return y, r


def _alloc_y(x: torch.Tensor, *rest) -> torch.Tensor:
    return _alloc.empty(x.shape, x.dtype, x.device)


def _alloc_y_r(x: torch.Tensor, *rest) -> tuple[torch.Tensor, torch.Tensor]:
    return _alloc.empty(x.shape, x.dtype, x.device), _alloc.empty(x.shape, x.dtype, x.device)


@op_with_outputs("rms_norm", _alloc_y)
def _rms_norm_out_op(out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    launch_into(x, weight, eps, None, out, None)


@op_with_outputs("fused_add_rms_norm", _alloc_y_r, outs=("y", "r"))
def _fused_add_rms_norm_out_op(
    y: torch.Tensor, r: torch.Tensor, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> None:
    launch_into(x, weight, eps, residual, y, r)


def check_args(
    x, weight, eps, residual, x_name: str = "x", eps_name: str = "eps", weight_optional: bool = False
) -> None:
    """``x_name``/``eps_name``: what the caller calls them (vLLM's forms say ``input`` and ``epsilon``).
    ``weight_optional``: weight may be None (vLLM's forms; :func:`launch_into` then applies no scale)."""
    _checks.inference_only(**{x_name: x, "weight": weight, "residual": residual})
    _checks.tensor(x_name, x, dtypes=_checks.FLOAT_DTYPES, min_ndim=1, last_contiguous=True)
    if x.shape[-1] == 0:
        raise ValueError(f"{x_name} must have a non-empty last (hidden) dimension, got shape {tuple(x.shape)}")
    if weight is not None or not weight_optional:
        _checks.tensor("weight", weight, dtypes=_checks.FLOAT_DTYPES, ndim=1, last_contiguous=True)
        if weight.shape[0] != x.shape[-1]:
            raise ValueError(
                f"weight must have shape ({x.shape[-1]},) to match {x_name}'s hidden size, got {tuple(weight.shape)}"
            )
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not eps >= 0:
        raise ValueError(f"{eps_name} must be a non-negative float, got {eps!r}")
    if residual is not None:
        _checks.tensor("residual", residual, last_contiguous=True)
        _checks.same_dtype("residual", residual, x_name, x)
        _checks.shape_equal("residual", residual, tuple(x.shape), f"{x_name}'s shape")
    _checks.same_device(**{x_name: x, "weight": weight, "residual": residual})


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, *, residual: torch.Tensor | None = None):
    """RMSNorm over the last dimension.

    x         ``[..., hidden]`` float16/bfloat16/float32, contiguous in the last dimension.
    weight    ``[hidden]``, any of those dtypes.
    residual  optional, same shape and dtype as ``x``.

    Without ``residual`` returns ``y`` (x's shape and dtype, contiguous). With it returns ``(y, r)`` where
    ``r = x + residual`` rounded to x's dtype and ``y = rms_norm(r)``. Inputs are never modified. Mean of squares
    and rsqrt in float32, so float16 inputs near 65504 stay finite; one rounding at the store. A row holding
    NaN or +-inf comes out all NaN (eager PyTorch gives 0 for the finite elements of a row with an inf).
    """
    check_args(x, weight, eps, residual)
    eps = float(eps)
    if through_dispatcher(x, weight, residual):
        if residual is None:
            return torch.ops.tritonkit.rms_norm(x, weight, eps)
        return torch.ops.tritonkit.fused_add_rms_norm(x, residual, weight, eps)
    if residual is None:
        return forward(x, weight, eps)
    return _forward_fused(x, residual, weight, eps)
