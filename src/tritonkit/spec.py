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


def upcast(inputs: dict, device: torch.device | None = None) -> dict:
    """A float64 copy of every floating tensor (the oracle's inputs); other tensors cloned (moved to ``device``
    when given)."""
    out = {}
    for k, v in inputs.items():
        if isinstance(v, torch.Tensor):
            v = v.to(device) if device is not None else v
            out[k] = v.to(torch.float64) if v.is_floating_point() else v.clone()
        else:
            out[k] = v
    return out


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
    fp8: bool = False  # the flops run on fp8 tensor cores: the bench judges them against the fp8 matmul ceiling


class Fill(Protocol):
    """What ``make_inputs`` receives to make its data (:class:`tritonkit.testing.Fill` implements it).

    ``fill(size, dtype, family=None)`` returns a new contiguous tensor of ``size`` and ``dtype`` on ``fill.device``
    holding the case's input family (``fill.family``: ``near_max``, ``tiny``...) or, when ``family`` is given, that
    one (``family="randn"`` for a tensor that should not carry the difficulty, such as a weight). Each family is
    defined per row, along the last dimension. ``fill.randint(low, high, size)`` and ``fill.randperm(n)`` make
    integer tensors (indices, slots, block tables) from the same seeded ``fill.generator``. On ``device="meta"``
    (``tritonkit check``) every call only allocates: make_inputs must not read the values it made.
    """

    device: torch.device
    family: str
    generator: torch.Generator | None

    def __call__(self, size: Sequence[int], dtype: torch.dtype, *, family: str | None = None) -> torch.Tensor: ...

    def randint(self, low: int, high: int, size: Sequence[int], dtype: torch.dtype = torch.int64) -> torch.Tensor: ...

    def randperm(self, n: int, dtype: torch.dtype = torch.int64) -> torch.Tensor: ...


#: Data families every op can be asked for. ``nonfinite`` only where the op defines NaN/inf propagation.
FAMILIES = ("randn", "near_max", "tiny", "constant", "outlier", "cancellation", "nonfinite")


class NotDeclared(NotImplementedError):
    """A tool needs a part of an OpSpec that the spec leaves out (a work model for bench, a sweep)."""


def as_shape(value: Any, what: str = "shape") -> Shape:
    """``value`` as a :class:`Shape`: a Shape as it is, any other mapping of named sizes converted; else TypeError
    naming ``what``."""
    if isinstance(value, Shape):
        return value
    if isinstance(value, Mapping):
        return Shape(value)
    raise TypeError(f"{what} must be a Shape or a dict of named sizes, got {type(value).__name__} {value!r}")


def outputs_dict(result: Any, what: str) -> dict[str, Any]:
    """The outputs dict of what ``what`` returned: a dict as it is, a tensor as ``{"out": t}``, a tuple or list of
    tensors as ``{"out0": t0, "out1": t1, ...}``."""
    if isinstance(result, Mapping):
        return dict(result)
    if isinstance(result, torch.Tensor):
        return {"out": result}
    if isinstance(result, (tuple, list)) and result and all(isinstance(t, torch.Tensor) for t in result):
        return {f"out{i}": t for i, t in enumerate(result)}
    if result is None:
        raise TypeError(
            f"{what} returned None: an op that writes its outputs in place needs its own "
            "call=(inputs) -> {name: tensor} returning the tensors it wrote"
        )
    raise TypeError(f"{what} returned {type(result).__name__}, not a tensor, a tuple of tensors or a dict of them")


class _DefaultCall:
    """``call`` when a spec gives none: ``fn(**inputs)``, its result named as :func:`outputs_dict` names it."""

    def __init__(self, fn: Callable[..., Any], name: str):
        self.fn, self.name = fn, name

    def __call__(self, inputs: dict[str, Any]) -> dict[str, Any]:
        return outputs_dict(self.fn(**inputs), f"OpSpec {self.name!r}: fn (the default call, fn(**inputs))")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _DefaultCall) and self.fn == other.fn

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "<default call: fn(**inputs)>"


