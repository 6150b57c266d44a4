"""Seventeenth exploration on the H200: rms_norm with its weight load issued before x's (a CTA barrier between
them; the sm_90 SASS of 591aa3c issued w's load only once x had arrived: a second memory round trip) against
591aa3c's kernel (``snapshots.kernel_at``), through the op, timed as `tritonkit bench` times a
point (spec inputs, rotation sets, an L2 flush before each replay where they are too few, time_graph), with the
16-byte floor measured in the same process: t/target = time / 1.25 x (floor + bytes / 4142 GB/s).
Also 4 warps a row for the new kernel. Each point A B C A B C.
First, in a checkout: python3 benchmarks/gpu/snapshots.py 591aa3c:rms_norm; carry benchmarks/gpu/.snapshots;
PYTHONPATH=src python3 benchmarks/gpu/explore17.py ; JSON to $OUT/exp17.json"""
import json, os, statistics, sys, time
import torch
import triton

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from snapshots import kernel_at  # noqa: E402
from tritonkit.bench.ceilings import measure_floor_us  # noqa: E402
from tritonkit.bench.stats import cold, rotation_sets  # noqa: E402
from tritonkit.bench.timing import L2Flush, time_graph  # noqa: E402
from tritonkit.models import MODELS  # noqa: E402
from tritonkit.ops import get_spec  # noqa: E402
from tritonkit.ops.rms_norm import api, config  # noqa: E402
from tritonkit.testing import Fill  # noqa: E402

T0 = time.perf_counter()
OUT = os.path.join(os.environ.get("OUT", "."), "exp17.json")
dev = torch.device("cuda")
L2 = torch.cuda.get_device_properties(0).L2_cache_size
COPY_GBPS = 4142.0  # the bench's cached copy ceiling on this card (bench/log.txt)
old = kernel_at("591aa3c", "rms_norm")
NEW = api._rms_norm_fwd_kernel
BASE_CFG = api.rms_norm_config
floor, empty = measure_floor_us(dev)
R = {"meta": {"git_sha": os.environ.get("TRITONKIT_GIT_SHA"), "gpu": torch.cuda.get_device_name(),
              "torch": torch.__version__, "triton": triton.__version__, "floor_us": floor, "empty_us": empty,
              "copy_gbps": COPY_GBPS}, "rows": []}
print(f"floor {floor:.3f} us, empty {empty:.3f} us", flush=True)


def variant(name):
    api._rms_norm_fwd_kernel = old._rms_norm_fwd_kernel if name == "591aa3c" else NEW
    if name == "new w4":
        api.rms_norm_config = lambda h, e: config.RmsNormConfig(BASE_CFG(h, e).block, BASE_CFG(h, e).single_pass, 4)
    else:
        api.rms_norm_config = BASE_CFG


spec = get_spec("rms_norm")
VARIANTS = ["591aa3c", "new", "new w4"]
for res in (1, 0):
    for n in (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536):
        shape = spec.sweep_shape(MODELS["llama3-8b"], n).replace(residual=res)
        work = spec.work(shape, torch.bfloat16)
        fill = Fill("randn", dev, 0)
        sets = [spec.make_inputs(shape, torch.bfloat16, fill)]
        per = sum(t.numel() * t.element_size() for t in sets[0].values() if isinstance(t, torch.Tensor))
        k = rotation_sets(max(work.bytes, 1), L2, max_sets=2048, mem_per_set=per, mem_budget=8 << 30)
        sets += [spec.make_inputs(shape, torch.bfloat16, fill) for _ in range(k - 1)]
        flush = None if cold(max(work.bytes, 1), k, L2) else L2Flush(dev)
        bound = 1.25 * (floor + work.bytes / (COPY_GBPS * 1e3))
        ref = None
        for rep in range(2):
            for v in VARIANTS:
                variant(v)
                out = spec.call(sets[0])
                out = next(iter(out.values())) if isinstance(out, dict) else out
                torch.cuda.synchronize()
                err = 0.0 if ref is None else (out.float() - ref).abs().max().item()
                if ref is None:
                    ref = out.float().clone()
                t = time_graph(spec.call, sets, dev, before_replay=flush)
                row = dict(residual=res, num_tokens=n, variant=v, rep=rep, us=round(t.median_us, 3),
                           t_over_target=round(t.median_us / bound, 3),
                           pct_ceil=round(100 * work.bytes / (t.median_us * 1e-6) / (COPY_GBPS * 1e9), 1),
                           sets=k, flush=flush is not None, max_diff_vs_first=err)
                R["rows"].append(row)
                print(f"[{time.perf_counter() - T0:6.1f}s]", row, flush=True)
        variant("new")
        del sets
        torch.cuda.empty_cache()
        with open(OUT, "w") as f:
            json.dump(R, f, indent=1)
seen = {}
for r in R["rows"]:
    seen.setdefault((r["residual"], r["num_tokens"], r["variant"]), []).append(r)
print(f"floor {floor:.3f} us; us (t/target, %ceil) median of 2")
for (res, n, v), rs in seen.items():
    us = statistics.median(r["us"] for r in rs)
    print(f"  res={res} n={n:6} {v:8} {us:9.3f}  t/target {statistics.median(r['t_over_target'] for r in rs):.3f}"
          f"  %ceil {statistics.median(r['pct_ceil'] for r in rs):.1f}")
