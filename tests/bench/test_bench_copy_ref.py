"""The size-matched copy reference: bytes -> vectors, the record fields, the table columns, compare and the plot,
with and without the fields (older results and ``--no-copy-ref`` runs have none)."""

import copy

import pytest
import torch
from conftest import DEVICE, ON_GPU
from test_bench_report import _results

from tritonkit.bench import ceilings as C
from tritonkit.bench import report
from tritonkit.bench import runner as R
from tritonkit.bench.ceilings import copy_vectors
from tritonkit.bench.compare import compare_results, format_compare
from tritonkit.bench.plot import build_figure
from tritonkit.bench.records import CopyRef, PointResult, read_json, write_json
from tritonkit.bench.roofline import pct_of_copy

#: copy time per num_tokens of _results' points (tritonkit there: 3.3, 4.4, 140 us)
COPY_US = {1: 2.2, 256: 3.3, 16384: 133.0}


def _with_copy(res, missing_at=()):
    """``res`` as a run with the copy reference writes it (no copy fields at ``missing_at``)."""
    res = copy.deepcopy(res)
    for p in res.points:
        t = p.num_tokens
        if t in missing_at:
            continue
        moved = 32 * copy_vectors(p.bytes)
        p.copy = CopyRef(
            COPY_US[t],
            moved / (COPY_US[t] * 1e-6) / 1e9,
            {
                "bytes": moved,
                "sets": 4,
                "l2_flush": False,
                "config": "BLOCK=2048,num_warps=4",
                "timing": {"median_us": COPY_US[t], "min_us": COPY_US[t], "max_us": COPY_US[t], "repeats": 10},
            },
        )
        if p.ok:
            p.pct_of_copy = pct_of_copy(COPY_US[t], p.graph.median_us)
    return res


@pytest.mark.parametrize(
    "work_bytes, vectors",
    [
        (0, 1),
        (1, 1),
        (32, 1),
        (47, 1),
        (48, 2),
        (64, 2),
        (40960, 1280),
        (536879104, 16777472),
        # an odd op: 2N = 100 bytes -> N = 50 -> 3 vectors (48 bytes), the nearest whole number
        (100, 3),
    ],
)
def test_copy_moves_half_the_work_bytes_each_way_in_whole_vectors(work_bytes, vectors):
    assert copy_vectors(work_bytes) == vectors
    if work_bytes >= 32:
        # read + write within one vector of the op's bytes
        assert abs(2 * 16 * vectors - work_bytes) <= 16


def test_copy_vectors_rejects_negative_bytes():
    with pytest.raises(ValueError):
        copy_vectors(-1)


def test_record_fields_and_percentage():
    assert CopyRef(error="OutOfMemoryError: ...").fields() == {"copy_same_bytes_error": "OutOfMemoryError: ..."}
    info = {
        "bytes": 30000000,
        "sets": 2,
        "l2_flush": False,
        "config": "BLOCK=2048,num_warps=4",
        "timing": {"median_us": 10.0},
    }
    f = CopyRef(10.0, 3000.0, info).fields()
    assert f == {"copy_same_bytes_us": 10.0, "copy_same_bytes_gbps": 3000.0, "copy_same_bytes": info}
    assert CopyRef.from_fields(f) == CopyRef(10.0, 3000.0, info) and CopyRef.from_fields({}) is None
    assert pct_of_copy(10.0, 12.5) == pytest.approx(80.0)
    with pytest.raises(ValueError):
        pct_of_copy(10.0, 0.0)


def test_copy_kernel_copies_whole_vectors_and_nothing_past_them():
    n_vec, block = 5, 8
    src = torch.arange(24, dtype=torch.int32, device=DEVICE)
    dst = torch.full((24,), -1, dtype=torch.int32, device=DEVICE)
    C._copy_vec_kernel[(3,)](src, dst, n_vec, BLOCK=block)
    assert dst[:20].tolist() == list(range(20)) and dst[20:].tolist() == [-1] * 4


@pytest.mark.skipif(ON_GPU, reason="the CPU path of the runner")
def test_runner_times_the_copy_once_per_point_and_records_it_on_every_provider(monkeypatch):
    from test_bench_runner import CEIL, _cfg

    calls = []

    def fake(cfg, work_bytes, l2):
        calls.append(work_bytes)
        return CopyRef(
            1.0,
            100.0,
            {
                "bytes": 32 * copy_vectors(work_bytes),
                "sets": 2,
                "l2_flush": True,
                "config": "BLOCK=2048,num_warps=4",
                "timing": {"median_us": 1.0},
            },
        )

    monkeypatch.setattr(R, "size_matched_copy", fake)
    _, points = R.run(_cfg(), CEIL)
    assert [p.bytes for p in points[::2]] == calls  # one copy per point, with the op's work bytes
    for p in points:
        assert p.copy.us == 1.0 and p.copy.info["l2_flush"] is True
        assert p.pct_of_copy == pytest.approx(100 * 1.0 / p.eager.median_us)
    # the existing metrics are what they were without it
    assert all(p.metrics is not None for p in points)


