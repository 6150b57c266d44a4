"""Twentieth exploration on the H200: where the time of a decode-sized call goes, above the 16-byte floor.

The bench's small points (1-64 tokens) miss the issue's bound 1.25 x (floor + bytes / ceiling) for every
memory-bound op, while a copy of the same bytes sits near it; and the floor measured 1.35 us in the bench runs
but 1.01 us in exp17's process. This run times, the way `tritonkit bench` times a point (spec inputs, rotation
sets, an L2 flush before each replay where they are too few, ``time_graph``):
  1. the floor (``measure_floor_us``) at process start, after the 1 GiB copy ceiling, after the matmul ceiling,
     and at the end; a floor over separately allocated sets (the way op points rotate); a two-round-trip floor
     (load an index, then load at it: what rotary's position -> cos/sin gather needs at least);
  2. each op at 1 / 16 / 64 tokens as shipped, with other warps / tiles, and (rms_norm) the same loads and
     stores without the reduction, beside the size-matched copy;
  3. reshape_and_cache and the size-matched copy at 4096 / 8192 tokens over block and warp choices;
  4. kernel durations alone (Nsight Compute, gpu__time_duration, caches flushed, clocks not locked) of the
     floor, the copy and each op at one token: what is inside the kernel and what is launch.
PYTHONPATH=src python3 benchmarks/gpu/explore20.py ; JSON to $OUT/exp20.json"""
import json
import os
import subprocess
import sys
import time

import torch
import triton
import triton.language as tl

from tritonkit.bench import ceilings as C
from tritonkit.bench import providers as P
from tritonkit.bench.runner import SETS_MEM_BUDGET, _nbytes
from tritonkit.bench.stats import MAX_SETS
from tritonkit.bench.timing import L2Flush, rotation, time_graph
from tritonkit.models import MODELS
from tritonkit.ops import get_spec
from tritonkit.ops.reshape_and_cache import api as rc_api, config as rc_cfg
from tritonkit.ops.rms_norm import api as rms_api, config as rms_cfg
from tritonkit.ops.rotary_embedding import api as rot_api, config as rot_cfg
from tritonkit.ops.silu_and_mul import api as silu_api, config as silu_cfg
from tritonkit.testing import Fill

M = MODELS["llama3-8b"]
BF16 = torch.bfloat16


@triton.jit
def _gather16_kernel(idx_ptr, src_ptr, dst_ptr):
    # two dependent round trips: an int64 index, then 16 bytes at it
    i = tl.load(idx_ptr)
    offs = tl.arange(0, 4)
    tl.store(dst_ptr + offs, tl.load(src_ptr + i * 4 + offs))


