"""Whether two accesses can reach the same element, from their offset terms (:func:`pointers.decompose`).

A term is an integer SSA value (``row * stride``, ``offs_j``) or an :class:`~.pointers.Advance` (a pointer carried
by an ``scf.for`` that moves by a loop-invariant step each iteration, ``dY_ptr += stride``). :func:`lanes_meet`
decides exactly whether some lane of one access and some lane of the other reach one element, for terms that are a
lane's integer times a stride fixed in the launch, each lane's integers bounded by its access's mask.
"""

from __future__ import annotations

from collections import Counter

from .budgets import AFFINE, CANON, INJECTIVE, PLACEMENTS, VARYING_AXES
from .conditions import facts, narrow
from ..ir.mlir import Func, Op, shape_of
from .pointers import THROUGH, Advance, Term, strip
from .intervals import Iv
from .ranges import RangeAnalysis
from ..capture.views import solve


def uniform(f: Func, t: Term) -> bool:
    return isinstance(t, str) and not shape_of(f.types.get(t, ""))


def inside(f: Func, t: Term, loop: Op) -> bool:
    """The term takes a new value in each iteration of ``loop``."""
    if isinstance(t, Advance):
        return t.loop is loop or loop in t.loop.ancestors()
    if t in f.block_args:
        blk, _ = f.block_args[t]
        return blk.parent is not None and (blk.parent is loop or loop in blk.parent.ancestors())
    op = f.defs.get(t)
    return op is not None and loop.pos < op.pos <= loop.end


def span(ra: RangeAnalysis, terms) -> tuple[float, float]:
    """The interval the terms' sum lies in (unbounded for a pointer advanced by a loop)."""
    lo = hi = 0
    for t in terms:
        v = ra.get(t) if isinstance(t, str) else None
        if not isinstance(v, Iv):
            return -float("inf"), float("inf")
        lo, hi = lo + v.lo, hi + v.hi
    return lo, hi


def _placements(f: Func, access: Op) -> dict[str, set]:
    """Each integer the access's pointer and mask are computed from (as :func:`strip` names it) -> the ways it is
    laid into the access's tile: the ``expand_dims`` axes on the path between them (None past a transpose or
    reshape)."""
    memo = f.memo.setdefault("placements", {})
    if id(access) in memo:
        return memo[id(access)]
    out: dict[str, set] = {}
    seen: set = set()
    stack: list = [(x, ()) for x in access.operands[:3]] if access.name in ("tt.load", "tt.store") else []
    while stack and len(seen) < PLACEMENTS.limit:
        v, ctx = stack.pop()
        if (v, ctx) in seen:
            continue
        seen.add((v, ctx))
        op = f.defs.get(v)
        if op is not None and op.name in THROUGH and op.operands:
            if ctx is not None and op.name == "tt.expand_dims":
                ctx = (*ctx, op.attr_int("axis") or 0)
            elif op.name in ("tt.trans", "tt.reshape"):
                ctx = None
            stack.append((op.operands[0], ctx))
            continue
        out.setdefault(v, set()).add(ctx)
        stack += [(x, ctx) for x in (op.operands if op is not None else ())]
    PLACEMENTS.stopped(f, stack, seen)
    memo[id(access)] = out
    return out


def _exact(f: Func, ra: RangeAnalysis, name: str) -> bool:
    """The interval of ``name`` bounds what every lane really holds: no wrapped intermediate (``over``), and no
    arithmetic on a loaded value (whose interval the analysis clamps to the type where the exact one leaves it)."""
    v = ra.get(name)
    if not isinstance(v, Iv) or v.over:
        return False
    d = f.defs.get(strip(f, name))
    return not v.data or (d is not None and d.name == "tt.load")