class _Undeclared:
    """Stands in for an optional callable a spec leaves out; calling it raises :class:`NotDeclared`."""

    def __init__(self, name: str, field: str, needed_by: str):
        self.name, self.field, self.needed_by = name, field, needed_by

    def __call__(self, *args: Any, **kw: Any) -> Any:
        raise NotDeclared(f"OpSpec {self.name!r} declares no {self.field}: {self.needed_by}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Undeclared) and self.field == other.field

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<{self.field} not declared>"


class _SweepShape:
    """The spec's ``sweep_shape``, its result made a :class:`Shape` (a dict works too); ``None`` where the model
    has no layer the op implements (a dense model for the expert ops, an MLA model for paged attention)."""

    def __init__(self, fn: Callable[[ModelConfig, int], Any], name: str):
        self.fn, self.name = fn, name
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__wrapped__ = fn

    def __call__(self, model: ModelConfig, num_tokens: int) -> Shape | None:
        got = self.fn(model, num_tokens)
        return None if got is None else as_shape(got, f"OpSpec {self.name!r}: what sweep_shape returned")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _SweepShape) and self.fn == other.fn

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self.fn)


class Unavailable(Exception):
    """A bench provider that cannot run for this op here (not installed, no kernel for the op)."""


class Inapplicable(Exception):
    """A bench provider that exists for the op but cannot compute this point (a dense reference on a varlen batch)."""


@dataclasses.dataclass(frozen=True)
class Peer:
    """What an op's own bench provider runs: a factory in ``OpSpec.peers`` or ``OpSpec.speed_of_light`` makes one
    per (spec, dtype), raising :class:`Unavailable` where it cannot run here (its package is not installed).

    description     what is timed, as the bench reports it.
    fn              ``(inputs) -> outputs``: the timed call, on ``prepare``'s result; outputs named as ``call``'s.
    kernel_modules  module-name prefixes whose Triton kernels ``fn`` launches (the bench counts their compiles).
    prepare         ``(inputs) -> what fn takes``, outside the timing (dense copies, output and scratch buffers);
                    raises :class:`Inapplicable` where the peer has no answer at that point.
    check_fn        what the correctness check runs instead of ``fn`` where ``fn`` times only part of the
                    computation: the whole computation on the same prepared inputs.
    """

    description: str
    fn: Callable[[dict[str, Any]], dict[str, Any]]
    kernel_modules: tuple[str, ...] = ()
    prepare: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    check_fn: Callable[[dict[str, Any]], dict[str, Any]] | None = None


_NEEDED_BY = {
    "sweep_shape": "the num_tokens sweep (tritonkit bench, validate --shapes sweep, inductor) needs "
    "sweep_shape=(model, num_tokens) -> shape",
    "work": "tritonkit bench needs work=(shape, dtype) -> Work(bytes, flops) to report GB/s and TFLOP/s",
}


