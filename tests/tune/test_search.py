"""The whole tuner on a tiny expert layer under the interpreter, with a fake timer that makes known configs fastest:
the table it writes, its lookup, the routing average, dropped configs, and resuming an interrupted run."""

import dataclasses
import json

import pytest
import torch

from tritonkit.models import ModelConfig
from tritonkit.ops.fused_moe import config
from tritonkit.ops.fused_moe.config import FusedMoeConfig, GemmConfig
from tritonkit.tune import fused_moe as fm
from tritonkit.tune.space import Space

TINY = ModelConfig(
    "tiny-moe",
    hidden=64,
    intermediate=0,
    num_heads=0,
    num_kv_heads=0,
    head_dim=0,
    rotary_dim=0,
    num_experts=4,
    topk=2,
    moe_intermediate=32,
)
LAYER = fm.Layer.of(TINY)
DEVICE_NAME = "Test GPU"
# two values a field where it matters, one elsewhere: 8-20 candidates per bucket
SPACE = Space(block_m=(16, 32), block_n=(32, 64), block_k=(64,), group_m=(1, 8), num_warps=(4,), num_stages=(2,))
BUCKETS = (1, 8)


def _g(bm, bn, gm):
    return GemmConfig(bm, bn, 64, gm, 4, 2)


# the fake card's fastest config per bucket: block_m 16 at one token (in the rule's slot blocks there: the tuner
# keeps the seed's layout), 32 at eight, each GEMM its own tile
SLOTS_AT_1 = int(config.use_slots(1, TINY.num_experts, TINY.topk))
FASTEST = {
    1: FusedMoeConfig(_g(16, 64, 1), _g(16, 32, 8), SLOTS_AT_1),
    8: FusedMoeConfig(_g(32, 32, 8), _g(32, 64, 1)),
}
# fastest on routing 0 only: the routing average must reject it
TRAP = {
    m: dataclasses.replace(c, gemm2=dataclasses.replace(c.gemm2, block_n=96 - c.gemm2.block_n))
    for m, c in FASTEST.items()
}


def fake_seconds(cfg, M, routing):
    """1 us per field away from FASTEST[M], 5 us for another block_m; TRAP[M] wins routing 0 and loses the mean."""
    if cfg == TRAP[M]:
        return (0.5 if routing == 0 else 50.0) * 1e-6
    want = FASTEST[M]
    us = 10.0 + 5.0 * (cfg.block_size != want.block_size) + 0.01 * routing
    for got, w in ((cfg.gemm1, want.gemm1), (cfg.gemm2, want.gemm2)):
        us += sum(
            getattr(got, f) != getattr(w, f) for f in ("block_n", "block_k", "group_m", "num_warps", "num_stages")
        )
    return us * 1e-6


class Recording:
    """The fake timer; records every call; ``stop_at`` raises KeyboardInterrupt at the first call of that bucket."""

    def __init__(self, check=None, stop_at=None, broken=()):
        self.calls, self.check, self.stop_at, self.broken = [], check, stop_at, set(broken)

    def __call__(self, cfg, M, routing):
        if M == self.stop_at:
            raise KeyboardInterrupt
        self.calls.append((cfg, M, routing))
        if cfg in self.broken:
            raise fm.WrongResult("sabotaged")
        if self.check is not None and routing == 0:
            self.check(cfg, M)  # the real candidate runs under the interpreter and must agree with the default
        return fake_seconds(cfg, M, routing)


def _tune(tmp_path, timer, **kw):
    kw.setdefault("num_tokens", BUCKETS)
    return fm.tune(
        TINY,
        torch.bfloat16,
        out_dir=tmp_path,
        jobs=0,
        device="cpu",
        device_name=DEVICE_NAME,
        timer=timer,
        space=SPACE,
        log=lambda s: None,
        **kw,
    )


def _lookup(M, tmp_path):
    return config.lookup(M, LAYER.E, LAYER.N, LAYER.K, "bfloat16", "none", DEVICE_NAME, config_dir=tmp_path)


