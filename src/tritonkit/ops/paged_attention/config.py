"""Which path runs, tile sizes, warps and the number of KV splits, as pure functions of host integers.

Nothing here reads tensor data: every decision comes from shapes and the per-call integers the caller already
holds (``max_seqlen_q``, ``max_seqlen_k``, ``num_seqs``), so a call stays valid under CUDA-graph capture.

Paths
-----
decode   one program per (sequence, KV head, KV split). Its BLOCK_M rows are the ``DECODE_BLOCK_M // group``
         query tokens of one sequence times the ``group`` query heads that share the KV head, so each KV byte is
         read once per split and the scores are one ``[BLOCK_M, D] x [D, BLOCK_N]`` dot. Long contexts are split
         across programs (flash-decoding); a second kernel merges the splits, launched as the decode kernel's
         programmatic dependent on sm_90+ (it starts while the decode grid runs and waits on it in-kernel).
prefill  one program per (query tile, KV head): BLOCK_M rows = ``BLOCK_M // group`` consecutive query tokens
         times the group's heads, KV tiles of BLOCK_N keys, tensor-core dots, causal tile skipping.

A sequence belongs to the decode path when its query length is at most ``decode_max_q`` (all its query rows fit
one decode program), to the prefill path otherwise. Each kernel skips the other's sequences, so a mixed batch is
two launches (plus the split merge) and no host sync; a batch whose ``max_seqlen_q <= decode_max_q`` launches
the decode path only. (The decode launch of a pure-prefill batch is num_seqs x kv_heads x splits programs that
load their metadata and run no tile: a few microseconds, the price of not reading query lengths on the host.)

Grids
-----
decode   (num_seqs, num_kv_heads, num_splits); merge (num_seqs, num_heads, query tokens of a decode program that
         the batch can use: min(max_q, max_seqlen_q) <= DECODE_WIDE_ROWS).
prefill  ((T + num_seqs * (BLOCK_Q - 1)) // BLOCK_Q x num_kv_heads, num_splits): sequence s's query tiles start at
         tile (cu_seqlens_q[s] + s * (BLOCK_Q - 1)) // BLOCK_Q (prefill_grid_tiles), a count from host integers,
         exact for one sequence and never above num_seqs + T // BLOCK_Q; times the KV heads, flattened with the KV
         head fastest and launched heaviest tile first (LPT order under causal masking). Each program finds its
         sequence by binary search over cu_seqlens_q and runs no tile when it has none. Merge (the same programs,
         BLOCK_Q x group rows): a program a query row, or a 16-row slice with few splits (prefill_merge_rows).
The dimension that grows with the batch is grid[0] (valid to 2^31 - 1: 1M tokens is ~16K prefill tiles x 8 KV
heads at group 4); grid[1] and grid[2] hold heads, splits (<= 64), a tile's rows (BLOCK_Q x group <= max(256,
group)) and a decode program's query tokens (<= 128): all within CUDA's 65535 (api checks num_heads).
"""

from __future__ import annotations

import dataclasses
import os

from .. import _env, _memo
from ... import _triton_compat, _vocab
from .. import _device
from .._ints import cdiv, next_power_of_2


# Rows of a decode program: the smallest M of a tensor-core dot. Packing more query tokens (speculative decoding)
# into the same 16 rows is free: decode is memory bound and the rows are there anyway.
DECODE_BLOCK_M = 16
# Most rows of a decode program for a batch whose longest query is longer than DECODE_BLOCK_M's tokens (speculative
# decoding and short chunks of up to 128 // group tokens, head_dim up to 128): the split decode path at 8 warps, 64
# rows up to 64 query rows, else 128. Only for batches whose sequences x KV heads fill the SMs: a smaller batch takes
# the prefill kernel and its KV splits (H200, Llama-3-8B heads: 8 x 16 tokens at 4K keys 69.7 us against 94.1 on
# the wide rows, 32-token chunk over 16K keys 52.5 against 83.4; 32 x 16 tokens at 4K keys 202 on 64 rows against
# 263 on 128 and 328 through prefill; docs/notes/prefill-splits.md). A mixed batch with a longer prompt keeps
# DECODE_BLOCK_M.
DECODE_WIDE_ROWS = 128
DECODE_WIDE_ROWS_MIN = 64
DECODE_WIDE_WARPS = 8
# Split cap; the merge kernels load this many splits of a row at once ([64, head_dim] float32, whatever the call's
# split count: one compile per merge, not one per power of two of it). Batch 1 with 8 KV heads takes 64 (4 x 132
# // 8 = 66): a 32K context then gives each program 16 tiles of 32 keys.
MAX_SPLITS = 64
# Decode programs per SM the splits aim for: num_seqs x kv_heads x splits ~ this x SMs, raised to
# DECODE_PROGRAMS_PER_SM_LONG where a program would otherwise loop over DECODE_LONG_TILES tiles or more (twice that
# where it would not split: the raise then adds the merge launch), with at least MIN_KEYS_PER_SPLIT keys (one 32-key
# tile) a split. H200, Llama-3-8B heads (docs/notes/decode-tiling.md, exp31): a small batch runs best at 2 programs a SM
# with few tiles each (batch 1 x 1K 11.4 us at 256 programs of one tile against 15.2 at the former 4 a SM and 256 keys a
# split, which gave 32 programs of 8 tiles; 1 x 4K 15.8 against 17.2; 4 x 1K 15.9 against 17.4; 32 x 1K, one split and
# no merge, 48.9 against 52.6), long programs at 4 (16 x 4K 81.4 against 85.6 at 2, 32 x 4K 141.8 against 148.4, 1 x 32K
# 50.8 against 51.5). 4 programs of 4 warps fit a SM: the sm_90 build takes 118 registers a thread.
DECODE_PROGRAMS_PER_SM = 2
DECODE_PROGRAMS_PER_SM_LONG = 4
DECODE_LONG_TILES = 32
# fp8 tiles (64 keys) are widened to bf16 in registers before the dot: 242 registers a thread in the sm_90 build,
# 2 programs per SM. fp8 decode is slower than bf16 on the H200 (batch 16 x 4K: 89 vs 75 us); 32-key fp8 tiles,
# which would halve that, are untried.
DECODE_PROGRAMS_PER_SM_FP8 = 2
# A split is worth its partial write and merge from this many keys (bf16/fp16 cache, the narrow rows); fp8 caches
# and the wide rows keep the former 256 (their small batches were not measured against fewer).
MIN_KEYS_PER_SPLIT = 32
MIN_KEYS_PER_SPLIT_FP8_WIDE = 256
# Warps of a decode program. 2 warps are slower at every batch measured on the H200 (batch 4 x 4K 26.44 against
# 25.88 us, 16 x 4K 85.3 against 72.9), and they fit 6 programs a SM where 4 warps fit 4, so a full batch runs
# fewer waves of them (batch 128 x 4K 15% slower); splitting large batches to fill the last wave of 2-warp programs
# made batches 128 and 256 slower still. One config serves every batch (one compile per path). See
# docs/notes/decode-tiling.md.
DECODE_WARPS = 4
# Pipeline stages of the decode kernel's K/V loads: 3 (37 KB of shared memory at head_dim 128), and 4 (53 KB) where
# decode_stages says. TRITONKIT_DECODE_STAGES=2, 3 or 4 sets them for every decode launch; unset (0), the rule decides.
DECODE_STAGES = _env.choice("TRITONKIT_DECODE_STAGES", (2, 3, 4), 0)
# Narrow decode rows with each warp on its own 16 keys of a tile and its own online-softmax state (the batched
# dots of docs/notes/decode-warp-split.md): TRITONKIT_DECODE_KEY_WARPS=2 (32-key tiles, 2 warps) or 4 (64-key
# tiles, 4 warps); 0, the default, keeps the 2D tile. Untimed.
DECODE_KEY_WARPS = _env.choice("TRITONKIT_DECODE_KEY_WARPS", (0, 2, 4), 0)


