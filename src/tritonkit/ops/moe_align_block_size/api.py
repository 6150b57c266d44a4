"""moe_align_block_size: group a mixture-of-experts layer's token slots by expert, each expert's run padded to the
GEMM's block size (vLLM's ``moe_align_block_size``)."""

from __future__ import annotations

import torch

from .. import _alloc, _checks
from .._ints import cdiv
from .._launch import launch
from .._library import op_with_outputs, through_dispatcher
from . import config
from .config import max_padded, moe_align_config
from .kernel import (
    _moe_align_count_kernel,
    _moe_align_place_kernel,
    _moe_align_scan_kernel,
    _moe_align_small_kernel,
)

_INT32_MAX = 2**31 - 1


def _alloc_outputs(
    topk_ids: torch.Tensor, block_size: int, num_experts: int, expert_map: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    padded, dev = max_padded(topk_ids.numel(), block_size, num_experts), topk_ids.device
    return (
        _alloc.empty((padded,), torch.int32, dev),
        _alloc.empty((cdiv(padded, block_size),), torch.int32, dev),
        _alloc.empty((1,), torch.int32, dev),
    )


def forward(
    topk_ids: torch.Tensor, block_size: int, num_experts: int, expert_map: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The op's named surface: (sorted_token_ids, expert_ids, num_tokens_post_padded) on arguments check_args
    accepted; no host sync."""
    sorted_ids, expert_ids, post_padded = _alloc_outputs(topk_ids, block_size, num_experts, expert_map)
    launch_into(sorted_ids, expert_ids, post_padded, topk_ids, block_size, num_experts, expert_map)
    return sorted_ids, expert_ids, post_padded


def launch_into(
    sorted_ids: torch.Tensor,
    expert_ids: torch.Tensor,
    post_padded: torch.Tensor,
    topk_ids: torch.Tensor,
    block_size: int,
    num_experts: int,
    expert_map: torch.Tensor | None,
) -> None:
    """Write forward's three outputs into the caller's contiguous int32 tensors of their shapes (:func:`forward`)."""
    numel = topk_ids.numel()
    if numel == 0:
        post_padded.zero_()
        return
    padded, num_blocks = sorted_ids.numel(), expert_ids.numel()
    cfg = moe_align_config(num_experts)
    has_map = expert_map is not None
    map_ptr = expert_map if has_map else topk_ids
    if numel <= config.SMALL_MAX:
        launch(
            _moe_align_small_kernel,
            (1,),
            (
                topk_ids,
                sorted_ids,
                expert_ids,
                post_padded,
                map_ptr,
                numel,
                num_experts,
                block_size,
                padded,
                num_blocks,
            ),
            {
                "HAS_MAP": has_map,
                "CHUNK": config.SMALL_MAX,
                "SUB": config.SUB,
                "BLOCK_E": cfg.block_e,
                "FILL_BLOCK": config.FILL_BLOCK,
            },
            cfg.num_warps,
        )
        return
    num_chunks = cdiv(numel, config.CHUNK)
    # per chunk and expert: the counts, then the slots in earlier chunks; then each expert's total
    work = torch.empty((2 * num_chunks + 1) * num_experts, dtype=torch.int32, device=topk_ids.device)
    counts, prefix = work[: num_chunks * num_experts], work[num_chunks * num_experts : 2 * num_chunks * num_experts]
    totals = work[2 * num_chunks * num_experts :]
    launch(
        _moe_align_count_kernel,
        (num_chunks,),
        (topk_ids, counts, sorted_ids, expert_ids, numel, num_experts, padded, num_blocks),
        {"CHUNK": config.CHUNK, "BLOCK_E": cfg.block_e, "FILL_BLOCK": config.FILL_BLOCK},
        cfg.num_warps,
    )
    launch(
        _moe_align_scan_kernel,
        (cdiv(num_experts, config.BLOCK_ES),),
        (counts, prefix, totals, num_chunks, num_experts),
        {"BLOCK_C": config.BLOCK_C, "BLOCK_ES": config.BLOCK_ES},
        4,
    )
    launch(
        _moe_align_place_kernel,
        (num_chunks,),
        (topk_ids, prefix, totals, sorted_ids, expert_ids, post_padded, map_ptr, numel, num_experts, block_size),
        {"HAS_MAP": has_map, "CHUNK": config.CHUNK, "SUB": config.SUB, "BLOCK_E": cfg.block_e},
        cfg.num_warps,
    )


@op_with_outputs(
    "moe_align_block_size", _alloc_outputs, outs=("sorted_token_ids", "expert_ids", "num_tokens_post_padded")
)
def _moe_align_block_size_out_op(
    sorted_token_ids: torch.Tensor,
    expert_ids: torch.Tensor,
    num_tokens_post_padded: torch.Tensor,
    topk_ids: torch.Tensor,
    block_size: int,
    num_experts: int,
    expert_map: torch.Tensor | None,
) -> None:
    launch_into(sorted_token_ids, expert_ids, num_tokens_post_padded, topk_ids, block_size, num_experts, expert_map)


def _int32_span(numel: int, block_size: int, num_experts: int) -> int:
    """The largest int32 value the kernels compute: a fill position one store and one grid stride past the padded
    length, or an entry of the per-chunk count table."""
    padded = max_padded(numel, block_size, num_experts)
    chunks = cdiv(numel, config.CHUNK)
    return max(padded + (chunks + 1) * config.FILL_BLOCK, (2 * chunks + 1) * num_experts)


def _int(name: str, v, low: int, what: str) -> None:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    if v < low:
        raise ValueError(f"{name} must be at least {low} ({what}), got {v}")


def check_args(topk_ids, block_size, num_experts, expert_map) -> None:
    """The op's named surface: every argument checked on metadata alone (no device sync), a ValueError or TypeError
    naming the bad one; nothing is written."""
    _checks.tensor("topk_ids", topk_ids, dtypes=_checks.INDEX_DTYPES, ndim=2)
    if not topk_ids.is_contiguous():
        raise ValueError(
            f"topk_ids must be contiguous (slot m * topk + j is element m * topk + j), got strides "
            f"{tuple(topk_ids.stride())} for shape {tuple(topk_ids.shape)}"
        )
    _int("block_size", block_size, 1, "rows of the expert GEMM's tile")
    _int("num_experts", num_experts, 1, "experts the ids index")
    if num_experts > config.MAX_EXPERTS:
        raise ValueError(f"num_experts must be at most {config.MAX_EXPERTS}, got {num_experts}")
    if _int32_span(topk_ids.numel(), block_size, num_experts) > _INT32_MAX:
        raise ValueError(
            f"topk_ids has {topk_ids.numel()} slots: with block_size {block_size} and {num_experts} "
            f"experts the kernels' int32 positions would overflow (split the batch)"
        )
    if expert_map is not None:
        _checks.tensor("expert_map", expert_map, dtypes=(torch.int32,), ndim=1)
        _checks.shape_equal("expert_map", expert_map, (num_experts,), "num_experts: global id -> local index or -1")
        if not expert_map.is_contiguous():
            raise ValueError(f"expert_map must be contiguous, got stride {tuple(expert_map.stride())}")
        _checks.same_device(topk_ids=topk_ids, expert_map=expert_map)
    if _checks.indices_checked():
        _checks.index_range("topk_ids", topk_ids, num_experts, "expert ids")
        if expert_map is not None:
            # a rank holds at most num_experts experts: the tightest bound without the weights
            _checks.index_range(
                "expert_map",
                expert_map,
                num_experts,
                "local expert indices (-1: another rank's)",
                low=-1,
                otherwise="the entry reaches expert_ids as it is, or the vLLM form drops its slots",
            )


def moe_align_block_size(
    topk_ids: torch.Tensor, block_size: int, num_experts: int, expert_map: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sort a MoE layer's token slots by expert and pad each expert's run to a multiple of ``block_size``, the
    layout the grouped GEMM reads. No host synchronisation: every output size is a function of the shapes, so the
    call can be captured in a CUDA graph.

    topk_ids     ``[num_tokens, topk]`` int32/int64, contiguous: the experts of each token. Slot ``m * topk + j``
                 is token m's j-th choice; ``numel = num_tokens * topk``. Ids must be in ``[0, num_experts)``
                 (checked only with ``TRITONKIT_CHECK_INDICES=1``: reading them is a host sync); a slot whose id is
                 outside is dropped: it is in no run, counts toward no total, and nothing is written for it.
    block_size   ``>= 1`` (the GEMM uses powers of two >= 16).
    num_experts  ``>= 1`` (at most 4096): the experts the ids index (global ids under expert parallelism).
    expert_map   optional ``[num_experts]`` int32: global expert id -> this rank's local index, or -1 for an
                 expert on another rank. Entries are copied into expert_ids unread on the host: one outside
                 ``[-1, num_experts)`` reaches it as it is (``TRITONKIT_CHECK_INDICES=1`` refuses it).

    Returns, all int32 and contiguous, with ``max_padded = min(numel * block_size, numel + num_experts *
    (block_size - 1))`` (the most the runs can take):

    sorted_token_ids       ``[max_padded]``: expert 0's slots in ascending order, padded with the value ``numel``
                           to a multiple of block_size, then expert 1's, ...; experts with no slot take no space.
                           Entries past the padded total hold ``numel`` too.
    expert_ids             ``[cdiv(max_padded, block_size)]``: the expert of each block of sorted_token_ids, in
                           expert order: its id, or ``expert_map[id]`` with a map (-1 for a block of an expert on
                           another rank: such blocks stay in the list). Blocks past the padded total hold -1.
    num_tokens_post_padded ``[1]``: the padded total, a multiple of block_size.
    """
    check_args(topk_ids, block_size, num_experts, expert_map)
    if through_dispatcher(topk_ids, expert_map):
        return torch.ops.tritonkit.moe_align_block_size(topk_ids, block_size, num_experts, expert_map)
    # forward's two steps, one call fewer on the host path
    sorted_ids, expert_ids, post_padded = _alloc_outputs(topk_ids, block_size, num_experts, expert_map)
    launch_into(sorted_ids, expert_ids, post_padded, topk_ids, block_size, num_experts, expert_map)
    return sorted_ids, expert_ids, post_padded
