"""Ordering of global-memory accesses within one program: what ``store-then-load`` and ``load-then-store`` share.

Triton gives each ``tl.load``/``tl.store`` its own thread-to-element mapping, and nothing orders one thread's
access before another thread's access of the same element unless a CTA barrier lies between them. This module
pairs accesses of one unit (one compiled kernel), decides whether the two may touch the same element (same pointer,
overlapping offsets of one argument, or two arguments whose views share bytes in a case) and whether something
orders them on every path: ``tl.debug_barrier()``, or a reduction that combines elements of more than one warp (a
1-D tile too long for one warp reduced to a scalar, or any reduction whose axis the TTGIR layout spreads over warps),
in a program of more than one warp.
"""

from __future__ import annotations

import dataclasses
import re

from .addresses import canon, inside, lanes_meet, same_terms, span, tells_lanes_apart, uniform, varying_axes
from .budgets import VALUES_ONLY
from ..capture.launches import distinct
from .conditions import NEGATE, facts
from .layouts import issued_in_place, reduces_across_warps, same_owner
from ..ir.mlir import Block, Func, Op, shape_of
from .pointers import decompose, strip
from .ranges import RangeAnalysis
from ..capture.views import View

# the barrier op has been `gpu.barrier` through Triton 3.x; accept the names other releases print
_BARRIER = re.compile(
    r"^(gpu\.barrier|tt\.(debug_)?barrier|ttg\.barrier|ttng\.barrier|nvvm\.barrier0?|"
    r"triton_gpu\.barrier)$"
)
_LOOPS = ("scf.for", "scf.while")


def is_barrier(name: str) -> bool:
    return bool(_BARRIER.match(name))


@dataclasses.dataclass(frozen=True)
class Point:
    """An ordering point: its position, and the block it is sure to run in when that block runs (a barrier in the
    body of a loop that runs at least once counts for the block holding the loop)."""

    pos: int
    block: Block


def _runs_once(ra: RangeAnalysis | None, loop: Op) -> bool:
    """``loop`` makes at least one iteration in every launch ``ra`` binds."""
    counted = ra.trips(loop) if ra is not None else None
    return counted is not None and counted[0] >= 1


#: a 1-D tile longer than one warp can hold (32 lanes x 16 elements, the widest a lane's vector gets) has its
#: elements in more than one warp: reducing it needs a cross-warp exchange through shared memory, behind bar.sync
#: (a shorter tile may be reduced within a warp with shuffles and no barrier: sm_90 PTX of a 32-element sum has none)
CROSS_WARP_ELEMENTS = 512


def ordering_points(f: Func, num_warps: int, ra: RangeAnalysis | None = None, across=None) -> list[Point]:
    """Where every thread of the program sees the global accesses every thread made before: a barrier, and a 1-D
    tile of more than CROSS_WARP_ELEMENTS elements reduced to a scalar in a program of more than one warp (a
    reduction along one axis of a 2-D tile may stay within warps, and one warp's shuffles order nothing); with
    ``across`` (``tt.reduce`` op -> bool: its layout spreads the reduced axis over warps), those reductions too.
    ``ra`` tells which loops run at least once."""
    out = []
    for op in f.ops:
        src = shape_of(f.types.get(op.operands[0], "")) if op.name == "tt.reduce" and op.operands else ()
        if not (
            is_barrier(op.name)
            or (
                op.name == "tt.reduce"
                and num_warps > 1
                and op.results
                and (
                    (len(src) == 1 and src[0] > CROSS_WARP_ELEMENTS and not shape_of(f.types.get(op.results[0], "")))
                    or (across is not None and across(op))
                )
            )
        ):
            continue
        blk = op.block
        while (
            blk is not None
            and blk.parent is not None
            and blk.region == 0
            and _runs_once(ra, blk.parent)
            and blk is blk.parent.regions[0][0]
        ):
            blk = blk.parent.block
        out.append(Point(op.pos, blk))
    return out


def _contains(outer: Block, inner: Block) -> bool:
    """``outer`` is ``inner`` or encloses it."""
    b: Block | None = inner
    while b is not None:
        if b is outer:
            return True
        b = b.parent.block if b.parent is not None else None
    return False


