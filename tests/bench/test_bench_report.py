import json
import math

import pytest

from tritonkit.bench import report
from tritonkit.bench.compare import compare_results, format_compare
from tritonkit.bench.records import Results, read_json, write_json
from tritonkit.bench.roofline import Ceilings, point_metrics

CEIL = Ceilings(copy_gbps=4000.0, matmul_tflops=800.0, floor_us=2.0, empty_us=1.1, gpu="Fake GPU", driver="1.0")
TOKENS = (1, 256, 16384)


def _point(provider, t, us, status="ok", label="rms_norm", config="hidden=4096,residual=1"):
    nbytes = 4 * t * 4096 * 2 + 8192
    p = {
        "op": "rms_norm",
        "label": label,
        "config": config,
        "model": "llama3-8b",
        "dtype": "bfloat16",
        "num_tokens": t,
        "shape": {"num_tokens": t, "hidden": 4096, "residual": 1},
        "provider": provider,
        "status": status,
        "detail": "",
        "bytes": nbytes,
        "flops": 7 * t * 4096,
        "sets": 4,
        "l2_flush": False,
    }
    if status == "ok":
        p["graph"] = {"median_us": us, "min_us": us * 0.9, "max_us": us * 1.2, "repeats": 10}
        p["eager"] = {"median_us": us + 10, "min_us": us + 9, "max_us": us + 12, "repeats": 10}
        p["timed_by"] = "graph"
        p.update(point_metrics(nbytes, p["flops"], us * 1e-6, CEIL).to_dict())
    else:
        p["detail"] = "y: 3/4096 elements mismatch"
        p["check"] = {"error": math.inf, "rel_l2": 0.5, "detail": "y: ..."}
    return p


def _results(scale=1.0, wrong_at=None):
    # tritonkit at 16384: 536879104 bytes in 140 us -> 3835 GB/s (95.9%); at 1: 3.3 us vs a 2.51 us bound -> miss
    tk = {1: 3.3, 256: 4.4, 16384: 140.0}
    ind = {1: 6.0, 256: 7.0, 16384: 165.0}
    points = []
    for t in TOKENS:
        points.append(_point("tritonkit", t, tk[t] * scale))
        points.append(_point("inductor", t, ind[t], status="wrong" if t == wrong_at else "ok"))
    ops = [
        {
            "op": "rms_norm",
            "label": "rms_norm",
            "overrides": {},
            "dtype": "bfloat16",
            "models": ["llama3-8b"],
            "configs": ["hidden=4096,residual=1"],
            "providers": {
                "tritonkit": "tritonkit.ops.rms_norm",
                "inductor": "torch.compile",
                "vllm": "unavailable: vLLM has no Triton kernel for rms_norm",
            },
            "compiles": {"tritonkit": {"tritonkit.ops.rms_norm.kernel._rms_norm_fwd_kernel": 1}},
            "host_overhead": {
                "num_tokens=1,hidden=4096,residual=1": {
                    "tritonkit": {"median_us": 7.5, "min_us": 7, "max_us": 8, "repeats": 3},
                    "inductor": {"median_us": 21.0, "min_us": 20, "max_us": 22, "repeats": 3},
                }
            },
            "startup": {
                "shape": {"num_tokens": 16},
                "dtype": "bfloat16",
                "cold": {
                    "import_s": 2.0,
                    "cuda_init_s": 0.5,
                    "first_call_s": 1.25,
                    "second_call_s": 1e-4,
                    "to_first_result_s": 3.75,
                    "correct": True,
                    "check": "ok",
                    "process_s": 4.0,
                },
                "warm": {
                    "import_s": 2.0,
                    "cuda_init_s": 0.5,
                    "first_call_s": 0.05,
                    "second_call_s": 1e-4,
                    "to_first_result_s": 2.55,
                    "correct": True,
                    "check": "ok",
                    "process_s": 2.8,
                },
            },
        }
    ]
    meta = {"gpu": "Fake GPU", "git_sha": "abc", "command": "tritonkit bench rms_norm"}
    return Results.from_dict({"schema": 1, "meta": meta, "ceilings": CEIL.to_dict(), "ops": ops, "points": points})


def test_json_round_trip_keeps_values_and_infinities(tmp_path):
    res = _results(wrong_at=256)
    path = write_json(tmp_path / "sub" / "bench.json", res)
    text = path.read_text()
    json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c} in the JSON"))  # standard JSON only
    assert "Infinity" not in text
    back = read_json(path)
    assert back == res
    bad = [p for p in back.points if p.status == "wrong"][0]
    assert bad.check.error == math.inf and not bad.check.passed


def test_read_json_rejects_other_files(tmp_path):
    (tmp_path / "x.json").write_text(json.dumps({"results": []}))
    with pytest.raises(ValueError, match="not a tritonkit bench result"):
        read_json(tmp_path / "x.json")


