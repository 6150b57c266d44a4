"""The sweep: for each op (with shape overrides), dtype and sweep point, check and time every provider.

Per point: a size-matched copy reference (a Triton copy moving the point's bytes, timed like the op, once per
point; ``--no-copy-ref`` skips it); one correctness input set and its float64 reference; then the rotation sets
(enough to turn the L2 over, shared by all providers); then for each provider a check, eager timing and CUDA-graph
timing. A provider one call of which would take the timing past the point's time budget is skipped there with the
reason, and at the larger points of the same series. Per op: the compiles each kernel needed over the sweep, the
host overhead of one call at the smallest point, and startup in fresh processes. Results are the typed records of
:mod:`.records`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..models import DEFAULT_BENCH_MODELS, DEFAULT_MOE_BENCH_MODELS, MODELS, NUM_TOKENS_SWEEP
from ..spec import OpSpec, Shape, dtype_name
from ..testing.inputs import Fill
from . import providers as P
from .records import CopyRef, OpResult, PointResult
from .roofline import Ceilings, pct_of_copy, point_metrics
from .timing import MAX_SETS, NotCapturable, interleaved_host_overhead, rotation, time_eager, time_graph

#: num_tokens of the startup measurement: a small prefill, compiled the same as every other point.
STARTUP_TOKENS = 16
#: Device memory the rotation sets of one point may take.
SETS_MEM_BUDGET = 16 << 30
#: Seconds one provider's timing at one point may take (its calls are estimated from one warm call): an eager
#: reference at prefill sizes is skipped there, with the reason, instead of holding the run for minutes. Not
#: applied to tritonkit, the provider the run is about.
POINT_BUDGET_S = 20.0
#: Calls a timing makes per rotation set, beyond a few fixed ones: eager (warm-up, first repeat, at least
#: MIN_REPEATS more) and graph (capture, warm replays, at least MIN_REPEATS replays).
CALLS_PER_SET = 15
FIXED_CALLS = 4


@dataclasses.dataclass(frozen=True)
class OpTarget:
    """One op as named on the command line: ``rms_norm`` or ``rms_norm:residual=0`` (overrides on every point)."""

    name: str
    overrides: tuple[tuple[str, Any], ...] = ()

    @property
    def label(self) -> str:
        if not self.overrides:
            return self.name
        return f"{self.name}:" + ",".join(f"{k}={v}" for k, v in self.overrides)

    @classmethod
    def parse(cls, text: str) -> OpTarget:
        name, _, rest = text.partition(":")
        return cls(name, tuple(parse_kv(rest).items()) if rest else ())


def _value(v: str) -> Any:
    for conv in (int, float):
        try:
            return conv(v)
        except ValueError:
            pass
    return v


def parse_kv(text: str) -> dict[str, Any]:
    """``"num_tokens=16,hidden=4096"`` -> ``{"num_tokens": 16, "hidden": 4096}`` (ints, floats, else strings)."""
    out: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        k, eq, v = part.partition("=")
        if not eq or not k.strip():
            raise ValueError(f"expected key=value, got {part!r}")
        out[k.strip()] = _value(v.strip())
    return out


@dataclasses.dataclass(frozen=True)
class SweepPoint:
    shape: Shape
    model: str
    #: the sweep's x: the num_tokens asked for (an op may spend it on another key: paged_attention's num_seqs)
    num_tokens: int
    #: the series this point belongs to: its name (for ops with several) and the shape keys fixed along it
    config: str


def _compact(v: Any) -> str:
    """A label's value: long tuples run-length encoded (``(0, 4095, 4095)`` -> ``0,4095x2``)."""
    if not isinstance(v, (tuple, list)) or len(v) <= 4:
        return str(v)
    runs: list[list] = []
    for x in v:
        if runs and runs[-1][0] == x:
            runs[-1][1] += 1
        else:
            runs.append([x, 1])
    return "(" + ",".join(f"{x}x{n}" if n > 1 else str(x) for x, n in runs) + ")"


def series_names(spec: OpSpec, model: str) -> list[str]:
    """The names of the spec's sweep series on ``model`` (none for an op with one unnamed sweep)."""
    if spec.sweep_series is None:
        return []
    return [str(k) for k in spec.sweep_series(MODELS[model], 1)]


