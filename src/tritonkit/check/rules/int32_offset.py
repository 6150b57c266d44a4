"""int32-offset: a pointer offset computed in 32-bit integer arithmetic whose value can leave the int32 range."""

from __future__ import annotations

import ast
import re

from ..analysis.addresses import mask_bounds
from ..analysis.budgets import ORIGIN, RING_SLICE
from ..capture.launches import distinct
from ..ir.mlir import Func, Op, int_bits
from ..analysis.pointers import THROUGH, base_arg, is_int32_offset, offset_slice, strip
from ..analysis.intervals import Iv, Unknown, type_range
from ..analysis.ranges import Overflow
from ..ir.source import binop_at, call_at, dedent_col, within
from . import Context, Finding, RuleInfo, display, source_line, users_of

RULE = RuleInfo(
    "int32-offset",
    "error",
    "pointer offset overflows int32",
    "Triton computes `a * b` in int32 when both operands are int32; past 2^31 - 1 it wraps to a negative offset "
    "(a uint32 one wraps past 2^32 - 1 to a small one), so the access lands far from the intended element: silent "
    "corruption or an illegal-address fault.",
)

#: distinct launch bindings tried when looking for the case that shows an overflow
MAX_WITNESS_TRIES = 512

_SYM = {"arith.muli": "*", "arith.addi": "+", "arith.subi": "-", "arith.shli": "<<"}


def _fmt(v: int) -> str:
    return f"{v:,}"


def _origin(f: Func, name: str) -> str:
    """Where a value comes from, most telling first: a load, a program id, a loop variable, a kernel argument."""
    seen, stack, found = set(), [name], set()
    while stack and len(seen) < ORIGIN.limit:
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
    ORIGIN.stopped(f, stack, seen)
    for o in ("load", "pid", "loop", "arg"):
        if o in found:
            return o
    return "const" if "const" in found else "expr"


def _loaded_via(f: Func, name: str) -> list[str]:
    """The kernel's pointer parameters through which the loads feeding ``name`` read (in def order, at most four):
    what a case's ``loaded_bounds`` would name to bound them. The loads are where the offset's slice stops."""
    out = []
    for v in [name] + [x for op in offset_slice(f, name) for x in op.operands]:
        d = f.defs.get(v)
        if d is not None and d.name == "tt.load" and d.operands:
            base = base_arg(f, d.operands[0])
            shown = display(base) if base else ""
            if shown and shown not in out:
                out.append(shown)
    return out[:4]


def _bound_hint(f: Func, name: str) -> tuple[str, str]:
    """(`` through `p`, `q```, ``; if a deployment bounds them, declare it in the case: `loaded_bounds={'p': (lo,
    hi)}```), both empty where no parameter is known."""
    via = _loaded_via(f, name)
    if not via:
        return "", ""
    return (
        f" through {', '.join(f'`{p}`' for p in via)}",
        f"; if a deployment bounds them, declare it in the case: `loaded_bounds={{{via[0]!r}: (lo, hi)}}`",
    )


def _describe(f: Func, name: str, label: str, v, grid_note: str) -> str | None:
    """What the analysis knows of one operand, under the name the source gives it (None: a literal says it all)."""
    if isinstance(v, Iv) and v.lo == v.hi and label.replace("_", "").isdigit():
        return None
    if isinstance(v, Iv):
        if v.lo == v.hi:
            return f"`{label}` = {_fmt(v.lo)}"
        o = _origin(f, name)
        d = f.defs.get(name)
        if v.data and d is not None and d.name == "tt.load":
            via, hint = _bound_hint(f, name)
            return f"`{label}` is loaded from memory{via} (any value of its type{hint})"
        src = {
            "pid": f" ({grid_note})",
            "loop": " (loop variable)",
            "arg": " (kernel argument, largest seen)",
        }
        note = src.get(o, "")
        if o == "load":
            via, hint = _bound_hint(f, name)
            note = f" (derived from values loaded from memory{via}{hint})"
        return f"`{label}` in [{_fmt(v.lo)}, {_fmt(v.hi)}]{note}"
    return f"`{label}` unbounded"


