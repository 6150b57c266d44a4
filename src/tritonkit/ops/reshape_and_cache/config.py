"""Tile sizes and warps for reshape_and_cache as a pure function of the model config (never of num_tokens, so the
whole num_tokens sweep shares one compile)."""

import dataclasses

from .. import _memo
from .._ints import next_power_of_2


# Bytes of key (and as many of value) one program copies: one token of 8 kv heads x 128 in bf16, one 16-byte vector
# of each a thread (4 warps). H200, Llama-3-8B dims (us): 1 token 1.70 against 1.76 for 4 tokens x 8 warps (8 KB),
# 16 tokens 1.86 / 1.97, 64 tokens 2.03 / 2.14 (a small batch spreads over more SMs); from 256 tokens up it is
# within ~3% of the best tile of 1-4 tokens x 2-8 warps. See docs/notes/reshape-and-cache.md.
TILE_BYTES = 2048
# More tokens per program only shrinks the grid: at 1 kv head x 128 (a TP-8 70B rank) 4 tokens are 1 KB.
MAX_BLOCK_T = 4
# One 16-byte vector load each for key and value per thread.
BYTES_PER_THREAD = 16
MAX_WARPS = 8


@dataclasses.dataclass(frozen=True)
class ReshapeAndCacheConfig:
    block_t: int  # tokens per program (grid[0] = cdiv(num_tokens, block_t))
    block_h: int  # kv heads per program (grid[1] = cdiv(num_kv_heads, block_h))
    block_d: int  # head_dim rounded up to a power of two
    num_warps: int


# pure in its arguments, and on every call's host path: computed once per model config
@_memo.memoized(maxsize=256)
def reshape_and_cache_config(num_kv_heads: int, head_dim: int, elem_bytes: int) -> ReshapeAndCacheConfig:
    """``elem_bytes`` is the key's element size: loads set the vector width and the bytes in flight."""
    block_d = next_power_of_2(head_dim)
    tile = max(TILE_BYTES // elem_bytes, block_d)
    block_h = min(next_power_of_2(num_kv_heads), max(tile // block_d, 1))
    block_t = min(max(tile // (block_h * block_d), 1), MAX_BLOCK_T)
    tile_bytes = block_t * block_h * block_d * elem_bytes
    num_warps = min(max(tile_bytes // (32 * BYTES_PER_THREAD), 1), MAX_WARPS)
    return ReshapeAndCacheConfig(block_t, block_h, block_d, num_warps)
