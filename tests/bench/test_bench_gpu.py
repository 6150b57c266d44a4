"""bench on a real GPU: small sweeps through every timing path. Run through the device tool:
``PYTHONPATH=src:.peers python3 -m pytest -q -m gpu tests/bench``."""

import pytest
import torch

from tritonkit.bench import ceilings as C
from tritonkit.bench.runner import BenchConfig, OpTarget, run
from tritonkit.bench.roofline import Ceilings
from tritonkit.bench.timing import NotCapturable, check_capturable, time_graph

# timings judged against budgets and ceilings: the card to themselves under pytest-xdist
pytestmark = [pytest.mark.gpu, pytest.mark.gpu_alone]


def test_floor_and_empty_launch_are_microseconds():
    floor, empty = C.measure_floor_us(torch.device("cuda"))
    assert 0.3 < empty < floor < 20.0


def test_copy_ceiling_is_plausible_and_beats_copy_engine():
    dev = torch.device("cuda")
    gbps, per_config = C.measure_copy_gbps(dev)
    assert 300 < gbps < 20000 and len(per_config) > 1
    # a copy_ captured in a CUDA graph is a memcpy node on the copy engine (2.77 TB/s on an H200, against 4.09 for
    # the SM-driven kernel): the ceiling must be the kernel's, above it
    src = torch.ones(256 << 20, dtype=torch.int32, device=dev)  # 1 GiB read, 1 GiB written
    dst = torch.empty_like(src)
    t = time_graph(lambda _inp: dst.copy_(src), [{}], dev, repeats=5)
    engine_gbps = 2 * src.numel() * src.element_size() / (t.median_us * 1e-6) / 1e9
    assert torch.equal(dst, src)
    assert gbps > 1.1 * engine_gbps, (gbps, engine_gbps)


def test_size_matched_copy_is_timed_like_an_op_point():
    dev = torch.device("cuda")
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size
    ceil, _ = C.measure_copy_gbps(dev)
    small = C.time_size_matched_copy(40960, l2, dev, max_sets=2048, mem_budget=16 << 30)
    mid = C.time_size_matched_copy(33562624, l2, dev, max_sets=2048, mem_budget=16 << 30)
    big = C.time_size_matched_copy(1 << 30, l2, dev, max_sets=2048, mem_budget=16 << 30)
    # decode size: 2048 sets are too few to turn the L2 over, so it is flushed; microseconds, far under the ceiling
    assert small.info["l2_flush"] and small.info["sets"] == 2048 and small.info["bytes"] == 40960
    assert 0.5 < small.us < 20
    assert not mid.info["l2_flush"] and mid.info["sets"] * mid.info["bytes"] >= 2 * l2
    # a copy of the op's size itself stays under the large-buffer ceiling, closer to it as the size grows
    assert small.gbps < mid.gbps < big.gbps < 1.05 * ceil
    assert big.gbps > 0.9 * ceil


def test_host_sync_is_reported_not_captured():
    x = torch.ones(4, device="cuda")
    with pytest.raises(NotCapturable):
        check_capturable(lambda inp: bool(x.sum() > 0), {})
    with pytest.raises(NotCapturable):
        time_graph(lambda inp: x[x > 0], [{}], torch.device("cuda"))
    # the context still works afterwards
    assert torch.cuda.is_available() and float((x * 2).sum()) == 8.0


def test_small_sweep_through_every_path():
    dev = torch.device("cuda")
    floor, empty = C.measure_floor_us(dev)
    ceil = Ceilings(
        copy_gbps=C.measure_copy_gbps(dev)[0],
        matmul_tflops=C.measure_matmul_tflops(dev),
        floor_us=floor,
        empty_us=empty,
    )
    # earlier GPU tests in this process may have compiled these specializations already: the sweep's compile count
    # is a delta, so start from an empty JIT cache
    from tritonkit.ops.rms_norm.kernel import _rms_norm_fwd_kernel

    _rms_norm_fwd_kernel.device_caches.clear()
    cfg = BenchConfig(
        targets=[OpTarget.parse("rms_norm"), OpTarget.parse("rms_norm:residual=0")],
        models=["llama3-8b"],
        num_tokens=[1, 4096],
        providers=["tritonkit", "eager", "inductor"],
        startup=True,
        device=dev,
    )
    ops, points = run(cfg, ceil)
    assert {p.status for p in points} == {"ok"}, [p.detail for p in points if p.status != "ok"]
    for p in points:
        assert p.graph.median_us > 0.5 and p.timed_by == "graph"
        assert 0 < p.metrics.pct_ceiling < 110
        assert p.copy.us > 0.5 and 0 < p.pct_of_copy < 200
    small = [p for p in points if p.num_tokens == 1]
    assert all(p.l2_flush for p in small)
    for op in ops:
        # one compile of the kernel per op config over the sweep
        assert list(op.compiles["tritonkit"].values()) == [1], op.compiles
        assert op.startup["cold"]["correct"] and op.startup["warm"]["correct"]
        assert op.startup["warm"]["first_call_s"] < op.startup["cold"]["first_call_s"]
        (hosts,) = op.host_overhead.values()
        assert set(hosts) == {"tritonkit", "eager", "inductor"}


