"""The OpSpec of fused_moe.

Shape keys
----------
num_tokens   M, tokens routed.
hidden       K, the model width (x is [M, K]).
inter        N, one expert's intermediate width (w1 is [E, 2N, K], w2 [E, K, N]).
experts      E_global, experts the router picks from.
topk         experts per token (distinct, from a random softmax + topk).
quant        "none" (weights in the activation dtype), "fp8_tensor", "fp8_channel", "fp8_block128".
local        (optional) experts on this rank under expert parallelism: w1/w2 hold ``local`` experts and an
             expert_map sends the others to -1 (their slots contribute zero).
static_a     (optional) 1: fp8 with static a1_scale/a2_scale instead of dynamic activation scales.
act_tensor   (optional) 1: fp8 with one dynamic activation scale per tensor (per_act_token_quant=False).
routed_input (optional) 1: apply_router_weight_on_input (topk 1).
activation   (optional) "silu" (default) or "gelu".
ids          (optional) "int32" (default) or "int64" topk_ids.

Weights are randn / sqrt(fan-in) so every GEMM output is O(1); fp8 weights are quantized from those by their
scheme's amax / 448 scales. The input family goes to hidden_states only.
"""

from __future__ import annotations

import math

import torch

from ...spec import OpSpec, Shape, Work
from ...tolerance import Tolerance
from . import peers
from .api import fused_moe
from .reference import FP8_MAX, SCALE_BLOCK, fused_moe_reference

FP8 = torch.float8_e4m3fn


