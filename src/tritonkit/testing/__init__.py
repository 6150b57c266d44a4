"""Validation against float64 references at boundary shapes and on numerically difficult inputs.

Names load on first use, so that ``tritonkit validate`` can choose between the GPU and Triton's interpreter
(``TRITON_INTERPRET`` is read when kernels are defined) before any op is imported.
"""

import importlib

_EXPORTS = {
    "TOLERANCES": "..tolerance",
    "Tolerance": "..tolerance",
    "tolerance_for": "..tolerance",
    "Comparison": ".metric",
    "compare": ".metric",
    "Fill": ".inputs",
    "MetaFill": ".inputs",
    "CaseResult": ".validate",
    "assert_valid": ".validate",
    "iter_cases": ".validate",
    "run": ".validate",
    "validate_case": ".validate",
    "default_device": ".validate",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
