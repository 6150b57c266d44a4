"""silu_and_mul: the gated activation of SwiGLU MLPs, ``silu(x[..., :d]) * x[..., d:]``."""

from __future__ import annotations

import torch

from .. import _alloc, _checks
from .._ints import cdiv
from .._launch import launch
from .._library import op_with_outputs, through_dispatcher
from .config import silu_and_mul_config
from .kernel import _silu_and_mul_fwd_kernel


def forward(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``out`` (the caller's ``[..., d]``, rows addressable by one stride) or a fresh contiguous output."""
    d = x.shape[-1] // 2
    y = out if out is not None else _alloc_y(x)
    if y.numel() == 0:
        return y
    n_rows = y.numel() // d
    x, stride_x = _checks.rows_and_stride("x", x)
    y2, stride_y = _checks.rows_and_stride("out", y, output=True)
    cfg = silu_and_mul_config(d, x.element_size())
    grid = (cdiv(n_rows, cfg.block_m), cdiv(d, cfg.block_n))
    launch(
        _silu_and_mul_fwd_kernel,
        grid,
        (x, y2, n_rows, d, stride_x, stride_y),
        {"BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n},
        cfg.num_warps,
    )
    return y


def _alloc_y(x: torch.Tensor) -> torch.Tensor:
    return _alloc.empty((*x.shape[:-1], x.shape[-1] // 2), x.dtype, x.device)


@op_with_outputs("silu_and_mul", _alloc_y)
def _silu_and_mul_out_op(out: torch.Tensor, x: torch.Tensor) -> None:
    forward(x, out)


def check_args(x, x_name: str = "x") -> None:
    """The op's named surface: every argument checked on metadata alone (no device sync), a ValueError or TypeError
    naming the bad one; nothing is written."""
    _checks.inference_only(**{x_name: x})
    _checks.tensor(x_name, x, dtypes=_checks.FLOAT_DTYPES, min_ndim=1, last_contiguous=True)
    if x.shape[-1] % 2:
        raise ValueError(
            f"{x_name} must have an even last dimension (gate and up halves, [..., 2d]), got shape {tuple(x.shape)}"
        )


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """SwiGLU's activation: ``y = silu(x[..., :d]) * x[..., d:]`` with ``silu(g) = g / (1 + exp(-g))``.

    x   ``[..., 2d]`` float16/bfloat16/float32, contiguous in the last dimension (leading dims may be strided):
        the gate projection in the first d columns, the up projection in the last d.

    Returns ``y [..., d]``, x's dtype, contiguous. Computed in float32 with one rounding at the store; NaN and
    inf propagate elementwise as in ``torch.nn.functional.silu(g) * u`` (``silu(-inf)`` is NaN, ``silu(+inf)`` inf).
    """
    check_args(x)
    if through_dispatcher(x):
        return torch.ops.tritonkit.silu_and_mul(x)
    return forward(x)
