import math

import pytest
import torch

from tritonkit.bench import roofline, stats, timing
from tritonkit.bench.roofline import Ceilings, point_metrics
from tritonkit.bench.stats import summarize
from tritonkit.bench.timing import rotation_sets
from tritonkit.ops.rms_norm.spec import SPEC as RMS
from tritonkit.spec import Shape

CEIL = Ceilings(copy_gbps=4000.0, matmul_tflops=800.0, floor_us=2.0, empty_us=1.1)


def test_summarize_reports_per_call_microseconds():
    t = summarize([3e-6, 1e-6, 2e-6, 10e-6])
    assert (t.median_us, t.min_us, t.max_us, t.repeats) == pytest.approx((2.5, 1.0, 10.0, 4))
    with pytest.raises(ValueError):
        summarize([])


def test_bandwidth_and_percentage_of_ceiling():
    # 4 GB in 2 ms is 2000 GB/s: half the 4000 GB/s copy ceiling
    m = point_metrics(4_000_000_000, 0, 2e-3, CEIL)
    assert m.gbps == pytest.approx(2000.0)
    assert m.pct_ceiling == pytest.approx(50.0)
    assert m.bound == "memory"


def test_target_formula_is_125_percent_of_floor_plus_bytes_over_ceiling():
    nbytes = 8_000_000  # 2 us at 4000 GB/s; floor 2 us -> ideal 4 us, target 5 us
    assert roofline.ideal_seconds(nbytes, 0, CEIL) == pytest.approx(4e-6)
    at = point_metrics(nbytes, 0, 4.99e-6, CEIL)
    assert at.target_us == pytest.approx(5.0) and at.target_ratio == pytest.approx(0.998) and at.target_pass
    over = point_metrics(nbytes, 0, 5.1e-6, CEIL)
    assert not over.target_pass and over.target_ratio == pytest.approx(1.02)
    # at decode sizes the floor dominates: 1 KB needs at most 1.25 * (2 + 0.00025) us
    tiny = point_metrics(1000, 0, 2.4e-6, CEIL)
    assert tiny.target_pass and tiny.target_us == pytest.approx(1.25 * (2.0 + 1000 / 4000e9 * 1e6))


def test_compute_bound_points_use_the_matmul_ceiling():
    # 800 TFLOP in 2 s on 1 GB: compute-bound; 400 TFLOP/s is 50% of the matmul ceiling
    m = point_metrics(1_000_000_000, 800 * 10**12, 2.0, CEIL)
    assert m.bound == "compute"
    assert m.tflops == pytest.approx(400.0) and m.pct_ceiling == pytest.approx(50.0)
    assert roofline.ideal_seconds(1_000_000_000, 800 * 10**12, CEIL) == pytest.approx(1.0 + 2e-6)


def test_point_metrics_rejects_non_positive_time():
    with pytest.raises(ValueError):
        point_metrics(1, 0, 0.0, CEIL)


def test_work_model_feeds_the_metrics():
    # rms_norm with residual, 16384 x 4096 bf16: x and residual read, y and r written, weight read once
    shape = Shape(num_tokens=16384, hidden=4096, residual=1)
    w = RMS.work(shape, torch.bfloat16)
    assert w.bytes == 4 * 16384 * 4096 * 2 + 4096 * 2
    m = point_metrics(w.bytes, w.flops, w.bytes / 3900e9, CEIL)
    assert m.pct_ceiling == pytest.approx(97.5) and m.target_pass


def test_rotation_sets_turn_the_l2_over():
    l2 = 60 * 2**20
    # a 40 KB decode point would need 3072 sets: capped (the flush covers the rest)
    assert rotation_sets(40 * 1024, l2) == timing.MAX_SETS
    assert not timing.cold(40 * 1024, timing.MAX_SETS, l2)
    # 16 MB a set: ceil(2 * 60 MB / 16 MB) = 8, which together exceed the L2
    assert rotation_sets(16 * 2**20, l2) == 8 and timing.cold(16 * 2**20, 8, l2)
    # one set larger than two L2s is enough alone
    assert rotation_sets(1 << 30, l2) == 1
    # memory budget: 3 GB sets in an 8 GB budget -> 2
    assert rotation_sets(100 * 2**20, 10 * l2, mem_per_set=3 << 30, mem_budget=8 << 30) == 2
    with pytest.raises(ValueError):
        rotation_sets(0, l2)


def test_repeats_and_geomean():
    assert stats.repeats_for(0.01, 0.05, 5, 50) == 5
    assert stats.repeats_for(0.0001, 0.05, 5, 50) == 50
    assert stats.repeats_for(0.002, 0.05, 5, 50) == 25
    assert stats.geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert math.isnan(stats.geomean([]))


def test_ceilings_round_trip_ignores_unknown_keys():
    d = CEIL.to_dict() | {"details": {"x": 1}}
    assert Ceilings.from_dict(d) == CEIL


