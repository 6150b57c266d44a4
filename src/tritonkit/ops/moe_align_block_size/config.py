"""Tiles and paths for moe_align_block_size as a pure function of the number of experts.

None of these is measured on a GPU yet (the op was written without one): each is sized from the work it bounds,
and the num_tokens sweep of ``tritonkit bench`` is what should move them.
"""

import dataclasses

from .. import _memo
from .._ints import next_power_of_2

# Experts held as one register vector (counts, run starts) per program.
MAX_EXPERTS = 4096
# Slots ranked against each other at once: a [SUB, SUB] compare per step, 32 a thread at 4 warps.
SUB = 64
# At most this many slots (decode: 32 tokens x top-8) take the one-program path: one launch, SMALL_MAX / SUB
# dependent placement steps. More take three launches (count, scan, place) over chunks of CHUNK slots.
SMALL_MAX = 256
# Slots per program of the multi-program path: CHUNK / SUB placement steps each; 16K tokens x top-8 is 512
# programs and a 512 x E count table.
CHUNK = 256
# The scan reads the count table in [BLOCK_C chunks, BLOCK_ES experts] tiles: one tile up to 512 chunks (16K
# tokens x top-8), E / 8 programs.
BLOCK_C = 512
BLOCK_ES = 8
# int32 elements per store of the padding fills
FILL_BLOCK = 1024


@dataclasses.dataclass(frozen=True)
class MoeAlignConfig:
    block_e: int  # experts, padded to a power of two (the histogram's bins)
    num_warps: int


@_memo.memoized(maxsize=256)
def moe_align_config(num_experts: int) -> MoeAlignConfig:
    block_e = next_power_of_2(num_experts)
    # 4 warps; 8 once the per-expert vectors pass 16 values a thread
    return MoeAlignConfig(block_e, 8 if block_e > 2048 else 4)


def max_padded(numel: int, block_size: int, num_experts: int) -> int:
    """The length of sorted_token_ids: the most the padded runs can take. Each non-empty expert adds at most
    block_size - 1 padding, and at most min(numel, num_experts) experts are non-empty."""
    return min(numel * block_size, numel + num_experts * (block_size - 1))
