"""Which launches form one sweep: a case with no `sweep=` and no parameter named like a per-call size takes all
its parameters as per-call; a recompile finding that rests on that says which declaration settles it (issue 40)."""

import textwrap

import pytest

from tritonkit.check import Options, run_check

CASES = """
import torch
import triton
import triton.language as tl
import tritonkit


@triton.jit
def _inferred_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.zeros([BLOCK], tl.float32), mask=offs < n)


@triton.jit
def _declared_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.zeros([BLOCK], tl.float32), mask=offs < n)


@tritonkit.case(block=[16, 32])
def inferred(block):
    _inferred_kernel[(1,)](torch.empty(64, device="meta"), 5, BLOCK=block)


@tritonkit.case(block=[16, 32], sweep=[])
def declared(block):
    _declared_kernel[(1,)](torch.empty(64, device="meta"), 5, BLOCK=block)
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    d = tmp_path_factory.mktemp("sweeps")
    (d / "sweep_cases.py").write_text(textwrap.dedent(CASES))
    return run_check([str(d / "sweep_cases.py")], Options(disk_cache=False))


def test_an_inferred_sweep_names_the_declaration_that_settles_it(report):
    (f,) = [f for f in report.findings if f.kernel == "_inferred_kernel"]
    assert f.rule == "recompile" and "declares no `sweep=`" in f.message
    assert "`sweep=['block']`, or `sweep=[]` for none" in f.message


def test_sweep_none_makes_each_run_its_own_use(report):
    assert [f for f in report.findings if f.kernel == "_declared_kernel"] == []
