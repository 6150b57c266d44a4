"""Output allocation shared by every op, with the hook the validation harness uses to NaN-poison outputs.

Ops allocate their outputs here rather than with ``torch.empty`` so that an element the kernel never writes is
NaN (and fails validation) instead of whatever the allocator returned. Off by default: one ``ContextVar.get``.
"""

from __future__ import annotations

import contextlib
import contextvars

import torch

_POISON: contextvars.ContextVar[bool] = contextvars.ContextVar("tritonkit_poison_outputs", default=False)


def empty(size, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    out = torch.empty(size, dtype=dtype, device=device)
    if _POISON.get() and out.device.type != "meta":
        out.fill_(float("nan"))
    return out


def empty_like(t: torch.Tensor) -> torch.Tensor:
    return empty(t.shape, t.dtype, t.device)


@contextlib.contextmanager
def poison_outputs(enabled: bool = True):
    """Within this block every output an op allocates starts as NaN."""
    token = _POISON.set(enabled)
    try:
        yield
    finally:
        _POISON.reset(token)