def _quantize_weight(w: torch.Tensor, quant: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(fp8 weights, float32 scales) of ``w [E, rows, cols]`` float32 under ``quant``."""
    E, rows, cols = w.shape
    if quant == "fp8_tensor":
        s = w.abs().amax(dim=(1, 2)) / FP8_MAX  # [E]
        sb = s.view(E, 1, 1)
    elif quant == "fp8_channel":
        s = w.abs().amax(dim=2, keepdim=True) / FP8_MAX  # [E, rows, 1]
        sb = s
    else:
        br, bc = -(-rows // SCALE_BLOCK), -(-cols // SCALE_BLOCK)
        wp = torch.nn.functional.pad(w, (0, bc * SCALE_BLOCK - cols, 0, br * SCALE_BLOCK - rows))
        s = wp.view(E, br, SCALE_BLOCK, bc, SCALE_BLOCK).abs().amax(dim=(2, 4)) / FP8_MAX  # [E, br, bc]
        sb = s.repeat_interleave(SCALE_BLOCK, 1)[:, :rows].repeat_interleave(SCALE_BLOCK, 2)[:, :, :cols]
    s = s.clamp(min=1e-12)
    sb = sb.clamp(min=1e-12)
    return torch.clamp(w / sb, -FP8_MAX, FP8_MAX).to(FP8), s.to(torch.float32)


#: float32 elements of one chunk of experts _weight builds at a time (1 GiB): a whole layer's float32 copy is never held
_WEIGHT_CHUNK = 1 << 28


def _weight(fill, E: int, rows: int, cols: int, quant: str, dtype: torch.dtype):
    """``(w [E, rows, cols], scale or None)``: randn / sqrt(cols) in ``dtype``, or its fp8 quantization by ``quant``
    with the float32 scales. Made a chunk of experts at a time, at most 1 GiB of float32 (DeepSeek-V3's w1 alone
    would take 30 GB, and its quantization as much again); on the meta device, where nothing is held, in one go (a
    loop of 256 experts was two thirds of `tritonkit check`'s minute over the built-in ops)."""
    w = torch.empty((E, rows, cols), dtype=dtype if quant == "none" else FP8, device=fill.device)
    step = E if fill.device.type == "meta" else max(1, _WEIGHT_CHUNK // (rows * cols))
    scales = []
    for e in range(0, E, step):
        n = min(step, E - e)
        w32 = fill((n, rows, cols), torch.float32, family="randn") / math.sqrt(cols)
        if quant == "none":
            w[e : e + n] = w32.to(dtype)
            continue
        q, sc = _quantize_weight(w32, quant)
        w[e : e + n] = q
        scales.append(sc)
    return w, (torch.cat(scales) if scales else None)


def make_inputs(shape: Shape, dtype: torch.dtype, fill) -> dict:
    dev = fill.device
    M, K, N, E, topk = shape["num_tokens"], shape["hidden"], shape["inter"], shape["experts"], shape["topk"]
    quant = shape.get("quant", "none")
    local = shape.get("local", E)
    x = fill((M, K), dtype)
    w1, w1_scale = _weight(fill, local, 2 * N, K, quant, dtype)
    w2, w2_scale = _weight(fill, local, K, N, quant, dtype)
    logits = fill((M, E), torch.float32, family="randn")
    topk_weights, topk_ids = torch.topk(torch.softmax(logits, dim=-1), topk, dim=-1)
    inputs = {
        "act_dtype": dtype,  # for error_scale, which sees the float64 copies
        "hidden_states": x,
        "topk_weights": topk_weights,
        "topk_ids": topk_ids.to(torch.int64 if shape.get("ids", "int32") == "int64" else torch.int32),
    }
    inputs["w1"], inputs["w2"] = w1, w2
    if quant != "none":
        inputs["w1_scale"], inputs["w2_scale"] = w1_scale, w2_scale
        if quant == "fp8_block128":
            inputs["block_shape"] = [SCALE_BLOCK, SCALE_BLOCK]
        if shape.get("static_a", 0):
            # static scales: x's own amax (every value in range) and 4 / 448 for the O(1) intermediate (its rare
            # larger values saturate at +-448, in the op and the reference alike)
            inputs["a1_scale"] = (x.float().abs().amax() / FP8_MAX).clamp(min=1e-12).reshape(1)
            inputs["a2_scale"] = torch.full((1,), 4.0 / FP8_MAX, dtype=torch.float32, device=dev)
    if local != E:
        # a random `local` of the E experts live here, in a random order; the rest map to -1
        chosen = fill.randperm(E)[:local]
        emap = torch.full((E,), -1, dtype=torch.int32, device=dev)
        inputs["expert_map"] = emap.scatter(0, chosen, torch.arange(local, dtype=torch.int32, device=dev))
    if shape.get("act_tensor", 0):
        inputs["per_act_token_quant"] = False
    if shape.get("routed_input", 0):
        inputs["apply_router_weight_on_input"] = True
    if shape.get("activation", "silu") != "silu":
        inputs["activation"] = shape["activation"]
    return inputs


_ARGS = (
    "activation",
    "apply_router_weight_on_input",
    "expert_map",
    "w1_scale",
    "w2_scale",
    "a1_scale",
    "a2_scale",
    "block_shape",
    "per_act_token_quant",
)


def _split(inputs: dict) -> tuple[tuple, dict]:
    pos = tuple(inputs[k] for k in ("hidden_states", "w1", "w2", "topk_weights", "topk_ids"))
    return pos, {k: inputs[k] for k in _ARGS if k in inputs}


def call(inputs: dict) -> dict:
    pos, kw = _split(inputs)
    return {"out": fused_moe(*pos, **kw)}


def reference(inputs: dict, dtype: torch.dtype) -> dict:
    pos, kw = _split(inputs)
    return {"out": fused_moe_reference(*pos, **kw, act_dtype=dtype)}


#: tokens the float64 oracle checks at a point with more (evenly spaced, first and last included): the rows are
#: independent, so a sample finds a wrong tile or slot as a full check does, for a fraction of the oracle's time
ORACLE_ROWS = 256
_ROW_KEYS = ("hidden_states", "topk_weights", "topk_ids")
_WEIGHT_KEYS = ("w1", "w2")


def oracle_inputs(inputs: dict) -> tuple[dict, dict]:
    """The float64 oracle's inputs and the output rows they cover: a sample of ORACLE_ROWS tokens (all of them when
    one dynamic activation scale spans the tensor: per_act_token_quant=False), every floating tensor upcast except
    the weights, which the reference dequantizes to float64 one expert at a time."""
    M = inputs["hidden_states"].shape[0]
    rows = None
    if M > ORACLE_ROWS and inputs.get("per_act_token_quant", True):
        rows = torch.linspace(0, M - 1, ORACLE_ROWS, device=inputs["hidden_states"].device).round().long().unique()
    out = {}
    for k, v in inputs.items():
        if isinstance(v, torch.Tensor):
            if rows is not None and k in _ROW_KEYS:
                v = v[rows]
            if v.is_floating_point() and k not in _WEIGHT_KEYS:
                v = v.to(torch.float64)
            elif k not in _WEIGHT_KEYS:
                v = v.clone()
        out[k] = v
    return out, ({"out": rows} if rows is not None else {})


# Unit roundoffs: of the activation dtypes (the intermediate and each expert's output are rounded to them) and of
# e4m3 (3 mantissa bits).
_U = {torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}
U_FP8 = 2.0**-4
# fp8 rounding flips of the intermediate one output element may see (each of its own h_i, or a group scale moved)
FP8_FLIPS = 2


def error_scale(inputs: dict) -> dict:
    """The absolute error bound each output element gets on top of rtol * |ref| (the tolerance's compute_eps is 1).

    The op and the reference round at the same points, but their sums differ (float32 against float64), so a value
    at a rounding boundary can round one ulp apart: an element of the intermediate h, or one expert's output. Each
    such flip moves the output by at most one ulp of a product it sums, covered by ``u * sum_j |w_j| (|W2| @ |h_j|)``
    (u of the activation dtype). Under fp8 the intermediate is re-quantized to e4m3: an h one ulp apart can round to
    the neighbouring e4m3 value (2u_fp8 relative), or move its group's amax and with it the scale; FP8_FLIPS such
    flips of the largest product bound that part."""
    pos, kw = _split(inputs)
    _, mag, peak = fused_moe_reference(*pos, **kw, act_dtype=torch.float64, return_magnitude=True)
    bound = _U[inputs["act_dtype"]] * mag
    if "w1_scale" in kw:
        bound = bound + FP8_FLIPS * 2 * U_FP8 * peak
    return {"out": bound}


def expected_experts(num_tokens: int, experts: int, topk: int) -> float:
    """Expected distinct experts touched when each of num_tokens tokens draws topk distinct experts uniformly."""
    return experts * (1.0 - (1.0 - topk / experts) ** num_tokens)


def work(shape: Shape, dtype: torch.dtype) -> Work:
    """Bytes: x read, the weights (and scales) of the distinct experts touched, out written. The distinct-expert
    count is its expectation under uniform routing, ``E * (1 - (1 - topk/E)^M)`` (a real router is skewed: fewer).
    FLOPs: the two GEMMs only, ``2 * M * topk * (2N * K + K * N)``."""
    M, K, N, E, topk = shape["num_tokens"], shape["hidden"], shape["inter"], shape["experts"], shape["topk"]
    e = torch.finfo(dtype).bits // 8
    quant = shape.get("quant", "none")
    local = shape.get("local", E)
    we = e if quant == "none" else 1
    touched = expected_experts(M, E, topk) * local / E
    per_expert = 3 * N * K * we
    if quant == "fp8_block128":
        blocks = -(-2 * N // SCALE_BLOCK) * -(-K // SCALE_BLOCK) + -(-K // SCALE_BLOCK) * -(-N // SCALE_BLOCK)
        per_expert += 4 * blocks
    elif quant == "fp8_channel":
        per_expert += 4 * (2 * N + K)
    nbytes = 2 * M * K * e + round(touched * per_expert)
    return Work(bytes=nbytes, flops=2 * M * topk * 3 * N * K, fp8=quant != "none")


def sweep_shape(model, num_tokens: int) -> Shape | None:
    """One expert layer of ``model`` at num_tokens tokens (None for a dense model)."""
    if not model.is_moe:
        return None
    return Shape(
        num_tokens=num_tokens,
        hidden=model.hidden,
        inter=model.moe_intermediate,
        experts=model.num_experts,
        topk=model.topk,
        quant=model.moe_quant or "none",
    )


def _s(**kw) -> Shape:
    base = {"num_tokens": 17, "hidden": 96, "inter": 80, "experts": 8, "topk": 2, "quant": "none"}
    base.update(kw)
    return Shape(base)


# K, N not multiples of the tiles (96, 80, 200); M around the decode rule's 16-row blocks and the 64 switch.
_BOUNDARY = (
    _s(num_tokens=1, experts=1, topk=1),
    _s(num_tokens=3, experts=4, topk=3, hidden=200, inter=96),
    _s(num_tokens=17),
    _s(num_tokens=33, experts=8, topk=3, hidden=80, inter=200),
    _s(num_tokens=70, experts=4, topk=2, hidden=96, inter=80),  # past 64: the prefill rule (block_m 64)
    # expert parallelism: 3 of 8 experts here, the rest -1
    _s(num_tokens=17, experts=8, topk=2, local=3),
    _s(num_tokens=5, experts=4, topk=1, routed_input=1),
    _s(num_tokens=9, activation="gelu", ids="int64"),
    # fp8 schemes; block-wise past one 128 block in each of K and N
    _s(num_tokens=17, quant="fp8_tensor"),
    _s(num_tokens=3, quant="fp8_channel", topk=3, hidden=200),
    _s(num_tokens=17, quant="fp8_block128", hidden=200, inter=160),
    _s(num_tokens=5, quant="fp8_channel", static_a=1),
    # one dynamic scale per tensor (vLLM's per-tensor default), with slots of other ranks' experts in h unwritten
    _s(num_tokens=33, quant="fp8_tensor", act_tensor=1, experts=8, local=5),
    _s(num_tokens=9, quant="fp8_block128", experts=8, local=5, topk=2),
    # block-wise fp8 past 8 rows an expert (the 64-row rule: GEMM1 as two 64-column tiles a program), the second
    # 128-column group ragged inside its second tile
    _s(num_tokens=70, quant="fp8_block128", experts=4, topk=2, hidden=200, inter=224),
)

# DeepSeek-V3's layer (fp8 block-wise, E 256, N 2048, K 7168), decode and prefill; bf16 weights past 2^31
# elements (w1: 64 x 8192 x 7168 = 3.8e9) so the expert offsets need int64
_LARGE = (
    Shape(num_tokens=16, hidden=7168, inter=2048, experts=256, topk=8, quant="fp8_block128"),
    Shape(num_tokens=4096, hidden=7168, inter=2048, experts=256, topk=8, quant="fp8_block128"),
    Shape(num_tokens=256, hidden=7168, inter=4096, experts=64, topk=8, quant="none"),
)

# The table's rtol (one rounding of the output) and atol; error_scale adds the flips of the rounding points the op
# and the reference share (compute_eps 1: error_scale is already absolute). Under the interpreter the kernels round
# float32 to bf16 and to e4m3 to nearest even by hand, as the GPU does, so the same tolerance holds there.
_TOLERANCE = {
    torch.bfloat16: Tolerance(
        8e-3, 1e-5, "output rounding to bf16; rounding-point flips through error_scale", compute_eps=1.0
    ),
    torch.float16: Tolerance(
        1e-3, 1e-5, "output rounding to fp16; rounding-point flips through error_scale", compute_eps=1.0
    ),
}

SPEC = OpSpec(
    name="fused_moe",
    fn=fused_moe,
    make_inputs=make_inputs,
    call=call,
    reference=reference,
    boundary=_BOUNDARY,
    sweep_shape=sweep_shape,
    large=_LARGE,
    work=work,
    dtypes=(torch.float16, torch.bfloat16),
    families=("randn", "outlier", "constant"),
    error_scale=error_scale,
    oracle_inputs=oracle_inputs,
    tolerance=_TOLERANCE,
    interpreter_tolerance=_TOLERANCE,
    peers={"vllm": peers.vllm},
    not_compilable="its reference gathers each expert's tokens with data-dependent sizes (nonzero), a graph break "
    "per expert; vllm (vLLM's tuned Triton GEMM) is the peer",
    description="mixture-of-experts MLP over routed tokens (vLLM's fused_experts): grouped GEMMs, bf16/fp16/fp8",
)
