"""Ordering of global-memory accesses within one program: what ``store-then-load`` and ``load-then-store`` share.

Triton gives each ``tl.load``/``tl.store`` its own thread-to-element mapping, and nothing orders one thread's
access before another thread's access of the same element unless a CTA barrier lies between them. This module
pairs accesses of one unit (one compiled kernel), decides whether the two may touch the same element (same pointer,
overlapping offsets of one argument, or two arguments whose views share bytes in a case) and whether a barrier
(``tl.debug_barrier()``) orders them on every path.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter

from .mlir import Block, Func, Op, shape_of
from .ranges import LOOP_CARRIED, Iv, RangeAnalysis, base_arg
from .views import View

# the barrier op has been `gpu.barrier` through Triton 3.x; accept the names other releases print
_BARRIER = re.compile(r"^(gpu\.barrier|tt\.(debug_)?barrier|ttg\.barrier|ttng\.barrier|nvvm\.barrier0?|"
                      r"triton_gpu\.barrier)$")
_LOOPS = ("scf.for", "scf.while")
_OFF_THROUGH = {"tt.splat", "tt.broadcast", "tt.expand_dims", "tt.reshape", "tt.trans", "ttg.convert_layout",
                "arith.extsi", "arith.extui"}
INF = float("inf")


def is_barrier(name: str) -> bool:
    return bool(_BARRIER.match(name))


def ordering_points(f: Func) -> list[Op]:
    """Ops after which every thread of the program sees the global accesses every thread made before them."""
    return [op for op in f.ops if is_barrier(op.name)]


def _contains(outer: Block, inner: Block) -> bool:
    """``outer`` is ``inner`` or encloses it; the function's own blocks (split by an early return) count as one."""
    b: Block | None = inner
    while b is not None:
        if b is outer or (b.parent is None and outer.parent is None):
            return True
        b = b.parent.block if b.parent is not None else None
    return False


def _region_path(op: Op) -> dict[int, tuple[Op, int]]:
    out, b = {}, op.block
    while b is not None and b.parent is not None:
        out[id(b.parent)] = (b.parent, b.region)
        b = b.parent.block
    return out


def exclusive(a: Op, b: Op) -> bool:
    """The two ops sit in different branches of one ``scf.if``: no run executes both."""
    pa, pb = _region_path(a), _region_path(b)
    return any(k in pb and anc.name == "scf.if" and pb[k][1] != r for k, (anc, r) in pa.items())


def common_loop(a: Op, b: Op) -> Op | None:
    pb = {id(x) for x in b.ancestors()}
    return next((x for x in a.ancestors() if x.name in _LOOPS and id(x) in pb), None)


def protected(first: Op, second: Op, loop: Op | None, points: list[Op]) -> bool:
    """An ordering point lies between ``first`` and ``second`` on every path (``loop``: ``second`` runs in a later
    iteration of it)."""
    for b in points:
        if loop is None:
            if first.pos < b.pos < second.pos and (_contains(b.block, first.block) or _contains(b.block, second.block)):
                return True
        elif loop.pos < b.pos <= loop.end:
            if (b.pos > first.pos and _contains(b.block, first.block)) or \
                    (b.pos < second.pos and _contains(b.block, second.block)):
                return True
    return False


def _terms(f: Func, name: str) -> list[str]:
    op = f.defs.get(name)
    if op is not None and op.name == "arith.addi":
        return _terms(f, op.operands[0]) + _terms(f, op.operands[1])
    if op is not None and op.name in _OFF_THROUGH:
        return _terms(f, op.operands[0])
    return [name]


def decompose(f: Func, name: str) -> tuple[str | None, list[str]]:
    """(kernel argument the pointer is based on, offset terms added to it)."""
    offsets: list[str] = []
    base = base_arg(f, name, offsets)
    return base, [t for o in offsets for t in (_terms(f, o) if o != LOOP_CARRIED else [o])]


def _uniform(f: Func, name: str) -> bool:
    return not shape_of(f.types.get(name, "")) and not name.startswith("<")


def _inside(f: Func, name: str, loop: Op) -> bool:
    if name in f.block_args:
        blk, _ = f.block_args[name]
        return blk.parent is not None and (blk.parent is loop or loop in blk.parent.ancestors())
    op = f.defs.get(name)
    return op is not None and loop.pos < op.pos <= loop.end


def span(ra: RangeAnalysis, terms) -> tuple[float, float]:
    lo = hi = 0
    for t in terms:
        v = ra.get(t) if not t.startswith("<") else None
        if not isinstance(v, Iv):
            return -INF, INF
        lo, hi = lo + v.lo, hi + v.hi
    return lo, hi


