"""rms_norm_quant_fp8 and plain fp8 quantization in vLLM 0.34.0's call forms: ``vllm._custom_ops``'s
``rms_norm_dynamic_per_token_quant``, ``rms_norm_per_block_quant`` and ``scaled_fp8_quant`` (same arguments, same
returns), and the ``torch.ops._C`` ops its compile passes substitute, ``rms_norm_static_fp8_quant`` and
``fused_add_rms_norm_static_fp8_quant`` (into ``result``). The forms with a residual add into it in place, as vLLM's.

:mod:`tritonkit.ops.vllm` re-exports them. Arguments are checked before anything is written. Where vLLM leaves a
case to an assert, these raise (int8 ``quant_dtype``: fp8 only). A 3-d input with TMA-aligned transposed scales
has each batch's ``[m, groups]`` block written where its buffer puts it (vLLM's kernel indexes that buffer as 2-d).
"""

from __future__ import annotations

import torch

from .. import _alloc, _checks, _fp8
from .._library import mutating_op, through_dispatcher
from . import api


def _quant_dtype(quant_dtype) -> None:
    if quant_dtype != _fp8.FP8_DTYPE:
        raise TypeError(f"quant_dtype must be torch.float8_e4m3fn (tritonkit's fp8 forms), got {quant_dtype!r}")


def _inplace_residual(residual, input, weight) -> None:
    if residual is not None:
        _checks.distinct_elements("residual", residual, "it is written in place")
        _checks.no_overlap("residual", residual, input=input, weight=weight)


@mutating_op("vllm_rms_norm_quant_fp8", ("out", "scales", "residual"))
def _fused_op(
    out: torch.Tensor,
    input: torch.Tensor,
    weight: torch.Tensor,
    scales: torch.Tensor | None,
    epsilon: float,
    scale: torch.Tensor | None,
    scale_ub: torch.Tensor | None,
    residual: torch.Tensor | None,
    quant: str,
    group_size: int,
) -> None:
    api.launch_into(input, weight, epsilon, residual, out, residual, scales, quant, scale, scale_ub, group_size)


def _launch(out, input, weight, scales, epsilon, scale, scale_ub, residual, quant: str, group_size: int) -> None:
    if through_dispatcher(out, input, weight, residual):
        torch.ops.tritonkit.vllm_rms_norm_quant_fp8(
            out, input, weight, scales, float(epsilon), scale, scale_ub, residual, quant, group_size
        )
    else:
        api.launch_into(
            input, weight, float(epsilon), residual, out, residual, scales, quant, scale, scale_ub, group_size
        )