def test_full_search_writes_the_fastest_config_per_bucket(tmp_path):
    assert _lookup(1, tmp_path) is None  # caches the empty folder: the tuner must clear it
    checker = fm.GraphTimer(TINY, torch.bfloat16, "cpu")
    timer = Recording(check=checker.check)
    path = _tune(tmp_path, timer)
    d = json.loads(path.read_text())
    assert path.name == config.fused_moe_table_name(4, 32, 64, "bfloat16", "none", DEVICE_NAME, d["key"]["triton"])
    assert d["op"] == "fused_moe" and d["format"] == config.TABLE_FORMAT and d["buckets"] == list(BUCKETS)
    assert {k: d["key"][k] for k in ("E", "N", "K", "dtype", "quant", "device")} == {
        "E": 4,
        "N": 32,
        "K": 64,
        "dtype": "bfloat16",
        "quant": "none",
        "device": DEVICE_NAME,
    }
    for M, want in FASTEST.items():
        assert FusedMoeConfig.from_dict(d["configs"][str(M)]) == want
        assert _lookup(M, tmp_path) == want
    assert _lookup(3, tmp_path) == FASTEST[8]  # log2 3 is nearer 8 than 1
    # the trap was screened and then timed on the other routings; the winner on all three
    assert {(c, r) for c, M, r in timer.calls if M == 1 and c in (TRAP[1], FASTEST[1])} == {
        (c, r) for c in (TRAP[1], FASTEST[1]) for r in range(fm.ROUTINGS)
    }
    # the search starts from the default rule's config, and no config is timed twice on one routing
    assert timer.calls[0][0] == LAYER.default(1)
    assert len(timer.calls) == len(set(timer.calls))


def test_a_16_row_winner_is_timed_in_the_other_layout(tmp_path):
    # the card's fastest layout at one token is the one the rule does not take: the table keeps that one
    other = dataclasses.replace(FASTEST[1], slots=1 - FASTEST[1].slots)

    def timer(cfg, M, routing):
        return fake_seconds(dataclasses.replace(cfg, slots=FASTEST[M].slots), M, routing) - (cfg == other) * 1e-7

    _tune(tmp_path, timer, num_tokens=[1, 8])
    assert _lookup(1, tmp_path) == other
    assert _lookup(8, tmp_path) == FASTEST[8]  # 32-row tiles: the sorted layout only
    assert "slot blocks" in fm.describe(dataclasses.replace(other, slots=1))


def test_a_config_that_fails_is_dropped_with_a_note(tmp_path):
    timer = Recording(broken=[FASTEST[1]])
    _tune(tmp_path, timer, num_tokens=[1])
    got = _lookup(1, tmp_path)
    assert got != FASTEST[1] and got.block_size == 16
    progress = json.loads(next((tmp_path / fm.PROGRESS_DIR).iterdir()).read_text())
    notes = progress["finished"]["1"]["notes"]
    assert len(notes) == 1 and "WrongResult: sabotaged" in notes[0]


def test_an_interrupted_run_resumes_without_retiming_finished_buckets(tmp_path):
    progress = tmp_path / "run.progress.json"
    first = Recording(stop_at=8)
    with pytest.raises(KeyboardInterrupt):
        _tune(tmp_path, first, progress=progress)
    assert [p.name for p in tmp_path.glob("*.json")] == [progress.name]  # no table yet
    saved = json.loads(progress.read_text())
    assert list(saved["finished"]) == ["1"] and saved["table"]["buckets"] == [1]
    assert FusedMoeConfig.from_dict(saved["table"]["configs"]["1"]) == FASTEST[1]
    second = Recording()
    _tune(tmp_path / "out", second, progress=progress)
    assert second.calls and {M for _, M, _ in second.calls} == {8}
    for M, want in FASTEST.items():
        assert _lookup(M, tmp_path / "out") == want
    # everything done: nothing is timed, the table is written again
    third = Recording()
    next((tmp_path / "out").glob("*.json")).unlink()
    _tune(tmp_path / "out", third, progress=progress)
    assert third.calls == [] and _lookup(8, tmp_path / "out") == FASTEST[8]


