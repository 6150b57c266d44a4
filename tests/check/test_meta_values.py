"""A launcher that reads an input's values on the host (`.item()`) cannot run on meta tensors: the problem says
what to do, and small real CPU tensors for those inputs are what makes the case run (issue 40)."""

import textwrap

import pytest

from tritonkit.check import Options, run_check

CASES = """
import torch
import triton
import triton.language as tl
import tritonkit


@triton.jit
def _fill_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.zeros([BLOCK], tl.float32), mask=offs < n)


def fill(x, lens):
    n = int(lens.sum().item())  # a host sync on the lengths, as Liger's cross entropy launcher does
    _fill_kernel[(1,)](x, n, BLOCK=16)


@tritonkit.case(n=[4])
def on_meta(n):
    fill(torch.empty(16, device="meta"), torch.empty(n, dtype=torch.int32, device="meta"))


@tritonkit.case(n=[4])
def on_cpu(n):
    fill(torch.empty(16, device="meta"), torch.tensor([1, 2, 3, 4], dtype=torch.int32))
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    d = tmp_path_factory.mktemp("meta_values")
    (d / "launcher_cases.py").write_text(textwrap.dedent(CASES))
    return run_check([str(d / "launcher_cases.py")], Options(disk_cache=False))


def test_item_on_a_meta_input_says_to_use_small_cpu_tensors(report):
    (p,) = [p for p in report.problems if p.kind == "case"]
    assert "on_meta" in p.where and p.fatal
    assert "Tensor.item() cannot be called on meta tensors" in p.message
    line = (
        textwrap.dedent(CASES)
        .splitlines()
        .index("    n = int(lens.sum().item())  # a host sync on the lengths, as Liger's cross entropy launcher does")
        + 1
    )
    assert f"launcher_cases.py:{line})" in p.message  # the launcher's line, not torch's
    assert "small real CPU tensors" in p.message and "torch.tensor(" in p.message


def test_a_cpu_tensor_for_the_values_lets_the_case_run(report):
    (k,) = report.kernels
    assert k["kernel"] == "_fill_kernel" and k["launches"] == 1