def decode_stages_release(version: str) -> bool:
    """Whether Triton ``version`` takes 4 decode stages past one wave (decode_stages): from 3.7. At 3 stages the
    sm_90 decode program takes 117 / 80 / 96 registers under 3.6 / 3.8 / 3.9, so an SM holds 4 / 6 / 5 of them and a
    batch past 4 programs a SM runs a release-dependent number of waves; 4 stages' 53 KB hold 4 a SM under every
    release. H100, Llama-3-8B heads, bf16, decode 1K / 4K / 8K keys and 4 draft tokens at 4K, min of 2-3 runs, ratio
    to 3.6's 3 stages (docs/notes/triton-versions-h200.md, 2026-12-06): batch 128 under 3.8 1.07-1.11 at 3 stages,
    1.00 at 4; under 3.9 1.05-1.09 and 1.00-1.01; 4 x 128 drafts 1.08-1.11 and 1.00; batch 96 gives 3.8's lead up
    (0.92-0.96 -> 1.01-1.03). Under 3.6 4 stages cost 0-3% past one wave and 1-11% below it, so 3.6 keeps 3."""
    return _triton_compat.version_key(version) >= (3, 7)


DECODE_STAGES_RELEASE = decode_stages_release(_triton_compat.VERSION)


def decode_stages(
    head_dim: int, kv_elem_bytes: int, wide: bool, programs: int, num_sms: int, sm90: bool = False
) -> int:
    """num_stages of a decode launch of ``programs`` programs (sequences x KV heads x splits): TRITONKIT_DECODE_STAGES
    where set; else 4 for the narrow bf16/fp16 program at head_dim 128 on sm_90 (``sm90``: the registers and the
    228 KB of shared memory an SM the rule was read and timed on; an A100's 164 KB would hold 3 such programs, an
    sm_89's 100 KB one) past one wave of DECODE_PROGRAMS_PER_SM_LONG programs a SM under the releases
    decode_stages_release names (below one wave the split rule already sizes the grid to the SMs, and 4 stages only
    add latency: batch 1 x 4K 12.5 -> 13.1-13.8 us), else 3. Other head sizes, fp8 caches and the wide programs have
    other register and shared-memory limits and were not measured."""
    if DECODE_STAGES:
        return DECODE_STAGES
    fixed = sm90 and not wide and kv_elem_bytes == 2 and head_dim_pad(head_dim) == 128
    past_one_wave = programs > DECODE_PROGRAMS_PER_SM_LONG * num_sms
    return 4 if DECODE_STAGES_RELEASE and fixed and past_one_wave else 3


# Warps of a merge program. 2 against 4 on the H200: batch 4 x 4K 24.88 vs 25.79 us, 16 x 4K 73.02 vs 73.94, 1 x 4K
# and 1 x 32K within 0.15 us; 1 warp is slower everywhere (27.73 at batch 4: 255 registers and a 296-byte stack in
# the sm_90 build). See docs/notes/decode-merge.md. Only up to head_dim 128: at 256 the [64, 256] float32 partial
# tile spills 424 bytes at 2 warps (255 registers, sm_90 build) and none at 4 (223). The prefill merge runs the same
# tile (one query row a program) at the same warps: a 16-token chunk over 16K keys 44.4 us against 47.3 at two rows
# a program and 4 warps, and 56.0 for the former loop over splits of 16 rows (H200, docs/notes/prefill-merge.md; that
# merge loaded [32, head_dim], the call's 32 splits, where this one loads MAX_SPLITS rows, the unused ones masked).
MERGE_WARPS = 2
MERGE_WARPS_WIDE = 4
# Prefill tile choice and KV splits, from the H200 sweep of tile rows x forced splits in
# docs/notes/prefill-splits.md (chunks of 64-1024 tokens over 4K-32K keys, causal prompts of 64-2048 tokens):
# 256-row programs (16 warps) fit one a SM, and split where the batch's tiles cannot fill the card, from 1024 keys
# a split; 64-row programs (4 warps) split for two a SM from 512 keys a split; 128 rows run at 8 warps. A chunk
# is a query over at least 4x its length in keys.
PREFILL_PROGRAMS_PER_SM = 1
PREFILL_MIN_KEYS_PER_SPLIT = 1024
PREFILL_SMALL_ROWS = 64
PREFILL_MID_ROWS = 128
PREFILL_SMALL_PROGRAMS_PER_SM = 2
PREFILL_SMALL_MIN_KEYS_PER_SPLIT = 512
PREFILL_CHUNK_KEYS_PER_QUERY = 4
# Short prompts (at most this many keys): 64-row tiles of 32 keys (H200: 64 / 256 / 512 tokens 9.4 / 14.1 / 22.3 us
# against 10.0 / 14.8 / 22.9 at 64 keys; a 64-token chunk over 16K keys is 89 against 66, so chunks keep 64); a
# prompt that fits one 256-row tile runs 32-row tiles at 4 warps and 2 stages (16 / 32 / 64 tokens 6.9 / 7.2 /
# 8.9 us against 7.8 / 8.0 / 9.4), and alone in its batch it takes the prefill kernel instead of the wide decode
# rows (16 tokens: 8.1 us there). docs/notes/prefill-splits.md.
PREFILL_SHORT_KEYS = 1024
# Batches whose rows all see at most this many keys take kernel.py's 64-row tiles of 32 keys (several programs a SM)
# where Hopper's 128-row warp-specialized programs would fill the card, each a wave-long prologue for 1-2 key tiles.
# H100, Triton 3.6: 8 x 128 / 8 x 256 / 16 x 64 / 16 x 256 tokens 23.4 / 43.6 / 26.1 / 81.3 -> 19.8 / 41.0 / 19.2 /
# 75.6 us; 8 x 512 unchanged at 256 and 7% slower at 512 keys; 128-row small tiles lose
# (docs/notes/prefill-batched-prompts.md). TRITONKIT_PREFILL_BATCH_SHORT_KEYS=0 turns it off.
PREFILL_BATCH_SHORT_KEYS = _env.choice("TRITONKIT_PREFILL_BATCH_SHORT_KEYS", (0, 128, 256, 512, 1024), 256)
# measured against the Hopper tile only, so only where that is the big tile (False: kernel.py's largest too, which
# the interpreter's tests run)
PREFILL_BATCH_SHORT_HOPPER_ONLY = True
PREFILL_BATCH_SHORT_ROWS = _env.choice("TRITONKIT_PREFILL_BATCH_SHORT_ROWS", (32, 64, 128), 64)
PREFILL_SHORT_ROWS = 32
# The prefill merge: a program a query row, all splits loaded at once, from this many splits; fewer splits fold one
# at a time over 16-row slices at 4 warps, launched after the prefill grid (the merge before 390e615). On the H200
# the row-parallel merge took the 8-split 64-token chunk over 16K keys from 64.0 to 62.7 us, and lost at 4 and 2
# splits (256- and 512-token chunks: 164.7 -> 174.7 and 299.2 -> 335.8 us against the sliced merge).
# docs/notes/prefill-merge.md.
PREFILL_MERGE_PARALLEL_SPLITS = 8
PREFILL_MERGE_ROWS = 16
PREFILL_MERGE_ROWS_WARPS = 4
# SM count when no CUDA device answers (the interpreter, meta tensors): the H200's (tritonkit/_vocab).
DEFAULT_NUM_SMS = _vocab.DEFAULT_SMS


