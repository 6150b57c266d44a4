"""The OpSpec of silu_and_mul_quant_fp8.

Shape keys: ``num_tokens``, ``d`` (the output width; x is ``[num_tokens, 2d]``), ``quant`` ("static", "token",
"group"), ``transposed`` (group scales column-major, 0/1), ``ub`` (a scale_ub, 0/1; dynamic modes).
"""

import torch

from ...spec import OpSpec, Shape, Work
from ...tolerance import Tolerance
from . import peers
from .api import silu_and_mul_quant_fp8
from .config import MAX_TOKEN_ROW, TILE_BYTES
from .reference import silu_and_mul_quant_fp8_reference

GROUP = 128
# silu(g) * u of N(0, 1) halves is mostly below 4: 1/64 keeps it in e4m3's range and saturates the tail
STATIC_SCALE = 1.0 / 64
# the token mode bounds the amax, the group mode the scale (vLLM's rules): each bound bites on ordinary data
SCALE_UB = {"token": 2.0, "group": 2.0 / 448}


def make_inputs(shape: Shape, dtype: torch.dtype, fill) -> dict:
    quant = shape["quant"]
    # the whole [T, 2d] row carries the family, so gate and up both see it
    inputs = {
        "x": fill((shape["num_tokens"], 2 * shape["d"]), dtype),
        "quant": quant,
        "transposed": bool(shape.get("transposed", 0)),
    }
    if quant == "static":
        inputs["scale"] = torch.full((1,), STATIC_SCALE, dtype=torch.float32, device=fill.device)
    if shape.get("ub", 0):
        inputs["scale_ub"] = torch.full((1,), SCALE_UB[quant], dtype=torch.float32, device=fill.device)
    return inputs


def call(inputs: dict) -> dict:
    q, s = silu_and_mul_quant_fp8(
        inputs["x"],
        quant=inputs["quant"],
        scale=inputs.get("scale"),
        scale_ub=inputs.get("scale_ub"),
        group_size=GROUP,
        transposed_scales=inputs["transposed"],
    )
    # the static mode returns the scale it was given: checked against the reference's copy all the same
    return {"q": q, "scale": s}


def reference(inputs: dict, dtype: torch.dtype) -> dict:
    return silu_and_mul_quant_fp8_reference(
        inputs["x"], inputs["quant"], inputs.get("scale"), inputs.get("scale_ub"), GROUP, dtype
    )


def work(shape: Shape, dtype: torch.dtype) -> Work:
    t, d, e = shape["num_tokens"], shape["d"], torch.finfo(dtype).bits // 8
    scales = {"static": 0, "token": t, "group": t * d // GROUP}[shape["quant"]]
    # x [T, 2d] read, q [T, d] written (1 byte), 4-byte scales; per output: neg, exp, add, div, mul, mul, div
    return Work(bytes=2 * t * d * e + t * d + 4 * scales, flops=7 * t * d)


def sweep_series(model, num_tokens: int) -> dict:
    """Each quantization of the dense MLP's activation: static (FP8 checkpoints), per token, and per 128-column
    group with column-major scales (DeepSeek-V3's block FP8)."""
    base = dict(num_tokens=num_tokens, d=model.intermediate)
    return {
        "static": Shape(**base, quant="static"),
        "per-token": Shape(**base, quant="token"),
        "per-group": Shape(**base, quant="group", transposed=1),
    }


def sweep_shape(model, num_tokens: int) -> Shape:
    # the check's sweep: the per-group mode, whose transposed scales' stride is num_tokens
    return sweep_series(model, num_tokens)["per-group"]


# column tiles: 2048 elements for 16-bit dtypes, 1024 for float32
_TILE_16, _TILE_32 = TILE_BYTES // 2, TILE_BYTES // 4
_BOUNDARY = (
    *(
        Shape(num_tokens=t, d=d, quant=q)
        for q in ("static", "token")
        for t, d in ((1, 1), (17, 1), (9, 80), (17, 80), (255, 96), (5, 129), (3, _TILE_32 + 1), (3, _TILE_16 + 1))
    ),
    Shape(num_tokens=3, d=3584, quant="static"),
    Shape(num_tokens=2, d=3584, quant="token", ub=1),
    Shape(num_tokens=1, d=MAX_TOKEN_ROW + 1, quant="token"),
    Shape(num_tokens=2, d=3 * MAX_TOKEN_ROW // 2 + 7, quant="token"),
    *(
        Shape(num_tokens=t, d=d, quant="group", transposed=tr)
        for t, d, tr in ((5, 128, 0), (17, 128, 1), (7, 384, 1), (9, 640, 0), (3, _TILE_16 + 128, 1), (2, 2048, 0))
    ),
    Shape(num_tokens=9, d=256, quant="group", transposed=1, ub=1),
    Shape(num_tokens=17, d=768, quant="group", transposed=0, ub=1),
)

_ONE_STEP = Tolerance(
    0.13,
    2.0**-9,
    "fp8 outputs: one e4m3 step, so the bench can time peers whose activation rounds elsewhere (tritonkit's "
    "silu_and_mul rounds once, vLLM's expf is not correctly rounded); the op itself matches the float64 reference "
    "exactly (tests/ops/test_silu_and_mul_quant_fp8.py asserts equality)",
)

SPEC = OpSpec(
    name="silu_and_mul_quant_fp8",
    fn=silu_and_mul_quant_fp8,
    make_inputs=make_inputs,
    call=call,
    reference=reference,
    boundary=_BOUNDARY,
    sweep_shape=sweep_shape,
    sweep_series=sweep_series,
    # x of 2^31 + 8192 elements: row offsets (row * 2d) past int32, for each mode
    large=tuple(
        Shape(num_tokens=(1 << 31) // 8192 + 1, d=4096, quant=q, transposed=int(q == "group"))
        for q in ("static", "token", "group")
    ),
    work=work,
    families=("randn", "near_max", "tiny", "constant", "outlier", "cancellation", "nonfinite"),
    tolerance={d: _ONE_STEP for d in (torch.float16, torch.bfloat16, torch.float32)},
    interpreter_tolerance={torch.bfloat16: _ONE_STEP},
    output_dtypes={"q": torch.float8_e4m3fn, "scale": torch.float32},
    peers={"unfused": peers.unfused, "vllm": peers.vllm},
    description="SwiGLU activation into fp8 e4m3: static, per-token or per-128-group scales (vLLM's fused ops)",
)
