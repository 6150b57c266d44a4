import pytest
import torch
from conftest import DEVICE

from tritonkit.ops import rms_norm
from tritonkit.ops.rms_norm.spec import SPEC
from tritonkit.spec import Shape
from tritonkit.testing import assert_valid

DTYPES = [torch.float16, torch.bfloat16, torch.float32]


@pytest.mark.parametrize("shape", SPEC.boundary, ids=lambda s: s.id)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_boundary_randn(shape, dtype):
    assert_valid(SPEC, shape, dtype, "randn", device=DEVICE)


HARD = [
    Shape(num_tokens=7, hidden=96, residual=1),
    Shape(num_tokens=3, hidden=5120, residual=0),
    Shape(num_tokens=2, hidden=16385, residual=1),
]


@pytest.mark.parametrize("shape", HARD, ids=lambda s: s.id)
@pytest.mark.parametrize("family", [f for f in SPEC.families if f != "randn"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_hard_families(shape, dtype, family):
    assert_valid(SPEC, shape, dtype, family, device=DEVICE)


def test_fp16_near_max_is_finite_and_correct():
    # squares of 60000 overflow fp16 (and a naive fp16 sum): statistics must be float32
    x = torch.full((4, 1024), 60000.0, dtype=torch.float16, device=DEVICE)
    x[:, ::2] = -60000.0
    y = rms_norm(x, torch.ones(1024, dtype=torch.float16, device=DEVICE))
    assert torch.isfinite(y).all()
    torch.testing.assert_close(y.abs().float(), torch.ones_like(y, dtype=torch.float32), rtol=1e-3, atol=0)


def test_float32_sum_of_squares_overflow_is_rescaled():
    # |x| = 1e30: x^2 overflows float32; the kernel redoes the sum on x / max|x|
    x = torch.tensor([[1e30, -1e30, 1e30, -1e30]], dtype=torch.float32, device=DEVICE)
    y = rms_norm(x, torch.ones(4, device=DEVICE))
    torch.testing.assert_close(y, torch.tensor([[1.0, -1.0, 1.0, -1.0]], device=DEVICE))


def test_residual_returns_rounded_sum_and_leaves_inputs():
    x = torch.randn(5, 96, dtype=torch.bfloat16, device=DEVICE)
    res = torch.randn(5, 96, dtype=torch.bfloat16, device=DEVICE)
    x0, res0 = x.clone(), res.clone()
    y, r = rms_norm(x, torch.ones(96, dtype=torch.bfloat16, device=DEVICE), residual=res)
    assert torch.equal(x, x0) and torch.equal(res, res0)
    # the interpreter rounds float32 -> bf16 toward zero, the GPU to nearest: allow one ulp
    torch.testing.assert_close(r, (x.float() + res.float()).to(torch.bfloat16), rtol=8e-3, atol=0)
    assert y.dtype == r.dtype == torch.bfloat16 and y.shape == r.shape == x.shape


def test_leading_dims_and_strided_rows():
    base = torch.randn(3, 4, 200, device=DEVICE)
    x = base[..., :128]  # rows strided by 200, last dim contiguous
    w = torch.randn(128, device=DEVICE)
    y = rms_norm(x, w)
    ref = x.double() * torch.rsqrt(x.double().square().mean(-1, keepdim=True) + 1e-6) * w.double()
    assert y.shape == (3, 4, 128) and y.is_contiguous()
    torch.testing.assert_close(y.double(), ref, rtol=1e-5, atol=1e-6)


def test_empty_rows():
    x = torch.empty(0, 64, device=DEVICE)
    assert rms_norm(x, torch.ones(64, device=DEVICE)).shape == (0, 64)


@pytest.mark.parametrize(
    "args,exc,needle",
    [
        (lambda: (torch.randn(4, 8, device=DEVICE).to(torch.int32), torch.ones(8, device=DEVICE)), TypeError, "x must"),
        (
            lambda: (torch.randn(4, 8, device=DEVICE), torch.ones(9, device=DEVICE)),
            ValueError,
            "weight must have shape",
        ),
        (lambda: (torch.randn(4, 8, device=DEVICE), torch.ones(8, 1, device=DEVICE)), ValueError, "weight must have 1"),
        (
            lambda: (torch.randn(8, 4, device=DEVICE).t(), torch.ones(8, device=DEVICE)),
            ValueError,
            "x must be contiguous",
        ),
        (
            lambda: (torch.randn(4, 0, device=DEVICE), torch.ones(0, device=DEVICE)),
            ValueError,
            "x must have a non-empty",
        ),
        (lambda: (torch.randn(4, 8, device=DEVICE), [1.0] * 8), TypeError, "weight must be a torch.Tensor"),
        (lambda: (torch.randn(4, 8, device=DEVICE), torch.ones(8, device="meta")), ValueError, "weight is on meta"),
    ],
)
def test_bad_input(args, exc, needle):
    x, w = args()
    with pytest.raises(exc, match=needle):
        rms_norm(x, w)


def test_bad_residual_and_eps():
    x = torch.randn(4, 8, device=DEVICE)
    w = torch.ones(8, device=DEVICE)
    with pytest.raises(TypeError, match="residual must have x's dtype"):
        rms_norm(x, w, residual=torch.randn(4, 8, dtype=torch.float16, device=DEVICE))
    with pytest.raises(ValueError, match="residual must have shape"):
        rms_norm(x, w, residual=torch.randn(4, 9, device=DEVICE))
    with pytest.raises(ValueError, match="eps must be"):
        rms_norm(x, w, -1.0)


def test_torch_compile_records_custom_op():
    x = torch.randn(4, 64, device=DEVICE)
    w = torch.randn(64, device=DEVICE)
    r = torch.randn(4, 64, device=DEVICE)
    seen = []

    def backend(gm, example_inputs):
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward

    fn = torch.compile(lambda x, w, r: rms_norm(x, w, residual=r)[0] + rms_norm(x, w), backend=backend, fullgraph=True)
    out = fn(x, w, r)
    assert any("tritonkit.fused_add_rms_norm" in s for s in seen) and any("tritonkit.rms_norm" in s for s in seen)
    torch.testing.assert_close(out, rms_norm(x, w, residual=r)[0] + rms_norm(x, w))


def test_custom_op_fake_tensor_shapes():
    torch.library.opcheck(
        torch.ops.tritonkit.rms_norm.default,
        (torch.randn(3, 32, device=DEVICE), torch.randn(32, device=DEVICE), 1e-6),
        test_utils=("test_schema", "test_faketensor"),
    )


def test_nonfinite_row_is_all_nan_and_other_rows_unaffected():
    x = torch.randn(3, 64, device=DEVICE)
    x[0, 5] = float("inf")
    x[1, 7] = float("nan")
    y = rms_norm(x, torch.ones(64, device=DEVICE))
    assert torch.isnan(y[0]).all() and torch.isnan(y[1]).all()
    ref = x[2].double() * torch.rsqrt(x[2].double().square().mean() + 1e-6)
    torch.testing.assert_close(y[2].double(), ref, rtol=1e-5, atol=1e-6)
