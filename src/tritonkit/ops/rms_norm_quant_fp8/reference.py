"""Float64 oracle for rms_norm_quant_fp8 and plain fp8 quantization, rounded where vLLM's kernels round.

Every operation is exact in float64 and followed by the rounding vLLM's float32 (or x-dtype) operation makes, so
the fp8 codes and scales are vLLM's bit for bit wherever its float32 statistics round as the exact ones do (the op
computes them in float64 so that they do). ``dtype`` is the op's dtype (x's before the harness upcast it).
"""

import torch

from .. import _fp8
from .._fp8 import rnd

F32 = torch.float32


def _zero_safe(inv: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """A reciprocal taken as 0 where its scale is 0 (vLLM's fp8_reciprocal_scale)."""
    return torch.where(scale.to(torch.float64) == 0, torch.zeros_like(inv), inv)


def _quantize(
    y: torch.Tensor, quant: str, scale, scale_ub, group_size: int, group_recip: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q, scales)`` of the float64 ``y [rows, hidden]`` (values of the op's dtype); scales None for static.
    ``group_recip``: a group's values are multiplied by its scale's float32 reciprocal (vLLM's
    rms_norm_per_block_quant) instead of divided by it."""
    if quant == "static":
        return _fp8.saturate(rnd(y * _fp8.reciprocal(scale.reshape(())), F32)), None
    if quant == "token":
        s = _fp8.dynamic_scale(_fp8.nan_dropped_amax(y, -1), scale_ub)
        return _fp8.saturate(rnd(y / s, F32)), s
    rows, hidden = y.shape
    yg = y.reshape(rows, hidden // group_size, group_size)
    s = _fp8.dynamic_scale(_fp8.nan_dropped_amax(yg, -1), scale_ub)
    scaled = yg * _fp8.reciprocal(s) if group_recip else yg / s
    return _fp8.saturate(rnd(scaled, F32)).reshape(rows, hidden), s.reshape(rows, -1)


def rms_norm_quant_fp8_reference(
    x, weight, eps=1e-6, residual=None, quant="token", scale=None, scale_ub=None, group_size=128, dtype=None
) -> dict:
    """``{"q": fp8, "scale": float32 scales (static: the one given), "r": new residual (with one)}``, x's leading shape
    flattened into rows for the scales (``[rows, 1]`` per token, ``[rows, groups]`` per group). Given float64
    inputs every output is float64, holding those values."""
    dtype = dtype or x.dtype
    shape = x.shape
    hidden = shape[-1]
    xs = x.reshape(-1, hidden).to(torch.float64)
    out = {}
    if residual is not None:
        total = rnd(xs + residual.reshape(-1, hidden).to(torch.float64), F32)
        r = rnd(total, dtype)
        out["r"] = (r if x.dtype == torch.float64 else r.to(dtype)).reshape(shape)
        # vLLM's static form normalizes the rounded sum, its dynamic forms the float32 one
        xs = r if quant == "static" else total
    eps32 = float(torch.tensor(eps, dtype=F32))
    rstd = rnd(1.0 / torch.sqrt((xs * xs).sum(-1, keepdim=True) / hidden + eps32), F32)
    if quant == "static":
        # vLLM's static forms: scalar_t(x * rstd * w), float32 products rounded to the dtype once
        y = rnd(rnd(rnd(xs * rstd, F32) * weight.to(torch.float64), F32), dtype)
    else:
        # its dynamic forms: scalar_t(x * rstd) * w, rounded to the dtype twice
        y = rnd(rnd(rnd(xs * rstd, F32), dtype) * weight.to(torch.float64), dtype)
    q, s = _quantize(y, quant, scale, scale_ub, group_size, group_recip=True)
    # float64 inputs (the oracle) get float64 outputs holding the fp8 and float32 values, as the harness asks
    wide = x.dtype == torch.float64
    out["q"] = (q.to(torch.float64) if wide else q).reshape(shape)
    if s is None:
        s = scale.reshape(1).to(torch.float64)
    out["scale"] = s if wide else s.to(F32)
    return out


def scaled_fp8_quant_reference(x, mode: str, scale=None, scale_ub=None, group_shape=None) -> dict:
    """Plain quantization of ``x [rows, hidden]`` as vLLM's ``scaled_fp8_quant``: ``{"q", "scale"}``. mode "static"
    (``scale`` of one element, or a ``[rows / gm, hidden / gn]`` grid of them with ``group_shape = (gm, gn)``),
    "tensor", "token" or "group" (128 columns)."""
    y = x.to(torch.float64)
    if mode == "tensor":
        # a zero scale (an all-zero input) has reciprocal 0: codes 0
        s = rnd(_fp8.nan_dropped_amax(y.reshape(1, -1), -1) / _fp8.FP8_MAX, F32).reshape(1)
        return {"q": _fp8.saturate(rnd(y * _zero_safe(_fp8.reciprocal(s), s), F32)), "scale": s.to(F32)}
    if mode == "static":
        # a per-tensor scale is one group of the whole tensor; a zero scale's reciprocal is 0 where vLLM vectorizes
        # (column groups of a multiple of 16), else inf
        if group_shape is None:
            full, gn = scale.to(torch.float64).reshape(1, 1), y.shape[-1]
        else:
            gm, gn = group_shape
            grid = scale.to(torch.float64).reshape(y.shape[0] // gm, y.shape[1] // gn)
            full = grid.repeat_interleave(gm, 0).repeat_interleave(gn, 1)
        inv = _fp8.reciprocal(full)
        return {"q": _fp8.saturate(rnd(y * (_zero_safe(inv, full) if gn % 16 == 0 else inv), F32)), "scale": scale}
    q, s = _quantize(y, mode, None, scale_ub, 128)
    return {"q": q, "scale": s.to(F32)}
