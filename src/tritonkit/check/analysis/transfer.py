"""The range analysis's transfer functions: for each integer op, its result's interval from its operands'.

:data:`TRANSFER` maps an op name to ``fn(ra, op, bits) -> Val`` (``ra`` the running
:class:`~.ranges.RangeAnalysis`, ``bits`` the result's width); an op it does not list is not understood. Ops
with two integer operands go through :func:`_binary`, which answers for an unknown or untracked operand first, as
Triton's AxisInfo visitors do one class per op family. Control flow (loops, ifs, reductions) stays in ranges.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .conditions import root
from .intervals import Iv, Unknown, Val, any_value, div, type_range
from ..ir.mlir import Op, int_bits
from .pointers import base_arg

Transfer = Callable[..., Val]

_CONSTANT = re.compile(r"arith\.constant\s+(?:dense<)?\s*(-?\d+|true|false)\b")
_AXIS = re.compile(r"\b(?:get_program_id|get_num_programs)\s+([xyz])\b")


# -- values that read no integer operand ------------------------------------------------------------------------
def _constant(ra, op: Op, bits: int) -> Val:
    m = _CONSTANT.search(op.text)
    if not m:
        return Unknown("integer constant not read")
    v = {"true": 1, "false": 0}.get(m.group(1))
    v = int(m.group(1)) if v is None else v
    return Iv(v, v)


def _program(ra, op: Op, bits: int) -> Val:
    m = _AXIS.search(op.text)
    axis = "xyz".index(m.group(1)) if m else (op.attr_int("axis") or 0)
    if ra.b.grid is None:
        return Unknown("no launch grid was captured (warmup only)")
    g = max(int(ra.b.grid[axis]), 1)
    return Iv(0, g - 1) if op.name == "tt.get_program_id" else Iv(g, g)


def _make_range(ra, op: Op, bits: int) -> Val:
    s, e = op.attr_int("start"), op.attr_int("end")
    return Iv(s, e - 1) if s is not None and e is not None else Unknown("tt.make_range bounds not read")


def _load(ra, op: Op, bits: int) -> Val:
    tlo, thi = type_range(bits)
    base = base_arg(ra.f, op.operands[0]) if op.operands else None
    if base is not None and base in ra.b.loaded:
        lo, hi = ra.b.loaded[base]
        return Iv(max(lo, tlo), min(hi, thi))
    if ra.b.loads_nonneg:
        # a masked-off lane takes `other`: a negative one makes the value negative there
        other = ra.get(op.operands[2]) if len(op.operands) > 2 else None
        lo = min(0, other.lo) if isinstance(other, Iv) else 0
        return Iv(lo, thi, data=True, scale=1.0)
    return any_value(bits)


def _any(ra, op: Op, bits: int) -> Val:
    return any_value(bits)


def _call(ra, op: Op, bits: int) -> Val:
    return Unknown(f"result of a non-inlined call ({op.text.split('(')[0].strip()})")


# -- values that keep their operands' (shape ops, casts, select) ------------------------------------------------
def _hull(n: str, vals: list[Val]) -> Val:
    vals = [v for v in vals if v is not None]
    u = next((v for v in vals if isinstance(v, Unknown)), None)
    if u is not None or not vals:
        return u or Unknown(f"`{n}` of a non-integer")
    h = vals[0]
    for v in vals[1:]:
        h = h.hull(v)
    return h


def _same(ra, op: Op, bits: int) -> Val:
    return _hull(op.name, [ra.get(x) for x in op.operands])


def _select(ra, op: Op, bits: int) -> Val:
    vals = [ra.get(x) for x in op.operands[1:]]
    if len(op.operands) == 3:
        # where(slot >= 0, slot, 0): each side holds where the condition says it is taken
        c = op.operands[0]
        vals = [ra.where(c, True, op.operands[1], vals[0]), ra.where(c, False, op.operands[2], vals[1])]
    return _hull(op.name, vals)


def _trunci(ra, op: Op, bits: int) -> Val:
    h = _same(ra, op, bits)
    tlo, thi = type_range(bits)
    return any_value(bits) if isinstance(h, Iv) and not (tlo <= h.lo and h.hi <= thi) else h


def _extui(ra, op: Op, bits: int) -> Val:
    h = _same(ra, op, bits)
    if isinstance(h, Iv) and h.lo < 0:
        src = int_bits(ra.f.types.get(op.operands[0], "")) or 32
        return Iv(0, (1 << src) - 1, data=True, scale=1.0)
    return h


# -- values of two integer operands -----------------------------------------------------------------------------
def _binary(fn: Callable[..., Val]) -> Transfer:
    """``fn(ra, op, a, b, bits)`` on the first two integer operands, both intervals; an unknown operand is the
    answer, and an op with fewer than two tracked integer operands is unknown."""

    def transfer(ra, op: Op, bits: int) -> Val:
        ints = [v for v in (ra.get(x) for x in op.operands) if v is not None]
        unk = next((v for v in ints if isinstance(v, Unknown)), None)
        if unk is not None:
            return unk
        if len(ints) < 2:
            # one-operand integer ops (math.absi, ...) and operands the analysis does not track
            return Unknown(f"`{op.name}` with an operand the analysis does not track")
        return fn(ra, op, ints[0], ints[1], bits)

    return transfer


def _flags(a: Iv, b: Iv) -> dict:
    return dict(data=a.data or b.data, over=a.over or b.over, scale=max(a.scale, b.scale))


def _arith(ra, op: Op, a: Iv, b: Iv, bits: int) -> Val:
    return ra.arith(op, a, b, bits)


def _trip_count(ra, op: Op) -> bool:
    """``op`` is ``(x - y + (s - 1)) /u s``: the trip count of a loop from y to x by s, as Triton's loop unroller
    computes it (``tl.range(..., loop_unroll_factor=N)``) assuming x >= y: the user's loop runs no iteration below."""
    d = ra.f.defs.get(op.operands[0])
    if op.name != "arith.divui" or d is None or d.name != "arith.addi" or len(d.operands) < 2:
        return False
    diff, k = (ra.f.defs.get(x) for x in d.operands[:2])
    kv, sv = ra.get(d.operands[1]), ra.get(op.operands[1])
    minus_one = k is not None and k.name == "arith.subi" and k.operands[:1] == op.operands[1:2]
    return (
        diff is not None
        and diff.name == "arith.subi"
        and (minus_one or (isinstance(kv, Iv) and isinstance(sv, Iv) and kv.lo == kv.hi == sv.lo - 1))
    )


