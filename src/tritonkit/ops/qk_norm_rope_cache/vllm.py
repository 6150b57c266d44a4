"""qk_norm_rope_cache in vLLM 0.34.0's call forms (``vllm._custom_ops``): ``fused_qk_norm_rope``, in place on the
fused qkv tensor, and ``fused_qknorm_rope_cache``, which also writes the paged KV cache and returns q, k and v.

:mod:`tritonkit.ops.vllm` re-exports them (vLLM's release: its ``VLLM_VERSION``). Arguments are checked before
anything is written. Beyond vLLM's CUDA ops these take any head_dim (even, its rotary part too), float32 qkv,
int32 positions and slots, and weights of any float dtype; a slot past the cache is dropped like padding.
"""

from __future__ import annotations

import torch

from .. import _alloc, _checks
from .._library import mutating_op, op_with_outputs, through_dispatcher
from . import api

_CACHE_NAMES = ("positions", "eps", ("key_cache", "value_cache"))
_INPLACE_NAMES = ("position_ids", "eps", ("key_cache", "value_cache"))


def _inplace_run(
    qkv, num_heads_q, num_heads_k, head_dim, eps, q_weight, k_weight, cos_sin_cache, is_neox, position_ids
):
    plan = api.check_args(
        qkv,
        position_ids,
        cos_sin_cache,
        None,
        None,
        None,
        num_heads_q,
        num_heads_k,
        q_weight,
        k_weight,
        eps,
        0.0,
        is_neox,
        "auto",
        None,
        None,
        head_dim=head_dim,
        cache=False,
        names=_INPLACE_NAMES,
    )
    t = qkv.shape[0]
    hq, hk = plan.num_q_heads, plan.num_kv_heads
    q = qkv[:, : hq * head_dim].view(t, hq, head_dim)
    k = qkv[:, hq * head_dim : (hq + hk) * head_dim].view(t, hk, head_dim)
    api.forward(
        plan, qkv, position_ids, cos_sin_cache, q_weight, k_weight, None, None, None, None, None, float(eps), 0.0,
        q, k, None, inplace_form=True,
    )  # fmt: skip


@mutating_op("vllm_fused_qk_norm_rope", ("qkv",))
def _fused_qk_norm_rope_op(
    qkv: torch.Tensor,
    num_heads_q: int,
    num_heads_k: int,
    head_dim: int,
    eps: float,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
    position_ids: torch.Tensor,
) -> None:
    _inplace_run(qkv, num_heads_q, num_heads_k, head_dim, eps, q_weight, k_weight, cos_sin_cache, is_neox, position_ids)


