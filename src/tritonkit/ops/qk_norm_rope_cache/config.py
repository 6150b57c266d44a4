"""Tile shape and warps for qk_norm_rope_cache as a pure function of the model config (never of num_tokens, so the
whole num_tokens sweep shares one compile)."""

import dataclasses
import os

from .. import _env, _memo
from .._ints import next_power_of_2

# Elements of q (padded heads) one program handles: rotary_embedding's tile (8 KB in 16-bit: a Llama-3-8B token's
# 32 heads x 128), measured there (docs/notes/elementwise-tiles.md). Not measured on a GPU for this op: the norm
# keeps each whole head in one program, which a tile of whole heads does. TRITONKIT_QK_TILE replaces it (for a GPU
# A/B; H200, 0448692: 8192 was no faster, 44.8 against 43.2 us at 4096 tokens, 161.9 against 157.5 at 16384).
_TILE_ENV = os.environ.get("TRITONKIT_QK_TILE", "4096").strip()
if not _TILE_ENV.isdigit() or int(_TILE_ENV) < 1:
    raise ValueError(f"TRITONKIT_QK_TILE={_TILE_ENV!r}: expected a positive number of elements, e.g. 4096")
TILE = int(_TILE_ENV)
# Four 16-byte vectors a thread (a Llama-3-8B token's 8 KB of q at 4 warps, the bench's copy kernel's 64 bytes a
# thread): 80 registers, 6 programs an SM against 4 of 8 warps at one vector. H100, Triton 3.6, against 8 warps: 1 /
# 256 / 4096 / 16384 tokens 3.1 / 5.6 / 51.9 / 195.5 -> 2.8 / 5.1 / 42.6 / 159.5 us, 71% -> 87% of a copy of the
# bytes; 2 warps (128 bytes) level from 4096 tokens, slower below; register caps for 7-8 programs an SM gain at most
# 3.5% at 16384 tokens and spill (docs/notes/qk-norm-rope-cache.md).
BYTES_PER_THREAD = 64
MAX_WARPS = 8
# EARLY_LOADS: cos/sin and (kv programs) v loaded with the head's elements, before the norm's reductions, instead
# of after them: one memory round trip a program instead of two (sm_90 SASS: every LDG ahead of the two BAR.SYNCs),
# at 56 registers a thread against 48 at 8 warps (4 programs an SM instead of 5; now 80 at 4 warps). Same bits. H200,
# Llama-3-8B heads, one run (0448692): 1 token 2.7 against 3.1 us, 256 tokens 4.6 against 5.5, 4096 43.6 against
# 43.2, 16384 160.9 against 157.5 (docs/notes/qk-norm-rope-cache.md). TRITONKIT_QK_EARLY_LOADS=0 turns it off.
EARLY_LOADS = os.environ.get("TRITONKIT_QK_EARLY_LOADS", "1").strip() not in ("", "0")
# HEADS_FIRST: a 1-D grid whose consecutive programs are one token's head blocks (its q program, then its k/v
# program), instead of a 2-D grid that runs every token's q program before any k/v program. The k/v programs move
# half a q program's bytes, so under the 2-D grid the second half of a large call runs with half the loads in flight.
# H100, Triton 3.6, Llama-3-8B heads, one run each (docs/notes/qk-norm-rope-cache.md): 1 / 256 / 4096 / 16384 tokens
# 2.82 / 5.11 / 42.94 / 160.5 -> 2.81 / 4.95 / 42.20 / 158.1 us, 86.2 / 87.2% -> 88.2 / 88.5% of a copy of the bytes
# at 4096 / 16384. TRITONKIT_QK_HEADS_FIRST=0 returns the 2-D grid.
HEADS_FIRST = _env.flag("TRITONKIT_QK_HEADS_FIRST") is not False
# KV_TOKENS: on the 1-D grid a k/v program takes this many of the q programs' token blocks, so that it moves about
# the bytes a q program does (k and v of GQA's few heads for several tokens against q's many heads for one): the
# rule takes 2 where q's head block is at least 4x k's (Llama-3-8B's 32 / 8, Qwen3-30B-A3B's 32 / 4), else 1. H100,
# one run each against one token a k/v program, µs at 1 / 16 / 256 / 1024 / 4096 / 16384 tokens
# (docs/notes/qk-norm-rope-cache.md): Triton 3.6, Llama-3-8B 2.8 / 3.1 / 4.9 / 12.8 / 42.1 / 157.4 -> 2.8 / 3.1 /
# 5.0 / 11.9 / 38.7 / 142.7 (87.8 -> 95.6% of a copy of the bytes at 4096), Qwen3-30B-A3B 2.8 / 3.0 / 4.5 / 11.8 /
# 37.2 / 136.2 -> 2.8 / 3.0 / 4.7 / 10.9 / 34.3 / 124.2 (85.1 -> 92.3%); Triton 3.8, Llama-3-8B 2.7 / 3.0 / 4.9 /
# 12.6 / 41.1 / 153.0 -> 2.8 / 3.2 / 5.1 / 12.5 / 40.2 / 149.2 (89.9 -> 91.5%), Qwen3-30B-A3B 2.5 / 2.7 / 4.4 / 11.2
# / 35.1 / 128.8 -> 2.7 / 3.0 / 4.7 / 11.0 / 34.2 / 124.2 (89.7 -> 92.1%); an fp8 cache (Triton 3.6, 1 / 16 / 256 /
# 4096 / 16384 tokens), Mistral-7B 3.5 / 3.4 / 5.2 / 39.8 / 146.6 -> 3.7 / 3.8 / 5.4 / 37.2 / 135.6 (86.7 -> 92.7%),
# Llama-3-70B TP8 3.3 / 3.3 / 3.8 / 12.6 / 39.1 -> 3.5 / 3.5 / 3.9 / 11.6 / 36.2. The prefill sizes meet issue 39's
# 1.1x of a copy with it and not without, at up to 0.4 µs a decode call. 4 served Qwen3 better from 1024 tokens and
# cost more at 1-256; Llama's 4 needs 126 registers. TRITONKIT_QK_KV_TOKENS=N (a power of two) replaces the rule.
KV_TOKENS = _env.choice("TRITONKIT_QK_KV_TOKENS", (0, 1, 2, 4, 8), 0)
# TRITONKIT_QK_WARPS=N (a power of two) replaces the rule's warps a program, for a GPU A/B (0, the default: the rule)
WARPS = _env.choice("TRITONKIT_QK_WARPS", (0, 1, 2, 4, 8), 0)
# TRITONKIT_QK_MAXNREG=N caps a thread's registers (Triton's maxnreg), for a GPU A/B (0, the default: no cap)
MAXNREG = _env.choice("TRITONKIT_QK_MAXNREG", (0, 40, 48, 56, 64, 72, 80, 96, 128), 0) or None


