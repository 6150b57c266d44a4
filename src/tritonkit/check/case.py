"""``@tritonkit.case``: declare the launches ``tritonkit check`` captures.

A case is a function that builds inputs on ``device="meta"`` and calls the code that launches kernels. The
decorator's keyword arguments are lists; the checker calls the function once per element of their cartesian
product (a scalar counts as a one-element list)::

    @tritonkit.case(num_tokens=[1, 16, 17, 70_000], use_bias=[0, 1])
    def write_kv(num_tokens, use_bias):
        ...

Two keywords are reserved:

- ``loaded_bounds={"block_table_ptr": (0, 65535)}`` declares the range of integers a kernel loads through that
  pointer argument (by parameter name, or ``"kernel_name.param"``). Without it a loaded index may be any value of
  its type, which is what the ``int32-offset`` rule assumes. A bound applies to the launches of the case that
  declares it only; a key that names no pointer parameter of a kernel the case launched refuses the case (it is
  reported, its launches are not checked, and the run exits 2).
- ``sweep=["num_tokens"]`` names the parameters that change from call to call in one deployment: launches that
  differ only in them must share a compile (the ``recompile`` rule). By default the parameters whose names are
  per-call sizes (``num_tokens``, ``num_seqs``, ``batch``, ...) if the case has any, else all of them.

This module imports neither Triton nor torch: decorating costs nothing at import time.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
from collections.abc import Callable, Mapping
from typing import Any

#: every case defined so far, in definition order; the loader reads what a file added
REGISTRY: list[Case] = []


@dataclasses.dataclass(eq=False)
class Case:
    fn: Callable[..., Any]
    params: dict[str, tuple[Any, ...]]
    loaded_bounds: dict[str, tuple[int, int]]
    file: str
    line: int
    sweep: tuple[str, ...] | None = None

    @property
    def name(self) -> str:
        return getattr(self.fn, "__qualname__", getattr(self.fn, "__name__", "case"))

    def expand(self) -> list[dict[str, Any]]:
        """The parameter dicts of the cartesian product, in the order the lists were given."""
        names = list(self.params)
        return [dict(zip(names, values)) for values in itertools.product(*(self.params[n] for n in names))]


def _as_values(name: str, v: Any) -> tuple[Any, ...]:
    if isinstance(v, (list, tuple, range)):
        if len(v) == 0:
            raise ValueError(f"tritonkit.case: parameter {name!r} has an empty list of values")
        return tuple(v)
    return (v,)


def _bounds(lb: Mapping[str, Any] | None) -> dict[str, tuple[int, int]]:
    out = {}
    for k, v in (lb or {}).items():
        lo, hi = v
        if int(lo) > int(hi):
            raise ValueError(f"tritonkit.case: loaded_bounds[{k!r}] = {v!r} has lo > hi")
        out[str(k)] = (int(lo), int(hi))
    return out


def case(_fn: Callable[..., Any] | None = None, *, loaded_bounds: Mapping[str, Any] | None = None,
         sweep: list[str] | tuple[str, ...] | None = None, **params: Any):
    """Register a case; usable bare (``@tritonkit.case``) or with parameter lists."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        try:
            file = inspect.getsourcefile(fn) or "<unknown>"
            line = inspect.getsourcelines(fn)[1]
        except (OSError, TypeError):
            file, line = getattr(getattr(fn, "__code__", None), "co_filename", "<unknown>"), 0
        if sweep is not None and set(sweep) - set(params):
            raise ValueError(f"tritonkit.case: sweep names {sorted(set(sweep) - set(params))}, not parameters")
        c = Case(fn, {k: _as_values(k, v) for k, v in params.items()}, _bounds(loaded_bounds), file, line,
                 tuple(sweep) if sweep is not None else None)
        REGISTRY.append(c)
        fn.__tritonkit_case__ = c
        return fn

    if _fn is not None:
        if not callable(_fn):
            raise TypeError("tritonkit.case takes keyword arguments: @tritonkit.case(num_tokens=[1, 16])")
        return register(_fn)
    return register