@dataclasses.dataclass(frozen=True)
class DecodeConfig:
    block_m: int
    block_n: int
    max_q: int  # query tokens of one sequence a decode program holds: block_m // group
    num_splits: int
    tiles_per_split: int  # KV tiles of each split (but the last) of the longest sequence, when no left window
    num_warps: int
    num_stages: int
    key_warps: int = 1  # warps the tile's keys are dealt to, each with its own softmax state (1: the 2D tile)


@dataclasses.dataclass(frozen=True)
class PrefillConfig:
    block_m: int
    block_q: int  # query tokens per tile: block_m // group
    block_n: int
    num_warps: int
    num_stages: int  # Triton's pipeline stages; the Hopper kernel's K/V buffer ring
    num_splits: int = 1  # KV splits of each query tile; > 1 adds the prefill merge kernel
    hopper: bool = False  # kernel_hopper's warp-specialized kernel instead of kernel.py's
    persistent: int = 0  # hopper: its grid's programs at most, each taking tiles in turn; 0: one program a tile


# The Gluon prefill kernel for sm_90 (kernel_hopper.py: K/V pages through TMA from a load warp, two consumer
# warpgroups at up to 240 registers, 128 x 128 tiles, two K/V stages) takes the largest prefill tile's place on
# Hopper. On the H200 it matches the float64 reference on its 9 GPU cases under Triton 3.6, 3.8 and 3.9 and on
# `tritonkit validate paged_attention` (72/72, 3.6), and with OVERLAP it is faster than kernel.py's prefill on each:
# causal 16K 4217 us on 3.6 (522 TFLOP/s), 4506 on 3.8, 4403 on 3.9 (a96b3ce), where kernel.py's took 4730 (3.6,
# 9aefa61), 4832-4853 (3.8) and 4938-4972 (3.9, 21668f8); FA3 3697 (docs/notes/prefill-hopper.md,
# docs/notes/triton-versions-h200.md). TRITONKIT_PREFILL_HOPPER=0 turns it off.
PREFILL_HOPPER = os.environ.get("TRITONKIT_PREFILL_HOPPER", "1").strip() != "0"
PREFILL_HOPPER_ROWS = 128


