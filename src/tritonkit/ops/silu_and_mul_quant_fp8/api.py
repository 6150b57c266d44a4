"""silu_and_mul_quant_fp8: SwiGLU's activation ``silu(x[..., :d]) * x[..., d:]`` straight into float8_e4m3fn, by a
static scale, one dynamic scale per token, or one per group of columns (DeepSeek-V3's 128-column activation
scales, plain or column-major), at vLLM's rounding points and with its clamping."""

from __future__ import annotations

import torch

from .. import _alloc, _checks, _fp8
from .._fp8_jit import fused_fma
from .._ints import next_power_of_2
from .._launch import launch
from .._library import op_with_outputs, through_dispatcher
from . import config
from .config import silu_and_mul_quant_config, token_split
from .kernel import _silu_and_mul_quant_fp8_kernel, _silu_and_mul_quant_fp8_split_kernel

#: the ``quant`` modes and the kernel's QUANT for each
QUANT_MODES = {"static": 0, "token": 1, "group": 2}


def scales_shape(x_shape, quant: str, group_size: int) -> tuple[int, ...] | None:
    """The scales output of a fresh call: ``[rows, 1]`` per token, ``[rows, d / group_size]`` per group."""
    rows = 1
    for n in x_shape[:-1]:
        rows *= n
    if quant == "token":
        return (rows, 1)
    if quant == "group":
        return (rows, x_shape[-1] // 2 // group_size)
    return None


def launch_into(x, q, s, quant: str, scale, scale_ub, group_size: int, ub_on_scale: bool) -> None:
    """The op's named surface for callers with their own buffers (vLLM's forms): ``q`` fp8 ``[..., d]`` (rows
    addressable by one stride), ``s`` the scales (token: one float32 per row at ``s.stride(0)``; group: ``[rows,
    d / group_size]``, any strides). ``ub_on_scale``: ``scale_ub`` bounds the scale (vLLM's
    silu_and_mul_per_block_quant) rather than the amax."""
    d = x.shape[-1] // 2
    n_rows = q.numel() // d if d else 0
    if n_rows == 0:
        return
    x, stride_x = _checks.rows_and_stride("x", x)
    q2, stride_q = _checks.rows_and_stride("out", q, output=True)
    st = s.stride(0) if s is not None and s.dim() else 0
    sg = s.stride(1) if s is not None and s.dim() == 2 else 0
    if quant == "token":
        split = token_split(n_rows, d, x.element_size())
        if split is not None:
            _launch_split(x, q2, s, scale_ub, ub_on_scale, n_rows, d, stride_x, stride_q, st, split)
            return
    cfg = silu_and_mul_quant_config(d, x.element_size(), quant, group_size)
    launch(
        _silu_and_mul_quant_fp8_kernel,
        (-(-n_rows // cfg.block_m), cfg.grid_n),
        (
            x,
            q2,
            s if s is not None else x,
            scale if scale is not None else x,
            scale_ub if scale_ub is not None else x,
            n_rows,
            d,
            stride_x,
            stride_q,
            st,
            sg,
        ),
        {
            "QUANT": QUANT_MODES[quant],
            "GROUP_SIZE": group_size if quant == "group" else 1,
            "HAS_UB": scale_ub is not None,
            "UB_ON_SCALE": ub_on_scale,
            "BLOCK_M": cfg.block_m,
            "BLOCK_N": cfg.block_n,
            "NUM_CHUNKS": cfg.num_chunks,
            "SINGLE_PASS": cfg.single_pass,
            "FUSED_FMA": fused_fma(),
            "FAST_EXP": config.FAST_EXP,
        },
        cfg.num_warps,
    )


def _launch_split(
    x, q, s, scale_ub, ub_on_scale: bool, n_rows: int, d: int, stride_x: int, stride_q: int, stride_s: int, split
) -> None:
    """Per-token rows split across ``split.splits`` programs each (config.token_split): the parts' amaxes into a
    scratch of ``[n_rows, splits]`` float32, then the scales and codes (the first launch's programmatic dependent
    on sm_90)."""
    parts = _alloc.empty((n_rows, split.splits), torch.float32, x.device)
    pdl = config.token_split_pdl(x.device)
    args = (x, q, s, parts, scale_ub if scale_ub is not None else x, d, stride_x, stride_q, stride_s)
    common = {
        "HAS_UB": scale_ub is not None,
        "UB_ON_SCALE": ub_on_scale,
        "BLOCK_N": split.block_n,
        "SPLITS": split.splits,
        "SPLITS_P2": next_power_of_2(split.splits),
        "PDL": pdl,
        "FUSED_FMA": fused_fma(),
        "FAST_EXP": config.FAST_EXP,
    }
    grid = (n_rows, split.splits)
    launch(_silu_and_mul_quant_fp8_split_kernel, grid, args, {"AMAX": True, **common}, split.num_warps)
    launch(_silu_and_mul_quant_fp8_split_kernel, grid, args, {"AMAX": False, **common}, split.num_warps, launch_pdl=pdl)


def _alloc_scales(x, quant: str, group_size: int, transposed: bool, empty=_alloc.empty) -> torch.Tensor:
    shape = scales_shape(x.shape, quant, group_size)
    if shape is None:
        return empty((0,), torch.float32, x.device)
    if transposed:
        return empty(shape[::-1], torch.float32, x.device).t()
    return empty(shape, torch.float32, x.device)


def _alloc_outputs(x, quant, scale, scale_ub, group_size, transposed):
    """Fresh ``(q, scales)`` of :func:`forward`."""
    q = _alloc.empty((*x.shape[:-1], x.shape[-1] // 2), _fp8.FP8_DTYPE, x.device)
    return q, _alloc_scales(x, quant, group_size, transposed)


def forward(x, quant, scale, scale_ub, group_size, transposed):
    """The op's named surface: launch on arguments check_args accepted into fresh ``(q, scales)`` (``scales``
    empty for the static mode). The group mode's ``scale_ub`` bounds the scale, the token mode's the amax."""
    q, s = _alloc_outputs(x, quant, scale, scale_ub, group_size, transposed)
    launch_into(x, q, s if quant != "static" else None, quant, scale, scale_ub, group_size, quant == "group")
    return q, s


@op_with_outputs("silu_and_mul_quant_fp8", _alloc_outputs, outs=("q", "scales"))
def _silu_and_mul_quant_fp8_out_op(
    q: torch.Tensor,
    scales: torch.Tensor,
    x: torch.Tensor,
    quant: str,
    scale: torch.Tensor | None,
    scale_ub: torch.Tensor | None,
    group_size: int,
    transposed: bool,
) -> None:
    launch_into(x, q, scales if quant != "static" else None, quant, scale, scale_ub, group_size, quant == "group")


def check_args(x, quant: str, scale, scale_ub, group_size: int, x_name: str = "x") -> None:
    """The op's named surface: every argument checked on metadata alone (no device sync), a ValueError or TypeError
    naming the bad one; nothing is written."""
    _checks.inference_only(**{x_name: x})
    _checks.tensor(x_name, x, dtypes=_checks.FLOAT_DTYPES, min_ndim=1, last_contiguous=True)
    if x.shape[-1] % 2:
        raise ValueError(
            f"{x_name} must have an even last dimension (gate and up halves, [..., 2d]), got shape {tuple(x.shape)}"
        )
    if quant not in QUANT_MODES:
        raise ValueError(f"quant must be one of {', '.join(map(repr, QUANT_MODES))}, got {quant!r}")
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
        _fp8.group_size("group_size", group_size, x.shape[-1] // 2, f"d ({x_name}'s last dimension / 2)")


def silu_and_mul_quant_fp8(
    x: torch.Tensor,
    *,
    quant: str = "group",
    scale: torch.Tensor | None = None,
    scale_ub: torch.Tensor | None = None,
    group_size: int = 128,
    transposed_scales: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """SwiGLU's activation into float8_e4m3fn, as vLLM computes it.

    x          ``[..., 2d]`` float16/bfloat16/float32, contiguous in the last dimension (leading dims may be
               strided): the gate projection in the first d columns, the up projection in the last d.
    quant      "static": ``q = fp8(y * (1 / scale))``, ``scale`` a float32 tensor of one element. "token": one
               scale per row, ``max(min(amax, scale_ub) / 448, 1 / (448 * 512))``, ``q = fp8(y / scale)``.
               "group": one per ``group_size`` (64 or 128, dividing d) columns, ``max(min(amax / 448, scale_ub),
               1 / (448 * 512))`` (vLLM's silu_and_mul_per_block_quant bounds the scale, not the amax).
    transposed_scales  group mode: scales column-major (a ``[groups, rows]`` buffer seen as its transpose), the
               layout DeepGEMM and DeepSeek-V3's MoE read.

    ``y`` is vLLM's: for static and per token ``(g / (1 + exp(-g)))`` rounded to x's dtype, times u, rounded again
    (its silu_and_mul, then its quantization); per group ``g * (1 / (1 + exp(-g))) * u`` in float32 (its fused
    per-block kernel). The outputs are those of ``exp`` correctly rounded to float32. Values are clamped to +-448
    (NaN to +448) and rounded to nearest even. Returns ``(q [..., d], scales)``: ``[rows, 1]``, ``[rows, d /
    group_size]``, or for "static" the ``scale`` passed.
    """
    check_args(x, quant, scale, scale_ub, group_size)
    transposed = bool(transposed_scales)
    if through_dispatcher(x, scale, scale_ub):
        q, s = torch.ops.tritonkit.silu_and_mul_quant_fp8(x, quant, scale, scale_ub, group_size, transposed)
    else:
        # forward's two steps, one call fewer on the host path
        q, s = _alloc_outputs(x, quant, scale, scale_ub, group_size, transposed)
        launch_into(x, q, s if quant != "static" else None, quant, scale, scale_ub, group_size, quant == "group")
    return q, (scale if quant == "static" else s)