def mask_bounds(f: Func, ra: RangeAnalysis, access: Op, exact: bool = False) -> dict[str, tuple[int, int]]:
    """Bounds the access's mask puts on the lanes' integers (``offs < n`` keeps the active lanes below n). An
    integer laid along two tile axes (one ``tl.arange`` for rows and columns) is left unbounded: the mask bounds
    it along one axis only. With ``exact``, only comparisons between values whose intervals hold of what the lanes
    really compute count (:func:`_exact`): ``offs < n`` on an ``offs`` that wrapped says nothing of the exact
    ``offs``, a wrapped negative passes it."""
    mask = (
        access.operands[1]
        if access.name == "tt.load" and len(access.operands) > 1
        else access.operands[2]
        if access.name == "tt.store" and len(access.operands) > 2
        else None
    )
    out: dict[str, tuple[int, int]] = {}
    places = _placements(f, access) if mask is not None else {}
    for fc in facts(f, mask, True) if mask is not None else ():
        if exact and not (_exact(f, ra, fc.a) and _exact(f, ra, fc.b)):
            continue
        a, b = ra.get(fc.a), ra.get(fc.b)
        if isinstance(a, Iv) and isinstance(b, Iv) and (r := narrow(a, fc.pred, b)) is not None:
            for name, v in zip((fc.a, fc.b), r):
                root = strip(f, name)
                if len(places.get(root, ())) > 1:
                    continue
                lo, hi = out.get(root, (v.lo, v.hi))
                out[root] = (max(lo, v.lo), min(hi, v.hi))
    return out


def _linear(f: Func, ra: RangeAnalysis, name: str, bounds: dict[str, tuple[int, int]]):
    """A term as ``coef * x`` with x in [lo, hi] (the lane's integer times a stride fixed in this launch), or None."""

    def interval(n):
        v = ra.get(n)
        if not isinstance(v, Iv):
            return None
        lo, hi = bounds.get(strip(f, n), (v.lo, v.hi))
        return (max(lo, v.lo), min(hi, v.hi)) if max(lo, v.lo) <= min(hi, v.hi) else (v.lo, v.hi)

    n = strip(f, name)
    op = f.defs.get(n)
    if op is not None and op.name in ("arith.muli", "arith.shli") and len(op.operands) == 2:
        for x, y in ((op.operands[0], op.operands[1]), (op.operands[1], op.operands[0])):
            c, xr = ra.get(y), interval(x)
            if isinstance(c, Iv) and c.lo == c.hi and xr is not None:
                if op.name == "arith.shli":
                    if y != op.operands[1] or not 0 <= c.lo < 63:
                        continue
                    return 1 << c.lo, xr[0], xr[1]
                return c.lo, xr[0], xr[1]
    r = interval(n)
    return (1, r[0], r[1]) if r is not None else None


def _point(ra: RangeAnalysis, name: str) -> int | None:
    v = ra.get(name)
    return v.lo if isinstance(v, Iv) and v.lo == v.hi else None


def iv_affine(f: Func, ra: RangeAnalysis, name: str, depth: int = 0):
    """A uniform term as ``a * k + b`` of the counter ``k`` (0, 1, ...) of an ``scf.for``: (loop, a, b), or None.
    ``for off in range(0, n, BLOCK)`` makes ``off`` = BLOCK * k, and ``off * stride`` = BLOCK * stride * k."""
    n = strip(f, name)
    if depth > AFFINE.limit:
        AFFINE.cut(f)
        return None
    if n in f.block_args:
        blk, k = f.block_args[n]
        lp = blk.parent
        if lp is None or lp.name != "scf.for" or len(lp.operands) < 3:
            return None
        if k == 0:  # the induction variable: lb + k * step
            lb, st = _point(ra, lp.operands[0]), _point(ra, lp.operands[2])
            return (lp, st, lb) if lb is not None and st is not None else None
        # an integer carried as ``x = x + step`` (a block pointer's offset once Triton rewrites it)
        y = blk.ops[-1] if blk.ops else None
        if y is None or y.name != "scf.yield" or k - 1 >= len(y.operands) or 3 + k - 1 >= len(lp.operands):
            return None
        nxt = f.defs.get(y.operands[k - 1])
        if nxt is None or nxt.name != "arith.addi" or n not in nxt.operands:
            return None
        other = nxt.operands[1] if nxt.operands[0] == n else nxt.operands[0]
        st, init = _point(ra, other), _point(ra, lp.operands[3 + k - 1])
        return (lp, st, init) if st is not None and init is not None else None
    op = f.defs.get(n)
    if op is None or len(op.operands) != 2 or op.name not in ("arith.muli", "arith.addi", "arith.subi"):
        return None
    x, y = op.operands
    for u, w, sign in ((x, y, 1), (y, x, 1 if op.name != "arith.subi" else -1)):
        inner, c = iv_affine(f, ra, u, depth + 1), _point(ra, w)
        if inner is None or c is None:
            continue
        lp, a, b = inner
        if op.name == "arith.muli":
            return lp, a * c, b * c
        if u is x:
            return lp, a, b + c if op.name == "arith.addi" else b - c
        return (lp, a, b + c) if sign > 0 else None  # c - (a k + b) is not of the form kept here
    return None


