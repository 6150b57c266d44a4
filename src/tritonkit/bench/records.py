"""What a bench run produces, as typed records: one :class:`PointResult` per (point, provider), one :class:`OpResult`
per op config and dtype, and :class:`Results` around them; and the JSON file they are written to.

The JSON (``SCHEMA`` 1; files written before the records existed read the same)::

    {"schema": 1,
     "meta": {gpu, sm_count, l2_bytes, driver, cuda, torch, triton, python, git_sha, git_dirty, command, date, ...},
     "ceilings": {copy_gbps, matmul_tflops, matmul_fp8_tflops, floor_us, empty_us, gpu, driver, measured_at,
                  source, details},
     "ops": [OpResult.to_dict()],
     "points": [PointResult.to_dict()]}

A point's dict is flat (its metrics and copy-reference fields beside its identity), so a row reads as one line of a
table; times are microseconds per call. ``graph`` is CUDA-graph replay over the rotation sets (the number targets
use); ``eager`` is plain Python calls. ``copy_same_bytes_*`` is the point's size-matched copy (a Triton copy kernel
reading and writing half of ``bytes`` each, timed the same way), repeated in each provider's record.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import pathlib
from typing import Any

from .roofline import Metrics
from .stats import Timing

SCHEMA = 1
STATUSES = ("pending", "ok", "wrong", "error", "skipped")


@dataclasses.dataclass
class CheckResult:
    """A provider's outputs against the float64 reference, before it is timed."""

    passed: bool
    error: float
    rel_l2: float
    detail: str

    def to_dict(self) -> dict:
        return {"error": self.error, "rel_l2": self.rel_l2, "detail": self.detail}

    @classmethod
    def from_dict(cls, d: dict) -> CheckResult:
        err = float(d.get("error", math.inf))
        return cls(err <= 1.0, err, float(d.get("rel_l2", math.inf)), str(d.get("detail", "")))


@dataclasses.dataclass
class CopyRef:
    """The point's size-matched copy: what a Triton copy of the point's bytes takes, timed the same way (or why it
    could not be measured)."""

    us: float | None = None
    gbps: float | None = None
    info: dict = dataclasses.field(default_factory=dict)  # bytes, sets, l2_flush, config, timing
    error: str | None = None

    def fields(self) -> dict:
        if self.error is not None:
            return {"copy_same_bytes_error": self.error}
        return {"copy_same_bytes_us": self.us, "copy_same_bytes_gbps": self.gbps, "copy_same_bytes": self.info}

    @classmethod
    def from_fields(cls, d: dict) -> CopyRef | None:
        if "copy_same_bytes_error" in d:
            return cls(error=d["copy_same_bytes_error"])
        if "copy_same_bytes_us" in d:
            return cls(d["copy_same_bytes_us"], d.get("copy_same_bytes_gbps"), dict(d.get("copy_same_bytes") or {}))
        return None


def _timing(d: dict | None) -> Timing | None:
    if not d:
        return None
    return Timing(float(d["median_us"]), float(d["min_us"]), float(d["max_us"]), int(d["repeats"]))


