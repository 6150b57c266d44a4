"""Ninth exploration on the H200: the interior KV loop's block-table reads, one iteration ahead in the source
(PAGE_AHEAD: Triton 3.6 then keeps them synchronous and co-issued with their K/V loads) or in the tile's own
iteration (Triton's indirect-load pipelining: the page indices arrive by cp.async a stage before their K/V
tiles), crossed with pipeline stages, for decode and prefill. Variants alternate (A B C A B C).
PYTHONPATH=src:.peers python3 benchmarks/gpu/explore9.py ; JSON to $OUT/exp9.json.
Ran once on an uncommitted tree (fff3cd6 + variant flags DECODE_PAGE_AHEAD/PREFILL_PAGE_AHEAD (removed: the committed one-ahead read was fastest everywhere)); kept as the record of the command behind its JSON, it
does not run on later trees."""
import dataclasses, json, os, sys, time, statistics
import torch
import triton

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import paged_attention as PA  # noqa: E402
from tritonkit.ops.paged_attention import config as pcfg  # noqa: E402

T0 = time.perf_counter()
R = {"meta": {"git_sha": os.environ.get("TRITONKIT_GIT_SHA"), "gpu": torch.cuda.get_device_name(),
              "torch": torch.__version__, "triton": triton.__version__}, "rows": []}
BASE_DEC, BASE_PRE = pcfg.decode_config, pcfg.prefill_config


def log(m):
    print(f"[{time.perf_counter() - T0:6.1f}] {m}", flush=True)


def apply(v):
    ahead, dec_stages, pre_stages = v
    pcfg.DECODE_PAGE_AHEAD = pcfg.PREFILL_PAGE_AHEAD = ahead
    pcfg.decode_config = lambda *a: dataclasses.replace(BASE_DEC(*a), num_stages=dec_stages)
    pcfg.prefill_config = lambda *a: dataclasses.replace(BASE_PRE(*a), num_stages=pre_stages)


DEC_VARIANTS = [("ahead s3", (True, 3, 3)), ("native s3", (False, 3, 3)), ("native s5", (False, 5, 3)),
                ("native s4", (False, 4, 3))]
PRE_VARIANTS = [("ahead s3", (True, 3, 3)), ("native s3", (False, 3, 3)), ("native s4", (False, 3, 4))]
cases = [(PA.Batch(f"decode b{n} ctx{c // 1024}K", [1] * n, [c - 1] * n), DEC_VARIANTS)
         for n, c in ((4, 4096), (1, 4096), (16, 4096), (1, 32768), (4, 32768), (64, 4096))]
cases += [(PA.Batch("spec decode b8 q4 ctx4K", [4] * 8, [4092] * 8), DEC_VARIANTS)]
cases += [(PA.Batch("prefill 8K causal", [8192], [0]), PRE_VARIANTS), (PA.Batch("prefill 4K causal", [4096], [0]), PRE_VARIANTS),
          (PA.Batch("prefill 16K causal", [16384], [0]), PRE_VARIANTS),
          (PA.Batch("chunked 2K over 16K", [2048], [16384]), PRE_VARIANTS)]
for b, variants in cases:
    sets = [PA.make_batch(b, seed=i) for i in range(2)]
    ref = None
    reps = 2 if "16K" in b.name else 3
    for rep in range(reps):
        for name, v in variants:
            apply(v)
            try:
                fns = [PA.tritonkit_fn(inp) for inp in sets]
                out = fns[0]().float()
                err = 0.0 if ref is None else (out - ref).abs().max().item()
                if ref is None:
                    ref = out
                us = PA.time_calls(fns)
                R["rows"].append(dict(case=b.name, variant=name, rep=rep, us=round(us, 2), max_diff_vs_first=err))
            except Exception as e:  # noqa: BLE001
                R["rows"].append(dict(case=b.name, variant=name, rep=rep, error=f"{type(e).__name__}: {e}"[:300]))
            log(R["rows"][-1])
    del sets
    torch.cuda.empty_cache()
apply((False, 3, 3))
with open(os.path.join(os.environ.get("OUT", "."), "exp9.json"), "w") as f:
    json.dump(R, f, indent=1)
seen = {}
for r in R["rows"]:
    seen.setdefault((r["case"], r["variant"]), []).append(r.get("us", float("nan")))
for (c, v), us in seen.items():
    print(f"  {c:28} {v:10} {' '.join(f'{u:9.2f}' for u in us)}  median {statistics.median(us):9.2f}")
