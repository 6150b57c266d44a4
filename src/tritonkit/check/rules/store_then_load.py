"""store-then-load: a load that may read what the same program stored earlier, with no barrier between.

Triton does not order a ``tl.store`` before a later ``tl.load`` of the same global memory within one program: the
two may use different thread-to-element layouts, so one thread can read an element another thread has not
written yet. ``tl.debug_barrier()`` between them is the fix.
"""

from __future__ import annotations

import re
from collections import Counter

from ..mlir import Block, Func, Op, shape_of
from ..ranges import LOOP_CARRIED, Iv, RangeAnalysis, base_arg
from . import Context, Finding, RuleInfo

RULE = RuleInfo(
    "store-then-load", "error", "load may read this program's earlier store without a barrier",
    "Triton does not order a global store before a later load in the same program: the load may be done by a "
    "different thread than the store of the same element, and read the old value.")

# the barrier op has been `gpu.barrier` through Triton 3.x; accept the names other releases print
_BARRIER = re.compile(r"^(gpu\.barrier|tt\.(debug_)?barrier|ttg\.barrier|ttng\.barrier|nvvm\.barrier0?|"
                      r"triton_gpu\.barrier)$")
_LOOPS = ("scf.for", "scf.while")
_OFF_THROUGH = {"tt.splat", "tt.broadcast", "tt.expand_dims", "tt.reshape", "tt.trans", "ttg.convert_layout",
                "arith.extsi", "arith.extui"}
INF = float("inf")


def is_barrier(name: str) -> bool:
    return bool(_BARRIER.match(name))


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


def _exclusive(s: Op, ld: Op) -> bool:
    ps, pl = _region_path(s), _region_path(ld)
    for k, (anc, r) in ps.items():
        if k in pl and anc.name == "scf.if" and pl[k][1] != r:
            return True
    return False


def _common_loop(s: Op, ld: Op) -> Op | None:
    pl = {id(a) for a in ld.ancestors()}
    return next((a for a in s.ancestors() if a.name in _LOOPS and id(a) in pl), None)


def _protected(s: Op, ld: Op, loop: Op | None, barriers: list[Op]) -> bool:
    for b in barriers:
        if loop is None:
            if s.pos < b.pos < ld.pos and (_contains(b.block, s.block) or _contains(b.block, ld.block)):
                return True
        elif loop.pos < b.pos <= loop.end:
            if (b.pos > s.pos and _contains(b.block, s.block)) or (b.pos < ld.pos and _contains(b.block, ld.block)):
                return True
    return False


def _decompose(f: Func, name: str) -> tuple[str | None, list[str]]:
    """(kernel argument the pointer is based on, offset terms added to it)."""
    offsets: list[str] = []
    base = base_arg(f, name, offsets)
    return base, [t for o in offsets for t in (_terms(f, o) if o != LOOP_CARRIED else [o])]


def _terms(f: Func, name: str) -> list[str]:
    op = f.defs.get(name)
    if op is not None and op.name == "arith.addi":
        return _terms(f, op.operands[0]) + _terms(f, op.operands[1])
    if op is not None and op.name in _OFF_THROUGH:
        return _terms(f, op.operands[0])
    return [name]


def _uniform(f: Func, name: str) -> bool:
    return not shape_of(f.types.get(name, "")) and not name.startswith("<")


def _inside(f: Func, name: str, loop: Op) -> bool:
    if name in f.block_args:
        blk, _ = f.block_args[name]
        return blk.parent is not None and (blk.parent is loop or loop in blk.parent.ancestors())
    op = f.defs.get(name)
    return op is not None and loop.pos < op.pos <= loop.end


def _span(ra: RangeAnalysis, terms) -> tuple[float, float]:
    lo = hi = 0
    for t in terms:
        v = ra.get(t) if not t.startswith("<") else None
        if not isinstance(v, Iv):
            return -INF, INF
        lo, hi = lo + v.lo, hi + v.hi
    return lo, hi


def _overlap(f: Func, ra: RangeAnalysis, s: Op, ld: Op, loop: Op | None,
             aliases: set) -> tuple[str, tuple[str, str] | None] | None:
    """What the load may read of the store, and the aliased argument pair that makes it so (None: one argument),
    or None when they cannot overlap."""
    ps, pl = s.operands[0], ld.operands[0]
    if ps == pl and (loop is None or not _inside(f, ps, loop)):
        return "the same pointer", None
    bs, ts = _decompose(f, ps)
    bl, tl_ = _decompose(f, pl)
    if bs is None or bl is None:
        return None
    if bs != bl:
        pair = tuple(sorted((bs, bl)))
        if pair in aliases:
            return f"`{bl}`, which is a view of the same memory as `{bs}` in this case", pair
        return None
    cs, cl = Counter(ts), Counter(tl_)
    for t in list(cs):
        if t in cl and _uniform(f, t):
            if loop is not None and _inside(f, t, loop):
                return None  # each iteration addresses its own slice
            k = min(cs[t], cl[t])
            cs[t] -= k
            cl[t] -= k
    a_lo, a_hi = _span(ra, cs.elements())
    b_lo, b_hi = _span(ra, cl.elements())
    if a_lo <= b_hi and b_lo <= a_hi:
        return f"overlapping offsets of `{bs}`", None
    return None


def check(ctx: Context) -> list[Finding]:
    out = []
    for unit, f, _mod in ctx.units():
        stores = [op for op in f.ops if op.name == "tt.store"]
        if not stores:
            continue
        loads = [op for op in f.ops if op.name == "tt.load"]
        barriers = [op for op in f.ops if is_barrier(op.name)]
        names = [a for a, _t, _l in f.args]
        ir_of = dict(zip(unit.ir_params, names)) if len(names) == len(unit.ir_params) else {}
        alias_launch: dict[tuple, object] = {}
        for ln in unit.launches:
            for a, b in ln.aliases:
                alias_launch.setdefault(tuple(sorted((ir_of.get(a, a), ir_of.get(b, b)))), ln)
        aliases = set(alias_launch)
        ra = None
        for ld in loads:
            for s in stores:
                loop = None if s.pos < ld.pos else _common_loop(s, ld)
                if s.pos > ld.pos and loop is None:
                    continue
                if _exclusive(s, ld) or not f.reaches(f.top_block(s), f.top_block(ld)) \
                        or _protected(s, ld, loop, barriers):
                    continue
                ra = ra or ctx.union_ranges(unit, f)
                hit = _overlap(f, ra, s, ld, loop, aliases)
                if hit is None:
                    continue
                why, pair = hit
                file, line, col = ctx.frame(unit, ld)
                _sf, sline, _ = ctx.frame(unit, s)
                when = (f"in the next iteration of the loop at line {ctx.frame(unit, loop)[1]}" if loop is not None
                        else "earlier in the same program")
                msg = (f"this load reads {why} that the store at line {sline} wrote {when}, with no "
                       f"tl.debug_barrier() between them: a thread may read an element another thread has not "
                       f"stored yet")
                fix = (f"put tl.debug_barrier() between the store (line {sline}) and this load, or keep the stored "
                       f"values in registers instead of reading them back")
                # an aliasing finding shows the case whose launch passed the two views
                exposer = alias_launch.get(pair) if pair else None
                exposer = exposer or (unit.launches[0] if unit.launches else None)
                case = exposer.case if exposer is not None else {}
                out.append(Finding(RULE.id, RULE.severity, unit.kernel.name, file, line, msg, case, fix=fix,
                                   col=col, tag=f"store@{sline}"))
                break
    return out
