"""vLLM 0.34.0's call forms of the fused fp8 ops and of scaled_fp8_quant: vLLM's arguments, returns, scale layouts
and in-place residual, with codes equal to the float64 reference (bytes compared)."""

import pytest
import torch

from tritonkit.ops.rms_norm_quant_fp8 import vllm as rms_vllm
from tritonkit.ops.rms_norm_quant_fp8.api import rms_norm_quant_fp8
from tritonkit.ops.rms_norm_quant_fp8.reference import rms_norm_quant_fp8_reference, scaled_fp8_quant_reference
from tritonkit.ops.silu_and_mul_quant_fp8 import vllm as silu_vllm
from tritonkit.ops.silu_and_mul_quant_fp8.api import silu_and_mul_quant_fp8

FP8 = torch.float8_e4m3fn
EPS = 1e-5


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    b = b.to(a.dtype)
    return a.shape == b.shape and torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


def _x(t, h, seed=0, scale=1.0):
    return (scale * torch.randn(t, h, generator=torch.Generator().manual_seed(seed))).to(torch.bfloat16)


# -- scaled_fp8_quant -----------------------------------------------------------------------------------------------
def test_static_per_tensor_returns_the_scale_passed():
    x, s = _x(5, 256), torch.tensor([0.01])
    q, out_s = rms_vllm.scaled_fp8_quant(x, s)
    assert out_s is s and q.dtype == FP8
    assert same(q, scaled_fp8_quant_reference(x.double(), "static", s)["q"])


@pytest.mark.parametrize("group_shape, scale_shape", [((-1, 1), (256,)), ((1, -1), (6,)), ((1, 128), (6, 2))])
def test_static_group_scales(group_shape, scale_shape):
    x = _x(6, 256, 1)
    s = 0.001 + 0.02 * torch.rand(scale_shape, generator=torch.Generator().manual_seed(2))
    q, _ = rms_vllm.scaled_fp8_quant(x, s, group_shape=group_shape)
    gm, gn = (6 if group_shape[0] == -1 else group_shape[0]), (256 if group_shape[1] == -1 else group_shape[1])
    assert same(q, scaled_fp8_quant_reference(x.double(), "static", s, group_shape=(gm, gn))["q"])


def test_a_1d_scale_needs_group_shape():
    with pytest.raises(ValueError, match="a 1-d scale needs group_shape"):
        rms_vllm.scaled_fp8_quant(_x(4, 256), torch.ones(256))


def test_dynamic_per_tensor_and_its_zero_input():
    x = _x(7, 384, 3, 5.0)
    q, s = rms_vllm.scaled_fp8_quant(x)
    ref = scaled_fp8_quant_reference(x.double(), "tensor")
    assert s.shape == (1,) and same(s, ref["scale"]) and same(q, ref["q"])
    # vLLM's per-tensor scale has no floor: zeros give scale 0, whose reciprocal it takes as 0 (fp8_reciprocal_scale,
    # csrc/quantization/w8a8/fp8/common.cuh): codes 0, not 0 * inf clamped to 448; a row of any width
    for cols in (64, 13):
        q, s = rms_vllm.scaled_fp8_quant(torch.zeros(2, cols, dtype=torch.bfloat16))
        assert float(s) == 0 and torch.all(q.view(torch.uint8) == 0)
        assert same(q, scaled_fp8_quant_reference(torch.zeros(2, cols, dtype=torch.float64), "tensor")["q"])


