"""Fifth exploration on the H200: paged attention's merge kernel as a programmatic dependent launch (PDL) of the
decode kernel, prefill with the masked right-edge tile inside the interior loop, and rms_norm's load hints and
warps at 1 / 16 / 16384 tokens. Variants alternate (A B A B) so run-to-run drift shows.
PYTHONPATH=src:.peers python3 benchmarks/gpu/explore5.py ; JSON to $OUT/exp5.json.
Ran once on an uncommitted tree (fff3cd6 + variant flags MERGE_PDL/PDL_EARLY_TRIGGER (kept) and PREFILL_FUSED_TAIL (removed: +9% prefill time)); kept as the record of the command behind its JSON, it
does not run on later trees."""
import json, os, sys, time
import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import paged_attention as PA  # noqa: E402
from tritonkit.ops.paged_attention import config as pcfg  # noqa: E402
from tritonkit.bench.stats import rotation_sets, cold  # noqa: E402
from tritonkit.bench.timing import time_graph, L2Flush  # noqa: E402

T0 = time.perf_counter()
DEADLINE = float(os.environ.get("EXP_DEADLINE", "480"))
R = {"meta": {"git_sha": os.environ.get("TRITONKIT_GIT_SHA"), "gpu": torch.cuda.get_device_name(),
              "torch": torch.__version__, "triton": triton.__version__}, "decode": [], "prefill": [], "rms": []}


def log(m):
    print(f"[{time.perf_counter() - T0:6.1f}] {m}", flush=True)


def save():
    with open(os.path.join(os.environ.get("OUT", "."), "exp5.json"), "w") as f:
        json.dump(R, f, indent=1)


def run_variants(section, cases, variants, apply):
    """Each case: every variant timed twice in A B A B order, outputs compared with the first variant's."""
    for b in cases:
        if time.perf_counter() - T0 > DEADLINE:
            log("deadline")
            return
        sets = [PA.make_batch(b, seed=i) for i in range(2)]
        ref = None
        for rep in range(2):
            for name, v in variants:
                apply(v)
                fns = [PA.tritonkit_fn(inp) for inp in sets]
                out = fns[0]()
                torch.cuda.synchronize()
                out = out.float()
                err = 0.0 if ref is None else (out - ref).abs().max().item()
                if ref is None:
                    ref = out
                us = PA.time_calls(fns)
                r = dict(case=b.name, variant=name, rep=rep, us=round(us, 2), max_diff_vs_first=err)
                R[section].append(r)
                log(r)
        del sets
        torch.cuda.empty_cache()
    save()


def set_pdl(v):
    pcfg.MERGE_PDL, pcfg.PDL_EARLY_TRIGGER = v


def set_fused(v):
    pcfg.PREFILL_FUSED_TAIL = v


dec_cases = [PA.Batch(f"decode b{n} ctx{c // 1024}K", [1] * n, [c - 1] * n)
             for n, c in ((4, 4096), (1, 4096), (16, 4096), (1, 32768), (4, 32768))]
dec_cases.append(PA.Batch("mixed 2K prefill + 64 decode@4K", [2048] + [1] * 64, [2048] + [4095] * 64))
run_variants("decode", dec_cases, [("no pdl", (False, False)), ("pdl early", (True, True)),
                                   ("pdl at exit", (True, False))], set_pdl)
set_pdl((True, True))
pre_cases = [PA.Batch("prefill 8K causal", [8192], [0]), PA.Batch("prefill 4K causal", [4096], [0]),
             PA.Batch("prefill 16K causal", [16384], [0]), PA.Batch("chunked 2K over 16K", [2048], [16384])]
run_variants("prefill", pre_cases, [("split tail", False), ("fused tail", True)], set_fused)
set_fused(True)


@triton.jit
def _rms(x_ptr, w_ptr, y_ptr, hidden, eps, BLOCK: tl.constexpr, HINT_X: tl.constexpr, HINT_W: tl.constexpr,
         REDUCE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < hidden
    if HINT_X:
        x = tl.load(x_ptr + row * hidden + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
    else:
        x = tl.load(x_ptr + row * hidden + offs, mask=mask, other=0.0).to(tl.float32)
    if HINT_W:
        w = tl.load(w_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
    else:
        w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    if REDUCE:
        sum_sq = tl.sum(x * x, axis=0)
        rstd = tl.rsqrt(sum_sq / hidden + eps)
        if sum_sq > 3.4e38:
            inv = 1.0 / tl.max(tl.abs(x), axis=0)
            xs = x * inv
            rstd = tl.rsqrt(tl.sum(xs * xs, axis=0) / hidden + eps * inv * inv) * inv
    else:
        rstd = eps
    tl.store(y_ptr + row * hidden + offs, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


def rms_section():
    from tritonkit.ops import rms_norm
    dev = torch.device("cuda")
    L2 = torch.cuda.get_device_properties(0).L2_cache_size
    variants = [("tritonkit op", None), ("local w8", (8, False, False, True)), ("x evict_first w8", (8, True, False, True)),
                ("x first + w last w8", (8, True, True, True)), ("local w4", (4, False, False, True)),
                ("local w16", (16, False, False, True)), ("no reduction w8", (8, False, False, False)),
                ("local w2", (2, False, False, True))]
    for n in (1, 16, 16384):
        nbytes = 2 * n * 4096 * 2 + 4096 * 2
        k = rotation_sets(nbytes, L2, max_sets=64)
        sets = [{"x": torch.randn(n, 4096, device=dev, dtype=torch.bfloat16),
                 "w": torch.randn(4096, device=dev, dtype=torch.bfloat16),
                 "y": torch.empty(n, 4096, device=dev, dtype=torch.bfloat16)} for _ in range(k)]
        flush = None if cold(nbytes, k, L2) else L2Flush(dev)
        ref = torch.nn.functional.rms_norm(sets[0]["x"].float(), (4096,), sets[0]["w"].float(), 1e-6)
        for rep in range(2):
            for name, v in variants:
                if n > 16 and name in ("no reduction w8", "local w2"):
                    continue
                if v is None:
                    fn = lambda i: rms_norm(i["x"], i["w"], 1e-6)
                else:
                    w, hx, hw, red = v
                    fn = lambda i, w=w, hx=hx, hw=hw, red=red: _rms[(n,)](
                        i["x"], i["w"], i["y"], 4096, 1e-6, BLOCK=4096, HINT_X=hx, HINT_W=hw, REDUCE=red,
                        num_warps=w)
                fn(sets[0])
                err = (sets[0]["y"].float() - ref).abs().max().item()
                us = time_graph(fn, sets, dev, before_replay=flush).median_us
                r = dict(n=n, variant=name, rep=rep, us=round(us, 3), pct_of_4140=round(nbytes / us / 1e3 / 41.4, 1),
                         max_err=err)
                R["rms"].append(r)
                log(r)
        del sets
        torch.cuda.empty_cache()
    save()


try:
    rms_section()
except Exception as e:  # noqa: BLE001
    log(f"rms section: {type(e).__name__}: {e}")
save()

# summary table: median over reps per (case, variant)
import statistics  # noqa: E402
for sec, key in (("decode", "case"), ("prefill", "case"), ("rms", "n")):
    print(f"== {sec}")
    seen = {}
    for r in R[sec]:
        seen.setdefault((r[key], r["variant"]), []).append(r["us"])
    for (c, v), us in seen.items():
        print(f"  {str(c):34} {v:22} {' '.join(f'{u:9.2f}' for u in us)}")
