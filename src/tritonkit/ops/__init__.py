"""The inference ops, each declared once by an OpSpec in ``ops/<op>/spec.py``.

Public functions import eagerly (they are cheap: Triton compiles on first call); specs are built on demand.
"""

from __future__ import annotations

import importlib

from ._alloc import poison_outputs
from .paged_attention.api import paged_attention
from .reshape_and_cache.api import reshape_and_cache
from .rms_norm.api import rms_norm
from .rotary_embedding.api import rotary_embedding
from .silu_and_mul.api import silu_and_mul

#: Built-in ops in the order the tools report them.
OP_NAMES = ("rms_norm", "silu_and_mul", "rotary_embedding", "reshape_and_cache", "paged_attention")

__all__ = ["OP_NAMES", "get_spec", "poison_outputs", "specs", "paged_attention", "reshape_and_cache", "rms_norm",
           "rotary_embedding", "silu_and_mul"]


def get_spec(name: str):
    """The OpSpec of the built-in op ``name``."""
    if name not in OP_NAMES:
        raise ValueError(f"unknown op {name!r}; built-in ops: {', '.join(OP_NAMES)}")
    return importlib.import_module(f"{__name__}.{name}.spec").SPEC


def specs(names=None) -> dict:
    """``{name: OpSpec}`` for the named built-in ops (all when ``names`` is empty)."""
    return {n: get_spec(n) for n in (names or OP_NAMES)}
