"""Bench results: metadata, the JSON file, the terminal tables and the summary, and the progress bar.

The JSON (``SCHEMA`` 1)::

    {"schema": 1,
     "meta": {gpu, sm_count, l2_bytes, driver, cuda, torch, triton, python, git_sha, git_dirty, command, date,
              timing, inductor},
     "ceilings": {copy_gbps, matmul_tflops, floor_us, empty_us, gpu, driver, measured_at, source, details},
     "ops": [{op, label, overrides, dtype, models, configs, providers: {name: description | "unavailable: why"},
              compiles: {provider: {kernel: n}}, host_overhead: {shape id: {provider: timing}},
              startup: {shape, dtype, cold: {...}, warm: {...}} | null, error?}],
     "points": [{op, label, config, model, dtype, num_tokens, shape, provider, status (ok|wrong|error|skipped),
                 detail, bytes, flops, sets, l2_flush, check: {error, rel_l2, detail},
                 graph: {median_us, min_us, max_us, repeats} | null, graph_error?, eager: {...}, timed_by,
                 gbps, tflops, bound, pct_ceiling, ideal_us, target_us, target_ratio, target_pass, eager_gbps,
                 copy_same_bytes_us?, copy_same_bytes_gbps?, pct_of_copy_same_bytes?,
                 copy_same_bytes?: {bytes, sets, l2_flush, config, timing}, copy_same_bytes_error?}]}

Times are microseconds; a timing is per call. ``graph`` is CUDA-graph replay over the rotation sets (the number
the targets use); ``eager`` is plain Python calls. ``copy_same_bytes_*`` is the point's size-matched copy reference,
measured once per point and repeated in each provider's record: a Triton copy kernel reading and writing half of
``bytes`` each (whole 16-byte vectors), timed the same way (its own rotation sets or L2 flush, CUDA graph);
``pct_of_copy_same_bytes`` = copy time / the provider's time x 100. Runs with ``--no-copy-ref``, runs on a CPU and
files written before it existed have none of these fields; nothing else depends on them.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import os
import pathlib
import platform
import shlex
import sys
from collections.abc import Iterable, Sequence

from .._env import driver_version, git_info
from .stats import TARGET_FACTOR

SCHEMA = 1
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
        "timing": ("CUDA-graph replay over rotating input sets that together exceed the L2 (at the smallest shapes: "
                   "up to 2048 sets and an L2 flush before each replay), so every read is cold; per-call median, min, "
                   "max over replays. eager: plain calls from Python, events around the loop (at most 256 sets)."),
        "inductor": ("torch.compile(reference, dynamic=False), Dynamo reset at every point: one static compile "
                     "per shape"),
    }
    meta["git_sha"], meta["git_dirty"] = git_info()
    if device is not None and getattr(device, "type", None) == "cuda":
        props = torch.cuda.get_device_properties(device)
        meta.update(gpu=props.name, sm_count=props.multi_processor_count, l2_bytes=props.L2_cache_size,
                    memory_bytes=props.total_memory, capability=f"{props.major}.{props.minor}",
                    driver=driver_version())
    return meta


def results_dict(meta: dict, ceilings: dict | None, ops: list[dict], points: list[dict]) -> dict:
    return {"schema": SCHEMA, "meta": meta, "ceilings": ceilings, "ops": ops, "points": points}


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


def write_json(path: str | os.PathLike, results: dict) -> pathlib.Path:
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(_finite(results), indent=1, default=str) + "\n")
    tmp.replace(path)
    return path


def read_json(path: str | os.PathLike) -> dict:
    data = _unfinite(json.loads(pathlib.Path(path).read_text()))
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or "points" not in data:
        raise ValueError(f"{path} is not a tritonkit bench result (schema {SCHEMA})")
    return data


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
    return text if len(text) <= width else text[:width - 3] + "..."


def fmt(x, spec: str = ".3g") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return format(x, spec)


def text_table(head: Sequence[str], rows: Iterable[Sequence[str]], right: Sequence[bool] | None = None) -> str:
    rows = [list(map(str, r)) for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(head)]
    right = right or [i > 0 for i in range(len(head))]

    def line(cells):
        return "  ".join(c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right)).rstrip()
    out = [line(head), "-" * len(line(head))]
    out += [line(r) for r in rows]
    return "\n".join(out)


def _status_cell(p: dict | None) -> str:
    if p is None:
        return ""
    st = p.get("status")
    if st == "ok":
        if p.get("graph"):
            return fmt_us(p["graph"]["median_us"])
        return fmt_us((p.get("eager") or {}).get("median_us")) + "*"
    return {"wrong": "WRONG", "error": "ERROR", "skipped": "skip"}.get(st, st or "?")


def _time(p: dict | None) -> float | None:
    if not p or p.get("status") != "ok":
        return None
    g = p.get("graph") or p.get("eager")
    return g["median_us"] if g else None


def group_points(points: Iterable[dict]) -> dict[tuple, dict[int, dict[str, dict]]]:
    """``{(label, dtype, config): {num_tokens: {provider: point}}}`` in first-seen order."""
    out: dict[tuple, dict[int, dict[str, dict]]] = {}
    for p in points:
        out.setdefault((p["label"], p["dtype"], p["config"]), {}).setdefault(p["num_tokens"], {})[p["provider"]] = p
    return out


def _copy_us(by: dict[str, dict]) -> float | None:
    """The point's size-matched copy time, from whichever provider record carries it."""
    return next((p["copy_same_bytes_us"] for p in by.values() if "copy_same_bytes_us" in p), None)


