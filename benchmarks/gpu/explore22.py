"""Twenty-second exploration on the H200: did f3be433 (the prefill kernel's store mask gained `mine`) slow causal
prefill? Two runs of the e65d461 tree measured prefill 8K at 443.2 TFLOP/s where 4ec9a8a's final run had 453.0;
compiled on a CPU the hot loop has the same instructions (address arithmetic reordered). Here 4ec9a8a's kernels
(``snapshots.kernel_at``) and this tree's, through the same API, timed A B A B A B in one process.
First, in a checkout: python3 benchmarks/gpu/snapshots.py 4ec9a8a:paged_attention; carry benchmarks/gpu/.snapshots;
PYTHONPATH=src:.peers python3 benchmarks/gpu/explore22.py ; JSON to $OUT/exp22.json"""
import json, os, statistics, sys, time
import torch
import triton

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import paged_attention as PA  # noqa: E402
from snapshots import kernel_at  # noqa: E402
from tritonkit.ops import get_spec  # noqa: E402
from tritonkit.ops.paged_attention import api  # noqa: E402

T0 = time.perf_counter()
OUT = os.path.join(os.environ.get("OUT", "."), "exp22.json")
R = {"meta": {"git_sha": os.environ.get("TRITONKIT_GIT_SHA"), "gpu": torch.cuda.get_device_name(),
              "torch": torch.__version__, "triton": triton.__version__}, "rows": []}
old = kernel_at("4ec9a8a", "paged_attention")
NAMES = ("_paged_attention_decode_kernel", "_paged_attention_merge_kernel", "_paged_attention_prefill_kernel")
TREE = os.environ.get("TRITONKIT_GIT_SHA") or "this tree"
KERNELS = {TREE: {n: getattr(api, n) for n in NAMES}, "4ec9a8a": {n: getattr(old, n) for n in NAMES}}
spec = get_spec("paged_attention")
cases = [PA.Batch("prefill 8K causal", [8192], [0]), PA.Batch("prefill 16K causal", [16384], [0]),
         PA.Batch("fp8 prefill 8K causal", [8192], [0], kv_fp8=True)]
for b in cases:
    kv_bytes = sum(b.seq_k) * PA.HKV * PA.D * 4
    sets = [PA.make_batch(b, seed=i) for i in range(max(1, min(8, -(-256_000_000 // kv_bytes))))]
    flops = spec.work(b.shape(), PA.DT).flops
    ref = None
    for rep in range(3):
        for name, ks in KERNELS.items():
            for n, k in ks.items():
                setattr(api, n, k)
            fns = [PA.tritonkit_fn(inp) for inp in sets]
            out = fns[0]().float()
            same = ref is None or torch.equal(out, ref)
            ref = out if ref is None else ref
            us = PA.time_calls(fns)
            row = dict(case=b.name, kernels=name, rep=rep, us=round(us, 2),
                       tflops=round(flops / (us * 1e-6) / 1e12, 1), same_output=same)
            R["rows"].append(row)
            print(f"[{time.perf_counter() - T0:6.1f}s]", row, flush=True)
    del sets
    torch.cuda.empty_cache()
for n, k in KERNELS[TREE].items():
    setattr(api, n, k)
with open(OUT, "w") as f:
    json.dump(R, f, indent=1)
seen = {}
for r in R["rows"]:
    seen.setdefault((r["case"], r["kernels"]), []).append(r["tflops"])
for (c, v), x in seen.items():
    print(f"  {c:24} {v:8} {' '.join(f'{u:7.1f}' for u in x)}  median {statistics.median(x):7.1f}")
