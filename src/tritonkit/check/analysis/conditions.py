"""What a branch condition says about integers inside the branch.

``if seqlen < state_len:`` makes ``seqlen <= state_len.hi - 1`` and ``state_len - seqlen >= 1`` hold in its body;
``if slot < 0: return`` makes ``slot >= 0`` hold after it. :func:`facts` reads the comparisons a condition
implies (through ``and``, ``or`` and ``not``), :func:`narrow` applies one to two intervals, and :class:`Diffs`
keeps the difference bounds (``x - y >= k``) that intervals alone lose.
"""

from __future__ import annotations

import dataclasses
import re

from .budgets import FACTS, ROOT
from ..ir.mlir import Func
from .pointers import base_arg

NEGATE = {
    "slt": "sge",
    "sle": "sgt",
    "sgt": "sle",
    "sge": "slt",
    "eq": "ne",
    "ne": "eq",
    "ult": "uge",
    "ule": "ugt",
    "ugt": "ule",
    "uge": "ult",
}
_CASTS = ("arith.extsi",)
_SHAPE = ("tt.splat", "tt.broadcast", "tt.expand_dims", "tt.reshape", "tt.trans", "ttg.convert_layout")


@dataclasses.dataclass(frozen=True)
class Fact:
    """``a pred b`` holds (an ``arith.cmpi`` predicate between two SSA values)."""

    a: str
    pred: str
    b: str


def _is_true(f: Func, name: str) -> bool:
    op = f.defs.get(name)
    return op is not None and op.name == "arith.constant" and re.search(r"\b(true|1)\b", op.text) is not None


def facts(f: Func, cond: str, holds: bool, depth: int = 0) -> list[Fact]:
    """The comparisons that hold where the i1 value ``cond`` is ``holds``."""
    op = f.defs.get(cond)
    if op is None:
        return []
    if depth > FACTS.limit:
        FACTS.cut(f)
        return []
    if op.name in _SHAPE and op.operands:  # a mask carried to another tile shape says the same of each lane
        return facts(f, op.operands[0], holds, depth + 1)
    if len(op.operands) < 2:
        return []
    if op.name == "arith.cmpi":
        m = re.search(r"arith\.cmpi\s+(\w+)", op.text)
        pred = m.group(1) if m else None
        if pred not in NEGATE:
            return []
        return [Fact(op.operands[0], pred if holds else NEGATE[pred], op.operands[1])]
    x, y = op.operands[:2]
    if (op.name == "arith.andi" and holds) or (op.name == "arith.ori" and not holds):
        return facts(f, x, holds, depth + 1) + facts(f, y, holds, depth + 1)
    if op.name == "arith.xori":
        if _is_true(f, y):
            return facts(f, x, not holds, depth + 1)
        if _is_true(f, x):
            return facts(f, y, not holds, depth + 1)
    return []


def root(f: Func, name: str) -> str:
    """The value behind sign/zero extensions: ``extsi(x)`` compares and subtracts as ``x`` does."""
    for _ in range(ROOT.limit):
        op = f.defs.get(name)
        if op is None or op.name not in _CASTS or not op.operands:
            break
        name = op.operands[0]
    else:
        if (op := f.defs.get(name)) is not None and op.name in _CASTS and op.operands:
            ROOT.cut(f)
    return name


def same_values(f: Func) -> dict[str, list[str]]:
    """root -> every value that holds the same integer: the root, its extensions, and loads of the same address
    with nothing stored in between (``if tl.load(p) < 0: return`` guards a later ``tl.load(p)`` too)."""
    out: dict[str, list[str]] = {}
    for op in f.ops:
        if op.name in _CASTS and op.results:
            r = root(f, op.results[0])
            out.setdefault(r, [r]).append(op.results[0])
    loads: dict[tuple, list] = {}
    for op in f.ops:
        if op.name == "tt.load" and op.results:
            loads.setdefault(tuple(op.operands), []).append(op)
    # what a store writes: its kernel argument (None when unknown, which may be anything)
    writes = [
        (op.pos, base_arg(f, op.operands[0]) if op.operands else None)
        for op in f.ops
        if op.name in ("tt.store", "tt.atomic_rmw", "tt.atomic_cas")
    ]
    for group in loads.values():
        base = base_arg(f, group[0].operands[0]) if group[0].operands else None
        for i, first in enumerate(group):
            for later in group[i + 1 :]:
                # a store between them may change the value, unless it writes another argument (an index array
                # a kernel reads is not also an output it writes); so may one anywhere in a loop around the later
                # load that does not hold the first (its earlier iterations come between them too)
                spans = [(first.pos, later.pos)] + [
                    (lp.pos, lp.end)
                    for lp in later.ancestors()
                    if lp.name in ("scf.for", "scf.while") and not lp.pos < first.pos <= lp.end
                ]
                if any(
                    lo < w <= hi and (wb is None or base is None or wb == base) for w, wb in writes for lo, hi in spans
                ):
                    continue
                a, b = first.results[0], later.results[0]
                for x, y in ((a, b), (b, a)):
                    bucket = out.setdefault(root(f, x), [root(f, x)])
                    for v in [y] + out.get(root(f, y), []):
                        if v not in bucket:
                            bucket.append(v)
    return out


def _signed(pred: str, a, b) -> str | None:
    """The signed predicate an unsigned one equals when both sides are non-negative (else None)."""
    if pred.startswith("u"):
        return "s" + pred[1:] if a.lo >= 0 and b.lo >= 0 else None
    return pred


