"""The sweep: for each op (with shape overrides), dtype and sweep point, check and time every provider.

Per point: a size-matched copy reference (a Triton copy moving the point's bytes, timed like the op, once per
point; ``--no-copy-ref`` skips it); one correctness input set and its float64 reference; then the rotation sets
(enough to turn the L2 over, shared by all providers); then for each provider a check, eager timing and CUDA-graph
timing. Per op: the compiles each kernel needed over the sweep, the host overhead of one call at the smallest
point, and startup in fresh processes. Results are plain dicts (see ``report``) so they go to JSON as they are.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..models import DEFAULT_BENCH_MODELS, MODELS, NUM_TOKENS_SWEEP
from ..spec import OpSpec, Shape, dtype_name
from ..testing.inputs import Fill
from . import providers as P
from .stats import MAX_SETS, Ceilings, copy_ref_fields, pct_of_copy, point_metrics
from .timing import NotCapturable, interleaved_host_overhead, rotation, time_eager, time_graph

#: num_tokens of the startup measurement: a small prefill, compiled the same as every other point.
STARTUP_TOKENS = 16
#: Device memory the rotation sets of one point may take.
SETS_MEM_BUDGET = 16 << 30


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
    #: the shape keys that stay fixed along this model's sweep: one series of the plots and tables
    config: str


def sweep_points(spec: OpSpec, models: Sequence[str], num_tokens: Sequence[int],
                 overrides: dict[str, Any]) -> list[SweepPoint]:
    """Every point of the sweep, overrides applied, duplicate shapes dropped (the first model keeps them)."""
    seen: set[Shape] = set()
    out: list[SweepPoint] = []
    for m in models:
        per_t = []
        for t in num_tokens:
            base = spec.sweep_shape(MODELS[m], t)
            unknown = set(overrides) - set(base)
            if unknown:
                raise ValueError(f"{spec.name} has no shape key(s) {sorted(unknown)}; its keys: {', '.join(base)}")
            shape = base.replace(**overrides)
            per_t.append((int(shape.get("num_tokens", t)), shape))
        if not per_t:
            continue
        varying = {k for k in per_t[0][1] if len({s[k] for _, s in per_t}) > 1} | {"num_tokens"}
        for t, shape in per_t:
            if shape not in seen:
                seen.add(shape)
                out.append(SweepPoint(shape, m, t, ",".join(f"{k}={v}" for k, v in shape.items()
                                                                 if k not in varying)))
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
    max_sets: int = MAX_SETS
    host_calls: int = 1000  # calls per repeat of the host-overhead measurement
    copy_ref: bool = True  # time a copy of each point's bytes beside the providers (CUDA only)
    device: torch.device = dataclasses.field(default_factory=lambda: torch.device("cuda"))


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
                pts = sweep_points(spec, cfg.models, cfg.num_tokens, dict(t.overrides))
            except ValueError:
                continue  # reported when the target runs
            for dtype in cfg.dtypes:
                if dtype in spec.dtypes:
                    n += len(pts) * sum(_available(name, spec, dtype) for name in cfg.providers)
    return n


def _available(name: str, spec: OpSpec, dtype: torch.dtype) -> bool:
    try:
        P.make_provider(name, spec, dtype)
    except (P.Unavailable, ValueError):  # an unknown name is reported when the target runs
        return False
    return True


def _point_record(target: OpTarget, spec: OpSpec, pt: SweepPoint, dtype: torch.dtype, provider: str,
                  nbytes: int, flops: int) -> dict:
    return {"op": spec.name, "label": target.label, "config": pt.config, "model": pt.model,
            "dtype": dtype_name(dtype), "num_tokens": pt.num_tokens, "shape": dict(pt.shape),
            "provider": provider, "status": "pending", "detail": "", "bytes": nbytes, "flops": flops}


def _progress_text(target: OpTarget, rec: dict) -> str:
    text = f"{target.label} num_tokens={rec['num_tokens']} {rec['provider']}: {rec['status']}"
    if rec["status"] == "ok":
        t = rec.get("graph") or rec.get("eager")
        text += f" {t['median_us']:.1f} us ({rec['timed_by']})"
        if "pct_ceiling" in rec:
            text += f" {rec['pct_ceiling']:.1f}% t/target {rec['target_ratio']:.2f}"
        if "pct_of_copy_same_bytes" in rec:
            text += f" {rec['pct_of_copy_same_bytes']:.1f}% of copy@size"
    elif rec["status"] in ("wrong", "error"):
        text += f" ({rec['detail'][:120]})"
    return text


def size_matched_copy(cfg: BenchConfig, work_bytes: int, l2: int) -> dict | None:
    """The point's copy reference (``ceilings.time_size_matched_copy``), ``{"error": ...}`` if it failed, or None
    where it is off or there is no CUDA graph (a CPU)."""
    if not cfg.copy_ref or cfg.device.type != "cuda":
        return None
    from .ceilings import time_size_matched_copy
    try:
        return time_size_matched_copy(max(work_bytes, 1), l2, cfg.device, max_sets=cfg.max_sets,
                                      mem_budget=SETS_MEM_BUDGET, repeats=cfg.repeats)
    except Exception as e:  # out of memory at the largest points: the providers are still timed
        with contextlib.suppress(Exception):
            torch.cuda.synchronize(cfg.device)
        return {"error": f"{type(e).__name__}: {e}"[:300]}
    finally:
        gc.collect()
        torch.cuda.empty_cache()


def run_point(spec: OpSpec, target: OpTarget, pt: SweepPoint, dtype: torch.dtype, provs: list[P.Provider],
              cfg: BenchConfig, ceil: Ceilings | None, l2: int, seed: int, skip: Callable[[str], str | None],
              progress: Progress, host_point: bool) -> tuple[list[dict], dict]:
    """Check and time every provider at one point. Returns the point records and, at the host-overhead point,
    ``{provider: Timing dict}``."""
    dev = cfg.device
    shape = pt.shape
    work = spec.work(shape, dtype)
    records = {p.name: _point_record(target, spec, pt, dtype, p.name, work.bytes, work.flops) for p in provs}
    hosts: dict = {}
    # first, while no op input is allocated; one timing for the point, shared by every provider's record
    copy_ref = copy_ref_fields(size_matched_copy(cfg, work.bytes, l2)) if provs else {}
    for rec in records.values():
        rec.update(copy_ref)
    try:
        check_inputs = spec.make_inputs(shape, dtype, Fill("randn", dev, seed + 1_000_003))
        refs, scales = P.reference(spec, dtype, check_inputs)
        fill = Fill("randn", dev, seed)
        sets = [spec.make_inputs(shape, dtype, fill)]
        # too few sets to turn the L2 over by themselves: an L2 flush before each replay
        n_sets, flush = rotation(work.bytes, l2, dev, max_sets=cfg.max_sets, mem_per_set=_nbytes(sets[0]),
                                 mem_budget=SETS_MEM_BUDGET)
        sets += [spec.make_inputs(shape, dtype, fill) for _ in range(n_sets - 1)]
    except Exception as e:  # inputs or the reference failed (out of memory, a spec bug): every provider errs here
        for p in provs:
            records[p.name].update(status="error", detail=f"inputs/reference: {type(e).__name__}: {e}"[:600])
            progress.advance(_progress_text(target, records[p.name]))
        return list(records.values()), hosts
    for p in provs:
        rec = records[p.name]
        rec["sets"] = n_sets
        rec["l2_flush"] = flush is not None
        why = skip(p.name)
        if why:
            rec.update(status="skipped", detail=why)
            progress.advance(_progress_text(target, rec))
            continue
        try:
            if p.begin_shape:
                p.begin_shape(shape)
            c = P.check(p, spec, dtype, check_inputs, refs, scales)
            rec["check"] = {"error": c.error, "rel_l2": c.rel_l2, "detail": c.detail}
            if not c.passed:
                rec.update(status="wrong", detail=c.detail)
                continue
            eager = time_eager(p, sets, dev, repeats=cfg.repeats)
            rec["eager"] = eager.to_dict()
            graph = None
            if dev.type == "cuda":
                try:
                    graph = time_graph(p, sets, dev, repeats=cfg.repeats, before_replay=flush)
                except NotCapturable as e:
                    rec["graph_error"] = str(e)
            rec["graph"] = graph.to_dict() if graph else None
            # the targets are about graph time; a provider no graph can hold is judged by its eager time
            rec["timed_by"] = "graph" if graph else "eager"
            if ceil is not None:
                rec.update(point_metrics(work.bytes, work.flops, (graph or eager).median_us * 1e-6, ceil))
                rec["eager_gbps"] = work.bytes / (eager.median_us * 1e-6) / 1e9
            if "copy_same_bytes_us" in rec:
                rec["pct_of_copy_same_bytes"] = pct_of_copy(rec["copy_same_bytes_us"], (graph or eager).median_us)
            rec["status"] = "ok"
        except Exception as e:  # recorded with the point; the sweep goes on
            rec.update(status="error", detail=f"{type(e).__name__}: {e}"[:600])
            if dev.type == "cuda":
                with contextlib.suppress(Exception):
                    torch.cuda.synchronize(dev)
        finally:
            progress.advance(_progress_text(target, rec))
    if host_point:
        # after every provider's timings, interleaved round by round (timing.interleaved_host_overhead); a
        # provider that fails here errs at this point, as any other failure of its point does
        ok = [p for p in provs if records[p.name]["status"] == "ok"]
        timings, errors = interleaved_host_overhead(ok, sets[0], dev, calls=cfg.host_calls)
        hosts.update(timings)
        for name, err in errors.items():
            records[name].update(status="error", detail=f"host time per eager call: {err}")
    del sets, check_inputs, refs
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return list(records.values()), hosts


def run_target(spec: OpSpec, target: OpTarget, dtype: torch.dtype, cfg: BenchConfig, ceil: Ceilings | None,
               progress: Progress, t_start: float) -> tuple[dict, list[dict]]:
    """Sweep one op config at one dtype. Returns its op record and its point records."""
    dev = cfg.device
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size if dev.type == "cuda" else 32 << 20
    points = sweep_points(spec, cfg.models, cfg.num_tokens, dict(target.overrides))
    op_rec: dict[str, Any] = {"op": spec.name, "label": target.label, "overrides": dict(target.overrides),
                              "dtype": dtype_name(dtype), "models": list(cfg.models),
                              "configs": list(dict.fromkeys(pt.config for pt in points)), "providers": {},
                              "compiles": {}, "host_overhead": {}, "startup": None, "l2_bytes": l2}
    provs: list[P.Provider] = []
    for name in cfg.providers:
        try:
            p = P.make_provider(name, spec, dtype)
        except P.Unavailable as e:
            op_rec["providers"][name] = f"unavailable: {e}"
            continue
        op_rec["providers"][name] = p.description
        provs.append(p)
    if dtype not in spec.dtypes:
        op_rec["error"] = f"{spec.name} does not support {dtype_name(dtype)}"
        return op_rec, []
    kernels = {p.name: P.find_kernels(p.kernel_modules) for p in provs if p.kernel_modules}
    before = {n: P.compile_counts(k) for n, k in kernels.items()}

    def skip(provider: str) -> str | None:
        if cfg.deadline_s is not None and provider != "tritonkit" and time.monotonic() - t_start > cfg.deadline_s:
            return f"skipped: past the {cfg.deadline_s:.0f} s time budget"
        return None

    # host overhead at the smallest point of each config
    smallest: dict[str, SweepPoint] = {}
    for pt in points:
        if pt.config not in smallest or pt.num_tokens < smallest[pt.config].num_tokens:
            smallest[pt.config] = pt
    records: list[dict] = []
    for i, pt in enumerate(points):
        recs, hosts = run_point(spec, target, pt, dtype, provs, cfg, ceil, l2, seed=i, skip=skip,
                                progress=progress, host_point=smallest[pt.config] == pt)
        records += recs
        if hosts:
            op_rec["host_overhead"][pt.shape.id] = hosts
    # modules imported during the sweep (a kernel module loaded lazily) are found now
    kernels = {p.name: P.find_kernels(p.kernel_modules) for p in provs if p.kernel_modules}
    for n, ks in kernels.items():
        after = P.compile_counts(ks)
        op_rec["compiles"][n] = {k: v - before.get(n, {}).get(k, 0) for k, v in after.items()
                                 if v - before.get(n, {}).get(k, 0) > 0}
    return op_rec, records


def startup_shape(spec: OpSpec, target: OpTarget, model: str) -> Shape:
    return spec.sweep_shape(MODELS[model], STARTUP_TOKENS).replace(**dict(target.overrides))


def run(cfg: BenchConfig, ceil: Ceilings | None, progress: Progress | None = None,
        on_target_done: Callable[[list[dict], list[dict]], None] | None = None) -> tuple[list[dict], list[dict]]:
    """Run every target at every dtype. Returns (op records, point records); ``on_target_done`` gets the results
    so far after each op config (the CLI writes partial JSON there)."""
    from ..ops import get_spec
    progress = progress or Progress()
    t_start = time.monotonic()
    specs: dict[str, OpSpec] = {}
    ops_out: list[dict] = []
    points_out: list[dict] = []
    for t in cfg.targets:
        if t.name in specs:
            continue
        try:
            specs[t.name] = get_spec(t.name)
        except Exception as e:  # an op still being written must not stop the others
            ops_out.append({"op": t.name, "label": t.label, "error": f"cannot load: {type(e).__name__}: {e}"})
            progress.log(f"{t.name}: cannot load its spec ({type(e).__name__}: {e}); skipped")
    # startup first, while the run is young: a sweep that overruns its deadline still leaves these measured
    startups: dict[tuple[str, torch.dtype], dict] = {}
    if cfg.startup and cfg.device.type == "cuda":
        from .startup import measure_startup
        for t in cfg.targets:
            for dtype in cfg.dtypes:
                if t.name not in specs or dtype not in specs[t.name].dtypes:
                    continue
                shape = startup_shape(specs[t.name], t, cfg.models[0])
                progress.log(f"startup: {t.label} {dtype_name(dtype)} [{shape.id}] in fresh processes "
                             "(empty Triton cache, then warm)")
                startups[(t.label, dtype)] = measure_startup(t.name, dict(shape), dtype_name(dtype))
    progress.start(count_steps(cfg, specs))
    for t in cfg.targets:
        if t.name not in specs:
            continue
        for dtype in cfg.dtypes:
            try:
                op_rec, recs = run_target(specs[t.name], t, dtype, cfg, ceil, progress, t_start)
            except Exception as e:  # a bad override or a failing spec: recorded, the other ops still run
                op_rec, recs = {"op": t.name, "label": t.label, "dtype": dtype_name(dtype),
                                "error": f"{type(e).__name__}: {e}"}, []
                progress.log(f"{t.label} {dtype_name(dtype)}: {op_rec['error']}")
            op_rec["startup"] = startups.get((t.label, dtype))
            ops_out.append(op_rec)
            points_out += recs
            if on_target_done:
                on_target_done(ops_out, points_out)
    return ops_out, points_out
