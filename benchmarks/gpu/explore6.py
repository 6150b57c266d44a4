"""Sixth exploration on the H200: prefill with the right-edge tile's block-table entries read at the start
(EDGE_PREFETCH) and lazy rescaling of the accumulator (PREFILL_LAZY_RESCALE), each on/off; decode batch 4 x 4K
with the merge kernel as a programmatic dependent launch or not (more repeats), vLLM beside, and a kernel-time
profile of that call. Variants alternate (A B A B) so drift shows.
PYTHONPATH=src:.peers python3 benchmarks/gpu/explore6.py ; JSON to $OUT/exp6.json.
Ran once on an uncommitted tree (fff3cd6 + variant flags EDGE_PREFETCH and PREFILL_LAZY_RESCALE (both removed: slower) and MERGE_PDL); kept as the record of the command behind its JSON, it
does not run on later trees."""
import json, os, sys, time
import torch
import triton

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import paged_attention as PA  # noqa: E402
from tritonkit.ops.paged_attention import config as pcfg  # noqa: E402

T0 = time.perf_counter()
R = {"meta": {"git_sha": os.environ.get("TRITONKIT_GIT_SHA"), "gpu": torch.cuda.get_device_name(),
              "torch": torch.__version__, "triton": triton.__version__}, "prefill": [], "decode": [], "profile": []}


def log(m):
    print(f"[{time.perf_counter() - T0:6.1f}] {m}", flush=True)


def save():
    with open(os.path.join(os.environ.get("OUT", "."), "exp6.json"), "w") as f:
        json.dump(R, f, indent=1)


def run_variants(section, cases, variants, apply, reps=2, extra=None):
    for b in cases:
        sets = [PA.make_batch(b, seed=i) for i in range(2)]
        ref = None
        for rep in range(reps):
            for name, v in variants:
                apply(v)
                fns = [PA.tritonkit_fn(inp) for inp in sets]
                out = fns[0]().float()
                err = 0.0 if ref is None else (out - ref).abs().max().item()
                if ref is None:
                    ref = out
                us = PA.time_calls(fns)
                r = dict(case=b.name, variant=name, rep=rep, us=round(us, 2), max_diff_vs_first=err)
                R[section].append(r)
                log(r)
            if extra:
                fns = [extra(inp) for inp in sets]
                us = PA.time_calls(fns)
                r = dict(case=b.name, variant="vllm", rep=rep, us=round(us, 2))
                R[section].append(r)
                log(r)
        del sets
        torch.cuda.empty_cache()
    save()


def set_prefill(v):
    pcfg.EDGE_PREFETCH, pcfg.PREFILL_LAZY_RESCALE = v


pre_cases = [PA.Batch("prefill 8K causal", [8192], [0]), PA.Batch("prefill 4K causal", [4096], [0]),
             PA.Batch("prefill 16K causal", [16384], [0]), PA.Batch("chunked 2K over 16K", [2048], [16384])]
run_variants("prefill", pre_cases, [("base", (False, False)), ("edge", (True, False)), ("lazy", (False, True)),
                                    ("edge+lazy", (True, True))], set_prefill)
set_prefill((True, True))


def set_pdl(v):
    pcfg.MERGE_PDL = v


dec = [PA.Batch("decode b4 ctx4K", [1] * 4, [4095] * 4), PA.Batch("decode b1 ctx4K", [1], [4095])]
run_variants("decode", dec, [("no pdl", False), ("pdl", True)], set_pdl, reps=3, extra=PA.vllm_fn)

# kernel durations of one batch-4 x 4K call, PDL on and off
from torch.profiler import profile, ProfilerActivity  # noqa: E402
inp = PA.make_batch(dec[0], seed=0)
for v in (True, False):
    set_pdl(v)
    f = PA.tritonkit_fn(inp)
    for _ in range(5):
        f()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(50):
            f()
        torch.cuda.synchronize()
    ks = {}
    for e in prof.key_averages():
        if "paged_attention" in e.key:
            ks[e.key] = dict(count=e.count, avg_us=round(e.device_time_total / max(e.count, 1), 2))
    R["profile"].append(dict(case="decode b4 ctx4K eager", pdl=v, kernels=ks))
    log(R["profile"][-1])
set_pdl(True)
save()

import statistics  # noqa: E402
for sec in ("prefill", "decode"):
    print(f"== {sec}")
    seen = {}
    for r in R[sec]:
        seen.setdefault((r["case"], r["variant"]), []).append(r["us"])
    for (c, v), us in seen.items():
        print(f"  {c:28} {v:12} {' '.join(f'{u:9.2f}' for u in us)}  median {statistics.median(us):9.2f}")
