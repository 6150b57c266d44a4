"""float8_e4m3fn quantization shared by the fused fp8 ops (rms_norm_quant_fp8, silu_and_mul_quant_fp8): the
constants vLLM's kernels use, the checks of scale arguments, and the float64 rounding helpers their references
share. Torch only: no Triton here.

vLLM's fp8 conversion (``scaled_fp8_conversion``): ``r = fmaxf(-448, fminf(v, 448))`` then round to nearest even.
``fminf`` returns its other operand for a NaN, so a NaN quantizes to +448 and +-inf to +-448: nothing is NaN after
quantization. A dynamic scale is ``max(amax / 448, 1 / (448 * 512))`` in float32 (the floor keeps an all-zero row
from dividing 0 by 0); a static scale is applied as the float32 reciprocal ``x * (1 / scale)``, a dynamic per-token
or per-group one by division ``x / scale``.
"""

from __future__ import annotations

import torch

from . import _checks

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0
#: vLLM's ``min_scaling_factor<c10::Float8_e4m3fn>``: ``1 / (448 * 512)`` in float32
MIN_SCALE = float(torch.tensor(1.0 / (FP8_MAX * 512.0), dtype=torch.float32))
#: the per-group scale widths vLLM's fused kernels take (DeepSeek-V3 uses 128)
GROUP_SIZES = (64, 128)


def scale_tensor(name: str, t, device: torch.device, what: str = "one float32 element") -> None:
    """A scale argument: a float32 tensor of one element (shape ``[]`` or ``[1]``) on the op's device."""
    _checks.inference_only(**{name: t})
    _checks.tensor(name, t, dtypes=(torch.float32,))
    if t.numel() != 1:
        raise ValueError(f"{name} must hold {what} (shape [] or [1]), got shape {tuple(t.shape)}")
    if t.device != device:
        raise ValueError(f"{name} is on {t.device} but the input is on {device}; all tensors must share a device")


def group_size(name: str, g, hidden: int, hidden_name: str) -> None:
    if isinstance(g, bool) or not isinstance(g, int) or g not in GROUP_SIZES:
        raise ValueError(f"{name} must be one of {', '.join(map(str, GROUP_SIZES))}, got {g!r}")
    if hidden % g:
        raise ValueError(f"{name} {g} must divide {hidden_name} {hidden}")


# -- float64 references --------------------------------------------------------------------------------------------
def rnd(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x`` (float64) rounded to ``dtype`` (nearest even) and back to float64: one of vLLM's rounding points. From
    float64 one rounding to float32 equals the float32 operation's own (53 >= 2 * 24 + 2), so an exact float64
    operation followed by ``rnd(., float32)`` is the float32 operation."""
    return x.to(dtype).to(torch.float64)


def saturate(v: torch.Tensor) -> torch.Tensor:
    """vLLM's clamp before the fp8 conversion, NaN to +448 as ``fminf`` does, as float8_e4m3fn (round to nearest
    even: exact from float64 here, as every value in range rounds once)."""
    v = torch.where(torch.isnan(v), torch.full_like(v, FP8_MAX), v)
    return v.clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)


def dynamic_scale(amax: torch.Tensor, scale_ub: torch.Tensor | None, ub_on_scale: bool = False) -> torch.Tensor:
    """float64 of the float32 dynamic scale from ``amax`` (float64 of float32 values): ``max(min(amax, ub) / 448,
    MIN_SCALE)``; with ``ub_on_scale`` (vLLM's silu_and_mul_per_block_quant) ``max(min(amax / 448, ub),
    MIN_SCALE)``. NaNs were dropped from ``amax`` (vLLM's ``fmaxf`` reduction skips them)."""
    ub = None if scale_ub is None else float(scale_ub.reshape(()).to(torch.float32))
    if ub is not None and not ub_on_scale:
        amax = torch.clamp(amax, max=ub)
    s = rnd(amax / FP8_MAX, torch.float32)
    if ub is not None and ub_on_scale:
        s = torch.clamp(s, max=ub)
    return torch.clamp(s, min=MIN_SCALE)


def reciprocal(scale: torch.Tensor) -> torch.Tensor:
    """float64 of the float32 ``1 / scale`` a static scale is applied by."""
    return rnd(1.0 / scale.to(torch.float64), torch.float32)


def nan_dropped_amax(y: torch.Tensor, dim: int) -> torch.Tensor:
    """``max |y|`` over ``dim`` with NaNs skipped (0 for an all-NaN slice), as vLLM's ``fmaxf`` reduction does."""
    a = y.abs()
    return torch.where(torch.isnan(a), torch.zeros_like(a), a).amax(dim=dim, keepdim=True)
