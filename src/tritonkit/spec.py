"""OpSpec: one declaration per op, read by every tool.

The checker captures an op's launches over the spec's shapes (inputs built on ``device="meta"``), the validation
harness runs the op against the spec's reference on the spec's inputs, and the benchmark sweeps the spec's shapes
and divides by the spec's work model. A spec imports no tool: the tools import specs.

Vocabulary
----------
shape     a :class:`Shape`, a frozen mapping of named sizes (``num_tokens=17, hidden=4096``) plus any
          op-specific knobs (``is_neox=1``, ``kv_cache_dtype="fp8"``).
inputs    a plain ``dict`` of named tensors and values built by ``make_inputs``; ``call`` and ``reference`` read it.
outputs   a ``dict`` of named tensors returned by ``call`` (what the op produced, including tensors it updated in
          place) and by ``reference`` (the same names, computed by the eager oracle).
fill      a :class:`Fill` handed to ``make_inputs`` by whichever tool builds inputs: it makes the case's data
          family (or an explicit one) and is a no-op allocator on ``device="meta"``.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

import torch

from .models import MODELS, NUM_TOKENS_SWEEP, ModelConfig
from .tolerance import Tolerance, interpreting, tolerance_for


def dtype_name(dtype: torch.dtype) -> str:
    """``bfloat16`` for ``torch.bfloat16``: how messages, reports and JSON name a dtype."""
    return str(dtype).replace("torch.", "")


class Shape(Mapping[str, Any]):
    """An immutable, hashable mapping of named sizes with a readable id (``num_tokens=17,hidden=4096``)."""

    __slots__ = ("_items", "_dict")

    def __init__(self, items: Mapping[str, Any] | Iterable[tuple[str, Any]] = (), **kw: Any):
        d = dict(items)
        d.update(kw)
        self._dict = d
        self._items = tuple(d.items())

    def __getitem__(self, key: str) -> Any:
        return self._dict[key]

    def __iter__(self):
        return iter(self._dict)

    def __len__(self) -> int:
        return len(self._dict)

    def __hash__(self) -> int:
        return hash(self._items)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and dict(self) == dict(other)

    def replace(self, **kw: Any) -> Shape:
        return Shape(self._dict, **kw)

    @property
    def id(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self._items)

    def __repr__(self) -> str:
        return f"Shape({self.id})"


@dataclasses.dataclass(frozen=True)
class Work:
    """What one call must do at minimum: bytes through device memory (each input read once, each output written
    once) and floating-point operations."""

    bytes: int
    flops: int = 0


class Fill(Protocol):
    """Makes input data. ``family`` None means the case's family; the op decides which tensors carry it."""

    device: torch.device
    family: str
    generator: torch.Generator | None

    def __call__(self, size: Sequence[int], dtype: torch.dtype, *, family: str | None = None) -> torch.Tensor: ...

    def randint(self, low: int, high: int, size: Sequence[int], dtype: torch.dtype = torch.int64) -> torch.Tensor: ...

    def randperm(self, n: int, dtype: torch.dtype = torch.int64) -> torch.Tensor: ...


#: Data families every op can be asked for. ``nonfinite`` only where the op defines NaN/inf propagation.
FAMILIES = ("randn", "near_max", "tiny", "constant", "outlier", "cancellation", "nonfinite")


