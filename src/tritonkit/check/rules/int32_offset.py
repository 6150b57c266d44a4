"""int32-offset: a pointer offset computed in 32-bit integer arithmetic whose value can leave the int32 range."""

from __future__ import annotations

from ..mlir import Func, Op
from ..ranges import Iv, Overflow, RangeAnalysis, Unknown, is_int32_offset, offset_slice
from . import Context, Finding, RuleInfo, display

RULE = RuleInfo(
    "int32-offset", "error", "pointer offset overflows int32",
    "Triton computes `a * b` in int32 when both operands are int32; past 2^31 - 1 it wraps to a negative offset, "
    "so the access lands far from the intended element: silent corruption or an illegal-address fault.")

#: distinct launch bindings tried when looking for the case that shows an overflow
MAX_WITNESS_TRIES = 512

_SYM = {"arith.muli": "*", "arith.addi": "+", "arith.subi": "-", "arith.shli": "<<"}


def _fmt(v: int) -> str:
    return f"{v:,}"


def _origin(f: Func, name: str) -> str:
    """Where a value comes from, most telling first: a load, a program id, a loop variable, a kernel argument."""
    seen, stack, found = set(), [name], set()
    while stack and len(seen) < 256:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if v in f.block_args:
            blk, _k = f.block_args[v]
            found.add("loop" if blk.parent is not None else "arg")
            continue
        op = f.defs.get(v)
        if op is None:
            continue
        if op.name == "tt.load":
            found.add("load")
        elif op.name == "tt.get_program_id":
            found.add("pid")
        elif op.name == "arith.constant":
            found.add("const" if v == name else "")
        else:
            stack += op.operands
    for o in ("load", "pid", "loop", "arg"):
        if o in found:
            return o
    return "const" if "const" in found else "expr"


def _describe(f: Func, name: str, v, grid_note: str) -> str:
    label = display(name) or "the operand"
    if isinstance(v, Iv):
        if v.lo == v.hi:
            return f"`{label}` = {_fmt(v.lo)}"
        o = _origin(f, name)
        d = f.defs.get(name)
        if v.data and d is not None and d.name == "tt.load":
            return f"`{label}` is loaded from memory (any value of its type)"
        src = {"pid": f" ({grid_note})", "loop": " (loop variable)", "arg": " (kernel argument, largest seen)",
               "load": " (derived from a value loaded from memory)"}
        return f"`{label}` in [{_fmt(v.lo)}, {_fmt(v.hi)}]{src.get(o, '')}"
    return f"`{label}` unbounded"


_THROUGH = {"tt.splat", "tt.broadcast", "tt.expand_dims", "arith.extsi", "arith.extui", "tt.reshape",
            "ttg.convert_layout", "tt.trans"}


def _source_name(f: Func, name: str, stmt: str) -> str:
    """Look through shape ops for the value the user named (``row[:, None]`` -> ``row``): SSA names come from the
    statement being assigned, so the operands of ``x = tl.load(p + row[:, None] * s)`` are all called ``x``."""
    v = name
    for _ in range(16):
        d = display(v)
        if d and d != stmt:
            return v
        op = f.defs.get(v)
        if op is None or op.name not in _THROUGH or not op.operands:
            break
        v = op.operands[0]
    return v


def _cast_target(f: Func, op: Op, ov: Overflow) -> str | None:
    rank = {"load": 0, "pid": 1, "loop": 2, "arg": 3, "expr": 4, "?": 5}
    best = None
    for name, v in zip(op.operands, ov.operands):
        o = _origin(f, name)
        if o == "const":
            continue
        score = (rank.get(o, 5), -(max(abs(v.lo), abs(v.hi)) if isinstance(v, Iv) else 0))
        if best is None or score < best[0]:
            best = (score, name)
    return best[1] if best else None


def _message(f: Func, op: Op, ov: Overflow, grid) -> tuple[str, str]:
    stmt = display(op.results[0]) if op.results else ""
    a, b = (_source_name(f, x, stmt) for x in (op.operands + ["?", "?"])[:2])
    sym = _SYM.get(op.name, op.name)
    an, bn = display(a) or "…", display(b) or "…"
    for name, v in zip((a, b), ov.operands):
        if _origin(f, name) == "const" and isinstance(v, Iv):
            if name == a:
                an = _fmt(v.lo)
            else:
                bn = _fmt(v.lo)
    expr = f"{an} {sym} {bn}"
    peak = max(abs(ov.iv.lo), abs(ov.iv.hi))
    grid_note = f"program id < grid {grid}" if grid else "program id"
    parts = "; ".join(_describe(f, n, v, grid_note) for n, v in zip((a, b), ov.operands))
    msg = (f"`{expr}` is computed in int{ov.bits} and can reach {_fmt(peak)}, past the int32 limit of "
           f"{_fmt(2**31 - 1)}, before it offsets a pointer ({parts})")
    target = _cast_target(f, Op(op.name, op.results, [a, b], op.types, op.text, op.loc, op.block, op.pos), ov)
    if target is not None and display(target):
        t = display(target)
        fix = (f"cast `{t}` to tl.int64 before the {'multiply' if sym == '*' else 'arithmetic'}: "
               f"`{t}.to(tl.int64)`; cast program ids and loaded indices before they meet a stride")
    else:
        fix = "cast one operand to tl.int64 before this operation so the offset is computed in 64 bits"
    return msg, fix


def check(ctx: Context) -> list[Finding]:
    out = []
    for unit, f, _mod in ctx.units():
        ra = ctx.union_ranges(unit, f)
        cands: dict[int, Op] = {}
        for op in f.ops:
            if op.name != "tt.addptr" or len(op.operands) < 2 or not is_int32_offset(f, op.operands[1]):
                continue
            v = ra.get(op.operands[1])
            if isinstance(v, Unknown):
                ctx.note(unit, op, f"int32-offset could not bound this pointer offset: {v.reason}")
            for s in offset_slice(f, op.operands[1]):
                if s.pos in ra.overflows:
                    cands.setdefault(s.pos, s)
        if not cands:
            continue
        # the union over launches over-approximates; find a real launch that overflows
        witness: dict[int, tuple[object, Overflow]] = {}
        tried: set = set()
        for ln in unit.launches:
            sig = (ln.grid, tuple(sorted(ln.int_args.items())), tuple(sorted(ln.loaded_bounds.items())))
            if sig in tried:
                continue
            tried.add(sig)
            if len(tried) > MAX_WITNESS_TRIES:
                break
            one = RangeAnalysis(f, ctx.bindings(unit, f, [ln])).run()
            for pos in cands:
                if pos in one.overflows and pos not in witness:
                    witness[pos] = (ln, one.overflows[pos])
            if len(witness) == len(cands):
                break
        for pos, (ln, ov) in sorted(witness.items()):
            op = cands[pos]
            file, line, col = ctx.frame(unit, op)
            msg, fix = _message(f, op, ov, ln.grid)
            out.append(Finding(RULE.id, RULE.severity, unit.kernel.name, file, line, msg, ln.case, fix=fix, col=col))
    return out
