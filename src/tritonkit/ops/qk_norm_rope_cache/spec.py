"""The OpSpec of qk_norm_rope_cache.

Shape knobs besides the sizes: ``rot_dim`` (0: no rotary), ``is_neox``, ``norm`` (0: no QK-norm, RoPE and the cache
write only), ``weight_bias`` (1: Gemma's ``1 + w`` weights), ``kv_cache_dtype`` ("auto" or "fp8"); ``layout``:
"packed" (contiguous qkv and caches) or "views" (qkv rows with an odd stride, the caches views into one padded
allocation holding both); every layout keeps guard regions around the caches, returned as ``guard0``..``guard3``;
``padding``: every ``padding``-th slot is -1 (0: none); ``short``: slot_mapping has that many fewer entries than
qkv has tokens; ``pos_int32``, ``cs_fp32`` (cos/sin in float32, else the model dtype), ``w_fp32`` (norm weights
in float32, else the model dtype).
"""

import math

import torch

from ...spec import OpSpec, Shape, Work
from ...tolerance import Tolerance
from . import peers
from .api import qk_norm_rope_cache
from .config import TILE
from .reference import norm_rope, qk_norm_rope_cache_reference, quantize_e4m3

EPS = 1e-6
ROPE_BASE = 10000.0
# k is normed to O(1) (at most sqrt(head_dim) = 16 times a weight): 2^-5 puts it across e4m3's range with a
# power-of-two scale (x / scale exact, so ties-to-even is checked); v_scale = 1.37 x its family's scale is not one,
# so the division's own rounding is checked too
NORMED_K_SCALE = 2.0**-5
V_SCALE_RATIO = 1.37
# the compute_eps every tolerance of the table carries: error_scale's allowance is written in its units
COMPUTE_EPS = Tolerance(1.0, 1.0, "").compute_eps


def _family_scale(family: str, dtype: torch.dtype) -> float:
    """A scale that puts raw inputs of the family across e4m3's range (tiny into its subnormals, near_max across the
    448 saturation)."""
    if family == "tiny":
        return torch.finfo(dtype).tiny * 2.0**7
    if family == "near_max":
        return 2.0 ** round(math.log2(0.7 * torch.finfo(dtype).max / 448.0))
    return 2.0**-5


def _cos_sin_cache(max_position: int, rot_dim: int, dtype: torch.dtype, device) -> torch.Tensor:
    """A real RoPE cache: angles in float64, then rounded to the cache dtype (the values both sides share)."""
    inv_freq = ROPE_BASE ** -(torch.arange(0, rot_dim, 2, dtype=torch.float64, device=device) / rot_dim)
    angles = torch.arange(max_position, dtype=torch.float64, device=device)[:, None] * inv_freq[None, :]
    return torch.cat((angles.cos(), angles.sin()), dim=-1).to(dtype)


def _slot_mapping(shape: Shape, fill) -> torch.Tensor:
    """Distinct slots, a random permutation of the cache's last ``4 * num_tokens + block_size`` slots, every
    ``padding``-th set to -1, and ``short`` fewer than there are tokens."""
    t, total = shape["num_tokens"] - shape["short"], shape["num_blocks"] * shape["block_size"]
    if t > total:
        raise ValueError(f"shape {shape.id}: {t} tokens need {t} distinct slots, the cache has {total}")
    span = min(total, 4 * t + shape["block_size"])
    slots = (total - 1) - fill.randperm(span)[:t]
    if shape["padding"]:
        slots[shape["padding"] - 1 :: shape["padding"]] = -1
    return slots


