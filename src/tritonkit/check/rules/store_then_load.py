"""store-then-load: a load that may read what the same program stored earlier, with no barrier between.

Triton does not order a ``tl.store`` before a later ``tl.load`` of the same global memory within one program: the
two may use different thread-to-element layouts, so one thread can read an element another thread has not
written yet. ``tl.debug_barrier()`` between them is the fix.
"""

from __future__ import annotations

from ..analysis.memory import races
from . import Context, Finding, RuleInfo

RULE = RuleInfo(
    "store-then-load",
    "error",
    "load may read this program's earlier store without a barrier",
    "Triton does not order a global store before a later load in the same program: the load may be done by a "
    "different thread than the store of the same element, and read the old value.",
)


def check(ctx: Context) -> list[Finding]:
    out = []
    for unit, f, _mod in ctx.units():
        for ld, s, loop, hit in races(ctx, unit, f, write_first=True):
            file, line, col = ctx.frame(unit, ld)
            _sf, sline, _ = ctx.frame(unit, s)
            when = (
                f"in the next iteration of the loop at line {ctx.frame(unit, loop)[1]}"
                if loop is not None
                else "earlier in the same program"
            )
            msg = (
                f"this load reads {hit.why} that the store at line {sline} wrote {when}, with no "
                f"tl.debug_barrier() between them: a thread may read an element another thread has not "
                f"stored yet"
            )
            fix = (
                f"put tl.debug_barrier() between the store (line {sline}) and this load, or keep the stored "
                f"values in registers instead of reading them back"
            )
            # an aliasing finding shows the case whose launch passed the two views
            case = hit.launch.case
            out.append(
                Finding(
                    RULE.id,
                    RULE.severity,
                    unit.kernel.name,
                    file,
                    line,
                    msg,
                    case,
                    fix=fix,
                    col=col,
                    tag=f"store@{sline}",
                )
            )
    return out