def lanes_meet(
    f: Func,
    ra: RangeAnalysis,
    a: Op,
    ta: list[Term],
    b: Op,
    tb: list[Term],
    delta: int = 0,
    loop: Op | None = None,
    other_lane: bool = False,
) -> bool:
    """Whether some active lane of ``a`` and some active lane of ``b`` address the same element: ``a`` at offset
    ``sum(ta)``, ``b`` at ``delta + sum(tb)`` elements from one base; ``b`` in a later iteration of ``loop`` (None:
    in the same pass). Each term is a lane's integer times a stride fixed in the launch: the same term in both
    differs between two lanes by a multiple of its stride, which tells the two halves of a head apart where
    interval bounds cannot. A pointer advanced by a loop adds ``k * step`` at iteration k. With ``other_lane``,
    a meeting counts only between two different lanes of accesses that share their lane mapping (the same lane is
    one thread, which orders its own load before its store)."""
    terms = []
    moves: dict[int, list] = {}  # loop -> [loop, a's step, b's step]
    shared = _shared_lanes(f, ra, a, ta, b, tb) if other_lane else set()
    memo: dict = {}
    lanes: dict = {}  # shared lane term (by structure) -> [coef, a's (lo, hi), b's (lo, hi)]
    for sign, acc, ts in ((1, a, ta), (-1, b, tb)):
        bounds = mask_bounds(f, ra, acc)
        for t in ts:
            aff = iv_affine(f, ra, t) if isinstance(t, str) and uniform(f, t) else None
            if aff is not None:
                # a loop counter's term: a * k + b at iteration k (the crossing loop's k differs between a and b)
                lp, coef, const = aff
                m = moves.setdefault(id(lp), [lp, 0, 0])
                m[1 if sign > 0 else 2] += coef
                delta -= sign * const
                continue
            key = canon(f, t, {}, memo) if shared and isinstance(t, str) else None
            if key is not None and key in shared:
                lin = _linear(f, ra, t, bounds)
                if lin is None:
                    return True
                lanes.setdefault(key, [lin[0], None, None])[1 if sign > 0 else 2] = lin[1:]
                continue
            if isinstance(t, Advance):
                c = ra.get(t.step) if t.step is not None else None
                if not (isinstance(c, Iv) and c.lo == c.hi):
                    return True
                m = moves.setdefault(id(t.loop), [t.loop, 0, 0])
                m[1 if sign > 0 else 2] += c.lo
                continue
            lin = _linear(f, ra, t, bounds)
            if lin is None:
                return True
            c, lo, hi = lin
            terms.append((sign * c, lo, hi, None))
    for lp, ca, cb in moves.values():
        counted = ra.trips(lp)
        if counted is None:
            return True
        n = counted[1]
        # a at iteration k, b at iteration k + j: k * ca - (k + j) * cb
        terms.append((ca - cb, 0, max(n - 1, 0), None))
        if lp is loop:
            if n < 2:
                return False  # no later iteration
            terms.append((-cb, 1, n - 1, None))
    if not lanes:
        return solve(terms, delta) is not None
    # the same lane of both is one thread, which orders its own accesses: only two different lanes can race, so
    # some shared lane integer must differ between the two (x_a - x_b != 0)
    diffs = [(c, ra_[0] - rb[1], ra_[1] - rb[0]) for c, ra_, rb in lanes.values()]
    for i, (c, lo, hi) in enumerate(diffs):
        rest = [(cc, l2, h2, None) for j, (cc, l2, h2) in enumerate(diffs) if j != i]
        for part in ((1, hi), (lo, -1)):
            if part[0] <= part[1] and solve(terms + rest + [(c, part[0], part[1], None)], delta) is not None:
                return True
    return False


