"""The OpSpec of reshape_and_cache.

Shape knobs besides the sizes: ``kv_cache_dtype`` ("auto" or "fp8"); ``layout``: "packed" (contiguous key, value
and caches), "views" (key/value are slices of a fused qkv tensor, the caches views into one padded allocation
holding both, strides multiples of 16) or "odd_views" (the same with strides that are not, so no 16-byte vectors);
every layout keeps a guard block before and after each cache, returned as the outputs ``guard0``..``guard3``;
``padding``: every ``padding``-th token has slot -1 (0: none); ``slot_dtype``: "int32" or "int64".
"""

import math

import torch

from ...spec import OpSpec, Shape, Work
from ...tolerance import Tolerance
from . import peers
from .api import reshape_and_cache
from .config import MAX_BLOCK_T
from .reference import reshape_and_cache_reference

# Per-tensor fp8 scales by input family. k_scale is a power of two, so x / k_scale is exact and lands on e4m3
# rounding ties (bf16 1 in 16, fp16 1 in 128): ties-to-even is checked. v_scale = 1.37 k_scale is not, so the
# division's own rounding is checked. randn spans e4m3's range down into its subnormals, tiny lands in the
# subnormals (2^-9 .. 2^-6), near_max straddles the 448 saturation.
V_SCALE_RATIO = 1.37


def _fp8_k_scale(family: str, dtype: torch.dtype) -> float:
    if family == "tiny":
        return torch.finfo(dtype).tiny * 2.0**7
    if family == "near_max":
        return 2.0 ** round(math.log2(0.7 * torch.finfo(dtype).max / 448.0))
    return 2.0**-5


def _slot_mapping(shape: Shape, fill) -> torch.Tensor:
    """Distinct slots, a random permutation of the cache's last ``4 * num_tokens + block_size`` slots (the whole
    cache for boundary shapes, its far end for large ones), with every ``padding``-th token set to -1."""
    t, total = shape["num_tokens"], shape["num_blocks"] * shape["block_size"]
    if t > total:
        raise ValueError(f"shape {shape.id}: {t} tokens need {t} distinct slots, the cache has {total}")
    span = min(total, 4 * t + shape["block_size"])
    slots = (total - 1) - fill.randperm(span)[:t]
    every = shape["padding"]
    if every:
        slots[every - 1 :: every] = -1
    return slots.to(getattr(torch, shape["slot_dtype"]))


def _caches(shape: Shape, cache_dtype: torch.dtype, device) -> tuple:
    """``(key_cache, value_cache, guard)``: the caches, NaN-filled (the poison: the harness cannot poison in-place
    outputs, so a missed or stray write shows against it), each inside an allocation with a guard block before and
    after it; ``guard`` lists the allocation's regions outside the caches, which no write may touch."""
    h, d, bs, nb = (shape[k] for k in ("num_kv_heads", "head_dim", "block_size", "num_blocks"))
    if shape["layout"] == "packed":
        kb = torch.full((nb + 2, bs, h, d), math.nan, dtype=cache_dtype, device=device)
        vb = torch.full((nb + 2, bs, h, d), math.nan, dtype=cache_dtype, device=device)
        return kb[1:-1], vb[1:-1], (kb[0], kb[-1], vb[0], vb[-1])
    # both caches in one allocation [num_blocks + 2, 2, block_size + 1, h, d + pad] (cross-layer layouts interleave
    # k and v per block): an extra row per block and extra columns per head pad every stride
    pad = 3 if shape["layout"] == "odd_views" else 16
    base = torch.full((nb + 2, 2, bs + 1, h, d + pad), math.nan, dtype=cache_dtype, device=device)
    inner = base[1:-1]
    guard = (base[0], base[-1], inner[:, :, bs:], inner[:, :, :bs, :, d:])
    return inner[:, 0, :bs, :, :d], inner[:, 1, :bs, :, :d], guard