# TRITONKIT_PREFILL_HOPPER_KEYS=64: 64-key tiles (96.4 KB of shared memory; still one program a SM: 168 x 384
# registers), for a GPU A/B
PREFILL_HOPPER_KEYS = _env.choice("TRITONKIT_PREFILL_HOPPER_KEYS", (64, 128), 128)
PREFILL_HOPPER_WARPS = 8
# EARLY_PAGES: the load warp reads a tile's block-table entries before it waits for the tile's K buffer, together and
# once for K and V, instead of one box at a time between the TMA issues (TRITONKIT_PREFILL_HOPPER_EARLY_PAGES=1);
# TRITONKIT_PREFILL_HOPPER_STAGES=3 gives the ring a third stage (224 KB of shared memory). Both off: neither paid
# on the H200 (one-tile programs, causal 1024 / 16384 and a chunk of 1024 over 16K: 3.9 33.5 / 3951 / 471.5 us,
# early pages 33.8 / 3998 / 477.9, 3 stages 33.6 / 4141 / 510.9; 3.6 31.3 / 3751 / 456.0 against early pages 31.3 /
# 3730 / 455.6; benchmarks/results/h200/s27-9ceada8). Nor did entries read a key tile ahead, with a one-load sequence
# search, on batches of short prompts (H100, 3.6: 8 x 512 / 1024 tokens level or 1-3% slower; docs/notes/
# prefill-batched-prompts.md): the load warp's round trips are not what those tiles wait on.
PREFILL_HOPPER_EARLY_PAGES = _env.flag("TRITONKIT_PREFILL_HOPPER_EARLY_PAGES") is True
PREFILL_HOPPER_STAGES = _env.choice("TRITONKIT_PREFILL_HOPPER_STAGES", (2, 3), 2)
# OVERLAP: each warpgroup issues tile j + 1's score dot before tile j's softmax (FA3's intra-warpgroup overlap). In
# the sm_90 builds ptxas interleaves those HGMMAs with the softmax's exp2s (without it the exp2s wait on the dot). The
# extra [128, 128] float32 tile fits 240 registers on Triton 3.6, 3.7 and 3.9; 3.8's build spills in its
# loops and is still the faster there. H200, causal 16K, overlap against not: 4345 / 4603 us on 3.6 (9aefa61's run),
# 4506 / 4633 on 3.8 and 4403 / 4440 on 3.9 (a96b3ce's); a chunk of 1024 over 16K 514 / 546, 522 / 562, 532 / 541.
# TRITONKIT_PREFILL_HOPPER_OVERLAP=0 turns it off.
PREFILL_HOPPER_OVERLAP = os.environ.get("TRITONKIT_PREFILL_HOPPER_OVERLAP", "1").strip() != "0"
# PINGPONG: the two consumer warpgroups as two 4-warp partitions of 64 rows each, each in FA3's order (tile j's
# score dot and tile j - 1's P x V issued together, then tile j's softmax, which ptxas schedules after both dots).
# It replaces OVERLAP's order, bit for bit the same outputs. H200, Triton 3.6, against OVERLAP in one run (6508612):
# causal 16K 3528 against 4278 us (623 TFLOP/s; FA3 3655), a chunk of 1024 over 16K 450 against 500 (FA3 458),
# causal 1024 31.1 against 33.1 (docs/notes/prefill-pingpong.md). TRITONKIT_PREFILL_HOPPER_PINGPONG=0 turns it off.
PREFILL_HOPPER_PINGPONG = os.environ.get("TRITONKIT_PREFILL_HOPPER_PINGPONG", "1").strip() not in ("", "0")
# PERSISTENT (ping-pong builds): a grid of at most one program a SM, each taking the grid's program tiles in turn,
# heaviest first and mirrored every other round (kernel_hopper._snake_tile), the stage ring carried across tiles so
# the load warp fetches a tile's first K/V under the previous tile's last steps. prefill_hopper_persistent says
# where; TRITONKIT_PREFILL_HOPPER_PERSISTENT=1 / =0 turns it on / off for every call.
PREFILL_HOPPER_PERSISTENT = _env.flag("TRITONKIT_PREFILL_HOPPER_PERSISTENT")
# HANDOFF (persistent programs): the load warp, which runs ahead, publishes each tile's bounds to the consumers in
# shared memory, in place of each consumer partition's own chain of dependent loads before the tile's Q (the
# sequence's binary search over cu_seqlens_q, then its lengths: 3 round trips at 8 sequences, 9 at 256). In the
# snake order it is 2-4% slower (H100, docs/notes/prefill-persistent.md), so off there
# (TRITONKIT_PREFILL_HOPPER_HANDOFF=1 turns it on); DYNAMIC runs on its ring.
PREFILL_HOPPER_HANDOFF = _env.flag("TRITONKIT_PREFILL_HOPPER_HANDOFF") is True
# DYNAMIC (persistent programs, with the hand-off's ring): each program's load warp takes its next tile from a
# counter the call allocates zeroed (heaviest first across the grid), skips the empty ones unpublished and hands the
# rest to its consumers. The fixed snake order meets a mixed batch's empty decode slots first, which shifts its
# pairing of heavy and light tiles. H100, Triton 3.9, against the snake order: a prompt beside 64 decode sequences
# at 4096 / 16384 tokens 629 / 4069 against 660 / 4250 us, 8 prompts of 2048 629 against 676, causal prompts and
# chunks level (docs/notes/prefill-persistent.md). TRITONKIT_PREFILL_HOPPER_DYNAMIC=0 returns the snake order.
PREFILL_HOPPER_DYNAMIC = _env.flag("TRITONKIT_PREFILL_HOPPER_DYNAMIC") is not False
# the persistent grid's programs at most; 0: one a SM (a smaller grid takes more tiles a program: the tests' lever;
# prefill_config and so the launch plan hold it)
PREFILL_HOPPER_PERSISTENT_PROGRAMS = 0
# a call whose query rows see at most this many keys stays on the one-tile programs (8 prompts of 256 tokens: 1.5
# key tiles a program, where PERSISTENT lost 3-11% on every release)
PREFILL_HOPPER_PERSISTENT_MIN_KEYS = 256
# below 3.9 (where one-tile programs are the default) a batch of short prompts still takes PERSISTENT: rows that see
# at most PREFILL_HOPPER_PERSISTENT_SHORT_KEYS keys, in at least PREFILL_HOPPER_PERSISTENT_SHORT_PER_SM programs a SM,
# where each one-tile program's prologue is most of its work. H100, Triton 3.6, Llama-3-8B heads, one run against
# one-tile programs (docs/notes/prefill-batched-prompts.md): 8 x 512 tokens 94.1 -> 88.2 us, 8 x 1024 228.6 -> 206.7;
# a single prompt loses with it (1024 tokens, 256 programs: 32.5 -> 34.9; 4096 tokens, 1024 programs of up to 4096
# keys: 265.4 -> 280.6), as do chunks over 16K keys (1.7-5.8%)
PREFILL_HOPPER_PERSISTENT_SHORT_KEYS = 1024
PREFILL_HOPPER_PERSISTENT_SHORT_PER_SM = 4


def prefill_hopper_persistent_release(version: str) -> bool:
    """Whether PERSISTENT is the default under Triton ``version``: from 3.9. H200, bf16 Llama-3-8B heads, one run
    each (docs/notes/prefill-persistent.md), one-tile programs against persistent: under 3.9 causal 2K / 8K / 16K
    89.8 / 1067 / 3951 against 81.7 / 909 / 3785 us, chunks of 1024 / 2048 / 8192 over 16K 471.5 / 969.5 / 3000
    against 455.0 / 884.9 / 2845, 8 x 1024 241.7 against 216.6, 8 x 256 44.1 against 45.5; under 3.6 and 3.8 it is
    mixed (3.6: chunk 1024 444.6 -> 411.5 and 2K 83.5 -> 79.6, causal 4K / 16K 256.4 / 3751 -> 264.6 / 3839; 3.8:
    chunk 1024 456.6 -> 439.8, 16K 3787 -> 3812, 8 x 256 41.9 -> 46.6), so it stays off there."""
    return _triton_compat.version_key(version) >= (3, 9)


PREFILL_HOPPER_PERSISTENT_RELEASE = prefill_hopper_persistent_release(_triton_compat.VERSION)


