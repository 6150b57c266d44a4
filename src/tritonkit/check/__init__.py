"""``tritonkit check``: find Triton bug classes statically, on a CPU, before a GPU sees them.

``case`` (the decorator) imports nothing heavy; the rest loads Triton's compiler on first use::

    from tritonkit.check import run_check, Options
    report = run_check(["my_cases.py"], Options(arch="sm_90"))
"""

from __future__ import annotations

from .capture.case import case

__all__ = ["Options", "Report", "case", "run_check"]


def __getattr__(name):
    if name in ("Options", "Report", "run_check"):
        from . import runner

        return getattr(runner, name)
    raise AttributeError(f"module 'tritonkit.check' has no attribute {name!r}")
