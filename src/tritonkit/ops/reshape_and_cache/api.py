"""reshape_and_cache: write each token's key and value rows into a paged KV cache (vLLM's flash layout)."""

from __future__ import annotations

import torch
import triton

from .. import _checks, _device
from .._ints import cdiv
from .._launch import launch
from .._library import mutating_op, through_dispatcher
from .config import reshape_and_cache_config
from .kernel import _reshape_and_cache_kernel

KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3")
FP8_CACHE_DTYPES = (torch.float8_e4m3fn, torch.uint8)

# Under TRITON_INTERPRET=1 ``triton.jit`` returns an interpreter object instead of a JITFunction
_INTERPRETED = not isinstance(_reshape_and_cache_kernel, triton.runtime.jit.JITFunction)


def _native_fp8(device: torch.device) -> bool:
    """Whether Triton's float32 -> e4m3 conversion is one correctly rounded instruction here: sm_90+ only (sm_89
    goes through an fp16 truncation first, sm_80 has no e4m3 type, the interpreter rounds ties away). Elsewhere the
    kernel builds the e4m3 bits in integer ops. A target nothing answers for is taken as a current GPU."""
    if _INTERPRETED:
        return False
    cap = _device.capability(device)
    return cap is None or cap >= (9, 0)


def forward(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    kv_cache_dtype: str,
    k_scale: torch.Tensor | None,
    v_scale: torch.Tensor | None,
) -> None:
    """The op's named surface: write key and value into the caller's caches on arguments check_args accepted."""
    num_tokens = slot_mapping.shape[0]  # key/value may hold more rows (padding to a CUDA-graph size)
    _, num_heads, head_dim = key.shape
    if num_tokens == 0:
        return
    fp8 = kv_cache_dtype != "auto"
    soft_fp8 = fp8 and not _native_fp8(key.device)
    if fp8:
        # the same bytes either way (vLLM allocates fp8 caches as uint8): float8 where Triton converts natively,
        # uint8 where the kernel builds the e4m3 bits itself
        view = torch.uint8 if soft_fp8 else torch.float8_e4m3fn
        key_cache, value_cache = key_cache.view(view), value_cache.view(view)
    cfg = reshape_and_cache_config(num_heads, head_dim, key.element_size())
    grid = (cdiv(num_tokens, cfg.block_t), cdiv(num_heads, cfg.block_h))
    launch(
        _reshape_and_cache_kernel,
        grid,
        (
            key,
            value,
            key_cache,
            value_cache,
            slot_mapping,
            k_scale if fp8 else slot_mapping,
            v_scale if fp8 else slot_mapping,
            num_tokens,
            key_cache.shape[0] * key_cache.shape[1],
            num_heads,
            key_cache.shape[1],
            key.stride(0),
            key.stride(1),
            value.stride(0),
            value.stride(1),
            key_cache.stride(0),
            key_cache.stride(1),
            key_cache.stride(2),
            value_cache.stride(0),
            value_cache.stride(1),
            value_cache.stride(2),
        ),
        {
            "HEAD_DIM": head_dim,
            "BLOCK_T": cfg.block_t,
            "BLOCK_H": cfg.block_h,
            "BLOCK_D": cfg.block_d,
            "FP8": fp8,
            "SOFT_FP8": soft_fp8,
        },
        cfg.num_warps,
    )


@mutating_op("reshape_and_cache", ("key_cache", "value_cache"))
def _reshape_and_cache_op(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    kv_cache_dtype: str,
    k_scale: torch.Tensor | None,
    v_scale: torch.Tensor | None,
) -> None:
    forward(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale, v_scale)


