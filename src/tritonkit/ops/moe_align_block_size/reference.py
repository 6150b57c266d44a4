"""Eager PyTorch oracle for moe_align_block_size (integer outputs: exact)."""

import torch

from .config import max_padded


def moe_align_block_size_reference(
    topk_ids: torch.Tensor, block_size: int, num_experts: int, expert_map: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(sorted_token_ids, expert_ids, num_tokens_post_padded)``, int32, as the op documents: ids outside
    [0, num_experts) dropped, each expert's slots in ascending order padded with numel, blocks past the total -1."""
    ids = topk_ids.reshape(-1).long()
    numel, dev = ids.numel(), ids.device
    padded_len = max_padded(numel, block_size, num_experts)
    sorted_ids = torch.full((padded_len,), numel, dtype=torch.int32, device=dev)
    num_blocks = -(-padded_len // block_size)
    expert_ids = torch.full((num_blocks,), -1, dtype=torch.int32, device=dev)
    valid = (ids >= 0) & (ids < num_experts)
    slots = torch.arange(numel, device=dev)[valid]
    experts = ids[valid]
    order = torch.argsort(experts, stable=True)  # by expert, slots ascending within one
    slots, experts = slots[order], experts[order]
    counts = torch.bincount(experts, minlength=num_experts)
    padded = (counts + block_size - 1) // block_size * block_size
    starts = torch.cumsum(padded, 0) - padded
    run_starts = torch.cumsum(counts, 0) - counts
    rank = torch.arange(slots.numel(), device=dev) - run_starts[experts]
    sorted_ids[starts[experts] + rank] = slots.to(torch.int32)
    total = int(padded.sum())
    block_expert = torch.repeat_interleave(torch.arange(num_experts, device=dev), padded // block_size)
    if expert_map is not None:
        block_expert = expert_map.to(dev).long()[block_expert]
    expert_ids[: total // block_size] = block_expert.to(torch.int32)
    return sorted_ids, expert_ids, torch.tensor([total], dtype=torch.int32, device=dev)
