"""Block size and warps for rms_norm_quant_fp8 as a pure function of the row width (not yet measured on a GPU: the
values are rms_norm's, whose kernel reads rows the same way)."""

import dataclasses
import functools

from .._ints import next_power_of_2

# Rows up to this many elements stay in registers (rms_norm's bound: 16K fp32 over 16 warps, no spills); wider rows
# stream in chunks of STREAM_BLOCK (a multiple of every group size), read two or three times.
MAX_SINGLE_PASS = 16384
STREAM_BLOCK = 4096


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