def test_progress_of_another_key_is_not_resumed(tmp_path):
    progress = tmp_path / "p.json"
    _tune(tmp_path, Recording(), progress=progress, num_tokens=[1])
    other = Recording()
    fm.tune(
        TINY,
        torch.float16,
        out_dir=tmp_path,
        jobs=0,
        device="cpu",
        device_name=DEVICE_NAME,
        timer=other,
        space=SPACE,
        num_tokens=[1],
        progress=progress,
        log=lambda s: None,
    )
    assert {M for _, M, _ in other.calls} == {1}
    assert json.loads(progress.read_text())["key"]["dtype"] == "float16"


def test_budget_still_times_each_phases_seed(tmp_path):
    # a clock past the deadline at once: each (block_m, GEMM) phase times its first candidate and no other
    ticks = iter(range(0, 10**6, 1000))
    timer = Recording()
    r = fm.search_bucket(1, LAYER, 2, timer, space=SPACE, budget_s=1.0, clock=lambda: next(ticks))
    screened = {c for c, _, routing in timer.calls if routing == 0}
    assert LAYER.default(1) in screened and len(screened) <= 4
    assert r.config in screened


def test_disagreement_catches_a_missing_block_and_passes_rounding():
    ref = torch.randn(32, 64, generator=torch.Generator().manual_seed(0))
    assert fm.disagreement(ref.to(torch.bfloat16), ref) is None  # one bf16 rounding of every element
    bad = ref.clone()
    bad[16:] = 0  # one block of rows never written by the right expert
    assert "max |out - default|" in fm.disagreement(bad, ref)
    bad = ref.clone()
    bad[3, 5] = float("nan")
    assert "non-finite" in fm.disagreement(bad, ref)


def test_graph_timer_routings_share_weights_and_check_wiring(monkeypatch):
    gt = fm.GraphTimer(TINY, torch.bfloat16, "cpu")
    a, b = gt.inputs(8, 0), gt.inputs(8, 1)
    assert a["w1"] is b["w1"] and tuple(a["w1"].shape) == (4, 64, 64) and tuple(a["w2"].shape) == (4, 64, 32)
    assert tuple(a["topk_ids"].shape) == (8, 2) and not torch.equal(a["topk_ids"], b["topk_ids"])
    assert all(len(set(row.tolist())) == 2 for row in a["topk_ids"])
    other = FusedMoeConfig(_g(32, 64, 8), _g(32, 32, 1))
    gt.check(other, 8)  # another tile, the same layer
    real = fm._call

    def sabotage(inputs, cfg, out=None):
        out = real(inputs, cfg, out)
        return out.zero_() if cfg == other else out

    monkeypatch.setattr(fm, "_call", sabotage)
    with pytest.raises(fm.WrongResult):
        gt.check(other, 8)


def test_weights_are_built_in_chunks_as_the_spec_quantizes_them():
    layer = fm.Layer(E=6, N=128, K=128, topk=2, quant="fp8_block128")  # 6 experts: chunks of 4 and 2
    w = fm.layer_weights(layer, torch.bfloat16, torch.device("cpu"))
    assert w["w1"].dtype == torch.float8_e4m3fn and tuple(w["w1"].shape) == (6, 256, 128)
    assert tuple(w["w1_scale"].shape) == (6, 2, 1) and tuple(w["w2_scale"].shape) == (6, 1, 1)
    assert w["block_shape"] == [128, 128]
    # every expert written (no uninitialized tail) and the chunks differ: two different seeds
    assert all(w["w1"][e].float().abs().amax() > 0 for e in range(6)) and (w["w1_scale"] > 0).all()
    assert not torch.equal(w["w1"][0].float(), w["w1"][4].float())


def test_graph_timer_checks_block_fp8_configs_on_the_cpu():
    model = dataclasses.replace(TINY, hidden=128, moe_intermediate=128, moe_quant="fp8_block128")
    gt = fm.GraphTimer(model, torch.bfloat16, "cpu")
    assert gt.quant == "fp8_block128"
    default = gt.layer.default(8)
    other = FusedMoeConfig(
        dataclasses.replace(default.gemm1, block_k=64, num_stages=2),
        dataclasses.replace(default.gemm2, block_n=64, block_k=128),
    )
    assert other != default
    gt.check(other, 8)
