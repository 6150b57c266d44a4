import subprocess
import sys

import pytest

from tritonkit.testing.cli import main


@pytest.mark.parametrize("where", ["missing/dir/v.json", ".", ""])
def test_unwritable_json_fails_before_the_run(where, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["rms_norm", "--json", where]) == 2
    out, err = capsys.readouterr()
    assert out == ""  # nothing ran: no case count, no table
    assert err.count("\n") == 1 and err.startswith(f"tritonkit validate: --json {where!r}: cannot write")
    assert list(tmp_path.iterdir()) == []


def test_unwritable_json_is_one_line_from_the_command(tmp_path):
    p = subprocess.run(
        [sys.executable, "-m", "tritonkit", "validate", "rms_norm", "--json", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip().splitlines() == [
        f"tritonkit validate: --json {str(tmp_path)!r}: cannot write the results there (Is a directory)"
    ]


def test_writable_json_probe_leaves_an_existing_file_alone(tmp_path, monkeypatch):
    from tritonkit.testing.cli import _writable

    f = tmp_path / "old.json"
    f.write_text("keep")
    assert _writable(str(f)) is None and f.read_text() == "keep"
    assert _writable(str(tmp_path / "new.json")) is None and not (tmp_path / "new.json").exists()


@pytest.mark.parametrize(
    "args, words",
    [
        (["rms_norm", "--dtype", "nope"], "unknown dtype 'nope'"),
        (["rms_norm", "--dtype", "float16", "finfo"], "unknown dtype 'finfo'"),
        (["rms_norm", "--families", "gauss"], "unknown family 'gauss'"),
    ],
)
def test_a_bad_option_value_is_one_line_and_exit_2(args, words, capsys):
    assert main(args) == 2
    out = capsys.readouterr()
    assert words in out.err and out.err.count("\n") == 1 and out.out == ""


_EXIT_SPEC = """
import os, sys, torch
from tritonkit import OpSpec
MODE = {mode!r}
def op(x):
    if MODE == "op": sys.exit(0)
    if MODE == "op_os": os._exit(0)
    return x * 2
def make_inputs(shape, dtype, fill):
    if MODE == "inputs": sys.exit(0)
    return {{"x": fill((shape["n"],), dtype)}}
def reference(inputs, dtype):
    if MODE == "reference": os._exit(0)
    return {{"out": inputs["x"] * 2}}
if MODE == "import": sys.exit(0)
if MODE == "import_os": os._exit(0)
S = OpSpec("exit_op", op, make_inputs, reference=reference, boundary=[{{"n": 4}}, {{"n": 5}}],
           dtypes=(torch.float32,), families=("randn",))
"""


@pytest.mark.parametrize("mode", ["op", "op_os", "inputs", "reference", "import", "import_os"])
def test_user_code_that_ends_the_process_never_passes(mode, tmp_path):
    # sys.exit(0) / os._exit(0) in the op, make_inputs, the reference or at import: never exit 0, never a silent stop
    (tmp_path / "exit_spec.py").write_text(_EXIT_SPEC.format(mode=mode))
    p = subprocess.run(
        [sys.executable, "-m", "tritonkit", "validate", "exit_spec.py", "--json", "r.json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if mode.startswith("import"):
        assert p.returncode == 2 and "failed to import" in p.stderr
        return
    assert p.returncode == 1, p.stdout + p.stderr
    assert "0 passed, 2 failed" in p.stdout and "which would end the run with no result" in p.stdout
    report = __import__("json").loads((tmp_path / "r.json").read_text())
    assert report["meta"]["complete"] is True and report["meta"]["cases_done"] == 2


_CHDIR_SPEC = """
import os, torch
from tritonkit import OpSpec
AWAY = {away!r}
os.chdir(AWAY)
def op(x):
    os.chdir(AWAY)
    return x * 2
S = OpSpec("{name}", op, lambda shape, dtype, fill: {{"x": fill((shape["n"],), dtype)}},
           reference=lambda inputs, dtype: {{"out": inputs["x"] * 2}}, boundary=[{{"n": 4}}],
           dtypes=(torch.float32,), families=("randn",))
"""


def test_an_op_that_changes_directory_moves_no_file_the_run_writes(tmp_path):
    away = tmp_path / "away"
    away.mkdir()
    for name in ("first", "second"):  # the second is named relative to where validate started, after the first moved
        (tmp_path / f"{name}.py").write_text(_CHDIR_SPEC.format(away=str(away), name=name))
    p = subprocess.run(
        [sys.executable, "-m", "tritonkit", "validate", "first.py", "second.py", "--json", "r.json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert list(away.iterdir()) == []
    report = __import__("json").loads((tmp_path / "r.json").read_text())
    assert report["meta"]["complete"] is True and [r["op"] for r in report["results"]] == ["first", "second"]


_FORK_SPEC = """
import os, torch
from tritonkit import OpSpec
def op(x):
    if os.fork() == 0:
        return x  # the child falls out of the op, back into validate
    os.wait()
    return x * 2
S = OpSpec("forks", op, lambda shape, dtype, fill: {"x": fill((shape["n"],), dtype)},
           reference=lambda inputs, dtype: {"out": inputs["x"] * 3}, boundary=[{"n": 4}, {"n": 5}],
           dtypes=(torch.float32,), families=("randn",))
"""


def test_an_op_that_forks_leaves_one_run_and_an_honest_exit_code(tmp_path):
    (tmp_path / "forks.py").write_text(_FORK_SPEC)
    p = subprocess.run(
        [sys.executable, "-m", "tritonkit", "validate", "forks.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 1, p.stdout + p.stderr
    assert p.stdout.count("0 passed, 2 failed") == 1 and "passed" not in p.stdout.replace("0 passed, 2 failed", "")


_INTERRUPT_SPEC = """
import torch
from tritonkit import OpSpec
def op(x):
    if x.numel() == 4:
        raise KeyboardInterrupt("the op's own")
    return x * 2
S = OpSpec("stops", op, lambda shape, dtype, fill: {"x": fill((shape["n"],), dtype)},
           reference=lambda inputs, dtype: {"out": inputs["x"] * 2}, boundary=[{"n": 4}, {"n": 5}],
           dtypes=(torch.float32,), families=("randn",))
"""


def test_a_keyboard_interrupt_raised_by_an_op_fails_its_case_and_the_run_goes_on(tmp_path):
    (tmp_path / "stops.py").write_text(_INTERRUPT_SPEC)
    p = subprocess.run(
        [sys.executable, "-m", "tritonkit", "validate", "stops.py", "--json", "r.json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 1, p.stdout + p.stderr
    assert "1 passed, 1 failed" in p.stdout and "raised KeyboardInterrupt (no Ctrl-C was pressed)" in p.stdout
    assert __import__("json").loads((tmp_path / "r.json").read_text())["meta"]["complete"] is True


_STUCK_SPEC = """
import itertools, torch
from tritonkit import OpSpec
def op(x):
    if x.numel() == 4:
        {body}
    return x * 2
S = OpSpec("stuck", op, lambda shape, dtype, fill: {{"x": fill((shape["n"],), dtype)}},
           reference=lambda inputs, dtype: {{"out": inputs["x"] * 2}}, boundary=[{{"n": 4}}, {{"n": 5}}],
           dtypes=(torch.float32,), families=("randn",))
"""


@pytest.mark.parametrize(
    "body, code, words",
    [
        ("while True: pass", 1, "ran past the 1 s limit (--case-timeout) and was stopped: a failure"),
        ("sum(itertools.repeat(1))", 2, "stuck [n=4] float32 randn ran past the 1 s limit (--case-timeout)"),
    ],
    ids=["python_loop", "loop_in_c"],
)
def test_an_op_that_never_returns_is_stopped_by_name(body, code, words, tmp_path):
    (tmp_path / "stuck.py").write_text(_STUCK_SPEC.format(body=body))
    p = subprocess.run(
        [sys.executable, "-m", "tritonkit", "validate", "stuck.py", "--case-timeout", "1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == code and words in p.stdout + p.stderr, p.stdout + p.stderr
    if code == 1:  # stopped inside the process: the other case still ran
        assert "1 passed, 1 failed" in p.stdout


_BF16_SPEC = """
import torch, triton, triton.language as tl
from tritonkit import OpSpec

@triton.jit
def _square_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(out_ptr + offs, x * x, mask=offs < n)  # a product in the input's dtype

def square(x):
    out = torch.empty_like(x)
    _square_kernel[(1,)](x, out, x.numel(), BLOCK=16)
    return out

S = OpSpec("square", square, lambda s, d, fill: {"x": fill((s["n"],), d)},
           reference=lambda i, d: {"out": i["x"] * i["x"]}, boundary=[{"n": 5}],
           dtypes=(torch.bfloat16,), families=("randn",))
"""


def test_a_bf16_failure_under_the_interpreter_names_the_interpreter(tmp_path):
    from tritonkit.testing.interpreter import bf16_product_defect

    (tmp_path / "sq.py").write_text(_BF16_SPEC)
    p = subprocess.run(
        [sys.executable, "-m", "tritonkit", "validate", "sq.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    text = " ".join(p.stdout.split())
    if p.returncode == 0:  # an interpreter that multiplies bf16 right: nothing to name
        assert bf16_product_defect() is None
        return
    assert p.returncode == 1
    assert "CPU interpreter multiplies bfloat16 wrongly" in text and "not the kernel's" in text, p.stdout
