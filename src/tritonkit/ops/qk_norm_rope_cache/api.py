"""qk_norm_rope_cache: per-head RMSNorm of q and k, rotary on both, k and v written into the paged KV cache, q
returned for attention; one launch over a fused qkv projection (vLLM's fused_qknorm_rope_cache)."""

from __future__ import annotations

import dataclasses
import math

import torch
import triton

from .. import _alloc, _checks, _device
from .._fp8_jit import fused_fma
from .._ints import cdiv
from .._launch import launch
from .._library import op_with_outputs, through_dispatcher
from . import config
from .config import EARLY_LOADS, qk_norm_rope_cache_config
from .kernel import _qk_norm_rope_cache_kernel

# vLLM's names: "auto", "bfloat16" and "float16" keep the cache in qkv's dtype (vLLM checks the cache's dtype, not
# that the name matches it), "fp8" / "fp8_e4m3" store e4m3 codes of x / scale
KV_CACHE_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3")
FP8_KV_CACHE_DTYPES = ("fp8", "fp8_e4m3")
FP8_CACHE_DTYPES = (torch.float8_e4m3fn, torch.uint8)

# Under TRITON_INTERPRET=1 ``triton.jit`` returns an interpreter object instead of a JITFunction
_INTERPRETED = not isinstance(_qk_norm_rope_cache_kernel, triton.runtime.jit.JITFunction)


