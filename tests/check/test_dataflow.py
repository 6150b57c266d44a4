"""The checker's data flow as its signatures state it: a case reaches its launches as one CaseContext, a Launch is
built by keyword, a Target's runs are named, and one helper counts a loop's iterations."""

import dataclasses
import textwrap

import pytest

from tritonkit.check.capture.case import Case, CaseContext, Declared
from tritonkit.check.analysis.intervals import Iv, Unknown, trip_count
from tritonkit.check.runner import Run, _case_targets, spec_targets

KERNEL = """
import triton
import triton.language as tl


@triton.jit
def _fill_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.zeros([BLOCK], tl.float32), mask=offs < n)
"""


@pytest.fixture(scope="module")
def fill_kernel(tmp_path_factory):
    from tritonkit._imports import import_file
    from tritonkit.check.capture.target import interpreter_off

    path = tmp_path_factory.mktemp("dataflow") / "fill_kernel_mod.py"
    path.write_text(textwrap.dedent(KERNEL))
    with interpreter_off():
        return import_file(path)._fill_kernel


def test_launches_carry_the_context_of_the_case_they_ran_in(fill_kernel):
    import torch

    from tritonkit.check.capture.launches import Capture
    from tritonkit.check.capture.target import Compiler, parse_arch

    ctx = CaseContext({"n": 100}, "fill[]", ("n",), {"x_ptr": (0, 7)}, {"x_ptr": 4})
    with Capture(Compiler(parse_arch("sm_90"), disk_cache=False)) as cap:
        with cap.running(ctx):
            fill_kernel[(2,)](torch.empty(128, device="meta"), 100, BLOCK=64)
        fill_kernel[(1,)](torch.empty(128, device="meta"), 7, BLOCK=64)
    inside, outside = cap.launches
    assert inside.context is ctx
    assert (inside.case, inside.sweep_group, inside.sweep_keys) == ({"n": 100}, "fill[]", ("n",))
    assert inside.loaded_bounds == {"x_ptr": (0, 7)} and inside.nondecreasing == {"x_ptr": 4}
    # after the block the capture is back to no case at all
    assert outside.context == CaseContext() and outside.case == {} and outside.loaded_bounds == {}


def test_a_launch_is_built_by_keyword_only():
    from tritonkit.check.capture.launches import Launch

    fields = [f.name for f in dataclasses.fields(Launch)]
    assert "context" in fields and "case" not in fields
    with pytest.raises(TypeError):
        Launch(*([None] * len(fields)))


def test_a_case_context_cannot_be_changed_once_made():
    with pytest.raises(dataclasses.FrozenInstanceError):
        CaseContext().case = {"n": 1}


def test_case_runs_are_named_and_declare_their_bounds_as_a_dict():
    def write_kv(n):
        return None

    c = Case(write_kv, {"n": (1, 70_000)}, {"slot_ptr": (0, 15)}, "f.py", 3, nondecreasing={"cu_ptr": None})
    (target,) = _case_targets([c])
    first = target.runs[0]
    assert isinstance(first, Run) and first.case == {"n": 1}
    assert first.group == (write_kv.__qualname__, ("n",), True)  # no sweep= and no per-call name: inferred
    assert isinstance(first.bounds, Declared) and first.bounds == {"slot_ptr": (0, 15)}
    assert first.bounds.nondecreasing == {"cu_ptr": None}
    assert first.thunk() is None


def test_spec_runs_make_their_bounds_when_called():
    from tritonkit.ops import get_spec

    spec = get_spec("moe_align_block_size")
    (target,) = spec_targets({"moe_align_block_size": spec}, ("boundary",))
    run = target.runs[0]
    assert run.case["op"] == "moe_align_block_size" and run.case["space"] == "boundary"
    assert callable(run.bounds) and isinstance(run.bounds(), dict)


@pytest.mark.parametrize(
    "lb,ub,step,expected",
    [
        (Iv(0, 0), Iv(10, 10), Iv(1, 1), (10, 10)),
        (Iv(0, 0), Iv(5, 10), Iv(2, 4), (2, 5)),  # fewest: 5 elements by 4; most: 10 by 2
        (Iv(0, 3), Iv(2, 10), Iv(1, 1), (0, 10)),  # may start past its end: no iteration is sure
        (Iv(8, 8), Iv(0, 4), Iv(1, 1), (0, 0)),
        (Iv(0, 0), Iv(10, 10), Iv(0, 2), None),  # a step that may be 0 never ends
        (Iv(0, 0), Unknown("n"), Iv(1, 1), None),
        (None, Iv(1, 1), Iv(1, 1), None),
    ],
)
def test_trip_count_bounds_the_iterations_of_a_loop(lb, ub, step, expected):
    assert trip_count(lb, ub, step) == expected
