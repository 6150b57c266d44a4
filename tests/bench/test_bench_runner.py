"""The sweep on a CPU (kernels under Triton's interpreter): checks, eager timing, records. No graph here."""

import dataclasses
import re
import sys
import types

import pytest
import torch
import triton
from conftest import ON_GPU

from tritonkit.bench import providers as P
from tritonkit.bench.runner import BenchConfig, OpTarget, Progress, SweepPoint, parse_kv, run, run_point, sweep_points
from tritonkit.bench.roofline import Ceilings
from tritonkit.ops.rms_norm.spec import SPEC as RMS
from tritonkit.spec import Shape

pytestmark = pytest.mark.skipif(ON_GPU, reason="the CPU path of the runner")
CEIL = Ceilings(copy_gbps=4000.0, matmul_tflops=800.0, floor_us=2.0, empty_us=1.1)
CPU = torch.device("cpu")


def _cfg(**kw):
    base = dict(
        targets=[OpTarget.parse("rms_norm:hidden=64")],
        models=["llama3-8b"],
        num_tokens=[1, 3],
        providers=["tritonkit", "eager", "vllm"],
        startup=False,
        repeats=2,
        max_sets=2,
        host_calls=3,
        device=CPU,
    )
    return BenchConfig(**(base | kw))


def test_parse_targets_and_shape_overrides():
    assert parse_kv("num_tokens=16, hidden=4096,kv_cache_dtype=fp8,eps=0.5") == {
        "num_tokens": 16,
        "hidden": 4096,
        "kv_cache_dtype": "fp8",
        "eps": 0.5,
    }
    with pytest.raises(ValueError):
        parse_kv("hidden")
    t = OpTarget.parse("rms_norm:residual=0")
    assert t.name == "rms_norm" and t.overrides == (("residual", 0),) and t.label == "rms_norm:residual=0"
    assert OpTarget.parse("silu_and_mul").label == "silu_and_mul"


def test_sweep_points_apply_overrides_and_drop_duplicates():
    pts = sweep_points(RMS, ["llama3-8b", "mistral-7b", "qwen2-7b"], [1, 16], {"residual": 0})
    # mistral-7b has llama3-8b's hidden size: its points are the same shapes, named after the first model
    assert [(p.num_tokens, p.shape["hidden"], p.shape["residual"], p.model, p.config) for p in pts] == [
        (1, 4096, 0, "llama3-8b", "hidden=4096,residual=0"),
        (16, 4096, 0, "llama3-8b", "hidden=4096,residual=0"),
        (1, 3584, 0, "qwen2-7b", "hidden=3584,residual=0"),
        (16, 3584, 0, "qwen2-7b", "hidden=3584,residual=0"),
    ]
    one = sweep_points(RMS, ["llama3-8b"], [1, 16, 256], {"num_tokens": 7})
    assert [(p.shape.id, p.num_tokens) for p in one] == [("num_tokens=7,hidden=4096,residual=1", 7)]
    with pytest.raises(ValueError, match="hiden"):
        sweep_points(RMS, ["llama3-8b"], [1], {"hiden": 1})


