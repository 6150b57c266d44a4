"""Eighth exploration on the H200: the sequence's key count (and, for prefill without a left window, the first KV
tile's block-table entries) read together with cu_seqlens_q before the path branch (EARLY_LOADS), on and off,
with the merge as a programmatic dependent launch; decode and prefill, vLLM beside at batch 4 x 4K.
PYTHONPATH=src:.peers python3 benchmarks/gpu/explore8.py ; JSON to $OUT/exp8.json.
Ran once on an uncommitted tree (fff3cd6 + variant flag EARLY_LOADS (removed: no measurable change)); kept as the record of the command behind its JSON, it
does not run on later trees."""
import json, os, sys, time, statistics
import torch
import triton

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import paged_attention as PA  # noqa: E402
from tritonkit.ops.paged_attention import config as pcfg  # noqa: E402

T0 = time.perf_counter()
R = {"meta": {"git_sha": os.environ.get("TRITONKIT_GIT_SHA"), "gpu": torch.cuda.get_device_name(),
              "torch": torch.__version__, "triton": triton.__version__}, "rows": []}


def log(m):
    print(f"[{time.perf_counter() - T0:6.1f}] {m}", flush=True)


cases = [PA.Batch(f"decode b{n} ctx{c // 1024}K", [1] * n, [c - 1] * n)
         for n, c in ((4, 4096), (1, 4096), (16, 4096), (1, 32768), (4, 32768))]
cases += [PA.Batch("spec decode b8 q4 ctx4K", [4] * 8, [4092] * 8),
          PA.Batch("prefill 8K causal", [8192], [0]), PA.Batch("prefill 4K causal", [4096], [0]),
          PA.Batch("prefill 16K causal", [16384], [0]), PA.Batch("chunked 2K over 16K", [2048], [16384]),
          PA.Batch("mixed 2K prefill + 64 decode@4K", [2048] + [1] * 64, [2048] + [4095] * 64)]
for b in cases:
    sets = [PA.make_batch(b, seed=i) for i in range(2)]
    ref = None
    reps = 2 if "16K" in b.name else 3
    for rep in range(reps):
        for name, v in (("late loads", False), ("early loads", True)):
            pcfg.EARLY_LOADS = v
            fns = [PA.tritonkit_fn(inp) for inp in sets]
            out = fns[0]().float()
            err = 0.0 if ref is None else (out - ref).abs().max().item()
            if ref is None:
                ref = out
            us = PA.time_calls(fns)
            R["rows"].append(dict(case=b.name, variant=name, rep=rep, us=round(us, 2), max_diff_vs_first=err))
            log(R["rows"][-1])
        if b.name == "decode b4 ctx4K":
            R["rows"].append(dict(case=b.name, variant="vllm", rep=rep,
                                  us=round(PA.time_calls([PA.vllm_fn(inp) for inp in sets]), 2)))
            log(R["rows"][-1])
    del sets
    torch.cuda.empty_cache()
pcfg.EARLY_LOADS = True
with open(os.path.join(os.environ.get("OUT", "."), "exp8.json"), "w") as f:
    json.dump(R, f, indent=1)
seen = {}
for r in R["rows"]:
    seen.setdefault((r["case"], r["variant"]), []).append(r["us"])
for (c, v), us in seen.items():
    print(f"  {c:34} {v:12} {' '.join(f'{u:9.2f}' for u in us)}  median {statistics.median(us):9.2f}")
