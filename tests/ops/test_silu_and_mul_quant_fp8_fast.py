"""silu_and_mul_quant_fp8's GPU fast paths, proven on the CPU by running the kernel's own device functions: the
float32 ``exp`` of bfloat16 STATIC and TOKEN (bit-exact activation for all 65536 bfloat16 g) and the division by a
scale through its reciprocal with Markstein's correction (equal to float32 division, specials included).

Both need ``tl.fma`` fused, as every GPU computes it; Triton 3.6's interpreter rounds ``x * y + z`` twice. Under the
interpreter the ``fused_fma`` fixture makes its fma round once (tests/ops/fused_fma.py) and turns the fast paths on;
on a GPU nothing is patched."""

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from fused_fma import INTERPRETING, fma_rn32
from fused_fma import fused_fma as interpreter_fma_fused

from tritonkit.ops import overrides
from tritonkit.ops._fp8_jit import div_by_scale, recip_rn
from tritonkit.ops.silu_and_mul_quant_fp8 import config
from tritonkit.ops.silu_and_mul_quant_fp8.api import silu_and_mul_quant_fp8
from tritonkit.ops.silu_and_mul_quant_fp8.kernel import STATIC, TOKEN, _act, _exp_neg_bf16
from tritonkit.ops.silu_and_mul_quant_fp8.reference import _activation, silu_and_mul_quant_fp8_reference
from tritonkit.testing.inputs import Fill

F32, F64 = np.float32, np.float64
DEVICE = "cpu" if INTERPRETING else "cuda"


@pytest.fixture
def fused_fma(monkeypatch):
    """Under the interpreter: its float32 fma fused, and the op's fast paths on (_fp8_jit.INTERPRETER_FMA_FUSED)."""
    with interpreter_fma_fused(monkeypatch, config, FAST_EXP=True):
        yield