def sweep_points(
    spec: OpSpec,
    models: Sequence[str],
    num_tokens: Sequence[int],
    overrides: dict[str, Any],
    series: Sequence[str] | None = None,
) -> list[SweepPoint]:
    """Every point of the sweep (every series of the spec, or of those named in ``series`` for an op with named
    series), overrides applied, duplicate shapes dropped (the first model keeps them). ValueError when ``series``
    names a series the op does not have."""
    seen: set[Shape] = set()
    out: list[SweepPoint] = []
    keep = None
    if series and models and series_names(spec, models[0]):
        names = series_names(spec, models[0])
        unknown = [n for n in series if n not in names]
        if unknown:
            raise ValueError(
                f"{spec.name} has no series {', '.join(map(repr, unknown))}; its series: {', '.join(map(repr, names))}"
            )
        keep = set(series)
    for m in models:
        by_series: dict[str, list[tuple[int, Shape]]] = {}
        for t in num_tokens:
            for series_name, base in spec.series_at(MODELS[m], t).items():
                if keep is not None and series_name not in keep:
                    continue
                unknown = set(overrides) - set(base)
                if unknown:
                    raise ValueError(f"{spec.name} has no shape key(s) {sorted(unknown)}; its keys: {', '.join(base)}")
                shape = base.replace(**overrides)
                by_series.setdefault(series_name, []).append((int(shape.get("num_tokens", t)), shape))
        for name, per_t in by_series.items():
            varying = {k for k in per_t[0][1] if len({s[k] for _, s in per_t}) > 1} | {"num_tokens"}
            fixed = ",".join(f"{k}={_compact(v)}" for k, v in per_t[0][1].items() if k not in varying)
            config = f"{name} | {fixed}" if name else fixed
            for t, shape in per_t:
                if shape not in seen:
                    seen.add(shape)
                    out.append(SweepPoint(shape, m, t, config))
    return out


def _nbytes(inputs: dict) -> int:
    return sum(v.numel() * v.element_size() for v in inputs.values() if isinstance(v, torch.Tensor))


@dataclasses.dataclass
class BenchConfig:
    targets: list[OpTarget]
    models: list[str] = dataclasses.field(default_factory=lambda: list(DEFAULT_BENCH_MODELS))
    dtypes: list[torch.dtype] = dataclasses.field(default_factory=lambda: [torch.bfloat16])
    num_tokens: list[int] = dataclasses.field(default_factory=lambda: list(NUM_TOKENS_SWEEP))
    providers: list[str] = dataclasses.field(default_factory=lambda: list(P.DEFAULT_PROVIDERS))
    startup: bool = True
    repeats: int | None = None  # None: adaptive
    deadline_s: float | None = None  # past it, only tritonkit is timed
    point_budget_s: float = POINT_BUDGET_S  # per provider and point, see POINT_BUDGET_S
    max_sets: int = MAX_SETS
    host_calls: int = 1000  # calls per repeat of the host-overhead measurement
    copy_ref: bool = True  # time a copy of each point's bytes beside the providers (CUDA only)
    device: torch.device = dataclasses.field(default_factory=lambda: torch.device("cuda"))
    base: Any = None  # a base.BaseTree: its op is one more provider, base@<sha> (--base REV)
    base_cached: dict = dataclasses.field(default_factory=dict)  # its earlier timings, by base.point_key
    #: whether ``models`` are the user's (--models): then an op sweeps those that have its layer, else its defaults
    models_given: bool = True
    #: the series to sweep of the ops that have named series (--series); None: all
    series: tuple[str, ...] | None = None

    def models_for(self, spec: OpSpec) -> list[str]:
        """The models ``spec`` sweeps: ``models`` that have a layer it implements; without --models, the dense
        defaults, or the MoE defaults for the expert ops. ValueError when none has the layer."""
        got = [m for m in self.models if spec.has_layer(MODELS[m])]
        if not got and not self.models_given:
            got = [m for m in DEFAULT_MOE_BENCH_MODELS if spec.has_layer(MODELS[m])]
        if not got:
            having = [m for m in MODELS if spec.has_layer(MODELS[m])]
            raise ValueError(
                f"{spec.name}: none of the models {', '.join(self.models)} has a layer it implements; "
                f"models that do: {', '.join(having)}"
            )
        return got


class Progress:
    """What the runner reports as it goes; the CLI plugs in a progress bar."""

    def start(self, total: int) -> None: ...
    def advance(self, text: str) -> None: ...
    def log(self, text: str) -> None: ...


