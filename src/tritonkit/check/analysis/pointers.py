"""One walk from a pointer value back to the kernel argument whose elements it addresses (and, at the end, the
backward slice of the integer ops an offset is computed from).

It follows ``tt.addptr`` (collecting the offsets added), shape ops, and pointers carried by ``scf.for`` (an
:class:`Advance` per loop crossed: iteration k adds ``k * step``) and ``scf.while``; block pointers are followed
only when offsets are not wanted (their moves are no element offset), and a bitcast ends the walk (it reads other
elements than the argument's).
"""

from __future__ import annotations

import dataclasses

from .budgets import DECOMPOSE, OFFSET_SLICE, STRIP
from ..ir.mlir import Func, Op, elem_type, int_bits, shape_of

#: ops an integer passes through unchanged (a lane's value, whatever tile shape or width carries it)
THROUGH = {
    "tt.splat",
    "tt.broadcast",
    "tt.expand_dims",
    "tt.reshape",
    "tt.trans",
    "ttg.convert_layout",
    "arith.extsi",
    "arith.extui",
}
# ops a pointer passes through unchanged in element terms
_SAME_ELEMENT_PTR = {"tt.splat", "tt.broadcast", "tt.expand_dims", "tt.reshape", "tt.trans", "ttg.convert_layout"}
_BLOCK_PTR = {"tt.advance", "tt.make_tensor_ptr"}


@dataclasses.dataclass(frozen=True, eq=False)
class Advance:
    """Iteration k of ``loop`` adds ``k * step`` to the pointer (``step`` None: the move is not understood)."""

    loop: Op
    step: str | None

    def __hash__(self):
        return hash((id(self.loop), self.step))

    def __eq__(self, o):
        return isinstance(o, Advance) and o.loop is self.loop and o.step == self.step


Term = str | Advance


def while_condition(loop: Op) -> Op | None:
    """The scf.condition that ends an scf.while's before region."""
    if not loop.regions or not loop.regions[0]:
        return None
    ops = loop.regions[0][-1].ops
    return ops[-1] if ops and ops[-1].name == "scf.condition" else None


def _step(f: Func, loop: Op, arg: str, k: int) -> str | None:
    """The loop-invariant scalar the carried pointer ``arg`` (iter arg k) moves by per iteration, or None."""
    body = loop.regions[0][0] if loop.regions and loop.regions[0] else None
    y = body.ops[-1] if body is not None and body.ops else None
    if y is None or y.name != "scf.yield" or k - 1 >= len(y.operands):
        return None
    op = f.defs.get(y.operands[k - 1])
    if op is None or op.name != "tt.addptr" or op.operands[0] != arg:
        return None
    step = op.operands[1]
    d = f.defs.get(step)
    blk = f.block_args.get(step, (None, 0))[0]
    inside = (d is not None and loop.pos < d.pos <= loop.end) or (
        blk is not None and blk.parent is not None and (blk.parent is loop or loop in blk.parent.ancestors())
    )
    return None if inside or shape_of(f.types.get(step, "")) else step


def strip(f: Func, name: str) -> str:
    """The value behind shape ops and extensions: a lane's integer, whatever tile shape or width carries it."""
    for _ in range(STRIP.limit):
        op = f.defs.get(name)
        if op is None or op.name not in THROUGH or not op.operands:
            break
        name = op.operands[0]
    else:
        if (op := f.defs.get(name)) is not None and op.name in THROUGH and op.operands:
            STRIP.cut(f)
    return name


def split_sum(f: Func, name: str) -> list[str]:
    """The addends of an integer offset (``a + b * s`` -> [a, b * s]), looking through shape ops and extensions."""
    op = f.defs.get(name)
    if op is not None and op.name == "arith.addi":
        return split_sum(f, op.operands[0]) + split_sum(f, op.operands[1])
    if op is not None and op.name in THROUGH:
        return split_sum(f, op.operands[0])
    return [name]


