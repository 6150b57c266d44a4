"""The public functions under PyTorch's tracing tools, and as inference-only ops.

Under ``FakeTensorMode`` and ``make_fx(tracing_mode="fake")`` every call goes through its registered
``tritonkit::*`` op (a Triton launch on fake tensors would fail); with grad mode on, an input that requires grad is
refused by name instead of returning an output that silently dropped the autograd graph.
"""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from tritonkit.ops import paged_attention, reshape_and_cache, rms_norm, rotary_embedding, silu_and_mul, vllm


def _attention_inputs(dtype=torch.float16):
    q = torch.randn(5, 4, 32, dtype=dtype)
    kc = torch.randn(6, 16, 2, 32, dtype=dtype)
    vc = torch.randn(6, 16, 2, 32, dtype=dtype)
    cu = torch.tensor([0, 2, 5], dtype=torch.int32)
    used = torch.tensor([20, 9], dtype=torch.int32)
    bt = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32)
    return q, kc, vc, cu, used, bt


CALLS = {
    "rms_norm": lambda: rms_norm(torch.randn(3, 64), torch.randn(64)),
    "rms_norm_residual": lambda: rms_norm(torch.randn(3, 64), torch.randn(64), residual=torch.randn(3, 64)),
    "silu_and_mul": lambda: silu_and_mul(torch.randn(3, 64)),
    "rotary_embedding": lambda: rotary_embedding(
        torch.arange(3), torch.randn(3, 2, 32), torch.randn(3, 1, 32), torch.randn(8, 32)
    ),
    "reshape_and_cache": lambda: reshape_and_cache(
        torch.randn(3, 2, 32),
        torch.randn(3, 2, 32),
        torch.zeros(2, 4, 2, 32),
        torch.zeros(2, 4, 2, 32),
        torch.tensor([0, 5, -1]),
    ),
    "paged_attention": lambda: (
        lambda q, kc, vc, cu, used, bt: paged_attention(
            q, kc, vc, cu_seqlens_q=cu, seqused_k=used, block_table=bt, max_seqlen_q=3, max_seqlen_k=20
        )
    )(*_attention_inputs()),
    "vllm.rms_norm": lambda: vllm.rms_norm(torch.empty(3, 64), torch.randn(3, 64), torch.randn(64), 1e-6),
    "vllm.fused_add_rms_norm": lambda: vllm.fused_add_rms_norm(
        torch.randn(3, 64), torch.randn(3, 64), torch.randn(64), 1e-6
    ),
    "vllm.silu_and_mul": lambda: vllm.silu_and_mul(torch.empty(3, 32), torch.randn(3, 64)),
    "vllm.rotary_embedding": lambda: vllm.rotary_embedding(
        torch.arange(3), torch.randn(3, 64), torch.randn(3, 32), 32, torch.randn(8, 32), True
    ),
}

OPS = {
    "rms_norm": "rms_norm",
    "rms_norm_residual": "fused_add_rms_norm",
    "silu_and_mul": "silu_and_mul",
    "rotary_embedding": "rotary_embedding",
    "reshape_and_cache": "reshape_and_cache",
    "paged_attention": "paged_attention",
    "vllm.rms_norm": "vllm_rms_norm",
    "vllm.fused_add_rms_norm": "vllm_fused_add_rms_norm",
    "vllm.silu_and_mul": "vllm_silu_and_mul",
    "vllm.rotary_embedding": "rotary_embedding",
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_fake_tensor_mode_gives_outputs_of_the_right_shape_without_launching(name):
    with FakeTensorMode():
        out = CALLS[name]()
    outs = out if isinstance(out, tuple) else (out,)
    assert all(o is None or type(o).__name__ == "FakeTensor" for o in outs)
    if name == "silu_and_mul":
        assert tuple(out.shape) == (3, 32)
    if name == "paged_attention":
        assert tuple(out.shape) == (5, 4, 32) and out.dtype == torch.float16


@pytest.mark.parametrize("name", sorted(CALLS))
def test_make_fx_records_the_registered_op(name):
    gm = make_fx(lambda: CALLS[name](), tracing_mode="fake")()
    targets = {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}
    assert any(t.startswith(f"tritonkit.{OPS[name]}") for t in targets), targets


GRAD = [
    ("x", lambda g: rms_norm(torch.randn(3, 64, requires_grad=g), torch.randn(64))),
    ("weight", lambda g: rms_norm(torch.randn(3, 64), torch.nn.Parameter(torch.randn(64), requires_grad=g))),
    ("x", lambda g: silu_and_mul(torch.randn(3, 64, requires_grad=g))),
    (
        "q",
        lambda g: rotary_embedding(torch.arange(3), torch.randn(3, 2, 32, requires_grad=g), None, torch.randn(8, 32)),
    ),
    (
        "key",
        lambda g: reshape_and_cache(
            torch.randn(3, 2, 32, requires_grad=g),
            torch.randn(3, 2, 32),
            torch.zeros(2, 4, 2, 32),
            torch.zeros(2, 4, 2, 32),
            torch.tensor([0, 5, -1]),
        ),
    ),
    (
        "q",
        lambda g: (
            lambda q, kc, vc, cu, used, bt: paged_attention(
                q.requires_grad_(g),
                kc,
                vc,
                cu_seqlens_q=cu,
                seqused_k=used,
                block_table=bt,
                max_seqlen_q=3,
                max_seqlen_k=20,
            )
        )(*_attention_inputs(torch.float16)),
    ),
    ("input", lambda g: vllm.rms_norm(torch.empty(3, 64), torch.randn(3, 64, requires_grad=g), torch.randn(64), 1e-6)),
    (
        "query",
        lambda g: vllm.rotary_embedding(
            torch.arange(3), torch.randn(3, 64, requires_grad=g), None, 32, torch.randn(8, 32), True
        ),
    ),
]


@pytest.mark.parametrize("name,call", GRAD, ids=[f"{i}-{g[0]}" for i, g in enumerate(GRAD)])
def test_an_input_that_requires_grad_is_refused_by_name(name, call):
    with pytest.raises(RuntimeError, match=f"{name} requires grad, but tritonkit ops are inference ops"):
        call(True)
    # the same call where grad mode is off (how inference runs) goes through, parameters and all
    with torch.no_grad():
        call(True)
    call(False)
