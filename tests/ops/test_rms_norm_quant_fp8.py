"""rms_norm_quant_fp8: fp8 codes and scales equal to the float64 reference rounded as vLLM rounds (bytes compared,
not a tolerance), every scale layout, the argument errors, no write outside the outputs, one compile over the
num_tokens sweep. Kernels run under the interpreter: small shapes."""

import os

import pytest
import torch
from compile_keys import Recorder, specialization_keys
from fused_fma import fused_fma

from tritonkit.models import MODELS, NUM_TOKENS_SWEEP
from tritonkit.ops.rms_norm_quant_fp8 import api
from tritonkit.ops.rms_norm_quant_fp8 import config as api_config
from tritonkit.ops.rms_norm_quant_fp8.api import rms_norm_quant_fp8
from tritonkit.ops.rms_norm_quant_fp8.reference import rms_norm_quant_fp8_reference, scaled_fp8_quant_reference
from tritonkit.ops.rms_norm_quant_fp8.spec import SPEC
from tritonkit.testing import MetaFill
from tritonkit.testing.inputs import Fill

FP8 = torch.float8_e4m3fn
DTYPES = [torch.bfloat16, torch.float16, torch.float32]
EPS = 1e-6


def assert_same(out: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    """Bit for bit (fp8 as bytes: -0 and +0 differ, as they do to a GEMM reading them)."""
    assert out.shape == ref.shape, what
    ref = ref.to(out.dtype)
    out, ref = out.reshape(-1).view(torch.uint8), ref.reshape(-1).view(torch.uint8)
    bad = (out != ref).nonzero()
    assert bad.numel() == 0, f"{what}: {bad.shape[0]} elements differ, first at {bad[0].tolist()}"


def _check(x, w, quant, residual=None, scale=None, scale_ub=None, transposed=False, group=128):
    out = rms_norm_quant_fp8(
        x,
        w,
        EPS,
        quant=quant,
        scale=scale,
        scale_ub=scale_ub,
        residual=residual,
        group_size=group,
        transposed_scales=transposed,
    )
    ref = rms_norm_quant_fp8_reference(
        x.double(),
        w.double(),
        EPS,
        None if residual is None else residual.double(),
        quant,
        scale,
        scale_ub,
        group,
        x.dtype,
    )
    assert_same(out[0], ref["q"], "q")
    if quant != "static":
        assert_same(out[1], ref["scale"], "scale")
    if residual is not None:
        assert_same(out[2], ref["r"], "r")
    return out


# (num_tokens, hidden): one row and several, widths around the single-pass block sizes, 3 groups in a block of 4
SHAPES = [(1, 128), (7, 384), (17, 96), (3, 1000)]


@pytest.mark.parametrize("family", ["randn", "outlier", "tiny", "near_max", "constant", "nonfinite"])
@pytest.mark.parametrize("quant", ["static", "token", "group"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_codes_and_scales_equal_the_reference(dtype, quant, family):
    fill = Fill(family, "cpu", seed=1)
    for t, h in SHAPES:
        if quant == "group" and h % 128:
            continue
        x = fill((t, h), dtype)
        w = (1.0 + 0.1 * fill((h,), dtype, family="randn")).to(dtype)
        res = fill((t, h), dtype, family="randn")
        scale = torch.tensor([1 / 64]) if quant == "static" else None
        _check(x, w, quant, residual=res if t > 1 else None, scale=scale, transposed=quant == "group")


@pytest.mark.parametrize("family", ["randn", "outlier", "tiny", "near_max", "constant", "nonfinite"])
@pytest.mark.parametrize("quant", ["token", "group"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_the_gpus_division_through_the_reciprocal_gives_the_same_codes(monkeypatch, dtype, quant, family):
    """What every GPU runs (FUSED_FMA: y / scale as RN(y RN(1 / scale)) with Markstein's correction), here under the
    interpreter with its fma fused: the same codes and scales, streaming rows and plain quantization included."""
    fill = Fill(family, "cpu", seed=4)
    with fused_fma(monkeypatch):
        for t, h in SHAPES + [(2, 16384 + 128)]:
            if quant == "group" and h % 128:
                continue
            x = fill((t, h), dtype)
            w = (1.0 + 0.1 * fill((h,), dtype, family="randn")).to(dtype)
            _check(x, w, quant, residual=fill((t, h), dtype, family="randn"), transposed=quant == "group")
            q, s = api.quantize_fp8(x, quant)
            ref = scaled_fp8_quant_reference(x.reshape(-1, h), quant)
            assert_same(q.reshape(-1, h), ref["q"], "plain q")
            assert_same(s, ref["scale"], "plain scale")


def test_the_equality_has_teeth():
    """Dropping one of vLLM's rounding points (x * rstd to x's dtype) changes codes on this grid: the comparison
    above would catch a kernel that skipped it."""
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(17, 384, generator=gen).to(torch.bfloat16)
    w = (1 + 0.1 * torch.randn(384, generator=gen)).to(torch.bfloat16)
    q = rms_norm_quant_fp8(x, w, EPS, quant="token")[0]
    xs = x.double()
    rstd = (1 / torch.sqrt((xs * xs).mean(-1, keepdim=True) + EPS)).float().double()
    y = (xs * rstd * w.double()).to(torch.bfloat16).double()  # one rounding, not two
    s = (y.abs().amax(-1, keepdim=True) / 448).float().clamp(min=1 / (448 * 512)).double()
    one_rounding = (y / s).float().clamp(-448, 448).to(FP8)
    assert (q.view(torch.uint8) != one_rounding.view(torch.uint8)).any()


@pytest.mark.parametrize("quant", ["static", "token", "group"])
def test_streaming_rows_past_the_single_pass_bound(quant):
    gen = torch.Generator().manual_seed(3)
    h = 16384 + 128
    x = torch.randn(2, h, generator=gen).to(torch.bfloat16)
    res = torch.randn(2, h, generator=gen).to(torch.bfloat16)
    w = (1 + 0.1 * torch.randn(h, generator=gen)).to(torch.bfloat16)
    scale = torch.tensor([1 / 64]) if quant == "static" else None
    _check(x, w, quant, residual=res, scale=scale, transposed=True)


def test_scale_ub_bounds_the_amax_and_saturates():
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(9, 256, generator=gen).to(torch.bfloat16)
    w = torch.ones(256, dtype=torch.bfloat16)
    ub = torch.tensor([0.5])
    for quant in ("token", "group"):
        q, s = _check(x, w, quant, scale_ub=ub)
        assert torch.all(s == torch.tensor(0.5 / 448))  # every row's amax is past 0.5
        assert (q.float().abs() == 448).any()


def test_a_zero_row_takes_the_scale_floor():
    x = torch.zeros(2, 128, dtype=torch.bfloat16)
    q, s = _check(x, torch.ones(128, dtype=torch.bfloat16), "token")
    assert torch.all(s == torch.tensor(1 / (448 * 512), dtype=torch.float32)) and not q.float().any()


def test_scale_layouts():
    x = torch.randn(5, 384).to(torch.bfloat16)
    w = torch.ones(384, dtype=torch.bfloat16)
    q, s = rms_norm_quant_fp8(x, w, quant="token")
    assert s.shape == (5, 1)
    q, s = rms_norm_quant_fp8(x.reshape(5, 1, 384), w, quant="group")
    assert s.shape == (5, 3) and s.stride() == (3, 1) and q.shape == (5, 1, 384)
    q, st = rms_norm_quant_fp8(x, w, quant="group", transposed_scales=True)
    assert st.shape == (5, 3) and st.stride() == (1, 5) and torch.equal(st, s)


def test_inputs_are_not_modified():
    x = torch.randn(3, 256).to(torch.float16)
    res = torch.randn(3, 256).to(torch.float16)
    x0, r0 = x.clone(), res.clone()
    rms_norm_quant_fp8(x, torch.ones(256, dtype=torch.float16), quant="token", residual=res)
    assert torch.equal(x, x0) and torch.equal(res, r0)


# -- errors, raised before anything is written -------------------------------------------------------------------
def _args(**kw):
    base = dict(x=torch.randn(4, 256), weight=torch.ones(256), eps=EPS, quant="token")
    base.update(kw)
    return base


@pytest.mark.parametrize(
    "kw, exc, words",
    [
        (dict(x=torch.randn(4, 256).to(torch.int32)), TypeError, "x must have dtype"),
        (dict(weight=torch.ones(128)), ValueError, "weight must have shape (256,)"),
        (dict(eps=-1e-6), ValueError, "eps must be a finite non-negative float"),
        (dict(eps=float("nan")), ValueError, "eps must be"),
        (dict(quant="tensor"), ValueError, "quant must be one of"),
        (dict(quant="group", group_size=96), ValueError, "group_size must be one of 64, 128"),
        (dict(x=torch.randn(4, 192), weight=torch.ones(192), quant="group"), ValueError, "must divide x's hidden"),
        (dict(quant="static"), ValueError, "scale is required"),
        (dict(quant="static", scale=torch.ones(2)), ValueError, "scale must hold one float32 element"),
        (dict(quant="static", scale=torch.ones(1, dtype=torch.float64)), TypeError, "scale must have dtype float32"),
        (dict(quant="static", scale=torch.ones(1), scale_ub=torch.ones(1)), ValueError, "scale_ub bounds dynamic"),
        (dict(scale=torch.ones(1)), ValueError, "scale must be None with quant='token'"),
        (dict(scale_ub=torch.ones(3)), ValueError, "scale_ub must hold one"),
        (dict(scale_ub=torch.ones(1, device="meta")), ValueError, "scale_ub is on meta"),
        (dict(residual=torch.randn(4, 128)), ValueError, "residual must have shape"),
        (dict(residual=torch.randn(4, 256).half()), TypeError, "residual must have x's dtype"),
        (dict(x=torch.randn(4, 512)[:, ::2]), ValueError, "x must be contiguous in its last dimension"),
    ],
)
def test_bad_arguments_are_named(kw, exc, words):
    a = _args(**kw)
    with pytest.raises(exc, match=words.replace("(", r"\(").replace(")", r"\)")):
        rms_norm_quant_fp8(a.pop("x"), a.pop("weight"), a.pop("eps"), **a)


@pytest.mark.parametrize("bad", [float("nan"), 0.0, float("inf"), -1.0, 1e-30])
def test_hostile_static_scales_write_only_the_output(bad):
    """A static scale of any value: every fp8 code is written (finite, saturated) and nothing past the output."""
    from tritonkit.ops.rms_norm_quant_fp8 import vllm

    x = torch.randn(3, 128).to(torch.bfloat16)
    buf = torch.full((5, 128), 0x7E, dtype=torch.uint8).view(FP8)  # 448: what a write would never leave at the edge
    buf.view(torch.uint8)[0] = 0x55
    buf.view(torch.uint8)[4] = 0x55
    vllm.rms_norm_static_fp8_quant(buf[1:4], x, torch.ones(128, dtype=torch.bfloat16), torch.tensor([bad]), EPS)
    assert torch.all(buf.view(torch.uint8)[0] == 0x55) and torch.all(buf.view(torch.uint8)[4] == 0x55)
    assert not torch.isnan(buf[1:4].float()).any()


# -- the dynamic modes' early weight (TRITONKIT_RMS_QUANT_EARLY_W) ----------------------------------------------------
def test_the_early_weight_switch_reads_the_environment():
    setting = os.environ.get("TRITONKIT_RMS_QUANT_EARLY_W", "").strip()
    assert api_config.DYNAMIC_EARLY_W is (None if setting == "" else setting != "0")


@pytest.mark.parametrize("quant", ["token", "group"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_the_early_weight_gives_the_same_codes(monkeypatch, dtype, quant):
    monkeypatch.setattr(api_config, "DYNAMIC_EARLY_W", True)
    rec = Recorder()
    kernel = api._rms_norm_quant_fp8_kernel
    monkeypatch.setattr(api, "_rms_norm_quant_fp8_kernel", rec)
    api.rms_norm_quant_fp8(torch.zeros(2, 384, dtype=dtype), torch.ones(384, dtype=dtype), EPS, quant=quant)
    assert rec.launches[0][2]["EARLY_W"] is True  # the path under test is the one taken
    monkeypatch.setattr(api, "_rms_norm_quant_fp8_kernel", kernel)
    fill = Fill("outlier", "cpu", seed=7)
    with fused_fma(monkeypatch):
        for t, h in SHAPES + [(2, 4096)]:
            if quant == "group" and h % 128:
                continue
            x = fill((t, h), dtype)
            w = (1.0 + 0.1 * fill((h,), dtype, family="randn")).to(dtype)
            _check(x, w, quant, residual=fill((t, h), dtype, family="randn"), transposed=quant == "group")


@pytest.mark.parametrize("on", [False, True, None], ids=["off", "on", "default"])
def test_the_early_weight_is_capped_where_it_would_cost_programs(monkeypatch, on):
    # On: 8 warps (Llama-3-8B's 4096 columns) early under a 48-register cap; 16 warps (DeepSeek-V3's 7168) early,
    # uncapped; past 16 values a thread (16384 columns) late. Off: every dynamic row late, uncapped; static early.
    # Unset (the default): early only where capped (measured faster there at every token count; uncapped 16-warp
    # rows were 3% slower at 4096 tokens, config.py).
    monkeypatch.setattr(api_config, "DYNAMIC_EARLY_W", on)
    kernel = api._rms_norm_quant_fp8_kernel
    launches = {}
    for h in (4096, 7168, 16384):
        for quant in ("static", "token"):
            rec = Recorder()
            monkeypatch.setattr(api, "_rms_norm_quant_fp8_kernel", rec)
            w = torch.empty(h, dtype=torch.bfloat16, device="meta")
            scale = torch.ones(1, device="meta") if quant == "static" else None
            for t in (1, 3, 64, 4096):
                x = torch.empty(t, h, dtype=torch.bfloat16, device="meta")
                api.rms_norm_quant_fp8(x, w, EPS, quant=quant, scale=scale)
            launches[h, quant] = rec.launches
    monkeypatch.setattr(api, "_rms_norm_quant_fp8_kernel", kernel)
    got = [(kw["EARLY_W"], kw.get("maxnreg"), kw["num_warps"]) for (_, _, kw) in (ln[0] for ln in launches.values())]
    if on:
        assert got == [(True, None, 8), (True, 48, 8), (True, None, 16), (True, None, 16), (True, None, 16),
                       (False, None, 16)]  # fmt: skip
    elif on is None:
        assert got == [(True, None, 8), (True, 48, 8), (True, None, 16), (False, None, 16), (True, None, 16),
                       (False, None, 16)]  # fmt: skip
    else:
        assert got == [(True, None, 8), (False, None, 8), (True, None, 16), (False, None, 16), (True, None, 16),
                       (False, None, 16)]  # fmt: skip
    # one compile a width and mode over the token counts, the cap in its options where it applies
    for (h, quant), lns in launches.items():
        keys = specialization_keys(kernel, lns)
        assert len(keys) == 1, (h, quant)
        capped = on is not False and h == 4096 and quant == "token"
        assert ("'maxnreg': 48" in next(iter(keys))[1]) == capped, (h, quant, keys)


# -- one compile over the sweep ------------------------------------------------------------------------------------
@pytest.mark.parametrize("series", ["static", "per-token", "per-group"])
def test_one_compile_across_num_tokens(monkeypatch, series):
    kernel = api._rms_norm_quant_fp8_kernel
    rec = Recorder()
    monkeypatch.setattr(api, "_rms_norm_quant_fp8_kernel", rec)
    for t in NUM_TOKENS_SWEEP:
        shape = SPEC.sweep_series(MODELS["deepseek-v3"], t)[series]
        SPEC.call(SPEC.make_inputs(shape, torch.bfloat16, MetaFill()))
    monkeypatch.setattr(api, "_rms_norm_quant_fp8_kernel", kernel)
    assert len(rec.launches) == len(NUM_TOKENS_SWEEP)
    assert len(specialization_keys(kernel, rec.launches)) == 1
    assert max(grid[0] for grid, _, _ in rec.launches) == 65536


# -- the bench's providers -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("series", ["static", "per-token", "per-group"])
def test_bench_providers_pass_the_oracle_check(monkeypatch, series):
    """What `tritonkit bench` times beside the op, checked as it checks them (one e4m3 step): the unfused sequence of
    tritonkit's own ops and the eager reference; vLLM's CUDA ops are unavailable here with the import's reason."""
    import sys

    from tritonkit.bench import providers as P
    from tritonkit.models import ModelConfig

    monkeypatch.setitem(sys.modules, "vllm", None)
    model = ModelConfig("tiny", hidden=256, intermediate=512, num_heads=4, num_kv_heads=4, head_dim=64, rotary_dim=64)
    shape = SPEC.sweep_series(model, 5)[series]
    inputs = SPEC.make_inputs(shape, torch.bfloat16, Fill("randn", "cpu", seed=5))
    oracle = P.reference(SPEC, torch.bfloat16, inputs)
    for name in ("tritonkit", "unfused", "eager"):
        got = P.check(P.make_provider(name, SPEC, torch.bfloat16), SPEC, torch.bfloat16, inputs, oracle)
        assert got.passed, (name, got.detail)
    with pytest.raises(P.Unavailable, match="vLLM's CUDA ops not importable"):
        P.make_provider("vllm", SPEC, torch.bfloat16)