def _caches(shape: Shape, cache_dtype: torch.dtype, device) -> tuple:
    """``(key_cache, value_cache, guard)``: NaN-filled caches (the harness cannot poison in-place outputs, so a
    missed or stray write shows against the NaN), each inside an allocation whose regions outside it (``guard``)
    no write may touch."""
    h, d, bs, nb = (shape[k] for k in ("num_kv_heads", "head_dim", "block_size", "num_blocks"))
    if shape["layout"] == "packed":
        kb = torch.full((nb + 2, bs, h, d), math.nan, dtype=cache_dtype, device=device)
        vb = torch.full((nb + 2, bs, h, d), math.nan, dtype=cache_dtype, device=device)
        return kb[1:-1], vb[1:-1], (kb[0], kb[-1], vb[0], vb[-1])
    # both caches in one allocation [num_blocks + 2, 2, block_size + 1, h, d + 16]: every stride padded
    base = torch.full((nb + 2, 2, bs + 1, h, d + 16), math.nan, dtype=cache_dtype, device=device)
    inner = base[1:-1]
    guard = (base[0], base[-1], inner[:, :, bs:], inner[:, :, :bs, :, d:])
    return inner[:, 0, :bs, :, :d], inner[:, 1, :bs, :, :d], guard


def make_inputs(shape: Shape, dtype: torch.dtype, fill) -> dict:
    t, hq, hk, d = shape["num_tokens"], shape["num_q_heads"], shape["num_kv_heads"], shape["head_dim"]
    rot, max_pos = shape["rot_dim"], shape["max_position"]
    fp8 = shape["kv_cache_dtype"] != "auto"
    norm = bool(shape["norm"])
    width = (hq + 2 * hk) * d
    data = fill
    if fill.family == "near_max" and not norm and fill.device.type != "meta":
        # without the norm the rotation sees the raw values: 0.75 of the family keeps pairs under the dtype's max
        # however they rotate (0.9 * 0.75 * sqrt(2) < 1), as rotary_embedding's spec does
        data = lambda size, dt, family=None: fill(size, dt, family=family) * 0.75  # noqa: E731
    if shape["layout"] == "packed":
        qkv = data((t, width), dtype)
    else:
        # an odd token stride: no 16-byte vectors along tokens
        qkv = data((t, width + 5), dtype)[:, :width]
    positions = fill.randint(0, max_pos, (t,), torch.int32 if shape["pos_int32"] else torch.int64)
    if t >= 2 and fill.device.type != "meta":
        positions[0], positions[-1] = max_pos - 1, 0  # both ends of the cache, every time
    key_cache, value_cache, guard = _caches(shape, torch.float8_e4m3fn if fp8 else dtype, fill.device)
    inputs = {
        "qkv": qkv,
        "positions": positions,
        "cos_sin_cache": None
        if rot == 0
        else _cos_sin_cache(max_pos, rot, torch.float32 if shape["cs_fp32"] else dtype, fill.device),
        "key_cache": key_cache,
        "value_cache": value_cache,
        "slot_mapping": _slot_mapping(shape, fill),
        "num_q_heads": hq,
        "num_kv_heads": hk,
        "is_neox": bool(shape["is_neox"]),
        "weight_bias": float(shape["weight_bias"]),
        "kv_cache_dtype": shape["kv_cache_dtype"],
        "model_dtype": dtype,
        "guard": guard,
    }
    if norm:
        wdt = torch.float32 if shape["w_fp32"] else dtype
        # learned scales around 1 (Gemma's around 0, added to 1): not where the difficulty is
        center = 0.0 if shape["weight_bias"] else 1.0
        inputs["q_weight"] = center + 0.1 * fill((d,), wdt, family="randn")
        inputs["k_weight"] = center + 0.1 * fill((d,), wdt, family="randn")
    if fp8:
        vs = _family_scale(fill.family, dtype)
        ks = NORMED_K_SCALE if norm else vs
        inputs["k_scale"] = torch.full((1,), ks, dtype=torch.float32, device=fill.device)
        inputs["v_scale"] = torch.full((1,), vs * V_SCALE_RATIO, dtype=torch.float32, device=fill.device)
    return inputs


def _outputs(inputs: dict, q: torch.Tensor) -> dict:
    out = {"q": q, "key_cache": inputs["key_cache"], "value_cache": inputs["value_cache"]}
    out.update({f"guard{i}": g for i, g in enumerate(inputs["guard"])})
    return out


