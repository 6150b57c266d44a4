"""Test helper: the fused fp8 ops' GPU paths that need ``tl.fma`` to round once (the silu float32 exp, the division
by a scale through its reciprocal), run under Triton 3.6's interpreter, which rounds ``x * y + z`` twice.
:func:`fused_fma` replaces the interpreter's float32 fma by a correctly rounded one (the product exact in float64, the
sum rounded to odd, then once to float32) and sets ``_fp8_jit.INTERPRETER_FMA_FUSED``, which turns those paths on;
on a GPU nothing is patched."""

import contextlib

import numpy as np
import triton

from tritonkit.ops import _fp8_jit, overrides

F32, F64 = np.float32, np.float64
INTERPRETING = bool(triton.knobs.runtime.interpret)


def fma_rn32(x, y, z) -> np.ndarray:
    """``x * y + z`` rounded once to float32 (float32 arrays, broadcast). The product is exact in float64; the sum is
    rounded to odd there (a float64 rounding toward the exact sum, its last bit set when inexact), from which the
    rounding to float32 is correct: a plain float64 sum could land on a float32 tie the exact sum is not on."""
    p = np.asarray(x, F32).astype(F64) * np.asarray(y, F32).astype(F64)
    c = np.asarray(z, F32).astype(F64)
    with np.errstate(all="ignore"):
        s = p + c
        b = s - p
        err = (p - (s - b)) + (c - b)  # exact: s + err == p + c (TwoSum)
        even = (s.view(np.uint64) & 1) == 0
        fix = np.isfinite(s) & np.isfinite(err) & (err != 0) & even
        s = np.where(fix, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
        return s.astype(F32)


@contextlib.contextmanager
def fused_fma(monkeypatch, *configs, **names):
    """Within: the interpreter's float32 fma fused and ``_fp8_jit.INTERPRETER_FMA_FUSED`` set (the fused fp8 ops'
    FUSED_FMA paths on), and ``names`` set on each op config in ``configs`` that has them; on a GPU only ``names``."""
    with contextlib.ExitStack() as stack:
        if INTERPRETING:
            from triton.runtime import interpreter

            unfused = interpreter.InterpreterBuilder.create_fma

            def create_fma(self, x, y, z):
                if z.data.dtype != F32:
                    return unfused(self, x, y, z)
                return interpreter.TensorHandle(fma_rn32(x.data, y.data, z.data), z.dtype.scalar)

            monkeypatch.setattr(interpreter.InterpreterBuilder, "create_fma", create_fma)
            stack.enter_context(overrides(_fp8_jit, INTERPRETER_FMA_FUSED=True))
        for cfg in configs:
            set_here = {k: v for k, v in names.items() if hasattr(cfg, k)}
            if set_here:
                stack.enter_context(overrides(cfg, **set_here))
        yield
