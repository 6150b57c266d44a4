"""Tile shape and warps for silu_and_mul_quant_fp8 as a pure function of d (the output width), the element size and
the quantization mode (not yet measured on a GPU: the tiles are silu_and_mul's)."""

import dataclasses

from .. import _device, _env, _memo
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
# Per-token calls of at most TOKEN_SPLIT_ROWS rows (0: none; TOKEN_SPLIT_ROWS_STREAMED for rows wider than
# MAX_TOKEN_ROW, which one program walks twice) split each row across programs of TOKEN_SPLIT_COLS columns, in two
# launches (kernel._silu_and_mul_quant_fp8_split_kernel: the parts' amaxes, then the scale and the codes). One
# 16-warp program a row is compute-bound on its SM at decode sizes. H100, Triton 3.6, CUDA graphs, µs at 1 / 16 /
# 64 / 256 rows, one program a row against the split: Llama-3-8B (14336 columns, held) 5.1 / 5.5 / 6.5 / 14.4
# against 3.9 / 4.0 / 6.1 / 15.0; DeepSeek-V3 (18432, streamed) 13.5 / 14.0 / 14.9 / 23.4 against 3.9 / 4.2 / 6.9 /
# 18.5 (docs/notes/fused-fp8-small.md). TRITONKIT_SILU_QUANT_SPLIT_ROWS[_STREAMED]=N sets either bound.
_SPLIT_BOUNDS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256)
TOKEN_SPLIT_ROWS = _env.choice("TRITONKIT_SILU_QUANT_SPLIT_ROWS", _SPLIT_BOUNDS, 64)
TOKEN_SPLIT_ROWS_STREAMED = _env.choice("TRITONKIT_SILU_QUANT_SPLIT_ROWS_STREAMED", _SPLIT_BOUNDS, 256)
# silu_and_mul's 16 bytes of each half a thread: 4 warps for 16-bit inputs
TOKEN_SPLIT_COLS = 1024
# a row's parts at most (d up to 64K columns); wider rows keep the one-program path
TOKEN_SPLIT_MAX = 64
# the second launch as the first's programmatic dependent where the target has it (sm_90+)
TOKEN_SPLIT_PDL = True


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


@dataclasses.dataclass(frozen=True)
class TokenSplitConfig:
    block_n: int  # a program's columns
    splits: int  # programs a row (grid[1])
    num_warps: int


@_memo.memoized(maxsize=256)
def token_split_config(d: int, elem_bytes: int) -> TokenSplitConfig | None:
    """The split of a per-token row of ``d`` outputs, or None where the row is one program's tile or would take more
    than TOKEN_SPLIT_MAX parts. Whether a call takes it is :func:`token_split`'s."""
    splits = cdiv(d, TOKEN_SPLIT_COLS)
    if splits < 2 or splits > TOKEN_SPLIT_MAX:
        return None
    num_warps = min(max(TOKEN_SPLIT_COLS * elem_bytes // (32 * 16), 1), 8)
    return TokenSplitConfig(TOKEN_SPLIT_COLS, splits, num_warps)


def token_split(n_rows: int, d: int, elem_bytes: int) -> TokenSplitConfig | None:
    """The split a per-token call of ``n_rows`` rows takes (None: one program a row)."""
    if n_rows > (TOKEN_SPLIT_ROWS if d <= MAX_TOKEN_ROW else TOKEN_SPLIT_ROWS_STREAMED):
        return None
    return token_split_config(d, elem_bytes)


def token_split_pdl(device) -> bool:
    """Whether the split's second launch is the first's programmatic dependent (``_device.pdl``)."""
    return TOKEN_SPLIT_PDL and _device.pdl(device)
