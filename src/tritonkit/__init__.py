"""tritonkit: check, validate and benchmark Triton kernels for LLM inference, and the inference ops themselves."""

from __future__ import annotations

__version__ = "0.1.0"


def __getattr__(name):
    # OpSpec and friends import torch: not at package import, so `tritonkit --help` and the CLI's routing stay quick
    if name in ("OpSpec", "Shape", "Work"):
        from . import spec

        return getattr(spec, name)
    # the checker's decorator without importing the checker (and Triton's compiler) at package import
    if name == "case":
        from .check.capture.case import case

        return case
    if name == "ops":
        import importlib

        return importlib.import_module(".ops", __name__)
    raise AttributeError(f"module 'tritonkit' has no attribute {name!r}")


__all__ = ["OpSpec", "Shape", "Work", "case", "ops", "__version__"]
