"""rotary_embedding in vLLM's call form (``vllm._custom_ops.rotary_embedding``): query and key in place.

:mod:`tritonkit.ops.vllm` re-exports it (vLLM's release: its ``VLLM_VERSION``). Arguments are checked before anything is
written.
"""

from __future__ import annotations

import torch

from .. import _checks
from . import api


def rotary_embedding(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor | None,
    head_size: int,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
    rope_dim_offset: int = 0,
    inverse: bool = False,
) -> None:
    """Rotary embedding of query and key in place, as ``vllm._custom_ops.rotary_embedding``.

    positions      ``[T]`` int32/int64, or ``[B, S]`` (a batch of sequences: ``T = B * S`` tokens).
    query, key     per token ``[H * head_size]`` (vLLM's flat form) or ``[H, head_size]``, after the leading dims of
                   positions: ``[T, ...]`` or ``[B, S, ...]`` (``[B * S, ...]`` beside ``[B, S]`` positions is read
                   as the same tokens). key may be None. Views into one fused qkv
                   projection are fine; the last dim must be contiguous (the rotation writes through a view).
    cos_sin_cache  ``[max_position, rot_dim]``, cos then sin; ``rot_dim < head_size`` rotates the first rot_dim dims
                   of every head (partial rotary) and leaves the rest.
    rope_dim_offset  the rotated dims start there in every head: dims ``[rope_dim_offset, rope_dim_offset +
                   rot_dim)`` rotate, the rest are left (DeepSeek's indexer puts the rotary dims last).
    inverse        rotate by the opposite angle (sin negated): undoes the rotation of the same positions.
    """
    if isinstance(head_size, bool) or not isinstance(head_size, int) or head_size < 1:
        raise ValueError(f"head_size must be a positive int, got {head_size!r}")
    _checks.tensor("positions", positions)
    if positions.dim() not in (1, 2):
        raise ValueError(f"positions must be [num_tokens] or [batch_size, seq_len], got shape {tuple(positions.shape)}")
    lead = tuple(positions.shape)
    q = _heads("query", query, head_size, lead)
    k = _heads("key", key, head_size, lead) if key is not None else None
    if not isinstance(inverse, bool):
        raise TypeError(f"inverse must be a bool, got {type(inverse).__name__}")
    if rope_dim_offset != 0:
        q, k = _offset(q, k, rope_dim_offset, head_size, cos_sin_cache)
    positions = positions.reshape(-1)
    api.check_args(positions, q, k, cos_sin_cache, is_neox, q_name="query", k_name="key")
    api.run_in_place(positions, q, k, cos_sin_cache, is_neox, inverse)


def _offset(q: torch.Tensor, k, offset, head_size: int, cos_sin_cache):
    """The ``[T, H, head_size - offset]`` views whose dim 0 is each head's dim ``offset``: the kernel rotates the
    first rot_dim dims of what it is given, so these rotate ``[offset, offset + rot_dim)`` through the same
    strides."""
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset < head_size:
        raise ValueError(f"rope_dim_offset must be an int in [0, head_size {head_size}), got {offset!r}")
    if isinstance(cos_sin_cache, torch.Tensor) and cos_sin_cache.dim() == 2:
        rot_dim = cos_sin_cache.shape[1]
        if offset + rot_dim > head_size:
            raise ValueError(
                f"rope_dim_offset {offset} + rot_dim {rot_dim} (cos_sin_cache's width) must be at most head_size "
                f"{head_size}"
            )
    return q[..., offset:], (None if k is None else k[..., offset:])


def _heads(name: str, t, head_size: int, lead: tuple) -> torch.Tensor:
    """``t`` as ``[T, H, head_size]``, a view the rotation writes through: ``t`` is ``lead`` (the positions'
    shape) followed by ``[H * head_size]`` or ``[H, head_size]``."""
    _checks.tensor(name, t, last_contiguous=True)
    forms = (
        f"{name} must be [{', '.join(map(str, lead))}, num_heads * head_size] or "
        f"[{', '.join(map(str, lead))}, num_heads, head_size] (positions' shape {list(lead)} first) with "
        f"head_size {head_size}, got shape {tuple(t.shape)}"
    )
    if len(lead) == 2 and tuple(t.shape[:2]) != lead and t.dim() >= 1 and t.shape[0] == lead[0] * lead[1]:
        lead = (lead[0] * lead[1],)  # [B, S] positions beside [B * S, ...] tokens: the same tokens, flattened
    rest = tuple(t.shape[len(lead) :])
    if tuple(t.shape[: len(lead)]) != lead or not (
        (len(rest) == 1 and rest[0] % head_size == 0 and rest[0] > 0)
        or (len(rest) == 2 and rest[1] == head_size and rest[0] > 0)
    ):
        raise ValueError(forms)
    n = 1
    for x in lead:
        n *= x
    try:
        return t.view(n, (rest[0] if len(rest) == 2 else rest[0] // head_size), head_size)
    except RuntimeError:
        raise ValueError(
            f"{name} of shape {tuple(t.shape)} and strides {t.stride()} cannot be viewed as "
            f"[num_tokens, num_heads, head_size] (its leading dims are not evenly strided); the "
            f"rotation writes in place, so it needs a view, not a copy"
        ) from None
