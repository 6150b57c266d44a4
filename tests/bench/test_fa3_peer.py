"""The fa3 provider of paged_attention (``tritonkit.ops.paged_attention.peers.fa3``) on a CPU.

vLLM's FA3 binary needs CUDA, so here a stand-in ``vllm_fa3_peer`` takes its place: its ``fa3_varlen`` has the
wrapper's signature (``shared/peers/vllm-fa3.sh``), checks what FA3 checks of its arguments and computes flash-attn's
attention with torch from exactly what it receives, so the bench's check against the float64 reference passes only
if q/k/v/out, cu_seqlens_q, seqused_k, block_table, the scale, causal, window and softcap are wired right. On the GPU
machine (``PYTHONPATH=src:.peers``, the real peer cut into .peers) the gpu test checks the binary itself.
"""

import sys
import types
from pathlib import Path

import pytest
import torch

from tritonkit.bench import providers as P
from tritonkit.ops import get_spec
from tritonkit.ops.paged_attention import peers
from tritonkit.spec import Shape
from tritonkit.testing import Fill

SPEC = get_spec("paged_attention")
PEERS = Path(__file__).parents[2] / ".peers"
#: the schema FA3's binary (vLLM 0.34.0, _vllm_fa3_C.abi3.so) registers its scheduler op with
SCHEDULER_SCHEMA = (
    "get_scheduler_metadata(int batch_size, int max_seqlen_q, int max_seqlen_k, int num_heads, int num_heads_k, "
    "int headdim, int headdim_v, ScalarType qkv_dtype, Tensor seqused_k, Tensor? cu_seqlens_q, "
    "Tensor? cu_seqlens_k, Tensor? cu_seqlens_k_new, Tensor? seqused_q, Tensor? leftpad_k, int? page_size, "
    "int max_seqlen_k_new, bool is_causal, int window_size_left, int window_size_right, bool has_softcap, "
    "int num_splits, bool? pack_gqa, int sm_margin) -> Tensor"
)