@pytest.mark.skipif(ON_GPU, reason="the CPU path of the runner")
def test_no_copy_reference_without_a_gpu_or_when_turned_off():
    from test_bench_runner import _cfg

    assert R.size_matched_copy(_cfg(), 4096, 1 << 20) is None
    assert R.size_matched_copy(_cfg(copy_ref=False, device=torch.device("cuda")), 4096, 1 << 20) is None
    _, points = R.run(_cfg(num_tokens=[1]), R.Ceilings(4000.0, 800.0, 2.0))
    assert points and not any(k.startswith(("copy_same", "pct_of_copy")) for p in points for k in p.to_dict())


def _table_lines(res):
    # one table however wide (the terminal report splits one past 120 columns into parts)
    saved, report.WIDTH = report.WIDTH, 10_000
    try:
        text = report.format_results(res)
    finally:
        report.WIDTH = saved
    head = next(ln for ln in text.splitlines() if ln.startswith("num_tokens"))
    rows = {ln.split()[0]: ln.split() for ln in text.splitlines() if ln and ln.split()[0] in ("1", "256", "16384")}
    return text, head, rows


def test_table_adds_copy_columns_last_and_only_with_the_field():
    old_text, old_head, old_rows = _table_lines(_results(wrong_at=256))
    assert "copy us" not in old_text and "%copy" not in old_text
    text, head, rows = _table_lines(_with_copy(_results(wrong_at=256)))
    # the existing columns unchanged, the new ones after them
    assert head.startswith(old_head) and head[len(old_head) :].split() == ["copy", "us", "%copy@size"]
    for t, row in rows.items():
        assert row[: len(old_rows[t])] == old_rows[t]
    # tritonkit at 16384: 140 us against a 133 us copy -> 95.0%; at 1: 3.3 us against 2.2 us -> 66.7%
    assert rows["16384"][-2:] == ["133.0", "95.0"]
    assert rows["1"][-2:] == ["2.2", "66.7"]
    assert "%copy@size = copy us / tritonkit us" in text


def test_table_with_the_copy_missing_at_some_points():
    _, _, rows = _table_lines(_with_copy(_results(), missing_at=(256,)))
    assert rows["256"][-2:] == ["-", "-"] and rows["16384"][-2:] == ["133.0", "95.0"]


def test_table_reports_a_failed_copy_reference():
    res = _results()
    for p in res.points:
        p.copy = CopyRef(error="OutOfMemoryError: CUDA out of memory")
    text = report.format_results(res)
    assert "copy reference failed: OutOfMemoryError" in text and "%copy@size" not in text


def test_json_round_trip_keeps_the_copy_fields(tmp_path):
    res = _with_copy(_results())
    back = read_json(write_json(tmp_path / "bench.json", res))
    assert back == res
    tk = [p for p in back.points if p.provider == "tritonkit" and p.num_tokens == 16384][0]
    assert tk.pct_of_copy == pytest.approx(95.0)
    assert isinstance(tk, PointResult)


def test_compare_old_json_without_the_field_against_new(tmp_path):
    old, new = _results(), _with_copy(_results(scale=0.5))
    a, b = tmp_path / "old.json", tmp_path / "new.json"
    write_json(a, old)
    write_json(b, new)
    for x, y in ((a, b), (b, a)):
        res = compare_results(read_json(x), read_json(y))
        assert res.only_a == res.only_b == 0
        assert all(r.ratio is not None for r in res.rows)
    assert "0.500" in format_compare(old, new)
    from tritonkit.cli import main

    assert main(["bench", "--compare", str(a), str(b)]) == 0


def _lines(res):
    # matplotlib comes with the [bench] extra, not with [test] (the CPU install): only the plot tests need it
    plt = pytest.importorskip("matplotlib.pyplot", reason="the plots need matplotlib: pip install -e '.[bench]'")
    fig = build_figure(res, "rms_norm")
    (ax,) = [a for a in fig.axes if a.get_visible()]
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    plt.close(fig)
    return lines


def test_plot_draws_the_size_matched_copy_as_a_dashed_line():
    res = _with_copy(_results(), missing_at=(256,))
    lines = _lines(res)
    (name,) = [n for n in lines if n.startswith("copy kernel")]
    ln = lines[name]
    assert ln.get_linestyle() == "--"
    assert list(ln.get_xdata()) == [1, 16384]
    moved = 32 * copy_vectors(4 * 16384 * 4096 * 2 + 8192)
    assert ln.get_ydata()[-1] == pytest.approx(moved / 133e-6 / 1e12)  # TB/s
    # the ceiling and the target lines are still there
    assert any(n.startswith("ceiling") for n in lines) and any(n.startswith("target") for n in lines)


def test_plot_without_the_field_has_no_copy_line(tmp_path):
    lines = _lines(_results())
    assert not any(n.startswith("copy kernel") for n in lines)
    from tritonkit.bench.plot import write_plots

    (path,) = write_plots(_with_copy(_results()), tmp_path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_help_names_the_flag():
    from tritonkit.bench.cli import _parser

    text = _parser().format_help()
    assert "--no-copy-ref" in text and "%copy@size" in text
    assert _parser().parse_args(["rms_norm", "--no-copy-ref"]).no_copy_ref is True
    assert _parser().parse_args(["rms_norm"]).no_copy_ref is False
