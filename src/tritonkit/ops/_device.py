"""What GPU an op's kernels will run on, from host state only."""

from __future__ import annotations

import os

import torch
import triton
from . import _memo

INTERPRET_VAR = "TRITON_INTERPRET"


def explain_launch_error(e: BaseException) -> BaseException | None:
    """A one-sentence error for the launch failures a user meets first (no GPU driver, CPU tensors on a GPU
    machine), or None to let Triton's own error through."""
    msg = str(e)
    if os.environ.get(INTERPRET_VAR) == "1" and isinstance(e, TypeError) and "array" in msg and _numpy_breaks_interp():
        import numpy

        return RuntimeError(
            f"Triton {triton.__version__}'s interpreter does not run with numpy {numpy.__version__} (it converts "
            f"1-element arrays with int(), an error since numpy 2.4; triton-lang/triton#9171): install "
            f"'numpy<2.4' to run tritonkit's kernels on a CPU"
        )
    if "0 active drivers" in msg:
        now = os.environ.get(INTERPRET_VAR)
        state = f"it is set to {now!r}" if now is not None else "it is unset, but Triton was imported first"
        return RuntimeError(
            f"no GPU driver is active, so Triton cannot launch tritonkit's kernels: on a CPU, set {INTERPRET_VAR}=1 "
            f"before Triton is first imported (importing tritonkit.ops before Triton does it for you while the "
            f"variable is unset; {state})"
        )
    if "cannot be accessed from Triton" in msg:
        return ValueError(
            f"{msg.strip().splitlines()[0]}: tritonkit ops run on CUDA tensors, or on CPU tensors "
            f"only under Triton's interpreter ({INTERPRET_VAR}=1 before import)"
        )
    return None


def _numpy_breaks_interp() -> bool:
    """numpy >= 2.4 beside a Triton whose interpreter predates the fix (3.6 and older)."""
    import numpy

    def major_minor(v: str) -> tuple[int, int]:
        parts = (v.split("+")[0].split(".") + ["0", "0"])[:2]
        return tuple(int("".join(ch for ch in p if ch.isdigit()) or 0) for p in parts)

    return major_minor(numpy.__version__) >= (2, 4) and major_minor(triton.__version__) <= (3, 6)


@_memo.memoized(maxsize=None)
def _cuda_capability(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


@_memo.memoized(maxsize=None)
def _has_gdc() -> bool:
    """Whether this Triton has griddepcontrol (``gdc_wait`` / ``gdc_launch_dependents``)."""
    try:
        from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait  # noqa: F401
    except ImportError:
        return False
    return True


def pdl(device: torch.device) -> bool:
    """Whether kernels for tensors on ``device`` can launch as programmatic dependents (``launch_pdl``, with
    ``gdc_wait`` / ``gdc_launch_dependents`` in the kernels): a target of compute capability 9.0+ (:func:`capability`:
    meta tensors take the checker's ``--arch``; CPU tensors and the interpreter never) and a Triton that has them."""
    cap = capability(device)
    return cap is not None and cap >= (9, 0) and _has_gdc()


def capability(device: torch.device) -> tuple[int, int] | None:
    """Compute capability of the GPU the kernels for tensors on ``device`` target: a CUDA device's own; for meta
    tensors (``tritonkit check``, compile-key tests), the target of Triton's active driver, which the checker's stub
    answers with its ``--arch``; None for CPU tensors (the interpreter), for CUDA tensors under the interpreter too
    (it runs none of the target's own paths: Gluon, wgmma, PDL) and where no driver answers."""
    if device.type == "cuda":
        if triton.knobs.runtime.interpret:
            return None
        return _cuda_capability(device.index if device.index is not None else torch.cuda.current_device())
    if device.type != "meta":
        return None
    try:
        target = triton.runtime.driver.active.get_current_target()
    except Exception:  # noqa: BLE001 - no driver at all (a CPU-only machine outside the checker)
        return None
    return divmod(int(target.arch), 10) if target.backend == "cuda" else None
