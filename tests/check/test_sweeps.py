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


@triton.jit
def _swept_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.zeros([BLOCK], tl.float32), mask=offs < n)


@tritonkit.case(block=[16, 32], sweep=["block"])
def swept(block):
    _swept_kernel[(1,)](torch.empty(64, device="meta"), 5, BLOCK=block)


@triton.jit
def _optional_kernel(x_ptr, bias_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    if bias_ptr is not None:
        x += tl.load(bias_ptr + offs)
    tl.store(x_ptr + offs, x)


@tritonkit.case(num_tokens=[256, 4096])
def optional(num_tokens):
    # a path chosen per call: a bias tensor (and a wider block) for large batches, None for small ones
    x = torch.empty(num_tokens * 64, device="meta")
    big = num_tokens >= 1024
    _optional_kernel[(num_tokens,)](x, torch.empty_like(x) if big else None, BLOCK=128 if big else 64)


@triton.jit
def _early_kernel(x_ptr, EARLY: tl.constexpr):
    i = tl.program_id(0)
    v = tl.load(x_ptr + i)
    if EARLY:
        v = v + 1
    tl.store(x_ptr + i, v)


def _early_launch(x):
    _early_kernel[(x.shape[0],)](x, EARLY=x.shape[0] <= 512)  # a constexpr from the per-call size


@tritonkit.case(num_tokens=[1, 16, 256])
def early(num_tokens):
    _early_launch(torch.empty(num_tokens, device="meta"))  # 1-256 rows: EARLY at every size
    _early_launch(torch.empty(num_tokens * 8, device="meta"))  # 8-2048 rows: EARLY flips at 256 tokens


@triton.jit
def _layer_kernel(x_ptr, FIRST: tl.constexpr):
    i = tl.program_id(0)
    v = tl.load(x_ptr + i)
    if FIRST:
        v = v * 2
    tl.store(x_ptr + i, v)


@triton.jit
def _two_phase_kernel(x_ptr, extra_ptr, PHASE: tl.constexpr):
    i = tl.program_id(0)
    v = tl.load(x_ptr + i)
    if extra_ptr is not None:
        v += tl.load(extra_ptr + i)
    tl.store(x_ptr + i, v + PHASE)


def _two_phases(x, big):
    # one helper, two launches a call: phase 1 takes an extra tensor only at large sizes (a per-call choice)
    _two_phase_kernel[(x.shape[0],)](x, None, PHASE=0)
    _two_phase_kernel[(x.shape[0],)](x, torch.empty_like(x) if big else None, PHASE=1)


@tritonkit.case(num_tokens=[1, 16, 4096])
def two_phases(num_tokens):
    _two_phases(torch.empty(num_tokens, device="meta"), num_tokens >= 1024)


@triton.jit
def _chunk_kernel(t_ptr, out_ptr, BLOCK: tl.constexpr):
    i = tl.program_id(0)
    tl.store(out_ptr + i, tl.load(t_ptr + i).to(tl.float32))


@tritonkit.case(num_tokens=[16, 4096])
def chunked(num_tokens):
    # small batches go a row at a time: slices that start at every element offset
    t = torch.empty(num_tokens, dtype=torch.int64, device="meta")
    out = torch.empty(num_tokens, dtype=torch.float32, device="meta")
    step = 1 if num_tokens < 64 else 128
    for s in range(0, num_tokens, step):
        _chunk_kernel[(min(step, num_tokens - s),)](t[s:], out[s:], BLOCK=16)


@tritonkit.case(num_tokens=[1, 16, 256])
def layers(num_tokens):
    x = torch.empty(num_tokens, device="meta")
    for layer in range(3):  # one line, a flag per layer: two uses of the kernel, not churn
        _layer_kernel[(num_tokens,)](x, FIRST=layer == 0)
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    d = tmp_path_factory.mktemp("sweeps")
    (d / "sweep_cases.py").write_text(textwrap.dedent(CASES))
    return run_check([str(d / "sweep_cases.py")], Options(disk_cache=False))


def _finding(report, kernel):
    """The one finding on ``kernel``."""
    (f,) = [f for f in report.findings if f.kernel == kernel]
    return f


def test_an_inferred_sweep_names_the_declaration_that_settles_it(report):
    f = _finding(report, "_inferred_kernel")
    assert f.rule == "recompile" and "declares no `sweep=`" in f.message
    assert "`sweep=['block']`, or `sweep=[]` for none" in f.message


def test_sweep_none_makes_each_run_its_own_use(report):
    assert [f for f in report.findings if f.kernel == "_declared_kernel"] == []


def test_a_declared_sweep_gets_the_finding_without_the_inference_note(report):
    # sweep=["block"] names the case's only parameter: the same per-call set the inference would take, but declared
    f = _finding(report, "_swept_kernel")
    assert f.rule == "recompile" and "compiles 2 times" in f.message and "declares no" not in f.message


def test_none_for_some_per_call_sizes_and_a_tensor_for_others_is_a_recompile(report):
    f = _finding(report, "_optional_kernel")
    assert "compiles 2 times" in f.message and "`bias_ptr` (None for some calls, a tensor for others)" in f.message
    assert "pass `bias_ptr` the same way on every call" in f.fix


def test_a_constexpr_that_differs_between_two_case_lines_still_churns_at_one(report):
    # at 256 tokens the two launches take different EARLY values: that makes it no flag, since they come from two
    # lines of the case; the second line's EARLY still moves with the per-call size
    f = _finding(report, "_early_kernel")
    assert "compiles 2 times" in f.message and "constexpr `EARLY`" in f.message
    assert "#2 num_tokens=256 (EARLY=False)" in f.message


def test_a_flag_per_layer_from_one_line_is_two_uses_not_churn(report):
    assert [f for f in report.findings if f.kernel == "_layer_kernel"] == []


def test_an_argument_that_differs_between_a_calls_launches_at_some_sizes_only_is_churn(report):
    # at 4096 tokens the two launches differ in extra_ptr as well as PHASE; PHASE tells the uses apart at every size,
    # extra_ptr only at large ones: phase 1's None -> tensor is a recompile the per-call size makes
    f = _finding(report, "_two_phase_kernel")
    assert "compiles 2 times" in f.message and "`extra_ptr` (None for some calls, a tensor for others)" in f.message
    assert "#2 num_tokens=4096" in f.message


def test_each_compile_of_an_alignment_split_says_which_pointers_are_aligned(report):
    f = _finding(report, "_chunk_kernel")
    assert "compiles 3 times" in f.message
    assert "(t_ptr 16-byte aligned, out_ptr 16-byte aligned)" in f.message
    assert "(t_ptr not 16-byte aligned, out_ptr not 16-byte aligned)" in f.message
    assert "(t_ptr 16-byte aligned, out_ptr not 16-byte aligned)" in f.message
