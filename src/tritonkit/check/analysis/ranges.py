"""Integer range analysis over TTIR.

Every integer SSA value gets an interval: program ids from the captured grids, ``tl.arange`` from its bounds,
constants, integer kernel arguments from the values seen at launch, loaded integers from declared bounds or the
whole range of their type. Intervals propagate through arithmetic, casts, shape ops, ``select`` and loops (a
loop-carried integer is extrapolated over the trip count). An i32/i16/i8 ``addi``/``subi``/``muli``/``shli``
whose exact result leaves its type is an overflow; only the first in a chain is kept (its operands are in range).

A loaded value is any value of its type (``data``). Values derived from it carry a ``scale``: how many times a
loaded value they can be (``slot // 16`` is 1/16 of one, ``(slot // 16) * 16384`` 1024 times one). Adding to a
data value is not reported, nor is a product that stays within the size of a loaded value (``(q // BLOCK) *
BLOCK``): the loaded index itself is what the analysis cannot know. A product that scales it past that, with a
stride or a block size, is reported: that is the KV-cache bug.

What each op does to an interval is a table of transfer functions (:mod:`.transfer`); this module walks the
function, its branches and loops, and keeps the overflows.
"""

from __future__ import annotations

import dataclasses

from .budgets import NARROW_OPERANDS
from .conditions import Diffs, Fact, block_facts, facts, narrow, possible, root, same_values
from .intervals import Iv, Unknown, Val, tdiv, trip_count, type_range
from ..ir.mlir import Func, Op, int_bits, shape_of
from .pointers import decompose, strip
from .transfer import TRANSFER, UNMODELLED


@dataclasses.dataclass
class Bindings:
    """What one launch (or the union of several) tells the analysis."""

    grid: tuple[int, int, int] | None
    args: dict[str, tuple[int, int]]  # integer IR argument -> (min, max) seen
    loaded: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)  # pointer arg -> loaded bounds
    #: pointer arg -> largest step (None: unknown) of an array declared non-decreasing
    nondecreasing: dict[str, int | None] = dataclasses.field(default_factory=dict)
    #: loads with no declared bounds hold values >= 0 (what int-division-sign assumes of an unknown index)
    loads_nonneg: bool = False


@dataclasses.dataclass
class Overflow:
    op: Op
    iv: Iv
    operands: list[Val]
    bits: int


#: ops whose operands a bound on the result narrows (see :meth:`RangeAnalysis._bound`)
_BACK = {"arith.minsi", "arith.maxsi", "arith.addi", "arith.subi"}