@dataclasses.dataclass
class Overlap:
    """Why two accesses may touch the same element."""

    why: str
    pair: tuple[str, str] | None = None  # the aliased argument pair it rests on (None: one argument)
    launch: object | None = None  # the launch whose views share bytes (aliased pairs only)


@dataclasses.dataclass
class Aliases:
    """Per unit: IR argument pairs whose views share bytes in some launch, with those launches."""

    by_pair: dict[tuple[str, str], list[tuple[object, View, View, int | bool]]]

    @classmethod
    def of(cls, unit, f: Func) -> Aliases:
        names = [a for a, _t, _l in f.args]
        ir_of = dict(zip(unit.ir_params, names)) if len(names) == len(unit.ir_params) else {}
        by_pair: dict[tuple[str, str], list] = {}
        for ln in unit.launches:
            for (a, b), (va, vb, byte) in ln.aliases.items():
                x, y = ir_of.get(a, a), ir_of.get(b, b)
                if x > y:
                    x, y, va, vb = y, x, vb, va
                by_pair.setdefault((x, y), []).append((ln, va, vb, byte))
        return cls(by_pair)


def _bytes(v: View, lo: float, hi: float) -> tuple[float, float]:
    return v.offset + lo * v.itemsize, v.offset + hi * v.itemsize + v.itemsize


def _shared(name_a: str, va: View, name_b: str, vb: View, byte: int | bool) -> str:
    if byte is True:
        return (f"`{name_b}` and `{name_a}` are views of one storage that may share bytes (`{name_a}` "
                f"{va.describe()}, `{name_b}` {vb.describe()})")
    ia, ib = va.index(byte), vb.index(byte)
    at = f"`{name_a}[{', '.join(map(str, ia))}]` is `{name_b}[{', '.join(map(str, ib))}]`" if ia and ib else \
        f"both hold byte {byte:,}"
    return (f"`{name_b}`, whose view shares bytes with `{name_a}`'s in this case ({at}; `{name_a}` "
            f"{va.describe()}, `{name_b}` {vb.describe()})")


def overlap(f: Func, ra: RangeAnalysis, first: Op, second: Op, loop: Op | None, aliases: Aliases) -> Overlap | None:
    """What ``second`` may touch of what ``first`` touched, or None when they cannot meet."""
    pa, pb = first.operands[0], second.operands[0]
    if pa == pb and (loop is None or not _inside(f, pa, loop)):
        return Overlap("the same pointer")
    ba, ta = decompose(f, pa)
    bb, tb = decompose(f, pb)
    if ba is None or bb is None:
        return None
    if ba != bb:
        pair = (ba, bb) if ba < bb else (bb, ba)
        launches = aliases.by_pair.get(pair)
        if not launches:
            return None
        sa, sb = span(ra, ta), span(ra, tb)
        for ln, v0, v1, byte in launches:
            va, vb = (v0, v1) if pair[0] == ba else (v1, v0)
            (a0, a1), (b0, b1) = _bytes(va, *sa), _bytes(vb, *sb)
            if a0 < b1 and b0 < a1:  # the bytes the two accesses reach overlap too
                return Overlap(_shared(ba, va, bb, vb, byte), pair, ln)
        return None
    ca, cb = Counter(ta), Counter(tb)
    for t in list(ca):
        if t in cb and _uniform(f, t):
            if loop is not None and _inside(f, t, loop):
                return None  # each iteration addresses its own slice
            k = min(ca[t], cb[t])
            ca[t] -= k
            cb[t] -= k
    a_lo, a_hi = span(ra, ca.elements())
    b_lo, b_hi = span(ra, cb.elements())
    if a_lo <= b_hi and b_lo <= a_hi:
        return Overlap(f"overlapping offsets of `{ba}`")
    return None


def same_mapping(f: Func, a: Op, b: Op) -> bool:
    """The two accesses address elements through the same pointer expression: each thread touches the same elements
    in both (the load-compute-store of one element per thread)."""
    pa, pb = a.operands[0], b.operands[0]
    if pa == pb:
        return True
    ba, ta = decompose(f, pa)
    bb, tb = decompose(f, pb)
    return ba is not None and ba == bb and Counter(ta) == Counter(tb) and shape_of(f.types.get(pa, "")) == \
        shape_of(f.types.get(pb, ""))


def paired(f: Func, first: Op, second: Op) -> Op | None | bool:
    """Whether ``second`` can run after ``first`` in one program: False if not, else the loop whose next
    iteration runs it (None: later in the same pass)."""
    loop = None if first.pos < second.pos else common_loop(first, second)
    if first.pos > second.pos and loop is None:
        return False
    if exclusive(first, second) or not f.reaches(f.top_block(first), f.top_block(second)):
        return False
    return loop