def make_inputs(shape: Shape, dtype: torch.dtype, fill) -> dict:
    t, h, d = shape["num_tokens"], shape["num_kv_heads"], shape["head_dim"]
    fp8 = shape["kv_cache_dtype"] != "auto"
    if shape["layout"] == "packed":
        key, value = fill((t, h, d), dtype), fill((t, h, d), dtype)
    else:
        hq = 2 * h  # query heads ahead of k and v in the fused projection's output
        # odd_views: a token stride that is no multiple of 16 elements, so no 16-byte vectors
        qkv = fill((t, (hq + 2 * h) * d + (5 if shape["layout"] == "odd_views" else 0)), dtype)
        key = qkv[:, hq * d : (hq + h) * d].view(t, h, d)
        value = qkv[:, (hq + h) * d : (hq + 2 * h) * d].view(t, h, d)
    key_cache, value_cache, guard = _caches(shape, torch.float8_e4m3fn if fp8 else dtype, fill.device)
    inputs = {
        "key": key,
        "value": value,
        "key_cache": key_cache,
        "value_cache": value_cache,
        "slot_mapping": _slot_mapping(shape, fill),
        "kv_cache_dtype": shape["kv_cache_dtype"],
        "guard": guard,
    }
    if fp8:
        s = _fp8_k_scale(fill.family, dtype)
        inputs["k_scale"] = torch.full((1,), s, dtype=torch.float32, device=fill.device)
        inputs["v_scale"] = torch.full((1,), s * V_SCALE_RATIO, dtype=torch.float32, device=fill.device)
    return inputs


def outputs(inputs: dict) -> dict:
    """What a call is judged on, as views (no kernel, so timing a call times the op alone): the whole caches, where
    a write outside the target slots or a missed one differs from the reference, and the guard regions around
    them, which must still hold the NaN they were allocated with."""
    out = {"key_cache": inputs["key_cache"], "value_cache": inputs["value_cache"]}
    out.update({f"guard{i}": g for i, g in enumerate(inputs["guard"])})
    return out


def call(inputs: dict) -> dict:
    reshape_and_cache(
        inputs["key"],
        inputs["value"],
        inputs["key_cache"],
        inputs["value_cache"],
        inputs["slot_mapping"],
        kv_cache_dtype=inputs["kv_cache_dtype"],
        k_scale=inputs.get("k_scale"),
        v_scale=inputs.get("v_scale"),
    )
    return outputs(inputs)


def reference(inputs: dict, dtype: torch.dtype) -> dict:
    kc, vc = reshape_and_cache_reference(
        inputs["key"],
        inputs["value"],
        inputs["key_cache"],
        inputs["value_cache"],
        inputs["slot_mapping"],
        inputs["kv_cache_dtype"],
        inputs.get("k_scale"),
        inputs.get("v_scale"),
    )
    out = {"key_cache": kc, "value_cache": vc}
    out.update(
        {
            f"guard{i}": torch.full(g.shape, math.nan, dtype=torch.float64, device=kc.device)
            for i, g in enumerate(inputs["guard"])
        }
    )
    return out