def has_copy_ref(series: dict[int, dict[str, dict]]) -> bool:
    return any(_copy_us(by) is not None for by in series.values())


def point_table(series: dict[int, dict[str, dict]], providers: Sequence[str]) -> str:
    """One row per num_tokens. The size-matched copy columns ("copy us", "%copy@size" for tritonkit) come last and
    only where the series has them, so a run without them prints the table it always did."""
    head = ["num_tokens", "bytes"] + [f"{pr} us" for pr in providers]
    head += ["tk GB/s", "%ceil", "t/target", "tk eager us"]
    if "inductor" in providers:
        head.append("inductor/tk")
    copy_cols = has_copy_ref(series)
    if copy_cols:
        head += ["copy us", "%copy@size"]
    rows = []
    for t in sorted(series):
        by = series[t]
        tk = by.get("tritonkit")
        nbytes = next(iter(by.values()))["bytes"]
        row = [str(t), fmt_bytes(nbytes)] + [_status_cell(by.get(pr)) for pr in providers]
        ok = tk is not None and tk.get("status") == "ok" and "gbps" in tk
        row += [fmt(tk["gbps"], ".0f") if ok else "-", fmt(tk["pct_ceiling"], ".1f") if ok else "-",
                (f"{tk['target_ratio']:.2f}" + ("" if tk["target_pass"] else " MISS")) if ok else "-",
                fmt_us((tk.get("eager") or {}).get("median_us")) if tk and tk.get("status") == "ok" else "-"]
        if "inductor" in providers:
            a, b = _time(by.get("inductor")), _time(tk)
            row.append(f"{a / b:.2f}x" if a and b else "-")
        if copy_cols:
            row += [fmt_us(_copy_us(by)), fmt(tk.get("pct_of_copy_same_bytes"), ".1f") if tk else "-"]
        rows.append(row)
    return text_table(head, rows)


def _startup_text(st: dict | None) -> str:
    if not st:
        return ""
    parts = []
    for kind in ("cold", "warm"):
        r = st.get(kind) or {}
        if "error" in r:
            parts.append(f"{kind}: {r['error'][:200]}")
        elif r:
            parts.append(f"{kind} {r['to_first_result_s']:.2f} s (import {r['import_s']:.2f}, CUDA init "
                         f"{r['cuda_init_s']:.2f}, first call {r['first_call_s']:.2f})"
                         + ("" if r.get("correct") else " WRONG RESULT"))
    return "; ".join(parts)


