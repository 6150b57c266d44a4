"""The per-dtype tolerance table.

An output element passes when ``|out - ref| <= atol + rtol * |ref|`` with ``ref`` the float64 reference; the error
reported is the largest ratio ``|out - ref| / (atol + rtol * |ref|)`` over the tensor, so 1.0 is the limit.
Ops whose outputs can cancel (a rotation of large values to a small one) also declare ``error_scale``: the
per-element sum of the magnitudes of the terms that make each output. For those, ``compute_eps * scale`` is added
to the bound: float32 arithmetic errs by a few ulps of the terms, not of the result.
Where ``ref`` is NaN the output must be NaN; where ``ref`` rounds to +-inf in the output dtype the output must be
the same infinity. Ops loosen an entry only in their spec, with the reason written beside it.
"""

from __future__ import annotations

import dataclasses
import math

import torch


@dataclasses.dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float
    reason: str
    # float32 math: each output a*b +- c*d rounds three times, each within 2^-24 of the terms: 4 ulps of them
    compute_eps: float = 2.0**-22

    def __post_init__(self):
        # a negative or NaN bound makes the error ratio negative or NaN, which passes every output: refuse it here
        for name in ("rtol", "atol", "compute_eps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"Tolerance {name}={v!r}: must be a finite number >= 0")
        if self.rtol == 0 and self.atol == 0:
            raise ValueError("Tolerance rtol=0 and atol=0: no output could pass (give atol > 0 for an exact op)")


TOLERANCES: dict[torch.dtype, Tolerance] = {
    # fp32 kernels accumulate in fp32: ~sqrt(n) * 2^-24 relative for the reductions we do (n <= 16K) is under 1e-5
    torch.float32: Tolerance(1e-5, 1e-6, "fp32 math: reduction error sqrt(n)*2^-24 stays under 1e-5 for n <= 16K"),
    # fp16 output: one rounding to fp16 (2^-11 relative) after fp32 math, plus one ulp of slack for fp32 error
    torch.float16: Tolerance(1e-3, 1e-5, "one fp16 rounding of the output (2^-11) plus one ulp of fp32 slack"),
    # bf16 output: one rounding to bf16 (2^-8 relative) after fp32 math, plus one ulp of slack
    torch.bfloat16: Tolerance(8e-3, 1e-5, "one bf16 rounding of the output (2^-8) plus one ulp of fp32 slack"),
}


# Triton's CPU interpreter (3.6) converts float32 to bfloat16 by truncation, not round-to-nearest-even: one full
# bf16 ulp (2^-7 relative at the bottom of a binade) where the GPU is off by at most half of one.
INTERPRETER_TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.bfloat16: Tolerance(1.6e-2, 1e-5, "interpreter truncates float32 -> bf16: up to two bf16 ulps in all"),
}


def interpreting() -> bool:
    """Whether Triton runs kernels under its interpreter: its own reading of TRITON_INTERPRET ("true" too, not
    "off")."""
    from triton import knobs

    return bool(knobs.runtime.interpret)


def tolerance_for(dtype: torch.dtype) -> Tolerance:
    if interpreting() and dtype in INTERPRETER_TOLERANCES:
        return INTERPRETER_TOLERANCES[dtype]
    try:
        return TOLERANCES[dtype]
    except KeyError:
        raise ValueError(f"no tolerance for dtype {dtype}; known: {list(TOLERANCES)}") from None
