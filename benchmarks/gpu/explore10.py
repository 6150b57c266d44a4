"""Tenth exploration on the H200: decode warps per program (the [16, 32] score tile's row max and sum cross warps
through shared memory: 7 of the interior loop's 9 barriers at 4 warps, sm_90 SASS) and 64-key tiles, on
fff3cd6 + the merge-as-PDL change (committed as fd6bd6a); the variants are config overrides. PYTHONPATH=src:.peers python3 benchmarks/gpu/explore10.py"""
import dataclasses, json, os, sys, time, statistics
import torch
import triton

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import paged_attention as PA  # noqa: E402
from tritonkit.ops.paged_attention import config as pcfg  # noqa: E402

T0 = time.perf_counter()
R = {"meta": {"git_sha": os.environ.get("TRITONKIT_GIT_SHA"), "gpu": torch.cuda.get_device_name(),
              "torch": torch.__version__, "triton": triton.__version__}, "rows": []}
BASE = pcfg.decode_config
PER_SM = pcfg.DECODE_PROGRAMS_PER_SM


def apply(v):
    warps, block_n, per_sm = v
    pcfg.DECODE_PROGRAMS_PER_SM = per_sm
    pcfg.decode_config = lambda g, d, e, *a: dataclasses.replace(
        BASE(g, d, e, *a), num_warps=warps, block_n=block_n,
        tiles_per_split=triton.cdiv(triton.cdiv(max(a[2], 1), block_n), BASE(g, d, e, *a).num_splits))


VARIANTS = [("w4 n32", (4, 32, 4)), ("w2 n32", (2, 32, 4)), ("w1 n32", (1, 32, 4)), ("w2 n32 6/SM", (2, 32, 6)),
            ("w4 n64", (4, 64, 4)), ("w8 n64", (8, 64, 4))]
cases = [PA.Batch(f"decode b{n} ctx{c // 1024}K", [1] * n, [c - 1] * n)
         for n, c in ((4, 4096), (1, 4096), (16, 4096), (1, 32768), (4, 32768), (64, 4096))]
for b in cases:
    sets = [PA.make_batch(b, seed=i) for i in range(2)]
    ref = None
    for rep in range(2):
        for name, v in VARIANTS:
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
            print(R["rows"][-1], flush=True)
    del sets
    torch.cuda.empty_cache()
apply((4, 32, PER_SM))
with open(os.path.join(os.environ.get("OUT", "."), "exp10.json"), "w") as f:
    json.dump(R, f, indent=1)
seen = {}
for r in R["rows"]:
    seen.setdefault((r["case"], r["variant"]), []).append(r.get("us", float("nan")))
for (c, v), us in seen.items():
    print(f"  {c:22} {v:12} {' '.join(f'{u:9.2f}' for u in us)}  median {statistics.median(us):9.2f}")
