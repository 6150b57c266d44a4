import dataclasses
import warnings

import pytest
import torch
from conftest import DEVICE, ON_GPU

from tritonkit.ops import get_spec
from tritonkit.spec import Shape
from tritonkit.testing import assert_valid, validate_case

pytestmark = pytest.mark.skipif(ON_GPU, reason="the warnings are those of Triton's CPU interpreter")

# the smallest cases that make the interpreter warn: numpy overflow in exp/cast (silu of near-max inputs), and
# numpy's deprecated int(array) in the interpreter's tensor.__index__ (paged_attention's loops)
SILU = (get_spec("silu_and_mul"), Shape(num_tokens=1, d=8), torch.float16, "near_max")
PAGED = (
    get_spec("paged_attention"),
    Shape(num_seqs=1, q_len=1, context=0, num_heads=2, num_kv_heads=1, head_dim=16, block_size=16),
    torch.float16,
    "randn",
)


@pytest.mark.parametrize("case", [SILU, PAGED], ids=["overflow", "int-of-array"])
def test_interpreter_warnings_do_not_reach_the_caller(case):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert_valid(*case, device=DEVICE)
    assert [f"{w.category.__name__}: {w.message}" for w in seen] == []


def test_the_filter_ends_with_the_call_and_spares_the_callers_warnings():
    spec, shape, dtype, family = SILU
    before = list(warnings.filters)

    def call(inputs):
        # the user's own code warning with a numpy-like message: not Triton's, so it must show
        warnings.warn("overflow encountered in my own code", RuntimeWarning)
        return spec.call(inputs)

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert validate_case(dataclasses.replace(spec, call=call), shape, dtype, family, device=DEVICE).passed
        assert warnings.filters[1:] == before
    assert [str(w.message) for w in seen] == ["overflow encountered in my own code"]
