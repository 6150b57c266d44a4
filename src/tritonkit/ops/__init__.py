"""The inference ops, each declared once by an OpSpec in ``ops/<op>/spec.py``.

Public functions import eagerly (they are cheap: Triton compiles on first call); specs are built on demand.

Each op's function is bound here under its package's name (``from tritonkit.ops import rms_norm`` is the function),
and each submodule of the package is an attribute of the function as well, so the package paths still resolve:
``tritonkit.ops.rms_norm.api`` and ``import tritonkit.ops.rms_norm.kernel as k`` reach the modules.

On a machine with no GPU, importing this package first sets ``TRITON_INTERPRET=1`` (unless it is already set either
way, or Triton was imported before tritonkit), so the ops run on CPU tensors under Triton's interpreter; set
``TRITON_INTERPRET=0`` to keep it off.
"""

from __future__ import annotations

import importlib
import os
import sys
import types

import torch


def _interpret_without_gpu() -> None:
    """Switch Triton's interpreter on where nothing else can run the kernels: no GPU, TRITON_INTERPRET unset, and
    Triton not imported yet (its own jit library, tl.sum and the rest, is defined at its import, and must be
    interpreted too). Otherwise a launch on CPU tensors fails with one sentence saying what to set."""
    if "TRITON_INTERPRET" not in os.environ and "triton" not in sys.modules and not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"


_interpret_without_gpu()

from ._alloc import poison_outputs  # noqa: E402
from ._device import explain_launch_error  # noqa: E402
from ._memo import clear_caches, overrides  # noqa: E402
from .fused_moe.api import fused_moe  # noqa: E402
from .moe_align_block_size.api import moe_align_block_size  # noqa: E402
from .paged_attention.api import paged_attention  # noqa: E402
from .qk_norm_rope_cache.api import qk_norm_rope_cache  # noqa: E402
from .reshape_and_cache.api import reshape_and_cache  # noqa: E402
from .rms_norm.api import rms_norm  # noqa: E402
from .rms_norm_quant_fp8.api import rms_norm_quant_fp8  # noqa: E402
from .rotary_embedding.api import rotary_embedding  # noqa: E402
from .silu_and_mul.api import silu_and_mul  # noqa: E402
from .silu_and_mul_quant_fp8.api import silu_and_mul_quant_fp8  # noqa: E402
from .topk_softmax.api import topk_softmax  # noqa: E402

#: Built-in ops in the order the tools report them.
OP_NAMES = (
    "rms_norm",
    "silu_and_mul",
    "rms_norm_quant_fp8",
    "silu_and_mul_quant_fp8",
    "rotary_embedding",
    "reshape_and_cache",
    "qk_norm_rope_cache",
    "paged_attention",
    "topk_softmax",
    "moe_align_block_size",
    "fused_moe",
)


class _OpPackage(types.ModuleType):
    """An op's package, whose name ``tritonkit.ops`` gives to the op's function: every submodule the import system
    sets on the package is set on the function too, so ``import tritonkit.ops.<op>.<module>`` (which walks
    attributes from ``tritonkit.ops``) and ``tritonkit.ops.<op>.<module>`` resolve."""

    def __setattr__(self, name: str, value) -> None:
        super().__setattr__(name, value)
        fn = vars(self).get("_op_function")
        if fn is not None and isinstance(value, types.ModuleType) and value.__name__ == f"{self.__name__}.{name}":
            setattr(fn, name, value)


def _share_submodules(name: str) -> None:
    """Make op ``name``'s function carry its package's submodules, now and as more are imported. A plain function,
    not a callable module: torch.compile(fullgraph=True) traces a function and refuses to call a module object."""
    package = sys.modules[f"{__name__}.{name}"]
    fn = globals()[name]
    package.__class__ = _OpPackage
    package._op_function = fn
    for attr, value in list(vars(package).items()):
        if isinstance(value, types.ModuleType) and value.__name__ == f"{package.__name__}.{attr}":
            setattr(fn, attr, value)


for _name in OP_NAMES:
    _share_submodules(_name)
del _name

__all__ = [
    "OP_NAMES",
    "clear_caches",
    "explain_launch_error",
    "get_spec",
    "overrides",
    "poison_outputs",
    "specs",
    "fused_moe",
    "moe_align_block_size",
    "paged_attention",
    "qk_norm_rope_cache",
    "reshape_and_cache",
    "rms_norm",
    "rms_norm_quant_fp8",
    "rotary_embedding",
    "silu_and_mul",
    "silu_and_mul_quant_fp8",
    "topk_softmax",
]


def get_spec(name: str):
    """The OpSpec of the built-in op ``name``."""
    if name not in OP_NAMES:
        raise ValueError(f"unknown op {name!r}; built-in ops: {', '.join(OP_NAMES)}")
    return importlib.import_module(f"{__name__}.{name}.spec").SPEC


def specs(names=None) -> dict:
    """``{name: OpSpec}`` for the named built-in ops (all when ``names`` is empty)."""
    return {n: get_spec(n) for n in (names or OP_NAMES)}