def _on_every_path(f: Func, block: Block, first: Op, second: Op) -> bool:
    """Function-level ``block`` (the function split by an early return) runs between ``first`` and ``second`` on
    every path from one to the other: ``second``'s block cannot be reached from ``first``'s without it."""
    a, c = f.top_block(first), f.top_block(second)
    return (
        block.parent is None
        and a is not None
        and c is not None
        and block not in (a, c)
        and not f.reaches(a, c, avoid=block)
    )


def _conditions(op: Op) -> list[tuple[str, bool]]:
    """(condition, whether it holds) of every ``scf.if`` region that encloses ``op``."""
    out, b = [], op.block
    while b is not None and b.parent is not None:
        if b.parent.name == "scf.if" and b.parent.operands and b.region < 2:
            out.append((b.parent.operands[0], b.region == 0))
        b = b.parent.block
    return out


def exclusive(f: Func, a: Op, b: Op, loop: Op | None = None) -> bool:
    """No run executes both ops: they sit in branches whose conditions cannot both hold (the two branches of one
    ``if``, or two ``if``s on the same flag, or on a comparison and its negation). With ``loop`` (``b`` runs in a
    later iteration) only conditions the loop does not recompute count: ``if i % 2 == 0`` holds in one iteration
    and not the next."""
    ca, cb = _conditions(a), _conditions(b)
    if loop is not None:
        ca = [(x, p) for x, p in ca if not inside(f, x, loop)]
        cb = [(x, p) for x, p in cb if not inside(f, x, loop)]
    if any(x == y and p != q for x, p in ca for y, q in cb):
        return True
    fa = {(fc.a, fc.pred, fc.b) for x, p in ca for fc in facts(f, x, p)}
    return any((fc.a, NEGATE[fc.pred], fc.b) in fa for y, q in cb for fc in facts(f, y, q))


def common_loop(a: Op, b: Op) -> Op | None:
    pb = {id(x) for x in b.ancestors()}
    return next((x for x in a.ancestors() if x.name in _LOOPS and id(x) in pb), None)


def protected(f: Func, first: Op, second: Op, loop: Op | None, points: list[Point]) -> bool:
    """An ordering point lies between ``first`` and ``second`` on every path (``loop``: ``second`` runs in a later
    iteration of it): in a block enclosing one of them, after ``first`` or before ``second``, or in a function-level
    block every path between them runs (not the branch an early return ends)."""
    for b in points:
        if loop is None:
            if first.pos < b.pos < second.pos and (
                _contains(b.block, first.block)
                or _contains(b.block, second.block)
                or _on_every_path(f, b.block, first, second)
            ):
                return True
        elif loop.pos < b.pos <= loop.end:
            if (b.pos > first.pos and _contains(b.block, first.block)) or (
                b.pos < second.pos and _contains(b.block, second.block)
            ):
                return True
    return False


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
    ir_of: dict[str, str] = dataclasses.field(default_factory=dict)  # kernel parameter -> IR argument

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
        return cls(by_pair, ir_of)


def _bytes(v: View, lo: float, hi: float) -> tuple[float, float]:
    return v.offset + lo * v.itemsize, v.offset + hi * v.itemsize + v.itemsize


def _shared(name_a: str, va: View, name_b: str, vb: View, byte: int | bool) -> str:
    if byte is True:
        return (
            f"`{name_b}` and `{name_a}` are views of one storage that may share bytes (`{name_a}` "
            f"{va.describe()}, `{name_b}` {vb.describe()})"
        )
    ia, ib = va.index(byte), vb.index(byte)
    at = (
        f"`{name_a}[{', '.join(map(str, ia))}]` is `{name_b}[{', '.join(map(str, ib))}]`"
        if ia and ib
        else f"both hold byte {byte:,}"
    )
    return (
        f"`{name_b}`, whose view shares bytes with `{name_a}`'s in this case ({at}; `{name_a}` "
        f"{va.describe()}, `{name_b}` {vb.describe()})"
    )


def _cancel(f: Func, ta: list, tb: list, loop: Op | None, values: dict[str, int]):
    """Drop the uniform terms the two offsets share: equal scalars of one program cancel exactly, unless ``loop``
    recomputes them between the two accesses (a loop counter's term is then modeled by lanes_meet; any other
    keeps its own value on each side)."""
    memo: dict = {}
    keyed_b = [(canon(f, t, values, memo) if uniform(f, t) else None, t) for t in tb]
    rest_a, used = [], set()
    for t in ta:
        k = canon(f, t, values, memo) if uniform(f, t) else None
        j = next((i for i, (kb, _t) in enumerate(keyed_b) if k is not None and kb == k and i not in used), None)
        if j is None or (loop is not None and (inside(f, t, loop) or inside(f, keyed_b[j][1], loop))):
            rest_a.append(t)
            continue
        used.add(j)
    return rest_a, [t for i, (_k, t) in enumerate(keyed_b) if i not in used]