@dataclasses.dataclass
class PointResult:
    """One provider at one sweep point: its identity, its check, its timings and what they amount to."""

    op: str
    label: str  # the op as named on the command line (``rms_norm:residual=0``)
    config: str  # the series: the shape keys fixed along the sweep (and the series' name for multi-series ops)
    model: str
    dtype: str
    num_tokens: int  # the sweep's x
    shape: dict
    provider: str
    bytes: int = 0
    flops: int = 0
    fp8: bool = False  # the flops run on fp8 tensor cores (judged against the fp8 matmul ceiling)
    status: str = "pending"  # pending | ok | wrong | error | skipped
    detail: str = ""
    sets: int | None = None  # input sets the timing rotated through
    l2_flush: bool | None = None  # an L2 flush before each replay (too few sets to turn the L2 over)
    check: CheckResult | None = None
    eager: Timing | None = None
    graph: Timing | None = None
    graph_error: str | None = None  # why no CUDA graph could hold the provider (then timed by eager)
    metrics: Metrics | None = None  # of the time that counts (graph, else eager)
    eager_gbps: float | None = None
    copy: CopyRef | None = None
    pct_of_copy: float | None = None  # copy time / this provider's time, percent

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def timed_by(self) -> str | None:
        if not self.ok:
            return None
        return "graph" if self.graph else "eager" if self.eager else None

    @property
    def time_us(self) -> float | None:
        """The time that counts: graph median, else eager median; None unless the provider was timed."""
        t = self.graph or self.eager
        return t.median_us if self.ok and t else None

    def to_dict(self) -> dict:
        d: dict[str, Any] = {
            "op": self.op,
            "label": self.label,
            "config": self.config,
            "model": self.model,
            "dtype": self.dtype,
            "num_tokens": self.num_tokens,
            "shape": dict(self.shape),
            "provider": self.provider,
            "status": self.status,
            "detail": self.detail,
            "bytes": self.bytes,
            "flops": self.flops,
        }
        if self.fp8:
            d["fp8"] = True
        if self.sets is not None:
            d["sets"], d["l2_flush"] = self.sets, bool(self.l2_flush)
        if self.check is not None:
            d["check"] = self.check.to_dict()
        if self.eager is not None:
            d["eager"] = self.eager.to_dict()
        if self.ok or self.graph is not None:
            d["graph"] = self.graph.to_dict() if self.graph else None
        if self.graph_error:
            d["graph_error"] = self.graph_error
        if self.timed_by:
            d["timed_by"] = self.timed_by
        if self.metrics is not None:
            d.update(self.metrics.to_dict())
        if self.eager_gbps is not None:
            d["eager_gbps"] = self.eager_gbps
        if self.copy is not None:
            d.update(self.copy.fields())
        if self.pct_of_copy is not None:
            d["pct_of_copy_same_bytes"] = self.pct_of_copy
        return d

    @classmethod
    def from_dict(cls, d: dict) -> PointResult:
        return cls(
            op=d["op"],
            label=d.get("label", d["op"]),
            config=d.get("config", ""),
            model=d.get("model", ""),
            dtype=d.get("dtype", ""),
            num_tokens=int(d.get("num_tokens", 0)),
            shape=dict(d.get("shape") or {}),
            provider=d["provider"],
            bytes=int(d.get("bytes", 0)),
            flops=int(d.get("flops", 0)),
            fp8=bool(d.get("fp8", False)),
            status=d.get("status", "pending"),
            detail=d.get("detail", ""),
            sets=d.get("sets"),
            l2_flush=d.get("l2_flush"),
            check=CheckResult.from_dict(d["check"]) if d.get("check") else None,
            eager=_timing(d.get("eager")),
            graph=_timing(d.get("graph")),
            graph_error=d.get("graph_error"),
            metrics=Metrics.from_dict(d) if "gbps" in d and "bound" in d else None,
            eager_gbps=d.get("eager_gbps"),
            copy=CopyRef.from_fields(d),
            pct_of_copy=d.get("pct_of_copy_same_bytes"),
        )


@dataclasses.dataclass
class OpResult:
    """One op config at one dtype: its providers, the compiles its sweep made, host time, startup."""

    op: str
    label: str
    dtype: str = ""
    overrides: dict = dataclasses.field(default_factory=dict)
    models: list[str] = dataclasses.field(default_factory=list)
    configs: list[str] = dataclasses.field(default_factory=list)
    providers: dict[str, str] = dataclasses.field(default_factory=dict)  # name -> description | "unavailable: .."
    compiles: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)  # provider -> {kernel: n}
    host_overhead: dict[str, dict[str, dict]] = dataclasses.field(default_factory=dict)  # shape id -> {prov: t}
    startup: dict | None = None
    l2_bytes: int | None = None
    error: str | None = None

    @property
    def available(self) -> list[str]:
        return [n for n, d in self.providers.items() if not str(d).startswith("unavailable")]

    def to_dict(self) -> dict:
        d = {
            "op": self.op,
            "label": self.label,
            "dtype": self.dtype,
            "overrides": self.overrides,
            "models": self.models,
            "configs": self.configs,
            "providers": self.providers,
            "compiles": self.compiles,
            "host_overhead": self.host_overhead,
            "startup": self.startup,
            "l2_bytes": self.l2_bytes,
        }
        if self.error:
            d["error"] = self.error
        return d

    @classmethod
    def from_dict(cls, d: dict) -> OpResult:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclasses.dataclass
class Results:
    meta: dict
    ceilings: dict | None
    ops: list[OpResult]
    points: list[PointResult]

    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA,
            "meta": self.meta,
            "ceilings": self.ceilings,
            "ops": [o.to_dict() for o in self.ops],
            "points": [p.to_dict() for p in self.points],
        }

    @classmethod
    def from_dict(cls, d: dict) -> Results:
        return cls(
            d.get("meta") or {},
            d.get("ceilings"),
            [OpResult.from_dict(o) for o in d.get("ops", [])],
            [PointResult.from_dict(p) for p in d.get("points", [])],
        )


def _finite(o):
    """JSON has no inf/nan: write them as strings so the file stays standard JSON."""
    if isinstance(o, float) and not math.isfinite(o):
        return "inf" if o > 0 else "-inf" if o < 0 else "nan"
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    return o


def _unfinite(o):
    if isinstance(o, str) and o in ("inf", "-inf", "nan"):
        return float(o)
    if isinstance(o, dict):
        return {k: _unfinite(v) for k, v in o.items()}
    if isinstance(o, list):
        return [_unfinite(v) for v in o]
    return o


