"""torch.library registration shared by the ops.

Each op registers ``tritonkit::<op>`` so that ``torch.compile`` records one opaque node and CUDA graphs capture
its launch. Eager calls skip the dispatcher (a direct launch costs less host time); while Dynamo traces, the
public function routes through the registered op instead.
"""

from __future__ import annotations

import torch


def is_compiling() -> bool:
    return torch.compiler.is_compiling()
