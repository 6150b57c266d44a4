"""Rows per program and warps for topk_softmax as a pure function of the expert count and topk."""

import dataclasses

from .. import _memo
from .._ints import next_power_of_2

# Experts one program holds in registers: a whole row is one tile (logit + int64 key per expert).
MAX_EXPERTS = 4096  # also what the 16 expert bits of the kernel's sort key hold
# About 1024 (logit, key) pairs per program: 8 a thread at 4 warps, so E=8 (Mixtral) takes 128 rows a program
# and E=512 two. Not yet measured on a GPU: the tile is sized to keep the key tile in registers, not tuned.
TILE_ELEMS = 1024


@dataclasses.dataclass(frozen=True)
class TopkSoftmaxConfig:
    block_m: int  # rows (tokens) per program
    block_e: int  # experts, padded to a power of two
    block_k: int  # topk, padded to a power of two
    num_warps: int


@_memo.memoized(maxsize=256)
def topk_softmax_config(num_experts: int, topk: int) -> TopkSoftmaxConfig:
    block_e = next_power_of_2(num_experts)
    block_m = max(TILE_ELEMS // block_e, 1)
    # 8 pairs a thread: a 4096-expert row takes 16 warps
    num_warps = min(max(block_m * block_e // 256, 1), 16)
    return TopkSoftmaxConfig(block_m, block_e, next_power_of_2(topk), num_warps)
