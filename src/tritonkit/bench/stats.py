"""The arithmetic of a benchmark point, kept free of devices so CI can test it.

Units: times in seconds inside the code and microseconds in reports; bandwidth in decimal GB/s (1e9 bytes per
second), so 4100 GB/s reads as 4.1 TB/s; TFLOP/s in 1e12 floating-point operations per second.

The target: a point passes when ``time <= TARGET_FACTOR * ideal`` with
``ideal = floor + max(bytes / copy_bandwidth, flops / matmul_rate)``. For a memory-bound op the flops term is
negligible and this is the issue's ``1.25 x (floor + bytes / ceiling)``; the floor is a Triton kernel copying one
16-byte vector, timed the same way in the same run (launch plus one memory round trip).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence

TARGET_FACTOR = 1.25

#: Rotation sets together must touch at least this many L2s, so a set is evicted before it comes round again.
L2_FACTOR = 2.0
#: Most sets one graph rotates through (a capture costs host time per call). Fewer sets than L2_FACTOR needs (the
#: smallest decode shapes) get an L2 flush before each replay instead, so each set is still read cold.
MAX_SETS = 2048


@dataclasses.dataclass(frozen=True)
class Timing:
    """Per-call time over repeats, in microseconds."""

    median_us: float
    min_us: float
    max_us: float
    repeats: int

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def summarize(samples_s: Sequence[float]) -> Timing:
    """Median, min and max of per-call times given in seconds."""
    if not samples_s:
        raise ValueError("no timing samples")
    us = [s * 1e6 for s in samples_s]
    return Timing(statistics.median(us), min(us), max(us), len(us))


@dataclasses.dataclass(frozen=True)
class Ceilings:
    """What the card can do, measured on it.

    copy_gbps      device-to-device copy by an SM-driven Triton kernel, bytes read + written, CUDA-graph timing.
    matmul_tflops  torch.matmul, bf16, 8192^3 on random data.
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

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Ceilings:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def ideal_seconds(nbytes: int, flops: int, ceil: Ceilings) -> float:
    """The floor plus the larger of moving the bytes at copy speed and doing the flops at matmul speed."""
    return ceil.floor_us * 1e-6 + max(nbytes / (ceil.copy_gbps * 1e9), flops / (ceil.matmul_tflops * 1e12))


def bound(nbytes: int, flops: int, ceil: Ceilings) -> str:
    """'memory' or 'compute': which term of the ideal time is larger."""
    return "compute" if flops / (ceil.matmul_tflops * 1e12) > nbytes / (ceil.copy_gbps * 1e9) else "memory"


def point_metrics(nbytes: int, flops: int, time_s: float, ceil: Ceilings) -> dict:
    """Throughput, percentage of the ceiling and the target verdict of one timed point.

    ``pct_ceiling`` is GB/s over the copy ceiling for a memory-bound point and TFLOP/s over the matmul ceiling
    for a compute-bound one. ``target_ratio`` is time over ``TARGET_FACTOR * ideal``: at most 1 passes.
    """
    if not time_s > 0:
        raise ValueError(f"time must be positive, got {time_s!r}")
    gbps = nbytes / time_s / 1e9
    tflops = flops / time_s / 1e12
    b = bound(nbytes, flops, ceil)
    pct = 100.0 * (gbps / ceil.copy_gbps if b == "memory" else tflops / ceil.matmul_tflops)
    ideal = ideal_seconds(nbytes, flops, ceil)
    ratio = time_s / (TARGET_FACTOR * ideal)
    return {
        "gbps": gbps,
        "tflops": tflops,
        "bound": b,
        "pct_ceiling": pct,
        "ideal_us": ideal * 1e6,
        "target_us": TARGET_FACTOR * ideal * 1e6,
        "target_ratio": ratio,
        "target_pass": ratio <= 1.0,
    }


def rotation_sets(bytes_per_set: int, l2_bytes: int, *, factor: float = L2_FACTOR, max_sets: int = MAX_SETS,
                  mem_per_set: int | None = None, mem_budget: int | None = None) -> int:
    """How many input sets a graph rotates through so that together they touch ``factor`` L2s.

    ``bytes_per_set`` is what one call touches (the work model's bytes); ``mem_per_set`` what one set allocates
    (it can be more: a KV cache is larger than the rows one call writes). At least one set; at most ``max_sets``
    and as many as fit in ``mem_budget``.
    """
    if bytes_per_set <= 0:
        raise ValueError(f"bytes_per_set must be positive, got {bytes_per_set}")
    n = max(1, math.ceil(factor * l2_bytes / bytes_per_set))
    n = min(n, max_sets)
    if mem_budget is not None and mem_per_set:
        n = min(n, max(1, mem_budget // mem_per_set))
    return n


def cold(bytes_per_set: int, n_sets: int, l2_bytes: int, factor: float = L2_FACTOR) -> bool:
    """Whether a rotation of ``n_sets`` alone keeps reads cold: together the sets touch ``factor`` L2s, so each
    set is evicted before it comes round again."""
    return bytes_per_set * n_sets >= factor * l2_bytes


#: The size-matched copy reference moves whole vectors of this many bytes (one 16-byte load and store per thread).
COPY_VEC_BYTES = 16


def copy_vectors(work_bytes: int) -> int:
    """16-byte vectors the size-matched copy reads (and then writes) for an op point of ``work_bytes``.

    The copy reads N and writes N bytes with 2N = ``work_bytes``; N is rounded to the nearest whole vector, at
    least one. Elements of int32: four per vector.
    """
    if work_bytes < 0:
        raise ValueError(f"work_bytes must be non-negative, got {work_bytes}")
    return max(1, (work_bytes + COPY_VEC_BYTES) // (2 * COPY_VEC_BYTES))


def copy_ref_fields(copy: dict | None) -> dict:
    """The point-record fields of a size-matched copy measurement (``ceilings.time_size_matched_copy``'s dict, or
    ``{"error": ...}``); nothing when it was not measured."""
    if not copy:
        return {}
    if "error" in copy:
        return {"copy_same_bytes_error": copy["error"]}
    return {"copy_same_bytes_us": copy["us"], "copy_same_bytes_gbps": copy["gbps"],
            "copy_same_bytes": {k: v for k, v in copy.items() if k not in ("us", "gbps")}}


def pct_of_copy(copy_us: float, provider_us: float) -> float:
    """How close a provider comes to a copy of its own bytes: copy time over provider time, in percent."""
    if not provider_us > 0:
        raise ValueError(f"provider time must be positive, got {provider_us!r}")
    return 100.0 * copy_us / provider_us


def geomean(xs: Sequence[float]) -> float:
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else math.nan


def repeats_for(estimate_s: float, budget_s: float, lo: int, hi: int) -> int:
    """Repeats that fill about ``budget_s`` given one repeat's estimated time, within [lo, hi]."""
    if estimate_s <= 0:
        return hi
    return max(lo, min(hi, int(budget_s / estimate_s)))
