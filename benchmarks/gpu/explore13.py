"""Thirteenth exploration on the H200, in one process, each point timed A B A B:

1. decode: this tree's kernel (no early return before the path test, the split's first block-table entries and
   seqused_k issued before cu_seqlens_q behind a CTA barrier: the sm_90 SASS of 10f9fa8 issued them only after
   cu_seqlens_q's values arrived, ptxas sinking them to their use) against 10f9fa8's kernel
   (``snapshots.kernel_at``: that commit's kernel.py); at 4 warps, and at 2 warps with and
   without the split rule that fills the last wave (config.num_kv_splits: a batch with more (sequence, KV head)
   pairs than resident program slots takes the split count, up to 4, whose last wave is fullest).
2. prefill: the same prologue change (key count and first tile's block-table entries before cu_seqlens_q)
   against 10f9fa8's prefill kernel.

Ran once on 10f9fa8 + the prologue change (committed in 3b3dd8a) + a wave-fill rule in config.num_kv_splits
(WAVE_FILL_MAX_SPLITS = 4, WAVE_FILL_MIN_GAIN = 0.05, WAVE_FILL_MAX_WAVES = 3), which was removed after it: 2 warps
lost at every batch here, and the fill made batch 128 and 256 slower at 2 warps (517 vs 491 us, 1026 vs 962). The
script needs that tree; it is kept as the record of the command behind exp13.json.
First, in a checkout: python3 benchmarks/gpu/snapshots.py 10f9fa8:paged_attention; carry benchmarks/gpu/.snapshots;
PYTHONPATH=src:.peers python3 benchmarks/gpu/explore13.py ; JSON to $OUT/exp13.json"""
import json, math, os, sys, time, statistics
import torch
import triton

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import paged_attention as PA  # noqa: E402
from snapshots import kernel_at  # noqa: E402
from tritonkit.ops.paged_attention import api, config as pcfg  # noqa: E402

T0 = time.perf_counter()
R = {"meta": {"git_sha": os.environ.get("TRITONKIT_GIT_SHA"), "gpu": torch.cuda.get_device_name(),
              "torch": torch.__version__, "triton": triton.__version__, "copy_gbps": None}, "rows": []}
DEFAULTS = dict(DECODE_WARPS=pcfg.DECODE_WARPS, DECODE_PROGRAMS_PER_SM=pcfg.DECODE_PROGRAMS_PER_SM,
                WAVE_FILL_MAX_SPLITS=pcfg.WAVE_FILL_MAX_SPLITS)


def apply(**kw):
    for k, v in {**DEFAULTS, **kw}.items():
        setattr(pcfg, k, v)


def sets_for(b):
    kv_bytes = sum(b.seq_k) * PA.HKV * PA.D * 2 * (1 if b.kv_fp8 else 2)
    rot = max(1, min(8, math.ceil(256e6 / max(kv_bytes, 1))))
    return [PA.make_batch(b, seed=i) for i in range(rot)], kv_bytes


def record(case, variant, rep, fns, ref, extra=None):
    try:
        out = fns[0]().float()
        err = 0.0 if ref is None else (out - ref).abs().max().item()
        us = PA.time_calls(fns)
        row = dict(case=case, variant=variant, rep=rep, us=round(us, 2), max_diff_vs_first=err, **(extra or {}))
    except Exception as e:  # noqa: BLE001
        row = dict(case=case, variant=variant, rep=rep, error=f"{type(e).__name__}: {e}"[:300])
        out = None
    R["rows"].append(row)
    print(f"[{time.perf_counter() - T0:6.1f}s]", row, flush=True)
    with open(os.path.join(os.environ.get("OUT", "."), "exp13.json"), "w") as f:
        json.dump(R, f, indent=1)
    return out


copy_gbps = PA.copy_bandwidth()
R["meta"]["copy_gbps"] = copy_gbps

# ---- kernels: this tree's or 10f9fa8's
old = kernel_at("10f9fa8", "paged_attention")
NEW_PREFILL, NEW_DECODE = api._paged_attention_prefill_kernel, api._paged_attention_decode_kernel
real_launch = api.launch


