"""The rules. Each module exposes ``RULE`` (its :class:`RuleInfo`) and ``check(ctx) -> list[Finding]``.

Rule ids are part of the interface (``--rule``, JSON, SARIF, suppressions, baselines, ``--explain``); each rule's
page (the bug, a failing kernel, the fix) ships in the package as ``tritonkit/check/docs/<id>.md``.
"""

from __future__ import annotations

import dataclasses
import linecache
import os
from collections.abc import Iterator

import triton

from ..analysis import budgets
from ..capture.launches import Capture, Launch, Unit
from ..findings import Finding, Problem
from ..ir.locations import Locations
from ..ir.mlir import Func, Module, Op
from ..analysis.pointers import THROUGH
from ..analysis.ranges import Bindings, RangeAnalysis
from ..ir.source import legacy_position

_TRITON_DIR = os.path.dirname(triton.__file__) + os.sep


def users_of(f: Func) -> dict[str, list[Op]]:
    """Each value's using ops, in program order (built once a function, kept in its memo)."""
    users = f.memo.get("users")
    if users is None:
        users = f.memo["users"] = {}
        for o in f.ops:
            for v in o.operands:
                users.setdefault(v, []).append(o)
    return users


def _same_site_depth(f: Func, op: Op, locs: Locations) -> int:
    """How many ops of ``op``'s name and location use its result, one through the next (through shape ops and
    extensions): 1 for the inner ``arith.muli`` of ``a * b * c``, 0 for the outer."""
    users = users_of(f)
    here = locs.frames(op.loc)[:1]
    n, cur, seen = 0, op, {id(op)}
    while True:
        stack, nxt = list(cur.results), None
        while stack and nxt is None:
            for u in users.get(stack.pop(), ()):
                if u.name in THROUGH:
                    stack += u.results
                elif u.name == op.name and id(u) not in seen and locs.frames(u.loc)[:1] == here:
                    nxt = u
                    break
        if nxt is None:
            return n
        seen.add(id(nxt))
        n, cur = n + 1, nxt


@dataclasses.dataclass(frozen=True)
class RuleInfo:
    id: str
    severity: str
    title: str
    why: str