@triton.jit
def _fma_probe(a_ptr, b_ptr, c_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(out_ptr + offs, tl.fma(tl.load(a_ptr + offs), tl.load(b_ptr + offs), tl.load(c_ptr + offs)))


def test_the_fixture_makes_fma_fused(fused_fma):
    """(1 + 2^-12)^2 = 1 + 2^-11 + 2^-24 is a float32 tie: alone it rounds to even, a tiny addend of either sign
    decides it (rounded in float64 first, the addend would vanish), and 1 + 2^-11 subtracted leaves 2^-24 exactly."""
    a = 1 + 2.0**-12
    cases = [
        (-(1 + 2.0**-11), 2.0**-24),
        (0.0, 1 + 2.0**-11),
        (2.0**-80, 1 + 2.0**-11 + 2.0**-23),
        (-(2.0**-80), 1 + 2.0**-11),
    ]
    c = torch.tensor([z for z, _ in cases], dtype=torch.float32, device=DEVICE)
    out = torch.empty_like(c)
    _fma_probe[(1,)](torch.full_like(c, a), torch.full_like(c, a), c, out, N=len(cases))
    assert out.cpu().tolist() == [want for _, want in cases]


def test_fma_rn32_rounds_once():
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((2, 4096)).astype(F32)
    z = np.concatenate([-(x[:2048].astype(F64) * y[:2048]).astype(F32), rng.standard_normal(2048).astype(F32)])
    got = fma_rn32(x, y, z)
    from fractions import Fraction

    for i in range(0, 4096, 7):
        exact = Fraction(float(x[i])) * Fraction(float(y[i])) + Fraction(float(z[i]))
        near = np.float32(float(exact))
        cands = [np.nextafter(near, F32(-np.inf)), near, np.nextafter(near, F32(np.inf))]
        want = min(cands, key=lambda v: (abs(Fraction(float(v)) - exact), int(np.float32(v).view(np.uint32)) & 1))
        assert got[i] == want, (x[i], y[i], z[i])


# -- the float32 exp: every bfloat16 g ---------------------------------------------------------------------------------
def _every_bf16() -> torch.Tensor:
    return (torch.arange(65536, dtype=torch.int32) << 16).view(torch.float32).to(torch.bfloat16)


@triton.jit
def _act_probe(x_ptr, y_ptr, d, QUANT: tl.constexpr, BLOCK: tl.constexpr, FUSED_FMA: tl.constexpr):  # noqa: N803
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < d
    tl.store(y_ptr + offs, _act(x_ptr + offs, d, mask, QUANT, x_ptr.dtype.element_ty, FUSED_FMA, FUSED_FMA), mask=mask)


@triton.jit
def _exp_probe(g_ptr, e_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(e_ptr + offs, _exp_neg_bf16(tl.load(g_ptr + offs)))


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """float32 equality of bit patterns, any NaN equal to any NaN (the fp8 conversion sends all of them to 448)."""
    return (a.view(torch.int32) == b.view(torch.int32)) | (a.isnan() & b.isnan())


@pytest.mark.parametrize("quant", [STATIC.value, TOKEN.value], ids=["static", "token"])
def test_fast_exp_activation_is_exact_for_every_bf16(fused_fma, quant):
    """The kernel's own ``_act`` with the float32 exp, on all 65536 bfloat16 g (NaNs, +-inf, subnormals, the exp
    overflow at g = -88.5 / -89, g past 20): ``rnd_bf16(g / (1 + e))`` (u = 1) equals the float64 reference's bit for
    bit."""
    g = _every_bf16()
    x = torch.cat([g, torch.ones_like(g)]).to(DEVICE)
    y = torch.full((65536,), float("nan"), device=DEVICE)
    block = 65536 if INTERPRETING else 1024
    _act_probe[(65536 // block,)](x, y, 65536, QUANT=quant, BLOCK=block, FUSED_FMA=True)
    want = _activation(torch.stack([g.double(), torch.ones(65536, dtype=torch.float64)], 1), "static", torch.bfloat16)
    same = _same_bits(y.cpu(), want[:, 0].float())
    assert same.all(), f"{int((~same).sum())} g differ, first {g[~same][:8].tolist()}"


def test_the_fast_exp_is_not_a_correctly_rounded_exp(fused_fma):
    """The equality above is the activation's, not the exp's: e itself differs from RN32(exp(-g)) on some g where it
    matters (1 + e differs), and the activation still matches."""
    g = _every_bf16().float().to(DEVICE)
    e = torch.empty_like(g)
    block = 65536 if INTERPRETING else 1024
    _exp_probe[(65536 // block,)](g, e, BLOCK=block)
    g, e = g.cpu(), e.cpu()
    rn = torch.exp(-g.double()).float()
    live = g.isfinite() & (g.abs() < 16)
    assert ((1 + e) != (1 + rn))[live].any()


# -- division by the scale: Markstein's correction from RN(1 / s) -----------------------------------------------------
@triton.jit
def _div_probe(y_ptr, s_ptr, q_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    y = tl.load(y_ptr + offs, mask=mask, other=1.0)
    s = tl.load(s_ptr + offs, mask=mask, other=1.0)
    tl.store(q_ptr + offs, div_by_scale(y, s, recip_rn(s, True), True), mask=mask)


def _divide(y: np.ndarray, s: np.ndarray) -> np.ndarray:
    yt, st = torch.from_numpy(y).to(DEVICE), torch.from_numpy(s).to(DEVICE)
    q = torch.full_like(yt, float("nan"))
    block = min(max(triton.next_power_of_2(len(y)), 16), 1 << 18) if INTERPRETING else 1024
    _div_probe[(triton.cdiv(len(y), block),)](yt, st, q, len(y), BLOCK=block)
    return q.cpu().numpy()


def _pairs(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(y, s) float32 where y / s stays normal: random significands and exponents, y of bf16 and fp16 precision, and
    the hard ones: s of all-ones significand, y / s within an ulp of a midpoint, y just below s (the product y RN(1/s)
    is off by up to 1.5 ulp there)."""
    rng = np.random.default_rng(seed)
    k = n // 6

    def f32(m, e):
        return np.ldexp(m, e).astype(F32)

    mant = lambda size, bits=24: rng.integers(1 << (bits - 1), 1 << bits, size) / (1 << (bits - 1))  # noqa: E731
    sign = lambda size: rng.choice([-1.0, 1.0], size)  # noqa: E731
    ys, ss = [], []
    # random significands and exponents; the scale's range [1 / (448 * 512), 3.4e38 / 448]
    ys.append(f32(sign(k) * mant(k), rng.integers(-60, 60, k)))
    ss.append(f32(mant(k), rng.integers(-17, 60, k)))
    # bf16 and fp16 values of y (the token mode's), random s
    for bits in (8, 11):
        ys.append(f32(sign(k) * mant(k, bits), rng.integers(-40, 40, k)))
        ss.append(f32(mant(k), rng.integers(-17, 30, k)))
    # s with all-ones or nearly all-ones significands
    ys.append(f32(sign(k) * mant(k), rng.integers(-20, 20, k)))
    ss.append(f32(2 - rng.integers(1, 8, k) * 2.0**-23, rng.integers(-17, 30, k)))
    # y / s next to a midpoint of float32: y = RN(m s) for a midpoint m, then nudged by an ulp or two
    m = (2 * rng.integers(1 << 23, 1 << 24, k) + 1) / 2.0**24  # odd at the 25th bit: a midpoint in [1, 2)
    s = mant(k).astype(F32)
    y = (m * s.astype(F64)).astype(F32)
    y = (y.view(np.int32) + rng.integers(-2, 3, k, dtype=np.int32)).view(F32)
    ys.append(y * sign(k).astype(F32))
    ss.append(s)
    # y just below s, both near 2
    s = (2 - rng.integers(1, 1 << 12, k) * 2.0**-23).astype(F32)
    ys.append((s.view(np.int32) - rng.integers(1, 1 << 12, k, dtype=np.int32)).view(F32))
    ss.append(s)
    return np.concatenate(ys), np.concatenate(ss)


def _assert_divides(y: np.ndarray, s: np.ndarray) -> None:
    q = _divide(y, s)
    with np.errstate(all="ignore"):
        want = (y / s).astype(F32)
    same = (q.view(np.int32) == want.view(np.int32)) | (np.isnan(q) & np.isnan(want))
    bad = np.flatnonzero(~same)
    assert bad.size == 0, (
        f"{bad.size} differ, first y={y[bad[:4]]} s={s[bad[:4]]} got {q[bad[:4]]} want {want[bad[:4]]}"
    )


@pytest.mark.parametrize("seed", [0, 1])
def test_markstein_division_equals_float32_division(fused_fma, seed):
    y, s = _pairs(6 * 20000, seed)
    _assert_divides(y, s)


@pytest.mark.slow
def test_markstein_division_equals_float32_division_many(fused_fma):
    for seed in range(2, 12):
        y, s = _pairs(6 * 200000, seed)
        _assert_divides(y, s)


def test_markstein_division_specials(fused_fma):
    """+-0 keep their sign; an overflowing y / s and y = +-inf give +-inf (448 after the clamp); s = inf gives +-0
    (NaN for y = +-inf); NaN stays NaN; 2^-10 (an e4m3 tie) and its neighbours stay exact."""
    inf, nan, big = np.inf, np.nan, 3.0e38
    pairs = [
        (0.0, 1.0),
        (-0.0, 1.0),
        (-0.0, 4.36e-6),
        (0.0, 7.6e35),
        (-0.0, inf),
        (1.5, inf),
        (-2.0, inf),
        (inf, 1.0),
        (-inf, 3.0),
        (inf, inf),
        (nan, 1.0),
        (nan, inf),
        (big, 4.36e-6),
        (-big, 1e-5),
        (big, 0.5),
        (-big, 0.75),
        (3.4e38, 1.0 - 2**-24),
        (2.0**-10 * 3, 3.0),
        (-(2.0**-10) * 0.7, 0.7),
        (2.0**-10 * 1.7 * (1 + 2**-23), 1.7),
    ]
    y = np.array([a for a, _ in pairs], F32)
    s = np.array([b for _, b in pairs], F32)
    _assert_divides(y, s)


def test_markstein_division_of_tiny_y_rounds_to_the_same_fp8(fused_fma):
    """Below ~2^-103 the remainder s q0 - y underflows and q may be an ulp off; such a quotient is far below e4m3's
    2^-10 and both quantize to a zero of y's sign."""
    y = np.array([1e-40, -3e-42, 1e-45, -1e-38, 2.0**-110, -(2.0**-104)], F32)
    s = np.array([4.36e-6, 1e-5, 4.36e-6, 7.6e35, 3.0, 1.5], F32)
    with np.errstate(all="ignore"):
        want = (y / s).astype(F32)
    got = _divide(y, s)
    assert (np.abs(got) < 2.0**-11).all() and (np.signbit(got) == np.signbit(want)).all()
    fp8 = lambda q: torch.from_numpy(q).to(torch.float8_e4m3fn).view(torch.uint8)  # noqa: E731
    assert torch.equal(fp8(got), fp8(want))


# -- the whole op with the fast paths on: codes and scales equal to the reference --------------------------------------
# rows stacked in a tile, two column tiles, Llama-3-8B's 14336 columns (per token: 7 chunks held in registers),
# MAX_TOKEN_ROW (8 chunks) and a per-token row past it (walked twice)
FAST_SHAPES = {
    "static": [(3, 80), (2, 2048 + 384)],
    "token": [(3, 80), (2, 2048 + 384), (1, 14336), (1, 16384), (1, 16384 + 130)],
    "group": [(3, 128), (2, 2048 + 384), (1, 14336)],
}
# a bound on the amax (token) or the scale (group): y / s then overflows float32 on near-max inputs
SCALE_UB = {"token": 1.5, "group": 2 / 448}


@pytest.mark.parametrize("family", ["randn", "outlier", "tiny", "near_max", "nonfinite"])
@pytest.mark.parametrize("quant", ["static", "token", "token-split", "group"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_codes_and_scales_with_the_fast_paths(fused_fma, dtype, quant, family):
    """The whole op with its GPU paths, on the difficult families: fp8 codes and scales equal the reference's.
    token-split: the per-token rows split across programs (config.TOKEN_SPLIT_ROWS; on a GPU, its second launch a
    programmatic dependent of the first)."""
    split = quant == "token-split"
    quant = "token" if split else quant
    fill = Fill(family, DEVICE, seed=7)
    # "token" is the one-program row (the split off), "token-split" the split one on every row these shapes have
    rows = 4 if split else 0
    with overrides(config, TOKEN_SPLIT_ROWS=rows, TOKEN_SPLIT_ROWS_STREAMED=rows):
        _codes_and_scales(fill, dtype, quant, family)


def _codes_and_scales(fill, dtype, quant, family):
    for t, d in FAST_SHAPES[quant]:
        x = fill((t, 2 * d), dtype)
        scale = torch.tensor([1 / 64], device=DEVICE) if quant == "static" else None
        bounded = quant != "static" and family in ("outlier", "near_max")
        ub = torch.tensor([SCALE_UB[quant]], device=DEVICE) if bounded else None
        q, s = silu_and_mul_quant_fp8(x, quant=quant, scale=scale, scale_ub=ub)
        ref = silu_and_mul_quant_fp8_reference(x.double(), quant, scale, ub, 128, dtype)
        got, want = q.cpu().view(torch.uint8), ref["q"].to(q.dtype).cpu().view(torch.uint8)
        assert torch.equal(got, want), f"{(got != want).sum()} codes differ at d={d}"
        assert torch.equal(s.cpu().view(torch.int32), ref["scale"].float().cpu().view(torch.int32))