def test_summary_rows_pick_16k_percentage_worst_ratio_and_extras():
    (row,) = report.summary_rows(_results(wrong_at=256))
    assert row.pct["tritonkit"] == pytest.approx(100 * (4 * 16384 * 4096 * 2 + 8192) / 140e-6 / 1e9 / 4000)
    assert row.pct["inductor"] == pytest.approx(100 * (4 * 16384 * 4096 * 2 + 8192) / 165e-6 / 1e9 / 4000)
    # worst ratio at num_tokens=1 (40960 bytes): 3.3 us / (1.25 * (2 us + 40960 B / 4000 GB/s))
    assert row.worst_at == 1
    assert row.worst_ratio == pytest.approx(3.3 / (1.25 * (2 + 40960 / 4000e3)))
    assert (row.passed, row.points) == (2, 3)
    assert (row.copy_passed, row.copy_points) == (None, 0)  # no copy column in this run
    assert row.compiles == {"tritonkit.ops.rms_norm.kernel._rms_norm_fwd_kernel": 1}
    assert (row.startup_cold_s, row.startup_warm_s) == (3.75, 2.55)
    assert (row.host_us["tritonkit"], row.host_us["inductor"]) == (7.5, 21.0)
    assert row.problems == ["inductor@256:wrong"]


def test_summary_of_a_series_that_stops_before_16k_uses_its_largest_point():
    res = _results()
    res.points = [p for p in res.points if p.num_tokens != 16384]
    (row,) = report.summary_rows(res)
    assert row.pct["tritonkit"] == pytest.approx(100 * (4 * 256 * 4096 * 2 + 8192) / 4.4e-6 / 1e9 / 4000)


def test_terminal_report_shows_misses_wrong_providers_and_extras():
    res = _results(wrong_at=256)
    text = report.format_results(res)
    lines = {ln.split()[0]: ln for ln in text.splitlines() if ln and ln.split()[0] in ("1", "256", "16384")}
    assert "MISS" in lines["1"] and "MISS" not in lines["16384"]
    assert "WRONG" in lines["256"]
    # peers' time over tritonkit's: inductor 165 / 140 us at 16384
    assert "1.18x" in lines["16384"]
    assert "inductor at num_tokens=256: wrong" in text
    assert "vllm: unavailable" in text and "_rms_norm_fwd_kernel x1" in text
    assert "cold 3.75 s" in text and "warm 2.55 s" in text
    summary = report.format_summary(res)
    assert "1.31 @1" in summary
    assert "2/3" in summary and "3.75/2.55" in summary


def test_skipped_points_are_listed_once_per_provider_and_reason():
    res = _results()
    for p in res.points:
        if p.provider == "inductor" and p.num_tokens >= 256:
            p.status, p.metrics, p.graph, p.eager = "skipped", None, None, None
            p.detail = (
                "over the point's time budget: its timing would take ~90 s (44 calls over 2 input sets, one "
                "2045.45 ms), budget 20 s"
                if p.num_tokens == 256
                else "over the point's time budget at num_tokens=256 already (...)"
            )
    text = report.format_results(res)
    (line,) = [ln for ln in text.splitlines() if "skipped at" in ln]
    assert line.strip().startswith("inductor skipped at num_tokens 256, 16384: over the point's time budget: its")


def test_compare_ratios_per_point_and_geomean():
    a, b = _results(), _results(scale=0.5)
    b.points = [p for p in b.points if p.num_tokens != 256]  # B lacks one point
    res = compare_results(a, b)
    tk = [r for r in res.rows if r.provider == "tritonkit"]
    assert [r.num_tokens for r in tk] == [1, 16384]
    assert all(r.ratio == pytest.approx(0.5) for r in tk)
    assert res.only_a == 2 and res.only_b == 0
    assert res.series[("rms_norm", "bfloat16", "hidden=4096,residual=1", "tritonkit")] == pytest.approx(0.5)
    assert res.series[("rms_norm", "bfloat16", "hidden=4096,residual=1", "inductor")] == pytest.approx(1.0)
    assert "0.500" in format_compare(a, b)


def test_compare_skips_points_that_were_not_timed():
    a, b = _results(), _results(wrong_at=16384)
    row = [r for r in compare_results(a, b).rows if r.provider == "inductor" and r.num_tokens == 16384][0]
    assert row.ratio is None and row.b_us is None


