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


def _gluon_probes():
    """A Gluon kernel that waits for one async wgmma with one group still allowed outstanding (so ptxas must wait
    itself, and serializes the kernel's wgmmas), and its twin that waits for zero."""
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma, warpgroup_mma_wait

    @gluon.jit
    def _one_dot_kernel(x_ptr, out_ptr, PENDING: gl.constexpr):
        acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 64, 16])
        io: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
        offs_m = gl.arange(0, 64, layout=gl.SliceLayout(1, io))
        offs_n = gl.arange(0, 64, layout=gl.SliceLayout(0, io))
        x = gl.load(x_ptr + offs_m[:, None] * 64 + offs_n[None, :])
        smem = gl.allocate_shared_memory(
            gl.bfloat16, [64, 64], gl.NVMMASharedLayout.get_default_for([64, 64], gl.bfloat16)
        )
        smem.store(x)
        fence_async_shared()
        acc = warpgroup_mma(smem, smem.permute((1, 0)), gl.zeros([64, 64], gl.float32, acc_l), use_acc=False,
                            is_async=True)  # fmt: skip
        acc, _ = warpgroup_mma_wait(PENDING, deps=(acc, smem))
        offs_am = gl.arange(0, 64, layout=gl.SliceLayout(1, acc_l))
        offs_an = gl.arange(0, 64, layout=gl.SliceLayout(0, acc_l))
        gl.store(out_ptr + offs_am[:, None] * 64 + offs_an[None, :], acc)

    x = torch.empty(64, 64, dtype=torch.bfloat16, device="meta")
    out = torch.empty(64, 64, dtype=torch.float32, device="meta")
    for pending in (1, 0):
        (ln,) = R.record_launches(lambda p=pending: _one_dot_kernel[(1,)](x, out, PENDING=p, num_warps=4))
        notes = R.ptxas_notes(R.compile_for(ln.kernel, *ln.args, **ln.kwargs))
        print(json.dumps({"probe": f"gluon-wait-{pending}", "ptxas": notes}))


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
    _gluon_probes()


if __name__ == "__main__":
    main()
