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
@functools.lru_cache(maxsize=256)
def rms_norm_quant_config(hidden: int, elem_bytes: int) -> RmsNormQuantConfig:
    single = hidden <= MAX_SINGLE_PASS
    block = next_power_of_2(hidden) if single else STREAM_BLOCK
    # rms_norm's choice (about 32 bytes of the row per thread, docs/notes/rms-norm.md); not measured for this op
    num_warps = min(max(block * elem_bytes // (32 * 32), 1), 16) if WARPS is None else WARPS
    return RmsNormQuantConfig(block, single, num_warps)