def narrow(a, pred: str, b):
    """Intervals of ``a`` and ``b`` where ``a pred b`` holds, or None when they say nothing new or cannot hold
    (a branch the ranges call dead is left alone: the ranges over-approximate)."""
    p = _signed(pred, a, b)
    if p is None:
        return None
    if p in ("sgt", "sge"):
        r = narrow(b, "slt" if p == "sgt" else "sle", a)
        return (r[1], r[0]) if r else None
    if p in ("slt", "sle"):
        gap = 1 if p == "slt" else 0
        na = (a.lo, min(a.hi, b.hi - gap))
        nb = (max(b.lo, a.lo + gap), b.hi)
    elif p == "eq":
        na = nb = (max(a.lo, b.lo), min(a.hi, b.hi))
    elif p == "ne" and b.lo == b.hi:
        na = (a.lo + (a.lo == b.lo), a.hi - (a.hi == b.lo))
        nb = (b.lo, b.hi)
    elif p == "ne" and a.lo == a.hi:
        r = narrow(b, "ne", a)
        return (r[1], r[0]) if r else None
    else:
        return None
    if na[0] > na[1] or nb[0] > nb[1]:
        return None
    return (dataclasses.replace(a, lo=na[0], hi=na[1]), dataclasses.replace(b, lo=nb[0], hi=nb[1]))


def possible(a, pred: str, b) -> bool:
    """Whether some values in the two intervals satisfy ``a pred b`` (if not, the branch never runs)."""
    p = _signed(pred, a, b)
    if p in ("sgt", "sge"):
        return possible(b, "slt" if p == "sgt" else "sle", a)
    if p == "slt":
        return a.lo < b.hi
    if p == "sle":
        return a.lo <= b.hi
    if p == "eq":
        return max(a.lo, b.lo) <= min(a.hi, b.hi)
    if p == "ne":
        return not (a.lo == a.hi == b.lo == b.hi)
    return True


class Diffs:
    """Lower bounds on differences, ``x - y >= k``, from the facts in force (keyed by :func:`root` names)."""

    def __init__(self):
        self.low: dict[tuple[str, str], int] = {}

    def add(self, x: str, y: str, k: int) -> None:
        if self.low.get((x, y), k - 1) < k:
            self.low[(x, y)] = k

    def assume(self, f: Func, fact: Fact, a, b) -> None:
        """Record ``fact``; ``a``/``b`` are the sides' intervals (None if unknown: unsigned facts then say nothing)."""
        if fact.pred.startswith("u") and (a is None or b is None):
            return
        p = _signed(fact.pred, a, b) if a is not None and b is not None else fact.pred
        x, y = root(f, fact.a), root(f, fact.b)
        if p in ("slt", "sle"):
            self.add(y, x, 1 if p == "slt" else 0)
        elif p in ("sgt", "sge"):
            self.add(x, y, 1 if p == "sgt" else 0)
        elif p == "eq":
            self.add(x, y, 0)
            self.add(y, x, 0)

    def bound(self, f: Func, x: str, y: str) -> tuple[int | None, int | None]:
        """(lower, upper) bound on ``x - y`` from the differences known, directly or through one value between
        (a loop counting up from ``a = max(b, lo)``: ``j - lo >= (j - a) + (a - lo)``), None where nothing is known."""
        x, y = root(f, x), root(f, y)
        lo, up = self._lower(x, y), self._lower(y, x)
        return lo, (-up if up is not None else None)

    def _lower(self, x: str, y: str) -> int | None:
        best = self.low.get((x, y))
        for (a, z), k in self.low.items():
            if a == x and (k2 := self.low.get((z, y))) is not None and (best is None or k + k2 > best):
                best = k + k2
        return best


def block_facts(f: Func) -> dict[int, list[Fact]]:
    """The facts in force in each function-level block: a block reached from one ``cf.cond_br`` edge (what
    ``if slot < 0: return`` leaves) runs where the edge's condition holds, and where its own predecessor's did."""
    blocks = f.blocks or [f.body]
    preds: dict[str, list[tuple[object, list[Fact]]]] = {}
    for blk in blocks:
        last = blk.ops[-1] if blk.ops else None
        succ = blk.successors()
        for k, label in enumerate(succ):
            edge = []
            if last.name == "cf.cond_br" and last.operands and len(succ) == 2 and succ[0] != succ[1]:
                edge = facts(f, last.operands[0], k == 0)
            preds.setdefault(label, []).append((blk, edge))
    out: dict[int, list[Fact]] = {}
    for i, blk in enumerate(blocks):
        ps = preds.get(blk.label, []) if i and blk.label else []
        out[id(blk)] = out.get(id(ps[0][0]), []) + ps[0][1] if len(ps) == 1 else []
    return out


def facts_at(f: Func, op, by_block: dict[int, list[Fact]]) -> list[Fact]:
    """The facts in force where ``op`` runs: its function-level block's, and every enclosing ``scf.if`` branch's."""
    out, b = [], op.block
    while b is not None and b.parent is not None:
        if b.parent.name == "scf.if" and b.parent.operands and b.region < 2:
            out += facts(f, b.parent.operands[0], b.region == 0)
        b = b.parent.block
    return out + (by_block.get(id(b), []) if b is not None else [])