def write_json(path: str | os.PathLike, results: Results) -> pathlib.Path:
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(_finite(results.to_dict()), indent=1, default=str) + "\n")
    tmp.replace(path)
    return path


def read_json(path: str | os.PathLike) -> Results:
    data = _unfinite(json.loads(pathlib.Path(path).read_text()))
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or "points" not in data:
        raise ValueError(f"{path} is not a tritonkit bench result (schema {SCHEMA})")
    return Results.from_dict(data)


#: the columns of a GPU's long-format results table (one row per provider and point of every recorded run)
TABLE_COLUMNS = (
    "date",
    "gpu",
    "driver",
    "torch",
    "triton",
    "git_sha",
    "git_dirty",
    "op",
    "label",
    "series",
    "dtype",
    "num_tokens",
    "shape",
    "provider",
    "status",
    "us",
    "timed_by",
    "gbps",
    "tflops",
    "bound",
    "pct_ceiling",
    "target_ratio",
    "copy_us",
    "detail",
)


def table_rows(results: Results) -> list[dict]:
    """The run as rows of :data:`TABLE_COLUMNS`: what stays comparable across runs (times in us, throughput,
    % of the ceiling measured in that run), one row per provider and point, skipped and wrong ones included."""
    m = results.meta
    rows = []
    for p in results.points:
        mt = p.metrics
        rows.append(
            {
                "date": m.get("date", ""),
                "gpu": m.get("gpu", ""),
                "driver": m.get("driver", ""),
                "torch": m.get("torch", ""),
                "triton": m.get("triton", ""),
                "git_sha": m.get("git_sha", ""),
                "git_dirty": m.get("git_dirty", ""),
                "op": p.op,
                "label": p.label,
                "series": p.config,
                "dtype": p.dtype,
                "num_tokens": p.num_tokens,
                "shape": ",".join(f"{k}={v}" for k, v in p.shape.items()),
                "provider": p.provider,
                "status": p.status,
                "us": f"{p.time_us:.3f}" if p.time_us is not None else "",
                "timed_by": p.timed_by or "",
                "gbps": f"{mt.gbps:.1f}" if mt else "",
                "tflops": f"{mt.tflops:.2f}" if mt else "",
                "bound": mt.bound if mt else "",
                "pct_ceiling": f"{mt.pct_ceiling:.1f}" if mt else "",
                "target_ratio": f"{mt.target_ratio:.3f}" if mt else "",
                "copy_us": f"{p.copy.us:.3f}" if p.copy is not None and p.copy.us is not None else "",
                "detail": "" if p.ok else p.detail[:200],
            }
        )
    return rows


def append_table(path: str | os.PathLike, results: Results) -> int:
    """Append the run's rows to the CSV table at ``path`` (written with its header when new); returns how many.
    A table whose header is not :data:`TABLE_COLUMNS` is refused rather than mixed."""
    path = pathlib.Path(path)
    rows = table_rows(results)
    new = not path.exists() or path.stat().st_size == 0
    if not new:
        with path.open(newline="") as f:
            head = next(csv.reader(f), [])
        if tuple(head) != TABLE_COLUMNS:
            raise ValueError(f"{path} has other columns than a tritonkit bench table ({', '.join(head[:6])}...)")
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=TABLE_COLUMNS)
        if new:
            w.writeheader()
        w.writerows(rows)
    return len(rows)


def record(directory: str | os.PathLike, results: Results, plots: dict[str, os.PathLike] | None = None) -> str:
    """Publish a run into a GPU's results folder: append its rows to ``directory/bench.csv`` and, per op of the
    run, write ``directory/latest/<op>.json`` (the run's results for that op, with the run's meta) and copy its plot
    (``plots[op]``) to ``latest/<op>.png``; the other ops' latest files stay. Returns what it did, in a sentence."""
    import shutil

    d = pathlib.Path(directory)
    n = append_table(d / "bench.csv", results)
    latest = d / "latest"
    latest.mkdir(parents=True, exist_ok=True)
    ops = list(dict.fromkeys([o.op for o in results.ops] + [p.op for p in results.points]))
    for op in ops:
        write_json(
            latest / f"{op}.json",
            Results(
                results.meta,
                results.ceilings,
                [o for o in results.ops if o.op == op],
                [p for p in results.points if p.op == op],
            ),
        )
        png = (plots or {}).get(op)
        (latest / f"{op}.png").unlink(missing_ok=True)
        if png is not None and pathlib.Path(png).exists():
            shutil.copy2(png, latest / f"{op}.png")
    return f"recorded {n} rows in {d / 'bench.csv'} and the latest {', '.join(ops)} in {latest}"
