"""The traps a newcomer meets first in tritonkit.testing and `tritonkit validate`."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SRC = Path(__file__).parents[2] / "src"

OWN_KERNEL_FIRST = """
import torch
import triton
import triton.language as tl


@triton.jit
def _k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def f(x):
    y = torch.empty_like(x)
    _k[(1,)](x, y, x.numel(), BLOCK=64)
    return y


from tritonkit import OpSpec  # noqa: E402
from tritonkit.testing import assert_valid  # noqa: E402

S = OpSpec("c", f, lambda s, d, fill: {"x": fill((4,), d)}, reference=lambda i, d: {"out": i["x"].clone()},
           boundary=[{"n": 1}], dtypes=(torch.float32,))
try:
    assert_valid(S, {"n": 1}, torch.float32, device="cpu")
except AssertionError as e:
    print(str(e).splitlines()[0])
"""


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU has a driver")
def test_own_kernel_imported_before_tritonkit_gets_the_ops_one_sentence(tmp_path):
    (tmp_path / "own_first.py").write_text(OWN_KERNEL_FIRST)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run(
        [sys.executable, "own_first.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**env, "PYTHONPATH": str(SRC)},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("c [n=1] float32 randn: RuntimeError: no GPU driver is active, so Triton cannot launch")
    assert "set TRITON_INTERPRET=1 before Triton is first imported" in r.stdout and "0 active drivers" not in r.stdout


def _scaled(x):
    # a float16 limit: x * 1000 overflows for |x| > 65.5 where float64 does not
    return x * 1000 / 1000


def _eager_spec(fn):
    from tritonkit.spec import OpSpec

    return OpSpec(
        "scaled",
        fn,
        lambda s, d, fill: {"x": fill((s["n"],), d)},
        reference=lambda i, d: {"out": _scaled(i["x"])},
        boundary=[{"n": 64}],
        dtypes=(torch.float16,),
        families=("randn", "near_max"),
    )


def test_a_failed_hard_input_case_shows_eager_pytorch_failing_too():
    from tritonkit.testing import validate_case

    r = validate_case(_eager_spec(_scaled), {"n": 64}, torch.float16, "near_max", device="cpu")
    assert not r.passed and r.eager.startswith("fails too, out: 64/64 elements mismatch, error inf")
    assert "; eager PyTorch on the same inputs: fails too" in r.detail and r.as_dict()["eager"] == r.eager


def test_a_kernel_bug_shows_eager_pytorch_passing():
    from tritonkit.testing import validate_case

    r = validate_case(_eager_spec(lambda x: x + 1), {"n": 64}, torch.float16, "randn", device="cpu")
    assert not r.passed and r.eager.startswith("passes, out: error 0.")
    # a passing case pays nothing for it
    assert validate_case(_eager_spec(_scaled), {"n": 64}, torch.float16, "randn", device="cpu").eager == ""
