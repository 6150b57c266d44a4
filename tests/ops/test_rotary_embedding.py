import math

import pytest
import torch
from conftest import DEVICE

from tritonkit.ops import get_spec, rotary_embedding
from tritonkit.ops.rotary_embedding.reference import rotary_embedding_reference
from tritonkit.ops.rotary_embedding.spec import _cos_sin_cache
from tritonkit.testing import Fill, assert_valid, compare, tolerance_for

SPEC = get_spec("rotary_embedding")
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
DT_IDS = ("fp16", "bf16", "fp32")
# GQA 28/4 fused, the 4-token block of 8/1 heads, partial gpt-j, non-power-of-two 80 gpt-j fused, the one-row cache
FAMILY_SHAPES = [SPEC.boundary[i] for i in (2, 6, 9, 12, 14)]


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("shape", SPEC.boundary, ids=lambda s: s.id)
def test_boundary_randn(shape, dtype):
    assert_valid(SPEC, shape, dtype, "randn", device=DEVICE)


@pytest.mark.parametrize("family", [f for f in SPEC.families if f != "randn"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("shape", FAMILY_SHAPES, ids=lambda s: s.id)
def test_families(shape, dtype, family):
    assert_valid(SPEC, shape, dtype, family, device=DEVICE)


def _inputs(t=5, hq=4, hk=2, d=64, rot=None, dtype=torch.float32, max_pos=64, cache_dtype=torch.float32, seed=0):
    g = torch.Generator(DEVICE).manual_seed(seed)
    q = torch.randn(t, hq, d, generator=g, device=DEVICE).to(dtype)
    k = torch.randn(t, hk, d, generator=g, device=DEVICE).to(dtype)
    pos = torch.randint(0, max_pos, (t,), generator=g, device=DEVICE)
    return pos, q, k, _cos_sin_cache(max_pos, rot or d, cache_dtype, DEVICE)


def _assert_matches_reference(pos, q0, k0, cache, is_neox, q, k):
    rq, rk = rotary_embedding_reference(pos, q0.double(), k0.double(), cache, is_neox)
    for out, ref in ((q, rq), (k, rk)):
        c = compare(out, ref, tolerance_for(out.dtype))
        assert c.passed, c.describe()


def _complex_rotation(x, cos, sin, is_neox):
    """The rotation as complex multiplication: an independent statement of neox vs gpt-j pairing."""
    half = cos.shape[-1]
    if is_neox:
        z = torch.complex(x[..., :half], x[..., half : 2 * half])
    else:
        z = torch.view_as_complex(x[..., : 2 * half].reshape(*x.shape[:-1], half, 2).contiguous())
    z = z * torch.complex(cos, sin)
    out = x.clone()
    if is_neox:
        out[..., :half], out[..., half : 2 * half] = z.real, z.imag
    else:
        out[..., : 2 * half] = torch.view_as_real(z).flatten(-2)
    return out


@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("rot", [64, 24], ids=["full", "partial"])
def test_pairing_matches_complex_multiplication(is_neox, rot):
    pos, q, k, cache = _inputs(d=64, rot=rot, dtype=torch.float64)
    cos, sin = cache[pos].double()[:, None, :].chunk(2, dim=-1)
    q32, k32 = q.float(), k.float()
    rotary_embedding(pos, q32, k32, cache, is_neox=is_neox)
    for out, x in ((q32, q), (k32, k)):
        torch.testing.assert_close(out.double(), _complex_rotation(x, cos, sin, is_neox), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
def test_partial_rotary_leaves_tail_bitwise(is_neox):
    pos, q, k, cache = _inputs(t=9, hq=3, hk=1, d=80, rot=32, dtype=torch.bfloat16)
    q0, k0 = q.clone(), k.clone()
    q[..., -1] = float("nan")  # a NaN in the tail stays exactly where it is
    q0[..., -1] = float("nan")
    rotary_embedding(pos, q, k, cache, is_neox=is_neox)
    assert torch.equal(q[..., 32:].view(torch.int16), q0[..., 32:].view(torch.int16))
    assert torch.equal(k[..., 32:], k0[..., 32:])
    assert not torch.equal(q[..., :32], q0[..., :32])
    _assert_matches_reference(pos, q0, k0, cache, is_neox, q, k)


@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
def test_fused_qkv_views_rotate_q_k_and_leave_v(is_neox):
    t, hq, hk, d = 7, 28, 4, 128
    qkv = torch.randn(t, (hq + 2 * hk) * d, device=DEVICE, dtype=torch.float16)
    qkv0 = qkv.clone()
    q = qkv[:, : hq * d].view(t, hq, d)
    k = qkv[:, hq * d : (hq + hk) * d].view(t, hk, d)
    assert not q.is_contiguous() and not k.is_contiguous()
    pos = torch.arange(100, 100 + t, device=DEVICE, dtype=torch.int32)
    cache = _cos_sin_cache(4096, d, torch.float16, DEVICE)
    out_q, out_k = rotary_embedding(pos, q, k, cache, is_neox=is_neox)
    assert out_q is q and out_k is k
    assert torch.equal(qkv[:, (hq + hk) * d :], qkv0[:, (hq + hk) * d :])
    _assert_matches_reference(
        pos, qkv0[:, : hq * d].view(t, hq, d), qkv0[:, hq * d : (hq + hk) * d].view(t, hk, d), cache, is_neox, q, k
    )


def test_head_major_layout():
    # q stored [H, T, D] and handed over as a [T, H, D] view: the head stride exceeds the token stride
    pos, q, k, cache = _inputs(t=6, hq=3, hk=2, d=32)
    qt = q.transpose(0, 1).contiguous().transpose(0, 1)
    q0, k0 = q.clone(), k.clone()
    rotary_embedding(pos, qt, k, cache)
    _assert_matches_reference(pos, q0, k0, cache, True, qt, k)


def test_k_none_rotates_q_only():
    pos, q, _, cache = _inputs()
    q0 = q.clone()
    out_q, out_k = rotary_embedding(pos, q, None, cache, is_neox=False)
    assert out_q is q and out_k is None
    torch.testing.assert_close(q, rotary_embedding_reference(pos, q0, None, cache, False)[0])


def test_position_zero_is_identity():
    pos, q, k, cache = _inputs(t=4)
    pos.zero_()
    q0, k0 = q.clone(), k.clone()
    rotary_embedding(pos, q, k, cache)
    assert torch.equal(q, q0) and torch.equal(k, k0)


def test_out_of_range_positions_give_nan_and_read_nothing():
    # the caller's contract; the kernel must not read outside the cache, and the bug must show
    pos, q, k, cache = _inputs(t=4, d=64, rot=32, max_pos=16)
    pos[1], pos[2] = 16, -1
    q0, k0 = q.clone(), k.clone()
    rotary_embedding(pos, q, k, cache)
    for out, x0 in ((q, q0), (k, k0)):
        assert torch.isnan(out[1:3, :, :32]).all()
        assert torch.equal(out[..., 32:], x0[..., 32:])
    ok = [0, 3]
    _assert_matches_reference(pos[ok], q0[ok], k0[ok], cache, True, q[ok], k[ok])


@pytest.mark.parametrize("cache_dtype", ["fp32", "model"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_cache_dtypes(dtype, cache_dtype):
    pos, q, k, cache = _inputs(dtype=dtype, cache_dtype=torch.float32 if cache_dtype == "fp32" else dtype)
    q0, k0 = q.clone(), k.clone()
    rotary_embedding(pos, q, k, cache)
    _assert_matches_reference(pos, q0, k0, cache, True, q, k)


# A float32 rotation errs by ulps of |x|, not of the output (the spec's error_scale carries that into validation).
# The same contract checked directly, by a coarser bound: |out - ref| <= 4 float32 ulps of the row's largest |x|
# plus the dtype's tolerance for rounding the output; overflow goes to inf exactly where the exact result does.
@pytest.mark.parametrize("family", ["near_max", "cancellation"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("shape", [SPEC.boundary[i] for i in (2, 9, 12)], ids=lambda s: s.id)
def test_large_inputs_error_scales_with_input(shape, dtype, family):
    if family == "near_max" and dtype == torch.bfloat16:
        pytest.skip("bf16 near its max overflows only with round-to-nearest; the interpreter truncates")
    inputs = SPEC.make_inputs(shape, dtype, Fill(family, DEVICE, seed=3))
    ref = SPEC.reference(
        {k: v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in inputs.items()},
        dtype,
    )
    before = {k: v.double() for k, v in inputs.items() if k in ("q", "k", "qkv")}
    out = SPEC.call(inputs)
    tol = tolerance_for(dtype)
    for name in out:
        o, r, x = out[name].double(), ref[name], before[name]
        if name == "qkv":
            x = x.view(x.shape[0], -1, shape["head_dim"])
            o, r = o.view_as(x), r.view_as(x)
        scale = x[..., : shape["rot_dim"]].abs().amax(-1, keepdim=True)
        expected = r.to(dtype).double()  # the exact result rounded: overflow becomes inf here
        inf = torch.isinf(expected)
        assert torch.equal(o[inf], expected[inf])
        bound = tol.atol + tol.rtol * r.abs() + 4 * 2.0**-24 * scale
        err = (o - r).abs()
        assert (err[~inf] <= bound[~inf]).all(), f"{name}: worst excess {float((err - bound)[~inf].max()):.3g}"


def test_fp16_overflow_is_inf():
    # (60000, 60000) rotated by pi/4 is (~0, 84853): the second overflows fp16, the first must stay small
    cache = torch.tensor([[math.cos(math.pi / 4), math.sin(math.pi / 4)]], device=DEVICE)
    q = torch.full((1, 1, 2), 60000.0, device=DEVICE, dtype=torch.float16)
    k = q.clone()
    rotary_embedding(torch.zeros(1, dtype=torch.int64, device=DEVICE), q, k, cache)
    assert q[0, 0, 1] == float("inf") and abs(float(q[0, 0, 0])) < 0.1


def _bad(**kw):
    pos, q, k, cache = _inputs(t=5, hq=4, hk=2, d=64, rot=32)
    args = {"positions": pos, "q": q, "k": k, "cos_sin_cache": cache, "is_neox": True}
    args.update({n: f(args) for n, f in kw.items()})
    return args


BAD = {
    "q-int": (dict(q=lambda a: a["q"].to(torch.int32)), TypeError, "q"),
    "q-float64": (dict(q=lambda a: a["q"].double()), TypeError, "q"),
    "q-2d": (dict(q=lambda a: a["q"].reshape(5, -1)), ValueError, "q"),
    "q-strided-last": (dict(q=lambda a: torch.randn(5, 4, 128, device=DEVICE)[..., ::2]), ValueError, "q"),
    "q-expanded": (dict(q=lambda a: a["q"][:, :1].expand(5, 4, 64)), ValueError, "q"),
    "k-dtype": (dict(k=lambda a: a["k"].half()), TypeError, "k"),
    "k-head-dim": (dict(k=lambda a: torch.randn(5, 2, 32, device=DEVICE)), ValueError, "k"),
    "k-tokens": (dict(k=lambda a: torch.randn(4, 2, 64, device=DEVICE)), ValueError, "k"),
    "k-is-q": (dict(k=lambda a: a["q"]), ValueError, "k"),
    "k-strided-last": (dict(k=lambda a: torch.randn(5, 2, 128, device=DEVICE)[..., ::2]), ValueError, "k"),
    "positions-float": (dict(positions=lambda a: a["positions"].float()), TypeError, "positions"),
    "positions-length": (dict(positions=lambda a: a["positions"][:4]), ValueError, "positions"),
    "positions-2d": (dict(positions=lambda a: a["positions"][:, None]), ValueError, "positions"),
    "cache-rot-odd": (dict(cos_sin_cache=lambda a: a["cos_sin_cache"][:, :31]), ValueError, "cos_sin_cache"),
    "cache-rot-gt-d": (dict(cos_sin_cache=lambda a: torch.randn(64, 66, device=DEVICE)), ValueError, "cos_sin_cache"),
    "cache-dtype": (dict(cos_sin_cache=lambda a: a["cos_sin_cache"].half()), TypeError, "cos_sin_cache"),
    "cache-1d": (dict(cos_sin_cache=lambda a: a["cos_sin_cache"][0]), ValueError, "cos_sin_cache"),
    "cache-empty": (dict(cos_sin_cache=lambda a: a["cos_sin_cache"][:0]), ValueError, "cos_sin_cache"),
    "cache-strided-last": (
        dict(cos_sin_cache=lambda a: torch.randn(64, 64, device=DEVICE)[:, ::2]),
        ValueError,
        "cos_sin_cache",
    ),
    "cache-device": (dict(cos_sin_cache=lambda a: a["cos_sin_cache"].to("meta")), ValueError, "cos_sin_cache"),
    "is_neox-int": (dict(is_neox=lambda a: 1), TypeError, "is_neox"),
}


@pytest.mark.parametrize("case", BAD.values(), ids=BAD.keys())
def test_bad_input_raises_naming_argument_and_writes_nothing(case):
    kw, exc, name = case
    args = _bad(**kw)
    snap = {n: v.clone() for n, v in args.items() if n in ("q", "k") and v.device.type != "meta"}
    with pytest.raises(exc, match=rf"\b{name}\b"):
        rotary_embedding(args["positions"], args["q"], args["k"], args["cos_sin_cache"], is_neox=args["is_neox"])
    for n, v in snap.items():
        assert torch.equal(args[n], v), f"{n} was written although the call was rejected"


def test_bad_input_message_says_what_was_expected():
    with pytest.raises(ValueError, match=r"rot_dim even and 2 <= rot_dim <= head_dim \(64\).*\(64, 66\)"):
        rotary_embedding(**_bad(cos_sin_cache=lambda a: torch.randn(64, 66, device=DEVICE)))


def _fused_fn(hq, hk, d):
    def f(pos, qkv, cache):
        t = qkv.shape[0]
        q = qkv[:, : hq * d].view(t, hq, d)
        k = qkv[:, hq * d : (hq + hk) * d].view(t, hk, d)
        rotary_embedding(pos, q, k, cache, is_neox=False)
        return qkv * 2

    return f


def test_torch_compile_records_one_custom_op_and_mutates_views():
    targets = []

    def backend(gm, example_inputs):
        targets.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm

    hq, hk, d = 4, 2, 32
    f = _fused_fn(hq, hk, d)
    cache = _cos_sin_cache(64, d, torch.float32, DEVICE)
    for backend_ in (backend, "aot_eager"):
        compiled = torch.compile(f, backend=backend_, fullgraph=True, dynamic=True)
        for t in (3, 9):
            qkv = torch.randn(t, (hq + 2 * hk) * d, device=DEVICE)
            pos = torch.randint(0, 64, (t,), device=DEVICE)
            eager_qkv = qkv.clone()
            expected = f(pos, eager_qkv, cache)
            torch.testing.assert_close(compiled(pos, qkv, cache), expected)
            torch.testing.assert_close(qkv, eager_qkv)  # the caller's tensor was rotated in place
    assert "tritonkit.rotary_embedding" in targets


def test_partly_overlapping_q_and_k_rejected_and_untouched():
    # q = heads 0..3, k = heads 2..4 of one buffer: heads 2 and 3 would be rotated twice, racing
    buf = torch.randn(3, 6, 16, device=DEVICE)
    before = buf.clone()
    cache = _cos_sin_cache(8, 16, torch.float32, DEVICE)
    pos = torch.zeros(3, dtype=torch.int64, device=DEVICE)
    with pytest.raises(ValueError, match="k must not overlap q"):
        rotary_embedding(pos, buf[:, 0:4], buf[:, 2:5], cache)
    with pytest.raises(ValueError, match="k must not overlap q"):
        rotary_embedding(pos, buf[:, 0:4], buf[:, 0:4], cache)
    assert torch.equal(buf, before)
    # the fused-qkv layout interleaves the two spans without sharing an element: accepted
    rotary_embedding(pos, buf[:, 0:4], buf[:, 4:6], cache)