def _labels(ctx: Context, unit, f: Func, op: Op, ov: Overflow) -> tuple[str, list[str], list[str]]:
    """The expression as written and the source text of each IR operand (with no source, an operand is named by
    its value, or by the variable it was assigned to; never by an IR name)."""
    file, line, col = ctx.frame(unit, op)
    src = binop_at(file, line, col, op.name)
    a, b = (op.operands + ["?", "?"])[:2]
    if src is None:
        # inlined from a call, or arithmetic Triton generated for the line: named by the code written there
        code = call_at(file, line, col) or source_line(file, line).strip()
        names = []
        for n, v in zip((a, b), ov.operands):
            if isinstance(v, Iv) and v.lo == v.hi:
                names.append(_fmt(v.lo))
            else:
                names.append(_own_name(f, strip(f, n)) or (f"a term of `{code}`" if code else "a term on this line"))
        return f"{names[0]} {_SYM.get(op.name, op.name)} {names[1]}", names, ["left", "right"]
    # which source side each IR operand came from: by where its defining op was written (canonicalization may
    # swap a constant to the right), by name for kernel arguments, else in source order
    sides: list[str | None] = []
    for n in (a, b):
        r = strip(f, n)
        d = f.defs.get(r)
        at = ctx.located(unit, d) if d is not None and d.name != "arith.constant" else None
        side = None
        if at is not None and at[0] == file:
            pos = dedent_col(file, at[1], at[2])
            side = "left" if within(pos, src.left_span) else "right" if within(pos, src.right_span) else None
        elif d is None and display(r) in (src.left, src.right):
            side = "left" if display(r) == src.left else "right"
        sides.append(side)
    # a constant operand is the side whose text has its value (a literal, or a constexpr of this compile); one that
    # matches neither was folded from several (``blk * BS * D`` lowered as ``blk * 2048``)
    consts = unit.launches[0].constexprs if unit.launches else {}
    folded = False
    for k, (n, v) in enumerate(zip((a, b), ov.operands)):
        d = f.defs.get(strip(f, n))
        if d is not None and d.name == "arith.constant" and isinstance(v, Iv) and v.lo == v.hi:
            hit = [x for x, t in (("left", src.left), ("right", src.right)) if _text_value(t, consts) == v.lo]
            sides[k] = hit[0] if len(hit) == 1 else None
            folded = folded or not hit
    if folded:
        names = [
            _fmt_plain(v.lo)
            if isinstance(v, Iv) and v.lo == v.hi
            else _own_name(f, strip(f, n)) or f"a term of `{src.text}`"
            for n, v in zip((a, b), ov.operands)
        ]
        return src.text, names, ["folded", "folded"]
    if sides[0] == sides[1] or None in sides:
        known = next((x for x in sides if x is not None), None)
        if known is None or sides[0] == sides[1]:
            sides = ["left", "right"]
        else:
            k = sides.index(known)
            sides[1 - k] = "right" if known == "left" else "left"
    return src.text, [src.left if x == "left" else src.right for x in sides], sides


def _own_name(f: Func, name: str) -> str:
    """The variable an SSA value was assigned to, or "" when the name is one it only shares with the value the
    variable finally holds (a sub-expression of ``ptrs = base + (i + n) * stride`` carries ``ptrs``'s name)."""
    shown = display(name)
    d = f.defs.get(name)
    if not shown or d is None:
        return shown
    later = (r for op in f.ops if op.pos > d.pos for r in op.results)
    return "" if any(display(r) == shown for r in later) else shown


_ARITH = {
    ast.Add: lambda x, y: x + y,
    ast.Sub: lambda x, y: x - y,
    ast.Mult: lambda x, y: x * y,
    ast.FloorDiv: lambda x, y: x // y if y else None,
    ast.LShift: lambda x, y: x << y if 0 <= y < 64 else None,
}


