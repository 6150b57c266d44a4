"""Tile shape and warps for silu_and_mul_quant_fp8 as a pure function of d (the output width), the element size and
the quantization mode (not yet measured on a GPU: the tiles are silu_and_mul's)."""

import dataclasses

from .. import _memo
from .._ints import cdiv, next_power_of_2

# silu_and_mul's tile: 4 KB of each input half per program (docs/notes/elementwise-tiles.md); a multiple of every
# group size for 16-bit and float32 inputs
TILE_BYTES = 4096
# grid[1] (column blocks) must stay within CUDA's 65535
MAX_GRID_1 = 65535
# per-token rows up to this many outputs are held in registers (the amax, then the quantization); wider rows are
# walked twice
MAX_TOKEN_ROW = 16384
TOKEN_STREAM_BLOCK = 4096
# such a row is held as chunks of this many columns: Llama-3-8B's 14336 are 7 of them, not a 16384-wide tile
TOKEN_CHUNK = 2048
# The float32 exp of bfloat16 static and per-token (kernel._exp_neg_bf16): its activation is bit-exact for all 65536
# bfloat16 inputs, proven under the interpreter with a fused fma and natively on the H200 (tests/ops/
# test_silu_and_mul_quant_fp8_fast.py 55/55, tritonkit validate 588/588, tree 8dd7cd6); 38.8 SASS instructions a value
# against 55.9, static silu at 4096 tokens 89.8 against 127.5 us (docs/notes/silu-fp8-issue.md).
FAST_EXP = True


@dataclasses.dataclass(frozen=True)
class SiluQuantConfig:
    block_m: int  # rows per program
    block_n: int  # output columns per tile
    num_chunks: int  # per-token single pass: tiles a row is held in (1 otherwise)
    single_pass: bool  # per-token: a tile holds the whole row
    grid_n: int  # column blocks (grid[1])
    num_warps: int


# pure in its arguments, and on every call's host path: computed once per model config
@_memo.memoized(maxsize=256)
def silu_and_mul_quant_config(d: int, elem_bytes: int, quant: str, group_size: int) -> SiluQuantConfig:
    tile = TILE_BYTES // elem_bytes
    single, num_chunks = True, 1
    if quant == "token":
        single = d <= MAX_TOKEN_ROW
        block_n = min(next_power_of_2(max(d, 1)), TOKEN_CHUNK) if single else TOKEN_STREAM_BLOCK
        num_chunks = cdiv(d, block_n) if single else 1
        grid_n = 1
    else:
        block_n = min(next_power_of_2(max(d, 1)), tile)
        if quant == "group":
            block_n = max(block_n, group_size)
        if cdiv(d, block_n) > MAX_GRID_1:
            block_n = next_power_of_2(cdiv(d, MAX_GRID_1))
        grid_n = cdiv(d, block_n)
    # narrow rows stack several rows per program so each still moves a full tile
    block_m = max(tile // block_n, 1)
    # silu_and_mul's 16 bytes of each half per thread (docs/notes/elementwise-tiles.md)
    num_warps = min(max(block_m * block_n * elem_bytes // (32 * 16), 1), 16 if block_n > tile else 8)
    if num_chunks > 1:
        # a row held in chunks: 16 warps take 64 registers for 14336 bf16 columns (two programs a SM); 8 warps take
        # 181 (one) for the same instructions a value (46.6 against 46.3, sm_90 SASS; docs/notes/silu-fp8-issue.md)
        num_warps = 16
    return SiluQuantConfig(block_m, block_n, num_chunks, single, grid_n, num_warps)