def decompose(f: Func, name: str, block_ptrs: bool = False) -> tuple[str | None, list[Term]]:
    """(kernel argument the pointer addresses, offset terms added to it); (None, []) where the walk stops. With
    ``block_ptrs`` the walk goes through block pointers too (the argument is right, the terms are not)."""
    terms: list[Term] = []
    for _ in range(DECOMPOSE.limit):
        if name in f.block_args:
            blk, k = f.block_args[name]
            owner = blk.parent
            if owner is None:
                return (name if blk is f.body else None), terms
            if owner.name == "scf.for" and k >= 1 and k - 1 < len(owner.operands) - 3:
                terms.append(Advance(owner, _step(f, owner, name, k)))
                name = owner.operands[3 + k - 1]
            elif owner.name == "scf.while" and blk.region == 0 and k < len(owner.operands):
                terms.append(Advance(owner, None))
                name = owner.operands[k]
            elif (
                owner.name == "scf.while"
                and blk.region == 1
                and (cond := while_condition(owner)) is not None
                and k + 1 < len(cond.operands)
            ):
                # the body's arguments are what scf.condition forwards (operand 0 is the condition), in the same
                # iteration: the loop is crossed at the before region's arguments
                name = cond.operands[k + 1]
            else:
                return None, []
            continue
        op = f.defs.get(name)
        if op is None or not op.operands:
            return None, []
        if op.name == "tt.addptr":
            terms += split_sum(f, op.operands[1])
        elif op.name not in _SAME_ELEMENT_PTR and not (block_ptrs and op.name in _BLOCK_PTR):
            return None, []
        name = op.operands[0]
    DECOMPOSE.cut(f)
    return None, []


def base_arg(f: Func, name: str) -> str | None:
    """The kernel argument whose elements a pointer value addresses (block pointers included), or None."""
    return decompose(f, name, block_ptrs=True)[0]


def offset_slice(f: Func, name: str, through: bool = True) -> list[Op]:
    """Integer ops (in def order, deduplicated) whose values feed ``name``: the backward slice of an offset. With
    ``through=False`` the slice stops at bit extractions (:data:`EXTRACTIONS`): what feeds ``name`` other than
    through a right shift or a mask."""
    seen: set[str] = set()
    out: dict[int, Op] = {}
    stack = [name]
    while stack and len(seen) < OFFSET_SLICE.limit:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if v in f.block_args:
            blk, k = f.block_args[v]
            owner = blk.parent
            if owner is not None and owner.name == "scf.for":
                if k == 0:
                    stack += owner.operands[:3]
                else:
                    if 3 + k - 1 < len(owner.operands):
                        stack.append(owner.operands[3 + k - 1])
                    y = blk.ops[-1] if blk.ops else None
                    if y is not None and y.name == "scf.yield" and k - 1 < len(y.operands):
                        stack.append(y.operands[k - 1])
            continue
        op = f.defs.get(v)
        if op is None or op.name == "tt.load":
            continue
        if int_bits(f.types.get(v)) is None and op.name not in ("tt.splat", "tt.broadcast"):
            continue
        out[op.pos] = op
        if op.name == "scf.for":
            k = op.results.index(v)
            y = op.regions[0][0].ops[-1] if op.regions and op.regions[0][0].ops else None
            if y is not None and y.name == "scf.yield" and k < len(y.operands):
                stack.append(y.operands[k])
            continue
        if op.name == "scf.if":
            k = op.results.index(v)
            for region in op.regions:
                y = region[-1].ops[-1] if region and region[-1].ops else None
                if y is not None and y.name == "scf.yield" and k < len(y.operands):
                    stack.append(y.operands[k])
            continue
        if not through and op.name in EXTRACTIONS:
            continue
        stack += [x for x in op.operands if int_bits(f.types.get(x)) is not None]
    OFFSET_SLICE.stopped(f, stack, seen)
    return [out[k] for k in sorted(out)]


#: ops that keep some bits of their operand and drop the rest: what a packed field is read back through
EXTRACTIONS = ("arith.shrui", "arith.shrsi", "arith.andi")


def is_int32_offset(f: Func, name: str) -> bool:
    bits = int_bits(f.types.get(name))
    return bits is not None and bits <= 32 and elem_type(f.types.get(name, "")) != "i1"