def launch_old(kernel, grid, args, constexprs, num_warps, num_stages=None, launch_pdl=False):
    if kernel is NEW_PREFILL:  # drop bt_width (the 13th argument), which the old kernel does not take
        kernel, args = old._paged_attention_prefill_kernel, args[:12] + args[13:]
    elif kernel is NEW_DECODE:
        kernel = old._paged_attention_decode_kernel
    return real_launch(kernel, grid, args, constexprs, num_warps, num_stages, launch_pdl=launch_pdl)


KERNELS = {"new": real_launch, "10f9fa8": launch_old}

# ---- 1. decode
DEC = [("10f9fa8 w4", "10f9fa8", dict()), ("new w4", "new", dict()),
       ("new w2 fill", "new", dict(DECODE_WARPS=2, DECODE_PROGRAMS_PER_SM=6)),
       ("new w2 nofill", "new", dict(DECODE_WARPS=2, DECODE_PROGRAMS_PER_SM=6, WAVE_FILL_MAX_SPLITS=1))]
cases = [PA.Batch(f"decode b{n} ctx{c // 1024}K", [1] * n, [c - 1] * n)
         for n, c in ((4, 4096), (1, 4096), (8, 4096), (16, 4096), (32, 4096), (64, 4096), (128, 4096), (256, 4096),
                      (1, 32768), (4, 32768), (16, 32768), (128, 32768))]
cases.append(PA.Batch("spec 8 seqs x 4 tokens ctx4K", [4] * 8, [4092] * 8))
cases.append(PA.Batch("fp8 decode b16 ctx4K", [1] * 16, [4095] * 16, kv_fp8=True))
for b in cases:
    sets, kv_bytes = sets_for(b)
    ref = None
    for rep in range(2):
        for name, kern, kw in DEC:
            apply(**kw)
            api.launch = KERNELS[kern]
            splits = pcfg.num_kv_splits(len(b.q_lens), PA.HKV, max(b.seq_k), torch.cuda.get_device_properties(0)
                                        .multi_processor_count, 1 if b.kv_fp8 else 2)
            out = record(b.name, name, rep, [PA.tritonkit_fn(inp) for inp in sets], ref,
                         dict(splits=splits, kv_bytes=kv_bytes))
            if ref is None:
                ref = out
        apply()
        api.launch = real_launch
        if b.name in ("decode b4 ctx4K", "decode b1 ctx4K", "decode b128 ctx4K") and not b.kv_fp8:
            fns = [PA.vllm_fn(inp) for inp in sets]
            if fns[0] is not None:
                record(b.name, "vllm", rep, fns, None)
    del sets
    torch.cuda.empty_cache()
apply()

# ---- 2. prefill
PRE = [("new", real_launch), ("10f9fa8", launch_old)]
pcases = [PA.Batch("prefill 8K causal", [8192], [0]), PA.Batch("prefill 16K causal", [16384], [0]),
          PA.Batch("prefill 4K causal", [4096], [0]), PA.Batch("chunked 2K over 16K", [2048], [16384])]
from tritonkit.ops import get_spec  # noqa: E402
pspec = get_spec("paged_attention")
for b in pcases:
    sets, _ = sets_for(b)
    flops = pspec.work(b.shape(), PA.DT).flops
    ref = None
    for rep in range(3):
        for name, fn in PRE:
            api.launch = fn
            out = record(b.name, name, rep, [PA.tritonkit_fn(inp) for inp in sets], ref)
            if ref is None:
                ref = out
            if "us" in R["rows"][-1]:
                R["rows"][-1]["tflops"] = round(flops / (R["rows"][-1]["us"] * 1e-6) / 1e12, 1)
    api.launch = real_launch
    del sets
    torch.cuda.empty_cache()

with open(os.path.join(os.environ.get("OUT", "."), "exp13.json"), "w") as f:
    json.dump(R, f, indent=1)
seen = {}
for r in R["rows"]:
    seen.setdefault((r["case"], r["variant"]), []).append(r.get("tflops", r.get("us", float("nan"))))
print(f"copy {copy_gbps:.0f} GB/s; decode: us per call; prefill: TFLOP/s")
for (c, v), us in seen.items():
    print(f"  {c:30} {v:18} {' '.join(f'{u:9.2f}' for u in us)}  median {statistics.median(us):9.2f}")