def count_steps(cfg: BenchConfig, specs: dict[str, OpSpec]) -> int:
    """Provider timings the run will report on (what ``run_point`` advances the progress by): providers that are
    unavailable and dtypes an op does not support are never stepped through."""
    n = 0
    for t in cfg.targets:
        if t.name in specs:
            spec = specs[t.name]
            try:
                pts = sweep_points(spec, cfg.models_for(spec), cfg.num_tokens, dict(t.overrides), cfg.series)
            except ValueError:
                continue  # reported when the target runs
            for dtype in cfg.dtypes:
                if dtype in spec.dtypes:
                    n += len(pts) * (
                        sum(_available(name, spec, dtype) for name in cfg.providers) + (cfg.base is not None)
                    )
    return n


def _available(name: str, spec: OpSpec, dtype: torch.dtype) -> bool:
    try:
        P.make_provider(name, spec, dtype)
    except (P.Unavailable, ValueError):  # an unknown name is reported when the target runs
        return False
    return True


def _progress_text(target: OpTarget, r: PointResult) -> str:
    text = f"{target.label} num_tokens={r.num_tokens} {r.provider}: {r.status}"
    if r.ok:
        text += f" {r.time_us:.1f} us ({r.timed_by})"
        if r.metrics is not None:
            text += f" {r.metrics.pct_ceiling:.1f}% t/target {r.metrics.target_ratio:.2f}"
        if r.pct_of_copy is not None:
            text += f" {r.pct_of_copy:.1f}% of copy@size"
    elif r.status in ("wrong", "error", "skipped"):
        text += f" ({r.detail[:120]})"
    return text


def size_matched_copy(cfg: BenchConfig, work_bytes: int, l2: int) -> CopyRef | None:
    """The point's copy reference (``ceilings.time_size_matched_copy``), with the error if it failed, or None where
    it is off or there is no CUDA graph (a CPU)."""
    if not cfg.copy_ref or cfg.device.type != "cuda":
        return None
    from .ceilings import time_size_matched_copy

    try:
        return time_size_matched_copy(
            max(work_bytes, 1), l2, cfg.device, max_sets=cfg.max_sets, mem_budget=SETS_MEM_BUDGET, repeats=cfg.repeats
        )
    except Exception as e:  # noqa: BLE001 - out of memory at the largest points: the providers are still timed
        with contextlib.suppress(Exception):
            torch.cuda.synchronize(cfg.device)
        return CopyRef(error=f"{type(e).__name__}: {e}"[:300])
    finally:
        gc.collect()
        torch.cuda.empty_cache()


@dataclasses.dataclass
class PointInputs:
    """What every provider at one point shares: the check's inputs and float64 reference, the rotation sets."""

    check: dict
    oracle: P.Oracle
    sets: list[dict]
    flush: Callable[[], None] | None

    @classmethod
    def make(
        cls, spec: OpSpec, shape: Shape, dtype: torch.dtype, cfg: BenchConfig, work_bytes: int, l2: int, seed: int
    ) -> PointInputs:
        dev = cfg.device
        check = spec.make_inputs(shape, dtype, Fill("randn", dev, seed + 1_000_003))
        oracle = P.reference(spec, dtype, check)
        fill = Fill("randn", dev, seed)
        sets = [spec.make_inputs(shape, dtype, fill)]
        # too few sets to turn the L2 over by themselves: an L2 flush before each replay
        n_sets, flush = rotation(
            work_bytes, l2, dev, max_sets=cfg.max_sets, mem_per_set=_nbytes(sets[0]), mem_budget=SETS_MEM_BUDGET
        )
        sets += [spec.make_inputs(shape, dtype, fill) for _ in range(n_sets - 1)]
        return cls(check, oracle, sets, flush)


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


class _Bound:
    """A provider on its prepared inputs, for the host-overhead measurement (which hands every provider the same
    raw inputs): the call ignores them."""

    def __init__(self, p: P.Provider, inputs: dict):
        self.name, self.fn, self.inputs = p.name, p.fn, inputs

    def __call__(self, _inputs: dict) -> dict:
        return self.fn(self.inputs)


def _one_call_s(p: P.Provider, inputs: dict, dev: torch.device) -> float:
    """Seconds of one warm call (after the check's first call has compiled what it needed)."""
    _sync(dev)
    t0 = time.perf_counter()
    p.fn(inputs)
    _sync(dev)
    return time.perf_counter() - t0


