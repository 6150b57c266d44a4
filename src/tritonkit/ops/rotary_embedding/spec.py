"""The OpSpec of rotary_embedding."""

import torch

from ...spec import OpSpec, Shape, Work
from .api import rotary_embedding
from .config import TILE
from .reference import rotary_embedding_reference

ROPE_BASE = 10000.0


def _cos_sin_cache(max_position: int, rot_dim: int, dtype: torch.dtype, device) -> torch.Tensor:
    """A real RoPE cache: angles in float64, then rounded to the cache dtype (the values both sides then share)."""
    inv_freq = ROPE_BASE ** -(torch.arange(0, rot_dim, 2, dtype=torch.float64, device=device) / rot_dim)
    angles = torch.arange(max_position, dtype=torch.float64, device=device)[:, None] * inv_freq[None, :]
    return torch.cat((angles.cos(), angles.sin()), dim=-1).to(dtype)


def make_inputs(shape: Shape, dtype: torch.dtype, fill) -> dict:
    t, hq, hk, d = shape["num_tokens"], shape["num_q_heads"], shape["num_kv_heads"], shape["head_dim"]
    max_pos = shape["max_position"]
    positions = fill.randint(0, max_pos, (t,), torch.int32 if shape["pos_int32"] else torch.int64)
    if t >= 2 and fill.device.type != "meta":
        # both ends of the cache, every time
        positions[0], positions[-1] = max_pos - 1, 0
    inputs = {
        "positions": positions,
        "cos_sin_cache": _cos_sin_cache(
            max_pos, shape["rot_dim"], torch.float32 if shape["cache_fp32"] else dtype, fill.device
        ),
        "is_neox": bool(shape["is_neox"]),
    }
    if fill.family == "near_max" and fill.device.type != "meta":
        # 0.75 of the family: pairs stay under the dtype's max however they rotate (0.9 * 0.75 * sqrt(2) < 1), so
        # the case measures accuracy near the top of the range; overflow to inf has its own test
        data_fill, fill = fill, (lambda size, dt, family=None: data_fill(size, dt, family=family) * 0.75)
    if shape["fused"]:
        # vLLM's fused qkv projection [T, (Hq + 2Hk) * D]; call() takes q and k as views of it, so the inputs stay
        # plain tensors that a tool may clone, and v must come out untouched
        inputs.update(qkv=fill((t, (hq + 2 * hk) * d), dtype), num_q_heads=hq, num_kv_heads=hk)
    else:
        inputs.update(q=fill((t, hq, d), dtype), k=fill((t, hk, d), dtype))
    return inputs


def _q_k(inputs: dict) -> tuple[torch.Tensor, torch.Tensor]:
    if "qkv" not in inputs:
        return inputs["q"], inputs["k"]
    qkv, hq, hk = inputs["qkv"], inputs["num_q_heads"], inputs["num_kv_heads"]
    t, d = qkv.shape[0], qkv.shape[1] // (hq + 2 * hk)
    return qkv[:, : hq * d].view(t, hq, d), qkv[:, hq * d : (hq + hk) * d].view(t, hk, d)


def call(inputs: dict) -> dict:
    q, k = rotary_embedding(inputs["positions"], *_q_k(inputs), inputs["cos_sin_cache"], is_neox=inputs["is_neox"])
    return {"qkv": inputs["qkv"]} if "qkv" in inputs else {"q": q, "k": k}


def reference(inputs: dict, dtype: torch.dtype) -> dict:
    q, k = rotary_embedding_reference(inputs["positions"], *_q_k(inputs), inputs["cos_sin_cache"], inputs["is_neox"])
    if "qkv" not in inputs:
        return {"q": q, "k": k}
    t = q.shape[0]
    return {
        "qkv": torch.cat((q.reshape(t, -1), k.reshape(t, -1), inputs["qkv"][:, q[0].numel() + k[0].numel() :]), dim=1)
    }


def error_scale(inputs: dict) -> dict:
    """|x1 cos| + |x2 sin| per rotated element: a float32 rotation errs by ulps of these, not of its result."""
    q, k = rotary_embedding_reference(
        inputs["positions"], *_q_k(inputs), inputs["cos_sin_cache"], inputs["is_neox"], magnitude=True
    )
    if "qkv" not in inputs:
        return {"q": q, "k": k}
    t = q.shape[0]
    v = torch.zeros_like(inputs["qkv"][:, q[0].numel() + k[0].numel() :])
    return {"qkv": torch.cat((q.reshape(t, -1), k.reshape(t, -1), v), dim=1)}


