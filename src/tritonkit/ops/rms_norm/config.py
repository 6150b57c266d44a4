"""Block size and warps for rms_norm as a pure function of the row width."""

import dataclasses

from .. import _memo
from .._ints import next_power_of_2


# Rows up to this many elements stay in registers (16K fp32 over 16 warps is 32 values a thread, no spills);
# wider rows stream in chunks of STREAM_BLOCK, reading the row twice.
MAX_SINGLE_PASS = 16384
STREAM_BLOCK = 4096


@dataclasses.dataclass(frozen=True)
class RmsNormConfig:
    block: int
    single_pass: bool
    num_warps: int


# pure in its arguments, and on every call's host path: computed once per model config
@_memo.memoized(maxsize=256)
def rms_norm_config(hidden: int, elem_bytes: int) -> RmsNormConfig:
    single = hidden <= MAX_SINGLE_PASS
    block = next_power_of_2(hidden) if single else STREAM_BLOCK
    # about 32 bytes of the row per thread: two 16-byte vector loads in flight each (8 warps at Llama-3's 4096 in
    # bf16: 68.45 us at 16384 tokens against 69.74 at 4 and 74.26 at 16 on the H200, docs/notes/rms-norm.md)
    num_warps = min(max(block * elem_bytes // (32 * 32), 1), 16)
    return RmsNormConfig(block, single, num_warps)
