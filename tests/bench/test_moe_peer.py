"""The vllm provider of fused_moe (``tritonkit.ops.fused_moe.peers``) on a CPU.

With vLLM's kernel present (``shared/peers/vllm-fused-moe.sh .peers`` in the repository root, git-ignored) its
launches, through the peer's own driver, are checked against the float64 reference and against tritonkit's
fused_moe under Triton's interpreter (compiled where there is a GPU), fp16 and block-wise fp8 (fp16 activations: the
interpreter multiplies bfloat16 dot operands as raw bits); without it those tests skip. The rest run on stand-in
drivers, everywhere.
"""

import sys
import types
from pathlib import Path

import pytest
import torch
import triton
from triton.runtime.errors import InterpreterError

from tritonkit.bench import providers as P
from tritonkit.ops import get_spec
from tritonkit.ops.fused_moe import peers
from tritonkit.spec import Shape
from tritonkit.testing import Fill
from tritonkit.testing.metric import compare

PEERS = Path(__file__).parents[2] / ".peers"
SPEC = get_spec("fused_moe")
WHEEL = "vllm-0.34.0-cp38-abi3-manylinux_2_28_x86_64.whl"


def _peer_available() -> bool:
    if PEERS.is_dir() and str(PEERS) not in sys.path:
        sys.path.insert(0, str(PEERS))
    try:
        import vllm_moe_peer  # noqa: F401
    except ImportError:
        return False
    return True


needs_peer = pytest.mark.skipif(
    not _peer_available(), reason="vLLM's fused-MoE peer not in .peers (shared/peers/vllm-fused-moe.sh .peers)"
)


def _shape(**kw):
    base = dict(num_tokens=9, hidden=256, inter=192, experts=4, topk=2, quant="none")
    base.update(kw)
    return Shape(base)


def _inputs(shape, dtype=torch.float16, device="cpu"):
    return SPEC.make_inputs(shape, dtype, Fill("randn", device, seed=1))