def overlap(
    f: Func,
    ra: RangeAnalysis,
    first: Op,
    second: Op,
    loop: Op | None,
    aliases: Aliases,
    launch=None,
    other_lane: bool = False,
) -> Overlap | None:
    """What ``second`` may touch of what ``first`` touched, or None when they cannot meet (``ra`` the ranges of
    ``launch``, or of all launches when it is None; ``other_lane``: see :func:`~.addresses.lanes_meet`)."""
    pa, pb = first.operands[0], second.operands[0]
    if pa == pb and (loop is None or not inside(f, pa, loop)):
        return Overlap("the same pointer")
    ba, ta = decompose(f, pa)
    bb, tb = decompose(f, pb)
    if ba is None or bb is None:
        return None
    if ba != bb:
        pair = (ba, bb) if ba < bb else (bb, ba)
        launches = [x for x in aliases.by_pair.get(pair, []) if launch is None or x[0] is launch]
        for ln, v0, v1, byte in launches:
            va, vb = (v0, v1) if pair[0] == ba else (v1, v0)
            values = {aliases.ir_of.get(p, p): v for p, v in ln.int_args.items()} if launch is not None else {}
            cut = _cancel(f, ta, tb, loop, values)
            (a0, a1), (b0, b1) = _bytes(va, *span(ra, cut[0])), _bytes(vb, *span(ra, cut[1]))
            if not (a0 < b1 and b0 < a1):  # the bytes the two accesses reach do not meet
                continue
            d, r = divmod(vb.offset - va.offset, va.itemsize)
            if (
                va.itemsize == vb.itemsize
                and not r
                and not lanes_meet(f, ra, first, cut[0], second, cut[1], d, loop, other_lane)
            ):
                continue
            return Overlap(_shared(ba, va, bb, vb, byte), pair, ln)
        return None
    cut = _cancel(f, ta, tb, loop, {})
    (a_lo, a_hi), (b_lo, b_hi) = span(ra, cut[0]), span(ra, cut[1])
    if a_lo <= b_hi and b_lo <= a_hi and lanes_meet(f, ra, first, cut[0], second, cut[1], 0, loop, other_lane):
        return Overlap(f"overlapping offsets of `{ba}`")
    return None


def same_mapping(f: Func, ra: RangeAnalysis, a: Op, b: Op, aliases: Aliases, launch=None) -> bool:
    """The two accesses reach each element through the same index expression on the same view, so one thread
    touches the same elements in both: the load-compute-store of one element per thread. With ``launch``, integer
    arguments count by the values it passes (``stride_in_m`` and ``stride_out_m`` of an in-place call are one
    stride)."""
    pa, pb = a.operands[0], b.operands[0]
    if shape_of(f.types.get(pa, "")) != shape_of(f.types.get(pb, "")):
        return False
    ba, ta = decompose(f, pa)
    bb, tb = decompose(f, pb)
    if ba is None or bb is None:
        # no element offsets to read (a block pointer's tile holds distinct elements): the same pointer value is
        # the same mapping, anything else is not known to be
        return pa == pb
    if not tells_lanes_apart(f, ra, a, ta):
        return False  # several lanes reach one element (a broadcast axis, offs // 2, a histogram's index)
    if pa == pb:
        return True
    if ba == bb:
        values = {aliases.ir_of.get(p, p): v for p, v in launch.int_args.items()} if launch is not None else {}
        return same_terms(f, ta, tb, values)
    # two arguments: the same view in every launch that aliases them, and terms equal with that launch's integers
    launches = aliases.by_pair.get((ba, bb) if ba < bb else (bb, ba), [])
    return bool(launches) and all(
        v0 == v1 and same_terms(f, ta, tb, {aliases.ir_of.get(p, p): v for p, v in ln.int_args.items()})
        for ln, v0, v1, _byte in launches
    )


