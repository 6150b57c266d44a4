"""int-division-sign: ``//`` or ``%`` on an integer that can be negative, where Triton and Python disagree."""

from __future__ import annotations

import ast
import dataclasses

from ..capture.launches import distinct
from ..analysis.conditions import block_facts, facts, facts_at, narrow
from ..ir.mlir import Func, Op, int_bits
from ..analysis.pointers import strip
from ..analysis.intervals import Iv, type_range
from ..ir.source import binop_at, call_at
from . import Context, Finding, RuleInfo, source_line

RULE = RuleInfo(
    "int-division-sign",
    "warning",
    "integer // or % of a value that can be negative",
    "Triton divides integers like C: `//` rounds toward zero and `%` takes the dividend's sign, where Python "
    "floors (-1 // 16 is 0 in a kernel, -1 in Python; -1 % 16 is -1, not 15). A negative index, a padding slot "
    "of -1 or a ring-buffer position behind its window then lands on the wrong element.",
)

_OPS = {"arith.divsi": "//", "arith.remsi": "%"}
#: distinct launch bindings tried when looking for the case that shows a negative operand
MAX_WITNESS_TRIES = 512


def _negative(f: Func, op: Op, ra) -> tuple[Iv, Iv] | None:
    """(dividend, divisor) intervals when the dividend can be negative, or the divisor can be and does not come
    from memory; None when both are provably non-negative or unknown."""
    a, b = ra.operands(op)[:2]
    if not (isinstance(a, Iv) and isinstance(b, Iv)):
        return None
    if b.lo == 0 < b.hi and a.lo < 0 and strip(f, op.operands[1]) in _addends(f, op.operands[0]):
        # `tl.cdiv(x, y)` divides x + y - 1 by y, and runs only where y >= 1 (a division by zero is no sign question):
        # the dividend is one more than the interval of y alone makes it
        a = dataclasses.replace(a, lo=a.lo + 1)
    if a.lo < 0 or (b.lo < 0 and not b.data):
        return a, b
    return None


def _addends(f: Func, name: str, depth: int = 0) -> set[str]:
    """The values added up into ``name`` (behind shape ops and extensions; through ``+`` and ``- constant``)."""
    op = f.defs.get(strip(f, name))
    if op is None or depth > 8 or len(op.operands) < 2 or op.name not in ("arith.addi", "arith.subi"):
        return {strip(f, name)}
    if op.name == "arith.subi":
        c = f.defs.get(strip(f, op.operands[1]))
        return _addends(f, op.operands[0], depth + 1) if c is not None and c.name == "arith.constant" else set()
    return _addends(f, op.operands[0], depth + 1) | _addends(f, op.operands[1], depth + 1)


#: ops the result passes through unchanged (per lane), and ops that compute something new from it
_CARRY = {
    "arith.extsi",
    "arith.extui",
    "tt.splat",
    "tt.broadcast",
    "tt.expand_dims",
    "tt.reshape",
    "tt.trans",
    "ttg.convert_layout",
}
_FLOW = {
    "arith.addi",
    "arith.subi",
    "arith.muli",
    "arith.shli",
    "arith.divsi",
    "arith.remsi",
    "arith.trunci",
    "arith.maxsi",
    "arith.minsi",
    "tt.addptr",
}


def _users(f: Func) -> dict[str, list[tuple[Op, int]]]:
    out: dict[str, list[tuple[Op, int]]] = {}
    for op in f.ops:
        for k, x in enumerate(op.operands):
            out.setdefault(x, []).append((op, k))
    return out


