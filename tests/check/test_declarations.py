"""What a case declares about the data a kernel loads: `nondecreasing` arrays (checked like `loaded_bounds`), and
what a refused case leaves behind."""

import textwrap

import pytest

import tritonkit
from tritonkit.check import Options, run_check

CASES = """
import torch
import triton
import triton.language as tl
import tritonkit


@triton.jit
def _lens_kernel(out_ptr, cu_seqlens_ptr, stride, BLOCK: tl.constexpr):
    i = tl.program_id(0)
    seqlen = tl.load(cu_seqlens_ptr + i + 1) - tl.load(cu_seqlens_ptr + i)
    if seqlen < 4:
        tl.store(out_ptr + (tl.arange(0, BLOCK) + seqlen) * stride, tl.zeros([BLOCK], tl.float32))


def _args(n):
    return torch.empty(2**33, device="meta"), torch.empty(n + 1, dtype=torch.int32, device="meta"), 2**26


@tritonkit.case(n=[4], nondecreasing=["cu_seqlen_ptr"])
def typo(n):
    _lens_kernel[(n,)](*_args(n), BLOCK=16)


@tritonkit.case(n=[4], nondecreasing={"cu_seqlens_ptr": 8192})
def declared(n):
    _lens_kernel[(n,)](*_args(n), BLOCK=16)


@triton.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})], key=["n"])
@triton.jit
def _tuned_kernel(x_ptr, idx_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK) + tl.load(idx_ptr)
    tl.store(x_ptr + offs, tl.zeros([BLOCK], tl.float32), mask=offs < n)


@tritonkit.case(n=[100, 200], loaded_bounds={"idx_pt": (0, 64)})
def tuned_refused(n):
    _tuned_kernel[(1,)](torch.empty(256, device="meta"), torch.empty(1, dtype=torch.int32, device="meta"), n)
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    d = tmp_path_factory.mktemp("declarations")
    (d / "declared_cases.py").write_text(textwrap.dedent(CASES))
    return run_check([str(d / "declared_cases.py")], Options(disk_cache=False))


def test_a_nondecreasing_name_that_is_no_pointer_parameter_refuses_the_case(report):
    refused = [p for p in report.problems if "refused" in p.message]
    (p,) = [p for p in refused if "'cu_seqlen_ptr'" in p.message]
    assert p.fatal and "nondecreasing names" in p.message and "typo" in p.where
    assert report.exit_code() == 2


def test_a_declared_array_with_a_largest_step_bounds_the_difference(report):
    # seqlen in [0, 8192] (declared step times an index gap of 1), then below 4 in the branch: no overflow
    assert [f for f in report.findings if f.kernel == "_lens_kernel"] == []
    assert any(k["kernel"] == "_lens_kernel" and k["launches"] == 1 for k in report.kernels)


def test_a_refused_autotuned_case_leaves_no_autotune_cost_line(report):
    (p,) = [p for p in report.problems if "'idx_pt'" in p.message]
    assert "loaded_bounds names" in p.message
    assert [f for f in report.findings if f.rule == "autotune-cost"] == []


@pytest.mark.parametrize(
    "bad,match",
    [
        ("cu_seqlens_ptr", "list of pointer names"),
        ({"cu_seqlens_ptr": -1}, "largest step"),
        ({"cu_seqlens_ptr": 1.5}, "largest step"),
    ],
)
def test_case_rejects_a_malformed_nondecreasing(bad, match):
    with pytest.raises((TypeError, ValueError), match=match):
        tritonkit.case(n=[1], nondecreasing=bad)(lambda n: None)


def test_progress_names_the_stages_on_a_terminal_and_stays_off_otherwise(tmp_path):
    # in a fresh process: one where Triton's interpreter ran (earlier tests) checks in a child, whose stderr is its own
    import os
    import subprocess
    import sys

    (tmp_path / "one_case.py").write_text(textwrap.dedent(CASES).split("@triton.autotune")[0])
    code = (
        "import sys; from tritonkit.check import Options, run_check; "
        f"run_check([{str(tmp_path / 'one_case.py')!r}], Options(disk_cache=False, progress=sys.argv[1] == '1'))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), "TRITON_INTERPRET": "0"}
    on, off = (
        subprocess.run([sys.executable, "-c", code, flag], capture_output=True, text=True, env=env, timeout=300)
        for flag in ("1", "0")
    )
    assert on.returncode == 0, on.stderr
    assert "capturing cases 2/2" in on.stderr and "lowering kernels 1/1" in on.stderr
    assert "running rules 8/8" in on.stderr
    assert on.stderr.endswith("\x1b[K")  # the line is cleared before the report is printed (\r reads as \n)
    assert "tritonkit check:" not in off.stderr