def _mask(op: Op) -> str | None:
    """The mask operand of a load (operand 1) or a store (operand 2), None when it has none."""
    k = 1 if op.name == "tt.load" else 2
    return op.operands[k] if len(op.operands) > k else None


def _values_only(f: Func, name: str, depth: int = 0) -> bool:
    """Two lanes of this per-lane term can be equal only through a loaded value (``ram[:, None] * stride`` of a
    gathered row id), not through its own arithmetic (``offs // 2``, a broadcast axis)."""
    n = strip(f, name)
    op = f.defs.get(n)
    if op is None:
        return False
    if depth > VALUES_ONLY.limit:
        VALUES_ONLY.cut(f)
        return False
    if op.name == "tt.load":
        return True
    if op.name in ("arith.muli", "arith.shli", "arith.addi") and len(op.operands) == 2:
        return any(_values_only(f, x, depth + 1) for x in op.operands)
    return False


def same_access(f: Func, ra: RangeAnalysis, ld: Op, st: Op) -> bool:
    """A read-modify-write: the store goes through the load's own pointer expression under the load's own mask, so
    each lane stores the element it loaded (two lanes meet only where loaded indices repeat: a lost update, which
    no barrier fixes, not an ordering bug)."""
    pa, pb = ld.operands[0], st.operands[0]
    if _mask(ld) != _mask(st):
        return False
    if pa != pb:
        ba, ta = decompose(f, pa)
        bb, tb = decompose(f, pb)
        if ba is None or ba != bb or not same_terms(f, ta, tb, {}):
            return False
    shape = shape_of(f.types.get(pa, ""))
    if not varying_axes(f, pa) >= {i for i, d in enumerate(shape) if d > 1}:
        return False  # a broadcast axis: several lanes address one element by construction
    _b, terms = decompose(f, pa)
    lanes = [t for t in terms if isinstance(t, str) and not uniform(f, t) and varying_axes(f, t)]
    return all(_values_only(f, t) for t in lanes if not tells_lanes_apart(f, ra, st, [t]))


def rereads_own(f: Func, st: Op, ld: Op) -> list | None:
    """The load goes, later in the same pass and in no loop, through the store's own pointer tile (the same value,
    or one computed the same way lane for lane) under the store's own mask: lane for lane it reads the element
    that lane stored. Returns the offset terms (to tell the lanes apart in a launch), or None. Only the same
    pointer, mask and layout make it the same thread: the caller asks :func:`~.layouts.same_owner` too. A load in a
    loop may be pipelined (issued iterations ahead, before the store): never one here."""
    if _mask(st) != _mask(ld) or any(x.name in _LOOPS for x in ld.ancestors()):
        return None
    pa, pb = st.operands[0], ld.operands[0]
    if shape_of(f.types.get(pa, "")) != shape_of(f.types.get(pb, "")) or not shape_of(f.types.get(pa, "")):
        return None
    if pa != pb:
        memo: dict = {}
        if canon(f, pa, {}, memo) != canon(f, pb, {}, memo):
            return None  # not one computation lane for lane (a transposed or reshaped tile of the same offsets)
    base, terms = decompose(f, pb)
    return terms if base is not None else None


def orders(f: Func, first: Op, second: Op) -> list[Op | None]:
    """How ``second`` can run after ``first`` in one program: None for later in the same pass, a loop for a later
    iteration of it (both, for accesses in one loop with ``second`` after ``first`` in its body); empty if never."""
    loop = common_loop(first, second)
    out: list[Op | None] = []
    if first.pos < second.pos and not exclusive(f, first, second):
        out.append(None)
    if loop is not None and not exclusive(f, first, second, loop):
        out.append(loop)
    return out if f.reaches(f.top_block(first), f.top_block(second)) else []


#: distinct launches tried to confirm a pair the union of all launches could not rule out
MAX_CONFIRM = 256


