"""The ops' one place that forgets (ops/_memo) and the declarations that derive fakes and out= forms
(ops/_library)."""

import pathlib
import re

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import tritonkit.ops
import tritonkit.ops.vllm  # noqa: F401  (registers every op, the vLLM forms too)
from tritonkit.ops.paged_attention import config as pa_config
from tritonkit.ops.rms_norm import config as rms_config


def test_clear_caches_empties_every_registered_memo():
    rms_config.rms_norm_config(4096, 2)
    pa_config._PLANS[("probe",)] = None
    assert rms_config.rms_norm_config.cache_info().currsize > 0
    tritonkit.ops.clear_caches()
    assert rms_config.rms_norm_config.cache_info().currsize == 0 and ("probe",) not in pa_config._PLANS


def test_overrides_holds_inside_the_block_and_restores_after_it():
    old = rms_config.MAX_SINGLE_PASS
    before = rms_config.rms_norm_config(8192, 2)
    assert before.single_pass
    with tritonkit.ops.overrides(rms_config, MAX_SINGLE_PASS=4096) as mod:
        assert mod is rms_config and rms_config.MAX_SINGLE_PASS == 4096
        assert not rms_config.rms_norm_config(8192, 2).single_pass  # the memo was emptied on the way in
    assert rms_config.MAX_SINGLE_PASS == old and rms_config.rms_norm_config(8192, 2) == before


def test_overrides_restores_after_an_exception():
    old = rms_config.STREAM_BLOCK
    with pytest.raises(RuntimeError, match="inside"):
        with tritonkit.ops.overrides(rms_config, STREAM_BLOCK=7):
            raise RuntimeError("inside")
    assert rms_config.STREAM_BLOCK == old


def test_overrides_refuses_a_name_the_module_lacks_before_changing_anything():
    old = rms_config.STREAM_BLOCK
    with pytest.raises(AttributeError, match="MAX_SINGEL_PASS"):
        with tritonkit.ops.overrides(rms_config, STREAM_BLOCK=7, MAX_SINGEL_PASS=1):
            pass
    assert rms_config.STREAM_BLOCK == old
    with pytest.raises(TypeError, match="module"):
        with tritonkit.ops.overrides("tritonkit.ops.rms_norm.config", STREAM_BLOCK=7):
            pass


def test_a_declared_op_derives_its_fake_and_its_out_form():
    x = torch.randn(3, 8, dtype=torch.float16)
    w, r = torch.ones(8, dtype=torch.float16), torch.randn(3, 8, dtype=torch.float16)
    with FakeTensorMode() as mode:
        fx, fw, fr = mode.from_tensor(x), mode.from_tensor(w), mode.from_tensor(r)
        y, r2 = torch.ops.tritonkit.fused_add_rms_norm(fx, fr, fw, 1e-6)
        h = torch.ops.tritonkit.silu_and_mul(fx)
    assert (y.shape, y.dtype, r2.shape) == (x.shape, x.dtype, x.shape) and h.shape == (3, 4)
    # the out forms: the same numbers written into the caller's tensors
    want = torch.ops.tritonkit.rms_norm(x, w, 1e-6)
    out = torch.empty_like(x)
    assert torch.ops.tritonkit.rms_norm_out(out, x, w, 1e-6) is None and torch.equal(out, want)
    ya, ra = torch.empty_like(x), torch.empty_like(x)
    torch.ops.tritonkit.fused_add_rms_norm_out(ya, ra, x, r, w, 1e-6)
    yb, rb = torch.ops.tritonkit.fused_add_rms_norm(x, r, w, 1e-6)
    assert torch.equal(ya, yb) and torch.equal(ra, rb)


def test_the_out_form_declares_what_it_mutates():
    schema = torch.ops.tritonkit.paged_attention_out.default._schema
    assert schema.arguments[0].name == "out" and schema.arguments[0].alias_info.is_write
    assert not any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments[1:])
    assert str(torch.ops.tritonkit.paged_attention.default._schema.returns[0].type) == "Tensor"


def test_every_op_memo_is_one_clear_caches_empties():
    """A bare functools.lru_cache in an op keeps what it derived from a config name past overrides (a patched tile
    would not be seen): every op memo goes through _memo.memoized or _memo.register."""
    ops = pathlib.Path(tritonkit.ops.__file__).parent
    bare = sorted(
        str(p.relative_to(ops)) for p in ops.rglob("*.py") if p.name != "_memo.py" and "lru_cache" in p.read_text()
    )
    assert bare == [], f"memoize through ops/_memo instead: {bare}"


def test_overrides_reaches_the_fused_fp8_ops_configs():
    from tritonkit.ops.silu_and_mul_quant_fp8 import config as silu_config

    before = silu_config.silu_and_mul_quant_config(14336, 2, "token", 128)
    assert before.num_chunks == 7
    with tritonkit.ops.overrides(silu_config, TOKEN_CHUNK=4096):
        assert silu_config.silu_and_mul_quant_config(14336, 2, "token", 128).num_chunks == 4
    assert silu_config.silu_and_mul_quant_config(14336, 2, "token", 128) == before