def check_args(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale, v_scale) -> None:
    """The op's named surface: every argument checked on metadata alone (no device sync), a ValueError or TypeError
    naming the bad one; nothing is written."""
    _checks.inference_only(key=key, value=value, key_cache=key_cache, value_cache=value_cache)
    _checks.tensor("key", key, dtypes=_checks.FLOAT_DTYPES, ndim=3, last_contiguous=True)
    _checks.tensor("value", value, ndim=3, last_contiguous=True)
    _checks.same_dtype("value", value, "key", key)
    _checks.shape_equal("value", value, tuple(key.shape), "key's shape [num_tokens, num_kv_heads, head_dim]")
    num_tokens, num_heads, head_dim = key.shape
    if num_heads == 0 or head_dim == 0:
        raise ValueError(f"key must have at least one kv head and a non-empty head_dim, got shape {tuple(key.shape)}")
    if not isinstance(kv_cache_dtype, str) or kv_cache_dtype not in KV_CACHE_DTYPES:
        raise ValueError(
            f"kv_cache_dtype must be one of {', '.join(map(repr, KV_CACHE_DTYPES))}, got {kv_cache_dtype!r}"
        )
    fp8 = kv_cache_dtype != "auto"
    cache_dtypes = FP8_CACHE_DTYPES if fp8 else (key.dtype,)
    for name, cache in (("key_cache", key_cache), ("value_cache", value_cache)):
        _checks.tensor(name, cache, ndim=4, last_contiguous=True)
        if cache.dtype not in cache_dtypes:
            want = (
                "float8_e4m3fn (or uint8 holding e4m3 bytes)" if fp8 else f"key's dtype {_checks.dtype_name(key.dtype)}"
            )
            raise TypeError(
                f"{name} must have dtype {want} for kv_cache_dtype="
                f"{kv_cache_dtype!r}, got {_checks.dtype_name(cache.dtype)}"
            )
        if tuple(cache.shape[2:]) != (num_heads, head_dim):
            raise ValueError(
                f"{name} must have shape [num_blocks, block_size, {num_heads}, {head_dim}] "
                f"(num_kv_heads and head_dim of key), got {tuple(cache.shape)}"
            )
        if cache.shape[1] == 0:
            raise ValueError(f"{name} must have a block_size (dim 1) of at least 1, got shape {tuple(cache.shape)}")
    _checks.same_dtype("value_cache", value_cache, "key_cache", key_cache)
    _checks.shape_equal("value_cache", value_cache, tuple(key_cache.shape), "key_cache's shape")
    _checks.tensor("slot_mapping", slot_mapping, dtypes=_checks.INDEX_DTYPES, ndim=1, last_contiguous=True)
    if slot_mapping.shape[0] > num_tokens:
        raise ValueError(
            f"slot_mapping must have at most {num_tokens} entries (one per row of key; key may hold "
            f"more rows, which are not written), got shape {tuple(slot_mapping.shape)}"
        )
    scales = {n: s for n, s in (("k_scale", k_scale), ("v_scale", v_scale)) if isinstance(s, torch.Tensor)}
    _checks.same_device(
        key=key, value=value, key_cache=key_cache, value_cache=value_cache, slot_mapping=slot_mapping, **scales
    )
    for name, s in (("k_scale", k_scale), ("v_scale", v_scale)):
        if s is None:
            if fp8:
                raise ValueError(f"kv_cache_dtype={kv_cache_dtype!r} needs {name}: a float32 tensor of one element")
            continue
        _checks.fp8_scale(name, s)
    # the caches are written while key, value, the slots and the scales are read, and each other is written
    _checks.distinct_elements("key_cache", key_cache)
    _checks.distinct_elements("value_cache", value_cache)
    _checks.no_overlap(
        "value_cache",
        value_cache,
        key_cache=key_cache,
        key=key,
        value=value,
        slot_mapping=slot_mapping,
        k_scale=k_scale,
        v_scale=v_scale,
    )
    _checks.no_overlap(
        "key_cache", key_cache, key=key, value=value, slot_mapping=slot_mapping, k_scale=k_scale, v_scale=v_scale
    )
    if _checks.indices_checked():
        num_slots = key_cache.shape[0] * key_cache.shape[1]
        _checks.index_range(
            "slot_mapping",
            slot_mapping,
            num_slots,
            f"cache slots (num_blocks x block_size = {num_slots}; negative: padding)",
            low=None,
            otherwise="that token is not written",
        )


def reshape_and_cache(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    *,
    kv_cache_dtype: str = "auto",
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
) -> None:
    """Write ``key``/``value`` rows into the paged caches in place (vLLM's ``reshape_and_cache_flash``).

    key, value    ``[num_rows, num_kv_heads, head_dim]`` float16/bfloat16/float32, same dtype and shape. Any
                  token and head strides (e.g. views of a fused qkv projection); the last dim must be contiguous.
                  Only the first ``slot_mapping.shape[0]`` rows are written: vLLM pads key/value to a captured
                  CUDA-graph size and passes the slots of the real tokens.
    key_cache,    ``[num_blocks, block_size, num_kv_heads, head_dim]``, the flash layout: cache slot ``s`` is
    value_cache   block ``s // block_size``, row ``s % block_size``, and holds every kv head of one token. Any
                  strides with a contiguous last dim (views into a larger, padded allocation are fine, and so are
                  the two halves of a joint ``[num_blocks, 2, ...]`` cache); the two may not share memory with
                  each other or with any input, nor have elements that share memory.
                  kv_cache_dtype="auto": key's dtype. "fp8"/"fp8_e4m3": float8_e4m3fn (or uint8 holding its bytes).
    slot_mapping  ``[num_tokens]`` int32/int64, ``num_tokens <= num_rows``: token ``t`` goes to slot
                  ``slot_mapping[t]``; ``-1`` (any negative)
                  is padding: that token is not written. Slots must be distinct and below ``num_blocks *
                  block_size``; a slot at or past that is dropped like padding, so no slot value writes outside
                  the caches. Slots are not read on the host (a sync); ``TRITONKIT_CHECK_INDICES=1`` checks them.
    kv_cache_dtype  "auto" copies the rows bit for bit. "fp8" stores ``x / scale``: one correctly rounded float32
                  division, saturated to +-448 (inf too; NaN stays NaN), rounded to nearest-even e4m3fn.
    k_scale, v_scale  float32 tensors of one element, read on the device so the call never syncs and can be
                  captured in a CUDA graph. Required for fp8; "auto" accepts them (vLLM passes them) without using
                  them, but they must still be such tensors.

    Returns None. Arguments are checked before anything is written; a rejected call leaves the caches untouched.
    """
    check_args(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale, v_scale)
    if through_dispatcher(key, value, key_cache, value_cache, slot_mapping):
        torch.ops.tritonkit.reshape_and_cache(
            key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale, v_scale
        )
        return None
    forward(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale, v_scale)
    return None