def _native_fp8(device: torch.device) -> bool:
    """Whether Triton's float32 -> e4m3 conversion is one correctly rounded instruction here (sm_90+); elsewhere the
    kernel builds the e4m3 bits in integer ops. A target nothing answers for is taken as a current GPU."""
    if _INTERPRETED:
        return False
    cap = _device.capability(device)
    return cap is None or cap >= (9, 0)


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a checked layout fixes for every call with it: sizes, the kernel's constexprs and the strides of the
    inputs and caches, and the byte extents the per-call overlap test reads."""

    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    rot_dim: int
    grid_h: int
    block_t: int
    num_warps: int
    fp8: bool
    cache: bool
    ints: tuple  # num_slots, num_q_heads, num_kv_heads, max_position, block_size
    strides: tuple  # qkv, positions, cos_sin_cache rows, sin offset
    cache_strides: tuple
    constexprs: dict
    extents: tuple | None = None


def forward(
    plan: Plan,
    qkv: torch.Tensor,
    positions: torch.Tensor,
    cos_sin_cache: torch.Tensor | None,
    q_weight: torch.Tensor | None,
    k_weight: torch.Tensor | None,
    key_cache: torch.Tensor | None,
    value_cache: torch.Tensor | None,
    slot_mapping: torch.Tensor | None,
    k_scale: torch.Tensor | None,
    v_scale: torch.Tensor | None,
    eps: float,
    weight_bias: float,
    q_out: torch.Tensor | None,
    k_out: torch.Tensor | None = None,
    v_out: torch.Tensor | None = None,
    inplace_form: bool = False,
) -> None:
    """The op's named surface: one launch on arguments check_args accepted (its Plan). ``q_out``/``k_out``/``v_out``
    are ``[T, H, head_dim]`` views whose heads are rows (the last dim contiguous), or None to skip that output; they
    may be the very q/k views of ``qkv`` (each element is read before it is written). ``inplace_form``: the
    arithmetic of vLLM's fused_qk_norm_rope (the normalized head kept in float32, rotated in nvcc's order), not of
    its fused_qknorm_rope_cache (the normalized head rounded to qkv's dtype before the rotation)."""
    num_tokens = qkv.shape[0]
    if num_tokens == 0:
        return
    fp8 = plan.fp8
    if fp8:
        # the same bytes either way: float8 where Triton converts natively, uint8 where the kernel builds the bits
        view = torch.uint8 if plan.constexprs["SOFT_FP8"] else torch.float8_e4m3fn
        key_cache, value_cache = key_cache.view(view), value_cache.view(view)
    const = plan.constexprs
    if q_out is None or k_out is None or v_out is None or inplace_form:
        const = {**const, "WRITE_Q": q_out is not None, "WRITE_K": k_out is not None, "WRITE_V": v_out is not None}
        const["INPLACE"] = inplace_form
    dummy = qkv
    q_strides = (0, 0) if q_out is None else (q_out.stride(0), q_out.stride(1))
    k_strides = (0, 0) if k_out is None else (k_out.stride(0), k_out.stride(1))
    v_strides = (0, 0) if v_out is None else (v_out.stride(0), v_out.stride(1))
    launch(
        _qk_norm_rope_cache_kernel,
        (cdiv(num_tokens, plan.block_t * const["KV_T"]) * const["GRID_H"],)
        if const["GRID_H"]
        else (cdiv(num_tokens, plan.block_t), plan.grid_h),
        (
            qkv,
            positions,
            dummy if cos_sin_cache is None else cos_sin_cache,
            dummy if q_weight is None else q_weight,
            dummy if k_weight is None else k_weight,
            dummy if q_out is None else q_out,
            dummy if k_out is None else k_out,
            dummy if v_out is None else v_out,
            dummy if key_cache is None else key_cache,
            dummy if value_cache is None else value_cache,
            positions if slot_mapping is None else slot_mapping,
            positions if not fp8 else k_scale,
            positions if not fp8 else v_scale,
            num_tokens,
            0 if slot_mapping is None else slot_mapping.shape[0],
            *plan.ints,
            eps,
            weight_bias,
            *plan.strides,
            *q_strides,
            *k_strides,
            *v_strides,
            *plan.cache_strides,
        ),
        const,
        plan.num_warps,
        maxnreg=config.MAXNREG,
    )


def _positive_int(name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name} must be a positive int, got {v!r}")
    return v


def _check_qkv(qkv, positions, num_q_heads, num_kv_heads, head_dim, pos_name: str) -> tuple[int, int, int]:
    """qkv's layout against the head counts (and head_dim where the caller gives it), positions one per token;
    returns (num_q_heads, num_kv_heads, head_dim)."""
    _checks.tensor("qkv", qkv, dtypes=_checks.FLOAT_DTYPES, ndim=2, last_contiguous=True)
    hq = _positive_int("num_q_heads", num_q_heads)
    hk = _positive_int("num_kv_heads", num_kv_heads)
    num_tokens, width = qkv.shape
    heads = hq + 2 * hk
    if head_dim is None:
        if width % heads or width == 0:
            raise ValueError(
                f"qkv must be [num_tokens, (num_q_heads + 2 * num_kv_heads) * head_dim] = [T, {heads} * head_dim], "
                f"got shape {tuple(qkv.shape)} for num_q_heads={hq}, num_kv_heads={hk}"
            )
        head_dim = width // heads
    else:
        head_dim = _positive_int("head_dim", head_dim)
        if width != heads * head_dim:
            raise ValueError(
                f"qkv must have (num_q_heads + 2 * num_kv_heads) * head_dim = {heads * head_dim} columns, got shape "
                f"{tuple(qkv.shape)}"
            )
    _checks.tensor(pos_name, positions, dtypes=_checks.INDEX_DTYPES, ndim=1)
    if positions.shape[0] != num_tokens:
        raise ValueError(
            f"{pos_name} must have shape ({num_tokens},) (one per token of qkv), got {tuple(positions.shape)}"
        )
    return hq, hk, head_dim


def _check_rotary(cos_sin_cache, rotary_dim, head_dim: int, is_neox) -> tuple[int, int, int, int]:
    """The rotary's cache and flags; returns (rot_dim, max_position, cache row stride, sin column offset), all 0
    without a cache (no rotary)."""
    max_position = sin_offset = rot = 0
    stride_cs = 0
    if cos_sin_cache is not None:
        _checks.tensor("cos_sin_cache", cos_sin_cache, dtypes=_checks.FLOAT_DTYPES, ndim=2, last_contiguous=True)
        max_position, cache_width = cos_sin_cache.shape
        rot = cache_width if rotary_dim is None else rotary_dim
        if rotary_dim is not None and (isinstance(rot, bool) or not isinstance(rot, int) or rot < 0):
            raise ValueError(f"rotary_dim must be a non-negative int, got {rot!r}")
        if rot % 2 or rot > head_dim or (rotary_dim is None and rot < 2):
            raise ValueError(
                f"cos_sin_cache must be [max_position, rot_dim] with rot_dim even and 2 <= rot_dim <= head_dim "
                f"({head_dim}), got shape {tuple(cos_sin_cache.shape)}"
                if rotary_dim is None
                else f"rotary_dim must be even and at most head_dim ({head_dim}), got {rot}"
            )
        if rot // 2 > cache_width // 2:
            raise ValueError(
                f"cos_sin_cache must hold rotary_dim / 2 = {rot // 2} cos and as many sin columns, got shape "
                f"{tuple(cos_sin_cache.shape)}"
            )
        if max_position == 0 and rot:
            raise ValueError(
                f"cos_sin_cache must have at least one row (max_position >= 1), got shape {tuple(cos_sin_cache.shape)}"
            )
        sin_offset, stride_cs = cache_width // 2, cos_sin_cache.stride(0)
    if not isinstance(is_neox, bool):
        raise TypeError(f"is_neox must be a bool, got {type(is_neox).__name__}")
    return rot, max_position, stride_cs, sin_offset


def _check_norm(q_weight, k_weight, head_dim: int, eps, weight_bias, eps_name: str) -> None:
    """The QK-norm's weights (both or neither), eps and weight_bias."""
    if (q_weight is None) != (k_weight is None):
        raise ValueError("q_weight and k_weight must be given together (RMSNorm of q and k) or both be None (no norm)")
    for name, w in (("q_weight", q_weight), ("k_weight", k_weight)):
        if w is not None:
            _checks.tensor(name, w, dtypes=_checks.FLOAT_DTYPES, ndim=1, last_contiguous=True)
            if w.shape[0] != head_dim:
                raise ValueError(f"{name} must have shape ({head_dim},) (qkv's head_dim), got {tuple(w.shape)}")
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not eps >= 0 or not math.isfinite(eps):
        raise ValueError(f"{eps_name} must be a non-negative float, got {eps!r}")
    if not isinstance(weight_bias, (int, float)) or isinstance(weight_bias, bool) or not math.isfinite(weight_bias):
        raise ValueError(f"weight_bias must be a finite float, got {weight_bias!r}")


def _check_cache(
    qkv, hk: int, head_dim: int, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale, v_scale, cache_names
) -> tuple[bool, int, int, tuple]:
    """The paged caches, slots and fp8 scales; returns (fp8, num_slots, block_size, the caches' strides)."""
    kc_name, vc_name = cache_names
    num_tokens = qkv.shape[0]
    if not isinstance(kv_cache_dtype, str) or kv_cache_dtype not in KV_CACHE_DTYPES:
        raise ValueError(
            f"kv_cache_dtype must be one of {', '.join(map(repr, KV_CACHE_DTYPES))}, got {kv_cache_dtype!r}"
        )
    fp8 = kv_cache_dtype in FP8_KV_CACHE_DTYPES
    cache_dtypes = FP8_CACHE_DTYPES if fp8 else (qkv.dtype,)
    for name, c in ((kc_name, key_cache), (vc_name, value_cache)):
        _checks.tensor(name, c, ndim=4, last_contiguous=True)
        if c.dtype not in cache_dtypes:
            want = (
                "float8_e4m3fn (or uint8 holding e4m3 bytes)" if fp8 else f"qkv's dtype {_checks.dtype_name(qkv.dtype)}"
            )
            raise TypeError(
                f"{name} must have dtype {want} for kv_cache_dtype={kv_cache_dtype!r}, got "
                f"{_checks.dtype_name(c.dtype)}"
            )
        if tuple(c.shape[2:]) != (hk, head_dim):
            raise ValueError(
                f"{name} must have shape [num_blocks, block_size, {hk}, {head_dim}] (num_kv_heads and head_dim), "
                f"got {tuple(c.shape)}"
            )
        if c.shape[1] == 0:
            raise ValueError(f"{name} must have a block_size (dim 1) of at least 1, got shape {tuple(c.shape)}")
    _checks.same_dtype(vc_name, value_cache, kc_name, key_cache)
    _checks.shape_equal(vc_name, value_cache, tuple(key_cache.shape), f"{kc_name}'s shape")
    _checks.tensor("slot_mapping", slot_mapping, dtypes=_checks.INDEX_DTYPES, ndim=1, last_contiguous=True)
    if slot_mapping.shape[0] > num_tokens:
        raise ValueError(
            f"slot_mapping must have at most {num_tokens} entries (one per token of qkv; later tokens write no "
            f"cache row), got shape {tuple(slot_mapping.shape)}"
        )
    for name, s in (("k_scale", k_scale), ("v_scale", v_scale)):
        if s is None:
            if fp8:
                raise ValueError(f"kv_cache_dtype={kv_cache_dtype!r} needs {name}: a float32 tensor of one element")
            continue
        _checks.fp8_scale(name, s)
    num_slots, block_size = key_cache.shape[0] * key_cache.shape[1], key_cache.shape[1]
    return fp8, num_slots, block_size, (*key_cache.stride()[:3], *value_cache.stride()[:3])


def _plan(qkv, hq: int, hk: int, head_dim: int, rot: int, is_neox: bool, norm: bool, cache: bool, fp8: bool,
          ints: tuple, strides: tuple, cache_strides: tuple) -> Plan:  # fmt: skip
    """The launch Plan of a checked layout: the config, the constexprs, the grid's head tiles."""
    cfg = qk_norm_rope_cache_config(hq, hk, head_dim, rot, qkv.element_size())
    exact = _INTERPRETED
    constexprs = {
        "HEAD_DIM": head_dim,
        "ROT_HALF": rot // 2,
        "IS_NEOX": is_neox,
        "HAS_NORM": norm,
        "INPLACE": False,
        "WRITE_Q": True,
        "WRITE_K": True,
        "WRITE_V": True,
        "WRITE_CACHE": cache,
        "FP8": fp8,
        "SOFT_FP8": exact or (fp8 and not _native_fp8(qkv.device)),
        # the fp8 cache's division by its scale from RN(1 / scale): on every GPU (tl.fma rounds once)
        "FUSED_FMA": fused_fma(),
        "EXACT": exact,
        "BLOCK_T": cfg.block_t,
        "BLOCK_HQ": cfg.block_hq,
        "BLOCK_HKV": cfg.block_hkv,
        "BLOCK_HALF": cfg.block_half,
        "BLOCK_TAIL": cfg.block_tail,
        "BLOCK_D": cfg.block_d,
        "EARLY_LOADS": EARLY_LOADS,
    }
    q_blocks, kv_blocks = cdiv(hq, cfg.block_hq), cdiv(hk, cfg.block_hkv)
    grid_h = q_blocks + kv_blocks
    # the 1-D grid (HEADS_FIRST): a group of KV_T token blocks is KV_T x the q head blocks, then the k/v head blocks,
    # side by side (GRID_H programs; 0: a 2-D grid of token blocks x grid_h head blocks)
    kv_t = cfg.kv_tokens if config.HEADS_FIRST else 1
    constexprs["KV_T"] = kv_t
    constexprs["GRID_H"] = kv_t * q_blocks + kv_blocks if config.HEADS_FIRST else 0
    return Plan(
        hq, hk, head_dim, rot, grid_h, cfg.block_t, cfg.num_warps, fp8, cache, ints, strides, cache_strides, constexprs
    )


_DEFAULT_NAMES = ("positions", "eps", ("key_cache", "value_cache"))


def check_args(
    qkv,
    positions,
    cos_sin_cache,
    key_cache,
    value_cache,
    slot_mapping,
    num_q_heads,
    num_kv_heads,
    q_weight,
    k_weight,
    eps,
    weight_bias,
    is_neox,
    kv_cache_dtype,
    k_scale,
    v_scale,
    rotary_dim=None,
    head_dim=None,
    cache: bool = True,
    names: tuple = _DEFAULT_NAMES,
) -> Plan:
    """The op's named surface: every argument checked on metadata alone (no device sync), a ValueError or TypeError
    naming the bad one, nothing written; returns the launch Plan. A layout that passed before skips the metadata
    checks (_CHECKED). ``rotary_dim``: rotate only that many dims with cos at columns ``[0, rotary_dim / 2)`` and sin
    from column ``cos_sin_cache.shape[1] / 2`` on (vLLM's form; 0: no rotary). ``cache=False``: no KV-cache write
    (the caches, slots and scales are None). ``names``: what the caller calls positions, eps and the caches."""
    _checks.inference_only(qkv=qkv, q_weight=q_weight, k_weight=k_weight, key_cache=key_cache, value_cache=value_cache)
    key = _checks.hashable_key(
        lambda: (
            _checks.layout(qkv),
            _checks.layout(positions),
            _checks.layout(cos_sin_cache),
            _checks.layout(key_cache),
            _checks.layout(value_cache),
            _checks.layout(slot_mapping),
            type(num_q_heads),
            num_q_heads,
            type(num_kv_heads),
            num_kv_heads,
            _checks.layout(q_weight),
            _checks.layout(k_weight),
            type(eps),
            eps,
            type(weight_bias),
            weight_bias,
            type(is_neox),
            is_neox,
            kv_cache_dtype,
            _checks.layout(k_scale),
            _checks.layout(v_scale),
            type(rotary_dim),
            rotary_dim,
            type(head_dim),
            head_dim,
            cache,
            names,
        )
    )
    plan = _CHECKED.get(key)
    if plan is None:
        pos_name, eps_name, cache_names = names
        hq, hk, head_dim = _check_qkv(qkv, positions, num_q_heads, num_kv_heads, head_dim, pos_name)
        rot, max_position, stride_cs, sin_offset = _check_rotary(cos_sin_cache, rotary_dim, head_dim, is_neox)
        _check_norm(q_weight, k_weight, head_dim, eps, weight_bias, eps_name)
        fp8, num_slots, block_size, cache_strides = (
            _check_cache(
                qkv, hk, head_dim, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale, v_scale, cache_names
            )
            if cache
            else (False, 0, 0, (0,) * 6)
        )
        kc_name, vc_name = cache_names
        scales = {n: s for n, s in (("k_scale", k_scale), ("v_scale", v_scale)) if isinstance(s, torch.Tensor)}
        _checks.same_device(
            qkv=qkv,
            **{pos_name: positions},
            cos_sin_cache=cos_sin_cache,
            q_weight=q_weight,
            k_weight=k_weight,
            **{kc_name: key_cache, vc_name: value_cache},
            slot_mapping=slot_mapping,
            **scales,
        )
        if cache:
            _checks.distinct_elements(kc_name, key_cache)
            _checks.distinct_elements(vc_name, value_cache)
        plan = _plan(
            qkv, hq, hk, head_dim, rot, is_neox, q_weight is not None, cache, fp8,
            (num_slots, hq, hk, max_position, block_size),
            (qkv.stride(0), positions.stride(0), stride_cs, sin_offset),
            cache_strides,
        )  # fmt: skip
        if key is not None and cache:
            plan = dataclasses.replace(
                plan,
                extents=_checks.extents(
                    key_cache,
                    value_cache,
                    qkv,
                    positions,
                    cos_sin_cache,
                    q_weight,
                    k_weight,
                    slot_mapping,
                    k_scale,
                    v_scale,
                ),
            )
        if key is not None:
            _CHECKED.add(key, plan)
    if plan.cache:
        # data pointers, every call: the caches are written while everything else is read, and each other written
        kc_name, vc_name = names[2]
        ext = plan.extents
        _checks.no_overlap(
            vc_name,
            value_cache,
            extents=None if ext is None else (ext[1], ext[0], *ext[2:]),
            **{kc_name: key_cache},
            qkv=qkv,
            positions=positions,
            cos_sin_cache=cos_sin_cache,
            q_weight=q_weight,
            k_weight=k_weight,
            slot_mapping=slot_mapping,
            k_scale=k_scale,
            v_scale=v_scale,
        )
        _checks.no_overlap(
            kc_name,
            key_cache,
            extents=None if ext is None else (ext[0], *ext[2:]),
            qkv=qkv,
            positions=positions,
            cos_sin_cache=cos_sin_cache,
            q_weight=q_weight,
            k_weight=k_weight,
            slot_mapping=slot_mapping,
            k_scale=k_scale,
            v_scale=v_scale,
        )
    if _checks.indices_checked():
        if plan.rot_dim:
            _checks.index_range(
                names[0],
                positions,
                plan.ints[3],
                f"rows of cos_sin_cache ({plan.ints[3]})",
                otherwise="that token's rotated dims become NaN",
            )
        if plan.cache:
            _checks.index_range(
                "slot_mapping",
                slot_mapping,
                plan.ints[0],
                f"cache slots (num_blocks x block_size = {plan.ints[0]}; negative: padding)",
                low=None,
                otherwise="that token is not written",
            )
    return plan


# layouts (and scalars) check_args accepted, each holding its launch Plan
_CHECKED = _checks.CheckedLayouts()


def _alloc_q(qkv, positions, cos_sin_cache, key_cache, value_cache, slot_mapping, num_q_heads, num_kv_heads, *rest):
    """The fresh q ``[T, num_q_heads, head_dim]`` of a call check_args accepted."""
    head_dim = qkv.shape[1] // (num_q_heads + 2 * num_kv_heads)
    return _alloc.empty((qkv.shape[0], num_q_heads, head_dim), qkv.dtype, qkv.device)


@op_with_outputs("qk_norm_rope_cache", _alloc_q, mutates=("key_cache", "value_cache"))
def _qk_norm_rope_cache_out_op(
    out: torch.Tensor,
    qkv: torch.Tensor,
    positions: torch.Tensor,
    cos_sin_cache: torch.Tensor | None,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    num_q_heads: int,
    num_kv_heads: int,
    q_weight: torch.Tensor | None,
    k_weight: torch.Tensor | None,
    eps: float,
    weight_bias: float,
    is_neox: bool,
    kv_cache_dtype: str,
    k_scale: torch.Tensor | None,
    v_scale: torch.Tensor | None,
) -> None:
    args = (qkv, positions, cos_sin_cache, key_cache, value_cache, slot_mapping, num_q_heads, num_kv_heads)
    rest = (q_weight, k_weight, eps, weight_bias, is_neox, kv_cache_dtype, k_scale, v_scale)
    plan = check_args(*args, *rest)
    forward(
        plan, qkv, positions, cos_sin_cache, q_weight, k_weight, key_cache, value_cache, slot_mapping, k_scale,
        v_scale, float(eps), float(weight_bias), out,
    )  # fmt: skip


def qk_norm_rope_cache(
    qkv: torch.Tensor,
    positions: torch.Tensor,
    cos_sin_cache: torch.Tensor | None,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    *,
    num_q_heads: int,
    num_kv_heads: int,
    q_weight: torch.Tensor | None = None,
    k_weight: torch.Tensor | None = None,
    eps: float = 1e-6,
    weight_bias: float = 0.0,
    is_neox: bool = True,
    kv_cache_dtype: str = "auto",
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-head RMSNorm of q and k, rotary on both, k and v into the paged KV cache, in one launch. Returns q.

    qkv           ``[T, (num_q_heads + 2 * num_kv_heads) * head_dim]`` float16/bfloat16/float32: a fused qkv
                  projection, each token's q heads, then k heads, then v heads. Any token stride, the last dim
                  contiguous. Never written.
    positions     ``[T]`` int32/int64, each token's position: a row of cos_sin_cache. Must lie in
                  ``[0, max_position)`` (not checked on the host, a sync; ``TRITONKIT_CHECK_INDICES=1`` checks it): the
                  kernel reads no memory outside the cache for one that does not, its rotated dims become NaN.
    cos_sin_cache ``[max_position, rot_dim]``, cos in the first ``rot_dim / 2`` columns and sin in the rest, any float
                  dtype (read as float32). ``rot_dim`` even, at most head_dim: dims ``[rot_dim, head_dim)`` of each
                  head are not rotated (partial rotary). None: no rotary (norm and cache write only).
    key_cache,    ``[num_blocks, block_size, num_kv_heads, head_dim]``, the flash layout reshape_and_cache writes:
    value_cache   slot ``s`` is block ``s // block_size``, row ``s % block_size``. Any strides with a contiguous last
                  dim (the halves of a joint ``[num_blocks, 2, ...]`` cache too); they may not share memory with each
                  other or any input. kv_cache_dtype "auto" (or vLLM's "bfloat16"/"float16"): qkv's dtype;
                  "fp8"/"fp8_e4m3": float8_e4m3fn (or uint8 holding its bytes), storing ``x / scale`` correctly
                  rounded in float32, saturated to +-448 (NaN stays NaN), rounded to nearest-even e4m3, where ``x``
                  is the k (or v) value in qkv's dtype.
    slot_mapping  ``[S]`` int32/int64, ``S <= T``: token ``t < S`` goes to slot ``slot_mapping[t]``; a negative slot
                  (-1: padding), one at or past ``num_blocks * block_size``, and tokens ``t >= S`` write no cache row.
                  Slots are distinct (not checked: a sync; ``TRITONKIT_CHECK_INDICES=1`` checks the range).
    q_weight,     ``[head_dim]`` float16/bfloat16/float32, the RMSNorm weights of q's and k's heads (Qwen3, Gemma 3
    k_weight      QK-norm); both None: no norm (rotary and the cache write only). Each head ``x`` becomes
                  ``x * rsqrt(mean(x^2) + eps) * (w + weight_bias)`` in float32 (``weight_bias=1.0``: Gemma's
                  ``1 + w`` weights), rounded to qkv's dtype before the rotation, as rms_norm's output is. A head whose
                  float32 sum of squares overflows is normed on ``x / max|x|`` instead.
    is_neox       True: rotate the pairs ``(i, i + rot_dim/2)``; False: ``(2i, 2i + 1)`` (GPT-J).
    k_scale,      float32 tensors of one element, read on the device (no sync, capturable). Required for fp8;
    v_scale       "auto" accepts and ignores them.

    Each rotated pair is ``(x1 cos - x2 sin, x2 cos + x1 sin)`` in float32, rounded once to qkv's dtype; the k
    written to the cache is that value (in fp8: its quantization). Returns q ``[T, num_q_heads, head_dim]`` in qkv's
    dtype, contiguous. Arguments are checked before anything is written; a rejected call leaves the caches untouched.
    """
    args = (qkv, positions, cos_sin_cache, key_cache, value_cache, slot_mapping, num_q_heads, num_kv_heads)
    rest = (q_weight, k_weight, eps, weight_bias, is_neox, kv_cache_dtype, k_scale, v_scale)
    plan = check_args(*args, *rest)
    if through_dispatcher(qkv, positions, cos_sin_cache, key_cache, value_cache, slot_mapping, q_weight, k_weight):
        return torch.ops.tritonkit.qk_norm_rope_cache(*args, *rest[:2], float(eps), float(weight_bias), *rest[4:])
    q = _alloc_q(*args)
    forward(
        plan, qkv, positions, cos_sin_cache, q_weight, k_weight, key_cache, value_cache, slot_mapping, k_scale,
        v_scale, float(eps), float(weight_bias), q,
    )  # fmt: skip
    return q
