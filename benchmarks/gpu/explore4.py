"""rms_norm (no residual, hidden 4096, bf16) at 4K/16K tokens on the H200: cache hints and rows per program, in a
local copy of the single-pass kernel. PYTHONPATH=src python3 benchmarks/gpu/explore4.py ; JSON to $OUT/exp4.json"""
import json, os
import torch
import triton
import triton.language as tl
from tritonkit.bench.stats import rotation_sets, cold
from tritonkit.bench.timing import time_graph, L2Flush


@triton.jit
def _k(x_ptr, w_ptr, y_ptr, n_rows, hidden, eps, ROWS: tl.constexpr, BLOCK: tl.constexpr, HINTS: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    offs = tl.arange(0, BLOCK)
    mask = (rows < n_rows)[:, None] & (offs < hidden)[None, :]
    ptr = rows[:, None] * hidden + offs[None, :]
    if HINTS:
        x = tl.load(x_ptr + ptr, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
    else:
        x = tl.load(x_ptr + ptr, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=offs < hidden, other=0.0, eviction_policy="evict_last").to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / hidden + eps)
    y = (x * rstd[:, None] * w[None, :]).to(y_ptr.dtype.element_ty)
    if HINTS:
        tl.store(y_ptr + ptr, y, mask=mask, cache_modifier=".cs")
    else:
        tl.store(y_ptr + ptr, y, mask=mask)


dev = torch.device("cuda")
L2 = torch.cuda.get_device_properties(0).L2_cache_size
rows_out = []
for n in (4096, 16384):
    nbytes = 2 * n * 4096 * 2
    k = rotation_sets(nbytes, L2, max_sets=64)
    sets = [{"x": torch.randn(n, 4096, device=dev, dtype=torch.bfloat16),
             "w": torch.randn(4096, device=dev, dtype=torch.bfloat16),
             "y": torch.empty(n, 4096, device=dev, dtype=torch.bfloat16)} for _ in range(k)]
    flush = None if cold(nbytes, k, L2) else L2Flush(dev)
    ref = torch.nn.functional.rms_norm(sets[0]["x"].float(), (4096,), sets[0]["w"].float(), 1e-6)
    for rows, warps, hints in ((1, 8, False), (1, 8, True), (1, 4, True), (2, 8, False), (2, 8, True), (4, 16, True),
                               (2, 16, False)):
        fn = lambda i, rows=rows, warps=warps, hints=hints: _k[(triton.cdiv(n, rows),)](
            i["x"], i["w"], i["y"], n, 4096, 1e-6, ROWS=rows, BLOCK=4096, HINTS=hints, num_warps=warps)
        fn(sets[0])
        err = (sets[0]["y"].float() - ref).abs().max().item()
        us = time_graph(fn, sets, dev, before_replay=flush).median_us
        r = dict(n=n, rows=rows, warps=warps, hints=hints, us=us, gbps=nbytes / us / 1e3, max_err=err)
        rows_out.append(r)
        print(r, flush=True)
    del sets
    torch.cuda.empty_cache()
with open(os.path.join(os.environ.get("OUT", "."), "exp4.json"), "w") as f:
    json.dump(rows_out, f, indent=1)
