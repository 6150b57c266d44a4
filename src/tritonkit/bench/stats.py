"""Statistics of timings: per-call summaries, geometric means, how many repeats fill a time budget."""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence


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


def geomean(xs: Sequence[float]) -> float:
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else math.nan


def repeats_for(estimate_s: float, budget_s: float, lo: int, hi: int) -> int:
    """Repeats that fill about ``budget_s`` given one repeat's estimated time, within [lo, hi]."""
    if estimate_s <= 0:
        return hi
    return max(lo, min(hi, int(budget_s / estimate_s)))
