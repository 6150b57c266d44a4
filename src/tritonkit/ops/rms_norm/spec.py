"""The OpSpec of rms_norm."""

import torch

from ...spec import OpSpec, Shape, Work
from .api import rms_norm
from .config import MAX_SINGLE_PASS, STREAM_BLOCK
from .reference import rms_norm_reference

EPS = 1e-6


def make_inputs(shape: Shape, dtype: torch.dtype, fill) -> dict:
    t, h = shape["num_tokens"], shape["hidden"]
    inputs = {
        "x": fill((t, h), dtype),
        # weights are learned scales around 1: not where the difficulty is
        "weight": 1.0 + 0.1 * fill((h,), dtype, family="randn"),
    }
    if shape["residual"]:
        # a residual of the hard family would overflow x + residual in the near_max family; keep it ordinary
        inputs["residual"] = fill((t, h), dtype, family="randn" if fill.family == "near_max" else None)
    return inputs


def call(inputs: dict) -> dict:
    out = rms_norm(inputs["x"], inputs["weight"], EPS, residual=inputs.get("residual"))
    return {"y": out[0], "r": out[1]} if isinstance(out, tuple) else {"y": out}


def reference(inputs: dict, dtype: torch.dtype) -> dict:
    out = rms_norm_reference(inputs["x"], inputs["weight"], EPS, inputs.get("residual"), dtype)
    return {"y": out[0], "r": out[1]} if isinstance(out, tuple) else {"y": out}


def work(shape: Shape, dtype: torch.dtype) -> Work:
    t, h, e = shape["num_tokens"], shape["hidden"], torch.finfo(dtype).bits // 8
    passes = 4 if shape["residual"] else 2  # x (+ residual) read, y (+ r) written
    return Work(bytes=passes * t * h * e + h * e, flops=(7 if shape["residual"] else 4) * t * h)


def sweep_shape(model, num_tokens: int) -> Shape:
    return Shape(num_tokens=num_tokens, hidden=model.hidden, residual=1)


_HIDDEN = (1, 80, 96, 127, 128, 129, 1024, 5120, MAX_SINGLE_PASS, MAX_SINGLE_PASS + 1, 3 * STREAM_BLOCK + 7)
_BOUNDARY = tuple(
    Shape(num_tokens=t, hidden=h, residual=r)
    for h in _HIDDEN
    for t, r in ((1, 0), (7, 1), (17, 0), (17, 1))
    # keep the widest rows to few tokens: the interpreter pays per element
    if h <= 5120 or t <= 7
) + (Shape(num_tokens=255, hidden=96, residual=1), Shape(num_tokens=3, hidden=8, residual=0))

SPEC = OpSpec(
    name="rms_norm",
    fn=rms_norm,
    make_inputs=make_inputs,
    call=call,
    reference=reference,
    boundary=_BOUNDARY,
    sweep_shape=sweep_shape,
    # 2^31 + 4096 elements: row offsets past int32 (pid * stride) on both sides of the residual fusion
    large=(
        Shape(num_tokens=(1 << 31) // 4096 + 1, hidden=4096, residual=0),
        Shape(num_tokens=(1 << 31) // 4096 + 1, hidden=4096, residual=1),
    ),
    work=work,
    families=("randn", "near_max", "tiny", "constant", "outlier", "cancellation"),
    description="RMSNorm over the last dim, optionally fused with a residual add (vLLM's fused_add_rms_norm)",
)