def find_overlap(
    f: Func,
    union: RangeAnalysis,
    ranges_of,
    launches: list,
    first: Op,
    second: Op,
    loop: Op | None,
    aliases: Aliases,
    other_lane: bool = False,
    exempt=None,
    unconfirmed: list | None = None,
) -> Overlap | None:
    """An overlap of the two accesses in a real launch (its ``launch`` set), or None. The union of the launches is
    tried first (when it rules the pair out, every launch does); a pair it cannot rule out is confirmed launch by
    launch, where each stride has one value and the lanes' integers their own ranges. When launches had to be
    left out and none confirmed it, the :class:`~..capture.launches.Distinct` tried goes to ``unconfirmed``."""
    if overlap(f, union, first, second, loop, aliases, other_lane=other_lane) is None:
        return None
    tried = distinct(launches, lambda ln: tuple(sorted(ln.aliases)), MAX_CONFIRM)
    for ln in tried:
        ra = ranges_of(ln)
        if exempt is not None and exempt(ra, ln):
            continue
        hit = overlap(f, ra, first, second, loop, aliases, launch=ln, other_lane=other_lane)
        if hit is not None:
            hit.launch = ln
            return hit
    if tried.left_out and unconfirmed is not None:
        unconfirmed.append(tried)
    return None


def races(ctx, unit, f: Func, write_first: bool):
    """For each access reported on (the load of a store-then-load pair, the store of a load-then-store pair), the
    first earlier access it races with: (reported access, earlier access, loop or None, Overlap). The unit's
    accesses are paired by :func:`orders`, skipped when ordered by :func:`protected` (or, load first, when they
    share their mapping), and confirmed in a real launch by :func:`find_overlap`."""
    stores = [op for op in f.ops if op.name == "tt.store"]
    if not stores:
        return
    loads = [op for op in f.ops if op.name == "tt.load"]
    union = ctx.union_ranges(unit, f)
    num_warps = getattr(unit.options, "num_warps", 4)
    points = ordering_points(f, num_warps, union)
    wide: list[Point] | None = None  # with the reductions across warps, read in the TTGIR once a pair would be reported

    def across(first: Op, second: Op, loop: Op | None) -> bool:
        nonlocal wide
        module = unit.func()[1]
        if wide is None:
            wide = ordering_points(f, num_warps, union, lambda op: reduces_across_warps(unit, f, module, ctx.arch, op))
        # a pipelined load is issued before the reduction it follows in the source: nothing it orders
        return (
            len(wide) > len(points)
            and protected(f, first, second, loop, wide)
            and all(issued_in_place(unit, f, module, ctx.arch, op) for op in (first, second))
        )

    aliases = Aliases.of(unit, f)
    earlier, later = (stores, loads) if write_first else (loads, stores)
    for second in later:
        hit = None
        for first in earlier:
            for loop in orders(f, first, second):
                if protected(f, first, second, loop, points):
                    continue
                # across iterations the same expression may name another element (unless the loop leaves it be)
                if (
                    not write_first
                    and (loop is None or not inside(f, first.operands[0], loop))
                    and same_access(f, union, first, second)
                ):
                    continue
                # load first: one element per thread through the same expression, decided in each launch (strides
                # have values). Store first: the load re-reads, lane for lane, what the store wrote; the same thread,
                # whose own store comes first, when the two have one layout holding each element once (read in the
                # TTGIR) and no two lanes address one element (decided in each launch)
                own = rereads_own(f, first, second) if write_first and loop is None else None
                exempt = (
                    (lambda ra, ln, a=first, b=second: same_mapping(f, ra, a, b, aliases, ln))
                    if not write_first
                    else (
                        lambda ra, ln, a=first, b=second, t=own: (
                            tells_lanes_apart(f, ra, b, t) and same_owner(unit, f, unit.func()[1], ctx.arch, a, b)
                        )
                    )
                    if own is not None
                    else None
                )
                unconfirmed: list = []
                hit = find_overlap(
                    f,
                    union,
                    lambda ln: ctx.launch_ranges(unit, f, ln),
                    unit.launches,
                    first,
                    second,
                    loop,
                    aliases,
                    other_lane=not write_first,
                    exempt=exempt,
                    unconfirmed=unconfirmed,
                )
                # last, as it lowers the unit to TTGIR (up to 0.1 s a unit): only a pair that would be reported
                if (hit is not None or unconfirmed) and across(first, second, loop):
                    hit = None
                    continue
                if hit is not None:
                    yield second, first, loop, hit
                    break
                if unconfirmed:
                    kinds = ("load", "store") if write_first else ("store", "load")
                    what = f"this {kinds[0]} meeting the {kinds[1]} at line {ctx.frame(unit, first)[1]}"
                    ctx.unchecked(
                        unit,
                        second,
                        unconfirmed[0].unchecked("store-then-load" if write_first else "load-then-store", what),
                    )
            if hit is not None:
                break