def _shared_lanes(f: Func, ra: RangeAnalysis, a: Op, ta: list[Term], b: Op, tb: list[Term]) -> set:
    """The per-lane terms two accesses share (by structure, see :func:`canon`) when they index one tile shape
    through the same lane expressions (only their uniform offsets differ, two ``tl.arange`` of one range count as
    one): this assumes Triton gives such accesses the same layout, so the same thread per lane. Empty when the
    terms do not tell every lane of the tile apart (a broadcast axis: several lanes, one element)."""
    shape = shape_of(f.types.get(a.operands[0], ""))
    if not shape or shape != shape_of(f.types.get(b.operands[0], "")):
        return set()
    memo: dict = {}
    la = Counter(canon(f, t, {}, memo) for t in ta if isinstance(t, str) and not uniform(f, t))
    lb = Counter(canon(f, t, {}, memo) for t in tb if isinstance(t, str) and not uniform(f, t))
    if not la or la != lb or not tells_lanes_apart(f, ra, a, ta):
        return set()
    return set(la)


def _injective(f: Func, ra: RangeAnalysis, name: str, depth: int = 0) -> bool:
    """Different lanes give different values: ``tl.arange`` moved by a uniform amount or scaled by a non-zero
    constant (``//``, ``%``, masks, min/max and loaded values map several lanes to one value)."""
    n = strip(f, name)
    op = f.defs.get(n)
    if op is None:
        return False
    if depth > INJECTIVE.limit:
        INJECTIVE.cut(f)
        return False
    if op.name == "tt.make_range":
        return True
    if op.name in ("arith.addi", "arith.subi") and len(op.operands) == 2:
        x, y = op.operands
        if not varying_axes(f, y):
            return _injective(f, ra, x, depth + 1)
        if not varying_axes(f, x) and op.name == "arith.addi":
            return _injective(f, ra, y, depth + 1)
        return False
    if op.name in ("arith.muli", "arith.shli") and len(op.operands) == 2:
        for x, c in ((op.operands[0], op.operands[1]), (op.operands[1], op.operands[0])):
            v = ra.get(c)  # one value per launch: any value but 0 keeps the lanes apart
            if not varying_axes(f, c) and isinstance(v, Iv) and (v.lo > 0 or v.hi < 0):
                return _injective(f, ra, x, depth + 1) and (op.name == "arith.muli" or c == op.operands[1])
    return False


