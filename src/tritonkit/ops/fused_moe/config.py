"""Tile configs of fused_moe's two grouped GEMMs: a tuned table where one exists, else a small default rule.

Nothing here reads tensor data: a config is a pure function of (M, E, N, K, topk, dtype, quant scheme, device name).
The default rule's tiles were chosen from an H200 sweep of candidate tiles (docs/notes/fused-moe-h200.md); the
tuner's tables (``tritonkit tune fused_moe``) replace the rule where they exist.

Table files
-----------
``configs/<name>.json``, one per (E, N, K, dtype, quant, device, Triton version); the file name is informational
(``fused_moe_table_name`` writes it), the lookup reads the key inside::

    {
      "op": "fused_moe",
      "format": 1,
      "key": {"E": 256, "N": 2048, "K": 7168, "dtype": "bfloat16", "quant": "fp8_block128",
              "device": "NVIDIA H200", "triton": "3.6.0"},
      "buckets": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536],
      "configs": {
        "1": {"gemm1": {"block_m": 16, "block_n": 64, "block_k": 128, "group_m": 1, "num_warps": 4, "num_stages": 4},
              "gemm2": {"block_m": 16, "block_n": 64, "block_k": 128, "group_m": 1, "num_warps": 4, "num_stages": 4}},
        ...one entry per bucket, keyed by the bucket's M as a string; an entry may add "slots": 1 (blocks of one
        slot, :attr:`FusedMoeConfig.slots`)
      }
    }

E is the number of experts w1 holds (the local experts under expert parallelism), N the intermediate width of one
expert (w1 is [E, 2N, K]), K the hidden width, dtype the activation dtype, quant one of QUANT_SCHEMES, device
``torch.cuda.get_device_name()`` verbatim, triton ``triton.__version__``. Both GEMMs of an entry share block_m (the
sorted layout's block size). Lookup: the table whose key matches (E, N, K, dtype, quant, device), the current Triton
version's if there is one, else the newest other version's; in it, the bucket nearest to M in log2 (ties to the
larger bucket). No table: :func:`default_config`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path

from ... import _triton_compat, _vocab
from .. import _env, _memo
from .._ints import cdiv, next_power_of_2

QUANT_SCHEMES = ("none", "fp8_tensor", "fp8_channel", "fp8_block128")
CONFIG_DIR = Path(__file__).parent / "configs"
TABLE_FORMAT = 1
# block-wise fp8 weight (and activation group) scales cover 128 x 128 (DeepSeek-V3's block_shape)
SCALE_BLOCK = 128
# H200 SMs: the small-M rule aims at this many programs per wave (no device query: the rule stays pure in shapes)
NUM_SMS = _vocab.DEFAULT_SMS


@dataclasses.dataclass(frozen=True)
class GemmConfig:
    block_m: int  # sorted slots per program (one expert's rows)
    block_n: int  # output columns per program (GEMM1: of each of the gate and up halves)
    block_k: int  # reduction step
    group_m: int  # row blocks per L2 group of the program order
    num_warps: int
    num_stages: int
    # 1: the weight tile is the MMA's left operand (its rows wgmma's M), the tile's few rows its N (kernel._mma)
    swap_ab: int = 0

    @classmethod
    def from_dict(cls, d: dict) -> GemmConfig:
        # a field a table leaves out takes its default (tables written before swap_ab); a required one is a TypeError
        return cls(**{f.name: int(d[f.name]) for f in dataclasses.fields(cls) if f.name in d})


@dataclasses.dataclass(frozen=True)
class FusedMoeConfig:
    gemm1: GemmConfig
    gemm2: GemmConfig
    # 1: blocks of one slot read from topk_ids (no alignment launch) and the top-k sum done by GEMM2's last program
    # of each token and column tile (no sum launch); 0: the sorted layout
    slots: int = 0

    def __post_init__(self):
        if self.gemm1.block_m != self.gemm2.block_m:
            raise ValueError(
                f"config: gemm1.block_m ({self.gemm1.block_m}) and gemm2.block_m ({self.gemm2.block_m})"
                " must be equal: both GEMMs read one sorted layout"
            )

    @property
    def block_size(self) -> int:
        """moe_align_block_size's block_size: both GEMMs' block_m."""
        return self.gemm1.block_m

    @classmethod
    def from_dict(cls, d: dict) -> FusedMoeConfig:
        return cls(GemmConfig.from_dict(d["gemm1"]), GemmConfig.from_dict(d["gemm2"]), int(d.get("slots", 0)))

    def as_dict(self) -> dict:
        d = {"gemm1": dataclasses.asdict(self.gemm1), "gemm2": dataclasses.asdict(self.gemm2)}
        if self.slots:
            d["slots"] = self.slots
        return d


def _pow2(v: int) -> bool:
    return v > 0 and v & (v - 1) == 0


def validate(cfg: FusedMoeConfig, quant: str) -> None:
    """ValueError naming ``config`` for tiles the kernels cannot take (a tuner's explicit config included)."""
    fp8 = quant != "none"
    if cfg.slots not in (0, 1):
        raise ValueError(f"config.slots must be 0 or 1, got {cfg.slots}")
    for name, g in (("gemm1", cfg.gemm1), ("gemm2", cfg.gemm2)):
        for f in ("block_m", "block_n", "block_k", "num_warps"):
            if not _pow2(getattr(g, f)):
                raise ValueError(f"config.{name}.{f} must be a power of two, got {getattr(g, f)}")
        # tensor-core dots: M >= 16, K >= 16 (16-bit) or >= 32 (fp8 on sm_90)
        if g.block_m < 16 or g.block_n < 16 or g.block_k < (32 if fp8 else 16):
            raise ValueError(
                f"config.{name} needs block_m >= 16, block_n >= 16 and block_k >= {32 if fp8 else 16} "
                f"(tensor-core dot shapes), got {g}"
            )
        if g.swap_ab not in (0, 1):
            raise ValueError(f"config.{name}.swap_ab must be 0 or 1, got {g.swap_ab}")
        if g.group_m < 1 or g.num_stages < 1:
            raise ValueError(f"config.{name} needs group_m >= 1 and num_stages >= 1, got {g}")
        if quant == "fp8_block128" and SCALE_BLOCK % g.block_k:
            raise ValueError(
                f"config.{name}.block_k must divide {SCALE_BLOCK} for block-wise fp8 (one scale per K "
                f"tile), got {g.block_k}"
            )
    if quant == "fp8_block128" and cfg.gemm1.block_n not in (SCALE_BLOCK // 2, SCALE_BLOCK):
        raise ValueError(
            f"config.gemm1.block_n must be {SCALE_BLOCK} or {SCALE_BLOCK // 2} for block-wise fp8 (a program "
            f"computes a whole {SCALE_BLOCK}-column group of the intermediate for its per-group scale, in one tile "
            f"or two), got {cfg.gemm1.block_n}"
        )


def _programs(blocks: int, width: int, block_n: int) -> int:
    return blocks * cdiv(width, block_n)


def _narrowest_filling(blocks: int, width: int, choices: tuple[int, ...], per_sm: int = 2) -> int:
    """The widest block_n of ``choices`` (widest first) that still gives ``per_sm`` programs per SM, else the
    narrowest."""
    for bn in choices:
        if _programs(blocks, width, bn) >= per_sm * NUM_SMS:
            return bn
    return choices[-1]


#: tiles of at least this many rows (wgmma's) load the weights, and GEMM2 its h, through tensor descriptors (TMA):
#: Mixtral M=16384 17.6 ms against 21.3 through pointers, Qwen3 2.21 against 2.57 ms (docs/notes/fused-moe-tma.md);
#: decode tiles (mma.sync) keep pointer loads: within 2% either way, and GEMM2's 16 x 128 tile spills through TMA
TMA_MIN_ROWS = 64
#: kernel_hopper's Gluon GEMM2 for block-wise fp8 on sm_90 (each K block's scaling under the next block's wgmma, two
#: consumer warpgroups of 128 columns): built and compiled on a CPU only (docs/notes/fused-moe-fp8-gluon.md), off
#: until a GPU run shows it matching kernel.py's GEMM2 and faster. TRITONKIT_MOE_GEMM2_HOPPER=1 turns it on.
GEMM2_HOPPER = os.environ.get("TRITONKIT_MOE_GEMM2_HOPPER", "0").strip() not in ("", "0")
GEMM2_HOPPER_STAGES = 4
#: the same for GEMM1 (activation rows gathered by cp.async, gate and up in one warpgroup each, h quantized per row
#: in the epilogue): TRITONKIT_MOE_GEMM1_HOPPER=1 turns it on.
GEMM1_HOPPER = os.environ.get("TRITONKIT_MOE_GEMM1_HOPPER", "0").strip() not in ("", "0")
GEMM1_HOPPER_STAGES = 4
#: LAZY_SCALE: kernel.py's block-fp8 GEMMs add K block kb - 1's scaled tile before K block kb's dot (the same FMAs in
#: the same order: the same bits), so the next stage's loads issue right after the wgmma wait-all (3.8's GEMM2 otherwise
#: issues them after the 64 scale FMAs). On: DeepSeek-V3 at 4096 / 16384 tokens never slower on Triton 3.6, 3.8 or
#: 3.9, 1.6% faster on 3.8 at 16384 (H100, docs/notes/triton-versions-h200.md). TRITONKIT_MOE_GEMM{1,2}_LAZY_SCALE=0
#: turns either off.
GEMM1_LAZY_SCALE = os.environ.get("TRITONKIT_MOE_GEMM1_LAZY_SCALE", "1").strip() not in ("", "0")
GEMM2_LAZY_SCALE = os.environ.get("TRITONKIT_MOE_GEMM2_LAZY_SCALE", "1").strip() not in ("", "0")
#: mean rows per expert (M * topk / E) up to which a layer is weight-bandwidth bound and takes 16-row tiles, and up to
#: which 64-row tiles beat 128-row ones (H200, docs/notes/fused-moe-h200.md: Mixtral M=64, 16 rows per expert, 956 us
#: at 16 rows against 674 at 64; Qwen3 M=256, 16 per expert, 346 against 325; 128 rows from 64 per expert)
DECODE_ROWS_PER_EXPERT = 8
MID_ROWS_PER_EXPERT = 32
#: blocks of one slot (no alignment, no sum launch) up to this many tokens, and past SLOTS_ANY_TOKENS only while the
#: slots are at most a quarter of the experts: a block per slot re-reads an expert that several slots share (H200,
#: docs/notes/fused-moe-decode.md: Qwen3 M=1 34.6 us against 38.7, DeepSeek-V3 M=2 176.7 against 186.6, Qwen3 M=4
#: 79.9 against 82.6; Mixtral M=4, 8 slots over 8 experts, 566 against 487)
SLOTS_MAX_TOKENS = 4
SLOTS_ANY_TOKENS = 2
#: slot blocks of one column tile run side by side (GROUP_M past the slot count): slots sharing an expert read its
#: tile from L2 (Mixtral M=8 808 us against 1272)
SLOTS_GROUP_M = 64

#: SLOTS_PDL (blocks of one slot, sm_90+): GEMM2 launches as GEMM1's programmatic dependent; GEMM1's programs signal
#: at their start, GEMM2's read their slot's expert, then wait (``gdc_wait``) before anything GEMM1 writes, so
#: GEMM2's launch and prologue run under GEMM1's tail. Taken where a GEMM2 program streams at most
#: SLOTS_PDL_MAX_PROGRAM_BYTES of w2 (:func:`slots_pdl`): H100, three runs, 0.6-1.3% faster for Qwen3-30B-A3B (49-196 KB
#: a program) at M=2-4 and DeepSeek-V3 (128 KB) at M=1-2, level at Qwen3 M=1; 10% slower for Mixtral at M=1 and 2%
#: at M=2 (896 KB a program: its few heavy dependents pile onto the SMs GEMM1 frees first). The bound sits between
#: the two (docs/notes/fused-moe-decode.md). TRITONKIT_MOE_SLOTS_PDL=0/1 forces it off/on.
SLOTS_PDL = _env.flag("TRITONKIT_MOE_SLOTS_PDL")
#: W2_EARLY_ROWS (16-bit slot calls): GEMM2 programs of this many output columns load their whole w2 tile (the
#: intermediate width padded to a power of two) into registers first, before a PDL GEMM2's wait for GEMM1, and
#: multiply the slot's row of h into it on the CUDA cores (kernel ``W_EARLY``), so w2's stream can start under w1's.
#: TRITONKIT_MOE_W2_EARLY=8, 16 or 32; 0, the default, keeps the tensor-core tile. Untimed. Only where a tile is at
#: most W2_EARLY_MAX_ELEMENTS (128 registers a thread at 4 warps).
W2_EARLY_ROWS = _env.choice("TRITONKIT_MOE_W2_EARLY", (0, 8, 16, 32), 0)
W2_EARLY_MAX_ELEMENTS = 32 * 1024
SLOTS_PDL_MAX_PROGRAM_BYTES = 256 * 1024


def slots_pdl(program_bytes: int) -> bool:
    """Whether a slot call's GEMM2, whose programs each stream ``program_bytes`` of w2, runs as GEMM1's dependent."""
    if SLOTS_PDL is not None:
        return SLOTS_PDL
    return program_bytes <= SLOTS_PDL_MAX_PROGRAM_BYTES


def w2_early_rows(N: int, fp8: bool, slots: bool, swap_ab: int = 0) -> int:
    """GEMM2's columns a program with its w2 tile loaded early (W2_EARLY_ROWS), or 0 where the call keeps the
    tensor-core tile: fp8, the sorted layout, a GEMM2 config with swapped operands, or a tile past
    W2_EARLY_MAX_ELEMENTS."""
    if not W2_EARLY_ROWS or fp8 or not slots or swap_ab or W2_EARLY_ROWS * next_power_of_2(N) > W2_EARLY_MAX_ELEMENTS:
        return 0
    return W2_EARLY_ROWS


def use_slots(M: int, E: int, topk: int) -> bool:
    """Whether a call of M tokens takes blocks of one slot (:attr:`FusedMoeConfig.slots`)."""
    return M <= SLOTS_ANY_TOKENS or (M <= SLOTS_MAX_TOKENS and 4 * M * topk <= E)


def swap_ab(quant: str, block_m: int, block_n: int) -> int:
    """1 for fp8 tiles of fewer than 64 rows and at least 64 columns: Hopper's fp8 MMA is wgmma only (M >= 64), so
    such a tile otherwise runs as f16 mma.sync behind a conversion of every weight (ptxas for sm_90: 184 conversions
    in DeepSeek-V3's decode GEMM1); swapped, the weights are wgmma's M and the rows its N (vLLM does the same)."""
    return int(quant != "none" and block_m < 64 and block_n >= 64)


def default_config(M: int, E: int, N: int, K: int, topk: int, quant: str) -> FusedMoeConfig:
    """The H200-measured rule (docs/notes/fused-moe-h200.md), by the mean rows per expert ``M * topk / E``."""
    fp8 = quant != "none"
    block_quant = quant == "fp8_block128"
    per_expert = M * topk / E
    if per_expert <= DECODE_ROWS_PER_EXPERT:
        # Decode: weight-bandwidth bound. block_m is the tensor core's smallest M; 128-element K steps (256 bytes of
        # each weight row in 16-bit, a whole fp8 scale block) and 4 stages; block_n narrows until there are >= 2
        # programs per SM, so enough weight loads are in flight (Qwen3 M=1: 32 columns). Block-fp8 GEMM2 at 64
        # columns and 5 stages: DeepSeek-V3 M=1 156 us against 165 at 128 x 4 (the note). No split-K: GEMM1's
        # activation epilogue needs whole sums, and GEMM2's would need a second reduction or atomics.
        blocks = min(M * topk, E)  # busy blocks: about the distinct experts touched
        slots = int(use_slots(M, E, topk))
        group_m = SLOTS_GROUP_M if slots else 1
        if block_quant:
            return FusedMoeConfig(
                GemmConfig(16, SCALE_BLOCK, 128, group_m, 4, 3, swap_ab(quant, 16, SCALE_BLOCK)),
                GemmConfig(16, 64, 128, group_m, 4, 5, swap_ab(quant, 16, 64)),
                slots,
            )
        # fp8 stops at 64 columns: narrower tiles cannot swap onto wgmma (ops.fused_moe.kernel._mma). 16-bit GEMM1
        # wants 3 programs per SM: Qwen3 M=4 (384 programs at 64 columns) 82.6 us at 32 against 87.9, Mixtral M=1
        # (448) 186.9 at 64 against 190.6 (docs/notes/fused-moe-decode.md)
        bn1 = _narrowest_filling(blocks, N, (128, 64)) if fp8 else _narrowest_filling(blocks, N, (64, 32), per_sm=3)
        bn2 = _narrowest_filling(blocks, K, (128, 64) if fp8 else (128, 64, 32))
        return FusedMoeConfig(
            GemmConfig(16, bn1, 128, group_m, 4, 4, swap_ab(quant, 16, bn1)),
            GemmConfig(16, bn2, 128, group_m, 4, 4, swap_ab(quant, 16, bn2)),
            slots,
        )
    if block_quant:
        # 64 rows from 8 rows per expert up (DeepSeek-V3 M=1024, 32 per expert: 3168 us against 4012 at 32 rows).
        # GEMM1 computes its 128-column group of h as two 64-column tiles at 4 warps (one warpgroup, 64 x 128 dots):
        # DeepSeek-V3 M=1024-16384 2-10% faster than one 128-column tile at 8 warps (M=2048 3747 us against 4160,
        # 16384 19.9 ms against 21.3), which at 4 warps spills; 128-row tiles (two 64-column tiles at 8 warps, GEMM2
        # 128 x 128 at 8) are 10-75% slower at M=1024-16384 even with one weight scale a K tile
        # (docs/notes/fused-moe-resources.md, "Timed on the H200"); 16 row blocks per L2 group
        return FusedMoeConfig(GemmConfig(64, 64, 128, 16, 4, 4), GemmConfig(64, 128, 128, 16, 4, 4))
    # 128 bytes of each row per K step either way (64 x 16-bit, 128 x fp8): full 128-byte lines
    block_k = 128 if fp8 else 64
    if per_expert <= MID_ROWS_PER_EXPERT:
        return FusedMoeConfig(GemmConfig(64, 64, block_k, 8, 4, 4), GemmConfig(64, 128, block_k, 8, 4, 4))
    if fp8:
        # per-tensor/per-channel fp8 (not measured on the card): GEMM1 adds a fresh dot per K tile to each of its
        # two accumulators, so it keeps 64-column halves at 128 rows, 3 stages
        return FusedMoeConfig(GemmConfig(128, 64, block_k, 8, 8, 3), GemmConfig(128, 128, block_k, 8, 8, 3))
    # Prefill: compute bound. 128 x 256 tiles at 8 warps (two warpgroups of wgmma; GEMM1's 2 x 128 columns are its
    # gate and up halves), 4 stages of 48 KB: Mixtral M=16384 21.3 ms against 23.4 at 128 x 128 x 3 stages
    return FusedMoeConfig(GemmConfig(128, 128, block_k, 8, 8, 4), GemmConfig(128, 256, block_k, 8, 8, 4))


def fused_moe_table_name(E: int, N: int, K: int, dtype: str, quant: str, device_name: str, triton_version: str) -> str:
    """The file name a tuner writes its table to (under CONFIG_DIR)."""
    dev = "".join(c if c.isalnum() or c in "-." else "_" for c in device_name)
    return f"E={E},N={N},K={K},dtype={dtype},quant={quant},device={dev},triton={triton_version}.json"


@_memo.memoized(maxsize=None)
def _tables(config_dir: str) -> dict:
    """{(E, N, K, dtype, quant, device): {triton version: (buckets, {bucket: FusedMoeConfig})}} of every file."""
    out: dict = {}
    for path in sorted(Path(config_dir).glob("*.json")):
        with open(path) as fh:
            d = json.load(fh)
        k = d["key"]
        key = (int(k["E"]), int(k["N"]), int(k["K"]), str(k["dtype"]), str(k["quant"]), str(k["device"]))
        buckets = sorted(int(b) for b in d["buckets"])
        cfgs = {int(b): FusedMoeConfig.from_dict(c) for b, c in d["configs"].items()}
        missing = [b for b in buckets if b not in cfgs]
        if missing:
            raise ValueError(f"fused_moe config table {path}: buckets {missing} have no config")
        out.setdefault(key, {})[str(k["triton"])] = (buckets, cfgs)
    return out


def nearest_bucket(M: int, buckets: list[int]) -> int:
    """The bucket nearest to M in log2, ties to the larger one."""
    lm = math.log2(max(M, 1))
    return min(buckets, key=lambda b: (abs(math.log2(b) - lm), -b))


def lookup(
    M: int,
    E: int,
    N: int,
    K: int,
    dtype: str,
    quant: str,
    device_name: str | None,
    triton_version: str | None = None,
    config_dir: str | None = None,
) -> FusedMoeConfig | None:
    if device_name is None:
        return None
    versions = _tables(str(config_dir or CONFIG_DIR)).get((E, N, K, dtype, quant, device_name))
    if not versions:
        return None
    if triton_version is None:
        triton_version = _triton_compat.VERSION
    ver = triton_version if triton_version in versions else max(versions, key=_triton_compat.version_key)
    buckets, cfgs = versions[ver]
    return cfgs[nearest_bucket(M, buckets)]


@_memo.memoized(maxsize=1024)
def fused_moe_config(
    M: int, E: int, N: int, K: int, topk: int, dtype: str, quant: str, device_name: str | None
) -> FusedMoeConfig:
    """The config of one call: the tuned table's (see the module docstring), else :func:`default_config`.
    ``dtype`` is the activation dtype's name ("bfloat16"), ``device_name`` None off CUDA (meta, the interpreter)."""
    cfg = lookup(M, E, N, K, dtype, quant, device_name)
    if cfg is None:
        cfg = default_config(M, E, N, K, topk, quant)
    validate(cfg, quant)
    return cfg