def _reuse(p: P.Provider, r: PointResult) -> bool:
    """Fill ``r`` from ``p``'s earlier timing of the same point, if it has one."""
    if not p.cached:
        return False
    from .base import point_key

    got = p.cached.get(point_key(r.to_dict()))
    if got is None or got.get("status") != "ok":
        return False
    old = PointResult.from_dict(got)
    for f in ("status", "check", "eager", "graph", "graph_error", "metrics", "eager_gbps", "sets", "l2_flush"):
        setattr(r, f, getattr(old, f))
    r.detail = f"reused: timed {got.get('timed_at', 'earlier')}"
    if r.copy is not None and r.copy.us is not None and r.time_us:
        r.pct_of_copy = pct_of_copy(r.copy.us, r.time_us)
    return True


def time_provider(
    p: P.Provider,
    spec: OpSpec,
    dtype: torch.dtype,
    pin: PointInputs,
    r: PointResult,
    cfg: BenchConfig,
    ceil: Ceilings | None,
) -> list[dict] | None:
    """Check ``p`` and time it at one point, filling ``r``; returns its prepared rotation sets (for the host-time
    measurement) when it was timed."""
    dev = cfg.device
    if _reuse(p, r):
        return None
    try:
        c = P.check(p, spec, dtype, pin.check, pin.oracle)
    except P.Inapplicable as e:
        r.status, r.detail = "skipped", f"not applicable: {e}"
        return None
    r.check = c
    if not c.passed:
        r.status, r.detail = "wrong", c.detail
        return None
    sets = [p.prepared(s) for s in pin.sets]
    # tritonkit is what the run is about: always timed; the budget keeps references and peers from holding it
    calls = CALLS_PER_SET * len(sets) + FIXED_CALLS
    one = 0.0 if p.name == "tritonkit" else _one_call_s(p, sets[0], dev)
    est = one * calls
    if est > cfg.point_budget_s:
        r.status = "skipped"
        r.detail = (
            f"over the point's time budget: its timing would take ~{est:.0f} s ({calls} calls over {len(sets)} "
            f"input sets, one {one * 1e3:.2f} ms), budget {cfg.point_budget_s:.0f} s"
        )
        return None
    r.eager = time_eager(p, sets, dev, repeats=cfg.repeats)
    if dev.type == "cuda":
        try:
            r.graph = time_graph(p, sets, dev, repeats=cfg.repeats, before_replay=pin.flush)
        except NotCapturable as e:
            r.graph_error = str(e)
    r.status = "ok"
    t_us = r.time_us
    if ceil is not None:
        # the targets are about graph time; a provider no graph can hold is judged by its eager time
        r.metrics = point_metrics(r.bytes, r.flops, t_us * 1e-6, ceil, r.fp8)
        r.eager_gbps = r.bytes / (r.eager.median_us * 1e-6) / 1e9
    if r.copy is not None and r.copy.us is not None:
        r.pct_of_copy = pct_of_copy(r.copy.us, t_us)
    return sets


