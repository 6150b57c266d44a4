"""Which thread holds which element of a load or a store: the layouts Triton gives them on the GPU target.

The rules read TTIR, which has no layouts. Whether a load re-reads only what its own thread stored depends on
them: Triton's coalescing pass picks each access's vector width from every memory access data-connected to it
(an fp16 load beside an fp32 store gives the fp32 load 8 elements a thread and the store 4), a [BLOCK] tile
smaller than the program's threads is replicated across warps (the store is done by one owner, the load by every
holder), and a value reduced out of a 2-D tile may be loaded in the tile's sliced layout, where many threads hold
each element. So :func:`same_owner` lowers the unit's TTIR to TTGIR here, on demand (Triton's own passes for the
target, as the GPU host would run them; about 13 ms for a small kernel, 0.1 s for an op's), and reads the two
accesses' layouts there.
"""

from __future__ import annotations

import contextlib
import re

from ..ir.locations import Locations
from ..ir.mlir import Func, Module, Op, parse_module, shape_of, split_top

_ALIAS = re.compile(r"^(#[\w$.\-]+)\s*=\s*(#.*)$")
_LIST = r"\[\s*([\d,\s]*)\]"


def _lower(ttir: str, options, arch: str) -> str | None:
    """The TTGIR Triton makes of this TTIR with these launch options for ``arch``, or None when it cannot."""
    try:
        from ... import _triton_compat as _compat
        from ..capture.target import parse_arch

        return _compat.ttir_to_ttgir(ttir, options, parse_arch(arch))
    except Exception:  # noqa: BLE001 - no layouts known: the caller keeps its finding
        return None


def _name_slices(text: str) -> tuple[str, dict[str, str]]:
    """``text`` with each inline ``#ttg.slice<{...}>`` encoding (outermost, nested ones kept inside it) replaced by
    an alias of its own, and those aliases: the IR reader drops ``<{...}>`` groups, and with them which layout a
    slice slices."""
    out, names, i = [], {}, 0
    by_text: dict[str, str] = {}
    while True:
        j = text.find("#ttg.slice<{", i)
        if j < 0:
            out.append(text[i:])
            break
        depth, k = 0, j + len("#ttg.slice")
        while k < len(text):
            depth += text[k] in "<{[("
            depth -= text[k] in ">}])"
            k += 1
            if depth == 0:
                break
        enc = text[j:k]
        name = by_text.setdefault(enc, f"#tk_slice{len(by_text)}")
        names[name] = enc
        out.append(text[i:j] + name)
        i = k
    return "".join(out), names


class Lowered:
    """A unit's TTGIR, its loads, stores and reductions found by their source location."""

    def __init__(self, text: str):
        self.text = text
        named, slices = _name_slices(text)
        self.mod: Module = parse_module(named)
        self.f: Func = self.mod.entry_func()
        self.encodings = dict(slices)
        for ln in text.splitlines():
            m = _ALIAS.match(ln.strip())
            if m and not m.group(1).startswith("#loc"):
                self.encodings[m.group(1)] = m.group(2).strip()
        locs = Locations(self.mod.aliases)
        self.by_site: dict[tuple, list[Op]] = {}
        self.owners: dict[tuple[int, int], bool] = {}  # (TTIR position of a, of b) -> what same_owner found
        for op in self.f.ops:
            if op.name in ("tt.load", "tt.store", "tt.reduce"):
                self.by_site.setdefault((op.name, locs.frames(op.loc)), []).append(op)

    def counterpart(self, key: tuple) -> Op | None:
        """The TTGIR access of a TTIR access at ``key`` (its name and source frames; ``k``-th of that key in
        program order): None unless the two IRs hold as many accesses there."""
        site, k, count = key
        ops = self.by_site.get(site, [])
        return ops[k] if len(ops) == count and k < count else None

    def encoding(self, value: str) -> str | None:
        t = self.f.types.get(value, "")
        if not t.startswith("tensor<") or not t.endswith(">"):
            return None
        parts = split_top(t[len("tensor<") : -1], ",")
        if len(parts) != 2:
            return None
        enc = parts[1].strip()
        return self.encodings.get(enc, enc)


