"""load-then-store: a store that may overwrite what another thread of the same program has not loaded yet.

The write-after-read sibling of ``store-then-load``: a tile loaded through one index mapping and stored back through
another (rows shifted by ``seqlen``, a transposed layout) gives an element to one thread in the load and to another
in the store, and nothing makes the store wait for the load. A load and a store through the same index expression
(the load-compute-store of one element per thread) are not reported: each thread writes only what it read. Nor is
a read-modify-write through one pointer expression under one mask (``acc = tl.load(c + ram[:, None] * s, mask=m)``
then ``tl.store(c + ram[:, None] * s, acc + x, mask=m)``): each lane stores what it loaded, and lanes meet only
where gathered row ids repeat, a lost update no barrier fixes.
"""

from __future__ import annotations

from ..analysis.addresses import same_terms
from ..analysis.memory import races
from ..ir.mlir import Func, Op
from ..analysis.pointers import decompose
from . import Context, Finding, RuleInfo

RULE = RuleInfo(
    "load-then-store",
    "error",
    "store may overwrite what another thread has not loaded yet",
    "Triton does not order a global load before a later store to the same memory in the same program: when the "
    "two map elements to threads differently, one thread can overwrite an element another thread has not read "
    "yet, which then reads the new value.",
)


def _differs(f: Func, ld: Op, st: Op, loop) -> str:
    """What sets the two accesses apart, in words: the pointer expression, or (one expression) the mask or the
    iteration that gives it another value."""
    pa, pb = ld.operands[0], st.operands[0]
    same = pa == pb
    if not same:
        (ba, ta), (bb, tb) = decompose(f, pa), decompose(f, pb)
        same = ba is not None and ba == bb and same_terms(f, ta, tb, {})
    if not same:
        return "through another index mapping"
    k = (1, 2)
    masks = [op.operands[i] if len(op.operands) > i else None for op, i in zip((ld, st), k)]
    if masks[0] != masks[1]:
        return "through the same pointer expression under another mask (the lanes that store are not those that load)"
    if loop is not None:
        return "through the same pointer expression, which the loop gives another value in each iteration"
    return (
        "through the same pointer expression, which gives several lanes (threads) one element (a broadcast axis, "
        "`offs // 2`)"
    )


def check(ctx: Context) -> list[Finding]:
    out = []
    for unit, f, _mod in ctx.units():
        for s, ld, loop, hit in races(ctx, unit, f, write_first=False):
            file, line, col = ctx.frame(unit, s)
            _lf, lline, _ = ctx.frame(unit, ld)
            when = (
                f"in the previous iteration of the loop at line {ctx.frame(unit, loop)[1]}"
                if loop is not None
                else "earlier in the same program"
            )
            msg = (
                f"this store writes {hit.why} that the load at line {lline} read {when} "
                f"{_differs(f, ld, s, loop)}, with no tl.debug_barrier() between them: a thread may overwrite an "
                f"element another thread has not loaded yet"
            )
            fix = (
                f"put tl.debug_barrier() between the load (line {lline}) and this store, or load and store "
                f"through the same index expression"
            )
            out.append(
                Finding(
                    RULE.id,
                    RULE.severity,
                    unit.kernel.name,
                    file,
                    line,
                    msg,
                    hit.launch.case,
                    fix=fix,
                    col=col,
                    tag=f"load@{lline}",
                )
            )
    return out
