"""rotary_embedding: rotary position embedding of q and k, in place (vLLM's rotary_embedding)."""

from __future__ import annotations

import torch

from .. import _checks
from .._ints import cdiv
from .._launch import launch
from .._library import mutating_op, through_dispatcher
from .config import rotary_config
from .kernel import _rotary_embedding_fwd_kernel


def forward(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor | None,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
    inverse: bool = False,
) -> None:
    """The op's named surface: rotate q (and k) in place on arguments check_args accepted; ``inverse`` rotates
    by the opposite angle (sin negated), undoing the rotation."""
    num_tokens, num_q_heads, _ = q.shape
    num_k_heads = 0 if k is None else k.shape[1]
    if num_tokens == 0 or num_q_heads + num_k_heads == 0:
        return
    rot_dim = cos_sin_cache.shape[1]
    cfg = rotary_config(num_q_heads, num_k_heads, rot_dim, q.element_size())
    n_blocks = cdiv(num_q_heads, cfg.block_hq) + cdiv(num_k_heads, cfg.block_hk)
    kk = q if k is None else k  # never touched when k is None: no k programs are launched
    launch(
        _rotary_embedding_fwd_kernel,
        (cdiv(num_tokens, cfg.block_t), n_blocks),
        (
            positions,
            q,
            kk,
            cos_sin_cache,
            num_tokens,
            num_q_heads,
            num_k_heads,
            cos_sin_cache.shape[0],
            positions.stride(0),
            q.stride(0),
            q.stride(1),
            kk.stride(0),
            kk.stride(1),
            cos_sin_cache.stride(0),
        ),
        {
            "ROT_HALF": rot_dim // 2,
            "IS_NEOX": is_neox,
            "INVERSE": inverse,
            "BLOCK_T": cfg.block_t,
            "BLOCK_HQ": cfg.block_hq,
            "BLOCK_HK": cfg.block_hk,
            "BLOCK_HALF": cfg.block_half,
        },
        cfg.num_warps,
    )


@mutating_op("rotary_embedding", ("q", "k"))
def _rotary_embedding_op(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor | None,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
    inverse: bool = False,
) -> None:
    forward(positions, q, k, cos_sin_cache, is_neox, inverse)


def check_args(positions, q, k, cos_sin_cache, is_neox, q_name: str = "q", k_name: str = "k") -> None:
    """``q_name``/``k_name``: what the caller calls them (vLLM's form says ``query`` and ``key``)."""
    _checks.inference_only(**{q_name: q, k_name: k, "cos_sin_cache": cos_sin_cache})
    _checks.tensor(q_name, q, dtypes=_checks.FLOAT_DTYPES, ndim=3, last_contiguous=True)
    num_tokens, _, head_dim = q.shape
    _checks.tensor("positions", positions, dtypes=_checks.INDEX_DTYPES, ndim=1)
    if positions.shape[0] != num_tokens:
        raise ValueError(
            f"positions must have shape ({num_tokens},) (one per token of {q_name}), got {tuple(positions.shape)}"
        )
    if k is not None:
        _checks.tensor(k_name, k, ndim=3, last_contiguous=True)
        _checks.same_dtype(k_name, k, q_name, q)
        if k.shape[0] != num_tokens or k.shape[2] != head_dim:
            raise ValueError(
                f"{k_name} must have shape ({num_tokens}, num_kv_heads, {head_dim}) to match "
                f"{q_name}'s tokens and head_dim, got {tuple(k.shape)}"
            )
    _checks.tensor("cos_sin_cache", cos_sin_cache, ndim=2, last_contiguous=True)
    if cos_sin_cache.dtype not in (torch.float32, q.dtype):
        raise TypeError(f"cos_sin_cache must be float32 or {q_name}'s dtype {q.dtype}, got {cos_sin_cache.dtype}")
    max_position, rot_dim = cos_sin_cache.shape
    if rot_dim < 2 or rot_dim % 2 or rot_dim > head_dim:
        raise ValueError(
            f"cos_sin_cache must be [max_position, rot_dim] with rot_dim even and 2 <= rot_dim <= "
            f"head_dim ({head_dim}), got shape {tuple(cos_sin_cache.shape)}"
        )
    if max_position == 0:
        raise ValueError(
            f"cos_sin_cache must have at least one row (max_position >= 1), got shape {tuple(cos_sin_cache.shape)}"
        )
    if not isinstance(is_neox, bool):
        raise TypeError(f"is_neox must be a bool, got {type(is_neox).__name__}")
    _checks.same_device(**{q_name: q, k_name: k, "positions": positions, "cos_sin_cache": cos_sin_cache})
    if _checks.indices_checked():
        _checks.index_range(
            "positions",
            positions,
            max_position,
            f"rows of cos_sin_cache ({max_position})",
            otherwise="that token's rotated dims become NaN",
        )
    if through_dispatcher(positions, q, k, cos_sin_cache):
        # Dynamo cannot trace the stride sort below, fake tensors have no data pointer; functionalization already
        # rejects writes to overlapping memory
        return
    # q and k are written in place: an element reachable twice would be rotated twice, racing
    for name, t in ((q_name, q), (k_name, k)):
        if t is not None and _checks.overlaps_itself(t):
            raise ValueError(
                f"{name} must not have overlapping elements (it is written in place), got shape "
                f"{tuple(t.shape)} and strides {tuple(t.stride())}"
            )
    # meta tensors (``tritonkit check``) all report data_ptr 0
    if k is not None and q.device.type != "meta" and k.numel() and q.numel() and _checks.may_overlap(q, k):
        raise ValueError(
            f"{k_name} must not overlap {q_name} (both are rotated in place), got {q_name} with "
            f"strides {tuple(q.stride())} and {k_name} with strides {tuple(k.stride())} sharing memory"
        )