def prefill_hopper_persistent(max_keys: int, programs: int = 0, num_sms: int | None = None) -> bool:
    """Whether a Hopper prefill launch of ``programs`` one-tile programs whose query rows see at most ``max_keys``
    keys runs PERSISTENT on ``num_sms`` SMs: never without the ping-pong build; as TRITONKIT_PREFILL_HOPPER_PERSISTENT
    says where it is set; else past PREFILL_HOPPER_PERSISTENT_MIN_KEYS keys, under the releases
    prefill_hopper_persistent_release names, and under the others for batches of short prompts (at most
    PREFILL_HOPPER_PERSISTENT_SHORT_KEYS keys, at least PREFILL_HOPPER_PERSISTENT_SHORT_PER_SM programs a SM)."""
    if not PREFILL_HOPPER_PINGPONG:
        return False
    if PREFILL_HOPPER_PERSISTENT is not None:
        return PREFILL_HOPPER_PERSISTENT
    if max_keys <= PREFILL_HOPPER_PERSISTENT_MIN_KEYS:
        return False
    if PREFILL_HOPPER_PERSISTENT_RELEASE:
        return True
    return (
        num_sms is not None
        and max_keys <= PREFILL_HOPPER_PERSISTENT_SHORT_KEYS
        and programs >= PREFILL_HOPPER_PERSISTENT_SHORT_PER_SM * num_sms
    )


def prefill_hopper_turns(version: str, setting: str | None = None) -> bool:
    """TURNS under Triton ``version``: the two warpgroups' dots alternate on a pair of mbarriers (one's softmax under
    the other's dots) through 3.8 and run free from 3.9, unless ``setting`` (TRITONKIT_PREFILL_HOPPER_TURNS: "0" off,
    else on) says. With turns the sm_90 build runs 38-41% slower under 3.9 than under 3.6 (ncu: 11.9 warp cycles an
    issued instruction against 7.8, the same launch) and 27-34% slower than without them. H100, causal 16K / a chunk
    of 1024 over 16K, turns against none (docs/notes/triton-versions-h200.md): 3.6 3717 / 3752 us and 459 / 458
    (level), 3.8 3683 / 3776 and 453 / 471, 3.9 5181 / 4084 and 652 / 488 (OVERLAP's order under 3.9: 4492 and
    547)."""
    if setting is not None:
        return setting.strip() not in ("", "0")
    return _triton_compat.version_key(version) < (3, 9)


PREFILL_HOPPER_TURNS = prefill_hopper_turns(_triton_compat.VERSION, os.environ.get("TRITONKIT_PREFILL_HOPPER_TURNS"))
# PREFILL_ALONE_PROMPTS: a batch of several sequences whose host integers prove that none is the decode kernel's
# (num_tokens > (num_seqs - 1) x max_seqlen_q + the decode program's query tokens: were one sequence at most that
# many tokens, the others could not hold the rest) launches the prefill kernel alone, as one prompt does, instead
# of a decode grid that runs no tile (num_seqs x kv_heads x splits programs) and, with splits, its merge (num_seqs x
# heads x max_q programs): 8 prompts of 64-512 tokens at Llama-3-8B heads are 128-256 decode and 1024 merge programs
# before the prefill grid (a no-tile decode + merge measured 3.8-6.4 us, docs/notes/decode-merge.md). Correct
# whatever the lengths (the prefill kernel then takes every sequence). TRITONKIT_PREFILL_ALONE_PROMPTS=0 turns it off.
PREFILL_ALONE_PROMPTS = os.environ.get("TRITONKIT_PREFILL_ALONE_PROMPTS", "1").strip() not in ("", "0")
# TMA coordinates are int32: a cache of more rows (num_blocks x block_size) keeps kernel.py's prefill
MAX_TMA_ROWS = 2**31 - 1


def prefill_hopper_fits(
    capability: tuple[int, int] | None, head_dim: int, block_size: int, group: int, cache_rows: int
) -> bool:
    """Whether kernel_hopper's prefill kernel can take a call (besides its dtypes and cache strides, which api
    checks): an sm_90 GPU (wgmma), head_dim 64 or 128 (a TMA box row and the dots' K), pages of a power-of-two
    count of at least 16 keys (a 128-key tile is whole pages, or a slice of one), a GQA group within the tile's
    rows, and cache rows that int32 TMA coordinates reach."""
    return (
        PREFILL_HOPPER
        and capability is not None
        and capability[0] == 9
        and head_dim in (64, 128)
        and block_size >= 16
        and block_size & (block_size - 1) == 0
        and group <= PREFILL_HOPPER_ROWS
        and cache_rows <= MAX_TMA_ROWS
    )


def page_rows(block_size: int) -> int:
    """Keys of one TMA box of the Hopper kernel: a page, or a tile's worth of a larger page."""
    return min(block_size, PREFILL_HOPPER_KEYS)


def _hopper_tile(group: int) -> PrefillConfig:
    block_m = PREFILL_HOPPER_ROWS
    return PrefillConfig(
        block_m, block_m // group, PREFILL_HOPPER_KEYS, PREFILL_HOPPER_WARPS, PREFILL_HOPPER_STAGES, hopper=True
    )


# The merge kernel launches as the decode kernel's programmatic dependent (PDL, sm_90+), triggered at the decode
# kernel's start: its programs become resident while the decode grid runs, read cu_seqlens_q, and wait in-kernel for the
# decode grid's completion instead of launching after it. H200: batch 16 x 4K 74.1 -> 72.6 us, 1 x 32K 42.2 -> 41.6, 1 x
# 4K 14.1 -> 13.3, 4 x 4K 27.1 -> 27.0; speculative decoding (8 sequences x 4 tokens) 48.3 -> 49.9 with the merge
# looping over a sequence's tokens, 53.8 -> 52.5 with a program a token. Triggering at the start beat the implicit
# trigger at each program's exit (docs/notes/decode-merge.md). The same switch chains the row-parallel prefill merge
# (PREFILL_MERGE_PARALLEL_SPLITS) to the split prefill kernel, on its implicit trigger: a chunk of 16 / 32 / 64 tokens
# over 16K keys, with the row-parallel merge and the exact tile grid, 38.4 -> 36.7, 43.8 -> 43.4, 62.7 -> 62.7 us
# (docs/notes/prefill-merge.md).
MERGE_PDL = True


def head_dim_pad(head_dim: int) -> int:
    # a dot's K dimension is at least 16; non-powers of two (80, 96) pad to the next power and mask the tail
    return max(16, next_power_of_2(head_dim))


def merge_warps(head_dim: int) -> int:
    return MERGE_WARPS if head_dim_pad(head_dim) <= 128 else MERGE_WARPS_WIDE


def _narrow_rows(group: int) -> int:
    """Rows of a decode program for one query token per sequence (or a few): DECODE_BLOCK_M, or the group."""
    return max(DECODE_BLOCK_M, next_power_of_2(group))


def decode_max_q(group: int) -> int:
    """Longest query (tokens per sequence) the decode path takes for this GQA group size at the narrow rows."""
    return _narrow_rows(group) // group


