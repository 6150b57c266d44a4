"""`tritonkit validate`'s report: written as the run goes, marked complete only at the end; bad dtypes in one line."""

import json
import signal
import subprocess
import sys

import pytest

from tritonkit.testing.cli import main

DYING = """
import os
import signal
import time

import torch
from tritonkit import OpSpec


def f(x):
    time.sleep(0.05)  # a case takes longer than a rewrite of the small report: each one is flushed
    if x.numel() == 3:
        # a kernel that corrupted the heap: the process is gone, no handler runs (os._exit is caught as a case's
        # attempt to end the run; a signal is not)
        os.kill(os.getpid(), signal.SIGKILL)
    return x * 2


SPEC = OpSpec("dies", f, lambda s, d, fill: {"x": fill((s["n"],), d)}, reference=lambda i, d: {"out": 2 * i["x"]},
              boundary=[{"n": 1}, {"n": 2}, {"n": 3}, {"n": 4}], dtypes=(torch.float32,), families=("randn",))
"""


def test_a_run_that_dies_leaves_a_report_marked_incomplete(tmp_path, monkeypatch):
    (tmp_path / "dying_specs.py").write_text(DYING)
    out = tmp_path / "v.json"
    p = subprocess.run(
        [sys.executable, "-m", "tritonkit", "validate", "dying_specs.py", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert p.returncode == -signal.SIGKILL
    d = json.loads(out.read_text())
    assert d["meta"]["complete"] is False and d["meta"]["cases"] == 4
    # the two that finished are in, the third never returned
    assert d["meta"]["cases_done"] == 2 and [r["shape"] for r in d["results"]] == ["n=1", "n=2"]
    assert [f.name for f in tmp_path.iterdir() if f.name.endswith(".tmp")] == []


def test_a_finished_run_is_marked_complete(tmp_path):
    out = tmp_path / "v.json"
    assert main(["silu_and_mul", "--dtype", "float32", "--families", "randn", "--json", str(out), "--quiet"]) == 0
    d = json.loads(out.read_text())
    assert d["meta"]["complete"] is True and d["meta"]["cases_done"] == d["meta"]["cases"] == len(d["results"])


@pytest.mark.parametrize("dtype", ["float64", "int32"])
def test_a_spec_dtype_without_a_tolerance_is_one_line(dtype, tmp_path, monkeypatch, capsys):
    (tmp_path / "dt_specs.py").write_text(
        "import torch\nfrom tritonkit import OpSpec\n\n\ndef f(x):\n    return x * 2\n\n\n"
        f"S = OpSpec('twice', f, lambda s, d, fill: {{'x': fill.randint(0, 5, (4,), d)}}, "
        f"reference=lambda i, d: {{'out': 2 * i['x']}}, boundary=[{{'n': 1}}], dtypes=(torch.{dtype},))\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    assert main(["dt_specs.py"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith(
        f"tritonkit validate: twice: dtype {dtype} has no tolerance (the table knows float32, "
        "float16, bfloat16); give one in OpSpec.tolerance"
    )
    sys.modules.pop("dt_specs", None)


def _result(op, shape, passed, error=0.5, detail="out: 3/9 elements mismatch, error 7; " + "x" * 300):
    from tritonkit.testing.validate import CaseResult

    return CaseResult(op, shape, "float16", "near_max", passed, error, 1e-3, 1e-5, "" if passed else detail)


LONG = (
    "num_seqs=4,num_kv_heads=8,head_dim=128,block_size=16,context_lens=(1, 15, 16, 17, 255, 4099, 4100, 65537),"
    "causal=1,sliding_window=0"
)


def test_the_table_fits_120_columns_and_collapses_passing_rows(capsys):
    from tritonkit.testing.report import print_table

    results = [
        _result("paged_attention", LONG, True, 0.25),
        _result("paged_attention", "num_seqs=1", True, 0.75),
        _result("paged_attention", LONG + ",x=1", False, float("inf")),
        _result("rms_norm", "n=1", True),
    ]
    print_table(results)
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= 120
    # the failure in full (its shape cut to fit, its detail wrapped), the passes as one line per op
    assert [ln.split()[0] for ln in lines if ln.endswith("FAIL")] == ["paged_attention"]
    assert not any(ln.endswith("pass") for ln in lines)
    assert (
        "paged_attention: 2 of 3 cases pass, worst error 0.75 (float16 near_max num_seqs=1); --all lists them" in lines
    )
    assert "rms_norm: 1 of 1 cases pass, worst error 0.5 (float16 near_max n=1); --all lists them" in lines
    assert sum(ln.startswith("    ") for ln in lines) >= 3  # the 340-character detail, wrapped
    # the failure's shape whole below its cut row, and no word cut with an ellipsis outside the shape column
    text = " ".join(ln.strip() for ln in lines)
    assert f"[shape {LONG},x=1]" in text.replace("\n", "")


def test_a_long_worst_case_is_wrapped_not_cut(capsys):
    from tritonkit.testing.report import print_table

    print_table([_result("paged_attention", LONG, True, 0.25)])
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= 120 and not any("\u2026" in ln for ln in lines)
    assert LONG in " ".join(ln.strip() for ln in lines) and lines[-1].endswith("--all lists them")


def test_every_row_lists_passes_within_120_columns(capsys):
    from tritonkit.testing.report import print_table

    print_table([_result("paged_attention", LONG, True), _result("rms_norm", "n=1", True)], every_row=True)
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= 120 and sum(ln.endswith("pass") for ln in lines) == 2
    assert not any("--all lists them" in ln for ln in lines)


def test_cli_collapses_passes_unless_all(capsys):
    assert main(["silu_and_mul", "--dtype", "float32", "--families", "randn"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert not any(ln.endswith("pass") for ln in out)
    assert any("silu_and_mul: " in ln and "cases pass" in ln for ln in out)
    assert main(["silu_and_mul", "--dtype", "float32", "--families", "randn", "--all"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert sum(ln.endswith("pass") for ln in out) >= 10 and max(map(len, out)) <= 120


NUMPY_NAN = """
import numpy as np
import torch
from tritonkit import OpSpec


def f(x):
    # what an interpreted kernel does on the hard families: numpy arithmetic on NaN, inf and huge values
    a = x.numpy().astype(np.float16) * np.float16(60000)
    np.divide(a, 0 * a)
    return x * 2


SPEC = OpSpec("npnan", f, lambda s, d, fill: {"x": fill((s["n"],), d)}, reference=lambda i, d: {"out": 2 * i["x"]},
              boundary=[{"n": 4}, {"n": 5}], dtypes=(torch.float32,), families=("randn", "near_max"))
"""


def test_numpy_warnings_stay_out_of_the_progress_and_are_summarized(tmp_path):
    (tmp_path / "npnan_specs.py").write_text(NUMPY_NAN)
    p = subprocess.run(
        [sys.executable, "-m", "tritonkit", "validate", "npnan_specs.py"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr
    assert "RuntimeWarning" not in p.stderr + p.stdout
    (line,) = [ln for ln in p.stderr.splitlines() if "floating-point warnings" in ln]
    assert line.startswith("tritonkit validate: ") and "npnan_specs.py:" in line


SLOW = """
import time
import torch
from tritonkit import OpSpec


def f(x):
    if x.numel() == 2:
        open("started", "w").close()
        time.sleep(120)
    return x * 2


SPEC = OpSpec("slow", f, lambda s, d, fill: {"x": fill((s["n"],), d)}, reference=lambda i, d: {"out": 2 * i["x"]},
              boundary=[{"n": 1}, {"n": 2}], dtypes=(torch.float32,), families=("randn",))
"""


def test_ctrl_c_is_one_line_and_the_report_says_interrupted(tmp_path):
    import os
    import signal
    import time

    (tmp_path / "slow_specs.py").write_text(SLOW)
    p = subprocess.Popen(
        [sys.executable, "-m", "tritonkit", "validate", "slow_specs.py", "--json", "v.json"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # an earlier test may leave SIGINT ignored, and a child inherits that
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 120
    while not (tmp_path / "started").exists() and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.1)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130 and err.strip().splitlines()[-1] == "tritonkit validate: interrupted"
    assert "Traceback" not in err
    d = json.loads((tmp_path / "v.json").read_text())
    assert d["meta"]["complete"] is False and d["meta"]["interrupted"] is True and d["meta"]["cases_done"] == 1
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]
