"""Runs one paged-attention decode shape eagerly a few times (inputs from paged_attention.py), a driver for
Nsight Compute. From the repository root on a GPU machine:

    PYTHONPATH=src ncu --kernel-name regex:decode_kernel --launch-skip 4 --launch-count 1 \\
        python3 benchmarks/gpu/profile_decode.py BATCH CONTEXT [CALLS]

What it showed at batch 4 x 4K: docs/notes/decode-tiling.md."""
import os, sys
import torch
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import paged_attention as PA  # noqa: E402

n, ctx = int(sys.argv[1]), int(sys.argv[2])
calls = int(sys.argv[3]) if len(sys.argv) > 3 else 8
inp = PA.make_batch(PA.Batch(f"b{n}", [1] * n, [ctx - 1] * n), seed=0)
f = PA.tritonkit_fn(inp)
for _ in range(calls):
    f()
torch.cuda.synchronize()
print("done")
