import pytest

# matplotlib comes with the [bench] extra, not with [test] (the CPU install)
matplotlib = pytest.importorskip("matplotlib", reason="the plots need matplotlib: pip install -e '.[bench]'")
matplotlib.use("Agg")
import matplotlib.image  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from test_bench_report import CEIL, _results  # noqa: E402

from tritonkit.bench.plot import build_figure, write_plots  # noqa: E402


def test_plot_writes_a_valid_png_per_op(tmp_path):
    paths = write_plots(_results(), tmp_path)
    assert [p.name for p in paths] == ["rms_norm.png"]
    data = paths[0].read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    img = matplotlib.image.imread(paths[0])
    assert img.shape[0] > 200 and img.shape[1] > 300


def test_figure_has_a_line_per_provider_the_ceiling_and_the_target():
    res = _results(wrong_at=256)
    fig = build_figure(res, "rms_norm")
    (ax,) = [a for a in fig.axes if a.get_visible()]
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    assert ax.get_xscale() == "log"
    tk = lines["tritonkit"]
    assert list(tk.get_xdata()) == [1, 256, 16384]
    # TB/s: 4 * 16384 * 4096 * 2 + 8192 bytes in 140 us
    assert tk.get_ydata()[-1] == pytest.approx((4 * 16384 * 4096 * 2 + 8192) / 140e-6 / 1e12)
    # the wrong inductor point is left out of its line
    assert list(lines["inductor"].get_xdata()) == [1, 16384]
    ceiling = [ln for name, ln in lines.items() if name.startswith("ceiling")][0]
    assert list(ceiling.get_ydata()) == pytest.approx([CEIL.copy_gbps / 1000] * 2)
    target = [ln for name, ln in lines.items() if name.startswith("target")][0]
    # the target demands less than the ceiling everywhere and ~80% of it at prefill sizes
    assert all(y < CEIL.copy_gbps / 1000 for y in target.get_ydata())
    assert target.get_ydata()[-1] == pytest.approx(0.8 * CEIL.copy_gbps / 1000, rel=0.02)
    plt.close(fig)


def test_no_figure_for_an_op_without_points():
    assert build_figure(_results(), "silu_and_mul") is None
