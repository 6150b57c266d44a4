"""The bench's providers per op, read from the specs: bench/providers.py holds only the generic ones (tritonkit,
eager, inductor, base@); peers, speed-of-light references and why Inductor cannot compile a reference come from
each op's OpSpec (``ops/<op>/peers.py``). On this CPU vLLM and its FA3 binary are absent, so a declared vLLM or FA3
peer is unavailable with the import's reason and an undeclared one with the spec's."""

import sys

import pytest
import torch

import tritonkit.ops
from tritonkit.bench import cli
from tritonkit.bench import providers as P
from tritonkit.models import MODELS
from tritonkit.ops import OP_NAMES, get_spec
from tritonkit.spec import OpSpec, Peer

# what the bench listed before the peers moved into the op folders (same names, order and availability)
# (fa3, vLLM's FlashAttention-3, timed by default beside vllm and sdpa: issue 37)
ALL = ("tritonkit", "eager", "inductor", "inductor-dynamic", "unfused", "vllm", "fa3", "sdpa")
DEFAULT = ("tritonkit", "eager", "inductor", "unfused", "vllm", "fa3", "sdpa")
VLLM = {"rms_norm_quant_fp8", "silu_and_mul_quant_fp8", "reshape_and_cache", "paged_attention", "fused_moe"}
FA3 = {"paged_attention"}
SDPA = {"paged_attention"}
NOT_COMPILABLE = {
    "paged_attention": "its reference reads sequence lengths on the host",
    "fused_moe": "its reference gathers each expert's tokens with data-dependent sizes",
    "moe_align_block_size": "its reference sorts with data-dependent sizes",
}


def test_provider_names_come_from_the_specs_in_the_same_order():
    assert P.ALL_PROVIDERS == ALL and P.DEFAULT_PROVIDERS == DEFAULT
    assert {op for op in OP_NAMES if "vllm" in get_spec(op).peers} == VLLM
    assert {op for op in OP_NAMES if "fa3" in get_spec(op).peers} == FA3
    assert {op for op in OP_NAMES if "sdpa" in get_spec(op).speed_of_light} == SDPA


@pytest.mark.parametrize("op", OP_NAMES)
def test_each_ops_providers(op, monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # vLLM absent, whatever this machine has
    monkeypatch.setitem(sys.modules, "vllm_moe_peer", None)
    monkeypatch.setitem(sys.modules, "vllm_fa3_peer", None)
    spec = get_spec(op)
    for name in ("tritonkit", "eager"):
        assert P.make_provider(name, spec, torch.float16).name == name
    for name in ("inductor", "inductor-dynamic"):
        if op in NOT_COMPILABLE:
            with pytest.raises(P.Unavailable, match=NOT_COMPILABLE[op]):
                P.make_provider(name, spec, torch.float16)
        else:
            assert P.make_provider(name, spec, torch.float16).name == name
    with pytest.raises(P.Unavailable, match="not importable" if op in VLLM else f"{op}'s OpSpec declares no vllm"):
        P.make_provider("vllm", spec, torch.float16)
    with pytest.raises(
        P.Unavailable, match="FA3 peer not importable" if op in FA3 else f"{op}'s OpSpec declares no fa3"
    ):
        P.make_provider("fa3", spec, torch.float16)
    if op in SDPA:
        assert P.make_provider("sdpa", spec, torch.float16).description.startswith("torch SDPA on dense K/V")
    else:
        with pytest.raises(P.Unavailable, match=f"{op}'s OpSpec declares no sdpa"):
            P.make_provider("sdpa", spec, torch.float16)
    with pytest.raises(ValueError, match="unknown provider 'nope'"):
        P.make_provider("nope", spec, torch.float16)


def test_a_spec_declares_its_own_peer():
    base = get_spec("rms_norm")
    calls = []

    def mine(spec, dtype):
        calls.append((spec.name, dtype))
        return Peer("my kernel", lambda inputs: base.call(inputs), ("mypkg",))

    spec = OpSpec(
        base.name,
        base.fn,
        base.make_inputs,
        reference=base.reference,
        boundary=base.boundary,
        call=base.call,
        peers={"vllm": mine},
        not_compilable="a reason",
    )
    prov = P.make_provider("vllm", spec, torch.bfloat16)
    assert (prov.name, prov.description, prov.kernel_modules) == ("vllm", "my kernel", ("mypkg",))
    assert calls == [("rms_norm", torch.bfloat16)]
    with pytest.raises(P.Unavailable, match="a reason"):
        P.make_provider("inductor", spec, torch.bfloat16)
    bad = OpSpec(
        base.name,
        base.fn,
        base.make_inputs,
        reference=base.reference,
        boundary=base.boundary,
        speed_of_light={"sdpa": lambda spec, dtype: object()},
    )
    with pytest.raises(TypeError, match="its sdpa factory returned object, not a Peer"):
        P.make_provider("sdpa", bad, torch.bfloat16)


@pytest.mark.parametrize(
    "field, value, match",
    [
        ("peers", {"vllm": "not callable"}, "peers must be a dict"),
        ("speed_of_light", ["sdpa"], "speed_of_light must be a dict"),
        ("not_compilable", True, "not_compilable must be a string"),
    ],
)
def test_spec_refuses_a_malformed_peer_field(field, value, match):
    base = get_spec("rms_norm")
    with pytest.raises(TypeError, match=match):
        OpSpec(base.name, base.fn, base.make_inputs, reference=base.reference, boundary=base.boundary, **{field: value})


def test_series_help_lists_every_series_the_specs_declare(monkeypatch):
    text = cli._series_help()
    spec = get_spec("paged_attention")
    names = list(spec.sweep_series(next(m for m in MODELS.values() if spec.has_layer(m)), 1))
    assert len(names) >= 8
    assert "\npaged_attention: " in "\n" + text and all(repr(n) in text for n in names)
    assert text.startswith("rms_norm_quant_fp8: 'static', 'per-token', 'per-group'")  # in OP_NAMES' order
    # read from the specs, not written out: a new op's series shows up
    base = get_spec("rms_norm")
    mine = OpSpec(
        "mine",
        base.fn,
        base.make_inputs,
        reference=base.reference,
        boundary=base.boundary,
        sweep_shape=base.sweep_shape,
        sweep_series=lambda model, t: {"my series": None, "other": None},
    )
    monkeypatch.setattr(tritonkit.ops, "specs", lambda names=None: {"rms_norm": base, "mine": mine})
    assert cli._series_help() == "mine: 'my series', 'other'"
