"""paged_attention on the GPU: correctness first, then CUDA-graph timing against vLLM's unified_attention and SDPA.

Run from the repository root on the GPU machine, with vLLM's Triton kernels extracted into .peers/ by
/work/shared/peers/vllm-triton-kernels.sh (optional: without them the vLLM columns are empty):

    PYTHONPATH=.peers:src python benchmarks/gpu/paged_attention.py

Writes $OUT/paged_attention.json (./paged_attention.json without OUT) and prints the summary table last.
Set TRITONKIT_GIT_SHA when the checkout on the GPU machine has no .git. Options: --quick (fewer shapes, no
tuning), --skip-large (no >2^31-element cache), --skip-tune, --budget SECONDS (stop tuning past it).

Phases, in order:
1. validate: float64-reference comparisons on the GPU (boundary shapes, long contexts >= 32K, every feature, the
   >2^31-element caches, a 1M-token batch checked on a sample of sequences). A failure is reported and the
   timing of that path still runs, but the summary says FAIL.
2. compile: first-call compile time per path in a fresh TRITON_CACHE_DIR (a subprocess), and compiles counted
   over the whole benchmark sweep (JITFunction device caches; the target is one per kernel).
3. bench: CUDA-graph replay (median); up to 8 input sets rotated so a replay streams ~256 MB (past the L2):
   decode (batch 1..128 x context 4K/32K), causal prefill 1K..16K, chunked prefill (2K new over 16K), a mixed
   batch; KV GB/s against the measured copy bandwidth, TFLOP/s for prefill.
4. tune: a few decode/prefill tile configurations at the shapes that matter (monkeypatched config), reported
   beside the defaults so the heuristics in config.py can be set from measurements.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

import torch

HQ, HKV, D, BS = 32, 8, 128, 16  # llama3-8b per rank, pages of 16
DT = torch.bfloat16
DEV = "cuda"  # a CPU dry run of the input and provider code sets "cpu" (Triton interpreter)
T0 = time.perf_counter()


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - T0:7.1f}s] {msg}", flush=True)


# --------------------------------------------------------------------------------------------------- environment

def env_info() -> dict:
    import triton
    sha = os.environ.get("TRITONKIT_GIT_SHA")
    if not sha:
        with contextlib.suppress(Exception):
            sha = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                 timeout=5).stdout.strip() or None
    driver = None
    with contextlib.suppress(Exception):
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=10).stdout.strip().splitlines()[0]
    props = torch.cuda.get_device_properties(0)
    return {"gpu": torch.cuda.get_device_name(), "sms": props.multi_processor_count,
            "capability": list(torch.cuda.get_device_capability()), "driver": driver, "torch": torch.__version__,
            "triton": triton.__version__, "python": platform.python_version(), "git_sha": sha,
            "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
            "pythonpath": os.environ.get("PYTHONPATH"),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


# ------------------------------------------------------------------------------------------------- bench inputs

@dataclasses.dataclass
class Batch:
    name: str
    q_lens: list[int]
    ctx: list[int]  # cached keys before the new tokens
    kv_fp8: bool = False  # float8_e4m3fn cache with per-tensor scales (tritonkit only)

    @property
    def seq_k(self) -> list[int]:
        return [c + q for c, q in zip(self.ctx, self.q_lens)]

    def shape(self):
        from tritonkit.spec import Shape
        return Shape(num_seqs=len(self.q_lens), q_len=tuple(self.q_lens), context=tuple(self.ctx), num_heads=HQ,
                     num_kv_heads=HKV, head_dim=D, block_size=BS, causal=1, kv_dtype="fp8" if self.kv_fp8 else "auto")


def make_batch(b: Batch, seed: int, dtype=DT) -> dict:
    """Random pages in a random permutation (no NaN poisoning: timing only; validation uses the spec's)."""
    dev = DEV
    g = torch.Generator(dev).manual_seed(seed)
    seq_k = b.seq_k
    pages = [-(-n // BS) for n in seq_k]
    n_pages = torch.tensor(pages, device=dev)
    width = max(pages) + 1
    first = torch.cumsum(n_pages, 0) - n_pages
    col = torch.arange(width, device=dev)
    logical = torch.where(col[None] < n_pages[:, None], first[:, None] + col[None], 0)
    num_blocks = sum(pages)
    perm = torch.randperm(num_blocks, device=dev, generator=g)
    cu = [0]
    for n in b.q_lens:
        cu.append(cu[-1] + n)
    cache_dtype = torch.float8_e4m3fn if b.kv_fp8 else dtype
    inp = {
        "q": torch.randn(cu[-1], HQ, D, device=dev, generator=g, dtype=dtype),
        "k_cache": torch.randn(num_blocks, BS, HKV, D, device=dev, generator=g, dtype=dtype).to(cache_dtype),
        "v_cache": torch.randn(num_blocks, BS, HKV, D, device=dev, generator=g, dtype=dtype).to(cache_dtype),
        "cu_seqlens_q": torch.tensor(cu, dtype=torch.int32, device=dev),
        "seqused_k": torch.tensor(seq_k, dtype=torch.int32, device=dev),
        "block_table": perm[logical].to(torch.int32),
        "max_seqlen_q": max(b.q_lens), "max_seqlen_k": max(seq_k),
    }
    if b.kv_fp8:
        inp["k_scale"] = torch.tensor([0.5], device=dev)
        inp["v_scale"] = torch.tensor([0.25], device=dev)
    return inp


# ---------------------------------------------------------------------------------------------------- providers

def tritonkit_fn(inp: dict):
    from tritonkit.ops import paged_attention
    out = torch.empty_like(inp["q"])
    kw = {k: inp[k] for k in ("cu_seqlens_q", "seqused_k", "block_table", "max_seqlen_q", "max_seqlen_k",
                              "k_scale", "v_scale") if k in inp}
    return lambda: paged_attention(inp["q"], inp["k_cache"], inp["v_cache"], out=out, **kw)


def vllm_unified_attention():
    try:
        from vllm.v1.attention.ops.triton_unified_attention import unified_attention
        return unified_attention
    except Exception as e:  # noqa: BLE001 - the peer is optional
        log(f"vLLM unified_attention not importable ({type(e).__name__}: {e}); vLLM columns empty")
        return None


def vllm_fn(inp: dict):
    """vLLM's unified_attention as vLLM's Triton backend calls it: seq_threshold_3D = 128 // num_kv_heads,
    16 softmax segments and their float32 scratch (without them it always takes the 2D prefill-shaped path)."""
    ua = vllm_unified_attention()
    if ua is None or "k_scale" in inp:
        return None
    q = inp["q"]
    t, hq, d = q.shape
    segs = 16
    out = torch.empty_like(q)
    segm_out = torch.empty(t, hq, segs, 1 << (d - 1).bit_length(), dtype=torch.float32, device=q.device)
    segm_max = torch.empty(t, hq, segs, dtype=torch.float32, device=q.device)
    segm_sum = torch.empty(t, hq, segs, dtype=torch.float32, device=q.device)

    def run():
        ua(q=q, k=inp["k_cache"], v=inp["v_cache"], out=out, cu_seqlens_q=inp["cu_seqlens_q"],
           max_seqlen_q=inp["max_seqlen_q"], seqused_k=inp["seqused_k"], max_seqlen_k=inp["max_seqlen_k"],
           softmax_scale=d ** -0.5, causal=True, window_size=(-1, -1), block_table=inp["block_table"],
           softcap=0.0, q_descale=None, k_descale=None, v_descale=None,
           seq_threshold_3D=128 // inp["k_cache"].shape[2], num_par_softmax_segments=segs,
           softmax_segm_output=segm_out, softmax_segm_max=segm_max, softmax_segm_expsum=segm_sum)
        return out
    return run


def dense_kv(inp: dict, s: int):
    """Sequence s's keys and values gathered into [Hkv, L, D] (outside any timing)."""
    n = int(inp["seqused_k"][s])
    pages = inp["block_table"][s, :-(-n // BS)].long()
    k = inp["k_cache"][pages].reshape(-1, HKV, D)[:n].transpose(0, 1).contiguous()
    v = inp["v_cache"][pages].reshape(-1, HKV, D)[:n].transpose(0, 1).contiguous()
    return k, v


def sdpa_fn(inp: dict, b: Batch):
    """torch SDPA on dense equivalents: one causal sequence (cuDNN backend; chunked prefill: lower-right causal,
    which SDPA runs on its memory-efficient kernel) or a decode batch (one query per sequence, equal lengths,
    default backend). K/V heads are expanded to the query heads outside the timing."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right
    q = inp["q"]
    if b.kv_fp8:
        return None
    if len(b.q_lens) == 1 and b.q_lens[0] > 1:
        k, v = dense_kv(inp, 0)
        qd = q.transpose(0, 1).unsqueeze(0)  # [1, Hq, T, D]
        kd, vd = k.repeat_interleave(HQ // HKV, 0).unsqueeze(0), v.repeat_interleave(HQ // HKV, 0).unsqueeze(0)
        if b.ctx[0] == 0:
            # cuDNN's attention (the fastest SDPA backend on Hopper: ~540-570 TFLOP/s causal here, against ~320-335
            # for the flash backend, FlashAttention-2)
            def run():
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    return F.scaled_dot_product_attention(qd, kd, vd, is_causal=True)
        else:
            bias = causal_lower_right(qd.shape[2], kd.shape[2])

            def run():
                # lower-right causal dispatches to the memory-efficient kernel, not flash
                return F.scaled_dot_product_attention(qd, kd, vd, attn_mask=bias)
        return run
    if all(n == 1 for n in b.q_lens) and len(set(b.ctx)) == 1:
        ks, vs = zip(*(dense_kv(inp, s) for s in range(len(b.q_lens))))
        kd, vd = torch.stack(ks), torch.stack(vs)  # [B, Hkv, L, D]
        qd = q.unsqueeze(2)  # [B, Hq, 1, D]
        return lambda: F.scaled_dot_product_attention(qd, kd, vd, enable_gqa=True)
    return None


# ------------------------------------------------------------------------------------------------------- timing

def time_calls(fns: list, target_s: float = 0.25) -> float:
    """Median microseconds per call of a CUDA graph that runs every fn once (rotated inputs), over replays.
    Falls back to eager launches (events around the loop) if capture fails."""
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for f in fns:
            f()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            for f in fns:
                f()
        run = graph.replay
    except Exception as e:  # noqa: BLE001
        log(f"  graph capture failed ({type(e).__name__}: {e}); timing eager launches")
        torch.cuda.synchronize()

        def run():
            for f in fns:
                f()
    for _ in range(3):
        run()
    torch.cuda.synchronize()
    t = time.perf_counter()
    run()
    torch.cuda.synchronize()
    one = time.perf_counter() - t
    reps = int(min(200, max(5, target_s / max(one, 1e-6))))
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for s, e in ev:
        s.record()
        run()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in ev) * 1000.0 / len(fns)


def copy_bandwidth() -> float:
    """The card's copy ceiling as `tritonkit bench` measures it (an SM-driven Triton copy kernel, bytes read +
    written, CUDA-graph timing), in GB/s. A `copy_` captured in a graph becomes a copy-engine memcpy node, which
    reaches only ~2.76 TB/s on an H200 against ~4.1 TB/s for the kernel."""
    from tritonkit.bench.ceilings import measure_copy_gbps
    gbps, _ = measure_copy_gbps(torch.device("cuda"))
    torch.cuda.empty_cache()
    return gbps


# ----------------------------------------------------------------------------------------------------- validate

def validate(quick: bool, skip_large: bool) -> list[dict]:
    from tritonkit.ops import get_spec
    from tritonkit.spec import Shape
    from tritonkit.testing import validate_case
    spec = get_spec("paged_attention")
    heads = dict(num_heads=HQ, num_kv_heads=HKV, head_dim=D, block_size=BS)
    cases = [(s, torch.bfloat16, "randn") for s in spec.boundary]
    # fp16 and the other families on a subset: each new (dtype, head config, features) costs ~1 s of compiling
    cases += [(s, torch.float16, "near_max") for s in spec.boundary[::4]]
    cases += [(spec.boundary[i], torch.bfloat16, "constant") for i in (1, 16, len(spec.boundary) - 1)]
    long = [
        Shape(num_seqs=2, q_len=1, context=32767, **heads),
        Shape(num_seqs=1, q_len=1, context=65535, num_heads=28, num_kv_heads=4, head_dim=128, block_size=16,
              sinks=1, softcap=30.0),
        Shape(num_seqs=2, q_len=(1024, 1), context=(31744, 32767), **heads),
        Shape(num_seqs=1, q_len=1, context=40000, window_left=4095, **heads),
        Shape(num_seqs=1, q_len=4096, context=0, **heads),
        Shape(num_seqs=3, q_len=(1, 1500, 3), context=(33000, 100, 32000), sinks=1, softcap=20.0,
              window_left=8191, **heads),
        Shape(num_seqs=2, q_len=(1, 700), context=(32768, 2000), kv_dtype="fp8", **heads),
        Shape(num_seqs=2, q_len=(1, 333), context=(9000, 77), num_heads=16, num_kv_heads=8, head_dim=256,
              block_size=32),
        Shape(num_seqs=2, q_len=(3, 257), context=(5000, 64), num_heads=28, num_kv_heads=4, head_dim=128,
              block_size=64, causal=0, window_left=100, window_right=50),
    ]
    cases += [(s, torch.bfloat16, "randn") for s in (long[:4] if quick else long)]
    if not skip_large:
        cases += [(s, torch.bfloat16, "randn") for s in spec.large]
    results = []
    for shape, dtype, fam in cases:
        r = validate_case(spec, shape, dtype, fam, device="cuda")
        results.append({"shape": shape.id, "dtype": str(dtype).replace("torch.", ""), "family": fam,
                        "passed": r.passed, "error": r.error, "detail": r.detail, "seconds": round(r.seconds, 2)})
        if not r.passed:
            log(f"  FAIL {shape.id} {dtype} {fam}: {r.detail}")
            tb = r.outputs.get("exception", {}).get("traceback")
            if tb:
                print(tb)
        torch.cuda.empty_cache()
    results.append(validate_million_tokens())
    n_fail = sum(not r["passed"] for r in results)
    log(f"validate: {len(results) - n_fail}/{len(results)} passed")
    return results


def validate_million_tokens() -> dict:
    """2^20 query tokens (4096 causal prompts of 256): the launch grid and token offsets at that size; the
    output of a sample of sequences is compared with the float64 reference of those sequences alone."""
    from tritonkit.ops import get_spec, paged_attention
    from tritonkit.ops.paged_attention.reference import paged_attention_reference
    from tritonkit.testing import compare
    spec = get_spec("paged_attention")
    b = Batch("1M tokens", [256] * 4096, [0] * 4096)
    t = time.perf_counter()
    try:
        inp = make_batch(b, seed=7)
        kw = {k: inp[k] for k in ("cu_seqlens_q", "seqused_k", "block_table", "max_seqlen_q", "max_seqlen_k",
                              "k_scale", "v_scale") if k in inp}
        out = paged_attention(inp["q"], inp["k_cache"], inp["v_cache"], **kw)
        torch.cuda.synchronize()
        worst = None
        for s in (0, 1, 2047, 4094, 4095):
            sel = slice(256 * s, 256 * (s + 1))
            ref = paged_attention_reference(
                inp["q"][sel].double(), inp["k_cache"], inp["v_cache"],
                cu_seqlens_q=torch.tensor([0, 256], dtype=torch.int32, device=DEV),
                seqused_k=inp["seqused_k"][s:s + 1], block_table=inp["block_table"][s:s + 1])
            c = compare(out[sel], ref, spec.tolerance_for(DT))
            if worst is None or c.error > worst.error or not c.passed:
                worst = c
        ok, detail, err = worst.passed, worst.describe(), worst.error
    except Exception as e:  # noqa: BLE001
        ok, detail, err = False, f"{type(e).__name__}: {e}", math.inf
        traceback.print_exc()
    torch.cuda.empty_cache()
    return {"shape": "4096 seqs x 256 tokens = 2^20 tokens (5 sampled)", "dtype": "bfloat16", "family": "randn",
            "passed": ok, "error": err, "detail": detail, "seconds": round(time.perf_counter() - t, 2)}


# ------------------------------------------------------------------------------------------------------ compile

PROBE = r"""
import json, statistics, sys, time, torch
sys.path[:0] = ["src"]
from benchmarks_gpu_pa import Batch, make_batch, tritonkit_fn, vllm_fn
res = {}
for name, b in (("decode", Batch("d", [1] * 4, [4095] * 4)), ("prefill", Batch("p", [1024], [0]))):
    inp = make_batch(b, 0)
    for prov, mk in (("tritonkit", tritonkit_fn), ("vllm", vllm_fn)):
        f = mk(inp)
        if f is None:
            continue
        torch.cuda.synchronize(); t = time.perf_counter(); f(); torch.cuda.synchronize()
        first = time.perf_counter() - t
        steady = []
        for _ in range(5):
            torch.cuda.synchronize(); t = time.perf_counter(); f(); torch.cuda.synchronize()
            steady.append(time.perf_counter() - t)
        res[f"{prov}/{name}"] = round(first - statistics.median(steady), 3)
print("PROBE" + json.dumps(res))
"""


def compile_probe() -> dict:
    """First-call compile seconds per path in a fresh process and TRITON_CACHE_DIR (the prefill entry is the
    prefill kernel alone: the decode kernel it also launches is already compiled by then)."""
    here = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TRITON_CACHE_DIR=cache)
        env["PYTHONPATH"] = os.pathsep.join([here, env.get("PYTHONPATH", "")])
        code = PROBE.replace("benchmarks_gpu_pa", os.path.splitext(os.path.basename(__file__))[0])
        try:
            r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
            line = [ln for ln in r.stdout.splitlines() if ln.startswith("PROBE")]
            if not line:
                log(f"compile probe failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
                return {}
            return json.loads(line[0][5:])
        except Exception as e:  # noqa: BLE001
            log(f"compile probe failed: {e}")
            return {}


def kernels():
    from tritonkit.ops.paged_attention import kernel
    return {"decode": kernel._paged_attention_decode_kernel, "merge": kernel._paged_attention_merge_kernel,
            "prefill": kernel._paged_attention_prefill_kernel}


def compile_counts() -> dict:
    dev = torch.cuda.current_device()
    return {n: len(k.device_caches[dev][0]) for n, k in kernels().items()}


# -------------------------------------------------------------------------------------------------------- bench

def batches(quick: bool) -> list[Batch]:
    out = []
    for ctx in (4096, 32768):
        for bsz in ((1, 16, 128) if quick else (1, 4, 16, 64, 128)):
            out.append(Batch(f"decode b{bsz} ctx{ctx // 1024}K", [1] * bsz, [ctx - 1] * bsz))
    for t in ((1024, 8192) if quick else (1024, 4096, 8192, 16384)):
        out.append(Batch(f"prefill {t // 1024}K causal", [t], [0]))
    out.append(Batch("chunked 2K over 16K", [2048], [16384]))
    out.append(Batch("mixed 2K prefill + 64 decode@4K", [2048] + [1] * 64, [2048] + [4095] * 64))
    if not quick:
        # fp8 (e4m3) cache: half the KV bytes; KV GB/s counts the fp8 bytes
        for bsz, ctx in ((4, 4096), (16, 4096), (16, 32768), (64, 4096)):
            out.append(Batch(f"fp8 decode b{bsz} ctx{ctx // 1024}K", [1] * bsz, [ctx - 1] * bsz, kv_fp8=True))
        out.append(Batch("fp8 prefill 8K causal", [8192], [0], kv_fp8=True))
    return out


def bench_one(b: Batch, providers: dict, copy_bw: float) -> list[dict]:
    from tritonkit.ops import get_spec
    spec = get_spec("paged_attention")
    work = spec.work(b.shape(), DT)
    kv_bytes = sum(b.seq_k) * HKV * D * 2 * (1 if b.kv_fp8 else 2)
    rot = max(1, min(8, math.ceil(256e6 / max(kv_bytes, 1))))
    sets = [make_batch(b, seed=i) for i in range(rot)]
    rows = []
    for prov, mk in providers.items():
        try:
            fns = [mk(inp) if prov != "sdpa" else sdpa_fn(inp, b) for inp in sets]
            if any(f is None for f in fns):
                continue
            us = time_calls(fns)
        except Exception as e:  # noqa: BLE001
            log(f"  {b.name} {prov}: {type(e).__name__}: {e}")
            continue
        row = {"case": b.name, "provider": prov, "us": round(us, 2), "rotated_inputs": rot,
               "kv_gbps": round(kv_bytes / (us * 1e-6) / 1e9, 1), "tflops": round(work.flops / (us * 1e-6) / 1e12, 1)}
        row["pct_copy_bw"] = round(100 * row["kv_gbps"] / copy_bw, 1)
        rows.append(row)
    del sets
    torch.cuda.empty_cache()
    base = {r["provider"]: r["us"] for r in rows}
    for r in rows:
        if "vllm" in base:
            r["speedup_vs_vllm"] = round(base["vllm"] / r["us"], 2)
    return rows


# --------------------------------------------------------------------------------------------------------- tune

TUNE_DECODE = [Batch("decode b1 ctx32K", [1], [32767]), Batch("decode b4 ctx32K", [1] * 4, [32767] * 4),
               Batch("decode b16 ctx4K", [1] * 16, [4095] * 16), Batch("decode b64 ctx4K", [1] * 64, [4095] * 64)]
TUNE_PREFILL = [Batch("prefill 8K causal", [8192], [0])]


def tune(deadline: float) -> list[dict]:
    """A few tile configurations, each timed where it matters, beside the default (first row of each group)."""
    from tritonkit.ops.paged_attention import config
    rows = []
    dec_default, pre_default = config.decode_config, config.prefill_config
    per_sm_default = config.DECODE_PROGRAMS_PER_SM
    dec_cases, pre_cases = TUNE_DECODE, TUNE_PREFILL
    dec_variants = [{}] + [dict(block_n=n, num_stages=s, num_warps=w) for n, s, w in
                           ((64, 3, 4), (32, 2, 4), (32, 4, 4))]
    dec_variants += [dict(programs_per_sm=k) for k in (2, 4)]
    pre_variants = [{}] + [dict(block_n=n, num_stages=s, num_warps=w, block_m=m) for m, n, s, w in
                           ((256, 64, 4, 16), (256, 32, 3, 16), (128, 128, 3, 8), (128, 64, 3, 8))]
    try:
        for cases, variants, which in ((dec_cases, dec_variants, "decode"), (pre_cases, pre_variants, "prefill")):
            for v in variants:
                if time.perf_counter() > deadline:
                    log("tune: time budget reached")
                    return rows
                if which == "decode":
                    tiles = {k: x for k, x in v.items() if k != "programs_per_sm"}
                    config.DECODE_PROGRAMS_PER_SM = v.get("programs_per_sm", per_sm_default)
                    config.decode_config = (lambda *a, _v=tiles: dataclasses.replace(dec_default(*a), **_v))
                    config.prefill_config = pre_default
                else:
                    config.decode_config = dec_default
                    config.prefill_config = (lambda *a, _v=v: _prefill_variant(pre_default(*a), _v))
                for b in cases:
                    rs = bench_one(b, {"tritonkit": tritonkit_fn}, 1.0)
                    if rs:
                        rows.append({"path": which, "case": b.name, "config": v or "default", "us": rs[0]["us"],
                                     "kv_gbps": rs[0]["kv_gbps"], "tflops": rs[0]["tflops"]})
                        log(f"  tune {which} {b.name} {v or 'default'}: {rs[0]['us']} us")
    finally:
        config.decode_config, config.prefill_config = dec_default, pre_default
        config.DECODE_PROGRAMS_PER_SM = per_sm_default
    return rows


def _prefill_variant(cfg, v):
    v = dict(v)
    bm = v.pop("block_m", cfg.block_m)
    group = cfg.block_m // cfg.block_q
    return dataclasses.replace(cfg, block_m=bm, block_q=bm // group, **v)


# --------------------------------------------------------------------------------------------------------- main

def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--skip-large", action="store_true")
    p.add_argument("--skip-validate", action="store_true")
    p.add_argument("--skip-tune", action="store_true")
    p.add_argument("--budget", type=float, default=280.0, help="seconds after which tuning stops")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    result = {"meta": env_info()}
    log(f"{result['meta']['gpu']} torch {torch.__version__} triton {result['meta']['triton']}")

    result["validate"] = [] if args.skip_validate else validate(args.quick, args.skip_large)
    result["compile_seconds"] = compile_probe()
    log(f"compile (first call - steady, s): {result['compile_seconds']}")

    copy_bw = copy_bandwidth()
    result["copy_bandwidth_gbps"] = round(copy_bw, 1)
    log(f"copy bandwidth {copy_bw:.0f} GB/s")
    for k in kernels().values():
        k.device_caches.clear()
    providers = {"tritonkit": tritonkit_fn, "vllm": vllm_fn, "sdpa": None}
    if vllm_unified_attention() is None:
        providers.pop("vllm")
    bench = []
    for b in batches(args.quick):
        if b.kv_fp8 and "compiles_over_bench_sweep" not in result:
            # the fp8 cache is another feature set (KV_FP8), so its kernels compile once more: count the bf16 sweep
            # (batch 1-128, context 4K-32K, prefill 1K-16K, chunked, mixed) on its own
            result["compiles_over_bench_sweep"] = compile_counts()
        rows = bench_one(b, providers, copy_bw)
        bench += rows
        log(f"{b.name}: " + ", ".join(f"{r['provider']} {r['us']} us" for r in rows))
    result["bench"] = bench
    result.setdefault("compiles_over_bench_sweep", compile_counts())
    result["compiles_incl_fp8"] = compile_counts()
    log(f"compiles over the bf16 bench sweep (target 1 each): {result['compiles_over_bench_sweep']}; "
        f"with the fp8 rows: {result['compiles_incl_fp8']}")

    result["tune"] = [] if (args.skip_tune or args.quick) else tune(T0 + args.budget)

    out_dir = os.environ.get("OUT", ".")
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "paged_attention.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1, default=str)

    n_fail = sum(not r["passed"] for r in result["validate"])
    print(f"\nwrote {path}")
    print(f"{result['meta']['gpu']}  torch {torch.__version__}  triton {result['meta']['triton']}  "
          f"sha {result['meta']['git_sha']}  copy {copy_bw:.0f} GB/s")
    print(f"validate: {len(result['validate']) - n_fail}/{len(result['validate'])} passed"
          + ("" if not n_fail else "  FAIL: " + "; ".join(r["shape"] for r in result["validate"]
                                                         if not r["passed"])[:600]))
    print(f"compile s: {result['compile_seconds']}   compiles over sweep: {result['compiles_over_bench_sweep']}")
    if result["tune"]:
        print("tune (us):")
        for r in result["tune"]:
            print(f"  {r['path']:8} {r['case']:22} {str(r['config']):60} {r['us']:>10}")
    print(f"{'case':34} {'provider':10} {'us':>10} {'KV GB/s':>9} {'%copy':>6} {'TFLOP/s':>8} {'x vLLM':>7}")
    for r in bench:
        print(f"{r['case']:34} {r['provider']:10} {r['us']:>10} {r['kv_gbps']:>9} {r['pct_copy_bw']:>6} "
              f"{r['tflops']:>8} {r.get('speedup_vs_vllm', ''):>7}")
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
