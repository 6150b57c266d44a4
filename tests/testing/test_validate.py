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
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "tritonkit",
            "validate",
            "rms_norm",
            "--dtype",
            "float32",
            "--families",
            "randn",
            "--json",
            str(out),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    data = json.loads(out.read_text())
    assert data["results"] and all(r["passed"] for r in data["results"])
    assert data["meta"]["interpreter"] is (not torch.cuda.is_available())
    assert " passed, 0 failed" in p.stdout


def test_cli_rejects_unknown_op_and_family():
    p = subprocess.run([sys.executable, "-m", "tritonkit", "validate", "nope"], capture_output=True, text=True)
    assert p.returncode == 2 and "unknown op 'nope'" in p.stderr
    p = subprocess.run(
        [sys.executable, "-m", "tritonkit", "validate", "rms_norm", "--families", "zzz"], capture_output=True, text=True
    )
    assert p.returncode == 2 and "unknown family" in p.stderr


def test_output_in_the_wrong_dtype_fails():
    # a kernel that forgot its final cast: values right, dtype wrong
    upcast = dataclasses.replace(SPEC, call=lambda i: {"y": SPEC.call(i)["y"].float()})
    r = validate_case(upcast, SHAPE, torch.float16, "randn", device=DEVICE)
    assert not r.passed and "expected float16" in r.detail


def test_cli_fails_when_the_options_select_nothing():
    p = subprocess.run(
        [sys.executable, "-m", "tritonkit", "validate", "rms_norm", "--families", "nonfinite"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 2 and "select no case" in p.stderr and "families" in p.stderr


def test_cli_refuses_gpu_sized_spaces_without_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("the refusal is for machines without a GPU")
    for space in ("large", "sweep"):
        p = subprocess.run(
            [sys.executable, "-m", "tritonkit", "validate", "--shapes", space],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert p.returncode == 2 and f"--shapes {space}" in p.stderr


def _topk_ids(x: torch.Tensor) -> torch.Tensor:
    """Each row's top-2 ids as int32, in a poisonable output: what an id-returning op allocates."""
    from tritonkit.ops import _alloc

    out = _alloc.empty((x.shape[0], 2), torch.int32, x.device)
    out.copy_(x.topk(2, dim=-1).indices)
    return out


def _ids_spec(call, **kw):
    from tritonkit.spec import OpSpec

    return OpSpec(
        "ids",
        _topk_ids,
        lambda shape, dtype, fill: {"x": fill((shape["n"], 8), dtype)},
        call=call,
        boundary=[{"n": 5}],
        dtypes=(torch.float16,),
        reference=lambda inputs, dtype: {"ids": inputs["x"].topk(2, dim=-1).indices.to(torch.int32)},
        **kw,
    )


def test_declared_output_dtype_is_accepted_and_enforced():
    shape = {"n": 5}
    good = _ids_spec(lambda i: {"ids": _topk_ids(i["x"])}, output_dtypes={"ids": torch.int32})
    assert validate_case(good, shape, torch.float16, device=DEVICE).passed
    # undeclared, an int32 output in a float16 case is a kernel that skipped its cast
    r = validate_case(_ids_spec(good.call), shape, torch.float16, device=DEVICE)
    assert not r.passed and "ids is int32" in r.detail and "expected float16" in r.detail
    # declared int32, the op returns int64: the right values in the wrong dtype still fail
    wide = dataclasses.replace(good, call=lambda i: {"ids": _topk_ids(i["x"]).long()})
    r = validate_case(wide, shape, torch.float16, device=DEVICE)
    assert not r.passed and "ids is int64" in r.detail and "expected int32" in r.detail
    # a declared name the op does not return is a spec error, not a pass
    typo = dataclasses.replace(good, output_dtypes={"idx": torch.int32})
    r = validate_case(typo, shape, torch.float16, device=DEVICE)
    assert not r.passed and "output_dtypes names ['idx']" in r.detail


def test_unwritten_int32_element_is_caught_by_poisoning():
    def last_row_unwritten(inputs):
        from tritonkit.ops import _alloc

        x = inputs["x"]
        out = _alloc.empty((x.shape[0], 2), torch.int32, x.device)
        out[:-1] = x[:-1].topk(2, dim=-1).indices
        return {"ids": out}

    spec = _ids_spec(last_row_unwritten, output_dtypes={"ids": torch.int32})
    r = validate_case(spec, {"n": 5}, torch.float16, device=DEVICE)
    assert not r.passed and r.outputs["ids"]["mismatches"] == 2
    assert "at (4, 0): got -2147483648" in r.detail


def _twice(x):
    return x * 2


def _lowered(inputs, dtype):  # rounds to the case's dtype on the way out: an oracle no better than the op
    return {"out": (inputs["x"] * 2).to(dtype)}


def _mutating(inputs, dtype):  # doubles x in place, then doubles it again
    x = inputs["x"].mul_(2)
    return {"out": x * 2}


@pytest.mark.parametrize(
    "reference, words",
    [
        (_lowered, "it returned out in float16 from float64 inputs"),
        (_mutating, "it changed its input in place (x was overwritten: element (0,)"),
    ],
    ids=["low_precision", "mutates_input"],
)
def test_a_reference_that_breaks_its_contract_is_named_not_the_op(reference, words):
    from tritonkit import OpSpec

    spec = OpSpec(
        "twice",
        _twice,
        lambda shape, dtype, fill: {"x": fill((shape["n"],), dtype)},
        reference=reference,
        boundary=[{"n": 16}],
        dtypes=(torch.float16,),
    )
    r = validate_case(spec, {"n": 16}, torch.float16, "randn", device=DEVICE)
    assert (
        not r.passed
        and r.detail.startswith("ReferenceFault: the reference, not the op, is at fault")
        and (words in r.detail)
    ), r.detail