def _ints(text: str, key: str) -> list[int] | None:
    m = re.search(rf"\b{key}\s*=\s*{_LIST}", text)
    return [int(x) for x in m.group(1).split(",") if x.strip()] if m else None


def distinct_owners(encoding: str, shape: tuple[int, ...]) -> bool:
    """A blocked layout that gives each element of ``shape`` to exactly one thread of one CTA: along every axis,
    its threads' elements, its warp's threads and its warps together span no more than the tile (a wider layout
    wraps around the tile, and a wrapped element is held by several threads)."""
    if not encoding.startswith("#ttg.blocked<") or not shape or min(shape) < 1:
        return False
    per = [_ints(encoding, k) for k in ("sizePerThread", "threadsPerWarp", "warpsPerCTA")]
    if any(p is None or len(p) != len(shape) for p in per):
        return False
    for k in ("CTAsPerCGA", "CTASplitNum"):
        v = _ints(encoding, k)
        if v is not None and any(x != 1 for x in v):
            return False
    return all(s * t * w <= d for s, t, w, d in zip(*per, shape))


_SLICE = re.compile(r"^#ttg\.slice<\{\s*dim\s*=\s*(\d+)\s*,\s*parent\s*=\s*(.*)\}>$")
_WARP_BASES = re.compile(r"\bwarp\s*=\s*\[((?:\s*\[[-\d,\s]*\]\s*,?)*)\]")


def warps_along(encoding: str, encodings: dict[str, str], axis: int, shape: tuple[int, ...]) -> bool | None:
    """Whether a tile of ``shape`` in ``encoding`` holds distinct elements in more than one warp along ``axis``
    (warps that hold copies of one another's elements do not count); None when the layout is not one read here
    (a blocked or linear layout, or a slice of one)."""
    encoding = encodings.get(encoding, encoding)
    m = _SLICE.match(encoding)
    if m:
        dim = int(m.group(1))
        parent_shape = (*shape[:dim], 1, *shape[dim:])
        return warps_along(m.group(2).strip(), encodings, axis + (axis >= dim), parent_shape)
    if encoding.startswith("#ttg.linear<"):
        w = _WARP_BASES.search(encoding)
        if w is None:
            return None
        bases = [[int(x) for x in b.split(",") if x.strip()] for b in re.findall(r"\[([-\d,\s]*)\]", w.group(1))]
        return any(len(b) > axis and b[axis] != 0 for b in bases)
    if encoding.startswith("#ttg.blocked<"):
        per = [_ints(encoding, k) for k in ("sizePerThread", "threadsPerWarp", "warpsPerCTA")]
        if any(p is None or len(p) != len(shape) for p in per) or not 0 <= axis < len(shape):
            return None
        spt, tpw, wpc = (p[axis] for p in per)
        # warps past the tile along the axis wrap onto it: they hold copies
        return wpc > 1 and spt * tpw < shape[axis]
    return None


def _site_key(locs: Locations, f: Func, op: Op) -> tuple:
    site = (op.name, locs.frames(op.loc))
    same = [o for o in f.ops if o.name == op.name and locs.frames(o.loc) == site[1]]
    return site, next(k for k, o in enumerate(same) if o is op), len(same)


def lowered(unit, f: Func, arch: str) -> Lowered | None:
    """The unit's TTGIR for ``arch`` (remembered with its TTIR: units that share it differ in launch options, which
    are part of the key), or None when it cannot be made or read."""
    opts = getattr(unit, "options", None)
    key = (arch, repr(sorted(getattr(opts, "__dict__", {}).items())))
    memo = f.memo.setdefault("ttgir", {})
    if key not in memo:
        ttir = getattr(getattr(unit, "compiled", None), "ttir", None)
        got = None
        # a Gluon kernel's IR carries its layouts already, and has no TTIR to lower: nothing is said of it here
        if ttir and opts is not None and "#ttg." not in ttir and "#gluon" not in ttir:
            text = _lower(ttir, opts, arch)
            if text is not None:
                with contextlib.suppress(Exception):
                    got = Lowered(text)
        memo[key] = got
    return memo[key]


