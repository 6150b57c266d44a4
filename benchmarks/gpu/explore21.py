"""Twenty-first exploration on the H200, after exp20 (where the time of a decode-sized call goes):
  A. the L2 flush: exp20's floor read 1.02 us at process start and 1.35 us after the 1 GiB copy ceiling, while
     an L2-warm floor reads 0.99: is ``fill_`` of twice the L2 a flush at process start? The floor with ``fill_``,
     ``add_`` (read and write), a read-only sum of the buffer, and none, at start and after a 1 GiB copy;
  B. reshape_and_cache with padding slots clamped before the division (this tree) against 7374bb5's kernel
     (``snapshots.kernel_at``), over tokens per program and warps, 1 .. 16384 tokens;
  C. silu_and_mul over tile bytes and warps at 1 .. 64 tokens;
  D. the size-matched copy over block and warps at 86 KB .. 1 MB (is a better copy inside the bound there?);
  E. exp20's Nsight Compute durations (its parse failed on a thousands separator).
First, in a checkout: python3 benchmarks/gpu/snapshots.py 7374bb5:reshape_and_cache; carry benchmarks/gpu/.snapshots;
PYTHONPATH=src python3 benchmarks/gpu/explore21.py ; JSON to $OUT/exp21.json"""
import dataclasses
import json
import os
import sys
import time

import torch
import triton

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import explore20 as E  # noqa: E402
from snapshots import kernel_at  # noqa: E402
from tritonkit.bench import ceilings as C  # noqa: E402
from tritonkit.bench.timing import time_graph  # noqa: E402
from tritonkit.ops import get_spec  # noqa: E402
from tritonkit.ops.reshape_and_cache import api as rc_api  # noqa: E402
from tritonkit.ops.silu_and_mul import api as silu_api  # noqa: E402


class Flush:
    def __init__(self, how):
        self.how = how
        self.buf = torch.empty(2 * E.L2 // 4, dtype=torch.int32, device=E.DEV)
        self.buf.fill_(0)

    def __call__(self):
        if self.how == "fill_":
            self.buf.fill_(1)
        elif self.how == "add_":
            self.buf.add_(1)
        elif self.how == "sum":
            self.sink = self.buf.sum()


def floors(when):
    src = torch.arange(C.FLOOR_CALLS * 64, dtype=torch.int32, device=E.DEV)
    dst = torch.zeros_like(src)
    sets = [{"i": i} for i in range(C.FLOOR_CALLS)]

    def vec(inp):
        i = inp["i"] * 64
        C._vec16_copy_kernel[(1,)](src[i:], dst[i:], num_warps=1)
    for how in ("fill_", "add_", "sum", "none", "fill_"):
        t = time_graph(vec, sets, E.DEV, repeats=20, before_replay=None if how == "none" else Flush(how))
        E.row(part="flush", when=when, how=how, us=t.median_us, min=t.min_us)
    f, e = C.measure_floor_us(E.DEV)
    E.row(part="flush", when=when, how="measure_floor_us", us=f)


def patch_cfg(mod, name, **kw):
    return E.patcher(mod, name, lambda o: lambda *a: dataclasses.replace(o(*a), **kw))


def reshape():
    old = kernel_at("7374bb5", "reshape_and_cache")
    new = rc_api._reshape_and_cache_kernel
    spec = get_spec("reshape_and_cache")
    for n in (1, 16, 64, 256, 1024, 4096, 8192, 16384):
        shape = spec.sweep_shape(E.M, n)
        rc_api._reshape_and_cache_kernel = old._reshape_and_cache_kernel
        E.time_op("reshape_and_cache", shape, "7374bb5 kernel, shipped config")
        rc_api._reshape_and_cache_kernel = new
        E.time_op("reshape_and_cache", shape, "clamped, shipped config")
        for bt in (1, 2, 4):
            for w in (2, 4, 8):
                E.time_op("reshape_and_cache", shape, f"clamped block_t={bt} num_warps={w}",
                          patch_cfg(rc_api, "reshape_and_cache_config", block_t=bt, num_warps=w))


def silu():
    spec = get_spec("silu_and_mul")
    for n in (1, 4, 8, 16, 64):
        shape = spec.sweep_shape(E.M, n)
        E.time_op("silu_and_mul", shape, "shipped")
        for bn, w in ((1024, 2), (1024, 4), (2048, 8), (2048, 16), (4096, 8), (4096, 16)):
            E.time_op("silu_and_mul", shape, f"block_n={bn} num_warps={w}",
                      patch_cfg(silu_api, "silu_and_mul_config", block_n=bn, num_warps=w))


def copies():
    for nb in (86016, 270336, 532480, 1056768):
        for block, w in ((256, 2), (512, 1), (512, 4), (1024, 2), (1024, 4), (2048, 4), (4096, 8)):
            E.row(part="small copy", bytes=nb, block=block, warps=w, us=E.copy_at(nb, block, w))


if __name__ == "__main__":
    E.DEV = torch.device("cuda")
    E.L2 = torch.cuda.get_device_properties(0).L2_cache_size
    T0 = time.perf_counter()
    E.R = {"meta": {"git_sha": os.environ.get("TRITONKIT_GIT_SHA"), "gpu": torch.cuda.get_device_name(),
                    "torch": torch.__version__, "triton": triton.__version__, "command": " ".join(sys.argv)},
           "rows": []}
    out = os.path.join(os.environ.get("OUT", "."), "exp21.json")
    try:
        floors("start")
        C.measure_copy_gbps(E.DEV)
        torch.cuda.empty_cache()
        floors("after a 1 GiB copy")
        reshape()
        silu()
        copies()
        E.ncu()
    finally:
        E.R["meta"]["elapsed_s"] = time.perf_counter() - T0
        with open(out, "w") as f:
            json.dump(E.R, f, indent=1)
    print(f"done in {time.perf_counter() - T0:.0f} s")
