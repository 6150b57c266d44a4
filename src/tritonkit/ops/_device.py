"""What GPU an op's kernels will run on, from host state only."""

from __future__ import annotations

import functools

import torch
import triton


@functools.lru_cache(maxsize=None)
def _cuda_capability(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


def capability(device: torch.device) -> tuple[int, int] | None:
    """Compute capability of the GPU the kernels for tensors on ``device`` target: a CUDA device's own; for meta
    tensors (``tritonkit check``, compile-key tests), the target of Triton's active driver, which the checker's stub
    answers with its ``--arch``; None for CPU tensors (the interpreter) and where no driver answers."""
    if device.type == "cuda":
        return _cuda_capability(device.index if device.index is not None else torch.cuda.current_device())
    if device.type != "meta":
        return None
    try:
        target = triton.runtime.driver.active.get_current_target()
    except Exception:  # noqa: BLE001 - no driver at all (a CPU-only machine outside the checker)
        return None
    return divmod(int(target.arch), 10) if target.backend == "cuda" else None
