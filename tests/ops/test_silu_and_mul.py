import pytest
import torch
from conftest import DEVICE

from tritonkit.ops import get_spec, silu_and_mul
from tritonkit.ops.silu_and_mul.reference import silu_and_mul_reference
from tritonkit.testing import assert_valid, compare, tolerance_for

SPEC = get_spec("silu_and_mul")
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
DT_IDS = ("fp16", "bf16", "fp32")
# rows around the stacked-rows block, both column-tile boundaries, a real width: every family runs on these
FAMILY_SHAPES = [
    s for s in SPEC.boundary if (s["num_tokens"], s["d"]) in {(17, 80), (3, 1025), (5, 2048), (3, 2049), (3, 3584)}
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("shape", SPEC.boundary, ids=lambda s: s.id)
def test_boundary_randn(shape, dtype):
    assert_valid(SPEC, shape, dtype, "randn", device=DEVICE)


@pytest.mark.parametrize("family", [f for f in SPEC.families if f != "randn"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("shape", FAMILY_SHAPES, ids=lambda s: s.id)
def test_families(shape, dtype, family):
    assert_valid(SPEC, shape, dtype, family, device=DEVICE)


def test_family_shapes_exist():
    assert len(FAMILY_SHAPES) == 5


def _check_against_reference(x, y):
    assert y.shape == (*x.shape[:-1], x.shape[-1] // 2) and y.dtype == x.dtype and y.is_contiguous()
    c = compare(y, silu_and_mul_reference(x.double()), tolerance_for(x.dtype))
    assert c.passed, c.describe()


def test_leading_dims():
    x = torch.randn(2, 3, 5, 2 * 96, device=DEVICE, dtype=torch.float16)
    _check_against_reference(x, silu_and_mul(x))


def test_strided_rows():
    # rows of a wider buffer: the row stride is not 2d
    big = torch.randn(9, 2 * 160 + 24, device=DEVICE)
    x = big[:, 8 : 8 + 2 * 160]
    _check_against_reference(x, silu_and_mul(x))


def test_non_flattenable_leading_dims():
    # a transposed batch cannot be viewed as [rows, 2d]; the op copies the input, never the output
    x = torch.randn(4, 3, 2 * 64, device=DEVICE).transpose(0, 1)
    _check_against_reference(x, silu_and_mul(x))


@pytest.mark.parametrize("size", [(0, 128), (4, 0), (2, 0, 6)])
def test_empty(size):
    x = torch.empty(size, device=DEVICE)
    y = silu_and_mul(x)
    assert y.shape == (*size[:-1], size[-1] // 2)


def test_special_values():
    # silu(-inf) is NaN (g / (1 + exp(-g)), as torch), silu(+inf) * 2 is inf, silu(0) * inf is NaN
    x = torch.tensor([[float("-inf"), float("inf"), 0.0, float("nan"), 1.0, 2.0, float("inf"), 1.0]], device=DEVICE)
    y = silu_and_mul(x)
    expected = torch.nn.functional.silu(x[:, :4]) * x[:, 4:]
    torch.testing.assert_close(y, expected, equal_nan=True)
    assert torch.isnan(y[0, 0]) and y[0, 1] == float("inf") and torch.isnan(y[0, 2]) and torch.isnan(y[0, 3])


def test_fp16_overflow_is_inf_not_nan():
    # float32 math: silu(60000) * 60000 is 3.6e9, which rounds to fp16 inf (not NaN, not a wrapped value)
    x = torch.full((3, 2 * 17), 60000.0, device=DEVICE, dtype=torch.float16)
    assert torch.isposinf(silu_and_mul(x)).all()


@pytest.mark.parametrize(
    "make,exc,name",
    [
        (lambda: torch.randn(4, 7), ValueError, "x"),  # odd last dim
        (lambda: torch.randn(4, 8, dtype=torch.float64), TypeError, "x"),
        (lambda: torch.ones(4, 8, dtype=torch.int32), TypeError, "x"),
        (lambda: torch.tensor(1.0), ValueError, "x"),  # 0-d
        (lambda: torch.randn(4, 16)[:, ::2], ValueError, "x"),  # last dim not contiguous
        (lambda: [[1.0, 2.0]], TypeError, "x"),
    ],
    ids=["odd-last-dim", "float64", "int32", "0-d", "strided-last-dim", "not-a-tensor"],
)
def test_bad_input(make, exc, name):
    x = make()
    before = x.clone() if isinstance(x, torch.Tensor) else None
    with pytest.raises(exc, match=rf"^{name} "):
        silu_and_mul(x)
    if before is not None:
        assert torch.equal(x, before)


def test_odd_last_dim_message_says_what_was_expected():
    with pytest.raises(ValueError, match=r"even last dimension.*\(4, 7\)"):
        silu_and_mul(torch.randn(4, 7))


def _captured_targets(fn, *args):
    targets = []

    def backend(gm, example_inputs):
        targets.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm

    out = torch.compile(fn, backend=backend, fullgraph=True, dynamic=True)(*args)
    return out, targets


def test_torch_compile_records_one_custom_op():
    x = torch.randn(5, 2 * 80, device=DEVICE, dtype=torch.float16)
    y, targets = _captured_targets(lambda t: silu_and_mul(t) * 2, x)
    assert "tritonkit.silu_and_mul" in targets  # one opaque node, not the kernel traced through
    torch.testing.assert_close(y, silu_and_mul(x) * 2)


def test_torch_compile_aot_eager():
    f = torch.compile(lambda t: silu_and_mul(t) + 1, backend="aot_eager", fullgraph=True, dynamic=True)
    for t in (3, 17):
        x = torch.randn(t, 2 * 64, device=DEVICE)
        torch.testing.assert_close(f(x), silu_and_mul(x) + 1)
