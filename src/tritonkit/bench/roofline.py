"""What a point is judged against: the card's measured ceilings, the ideal time of a point, and the target.

Units: times in seconds inside the code and microseconds in reports; bandwidth in decimal GB/s (1e9 bytes per
second), so 4100 GB/s reads as 4.1 TB/s; TFLOP/s in 1e12 floating-point operations per second.

The target: a point passes when ``time <= TARGET_FACTOR * ideal`` with
``ideal = floor + max(bytes / copy_bandwidth, flops / matmul_rate)``. For a memory-bound op the flops term is
negligible and this is ``1.25 x (floor + bytes / ceiling)``; the floor is a Triton kernel copying one 16-byte
vector, timed the same way in the same run (launch plus one memory round trip).
"""

from __future__ import annotations

import dataclasses
import math

TARGET_FACTOR = 1.25


@dataclasses.dataclass(frozen=True)
class Ceilings:
    """What the card can do, measured on it.

    copy_gbps      device-to-device copy by an SM-driven Triton copy kernel, bytes read + written, CUDA-graph timing.
    matmul_tflops  torch.matmul, bf16, 8192^3 on random data.
    matmul_fp8_tflops  torch._scaled_mm, float8_e4m3fn, 8192^3, per-tensor scales (0: not measured, or no fp8
                   matmul on the card): the ceiling of points whose work runs on fp8 tensor cores.
    floor_us       one launch of a Triton kernel copying one 16-byte vector, CUDA-graph timing, cold L2.
    empty_us       one launch of an empty Triton kernel, CUDA-graph timing (launch cost alone).
    """

    copy_gbps: float
    matmul_tflops: float
    floor_us: float
    empty_us: float = math.nan
    gpu: str = ""
    driver: str = ""
    measured_at: str = ""
    source: str = "measured"  # "measured" in this run, or "cache: PATH"
    matmul_fp8_tflops: float = 0.0

    def matmul_for(self, fp8: bool) -> float:
        """The matmul ceiling of a point's flops: fp8's where they run on fp8 tensor cores and it was measured."""
        return self.matmul_fp8_tflops if fp8 and self.matmul_fp8_tflops > 0 else self.matmul_tflops

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Ceilings:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def ideal_seconds(nbytes: int, flops: int, ceil: Ceilings, fp8: bool = False) -> float:
    """The floor plus the larger of moving the bytes at copy speed and doing the flops at matmul speed (fp8's
    matmul speed for fp8 flops)."""
    return ceil.floor_us * 1e-6 + max(nbytes / (ceil.copy_gbps * 1e9), flops / (ceil.matmul_for(fp8) * 1e12))


def bound(nbytes: int, flops: int, ceil: Ceilings, fp8: bool = False) -> str:
    """'memory' or 'compute': which term of the ideal time is larger."""
    return "compute" if flops / (ceil.matmul_for(fp8) * 1e12) > nbytes / (ceil.copy_gbps * 1e9) else "memory"


@dataclasses.dataclass(frozen=True)
class Metrics:
    """One timed point against the ceilings.

    ``pct_ceiling`` is GB/s over the copy ceiling for a memory-bound point and TFLOP/s over the matmul ceiling for
    a compute-bound one. ``target_ratio`` is time over ``TARGET_FACTOR * ideal``: at most 1 passes."""

    gbps: float
    tflops: float
    bound: str
    pct_ceiling: float
    ideal_us: float
    target_us: float
    target_ratio: float
    target_pass: bool

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Metrics:
        return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls)})


def point_metrics(nbytes: int, flops: int, time_s: float, ceil: Ceilings, fp8: bool = False) -> Metrics:
    """Throughput, percentage of the ceiling and the target verdict of one timed point (``fp8``: its flops run on
    fp8 tensor cores, judged against the fp8 matmul ceiling)."""
    if not time_s > 0:
        raise ValueError(f"time must be positive, got {time_s!r}")
    gbps = nbytes / time_s / 1e9
    tflops = flops / time_s / 1e12
    b = bound(nbytes, flops, ceil, fp8)
    pct = 100.0 * (gbps / ceil.copy_gbps if b == "memory" else tflops / ceil.matmul_for(fp8))
    ideal = ideal_seconds(nbytes, flops, ceil, fp8)
    ratio = time_s / (TARGET_FACTOR * ideal)
    return Metrics(gbps, tflops, b, pct, ideal * 1e6, TARGET_FACTOR * ideal * 1e6, ratio, ratio <= 1.0)


def pct_of_copy(copy_us: float, provider_us: float) -> float:
    """How close a provider comes to a copy of its own bytes: copy time over provider time, in percent."""
    if not provider_us > 0:
        raise ValueError(f"provider time must be positive, got {provider_us!r}")
    return 100.0 * copy_us / provider_us