@dataclasses.dataclass(frozen=True)
class OpSpec:
    """Everything the tools need to know about one op.

    Validation (``tritonkit validate``, :func:`tritonkit.testing.assert_valid`) reads only ``name``, ``fn`` (through
    ``call``), ``make_inputs``, ``reference``, ``boundary`` and the dtypes, families and tolerances, so a spec for
    validation alone is::

        OpSpec("my_silu", my_silu, make_inputs,
               reference=lambda inputs, dtype: {"out": torch.nn.functional.silu(inputs["x"])},
               boundary=[{"n": 1, "d": 7}, {"n": 17, "d": 4096}])

    Only ``name``, ``fn`` and ``make_inputs`` may be given by position; the rest by keyword.

    name         the op's name (``rms_norm``); also the CLI's name for it.
    fn           the public function.
    make_inputs  ``(shape, dtype, fill) -> inputs``: ``shape`` is a :class:`Shape` (read it like a dict:
                 ``shape["num_tokens"]``, ``shape.get("causal", 1)``), ``dtype`` the case's dtype, ``fill`` a
                 :class:`Fill`. Returns a dict of named tensors and plain values, every tensor made on
                 ``fill.device`` (through ``fill``, or ``torch.*(..., device=fill.device)``); the tensors that carry
                 the difficulty get the case's family, in ``dtype``.
    reference    ``(inputs, dtype) -> outputs``: a dict of named tensors; eager PyTorch, no Triton. Given float64
                 inputs (the harness upcasts every floating tensor of ``inputs``) it computes in float64 (the
                 oracle); given the op's dtype it computes as eager PyTorch would (float32 statistics), which is
                 the "eager" and "inductor" provider in benchmarks. ``dtype`` is the op's dtype, for the rounding
                 points the op's contract defines (``r = x + residual`` rounded to x's dtype). Its names are
                 ``call``'s: ``{"out": ...}`` for an ``fn`` that returns one tensor under the default ``call``.
    boundary     shapes at and around every block size; small enough for the interpreter on CI. Each a
                 :class:`Shape` or a plain dict of named sizes (made a Shape), e.g. ``{"num_tokens": 17,
                 "hidden": 4096}``.
    call         ``(inputs) -> outputs``: runs ``fn`` once. Default ``fn(**inputs)`` (make_inputs's names are
                 fn's keyword arguments), its result named ``{"out": t}`` for a tensor, ``{"out0": .., "out1":
                 ..}`` for a tuple, kept for a dict. An op that writes in place (returns None) needs its own,
                 returning the tensors it wrote (and naming them in ``inplace``).
    sweep_shape  ``(model, num_tokens) -> shape``: one point of the decode-to-prefill sweep (a Shape or a dict),
                 or None where the model has no layer the op implements (the sweep skips that model).
                 Optional: left out, the ``sweep`` space is empty and calling it raises :class:`NotDeclared`.
    sweep_series ``(model, num_tokens) -> {series name: shape or None}``: where one num_tokens axis is not enough
                 (attention: decode batches at two context lengths, a causal prompt, a mixed batch), the named
                 series of the sweep and each one's point at num_tokens (None where the series has none).
                 Optional: left out, ``sweep_shape`` is the one series. See :meth:`series_at`.
    large        GPU-only shapes whose tensors exceed 2**31 elements (Shapes or dicts). Default: none.
    work         ``(shape, dtype) -> Work``. Optional: left out, calling it raises :class:`NotDeclared`
                 (``tritonkit bench`` needs it).
    dtypes       dtypes the op supports.
    families     data families the op is validated on (of :data:`FAMILIES`).
    tolerance    per-dtype overrides of the table in :mod:`tritonkit.tolerance`, each a
                 :class:`~tritonkit.tolerance.Tolerance` with its reason.
    interpreter_tolerance  per-dtype overrides that apply instead while Triton runs kernels under its interpreter
                 (decided at each call, not at import: the CLI may switch the interpreter on after importing).
    error_scale  optional ``(float64 inputs) -> {output: magnitude}``: for outputs that can cancel, the sum of the
                 magnitudes of the terms behind each element; the harness adds ``compute_eps * magnitude`` to the
                 tolerance (see :mod:`tritonkit.tolerance`).
    inplace      names of outputs the op writes in place (the harness cannot NaN-poison these; it compares them
                 whole, so an unwritten element still differs from the reference). Their dtype is not checked
                 (it is the caller's buffer's), unless ``output_dtypes`` names them too.
    output_dtypes  ``{output: torch.dtype}``: outputs whose dtype the op's contract fixes whatever the case's dtype
                 (float32 router weights, int32 expert ids). The harness requires each to be exactly that dtype;
                 every other output it allocates must be in the case's dtype. Default: none. Integer outputs are
                 compared exactly, not under the tolerance.
    loaded_bounds  optional ``(inputs) -> {kernel pointer parameter: (lo, hi)}``: the range of the integers the
                 op's kernels load that its contract bounds (cu_seqlens in [0, num_tokens], block ids below
                 num_blocks); ``tritonkit check`` assumes them as a case's ``loaded_bounds``.
    oracle_inputs  optional ``(inputs) -> (oracle inputs, {output: row index})``: for layers too large to upcast
                 whole (DeepSeek-V3's experts are 90 GB in float64), the float64 oracle's inputs for a sample of
                 rows, and per output the rows of the op's output they cover. ``tritonkit bench`` checks each
                 provider on those rows. Default: every floating tensor upcast, every row checked.
    peers        ``{provider name: (spec, dtype) -> Peer}``: other implementations ``tritonkit bench`` times beside
                 the op (``"vllm"``: vLLM's Triton kernel), kept in ``ops/<op>/peers.py``. Default: none.
    speed_of_light  ``{provider name: (spec, dtype) -> Peer}``: dense references no kernel of this op can beat
                 (``"sdpa"`` for paged attention), timed like peers. Default: none.
    not_compilable  why ``torch.compile`` cannot make one graph of ``reference`` (data-dependent sizes): the
                 bench's inductor providers report it instead of running. Default "": it can.

    A field of the wrong kind (a boundary that is one dict, not a list of them; a tolerance that is a tuple)
    raises TypeError or ValueError at construction, naming the field.
    """

    name: str
    fn: Callable[..., Any]
    make_inputs: Callable[[Shape, torch.dtype, Fill], dict[str, Any]]
    _: dataclasses.KW_ONLY
    reference: Callable[[dict[str, Any], torch.dtype], dict[str, torch.Tensor]]
    boundary: tuple[Shape, ...]
    call: Callable[[dict[str, Any]], dict[str, torch.Tensor]] = None  # type: ignore[assignment]
    sweep_shape: Callable[[ModelConfig, int], Shape] = None  # type: ignore[assignment]
    sweep_series: Callable[[ModelConfig, int], Mapping[str, Any]] | None = None
    large: tuple[Shape, ...] = ()
    work: Callable[[Shape, torch.dtype], Work] = None  # type: ignore[assignment]
    dtypes: tuple[torch.dtype, ...] = (torch.float16, torch.bfloat16, torch.float32)
    families: tuple[str, ...] = ("randn",)
    tolerance: Mapping[torch.dtype, Tolerance] = dataclasses.field(default_factory=dict)
    interpreter_tolerance: Mapping[torch.dtype, Tolerance] = dataclasses.field(default_factory=dict)
    inplace: tuple[str, ...] = ()
    output_dtypes: Mapping[str, torch.dtype] = dataclasses.field(default_factory=dict)
    description: str = ""
    error_scale: Callable[[dict[str, Any]], dict[str, torch.Tensor]] | None = None
    loaded_bounds: Callable[[dict[str, Any]], Mapping[str, tuple[int, int]]] | None = None
    oracle_inputs: Callable[[dict[str, Any]], tuple[dict[str, Any], Mapping[str, Any]]] | None = None
    peers: Mapping[str, Callable[[OpSpec, torch.dtype], Peer]] = dataclasses.field(default_factory=dict)
    speed_of_light: Mapping[str, Callable[[OpSpec, torch.dtype], Peer]] = dataclasses.field(default_factory=dict)
    not_compilable: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"OpSpec name must be a non-empty string, got {self.name!r}")
        where = f"OpSpec {self.name!r}"
        for f in ("fn", "make_inputs", "reference"):
            if not callable(getattr(self, f)):
                raise TypeError(f"{where}: {f} must be callable, got {type(getattr(self, f)).__name__}")
        for f in ("call", "sweep_shape", "sweep_series", "work", "error_scale", "loaded_bounds", "oracle_inputs"):
            v = getattr(self, f)
            if v is not None and not callable(v):
                raise TypeError(f"{where}: {f} must be callable or left out, got {type(v).__name__}")
        set_ = object.__setattr__  # frozen: the normalized fields are set once, here
        # dataclasses.replace hands the defaults back in: rebind them to this spec's fn and name
        if self.call is None or isinstance(self.call, _DefaultCall):
            set_(self, "call", _DefaultCall(self.fn, self.name))
        if self.sweep_shape is None or isinstance(self.sweep_shape, _Undeclared):
            set_(self, "sweep_shape", _Undeclared(self.name, "sweep_shape", _NEEDED_BY["sweep_shape"]))
        else:
            fn = self.sweep_shape.fn if isinstance(self.sweep_shape, _SweepShape) else self.sweep_shape
            set_(self, "sweep_shape", _SweepShape(fn, self.name))
        if self.work is None or isinstance(self.work, _Undeclared):
            set_(self, "work", _Undeclared(self.name, "work", _NEEDED_BY["work"]))
        set_(self, "boundary", self._shapes("boundary"))
        set_(self, "large", self._shapes("large"))
        set_(self, "dtypes", self._seq("dtypes", torch.dtype, "a torch.dtype (torch.float16)"))
        set_(self, "inplace", self._seq("inplace", str, "an output name"))
        set_(self, "families", self._seq("families", str, "a family name"))
        unknown = [f for f in self.families if f not in FAMILIES]
        if unknown:
            raise ValueError(
                f"{where}: families has unknown {', '.join(map(repr, unknown))}; known: {', '.join(FAMILIES)}"
            )
        if not isinstance(self.output_dtypes, Mapping):
            raise TypeError(
                f"{where}: output_dtypes must be a dict {{output name: torch.dtype}}, got "
                f"{type(self.output_dtypes).__name__}"
            )
        for k, v in self.output_dtypes.items():
            if not isinstance(k, str) or not isinstance(v, torch.dtype):
                raise TypeError(
                    f"{where}: output_dtypes must map an output name to a torch.dtype (torch.int32), got {k!r}: {v!r}"
                )
        # a copy: the caller's dict, changed later, does not change the spec
        set_(self, "output_dtypes", dict(self.output_dtypes))
        for f in ("peers", "speed_of_light"):
            table = getattr(self, f)
            if not isinstance(table, Mapping) or not all(
                isinstance(k, str) and k and callable(v) for k, v in table.items()
            ):
                raise TypeError(f"{where}: {f} must be a dict {{provider name: (spec, dtype) -> Peer}}, got {table!r}")
            set_(self, f, dict(table))
        if not isinstance(self.not_compilable, str):
            raise TypeError(
                f"{where}: not_compilable must be a string (why torch.compile cannot compile the "
                f"reference; empty: it can), got {type(self.not_compilable).__name__}"
            )
        for f in ("tolerance", "interpreter_tolerance"):
            table = getattr(self, f)
            if not isinstance(table, Mapping):
                raise TypeError(f"{where}: {f} must be a dict {{torch.dtype: Tolerance}}, got {type(table).__name__}")
            for k, v in table.items():
                if not isinstance(k, torch.dtype) or not isinstance(v, Tolerance):
                    raise TypeError(
                        f"{where}: {f} must map a torch.dtype to a Tolerance(rtol, atol, reason), got {k!r}: {v!r}"
                    )

    def _shapes(self, field: str) -> tuple[Shape, ...]:
        v = getattr(self, field)
        if isinstance(v, Mapping):
            raise TypeError(
                f"OpSpec {self.name!r}: {field} must be a list of shapes, got one {type(v).__name__} "
                f"(write [{{...}}] for a single shape)"
            )
        if isinstance(v, str) or not isinstance(v, Iterable):
            raise TypeError(
                f"OpSpec {self.name!r}: {field} must be a list of shapes (Shapes or dicts of named "
                f"sizes), got {type(v).__name__}"
            )
        return tuple(as_shape(s, f"OpSpec {self.name!r}: {field}[{i}]") for i, s in enumerate(v))

    def _seq(self, field: str, kind: type, what: str) -> tuple:
        v = getattr(self, field)
        if isinstance(v, (str, kind)) or not isinstance(v, Iterable):
            raise TypeError(f"OpSpec {self.name!r}: {field} must be a list, got {type(v).__name__} {v!r}")
        v = tuple(v)
        for i, x in enumerate(v):
            if not isinstance(x, kind):
                raise TypeError(f"OpSpec {self.name!r}: {field}[{i}] must be {what}, got {x!r}")
        return v

    def is_declared(self, field: str) -> bool:
        """Whether the spec declares the optional callable ``field`` (``sweep_shape``, ``work``) or left it out."""
        return not isinstance(getattr(self, field), _Undeclared)

    def tolerance_for(self, dtype: torch.dtype) -> Tolerance:
        if dtype in self.interpreter_tolerance and interpreting():
            return self.interpreter_tolerance[dtype]
        if dtype in self.tolerance:
            return self.tolerance[dtype]
        return tolerance_for(dtype)

    def series_at(self, model: ModelConfig, num_tokens: int) -> dict[str, Shape]:
        """The sweep's series and each one's shape at ``num_tokens``: ``sweep_series`` where declared (series
        without a point there left out), else ``{"": sweep_shape(model, num_tokens)}``."""
        if self.sweep_series is None:
            shape = self.sweep_shape(model, num_tokens)
            return {} if shape is None else {"": shape}
        got = self.sweep_series(model, num_tokens)
        if not isinstance(got, Mapping):
            raise TypeError(
                f"OpSpec {self.name!r}: sweep_series must return {{series name: shape or None}}, got "
                f"{type(got).__name__}"
            )
        return {
            str(k): as_shape(v, f"OpSpec {self.name!r}: sweep_series()[{k!r}]") for k, v in got.items() if v is not None
        }

    def sweep(
        self,
        models: Sequence[ModelConfig | str] | None = None,
        num_tokens: Sequence[int] | None = None,
    ) -> tuple[Shape, ...]:
        """The ``sweep_shape`` sweep (decode to prefill) crossed with model configs, duplicates removed in order;
        empty when the spec declares no ``sweep_shape``. The check and validation read it; ``sweep_series`` is the
        bench's (its extra series add points, not kernel paths or index ranges the boundary and large shapes miss)."""
        if not self.is_declared("sweep_shape"):
            return ()
        ms = [MODELS[m] if isinstance(m, str) else m for m in (models or MODELS.values())]
        ts = num_tokens or NUM_TOKENS_SWEEP
        seen: dict[Shape, None] = {}
        for m, t in itertools.product(ms, ts):
            shape = self.sweep_shape(m, t)
            if shape is not None:
                seen.setdefault(shape, None)
        return tuple(seen)

    def has_layer(self, model: ModelConfig) -> bool:
        """Whether ``model`` has a layer this op implements: its sweep has a point there."""
        return self.is_declared("sweep_shape") and self.sweep_shape(model, 1) is not None

    def shapes(self, space: str) -> tuple[Shape, ...]:
        if space == "boundary":
            return self.boundary
        if space == "sweep":
            return self.sweep()
        if space == "large":
            return self.large
        raise ValueError(f"shape space must be 'boundary', 'sweep' or 'large', got {space!r}")