@pytest.mark.parametrize(
    ("cols", "group_shape", "zero_codes"),
    [
        (64, None, True),  # per tensor, a row of a multiple of 16: vLLM's vectorized path, reciprocal 0
        (40, None, False),  # per tensor, 40 columns: its scalar path, 1 / 0 = inf, x * inf clamped to +-448
        (64, (1, 32), True),  # 2-d groups of 32 columns: vectorized
        (64, (1, 8), False),  # groups of 8 columns: scalar
    ],
)
def test_a_zero_static_scale_as_vllm_takes_it(cols, group_shape, zero_codes):
    x = _x(4, cols, 6, 2.0)
    if group_shape is None:
        s = torch.zeros(1)
    else:
        s = torch.zeros(4 // group_shape[0], cols // group_shape[1])
        s[0, -1] = 0.5  # one nonzero group scale among the zeros
    q, _ = rms_vllm.scaled_fp8_quant(x, s, group_shape=group_shape)
    ref = scaled_fp8_quant_reference(x.double(), "static", s, group_shape=group_shape)
    assert same(q, ref["q"])
    zero_group = q[:, : (group_shape or (1, cols))[1]].float()
    assert torch.all(zero_group == 0) if zero_codes else torch.all(zero_group.abs() == 448)


def test_dynamic_per_token_with_scale_ub_and_padding():
    x, ub = _x(5, 256, 4, 3.0), torch.tensor([1.5])
    q, s = rms_vllm.scaled_fp8_quant(x, scale_ub=ub, num_token_padding=8, use_per_token_if_dynamic=True)
    assert q.shape == (8, 256) and s.shape == (8, 1)
    ref = scaled_fp8_quant_reference(x.double(), "token", scale_ub=ub)
    assert same(q[:5], ref["q"]) and same(s[:5], ref["scale"])


def test_output_buffer_and_its_errors():
    x = _x(4, 128)
    buf = torch.empty(4, 128, dtype=FP8)
    q, _ = rms_vllm.scaled_fp8_quant(x, output=buf, use_per_token_if_dynamic=True)
    assert q is buf
    with pytest.raises(ValueError, match="num_token_padding must be None when output is passed"):
        rms_vllm.scaled_fp8_quant(x, output=buf, num_token_padding=8)
    with pytest.raises(TypeError, match="output must have dtype float8_e4m3fn"):
        rms_vllm.scaled_fp8_quant(x, output=torch.empty(4, 128))
    with pytest.raises(ValueError, match="input must be a 2-d"):
        rms_vllm.scaled_fp8_quant(x.reshape(2, 2, 128))


# -- fused RMSNorm forms --------------------------------------------------------------------------------------------
def test_dynamic_per_token_quant_adds_into_the_residual_in_place():
    x, res, w = _x(6, 256, 5), _x(6, 256, 6), _x(1, 256, 7).reshape(256)
    ref = rms_norm_quant_fp8_reference(x.double(), w.double(), EPS, res.double(), "token", None, None, 128, x.dtype)
    res_in = res.clone()
    q, s = rms_vllm.rms_norm_dynamic_per_token_quant(x, w, EPS, FP8, None, res_in)
    assert s.shape == (6, 1) and same(q, ref["q"]) and same(s, ref["scale"]) and same(res_in, ref["r"])


@pytest.mark.parametrize("transposed, tma", [(False, 0), (True, 0), (True, 4)])
def test_per_block_quant_layouts(transposed, tma):
    x, w = _x(5, 384, 8), torch.ones(384, dtype=torch.bfloat16)
    q, s = rms_vllm.rms_norm_per_block_quant(x, w, EPS, FP8, [1, 128], None, None, transposed, tma)
    ref = rms_norm_quant_fp8_reference(x.double(), w.double(), EPS, None, "group", None, None, 128, x.dtype)
    assert same(q, ref["q"]) and same(s, ref["scale"])
    assert s.stride() == ((1, 8) if tma else (1, 5) if transposed else (3, 1))


def test_per_block_quant_rejects_group_sizes_vllm_does_not_take():
    with pytest.raises(ValueError, match="group_size must be one of 64, 128"):
        rms_vllm.rms_norm_per_block_quant(_x(2, 384), torch.ones(384), EPS, FP8, [1, 96])
    with pytest.raises(TypeError, match="quant_dtype must be torch.float8_e4m3fn"):
        rms_vllm.rms_norm_per_block_quant(_x(2, 384), torch.ones(384), EPS, torch.int8, [1, 128])


def test_static_forms():
    x, res, w, s = _x(3, 256, 9), _x(3, 256, 10), torch.ones(256, dtype=torch.bfloat16), torch.tensor([0.02])
    out = torch.empty(3, 256, dtype=FP8)
    rms_vllm.rms_norm_static_fp8_quant(out, x, w, s, EPS)
    assert same(out, rms_norm_quant_fp8(x, w, EPS, quant="static", scale=s)[0])
    q, _, r = rms_norm_quant_fp8(x, w, EPS, quant="static", scale=s, residual=res)
    x0 = x.clone()
    rms_vllm.fused_add_rms_norm_static_fp8_quant(out, x, res, w, s, EPS)
    assert same(out, q) and same(res, r) and torch.equal(x, x0)
    with pytest.raises(ValueError, match="result must not overlap input"):
        rms_vllm.rms_norm_static_fp8_quant(x.view(FP8)[:, :256], x, w, s, EPS)


# -- SiLU-and-mul forms ---------------------------------------------------------------------------------------------
def _vllm_static_norm(x, w, scale, residual=None):
    """vLLM's static norm forms emulated in float32 torch: the residual sum rounded to x's dtype, normalized by a
    float32 rstd (the op's, from a float64 sum), ``scalar_t(x * rstd * w)`` once, then ``fp8(y * (1 / scale))``."""
    if residual is not None:
        x = (x.float() + residual.float()).to(x.dtype)
    xd = x.double()
    rstd = (
        1.0 / torch.sqrt((xd * xd).mean(-1, keepdim=True) + torch.tensor(EPS, dtype=torch.float32).double())
    ).float()
    y = (x.float() * rstd * w.float()).to(x.dtype)
    return (y.float() * (1.0 / scale)).clamp(-448, 448).to(FP8)


@pytest.mark.parametrize("with_residual", [False, True])
def test_static_forms_round_the_norm_once_as_vllm(with_residual):
    # vLLM 0.34's rms_norm_static_fp8_quant and fused_add_..._static round x * rstd * w to the dtype once
    # (csrc/layernorm_quant_kernels.cu), its dynamic forms twice; at bf16 8 x 256 the two differ in ~1% of the codes
    g = torch.Generator().manual_seed(1)
    x = torch.randn(8, 256, generator=g).to(torch.bfloat16)
    w = (0.5 + torch.rand(256, generator=g)).to(torch.bfloat16)
    res = torch.randn(8, 256, generator=g).to(torch.bfloat16) if with_residual else None
    scale = torch.tensor([0.01])
    out = torch.empty(8, 256, dtype=FP8)
    if with_residual:
        want = _vllm_static_norm(x, w, scale, res)
        rms_vllm.fused_add_rms_norm_static_fp8_quant(out, x, res, w, scale, EPS)
    else:
        want = _vllm_static_norm(x, w, scale)
        rms_vllm.rms_norm_static_fp8_quant(out, x, w, scale, EPS)
    assert same(out, want)


def test_per_block_quant_multiplies_by_the_groups_reciprocal():
    # vLLM's rms_norm_per_block_quant applies a group's scale as y * (1.0f / s) (layernorm_utils.cuh, mul_by_recip),
    # which here gives code 117 where the exact quotient y / s gives 116. x = 1 and eps = 0 make rstd 1 and y = w.
    amax, y = 0.19140625, 0.08544921875  # bf16 values
    w = torch.full((128,), y, dtype=torch.bfloat16)
    w[0] = amax
    q, s = rms_vllm.rms_norm_per_block_quant(torch.ones(1, 128, dtype=torch.bfloat16), w, 0.0, FP8, [1, 128])
    s32 = torch.tensor(amax, dtype=torch.float32) / 448.0
    assert float(s) == float(s32)
    assert q[0, 1].view(torch.uint8).item() == (torch.tensor(y) * (1.0 / s32)).to(FP8).view(torch.uint8).item() == 117


@pytest.mark.parametrize("transposed", [False, True])
def test_silu_and_mul_per_block_quant(transposed):
    x, ub = _x(9, 512, 11, 2.0), torch.tensor([0.004])
    q, s = silu_vllm.silu_and_mul_per_block_quant(x, 128, FP8, ub, transposed)
    q2, s2 = silu_and_mul_quant_fp8(x, quant="group", scale_ub=ub)
    assert same(q, q2) and torch.equal(s, s2) and s.shape == (9, 2)
    assert s.stride() == ((1, 9) if transposed else (2, 1))
    with pytest.raises(ValueError, match="input must be 2-d"):
        silu_vllm.silu_and_mul_per_block_quant(x.reshape(3, 3, 512), 128, FP8)


def test_silu_and_mul_quant_static_into_result():
    x, s = _x(4, 2 * 96, 12), torch.tensor([0.05])
    out = torch.empty(4, 96, dtype=FP8)
    silu_vllm.silu_and_mul_quant(out, x, s)
    assert same(out, silu_and_mul_quant_fp8(x, quant="static", scale=s)[0])
    with pytest.raises(ValueError, match="result must have shape"):
        silu_vllm.silu_and_mul_quant(torch.empty(4, 95, dtype=FP8), x, s)


def test_forms_trace_through_the_dispatcher():
    """Under FakeTensorMode (torch.compile's view) each form goes through its torch.library op: outputs of the
    right shape, dtype and strides, no Triton launch."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(6, 512, dtype=torch.bfloat16)
        q, s = silu_vllm.silu_and_mul_per_block_quant(x, 128, FP8, None, True)
        assert q.shape == (6, 256) and s.stride() == (1, 6)
        q, s = rms_vllm.rms_norm_dynamic_per_token_quant(x, torch.empty(512, dtype=torch.bfloat16), EPS, FP8)
        assert q.dtype == FP8 and s.shape == (6, 1)
        q, s = rms_norm_quant_fp8(x, torch.empty(512, dtype=torch.bfloat16), quant="group", transposed_scales=True)
        assert s.stride() == (1, 6)
        q, s = rms_vllm.scaled_fp8_quant(x, use_per_token_if_dynamic=True)
        assert s.shape == (6, 1)