def run_point(
    spec: OpSpec,
    target: OpTarget,
    pt: SweepPoint,
    dtype: torch.dtype,
    provs: list[P.Provider],
    cfg: BenchConfig,
    ceil: Ceilings | None,
    l2: int,
    seed: int,
    skip: Callable[[str], str | None],
    progress: Progress,
    host_point: bool,
) -> tuple[list[PointResult], dict]:
    """Check and time every provider at one point. Returns the point results and, at the host-overhead point,
    ``{provider: Timing dict}``. ``skip(provider)`` gives a reason to skip it here, or None."""
    dev = cfg.device
    work = spec.work(pt.shape, dtype)
    results = {
        p.name: PointResult(
            spec.name,
            target.label,
            pt.config,
            pt.model,
            dtype_name(dtype),
            pt.num_tokens,
            dict(pt.shape),
            p.name,
            work.bytes,
            work.flops,
            work.fp8,
        )
        for p in provs
    }
    hosts: dict = {}
    # first, while no op input is allocated; one timing for the point, shared by every provider's record
    copy = size_matched_copy(cfg, work.bytes, l2) if provs else None
    for r in results.values():
        r.copy = copy
    try:
        pin = PointInputs.make(spec, pt.shape, dtype, cfg, work.bytes, l2, seed)
    except Exception as e:  # noqa: BLE001 - inputs or the reference failed (out of memory, a spec bug): every provider errs here
        for r in results.values():
            r.status, r.detail = "error", f"inputs/reference: {type(e).__name__}: {e}"[:600]
            progress.advance(_progress_text(target, r))
        return list(results.values()), hosts
    first_set: dict[str, dict] = {}  # each timed provider's first prepared set, for the host-time measurement
    for p in provs:
        r = results[p.name]
        r.sets, r.l2_flush = len(pin.sets), pin.flush is not None
        why = skip(p.name)
        if why:
            r.status, r.detail = "skipped", why
            progress.advance(_progress_text(target, r))
            continue
        try:
            if p.begin_shape:
                p.begin_shape(pt.shape)
            sets = time_provider(p, spec, dtype, pin, r, cfg, ceil)
            if sets is not None and host_point:
                first_set[p.name] = sets[0]
            del sets
        except Exception as e:  # noqa: BLE001 - recorded with the point; the sweep goes on
            r.status, r.detail = "error", f"{type(e).__name__}: {e}"[:600]
            if dev.type == "cuda":
                with contextlib.suppress(Exception):
                    torch.cuda.synchronize(dev)
        finally:
            progress.advance(_progress_text(target, r))
    if host_point:
        # after every provider's timings, interleaved round by round (timing.interleaved_host_overhead); a
        # provider that fails here errs at this point, as any other failure of its point does
        ok = [_Bound(p, first_set[p.name]) for p in provs if results[p.name].ok and p.name in first_set]
        timings, errors = interleaved_host_overhead(ok, pin.sets[0], dev, calls=cfg.host_calls)
        hosts.update(timings)
        for name, err in errors.items():
            results[name].status, results[name].detail = "error", f"host time per eager call: {err}"
    del first_set, pin
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return list(results.values()), hosts


class _Skips:
    """Why a provider is skipped at a point: past the run's deadline, or over the time budget at a smaller point
    of the same series (a larger point would take longer still)."""

    def __init__(self, cfg: BenchConfig, t_start: float):
        self.cfg, self.t_start = cfg, t_start
        self.over: dict[tuple[str, str], PointResult] = {}  # (config, provider) -> the point that went over

    def reason(self, pt: SweepPoint, provider: str) -> str | None:
        cfg = self.cfg
        if cfg.deadline_s is not None and provider != "tritonkit" and time.monotonic() - self.t_start > cfg.deadline_s:
            return f"skipped: past the {cfg.deadline_s:.0f} s time budget"
        first = self.over.get((pt.config, provider))
        if first is not None and pt.num_tokens > first.num_tokens:
            return f"over the point's time budget at num_tokens={first.num_tokens} already ({first.detail})"
        return None

    def note(self, r: PointResult) -> None:
        if r.status == "skipped" and r.detail.startswith("over the point's time budget: "):
            self.over.setdefault((r.config, r.provider), r)