def ceilings_text(c: dict | None) -> str:
    if not c:
        return "ceilings: none (no GPU)"
    return (f"ceilings on {c.get('gpu')} (driver {c.get('driver')}): copy {c['copy_gbps'] / 1000:.2f} TB/s "
            f"(Triton copy kernel, read+write), bf16 matmul {c['matmul_tflops']:.0f} TFLOP/s, floor "
            f"{c['floor_us']:.2f} us (16-byte copy, cold), empty launch {c.get('empty_us', float('nan')):.2f} us; "
            f"target: time <= {TARGET_FACTOR} x (floor + bytes / copy) [{c.get('source')}]")


def format_results(results: dict) -> str:
    """The full terminal report: ceilings, one table per op config, compiles, host overhead, startup, problems."""
    out = [ceilings_text(results.get("ceilings"))]
    groups = group_points(results["points"])
    for op in results["ops"]:
        head = f"\n== {op['label']} {op.get('dtype', '')}"
        if op.get("error"):
            out.append(f"{head}: {op['error']}")
            continue
        provs = [n for n, d in op.get("providers", {}).items() if not str(d).startswith("unavailable")]
        for (label, dtype, config), series in groups.items():
            if label != op["label"] or dtype != op["dtype"]:
                continue
            out.append(f"{head} [{config}]   (us: CUDA graph, cold L2; t/target = time / {TARGET_FACTOR}x(floor + "
                       f"bytes/copy))")
            out.append(point_table(series, provs))
            if has_copy_ref(series):
                out.append("  copy us: a Triton copy of the point's bytes, timed the same way; "
                           "%copy@size = copy us / tritonkit us (evidence, not a target)")
            copy_errs = {p["copy_same_bytes_error"] for s in series.values() for p in s.values()
                         if p.get("copy_same_bytes_error")}
            for why in sorted(copy_errs)[:3]:
                out.append(f"  copy reference failed: {why[:200]}")
            nograph = {p["provider"]: p["graph_error"] for s in series.values() for p in s.values()
                       if p["status"] == "ok" and p.get("graph_error")}
            for prov, why in nograph.items():
                out.append(f"  * {prov}: eager time, {why[:200]}")
            bad = [p for s in series.values() for p in s.values() if p["status"] in ("wrong", "error")]
            for p in bad:
                out.append(f"  {p['provider']} at num_tokens={p['num_tokens']}: {p['status']}: {p['detail'][:300]}")
        for n, d in op.get("providers", {}).items():
            if str(d).startswith("unavailable"):
                out.append(f"  {n}: {d}")
        for prov, ks in op.get("compiles", {}).items():
            txt = ", ".join(f"{k.rsplit('.', 1)[-1]} x{v}" for k, v in ks.items()) or "none"
            out.append(f"  compiles over the sweep ({prov}): {txt}")
        for shape_id, hosts in op.get("host_overhead", {}).items():
            txt = ", ".join(f"{pr} {fmt_us(t['median_us'])} us" for pr, t in hosts.items())
            out.append(f"  host time per eager call [{short(shape_id, 40)}]: {txt}")
        if op.get("startup"):
            out.append(f"  startup [{dict_id(op['startup'].get('shape', {}))}]: {_startup_text(op['startup'])}")
    return "\n".join(out)


def dict_id(d: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in d.items())


