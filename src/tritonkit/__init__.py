"""tritonkit: check, validate and benchmark Triton kernels for LLM inference, and the inference ops themselves."""

from __future__ import annotations

__version__ = "0.1.0"

from .spec import OpSpec, Shape, Work  # noqa: E402


def __getattr__(name):
    # the checker's decorator without importing the checker (and Triton's compiler) at package import
    if name == "case":
        from .check.case import case

        return case
    if name == "ops":
        import importlib

        return importlib.import_module(".ops", __name__)
    raise AttributeError(f"module 'tritonkit' has no attribute {name!r}")


__all__ = ["OpSpec", "Shape", "Work", "case", "ops", "__version__"]
