"""Block size and warps for rms_norm_quant_fp8 as a pure function of the row width (not yet measured on a GPU: the
values are rms_norm's, whose kernel reads rows the same way)."""

import dataclasses
import functools
import os

from .._ints import next_power_of_2

# Rows up to this many elements stay in registers (rms_norm's bound: 16K fp32 over 16 warps, no spills); wider rows
# stream in chunks of STREAM_BLOCK (a multiple of every group size), read two or three times.
MAX_SINGLE_PASS = 16384
STREAM_BLOCK = 4096
# Per-token and per-group rows load the weight after the sum of squares (held through both reductions it costs a
# program a SM at 4096 tokens, docs/notes/fused-fp8-small.md), a memory round trip inside a one-token call. PREFETCH_W
# asks L1 for the weight's lines first (`prefetch.global.L1`, no register held). Untimed, off:
# TRITONKIT_RMS_QUANT_PREFETCH_W=1 turns it on.
PREFETCH_W = os.environ.get("TRITONKIT_RMS_QUANT_PREFETCH_W", "0").strip() not in ("", "0")


@dataclasses.dataclass(frozen=True)
class RmsNormQuantConfig:
    block: int
    single_pass: bool
    num_warps: int


# pure in its arguments, and on every call's host path: computed once per model config
@functools.lru_cache(maxsize=256)
def rms_norm_quant_config(hidden: int, elem_bytes: int) -> RmsNormQuantConfig:
    single = hidden <= MAX_SINGLE_PASS
    block = next_power_of_2(hidden) if single else STREAM_BLOCK
    # rms_norm's choice (about 32 bytes of the row per thread, docs/notes/rms-norm.md); not measured for this op
    num_warps = min(max(block * elem_bytes // (32 * 32), 1), 16)
    return RmsNormQuantConfig(block, single, num_warps)