class _FakeDriver(types.ModuleType):
    """A stand-in for the peer's 0.34 driver: records what is called, computes nothing."""

    WHEEL = WHEEL
    FP8_BLOCK_KEY = ",dtype=fp8_w8a8,block_shape=[128,128]"

    def __init__(self):
        super().__init__(peers.PEER_MODULE)
        self.calls = []

    def get_config(self, M, E, N, K, topk, dtype_key=""):
        self.calls.append(("get_config", dtype_key))
        return {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1}

    def assign(self, ids, cfg, E):
        self.calls.append(("assign",))
        return None, ids.view(-1), torch.zeros(1, dtype=torch.int32)

    def gemm(self, A, B, C, *args):
        self.calls.append(("gemm", tuple(B.shape)))

    def gemm_fp8_block(self, A, A_scale, B, B_scale, C, *args):
        self.calls.append(("gemm_fp8_block", tuple(B.shape)))

    def quantize_act(self, x):
        self.calls.append(("quantize_act",))
        return x, torch.ones(x.shape[0], -(-x.shape[1] // 128))


@pytest.fixture
def fake(monkeypatch):
    driver = _FakeDriver()
    monkeypatch.setitem(sys.modules, peers.PEER_MODULE, driver)
    return driver


def test_unavailable_names_the_peer_script(monkeypatch):
    monkeypatch.setitem(sys.modules, peers.PEER_MODULE, None)
    with pytest.raises(P.Unavailable, match="vllm-fused-moe.sh"):
        P.make_provider("vllm", SPEC, torch.float16)


def test_a_driver_cut_for_another_vllm_version_is_unavailable_by_name(monkeypatch):
    # the driver the peer script wrote for vLLM 0.33: align and gemm, the provider launching block-fp8 itself
    old = types.ModuleType(peers.PEER_MODULE)
    old.fused_moe_kernel, old.get_config, old.align, old.gemm = object(), len, len, len
    monkeypatch.setitem(sys.modules, peers.PEER_MODULE, old)
    with pytest.raises(P.Unavailable, match=r"no WHEEL, FP8_BLOCK_KEY, assign, gemm_fp8_block, quantize_act.*rerun"):
        P.make_provider("vllm", SPEC, torch.float16)


def test_the_description_names_the_vllm_version_of_the_wheel(fake, monkeypatch):
    prov = P.make_provider("vllm", SPEC, torch.float16)
    assert prov.description.startswith("vLLM 0.34.0's fused_moe_kernel") and WHEEL in prov.description
    monkeypatch.setattr(_FakeDriver, "WHEEL", "somewhere")
    with pytest.raises(P.Unavailable, match="no vLLM version"):
        P.make_provider("vllm", SPEC, torch.float16)


@pytest.mark.parametrize(
    "quant,key,gemm",
    [("none", "", "gemm"), ("fp8_block128", _FakeDriver.FP8_BLOCK_KEY, "gemm_fp8_block")],
)
def test_vllm_times_its_two_gemm_launches_alone(fake, quant, key, gemm):
    # vLLM's alignment, SiLU-and-mul, group quantization and top_k sum are CUDA ops: the timed call is the GEMMs alone
    prov = P.make_provider("vllm", SPEC, torch.float16)
    assert prov.check_fn is not None and "two GEMM launches alone" in prov.description
    inputs = _inputs(_shape(num_tokens=3, inter=128, quant=quant))
    kw = prov.prepared(inputs)  # config, assignment, GEMM1 and the glue once, outside the timing
    assert fake.calls[:2] == [("get_config", key), ("assign",)]
    fake.calls.clear()
    prov.fn(kw)
    E, two_n, K = inputs["w1"].shape
    assert fake.calls == [(gemm, (E, two_n, K)), (gemm, (E, K, two_n // 2))]


@pytest.mark.parametrize(
    "kw,what",
    [
        (dict(local=3), "expert_map"),
        (dict(activation="gelu"), "activation"),
        (dict(quant="fp8_channel"), "per-tensor/per-channel fp8"),
        (dict(quant="fp8_tensor"), "per-tensor/per-channel fp8"),
        (dict(quant="fp8_tensor", static_a=1), "a1_scale, a2_scale"),
        (dict(topk=1, routed_input=1), "apply_router_weight_on_input"),
        (dict(quant="fp8_block128", inter=192), "inter 192 .*whole 128-column groups"),
    ],
)
def test_points_without_a_vllm_launch_are_skipped_by_name(fake, kw, what):
    prov = P.make_provider("vllm", SPEC, torch.float16)
    with pytest.raises(P.Inapplicable, match=what):
        prov.prepared(_inputs(_shape(**kw)))
    assert not any(c[0].startswith("gemm") for c in fake.calls)


def _quantize_act_rounded(x):
    """vLLM's per_token_group_quant_fp8 arithmetic (amax clamped to 1e-10, / 448, clamp, cast) in torch."""
    g = x.float().view(x.shape[0], -1, 128)
    s = g.abs().amax(-1, keepdim=True).clamp(min=1e-10) / 448.0
    return (g / s).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(x.shape), s.squeeze(-1)


def _triton_at_least(major: int, minor: int) -> bool:
    return tuple(int(x) for x in triton.__version__.split(".")[:2]) >= (major, minor)


@pytest.fixture
def cpu_fp8_cast(monkeypatch):
    """Triton 3.6's interpreter casts float32 to e4m3 without carrying a mantissa round-up into the exponent (x / s =
    124.3 becomes 64, not 128), so vLLM's quant kernel, which casts with ``.to``, is wrong on a CPU only: there its
    arithmetic in torch stands in (tritonkit's kernels round by hand). Its scales are checked against vLLM's."""
    import vllm_moe_peer

    if torch.cuda.is_available():
        return

    x = torch.randn(3, 256, dtype=torch.float16)
    torch.testing.assert_close(vllm_moe_peer.quantize_act(x)[1], _quantize_act_rounded(x)[1], rtol=1e-6, atol=0)
    monkeypatch.setattr(vllm_moe_peer, "quantize_act", _quantize_act_rounded)


@needs_peer
def test_the_cut_peer_names_its_vllm_version():
    import vllm_moe_peer

    version = peers.vllm_version(vllm_moe_peer)
    assert f"vllm-{version}-" in vllm_moe_peer.WHEEL
    assert P.make_provider("vllm", SPEC, torch.float16).description.startswith(f"vLLM {version}'s ")


@needs_peer
@pytest.mark.parametrize("quant", ["none", "fp8_block128"])
@pytest.mark.parametrize(
    "shape,naive",
    [
        (dict(num_tokens=1, experts=8, hidden=128, inter=128), True),  # decode: one slot per block, no sorted ids
        (dict(num_tokens=2, experts=4, hidden=128, inter=128), False),  # aligned, vLLM's shortened grid
        (dict(num_tokens=70, hidden=256, inter=256), False),  # 64-row tiles (vLLM's default rule past M 64)
    ],
    ids=["decode", "small", "m70"],
)
def test_vllm_launches_match_the_reference_and_tritonkit(cpu_fp8_cast, quant, shape, naive):
    prov = P.make_provider("vllm", SPEC, torch.float16)
    # on a GPU the same points run compiled (B through TMA for block-fp8 on sm_90), else under the interpreter
    inputs = _inputs(_shape(**shape, quant=quant), device="cuda" if torch.cuda.is_available() else "cpu")
    try:
        routing = prov.prepared(inputs)["routing"]
    except InterpreterError as e:
        if torch.cuda.is_available() or not _triton_at_least(3, 9):
            raise
        # Triton 3.9's interpreter raises inside vLLM 0.34's own kernel at its 64-row block-fp8 tiles ("too many
        # indices for tensor of rank 0"); vLLM pins Triton 3.8, under which (and 3.6, 3.7) these points run
        pytest.skip(f"Triton {triton.__version__}'s interpreter cannot run vLLM's kernel here: {str(e)[-120:]}")
    assert (routing[1] is None) == naive
    oracle = P.reference(SPEC, torch.float16, inputs)
    c = P.check(prov, SPEC, torch.float16, inputs, oracle)
    assert c.passed, c.detail
    ours = SPEC.call(P.clone_inputs(inputs))["out"]
    theirs = prov.check_fn(prov.prepared(P.clone_inputs(inputs)))["out"]
    same = compare(theirs, ours.double(), SPEC.tolerance_for(torch.float16), oracle.scales.get("out"))
    assert same.passed, same.describe()