def _text_value(text: str, consts: dict) -> int | None:
    """The value of a side of the source expression when it is built of literals and constexprs of this compile
    (``BLOCK``, ``n_qh * hd``, ``2 * BLOCK``), else None."""
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        return None

    def ev(n):
        if isinstance(n, ast.Constant) and isinstance(n.value, int) and not isinstance(n.value, bool):
            return n.value
        if isinstance(n, ast.Name):
            v = getattr(consts.get(n.id), "value", consts.get(n.id))
            return v if isinstance(v, int) and not isinstance(v, bool) else None
        if isinstance(n, ast.BinOp) and type(n.op) in _ARITH:
            x, y = ev(n.left), ev(n.right)
            return None if x is None or y is None else _ARITH[type(n.op)](x, y)
        return None

    return ev(tree)


def _fmt_plain(v: int) -> str:
    return str(v)


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


def _message(
    ctx: Context, unit, f: Func, op: Op, ov: Overflow, grid, unsigned: bool = False, late: bool = False
) -> tuple[str, str]:
    expr, labels, sides = _labels(ctx, unit, f, op, ov)
    grid_note = f"program id < grid {grid}" if grid else "program id"
    parts = [
        d
        for n, label, v in zip(op.operands, labels, ov.operands)
        if (d := _describe(f, strip(f, n), label, v, grid_note)) is not None
    ]
    if sides[0] == "folded":
        parts += [
            f"times {_fmt(v.lo)}, the expression's constants folded into one"
            for v in ov.operands
            if isinstance(v, Iv) and v.lo == v.hi
        ]
    # the extreme that leaves the range, with its sign: below -2^31 the offset wraps to a large positive one
    if unsigned:
        # Triton zero-extends an unsigned offset to 64 bits, after computing it in 32: past 2^32 - 1 it wrapped
        reach = (
            f"can reach {_fmt(ov.iv.hi)}, past the uint32 limit of {_fmt(_UINT32_MAX)}, where it wraps"
            if ov.iv.hi > _UINT32_MAX
            else f"can reach {_fmt(ov.iv.lo)}, below 0, where it wraps"
        )
        msg = f"`{expr}` is computed in uint{ov.bits} and {reach}, before it is widened to offset a pointer"
    else:
        reach = (
            f"can reach {_fmt(ov.iv.hi)}, past the int32 limit of {_fmt(_INT32_MAX)}"
            if ov.iv.hi > _INT32_MAX
            else f"can reach {_fmt(ov.iv.lo)}, below the int32 limit of {_fmt(-(2**31))}, where it wraps"
        )
        # widened to int64 only after it wrapped: the cast comes too late to help
        where = "before it is widened to int64 (too late: the wrapped value is widened)" if late else ""
        msg = f"`{expr}` is computed in int{ov.bits} and {reach}, {where or 'before it offsets a pointer'}"
    msg += f" ({'; '.join(parts)})" if parts else ""
    target = _cast_target(f, op, ov)
    sym = _SYM.get(op.name, op.name)
    k = op.operands.index(target) if target is not None else None
    if k is not None and sides[k] == "folded":
        # Triton folded constants of the expression into one: cast the operand where the source names it
        t = labels[k]
        hits = re.findall(rf"(?<![\w.]){re.escape(t)}(?!\w)", expr)
        cast = re.sub(rf"(?<![\w.]){re.escape(t)}(?!\w)", f"{t}.to(tl.int64)", expr) if len(hits) == 1 else None
        fix = (
            f"cast `{t}` to tl.int64 before it meets the other factors"
            + (f": `{cast}`" if cast else f" (where it enters `{expr}`)" if not hits else "")
            + "; cast program ids and loaded indices before they meet a stride"
        )
    elif k is not None:
        t, other = labels[k], labels[1 - k]
        wrapped = t if _atom(t) else f"({t})"
        cast = (
            f"{wrapped}.to(tl.int64) {sym} {other}" if sides[k] == "left" else f"{other} {sym} {wrapped}.to(tl.int64)"
        )
        fix = (
            f"cast `{t}` to tl.int64 before the {_WHAT.get(op.name, 'arithmetic')}: `{cast}`; cast program ids "
            f"and loaded indices before they meet a stride"
        )
    else:
        fix = "cast one operand to tl.int64 before this operation so the offset is computed in 64 bits"
    return msg, fix


