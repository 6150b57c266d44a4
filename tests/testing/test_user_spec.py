"""A user's own OpSpec: the fields validation needs and no more, and `tritonkit validate FILE | MODULE:NAME`."""

import dataclasses
import os
import subprocess
import sys

import pytest
import torch
from conftest import DEVICE

from tritonkit.models import MODELS
from tritonkit.spec import NotDeclared, OpSpec, Shape
from tritonkit.testing import assert_valid, validate_case
from tritonkit.testing.cli import main

KERNEL = """
import torch
import triton
import triton.language as tl


@triton.jit
def _scale_kernel(x_ptr, y_ptr, n, FACTOR: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * FACTOR, mask=mask)


def scale(x, factor=2):
    y = torch.empty_like(x)
    _scale_kernel[(triton.cdiv(x.numel(), 64),)](x, y, x.numel(), FACTOR=factor, BLOCK=64)
    return y
"""

SPECS = """
import torch
from {kernel} import scale
from tritonkit import OpSpec


def make_inputs(shape, dtype, fill):
    return {{"x": fill((shape["n"],), dtype)}}


# validation's fields only; shapes as plain dicts; the default call, scale(**inputs)
DOUBLE = OpSpec("double", scale, make_inputs, reference=lambda inputs, dtype: {{"out": 2 * inputs["x"]}},
                boundary=[{{"n": 1}}, {{"n": 65}}], dtypes=(torch.float16, torch.float32),
                families=("randn", "near_max"))
WRONG = OpSpec("wrong", scale, make_inputs, reference=lambda inputs, dtype: {{"out": 3 * inputs["x"]}},
               boundary=[{{"n": 5}}], dtypes=(torch.float32,))
"""


def _mk(shape, dtype, fill):
    return {"x": fill((shape["n"],), dtype)}


def _double_ref(inputs, dtype):
    return {"out": 2 * inputs["x"]}


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A user's checkout: a kernel module and a spec file importing it, as the cwd; imports undone after."""
    kernel = f"userkern_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{kernel}.py").write_text(KERNEL)
    (tmp_path / "specs.py").write_text(SPECS.format(kernel=kernel))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        del sys.modules[name]


def _spec(**kw):
    from tritonkit.ops import silu_and_mul

    base = dict(
        name="silu",
        fn=silu_and_mul,
        make_inputs=lambda s, d, f: {"x": f((s["n"], 2 * s["d"]), d)},
        reference=lambda i, d: {
            "out": torch.nn.functional.silu(i["x"][:, : i["x"].shape[1] // 2]) * i["x"][:, i["x"].shape[1] // 2 :]
        },
        boundary=[{"n": 3, "d": 8}],
        dtypes=(torch.float32,),
    )
    base.update(kw)
    return OpSpec(**base)


def test_a_validation_only_spec_runs_with_dict_shapes_and_the_default_call():
    spec = _spec()
    assert spec.boundary == (Shape(n=3, d=8),) and isinstance(spec.boundary[0], Shape)
    assert spec.call({"x": torch.ones(1, 4)}).keys() == {"out"}
    assert_valid(spec, spec.boundary[0], torch.float32, device=DEVICE)
    assert_valid(spec, {"n": 2, "d": 5}, torch.float32, device=DEVICE)  # a dict where a shape goes, too


def test_undeclared_sweep_large_and_work_are_empty_or_say_so():
    spec = _spec()
    assert spec.shapes("sweep") == () and spec.shapes("large") == () and spec.sweep() == ()
    assert not spec.is_declared("work") and not spec.is_declared("sweep_shape")
    with pytest.raises(NotDeclared, match=r"OpSpec 'silu' declares no work: tritonkit bench needs work="):
        spec.work(spec.boundary[0], torch.float32)
    with pytest.raises(NotDeclared, match=r"OpSpec 'silu' declares no sweep_shape"):
        spec.sweep_shape(MODELS["llama3-8b"], 16)
    # a sweep_shape returning a dict gives Shapes, to every tool that calls it
    swept = _spec(sweep_shape=lambda m, t: {"n": t, "d": m.intermediate})
    assert swept.sweep_shape(MODELS["llama3-8b"], 4) == Shape(n=4, d=MODELS["llama3-8b"].intermediate)
    assert isinstance(swept.sweep(num_tokens=[1, 2])[1], Shape)


def test_sweep_series_name_the_benchs_axes_and_leave_the_check_sweep_alone():
    m = MODELS["llama3-8b"]
    one = _spec(sweep_shape=lambda m, t: {"n": t, "d": 8})
    assert one.series_at(m, 4) == {"": Shape(n=4, d=8)}
    series = _spec(
        sweep_shape=lambda m, t: {"n": t, "d": 8},
        sweep_series=lambda m, t: {"short": {"n": t, "d": 8}, "long": {"n": t, "d": 64} if t > 2 else None},
    )
    assert series.series_at(m, 1) == {"short": Shape(n=1, d=8)}  # a series without a point there is left out
    assert series.series_at(m, 4) == {"short": Shape(n=4, d=8), "long": Shape(n=4, d=64)}
    assert series.sweep(num_tokens=[1, 4]) == (Shape(n=1, d=8), Shape(n=4, d=8))  # sweep_shape's, as before
    bad = _spec(sweep_series=lambda m, t: [{"n": t}])
    with pytest.raises(TypeError, match=r"sweep_series must return \{series name: shape or None\}, got list"):
        bad.series_at(m, 1)
    with pytest.raises(TypeError, match="sweep_series must be callable"):
        _spec(sweep_series={"a": {"n": 1}})


def test_default_call_names_results_and_follows_replace():
    spec = OpSpec("pair", lambda x: (x, x + 1), _mk, reference=_double_ref, boundary=[{"n": 1}])
    assert list(spec.call({"x": torch.zeros(2)})) == ["out0", "out1"]
    again = dataclasses.replace(spec, fn=lambda x: x * 5)
    assert torch.equal(again.call({"x": torch.ones(1)})["out"], torch.full((1,), 5.0))

    def double_in_place(x):
        x.mul_(2)

    inplace = OpSpec("inplace", double_in_place, _mk, reference=_double_ref, boundary=[{"n": 1}])
    r = validate_case(inplace, {"n": 1}, torch.float32, device=DEVICE)
    assert not r.passed and "fn" in r.detail and "returned None" in r.detail and "own call" in r.detail


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(boundary={"n": 1}), "boundary must be a list of shapes, got one dict"),
        (dict(boundary=[{"n": 1}, 7]), "boundary[1] must be a Shape or a dict of named sizes, got int"),
        (dict(large=[[1, 2]]), "large[0] must be a Shape or a dict of named sizes"),
        (dict(dtypes=["float16"]), "dtypes[0] must be a torch.dtype"),
        (dict(families=("randn", "hard")), "families has unknown 'hard'"),
        (dict(tolerance={torch.float16: (1e-3, 1e-5)}), "tolerance must map a torch.dtype to a Tolerance"),
        (dict(reference=None), "reference must be callable"),
        (dict(work=3), "work must be callable or left out"),
        (dict(output_dtypes=("out", torch.int32)), "output_dtypes must be a dict {output name: torch.dtype}"),
        (dict(output_dtypes={"out": "int32"}), "output_dtypes must map an output name to a torch.dtype"),
    ],
)
def test_a_malformed_field_is_named_at_construction(kw, message):
    with pytest.raises((TypeError, ValueError)) as e:
        OpSpec(**{"name": "op", "fn": abs, "make_inputs": _mk, "reference": _double_ref, "boundary": [{"n": 1}], **kw})
    assert str(e.value).startswith("OpSpec 'op': ") and message in str(e.value)


