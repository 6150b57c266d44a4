"""torch.library registration shared by the ops.

Each op registers ``tritonkit::<op>`` so that ``torch.compile``, ``torch.export`` and ``make_fx`` record one opaque
node (with a fake implementation for shapes) and CUDA graphs capture its launch. Eager calls skip the dispatcher
(a direct launch costs less host time); :func:`through_dispatcher` says when a call must take it instead.
"""

from __future__ import annotations

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
