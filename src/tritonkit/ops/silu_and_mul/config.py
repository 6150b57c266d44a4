"""Tile shape and warps for silu_and_mul as a pure function of d (the output width) and the element size."""

import dataclasses
import functools

import triton

# 4 KB of each input half per program: 128 threads x two 16-byte vectors, and with up to 16 programs resident per
# SM that is ~128 KB of loads in flight per SM, well past what HBM latency x bandwidth asks for (~40 KB on H200).
# H200, bf16, d 14336: 96% of copy bandwidth at 4K tokens, 100% at 16K (benchmarks/results/h200/bench/); at 1-16
# tokens Inductor's kernel is ~0.4 us faster (2.2 vs 1.8 us): smaller tiles for decode are untested.
TILE_BYTES = 4096
# grid[1] (column blocks) must stay within CUDA's 65535
MAX_GRID_1 = 65535


@dataclasses.dataclass(frozen=True)
class SiluAndMulConfig:
    block_m: int  # rows per program
    block_n: int  # output columns per program
    num_warps: int


# pure in its arguments, and on every call's host path: computed once per model config
@functools.lru_cache(maxsize=256)
def silu_and_mul_config(d: int, elem_bytes: int) -> SiluAndMulConfig:
    tile = TILE_BYTES // elem_bytes
    block_n = min(triton.next_power_of_2(max(d, 1)), tile)
    # narrow rows (d below the tile) stack several rows per program so each still moves a full tile
    block_m = tile // block_n
    if triton.cdiv(d, block_n) > MAX_GRID_1:
        block_n = triton.next_power_of_2(triton.cdiv(d, MAX_GRID_1))
        block_m = 1
    # 32 bytes of each half per thread: two 16-byte vector loads in flight each
    num_warps = min(max(block_m * block_n * elem_bytes // (32 * 32), 1), 8)
    return SiluAndMulConfig(block_m, block_n, num_warps)