def _valid_tokens(shape: Shape) -> int:
    t, every = shape["num_tokens"], shape["padding"]
    return t - (t // every if every else 0)


def work(shape: Shape, dtype: torch.dtype) -> Work:
    n = _valid_tokens(shape) * shape["num_kv_heads"] * shape["head_dim"]
    fp8 = shape["kv_cache_dtype"] != "auto"
    e = torch.finfo(dtype).bits // 8
    slot_bytes = shape["num_tokens"] * (4 if shape["slot_dtype"] == "int32" else 8)
    # key and value read, both cache rows written; fp8 adds a division per element
    return Work(bytes=2 * n * (e + (1 if fp8 else e)) + slot_bytes + (8 if fp8 else 0), flops=2 * n if fp8 else 0)


# Models whose sweep runs with an fp8 cache: mistral-7b has llama3-8b's 8 x 128 geometry, so the two sweeps put
# "auto" and "fp8" side by side; a TP-8 70B rank is where fp8 caches are common in serving.
FP8_SWEEP_MODELS = ("mistral-7b", "llama3-70b-tp8")
SWEEP_BLOCK_SIZE = 16


def sweep_shape(model, num_tokens: int) -> Shape | None:
    if not model.has_attention:
        return None
    return Shape(
        num_tokens=num_tokens,
        num_kv_heads=model.num_kv_heads,
        head_dim=model.head_dim,
        block_size=SWEEP_BLOCK_SIZE,
        num_blocks=-(-num_tokens // SWEEP_BLOCK_SIZE) + 1,
        kv_cache_dtype="fp8" if model.name in FP8_SWEEP_MODELS else "auto",
        layout="packed",
        padding=0,
        slot_dtype="int64",
    )


def _shape(t, h, d, bs, nb, kv="auto", layout="packed", padding=0, slot_dtype="int64") -> Shape:
    return Shape(
        num_tokens=t,
        num_kv_heads=h,
        head_dim=d,
        block_size=bs,
        num_blocks=nb,
        kv_cache_dtype=kv,
        layout=layout,
        padding=padding,
        slot_dtype=slot_dtype,
    )


_BOUNDARY = (
    _shape(1, 1, 64, 1, 2),  # one decode token, block_size 1
    _shape(7, 3, 80, 16, 2, padding=3, slot_dtype="int32"),  # odd kv heads, head_dim 80
    _shape(7, 4, 80, 1, 9, "fp8", padding=2),
    _shape(16, 2, 96, 16, 2, "fp8"),  # head_dim 96
    _shape(2 * MAX_BLOCK_T + 1, 8, 128, 16, 1, padding=4),  # 8 x 128: the bench geometry
    _shape(17, 8, 128, 16, 3, layout="views", padding=4),  # key/value views of fused qkv, padded caches
    _shape(17, 8, 128, 16, 3, "fp8", layout="odd_views", padding=5, slot_dtype="int32"),
    _shape(16, 2, 256, 16, 1, "fp8"),  # every slot of the cache written
    _shape(33, 1, 256, 32, 3, slot_dtype="int32"),  # head_dim 256, block_size 32
    _shape(65, 5, 64, 64, 3, "fp8", padding=2),  # block_size 64
    _shape(5, 33, 128, 8, 1),  # more kv heads than one program's BLOCK_H: grid[1] > 1 with a ragged last tile
    _shape(5, 33, 128, 8, 1, "fp8", layout="views"),
    _shape(4, 4, 64, 16, 1, padding=1),  # all padding: nothing may be written
    _shape(255, 2, 64, 16, 17, layout="odd_views", padding=7),
)

# 131136 blocks x 16 x 8 x 128 = 2^31 + 2^20 elements per cache (4.3 GB each in bf16), a thousand tokens written at
# its far end; and 2^19 + 4099 tokens as views of a fused qkv [T, 32 x 128]: token offsets in key and value pass
# 2^31 elements (and grid[0] is 132K programs) while the tensors themselves stay ~2^31 elements in all.
_LARGE_BLOCKS = (1 << 31) // (16 * 8 * 128) + 64
_LONG = (1 << 19) + 4099
LARGE = (
    _shape(999, 8, 128, 16, _LARGE_BLOCKS, padding=7),
    _shape(999, 8, 128, 16, _LARGE_BLOCKS, "fp8", padding=7, slot_dtype="int32"),
    _shape(_LONG, 8, 128, 16, _LONG // 16 + 2, layout="views"),
)

# A copy and a single correctly rounded division + round-to-nearest-even conversion: the reference reproduces both
# bit for bit, so any difference is a bug. (atol is the smallest positive number instead of 0, so an exact match
# gives ratio 0 rather than 0/0.)
EXACT = Tolerance(0.0, 5e-324, "exact: a bit copy, or fp32 x/scale rounded once to e4m3, reproduced bit for bit")

SPEC = OpSpec(
    name="reshape_and_cache",
    fn=reshape_and_cache,
    make_inputs=make_inputs,
    call=call,
    reference=reference,
    boundary=_BOUNDARY,
    sweep_shape=sweep_shape,
    large=LARGE,
    work=work,
    families=("randn", "near_max", "tiny", "outlier", "nonfinite"),
    tolerance={torch.float16: EXACT, torch.bfloat16: EXACT, torch.float32: EXACT},
    # the guard regions are views of the caches' allocation (the caches' dtype), compared whole like the caches
    inplace=("key_cache", "value_cache", "guard0", "guard1", "guard2", "guard3"),
    peers={"vllm": peers.vllm(outputs)},
    description="write key/value rows into a paged KV cache at slot_mapping (vLLM's reshape_and_cache_flash), "
    "optionally quantized to fp8 e4m3 with per-tensor scales",
)
