"""The OpSpec of silu_and_mul."""

import torch

from ...spec import OpSpec, Shape, Work
from .api import silu_and_mul
from .config import TILE_BYTES
from .reference import silu_and_mul_reference


def make_inputs(shape: Shape, dtype: torch.dtype, fill) -> dict:
    # the whole [T, 2d] row carries the family, so gate and up both see it (near_max: silu(g) * u overflows fp16)
    return {"x": fill((shape["num_tokens"], 2 * shape["d"]), dtype)}


def call(inputs: dict) -> dict:
    return {"y": silu_and_mul(inputs["x"])}


def reference(inputs: dict, dtype: torch.dtype) -> dict:
    return {"y": silu_and_mul_reference(inputs["x"])}


def work(shape: Shape, dtype: torch.dtype) -> Work:
    t, d, e = shape["num_tokens"], shape["d"], torch.finfo(dtype).bits // 8
    # x [T, 2d] read, y [T, d] written; per output: neg, exp, add, div, mul
    return Work(bytes=3 * t * d * e, flops=5 * t * d)


def sweep_shape(model, num_tokens: int) -> Shape:
    return Shape(num_tokens=num_tokens, d=model.intermediate)


# column tiles: 2048 elements for 16-bit dtypes, 1024 for float32; narrower rows stack TILE / next_pow2(d) rows
_TILE_16, _TILE_32 = TILE_BYTES // 2, TILE_BYTES // 4
_BOUNDARY = tuple(
    Shape(num_tokens=t, d=d)
    for t, d in (
        (1, 1),
        (17, 1),
        (3, 8),
        (257, 8),
        # d=80 stacks 16 (16-bit) or 8 (float32) rows per program: row counts around both
        (7, 80),
        (8, 80),
        (9, 80),
        (15, 80),
        (16, 80),
        (17, 80),
        (255, 96),
        (1, 127),
        (17, 127),
        (1, 128),
        (17, 128),
        (5, 129),
        (1, _TILE_32 - 1),
        (7, _TILE_32),
        (3, _TILE_32 + 1),
        (1, _TILE_16 - 1),
        (5, _TILE_16),
        (3, _TILE_16 + 1),
        # real per-rank widths: Llama-3-70B at TP 8 (3.5 tiles) and a 5120-wide one
        (3, 3584),
        (2, 5120),
    )
)

SPEC = OpSpec(
    name="silu_and_mul",
    fn=silu_and_mul,
    make_inputs=make_inputs,
    call=call,
    reference=reference,
    boundary=_BOUNDARY,
    sweep_shape=sweep_shape,
    # x of 2^31 + 8192 elements: row offsets (row * 2d) past int32
    large=(Shape(num_tokens=(1 << 31) // 8192 + 1, d=4096),),
    work=work,
    families=("randn", "near_max", "tiny", "constant", "outlier", "cancellation", "nonfinite"),
    description="SwiGLU activation silu(x[..., :d]) * x[..., d:] (vLLM's silu_and_mul)",
)
