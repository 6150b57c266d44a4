"""A quick speed probe of the built-in memory-bound ops on the GPU (the full tool is `tritonkit bench`).

CUDA-graph replay timing, inputs rotated so each replay misses L2; GB/s from the spec's work model against a
Triton copy kernel timed the same way. Usage: PYTHONPATH=src python3 benchmarks/gpu/quick_speed.py [OP ...]
"""

import json
import os
import sys

import torch
import triton
import triton.language as tl

from tritonkit import ops
from tritonkit.models import MODELS
from tritonkit.testing import Fill


@triton.jit
def _copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=m), mask=m)


def graph_time_us(fn_list, reps=20):
    """Median µs of one call, from graph replays of len(fn_list) calls on distinct inputs."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for f in fn_list:
            f()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for f in fn_list:
            f()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / len(fn_list))
    times.sort()
    return times[len(times) // 2]


def copy_bandwidth():
    n = 1 << 28  # 512 MB of bf16 each way
    src = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    t = graph_time_us([lambda: _copy_kernel[(triton.cdiv(n, 4096),)](src, dst, n, BLOCK=4096, num_warps=8)])
    return 2 * n * 2 / t / 1e3  # GB/s


def main():
    names = sys.argv[1:] or [n for n in ops.OP_NAMES if n != "paged_attention"]
    ceiling = copy_bandwidth()
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    rows = []
    model = MODELS["llama3-8b"]
    for name in names:
        spec = ops.get_spec(name)
        for t in (1, 16, 256, 4096, 16384, 65536):
            shape = spec.sweep_shape(model, t)
            w = spec.work(shape, torch.bfloat16)
            n_sets = max(2, min(64, (3 * l2) // max(w.bytes, 1) + 1))
            sets = [spec.make_inputs(shape, torch.bfloat16, Fill("randn", "cuda", seed=i)) for i in range(n_sets)]
            us = graph_time_us([lambda i=i: spec.call(i) for i in sets])
            gbs = w.bytes / us / 1e3
            rows.append({"op": name, "shape": shape.id, "us": us, "GB/s": gbs, "pct": 100 * gbs / ceiling})
            del sets
    print(f"copy ceiling {ceiling:.0f} GB/s on {torch.cuda.get_device_name()}")
    for r in rows:
        print(f"{r['op']:<18} {r['shape']:<48} {r['us']:9.2f} us {r['GB/s']:8.0f} GB/s {r['pct']:5.1f}%")
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "quick_speed.json"), "w") as f:
            json.dump({"ceiling_GBps": ceiling, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
