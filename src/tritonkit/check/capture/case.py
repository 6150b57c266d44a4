"""``@tritonkit.case``: declare the launches ``tritonkit check`` captures.

A case is a function that builds inputs on ``device="meta"`` and calls the code that launches kernels. The
decorator's keyword arguments are lists; the checker calls the function once per element of their cartesian
product (a scalar counts as a one-element list)::

    @tritonkit.case(num_tokens=[1, 16, 17, 70_000], use_bias=[0, 1])
    def write_kv(num_tokens, use_bias):
        ...

Three keywords are reserved:

- ``loaded_bounds={"block_table_ptr": (0, 65535)}`` declares the range of integers a kernel loads through that
  pointer argument (by parameter name, or ``"kernel_name.param"``). Without it a loaded index may be any value of
  its type, which is what the ``int32-offset`` rule assumes. A bound applies to the launches of the case that
  declares it only; a key that names no pointer parameter of a kernel the case launched refuses the case (it is
  reported, its launches are not checked, and the run exits 2).
- ``nondecreasing=["query_start_loc_ptr"]`` declares that the integers a kernel loads through that pointer argument
  never decrease along the array (cumulative offsets: ``cu_seqlens``, ``query_start_loc``, per-adapter token
  starts). The difference of two of its elements, the one at the larger index minus the other, is then a length:
  at least 0 (the checker takes it so for any array a kernel subtracts two elements of, declared or not). A dict
  gives each array's largest step between neighbours too (``{"cu_seqlens_ptr": 8192}``), which bounds such a
  difference from above (``None``: no bound). Keys are checked like ``loaded_bounds`` keys.
- ``sweep=["num_tokens"]`` names the parameters that change from call to call in one deployment: launches that
  differ only in them must share a compile (the ``recompile`` rule). By default the parameters whose names are
  per-call sizes (``num_tokens``, ``num_seqs``, ``batch``, ...) if the case has any, else all of them (a recompile
  finding that rests on that says so); ``sweep=[]``: none, each run is a use of its own.

This module imports neither Triton nor torch: decorating costs nothing at import time.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
from collections.abc import Callable, Mapping
from typing import Any

#: shape keys that change from call to call within one deployment: launches that differ only in these belong to
#: one sweep, and must not recompile (the recompile rule groups launches by the other keys)
PER_CALL_KEYS = (
    "num_tokens",
    "num_seqs",
    "batch",
    "batch_size",
    "seq_len",
    "max_seq_len",
    "max_seqlen",
    "context_len",
    "num_blocks",
)

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
    nondecreasing: dict[str, int | None] = dataclasses.field(default_factory=dict)

    @property
    def name(self) -> str:
        return getattr(self.fn, "__qualname__", getattr(self.fn, "__name__", "case"))

    def expand(self) -> list[dict[str, Any]]:
        """The parameter dicts of the cartesian product, in the order the lists were given."""
        names = list(self.params)
        return [dict(zip(names, values)) for values in itertools.product(*(self.params[n] for n in names))]


class Declared(dict):
    """A case's ``loaded_bounds`` (the dict itself) and its ``nondecreasing`` arrays: what the runner hands the
    capture for each of the case's runs."""

    def __init__(self, bounds: Mapping[str, tuple[int, int]], nondecreasing: Mapping[str, int | None]):
        super().__init__(bounds)
        self.nondecreasing = dict(nondecreasing)


@dataclasses.dataclass(frozen=True)
class CaseContext:
    """What the case being run tells each launch it makes: the case's parameters, the sweep it belongs to and the
    bounds it declares on loaded integers. One object is shared by the case's launches and never changed."""

    case: dict[str, Any] = dataclasses.field(default_factory=dict)
    sweep_group: str = ""
    sweep_keys: tuple[str, ...] = ()  # the case parameters that vary within the sweep
    #: pointer parameter (or ``kernel.param``) -> (lo, hi) of the integers loaded through it
    loaded_bounds: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)
    #: pointer parameters whose loaded integers never decrease along the array -> largest step (None: unknown)
    nondecreasing: dict[str, int | None] = dataclasses.field(default_factory=dict)
    #: the case declares no `sweep=` and names no parameter like a per-call size: sweep_keys are all its parameters
    sweep_inferred: bool = False


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


def _steps(nd: Mapping[str, Any] | list[str] | tuple[str, ...] | None) -> dict[str, int | None]:
    """``nondecreasing`` as {pointer name: largest step or None}."""
    if nd is None:
        return {}
    if isinstance(nd, str):
        raise TypeError(f"tritonkit.case: nondecreasing takes a list of pointer names or a dict, got {nd!r}")
    items = nd.items() if isinstance(nd, Mapping) else ((k, None) for k in nd)
    out: dict[str, int | None] = {}
    for k, step in items:
        if step is not None and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
            raise ValueError(
                f"tritonkit.case: nondecreasing[{k!r}] = {step!r}: the largest step must be an int >= 0 or None"
            )
        out[str(k)] = step
    return out


def case(
    _fn: Callable[..., Any] | None = None,
    *,
    loaded_bounds: Mapping[str, Any] | None = None,
    sweep: list[str] | tuple[str, ...] | None = None,
    nondecreasing: Mapping[str, Any] | list[str] | tuple[str, ...] | None = None,
    **params: Any,
):
    """Register a case; usable bare (``@tritonkit.case``) or with parameter lists."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        try:
            file = inspect.getsourcefile(fn) or "<unknown>"
            line = inspect.getsourcelines(fn)[1]
        except (OSError, TypeError):
            file, line = getattr(getattr(fn, "__code__", None), "co_filename", "<unknown>"), 0
        if sweep is not None and set(sweep) - set(params):
            raise ValueError(f"tritonkit.case: sweep names {sorted(set(sweep) - set(params))}, not parameters")
        c = Case(
            fn,
            {k: _as_values(k, v) for k, v in params.items()},
            _bounds(loaded_bounds),
            file,
            line,
            tuple(sweep) if sweep is not None else None,
            _steps(nondecreasing),
        )
        REGISTRY.append(c)
        fn.__tritonkit_case__ = c
        return fn

    if _fn is not None:
        if not callable(_fn):
            raise TypeError("tritonkit.case takes keyword arguments: @tritonkit.case(num_tokens=[1, 16])")
        return register(_fn)
    return register
