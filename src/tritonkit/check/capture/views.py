"""Which bytes a tensor argument can reach, and whether two views of one storage share any.

Two column slices of one fused projection (``q = qkv[:, :4096]``, ``k = qkv[:, 4096:5120]``) have interleaved
byte spans but no byte in common; a buffer and itself shifted by one column share almost all. The test is exact:
a view holds the bytes ``offset + sum(i_d * stride_d) + e`` (``0 <= i_d < size_d``, ``0 <= e < itemsize``), so
two views share a byte when a bounded integer equation has a solution, which :func:`common_byte` searches for
(terms with the same stride merge into one, which keeps the search to a handful of steps for real layouts).
"""

from __future__ import annotations

import dataclasses
import functools

#: steps of the search before it gives up and answers "may overlap"
BUDGET = 100_000


@dataclasses.dataclass(frozen=True)
class View:
    storage: int
    offset: int  # bytes from the storage's start
    sizes: tuple[int, ...]
    strides: tuple[int, ...]  # bytes
    itemsize: int

    def span(self) -> tuple[int, int]:
        """[first, last + 1) byte of the storage the view holds."""
        return self.offset, self.offset + sum((n - 1) * s for n, s in zip(self.sizes, self.strides)) + self.itemsize

    def index(self, byte: int) -> tuple[int, ...] | None:
        """The index of the element holding ``byte`` (None when the view does not hold it)."""
        terms = [(s, 0, n - 1, d) for d, (n, s) in enumerate(zip(self.sizes, self.strides)) if n > 1]
        found = solve(terms + [(1, 0, self.itemsize - 1, None)], byte - self.offset)
        if found is None or found is GAVE_UP:
            return None
        return tuple(found.get(d, 0) for d in range(len(self.sizes)))

    def describe(self) -> str:
        shape = ", ".join(map(str, self.sizes))
        strides = ", ".join(str(s // self.itemsize) for s in self.strides)
        a, b = self.span()
        return f"[{shape}] with strides ({strides}) at bytes {a:,}..{b - 1:,}"


def view_of(t) -> View | None:
    """The view a tensor argument is (None for an empty tensor or anything without a storage)."""
    try:
        if t.numel() == 0:
            return None
        st = t.untyped_storage()
        es = t.element_size()
        key = getattr(st, "_cdata", None) or id(st)
        return View(
            key, t.storage_offset() * es, tuple(int(n) for n in t.shape), tuple(int(s) * es for s in t.stride()), es
        )
    except Exception:  # noqa: BLE001 - not a tensor we can read: no view, no alias
        return None


class _Budget(Exception):
    pass


#: what :func:`solve` answers when the search ran out of steps
GAVE_UP = object()


def solve(terms: list[tuple[int, int, int, object]], target: int):
    """Values for ``sum(coef * x) == target`` with ``lo <= x <= hi`` for each (coef, lo, hi, tag) term: {tag: x}
    (untagged terms left out), None when there is none, GAVE_UP past BUDGET steps."""
    groups: dict[int, list] = {}  # |coef| -> its terms as (sign, lo, hi, tag)
    for coef, lo, hi, tag in terms:
        if coef:
            groups.setdefault(abs(coef), []).append((1 if coef > 0 else -1, lo, hi, tag))
    # terms with one |coef| merge into one whose range is the sum of theirs (a contiguous range again)
    order = []
    for c, members in sorted(groups.items(), reverse=True):
        order.append(
            (
                c,
                sum(lo if s > 0 else -hi for s, lo, hi, _ in members),
                sum(hi if s > 0 else -lo for s, lo, hi, _ in members),
                members,
            )
        )
    rest = [(0, 0)] * (len(order) + 1)  # the least and most the terms from position k on can add
    for k in range(len(order) - 1, -1, -1):
        c, lo, hi, _m = order[k]
        rest[k] = (rest[k + 1][0] + c * lo, rest[k + 1][1] + c * hi)
    chosen: list[int] = []
    steps = [0]

    def dfs(k: int, left: int) -> bool:
        if k == len(order):
            return left == 0
        steps[0] += 1
        if steps[0] > BUDGET:
            raise _Budget
        c, lo, hi, _m = order[k]
        rlo, rhi = rest[k + 1]
        # c * x must leave what the later terms can make: left - c * x in [rlo, rhi]
        for x in range(max(lo, -((rhi - left) // c)), min(hi, (left - rlo) // c) + 1):
            chosen.append(x)
            if dfs(k + 1, left - c * x):
                return True
            chosen.pop()
        return False

    try:
        if not dfs(0, target):
            return None
    except _Budget:
        return GAVE_UP
    out = {}
    for (_c, _lo, _hi, members), total in zip(order, chosen):
        # split the merged value back: every term starts at its lowest value, then terms of the sign that moves the
        # sum toward the total grow (the smallest indices that meet it)
        vals = [lo for _s, lo, _hi, _t in members]
        cur = sum(s * v for (s, *_r), v in zip(members, vals))
        for k, (s, lo, hi, _t) in enumerate(members):
            step = min(hi - lo, abs(total - cur))
            if step > 0 and (s > 0) == (total > cur):
                vals[k] += step
                cur += s * step
        out.update({t: v for (_s, _lo, _hi, t), v in zip(members, vals) if t is not None})
    return out


@functools.lru_cache(maxsize=4096)
def common_byte(a: View, b: View) -> int | None | bool:
    """A byte of the storage both views hold, None when they share none, True when the search gave up (treat as
    overlapping)."""
    if a.storage != b.storage:
        return None
    (a0, a1), (b0, b1) = a.span(), b.span()
    if a1 <= b0 or b1 <= a0:
        return None
    # a.offset + sum(i * sa) + e == b.offset + sum(j * sb) + e'   <=>   sum(i * sa) - sum(j * sb) + (e - e') == ob - oa
    terms = [(s, 0, n - 1, d) for d, (n, s) in enumerate(zip(a.sizes, a.strides)) if n > 1]
    terms += [(-s, 0, n - 1, None) for n, s in zip(b.sizes, b.strides) if n > 1]
    terms.append((1, -(b.itemsize - 1), a.itemsize - 1, None))
    found = solve(terms, b.offset - a.offset)
    if found is None:
        return None
    if found is GAVE_UP:
        return True
    return a.offset + sum(v * a.strides[d] for d, v in found.items())
