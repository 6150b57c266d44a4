"""Tile shape and warps for silu_and_mul as a pure function of d (the output width) and the element size."""

import dataclasses

from .. import _memo
from .._ints import cdiv, next_power_of_2


# 4 KB of each input half per program: 256 threads x one 16-byte vector each, and with up to 8 programs resident per
# SM that is ~64 KB of loads in flight per SM, past what HBM latency x bandwidth asks for (~40 KB on H200).
# H200, bf16, d 14336: 100% of copy bandwidth at 16K tokens (benchmarks/results/h200/bench.csv, tree e65d461).
TILE_BYTES = 4096
# grid[1] (column blocks) must stay within CUDA's 65535
MAX_GRID_1 = 65535


@dataclasses.dataclass(frozen=True)
class SiluAndMulConfig:
    block_m: int  # rows per program
    block_n: int  # output columns per program
    num_warps: int


# pure in its arguments, and on every call's host path: computed once per model config
@_memo.memoized(maxsize=256)
def silu_and_mul_config(d: int, elem_bytes: int) -> SiluAndMulConfig:
    tile = TILE_BYTES // elem_bytes
    block_n = min(next_power_of_2(max(d, 1)), tile)
    # narrow rows (d below the tile) stack several rows per program so each still moves a full tile
    block_m = tile // block_n
    if cdiv(d, block_n) > MAX_GRID_1:
        block_n = next_power_of_2(cdiv(d, MAX_GRID_1))
        block_m = 1
    # 16 bytes of each half per thread (one vector load each). H200 at d 14336: at 1-16 tokens one vector a thread
    # takes 1.86 us against 2.31 us for two, at any tile size (1-8 KB); at 16K tokens the two are within 0.5%
    # (docs/notes/elementwise-tiles.md).
    num_warps = min(max(block_m * block_n * elem_bytes // (32 * 16), 1), 8)
    return SiluAndMulConfig(block_m, block_n, num_warps)