@triton.jit
def _rms_like_kernel(x_ptr, res_ptr, w_ptr, y_ptr, r_ptr, hidden, eps, HAS_RESIDUAL: tl.constexpr,
                     BLOCK: tl.constexpr, REDUCE: tl.constexpr):
    # rms_norm's single-pass body with the reduction optional (REDUCE=False scales by eps instead)
    row = tl.program_id(0).to(tl.int64) * hidden
    offs = tl.arange(0, BLOCK)
    mask = offs < hidden
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.debug_barrier()
    x = tl.load(x_ptr + row + offs, mask=mask, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        r = (x + tl.load(res_ptr + row + offs, mask=mask, other=0.0).to(tl.float32)).to(r_ptr.dtype.element_ty)
        tl.store(r_ptr + row + offs, r, mask=mask)
        x = r.to(tl.float32)
    if REDUCE:
        rstd = tl.rsqrt(tl.sum(x * x, axis=0) / hidden + eps)
    else:
        rstd = eps
    tl.store(y_ptr + row + offs, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


def sets_for(spec, shape):
    fill = Fill("randn", DEV, 0)
    sets = [spec.make_inputs(shape, BF16, fill)]
    n, flush = rotation(spec.work(shape, BF16).bytes, L2, DEV, max_sets=MAX_SETS, mem_per_set=_nbytes(sets[0]),
                        mem_budget=SETS_MEM_BUDGET)
    sets += [spec.make_inputs(shape, BF16, fill) for _ in range(n - 1)]
    return sets, flush


def row(**kw):
    R["rows"].append(kw)
    print(json.dumps(kw), flush=True)


def floor_now(when):
    f, e = C.measure_floor_us(DEV)
    row(part="floor", variant="measure_floor_us", when=when, us=f, empty_us=e)
    return f


def floor_variants():
    n = MAX_SETS
    g = torch.Generator(DEV).manual_seed(0)
    sets = [{"src": torch.randint(0, 1 << 30, (4,), dtype=torch.int32, device=DEV, generator=g),
             "dst": torch.empty(4, dtype=torch.int32, device=DEV)} for _ in range(n)]
    t = time_graph(lambda s: C._vec16_copy_kernel[(1,)](s["src"], s["dst"], num_warps=1), sets, DEV,
                   before_replay=L2Flush(DEV))
    row(part="floor", variant="vec16 over 2048 separate sets + flush", us=t.median_us, min=t.min_us)
    t = time_graph(lambda s: C._vec16_copy_kernel[(1,)](s["src"], s["dst"], num_warps=1), sets, DEV)
    row(part="floor", variant="vec16 over 2048 separate sets, no flush (L2-warm)", us=t.median_us, min=t.min_us)
    gsets = [{"idx": torch.zeros(1, dtype=torch.int64, device=DEV), **s} for s in sets]
    t = time_graph(lambda s: _gather16_kernel[(1,)](s["idx"], s["src"], s["dst"], num_warps=1), gsets, DEV,
                   before_replay=L2Flush(DEV))
    row(part="floor", variant="gather16 (index, then 16 B at it) over 2048 sets + flush", us=t.median_us,
        min=t.min_us)
    for w in (4, 8):
        t = time_graph(lambda s, w=w: C._vec16_copy_kernel[(1,)](s["src"], s["dst"], num_warps=w), sets, DEV,
                       before_replay=L2Flush(DEV))
        row(part="floor", variant=f"vec16 num_warps={w} over 2048 sets + flush", us=t.median_us, min=t.min_us)


def copy_at(nbytes, block=C.SIZED_COPY_BLOCK, warps=C.SIZED_COPY_WARPS):
    C.SIZED_COPY_BLOCK, C.SIZED_COPY_WARPS = block, warps
    try:
        return C.time_size_matched_copy(nbytes, L2, DEV, max_sets=MAX_SETS, mem_budget=SETS_MEM_BUDGET)["us"]
    finally:
        C.SIZED_COPY_BLOCK, C.SIZED_COPY_WARPS = 2048, 4


def time_op(op, shape, label, patch=None, fn=None):
    spec = get_spec(op)
    sets, flush = sets_for(spec, shape)
    prov = fn or P.make_provider("tritonkit", spec, BF16)
    undo = patch() if patch else None
    try:
        if fn is None:  # the variant must give the shipped output
            ref = spec.call(P.clone_inputs(sets[0]))
            if undo:
                undo()
            base = spec.call(P.clone_inputs(sets[0]))
            if patch:
                undo = patch()
            for k in base:
                if not torch.equal(base[k].view(torch.uint8), ref[k].view(torch.uint8)):
                    row(part="op", op=op, variant=label, error=f"{k} differs from the shipped config")
                    return None
        t = time_graph(prov, sets, DEV, before_replay=flush)
    finally:
        if undo:
            undo()
    work = spec.work(shape, BF16)
    row(part="op", op=op, num_tokens=shape["num_tokens"], variant=label, us=t.median_us, min=t.min_us,
        bytes=work.bytes, sets=len(sets), flush=flush is not None)
    return t.median_us


def patcher(mod, name, make):
    def patch():
        orig = getattr(mod, name)
        setattr(mod, name, make(orig))
        return lambda: setattr(mod, name, orig)
    return patch


def ops_small():
    for n in (1, 16, 64):
        for res in (1, 0):
            spec = get_spec("rms_norm")
            shape = spec.sweep_shape(M, n).replace(residual=res)
            row(part="copy", op="rms_norm", residual=res, num_tokens=n,
                us=copy_at(spec.work(shape, BF16).bytes))
            time_op("rms_norm", shape, f"shipped res={res}")
            for w in (2, 4, 16):
                time_op("rms_norm", shape, f"warps={w} res={res}", patcher(
                    rms_api, "rms_norm_config",
                    lambda o, w=w: lambda h, e: rms_cfg.RmsNormConfig(o(h, e).block, o(h, e).single_pass, w)))
            for reduce in (True, False):
                def fn(s, reduce=reduce, res=res):
                    x = s["x"]
                    y = torch.empty_like(x)
                    r = torch.empty_like(x) if res else y
                    _rms_like_kernel[(x.shape[0],)](x, s["residual"] if res else x, s["weight"], y, r, 4096, 1e-6,
                                                    HAS_RESIDUAL=bool(res), BLOCK=4096, REDUCE=reduce, num_warps=8)
                    return y
                time_op("rms_norm", shape, f"rms_like reduce={reduce} res={res} (w8)", fn=fn)
        for op, mod, name, cfgmod, variants in (
                ("reshape_and_cache", rc_api, "reshape_and_cache_config", rc_cfg,
                 [dict(num_warps=w, block_t=bt) for bt in (1, 4) for w in (1, 2, 4, 8)]),
                ("rotary_embedding", rot_api, "rotary_config", rot_cfg,
                 [dict(num_warps=w) for w in (1, 2, 4, 8)]),
                ("silu_and_mul", silu_api, "silu_and_mul_config", silu_cfg,
                 [dict(num_warps=w) for w in (1, 2, 4, 8, 16)])):
            spec = get_spec(op)
            shape = spec.sweep_shape(M, n)
            row(part="copy", op=op, num_tokens=n, us=copy_at(spec.work(shape, BF16).bytes))
            time_op(op, shape, "shipped")
            for v in variants:
                time_op(op, shape, " ".join(f"{k}={x}" for k, x in v.items()), patcher(
                    mod, name, lambda o, v=v: lambda *a: __import__("dataclasses").replace(o(*a), **v)))


def mid():
    spec = get_spec("reshape_and_cache")
    for n in (4096, 8192):
        shape = spec.sweep_shape(M, n)
        nb = spec.work(shape, BF16).bytes
        for block, warps in ((1024, 4), (2048, 4), (4096, 4), (4096, 8), (8192, 8), (16384, 16)):
            row(part="mid copy", num_tokens=n, block=block, warps=warps, bytes=nb, us=copy_at(nb, block, warps))
        time_op("reshape_and_cache", shape, "shipped")
        for bt, w in ((1, 2), (2, 4), (8, 8), (16, 8), (16, 16), (32, 16)):
            time_op("reshape_and_cache", shape, f"block_t={bt} num_warps={w}", patcher(
                rc_api, "reshape_and_cache_config",
                lambda o, bt=bt, w=w: lambda *a: __import__("dataclasses").replace(o(*a), block_t=bt, num_warps=w)))


def ncu_child():
    """Each kernel at one token, 5 launches, synchronized: Nsight Compute profiles them."""
    src = torch.arange(64, dtype=torch.int32, device=DEV)
    dst = torch.zeros_like(src)
    for _ in range(5):
        C._empty_kernel[(1,)](dst, num_warps=1)
        C._vec16_copy_kernel[(1,)](src, dst, num_warps=1)
    torch.cuda.synchronize()
    n = 40960 // 8
    a = torch.zeros(n, dtype=torch.int32, device=DEV)
    b = torch.zeros_like(a)
    for _ in range(5):
        C._copy_vec_kernel[(triton.cdiv(n, 2048),)](a, b, n // 4, BLOCK=2048, num_warps=4)
    torch.cuda.synchronize()
    for op, kw in (("rms_norm", dict(residual=1)), ("rms_norm", dict(residual=0)), ("reshape_and_cache", {}),
                   ("rotary_embedding", {}), ("silu_and_mul", {})):
        spec = get_spec(op)
        inp = spec.make_inputs(spec.sweep_shape(M, 1).replace(**kw), BF16, Fill("randn", DEV, 0))
        for _ in range(5):
            spec.call(inp)
            torch.cuda.synchronize()


def ncu():
    exe = "/usr/local/cuda/bin/ncu"
    if not os.path.exists(exe):
        row(part="ncu", error="no ncu")
        return
    cmd = [exe, "--clock-control", "none", "--cache-control", "all", "--metrics", "gpu__time_duration.sum",
           "--csv", "--page", "raw", sys.executable, os.path.abspath(__file__), "--ncu-child"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=150)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith('"')]
    if not lines:
        row(part="ncu", error=(p.stdout + p.stderr)[-800:])
        return
    import csv
    rows = list(csv.reader(lines))
    head = rows[0]
    ki, ti = head.index("Kernel Name"), head.index("gpu__time_duration.sum")
    per = {}
    for r in rows[2:]:
        per.setdefault(r[ki], []).append(float(r[ti].replace(",", "")))
    for k, v in per.items():
        row(part="ncu", kernel=k, duration=sorted(v), unit=rows[1][ti])


if __name__ == "__main__":
    DEV = torch.device("cuda")
    if "--ncu-child" in sys.argv:
        ncu_child()
        sys.exit(0)
    T0 = time.perf_counter()
    L2 = torch.cuda.get_device_properties(0).L2_cache_size
    R = {"meta": {"git_sha": os.environ.get("TRITONKIT_GIT_SHA"), "gpu": torch.cuda.get_device_name(),
                  "torch": torch.__version__, "triton": triton.__version__, "command": " ".join(sys.argv)},
         "rows": []}
    out = os.path.join(os.environ.get("OUT", "."), "exp20.json")
    try:
        floor_now("start")
        copy_gbps, _ = C.measure_copy_gbps(DEV)
        R["meta"]["copy_gbps"] = copy_gbps
        floor_now("after the copy ceiling")
        C.measure_matmul_tflops(DEV)
        torch.cuda.empty_cache()
        floor_now("after the matmul ceiling")
        floor_variants()
        ops_small()
        floor_now("after the small ops")
        mid()
        floor_now("end")
        ncu()
    finally:
        R["meta"]["elapsed_s"] = time.perf_counter() - T0
        with open(out, "w") as f:
            json.dump(R, f, indent=1)
    print(f"done in {time.perf_counter() - T0:.0f} s")
