import os
import subprocess
import sys

import pytest

import tritonkit
from tritonkit.cli import main


def test_version_prints_the_package_version_and_exits_0():
    p = subprocess.run([sys.executable, "-m", "tritonkit", "--version"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout == f"tritonkit {tritonkit.__version__}\n" and p.stderr == ""


def test_version_is_listed_in_the_usage(capsys):
    assert main(["--help"]) == 0
    assert "tritonkit --version" in capsys.readouterr().out


def test_unknown_command_names_it(capsys):
    assert main(["--versoin"]) == 2
    assert "unknown command '--versoin'" in capsys.readouterr().err


def test_output_cut_short_by_the_reader_is_not_a_traceback():
    import subprocess
    import sys

    # `true` exits without reading: the page is written to a pipe nobody reads (`| head -1` on a long page)
    proc = subprocess.run(
        f"{sys.executable} -m tritonkit check --explain int32-offset | true",
        shell=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr


_TOO_WIDE = """
import torch, triton, triton.language as tl, tritonkit
@triton.jit
def _one_kernel(x_ptr):
    tl.store(x_ptr + tl.program_id(0), 1.0)
@tritonkit.case(n=[1])
def too_wide(n):
    _one_kernel[(1, 70_000)](torch.empty(8, device="meta"))
"""

_FAILS = """
import torch
from tritonkit import OpSpec
S = OpSpec("wrong", lambda x: x * 2, lambda shape, dtype, fill: {"x": fill((shape["n"],), dtype)},
           reference=lambda inputs, dtype: {"out": inputs["x"] * 3}, boundary=[{"n": 4}],
           dtypes=(torch.float32,), families=("randn",))
"""


@pytest.mark.parametrize("verb, body", [("check", _TOO_WIDE), ("validate", _FAILS)])
def test_a_failing_run_still_fails_when_the_reader_has_gone(verb, body, tmp_path):
    # `tritonkit check k.py | true`: the pipe's reader is gone before the report is written
    (tmp_path / "k.py").write_text(body)
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run(
            [sys.executable, "-m", "tritonkit", verb, "k.py"],
            cwd=tmp_path,
            stdout=w,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
            env={**os.environ, "TRITON_INTERPRET": "0"},
        )
    finally:
        os.close(w)
    assert p.returncode == 1 and "Traceback" not in p.stderr and "BrokenPipe" not in p.stderr, p.stderr


@pytest.mark.parametrize("verb", ["", "check", "validate", "bench", "inductor", "tune"])
def test_help_imports_neither_torch_nor_triton(verb):
    # `tritonkit [VERB] --help` answers in a fraction of a second: torch's import alone takes seconds on a CPU
    code = (
        "import sys, runpy; sys.argv = ['tritonkit'] + sys.argv[1:]\n"
        "try:\n    runpy.run_module('tritonkit', run_name='__main__')\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('torch', 'triton') if m in sys.modules))"
    )
    args = [verb, "--help"] if verb else ["--help"]
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)
    assert r.stdout.strip().splitlines()[-1] == "[]", r.stdout[-500:] + r.stderr[-500:]