def fused_qk_norm_rope(
    qkv: torch.Tensor,
    num_heads_q: int,
    num_heads_k: int,
    num_heads_v: int,
    head_dim: int,
    eps: float,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
    position_ids: torch.Tensor,
    forced_token_heads_per_warp: int = -1,
) -> None:
    """Per-head RMSNorm and rotary of q and k in place in ``qkv [T, (num_heads_q + num_heads_k + num_heads_v) *
    head_dim]`` (v untouched), as ``vllm._custom_ops.fused_qk_norm_rope``: each head ``x * rsqrt(mean(x^2) + eps) *
    weight`` in float32, rotated by ``cos_sin_cache [max_position, rot_dim]`` (cos then sin; ``rot_dim <= head_dim``,
    the rest of each head normed only) without rounding in between, then rounded once to qkv's dtype. Rounded
    where vLLM's kernel rounds (its sm_90 build, read): ``x * RN(rstd * weight)``, then ``fma(x1, cos, -RN(x2 sin))``
    and ``fma(x2, cos, RN(x1 sin))``; rstd itself is not bit-equal (another summation order).
    ``num_heads_v`` must equal ``num_heads_k`` (vLLM's callers pass num_kv_heads for both).
    ``forced_token_heads_per_warp`` picks vLLM's CUDA tiling: accepted (-1, or 1, 2, 4, 8) and ignored."""
    for name, v in (("num_heads_v", num_heads_v), ("forced_token_heads_per_warp", forced_token_heads_per_warp)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    if num_heads_v != num_heads_k:
        raise ValueError(
            f"num_heads_v must equal num_heads_k ({num_heads_k}): v's heads follow k's as the cache layout pairs "
            f"them, got {num_heads_v}"
        )
    if forced_token_heads_per_warp > 0 and forced_token_heads_per_warp not in (1, 2, 4, 8):
        raise ValueError(f"forced_token_heads_per_warp must be 1, 2, 4 or 8 (or -1), got {forced_token_heads_per_warp}")
    # every argument checked before the in-place write; the weights and cos/sin are required here
    for name, t in (("q_weight", q_weight), ("k_weight", k_weight), ("cos_sin_cache", cos_sin_cache)):
        _checks.tensor(name, t)
    _checks.tensor("qkv", qkv, ndim=2, last_contiguous=True)
    if qkv.shape[0] > 1 and qkv.stride(0) < qkv.shape[1]:
        raise ValueError(f"qkv's rows must not overlap (it is written in place), got strides {tuple(qkv.stride())}")
    _checks.no_overlap(
        "qkv", qkv, q_weight=q_weight, k_weight=k_weight, cos_sin_cache=cos_sin_cache, position_ids=position_ids
    )
    args = (qkv, num_heads_q, num_heads_k, head_dim, eps, q_weight, k_weight, cos_sin_cache, is_neox, position_ids)
    if through_dispatcher(qkv, q_weight, k_weight, cos_sin_cache, position_ids):
        # check first (the op's errors, not the dispatcher's), then record one node
        api.check_args(
            qkv, position_ids, cos_sin_cache, None, None, None, num_heads_q, num_heads_k, q_weight, k_weight, eps,
            0.0, is_neox, "auto", None, None, head_dim=head_dim, cache=False, names=_INPLACE_NAMES,
        )  # fmt: skip
        torch.ops.tritonkit.vllm_fused_qk_norm_rope(*args[:4], float(eps), *args[5:])
        return
    _inplace_run(*args)


def _alloc_qkv(qkv, q_weight, k_weight, cos_sin_cache, positions, slot_mapping, key_cache, value_cache, num_q_heads,
               num_kv_heads, head_dim, *rest):  # fmt: skip
    """The fresh contiguous ``(q [T, num_q_heads * head_dim], k, v [T, num_kv_heads * head_dim])``."""
    t, dtype, dev = qkv.shape[0], qkv.dtype, qkv.device
    return (
        _alloc.empty((t, num_q_heads * head_dim), dtype, dev),
        _alloc.empty((t, num_kv_heads * head_dim), dtype, dev),
        _alloc.empty((t, num_kv_heads * head_dim), dtype, dev),
    )


def _check_cache_form(
    qkv,
    q_weight,
    k_weight,
    cos_sin_cache,
    positions,
    slot_mapping,
    key_cache,
    value_cache,
    num_q_heads,
    num_kv_heads,
    head_dim,
    rotary_dim,
    eps,
    norm_weight_bias,
    kv_cache_dtype,
    k_scale,
    v_scale,
) -> api.Plan:
    # vLLM's own Python check, with its words
    if isinstance(rotary_dim, bool) or not isinstance(rotary_dim, int):
        raise TypeError(f"rotary_dim must be an int, got {type(rotary_dim).__name__}")
    if isinstance(head_dim, int) and (rotary_dim < 0 or rotary_dim > head_dim or rotary_dim % 8):
        raise ValueError(f"rotary_dim must be a multiple of 8 in [0, head_dim], got {rotary_dim}")
    for name, t in (("q_weight", q_weight), ("k_weight", k_weight), ("cos_sin_cache", cos_sin_cache)):
        _checks.tensor(name, t)
    return api.check_args(
        qkv,
        positions,
        cos_sin_cache if rotary_dim else None,
        key_cache,
        value_cache,
        slot_mapping,
        num_q_heads,
        num_kv_heads,
        q_weight,
        k_weight,
        eps,
        norm_weight_bias,
        True,
        kv_cache_dtype,
        k_scale,
        v_scale,
        rotary_dim=rotary_dim if rotary_dim else None,
        head_dim=head_dim,
        names=_CACHE_NAMES,
    )


@op_with_outputs("vllm_fused_qknorm_rope_cache", _alloc_qkv, outs=("q", "k", "v"), mutates=("key_cache", "value_cache"))
def _fused_qknorm_rope_cache_out_op(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    qkv: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    positions: torch.Tensor,
    slot_mapping: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    num_q_heads: int,
    num_kv_heads: int,
    head_dim: int,
    rotary_dim: int,
    eps: float,
    norm_weight_bias: float,
    kv_cache_dtype: str,
    k_scale: torch.Tensor | None,
    v_scale: torch.Tensor | None,
) -> None:
    plan = _check_cache_form(
        qkv, q_weight, k_weight, cos_sin_cache, positions, slot_mapping, key_cache, value_cache, num_q_heads,
        num_kv_heads, head_dim, rotary_dim, eps, norm_weight_bias, kv_cache_dtype, k_scale, v_scale,
    )  # fmt: skip
    t = qkv.shape[0]
    api.forward(
        plan, qkv, positions, cos_sin_cache if rotary_dim else None, q_weight, k_weight, key_cache, value_cache,
        slot_mapping, k_scale, v_scale, float(eps), float(norm_weight_bias),
        q.view(t, num_q_heads, head_dim), k.view(t, num_kv_heads, head_dim), v.view(t, num_kv_heads, head_dim),
    )  # fmt: skip


def fused_qknorm_rope_cache(
    qkv: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    positions: torch.Tensor,
    slot_mapping: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    num_q_heads: int,
    num_kv_heads: int,
    head_dim: int,
    rotary_dim: int,
    eps: float,
    norm_weight_bias: float = 0.0,
    kv_cache_dtype: str = "auto",
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-head RMSNorm, partial NeoX rotary and the KV-cache write, as ``vllm._custom_ops.fused_qknorm_rope_cache``.

    Each q and k head ``x`` of ``qkv [T, (num_q_heads + 2 * num_kv_heads) * head_dim]`` becomes ``x * rsqrt(mean(x^2)
    + eps) * (weight + norm_weight_bias)`` (1.0: Gemma's ``1 + w``), rounded to qkv's dtype, then its first
    ``rotary_dim`` dims rotate (NeoX pairs; ``rotary_dim`` a multiple of 8 in ``[0, head_dim]``, 0: no rotary) with
    cos from ``cos_sin_cache[pos, :rotary_dim / 2]`` and sin from its second half's first ``rotary_dim / 2``
    columns. k and v go to ``key_cache``/``value_cache [num_blocks, block_size, num_kv_heads, head_dim]`` at
    ``slot_mapping`` (``-1``: padding; tokens past its length write none; fp8 caches store ``x / scale``). Returns
    new contiguous ``(q [T, num_q_heads * head_dim], k, v [T, num_kv_heads * head_dim])``."""
    args = (
        qkv,
        q_weight,
        k_weight,
        cos_sin_cache,
        positions,
        slot_mapping,
        key_cache,
        value_cache,
        num_q_heads,
        num_kv_heads,
        head_dim,
        rotary_dim,
        eps,
        norm_weight_bias,
        kv_cache_dtype,
        k_scale,
        v_scale,
    )
    if through_dispatcher(qkv, q_weight, k_weight, cos_sin_cache, positions, slot_mapping, key_cache, value_cache):
        _check_cache_form(*args)
        return torch.ops.tritonkit.vllm_fused_qknorm_rope_cache(
            *args[:12], float(eps), float(norm_weight_bias), *args[14:]
        )
    plan = _check_cache_form(*args)
    q, k, v = _alloc_qkv(*args)
    t = qkv.shape[0]
    api.forward(
        plan, qkv, positions, cos_sin_cache if rotary_dim else None, q_weight, k_weight, key_cache, value_cache,
        slot_mapping, k_scale, v_scale, float(eps), float(norm_weight_bias),
        q.view(t, num_q_heads, head_dim), k.view(t, num_kv_heads, head_dim), v.view(t, num_kv_heads, head_dim),
    )  # fmt: skip
    return q, k, v
