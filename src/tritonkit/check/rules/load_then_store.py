"""load-then-store: a store that may overwrite what another thread of the same program has not loaded yet.

The write-after-read sibling of ``store-then-load``: a tile loaded through one index mapping and stored back through
another (rows shifted by ``seqlen``, a transposed layout) gives an element to one thread in the load and to another
in the store, and nothing makes the store wait for the load. A load and a store through the same index expression
(the load-compute-store of one element per thread) are not reported: each thread writes only what it read.
"""

from __future__ import annotations

from ..memory import races
from . import Context, Finding, RuleInfo

RULE = RuleInfo(
    "load-then-store", "error", "store may overwrite what another thread has not loaded yet",
    "Triton does not order a global load before a later store to the same memory in the same program: when the "
    "two map elements to threads differently, one thread can overwrite an element another thread has not read "
    "yet, which then reads the new value.")


def check(ctx: Context) -> list[Finding]:
    out = []
    for unit, f, _mod in ctx.units():
        for s, ld, loop, hit in races(ctx, unit, f, write_first=False):
            file, line, col = ctx.frame(unit, s)
            _lf, lline, _ = ctx.frame(unit, ld)
            when = (f"in the previous iteration of the loop at line {ctx.frame(unit, loop)[1]}"
                    if loop is not None else "earlier in the same program")
            msg = (f"this store writes {hit.why} that the load at line {lline} read {when} through another "
                   f"index mapping, with no tl.debug_barrier() between them: a thread may overwrite an element "
                   f"another thread has not loaded yet")
            fix = (f"put tl.debug_barrier() between the load (line {lline}) and this store, or load and store "
                   f"through the same index expression")
            out.append(Finding(RULE.id, RULE.severity, unit.kernel.name, file, line, msg,
                               hit.launch.case, fix=fix, col=col,
                               tag=f"load@{lline}"))
    return out