def call(inputs: dict) -> dict:
    q = qk_norm_rope_cache(
        inputs["qkv"],
        inputs["positions"],
        inputs["cos_sin_cache"],
        inputs["key_cache"],
        inputs["value_cache"],
        inputs["slot_mapping"],
        num_q_heads=inputs["num_q_heads"],
        num_kv_heads=inputs["num_kv_heads"],
        q_weight=inputs.get("q_weight"),
        k_weight=inputs.get("k_weight"),
        eps=EPS,
        weight_bias=inputs["weight_bias"],
        is_neox=inputs["is_neox"],
        kv_cache_dtype=inputs["kv_cache_dtype"],
        k_scale=inputs.get("k_scale"),
        v_scale=inputs.get("v_scale"),
    )
    return _outputs(inputs, q)


def reference(inputs: dict, dtype: torch.dtype) -> dict:
    q, _, _ = qk_norm_rope_cache_reference(
        inputs["qkv"],
        inputs["positions"],
        inputs["cos_sin_cache"],
        inputs["key_cache"],
        inputs["value_cache"],
        inputs["slot_mapping"],
        inputs["num_q_heads"],
        inputs["num_kv_heads"],
        inputs.get("q_weight"),
        inputs.get("k_weight"),
        EPS,
        inputs["weight_bias"],
        inputs["is_neox"],
        inputs["kv_cache_dtype"],
        inputs.get("k_scale"),
        inputs.get("v_scale"),
        dtype=dtype,
    )
    out = _outputs(inputs, q)
    for i, g in enumerate(inputs["guard"]):
        out[f"guard{i}"] = torch.full(g.shape, math.nan, dtype=torch.float64, device=q.device)
    return out


def _heads(inputs: dict, first: int, count: int) -> torch.Tensor:
    qkv, hq, hk = inputs["qkv"], inputs["num_q_heads"], inputs["num_kv_heads"]
    t = qkv.shape[0]
    return qkv.reshape(t, hq + 2 * hk, -1)[:, first : first + count]