def work(shape: Shape, dtype: torch.dtype) -> Work:
    t, rot, e = shape["num_tokens"], shape["rot_dim"], torch.finfo(dtype).bits // 8
    heads = shape["num_q_heads"] + shape["num_kv_heads"]
    cache_e = 4 if shape["cache_fp32"] else e
    # the rotated dims of q and k read and written once, each position read, one cache row per distinct position
    rows = min(t, shape["max_position"])
    return Work(
        bytes=2 * t * heads * rot * e + t * (4 if shape["pos_int32"] else 8) + rows * rot * cache_e,
        flops=3 * t * heads * rot,
    )  # per pair: 4 mul, 2 add


def _shape(
    num_tokens, hq, hk, head_dim, rot_dim, is_neox=1, fused=0, cache_fp32=1, pos_int32=0, max_position=4096
) -> Shape:
    return Shape(
        num_tokens=num_tokens,
        num_q_heads=hq,
        num_kv_heads=hk,
        head_dim=head_dim,
        rot_dim=rot_dim,
        is_neox=is_neox,
        fused=fused,
        cache_fp32=cache_fp32,
        pos_int32=pos_int32,
        max_position=max_position,
    )


def sweep_shape(model, num_tokens: int) -> Shape | None:
    if not model.has_attention:
        return None
    # vLLM's layout: q and k views of the fused qkv projection, the cache in the model dtype, int64 positions
    return _shape(
        num_tokens,
        model.num_heads,
        model.num_kv_heads,
        model.head_dim,
        model.rotary_dim,
        int(model.is_neox),
        fused=1,
        cache_fp32=0,
        max_position=65536,
    )


_BOUNDARY = (
    # decode and a few tokens of Llama-3-8B (one program of 32 q heads x 128 per token)
    _shape(1, 32, 8, 128, 128),
    _shape(3, 32, 8, 128, 128, is_neox=0, fused=1, cache_fp32=0),
    # Qwen2-7B's odd group 28/4 (a q head block of 32 with 4 masked), fused views, int32 positions
    _shape(7, 28, 4, 128, 128, fused=1, pos_int32=1),
    # Llama-3-70B at TP 8: 8/1 heads, 4 tokens a program: token counts around that block
    _shape(3, 8, 1, 128, 128, fused=1, cache_fp32=0),
    _shape(4, 8, 1, 128, 128),
    _shape(5, 8, 1, 128, 128, is_neox=0, pos_int32=1),
    _shape(17, 8, 1, 128, 128, fused=1),
    # one head past the q block cap (TILE / 128 = 32 heads): a second q block of one head
    _shape(2, TILE // 128 + 1, 3, 128, 128, fused=1),
    # partial rotary: Phi-2 (rot 32 of 80) and GPT-J at TP 4 (rot 64 of 256, interleaved); tails stay untouched
    _shape(17, 32, 32, 80, 32, fused=1, cache_fp32=0),
    _shape(5, 4, 4, 256, 64, is_neox=0, fused=1),
    # non-power-of-two rotary dims: Phi-3's 96 (half 48 in a block of 64) and 80, both styles
    _shape(5, 32, 32, 96, 96),
    _shape(9, 3, 1, 96, 96, is_neox=0, cache_fp32=0),
    _shape(9, 5, 3, 80, 80, is_neox=0, fused=1),
    _shape(6, 2, 2, 8, 6, pos_int32=1),
    # smallest: one pair per head; a one-row cache (every position 0)
    _shape(3, 1, 1, 2, 2, is_neox=0, max_position=1),
    _shape(1, 1, 1, 2, 2, max_position=1),
    # a prefill-sized run of tokens, many programs
    _shape(255, 4, 2, 64, 64, fused=1, cache_fp32=0),
)

SPEC = OpSpec(
    name="rotary_embedding",
    fn=rotary_embedding,
    make_inputs=make_inputs,
    call=call,
    reference=reference,
    boundary=_BOUNDARY,
    sweep_shape=sweep_shape,
    large=(
        # q of 32 * 128 * (2^19 + 1) > 2^31 elements: token offsets (t * stride) past int32
        _shape((1 << 31) // (32 * 128) + 1, 32, 8, 128, 128, max_position=8192),
        # fused qkv of (8 + 2) * 128 per token, > 2^31 elements: k's and q's view offsets past int32
        _shape((1 << 31) // (10 * 128) + 1, 8, 1, 128, 128, fused=1, cache_fp32=0, max_position=8192),
    ),
    work=work,
    # near_max and cancellation: outputs far smaller than their inputs (60000s rotated to ~1, 1000 +- 0.01 rotated
    # to ~0) are held to float32 ulps of the inputs through error_scale, not to ulps of the output
    families=("randn", "near_max", "tiny", "constant", "outlier", "cancellation", "nonfinite"),
    error_scale=error_scale,
    inplace=("q", "k", "qkv"),
    description="rotary position embedding of q and k in place, neox or gpt-j style, partial rotary "
    "(vLLM's rotary_embedding)",
)