class Context:
    """What every rule reads: the capture, parsed IR, source locations and the range analysis (cached)."""

    def __init__(self, capture: Capture, arch: str):
        self.capture = capture
        self.arch = arch
        self.problems: list[Problem] = []
        self._seen_problems: set[tuple[str, str, str]] = set()
        self._locs: dict[int, tuple[Locations, bool]] = {}  # per unit: its locations, and whether at node starts
        self._union: dict[tuple, RangeAnalysis] = {}
        self._per_launch: dict[tuple, RangeAnalysis] = {}

    # -- problems -------------------------------------------------------------------------------------------
    def problem(self, kind: str, where: str, message: str, fatal: bool = True) -> None:
        k = (kind, where, message)
        if k not in self._seen_problems:
            self._seen_problems.add(k)
            self.problems.append(Problem(kind, where, message, fatal))

    def note(self, unit: Unit, op: Op, message: str) -> None:
        file, line, _ = self.frame(unit, op)
        self.problem("ir", f"{unit.kernel.name} at {file}:{line}", message, fatal=False)

    def unchecked(self, unit: Unit, op: Op, message: str) -> None:
        """Part of the kernel went unchecked (the run exits 2): a rule gave up before it could decide."""
        file, line, _ = self.frame(unit, op)
        self.problem("rule", f"{unit.kernel.name} at {file}:{line}", message, fatal=True)

    def budget_notes(self) -> None:
        """A note for each kernel whose IR a walk stopped following at its budget (see :mod:`..analysis.budgets`)."""
        for info in self.capture.kernels.values():
            for unit in info.units.values():
                parsed = unit.parsed()
                for b in budgets.cuts(parsed[0]) if parsed is not None else ():
                    self.problem("ir", f"{info.name} ({info.file}:{info.line})", budgets.cut_note(b), fatal=False)

    # -- IR -------------------------------------------------------------------------------------------------
    def units(self) -> Iterator[tuple[Unit, Func, Module]]:
        for info in self.capture.kernels.values():
            for unit in info.units.values():
                if unit.compiled.error:
                    self.problem(
                        "compile",
                        f"{info.name} ({info.file}:{info.line})",
                        f"failed to compile for {self.arch}: {unit.compiled.error}",
                    )
                    continue
                parsed = unit.func()
                if parsed is None:
                    self.problem(
                        "ir",
                        f"{info.name} ({info.file}:{info.line})",
                        f"its TTIR could not be read: {unit._parse_error}",
                    )
                    continue
                yield unit, parsed[0], parsed[1]

    def frame(self, unit: Unit, op: Op | None) -> tuple[str, int, int]:
        """(file, line, col) of an op in user code; the kernel's def line when the IR has no location."""
        return self.located(unit, op) or (unit.kernel.file, unit.kernel.line, 0)

    def located(self, unit: Unit, op: Op | None) -> tuple[str, int, int] | None:
        """(file, line, col) of an op in user code, or None when the IR gives it no location there. Read as Triton
        3.7 locates ops on every release: the column is in the kernel's dedented source (see :mod:`..ir.source`)."""
        if op is None:
            return None
        parsed = unit.func()
        got = self._locs.get(id(unit))
        if got is None:
            locs = Locations(parsed[1].aliases)
            # the kernel's `def`: the function's own location, or an argument's (named after it)
            at_def = parsed[0].loc or next((loc for _a, _t, loc in parsed[0].args if loc), None)
            got = self._locs[id(unit)] = (locs, locs.node_starts(at_def))
        locs, node_starts = got
        fr, call_site = locs.user_site(op.loc, (_TRITON_DIR,))
        if fr is None or not fr.file:
            return None
        if node_starts:
            # Triton 3.8 on: where 3.7 put it, so that names, lines and columns agree across releases
            pos = legacy_position(
                fr.file, fr.line, fr.col, None if call_site else op.name, lambda: _same_site_depth(parsed[0], op, locs)
            )
            if pos is not None:
                return fr.file, pos[0], pos[1]
        return fr.file, fr.line, fr.col

    # -- ranges ---------------------------------------------------------------------------------------------
    def bindings(self, unit: Unit, f: Func, launches: list[Launch], **extra) -> Bindings:
        """Union of what ``launches`` bind: max grid per axis, (min, max) of each integer argument."""
        names = [a for a, _t, _l in f.args]
        if len(names) == len(unit.ir_params):
            ir_of = dict(zip(unit.ir_params, names))
        else:
            ir_of = {p: p for p in unit.ir_params if p in names}
        grids = [ln.grid for ln in launches if ln.grid]
        grid = tuple(max(g[k] for g in grids) for k in range(3)) if grids else None
        args: dict[str, tuple[int, int]] = {}
        loaded: dict[str, tuple[int, int]] = {}
        bounded: dict[str, int] = {}  # pointer argument -> how many of the launches bound it
        kname = unit.kernel.name
        for ln in launches:
            for p, v in ln.int_args.items():
                if p in ir_of:
                    lo, hi = args.get(ir_of[p], (v, v))
                    args[ir_of[p]] = (min(lo, v), max(hi, v))
            mine: set[str] = set()
            for k, (lo, hi) in ln.loaded_bounds.items():
                kk, _, p = k.rpartition(".")
                if (not kk or kk == kname) and p in ir_of:
                    a = ir_of[p]
                    plo, phi = loaded.get(a, (lo, hi))
                    loaded[a] = (min(plo, lo), max(phi, hi))
                    mine.add(a)
            for a in mine:
                bounded[a] = bounded.get(a, 0) + 1
        # a bound holds for the launches of the case that declares it: a launch without one loads any value
        partial = {a: b for a, b in loaded.items() if bounded[a] < len(launches)}
        loaded = {a: b for a, b in loaded.items() if bounded[a] == len(launches)}
        if extra.get("loads_nonneg"):
            # the launches without a bound load values >= 0 under this assumption: the hull of both
            loaded.update({a: (min(lo, 0), 2**63 - 1) for a, (lo, _hi) in partial.items()})
        return Bindings(grid, args, loaded, _nondecreasing(launches, ir_of, kname), **extra)  # type: ignore[arg-type]

    def union_ranges(self, unit: Unit, f: Func, **extra) -> RangeAnalysis:
        """The ranges over all the unit's launches; ``extra`` sets :class:`Bindings` fields (an assumption)."""
        key = (id(unit), tuple(sorted(extra.items())))
        ra = self._union.get(key)
        if ra is None:
            ra = self._union[key] = RangeAnalysis(f, self.bindings(unit, f, unit.launches, **extra)).run()
        return ra

    def launch_ranges(self, unit: Unit, f: Func, ln: Launch, **extra) -> RangeAnalysis:
        """The ranges of one launch (cached by what it binds: launches binding the same values share them)."""
        key = (
            id(unit),
            ln.grid,
            tuple(sorted(ln.int_args.items())),
            tuple(sorted(ln.loaded_bounds.items())),
            tuple(sorted(ln.nondecreasing.items())),
            tuple(sorted(extra.items())),
        )
        ra = self._per_launch.get(key)
        if ra is None:
            ra = self._per_launch[key] = RangeAnalysis(f, self.bindings(unit, f, [ln], **extra)).run()
        return ra


def _nondecreasing(launches: list[Launch], ir_of: dict[str, str], kname: str) -> dict[str, int | None]:
    """IR argument -> largest step of the arrays every launch declares non-decreasing (the largest step any declares;
    None when one declares no step)."""
    out: dict[str, int | None] = {}
    for i, ln in enumerate(launches):
        mine: dict[str, int | None] = {}
        for k, step in ln.nondecreasing.items():
            kk, _, p = k.rpartition(".")
            if (not kk or kk == kname) and p in ir_of:
                mine[ir_of[p]] = step
        if i == 0:
            out = mine
        else:
            out = {a: (None if s is None or mine[a] is None else max(s, mine[a])) for a, s in out.items() if a in mine}
    return out


def source_line(file: str, line: int) -> str:
    return linecache.getline(file, line).rstrip("\n") if line > 0 else ""


def display(name: str) -> str:
    """A readable name for an SSA value: ``%blk_27`` -> ``blk``; numbered temporaries stay anonymous."""
    base = name.split("@")[0].split("#")[0]
    while "_" in base and base.rsplit("_", 1)[1].isdigit():
        base = base.rsplit("_", 1)[0]
    return "" if not base or base[0].isdigit() else base


def rule_page(rule_id: str) -> str:
    """The rule's page (markdown), as installed with the package."""
    from importlib import resources

    return (resources.files("tritonkit.check") / "docs" / f"{rule_id}.md").read_text(encoding="utf-8")


def all_rules():
    """id -> rule module, in report order (the modules ``check/registry.py`` lists)."""
    import importlib

    from ..registry import MODULES

    mods = [importlib.import_module(f"{__name__}.{m}") for m in MODULES]
    return {m.RULE.id: m for m in mods}


__all__ = ["Context", "Finding", "RuleInfo", "all_rules", "display", "rule_page", "source_line"]