def decode_block_m(
    group: int, head_dim: int, max_seqlen_q: int, num_seqs: int, num_kv_heads: int, num_sms: int, max_keys: int
) -> int:
    """Rows of a decode program: the narrow rows, or (see DECODE_WIDE_ROWS) the wide rows, the query's rows rounded
    up to DECODE_WIDE_ROWS_MIN or DECODE_WIDE_ROWS, when every query of the batch fits those but not the narrow
    ones, and either the batch's sequences x KV heads fill the SMs or its keys are few (at most PREFILL_SHORT_KEYS:
    two 16-token prompts, 8.4 us on the wide rows against 9.9 through prefill)."""
    narrow = _narrow_rows(group)
    rows = max(DECODE_WIDE_ROWS_MIN, next_power_of_2(max_seqlen_q * group))
    fits = rows <= DECODE_WIDE_ROWS and head_dim_pad(head_dim) <= 128
    fills = num_seqs * num_kv_heads >= num_sms or max_keys <= PREFILL_SHORT_KEYS
    return rows if max_seqlen_q > narrow // group and fits and fills else narrow


def decode_block_n(head_dim: int, kv_elem_bytes: int) -> int:
    # 32 keys x 128 dims x 2 bytes = 8 KB per K and per V tile. H200, bf16, 32/8 heads, d 128, block 16: 32-key tiles
    # beat 64 at every batch, most at batch 64 x 4K (253 vs 317 us) and batch 4 x 4K (28.7 vs 32.8 us); 16- and
    # 128-key tiles lose too (docs/notes/decode-tiling.md).
    # head_dim 256 keeps 32 keys (16 KB tiles); fp8 tiles are half the bytes, so twice the keys.
    n = 32
    return n * 2 if kv_elem_bytes == 1 else n


