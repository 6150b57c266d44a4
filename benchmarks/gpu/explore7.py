"""Seventh exploration on the H200: decode's split merge as a second kernel (plain, or a programmatic dependent
launch) against the merge fused into the decode kernel (the last split to arrive merges; arrival counters),
vLLM beside; then a stress of the fused merge's protocol: 2000 calls on random lengths, every output compared
with the two-kernel path's. PYTHONPATH=src:.peers python3 benchmarks/gpu/explore7.py ; JSON to $OUT/exp7.json.
Ran once on an uncommitted tree (fff3cd6 + variant flag FUSED_MERGE with an arrival-counter merge inside the decode kernel (removed: batch 4 x 4K 27.0 -> 30.6 us)); kept as the record of the command behind its JSON, it
does not run on later trees."""
import json, os, sys, time, statistics
import torch
import triton

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import paged_attention as PA  # noqa: E402
from tritonkit.ops.paged_attention import config as pcfg  # noqa: E402

T0 = time.perf_counter()
R = {"meta": {"git_sha": os.environ.get("TRITONKIT_GIT_SHA"), "gpu": torch.cuda.get_device_name(),
              "torch": torch.__version__, "triton": triton.__version__}, "decode": [], "stress": []}


def log(m):
    print(f"[{time.perf_counter() - T0:6.1f}] {m}", flush=True)


def save():
    with open(os.path.join(os.environ.get("OUT", "."), "exp7.json"), "w") as f:
        json.dump(R, f, indent=1)


VARIANTS = [("merge kernel", (False, False)), ("merge kernel pdl", (False, True)), ("fused merge", (True, False))]


def apply(v):
    pcfg.FUSED_MERGE, pcfg.MERGE_PDL = v


cases = [PA.Batch(f"decode b{n} ctx{c // 1024}K", [1] * n, [c - 1] * n)
         for n, c in ((4, 4096), (1, 4096), (16, 4096), (1, 32768), (4, 32768), (64, 4096))]
cases.append(PA.Batch("mixed 2K prefill + 64 decode@4K", [2048] + [1] * 64, [2048] + [4095] * 64))
cases.append(PA.Batch("spec decode b8 q4 ctx4K", [4] * 8, [4092] * 8))
for b in cases:
    sets = [PA.make_batch(b, seed=i) for i in range(2)]
    ref = None
    for rep in range(3):
        for name, v in VARIANTS:
            apply(v)
            fns = [PA.tritonkit_fn(inp) for inp in sets]
            out = fns[0]().float()
            err = 0.0 if ref is None else (out - ref).abs().max().item()
            if ref is None:
                ref = out
            us = PA.time_calls(fns)
            R["decode"].append(dict(case=b.name, variant=name, rep=rep, us=round(us, 2), max_diff_vs_first=err))
            log(R["decode"][-1])
        if b.name in ("decode b4 ctx4K", "decode b1 ctx4K", "decode b16 ctx4K"):
            fns = [PA.vllm_fn(inp) for inp in sets]
            R["decode"].append(dict(case=b.name, variant="vllm", rep=rep, us=round(PA.time_calls(fns), 2)))
            log(R["decode"][-1])
    del sets
    torch.cuda.empty_cache()
save()

# stress: random lengths (some 0-key, some tiny, some long), random split counts via batch size; fused outputs of
# 2000 graph-free calls against the two-kernel path's output of the same inputs
g = torch.Generator().manual_seed(0)
bad = 0
worst = 0.0
for trial in range(10):
    n = int(torch.randint(1, 24, (1,), generator=g))
    ctx = [int(x) for x in torch.randint(0, 9000, (n,), generator=g)]
    b = PA.Batch(f"stress{trial}", [1] * n, ctx)
    inp = PA.make_batch(b, seed=100 + trial)
    apply((False, False))
    ref = PA.tritonkit_fn(inp)().float().clone()
    apply((True, False))
    f = PA.tritonkit_fn(inp)
    for it in range(200):
        out = f().float()
        d = (out - ref).abs().max().item()
        worst = max(worst, d)
        if not d < 2e-2:
            bad += 1
    torch.cuda.synchronize()
    R["stress"].append(dict(trial=trial, num_seqs=n, splits=pcfg.decode_config(4, 128, 2, n, 8, max(ctx) + 1, 132).num_splits,
                            worst_so_far=worst, bad_so_far=bad))
    log(R["stress"][-1])
save()
apply((True, False))

print("== decode (us per call, 3 repeats, median)")
seen = {}
for r in R["decode"]:
    seen.setdefault((r["case"], r["variant"]), []).append(r["us"])
for (c, v), us in seen.items():
    print(f"  {c:34} {v:18} {' '.join(f'{u:8.2f}' for u in us)}  median {statistics.median(us):8.2f}")
print(f"stress: {bad} bad of 2000 calls, worst |fused - two-kernel| = {worst:.3g}")
