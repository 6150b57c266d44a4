"""Fourteenth exploration on the H200: where the fixed cost of a split decode call goes. Decode at batch 4 and 16 x
4K (both 512 programs of the same shape; 8 and 32 KV tiles each) fits time = F + tiles x 1.96 us with F ~ 10 us
(exp13). Timed pieces, CUDA graphs, each A B A B:
  full       decode + merge (the op)
  decode     the decode kernel alone (no merge launch)
  skeleton   decode launched with MAX_Q = 0: every program loads its metadata and runs no tile, + the merge
  skel only  that decode alone
  merge      the merge alone (with PDL, on a stream whose previous kernel is the last replay's)
  empty      an empty Triton kernel on the decode grid
Also b4/4K with the merge launched without PDL, and the merge at 1/2/4 warps.
PYTHONPATH=src:.peers python3 benchmarks/gpu/explore14.py ; JSON to $OUT/exp14.json"""
import json, os, statistics, sys, time
import torch
import triton

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import paged_attention as PA  # noqa: E402
from tritonkit.ops.paged_attention import api  # noqa: E402

T0 = time.perf_counter()
OUT = os.path.join(os.environ.get("OUT", "."), "exp14.json")
R = {"meta": {"git_sha": os.environ.get("TRITONKIT_GIT_SHA"), "gpu": torch.cuda.get_device_name(),
              "torch": torch.__version__, "triton": triton.__version__}, "rows": []}
real_launch = api.launch
DEC, MERGE = api._paged_attention_decode_kernel, api._paged_attention_merge_kernel


@triton.jit
def _empty(x):
    pass


def variant(name):
    def launch(kernel, grid, args, constexprs, num_warps, num_stages=None, launch_pdl=False):
        if name == "full":
            return real_launch(kernel, grid, args, constexprs, num_warps, num_stages, launch_pdl=launch_pdl)
        if name == "empty":
            if kernel is DEC:
                return real_launch(_empty, grid, (args[0],), {}, num_warps)
            return None
        if name == "merge nopdl":
            if kernel is MERGE:
                return real_launch(kernel, grid, args, {**constexprs, "PDL": False}, num_warps, num_stages)
            return real_launch(kernel, grid, args, constexprs, num_warps, num_stages, launch_pdl=launch_pdl)
        if name.startswith("merge w"):
            w = int(name[-1])
            if kernel is MERGE:
                return real_launch(kernel, grid, args, constexprs, w, num_stages, launch_pdl=launch_pdl)
            return real_launch(kernel, grid, args, constexprs, num_warps, num_stages, launch_pdl=launch_pdl)
        if kernel is DEC:
            if name == "merge only":
                return None
            if name.startswith("skel"):
                constexprs = {**constexprs, "MAX_Q": 0}
            return real_launch(kernel, grid, args, constexprs, num_warps, num_stages, launch_pdl=launch_pdl)
        if kernel is MERGE:
            if name in ("decode only", "skel only"):
                return None
            return real_launch(kernel, grid, args, constexprs, num_warps, num_stages, launch_pdl=launch_pdl)
        return real_launch(kernel, grid, args, constexprs, num_warps, num_stages, launch_pdl=launch_pdl)
    return launch


NAMES = ["full", "decode only", "skeleton", "skel only", "merge only", "empty", "merge nopdl", "merge w1",
         "merge w2"]
for n, c in ((4, 4096), (16, 4096), (1, 4096), (1, 32768)):
    b = PA.Batch(f"decode b{n} ctx{c // 1024}K", [1] * n, [c - 1] * n)
    kv_bytes = sum(b.seq_k) * PA.HKV * PA.D * 4
    rot = max(1, min(8, -(-256_000_000 // kv_bytes)))
    sets = [PA.make_batch(b, seed=i) for i in range(rot)]
    for rep in range(2):
        for name in NAMES:
            api.launch = variant(name)
            try:
                us = PA.time_calls([PA.tritonkit_fn(inp) for inp in sets])
                row = dict(case=b.name, variant=name, rep=rep, us=round(us, 2))
            except Exception as e:  # noqa: BLE001
                row = dict(case=b.name, variant=name, rep=rep, error=f"{type(e).__name__}: {e}"[:300])
            api.launch = real_launch
            R["rows"].append(row)
            print(f"[{time.perf_counter() - T0:6.1f}s]", row, flush=True)
            with open(OUT, "w") as f:
                json.dump(R, f, indent=1)
    del sets
    torch.cuda.empty_cache()
seen = {}
for r in R["rows"]:
    seen.setdefault((r["case"], r["variant"]), []).append(r.get("us", float("nan")))
for (c, v), us in seen.items():
    print(f"  {c:24} {v:14} {' '.join(f'{u:9.2f}' for u in us)}  median {statistics.median(us):9.2f}")
