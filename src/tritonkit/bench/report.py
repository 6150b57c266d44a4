"""Bench results for people: metadata of a run, the terminal tables and the summary, and the progress bar. The
records themselves and their JSON file are :mod:`.records`."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import math
import platform
import shlex
import sys
import textwrap
from collections.abc import Iterable, Sequence

from .._env import driver_version, git_info
from .records import OpResult, PointResult, Results
from .roofline import TARGET_FACTOR
from .stats import geomean

SUMMARY_TOKENS = 16384


def metadata(argv: Sequence[str], device=None) -> dict:
    import torch
    import triton

    meta = {
        "command": "tritonkit bench " + " ".join(shlex.quote(a) for a in argv),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "host": platform.node(),
        "timing": (
            "CUDA-graph replay over rotating input sets that together exceed the L2 (at the smallest shapes: "
            "up to 2048 sets and an L2 flush before each replay), so every read is cold; per-call median, min, "
            "max over replays. eager: plain calls from Python, events around the loop (at most 256 sets)."
        ),
        "inductor": (
            "torch.compile(reference, dynamic=False), Dynamo reset at every point: one static compile per shape"
        ),
    }
    meta["git_sha"], meta["git_dirty"] = git_info()
    if device is not None and getattr(device, "type", None) == "cuda":
        props = torch.cuda.get_device_properties(device)
        meta.update(
            gpu=props.name,
            sm_count=props.multi_processor_count,
            l2_bytes=props.L2_cache_size,
            memory_bytes=props.total_memory,
            capability=f"{props.major}.{props.minor}",
            driver=driver_version(),
        )
    return meta


# ----------------------------------------------------------------------------------------------- formatting


def fmt_us(x) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:.1f}" if x < 1000 else f"{x:.0f}"


def fmt_bytes(n) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n}B"


def short(text: str, width: int = 48) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def fmt(x, spec: str = ".3g") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return format(x, spec)


#: every line the bench prints fits a terminal this wide: a wider table is split into column groups, text wrapped
WIDTH = 120


def fit(text: str, width: int | None = None) -> str:
    """``text`` with each line past ``width`` (default :data:`WIDTH`) wrapped, its continuation indented under it
    (tables from :func:`text_table` already fit)."""
    width = WIDTH if width is None else width
    out = []
    for line in text.split("\n"):
        if len(line) <= width:
            out.append(line)
            continue
        lead = line[: len(line) - len(line.lstrip())]
        out.append(
            textwrap.fill(
                line.strip(), width, initial_indent=lead, subsequent_indent=lead + "    ", break_on_hyphens=False
            )
        )
    return "\n".join(out)


def text_table(
    head: Sequence[str],
    rows: Iterable[Sequence[str]],
    right: Sequence[bool] | None = None,
    keep: int = 1,
    width: int | None = None,
) -> str:
    """Rows under a header, columns aligned. A table wider than ``width`` (default :data:`WIDTH`) is printed as
    several, one under the other, each repeating the first ``keep`` columns (the row's key) beside the columns that
    fit."""
    width = WIDTH if width is None else width
    rows = [list(map(str, r)) for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(head)]
    right = right or [i > 0 for i in range(len(head))]

    def line(cells, cols):
        return "  ".join(cells[i].rjust(widths[i]) if right[i] else cells[i].ljust(widths[i]) for i in cols).rstrip()

    groups, cur = [], list(range(min(keep, len(head))))
    base = sum(widths[i] + 2 for i in cur)
    used = base
    for i in range(len(cur), len(head)):
        if used + widths[i] > width and len(cur) > keep:
            groups.append(cur)
            cur, used = list(range(min(keep, len(head)))), base
        cur.append(i)
        used += widths[i] + 2
    groups.append(cur)
    out = []
    for g in groups:
        if out:
            out.append("")
        out += [line(head, g), "-" * len(line(head, g))]
        out += [line(r, g) for r in rows]
    return "\n".join(out)


def _status_cell(p: PointResult | None) -> str:
    if p is None:
        return ""
    if p.ok:
        return fmt_us(p.time_us) + ("" if p.graph else "*")
    return {"wrong": "WRONG", "error": "ERROR", "skipped": "skip"}.get(p.status, p.status or "?")


Series = dict[int, dict[str, PointResult]]


def group_points(points: Iterable[PointResult]) -> dict[tuple, Series]:
    """``{(label, dtype, config): {num_tokens: {provider: point}}}`` in first-seen order."""
    out: dict[tuple, Series] = {}
    for p in points:
        out.setdefault((p.label, p.dtype, p.config), {}).setdefault(p.num_tokens, {})[p.provider] = p
    return out


def _copy_us(by: dict[str, PointResult]) -> float | None:
    """The point's size-matched copy time, from whichever provider record carries it."""
    return next((p.copy.us for p in by.values() if p.copy is not None and p.copy.us is not None), None)


def has_copy_ref(series: Series) -> bool:
    return any(_copy_us(by) is not None for by in series.values())


def _ratio(a: PointResult | None, b: PointResult | None) -> str:
    ta, tb = (a.time_us if a else None), (b.time_us if b else None)
    return f"{ta / tb:.2f}x" if ta and tb else "-"


def point_table(series: Series, providers: Sequence[str]) -> str:
    """One row per num_tokens. Peers' time over tritonkit's (``vllm/tk``, ``fa3/tk``, ``unfused/tk``, ...) where
    they ran; the size-matched copy columns ("copy us", "%copy@size" for tritonkit) last and only where the series
    has them."""
    head = ["num_tokens", "bytes"] + [f"{pr} us" for pr in providers]
    head += ["tk GB/s", "tk TFLOP/s", "%ceil", "t/target", "tk eager us"]
    peers = [pr for pr in ("vllm", "fa3", "inductor", "sdpa", "unfused") if pr in providers]
    peers += [pr for pr in providers if pr.startswith("base@")]
    head += [f"{pr}/tk" for pr in peers]
    copy_cols = has_copy_ref(series)
    if copy_cols:
        head += ["copy us", "%copy@size"]
    rows = []
    for t in sorted(series):
        by = series[t]
        tk = by.get("tritonkit")
        nbytes = next(iter(by.values())).bytes
        row = [str(t), fmt_bytes(nbytes)] + [_status_cell(by.get(pr)) for pr in providers]
        m = tk.metrics if tk is not None and tk.ok else None
        row += [
            fmt(m.gbps, ".0f") if m else "-",
            fmt(m.tflops, ".1f") if m else "-",
            fmt(m.pct_ceiling, ".1f") if m else "-",
            (f"{m.target_ratio:.2f}" + ("" if m.target_pass else " MISS")) if m else "-",
            fmt_us(tk.eager.median_us) if tk is not None and tk.ok and tk.eager else "-",
        ]
        row += [_ratio(by.get(pr), tk) for pr in peers]
        if copy_cols:
            row += [fmt_us(_copy_us(by)), fmt(tk.pct_of_copy, ".1f") if tk else "-"]
        rows.append(row)
    return text_table(head, rows, keep=2)


def _startup_text(st: dict | None) -> str:
    if not st:
        return ""
    parts = []
    for kind in ("cold", "warm"):
        r = st.get(kind) or {}
        if "error" in r:
            parts.append(f"{kind}: {r['error'][:200]}")
        elif r:
            parts.append(
                f"{kind} {r['to_first_result_s']:.2f} s (import {r['import_s']:.2f}, CUDA init "
                f"{r['cuda_init_s']:.2f}, first call {r['first_call_s']:.2f})"
                + ("" if r.get("correct") else " WRONG RESULT")
            )
    return "; ".join(parts)


def ceilings_text(c: dict | None) -> str:
    if not c:
        return "ceilings: none (no GPU)"
    return (
        f"ceilings on {c.get('gpu')} (driver {c.get('driver')}): copy {c['copy_gbps'] / 1000:.2f} TB/s "
        f"(Triton copy kernel, read+write), bf16 matmul {c['matmul_tflops']:.0f} TFLOP/s, "
        f"fp8 matmul {c.get('matmul_fp8_tflops') or float('nan'):.0f} TFLOP/s, floor "
        f"{c['floor_us']:.2f} us (16-byte copy, cold), empty launch {c.get('empty_us', float('nan')):.2f} us; "
        f"target: time <= {TARGET_FACTOR} x (floor + max(bytes / copy, flops / matmul)) [{c.get('source')}]"
    )


def _series_notes(series: Series) -> list[str]:
    out = []
    bases = [p.provider for by in series.values() for p in by.values() if p.provider.startswith("base@")]
    for base in dict.fromkeys(bases):
        ratios = [
            by[base].time_us / by["tritonkit"].time_us
            for by in series.values()
            if base in by and "tritonkit" in by and by[base].time_us and by["tritonkit"].time_us
        ]
        reused = sum(1 for by in series.values() if base in by and by[base].detail.startswith("reused"))
        if ratios:
            out.append(
                f"  {base}/tk geomean {geomean(ratios):.3f} over {len(ratios)} points (above 1: this tree "
                f"is faster)" + (f"; {reused} base timings reused from an earlier run" if reused else "")
            )
    if has_copy_ref(series):
        out.append(
            "  copy us: a Triton copy of the point's bytes, timed the same way; "
            "%copy@size = copy us / tritonkit us (evidence, not a target)"
        )
    pts = [p for by in series.values() for p in by.values()]
    for why in sorted({p.copy.error for p in pts if p.copy is not None and p.copy.error})[:3]:
        out.append(f"  copy reference failed: {why[:200]}")
    for prov, why in {p.provider: p.graph_error for p in pts if p.ok and p.graph_error}.items():
        out.append(f"  * {prov}: eager time, {why[:200]}")
    for p in pts:
        if p.status in ("wrong", "error"):
            out.append(f"  {p.provider} at num_tokens={p.num_tokens}: {p.status}: {p.detail[:300]}")
    # one line per provider and kind of skip, with the first point's reason
    skipped: dict[tuple[str, str], list[PointResult]] = {}
    for p in pts:
        if p.status == "skipped":
            kind = "budget" if p.detail.startswith("over the point's time budget") else p.detail
            skipped.setdefault((p.provider, kind), []).append(p)
    for (prov, _kind), ps in skipped.items():
        ps.sort(key=lambda p: p.num_tokens)
        out.append(f"  {prov} skipped at num_tokens {_ranges([p.num_tokens for p in ps])}: {ps[0].detail[:200]}")
    return out


def _ranges(ts: list[int]) -> str:
    return ", ".join(map(str, ts)) if len(ts) <= 4 else f"{ts[0]}..{ts[-1]} ({len(ts)} points)"


def format_results(results: Results) -> str:
    """The full terminal report: ceilings, one table per op config, compiles, host overhead, startup, problems."""
    out = [ceilings_text(results.ceilings)]
    groups = group_points(results.points)
    for op in results.ops:
        head = f"\n== {op.label} {op.dtype}"
        if op.error:
            out.append(f"{head}: {op.error}")
            continue
        for (label, dtype, config), series in groups.items():
            if label != op.label or dtype != op.dtype:
                continue
            out.append(f"{head} [{config}]   (us: CUDA graph, cold L2; t/target = time / {TARGET_FACTOR}x ideal)")
            out.append(point_table(series, op.available))
            out += _series_notes(series)
        for n, d in op.providers.items():
            if str(d).startswith("unavailable"):
                out.append(f"  {n}: {d}")
        for prov, ks in op.compiles.items():
            txt = ", ".join(f"{k.rsplit('.', 1)[-1]} x{v}" for k, v in ks.items()) or "none"
            out.append(f"  compiles over the sweep ({prov}): {txt}")
        for shape_id, hosts in op.host_overhead.items():
            txt = ", ".join(f"{pr} {fmt_us(t['median_us'])} us" for pr, t in hosts.items())
            out.append(f"  host time per eager call [{short(shape_id, 40)}]: {txt}")
        if op.startup:
            out.append(f"  startup [{dict_id(op.startup.get('shape', {}))}]: {_startup_text(op.startup)}")
    return fit("\n".join(out))


def dict_id(d: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in d.items())


@dataclasses.dataclass
class SummaryRow:
    """One op series in the run's summary."""

    label: str
    dtype: str
    config: str
    pct: dict[str, float | None]  # provider -> % of ceiling at the summary's num_tokens
    worst_ratio: float | None
    worst_at: int | None
    passed: int
    points: int
    copy_passed: int | None  # the size-matched copy against the same target (None: no copy column)
    copy_points: int
    compiles: dict[str, int]
    startup_cold_s: float | None
    startup_warm_s: float | None
    host_us: dict[str, float | None]  # provider -> host time per eager call
    problems: list[str]


def _summary_x(series: Series, tokens: int) -> int:
    """The num_tokens a series is summarized at: ``tokens`` where it has a point, else its largest below it (a
    decode series stops before prefill sizes), else its smallest."""
    below = [t for t in series if t <= tokens]
    return max(below) if below else min(series)


def summary_rows(results: Results, tokens: int = SUMMARY_TOKENS) -> list[SummaryRow]:
    """Per op series: tritonkit's % of ceiling at ``tokens`` (and each peer's), the worst target ratio over the
    sweep, compiles per kernel, startup, host overhead."""
    rows = []
    ops = {(o.label, o.dtype): o for o in results.ops}
    for (label, dtype, config), series in group_points(results.points).items():
        op = ops.get((label, dtype), OpResult("", label))
        tk = [
            s["tritonkit"]
            for s in series.values()
            if "tritonkit" in s and s["tritonkit"].ok and s["tritonkit"].metrics is not None
        ]
        at = series[_summary_x(series, tokens)]
        pct = {prov: (p.metrics.pct_ceiling if p.ok and p.metrics else None) for prov, p in at.items()}
        worst = max(tk, key=lambda p: p.metrics.target_ratio) if tk else None
        copied = [p for p in tk if p.copy is not None and p.copy.us is not None]
        st = op.startup or {}
        # host time is measured at each series' smallest point, keyed by that point's shape
        smallest = next(iter(series[min(series)].values()))
        hosts = op.host_overhead.get(dict_id(smallest.shape), {})
        rows.append(
            SummaryRow(
                label,
                dtype,
                config,
                pct,
                worst.metrics.target_ratio if worst else None,
                worst.num_tokens if worst else None,
                sum(1 for p in tk if p.metrics.target_pass),
                sum(1 for s in series.values() if "tritonkit" in s),
                # where a copy of the op's own bytes misses the bound, no op moving those bytes meets it on this card
                sum(1 for p in copied if p.copy.us <= p.metrics.target_us) if copied else None,
                len(copied),
                op.compiles.get("tritonkit", {}),
                (st.get("cold") or {}).get("to_first_result_s"),
                (st.get("warm") or {}).get("to_first_result_s"),
                {prov: t.get("median_us") for prov, t in hosts.items()},
                [
                    f"{p.provider}@{p.num_tokens}:{p.status}"
                    for s in series.values()
                    for p in s.values()
                    if p.status in ("wrong", "error")
                ],
            )
        )
    return rows


def format_summary(results: Results, tokens: int = SUMMARY_TOKENS) -> str:
    rows = summary_rows(results, tokens)
    head = [
        "op",
        "series",
        f"%ceil@{tokens // 1024}K",
        "inductor",
        "vllm",
        "fa3",
        "sdpa",
        "worst t/target",
        "pass",
        "copy pass",
        "compiles/kernel",
        "startup cold/warm s",
        "host us tk/ind",
    ]
    body = []
    for r in rows:
        body.append(
            [
                r.label,
                short(r.config),
                fmt(r.pct.get("tritonkit"), ".1f"),
                fmt(r.pct.get("inductor"), ".1f"),
                fmt(r.pct.get("vllm"), ".1f"),
                fmt(r.pct.get("fa3"), ".1f"),
                fmt(r.pct.get("sdpa"), ".1f"),
                f"{r.worst_ratio:.2f} @{r.worst_at}" if r.worst_ratio is not None else "-",
                f"{r.passed}/{r.points}",
                f"{r.copy_passed}/{r.copy_points}" if r.copy_passed is not None else "-",
                ",".join(str(v) for v in r.compiles.values()) or "-",
                f"{fmt(r.startup_cold_s, '.2f')}/{fmt(r.startup_warm_s, '.2f')}",
                f"{fmt_us(r.host_us.get('tritonkit'))}/{fmt_us(r.host_us.get('inductor'))}",
            ]
        )
    out = [
        f"summary ({TARGET_FACTOR}x target: t/target <= 1 passes; copy pass: the size-matched copy against the "
        f"same target; % of ceiling at {tokens} tokens, or a series' largest point below it)",
        text_table(head, body, [False, False] + [True] * (len(head) - 2), keep=2),
    ]
    for r in rows:
        if r.problems:
            out.append(f"  {r.label} [{r.config}]: " + ", ".join(r.problems[:12]))
    for o in results.ops:
        if o.error:
            out.append(f"  {o.label} {o.dtype}: {o.error[:300]}")
    return fit("\n".join(out))


# ------------------------------------------------------------------------------------------------- progress


class BarProgress:
    """rich progress bar on a terminal; one plain line per step otherwise (logs, CI, remote runs)."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stderr
        self.total = 0
        self.done = 0
        self._bar = None
        self._task = None
        self._stack = contextlib.ExitStack()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._stack.close()

    def start(self, total: int) -> None:
        self.total = total
        if self.stream.isatty():
            try:
                from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
            except ImportError:
                return
            self._bar = self._stack.enter_context(
                Progress(
                    TextColumn("{task.description}"),
                    BarColumn(),
                    MofNCompleteColumn(),
                    TimeElapsedColumn(),
                    transient=True,
                )
            )
            self._task = self._bar.add_task("bench", total=total)

    def advance(self, text: str) -> None:
        self.done += 1
        if self._bar is not None:
            self._bar.update(self._task, advance=1, description=text[:60])
        else:
            self.stream.write(f"[{self.done}/{self.total}] {text}\n")
            self.stream.flush()

    def log(self, text: str) -> None:
        if self._bar is not None:
            self._bar.console.print(text)
        else:
            self.stream.write(text + "\n")
            self.stream.flush()