def fa3_varlen(
    q,
    k_cache,
    v_cache,
    *,
    cu_seqlens_q,
    seqused_k,
    block_table,
    max_seqlen_q,
    max_seqlen_k,
    softmax_scale=None,
    causal=True,
    window_size=(-1, -1),
    softcap=0.0,
    out=None,
    scheduler_metadata=None,
    num_splits=0,
):
    """flash-attn's varlen attention over a paged cache, in float32: the stand-in for FA3's binary."""
    fa3_varlen.calls.append(dict(scheduler_metadata=scheduler_metadata, num_splits=num_splits))
    num_seqs = seqused_k.shape[0]
    _, page, hkv, d = k_cache.shape
    assert all(t.dtype == torch.int32 for t in (cu_seqlens_q, seqused_k, block_table))
    assert cu_seqlens_q.shape == (num_seqs + 1,) and block_table.shape[0] == num_seqs
    assert q.dtype == k_cache.dtype == v_cache.dtype and v_cache.shape == k_cache.shape
    assert q.shape[2] == d and q.shape[1] % hkv == 0
    assert q.stride(-1) == k_cache.stride(-1) == v_cache.stride(-1) == 1
    if out is None:
        out = torch.empty_like(q)
    assert out.shape == q.shape and out.dtype == q.dtype
    scale = d**-0.5 if softmax_scale is None else softmax_scale
    left, right = window_size
    if causal:
        right = 0
    group = q.shape[1] // hkv
    for s in range(num_seqs):
        a, b, n = int(cu_seqlens_q[s]), int(cu_seqlens_q[s + 1]), int(seqused_k[s])
        assert b - a <= max_seqlen_q and n <= max_seqlen_k
        pages = block_table[s, : -(-n // page)].long()
        k = k_cache[pages].reshape(-1, hkv, d)[:n].float().repeat_interleave(group, 1)  # [n, Hq, D]
        v = v_cache[pages].reshape(-1, hkv, d)[:n].float().repeat_interleave(group, 1)
        logits = torch.einsum("thd,khd->htk", q[a:b].float(), k) * scale  # [Hq, rows, n]
        if softcap:
            logits = softcap * torch.tanh(logits / softcap)
        # bottom-right aligned: the sequence's last query row sits at its last key
        q_pos = torch.arange(n - (b - a), n)[:, None]
        k_pos = torch.arange(n)[None, :]
        visible = torch.ones(b - a, n, dtype=torch.bool)
        if left >= 0:
            visible &= k_pos >= q_pos - left
        if right >= 0:
            visible &= k_pos <= q_pos + right
        p = torch.softmax(logits.masked_fill(~visible, float("-inf")), -1)
        out[a:b] = torch.einsum("htk,khd->thd", p, v).to(out.dtype)
    return out


@pytest.fixture
def stand_in(monkeypatch):
    mod = types.ModuleType(peers.FA3_MODULE)
    mod.fa3_varlen = fa3_varlen
    fa3_varlen.calls = []
    monkeypatch.setitem(sys.modules, peers.FA3_MODULE, mod)
    return fa3_varlen.calls


def _shape(**kw):
    base = dict(num_seqs=3, q_len=1, context=(5, 40, 17), num_heads=4, num_kv_heads=2, head_dim=32, block_size=16)
    base.update(kw)
    return Shape(base)


def _check(shape, dtype=torch.bfloat16, device="cpu"):
    prov = P.make_provider("fa3", SPEC, dtype)
    inputs = SPEC.make_inputs(shape, dtype, Fill("randn", device, seed=3))
    return P.check(prov, SPEC, dtype, inputs, P.reference(SPEC, dtype, inputs))


def test_unavailable_names_the_peer_script(monkeypatch):
    monkeypatch.setitem(sys.modules, peers.FA3_MODULE, None)
    with pytest.raises(P.Unavailable, match=r"FA3 peer not importable .*vllm-fa3\.sh DIR"):
        P.make_provider("fa3", SPEC, torch.bfloat16)


@pytest.mark.skipif(
    torch.cuda.is_available() or not (PEERS / peers.FA3_MODULE).is_dir(), reason="needs the cut peer and no CUDA"
)
def test_the_real_binary_without_cuda_is_unavailable_with_the_loaders_reason(monkeypatch):
    monkeypatch.syspath_prepend(str(PEERS))
    monkeypatch.delitem(sys.modules, peers.FA3_MODULE, raising=False)
    with pytest.raises(P.Unavailable, match=r"OSError: Could not load this library.*needs CUDA"):
        P.make_provider("fa3", SPEC, torch.bfloat16)


@pytest.mark.parametrize(
    "kw",
    [
        dict(),  # decode, 3 sequences of mixed lengths, GQA 2
        dict(q_len=(7, 1, 20), context=(0, 30, 9)),  # causal prompts beside a decode row, after cached keys
        dict(q_len=(7, 1, 20), context=(0, 30, 9), causal=0, num_kv_heads=4, block_size=32),
        dict(q_len=(7, 1, 20), context=(0, 30, 9), window_left=6),
        dict(q_len=(7, 1, 20), context=(0, 30, 9), causal=0, window_left=5, window_right=3, softcap=2.0),
    ],
    ids=["decode", "prefill", "noncausal", "window", "window2-softcap"],
)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_the_call_passes_the_bench_check(stand_in, kw, dtype):
    c = _check(_shape(**kw), dtype)
    assert c.passed, c.detail
    # the binary's scheduler op is not loaded here: FA3 schedules inside the call, with its split heuristic
    assert stand_in == [dict(scheduler_metadata=None, num_splits=0)]
    assert "FA3 schedules inside each call" in P.make_provider("fa3", SPEC, dtype).description


def test_a_wrong_scale_fails_the_check(stand_in, monkeypatch):
    # the check can fail: the stand-in ignores the scale it is given
    def wrong(*a, softmax_scale=None, **kw):
        return fa3_varlen(*a, softmax_scale=1.0, **kw)

    monkeypatch.setattr(sys.modules[peers.FA3_MODULE], "fa3_varlen", wrong)
    assert not _check(_shape()).passed


@pytest.mark.parametrize(
    "kw, what",
    [
        (dict(kv_dtype="fp8"), "fp8 KV cache: fa3_varlen passes no q/k/v descales"),
        (dict(sinks=1), "sinks: fa3_varlen passes no s_aux"),
        (dict(block_size=8), "block_size 8: vLLM runs FA3 on pages of a multiple of 16 keys"),
        (dict(head_dim=20), "head_dim 20: FA3 takes head sizes a multiple of 8 up to 256"),
    ],
)
def test_points_fa3_is_not_given_are_skipped_by_name(stand_in, kw, what):
    prov = P.make_provider("fa3", SPEC, torch.bfloat16)
    inputs = SPEC.make_inputs(_shape(**kw), torch.bfloat16, Fill("randn", "cpu", seed=3))
    with pytest.raises(P.Inapplicable, match=what):
        prov.prepared(inputs)


_LIB = {}


def test_the_schedule_is_built_outside_the_call_as_vllm_builds_it(stand_in, monkeypatch):
    # the binary's scheduler op, as its schema declares it, in a namespace of the test's own
    seen = []
    if not _LIB:
        _LIB["lib"] = lib = torch.library.Library("tritonkit_fa3_test", "DEF")
        lib.define(SCHEDULER_SCHEMA)
        lib.impl(
            "get_scheduler_metadata",
            lambda *a: _LIB["record"](a),
            "CompositeExplicitAutograd",
        )
    _LIB["record"] = lambda args: (seen.append(args), torch.arange(5, dtype=torch.int32))[1]
    monkeypatch.setattr(peers, "FA3_OPS", "tritonkit_fa3_test")
    assert (
        "scheduler metadata built per batch outside the timing"
        in P.make_provider("fa3", SPEC, torch.bfloat16).description
    )
    shape = _shape(q_len=(7, 1, 20), context=(0, 30, 9), window_left=6, softcap=2.0)
    assert _check(shape).passed
    (args,) = seen
    names = [a.split()[-1] for a in SCHEDULER_SCHEMA.split("(", 1)[1].split(")")[0].split(", ")]
    got = dict(zip(names, args))
    assert {k: got[k] for k in ("batch_size", "max_seqlen_q", "max_seqlen_k", "num_heads", "num_heads_k")} == {
        "batch_size": 3,
        "max_seqlen_q": 20,
        "max_seqlen_k": 31,
        "num_heads": 4,
        "num_heads_k": 2,
    }
    assert (got["headdim"], got["headdim_v"], got["qkv_dtype"], got["page_size"]) == (32, 32, torch.bfloat16, 16)
    assert got["seqused_k"].tolist() == [7, 31, 29] and got["cu_seqlens_q"].tolist() == [0, 7, 8, 28]
    assert (got["is_causal"], got["window_size_left"], got["window_size_right"], got["has_softcap"]) == (
        True,
        6,
        -1,
        True,
    )
    assert got["num_splits"] == 0
    (call,) = stand_in
    assert call["scheduler_metadata"].tolist() == [0, 1, 2, 3, 4] and call["num_splits"] == 0


@pytest.mark.gpu
@pytest.mark.parametrize(
    "kw",
    [dict(), dict(q_len=(7, 1, 20), context=(0, 30, 9)), dict(q_len=(64, 9), context=(0, 300), window_left=40)],
    ids=["decode", "prefill", "window"],
)
def test_the_binary_passes_the_bench_check(kw):
    pytest.importorskip(peers.FA3_MODULE, reason="cut the peer: bash ../shared/peers/vllm-fa3.sh .peers")
    prov = P.make_provider("fa3", SPEC, torch.bfloat16)
    assert "scheduler metadata built per batch outside the timing" in prov.description
    c = _check(_shape(num_seqs=len(kw.get("q_len", (1, 1, 1))), head_dim=128, **kw), device="cuda")
    assert c.passed, c.detail
