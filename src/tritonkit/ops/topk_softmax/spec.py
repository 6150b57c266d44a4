"""The OpSpec of topk_softmax.

Shape knobs besides the sizes: ``renormalize`` (0 or 1); ``layout``: "packed" (contiguous logits) or "strided"
(each row a slice of a wider buffer, the row stride not the expert count); optional ``bias`` (1: an
``e_score_correction_bias`` of randn x 0.05, about the spread of the probabilities at 8-60 experts, so it changes the
choice) and ``padding`` (1: every third row, from the second, is marked ``is_padding``).
"""

import torch

from ...spec import OpSpec, Shape, Work
from ...tolerance import Tolerance
from .api import topk_softmax
from .config import TILE_ELEMS
from .reference import topk_softmax_reference

# columns past the experts in a "strided" row: an odd stride, so no 16-byte vectors
_ROW_PAD = 3


def make_inputs(shape: Shape, dtype: torch.dtype, fill) -> dict:
    t, e = shape["num_tokens"], shape["num_experts"]
    if shape["layout"] == "strided":
        logits = fill((t, e + _ROW_PAD), dtype)[:, :e]
    else:
        logits = fill((t, e), dtype)
    inputs = {"gating_output": logits, "topk": shape["topk"], "renormalize": bool(shape["renormalize"])}
    if shape.get("bias", 0):
        # from the randn family whatever the case's: a bias near the dtype's max would only test float32 absorption
        inputs["e_score_correction_bias"] = fill((e,), torch.float32, family="randn") * 0.05
    if shape.get("padding", 0):
        inputs["is_padding"] = torch.arange(t, device=logits.device) % 3 == 1
    return inputs


def _optional(inputs: dict) -> dict:
    return {k: inputs[k] for k in ("e_score_correction_bias", "is_padding") if k in inputs}


def call(inputs: dict) -> dict:
    w, ids = topk_softmax(
        inputs["gating_output"], inputs["topk"], renormalize=inputs["renormalize"], **_optional(inputs)
    )
    return {"topk_weights": w, "topk_ids": ids}


def reference(inputs: dict, dtype: torch.dtype) -> dict:
    w, ids = topk_softmax_reference(inputs["gating_output"], inputs["topk"], inputs["renormalize"], **_optional(inputs))
    return {"topk_weights": w, "topk_ids": ids}


def work(shape: Shape, dtype: torch.dtype) -> Work:
    t, e, k = shape["num_tokens"], shape["num_experts"], shape["topk"]
    # logits read, float32 weights and int32 ids written; per logit: sub, exp, add, and a compare per pick
    extra = 4 * e * shape.get("bias", 0) + t * shape.get("padding", 0)  # the bias and the padding mask read
    return Work(bytes=t * e * (torch.finfo(dtype).bits // 8) + 8 * t * k + extra, flops=(3 + k) * t * e)


def sweep_shape(model, num_tokens: int) -> Shape | None:
    if not model.is_moe:
        return None
    # Mixtral and Qwen3-MoE renormalize their top-k; DeepSeek-V3 routes with grouped sigmoid scores instead, but
    # its 256 x top-8 is the geometry a softmax router of that size has
    return Shape(num_tokens=num_tokens, num_experts=model.num_experts, topk=model.topk, renormalize=1, layout="packed")


def _shape(t, e, k, renormalize=0, layout="packed", **features) -> Shape:
    return Shape(num_tokens=t, num_experts=e, topk=k, renormalize=renormalize, layout=layout, **features)


# rows per program: TILE_ELEMS / next_pow2(E) (128 rows at E=8, 16 at E=64, 2 at E=512)
_ROWS_8, _ROWS_64 = TILE_ELEMS // 8, TILE_ELEMS // 64
_BOUNDARY = (
    _shape(1, 1, 1),  # one expert
    _shape(3, 2, 2, 1),  # topk = E, renormalized
    _shape(_ROWS_8 - 1, 8, 2, 1),  # Mixtral: rows around one program's 128
    _shape(_ROWS_8 + 1, 8, 8),  # topk = E
    _shape(_ROWS_64 + 1, 60, 4, 1, "strided"),  # non-power-of-two experts (Qwen1.5-MoE), strided rows
    _shape(5, 64, 6, 0, "strided"),
    _shape(9, 128, 8, 1),  # Qwen3-MoE
    _shape(4, 256, 8),  # DeepSeek-V3's geometry
    _shape(3, 512, 32, 1),  # 512 experts, topk 32
    _shape(2, 1000, 5),  # a ragged wide row
    # vLLM's bias router and padding mask: rows across two programs, strided non-power-of-two rows, 256 experts
    _shape(_ROWS_8 + 1, 8, 2, 1, bias=1, padding=1),
    _shape(17, 60, 4, 1, "strided", bias=1),
    _shape(5, 256, 8, 0, padding=1),
)

# The weights are a float32 softmax of logits the float64 reference reads exactly, so the float32 table entry
# applies whatever the input dtype (exp, a sum over E <= 4096 and a division: a few ulps of float32).
# The ids (int32) are compared exactly, as every integer output is: the kernel ranks experts by their float32
# logits, an exact conversion of the input, and the reference by the same logits in float64: both are the order
# of the exact probabilities, with ties (equal logits only) broken toward the lower index, so a correct kernel
# matches the reference id for id on every input, near-ties and underflowed probabilities included. With a bias the
# rank is of the float32 score probability + bias, which the reference forms from its probability rounded to float32:
# a kernel probability a few ulps off could swap two scores within those ulps, which these inputs do not hold.
_TOL = Tolerance(1e-5, 1e-6, "float32 softmax whatever the input dtype")

SPEC = OpSpec(
    name="topk_softmax",
    fn=topk_softmax,
    make_inputs=make_inputs,
    call=call,
    reference=reference,
    boundary=_BOUNDARY,
    sweep_shape=sweep_shape,
    # none: row offsets are int64 in the kernel, and the outputs are [T, topk]; logits pass 2^31 elements only
    # past 4M tokens at 512 experts
    large=(),
    work=work,
    # every family has finite logits; nonfinite (NaN, +inf) is outside the op's contract
    families=("randn", "near_max", "tiny", "constant", "outlier", "cancellation"),
    tolerance={torch.float16: _TOL, torch.bfloat16: _TOL, torch.float32: _TOL},
    # the op's contract, whatever the logits' dtype
    output_dtypes={"topk_weights": torch.float32, "topk_ids": torch.int32},
    description="router softmax over the experts and the top-k of each token (vLLM's topk_softmax)",
)