def rms_norm_dynamic_per_token_quant(
    input: torch.Tensor,
    weight: torch.Tensor,
    epsilon: float,
    quant_dtype: torch.dtype,
    scale_ub: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(output, scales)``: ``output`` fp8 of input's shape, ``scales [rows, 1]`` float32, one dynamic scale per
    row ``max(min(amax, scale_ub) / 448, 1 / (448 * 512))``. With ``residual``, ``residual <- input + residual``
    (rounded to input's dtype) in place and the norm reads the float32 sum."""
    _quant_dtype(quant_dtype)
    api.check_args(input, weight, epsilon, residual, "token", None, scale_ub, 0, x_name="input", eps_name="epsilon")
    _inplace_residual(residual, input, weight)
    out = _alloc.empty(input.shape, _fp8.FP8_DTYPE, input.device)
    scales = _alloc.empty(api.scales_shape(input.shape, "token", 1), torch.float32, input.device)
    _launch(out, input, weight, scales, epsilon, None, scale_ub, residual, "token", 1)
    return out, scales


def _block_scales(input: torch.Tensor, group: int, is_scale_transposed: bool, tma_alignment: int) -> torch.Tensor:
    """vLLM's scales buffer of rms_norm_per_block_quant: ``[rows, groups]``; transposed, a ``[groups, rows]``
    buffer seen as its transpose, or with ``tma_alignment`` rows padded to a multiple of it."""
    rows = input.numel() // input.shape[-1]
    groups = input.shape[-1] // group
    if not is_scale_transposed:
        return _alloc.empty((rows, groups), torch.float32, input.device)
    if tma_alignment == 0:
        return _alloc.empty((groups, rows), torch.float32, input.device).t()
    m = input.shape[-2]
    aligned = -(-m // tma_alignment) * tma_alignment
    shape = (*input.shape[:-2], m, groups)
    stride = (1, aligned) if input.dim() == 2 else (aligned * groups, 1, aligned)
    buf = _alloc.empty((max(rows // m, 1) * aligned * groups,), torch.float32, input.device)
    return buf.as_strided(shape, stride)


def rms_norm_per_block_quant(
    input: torch.Tensor,
    weight: torch.Tensor,
    epsilon: float,
    quant_dtype: torch.dtype,
    group_size: list[int],
    scale_ub: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    is_scale_transposed: bool = False,
    tma_alignment: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(output, scales)`` with one dynamic scale per ``group_size[1]`` (64 or 128) columns of each row, in
    vLLM's layouts: ``[rows, groups]``, column-major (``is_scale_transposed``), or column-major with the rows padded
    to ``tma_alignment`` (4). Residual as in :func:`rms_norm_dynamic_per_token_quant`."""
    _quant_dtype(quant_dtype)
    if not isinstance(group_size, (list, tuple)) or len(group_size) != 2:
        raise ValueError(f"group_size must be a list of two ints [1, group], got {group_size!r}")
    if tma_alignment not in (0, 4):
        raise ValueError(f"tma_alignment must be 0 or 4, got {tma_alignment!r}")
    group = group_size[1]
    api.check_args(input, weight, epsilon, residual, "group", None, scale_ub, group, x_name="input", eps_name="epsilon")
    if is_scale_transposed and tma_alignment and input.dim() < 2:
        raise ValueError(f"input must have at least 2 dimensions with tma_alignment, got shape {tuple(input.shape)}")
    if is_scale_transposed and tma_alignment and input.dim() > 3:
        raise ValueError(f"input must be 2-d or 3-d with tma_alignment, got shape {tuple(input.shape)}")
    _inplace_residual(residual, input, weight)
    out = _alloc.empty(input.shape, _fp8.FP8_DTYPE, input.device)
    scales = _block_scales(input, group, bool(is_scale_transposed), tma_alignment)
    _launch(out, input, weight, scales, epsilon, None, scale_ub, residual, "group", group)
    return out, scales


def _result(result, input, name: str = "result") -> None:
    _checks.inference_only(**{name: result})
    _checks.tensor(name, result, dtypes=(_fp8.FP8_DTYPE,), last_contiguous=True)
    _checks.shape_equal(name, result, tuple(input.shape), "input's shape")
    _checks.same_device(**{name: result, "input": input})
    _checks.distinct_elements(name, result)


def rms_norm_static_fp8_quant(
    result: torch.Tensor, input: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, epsilon: float
) -> None:
    """``result = fp8(rms_norm(input) * weight * (1 / scale))`` (``torch.ops._C.rms_norm_static_fp8_quant``);
    ``scale`` a float32 tensor of one element."""
    api.check_args(input, weight, epsilon, None, "static", scale, None, 0, x_name="input", eps_name="epsilon")
    _result(result, input)
    _checks.no_overlap("result", result, input=input, weight=weight, scale=scale)
    _launch(result, input, weight, None, epsilon, scale, None, None, "static", 1)


def fused_add_rms_norm_static_fp8_quant(
    result: torch.Tensor,
    input: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    scale: torch.Tensor,
    epsilon: float,
) -> None:
    """``residual <- input + residual`` (rounded to input's dtype) in place, then ``result = fp8(rms_norm(residual)
    * weight * (1 / scale))`` (``torch.ops._C.fused_add_rms_norm_static_fp8_quant``); input is not written."""
    if residual is None:
        raise TypeError("residual must be a torch.Tensor, got NoneType")
    api.check_args(input, weight, epsilon, residual, "static", scale, None, 0, x_name="input", eps_name="epsilon")
    _result(result, input)
    _inplace_residual(residual, input, weight)
    _checks.no_overlap("result", result, input=input, residual=residual, weight=weight, scale=scale)
    _launch(result, input, weight, None, epsilon, scale, None, residual, "static", 1)


# -- scaled_fp8_quant -----------------------------------------------------------------------------------------------
@mutating_op("vllm_scaled_fp8_quant", ("output", "scale"))
def _quant_op(
    output: torch.Tensor,
    input: torch.Tensor,
    scale: torch.Tensor,
    scale_ub: torch.Tensor | None,
    mode: str,
    grid_scale: list[int],
) -> None:
    api.quantize_fp8(
        input, mode, scale if mode == "static" else None, scale_ub, output, scale, tuple(grid_scale) or None
    )


def _grid_scale(scale: torch.Tensor, rows: int, cols: int, group_shape) -> tuple[int, int, int, int] | None:
    """``(group_m, group_n, row stride, column stride)`` of a static scale that is not one element, as vLLM's
    static_scaled_fp8_quant reads it: 1-d with an explicit ``group_shape`` (per channel ``(-1, 1)`` or per token
    ``(1, -1)``), 2-d ``[rows / gm, cols / gn]`` (``group_shape`` optional, and then it must agree)."""
    if scale.dim() == 0 or scale.numel() == 1:
        return None
    if group_shape is not None:
        if not isinstance(group_shape, (tuple, list)) or len(group_shape) != 2:
            raise ValueError(f"group_shape must be a pair (group_m, group_n), got {group_shape!r}")
        gm, gn = (rows if group_shape[0] == -1 else group_shape[0]), (cols if group_shape[1] == -1 else group_shape[1])
        if not all(isinstance(g, int) and g > 0 for g in (gm, gn)) or rows % gm or cols % gn:
            raise ValueError(f"group_shape {tuple(group_shape)} must divide input's shape ({rows}, {cols})")
    if scale.dim() == 1:
        if group_shape is None:
            raise ValueError(
                "a 1-d scale needs group_shape: (-1, 1) per channel or (1, -1) per token (vLLM's rule, so that "
                "num_tokens == hidden is not ambiguous)"
            )
        m, n = rows // gm, cols // gn
        if scale.numel() != m * n or (m != 1 and n != 1):
            raise ValueError(
                f"scale must hold one value per group of group_shape {tuple(group_shape)} in one dimension "
                f"({m} x {n} groups), got shape {tuple(scale.shape)}"
            )
        return (gm, gn, scale.stride(0), 0) if n == 1 else (gm, gn, 0, scale.stride(0))
    if scale.dim() != 2:
        raise ValueError(f"scale must be 0-d, 1-d or 2-d, got shape {tuple(scale.shape)}")
    m, n = scale.shape
    if m == 0 or n == 0 or rows % m or cols % n:
        raise ValueError(f"scale's shape {tuple(scale.shape)} must divide input's shape ({rows}, {cols})")
    if group_shape is not None and (gm, gn) != (rows // m, cols // n):
        raise ValueError(f"group_shape {tuple(group_shape)} does not match scale's shape {tuple(scale.shape)}")
    return rows // m, cols // n, scale.stride(0), scale.stride(1)


def scaled_fp8_quant(
    input: torch.Tensor,
    scale: torch.Tensor | None = None,
    num_token_padding: int | None = None,
    scale_ub: torch.Tensor | None = None,
    use_per_token_if_dynamic: bool = False,
    output: torch.Tensor | None = None,
    group_shape: tuple[int, int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(output, scale)``: ``input [M, N]`` in float8_e4m3fn.

    Static (``scale`` given): ``fp8(x * (1 / scale))``, ``scale`` one element, or per channel / per token / a 2-d
    grid of group scales (see ``group_shape``); the scale passed is returned. Dynamic per tensor: ``scale [1] =
    max over rows of amax / 448`` (no floor: an all-zero input gives scale 0, as vLLM's), applied the same way.
    Dynamic per token (``use_per_token_if_dynamic``): ``scale [rows, 1] = max(min(amax, scale_ub) / 448, 1 / (448
    * 512))`` and ``fp8(x / scale)``. ``num_token_padding`` pads output's rows (and per-token scale's) to at least
    that many; the padding is not written. ``output``: the caller's fp8 ``[M, N]`` buffer (no padding then).
    """
    if not isinstance(input, torch.Tensor) or input.dim() != 2:
        raise ValueError(f"input must be a 2-d torch.Tensor [M, N], got {getattr(input, 'shape', type(input))}")
    api.check_args(input, None, 0.0, None, "token", None, None, 0, "input")
    rows, cols = input.shape
    grid = None
    if scale is not None:
        _checks.tensor("scale", scale, dtypes=(torch.float32,))
        _checks.same_device(input=input, scale=scale)
        grid = _grid_scale(scale, rows, cols, group_shape)
    if scale_ub is not None:
        _fp8.scale_tensor("scale_ub", scale_ub, input.device)
    if num_token_padding is not None and (
        isinstance(num_token_padding, bool) or not isinstance(num_token_padding, int)
    ):
        raise TypeError(f"num_token_padding must be an int or None, got {num_token_padding!r}")
    shape = (max(num_token_padding, rows), cols) if num_token_padding else (rows, cols)
    if output is None:
        output = _alloc.empty(shape, _fp8.FP8_DTYPE, input.device)
    else:
        if num_token_padding is not None:
            raise ValueError("num_token_padding must be None when output is passed (padding is not supported then)")
        _result(output, input, "output")
        _checks.no_overlap("output", output, input=input, scale=scale, scale_ub=scale_ub)
    q = output[:rows]
    if scale is not None:
        mode, s = "static", scale
    elif use_per_token_if_dynamic:
        mode, s = "token", _alloc.empty((shape[0], 1), torch.float32, input.device)
    else:
        mode, s = "tensor", torch.zeros((1,), dtype=torch.float32, device=input.device)
    ub = scale_ub if mode == "token" else None
    if through_dispatcher(q, input, s):
        torch.ops.tritonkit.vllm_scaled_fp8_quant(q, input, s, ub, mode, list(grid or ()))
    else:
        api.quantize_fp8(input, mode, s if mode == "static" else None, ub, q, s, grid)
    return output, s