def _atom(text: str) -> bool:
    """``text`` needs no parentheses before ``.to(...)``: no operator outside brackets."""
    depth = 0
    for ch in text:
        depth += ch in "([{"
        depth -= ch in ")]}"
        if depth == 0 and ch in " +-*/%<>&|^~":
            return False
    return True


_WHAT = {"arith.muli": "multiply", "arith.addi": "addition", "arith.subi": "subtraction", "arith.shli": "shift"}


#: ops whose int32 result is exact modulo 2^32: a wrapped intermediate comes back right when the final value fits
_RING = {
    "arith.addi",
    "arith.subi",
    "arith.muli",
    "arith.shli",
    "arith.select",
    "tt.splat",
    "tt.broadcast",
    "tt.expand_dims",
    "tt.reshape",
    "tt.trans",
    "ttg.convert_layout",
}
_INT32_MAX = 2**31 - 1
_UINT32_MAX = 2**32 - 1
#: ops an offset passes through on its way from a zero-extension to the pointer, element for element
_SHAPES = {"tt.splat", "tt.broadcast", "tt.expand_dims", "tt.reshape", "tt.trans", "ttg.convert_layout"}


def _zero_extended(f: Func, name: str) -> str | None:
    """The 32-bit value a 64-bit pointer offset zero-extends (behind shape ops), or None. Triton widens an unsigned
    offset that way before ``tt.addptr`` (``Y_ptr + perm_idx * stride`` with ``perm_idx`` a ``tl.uint32``), so the
    arithmetic before it ran in uint32, which wraps past 2^32 - 1."""
    return _extended(f, name, "arith.extui")


def _sign_extended(f: Func, name: str) -> str | None:
    """The 32-bit value a 64-bit pointer offset sign-extends (behind shape ops), or None: ``(a * b).to(tl.int64)``
    widens a product that was computed, and wrapped, in int32."""
    return _extended(f, name, "arith.extsi")


def _extended(f: Func, name: str, ext: str) -> str | None:
    for _ in range(RING_SLICE.limit):
        op = f.defs.get(name)
        if op is None or not op.operands:
            return None
        if op.name == ext:
            bits = int_bits(f.types.get(op.operands[0], ""))
            return op.operands[0] if bits is not None and 1 < bits <= 32 else None
        if op.name not in _SHAPES:
            return None
        name = op.operands[0]
    return None


def _wraps(ov: Overflow, unsigned: bool) -> bool:
    """The overflow leaves the offset's type: int32 (recorded so), or uint32 when it was computed unsigned."""
    return not unsigned or ov.iv.hi > _UINT32_MAX or ov.iv.lo < 0


def _ring_slice(f: Func, name: str) -> set[int]:
    """Positions of the ops that reach ``name`` through wrapping arithmetic only."""
    out, seen, stack = set(), set(), [name]
    while stack and len(seen) < RING_SLICE.limit:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        op = f.defs.get(v)
        if op is None or op.name not in _RING:
            continue
        out.add(op.pos)
        stack += op.operands[1:] if op.name == "arith.select" else op.operands
    RING_SLICE.stopped(f, stack, seen)
    return out


def _in_bounds_fit(ln, feeds, param_of, ov: Overflow, unsigned: bool = False) -> bool:
    """The overflow scales a loaded index, and every pointer it feeds, through wrapping arithmetic only,
    addresses an allocation of fewer than 2^31 elements in this launch: a valid index then gives an in-bounds
    offset, which fits int32, and a wrapped intermediate comes back exact. (Such a launch shows no overflow a
    valid index can reach.) An overflow computed from program ids, arguments and loop counters is real whatever
    the allocation: a masked tail lane past the end wraps negative and passes an ``offs < n`` mask."""
    if not any(isinstance(v, Iv) and v.data for v in ov.operands):
        return False
    for base, modular in feeds:
        n = ln.extents.get(param_of.get(base, base)) if base is not None else None
        if not modular or n is None or n > (_UINT32_MAX if unsigned else _INT32_MAX):
            return False
    return True


