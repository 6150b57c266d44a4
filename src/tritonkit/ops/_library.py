"""torch.library registration shared by the ops.

Each op registers ``tritonkit::<op>`` so that ``torch.compile``, ``torch.export`` and ``make_fx`` record one opaque
node (with a fake implementation for shapes) and CUDA graphs capture its launch. Eager calls skip the dispatcher
(a direct launch costs less host time); :func:`through_dispatcher` says when a call must take it instead.
"""

from __future__ import annotations

import inspect

import torch
from torch.utils import _python_dispatch

try:
    from torch._subclasses.fake_tensor import FakeTensor
except ImportError:  # pragma: no cover - every torch the package supports has it
    FakeTensor = ()


def through_dispatcher(*tensors) -> bool:
    """Whether a call must go through ``torch.ops.tritonkit`` rather than launch Triton itself: while Dynamo traces,
    under any TorchDispatchMode (``FakeTensorMode``, ``make_fx``'s proxy mode, functionalization), or with fake
    tensors. Those see the registered op and its fake implementation; a Triton launch on fake tensors fails."""
    if torch.compiler.is_compiling() or _python_dispatch._get_current_dispatch_mode() is not None:
        return True
    # a loop, not any() over a generator: on every eager call's host path
    for t in tensors:
        if isinstance(t, FakeTensor):
            return True
    return False


def mutating_op(name: str, mutates: tuple[str, ...]):
    """Register the decorated function (annotated; it writes ``mutates`` and returns None) as
    ``torch.ops.tritonkit.<name>``, its fake derived: it returns None, as the function does."""

    def register(impl):
        op = torch.library.custom_op(f"tritonkit::{name}", impl, mutates_args=mutates)
        op.register_fake(_returns_none)
        return op

    return register


def _returns_none(*args, **kwargs) -> None:
    return None


def op_with_outputs(name: str, alloc, outs: tuple[str, ...] = ("out",), mutates: tuple[str, ...] = ()):
    """One declaration, two ops. The decorated function (annotated) writes its leading parameters ``outs`` from the
    rest and returns None; ``alloc`` takes the rest and returns the outputs (a tensor, or a tuple in ``outs``'
    order), allocated as an eager call allocates them. ``mutates``: inputs both forms also write in place (a KV
    cache). Registers

    - ``tritonkit::<name>_out(*outs, *inputs) -> None``, mutating ``outs`` and ``mutates`` (fake: None), and
    - ``tritonkit::<name>(*inputs) -> outputs``, mutating ``mutates``: ``alloc``, then the function; its fake is
      ``alloc`` on the fake tensors, so the fake's shapes, dtypes and devices are the eager call's by construction.

    Returns ``(functional op, out op)``."""

    def register(impl):
        out_op = torch.library.custom_op(f"tritonkit::{name}_out", impl, mutates_args=(*outs, *mutates))
        out_op.register_fake(_returns_none)
        sig = inspect.signature(impl)
        params = list(sig.parameters.values())
        if tuple(p.name for p in params[: len(outs)]) != outs:
            raise TypeError(f"{impl.__qualname__} must take {', '.join(outs)} first, got {sig}")
        returns = "torch.Tensor" if len(outs) == 1 else f"tuple[{', '.join(['torch.Tensor'] * len(outs))}]"

        def functional(*inputs):
            got = alloc(*inputs)
            impl(*((got,) if len(outs) == 1 else got), *inputs)
            return got

        functional.__name__ = functional.__qualname__ = name
        functional.__module__ = impl.__module__
        functional.__signature__ = sig.replace(parameters=params[len(outs) :], return_annotation=returns)
        fn_op = torch.library.custom_op(f"tritonkit::{name}", functional, mutates_args=mutates)
        fn_op.register_fake(alloc)
        return fn_op, out_op

    return register