def _floor_power_of_2(n: int) -> int:
    """The largest power of two at most ``n`` (1 for ``n < 2``): a head of 80 dims pads to 96, not a power of two."""
    return 1 << (max(n, 1).bit_length() - 1)


@dataclasses.dataclass(frozen=True)
class QkNormRopeCacheConfig:
    block_t: int  # tokens per program (grid[0] = cdiv(num_tokens, block_t))
    block_hq: int  # q heads per q program
    block_hkv: int  # k heads (and as many v heads) per kv program
    block_half: int  # next_pow2(rot_dim / 2), 1 without rotary
    block_tail: int  # next_pow2(head_dim - rot_dim), 1 without a tail
    block_d: int  # next_pow2(head_dim): the v copy
    num_warps: int
    kv_tokens: int = 1  # token blocks a k/v program takes on the 1-D grid


# pure in its arguments, and on every call's host path: computed once per model config
@_memo.memoized(maxsize=256)
def qk_norm_rope_cache_config(
    num_q_heads: int, num_kv_heads: int, head_dim: int, rot_dim: int, elem_bytes: int
) -> QkNormRopeCacheConfig:
    block_half = next_power_of_2(max(rot_dim // 2, 1))
    block_tail = next_power_of_2(max(head_dim - rot_dim, 1))
    # a head as the program holds it: both rotated halves and the tail, each padded to a power of two
    width = (2 * block_half if rot_dim else 0) + (block_tail if head_dim > rot_dim else 0)
    max_heads = _floor_power_of_2(TILE // width)
    block_hq = min(next_power_of_2(max(num_q_heads, 1)), max_heads)
    # kv programs get their own (smaller) head block: a shared one would leave most of a GQA k program masked
    block_hkv = min(next_power_of_2(max(num_kv_heads, 1)), max_heads)
    block_t = _floor_power_of_2(TILE // (block_hq * width))
    tile_bytes = block_t * block_hq * width * elem_bytes
    # a power of two (Triton's rule): a head padded to 96 or 192 elements makes a tile of 3 x 2^k vectors
    num_warps = WARPS or _floor_power_of_2(min(tile_bytes // (32 * BYTES_PER_THREAD), MAX_WARPS))
    kv_tokens = KV_TOKENS or (2 if block_hq >= 4 * block_hkv else 1)
    return QkNormRopeCacheConfig(
        block_t, block_hq, block_hkv, block_half, block_tail, next_power_of_2(head_dim), num_warps, kv_tokens
    )