#: ops a pointer passes through to the access that uses it, element for element or moved by a further offset
_PTR_USES = {"tt.addptr", "tt.splat", "tt.broadcast", "tt.expand_dims", "tt.reshape", "tt.trans", "ttg.convert_layout"}
#: integer ops :func:`_active_iv` recomputes from its operands' bounds over the active lanes
_RECOMPUTED = {"arith.addi", "arith.subi", "arith.muli", "arith.shli"}
#: how deep :func:`_active_iv` follows an offset back
_ACTIVE_DEPTH = 64


def _accesses(f: Func, ptr: str) -> list[Op] | None:
    """The loads and stores a pointer reaches (through further offsets and shape ops), or None when it also goes
    anywhere else (a loop-carried pointer, an atomic, a select): there its masked-off lanes may still be used."""
    users = users_of(f)
    out: list[Op] = []
    stack, seen = [ptr], set()
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        for u in users.get(v, []):
            if u.name in ("tt.load", "tt.store") and u.operands[0] == v and v not in u.operands[1:]:
                out.append(u)
            elif u.name in _PTR_USES and u.operands[0] == v and v not in u.operands[1:]:
                stack += u.results
            else:
                return None
    return out


def _active_iv(f: Func, ra, name: str, bounds: dict[str, tuple[int, int]], memo: dict, depth: int = 0) -> Iv | None:
    """The exact values ``name`` takes in the lanes an access's mask keeps (``bounds``, from
    :func:`~..analysis.addresses.mask_bounds` with ``exact``), or None when some such lane may compute a wrapped
    value: ``+``, ``-``, ``*`` and ``<<`` are recomputed from their operands' bounds and must stay in their type;
    any other value counts by its interval over all lanes, which must hold of what it really computes."""
    if name in memo:
        return memo[name]
    memo[name] = None  # a cycle (a loop-carried value) proves nothing
    v = ra.get(name)
    op = f.defs.get(name)
    bits = int_bits(f.types.get(name, ""))
    out: Iv | None = None
    if not isinstance(v, Iv) or bits is None or depth > _ACTIVE_DEPTH:
        return None
    if op is not None and op.name in _RECOMPUTED and len(op.operands) == 2:
        a, b = (_active_iv(f, ra, x, bounds, memo, depth + 1) for x in op.operands)
        if a is not None and b is not None:
            if op.name == "arith.addi":
                lo, hi = a.lo + b.lo, a.hi + b.hi
            elif op.name == "arith.subi":
                lo, hi = a.lo - b.hi, a.hi - b.lo
            else:
                if op.name == "arith.shli":
                    if b.lo < 0 or b.hi >= bits:
                        return None
                    b = Iv(1 << b.lo, 1 << b.hi)
                c = (a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi)
                lo, hi = min(c), max(c)
            tlo, thi = type_range(bits)
            out = Iv(lo, hi) if tlo <= lo and hi <= thi else None
    elif op is not None and op.name in THROUGH and op.operands and op.name != "arith.extui":
        out = _active_iv(f, ra, op.operands[0], bounds, memo, depth + 1)
    elif not v.over and (not v.data or (op is not None and op.name == "tt.load")):
        out = Iv(v.lo, v.hi)
    if out is not None and name in bounds:
        lo, hi = max(out.lo, bounds[name][0]), min(out.hi, bounds[name][1])
        if lo <= hi:
            out = Iv(lo, hi)
    memo[name] = out
    return out


def _masked_off(f: Func, ra, sites: list[tuple[Op, str, bool]]) -> bool:
    """Every lane in which the overflow happens is masked off wherever its offset is used: each pointer it feeds
    reaches only loads and stores whose mask bounds an operand of the arithmetic (``rows[:, None] < M`` for
    ``rows[:, None] * stride + cols[None, :]``) so that, in the lanes the mask keeps, every step computes its
    exact value. A masked-off lane computes a wrapped offset and touches no memory. A mask on the wrapped value
    itself (``offs < n``) bounds nothing: a wrapped negative offset passes it."""
    for addptr, offset, unsigned in sites:
        accesses = _accesses(f, addptr.results[0]) if addptr.results else None
        if not accesses:
            return False
        for acc in accesses:
            bounds = mask_bounds(f, ra, acc, exact=True)
            iv = _active_iv(f, ra, offset, bounds, {}) if bounds else None
            if iv is None or (unsigned and iv.lo < 0):
                return False
    return True