def summary_rows(results: dict, tokens: int = SUMMARY_TOKENS) -> list[dict]:
    """Per op config: tritonkit's % of ceiling at ``tokens`` (and Inductor's, vLLM's), the worst target ratio over
    the sweep, compiles per kernel, startup, host overhead."""
    rows = []
    groups = group_points(results["points"])
    ops = {(o["label"], o.get("dtype")): o for o in results["ops"]}
    for (label, dtype, config), series in groups.items():
        op = ops.get((label, dtype), {})
        tk = [s["tritonkit"] for s in series.values() if s.get("tritonkit", {}).get("status") == "ok"
              and "target_ratio" in s["tritonkit"]]
        at = series.get(tokens, {})

        def pct(prov):
            p = at.get(prov)
            return p["pct_ceiling"] if p and p.get("status") == "ok" and "pct_ceiling" in p else None
        worst = max(tk, key=lambda p: p["target_ratio"]) if tk else None
        copied = [p for p in tk if "copy_same_bytes_us" in p and "target_us" in p]
        problems = [f"{p['provider']}@{p['num_tokens']}:{p['status']}" for s in series.values()
                    for p in s.values() if p["status"] in ("wrong", "error")]
        tk_total = sum(1 for s in series.values() if "tritonkit" in s)
        compiles = op.get("compiles", {}).get("tritonkit", {})
        st = op.get("startup") or {}
        # host time is measured at each config's smallest point, keyed by that point's shape
        smallest = next(iter(series[min(series)].values()))
        hosts = op.get("host_overhead", {}).get(dict_id(smallest["shape"]), {})
        rows.append({
            "label": label, "dtype": dtype, "config": config,
            "pct_tk": pct("tritonkit"), "pct_inductor": pct("inductor"), "pct_vllm": pct("vllm"),
            "worst_ratio": worst["target_ratio"] if worst else None,
            "worst_at": worst["num_tokens"] if worst else None,
            "passed": sum(1 for p in tk if p["target_pass"]), "points": tk_total,
            # the same bound applied to the size-matched copy of each point: where a copy of the op's own bytes
            # misses it, no op moving those bytes meets it on this card (None when the run had no copy column)
            "copy_passed": (sum(1 for p in copied if p["copy_same_bytes_us"] <= p["target_us"])
                            if copied else None),
            "copy_points": len(copied),
            "max_compiles": max(compiles.values()) if compiles else None,
            "compiles": compiles,
            "startup_cold_s": (st.get("cold") or {}).get("to_first_result_s"),
            "startup_warm_s": (st.get("warm") or {}).get("to_first_result_s"),
            "host_tk_us": (hosts.get("tritonkit") or {}).get("median_us"),
            "host_inductor_us": (hosts.get("inductor") or {}).get("median_us"),
            "problems": problems,
        })
    return rows


def format_summary(results: dict, tokens: int = SUMMARY_TOKENS) -> str:
    rows = summary_rows(results, tokens)
    head = ["op", "config", f"%ceil@{tokens // 1024}K", "inductor", "vllm", "worst t/target", "pass", "copy pass",
            "compiles/kernel", "startup cold/warm s", "host us tk/ind"]
    body = []
    for r in rows:
        body.append([
            r["label"], short(r["config"]),
            fmt(r["pct_tk"], ".1f"), fmt(r["pct_inductor"], ".1f"), fmt(r["pct_vllm"], ".1f"),
            f"{r['worst_ratio']:.2f} @{r['worst_at']}" if r["worst_ratio"] is not None else "-",
            f"{r['passed']}/{r['points']}",
            f"{r['copy_passed']}/{r['copy_points']}" if r["copy_passed"] is not None else "-",
            ",".join(str(v) for v in r["compiles"].values()) or "-",
            f"{fmt(r['startup_cold_s'], '.2f')}/{fmt(r['startup_warm_s'], '.2f')}",
            f"{fmt_us(r['host_tk_us'])}/{fmt_us(r['host_inductor_us'])}",
        ])
    out = [f"summary ({TARGET_FACTOR}x target: t/target <= 1 passes; copy pass: the size-matched copy against the "
           f"same target; % of copy ceiling at {tokens} tokens)",
           text_table(head, body, [False, False] + [True] * (len(head) - 2))]
    for r in rows:
        if r["problems"]:
            out.append(f"  {r['label']} [{r['config']}]: " + ", ".join(r["problems"][:12]))
    for o in results["ops"]:
        if o.get("error"):
            out.append(f"  {o['label']} {o.get('dtype', '')}: {o['error'][:300]}")
    return "\n".join(out)


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
            self._bar = self._stack.enter_context(Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                transient=True))
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
