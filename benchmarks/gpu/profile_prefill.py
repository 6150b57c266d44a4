"""Runs one causal paged-attention prefill eagerly a few times (inputs from paged_attention.py), a driver for
Nsight Compute. From the repository root on a GPU machine:

    PYTHONPATH=src ncu --kernel-name regex:prefill_kernel --launch-skip 2 --launch-count 1 \\
        python3 benchmarks/gpu/profile_prefill.py TOKENS [CALLS]

What it showed at 8K: docs/notes/prefill-tiles.md."""
import os, sys
import torch
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import paged_attention as PA  # noqa: E402

t = int(sys.argv[1])
calls = int(sys.argv[2]) if len(sys.argv) > 2 else 4
inp = PA.make_batch(PA.Batch(f"prefill {t}", [t], [0]), seed=0)
f = PA.tritonkit_fn(inp)
for _ in range(calls):
    f()
torch.cuda.synchronize()
print("done")
