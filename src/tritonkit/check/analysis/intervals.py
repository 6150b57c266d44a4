"""Integer intervals, the values of the range analysis (:mod:`.ranges`), and arithmetic on them that needs no IR."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Iv:
    lo: int
    hi: int
    data: bool = False  # any value of its type: came from memory or a wrapping conversion
    over: bool = False  # derived from an op that already overflowed
    scale: float = 0.0  # for data values: how many times the magnitude of a loaded value it can reach

    def hull(self, o: Iv) -> Iv:
        return Iv(
            min(self.lo, o.lo), max(self.hi, o.hi), self.data or o.data, self.over or o.over, max(self.scale, o.scale)
        )

    def within(self, o: Iv) -> bool:
        return o.lo <= self.lo and self.hi <= o.hi


@dataclasses.dataclass(frozen=True)
class Unknown:
    reason: str


Val = Iv | Unknown | None  # None: not an integer (floats, pointers)


def type_range(bits: int) -> tuple[int, int]:
    if bits == 1:
        return 0, 1
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


def any_value(bits: int) -> Iv:
    """Any value of an integer type, as a loaded one is: data, one loaded value in size."""
    lo, hi = type_range(bits)
    return Iv(lo, hi, data=True, scale=1.0)


def trip_count(lb: Val, ub: Val, step: Val) -> tuple[int, int] | None:
    """(fewest, most) iterations of ``for i in range(lb, ub, step)`` over the values the bounds may take; None when
    a bound is not an interval or the step may be zero or negative."""
    if not (isinstance(lb, Iv) and isinstance(ub, Iv) and isinstance(step, Iv)) or step.lo <= 0:
        return None
    return max(0, -(-(ub.lo - lb.hi) // step.hi)), max(0, -(-(ub.hi - lb.lo) // step.lo))


def tdiv(a: int, b: int) -> int:
    """``a / b`` rounded toward zero, as C (and Triton) divide integers."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def div(a: Iv, b: Iv, fl: dict, slop: int) -> Iv:
    """``a / b`` rounded toward zero, widened by ``slop`` (ceil and floor divisions), with the flags ``fl``."""
    divisors = [
        d
        for d in (b.lo, b.hi, -1 if b.lo <= -1 <= b.hi else None, 1 if b.lo <= 1 <= b.hi else None)
        if d not in (None, 0)
    ]
    if not divisors:
        m = max(abs(a.lo), abs(a.hi))
        return Iv(-m, m, **fl)
    c = [tdiv(x, d) for x in (a.lo, a.hi) for d in divisors]
    return Iv(min(c) - slop, max(c) + slop, **fl)
