import math

import pytest
import torch

from tritonkit.testing import Tolerance, compare

TOL = Tolerance(1e-3, 1e-5, "test")


def test_within_tolerance_passes_and_reports_ratio():
    ref = torch.tensor([1.0, -2.0, 0.0], dtype=torch.float64)
    out = torch.tensor([1.0005, -2.001, 5e-6], dtype=torch.float32)
    c = compare(out, ref, TOL)
    assert c.passed
    # 1.0005 vs 1: 5e-4 / (1e-5 + 1e-3) ~ 0.495
    assert 0.45 < c.error < 0.55 and c.mismatches == 0


def test_outside_tolerance_fails_with_location():
    ref = torch.zeros(2, 3, dtype=torch.float64)
    out = torch.zeros(2, 3)
    out[1, 2] = 1e-3
    c = compare(out, ref, TOL)
    assert not c.passed and c.mismatches == 1 and c.first_bad == (1, 2)
    assert c.error == pytest.approx(1e-3 / 1e-5, rel=1e-3)


def test_unwritten_nan_fails():
    out = torch.tensor([1.0, float("nan")])
    assert not compare(out, torch.tensor([1.0, 2.0], dtype=torch.float64), TOL).passed


def test_nan_reference_requires_nan():
    ref = torch.tensor([float("nan"), 1.0], dtype=torch.float64)
    assert compare(torch.tensor([float("nan"), 1.0]), ref, TOL).passed
    assert not compare(torch.tensor([0.0, 1.0]), ref, TOL).passed


def test_overflow_in_output_dtype_expects_inf():
    ref = torch.tensor([70000.0, 65504.0, 65519.0, -65520.0], dtype=torch.float64)
    ok = torch.tensor([math.inf, 65504.0, 65504.0, -math.inf], dtype=torch.float16)
    assert compare(ok, ref, TOL).passed
    # 65519 rounds to 65504 in fp16, so inf there is wrong
    bad = torch.tensor([math.inf, 65504.0, math.inf, -math.inf], dtype=torch.float16)
    assert not compare(bad, ref, TOL).passed


def test_inf_where_finite_expected_fails():
    c = compare(torch.tensor([math.inf]), torch.tensor([1.0], dtype=torch.float64), TOL)
    assert not c.passed and c.error == math.inf


def test_shape_mismatch_raises():
    with pytest.raises(ValueError, match="shape"):
        compare(torch.zeros(3), torch.zeros(4, dtype=torch.float64), TOL)


LOOSE = Tolerance(1e-2, 1.0, "loose: would let an id off by one pass if integers went through it")


def test_integer_outputs_compare_exactly_whatever_the_tolerance():
    ref = torch.tensor([[0, 7], [4095, 3]], dtype=torch.int32)
    c = compare(ref.clone(), ref, LOOSE)
    assert c.passed and c.error == 0.0 and c.mismatches == 0
    off = ref.clone()
    off[1, 0] = 4096
    c = compare(off, ref, LOOSE)
    assert not c.passed and c.error == math.inf and c.mismatches == 1 and c.first_bad == (1, 0)
    assert c.first_bad_values == (4096, 4095)


def test_unwritten_int32_poison_fails():
    from tritonkit.ops import _alloc, poison_outputs

    ref = torch.tensor([3, 1, 2], dtype=torch.int32)
    with poison_outputs():
        out = _alloc.empty((3,), torch.int32, torch.device("cpu"))
    assert out.tolist() == [-(2**31)] * 3
    out[:2] = ref[:2]
    c = compare(out, ref, LOOSE)
    assert not c.passed and c.mismatches == 1 and c.first_bad == (2,)
    assert "got -2147483648, expected 2" in c.describe()


def test_int64_past_2_to_53_is_exact():
    # 2^53 + 1 and 2^53 are one float64: an int64 comparison tells them apart
    ref = torch.tensor([2**53 + 1], dtype=torch.int64)
    assert compare(ref.clone(), ref, LOOSE).passed
    assert not compare(torch.tensor([2**53]), ref, LOOSE).passed


def test_bool_outputs_compare_exactly():
    ref = torch.tensor([True, False])
    assert compare(ref.clone(), ref, LOOSE).passed
    assert not compare(torch.tensor([True, True]), ref, LOOSE).passed


def test_integer_output_against_a_float_reference():
    ref = torch.tensor([1.0, 2.5, float("nan")], dtype=torch.float64)
    c = compare(torch.tensor([1, 2, 0], dtype=torch.int32), ref, LOOSE)
    assert c.mismatches == 2 and c.first_bad == (1,)


@pytest.mark.parametrize(
    "rtol, atol",
    [(-1e-3, 1e-5), (1e-3, -1e-5), (float("nan"), 1e-5), (1e-3, float("nan")), (float("inf"), 0.0), (0.0, 0.0)],
    ids=["neg-rtol", "neg-atol", "nan-rtol", "nan-atol", "inf-rtol", "both-zero"],
)
def test_a_tolerance_that_would_pass_everything_or_nothing_is_refused(rtol, atol):
    # a negative or NaN bound made every case pass ("worst error 0"): x*3 passed against x*2
    with pytest.raises(ValueError, match="Tolerance"):
        Tolerance(rtol, atol, "bad")
