"""rms_norm_quant_fp8: RMSNorm (optionally after a residual add) straight into float8_e4m3fn, by a static scale, one
dynamic scale per token, or one per group of columns, with vLLM's rounding points, clamping and scale layouts. The
same kernel with the norm off is plain fp8 quantization (:func:`quantize_fp8`, vLLM's ``scaled_fp8_quant``)."""

from __future__ import annotations

import struct

import torch

from .. import _alloc, _checks, _fp8
from .._fp8_jit import fused_fma
from .._launch import launch
from .._library import op_with_outputs, through_dispatcher
from .config import early_weight, rms_norm_quant_config
from .kernel import _rms_norm_quant_fp8_kernel

#: the ``quant`` modes and the kernel's QUANT for each
QUANT_MODES = {"static": 0, "token": 1, "group": 2}
_TENSOR_AMAX, _GRID = 3, 4
_F32_PACK = struct.Struct("f")


def _f32(v: float) -> float:
    """``v`` rounded to float32: the kernel adds eps as a float32 (vLLM's), under the interpreter too."""
    return _F32_PACK.unpack(_F32_PACK.pack(v))[0]


def _scale_strides(s: torch.Tensor | None, n_rows: int) -> tuple[int, int, int, int]:
    """``(stride_sb, stride_st, stride_sg, rows_per_batch)`` of a scales output ``[rows, groups]`` or ``[batch,
    rows per batch, groups]`` (vLLM's TMA-aligned layout of a 3-d input): where row ``t``'s group ``g`` is."""
    if s is None:
        return 0, 0, 0, max(n_rows, 1)
    if s.dim() == 3:
        return s.stride(0), s.stride(1), s.stride(2), s.shape[1]
    if s.dim() == 2:
        return 0, s.stride(0), s.stride(1), max(n_rows, 1)
    return 0, s.stride(0) if s.dim() else 0, 0, max(n_rows, 1)


def _run(
    x,
    weight,
    eps,
    residual,
    q,
    r,
    s,
    mode: int,
    scale,
    scale_ub,
    group_size: int,
    round_residual: bool,
    grid_scale: tuple[int, int, int, int] = (1, 1, 0, 0),
    zero_inv: bool = False,
) -> None:
    hidden = x.shape[-1]
    n_rows = x.numel() // hidden if hidden else 0
    if n_rows == 0:
        return
    norm = weight is not None
    cfg = rms_norm_quant_config(hidden, x.element_size())
    x, stride_x = _checks.rows_and_stride("x", x)
    q, stride_q = _checks.rows_and_stride("out", q, output=True)
    has_res = residual is not None
    stride_res = stride_r = 0
    if has_res:
        residual, stride_res = _checks.rows_and_stride("residual", residual)
        r, stride_r = _checks.rows_and_stride("residual", r, output=True)
    sb, st, sg, per_batch = _scale_strides(s if mode in (1, 2) else None, n_rows)
    group_m, group_n = 1, 1
    if mode == _GRID:
        group_m, group_n, st, sg = grid_scale
    early_w, maxnreg = early_weight(cfg, norm, mode in (QUANT_MODES["token"], QUANT_MODES["group"]))
    launch(
        _rms_norm_quant_fp8_kernel,
        (n_rows,),
        (
            x,
            residual if has_res else x,
            weight if norm else x,
            q,
            r if has_res else q,
            s if s is not None else x,
            scale if scale is not None else x,
            scale_ub if scale_ub is not None else x,
            stride_x,
            stride_res,
            stride_q,
            stride_r,
            sb,
            st,
            sg,
            per_batch,
            group_m,
            group_n,
            hidden,
            _f32(eps),
        ),
        {
            "NORM": norm,
            "HAS_RESIDUAL": has_res,
            "ROUND_RESIDUAL": round_residual,
            "QUANT": mode,
            "GROUP_SIZE": group_size if mode == 2 else 1,
            "HAS_UB": scale_ub is not None,
            "BLOCK": cfg.block,
            "SINGLE_PASS": cfg.single_pass,
            "EARLY_W": early_w,
            "FUSED_FMA": fused_fma(),
            "ZERO_INV": zero_inv,
        },
        cfg.num_warps,
        maxnreg=maxnreg,
    )


