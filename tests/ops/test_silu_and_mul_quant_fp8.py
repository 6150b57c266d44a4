"""silu_and_mul_quant_fp8: fp8 codes and scales equal to the float64 reference rounded as vLLM rounds (bytes
compared, not a tolerance), both scale layouts, the argument errors, one compile over the num_tokens sweep. Kernels
run under the interpreter: small shapes."""

import pytest
import torch
from compile_keys import Recorder, specialization_keys
from op_check import check_op

from tritonkit.models import MODELS, NUM_TOKENS_SWEEP
from tritonkit.ops import overrides
from tritonkit.ops.silu_and_mul_quant_fp8 import api, config
from tritonkit.ops.silu_and_mul_quant_fp8.api import silu_and_mul_quant_fp8
from tritonkit.ops.silu_and_mul_quant_fp8.reference import silu_and_mul_quant_fp8_reference
from tritonkit.ops.silu_and_mul_quant_fp8.spec import SPEC
from tritonkit.testing import MetaFill
from tritonkit.testing.inputs import Fill

FP8 = torch.float8_e4m3fn
DTYPES = [torch.bfloat16, torch.float16, torch.float32]


def assert_same(out: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    """Bit for bit (fp8 as bytes: -0 and +0 differ, as they do to a GEMM reading them)."""
    assert out.shape == ref.shape, what
    ref = ref.to(out.dtype)
    out, ref = out.reshape(-1).view(torch.uint8), ref.reshape(-1).view(torch.uint8)
    bad = (out != ref).nonzero()
    assert bad.numel() == 0, f"{what}: {bad.shape[0]} bytes differ, first at {bad[0].tolist()}"


def _check(x, quant, scale=None, scale_ub=None, transposed=False, group=128):
    q, s = silu_and_mul_quant_fp8(
        x, quant=quant, scale=scale, scale_ub=scale_ub, group_size=group, transposed_scales=transposed
    )
    ref = silu_and_mul_quant_fp8_reference(x.double(), quant, scale, scale_ub, group, x.dtype)
    assert_same(q, ref["q"], "q")
    assert_same(s, ref["scale"], "scale")
    return q, s


# (num_tokens, d): one row and several, rows stacked in a tile (d 80), 3 groups in a tile of 4, two column tiles
SHAPES = [(1, 128), (17, 80), (7, 384), (3, 2048 + 128)]


@pytest.mark.parametrize("family", ["randn", "outlier", "tiny", "near_max", "cancellation", "nonfinite"])
@pytest.mark.parametrize("quant", ["static", "token", "group"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_codes_and_scales_equal_the_reference(dtype, quant, family):
    fill = Fill(family, "cpu", seed=1)
    for t, d in SHAPES:
        if quant == "group" and d % 128:
            continue
        scale = torch.tensor([1 / 64]) if quant == "static" else None
        _check(fill((t, 2 * d), dtype), quant, scale=scale, transposed=quant == "group")


def test_the_equality_has_teeth():
    """vLLM's per-group kernel keeps the activation in float32, its silu_and_mul rounds it to x's dtype twice:
    quantizing the other one's activation changes codes on this grid."""
    x = torch.randn(17, 768, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    q, _ = silu_and_mul_quant_fp8(x, quant="group")
    g = x.double()[:, :384]
    u = x.double()[:, 384:]
    y = (torch.nn.functional.silu(g) * u).to(torch.bfloat16).double().reshape(17, 3, 128)
    s = (y.abs().amax(-1, keepdim=True) / 448).float().double()
    other = (y / s).float().clamp(-448, 448).to(FP8).reshape(17, 384)
    assert (q.view(torch.uint8) != other.view(torch.uint8)).any()


def test_streaming_token_rows():
    x = torch.randn(2, 2 * (16384 + 130), generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    _check(x, "token", scale_ub=torch.tensor([1.0]))


def test_scale_ub_bounds_the_scale_per_group_and_the_amax_per_token():
    x = (4 * torch.randn(5, 512, generator=torch.Generator().manual_seed(4))).to(torch.bfloat16)
    _, s = _check(x, "group", scale_ub=torch.tensor([1e-3]))
    assert torch.all(s == torch.tensor(1e-3))
    _, s = _check(x, "token", scale_ub=torch.tensor([0.5]))
    assert torch.all(s == torch.tensor(0.5 / 448))


def test_scale_layouts_and_leading_dims():
    x = torch.randn(2, 3, 512).to(torch.bfloat16)
    q, s = silu_and_mul_quant_fp8(x, quant="group")
    assert q.shape == (2, 3, 256) and s.shape == (6, 2) and s.stride() == (2, 1)
    q2, st = silu_and_mul_quant_fp8(x, quant="group", transposed_scales=True)
    assert st.stride() == (1, 6) and torch.equal(st, s) and torch.equal(q.view(torch.uint8), q2.view(torch.uint8))
    _, s = silu_and_mul_quant_fp8(x, quant="token")
    assert s.shape == (6, 1)


@pytest.mark.parametrize(
    "kw, exc, words",
    [
        (dict(x=torch.randn(4, 255)), ValueError, "x must have an even last dimension"),
        (dict(x=torch.randn(4, 256).to(torch.int8)), TypeError, "x must have dtype"),
        (dict(quant="group", group_size=32), ValueError, "group_size must be one of 64, 128"),
        (dict(x=torch.randn(4, 2 * 192), quant="group"), ValueError, "group_size 128 must divide d"),
        (dict(quant="static"), ValueError, "scale is required"),
        (dict(quant="static", scale=torch.ones(1, 2)), ValueError, "scale must hold one float32 element"),
        (dict(quant="token", scale=torch.ones(1)), ValueError, "scale must be None"),
        (dict(quant="token", scale_ub=torch.ones(1, dtype=torch.float16)), TypeError, "scale_ub must have dtype"),
    ],
)
def test_bad_arguments_are_named(kw, exc, words):
    x = kw.pop("x", torch.randn(4, 256))
    with pytest.raises(exc, match=words):
        silu_and_mul_quant_fp8(x, **kw)


@pytest.mark.parametrize("series", ["static", "per-token", "per-group"])
def test_one_compile_across_num_tokens(monkeypatch, series):
    kernel = api._silu_and_mul_quant_fp8_kernel
    rec = Recorder()
    monkeypatch.setattr(api, "_silu_and_mul_quant_fp8_kernel", rec)
    # the one-program rows at every size (the split rows' compiles: test_one_split_compile_per_phase_across_num_tokens)
    with overrides(config, TOKEN_SPLIT_ROWS=0, TOKEN_SPLIT_ROWS_STREAMED=0):
        for t in NUM_TOKENS_SWEEP:
            shape = SPEC.sweep_series(MODELS["deepseek-v3"], t)[series]
            SPEC.call(SPEC.make_inputs(shape, torch.bfloat16, MetaFill()))
    monkeypatch.setattr(api, "_silu_and_mul_quant_fp8_kernel", kernel)
    assert len(rec.launches) == len(NUM_TOKENS_SWEEP)
    assert len(specialization_keys(kernel, rec.launches)) == 1
    assert max(grid[1] for grid, _, _ in rec.launches) <= 65535


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


# -- per-token rows split across programs (config.TOKEN_SPLIT_ROWS) ------------------------------------------------
def _kernels_launched(monkeypatch, x, **kw):
    """The kernels one call launches, in order (run for real, under the interpreter)."""
    names = []
    real = api.launch

    def spy(kernel, *args, **kwargs):
        names.append((getattr(kernel, "fn", kernel).__name__, args[2].get("AMAX")))
        return real(kernel, *args, **kwargs)

    monkeypatch.setattr(api, "launch", spy)
    silu_and_mul_quant_fp8(x, quant="token", **kw)
    monkeypatch.setattr(api, "launch", real)
    return names


SPLIT = ("_silu_and_mul_quant_fp8_split_kernel", True), ("_silu_and_mul_quant_fp8_split_kernel", False)
ONE = (("_silu_and_mul_quant_fp8_kernel", None),)


# d: two parts, a last part of one column, a last part of 1023 (float32's 8 warps), 17 parts (a power of 2 plus one)
@pytest.mark.parametrize("family", ["randn", "outlier", "tiny", "near_max", "cancellation", "nonfinite"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_split_rows_equal_the_reference(dtype, family):
    fill = Fill(family, "cpu", seed=7)
    with overrides(config, TOKEN_SPLIT_ROWS=8):
        for t, d in ((1, 2048), (3, 2049), (2, 3 * 1024 + 1023), (1, 16 * 1024 + 5)):
            q, s = _check(fill((t, 2 * d), dtype), "token")
            assert s.shape == (t, 1)


def test_split_rows_bound_the_amax_by_scale_ub_and_fill_strided_outputs(monkeypatch):
    x = (4 * torch.randn(4, 2 * 2304, generator=torch.Generator().manual_seed(8))).to(torch.bfloat16)
    ub = torch.tensor([0.5])
    with overrides(config, TOKEN_SPLIT_ROWS=4):
        assert _kernels_launched(monkeypatch, x, scale_ub=ub) == list(SPLIT)
        _, s = _check(x, "token", scale_ub=ub)
        assert torch.all(s == torch.tensor(0.5 / 448))
        # leading dims and a row stride past the row (the vLLM form's buffers): the same bytes
        wide = torch.zeros(2, 2, 2 * 2304 + 64, dtype=torch.bfloat16)
        wide[..., : 2 * 2304] = x.reshape(2, 2, -1)
        q, s = silu_and_mul_quant_fp8(wide[..., : 2 * 2304], quant="token")
    q0, s0 = silu_and_mul_quant_fp8(x, quant="token")
    assert torch.equal(q.reshape(4, -1).view(torch.uint8), q0.view(torch.uint8)) and torch.equal(s, s0)


def test_split_rows_take_launch_intos_scale_bound_rule():
    """launch_into (the vLLM forms' surface) may bound the scale rather than the amax: the split rows do as the
    one-program rows do."""
    x = (4 * torch.randn(3, 2 * 2304, generator=torch.Generator().manual_seed(9))).to(torch.bfloat16)
    ub = torch.tensor([2e-3])
    got = []
    for rows in (0, 4):
        q = torch.empty(3, 2304, dtype=FP8)
        s = torch.empty(3, 1)
        with overrides(config, TOKEN_SPLIT_ROWS=rows):
            api.launch_into(x, q, s, "token", None, ub, 128, True)
        got.append((q.view(torch.uint8), s))
    assert torch.all(got[0][1] == torch.tensor(2e-3))
    assert torch.equal(got[0][0], got[1][0]) and torch.equal(got[0][1], got[1][1])


def test_which_calls_split_their_rows(monkeypatch):
    x = torch.randn(9, 2 * 1536).to(torch.bfloat16)
    # on by default up to 64 rows held in registers, 256 streamed ones (H100-timed; 0 turns either off)
    assert (config.TOKEN_SPLIT_ROWS, config.TOKEN_SPLIT_ROWS_STREAMED) == (64, 256)
    assert _kernels_launched(monkeypatch, x[:1]) == list(SPLIT)
    assert config.token_split(64, 16384, 2) is not None and config.token_split(65, 16384, 2) is None
    assert config.token_split(256, 16385, 2) is not None and config.token_split(257, 16385, 2) is None
    with overrides(config, TOKEN_SPLIT_ROWS=0):
        assert _kernels_launched(monkeypatch, x[:1]) == list(ONE)
        assert config.token_split(1, 16385, 2) is not None  # the streamed bound is its own
    with overrides(config, TOKEN_SPLIT_ROWS_STREAMED=0):
        assert config.token_split(1, 16385, 2) is None and config.token_split(1, 16384, 2) is not None
    with overrides(config, TOKEN_SPLIT_ROWS=8):
        assert _kernels_launched(monkeypatch, x[:8]) == list(SPLIT)
        assert _kernels_launched(monkeypatch, x) == list(ONE)  # more rows than the bound
        # a row one program's tile holds (d <= TOKEN_SPLIT_COLS), and one of more than TOKEN_SPLIT_MAX parts
        assert _kernels_launched(monkeypatch, torch.randn(1, 2 * 1024)) == list(ONE)
        assert config.token_split(1, 64 * 1024, 2) is not None and config.token_split(1, 64 * 1024 + 1, 2) is None
        # the other modes never split
        assert config.token_split_config(14336, 2).splits == 14
    # the scratch's second launch waits on the first only on sm_90+ (never on CPU tensors, the interpreter's)
    assert not config.token_split_pdl(torch.device("cpu"))


@pytest.mark.parametrize("model, bound", [("llama3-8b", 64), ("deepseek-v3", 256)])  # rows held, rows streamed
def test_one_split_compile_per_phase_across_num_tokens(monkeypatch, model, bound):
    """The default bounds: the split rows up to ``bound`` rows, the one-program rows past it, one compile each."""
    kernels = api._silu_and_mul_quant_fp8_kernel, api._silu_and_mul_quant_fp8_split_kernel
    recs = Recorder(), Recorder()
    monkeypatch.setattr(api, "_silu_and_mul_quant_fp8_kernel", recs[0])
    monkeypatch.setattr(api, "_silu_and_mul_quant_fp8_split_kernel", recs[1])
    for t in NUM_TOKENS_SWEEP:
        shape = SPEC.sweep_series(MODELS[model], t)["per-token"]
        SPEC.call(SPEC.make_inputs(shape, torch.bfloat16, MetaFill()))
    split = [n for n in NUM_TOKENS_SWEEP if n <= bound]
    assert len(recs[1].launches) == 2 * len(split) and len(recs[0].launches) == len(NUM_TOKENS_SWEEP) - len(split)
    assert len(specialization_keys(kernels[1], recs[1].launches)) == 2  # AMAX and the codes
    assert len(specialization_keys(kernels[0], recs[0].launches)) == 1


def test_the_checker_reads_the_split_rows(tmp_path):
    """`tritonkit check --op silu_and_mul_quant_fp8` with the split on: both launches (the second a programmatic
    dependent on the checker's sm_90) are compiled and read, with no finding."""
    d, err, rc = check_op("silu_and_mul_quant_fp8", {"TRITONKIT_SILU_QUANT_SPLIT_ROWS": "16"}, tmp_path)
    names = {k["kernel"] for k in d["kernels"]}
    assert "_silu_and_mul_quant_fp8_split_kernel" in names, (names, err[-2000:])
    assert d["findings"] == [] and d["problems"] == [], (d["findings"], d["problems"])
    assert rc == 0, err[-2000:]
