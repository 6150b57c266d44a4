"""Exploration on the H200 (PYTHONPATH=src:.peers python3 benchmarks/gpu/explore.py): paged-attention tiles/splits, small-token latency of the memory ops, a
size-matched copy curve, host overhead. Prints as it goes; JSON to $OUT/exp1.json."""
import dataclasses, importlib, json, os, sys, time, traceback, itertools, io, cProfile, pstats
import torch
import triton
import triton.language as tl

sys.path.insert(0, "benchmarks/gpu")
T0 = time.perf_counter()
DEADLINE = float(os.environ.get("EXP_DEADLINE", "520"))
OUT = os.environ.get("OUT", ".")
R = {"pa_prefill": [], "pa_decode": [], "mem": [], "copy": [], "floor": [], "host": "", "sdpa": []}


def log(m):
    print(f"[{time.perf_counter() - T0:6.1f}] {m}", flush=True)


def left():
    return DEADLINE - (time.perf_counter() - T0)


def save():
    with open(os.path.join(OUT, "exp1.json"), "w") as f:
        json.dump(R, f, indent=1, default=str)


import paged_attention as PA  # benchmarks/gpu/paged_attention.py
from tritonkit.ops.paged_attention import config as pcfg

# ------------------------------------------------------------------ prefill variants
def prefill_sweep():
    base = pcfg.prefill_config
    variants = [None, (128, 128, 3, 8), (128, 128, 2, 8), (128, 64, 4, 8), (128, 64, 2, 8), (64, 64, 3, 4),
                (64, 64, 4, 4), (64, 128, 2, 4), (64, 128, 3, 4), (256, 64, 2, 16), (128, 32, 4, 8),
                (64, 32, 4, 4)]
    cases = [PA.Batch("prefill 8K causal", [8192], [0]), PA.Batch("prefill 16K causal", [16384], [0])]
    try:
        for v in variants:
            if left() < 330:
                log("prefill: budget")
                break
            if v is None:
                pcfg.prefill_config = base
            else:
                m, n, s, w = v
                pcfg.prefill_config = (lambda *a, _v=dict(block_m=m, block_n=n, num_stages=s, num_warps=w):
                                       PA._prefill_variant(base(*a), _v))
            for b in cases[:1] if v not in (None, (128, 128, 3, 8), (64, 64, 3, 4)) else cases:
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