def test_sweep_points_follow_ops_that_spend_num_tokens_on_other_keys():
    # a decode sweep: num_tokens sequences whose context shrinks as the batch grows; one series per model
    spec = dataclasses.replace(
        RMS, sweep_shape=lambda m, t: Shape(num_seqs=t, context=min(4096, 65536 // t), hidden=m.hidden)
    )
    pts = sweep_points(spec, ["llama3-8b"], [1, 64, 1024], {})
    assert [(p.num_tokens, p.shape["context"]) for p in pts] == [(1, 4096), (64, 1024), (1024, 64)]
    assert {p.config for p in pts} == {"hidden=4096"}


def test_sweep_on_cpu_checks_times_and_records_every_provider():
    ops, points = run(_cfg(), CEIL)
    (op,) = ops
    assert op.label == "rms_norm:hidden=64" and op.providers["vllm"].startswith("unavailable")
    assert [(p.num_tokens, p.provider, p.status) for p in points] == [
        (1, "tritonkit", "ok"),
        (1, "eager", "ok"),
        (3, "tritonkit", "ok"),
        (3, "eager", "ok"),
    ]
    for p in points:
        assert p.graph is None and p.timed_by == "eager"
        assert p.eager.min_us <= p.eager.median_us <= p.eager.max_us
        assert p.bytes == RMS.work(Shape(p.shape), torch.bfloat16).bytes
        assert p.metrics.gbps == pytest.approx(p.bytes / (p.eager.median_us * 1e-6) / 1e9)
        assert p.check.error <= 1.0
    # host overhead at the smallest point only, for every provider that ran
    assert list(op.host_overhead) == ["num_tokens=1,hidden=64,residual=1"]
    assert set(op.host_overhead["num_tokens=1,hidden=64,residual=1"]) == {"tritonkit", "eager"}


def test_a_wrong_provider_is_reported_and_not_timed():
    shape = Shape(num_tokens=3, hidden=64, residual=0)
    tk = P.make_provider("tritonkit", RMS, torch.float32)
    off = P.Provider("off", "1% off", lambda inputs: {"y": RMS.call(inputs)["y"] * 1.01})
    unwritten = P.Provider(
        "half",
        "writes half of y",
        lambda inputs: {"y": torch.cat((RMS.call(inputs)["y"][:1], torch.full((2, 64), 7.0)))},
    )
    boom = P.Provider("boom", "raises", lambda inputs: 1 / 0)
    pt = SweepPoint(shape, "llama3-8b", 3, "hidden=64,residual=0")
    recs, _ = run_point(
        RMS,
        OpTarget("rms_norm"),
        pt,
        torch.float32,
        [tk, off, unwritten, boom],
        _cfg(),
        CEIL,
        l2=1 << 20,
        seed=0,
        skip=lambda name: None,
        progress=Progress(),
        host_point=False,
    )
    by = {r.provider: r for r in recs}
    assert by["tritonkit"].status == "ok"
    for name in ("off", "half", "boom"):
        assert by[name].status == "wrong", name
        assert by[name].eager is None and by[name].graph is None and by[name].metrics is None
        assert "eager" not in by[name].to_dict() and "gbps" not in by[name].to_dict()
    assert "mismatch" in by["off"].detail and "ZeroDivisionError" in by["boom"].detail


def test_a_provider_failing_only_in_host_timing_errs_at_its_point():
    shape = Shape(num_tokens=1, hidden=64, residual=0)
    tk = P.make_provider("tritonkit", RMS, torch.float32)
    calls = {"n": 0}

    def flaky(inputs):  # right for the check, the budget's probe call and the eager timing, then raises
        calls["n"] += 1
        if calls["n"] > 13:
            raise RuntimeError("flaky launch")
        return RMS.call(inputs)

    pt = SweepPoint(shape, "llama3-8b", 1, "hidden=64,residual=0")
    recs, hosts = run_point(
        RMS,
        OpTarget("rms_norm"),
        pt,
        torch.float32,
        [tk, P.Provider("flaky", "", flaky)],
        _cfg(repeats=1),
        CEIL,
        l2=1 << 20,
        seed=0,
        skip=lambda name: None,
        progress=Progress(),
        host_point=True,
    )
    by = {r.provider: r for r in recs}
    assert by["tritonkit"].status == "ok" and set(hosts) == {"tritonkit"}
    assert (
        by["flaky"].status == "error" and "host time per eager call: RuntimeError: flaky launch" in by["flaky"].detail
    )


def test_a_provider_over_the_point_budget_is_skipped_there_and_at_larger_points(monkeypatch):
    import time

    def slow(inputs):  # a call whose timing would take far longer than the budget allows
        time.sleep(0.2)
        return RMS.call(inputs)

    cfg = _cfg(providers=["tritonkit", "eager"], num_tokens=[1, 3, 5], point_budget_s=3.0)
    real = P.make_provider

    def make(name, spec, dtype):
        p = real(name, spec, dtype)
        return dataclasses.replace(p, fn=slow) if name == "eager" else p

    monkeypatch.setattr(P, "make_provider", make)
    _, points = run(cfg, CEIL)
    eager = {p.num_tokens: p for p in points if p.provider == "eager"}
    assert [eager[t].status for t in (1, 3, 5)] == ["skipped"] * 3
    assert eager[1].detail.startswith("over the point's time budget: its timing would take ~")
    # the estimate reads as its parts: the calls it would make over the input sets, one call's time
    m = re.search(r"~(\d+) s \((\d+) calls over (\d+) input sets, one ([\d.]+) ms\)", eager[1].detail)
    assert m, eager[1].detail
    total, calls, sets, one_ms = int(m[1]), int(m[2]), int(m[3]), float(m[4])
    assert calls == 15 * sets + 4 and one_ms >= 200 and abs(total - calls * one_ms / 1e3) <= 1
    assert eager[1].check is not None and eager[1].check.passed  # checked, then judged too slow to time
    assert eager[3].detail.startswith("over the point's time budget at num_tokens=1 already")
    assert eager[3].check is None  # not even called
    assert all(p.ok for p in points if p.provider == "tritonkit")


def test_an_inapplicable_provider_is_skipped_with_its_reason():
    shape = Shape(num_tokens=3, hidden=64, residual=0)

    def prepare(inputs):
        raise P.Inapplicable("no dense form of this point")

    dense = P.Provider("dense", "", lambda i: RMS.call(i), prepare=prepare)
    pt = SweepPoint(shape, "llama3-8b", 3, "hidden=64,residual=0")
    (r,), _ = run_point(
        RMS,
        OpTarget("rms_norm"),
        pt,
        torch.float32,
        [dense],
        _cfg(),
        CEIL,
        l2=1 << 20,
        seed=0,
        skip=lambda name: None,
        progress=Progress(),
        host_point=False,
    )
    assert r.status == "skipped" and r.detail == "not applicable: no dense form of this point"


def test_prepare_runs_outside_the_calls_and_feeds_them():
    shape = Shape(num_tokens=3, hidden=64, residual=0)
    seen = []

    def prepare(inputs):
        return {**inputs, "prepared": True}

    def fn(inputs):
        seen.append(inputs.get("prepared"))
        return RMS.call({k: v for k, v in inputs.items() if k != "prepared"})

    p = P.Provider("prep", "", fn, prepare=prepare)
    pt = SweepPoint(shape, "llama3-8b", 3, "hidden=64,residual=0")
    (r,), hosts = run_point(
        RMS,
        OpTarget("rms_norm"),
        pt,
        torch.float32,
        [p],
        _cfg(host_calls=2),
        CEIL,
        l2=1 << 20,
        seed=0,
        skip=lambda name: None,
        progress=Progress(),
        host_point=True,
    )
    assert r.ok and set(seen) == {True} and "prep" in hosts


def test_check_widens_the_bound_by_the_specs_error_scale():
    # outputs that can cancel (rotary) carry an error scale; the bench must compare as `tritonkit validate` does
    from tritonkit.testing import Fill

    spec = dataclasses.replace(RMS, error_scale=lambda i: {"y": torch.full(i["x"].shape, 1e6, dtype=torch.float64)})
    inputs = spec.make_inputs(Shape(num_tokens=3, hidden=64, residual=0), torch.float32, Fill("randn", CPU, 0))
    off = P.Provider("off", "0.01 off", lambda i: {"y": RMS.call(i)["y"] + 0.01})
    oracle = P.reference(spec, torch.float32, inputs)
    assert P.check(off, spec, torch.float32, inputs, oracle).passed
    assert not P.check(off, spec, torch.float32, inputs, P.Oracle(oracle.refs, {}, {})).passed


def test_deadline_skips_all_but_tritonkit():
    ops, points = run(_cfg(deadline_s=-1.0, num_tokens=[1]), CEIL)
    assert {p.provider: p.status for p in points} == {"tritonkit": "ok", "eager": "skipped"}


def test_clone_inputs_keeps_views_of_one_storage_together():
    qkv = torch.randn(3, 10)
    inputs = {"qkv": qkv, "q": qkv[:, :4].view(3, 2, 2), "k": qkv[:, 4:6], "is_neox": True}
    c = P.clone_inputs(inputs)
    c["q"].zero_()
    assert c["qkv"][:, :4].abs().sum() == 0 and qkv[:, :4].abs().sum() > 0
    assert torch.equal(c["k"], inputs["k"]) and c["k"].stride() == (10, 1) and c["is_neox"] is True


def test_find_kernels_and_compile_counts_read_the_jit_cache():
    def _k(x_ptr):
        pass

    kernel = triton.runtime.jit.JITFunction(_k)
    mod = types.ModuleType("tk_fake_op.kernel")
    kernel.module = mod.__name__
    mod._fake_kernel = kernel
    mod.wrapped = types.SimpleNamespace(fn=kernel)  # what autotune / heuristics wrappers look like
    user = types.ModuleType("tk_fake_op.api")
    user._fake_kernel = kernel  # imported into another module: counted once, where it is defined
    sys.modules.update({mod.__name__: mod, user.__name__: user})
    try:
        found = P.find_kernels(("tk_fake_op",))
        assert list(found.values()) == [kernel] and list(found)[0].startswith("tk_fake_op.kernel.")
        # two devices' caches: 2 + 1 compiled specializations
        kernel.device_caches = {0: ({"a": 1, "b": 2}, {}, None, None, None), 1: ({"a": 1}, {}, None, None, None)}
        assert P.compile_counts({"k": kernel}) == {"k": 3}
    finally:
        for name in ("tk_fake_op.kernel", "tk_fake_op.api"):
            sys.modules.pop(name, None)


def test_startup_runs_in_fresh_processes_and_checks_the_first_result():
    from tritonkit.bench.startup import measure_startup

    shape = {"num_tokens": 3, "hidden": 64, "residual": 1}
    res = measure_startup("rms_norm", shape, "float32", device="cpu", timeout=300)
    assert res["shape"] == shape
    for kind in ("cold", "warm"):
        r = res[kind]
        assert "error" not in r, r
        assert r["correct"] is True
        assert r["import_s"] > 0 and r["first_call_s"] > 0
        assert r["to_first_result_s"] == pytest.approx(r["import_s"] + r["cuda_init_s"] + r["first_call_s"])
        assert r["process_s"] >= r["to_first_result_s"]
    bad = measure_startup("no_such_op", shape, "float32", device="cpu", timeout=300)
    assert "no_such_op" in bad["cold"]["error"]


class _Counting(Progress):
    def __init__(self):
        self.total, self.steps = None, 0

    def start(self, total):
        self.total = total

    def advance(self, text):
        self.steps += 1


def test_progress_total_is_the_steps_the_run_takes():
    # vllm has no rms_norm kernel and float64 is not an rms_norm dtype: neither is stepped through, nor counted
    prog = _Counting()
    run(_cfg(dtypes=[torch.float32, torch.float64], num_tokens=[1]), CEIL, progress=prog)
    assert prog.total == prog.steps == 2


def test_only_a_host_sync_is_not_capturable(monkeypatch):
    from tritonkit.bench import timing

    for name in ("get_sync_debug_mode", "set_sync_debug_mode", "synchronize"):
        monkeypatch.setattr(torch.cuda, name, lambda *a: 0)

    def sync(_inputs):
        raise RuntimeError("called a synchronizing CUDA operation")

    def oom(_inputs):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    with pytest.raises(timing.NotCapturable, match="synchronizes with the host"):
        timing.check_capturable(sync, {})
    with pytest.raises(torch.cuda.OutOfMemoryError):
        timing.check_capturable(oom, {})
    timing.check_capturable(lambda _inputs: None, {})


def test_attention_sweeps_its_series_with_the_dense_reference_where_it_applies(monkeypatch):
    # every series of paged_attention's sweep, small heads, contexts and mixed batches for the interpreter
    from tritonkit.ops.paged_attention import spec as pa

    monkeypatch.setattr(pa, "SERIES_MIXED_DECODE", 2)
    over = "num_heads=4,num_kv_heads=2,head_dim=64,context=31"
    cfg = _cfg(
        targets=[OpTarget.parse(f"paged_attention:{over}")],
        num_tokens=[4, 16],
        providers=["tritonkit", "eager", "inductor", "sdpa"],
        dtypes=[torch.float16],
        host_calls=2,
    )
    ops, points = run(cfg, CEIL)
    (op,) = ops
    assert op.providers["inductor"].startswith("unavailable: its reference reads sequence lengths on the host")
    series = {p.config.split(" |")[0] for p in points}
    # with one context for all, the decode series are one, the chunked prefill is the prompt after 31 cached keys
    # and the speculative series one: their duplicate points are dropped
    assert series == {
        "decode 1K keys",
        "prefill causal",
        "speculative 4 tokens at 4K keys",
        "mixed: prompt + 2 decode at 4K",
    }
    by = {(p.config.split(" |")[0], p.num_tokens, p.provider): p for p in points}
    assert all(p.ok for p in points if p.provider in ("tritonkit", "eager")), [
        (k, p.detail) for k, p in by.items() if not p.ok
    ]
    assert by[("prefill causal", 16, "sdpa")].ok and by[("decode 1K keys", 16, "sdpa")].ok
    # 4 sequences verifying 4 tokens each: one batched SDPA call with the bottom-right causal mask
    assert by[("speculative 4 tokens at 4K keys", 16, "sdpa")].ok
    # the prompt after 31 cached keys (the context override): SDPA's bottom-right causal mask is its dense equivalent
    assert by[("prefill causal", 16, "sdpa")].shape["context"] == 31
    mixed = by[("mixed: prompt + 2 decode at 4K", 16, "sdpa")]
    assert mixed.status == "skipped" and mixed.detail.startswith("not applicable: a varlen batch")
    assert by[("prefill causal", 16, "tritonkit")].flops > 0


def test_base_revision_is_timed_beside_and_its_timings_reused(tmp_path):
    from tritonkit.bench import base as B
    from tritonkit.bench.report import format_results
    from tritonkit.bench.records import Results

    try:
        tree = B.checkout("HEAD", store=tmp_path / "store")
    except B.BaseTreeError as e:
        pytest.skip(f"not in a git checkout: {e}")
    cfg = _cfg(providers=["tritonkit"], num_tokens=[1, 3], base=tree)
    ops, points = run(cfg, CEIL)
    base = [p for p in points if p.provider == tree.label]
    assert len(base) == 2 and all(p.ok and p.check.passed for p in base), [p.detail for p in base]
    assert ops[0].providers[tree.label].startswith(f"tritonkit.ops.rms_norm at {tree.sha[:12]}")
    # the per-point ratio and its geomean are printed with the series
    text = format_results(Results({}, CEIL.to_dict(), ops, points))
    assert f"{tree.label}/tk" in text and f"{tree.label}/tk geomean" in text
    # a later run reuses the base timings it is given (keyed by op, dtype and shape)
    cache = tmp_path / "points.json"
    B.save_points(cache, [dict(p.to_dict(), timed_at="then") for p in base])
    again = _cfg(providers=["tritonkit"], num_tokens=[1, 3], base=tree, base_cached=B.load_points(cache))
    _, points2 = run(again, CEIL)
    reused = [p for p in points2 if p.provider == tree.label]
    assert all(p.ok and p.detail == "reused: timed then" for p in reused)
    assert [p.eager for p in reused] == [p.eager for p in base]


def test_attention_series_cover_decode_prefill_and_a_mixed_batch_within_the_cache_cap():
    from tritonkit.ops import get_spec

    spec = get_spec("paged_attention")
    pts = sweep_points(spec, ["llama3-8b"], [1, 16, 32, 64, 128, 256, 512, 65536], {})
    xs: dict[str, list[int]] = {}
    for p in pts:
        xs.setdefault(p.config.split(" |")[0], []).append(p.num_tokens)
    assert xs == {
        "decode 1K keys": [1, 16, 32, 64, 128, 256, 512],
        "decode 4K keys": [1, 16, 32, 64, 128, 256],
        "decode 8K keys": [1, 16, 32, 64, 128],
        "decode 32K keys": [1, 16, 32],
        "decode 128K keys": [1],
        "prefill causal": [16, 32, 64, 128, 256, 512, 65536],
        "chunked prefill to 16K keys": [16, 32, 64, 128, 256, 512],
        "speculative 4 tokens at 4K keys": [16, 32, 64, 128, 256, 512],
        "speculative 4 tokens at 32K keys": [16, 32, 64, 128],
        "mixed: prompt + 64 decode at 4K": [128, 256, 512, 65536],
    }
    spec4 = next(p for p in pts if p.config.startswith("speculative 4 tokens at 32K") and p.num_tokens == 128)
    assert (spec4.shape["num_seqs"], spec4.shape["q_len"], spec4.shape["context"]) == (32, 4, 32768 - 4)
    chunk = next(p for p in pts if p.config.startswith("chunked") and p.num_tokens == 512)
    assert chunk.shape["q_len"] == 512 and chunk.shape["context"] == 16384 - 512
    mixed = next(p for p in pts if p.config.startswith("mixed") and p.num_tokens == 512)
    assert mixed.shape["q_len"] == (448,) + (1,) * 64 and mixed.shape["num_seqs"] == 65
    # a series' label names what stays fixed along it, long tuples shortened
    assert "context=(0,4095x64)" in mixed.config and "num_kv_heads=8" in mixed.config
    decode = next(p for p in pts if p.config.startswith("decode 32K"))
    assert "context=32767" in decode.config


def test_models_for_skips_models_without_the_layer():
    # an op on an expert layer only: dense models have no point, MoE models one each
    moe_spec = dataclasses.replace(
        RMS, name="expert_op", sweep_shape=lambda m, t: Shape(num_tokens=t, experts=m.num_experts) if m.is_moe else None
    )
    given = _cfg(models=["llama3-8b", "mixtral-8x7b"])
    assert given.models_for(moe_spec) == ["mixtral-8x7b"]
    assert given.models_for(RMS) == ["llama3-8b", "mixtral-8x7b"]
    with pytest.raises(ValueError, match="expert_op: none of the models llama3-8b has a layer.*mixtral-8x7b"):
        _cfg(models=["llama3-8b"]).models_for(moe_spec)
    # without --models: the dense defaults, and for an expert op the MoE defaults
    defaults = _cfg(models=["llama3-8b", "qwen2-7b"], models_given=False)
    assert defaults.models_for(RMS) == ["llama3-8b", "qwen2-7b"]
    assert defaults.models_for(moe_spec) == ["mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3"]
    # paged attention has no point on DeepSeek-V3 (MLA is not what it computes)
    from tritonkit.ops.paged_attention.spec import SPEC as PA

    assert _cfg(models=["deepseek-v3", "llama3-8b"]).models_for(PA) == ["llama3-8b"]
    pts = sweep_points(moe_spec, given.models_for(moe_spec), [1, 4], {})
    assert [p.shape["experts"] for p in pts] == [8, 8] and {p.model for p in pts} == {"mixtral-8x7b"}


def test_series_picks_named_series_and_names_an_unknown_one():
    from tritonkit.ops import get_spec

    spec = get_spec("paged_attention")
    pts = sweep_points(spec, ["llama3-8b"], [1, 2048], {}, ("decode 8K keys", "chunked prefill to 16K keys"))
    assert {(p.config.split(" |")[0], p.num_tokens) for p in pts} == {
        ("decode 8K keys", 1),
        ("chunked prefill to 16K keys", 2048),
    }
    with pytest.raises(
        ValueError,
        match=r"paged_attention has no series 'decode 2K keys'; its series: "
        r"'decode 1K keys'",
    ):
        sweep_points(spec, ["llama3-8b"], [1], {}, ("decode 8K keys", "decode 2K keys"))
    # an op with one unnamed sweep ignores --series (it is about the ops that have several)
    assert len(sweep_points(RMS, ["llama3-8b"], [1, 2], {}, ("decode 8K keys",))) == 2