class RangeAnalysis:
    def __init__(self, f: Func, b: Bindings):
        self.f = f
        self.b = b
        self.env: dict[str, Val] = {}
        self.overflows: dict[int, Overflow] = {}  # op.pos -> first-in-chain overflow
        self.diffs = Diffs()  # difference bounds from the branch conditions in force
        self._same: dict[str, list[str]] | None = None
        self._group: dict[str, str] = {}  # value -> the root of its group in _same
        self._active: dict[str, tuple[int, int]] = {}  # group root -> bounds the conditions in force put on it
        self._dead = 0  # > 0 inside a branch whose condition these bindings never meet: it reports no overflow
        self.seen: dict[int, list[Val]] = {}  # op position -> its operands' values where it ran

    # -- driver ---------------------------------------------------------------------------------------------
    def run(self) -> RangeAnalysis:
        for name, t, _loc in self.f.args:
            bits = int_bits(t)
            if bits is None:
                self.env[name] = None
            elif bits == 1:
                self.env[name] = Iv(0, 1)
            elif name in self.b.args:
                lo, hi = self.b.args[name]
                self.env[name] = Iv(lo, hi)
            else:
                self.env[name] = Unknown(f"no value was captured for argument `{name}`")
        blocks = self.f.blocks or [self.f.body]
        in_force = block_facts(self.f)
        for blk in blocks:
            for a, _t in blk.args if blk is not self.f.body else ():
                self.env[a] = Unknown("argument of a branch target block")
            saved = self._assume(in_force.get(id(blk), []))
            self.block(blk.ops)
            self._restore(saved)
        return self

    def _assume(self, fs: list[Fact]):
        """Narrow the intervals (and record the differences) the facts imply; returns what :meth:`_restore` needs."""
        saved_env: dict[str, Val] = {}
        saved_diffs = dict(self.diffs.low)
        saved_active = dict(self._active)
        dead = False
        if self._same is None:
            # the IR's, not the bindings': one walk per function, however many launches are analysed
            self._same = self.f.memo.get("same_values")
            if self._same is None:
                self._same = self.f.memo["same_values"] = same_values(self.f)
            self._group = {n: r for r, names in self._same.items() for n in names}
        for fc in fs:
            a, b = self.get(fc.a), self.get(fc.b)
            a, b = (a if isinstance(a, Iv) else None), (b if isinstance(b, Iv) else None)
            if a is not None and b is not None and not possible(a, fc.pred, b):
                dead = True
            self.diffs.assume(self.f, fc, a, b)
            r = narrow(a, fc.pred, b) if a is not None and b is not None else None
            for name, new in zip((fc.a, fc.b), r or ()):
                self._bound(name, new.lo, new.hi, saved_env)
        self._dead += dead
        return saved_env, saved_diffs, dead, saved_active

    def _bound(self, name: str, lo: int, hi: int, saved_env: dict, depth: int = 0) -> None:
        """``name`` is in [lo, hi] where the facts hold: narrow it, every value equal to it, and the operands it was
        computed from (``min(a, b) > 0`` makes ``a`` and ``b`` positive; ``x - y >= 1`` bounds ``x`` and ``y``)."""
        r0 = self._group.get(root(self.f, name), root(self.f, name))
        plo, phi = self._active.get(r0, (lo, hi))
        self._active[r0] = (max(plo, lo), min(phi, hi))
        for n in self._same.get(r0, [r0]):
            old = self.env.get(n)
            if isinstance(old, Iv) and max(old.lo, lo) <= min(old.hi, hi):
                saved_env.setdefault(n, old)
                self.env[n] = dataclasses.replace(old, lo=max(old.lo, lo), hi=min(old.hi, hi))
        d = self.f.defs.get(root(self.f, name))
        if d is None or len(d.operands) < 2 or d.name not in _BACK:
            return
        if depth >= NARROW_OPERANDS.limit:
            NARROW_OPERANDS.cut(self.f)
            return
        x, y = d.operands[:2]
        vx, vy, v = self.get(x), self.get(y), self.get(d.results[0]) if d.results else None
        if not (isinstance(vx, Iv) and isinstance(vy, Iv) and isinstance(v, Iv)) or v.over:
            return  # a result that may have wrapped says nothing of its operands
        inf = float("inf")
        if d.name == "arith.minsi":
            pairs = [(x, lo, inf), (y, lo, inf)]
        elif d.name == "arith.maxsi":
            pairs = [(x, -inf, hi), (y, -inf, hi)]
        elif d.name == "arith.addi":
            pairs = [(x, lo - vy.hi, hi - vy.lo), (y, lo - vx.hi, hi - vx.lo)]
        else:  # subi: x - y in [lo, hi]
            self.diffs.add(root(self.f, x), root(self.f, y), lo)
            pairs = [(x, lo + vy.lo, hi + vy.hi), (y, vx.lo - hi, vx.hi - lo)]
        for n, nlo, nhi in pairs:
            cur = self.get(n)
            if isinstance(cur, Iv) and (nlo > cur.lo or nhi < cur.hi):
                self._bound(n, int(max(nlo, cur.lo)), int(min(nhi, cur.hi)), saved_env, depth + 1)

    def where(self, cond: str, holds: bool, name: str, v: Val) -> Val:
        """``v`` (the value of ``name``) where the i1 ``cond`` is ``holds``."""
        if not isinstance(v, Iv):
            return v
        r0 = root(self.f, name)
        for fc in facts(self.f, cond, holds):
            a, b = self.get(fc.a), self.get(fc.b)
            if isinstance(a, Iv) and isinstance(b, Iv) and (r := narrow(a, fc.pred, b)) is not None:
                for side, new in zip((fc.a, fc.b), r):
                    if strip(self.f, side) == strip(self.f, name) or root(self.f, side) == r0:
                        if max(v.lo, new.lo) <= min(v.hi, new.hi):
                            v = dataclasses.replace(v, lo=max(v.lo, new.lo), hi=min(v.hi, new.hi))
        return v

    def _restore(self, saved) -> None:
        env, diffs, dead, active = saved
        self.env.update(env)
        self.diffs.low = diffs
        self._dead -= dead
        self._active = active

    def get(self, name: str) -> Val:
        return self.env.get(name, Unknown(f"value %{name} is defined where the analysis did not look"))

    def trips(self, loop: Op) -> tuple[int, int] | None:
        """(fewest, most) iterations an ``scf.for`` makes in these bindings (None: not an scf.for, or unknown)."""
        if loop.name != "scf.for" or len(loop.operands) < 3:
            return None
        return trip_count(*(self.get(x) for x in loop.operands[:3]))

    def block(self, ops: list[Op]) -> None:
        for op in ops:
            try:
                self.op(op)
            except (ZeroDivisionError, ValueError, IndexError, KeyError) as e:
                self._set(op, Unknown(f"`{op.name}` could not be evaluated ({type(e).__name__})"))

    def _set(self, op: Op, v: Val | list[Val]) -> None:
        vals = v if isinstance(v, list) else [v] * len(op.results)
        for r, t, x in zip(op.results, op.types, vals):
            # a value equal to one a condition in force bounds (a reload of a guarded slot) is bounded too
            g = self._group.get(r) if self._active else None
            if isinstance(x, Iv) and g in self._active:
                lo, hi = self._active[g]
                if max(x.lo, lo) <= min(x.hi, hi):
                    x = dataclasses.replace(x, lo=max(x.lo, lo), hi=min(x.hi, hi))
            self.env[r] = x if int_bits(t) is not None else None

    # -- ops ------------------------------------------------------------------------------------------------
    def operands(self, op: Op) -> list[Val]:
        """The operands' values where ``op`` ran: inside a branch they are narrowed by its condition, which
        :meth:`get` (the values after the analysis) no longer is."""
        return self.seen.get(op.pos) or [self.get(x) for x in op.operands]

    def op(self, op: Op) -> None:
        n = op.name
        if not op.regions:
            self.seen[op.pos] = [self.get(x) for x in op.operands]
        if n == "scf.for":
            return self._for(op)
        if n == "scf.if":
            return self._if(op)
        if n == "scf.while":
            return self._while(op)
        if n in ("tt.reduce", "tt.scan"):
            return self._reduce(op)
        if op.regions:
            for region in op.regions:
                for blk in region:
                    # a Gluon warp_specialize partition takes the op's operands as its arguments, in order
                    bound = n == "ttg.warp_specialize" and len(blk.args) == len(op.operands)
                    for k, (a, _t) in enumerate(blk.args):
                        self.env[a] = self.get(op.operands[k]) if bound else Unknown(f"argument of `{n}`")
                    self.block(blk.ops)
            self._set(op, Unknown(f"`{n}` is not understood by the range analysis"))
            return
        if not op.results:
            return
        bits = int_bits(op.types[0])
        if bits is None:
            self._set(op, None)
            return
        if bits == 1:
            self._set(op, Iv(0, 1))
            return
        self._set(op, self._scalar(op, bits))

    def _scalar(self, op: Op, bits: int) -> Val:
        return TRANSFER.get(op.name, UNMODELLED)(self, op, bits)

    def arith(self, op: Op, a: Iv, b: Iv, bits: int) -> Iv:
        """``addi``/``subi``/``muli``/``shli``: the exact result, and an overflow recorded where it leaves its type."""
        n = op.name
        if n == "arith.addi":
            lo, hi = a.lo + b.lo, a.hi + b.hi
        elif n == "arith.subi":
            lo, hi = a.lo - b.hi, a.hi - b.lo
            if (step := self._step_diff(op)) is not None:
                # `a[j] - a[i]` with j >= i of a non-decreasing array: a length, not any difference of two values
                return Iv(step[0], step[1], a.data or b.data, a.over or b.over, max(a.scale, b.scale))
            if (c := self._rem_of(op)) is not None:
                # `x - x % c` is `x` rounded toward zero to a multiple of c: what an unrolled loop's bound computes
                # (`tl.range(..., loop_unroll_factor=4)`); the two intervals alone lose that they are one x
                lo, hi = c * tdiv(a.lo, c), c * tdiv(a.hi, c)
            # inside `if y < x:` the difference x - y is at least 1, and `max(x, lo) - lo` or a loop's `j - lo` is at
            # least 0, which the two intervals alone do not say
            dlo, dhi = self.diffs.bound(self.f, op.operands[0], op.operands[1])
            if max(lo, dlo if dlo is not None else lo) <= min(hi, dhi if dhi is not None else hi):
                lo, hi = max(lo, dlo if dlo is not None else lo), min(hi, dhi if dhi is not None else hi)
        else:
            if n == "arith.shli":
                b = Iv(1 << max(min(b.lo, bits - 1), 0), 1 << max(min(b.hi, bits - 1), 0))
            c = (a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi)
            lo, hi = min(c), max(c)
        tlo, thi = type_range(bits)
        data, over = a.data or b.data, a.over or b.over
        if n in ("arith.addi", "arith.subi"):
            scale = max(a.scale, b.scale)
        elif a.data and b.data:
            scale = float("inf")
        else:
            d, other = (a, b) if a.data else (b, a)
            scale = d.scale * max(abs(other.lo), abs(other.hi)) if data else 0.0
        if tlo <= lo and hi <= thi:
            return Iv(lo, hi, data, over, scale)
        if data and (n in ("arith.addi", "arith.subi") or scale <= 1):
            # the loaded index itself is what overflows here, not this arithmetic
            return Iv(max(lo, tlo), min(hi, thi), True, over, scale)
        if not over and bits <= 32 and not self._dead:
            prev = self.overflows.get(op.pos)
            iv = Iv(lo, hi)
            if prev is not None:
                iv = iv.hull(prev.iv)
            self.overflows[op.pos] = Overflow(op, iv, [a, b], bits)
        return Iv(lo, hi, data, True, scale)

    def _rem_of(self, op: Op) -> int | None:
        """``c`` when ``op`` is ``x - x % c`` with ``c`` a constant > 0 (a C remainder, or an unsigned one of an
        ``x`` >= 0), else None."""
        x = op.operands[0]
        r = self.f.defs.get(op.operands[1])
        if r is None or r.name not in ("arith.remsi", "arith.remui") or len(r.operands) < 2 or r.operands[0] != x:
            return None
        c, v = self.get(r.operands[1]), self.get(x)
        if not (isinstance(c, Iv) and c.lo == c.hi > 0 and isinstance(v, Iv)):
            return None
        return c.lo if r.name == "arith.remsi" or v.lo >= 0 else None

    def _step_diff(self, op: Op) -> tuple[int, int] | None:
        """Bounds of ``x - y`` where both are loads of one array and ``x``'s index is provably at least ``y``'s:
        an array two of whose elements a kernel subtracts holds cumulative offsets (``cu_seqlens``,
        ``query_start_loc``, ``kv_indptr``), declared ``nondecreasing`` or not, and the difference is a length,
        >= 0 (bounded above by a declared step or a declared ``loaded_bounds``); None otherwise."""
        x, y = (self.f.defs.get(root(self.f, v)) for v in op.operands[:2])
        if x is None or y is None or x.name != "tt.load" or y.name != "tt.load" or not op.results:
            return None
        (bx, tx), (by, ty) = decompose(self.f, x.operands[0]), decompose(self.f, y.operands[0])
        if bx is None or bx != by:
            return None
        rest_y = [strip(self.f, t) for t in ty if isinstance(t, str)]
        gap = Iv(0, 0)
        for t in tx:
            if not isinstance(t, str):
                return None
            if strip(self.f, t) in rest_y:
                rest_y.remove(strip(self.f, t))
                continue
            v = self.get(t)
            if not isinstance(v, Iv) or v.data:
                return None
            gap = Iv(gap.lo + v.lo, gap.hi + v.hi)
        for t in rest_y:
            v = self.get(t)
            if not isinstance(v, Iv) or v.data:
                return None
            gap = Iv(gap.lo - v.hi, gap.hi - v.lo)
        if len(ty) != len([t for t in ty if isinstance(t, str)]) or gap.lo < 0:
            return None  # the minuend's index may be the smaller one
        step = self.b.nondecreasing.get(bx)
        # the elements' own width bounds a difference of two of them, whatever width it is computed in
        bits = int_bits(self.f.types.get(x.results[0], "")) or 32
        hi = type_range(bits)[1] if step is None else min(type_range(bits)[1], step * gap.hi)
        if bx in self.b.loaded:  # two elements of the declared range are at most its width apart
            hi = min(hi, self.b.loaded[bx][1] - self.b.loaded[bx][0])
        return 0, hi

    # -- structured control flow ----------------------------------------------------------------------------
    def _yield_vals(self, blk_ops: list[Op], term: str = "scf.yield") -> list[Val]:
        last = blk_ops[-1] if blk_ops else None
        if last is None or last.name != term:
            return []
        vals = [self.get(x) for x in last.operands]
        return vals[1:] if term == "scf.condition" else vals

    def _fixpoint(self, run, inits: list[Val], trips: int | None, what: str) -> tuple[list[Val], list[Val]]:
        """An invariant for a loop's carried values: ``run(values) -> yielded values`` is the body. Tries the
        initial values, a linear extrapolation over the trip count, a few hull steps and the envelope of the initial
        values, each checked by one more pass over the body; integers it cannot bound become Unknown. Overflows seen
        in a rejected attempt are forgotten (the attempt may be wider than what the loop really computes)."""

        def grows(cur, ys):
            return any(isinstance(a, Iv) and not (isinstance(y, Iv) and y.within(a)) for a, y in zip(cur, ys))

        ys = run(inits)
        if not grows(inits, ys):
            return inits, ys
        first = ys
        if trips is not None:
            saved = dict(self.overflows)
            ext = []
            for a0, y in zip(inits, first):
                if isinstance(a0, Iv) and isinstance(y, Iv):
                    d_lo, d_hi = min(0, y.lo - a0.lo), max(0, y.hi - a0.hi)
                    ext.append(
                        Iv(
                            a0.lo + d_lo * trips,
                            a0.hi + d_hi * trips,
                            a0.data or y.data,
                            a0.over or y.over,
                            max(a0.scale, y.scale) * (trips if y.data else 1),
                        )
                    )
                else:
                    ext.append(a0)
            ys = run(ext)
            linear = all(
                not isinstance(e, Iv)
                or not isinstance(a0, Iv)
                or (
                    isinstance(y, Iv)
                    and isinstance(y1, Iv)
                    and y.hi - e.hi <= max(0, y1.hi - a0.hi)
                    and e.lo - y.lo <= max(0, a0.lo - y1.lo)
                )
                for e, y, a0, y1 in zip(ext, ys, inits, first)
            )
            if linear:
                return [e.hull(y) if isinstance(e, Iv) and isinstance(y, Iv) else e for e, y in zip(ext, ys)], ys
            self.overflows = saved
        cur = list(inits)
        for _ in range(3):
            cur = [a.hull(y) if isinstance(a, Iv) and isinstance(y, Iv) else a for a, y in zip(cur, ys)]
            ys = run(cur)
            if not grows(cur, ys):
                return cur, ys
        ivs = [a for a in inits if isinstance(a, Iv)]
        if ivs:
            env = ivs[0]
            for v in ivs[1:]:
                env = env.hull(v)
            saved = dict(self.overflows)
            cand = [env if isinstance(a, Iv) else a for a in inits]
            ys = run(cand)
            if not grows(cand, ys):
                return cand, ys
            self.overflows = saved
        # widen only what still grows: a value whose hull held (a tile index taken afresh each iteration beside a
        # counter that grows without bound) keeps it, checked by one more pass with the others unknown
        cand = list(cur)
        saved = dict(self.overflows)
        ys = run(cand)  # what the hull yields (the envelope's pass above ran other values)
        self.overflows = saved
        for _ in range(2):
            cand = [
                Unknown(f"integer carried by {what} that the analysis could not bound")
                if isinstance(a, Iv) and not (isinstance(y, Iv) and y.within(a))
                else a
                for a, y in zip(cand, ys)
            ]
            saved = dict(self.overflows)
            ys = run(cand)
            if not grows(cand, ys):
                return cand, ys
            self.overflows = saved
        cand = [
            Unknown(f"integer carried by {what} that the analysis could not bound") if isinstance(a, Iv) else a
            for a in inits
        ]
        return cand, run(cand)

    def _for(self, op: Op) -> None:
        body = op.regions[0][0]
        lb, ub, st = (self.get(x) for x in op.operands[:3])
        inits = [self.get(x) for x in op.operands[3:]]
        counted = trip_count(lb, ub, st)
        trips = counted[1] if counted is not None else None
        if counted is not None:
            iv: Val = Iv(lb.lo, max(lb.lo, ub.hi - 1), lb.data or ub.data, lb.over or ub.over, max(lb.scale, ub.scale))
        else:
            bad = next((v for v in (lb, ub, st) if isinstance(v, Unknown)), None)
            iv = bad or Unknown("loop bounds or step not known to be positive")
        names = [a for a, _ in body.args]
        if isinstance(st, Iv) and st.lo >= 1:
            # counting up from lb: j - lb >= 0 in the body (`it = j - lo` of a pipeline's stage index)
            self.diffs.add(root(self.f, names[0]), root(self.f, op.operands[0]), 0)

        def run(vals):
            self.env[names[0]] = iv
            for a, v in zip(names[1:], vals):
                self.env[a] = v
            self.block(body.ops)
            return self._yield_vals(body.ops)

        cur, ys = self._fixpoint(run, inits, trips, "a loop")
        res: list[Val] = []
        for k, a in enumerate(cur):
            y = ys[k] if k < len(ys) else None
            if isinstance(a, Iv) and isinstance(y, Iv):
                res.append(a.hull(y))
            elif isinstance(y, Unknown):
                res.append(y)
            else:
                res.append(a)
        if op.results:
            self._set(op, res[: len(op.results)])

    def _if(self, op: Op) -> None:
        outs: list[list[Val]] = []
        cond = op.operands[0] if op.operands else None
        for k, region in enumerate(op.regions):
            # the then-region runs where the condition holds, the else-region where it does not
            saved = self._assume(facts(self.f, cond, k == 0) if cond is not None and k < 2 else [])
            for blk in region:
                self.block(blk.ops)
            if not saved[2]:  # a branch that never runs yields nothing
                outs.append(self._yield_vals(region[-1].ops) if region else [])
            self._restore(saved)
        res: list[Val] = []
        for k in range(len(op.results)):
            vals = [o[k] for o in outs if k < len(o)]
            u = next((v for v in vals if isinstance(v, Unknown)), None)
            ivs = [v for v in vals if isinstance(v, Iv)]
            if u is not None or not ivs:
                res.append(u or None)
            else:
                h = ivs[0]
                for v in ivs[1:]:
                    h = h.hull(v)
                res.append(h)
        if op.results:
            self._set(op, res)

    def _while(self, op: Op) -> None:
        before = op.regions[0][0]
        after = op.regions[1][0] if len(op.regions) > 1 else None

        def run(vals):
            for (a, _t), v in zip(before.args, vals):
                self.env[a] = v
            self.block(before.ops)
            fwd = self._refine(before.ops, self._yield_vals(before.ops, "scf.condition"))
            if after is None:
                return list(vals)
            for (a, _t), v in zip(after.args, fwd):
                self.env[a] = v
            self.block(after.ops)
            return self._yield_vals(after.ops)

        self._fixpoint(run, [self.get(x) for x in op.operands], None, "an scf.while loop")
        self._set(op, self._yield_vals(before.ops, "scf.condition")[: len(op.results)] or Unknown("scf.while"))

    def _refine(self, before_ops: list[Op], fwd: list[Val]) -> list[Val]:
        """Values an ``scf.while`` hands to its body satisfy its condition: ``lo < hi`` bounds both."""
        cond = before_ops[-1] if before_ops else None
        if cond is None or cond.name != "scf.condition" or not cond.operands:
            return fwd
        new: dict[str, Iv] = {}
        for fc in facts(self.f, cond.operands[0], True):
            a, b = self.get(fc.a), self.get(fc.b)
            if isinstance(a, Iv) and isinstance(b, Iv) and (r := narrow(a, fc.pred, b)) is not None:
                new[fc.a], new[fc.b] = r
        return [new[name] if name in new and isinstance(v, Iv) else v for name, v in zip(cond.operands[1:], fwd)]

    def _reduce(self, op: Op) -> None:
        combine = {o.name for blk in op.regions[0] for o in blk.ops} if op.regions else set()
        axis = op.attr_int("axis") or 0
        res: list[Val] = []
        for k, r in enumerate(op.results):
            src = self.get(op.operands[k]) if k < len(op.operands) else None
            if not isinstance(src, Iv):
                res.append(src)
                continue
            shape = shape_of(self.f.types.get(op.operands[k], ""))
            count = shape[axis] if axis < len(shape) and shape[axis] > 0 else 1
            if "arith.addi" in combine:
                lo, hi = src.lo * count, src.hi * count
                sc = src.scale * count
                res.append(
                    Iv(min(lo, src.lo), max(hi, src.hi), src.data, src.over, sc)
                    if op.name == "tt.scan"
                    else Iv(lo, hi, src.data, src.over, sc)
                )
            elif combine & {"arith.muli", "arith.ori", "arith.xori", "arith.andi", "tt.call"}:
                res.append(Unknown(f"`{op.name}` with a combine function the analysis does not model"))
            else:
                res.append(src)
        self._set(op, res)
