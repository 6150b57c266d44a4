"""One PNG per op: throughput against num_tokens per provider (log x), the measured ceiling as a line.

Memory-bound series plot GB/s against the copy ceiling; compute-bound ones TFLOP/s against the matmul ceiling.
The dashed curve is the throughput the target demands at each point: bytes / (1.25 x (floor + bytes / ceiling)),
low at decode sizes, where launch latency dominates, and approaching 80% of the ceiling at prefill sizes.
The red dashed curve (memory-bound panels, where the run measured it) is a Triton copy kernel moving each point's
bytes, timed the same way: what a copy reaches at that size, ramp-up and tail included.
One panel per op config (label, dtype, shape without num_tokens).
"""

from __future__ import annotations

import math
import pathlib

from .records import PointResult, Results
from .report import group_points
from .roofline import TARGET_FACTOR

_STYLE = {
    "tritonkit": ("C0", "o"),
    "eager": ("C7", "s"),
    "inductor": ("C1", "^"),
    "inductor-dynamic": ("C4", "v"),
    "vllm": ("C2", "D"),
    "sdpa": ("C5", "P"),
}


def _metric(points: list[PointResult]) -> str:
    compute = sum(1 for p in points if p.metrics is not None and p.metrics.bound == "compute")
    return "tflops" if compute > len(points) / 2 else "gbps"


def _pyplot():
    import matplotlib

    # files only, on machines without a display
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def build_figure(results: Results, op: str):
    """The matplotlib Figure for ``op`` (every label and config of it in ``results``), or None if no points."""
    plt = _pyplot()

    groups = {
        k: v for k, v in group_points(results.points).items() if any(p.op == op for s in v.values() for p in s.values())
    }
    if not groups:
        return None
    ceil = results.ceilings or {}
    n = len(groups)
    cols = min(n, 2)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(7.5 * cols, 4.8 * rows), squeeze=False)
    for ax, ((label, dtype, config), series) in zip(axes.flat, groups.items()):
        pts = [p for s in series.values() for p in s.values()]
        metric = _metric(pts)
        scale = 1e-3 if metric == "gbps" else 1.0  # TB/s reads better than thousands of GB/s
        unit = "TB/s" if metric == "gbps" else "TFLOP/s"
        providers = list(dict.fromkeys(p.provider for p in pts))
        for prov in providers:
            xs, ys = [], []
            for t in sorted(series):
                p = series[t].get(prov)
                if p is not None and p.ok and p.metrics is not None:
                    xs.append(t)
                    ys.append(getattr(p.metrics, metric) * scale)
            if xs:
                color, marker = _STYLE.get(prov, (None, "x"))
                ax.plot(xs, ys, marker=marker, color=color, label=prov, linewidth=1.5, markersize=4)
        c = ceil.get("copy_gbps") if metric == "gbps" else ceil.get("matmul_tflops")
        if c:
            ax.axhline(
                c * scale,
                color="k",
                linestyle="-",
                linewidth=1,
                label=f"ceiling {c * scale:.2f} {unit}" + (" (copy)" if metric == "gbps" else " (matmul)"),
            )
            need = []
            for t in sorted(series):
                p = next((q for q in series[t].values() if q.metrics is not None), None)
                if p:
                    amount = p.bytes if metric == "gbps" else p.flops
                    # bytes/s -> TB/s, flop/s -> TFLOP/s
                    need.append((t, amount / (p.metrics.target_us * 1e-6) * 1e-12))
            if need:
                ax.plot(
                    [x for x, _ in need],
                    [y for _, y in need],
                    "k--",
                    linewidth=1,
                    label=f"target: {TARGET_FACTOR}x(floor + bytes/ceiling)",
                )
        if metric == "gbps":
            copy = []
            for t in sorted(series):
                gbps = next((q.copy.gbps for q in series[t].values() if q.copy is not None and q.copy.gbps), None)
                if gbps is not None:
                    copy.append((t, gbps * scale))
            if copy:
                ax.plot(
                    [x for x, _ in copy],
                    [y for _, y in copy],
                    color="C3",
                    linestyle="--",
                    linewidth=1.2,
                    label="copy kernel, same bytes (timed the same way)",
                )
        ax.set_xscale("log", base=2)
        ax.set_xlabel("num_tokens")
        ax.set_ylabel(unit)
        ax.set_ylim(bottom=0)
        ax.set_title(f"{label} {dtype}\n{config}", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    meta = results.meta
    fig.suptitle(
        f"{op} on {meta.get('gpu', '?')} (CUDA graph, cold L2) - torch {meta.get('torch', '?')}, "
        f"triton {meta.get('triton', '?')}, {str(meta.get('git_sha') or '?')[:10]}",
        fontsize=10,
    )
    fig.tight_layout()
    return fig


def write_plots(results: Results, out_dir: str | pathlib.Path) -> list[pathlib.Path]:
    """``<out_dir>/<op>.png`` for every op with points; returns the paths written."""
    plt = _pyplot()

    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for op in dict.fromkeys(p.op for p in results.points):
        fig = build_figure(results, op)
        if fig is None:
            continue
        path = out / f"{op}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