def sdpa_cudnn():
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    for t in (8192, 16384):
        q = torch.randn(1, 32, t, 128, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(1, 32, t, 128, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            try:
                def run():
                    with sdpa_kernel(be):
                        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
                us = PA.time_calls([run])
                tf = 4 * 32 * t * t * 128 / 2 / (us * 1e-6) / 1e12
                R["sdpa"].append(dict(t=t, backend=name, us=us, tflops=tf))
                log(f"sdpa {name} {t}: {us:.1f} us {tf:.0f} TFLOP/s")
            except Exception as e:
                log(f"sdpa {name} {t}: {type(e).__name__}: {str(e)[:200]}")
    save()


# ------------------------------------------------------------------ decode splits / tiles
def decode_sweep():
    base_dec, base_split = pcfg.decode_config, pcfg.num_kv_splits
    cases = {"b4 4K": ([1] * 4, [4095] * 4, (8, 12, 16, 24, 32)),
             "b16 4K": ([1] * 16, [4095] * 16, (1, 2, 3, 4, 6, 8)),
             "b64 4K": ([1] * 64, [4095] * 64, (1, 2, 3, 4)),
             "b1 32K": ([1], [32767], (32, 49, 64)),
             "b128 4K": ([1] * 128, [4095] * 128, (1, 2))}
    tiles = [dict(), dict(block_n=32), dict(num_stages=4), dict(block_n=32, num_stages=4), dict(num_stages=2),
             dict(block_n=128, num_stages=2)]
    try:
        for tv in tiles:
            pcfg.decode_config = (lambda *a, _v=tv: dataclasses.replace(base_dec(*a), **_v))
            for name, (ql, ctx, splits) in cases.items():
                b = PA.Batch(name, ql, ctx)
                for s in (None,) + splits:
                    if left() < 200:
                        log("decode: budget")
                        return
                    pcfg.num_kv_splits = base_split if s is None else (lambda *a, _s=s, **k: _s)
                    try:
                        rs = PA.bench_one(b, {"tritonkit": PA.tritonkit_fn}, 1.0)
                        r = dict(case=name, tiles=str(tv), splits=s or "auto", us=rs[0]["us"],
                                 gbps=rs[0]["kv_gbps"])
                    except Exception as e:
                        r = dict(case=name, tiles=str(tv), splits=s, error=f"{type(e).__name__}: {str(e)[:200]}")
                    R["pa_decode"].append(r)
                    log(f"decode {r}")
            save()
    finally:
        pcfg.decode_config, pcfg.num_kv_splits = base_dec, base_split
        save()


# ------------------------------------------------------------------ memory ops
from tritonkit import ops
from tritonkit.bench.stats import rotation_sets, cold
from tritonkit.bench.timing import time_graph, L2Flush
from tritonkit.models import MODELS
from tritonkit.testing import Fill, validate_case

L2 = torch.cuda.get_device_properties(0).L2_cache_size
DEV = torch.device("cuda")


def time_op(name, shape):
    spec = ops.get_spec(name)
    w = spec.work(shape, torch.bfloat16)
    n = rotation_sets(w.bytes, L2, max_sets=64)
    sets = [spec.make_inputs(shape, torch.bfloat16, Fill("randn", "cuda", seed=i)) for i in range(n)]
    flush = None if cold(w.bytes, n, L2) else L2Flush(DEV)
    us = time_graph(spec.call, sets, DEV, before_replay=flush).median_us
    return us, w.bytes


def mem_variant(op, label, api_mod, fn_name, make, tokens, model="llama3-8b", overrides=None):
    base = getattr(api_mod, fn_name)
    if make is not None:
        setattr(api_mod, fn_name, make)
    try:
        for t in tokens:
            shape = ops.get_spec(op).sweep_shape(MODELS[model], t)
            if overrides:
                shape = shape.replace(**overrides)
            ok = validate_case(ops.get_spec(op), shape, torch.bfloat16, "randn", device="cuda").passed
            us, nb = time_op(op, shape)
            R["mem"].append(dict(op=op, variant=label, t=t, us=us, bytes=nb, ok=ok))
            log(f"{op:<18} {label:<26} t={t:<6} {us:8.2f} us {nb / us / 1e3:7.0f} GB/s {'' if ok else 'WRONG'}")
    except Exception as e:
        log(f"{op} {label}: {type(e).__name__}: {str(e)[:300]}")
    finally:
        setattr(api_mod, fn_name, base)


def mem_sweep():
    from tritonkit.ops.silu_and_mul import config as scfg
    sapi = importlib.import_module("tritonkit.ops.silu_and_mul.api")
    rapi = importlib.import_module("tritonkit.ops.rms_norm.api")
    capi = importlib.import_module("tritonkit.ops.reshape_and_cache.api")
    from tritonkit.ops.rms_norm import config as rcfg
    small = (1, 16, 256)
    for tile, warps in ((None, None), (1024, 1), (1024, 2), (1024, 4), (2048, 2), (2048, 4), (4096, 4),
                        (4096, 8), (8192, 8)):
        if left() < 90:
            return
        if tile is None:
            mem_variant("silu_and_mul", "default", sapi, "silu_and_mul_config", None, small + (16384,))
            continue

        def f(d, e, tile=tile, warps=warps):
            bn = min(triton.next_power_of_2(d), tile // e)
            return scfg.SiluAndMulConfig(1, bn, warps)
        mem_variant("silu_and_mul", f"tile={tile},w={warps}", sapi, "silu_and_mul_config", f,
                    small + ((16384,) if tile >= 4096 else ()))
    save()
    for warps in (None, 2, 4, 8, 16):
        if left() < 60:
            return
        f = None if warps is None else (lambda h, e, _w=warps: dataclasses.replace(rcfg.rms_norm_config(h, e),
                                                                                 num_warps=_w))
        mem_variant("rms_norm", f"w={warps or 'auto'}", rapi, "rms_norm_config", f, (1, 16, 4096, 16384),
                    overrides=dict(residual=0))
        if warps in (None, 8, 16):
            mem_variant("rms_norm", f"res w={warps or 0}", rapi, "rms_norm_config", f, (1, 16384), overrides=dict(residual=1))
    save()
    from tritonkit.ops.reshape_and_cache import config as ccfg
    for warps in (None, 1, 2, 4):
        if left() < 40:
            return
        f = None if warps is None else (lambda h, d, e, _w=warps: dataclasses.replace(
            ccfg.reshape_and_cache_config(h, d, e), num_warps=_w))
        mem_variant("reshape_and_cache", f"w={warps or 'auto'}", capi, "reshape_and_cache_config", f, (1, 16))
    save()


@triton.jit
def _copy(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=m), mask=m)


@triton.jit
def _vec(src, dst, W: tl.constexpr):
    offs = tl.arange(0, W)
    tl.store(dst + offs, tl.load(src + offs))


@triton.jit
def _gather2(idx, src, dst):
    i = tl.load(idx)
    offs = tl.arange(0, 4)
    tl.store(dst + offs, tl.load(src + i * 64 + offs))


def copy_curve():
    # a Triton copy of N bytes read + N written, rotated/flushed like the ops: what a perfect memory op reaches
    for mb in (0.25, 1, 4, 16, 33.6, 67, 134, 268, 537):
        nbytes = int(mb * 1e6) // 2
        n = nbytes // 4
        nsets = rotation_sets(2 * nbytes, L2, max_sets=64)
        bufs = [(torch.randint(0, 100, (n,), dtype=torch.int32, device="cuda"),
                 torch.empty(n, dtype=torch.int32, device="cuda")) for _ in range(nsets)]
        flush = None if cold(2 * nbytes, nsets, L2) else L2Flush(DEV)
        for block, warps in ((1024, 4), (4096, 8)):
            fn = lambda inp, block=block, warps=warps: _copy[(triton.cdiv(n, block),)](inp["s"], inp["d"], n,
                                                                                  BLOCK=block, num_warps=warps)
            us = time_graph(fn, [{"s": s, "d": d} for s, d in bufs], DEV, before_replay=flush).median_us
            R["copy"].append(dict(mb_moved=2 * nbytes / 1e6, block=block, warps=warps, us=us,
                                  gbps=2 * nbytes / us / 1e3))
            log(f"copy {2 * nbytes / 1e6:8.2f} MB moved  B{block} w{warps}: {us:8.2f} us {2 * nbytes / us / 1e3:6.0f} GB/s")
        del bufs
        torch.cuda.empty_cache()
    save()


def floors():
    calls = 64
    src = torch.arange(calls * 4096, dtype=torch.int32, device="cuda")
    dst = torch.zeros_like(src)
    idx = torch.arange(calls, dtype=torch.int32, device="cuda") * 3
    sets = [{"i": i} for i in range(calls)]
    flush = L2Flush(DEV)
    for W, warps in ((4, 1), (4, 8), (2048, 4), (2048, 8)):
        fn = lambda inp, W=W, warps=warps: _vec[(1,)](src[inp["i"] * 4096:], dst[inp["i"] * 4096:], W=W,
                                                      num_warps=warps)
        us = time_graph(fn, sets, DEV, before_replay=flush, repeats=20).median_us
        R["floor"].append(dict(kind=f"copy {W * 4}B", warps=warps, us=us))
        log(f"floor copy {W * 4} B warps {warps}: {us:.2f} us")
    fn = lambda inp: _gather2[(1,)](idx[inp["i"]:], src, dst[inp["i"] * 4096:], num_warps=1)
    us = time_graph(fn, sets, DEV, before_replay=flush, repeats=20).median_us
    R["floor"].append(dict(kind="gather (two dependent round trips)", warps=1, us=us))
    log(f"floor gather: {us:.2f} us")
    save()


def host():
    from tritonkit.ops import rms_norm
    x = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    r = torch.randn_like(x)
    out = []
    for name, f in (("plain", lambda: rms_norm(x, w)), ("residual", lambda: rms_norm(x, w, residual=r))):
        for _ in range(50):
            f()
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(2000):
            f()
        torch.cuda.synchronize()
        out.append(f"{name} {(time.perf_counter() - t) / 2000 * 1e6:.1f} us/call")
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(2000):
        rms_norm(x, w, residual=r)
    torch.cuda.synchronize()
    pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(12)
    R["host"] = "\n".join(out) + "\n" + s.getvalue()[-2500:]
    log(R["host"])
    save()


def main():
    for step in (floors, host, prefill_sweep, sdpa_cudnn, decode_sweep, copy_curve, mem_sweep):
        try:
            log(f"== {step.__name__}  ({left():.0f} s left)")
            step()
        except Exception:
            traceback.print_exc()
    save()
    log("done")
    # summary
    print("\nprefill:")
    for r in R["pa_prefill"]:
        print(" ", r)
    print("decode best per case:")
    best = {}
    for r in R["pa_decode"]:
        if "us" in r and (r["case"] not in best or r["us"] < best[r["case"]]["us"]):
            best[r["case"]] = r
    for r in best.values():
        print(" ", r)


if __name__ == "__main__":
    main()
