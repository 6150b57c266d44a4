"""A CPU machine without TRITON_INTERPRET: what a newcomer meets first (each in a fresh process)."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

SRC = Path(__file__).parents[1] / "src"
README = Path(__file__).parents[1] / "README.md"

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="what a machine without a GPU meets")


def _run(code: str, interpret: str | None = None, tmp_path=None):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(SRC)
    if interpret is not None:
        env["TRITON_INTERPRET"] = interpret
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=tmp_path,
    )


def test_the_readme_validation_example_runs_as_written_on_a_cpu():
    text = README.read_text()
    start = text.index("```python\nimport torch\nfrom tritonkit.ops import get_spec")
    example = text[start + len("```python\n") : text.index("```", start + 3)]
    r = _run(example + "\nprint('passed')\n")
    assert r.returncode == 0 and "passed" in r.stdout, r.stderr[-2000:]


def test_importing_the_ops_first_switches_the_interpreter_on():
    r = _run("""
        import os, torch
        from tritonkit.ops import rms_norm
        y = rms_norm(torch.ones(2, 8), torch.ones(8))
        print(os.environ["TRITON_INTERPRET"], float(y.sum()))
    """)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split()[0] == "1"


@pytest.mark.parametrize("interpret,state", [("0", "set to '0'"), (None, "Triton was imported first")])
def test_otherwise_a_launch_says_what_to_set_in_one_sentence(interpret, state):
    r = _run(
        """
        import triton, torch
        from tritonkit.ops import rms_norm
        rms_norm(torch.ones(2, 8), torch.ones(8))
    """,
        interpret,
    )
    last = r.stderr.strip().splitlines()[-1]
    assert r.returncode != 0 and last.startswith("RuntimeError: no GPU driver is active")
    assert "set TRITON_INTERPRET=1 before Triton is first imported" in last and state in last


@pytest.mark.parametrize("numpy_version, explained", [("2.4.1", True), ("2.3.5", False)])
def test_a_numpy_too_new_for_the_interpreter_is_named(monkeypatch, numpy_version, explained):
    # Triton 3.6's interpreter int()s 1-element arrays, a TypeError since numpy 2.4 (triton-lang/triton#9171)
    import numpy
    import triton

    from tritonkit.ops import _device

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(numpy, "__version__", numpy_version)
    monkeypatch.setattr(triton, "__version__", "3.6.0")
    err = _device.explain_launch_error(TypeError("only 0-dimensional arrays can be converted to Python scalars"))
    if explained:
        assert isinstance(err, RuntimeError) and "install 'numpy<2.4'" in str(err) and numpy_version in str(err)
    else:
        assert err is None