def test_attention_series_with_peers():
    dev = torch.device("cuda")
    floor, empty = C.measure_floor_us(dev)
    ceil = Ceilings(
        copy_gbps=C.measure_copy_gbps(dev)[0],
        matmul_tflops=C.measure_matmul_tflops(dev),
        floor_us=floor,
        empty_us=empty,
    )
    cfg = BenchConfig(
        targets=[OpTarget.parse("paged_attention")],
        models=["llama3-8b"],
        num_tokens=[4, 256],
        providers=["tritonkit", "eager", "vllm", "sdpa"],
        startup=False,
        device=dev,
        series=("decode 4K keys", "decode 32K keys", "prefill causal", "mixed: prompt + 64 decode at 4K"),
    )
    _, points = run(cfg, ceil)
    by = {(p.config.split(" |")[0], p.num_tokens, p.provider): p for p in points}
    # the named series only, at 256 tokens, decode at 4 too; tritonkit timed by graph and right everywhere
    for key, p in by.items():
        if p.provider == "tritonkit":
            assert p.ok and p.timed_by == "graph", (key, p.detail)
    assert {k[0] for k in by} == {
        "decode 4K keys",
        "decode 32K keys",
        "prefill causal",
        "mixed: prompt + 64 decode at 4K",
    }
    # sdpa: a dense equivalent for decode batches and the causal prompt, none for the mixed batch
    assert by[("prefill causal", 256, "sdpa")].ok and by[("decode 4K keys", 4, "sdpa")].ok
    assert by[("mixed: prompt + 64 decode at 4K", 256, "sdpa")].status == "skipped"
    # decode is memory-bound (KV bytes/s), a long prompt compute-bound (TFLOP/s)
    assert by[("decode 4K keys", 256, "tritonkit")].metrics.bound == "memory"


def test_fused_moe_sweep_with_the_vllm_peer():
    # bf16 (Qwen3-30B-A3B) and block fp8 (DeepSeek-V3) at decode and a small prefill, beside vLLM's kernel with its
    # tables; the GEMMs compile at most once per distinct tile config of the swept buckets
    from tritonkit.bench import providers as P
    from tritonkit.ops import get_spec

    dev = torch.device("cuda")
    floor, empty = C.measure_floor_us(dev)
    ceil = Ceilings(
        copy_gbps=C.measure_copy_gbps(dev)[0],
        matmul_tflops=C.measure_matmul_tflops(dev),
        floor_us=floor,
        empty_us=empty,
    )
    try:
        P.make_provider("vllm", get_spec("fused_moe"), torch.bfloat16)
        providers = ["tritonkit", "vllm"]
    except P.Unavailable:
        providers = ["tritonkit"]
    cfg = BenchConfig(
        targets=[OpTarget.parse("fused_moe")],
        models=["qwen3-30b-a3b", "deepseek-v3"],
        num_tokens=[1, 256],
        providers=providers,
        startup=False,
        device=dev,
    )
    ops, points = run(cfg, ceil)
    assert {p.provider for p in points} == set(providers)
    for p in points:
        assert p.ok and p.timed_by == "graph", (p.config, p.num_tokens, p.provider, p.detail)
    assert ops
    # each GEMM once per distinct (tile config, layout) the lookup picks over the models and buckets
    want = _fused_moe_picks(get_spec("fused_moe"), cfg.models, cfg.num_tokens)
    for op in ops:
        for name, n in op.compiles["tritonkit"].items():
            assert n <= want.get(name.rsplit(".", 1)[-1], 1), (op.compiles, want)


def _fused_moe_picks(spec, models, tokens) -> dict:
    """Distinct GEMM1 and GEMM2 (config, layout, quantization) triples fused_moe's lookup picks for ``models`` x
    ``tokens`` on this card (its tuned table where one ships, else the default rule): each is a compile."""
    from tritonkit.models import MODELS
    from tritonkit.ops.fused_moe.config import fused_moe_config

    picks = []
    for m in models:
        for t in tokens:
            s = spec.sweep_shape(MODELS[m], t)
            quant = s.get("quant", "none")
            cfg = fused_moe_config(
                s["num_tokens"], s["experts"], s["inter"], s["hidden"], s["topk"], "bfloat16", quant,
                torch.cuda.get_device_name(),
            )  # fmt: skip
            picks.append((cfg, quant))
    return {
        "_fused_moe_gemm1_kernel": len({(c.gemm1, c.slots, q) for c, q in picks}),
        "_fused_moe_gemm2_kernel": len({(c.gemm2, c.slots, q) for c, q in picks}),
    }


def test_fp8_matmul_ceiling_is_measured_past_the_bf16_one():
    dev = torch.device("cuda")
    bf16, fp8 = C.measure_matmul_tflops(dev), C.measure_matmul_fp8_tflops(dev)
    if torch.cuda.get_device_capability(dev) < (8, 9):
        assert fp8 == 0.0  # no fp8 matmul
    else:
        assert 1.3 * bf16 < fp8 < 3 * bf16, (bf16, fp8)