def rotary_embedding(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor | None,
    cos_sin_cache: torch.Tensor,
    *,
    is_neox: bool = True,
):
    """Rotary position embedding, applied in place to the first ``rot_dim`` dims of every head of q and k.

    positions      ``[T]`` int32/int64, the position of each token. Must lie in ``[0, max_position)``: that is
                   not checked on the host (it would need a device sync; ``TRITONKIT_CHECK_INDICES=1`` checks it).
                   The kernel reads no memory outside the cache for an out-of-range position; that token's
                   rotated dims become NaN instead, so the bug shows.
    q              ``[T, Hq, D]`` float16/bfloat16/float32; ``k`` ``[T, Hk, D]`` of q's dtype, or None. Any
                   strides with the last dim contiguous, so q and k may be views into a fused ``[T, (Hq+2Hk)*D]``
                   qkv projection; they must not overlap.
    cos_sin_cache  ``[max_position, rot_dim]``: cos in the first ``rot_dim / 2`` columns, sin in the rest. Its dtype
                   is float32 or q's dtype (vLLM keeps it in the model dtype); it is read as float32 either way.
                   ``rot_dim`` is even and at most D; dims ``[rot_dim, D)`` are left untouched (partial rotary).
    is_neox        True: rotate the pairs ``(i, i + rot_dim/2)`` (GPT-NeoX, Llama); False: the interleaved pairs
                   ``(2i, 2i + 1)`` (GPT-J).

    Each pair becomes ``(x1 cos - x2 sin, x2 cos + x1 sin)`` in float32, rounded once to q's dtype; NaN and inf
    propagate as in that formula. Returns ``(q, k)``, the same tensors, updated.
    """
    check_args(positions, q, k, cos_sin_cache, is_neox)
    run_in_place(positions, q, k, cos_sin_cache, is_neox)
    return q, k


def run_in_place(positions, q, k, cos_sin_cache, is_neox, inverse: bool = False) -> None:
    """A checked call: through the dispatcher when tracing, else a direct launch."""
    if through_dispatcher(positions, q, k, cos_sin_cache):
        torch.ops.tritonkit.rotary_embedding(positions, q, k, cos_sin_cache, is_neox, inverse)
    else:
        forward(positions, q, k, cos_sin_cache, is_neox, inverse)