def tells_lanes_apart(f: Func, ra: RangeAnalysis, access: Op, terms: list[Term]) -> bool:
    """No two active lanes of the access address one element: every axis of the tile with more than one lane is
    varied by some term, each per-lane term gives different lanes different values, and the terms cannot cancel
    between two lanes (``rows * stride + cols`` with cols narrower than the stride). Along a broadcast axis, or
    through ``offs // 2`` or a loaded index, several lanes (several threads) reach the same element."""
    ptr = access.operands[0]
    shape = shape_of(f.types.get(ptr, ""))
    if not varying_axes(f, ptr) >= {i for i, d in enumerate(shape) if d > 1}:
        return False
    bounds = mask_bounds(f, ra, access)
    diffs = []
    for t in terms:
        if not isinstance(t, str) or uniform(f, t) or not varying_axes(f, t):
            continue  # the same for every lane (a tile axis of one lane included)
        lin = _linear(f, ra, t, bounds) if _injective(f, ra, t) else None
        if lin is None:
            return False
        c, lo, hi = lin
        diffs.append((c, lo - hi, hi - lo))
    # two lanes differ in some term (by symmetry, a positive difference suffices): can the rest cancel it?
    for i, (c, _lo, hi) in enumerate(diffs):
        rest = [(cc, l2, h2, None) for j, (cc, l2, h2) in enumerate(diffs) if j != i]
        if hi >= 1 and solve(rest + [(c, 1, hi, None)], 0) is not None:
            return False
    return True


_ELEMENTWISE = {
    "arith.addi",
    "arith.subi",
    "arith.muli",
    "arith.shli",
    "arith.divsi",
    "arith.remsi",
    "arith.andi",
    "arith.ori",
    "arith.xori",
    "arith.maxsi",
    "arith.minsi",
    "arith.extsi",
    "arith.extui",
    "arith.trunci",
    "arith.select",
    "tt.addptr",
    "ttg.convert_layout",
}


def varying_axes(f: Func, name: str, memo: dict | None = None, depth: int = 0) -> set[int]:
    """The axes along which a tile value can differ between lanes (a broadcast axis does not; an op this walk does
    not know counts as varying along all its axes). Remembered per function."""
    if memo is None:
        memo = f.memo.setdefault("varying_axes", {})
    if name in memo:
        return memo[name]
    shape = shape_of(f.types.get(name, ""))
    everything = {i for i, d in enumerate(shape) if d > 1}
    op = f.defs.get(name)
    if not shape:
        out = set()
    elif depth > VARYING_AXES.limit:
        VARYING_AXES.cut(f)
        out = set()
    elif op is None or op.name == "tt.make_range":
        out = everything
    elif op.name in ("tt.splat", "arith.constant"):
        out = set()
    elif op.name == "tt.broadcast":
        out = varying_axes(f, op.operands[0], memo, depth + 1) & everything
    elif op.name == "tt.expand_dims":
        axis = op.attr_int("axis") or 0
        out = {i + (i >= axis) for i in varying_axes(f, op.operands[0], memo, depth + 1)}
    elif op.name in _ELEMENTWISE:
        out = set()
        for x in op.operands:
            if len(shape_of(f.types.get(x, ""))) == len(shape):
                out |= varying_axes(f, x, memo, depth + 1)
    else:
        out = everything
    memo[name] = out
    return out


def canon(f: Func, t: Term, values: dict[str, int], memo: dict, depth: int = 0):
    """A structural key for a term: equal keys compute equal values (kernel arguments by their value in ``values``
    where one is given, by name otherwise; loop variables and loaded values by name)."""
    if isinstance(t, Advance):
        return ("advance", id(t.loop), canon(f, t.step, values, memo, depth + 1) if t.step else None)
    if t in memo:
        return memo[t]
    op = f.defs.get(t)
    if t in values:
        key = ("value", values[t])
    elif op is None or op.name == "tt.load":
        key = ("name", t)
    elif depth > CANON.limit:
        CANON.cut(f)
        key = ("name", t)
    elif op.name == "arith.constant" or not op.operands:
        key = (op.name, op.text.split("loc(")[0].split("=", 1)[-1].strip())
    else:
        k = op.results.index(t) if t in op.results else 0
        key = (op.name, k, f.types.get(t, ""), tuple(canon(f, x, values, memo, depth + 1) for x in op.operands))
    memo[t] = key
    return key


def same_terms(f: Func, ta: list[Term], tb: list[Term], values: dict[str, int]) -> bool:
    memo: dict = {}
    return Counter(canon(f, t, values, memo) for t in ta) == Counter(canon(f, t, values, memo) for t in tb)