def num_kv_splits(
    num_seqs: int, num_kv_heads: int, max_keys: int, num_sms: int, kv_elem_bytes: int = 2, wide: bool = False
) -> int:
    """Splits of each sequence's KV range so that num_seqs x num_kv_heads x splits fills (without exceeding) the
    resident decode programs the rule aims for (see DECODE_PROGRAMS_PER_SM), with at least MIN_KEYS_PER_SPLIT keys
    per split and at most MAX_SPLITS. Batches that fill them on their own get one split (no merge kernel). Wide
    programs (DECODE_WIDE_ROWS rows at 8 warps: 162 registers a thread in the sm_90 build) fit one a SM."""
    fp8 = kv_elem_bytes == 1
    if fp8 or wide:
        by_work = max(max_keys, 1) // MIN_KEYS_PER_SPLIT_FP8_WIDE
    else:
        # a split for each MIN_KEYS_PER_SPLIT keys, the last one partial (1000 keys: 32 splits, not 31 of which
        # decode_config's whole tiles would fill 16)
        by_work = cdiv(max(max_keys, 1), MIN_KEYS_PER_SPLIT)
    pairs = max(num_seqs * num_kv_heads, 1)

    def fit(per_sm: int) -> int:
        return max(1, min(per_sm * num_sms // pairs, by_work, MAX_SPLITS))

    if wide:
        return fit(1)
    if fp8:
        return fit(DECODE_PROGRAMS_PER_SM_FP8)
    splits = fit(DECODE_PROGRAMS_PER_SM)
    tiles = cdiv(cdiv(max(max_keys, 1), decode_block_n(0, kv_elem_bytes)), splits)
    if tiles >= DECODE_LONG_TILES * (1 if splits > 1 else 2):
        splits = fit(DECODE_PROGRAMS_PER_SM_LONG)
    return splits


def decode_config(
    group: int,
    head_dim: int,
    kv_elem_bytes: int,
    num_seqs: int,
    num_kv_heads: int,
    max_keys: int,
    num_sms: int,
    max_seqlen_q: int = 1,
    sm90: bool = False,
) -> DecodeConfig:
    block_m = decode_block_m(group, head_dim, max_seqlen_q, num_seqs, num_kv_heads, num_sms, max_keys)
    wide = block_m != _narrow_rows(group)
    block_n = decode_block_n(head_dim, kv_elem_bytes)
    key_warps = DECODE_KEY_WARPS if DECODE_KEY_WARPS and not wide and head_dim_pad(head_dim) <= 128 else 1
    if key_warps > 1:
        # a warp's keys are the K of its P x V dot: at least 16
        block_n = max(block_n, 16 * key_warps)
    splits = num_kv_splits(num_seqs, num_kv_heads, max_keys, num_sms, kv_elem_bytes, wide)
    tiles = cdiv(max(max_keys, 1), block_n)
    tiles_per_split = cdiv(tiles, splits)
    # no split past the last tile: 33 splits of 4 tiles over 128 tiles are 32 (the 33rd would hold no key)
    splits = cdiv(tiles, tiles_per_split)
    return DecodeConfig(
        block_m,
        block_n,
        block_m // group,
        splits,
        tiles_per_split,
        num_warps=DECODE_WIDE_WARPS if wide else key_warps if key_warps > 1 else DECODE_WARPS,
        num_stages=decode_stages(
            head_dim, kv_elem_bytes, wide, max(num_seqs * num_kv_heads, 1) * splits, num_sms, sm90
        ),
        key_warps=key_warps,
    )


def prefill_merge_rows(num_splits: int) -> int:
    """Query rows of a prefill-merge program: 1 (all splits at once) from PREFILL_MERGE_PARALLEL_SPLITS splits, else
    PREFILL_MERGE_ROWS (the splits one at a time)."""
    return 1 if num_splits >= PREFILL_MERGE_PARALLEL_SPLITS else PREFILL_MERGE_ROWS


def prefill_grid_tiles(num_seqs: int, num_tokens: int, block_q: int) -> int:
    """Query tiles of the prefill grid: sequence s's tiles start at tile (cu_seqlens_q[s] + s * (block_q - 1)) //
    block_q (kernel._first_tile), so every sequence of a batch of num_tokens tokens ends at or before this count.
    ceil(T / block_q) for one sequence, never more than num_seqs + T // block_q (the sum of each sequence's
    ceil(n_s / block_q) can reach that), and from host integers alone. Against that bound, a chunk of 16 / 32 / 64
    tokens over 16K keys ran 20-50% empty prefill and merge programs (H200, Llama-3-8B heads, split prefill with
    the row-parallel merge: 44.4 -> 38.4, 49.1 -> 43.8, 66.0 -> 62.7 us; docs/notes/prefill-merge.md)."""
    return (num_tokens + num_seqs * (block_q - 1)) // block_q


def prefill_tiles(num_seqs: int, num_tokens: int, max_seqlen_q: int, block_q: int) -> int:
    """Query tiles the batch can hold, from host integers: every sequence's query is at most max_seqlen_q tokens,
    and the grid holds prefill_grid_tiles."""
    grid = prefill_grid_tiles(num_seqs, num_tokens, block_q)
    return max(1, min(num_seqs * cdiv(max(max_seqlen_q, 1), block_q), grid))


def prefill_splits(
    tiles: int,
    num_kv_heads: int,
    max_keys: int,
    num_sms: int,
    programs_per_sm: int = PREFILL_PROGRAMS_PER_SM,
    min_keys: int | None = None,
) -> int:
    """KV splits of each query tile: enough (tiles x kv_heads x splits) programs for programs_per_sm a SM, with at
    least min_keys keys a split (PREFILL_MIN_KEYS_PER_SPLIT) and at most MAX_SPLITS. A batch that fills the card,
    or whose tiles see few keys, gets one (no partials, no merge)."""
    min_keys = PREFILL_MIN_KEYS_PER_SPLIT if min_keys is None else min_keys
    want = num_sms * programs_per_sm // max(tiles * num_kv_heads, 1)
    return max(1, min(want, max(max_keys, 1) // min_keys, MAX_SPLITS))


def prefill_config(
    group: int,
    head_dim: int,
    kv_elem_bytes: int,
    num_seqs: int = 0,
    num_tokens: int = 0,
    max_seqlen_q: int = 0,
    num_kv_heads: int = 1,
    max_keys: int = 0,
    num_sms: int = DEFAULT_NUM_SMS,
    *,
    hopper: bool = False,
) -> PrefillConfig:
    """The prefill kernel's tile and KV splits for the batch, from host integers (H200 measurements:
    docs/notes/prefill-splits.md). Without the batch's integers (num_seqs 0): the largest tile, one split.
    ``hopper`` (prefill_hopper_fits and the call's layout hold): kernel_hopper's tile takes the largest tile's
    place; the short-prompt and small tiles stay kernel.py's.

    - The batch's 256-row tiles fill the card (long prompts), or head_dim > 128: the largest tile; but where that
      is Hopper's (sm_90) and every row sees at most PREFILL_BATCH_SHORT_KEYS keys (batched short prompts), the
      small tile of PREFILL_BATCH_SHORT_ROWS rows.
    - Every query fits one 256-row tile (at most 64 tokens at group 4): 64-row tiles at 4 warps, KV splits
      for PREFILL_SMALL_PROGRAMS_PER_SM programs a SM (a 64-token chunk over 16K keys: 66 us against 81 with
      split 256-row tiles, SDPA 89).
    - A chunk over PREFILL_CHUNK_KEYS_PER_QUERY times its length in keys: 256-row tiles with KV splits.
    - Otherwise (short prompts): the largest of 128 and 64 rows whose tiles fill the card, else 64.

    A Hopper tile runs persistent programs (one a SM) where prefill_hopper_persistent holds for ``max_keys`` and the
    one-tile grid's programs."""
    cfg = _prefill_shape(group, head_dim, num_seqs, num_tokens, max_seqlen_q, num_kv_heads, max_keys, num_sms, hopper)
    if cfg.hopper and prefill_hopper_persistent(
        max_keys,
        prefill_tiles(num_seqs, num_tokens, max_seqlen_q, cfg.block_q) * num_kv_heads * cfg.num_splits,
        num_sms,
    ):
        return dataclasses.replace(cfg, persistent=PREFILL_HOPPER_PERSISTENT_PROGRAMS or num_sms)
    return cfg


def _prefill_shape(
    group: int,
    head_dim: int,
    num_seqs: int,
    num_tokens: int,
    max_seqlen_q: int,
    num_kv_heads: int,
    max_keys: int,
    num_sms: int,
    hopper: bool,
) -> PrefillConfig:
    """prefill_config's tile and splits, before the persistent choice."""
    big = _hopper_tile(group) if hopper else _prefill_tile(group, head_dim)
    if num_seqs <= 0:
        return big

    def fit(cfg: PrefillConfig, per_sm: int = PREFILL_PROGRAMS_PER_SM, min_keys: int | None = None):
        tiles = prefill_tiles(num_seqs, num_tokens, max_seqlen_q, cfg.block_q)
        return dataclasses.replace(
            cfg, num_splits=prefill_splits(tiles, num_kv_heads, max_keys, num_sms, per_sm, min_keys)
        )

    def programs(cfg: PrefillConfig) -> int:
        return prefill_tiles(num_seqs, num_tokens, max_seqlen_q, cfg.block_q) * num_kv_heads

    if head_dim_pad(head_dim) > 128 or programs(big) >= num_sms:
        short_batch = 0 < max_keys <= PREFILL_BATCH_SHORT_KEYS and (hopper or not PREFILL_BATCH_SHORT_HOPPER_ONLY)
        if short_batch and head_dim_pad(head_dim) <= 128:
            rows = PREFILL_BATCH_SHORT_ROWS
            tile = _small_tile(group, rows, 32, stages=2 if rows <= PREFILL_SHORT_ROWS else 3)
            return fit(tile, PREFILL_SMALL_PROGRAMS_PER_SM, PREFILL_SMALL_MIN_KEYS_PER_SPLIT)
        return fit(big)
    short = max_keys <= PREFILL_SHORT_KEYS
    small = _small_tile(group, PREFILL_SMALL_ROWS, 32 if short else 64)
    q_rows = max(max_seqlen_q, 1) * group
    # a short prompt that kernel.py's largest tile holds takes the short tile, Hopper or not: that is the rule
    # measured (9c2a291), and the Hopper tile's 128 rows are not its threshold (with them, 33-64-token prompts at
    # group 4 fell through to the 64-row tile)
    if short and q_rows <= _prefill_tile(group, head_dim).block_m:
        return fit(_small_tile(group, PREFILL_SHORT_ROWS, 32, stages=2))
    if q_rows <= big.block_m:
        return fit(small, PREFILL_SMALL_PROGRAMS_PER_SM, PREFILL_SMALL_MIN_KEYS_PER_SPLIT)
    if max_keys >= PREFILL_CHUNK_KEYS_PER_QUERY * max_seqlen_q:
        return fit(big)
    mid = _small_tile(group, PREFILL_MID_ROWS)
    return fit(mid if programs(mid) >= num_sms else small)


@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    decode: DecodeConfig | None  # None: no decode launch
    prefill: PrefillConfig | None  # None: no prefill launch
    # the prefill kernel leaves sequences of at most this many query tokens to the decode kernel (0: takes all)
    prefill_skips_q: int


# launch plans by their arguments: a plan is a pure function of them and of this module's names, and computing one
# costs an eager call 3-15 us of host time (a cached one ~0.5). Emptied when full and by tritonkit.ops.clear_caches
# (which tritonkit.ops.overrides runs when it changes a name here). docs/notes/paged-attention-host.md.
_PLANS: dict[tuple, LaunchPlan] = _memo.register({})
PLAN_MEMO_SIZE = 4096


def launch_plan(
    group: int,
    head_dim: int,
    kv_elem_bytes: int,
    num_seqs: int,
    num_tokens: int,
    num_kv_heads: int,
    max_seqlen_q: int,
    max_keys: int,
    num_sms: int,
    hopper: bool = False,
    sm90: bool = False,
) -> LaunchPlan:
    """Which kernels a call launches, with their configs: the decode path where every query fits a decode program,
    the prefill path alone where prefill_alone says so, both otherwise (each skipping the other's sequences).
    ``hopper``: the call may take kernel_hopper's prefill kernel (prefill_config); ``sm90``: the device is sm_90
    (decode_stages)."""
    key = (
        group, head_dim, kv_elem_bytes, num_seqs, num_tokens, num_kv_heads, max_seqlen_q, max_keys, num_sms, hopper,
        sm90,
    )  # fmt: skip
    plan = _PLANS.get(key)
    if plan is None:
        plan = _plan(*key)
        if len(_PLANS) >= PLAN_MEMO_SIZE:
            _PLANS.clear()
        _PLANS[key] = plan
    return plan


def _plan(
    group: int,
    head_dim: int,
    kv_elem_bytes: int,
    num_seqs: int,
    num_tokens: int,
    num_kv_heads: int,
    max_seqlen_q: int,
    max_keys: int,
    num_sms: int,
    hopper: bool = False,
    sm90: bool = False,
) -> LaunchPlan:
    dec = decode_config(group, head_dim, kv_elem_bytes, num_seqs, num_kv_heads, max_keys, num_sms, max_seqlen_q, sm90)
    alone = prefill_alone(num_seqs, group, max_seqlen_q, max_keys, dec.max_q, num_tokens)
    if not alone and max_seqlen_q <= dec.max_q:
        return LaunchPlan(dec, None, 0)
    pre = prefill_config(
        group, head_dim, kv_elem_bytes, num_seqs, num_tokens, max_seqlen_q, num_kv_heads, max_keys, num_sms,
        hopper=hopper,
    )  # fmt: skip
    return LaunchPlan(None, pre, 0) if alone else LaunchPlan(dec, pre, dec.max_q)


def prefill_alone(
    num_seqs: int, group: int, max_seqlen_q: int, max_keys: int, decode_rows_q: int, num_tokens: int
) -> bool:
    """Whether the prefill kernel takes the whole batch in one launch (no decode launch): one sequence longer than
    a decode program holds (``decode_rows_q`` tokens), or one short prompt past the narrow decode rows; with
    PREFILL_ALONE_PROMPTS, also several sequences of which none can be the decode kernel's (``num_tokens`` past
    ``(num_seqs - 1) * max_seqlen_q + decode_rows_q``)."""
    if num_seqs != 1:
        return PREFILL_ALONE_PROMPTS and num_seqs > 1 and num_tokens > (num_seqs - 1) * max_seqlen_q + decode_rows_q
    return max_seqlen_q > decode_rows_q or (max_seqlen_q > decode_max_q(group) and max_keys <= PREFILL_SHORT_KEYS)


def _small_tile(group: int, rows: int, block_n: int = 64, stages: int = 3) -> PrefillConfig:
    """A prefill tile of fewer rows than the largest: a warp per 16 rows (at least 4)."""
    block_m = max(rows, next_power_of_2(group))
    return PrefillConfig(block_m, block_m // group, block_n, max(4, block_m // 16), stages)


def _prefill_tile(group: int, head_dim: int) -> PrefillConfig:
    d = head_dim_pad(head_dim)
    if d <= 128:
        # 256 query rows over four warpgroups, 64-key tiles, 3 stages. H200, bf16, 32/8 heads, d 128, block 16,
        # causal TFLOP/s at 8K / 16K / 2K-over-16K: 256x64 3 stages 16 warps 450 / 467 / 454; 128x128 3/8: 384 /
        # 406 / 393; 128x64 3/8 (FA2's) 355 / 368 / 352; 256x64 with 2 stages 386; 256x128 does not fit the
        # registers (44). At 512 threads the cap is 128 registers a thread, and ptxas serializes the wgmma
        # instructions for it (C7512) and spills 108 bytes; the configurations that avoid that are slower (TFLOP/s
        # at 8K): 256x32 397, two 128x32 programs a SM (8 warps, maxnreg 128) 373, 128x64 402; 256x64 at 4 stages
        # 449 against 452 at 3. See docs/notes/prefill-tiles.md.
        block_m, block_n, warps, stages = 256, 64, 16, 3
    else:
        # head_dim 256: the [128, 256] float32 accumulator is 128 registers a thread at 8 warps; 32-key tiles keep
        # the rest under 255 with no spill in the sm_90 build (64 x 64 at 4 warps spills ~370 bytes)
        block_m, block_n, warps, stages = 128, 32, 8, 2
    block_m = max(block_m, next_power_of_2(group))
    return PrefillConfig(block_m, block_m // group, block_n, warps, stages)


def max_keys_needed(max_seqlen_q: int, max_seqlen_k: int, window_left: int) -> int:
    """Keys one query tile of a sequence can attend: the window bounds it, not only the context."""
    if window_left >= 0:
        return min(max_seqlen_k, window_left + max_seqlen_q)
    return max_seqlen_k


@_memo.memoized(maxsize=None)
def _cuda_sms(index: int) -> int:
    import torch

    return torch.cuda.get_device_properties(index).multi_processor_count


def num_sms(device) -> int:
    if getattr(device, "type", None) == "cuda":
        import torch

        return _cuda_sms(device.index if device.index is not None else torch.cuda.current_device())
    return DEFAULT_NUM_SMS


def merge_pdl(device) -> bool:
    """Whether the merge kernels launch as programmatic dependents of the decode and the split prefill kernel: where
    the kernels target compute capability 9.0+ (griddepcontrol). Meta tensors take the active Triton driver's target
    (the checker's ``--arch``); CPU tensors (the interpreter) and unknown targets never do."""
    return MERGE_PDL and _device.pdl(device)