# op modules that may still register a fake by hand, each with the reason it cannot be declared (none today)
HAND_WRITTEN_FAKES: dict[str, str] = {}


def test_no_op_module_registers_a_hand_written_fake():
    ops = pathlib.Path(tritonkit.ops.__file__).parent
    found = {
        str(p.relative_to(ops))
        for p in ops.rglob("*.py")
        if p.name != "_library.py" and re.search(r"register_fake|impl_abstract|library\.custom_op", p.read_text())
    }
    assert found == set(HAND_WRITTEN_FAKES), f"declare the op through ops/_library instead: {sorted(found)}"


def _qkv_args(vllm_form: bool):
    t, hq, hk, d = 3, 2, 1, 16
    g = torch.Generator().manual_seed(0)
    qkv = torch.randn(t, (hq + 2 * hk) * d, generator=g).to(torch.bfloat16)
    pos = torch.tensor([0, 5, 2])
    ang = torch.randn(8, d // 2, generator=g)
    cs = torch.cat([ang.cos(), ang.sin()], dim=1)
    kc = torch.zeros(2, 4, hk, d, dtype=torch.bfloat16)
    slots, qw, kw = torch.tensor([6, 0, 3]), torch.ones(d, dtype=torch.bfloat16), torch.ones(d, dtype=torch.bfloat16)
    if vllm_form:
        return (qkv, qw, kw, cs, pos, slots, kc, kc.clone(), hq, hk, d, d, 1e-6, 0.0, "auto", None, None), (6, 7)
    return (qkv, pos, cs, kc, kc.clone(), slots, hq, hk, qw, kw, 1e-6, 0.0, True, "auto", None, None), (3, 4)


def _out_form_cases():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 256, generator=g).to(torch.bfloat16)
    w = torch.rand(256, generator=g).to(torch.bfloat16) + 0.5
    return {
        "topk_softmax": ((torch.randn(5, 8, generator=g), 3, True), ()),
        "moe_align_block_size": ((torch.randint(0, 8, (5, 2), generator=g, dtype=torch.int32), 4, 8, None), ()),
        "rms_norm_quant_fp8": ((x, w, 1e-6, x.flip(0), "group", None, None, 128, True), ()),
        "silu_and_mul_quant_fp8": ((x, "token", None, None, 128, False), ()),
        "qk_norm_rope_cache": _qkv_args(vllm_form=False),
        "vllm_fused_qknorm_rope_cache": _qkv_args(vllm_form=True),
    }


def _clone(args):
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


@pytest.mark.parametrize("name", list(_out_form_cases()))
def test_each_declared_out_form_writes_what_the_functional_form_returns(name):
    """Ops declared through op_with_outputs: the fake is the eager alloc (the real outputs' shapes, dtypes, strides)
    and ``<op>_out`` writes the same values (and the same in-place inputs) as ``<op>``."""
    args, mutated = _out_form_cases()[name]
    fn, out_fn = getattr(torch.ops.tritonkit, name), getattr(torch.ops.tritonkit, f"{name}_out")
    a, b = _clone(args), _clone(args)
    want = fn(*a)
    want = (want,) if isinstance(want, torch.Tensor) else tuple(want)
    with FakeTensorMode() as mode:
        fake = fn(*(mode.from_tensor(t) if isinstance(t, torch.Tensor) else t for t in args))
    fake = (fake,) if isinstance(fake, torch.Tensor) else tuple(fake)
    assert [(f.shape, f.dtype, f.stride()) for f in fake] == [(t.shape, t.dtype, t.stride()) for t in want]
    outs = tuple(torch.empty_strided(t.shape, t.stride(), dtype=t.dtype) for t in want)
    assert out_fn(*outs, *b) is None
    for got, exp in zip(outs, want):
        assert torch.equal(got.double(), exp.double())  # fp8 too: its values are exact in float64
    for i in mutated:
        assert torch.equal(a[i], b[i]) and a[i].abs().sum() > 0


def _written(op) -> list[str]:
    return [a.name for a in op.default._schema.arguments if a.alias_info is not None and a.alias_info.is_write]


def test_op_with_outputs_declares_the_inputs_both_forms_write():
    written = _written
    assert written(torch.ops.tritonkit.qk_norm_rope_cache) == ["key_cache", "value_cache"]
    assert written(torch.ops.tritonkit.qk_norm_rope_cache_out) == ["out", "key_cache", "value_cache"]
    assert written(torch.ops.tritonkit.vllm_fused_qknorm_rope_cache_out) == ["q", "k", "v", "key_cache", "value_cache"]
    assert written(torch.ops.tritonkit.topk_softmax) == []
