"""Tile sizes and warps for reshape_and_cache as a pure function of the model config (never of num_tokens, so the
whole num_tokens sweep shares one compile)."""

import dataclasses
import functools

from .._ints import cdiv, next_power_of_2


# Bytes of key (and as many of value) one program copies: 4 tokens of 8 kv heads x 128 in bf16. Enough per program
# that 4096 tokens make one wave of ~1024 programs (8 per SM on 132 SMs), each thread with several 16-byte loads in
# flight. H200 sweep of 8-32 KB x 4-16 tokens x 4/8 warps: every variant within ~3%
# (benchmarks/results/h200/tune_memops.json), so this stays.
TILE_BYTES = 8192
# More tokens per program only shrinks the grid: at 1 kv head x 128 (a TP-8 70B rank) 4 tokens are already 1 KB.
MAX_BLOCK_T = 4
# About 32 bytes of the tile per thread and tensor: two 16-byte vector loads each for key and value.
BYTES_PER_THREAD = 32
MAX_WARPS = 8


@dataclasses.dataclass(frozen=True)
class ReshapeAndCacheConfig:
    block_t: int  # tokens per program (grid[0] = cdiv(num_tokens, block_t))
    block_h: int  # kv heads per program (grid[1] = cdiv(num_kv_heads, block_h))
    block_d: int  # head_dim rounded up to a power of two
    num_warps: int


# pure in its arguments, and on every call's host path: computed once per model config
@functools.lru_cache(maxsize=256)
def reshape_and_cache_config(num_kv_heads: int, head_dim: int, elem_bytes: int) -> ReshapeAndCacheConfig:
    """``elem_bytes`` is the key's element size: loads set the vector width and the bytes in flight."""
    block_d = next_power_of_2(head_dim)
    tile = max(TILE_BYTES // elem_bytes, block_d)
    block_h = min(next_power_of_2(num_kv_heads), max(tile // block_d, 1))
    block_t = min(max(tile // (block_h * block_d), 1), MAX_BLOCK_T)
    tile_bytes = block_t * block_h * block_d * elem_bytes
    num_warps = min(max(tile_bytes // (32 * BYTES_PER_THREAD), 1), MAX_WARPS)
    return ReshapeAndCacheConfig(block_t, block_h, block_d, num_warps)