def _shift(f: Func, ra, name: str, side: str, depth: int = 0) -> tuple[int, int] | None:
    """``name`` (behind shape ops and extensions) as ``side + d``, through ``+`` and ``-`` (``offs - 1`` is ``offs``
    + [-1, -1]): the interval of ``d``, or None. Every step on the way is checked not to wrap in its integer type
    (over all lanes, from operands that did not wrap either), so ``side >= c`` with ``c + d >= 0`` makes the value
    non-negative."""
    n = strip(f, name)
    if n == strip(f, side):
        return 0, 0
    op = f.defs.get(n)
    if op is None or depth > 8 or len(op.operands) < 2 or op.name not in ("arith.addi", "arith.subi"):
        return None
    bits = int_bits(f.types.get(n))
    if bits is None or bits == 1:
        return None
    tlo, thi = type_range(bits)
    x, y = op.operands[:2]
    vx, vy = ra.get(x), ra.get(y)
    if not (isinstance(vx, Iv) and isinstance(vy, Iv)) or vx.over or vy.over:
        return None  # an operand that may have wrapped: its interval says nothing of what it holds
    sub = op.name == "arith.subi"
    lo, hi = (vx.lo - vy.hi, vx.hi - vy.lo) if sub else (vx.lo + vy.lo, vx.hi + vy.hi)
    if lo < tlo or hi > thi:
        return None  # this step may wrap
    inner = _shift(f, ra, x, side, depth + 1)
    if inner is not None:
        return (inner[0] - vy.hi, inner[1] - vy.lo) if sub else (inner[0] + vy.lo, inner[1] + vy.hi)
    if not sub and (inner := _shift(f, ra, y, side, depth + 1)) is not None:
        return inner[0] + vx.lo, inner[1] + vx.hi
    return None


def _nonneg(f: Func, ra, fs, key: str) -> bool:
    """The facts make the dividend (``key``, behind shape ops and extensions) non-negative: a bound on the dividend
    itself, or on a value it is shifted from (``offs >= 1`` or ``offs > 0`` for ``offs - 1``)."""
    for fc in fs:
        a, b = ra.get(fc.a), ra.get(fc.b)
        if isinstance(a, Iv) and isinstance(b, Iv) and (r := narrow(a, fc.pred, b)) is not None:
            for side, v in zip((fc.a, fc.b), r):
                if strip(f, side) == key and v.lo >= 0:
                    return True
                d = _shift(f, ra, key, side)
                if d is not None and v.lo + d[0] >= 0:
                    return True
    return False


def _requires_nonneg(f: Func, ra, cond: str | None, key: str, holds: bool = True) -> bool:
    """Where ``cond`` is ``holds``, the dividend (``key``, behind shape ops) is non-negative."""
    return cond is not None and _nonneg(f, ra, facts(f, cond, holds), key)


def _unused_when_negative(f: Func, ra, users, by_block, op: Op) -> bool:
    """Every use of the result drops it where the dividend is negative: a use where a guard in force, a load or
    store mask, or a ``where`` requires the dividend >= 0. For ``//`` whose quotient reaches the use unchanged
    (no arithmetic on the way) also a ``max`` with a non-negative value and the trip count of a loop from 0: a
    negative dividend's quotient is <= 0 rounded either way, so it loses the max and runs no iteration. (After
    ``+ 1``, or for ``%``, whose remainder is -1 in C and W - 1 in Python, the two differ there too.)"""
    key = strip(f, op.operands[0])
    stack, seen = [(r, op.name == "arith.divsi") for r in op.results], set()
    while stack:
        v, plain = stack.pop()
        if (v, plain) in seen:
            continue
        seen.add((v, plain))
        for u, k in users.get(v, []):
            if _nonneg(f, ra, facts_at(f, u, by_block), key):
                continue  # used only where a guard (`if slot < 0: return`) has made the dividend non-negative
            if u.name in ("tt.load", "tt.store"):
                m = 1 if u.name == "tt.load" else 2
                if k < m and _requires_nonneg(f, ra, u.operands[m] if len(u.operands) > m else None, key):
                    continue
                return False
            if u.name == "arith.select" and k > 0:
                if _requires_nonneg(f, ra, u.operands[0], key, holds=k == 1):
                    continue
                stack += [(r, plain) for r in u.results]
            elif (
                plain and u.name == "scf.for" and k == 1 and isinstance(lb := ra.get(u.operands[0]), Iv) and lb.lo >= 0
            ):
                continue
            elif plain and u.name == "arith.maxsi" and isinstance(o := ra.get(u.operands[1 - k]), Iv) and o.lo >= 0:
                continue
            elif plain and u.name == "arith.minsi":
                # the min of a quotient <= 0 is <= 0 either way: still a trip count of no iteration, or a lost max
                stack += [(r, True) for r in u.results]
            elif u.name in _CARRY:
                stack += [(r, plain) for r in u.results]
            elif u.name in _FLOW:
                stack += [(r, False) for r in u.results]
            else:
                return False
    return True