def test_cached_ceilings_are_keyed_by_how_they_were_measured(tmp_path, monkeypatch):
    from tritonkit.bench import ceilings

    path = tmp_path / "ceilings.json"
    ceilings.store_cached("Fake GPU", "1.0", {"copy_gbps": 4000.0}, path)
    assert ceilings.load_cached("Fake GPU", "1.0", path) == {"copy_gbps": 4000.0}
    assert ceilings.load_cached("Fake GPU", "2.0", path) is None
    # another measuring method (a changed copy kernel, sizes, torch's cuBLAS): measured again, not reused
    monkeypatch.setattr(ceilings, "_method", lambda: "another")
    assert ceilings.load_cached("Fake GPU", "1.0", path) is None


def test_rotation_flushes_only_where_the_sets_stay_warm():
    from tritonkit.bench.timing import L2Flush, rotation

    l2 = 50 << 20
    gpu = torch.device("cuda")  # a descriptor: nothing is allocated until a flush runs
    n, flush = rotation(1 << 10, l2, gpu, max_sets=8)
    assert n == 8 and isinstance(flush, L2Flush)
    n, flush = rotation(64 << 20, l2, gpu, max_sets=8)
    assert n == 2 and flush is None
    assert rotation(1 << 10, l2, torch.device("cpu"), max_sets=8) == (8, None)


def test_host_overhead_interleaves_providers_round_by_round():
    from tritonkit.bench import timing

    order = []

    class Prov:
        def __init__(self, name):
            self.name = name

        def __call__(self, inputs):
            order.append(self.name)

    a, b = Prov("a"), Prov("b")
    out, errors = timing.interleaved_host_overhead([a, b], {}, torch.device("cpu"), calls=2, rounds=3)
    assert errors == {} and set(out) == {"a", "b"}
    assert out["a"]["repeats"] == out["b"]["repeats"] == 3
    timed = order[2 * 2 :]  # after each provider's warm-up calls
    # one repeat (2 calls) of a, then one of b, three rounds: a slow spell of the host hits both
    assert timed == ["a", "a", "b", "b"] * 3
    assert all(out[n]["median_us"] > 0 for n in out)


def test_host_overhead_drops_a_provider_that_raises_and_times_the_others():
    from tritonkit.bench import timing

    class Prov:
        def __init__(self, name, fail_after):
            self.name, self.fail_after, self.n = name, fail_after, 0

        def __call__(self, inputs):
            self.n += 1
            if self.n > self.fail_after:
                raise RuntimeError(f"{self.name} broke")

    # late: 2 warm-up calls and one repeat of 2 calls, then it raises in the second round
    ok, late, early = Prov("ok", 10**9), Prov("late", 2 + 2), Prov("early", 0)
    out, errors = timing.interleaved_host_overhead([ok, late, early], {}, torch.device("cpu"), calls=2, rounds=3)
    assert set(out) == {"ok"} and out["ok"]["repeats"] == 3
    assert errors == {"late": "RuntimeError: late broke", "early": "RuntimeError: early broke"}


def test_fp8_flops_are_judged_against_the_fp8_matmul_ceiling():
    ceil = Ceilings(copy_gbps=4000.0, matmul_tflops=800.0, floor_us=2.0, matmul_fp8_tflops=1600.0)
    flops, nbytes = 10**12, 10**6  # compute-bound either way
    bf16 = point_metrics(nbytes, flops, 2.5e-3, ceil)
    fp8 = point_metrics(nbytes, flops, 2.5e-3, ceil, fp8=True)
    assert bf16.tflops == fp8.tflops == pytest.approx(400.0)
    assert bf16.pct_ceiling == pytest.approx(50.0) and fp8.pct_ceiling == pytest.approx(25.0)
    assert fp8.ideal_us == pytest.approx(2.0 + 1e12 / 1.6e15 * 1e6)
    # a card or run without the fp8 ceiling falls back to bf16's, not to a division by NaN
    plain = Ceilings(copy_gbps=4000.0, matmul_tflops=800.0, floor_us=2.0)
    assert point_metrics(nbytes, flops, 2.5e-3, plain, fp8=True).pct_ceiling == pytest.approx(50.0)
    # memory-bound fp8 points (decode) stay judged by bandwidth
    assert point_metrics(10**10, 10**9, 5e-3, ceil, fp8=True).bound == "memory"


def test_fp8_flag_comes_from_the_work_model_and_survives_json():
    from tritonkit.bench.records import PointResult
    from tritonkit.ops.fused_moe.spec import SPEC as MOE

    shape = Shape(num_tokens=4096, hidden=7168, inter=2048, experts=256, topk=8, quant="fp8_block128")
    assert MOE.work(shape, torch.bfloat16).fp8
    assert not MOE.work(Shape({**shape, "quant": "none"}), torch.bfloat16).fp8
    r = PointResult("fused_moe", "fused_moe", "", "deepseek-v3", "bfloat16", 4096, dict(shape), "tritonkit", 1, 2, True)
    assert PointResult.from_dict(r.to_dict()).fp8
