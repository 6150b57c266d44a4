"""How far the checker's walks over one kernel's IR go: every budget in one place, and the note a cut leaves.

A walk that reaches its budget stops and answers as if the rest were unknown (a shorter slice, an unbounded value,
no fact): the analysis stays sound for what it reports but may miss or blur a finding past the cut. Each cut is
recorded on the function it happened in; :func:`cut_notes` turns them into non-fatal ``ir`` problems, so a run
says when a budget, not the kernel, decided what was checked. The numbers are far above what the corpus, the
real-world kernels and the built-in ops need (none of them cuts).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

_CUTS = "budget cuts"  # the key of Func.memo holding the budgets that cut a walk over that function


class Budget:
    """A walk's limit: ``limit`` steps of ``walk`` (what it follows, in a phrase)."""

    __slots__ = ("name", "limit", "walk")

    def __init__(self, name: str, limit: int, walk: str):
        self.name, self.limit, self.walk = name, limit, walk

    def cut(self, f) -> None:
        """Record that a walk over ``f`` (a :class:`~..ir.mlir.Func`) stopped at this budget."""
        f.memo.setdefault(_CUTS, {})[self.name] = self

    def stopped(self, f, stack: Iterable, seen: Collection) -> bool:
        """A worklist walk has ended: record a cut when it left values unvisited. True when it did."""
        if len(seen) >= self.limit and any(v not in seen for v in stack):
            self.cut(f)
            return True
        return False

    def __repr__(self) -> str:
        return f"Budget({self.name!r}, {self.limit})"


# -- worklist walks (values visited) ----------------------------------------------------------------------------
PLACEMENTS = Budget("placements", 8192, "the values an access's pointer and mask are computed from")
OFFSET_SLICE = Budget("offset-slice", 4096, "the backward slice of an offset")
ORIGIN = Budget("origin", 256, "the values an overflowing result is computed from (to name its origin)")
RING_SLICE = Budget("ring-slice", 4096, "the wrapping arithmetic that reaches a pointer")
# -- chains (steps along one value's definitions) ---------------------------------------------------------------
ROOT = Budget("root", 8, "sign and zero extensions back to the value compared")
STRIP = Budget("strip", 32, "shape ops and extensions back to a lane's integer")
DECOMPOSE = Budget("decompose", 512, "pointer arithmetic back to the kernel argument it addresses")
# -- recursions (nesting depth) ---------------------------------------------------------------------------------
FACTS = Budget("facts", 16, "the conditions an i1 value combines (and, or, not)")
AFFINE = Budget("affine", 16, "a loop counter's affine form through adds and multiplies")
INJECTIVE = Budget("injective", 16, "the ops that keep lanes apart")
VALUES_ONLY = Budget("values-only", 16, "the ops a value is computed from (looking for a pointer)")
CANON = Budget("canon", 32, "an expression's structure (to compare two accesses)")
VARYING_AXES = Budget("varying-axes", 64, "the shape ops that lay a value along tile axes")
NARROW_OPERANDS = Budget("narrow-operands", 4, "the operands a branch condition's bound narrows")

ALL = (
    PLACEMENTS,
    OFFSET_SLICE,
    ORIGIN,
    RING_SLICE,
    ROOT,
    STRIP,
    DECOMPOSE,
    FACTS,
    AFFINE,
    INJECTIVE,
    VALUES_ONLY,
    CANON,
    VARYING_AXES,
    NARROW_OPERANDS,
)


def cuts(f) -> list[Budget]:
    """The budgets that cut a walk over ``f`` so far, by name."""
    return sorted(f.memo.get(_CUTS, {}).values(), key=lambda b: b.name)


def cut_note(b: Budget) -> str:
    return (
        f"the analysis stopped following {b.walk} at its budget of {b.limit} (`{b.name}` in "
        f"tritonkit/check/analysis/budgets.py): past it values count as unknown, so a finding there may be missed"
    )