def _first_arg(call: str) -> str | None:
    """The source text of a call's first positional argument (``n`` of ``tl.cdiv(n, SPLITS)``)."""
    try:
        node = ast.parse(call, mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(node, ast.Call) or not node.args:
        return None
    return ast.get_source_segment(call, node.args[0])


def _is_cdiv(call: str) -> bool:
    return call.split("(", 1)[0].strip().rsplit(".", 1)[-1] in ("cdiv", "cdiv_fn")


def _example(a: Iv, b: Iv, sym: str) -> str:
    x = -1 if a.lo <= -1 <= a.hi else a.lo
    d = b.hi if b.hi > 0 else b.lo
    if x >= 0 or d == 0:
        x, d = (a.lo if a.lo < 0 else 1), (b.lo if b.lo < 0 else -1)
    if sym == "//":
        t = abs(x) // abs(d) * (1 if (x < 0) == (d < 0) else -1)
        return f"{x} // {d} is {t} in the kernel, {x // d} in Python"
    r = abs(x) % abs(d) * (1 if x >= 0 else -1)
    return f"{x} % {d} is {r} in the kernel, {x % d} in Python"


def check(ctx: Context) -> list[Finding]:
    out = []
    for unit, f, _mod in ctx.units():
        ops = [op for op in f.ops if op.name in _OPS and len(op.operands) >= 2]
        if not ops:
            continue
        # an index loaded with no declared bounds is taken as >= 0 (lengths, positions, page numbers): the warning is
        # for a dividend the kernel's own arithmetic, a negative constant or a declared bound makes negative
        union = ctx.union_ranges(unit, f, loads_nonneg=True)
        users, by_block = _users(f), block_facts(f)
        cands = [
            op
            for op in ops
            if _negative(f, op, union) is not None and not _unused_when_negative(f, union, users, by_block, op)
        ]
        if not cands:
            continue
        witness: dict[int, tuple] = {}
        tried = distinct(unit.launches, limit=MAX_WITNESS_TRIES)
        for ln in tried:
            ra = ctx.launch_ranges(unit, f, ln, loads_nonneg=True)
            for op in cands:
                if op.pos not in witness and (hit := _negative(f, op, ra)) is not None:
                    witness[op.pos] = (op, ln, hit)
            if len(witness) == len(cands):
                break
        if tried.left_out and len(witness) < len(cands):
            op = next(op for op in cands if op.pos not in witness)
            ctx.unchecked(unit, op, tried.unchecked(RULE.id, "a negative dividend here"))
        for _pos, (op, ln, (a, b)) in sorted(witness.items()):
            file, line, col = ctx.frame(unit, op)
            sym = _OPS[op.name]
            src = binop_at(file, line, col, op.name)
            low = a.lo
            if src is not None:
                expr, who = src.text, f"`{src.left}`"
            elif (call := call_at(file, line, col)) is not None:
                # inlined from a call: `tl.cdiv(n, d)` divides n + d - 1 by d, so name n and its own low end
                expr, first = call, _first_arg(call)
                who = f"`{first}`" if first and _is_cdiv(call) else "its dividend"
                low = a.lo - (max(b.lo, 1) - 1) if first and _is_cdiv(call) else a.lo
            else:
                # arithmetic Triton generated for this line: named by the code written there, never by an IR name
                code = source_line(file, line).strip()
                expr, who = None, "its dividend"
                shown = f"the {sym} Triton generates for `{code}`" if code else f"the {sym} on this line"
            d = f.defs.get(strip(f, op.operands[0]))
            if d is not None and d.name == "tt.load" and a.lo < 0:
                why = f"{who} is loaded, and the case's `loaded_bounds` (or the load's `other=`) let it be {a.lo:,}"
            elif a.lo < 0:
                why = f"{who} can be as low as {low:,}"
            else:
                why = f"the divisor can be as low as {b.lo:,}"
            out.append(
                Finding(
                    RULE.id,
                    RULE.severity,
                    unit.kernel.name,
                    file,
                    line,
                    f"{f'`{expr}`' if expr is not None else shown} divides like C, not like Python, and {why}: "
                    f"{_example(a, b, sym)}",
                    ln.case,
                    fix=(
                        "make the value non-negative first (skip negative indices: `if slot < 0: return`; shift a ring "
                        "position by a multiple of the size: `(pos - window + cap) % cap`), or declare "
                        "`loaded_bounds` in the case only as low as loaded values really go"
                    ),
                    col=col,
                    tag=sym,
                )
            )
    return out
