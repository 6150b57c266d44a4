"""Tile shape and warps for rotary_embedding as a pure function of head counts, rot_dim and the element size."""

import dataclasses

from .. import _memo
from .._ints import next_power_of_2


# elements of q rotated per program (8 KB in 16-bit): all 32 heads x 128 dims of a Llama-3-8B token in one program,
# several tokens per program when a rank holds few heads (8 at Llama-3-70B TP 8 -> 4 tokens). H200, 4K-64K tokens:
# TILE 2048 and 4096 are within 2 points of copy bandwidth of each other, 8192 and 16384 lower, and no tile wins
# everywhere, so this stays (docs/notes/elementwise-tiles.md).
TILE = 4096


@dataclasses.dataclass(frozen=True)
class RotaryConfig:
    block_t: int  # tokens per program
    block_hq: int  # q heads per program
    block_hk: int  # k heads per program
    block_half: int  # next_pow2(rot_dim / 2)
    num_warps: int


# pure in its arguments, and on every call's host path: computed once per model config
@_memo.memoized(maxsize=256)
def rotary_config(num_q_heads: int, num_k_heads: int, rot_dim: int, elem_bytes: int) -> RotaryConfig:
    block_half = next_power_of_2(max(rot_dim // 2, 1))
    max_heads = max(TILE // (2 * block_half), 1)
    block_hq = min(next_power_of_2(max(num_q_heads, 1)), max_heads)
    # k's heads get their own (smaller) block: a shared one would leave most of a k program's lanes masked
    block_hk = min(next_power_of_2(max(num_k_heads, 1)), max_heads)
    block_t = max(TILE // (block_hq * 2 * block_half), 1)
    # 16 bytes of each half per thread, one vector load each. H200, Llama-3-8B dims: one vector a thread takes 2.13
    # against 2.54 us for two at 1 token, 3.77 against 4.09 at 256, 94.9 against 96.2 at 16K
    # (docs/notes/elementwise-tiles.md).
    tile_bytes = block_t * block_hq * 2 * block_half * elem_bytes
    num_warps = min(max(tile_bytes // (2 * 32 * 16), 1), 8)
    return RotaryConfig(block_t, block_hq, block_hk, block_half, num_warps)