def error_scale(inputs: dict) -> dict:
    """``|x1 cos| + |x2 sin|`` per rotated element of q and of k's cache rows (a float32 rotation errs by ulps of
    these, not of its result), plus where the normed head, rounded to the model dtype before the rotation, lies so
    near a rounding midpoint that float32 arithmetic may round it the other way, what that ulp moves the output by
    (an output far smaller than its terms moves by far more than its own ulp). An fp8 key cache is held to the bit,
    except where the k value the op quantizes (float32 arithmetic rounded to the model dtype) could round to a
    neighbour of the reference's in the model dtype and that neighbour quantizes to the next e4m3 value: there one
    e4m3 step is allowed."""
    hq, hk, dtype = inputs["num_q_heads"], inputs["num_kv_heads"], inputs["model_dtype"]
    args = (inputs["positions"], inputs["cos_sin_cache"])
    kw = dict(eps=EPS, weight_bias=inputs["weight_bias"], is_neox=inputs["is_neox"], dtype=dtype)
    xq, xk = _heads(inputs, 0, hq), _heads(inputs, hq, hk)
    qw, kw_ = inputs.get("q_weight"), inputs.get("k_weight")
    q_flips = norm_rope(xq, *args, qw, terms="flip", **kw)
    q_mag = norm_rope(xq, *args, qw, terms="abs", **kw) + q_flips / COMPUTE_EPS
    k_flips = norm_rope(xk, *args, kw_, terms="flip", **kw)
    k_mag = norm_rope(xk, *args, kw_, terms="abs", **kw) + k_flips / COMPUTE_EPS
    kc = inputs["key_cache"]
    scale = torch.zeros(kc.shape, dtype=torch.float64, device=kc.device)
    slots = inputs["slot_mapping"]
    valid = (slots >= 0) & (slots < kc.shape[0] * kc.shape[1])
    s = slots[valid].long()
    rows = k_mag[: slots.shape[0]][valid]
    if inputs["kv_cache_dtype"] != "auto":
        k = norm_rope(xk, *args, kw_, **kw)[: slots.shape[0]][valid]
        flips = k_flips[: slots.shape[0]][valid]
        d = 2.0**-16 * (rows - flips / COMPUTE_EPS + k.abs()) + flips
        ks = inputs["k_scale"]
        lo = quantize_e4m3((k - d).to(dtype), ks).to(torch.float64)
        hi = quantize_e4m3((k + d).to(dtype), ks).to(torch.float64)
        rows = torch.where(lo == hi, torch.zeros_like(k), (hi - lo).abs() / COMPUTE_EPS).nan_to_num(0.0)
    bs = kc.shape[1]
    scale[s // bs, s % bs] = rows
    return {"q": q_mag, "key_cache": scale}


def _valid_tokens(shape: Shape) -> int:
    t, every = shape["num_tokens"] - shape["short"], shape["padding"]
    return t - (t // every if every else 0)


def work(shape: Shape, dtype: torch.dtype) -> Work:
    t, hq, hk, d = shape["num_tokens"], shape["num_q_heads"], shape["num_kv_heads"], shape["head_dim"]
    e = torch.finfo(dtype).bits // 8
    ce = 1 if shape["kv_cache_dtype"] != "auto" else e
    n = _valid_tokens(shape) * hk * d
    rot = shape["rot_dim"]
    cs_rows = min(t, shape["max_position"]) * rot * (4 if shape["cs_fp32"] else e)
    # qkv read once, q written, k and v rows into the caches, positions and slots, one cos/sin row per position
    idx = t * (4 if shape["pos_int32"] else 8) + (t - shape["short"]) * 8
    bytes_ = t * (hq + 2 * hk) * d * e + t * hq * d * e + 2 * n * ce + idx + (cs_rows if rot else 0)
    # per normed element: square-add, two multiplies; per rotated pair: 4 mul, 2 add; fp8: a division each
    flops = (4 * t * (hq + hk) * d if shape["norm"] else 0) + 3 * t * (hq + hk) * rot
    return Work(bytes=bytes_, flops=flops + (2 * n if ce == 1 else 0))


def _shape(
    t,
    hq,
    hk,
    d,
    rot,
    *,
    neox=1,
    norm=1,
    gemma=0,
    kv="auto",
    bs=16,
    nb=None,
    padding=0,
    short=0,
    layout="packed",
    pos_int32=0,
    cs_fp32=1,
    w_fp32=0,
    max_position=4096,
) -> Shape:
    return Shape(
        num_tokens=t,
        num_q_heads=hq,
        num_kv_heads=hk,
        head_dim=d,
        rot_dim=rot,
        is_neox=neox,
        norm=norm,
        weight_bias=gemma,
        kv_cache_dtype=kv,
        block_size=bs,
        num_blocks=-(-t // bs) + 2 if nb is None else nb,
        padding=padding,
        short=short,
        layout=layout,
        pos_int32=pos_int32,
        cs_fp32=cs_fp32,
        w_fp32=w_fp32,
        max_position=max_position,
    )


# Models whose sweep runs with an fp8 cache (as reshape_and_cache's): mistral-7b beside llama3-8b's geometry, a
# TP-8 70B rank where fp8 caches are common in serving
FP8_SWEEP_MODELS = ("mistral-7b", "llama3-70b-tp8")
SWEEP_BLOCK_SIZE = 16


def sweep_shape(model, num_tokens: int) -> Shape | None:
    if not model.has_attention:
        return None
    # vLLM's layout: a packed qkv projection, cos/sin in the model dtype, int64 positions and slots; the norm on
    # every model (the op with QK-norm is what is timed; the models table does not say which models have it)
    return _shape(
        num_tokens,
        model.num_heads,
        model.num_kv_heads,
        model.head_dim,
        model.rotary_dim,
        neox=int(model.is_neox),
        kv="fp8" if model.name in FP8_SWEEP_MODELS else "auto",
        bs=SWEEP_BLOCK_SIZE,
        cs_fp32=0,
        max_position=65536,
    )


_BOUNDARY = (
    # one decode token of Qwen3-8B-like heads (32 / 8 x 128), neox, norm in the model dtype
    _shape(1, 32, 8, 128, 128),
    # head_dim 64 and 256, GQA with one kv head, padding slots, block boundaries (block_size 1 and 4)
    _shape(5, 8, 1, 64, 64, bs=1, padding=2),
    _shape(3, 4, 1, 256, 256, kv="fp8", bs=4, padding=3, w_fp32=1),
    _shape(4, 8, 2, 256, 128, neox=0, layout="views"),  # gpt-j partial rotary on 256 (Gemma 3 head size)
    # partial rotary: rotary_dim < head_dim, both styles, a non-power-of-two tail (96 -> 64 rotated + 32)
    _shape(7, 6, 2, 128, 64, neox=0, kv="fp8", padding=4, pos_int32=1),
    _shape(9, 3, 1, 96, 64, layout="views", short=2, cs_fp32=0),
    _shape(6, 2, 2, 80, 32, gemma=1, bs=8, w_fp32=1),  # Phi-2's rot 32 of 80, Gemma's 1 + w weights
    # without the norm: RoPE and the cache write only (every model), and neither (a plain cache write beside q)
    _shape(5, 4, 2, 128, 128, norm=0, kv="fp8", padding=2),
    _shape(3, 4, 2, 64, 0, norm=0, layout="views"),
    _shape(4, 2, 1, 64, 0, gemma=1, kv="fp8"),  # norm without rotary (vLLM's rotary_dim=0)
    # one q head past the q block cap (TILE / 128 heads): a second q block of one head
    _shape(2, TILE // 128 + 1, 3, 128, 128, bs=4),
    # a prefill-sized run of tokens over many programs, padding, a slot list shorter than the tokens
    _shape(65, 4, 2, 64, 64, bs=16, padding=7, short=3, layout="views"),
    # every slot of the cache written
    _shape(16, 2, 2, 64, 64, kv="fp8", bs=16, nb=1),
    # all padding: nothing may be written
    _shape(4, 2, 2, 64, 64, padding=1),
    # a one-row cos/sin cache (every position 0)
    _shape(3, 2, 1, 64, 64, max_position=1),
)

# 8 kv heads x 128, block 16: 2^31 / 16384 + 64 blocks, past 2^31 elements per cache (4.3 GB in bf16), a thousand
# tokens written at its far end; and a long qkv of (8 + 2) x 128 per token past 2^31 elements (token offsets past
# int32).
_LARGE_BLOCKS = (1 << 31) // (16 * 8 * 128) + 64
_LONG = (1 << 31) // (10 * 128) + 1
LARGE = (
    _shape(999, 32, 8, 128, 128, nb=_LARGE_BLOCKS, padding=7),
    _shape(999, 32, 8, 128, 128, kv="fp8", nb=_LARGE_BLOCKS, padding=7, pos_int32=1),
    _shape(_LONG, 8, 1, 128, 128, max_position=8192),
)

SPEC = OpSpec(
    name="qk_norm_rope_cache",
    fn=qk_norm_rope_cache,
    make_inputs=make_inputs,
    call=call,
    reference=reference,
    boundary=_BOUNDARY,
    sweep_shape=sweep_shape,
    large=LARGE,
    work=work,
    # nonfinite is left out: a head holding inf has no RMS (the oracle's float64 and the op's rescaled sum disagree
    # on which elements become NaN); cancellation: 1000 +- 0.01 normed to +-1 rotated to ~0, held to the terms
    families=("randn", "near_max", "tiny", "constant", "outlier", "cancellation"),
    error_scale=error_scale,
    # the guard regions are views of the caches' allocation, compared whole like the caches
    inplace=("key_cache", "value_cache", "guard0", "guard1", "guard2", "guard3"),
    peers={"unfused": peers.unfused(_outputs, EPS)},
    description="per-head RMSNorm of q and k, rotary (neox or gpt-j, partial), k and v into the paged KV cache "
    "(fp8 with scales), q returned; one launch (vLLM's fused_qknorm_rope_cache)",
)