def test_cli_compare_runs_without_a_gpu(tmp_path, capsys):
    from tritonkit.cli import main

    a, b = tmp_path / "a.json", tmp_path / "b.json"
    write_json(a, _results())
    write_json(b, _results(scale=2.0))
    assert main(["bench", "--compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "2.000" in out and "geomean" in out
    assert main(["bench", "--compare", str(a), str(tmp_path / "no.json")]) == 2
    assert "no.json" in capsys.readouterr().err


def test_text_table_aligns_columns():
    out = report.text_table(["a", "bb"], [["x", "1"], ["yyy", "22"]]).splitlines()
    assert out[0] == "a    bb" and out[2] == "x     1" and out[3] == "yyy  22"


def test_summary_rows_take_each_configs_own_host_time():
    import dataclasses

    res = _results()
    other = [
        dataclasses.replace(p, config="hidden=4096,residual=0", shape=dict(p.shape, residual=0)) for p in res.points
    ]
    res.points += other
    res.ops[0].host_overhead["num_tokens=1,hidden=4096,residual=0"] = {
        "tritonkit": {"median_us": 5.0, "min_us": 5, "max_us": 5, "repeats": 3}
    }
    rows = {r.config: r for r in report.summary_rows(res)}
    assert rows["hidden=4096,residual=1"].host_us["tritonkit"] == 7.5
    assert rows["hidden=4096,residual=0"].host_us["tritonkit"] == 5.0


def test_summary_counts_where_the_size_matched_copy_meets_the_same_target():
    from tritonkit.bench.records import CopyRef

    res = _results()
    for p in res.points:
        if p.provider == "tritonkit":
            # the copy of the point's bytes: inside the bound at 1 and 16384 tokens, past it at 256
            p.copy = CopyRef(p.metrics.target_us * (1.02 if p.num_tokens == 256 else 0.9), 1.0)
    (row,) = report.summary_rows(res)
    assert (row.copy_passed, row.copy_points) == (2, 3)
    text = report.format_summary(res)
    assert "copy pass" in text and " 2/3 " in text


def test_recorded_runs_append_to_one_long_table(tmp_path):
    import csv

    from tritonkit.bench.records import TABLE_COLUMNS, append_table

    table = tmp_path / "h200" / "bench.csv"
    res = _results(wrong_at=256)
    assert append_table(table, res) == len(res.points)
    assert append_table(table, _results(scale=0.5)) == len(res.points)
    with table.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == TABLE_COLUMNS and len(rows) == 2 * len(res.points)
    first = rows[0]
    assert (first["gpu"], first["git_sha"], first["op"], first["provider"], first["num_tokens"]) == (
        "Fake GPU",
        "abc",
        "rms_norm",
        "tritonkit",
        "1",
    )
    assert float(first["us"]) == pytest.approx(3.3) and first["bound"] == "memory" and first["detail"] == ""
    wrong = next(r for r in rows if r["status"] == "wrong")
    assert wrong["us"] == "" and wrong["detail"].startswith("y: 3/4096")
    # the second run, twice as fast, sits below the first in the same table
    assert float(rows[len(res.points)]["us"]) == pytest.approx(3.3 * 0.5)
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="other columns"):
        append_table(other, res)


def test_a_finished_run_is_recorded_without_a_gpu(tmp_path, capsys):
    from tritonkit.cli import main

    run_dir, rec = tmp_path / "out", tmp_path / "results" / "h200"
    write_json(run_dir / "bench.json", _results())
    (run_dir / "rms_norm.png").write_bytes(b"\x89PNG fake")
    assert main(["bench", "--record", str(rec), "--from", str(run_dir / "bench.json")]) == 0
    assert "recorded 6 rows" in capsys.readouterr().out
    assert read_json(rec / "latest" / "rms_norm.json") == _results()
    assert (rec / "latest" / "rms_norm.png").read_bytes() == b"\x89PNG fake"
    # a second run appends to the table and replaces the op's latest files
    write_json(run_dir / "bench.json", _results(scale=0.5))
    (run_dir / "rms_norm.png").unlink()
    assert main(["bench", "--record", str(rec), "--from", str(run_dir / "bench.json")]) == 0
    assert len((rec / "bench.csv").read_text().splitlines()) == 1 + 12
    assert read_json(rec / "latest" / "rms_norm.json") == _results(scale=0.5)
    assert not (rec / "latest" / "rms_norm.png").exists()  # no stale plot beside new numbers
    capsys.readouterr()
    assert main(["bench", "--from", str(run_dir / "bench.json")]) == 2
    assert "--from needs --record" in capsys.readouterr().err
    assert main(["bench", "--record", str(rec), "--from", str(tmp_path / "none.json")]) == 2


def test_every_line_of_the_published_reports_fits_120_columns():
    # the recorded runs are the widest the bench makes (every provider, a base, the copy reference)
    import json
    import pathlib

    from tritonkit.bench import report
    from tritonkit.bench.compare import format_compare
    from tritonkit.bench.records import Results

    latest = pathlib.Path(__file__).parents[2] / "benchmarks" / "results" / "h200" / "latest"
    runs = {p.stem: Results.from_dict(json.loads(p.read_text())) for p in sorted(latest.glob("*.json"))}
    assert runs
    for name, r in runs.items():
        for text in (report.format_results(r), report.format_summary(r), format_compare(r, r, "a.json", "b.json")):
            wide = [ln for ln in text.splitlines() if len(ln) > report.WIDTH]
            assert not wide, (name, wide[:2])


def test_a_wide_table_repeats_its_key_columns_in_each_part():
    from tritonkit.bench.report import text_table

    head = ["num_tokens"] + [f"column {i:02d}" for i in range(20)]
    out = text_table(head, [["1"] + ["x"] * 20, ["16"] + ["y"] * 20], keep=1, width=60)
    parts = out.split("\n\n")
    assert len(parts) > 1 and all(p.startswith("num_tokens") for p in parts)
    assert all(len(ln) <= 60 for ln in out.splitlines())
    # every column appears once, in order
    cols = [c for p in parts for c in p.splitlines()[0].split("  ") if c.strip().startswith("column")]
    assert [c.strip() for c in cols] == head[1:]
