"""Eleventh exploration on the H200: decode at 2 warps per program (exp10: batch 4 x 4K 26.8 -> 25.8 us, batch 1 x
4K 13.3 -> 15.3) crossed with programs per SM, the minimum keys per split and stages, to find one config for all
batches. Ran on fff3cd6 + the merge-as-PDL change (committed as fd6bd6a); the variants are config overrides.
PYTHONPATH=src:.peers python3 benchmarks/gpu/explore11.py ; JSON to $OUT/exp11.json"""
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


MIN_KEYS = pcfg.MIN_KEYS_PER_SPLIT


def apply(v):
    warps, stages, per_sm, min_keys = v
    pcfg.DECODE_PROGRAMS_PER_SM = per_sm
    pcfg.MIN_KEYS_PER_SPLIT = min_keys
    pcfg.decode_config = lambda *a: dataclasses.replace(BASE(*a), num_warps=warps, num_stages=stages)


VARIANTS = [("w4 s3 4/SM k256", (4, 3, 4, 256)), ("w2 s3 4/SM k256", (2, 3, 4, 256)),
            ("w2 s3 6/SM k128", (2, 3, 6, 128)), ("w2 s3 6/SM k256", (2, 3, 6, 256)),
            ("w2 s3 4/SM k128", (2, 3, 4, 128)), ("w2 s2 6/SM k128", (2, 2, 6, 128))]
cases = [PA.Batch(f"decode b{n} ctx{c // 1024}K", [1] * n, [c - 1] * n)
         for n, c in ((4, 4096), (1, 4096), (16, 4096), (1, 32768), (4, 32768), (64, 4096), (2, 4096))]
cases += [PA.Batch("spec decode b8 q4 ctx4K", [4] * 8, [4092] * 8),
          PA.Batch("mixed 2K prefill + 64 decode@4K", [2048] + [1] * 64, [2048] + [4095] * 64)]
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
        if b.name in ("decode b4 ctx4K", "decode b1 ctx4K", "decode b2 ctx4K"):
            R["rows"].append(dict(case=b.name, variant="vllm", rep=rep,
                                  us=round(PA.time_calls([PA.vllm_fn(inp) for inp in sets]), 2)))
    del sets
    torch.cuda.empty_cache()
apply((4, 3, PER_SM, MIN_KEYS))
with open(os.path.join(os.environ.get("OUT", "."), "exp11.json"), "w") as f:
    json.dump(R, f, indent=1)
seen = {}
for r in R["rows"]:
    seen.setdefault((r["case"], r["variant"]), []).append(r.get("us", float("nan")))
for (c, v), us in seen.items():
    print(f"  {c:32} {v:16} {' '.join(f'{u:9.2f}' for u in us)}  median {statistics.median(us):9.2f}")