def _divide(ra, op: Op, a: Iv, b: Iv, bits: int) -> Val:
    if a.lo < 0 and _trip_count(ra, op):
        a = Iv(0, max(a.hi, 0), a.data, a.over, a.scale)
    fl = _flags(a, b)
    if a.data and not b.data:
        fl["scale"] = (
            a.scale / max(1, min((abs(d) for d in (b.lo, b.hi) if d), default=1)) if (b.lo > 0 or b.hi < 0) else a.scale
        )
    return div(a, b, fl, slop=0 if op.name in ("arith.divsi", "arith.divui") else 1)


def _rem(ra, op: Op, a: Iv, b: Iv, bits: int) -> Val:
    m = max(abs(b.lo), abs(b.hi)) - 1
    if m < 0:
        return any_value(bits)
    # a remainder by a known divisor is as small as the divisor, whatever the dividend's size
    fl = _flags(a, b) if b.data else dict(over=a.over or b.over)
    if a.lo >= 0 or op.name == "arith.remui":
        return Iv(0, m if a.lo < 0 else min(a.hi, m), **fl)
    if a.hi <= 0:
        return Iv(max(a.lo, -m), 0, **fl)
    return Iv(max(a.lo, -m), min(a.hi, m), **fl)


def _max(ra, op: Op, a: Iv, b: Iv, bits: int) -> Val:
    return Iv(max(a.lo, b.lo), max(a.hi, b.hi), **_flags(a, b))


def _min(ra, op: Op, a: Iv, b: Iv, bits: int) -> Val:
    return Iv(min(a.lo, b.lo), min(a.hi, b.hi), **_flags(a, b))


def _maxsi(ra, op: Op, a: Iv, b: Iv, bits: int) -> Val:
    # max(x, y) - x >= 0 and max(x, y) - y >= 0: what `hi - lo` needs later
    for x in op.operands[:2] if op.results else ():
        ra.diffs.add(root(ra.f, op.results[0]), root(ra.f, x), 0)
    return _max(ra, op, a, b, bits)