def run_target(
    spec: OpSpec,
    target: OpTarget,
    dtype: torch.dtype,
    cfg: BenchConfig,
    ceil: Ceilings | None,
    progress: Progress,
    t_start: float,
) -> tuple[OpResult, list[PointResult]]:
    """Sweep one op config at one dtype. Returns its op result and its point results."""
    dev = cfg.device
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size if dev.type == "cuda" else 32 << 20
    models = cfg.models_for(spec)
    points = sweep_points(spec, models, cfg.num_tokens, dict(target.overrides), cfg.series)
    op = OpResult(
        spec.name,
        target.label,
        dtype_name(dtype),
        dict(target.overrides),
        models,
        list(dict.fromkeys(pt.config for pt in points)),
        l2_bytes=l2,
    )
    provs: list[P.Provider] = []
    for name in cfg.providers:
        try:
            p = P.make_provider(name, spec, dtype)
        except P.Unavailable as e:
            op.providers[name] = f"unavailable: {e}"
            continue
        op.providers[name] = p.description
        provs.append(p)
    if cfg.base is not None:
        try:
            p = P.base_provider(cfg.base, spec, dtype, cfg.base_cached)
            op.providers[p.name] = p.description
            provs.append(p)
        except P.Unavailable as e:
            op.providers[cfg.base.label] = f"unavailable: {e}"
    if dtype not in spec.dtypes:
        op.error = f"{spec.name} does not support {dtype_name(dtype)}"
        return op, []
    kernels = {p.name: P.find_kernels(p.kernel_modules) for p in provs if p.kernel_modules}
    before = {n: P.compile_counts(k) for n, k in kernels.items()}
    skips = _Skips(cfg, t_start)
    # host overhead at the smallest point of each series
    smallest: dict[str, SweepPoint] = {}
    for pt in points:
        if pt.config not in smallest or pt.num_tokens < smallest[pt.config].num_tokens:
            smallest[pt.config] = pt
    results: list[PointResult] = []
    for i, pt in enumerate(points):
        recs, hosts = run_point(
            spec,
            target,
            pt,
            dtype,
            provs,
            cfg,
            ceil,
            l2,
            seed=i,
            skip=lambda name, pt=pt: skips.reason(pt, name),
            progress=progress,
            host_point=smallest[pt.config] == pt,
        )
        for r in recs:
            skips.note(r)
        results += recs
        if hosts:
            op.host_overhead[pt.shape.id] = hosts
    # modules imported during the sweep (a kernel module loaded lazily) are found now
    kernels = {p.name: P.find_kernels(p.kernel_modules) for p in provs if p.kernel_modules}
    for n, ks in kernels.items():
        after = P.compile_counts(ks)
        op.compiles[n] = {
            k: v - before.get(n, {}).get(k, 0) for k, v in after.items() if v - before.get(n, {}).get(k, 0) > 0
        }
    return op, results


def startup_shape(spec: OpSpec, target: OpTarget, model: str) -> Shape:
    return spec.sweep_shape(MODELS[model], STARTUP_TOKENS).replace(**dict(target.overrides))


def run(
    cfg: BenchConfig,
    ceil: Ceilings | None,
    progress: Progress | None = None,
    on_target_done: Callable[[list[OpResult], list[PointResult]], None] | None = None,
) -> tuple[list[OpResult], list[PointResult]]:
    """Run every target at every dtype. Returns (op results, point results); ``on_target_done`` gets the results
    so far after each op config (the CLI writes partial JSON there)."""
    from ..ops import get_spec

    progress = progress or Progress()
    t_start = time.monotonic()
    specs: dict[str, OpSpec] = {}
    ops_out: list[OpResult] = []
    points_out: list[PointResult] = []
    for t in cfg.targets:
        if t.name in specs:
            continue
        try:
            specs[t.name] = get_spec(t.name)
        except Exception as e:  # noqa: BLE001 - an op still being written must not stop the others
            ops_out.append(OpResult(t.name, t.label, error=f"cannot load: {type(e).__name__}: {e}"))
            progress.log(f"{t.name}: cannot load its spec ({type(e).__name__}: {e}); skipped")
    # startup first, while the run is young: a sweep that overruns its deadline still leaves these measured
    startups: dict[tuple[str, torch.dtype], dict] = {}
    if cfg.startup and cfg.device.type == "cuda":
        from .startup import measure_startup

        for t in cfg.targets:
            for dtype in cfg.dtypes:
                if t.name not in specs or dtype not in specs[t.name].dtypes:
                    continue
                try:
                    shape = startup_shape(specs[t.name], t, cfg.models_for(specs[t.name])[0])
                except ValueError:
                    continue  # reported when the target runs
                progress.log(
                    f"startup: {t.label} {dtype_name(dtype)} [{shape.id}] in fresh processes "
                    "(empty Triton cache, then warm)"
                )
                startups[(t.label, dtype)] = measure_startup(t.name, dict(shape), dtype_name(dtype))
    progress.start(count_steps(cfg, specs))
    for t in cfg.targets:
        if t.name not in specs:
            continue
        for dtype in cfg.dtypes:
            try:
                op, recs = run_target(specs[t.name], t, dtype, cfg, ceil, progress, t_start)
            except Exception as e:  # noqa: BLE001 - a bad override or a failing spec: recorded, the other ops still run
                op, recs = OpResult(t.name, t.label, dtype_name(dtype), error=f"{type(e).__name__}: {e}"), []
                progress.log(f"{t.label} {dtype_name(dtype)}: {op.error}")
            op.startup = startups.get((t.label, dtype))
            ops_out.append(op)
            points_out += recs
            if on_target_done:
                on_target_done(ops_out, points_out)
    return ops_out, points_out
