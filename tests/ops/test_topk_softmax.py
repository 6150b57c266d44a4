import pytest
import torch
from conftest import DEVICE

from tritonkit.ops.topk_softmax.api import topk_softmax
from tritonkit.ops.topk_softmax.reference import topk_softmax_reference as reference
from tritonkit.ops.topk_softmax.spec import SPEC
from tritonkit.testing import assert_valid

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
DT_IDS = ("fp16", "bf16", "fp32")
# one program of Mixtral rows, a strided non-power-of-two row, DeepSeek's 256 experts, and Mixtral's rows with the
# bias and the padding mask: every family runs on these
FAMILY_SHAPES = [
    s
    for s in SPEC.boundary
    if ((s["num_tokens"], s["num_experts"]) in {(129, 8), (17, 60), (4, 256)} and not s.get("bias"))
    or (s.get("bias") and s.get("padding"))
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
    assert len(FAMILY_SHAPES) == 4


def _run(x, topk, renormalize=False, **features):
    w, ids = topk_softmax(x, topk, renormalize=renormalize, **features)
    assert w.dtype == torch.float32 and ids.dtype == torch.int32
    assert w.shape == ids.shape == (x.shape[0], topk) and w.is_contiguous() and ids.is_contiguous()
    return w, ids


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_ties_take_the_lower_expert(dtype):
    x = torch.zeros(4, 8, device=DEVICE, dtype=dtype)
    x[1, 3] = -0.0  # -0.0 ties +0.0
    x[2] = torch.tensor([1, 3, 0, 3, 2, 3, 0, 1], dtype=dtype)
    x[3, [6, 2]] = 5.0
    w, ids = _run(x, 5)
    assert ids[0].tolist() == ids[1].tolist() == [0, 1, 2, 3, 4]
    assert ids[2].tolist() == [1, 3, 5, 4, 0]
    assert ids[3].tolist()[:3] == [2, 6, 0]
    torch.testing.assert_close(w[0], torch.full((5,), 1 / 8, device=DEVICE))
    assert w[2, 0] == w[2, 1] == w[2, 2] and w[3, 0] == w[3, 1]


def test_topk_equals_experts_is_a_permutation():
    x = torch.randn(6, 16, device=DEVICE)
    w, ids = _run(x, 16)
    assert (ids.sort(dim=1).values == torch.arange(16, device=DEVICE, dtype=torch.int32)).all()
    assert (w[:, :-1] >= w[:, 1:]).all()
    torch.testing.assert_close(w.sum(dim=1), torch.ones(6, device=DEVICE))


def test_one_expert():
    w, ids = _run(torch.randn(3, 1, device=DEVICE, dtype=torch.bfloat16), 1)
    assert (ids == 0).all() and (w == 1).all()


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_renormalize(dtype):
    x = torch.randn(9, 64, device=DEVICE, dtype=dtype)
    w0, ids0 = _run(x, 6)
    w1, ids1 = _run(x, 6, renormalize=True)
    assert torch.equal(ids0, ids1)
    torch.testing.assert_close(w1.sum(dim=1), torch.ones(9, device=DEVICE))
    torch.testing.assert_close(w1, w0 / w0.sum(dim=1, keepdim=True))
    assert w0.sum(dim=1).max() < 1  # without it: the softmax probabilities of 6 of 64 experts


def test_neg_inf_masks_experts():
    x = torch.randn(2, 8, device=DEVICE)
    x[:, ::2] = float("-inf")
    w, ids = _run(x, 6)
    # the four finite experts first, then masked ones with weight 0, lower index first
    assert (ids[:, :4] % 2 == 1).all() and ids[:, 4:].tolist() == [[0, 2], [0, 2]]
    assert (w[:, 4:] == 0).all() and torch.isfinite(w).all()


def test_underflowed_probabilities_keep_logit_order():
    # float32 exp(-150) and exp(-200) both underflow to 0: the larger logit still ranks first, as exactly
    x = torch.tensor([[-200.0, 0.0, -150.0, -200.0]], device=DEVICE)
    w, ids = _run(x, 4)
    assert ids.tolist() == [[1, 2, 0, 3]]
    assert w.tolist() == [[1.0, 0.0, 0.0, 0.0]]


def test_large_fp16_logits_do_not_overflow():
    x = torch.full((3, 32), -60000.0, device=DEVICE, dtype=torch.float16)
    x[:, 7] = 60000.0
    w, ids = _run(x, 2, renormalize=True)
    assert (ids[:, 0] == 7).all() and (ids[:, 1] == 0).all() and (w[:, 0] == 1).all() and (w[:, 1] == 0).all()


def test_strided_rows_match_contiguous():
    big = torch.randn(11, 80, device=DEVICE)
    x = big[:, 5 : 5 + 60]
    w, ids = _run(x, 4, renormalize=True)
    w2, ids2 = _run(x.contiguous(), 4, renormalize=True)
    assert torch.equal(ids, ids2) and torch.equal(w, w2)
    rw, rids = reference(x.double(), 4, True)
    assert torch.equal(ids, rids)
    torch.testing.assert_close(w.double(), rw, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_no_tokens(dtype):
    w, ids = _run(torch.empty(0, 8, device=DEVICE, dtype=dtype), 2)
    assert w.numel() == ids.numel() == 0


# --- vLLM's bias router (e_score_correction_bias) and padding mask (is_padding) ---------------------------------------
@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_bias_changes_the_choice_not_the_weights(dtype):
    x = torch.tensor([[2.0, 1.0, 0.0, -1.0], [0.0, 0.0, 3.0, 0.0]], device=DEVICE, dtype=dtype)
    bias = torch.tensor([0.0, 0.0, 0.0, 1.0], device=DEVICE)
    w0, ids0 = _run(x, 2)
    w, ids = _run(x, 2, e_score_correction_bias=bias)
    assert ids0.tolist() == [[0, 1], [2, 0]]
    # expert 3 wins on probability + 1; the weights are its probability and expert 0's, without the bias
    assert ids.tolist() == [[3, 0], [3, 2]]
    p = torch.softmax(x.double(), dim=-1)
    torch.testing.assert_close(w.double(), p.gather(1, ids.long()), rtol=1e-5, atol=1e-6)
    assert w[0, 0] < w[0, 1]  # in the order of the scores, not of the weights


def test_bias_ties_take_the_lower_expert():
    # equal logits: equal probabilities, so the scores tie exactly where the bias does
    x = torch.zeros(2, 6, device=DEVICE)
    x[1, 4] = -0.0
    bias = torch.tensor([0.1, 0.2, 0.2, 0.1, 0.3, 0.2], device=DEVICE)
    w, ids = _run(x, 6, e_score_correction_bias=bias)
    assert ids.tolist() == [[4, 1, 2, 5, 0, 3]] * 2
    assert (w == w[0, 0]).all()


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_renormalize_with_bias_normalizes_the_unbiased_weights(dtype):
    x = torch.randn(9, 64, device=DEVICE, dtype=dtype)
    bias = torch.randn(64, device=DEVICE) * 0.05
    w0, ids0 = _run(x, 6, e_score_correction_bias=bias)
    w1, ids1 = _run(x, 6, renormalize=True, e_score_correction_bias=bias)
    assert torch.equal(ids0, ids1) and not torch.equal(ids0, _run(x, 6)[1])
    torch.testing.assert_close(w1.sum(dim=1), torch.ones(9, device=DEVICE))
    torch.testing.assert_close(w1, w0 / w0.sum(dim=1, keepdim=True))
    rw, rids = reference(x.double(), 6, True, bias.double())
    assert torch.equal(ids1, rids)
    torch.testing.assert_close(w1.double(), rw, rtol=1e-5, atol=1e-6)


def test_bias_choosing_only_zero_probabilities_keeps_zero_weights():
    # experts 2 and 3 are masked (probability 0) but the bias chooses them: renormalize leaves 0, not 0 / 0
    x = torch.tensor([[0.0, 1.0, float("-inf"), float("-inf")]], device=DEVICE)
    bias = torch.tensor([0.0, 0.0, 5.0, 4.0], device=DEVICE)
    for renormalize in (False, True):
        w, ids = _run(x, 2, renormalize, e_score_correction_bias=bias)
        assert ids.tolist() == [[2, 3]] and w.tolist() == [[0.0, 0.0]]
    w, ids = _run(x, 3, True, e_score_correction_bias=bias)
    assert ids.tolist() == [[2, 3, 1]] and w.tolist() == [[0.0, 0.0, 1.0]]


@pytest.mark.parametrize("with_bias", [False, True], ids=["softmax", "bias"])
def test_padding_rows_get_expert_id_minus_one(with_bias):
    x = torch.randn(130, 8, device=DEVICE)  # two programs of 128 rows
    pad = torch.zeros(130, dtype=torch.bool, device=DEVICE)
    pad[[0, 5, 127, 128]] = True
    extra = {"e_score_correction_bias": torch.randn(8, device=DEVICE) * 0.1} if with_bias else {}
    w0, ids0 = _run(x, 3, True, **extra)
    w, ids = _run(x, 3, True, is_padding=pad, **extra)
    assert (ids[pad] == -1).all() and torch.equal(ids[~pad], ids0[~pad])
    # every weight is written as without the mask, padding rows' included (as vLLM's kernel does)
    assert torch.equal(w, w0)
    rw, rids = reference(x.double(), 3, True, is_padding=pad, **{k: v.double() for k, v in extra.items()})
    assert torch.equal(ids, rids)


def test_all_padding():
    x = torch.randn(5, 16, device=DEVICE, dtype=torch.bfloat16)
    pad = torch.ones(5, dtype=torch.bool, device=DEVICE)
    w, ids = _run(x, 4, is_padding=pad, e_score_correction_bias=torch.zeros(16, device=DEVICE))
    assert (ids == -1).all() and torch.equal(w, _run(x, 4)[0])
    w, ids = _run(x[:0], 4, is_padding=pad[:0])
    assert ids.numel() == 0


def test_no_padding_rows_change_nothing():
    x = torch.randn(7, 60, device=DEVICE, dtype=torch.float16)
    w0, ids0 = _run(x, 4, True)
    w, ids = _run(x, 4, True, is_padding=torch.zeros(7, dtype=torch.bool, device=DEVICE))
    assert torch.equal(ids, ids0) and torch.equal(w, w0)


def _bias(n=8, **kw):
    return torch.zeros(n, **kw)


@pytest.mark.parametrize(
    "extra,exc,name",
    [
        (lambda: {"e_score_correction_bias": _bias(dtype=torch.float16)}, TypeError, "e_score_correction_bias"),
        (lambda: {"e_score_correction_bias": _bias(dtype=torch.float64)}, TypeError, "e_score_correction_bias"),
        (lambda: {"e_score_correction_bias": _bias(7)}, ValueError, "e_score_correction_bias"),
        (lambda: {"e_score_correction_bias": _bias(16)[::2]}, ValueError, "e_score_correction_bias"),
        (lambda: {"e_score_correction_bias": torch.zeros(1, 8)}, ValueError, "e_score_correction_bias"),
        (lambda: {"e_score_correction_bias": _bias(device="meta")}, ValueError, "e_score_correction_bias"),
        (lambda: {"e_score_correction_bias": _bias(requires_grad=True)}, RuntimeError, "e_score_correction_bias"),
        (lambda: {"e_score_correction_bias": [0.0] * 8}, TypeError, "e_score_correction_bias"),
        (lambda: {"is_padding": torch.zeros(4, dtype=torch.uint8)}, TypeError, "is_padding"),
        (lambda: {"is_padding": torch.zeros(5, dtype=torch.bool)}, ValueError, "is_padding"),
        (lambda: {"is_padding": torch.zeros(4, 1, dtype=torch.bool)}, ValueError, "is_padding"),
        (lambda: {"is_padding": torch.zeros(8, dtype=torch.bool)[::2]}, ValueError, "is_padding"),
        (lambda: {"is_padding": torch.zeros(4, dtype=torch.bool, device="meta")}, ValueError, "is_padding"),
    ],
    ids=[
        "bias-fp16",
        "bias-fp64",
        "bias-shape",
        "bias-strided",
        "bias-2d",
        "bias-device",
        "bias-grad",
        "bias-list",
        "pad-uint8",
        "pad-shape",
        "pad-2d",
        "pad-strided",
        "pad-device",
    ],
)
def test_bad_bias_or_padding(extra, exc, name):
    kw = {k: v.to(DEVICE) if isinstance(v, torch.Tensor) and v.device.type != "meta" else v for k, v in extra().items()}
    with pytest.raises(exc, match=rf"^{name} "):
        topk_softmax(torch.randn(4, 8, device=DEVICE), 2, **kw)


@pytest.mark.parametrize(
    "make,topk,exc,name",
    [
        (lambda: torch.randn(8), 2, ValueError, "gating_output"),  # rank 1
        (lambda: torch.randn(2, 3, 8), 2, ValueError, "gating_output"),  # rank 3
        (lambda: torch.randn(4, 0), 1, ValueError, "gating_output"),  # no experts
        (lambda: torch.randn(4, 5000), 1, ValueError, "gating_output"),  # past the one-tile limit
        (lambda: torch.ones(4, 8, dtype=torch.int32), 2, TypeError, "gating_output"),
        (lambda: torch.randn(4, 8, dtype=torch.float64), 2, TypeError, "gating_output"),
        (lambda: torch.randn(8, 4).t(), 2, ValueError, "gating_output"),  # last dim not contiguous
        (lambda: [[1.0, 2.0]], 1, TypeError, "gating_output"),
        (lambda: torch.randn(4, 8), 0, ValueError, "topk"),
        (lambda: torch.randn(4, 8), 9, ValueError, "topk"),
        (lambda: torch.randn(4, 8), 2.0, TypeError, "topk"),
        (lambda: torch.randn(4, 8), True, TypeError, "topk"),
    ],
    ids=[
        "rank1",
        "rank3",
        "no-experts",
        "too-many-experts",
        "int32",
        "float64",
        "strided-last-dim",
        "not-a-tensor",
        "topk-0",
        "topk-past-E",
        "topk-float",
        "topk-bool",
    ],
)
def test_bad_input(make, topk, exc, name):
    with pytest.raises(exc, match=rf"^{name} "):
        topk_softmax(make(), topk)


def test_bad_renormalize():
    with pytest.raises(TypeError, match=r"^renormalize "):
        topk_softmax(torch.randn(2, 8), 2, renormalize=1)


def test_sweep_skips_dense_models():
    from tritonkit.models import MODELS

    assert SPEC.sweep_shape(MODELS["llama3-8b"], 16) is None
    s = SPEC.sweep_shape(MODELS["qwen3-30b-a3b"], 16)
    assert (s["num_experts"], s["topk"]) == (128, 8)


def test_torch_compile_records_one_custom_op():
    targets = []

    def backend(gm, example_inputs):
        targets.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm

    f = torch.compile(lambda x: topk_softmax(x, 2, renormalize=True), backend=backend, fullgraph=True, dynamic=True)
    x = torch.randn(5, 8, device=DEVICE)
    w, ids = f(x)
    assert "tritonkit.topk_softmax" in targets
    w2, ids2 = topk_softmax(x, 2, renormalize=True)
    assert torch.equal(ids, ids2) and torch.equal(w, w2)


def test_torch_compile_with_bias_and_padding():
    f = torch.compile(
        lambda x, b, p: topk_softmax(x, 2, renormalize=True, e_score_correction_bias=b, is_padding=p),
        backend="aot_eager",
        fullgraph=True,
    )
    x, b = torch.randn(5, 8, device=DEVICE), torch.randn(8, device=DEVICE) * 0.1
    p = torch.tensor([False, True, False, False, True], device=DEVICE)
    w, ids = f(x, b, p)
    w2, ids2 = topk_softmax(x, 2, renormalize=True, e_score_correction_bias=b, is_padding=p)
    assert torch.equal(ids, ids2) and torch.equal(w, w2) and (ids[p] == -1).all()
