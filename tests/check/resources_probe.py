"""Probe kernels for test_resources.py, compiled in a process with the interpreter off; prints one JSON line each."""

import json
import os

os.environ["TRITON_INTERPRET"] = "0"

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from tritonkit.check import resources as R  # noqa: E402
from tritonkit.check.resources import compile_resources  # noqa: E402


@triton.jit
def _matmul_kernel(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    offs_m, offs_n, offs_k = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + offs_m[:, None] * K + (k + offs_k)[None, :])
        b = tl.load(b_ptr + (k + offs_k)[:, None] * BN + offs_n[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + offs_m[:, None] * BN + offs_n[None, :], acc)


def main():
    meta = dict(dtype=torch.bfloat16, device="meta")
    a, b, c = torch.empty(256, 4096, **meta), torch.empty(4096, 256, **meta), torch.empty(256, 256, **meta)
    for stages in (2, 4):
        r = compile_resources(_matmul_kernel, a, b, c, 4096, BM=128, BN=128, BK=64, num_warps=8, num_stages=stages)
        print(json.dumps({"probe": f"matmul-128-s{stages}", **vars(r)}))
    r = compile_resources(_matmul_kernel, a, b, c, 4096, BM=256, BN=256, BK=128, num_warps=8, num_stages=4)
    print(json.dumps({"probe": "matmul-256-s4", **vars(r)}))
    r = compile_resources(_matmul_kernel, a, b, c, 4096, BM=16, BN=64, BK=64, num_warps=4, num_stages=3)
    print(json.dumps({"probe": "matmul-16", **vars(r)}))
    r = compile_resources(_matmul_kernel, a, b, c, 4096, BM=128, BN=128, BK=64, num_warps=8, num_stages=2, arch="sm_80")
    print(json.dumps({"probe": "matmul-128-sm80", **vars(r)}))
    for name, kw in (
        ("sass-128", dict(BM=128, BN=128, BK=64, num_warps=8, num_stages=4)),
        ("sass-256", dict(BM=256, BN=256, BK=128, num_warps=8, num_stages=4)),
    ):
        (ln,) = R.record_launches(lambda kw=kw: _matmul_kernel[(1,)](a, b, c, 4096, **kw))
        counts, _ = R.sass_counts(R.compile_for(ln.kernel, *ln.args, **ln.kwargs).asm["cubin"])
        print(json.dumps({"probe": name, "options": ln.options(), **counts}))


if __name__ == "__main__":
    main()