def test_a_reference_that_returns_a_tensor_is_named():
    spec = _spec(reference=lambda i, d: i["x"])
    r = validate_case(spec, spec.boundary[0], torch.float32, device=DEVICE)
    assert not r.passed and "reference returned Tensor, not a dict of named outputs" in r.detail


@pytest.mark.parametrize("target", ["specs.py", "specs:DOUBLE", "specs.py:DOUBLE"])
def test_cli_validates_a_users_spec_file_or_one_spec(project, target, capsys):
    code = main([target, "--families", "randn", "near_max"] + (["--quiet"] if target != "specs.py" else []))
    out = capsys.readouterr().out
    if target == "specs.py":  # every OpSpec of the file: DOUBLE passes, WRONG fails
        assert code == 1 and "9 cases, double, wrong," in out and "\n8 passed, 1 failed" in out
        assert [ln.split()[0] for ln in out.splitlines() if ln.rstrip().endswith("FAIL")] == ["wrong"]
    else:
        assert code == 0 and "8 cases, double," in out and "\n8 passed, 0 failed" in out


@pytest.mark.parametrize(
    "target, message",
    [
        ("specs:NOPE", "specs:NOPE: specs has no 'NOPE' (its OpSpecs: DOUBLE, WRONG)"),
        ("specs:make_inputs", "specs:make_inputs: make_inputs is a function, not an OpSpec"),
        ("missing.py", "missing.py: no such file"),
        ("nomodule_xyz.specs", "nomodule_xyz.specs: no such module"),
        ("rms_nrom", "unknown op 'rms_nrom'; built-in ops: rms_norm"),
    ],
)
def test_cli_names_a_target_that_names_no_spec(project, target, message, capsys):
    assert main([target]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith(f"tritonkit validate: {message}")


def test_cli_reports_a_broken_spec_file_at_the_users_line(project, capsys):
    (project / "broken.py").write_text(
        "from tritonkit import OpSpec\n\nS = OpSpec('s', abs, abs, reference=abs, boundary={'n': 1})\n"
    )
    (project / "empty.py").write_text("X = 1\n")
    assert main(["broken.py"]) == 2
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1
        and "broken.py: failed to import: TypeError: OpSpec 's': boundary must be a list" in err
        and f"(at {project / 'broken.py'}:3)" in err
    )
    assert main(["empty.py"]) == 2
    assert "empty.py: defines no OpSpec at its top level" in capsys.readouterr().err


def test_cli_imports_the_users_kernels_under_the_interpreter(project):
    if torch.cuda.is_available():
        pytest.skip("on a GPU the kernels run natively")
    # TRITON_INTERPRET unset: the command must set it before it imports the user's file, which defines the kernel
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    p = subprocess.run(
        [sys.executable, "-m", "tritonkit", "validate", "specs:DOUBLE", "--dtype", "float32"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=project,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "\n4 passed, 0 failed" in p.stdout and "Triton interpreter" in p.stdout


def test_make_inputs_always_receives_a_shape():
    # what make_inputs receives is always a Shape, whatever the boundary was written as
    seen = []
    spec = _spec(make_inputs=lambda s, d, f: seen.append(s) or {"x": f((s["n"], 2 * s["d"]), d)})
    validate_case(spec, {"n": 1, "d": 2}, torch.float32, device=DEVICE)
    assert seen and isinstance(seen[0], Shape) and seen[0].id == "n=1,d=2"
