"""low-precision-accumulation: ``tl.dot`` accumulating in fp16/bf16, or a sum carried out in fp16/bf16 (a
reduction, a scan or a loop-carried accumulator)."""

from __future__ import annotations

from ..ir.mlir import elem_type
from . import Context, Finding, RuleInfo

RULE = RuleInfo(
    "low-precision-accumulation",
    "warning",
    "accumulation in fp16/bf16",
    "A running sum in float16 (11-bit significand) or bfloat16 (8-bit) stops growing once it is 2^11 (2^8) times "
    "the addends, and float16 overflows past 65504: long dot products, norms and softmax denominators go wrong.",
)

_LOW = {"f16": "float16", "bf16": "bfloat16"}
_SUMS = {"arith.addf", "arith.subf", "arith.mulf"}


def check(ctx: Context) -> list[Finding]:
    out = []
    for unit, f, _mod in ctx.units():
        case = unit.launches[0].case if unit.launches else {}
        for op in f.ops:
            hit = None
            if op.name == "tt.dot" and op.types and elem_type(op.types[0]) in _LOW:
                hit = (
                    f"`tl.dot` accumulates in {_LOW[elem_type(op.types[0])]}",
                    "accumulate in float32: `acc = tl.zeros(shape, tl.float32)` and `tl.dot(a, b, acc)` (or "
                    "`out_dtype=tl.float32`), then cast once at the store",
                )
            elif op.name in ("tt.reduce", "tt.scan") and op.regions:
                body = [o for blk in op.regions[0] for o in blk.ops]
                low = {elem_type(o.types[0]) for o in body if o.name in _SUMS and o.types} & set(_LOW)
                if low:
                    what = "reduction (`tl.sum`-like)" if op.name == "tt.reduce" else "scan (`tl.cumsum`-like)"
                    hit = (
                        f"a {what} is carried out in {_LOW[low.pop()]}",
                        "convert the input to float32 before reducing: `tl.sum(x.to(tl.float32), axis=...)`",
                    )
            elif op.name == "scf.for" and op.regions:
                body = op.regions[0][0]
                yld = body.ops[-1] if body.ops else None
                for k, (arg, t) in enumerate(body.args[1:]):
                    if elem_type(t) not in _LOW or yld is None or k >= len(yld.operands):
                        continue
                    d = f.defs.get(yld.operands[k])
                    if d is not None and d.name in ("arith.addf", "arith.subf") and arg in d.operands:
                        hit = (
                            f"a loop accumulates into a {_LOW[elem_type(t)]} value",
                            "make the accumulator float32 (`tl.zeros(shape, tl.float32)`) and cast once after the loop",
                        )
                        op = d
                        break
            if hit is None:
                continue
            file, line, col = ctx.frame(unit, op)
            out.append(
                Finding(
                    RULE.id, RULE.severity, unit.kernel.name, file, line, hit[0], case, fix=hit[1], col=col, tag=op.name
                )
            )
    return out
