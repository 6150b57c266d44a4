"""Block size and warps for rms_norm_quant_fp8 as a pure function of the row width (not yet measured on a GPU: the
values are rms_norm's, whose kernel reads rows the same way)."""

import dataclasses
import os

from .. import _env, _memo
from .._ints import next_power_of_2

# Rows up to this many elements stay in registers (rms_norm's bound: 16K fp32 over 16 warps, no spills); wider rows
# stream in chunks of STREAM_BLOCK (a multiple of every group size), read two or three times.
MAX_SINGLE_PASS = 16384
STREAM_BLOCK = 4096
# TRITONKIT_RMS_QUANT_WARPS=N replaces the warps below (a power of two, 1-32) for a GPU A/B: at one token the two
# reductions of a dynamic row (sum of squares, then the normed row's max) cross 8 warps through shared memory at
# Llama-3-8B's 4096 columns, where fewer warps would hold more of the row each and reduce in shuffles.
_WARPS_ENV = os.environ.get("TRITONKIT_RMS_QUANT_WARPS", "").strip()
if _WARPS_ENV and (not _WARPS_ENV.isdigit() or int(_WARPS_ENV) not in (1, 2, 4, 8, 16, 32)):
    raise ValueError(f"TRITONKIT_RMS_QUANT_WARPS={_WARPS_ENV!r}: expected a power of two from 1 to 32")
WARPS = int(_WARPS_ENV) if _WARPS_ENV else None


@dataclasses.dataclass(frozen=True)
class RmsNormQuantConfig:
    block: int
    single_pass: bool
    num_warps: int


# pure in its arguments, and on every call's host path: computed once per model config
@_memo.memoized(maxsize=256)
def rms_norm_quant_config(hidden: int, elem_bytes: int) -> RmsNormQuantConfig:
    single = hidden <= MAX_SINGLE_PASS
    block = next_power_of_2(hidden) if single else STREAM_BLOCK
    # rms_norm's choice (about 32 bytes of the row per thread, docs/notes/rms-norm.md); not measured for this op
    num_warps = min(max(block * elem_bytes // (32 * 32), 1), 16) if WARPS is None else WARPS
    return RmsNormQuantConfig(block, single, num_warps)


# A dynamic row (per token, per group) with its weight loaded beside x (the kernel's EARLY_W) holds it through two
# reductions: 48 -> 60 registers a thread at Llama-3-8B's 4096 columns, 4 programs a SM instead of 5 at 4096 tokens.
# Capped at 48 it compiles without a spill where a thread holds at most 16 of the row's values at 4 or 8 warps (sm_90
# SASS, Triton 3.6 and 3.8, every model width; 3.9's per-token row stores one value to the stack and loads it once;
# docs/notes/fused-fp8-small.md). 16-warp rows (5120-8192 columns) take 60 uncapped, 2 programs a SM either way;
# threads holding more than 16 values keep the late weight.
DYNAMIC_EARLY_REGS = 48
# On where the cap applies (4-8 warps): H200, Triton 3.6, one run, late -> early weight at 1 / 16 / 256 / 4096 tokens,
# Llama-3-8B (4096 columns, 8 warps) per token 3.4 / 3.5 / 5.4 / 36.3 -> 3.0 / 3.3 / 5.3 / 35.8 us and per group 3.3 /
# 3.4 / 5.4 / 36.1 -> 2.9 / 3.2 / 5.3 / 35.4; DeepSeek-V3 (7168 columns, 16 warps, uncapped) per token 4.1 / 4.3 /
# 7.9 / 76.0 -> 3.9 / 4.2 / 7.7 / 78.6, faster to 256 tokens and 3% slower at 4096, so 16-warp rows keep the late
# weight (benchmarks/results/h200/s27-9ceada8). TRITONKIT_RMS_QUANT_EARLY_W=1 / =0 turns it on / off for every
# eligible row (static always has it).
DYNAMIC_EARLY_W = _env.flag("TRITONKIT_RMS_QUANT_EARLY_W")


def early_weight(cfg: RmsNormQuantConfig, norm: bool, dynamic: bool) -> tuple[bool, int | None]:
    """``(EARLY_W, maxnreg)`` of a launch: the weight loaded with x in a single pass (one memory round trip fewer at
    decode sizes), with the register cap a dynamic mode needs to keep its programs a SM; streamed rows, threads
    holding more than 16 values of a dynamic row and (unless DYNAMIC_EARLY_W says otherwise) 16-warp dynamic rows
    load it after the reduction, uncapped."""
    if not (norm and cfg.single_pass):
        return False, None
    if not dynamic:
        return True, None
    capped = cfg.num_warps <= 8
    if DYNAMIC_EARLY_W is False or (DYNAMIC_EARLY_W is None and not capped):
        return False, None
    if cfg.block // (32 * cfg.num_warps) > 16:
        return False, None
    return True, DYNAMIC_EARLY_REGS if capped else None