def _one_plain_cta(low: Lowered | None) -> bool:
    """The TTGIR was read, and its program is one CTA with no warp specialization (what the layouts here describe)."""
    return (
        low is not None
        and "warp_specialize" not in low.text
        and bool(re.search(r'"ttg\.num-ctas"\s*=\s*1\b', low.text))
    )


def _counterpart(low: Lowered, module: Module, f: Func, op: Op) -> Op | None:
    """The TTGIR op of the TTIR ``op`` (a load, store or reduction), or None (see :meth:`Lowered.counterpart`)."""
    return low.counterpart(_site_key(Locations(module.aliases), f, op))


def reduces_across_warps(unit, f: Func, module: Module, arch: str, op: Op) -> bool:
    """The TTIR ``tt.reduce`` ``op`` combines elements that different warps hold, in the TTGIR Triton makes of the
    unit for ``arch``: Triton lowers it through shared memory behind a CTA barrier (a reduction within warps
    takes shuffles and no barrier), so every thread's earlier global accesses are ordered before every thread's
    later ones. False whenever that cannot be read (other layouts, warp specialization, several CTAs)."""
    low = lowered(unit, f, arch)
    if not _one_plain_cta(low):
        return False
    mine = _counterpart(low, module, f, op)
    axis = mine.attr_int("axis") if mine is not None and mine.operands else None
    if axis is None:
        return False
    enc = low.encoding(mine.operands[0])
    shape = shape_of(low.f.types.get(mine.operands[0], ""))
    return enc is not None and bool(shape) and bool(warps_along(enc, low.encodings, axis, shape))


#: TTGIR ops of a software-pipelined load: issued iterations ahead of the code around its TTIR position
_ASYNC_LOADS = re.compile(r"\b(ttg\.async_copy_global_to_local|ttng\.async_tma_copy_global_to_local|ttng\.tma_load)\b")


def issued_in_place(unit, f: Func, module: Module, arch: str, op: Op) -> bool:
    """The TTIR load or store ``op`` stays one plain access at its place in the TTGIR Triton makes of the unit for
    ``arch``, so whatever orders its TTIR position orders it: the TTGIR holds as many of them at its source site,
    and, for an access in a loop, no asynchronous copy (the pipeliner issues those iterations ahead, before the
    barriers of the iteration that reads them). False whenever that cannot be read."""
    low = lowered(unit, f, arch)
    if low is None or _counterpart(low, module, f, op) is None:
        return False
    in_loop = any(x.name in ("scf.for", "scf.while") for x in op.ancestors())
    return not (in_loop and _ASYNC_LOADS.search(low.text))


def same_owner(unit, f: Func, module: Module, arch: str, a: Op, b: Op) -> bool:
    """Each element accessed by ``a`` and ``b`` (a load or a store of the TTIR function ``f``, their pointers a
    tile of one shape) is held by the same single thread in both, in the TTGIR Triton makes of the unit for
    ``arch``: the two pointer tiles have one layout, a blocked layout that replicates no element across threads, in
    a program of one CTA and no warp specialization. False whenever that cannot be read."""
    low = lowered(unit, f, arch)
    if not _one_plain_cta(low):
        return False
    if (a.pos, b.pos) not in low.owners:
        mine = [_counterpart(low, module, f, op) for op in (a, b)]
        same = False
        if all(op is not None and op.operands for op in mine):
            encs = [low.encoding(op.operands[0]) for op in mine]
            shapes = [shape_of(low.f.types.get(op.operands[0], "")) for op in mine]
            same = encs[0] is not None and encs[0] == encs[1] and shapes[0] == shapes[1]
            same = same and distinct_owners(encs[0], shapes[0])
        low.owners[(a.pos, b.pos)] = same
    return low.owners[(a.pos, b.pos)]