def launch_into(x, weight, eps, residual, q, r, s, quant: str, scale, scale_ub, group_size: int) -> None:
    """The op's named surface for callers with their own buffers (vLLM's forms): ``q`` fp8 of x's shape, ``r`` the
    residual output (may be ``residual`` itself: each row is read before it is written), ``s`` the scales output
    (token: one float32 per row; group: ``[rows, hidden / group_size]`` or ``[batch, rows, groups]``, any strides).
    The static mode normalizes the residual sum rounded to x's dtype (vLLM's static forms), the dynamic modes the
    float32 sum (its dynamic forms)."""
    _run(x, weight, eps, residual, q, r, s, QUANT_MODES[quant], scale, scale_ub, group_size, quant == "static")


def scales_shape(x_shape, quant: str, group_size: int) -> tuple[int, ...] | None:
    """The scales output of a fresh call: ``[rows, 1]`` per token, ``[rows, hidden / group_size]`` per group."""
    rows = 1
    for n in x_shape[:-1]:
        rows *= n
    if quant == "token":
        return (rows, 1)
    if quant == "group":
        return (rows, x_shape[-1] // group_size)
    return None


def _alloc_scales(x, quant: str, group_size: int, transposed: bool, empty=_alloc.empty) -> torch.Tensor:
    shape = scales_shape(x.shape, quant, group_size)
    if shape is None:
        return empty((0,), torch.float32, x.device)
    if transposed:
        return empty(shape[::-1], torch.float32, x.device).t()
    return empty(shape, torch.float32, x.device)


def _alloc_outputs(x, weight, eps, residual, quant, scale, scale_ub, group_size, transposed):
    """Fresh ``(q, scales, r)`` of :func:`forward`."""
    q = _alloc.empty(x.shape, _fp8.FP8_DTYPE, x.device)
    s = _alloc_scales(x, quant, group_size, transposed)
    r = _alloc.empty(x.shape if residual is not None else (0,), x.dtype, x.device)
    return q, s, r


def forward(x, weight, eps, residual, quant, scale, scale_ub, group_size, transposed):
    """The op's named surface: launch on arguments check_args accepted into fresh outputs ``(q, scales, r)``
    (``scales`` empty for the static mode, ``r`` empty without a residual)."""
    q, s, r = _alloc_outputs(x, weight, eps, residual, quant, scale, scale_ub, group_size, transposed)
    launch_into(x, weight, eps, residual, q, r if residual is not None else None, s, quant, scale, scale_ub, group_size)
    return q, s, r


@op_with_outputs("rms_norm_quant_fp8", _alloc_outputs, outs=("q", "scales", "r"))
def _rms_norm_quant_fp8_out_op(
    q: torch.Tensor,
    scales: torch.Tensor,
    r: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    residual: torch.Tensor | None,
    quant: str,
    scale: torch.Tensor | None,
    scale_ub: torch.Tensor | None,
    group_size: int,
    transposed: bool,
) -> None:
    r = r if residual is not None else None
    launch_into(x, weight, eps, residual, q, r, scales, quant, scale, scale_ub, group_size)


def check_args(
    x,
    weight,
    eps,
    residual,
    quant: str,
    scale,
    scale_ub,
    group_size: int,
    x_name: str = "x",
    eps_name: str = "eps",
    weight_name: str = "weight",
) -> None:
    """The op's named surface: every argument checked on metadata alone (no device sync), a ValueError or
    TypeError naming the bad one; nothing is written. ``weight=None`` checks plain quantization's arguments."""
    _checks.inference_only(**{x_name: x, weight_name: weight, "residual": residual})
    _checks.tensor(x_name, x, dtypes=_checks.FLOAT_DTYPES, min_ndim=1, last_contiguous=True)
    if x.shape[-1] == 0:
        raise ValueError(f"{x_name} must have a non-empty last (hidden) dimension, got shape {tuple(x.shape)}")
    if quant not in QUANT_MODES:
        raise ValueError(f"quant must be one of {', '.join(map(repr, QUANT_MODES))}, got {quant!r}")
    if weight is not None:
        _checks.tensor(weight_name, weight, dtypes=_checks.FLOAT_DTYPES, ndim=1, last_contiguous=True)
        if weight.shape[0] != x.shape[-1]:
            raise ValueError(
                f"{weight_name} must have shape ({x.shape[-1]},) to match {x_name}'s hidden size, got "
                f"{tuple(weight.shape)}"
            )
        if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not 0 <= eps < float("inf"):
            raise ValueError(f"{eps_name} must be a finite non-negative float, got {eps!r}")
    if residual is not None:
        _checks.tensor("residual", residual, last_contiguous=True)
        _checks.same_dtype("residual", residual, x_name, x)
        _checks.shape_equal("residual", residual, tuple(x.shape), f"{x_name}'s shape")
    _checks.same_device(**{x_name: x, weight_name: weight, "residual": residual})
    if quant == "static":
        if scale is None:
            raise ValueError("scale is required with quant='static' (the float32 scale y is divided by)")
        _fp8.scale_tensor("scale", scale, x.device)
        if scale_ub is not None:
            raise ValueError("scale_ub bounds dynamic scales only; it must be None with quant='static'")
    elif scale is not None:
        raise ValueError(f"scale must be None with quant={quant!r} (the op computes the scales)")
    if scale_ub is not None:
        _fp8.scale_tensor("scale_ub", scale_ub, x.device)
    if quant == "group":
        _fp8.group_size("group_size", group_size, x.shape[-1], f"{x_name}'s hidden size")


def rms_norm_quant_fp8(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    *,
    quant: str = "token",
    scale: torch.Tensor | None = None,
    scale_ub: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    group_size: int = 128,
    transposed_scales: bool = False,
):
    """RMSNorm over the last dimension into float8_e4m3fn, as vLLM computes it.

    x          ``[..., hidden]`` float16/bfloat16/float32, contiguous in the last dimension.
    weight     ``[hidden]``, any of those dtypes.
    quant      "static": ``q = fp8(y * (1 / scale))`` with ``scale`` a float32 tensor of one element.
               "token": one scale per row, ``max(min(amax, scale_ub) / 448, 1 / (448 * 512))``, ``q = fp8(y /
               scale)``; "group": the same scale per ``group_size`` (64 or 128, dividing hidden) columns, ``q =
               fp8(y * (1 / scale))`` (vLLM's rms_norm_per_block_quant multiplies by the reciprocal).
    scale_ub   optional float32 tensor of one element bounding the amax of the dynamic modes.
    residual   optional, x's shape and dtype: the norm reads ``x + residual``, returned rounded to x's dtype as
               ``r``. The static mode normalizes that rounded sum, the dynamic modes the float32 sum (as vLLM's
               ``fused_add_rms_norm_static_fp8_quant`` and ``rms_norm_dynamic_per_token_quant`` do).
    transposed_scales  group mode: scales stored column-major (a ``[groups, rows]`` buffer seen as its
               transpose), the layout DeepGEMM reads.

    Dynamic modes: ``y = (x * rstd rounded to x's dtype) * weight``, rounded to x's dtype (the two rounding points
    of vLLM's dynamic forms); "static": ``x * rstd * weight`` in float32, rounded to x's dtype once (its static
    forms); ``rstd = 1 / sqrt(mean(x^2) + eps)`` from a float64 sum. Values are clamped to +-448 (NaN to +448) and
    rounded to nearest even. Returns ``(q, scales)`` (``scales``: ``[rows, 1]``, ``[rows, hidden / group_size]``, or for
    "static" the ``scale`` passed), and ``r`` third with a residual. Inputs are never modified.
    """
    check_args(x, weight, eps, residual, quant, scale, scale_ub, group_size)
    eps = float(eps)
    if through_dispatcher(x, weight, residual, scale, scale_ub):
        q, s, r = torch.ops.tritonkit.rms_norm_quant_fp8(
            x, weight, eps, residual, quant, scale, scale_ub, group_size, bool(transposed_scales)
        )
    else:
        # forward's two steps, one call fewer on the host path
        q, s, r = _alloc_outputs(x, weight, eps, residual, quant, scale, scale_ub, group_size, bool(transposed_scales))
        launch_into(
            x, weight, eps, residual, q, r if residual is not None else None, s, quant, scale, scale_ub, group_size
        )
    s = scale if quant == "static" else s
    return (q, s) if residual is None else (q, s, r)


# -- plain quantization ---------------------------------------------------------------------------------------------
def zero_scale_gives_zero(x: torch.Tensor, grid_scale: tuple[int, int, int, int] | None) -> bool:
    """Whether vLLM's static scaled_fp8_quant takes a zero scale's reciprocal as 0 (codes 0) rather than inf (codes
    +-448, NaN for a zero): its vectorized paths do, when a scale's column group is a multiple of 16 columns (the
    whole row for a per-tensor or per-token scale); its scalar path for narrower groups divides 1 by the scale."""
    group_n = grid_scale[1] if grid_scale else x.shape[-1]
    return group_n % 16 == 0


def quantize_fp8(
    x: torch.Tensor,
    mode: str,
    scale: torch.Tensor | None = None,
    scale_ub: torch.Tensor | None = None,
    q: torch.Tensor | None = None,
    s: torch.Tensor | None = None,
    grid_scale: tuple[int, int, int, int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The op's named surface for plain quantization of ``x [..., hidden]`` (checked by the caller), vLLM's
    ``scaled_fp8_quant``: ``mode`` "static" (``q = fp8(x * (1 / scale))``; with ``grid_scale = (group_m, group_n,
    row stride, column stride)`` the scale of element ``(i, j)`` is ``scale[i // group_m, j // group_n]``),
    "tensor" (one dynamic scale, the max over rows of ``amax / 448``, applied as a static one), "token" (one per
    row, as the norm's) or "group" (per 128 columns). ``q`` and ``s`` are the outputs, allocated when None;
    returns them."""
    if q is None:
        q = _alloc.empty(x.shape, _fp8.FP8_DTYPE, x.device)
    if mode == "tensor":
        # vLLM zeroes the scale before the atomic max of the rows' amax / 448
        s = torch.zeros((1,), dtype=torch.float32, device=x.device) if s is None else s.zero_()
        _run(x, None, 0.0, None, q, None, s, _TENSOR_AMAX, None, None, 1, False)
        _run(x, None, 0.0, None, q, None, None, 0, s, None, 1, False, zero_inv=True)
        return q, s
    if mode == "static":
        mode_id, grid = (_GRID, grid_scale) if grid_scale else (0, (1, 1, 0, 0))
        _run(
            x,
            None,
            0.0,
            None,
            q,
            None,
            None,
            mode_id,
            scale,
            None,
            1,
            False,
            grid,
            zero_inv=zero_scale_gives_zero(x, grid_scale),
        )
        return q, scale
    group = 128 if mode == "group" else 1
    if s is None:
        s = _alloc.empty(scales_shape(x.shape, mode, group), torch.float32, x.device)
    _run(x, None, 0.0, None, q, None, s, QUANT_MODES[mode], None, scale_ub, group, False)
    return q, s