def check(ctx: Context) -> list[Finding]:
    out = []
    for unit, f, _mod in ctx.units():
        ra = ctx.union_ranges(unit, f)
        cands: dict[int, Op] = {}
        feeds: dict[int, list[tuple[str | None, bool]]] = {}  # candidate -> (pointer's argument, exact mod 2^32)
        signed: set[int] = set()  # candidates that feed an int32 offset (the others feed only uint32 ones)
        widened: set[int] = set()  # candidates an int64 offset takes sign-extended from their wrapped int32
        sites: dict[int, list[tuple[Op, str, bool]]] = {}  # candidate -> (tt.addptr, its 32-bit offset, unsigned)
        for op in f.ops:
            if op.name != "tt.addptr" or len(op.operands) < 2:
                continue
            offset = op.operands[1]
            unsigned = not is_int32_offset(f, offset)
            late = False
            if unsigned:
                narrow = _zero_extended(f, offset)
                if narrow is None:
                    # a 64-bit offset sign-extended from int32: widened after the arithmetic that wrapped
                    narrow, unsigned, late = _sign_extended(f, offset), False, True
                if narrow is None:
                    continue
                offset = narrow
            v = ra.get(offset)
            if isinstance(v, Unknown):
                ctx.note(unit, op, f"int32-offset could not bound this pointer offset: {v.reason}")
            ring = None
            unpacked = None
            for s in offset_slice(f, offset):
                if s.pos in ra.overflows and s.name == "arith.shli":
                    # bit packing (``key << 16 | low``, read back by ``>> 16`` or a mask): a left shift whose every
                    # path to the offset passes a right shift or a mask drops the wrapped bits by design
                    if unpacked is None:
                        unpacked = {o.pos for o in offset_slice(f, offset, through=False)}
                    if s.pos not in unpacked:
                        continue
                if s.pos in ra.overflows:
                    cands.setdefault(s.pos, s)
                    if not unsigned:
                        signed.add(s.pos)
                    if late:
                        widened.add(s.pos)
                    ring = _ring_slice(f, offset) if ring is None else ring
                    feeds.setdefault(s.pos, []).append((base_arg(f, op.operands[0]), s.pos in ring))
                    sites.setdefault(s.pos, []).append((op, offset, unsigned))
        if not cands:
            continue
        names = [a for a, _t, _l in f.args]
        param_of = dict(zip(names, unit.ir_params)) if len(names) == len(unit.ir_params) else {}
        # the union over launches over-approximates; find a real launch that overflows
        witness: dict[int, tuple[object, Overflow]] = {}
        tried = distinct(unit.launches, lambda ln: tuple(sorted(ln.extents.items())), MAX_WITNESS_TRIES)
        for ln in tried:
            one = ctx.launch_ranges(unit, f, ln)
            for pos in cands:
                if (
                    pos in one.overflows
                    and pos not in witness
                    and _wraps(one.overflows[pos], pos not in signed)
                    and not _in_bounds_fit(ln, feeds[pos], param_of, one.overflows[pos], pos not in signed)
                    and not _masked_off(f, one, sites[pos])
                ):
                    witness[pos] = (ln, one.overflows[pos])
            if len(witness) == len(cands):
                break
        if tried.left_out and len(witness) < len(cands):
            op = next(op for pos, op in sorted(cands.items()) if pos not in witness)
            ctx.unchecked(unit, op, tried.unchecked(RULE.id, "an int32 overflow of this offset"))
        for pos, (ln, ov) in sorted(witness.items()):
            op = cands[pos]
            file, line, col = ctx.frame(unit, op)
            msg, fix = _message(ctx, unit, f, op, ov, ln.grid, unsigned=pos not in signed, late=pos in widened)
            out.append(Finding(RULE.id, RULE.severity, unit.kernel.name, file, line, msg, ln.case, fix=fix, col=col))
    return out
