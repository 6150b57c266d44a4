"""The OpSpec of rms_norm_quant_fp8.

Shape keys: ``num_tokens``, ``hidden``, ``residual`` (0/1), ``quant`` ("static", "token", "group"), ``transposed``
(group scales column-major, 0/1), ``ub`` (a scale_ub of 2.0, 0/1; dynamic modes).
"""

import torch

from ...spec import OpSpec, Shape, Work
from ...tolerance import Tolerance
from . import peers
from .api import rms_norm_quant_fp8
from .config import MAX_SINGLE_PASS, STREAM_BLOCK
from .reference import rms_norm_quant_fp8_reference

EPS = 1e-6
GROUP = 128
# y = rms_norm(x) * w is about N(0, 1) * w: 1/64 puts most of it in e4m3's range and saturates the tail past 7
STATIC_SCALE = 1.0 / 64
SCALE_UB = 2.0


def make_inputs(shape: Shape, dtype: torch.dtype, fill) -> dict:
    t, h = shape["num_tokens"], shape["hidden"]
    quant = shape["quant"]
    inputs = {
        "x": fill((t, h), dtype),
        # weights are learned scales around 1: not where the difficulty is
        "weight": 1.0 + 0.1 * fill((h,), dtype, family="randn"),
        "quant": quant,
        "transposed": bool(shape.get("transposed", 0)),
    }
    if shape["residual"]:
        # a residual of the hard family would overflow x + residual in the near_max family; keep it ordinary
        inputs["residual"] = fill((t, h), dtype, family="randn" if fill.family == "near_max" else None)
    if quant == "static":
        inputs["scale"] = torch.full((1,), STATIC_SCALE, dtype=torch.float32, device=fill.device)
    if shape.get("ub", 0):
        inputs["scale_ub"] = torch.full((1,), SCALE_UB, dtype=torch.float32, device=fill.device)
    return inputs


def _named(out, quant: str) -> dict:
    # the static mode returns the scale it was given: checked against the reference's copy all the same
    named = {"q": out[0], "scale": out[1]}
    if len(out) == 3:
        named["r"] = out[2]
    return named


def call(inputs: dict) -> dict:
    out = rms_norm_quant_fp8(
        inputs["x"],
        inputs["weight"],
        EPS,
        quant=inputs["quant"],
        scale=inputs.get("scale"),
        scale_ub=inputs.get("scale_ub"),
        residual=inputs.get("residual"),
        group_size=GROUP,
        transposed_scales=inputs["transposed"],
    )
    return _named(out, inputs["quant"])


def reference(inputs: dict, dtype: torch.dtype) -> dict:
    return rms_norm_quant_fp8_reference(
        inputs["x"],
        inputs["weight"],
        EPS,
        inputs.get("residual"),
        inputs["quant"],
        inputs.get("scale"),
        inputs.get("scale_ub"),
        GROUP,
        dtype,
    )


def work(shape: Shape, dtype: torch.dtype) -> Work:
    t, h, e = shape["num_tokens"], shape["hidden"], torch.finfo(dtype).bits // 8
    # x read, q written (1 byte), the weight; residual read and written; 4-byte scales
    scales = {"static": 0, "token": t, "group": t * h // GROUP}[shape["quant"]]
    res = 2 * t * h * e if shape["residual"] else 0
    return Work(bytes=t * h * e + t * h + h * e + res + 4 * scales, flops=(8 if shape["residual"] else 7) * t * h)


def sweep_series(model, num_tokens: int) -> dict:
    """Each quantization after the residual add: static (Llama-style FP8 checkpoints), per token, and per
    128-column group with column-major scales (DeepSeek-V3's block FP8 linear inputs)."""
    base = dict(num_tokens=num_tokens, hidden=model.hidden, residual=1)
    return {
        "static": Shape(**base, quant="static"),
        "per-token": Shape(**base, quant="token"),
        "per-group": Shape(**base, quant="group", transposed=1),
    }


def sweep_shape(model, num_tokens: int) -> Shape:
    # the check's sweep: the per-group mode, whose transposed scales' stride is num_tokens
    return sweep_series(model, num_tokens)["per-group"]


_BOUNDARY = (
    # static and per token: any width, around the single-pass block sizes and past the streaming bound
    *(
        Shape(num_tokens=t, hidden=h, residual=r, quant=q)
        for q in ("static", "token")
        for h, t, r in (
            (1, 3, 0),
            (80, 7, 1),
            (96, 17, 0),
            (127, 5, 1),
            (1024, 3, 1),
            (5120, 2, 0),
            (MAX_SINGLE_PASS + 1, 1, 1),
            (3 * STREAM_BLOCK + 7, 1, 0),
        )
    ),
    Shape(num_tokens=17, hidden=256, residual=1, quant="token", ub=1),
    Shape(num_tokens=255, hidden=96, residual=1, quant="static"),
    # per group: one group, a partial block (3 groups in a block of 4), DeepSeek-V3's 56, the streaming path
    *(
        Shape(num_tokens=t, hidden=h, residual=r, quant="group", transposed=tr)
        for h, t, r, tr in (
            (128, 5, 0, 0),
            (384, 7, 1, 1),
            (384, 17, 0, 1),
            (7168, 2, 1, 0),
            (MAX_SINGLE_PASS + GROUP, 1, 1, 1),
            (3 * STREAM_BLOCK + GROUP, 2, 0, 0),
        )
    ),
    Shape(num_tokens=9, hidden=256, residual=1, quant="group", transposed=1, ub=1),
)

# one e4m3 step: 2^-3 of the value at the bottom of a binade, 2^-9 between subnormals
_ONE_STEP = Tolerance(
    0.13,
    2.0**-9,
    "fp8 outputs: one e4m3 step, so the bench can time peers whose float32 statistics (vLLM's kernels, the eager "
    "reference) or single rounding (tritonkit's rms_norm, then quantize) move a value across a rounding boundary; "
    "the op itself matches the float64 reference exactly (tests/ops/test_rms_norm_quant_fp8.py asserts equality)",
)

SPEC = OpSpec(
    name="rms_norm_quant_fp8",
    fn=rms_norm_quant_fp8,
    make_inputs=make_inputs,
    call=call,
    reference=reference,
    boundary=_BOUNDARY,
    sweep_shape=sweep_shape,
    sweep_series=sweep_series,
    # 2^31 + 4096 elements: row offsets (pid * stride) past int32, with and without the residual, for each mode
    large=tuple(
        Shape(num_tokens=(1 << 31) // 4096 + 1, hidden=4096, residual=r, quant=q, transposed=int(q == "group"))
        for q in ("static", "token", "group")
        for r in (0, 1)
    ),
    work=work,
    families=("randn", "near_max", "tiny", "constant", "outlier", "cancellation", "nonfinite"),
    tolerance={d: _ONE_STEP for d in (torch.float16, torch.bfloat16, torch.float32)},
    interpreter_tolerance={torch.bfloat16: _ONE_STEP},
    output_dtypes={"q": torch.float8_e4m3fn, "scale": torch.float32},
    peers={"unfused": peers.unfused, "vllm": peers.vllm},
    description="RMSNorm (+ residual add) into fp8 e4m3: static, per-token or per-128-group scales (vLLM's fused ops)",
)
