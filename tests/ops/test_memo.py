"""The ops' one place that forgets (ops/_memo) and the declarations that derive fakes and out= forms
(ops/_library)."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import tritonkit.ops
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
