"""``tritonkit bench --compare A.json B.json``: per-point time ratios between two runs.

Points match on (label, dtype, config, num_tokens, provider); the time compared is the CUDA-graph median (the
eager median where a run has no graph timing). ``B/A`` below 1 means B is faster. Per series the geometric mean.
"""

from __future__ import annotations

import dataclasses

from .records import PointResult, Results, read_json
from .report import fit, fmt_us, text_table
from .stats import geomean


def _key(p: PointResult) -> tuple:
    return (p.label, p.dtype, p.config, p.num_tokens, p.provider)


@dataclasses.dataclass
class Ratio:
    label: str
    dtype: str
    config: str
    num_tokens: int
    provider: str
    a_us: float | None
    b_us: float | None

    @property
    def ratio(self) -> float | None:
        return self.b_us / self.a_us if self.a_us and self.b_us else None

    @property
    def series(self) -> tuple:
        return (self.label, self.dtype, self.config, self.provider)


@dataclasses.dataclass
class Comparison:
    rows: list[Ratio]  # in A's order
    only_a: int
    only_b: int
    series: dict[tuple, float]  # (label, dtype, config, provider) -> geomean of B/A


def compare_results(a: Results, b: Results) -> Comparison:
    pa = {_key(p): p for p in a.points}
    pb = {_key(p): p for p in b.points}
    rows = [Ratio(*k, p.time_us, pb[k].time_us) for k, p in pa.items() if k in pb]
    series: dict[tuple, list[float]] = {}
    for r in rows:
        series.setdefault(r.series, [])
        if r.ratio is not None:
            series[r.series].append(r.ratio)
    return Comparison(rows, len(set(pa) - set(pb)), len(set(pb) - set(pa)), {k: geomean(v) for k, v in series.items()})


def format_compare(a: Results, b: Results, name_a: str = "A", name_b: str = "B") -> str:
    res = compare_results(a, b)
    out = []
    ga, gb = a.meta.get("gpu"), b.meta.get("gpu")
    out.append(f"A = {name_a} ({ga}, {a.meta.get('git_sha')})")
    out.append(f"B = {name_b} ({gb}, {b.meta.get('git_sha')})")
    if ga != gb:
        out.append(f"note: different GPUs ({ga} vs {gb}): ratios compare cards as well as code")
    by_series: dict[tuple, list[Ratio]] = {}
    for r in res.rows:
        by_series.setdefault(r.series, []).append(r)
    for k, rows in by_series.items():
        out.append(f"\n== {k[0]} {k[1]} [{k[2]}] {k[3]}")
        body = [
            [str(r.num_tokens), fmt_us(r.a_us), fmt_us(r.b_us), f"{r.ratio:.3f}" if r.ratio is not None else "-"]
            for r in rows
        ]
        gm = res.series[k]
        body.append(["geomean", "", "", f"{gm:.3f}" if gm == gm else "-"])
        out.append(text_table(["num_tokens", "A us", "B us", "B/A"], body))
    if not res.rows:
        out.append("no points in common")
    if res.only_a or res.only_b:
        out.append(f"\n{res.only_a} points only in A, {res.only_b} only in B")
    return fit("\n".join(out))


def main_compare(path_a: str, path_b: str) -> int:
    try:
        a, b = read_json(path_a), read_json(path_b)
    except (OSError, ValueError) as e:
        import sys

        print(f"tritonkit bench --compare: {e}", file=sys.stderr)
        return 2
    print(format_compare(a, b, path_a, path_b))
    return 0
