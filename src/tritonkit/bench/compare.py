"""``tritonkit bench --compare A.json B.json``: per-point time ratios between two runs.

Points match on (label, dtype, config, num_tokens, provider); the time compared is the CUDA-graph median (the
eager median where a run has no graph timing). ``B/A`` below 1 means B is faster. Per series the geometric mean.
"""

from __future__ import annotations

from .report import fmt_us, read_json, text_table
from .stats import geomean


def _key(p: dict) -> tuple:
    return (p["label"], p["dtype"], p["config"], p["num_tokens"], p["provider"])


def _time(p: dict) -> float | None:
    if p.get("status") != "ok":
        return None
    g = p.get("graph") or p.get("eager")
    return g["median_us"] if g else None


def compare_results(a: dict, b: dict) -> dict:
    """``{"rows": [{label, dtype, config, provider, num_tokens, a_us, b_us, ratio}], "only_a": n, "only_b": n,
    "series": {(label, dtype, config, provider): geomean ratio}}``; rows in A's order."""
    pa = {_key(p): p for p in a["points"]}
    pb = {_key(p): p for p in b["points"]}
    rows = []
    for k, p in pa.items():
        if k not in pb:
            continue
        ta, tb = _time(p), _time(pb[k])
        rows.append({"label": k[0], "dtype": k[1], "config": k[2], "num_tokens": k[3], "provider": k[4],
                     "a_us": ta, "b_us": tb, "ratio": tb / ta if ta and tb else None})
    series: dict[tuple, list[float]] = {}
    for r in rows:
        series.setdefault((r["label"], r["dtype"], r["config"], r["provider"]), [])
        if r["ratio"] is not None:
            series[(r["label"], r["dtype"], r["config"], r["provider"])].append(r["ratio"])
    return {"rows": rows, "only_a": len(set(pa) - set(pb)), "only_b": len(set(pb) - set(pa)),
            "series": {k: geomean(v) for k, v in series.items()}}


def format_compare(a: dict, b: dict, name_a: str = "A", name_b: str = "B") -> str:
    res = compare_results(a, b)
    out = []
    ga, gb = a.get("meta", {}).get("gpu"), b.get("meta", {}).get("gpu")
    out.append(f"A = {name_a} ({ga}, {a.get('meta', {}).get('git_sha')})")
    out.append(f"B = {name_b} ({gb}, {b.get('meta', {}).get('git_sha')})")
    if ga != gb:
        out.append(f"note: different GPUs ({ga} vs {gb}): ratios compare cards as well as code")
    by_series: dict[tuple, list[dict]] = {}
    for r in res["rows"]:
        by_series.setdefault((r["label"], r["dtype"], r["config"], r["provider"]), []).append(r)
    for k, rows in by_series.items():
        out.append(f"\n== {k[0]} {k[1]} [{k[2]}] {k[3]}")
        body = [[str(r["num_tokens"]), fmt_us(r["a_us"]), fmt_us(r["b_us"]),
                 f"{r['ratio']:.3f}" if r["ratio"] is not None else "-"] for r in rows]
        gm = res["series"][k]
        body.append(["geomean", "", "", f"{gm:.3f}" if gm == gm else "-"])
        out.append(text_table(["num_tokens", "A us", "B us", "B/A"], body))
    if not res["rows"]:
        out.append("no points in common")
    if res["only_a"] or res["only_b"]:
        out.append(f"\n{res['only_a']} points only in A, {res['only_b']} only in B")
    return "\n".join(out)


def main_compare(path_a: str, path_b: str) -> int:
    try:
        a, b = read_json(path_a), read_json(path_b)
    except (OSError, ValueError) as e:
        import sys
        print(f"tritonkit bench --compare: {e}", file=sys.stderr)
        return 2
    print(format_compare(a, b, path_a, path_b))
    return 0