@dataclasses.dataclass(frozen=True)
class OpSpec:
    """Everything the tools need to know about one op.

    name         the op's name (``rms_norm``); also the CLI's name for it.
    fn           the public function.
    make_inputs  ``(shape, dtype, fill) -> inputs``; builds every tensor on ``fill.device``.
    call         ``(inputs) -> outputs``: runs ``fn`` once.
    reference    ``(inputs, dtype) -> outputs``: eager PyTorch, no Triton. Given float64 inputs it computes in
                 float64 (the oracle); given the op's dtype it computes as eager PyTorch would (float32 statistics),
                 which is the "eager" and "inductor" provider in benchmarks. ``dtype`` is the op's dtype, for the
                 rounding points the op's contract defines (``r = x + residual`` rounded to x's dtype).
    boundary     shapes at and around every block size; small enough for the interpreter on CI.
    sweep_shape  ``(model, num_tokens) -> shape``: one point of the decode-to-prefill sweep.
    large        GPU-only shapes whose tensors exceed 2**31 elements.
    work         ``(shape, dtype) -> Work``.
    dtypes       dtypes the op supports.
    families     data families the op is validated on.
    tolerance    per-dtype overrides of the table in :mod:`tritonkit.tolerance`, each with its reason.
    interpreter_tolerance  per-dtype overrides that apply instead while Triton runs kernels under its interpreter
                 (decided at each call, not at import: the CLI may switch the interpreter on after importing).
    error_scale  optional ``(float64 inputs) -> {output: magnitude}``: for outputs that can cancel, the sum of the
                 magnitudes of the terms behind each element; the harness adds ``compute_eps * magnitude`` to the
                 tolerance (see :mod:`tritonkit.tolerance`).
    inplace      names of outputs the op writes in place (the harness cannot NaN-poison these; it compares them
                 whole, so an unwritten element still differs from the reference).
    loaded_bounds  optional ``(inputs) -> {kernel pointer parameter: (lo, hi)}``: the range of the integers the
                 op's kernels load that its contract bounds (cu_seqlens in [0, num_tokens], block ids below
                 num_blocks); ``tritonkit check`` assumes them as a case's ``loaded_bounds``.
    """

    name: str
    fn: Callable[..., Any]
    make_inputs: Callable[[Shape, torch.dtype, Fill], dict[str, Any]]
    call: Callable[[dict[str, Any]], dict[str, torch.Tensor]]
    reference: Callable[[dict[str, Any], torch.dtype], dict[str, torch.Tensor]]
    boundary: tuple[Shape, ...]
    sweep_shape: Callable[[ModelConfig, int], Shape]
    large: tuple[Shape, ...]
    work: Callable[[Shape, torch.dtype], Work]
    dtypes: tuple[torch.dtype, ...] = (torch.float16, torch.bfloat16, torch.float32)
    families: tuple[str, ...] = ("randn",)
    tolerance: Mapping[torch.dtype, Tolerance] = dataclasses.field(default_factory=dict)
    interpreter_tolerance: Mapping[torch.dtype, Tolerance] = dataclasses.field(default_factory=dict)
    inplace: tuple[str, ...] = ()
    description: str = ""
    error_scale: Callable[[dict[str, Any]], dict[str, torch.Tensor]] | None = None
    loaded_bounds: Callable[[dict[str, Any]], Mapping[str, tuple[int, int]]] | None = None

    def tolerance_for(self, dtype: torch.dtype) -> Tolerance:
        if dtype in self.interpreter_tolerance and interpreting():
            return self.interpreter_tolerance[dtype]
        if dtype in self.tolerance:
            return self.tolerance[dtype]
        return tolerance_for(dtype)

    def sweep(
        self,
        models: Sequence[ModelConfig | str] | None = None,
        num_tokens: Sequence[int] | None = None,
    ) -> tuple[Shape, ...]:
        """The num_tokens sweep (decode to prefill) crossed with model configs, duplicates removed in order."""
        ms = [MODELS[m] if isinstance(m, str) else m for m in (models or MODELS.values())]
        ts = num_tokens or NUM_TOKENS_SWEEP
        seen: dict[Shape, None] = {}
        for m, t in itertools.product(ms, ts):
            seen.setdefault(self.sweep_shape(m, t), None)
        return tuple(seen)

    def shapes(self, space: str) -> tuple[Shape, ...]:
        if space == "boundary":
            return self.boundary
        if space == "sweep":
            return self.sweep()
        if space == "large":
            return self.large
        raise ValueError(f"shape space must be 'boundary', 'sweep' or 'large', got {space!r}")
