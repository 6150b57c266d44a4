"""Second exploration on the H200 (after explore.py): per-kernel times of the decode split/merge pair, a second round
of prefill tiles, decode tile micro-variants, rotary at one vector a thread. Prints as it goes; JSON to
$OUT/exp2.json. Run from the repository root: PYTHONPATH=src:.peers python3 benchmarks/gpu/explore2.py"""
import dataclasses, importlib, json, os, sys, time, traceback
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
T0 = time.perf_counter()
DEADLINE = float(os.environ.get("EXP_DEADLINE", "400"))
OUT = os.environ.get("OUT", ".")
R = {"meta": {"git_sha": os.environ.get("TRITONKIT_GIT_SHA"), "gpu": torch.cuda.get_device_name()},
     "profile": [], "pa_prefill": [], "pa_decode": [], "mem": []}


def log(m):
    print(f"[{time.perf_counter() - T0:6.1f}] {m}", flush=True)


def left():
    return DEADLINE - (time.perf_counter() - T0)


def save():
    with open(os.path.join(OUT, "exp2.json"), "w") as f:
        json.dump(R, f, indent=1, default=str)


import paged_attention as PA  # benchmarks/gpu/paged_attention.py
from tritonkit.ops.paged_attention import config as pcfg


def profile_kernels():
    """Kernel-level GPU time (CUPTI) of each launch in one call, 8 rotated input sets, 20 calls each."""
    from torch.profiler import ProfilerActivity, profile
    cases = [PA.Batch("decode b4 ctx4K", [1] * 4, [4095] * 4), PA.Batch("decode b16 ctx4K", [1] * 16, [4095] * 16),
             PA.Batch("decode b64 ctx4K", [1] * 64, [4095] * 64), PA.Batch("decode b1 ctx32K", [1], [32767]),
             PA.Batch("prefill 8K causal", [8192], [0])]
    for b in cases:
        sets = [PA.make_batch(b, seed=i) for i in range(4 if b.name.startswith("prefill") else 8)]
        fns = [PA.tritonkit_fn(inp) for inp in sets]
        for f in fns:
            f()
        torch.cuda.synchronize()
        n = 5 if b.name.startswith("prefill") else 20
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(n):
                for f in fns:
                    f()
            torch.cuda.synchronize()
        per = {}
        for e in prof.key_averages():
            if e.device_type.name == "CUDA" or "kernel" in e.key:
                t = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
                per[e.key[:60]] = (e.count, t / max(e.count, 1))
        R["profile"].append({"case": b.name, "kernels": {k: {"count": c, "avg_us": round(u, 2)}
                                                         for k, (c, u) in per.items()}})
        log(f"profile {b.name}: " + "; ".join(f"{k}: {c}x {u:.2f} us" for k, (c, u) in per.items()))
        del sets, fns
        torch.cuda.empty_cache()
    save()


def prefill_sweep():
    base = pcfg.prefill_config
    variants = [None, (128, 128, 3, 8), (256, 64, 2, 16), (256, 64, 3, 16), (256, 128, 2, 16), (128, 128, 4, 8),
                (256, 32, 4, 16), (128, 128, 3, 4)]
    cases = [PA.Batch("prefill 8K causal", [8192], [0]), PA.Batch("prefill 16K causal", [16384], [0]),
             PA.Batch("chunked 2K over 16K", [2048], [16384])]
    try:
        for v in variants:
            if left() < 200:
                log("prefill: budget")
                break
            if v is None:
                pcfg.prefill_config = base
            else:
                m, n, s, w = v
                pcfg.prefill_config = (lambda *a, _v=dict(block_m=m, block_n=n, num_stages=s, num_warps=w):
                                       PA._prefill_variant(base(*a), _v))
            for b in cases:
                try:
                    rs = PA.bench_one(b, {"tritonkit": PA.tritonkit_fn}, 1.0)
                    r = dict(case=b.name, cfg=str(v or "default"), us=rs[0]["us"], tflops=rs[0]["tflops"])
                except Exception as e:
                    r = dict(case=b.name, cfg=str(v), error=f"{type(e).__name__}: {str(e)[:200]}")
                R["pa_prefill"].append(r)
                log(f"prefill {r}")
    finally:
        pcfg.prefill_config = base
    save()


def decode_sweep():
    base_dec = pcfg.decode_config
    cases = [PA.Batch("b4 4K", [1] * 4, [4095] * 4), PA.Batch("b16 4K", [1] * 16, [4095] * 16),
             PA.Batch("b1 32K", [1], [32767]), PA.Batch("b64 4K", [1] * 64, [4095] * 64)]
    tiles = [dict(), dict(num_warps=2), dict(num_warps=8), dict(num_stages=5), dict(block_n=16),
             dict(block_n=16, num_stages=5)]
    try:
        for tv in tiles:
            pcfg.decode_config = (lambda *a, _v=tv: dataclasses.replace(base_dec(*a), **_v))
            for b in cases:
                if left() < 60:
                    return
                try:
                    rs = PA.bench_one(b, {"tritonkit": PA.tritonkit_fn}, 1.0)
                    r = dict(case=b.name, tiles=str(tv), us=rs[0]["us"], gbps=rs[0]["kv_gbps"])
                except Exception as e:
                    r = dict(case=b.name, tiles=str(tv), error=f"{type(e).__name__}: {str(e)[:200]}")
                R["pa_decode"].append(r)
                log(f"decode {r}")
    finally:
        pcfg.decode_config = base_dec
        save()


def rotary():
    import explore as E  # noqa: F401  (its helpers: time_op, mem_variant)
    ro_api = importlib.import_module("tritonkit.ops.rotary_embedding.api")
    from tritonkit.ops.rotary_embedding import config as ro_cfg
    for mult in (None, 2):
        f = None if mult is None else (lambda hq, hk, rot, e, _m=mult: dataclasses.replace(
            ro_cfg.rotary_config(hq, hk, rot, e), num_warps=min(ro_cfg.rotary_config(hq, hk, rot, e).num_warps * _m, 16)))
        E.mem_variant("rotary_embedding", f"warps x{mult or 1}", ro_api, "rotary_config", f, (1, 16, 256, 16384))
    R["mem"] = E.R["mem"]
    save()


for step in (profile_kernels, decode_sweep, prefill_sweep, rotary):
    try:
        log(f"== {step.__name__}  ({left():.0f} s left)")
        step()
    except Exception:
        traceback.print_exc()
save()
print("\nprofile:")
for p in R["profile"]:
    print(" ", p["case"], {k[:40]: v for k, v in p["kernels"].items()})
print("prefill:")
for r in R["pa_prefill"]:
    print(" ", r)
print("decode:")
for r in R["pa_decode"]:
    print(" ", r)
