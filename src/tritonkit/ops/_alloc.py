"""Output allocation shared by every op, with the hook the validation harness uses to poison outputs.

Ops allocate their outputs here rather than with ``torch.empty`` so that an element the kernel never writes holds a
value no correct kernel writes (and fails validation) instead of whatever the allocator returned. Off by default:
one ``ContextVar.get``.
"""

from __future__ import annotations

import contextlib
import contextvars

import torch

_POISON: contextvars.ContextVar[bool] = contextvars.ContextVar("tritonkit_poison_outputs", default=False)


def poison_value(dtype: torch.dtype) -> float | int | bool:
    """What a poisoned output of ``dtype`` holds: NaN for floating (and complex) dtypes; the minimum of a signed
    integer dtype (INT32_MIN: no index, id or count is that negative); the maximum of an unsigned one (its minimum,
    0, is the commonest legitimate value); True for bool, which has no invalid value: deterministic where the
    allocator's memory is not, it still catches an unwritten element whose expected value is False."""
    if dtype == torch.bool:
        return True
    if dtype.is_floating_point or dtype.is_complex:
        return float("nan")
    info = torch.iinfo(dtype)
    return info.min if info.min < 0 else info.max


def empty(size, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    out = torch.empty(size, dtype=dtype, device=device)
    if _POISON.get() and out.device.type != "meta":
        out.fill_(poison_value(dtype))
    return out


def empty_like(t: torch.Tensor) -> torch.Tensor:
    return empty(t.shape, t.dtype, t.device)


@contextlib.contextmanager
def poison_outputs(enabled: bool = True):
    """Within this block every output an op allocates starts poisoned (:func:`poison_value`: NaN for floats)."""
    token = _POISON.set(enabled)
    try:
        yield
    finally:
        _POISON.reset(token)
