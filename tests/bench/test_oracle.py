"""What the bench checks providers against: the float64 oracle, whole or (OpSpec.oracle_inputs) on sampled rows."""

import torch

import tritonkit.ops.fused_moe.spec as moe_spec
from tritonkit.bench import providers as P
from tritonkit.ops import get_spec
from tritonkit.spec import Shape
from tritonkit.testing import Fill

MOE = get_spec("fused_moe")


def _moe(M=9, **kw):
    shape = dict(num_tokens=M, hidden=96, inter=80, experts=4, topk=2, quant="none")
    shape.update(kw)
    return MOE.make_inputs(Shape(shape), torch.float16, Fill("randn", "cpu", 3))


def test_ops_without_a_sample_are_checked_on_every_row():
    spec = get_spec("rms_norm")
    inputs = spec.make_inputs(Shape(num_tokens=5, hidden=64, residual=0), torch.float32, Fill("randn", "cpu", 0))
    oracle = P.reference(spec, torch.float32, inputs)
    assert oracle.rows == {} and oracle.refs["y"].dtype == torch.float64 and oracle.refs["y"].shape[0] == 5


def test_large_moe_layers_are_checked_on_sampled_rows(monkeypatch):
    monkeypatch.setattr(moe_spec, "ORACLE_ROWS", 4)
    inputs = _moe(M=9, quant="fp8_block128", hidden=200, inter=160)
    oracle = P.reference(MOE, torch.float16, inputs)
    rows = oracle.rows["out"].tolist()
    assert len(rows) == 4 and rows[0] == 0 and rows[-1] == 8 and oracle.refs["out"].shape[0] == 4
    # the weights are not copied to float64 (DeepSeek-V3's would take 90 GB); the reference upcasts one expert
    ref_inputs, _ = moe_spec.oracle_inputs(inputs)
    assert ref_inputs["w1"].dtype == torch.float8_e4m3fn and ref_inputs["hidden_states"].dtype == torch.float64
    tk = P.make_provider("tritonkit", MOE, torch.float16)
    assert P.check(tk, MOE, torch.float16, inputs, oracle).passed

    def wrong_last_row(i):
        out = MOE.call(i)["out"].clone()
        out[8] += 1.0
        return {"out": out}

    assert not P.check(P.Provider("wrong", "", wrong_last_row), MOE, torch.float16, inputs, oracle).passed


def test_one_activation_scale_for_the_tensor_is_checked_whole(monkeypatch):
    # per_act_token_quant=False: one dynamic scale spans every token, so a sample would change the reference
    monkeypatch.setattr(moe_spec, "ORACLE_ROWS", 4)
    inputs = _moe(M=9, quant="fp8_tensor", act_tensor=1)
    assert P.reference(MOE, torch.float16, inputs).rows == {}


def test_moe_inputs_never_hold_a_layer_in_float32(monkeypatch):
    # fp8 weights are made and quantized a chunk of experts at a time (at most spec._WEIGHT_CHUNK float32 elements):
    # DeepSeek-V3's w1 in float32 would take 30 GB. The chunk is cut to two experts' w1 here, so a layer of six
    # comes in three pieces and the quantized result is the same as one piece would give
    from tritonkit.ops.fused_moe import spec as moe_spec

    shape = Shape(num_tokens=2, hidden=256, inter=128, experts=6, topk=2, quant="fp8_block128")
    whole = MOE.make_inputs(shape, torch.bfloat16, Fill("randn", "cpu", 0))
    monkeypatch.setattr(moe_spec, "_WEIGHT_CHUNK", 2 * (2 * 128) * 256)
    sizes = []
    fill = Fill("randn", "cpu", 0)
    real = fill.__call__

    class Recording(Fill):
        def __call__(self, size, dtype, *, family=None):
            sizes.append((tuple(size), dtype))
            return real(size, dtype, family=family)

    got = MOE.make_inputs(shape, torch.bfloat16, Recording("randn", "cpu", 0))
    assert got["w1"].dtype == torch.float8_e4m3fn and got["w1_scale"].shape == (6, 2, 2)
    biggest = max(torch.Size(s).numel() for s, dt in sizes if dt == torch.float32)
    assert biggest == 2 * (2 * 128) * 256  # two experts' w1
    for name in ("w1", "w1_scale", "w2", "w2_scale"):
        assert torch.equal(got[name].float(), whole[name].float()), name