def _minsi(ra, op: Op, a: Iv, b: Iv, bits: int) -> Val:
    # x - min(x, y) >= 0 and y - min(x, y) >= 0
    for x in op.operands[:2] if op.results else ():
        ra.diffs.add(root(ra.f, x), root(ra.f, op.results[0]), 0)
    return _min(ra, op, a, b, bits)


def _andi(ra, op: Op, a: Iv, b: Iv, bits: int) -> Val:
    # masking with a known non-negative value bounds the result by it, whatever the other side holds
    fl = dict(over=a.over or b.over) if (a.lo >= 0 and not a.data) or (b.lo >= 0 and not b.data) else _flags(a, b)
    if a.lo >= 0 and b.lo >= 0:
        return Iv(0, min(a.hi, b.hi), **fl)
    if a.lo >= 0 or b.lo >= 0:
        return Iv(0, a.hi if a.lo >= 0 else b.hi, **fl)
    return any_value(bits)


def _ori(ra, op: Op, a: Iv, b: Iv, bits: int) -> Val:
    if a.lo >= 0 and b.lo >= 0:
        return Iv(0, (1 << max(a.hi, b.hi).bit_length()) - 1, **_flags(a, b))
    return any_value(bits)


def _shr(ra, op: Op, a: Iv, b: Iv, bits: int) -> Val:
    fl = _flags(a, b)
    s_lo, s_hi = max(b.lo, 0), min(max(b.hi, 0), bits - 1)
    fl["scale"] = fl["scale"] / (1 << s_lo)
    if a.lo >= 0:
        return Iv(a.lo >> s_hi, a.hi >> s_lo, **fl)
    if op.name == "arith.shrui":
        return Iv(0, ((1 << bits) - 1) >> s_lo, data=True, scale=1.0)
    return Iv(min(a.lo >> s_lo, a.lo >> s_hi), max(a.hi >> s_lo, a.hi >> s_hi), **fl)


def _not_understood(ra, op: Op, a: Iv, b: Iv, bits: int) -> Val:
    return Unknown(f"`{op.name}` is not understood by the range analysis")


#: an op the table does not name: its unknown operand, or not understood
UNMODELLED = _binary(_not_understood)

SHAPE_OPS = (
    "tt.splat",
    "tt.broadcast",
    "tt.expand_dims",
    "tt.reshape",
    "tt.trans",
    "ttg.convert_layout",
    "tt.cat",
    "tt.join",
    "tt.split",
    "tt.permute",
    "tt.view",
    "arith.index_cast",
    "arith.index_castui",
    "arith.extsi",
    "tt.unsplat",
    "tt.clampf",
    "tt.gather",
    "ttg.local_load",
)
#: ops whose result is any value of its type: memory, float conversions, bit casts, inline assembly
OPAQUE = (
    "tt.atomic_rmw",
    "tt.atomic_cas",
    "arith.fptosi",
    "arith.fptoui",
    "tt.histogram",
    "arith.bitcast",
    "tt.bitcast",
    "tt.elementwise_inline_asm",
    "tt.extern_elementwise",
    "tt.ptr_to_int",
)

TRANSFER: dict[str, Transfer] = {
    "arith.constant": _constant,
    "tt.get_program_id": _program,
    "tt.get_num_programs": _program,
    "tt.make_range": _make_range,
    "tt.load": _load,
    "tt.call": _call,
    **dict.fromkeys(OPAQUE, _any),
    **dict.fromkeys(SHAPE_OPS, _same),
    "arith.select": _select,
    "arith.trunci": _trunci,
    "arith.extui": _extui,
    **dict.fromkeys(("arith.addi", "arith.subi", "arith.muli", "arith.shli"), _binary(_arith)),
    **dict.fromkeys(("arith.divsi", "arith.divui", "arith.ceildivsi", "arith.floordivsi"), _binary(_divide)),
    **dict.fromkeys(("arith.remsi", "arith.remui"), _binary(_rem)),
    "arith.maxsi": _binary(_maxsi),
    "arith.maxui": _binary(_max),
    "arith.minsi": _binary(_minsi),
    "arith.minui": _binary(_min),
    "arith.andi": _binary(_andi),
    **dict.fromkeys(("arith.ori", "arith.xori"), _binary(_ori)),
    **dict.fromkeys(("arith.shrsi", "arith.shrui"), _binary(_shr)),
}
