import dataclasses
import json
import subprocess
import sys

import pytest
import torch
from conftest import DEVICE

from tritonkit.ops.rms_norm.spec import SPEC
from tritonkit.spec import Shape
from tritonkit.testing import validate_case

SHAPE = Shape(num_tokens=5, hidden=64, residual=0)


def test_passing_case_reports_error_and_tolerance():
    r = validate_case(SPEC, SHAPE, torch.float16, "randn", device=DEVICE)
    assert r.passed and 0 <= r.error <= 1 and r.rtol == 1e-3 and "y" in r.outputs


def test_unwritten_output_is_caught_by_poisoning():
    # an op that writes only half its output: the NaN poison must make the case fail
    def half_call(inputs):
        y = SPEC.call(inputs)["y"]
        from tritonkit.ops import _alloc
        out = _alloc.empty(y.shape, y.dtype, y.device)
        out[: y.shape[0] // 2] = y[: y.shape[0] // 2]
        return {"y": out}

    bad = dataclasses.replace(SPEC, call=half_call)
    r = validate_case(bad, SHAPE, torch.float32, "randn", device=DEVICE)
    assert not r.passed and "mismatch" in r.detail


def test_wrong_result_fails_and_exception_is_reported():
    wrong = dataclasses.replace(SPEC, call=lambda i: {"y": SPEC.call(i)["y"] * 1.01})
    assert not validate_case(wrong, SHAPE, torch.float32, "randn", device=DEVICE).passed
    boom = dataclasses.replace(SPEC, call=lambda i: 1 / 0)
    r = validate_case(boom, SHAPE, torch.float32, "randn", device=DEVICE)
    assert not r.passed and "ZeroDivisionError" in r.detail


def test_cli_validate_json_and_exit_code(tmp_path):
    out = tmp_path / "v.json"
    p = subprocess.run([sys.executable, "-m", "tritonkit", "validate", "rms_norm", "--dtype", "float32",
                        "--families", "randn", "--json", str(out), "--quiet"], capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    data = json.loads(out.read_text())
    assert data["results"] and all(r["passed"] for r in data["results"])
    assert data["meta"]["interpreter"] is (not torch.cuda.is_available())
    assert " passed, 0 failed" in p.stdout


def test_cli_rejects_unknown_op_and_family():
    p = subprocess.run([sys.executable, "-m", "tritonkit", "validate", "nope"], capture_output=True, text=True)
    assert p.returncode == 2 and "unknown op 'nope'" in p.stderr
    p = subprocess.run([sys.executable, "-m", "tritonkit", "validate", "rms_norm", "--families", "zzz"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "unknown family" in p.stderr


def test_output_in_the_wrong_dtype_fails():
    # a kernel that forgot its final cast: values right, dtype wrong
    upcast = dataclasses.replace(SPEC, call=lambda i: {"y": SPEC.call(i)["y"].float()})
    r = validate_case(upcast, SHAPE, torch.float16, "randn", device=DEVICE)
    assert not r.passed and "expected float16" in r.detail


def test_cli_fails_when_the_options_select_nothing():
    p = subprocess.run([sys.executable, "-m", "tritonkit", "validate", "rms_norm", "--families", "nonfinite"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and "select no case" in p.stderr and "families" in p.stderr


def test_cli_refuses_gpu_sized_spaces_without_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("the refusal is for machines without a GPU")
    for space in ("large", "sweep"):
        p = subprocess.run([sys.executable, "-m", "tritonkit", "validate", "--shapes", space], capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 2 and f"--shapes {space}" in p.stderr
