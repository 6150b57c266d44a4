"""The vllm provider of fused_moe (``tritonkit.ops.fused_moe.peers``) on a CPU.

With vLLM's kernel present (``shared/peers/vllm-fused-moe.sh .peers`` in the repository root, git-ignored) its
launches are checked against the float64 reference under Triton's interpreter, bf16 weights and block-wise fp8
(fp16 activations: the interpreter multiplies bfloat16 dot operands as raw bits); without it those tests skip.
"""

import sys
from pathlib import Path

import pytest
import torch

from tritonkit.bench import providers as P
from tritonkit.ops import get_spec
from tritonkit.spec import Shape
from tritonkit.testing import Fill

PEERS = Path(__file__).parents[2] / ".peers"
SPEC = get_spec("fused_moe")


def _peer_available() -> bool:
    if PEERS.is_dir() and str(PEERS) not in sys.path:
        sys.path.insert(0, str(PEERS))
    try:
        import vllm_moe_peer  # noqa: F401
    except ImportError:
        return False
    return True


def _shape(**kw):
    base = dict(num_tokens=9, hidden=256, inter=192, experts=4, topk=2, quant="none")
    base.update(kw)
    return Shape(base)


def _inputs(shape, dtype=torch.float16):
    return SPEC.make_inputs(shape, dtype, Fill("randn", "cpu", seed=1))


def test_unavailable_names_the_peer_script(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm_moe_peer", None)
    with pytest.raises(P.Unavailable, match="vllm-fused-moe.sh"):
        P.make_provider("vllm", SPEC, torch.bfloat16)


@pytest.mark.skipif(not _peer_available(), reason="vLLM's fused-MoE peer not in .peers")
@pytest.mark.parametrize("quant", ["none", "fp8_block128"])
@pytest.mark.parametrize("m", [1, 70])  # one token (vLLM's shortened grid) and 64-row tiles
def test_vllm_launches_match_the_reference(quant, m):
    prov = P.make_provider("vllm", SPEC, torch.float16)
    inputs = _inputs(_shape(num_tokens=m, quant=quant))
    c = P.check(prov, SPEC, torch.float16, inputs, P.reference(SPEC, torch.float16, inputs))
    assert c.passed, c.detail


@pytest.mark.skipif(not _peer_available(), reason="vLLM's fused-MoE peer not in .peers")
@pytest.mark.parametrize(
    "kw,what",
    [
        (dict(local=3), "expert_map"),
        (dict(activation="gelu"), "activation"),
        (dict(quant="fp8_channel"), "per-tensor/per-channel fp8"),
        (dict(topk=1, routed_input=1), "apply_router_weight_on_input"),
    ],
)
def test_points_without_a_vllm_launch_are_skipped_by_name(kw, what):
    prov = P.make_provider("vllm", SPEC, torch.float16)
    with pytest.raises(P.Inapplicable, match=what):
        prov.prepared(_inputs(_shape(**kw)))


class _FakePeer:
    """A stand-in for the peer module: records its launches, computes nothing."""

    fused_moe_kernel = object()

    def __init__(self):
        self.gemms = []

    def _table(self, *args):
        return None

    def get_config(self, M, E, N, K, topk, dtype_key=""):
        return {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1}

    def align(self, ids, block_m, E):
        one = torch.zeros(1, dtype=torch.int32)
        return one, one, one

    def gemm(self, A, B, C, *args):
        self.gemms.append(tuple(B.shape))


def test_vllm_times_its_two_gemm_launches_alone(monkeypatch):
    # vLLM's align, SiLU-and-mul, group quantization and top_k sum are CUDA ops: the timed call is the GEMMs alone
    import tritonkit.ops.silu_and_mul.api as silu_api

    peer = _FakePeer()
    monkeypatch.setitem(sys.modules, "vllm_moe_peer", peer)
    glue = []
    monkeypatch.setattr(silu_api, "forward", lambda x: glue.append(x.shape) or x[:, : x.shape[1] // 2])
    prov = P.make_provider("vllm", SPEC, torch.float16)
    assert prov.check_fn is not None and "two GEMM launches alone" in prov.description
    inputs = _inputs(_shape(num_tokens=3))
    kw = prov.prepared(inputs)  # GEMM1 and the glue once, outside the timing, for GEMM2's operand
    peer.gemms.clear(), glue.clear()
    prov.fn(kw)
    E, two_n, K = inputs["w1"].shape
    assert peer.gemms == [(E, two_n, K), (E, K, two_n // 2)] and glue == []
