"""Host time of an eager op call's launch path on a machine without a GPU, under the Triton this Python imports.

Triton compiles the ops' kernels for sm_90 here (its own ptxas) and builds its real CUDA launchers, against a
``libcuda.so.1`` built by this script whose every call succeeds and does nothing; CPU tensors take tritonkit's fast
launch path. Everything an eager call does on the host runs but the CUDA driver's own work. CPU numbers, not GPU ones
(gcc builds the stand-in, as it builds Triton's launchers).

    PYTHONPATH=src python benchmarks/cpu/host_launch.py [--calls 1000] [--rounds 7]

Per case (Llama-3-8B heads, bf16) it prints µs per call, the minimum of ``rounds`` rounds of ``calls`` calls:
``whole`` the eager call, ``fast path`` what the op hands tritonkit's launch path (``_launch.launch`` per launch, or
``_launch.launch_bound`` for a replayed paged_attention layout), ``launcher`` Triton's ``CudaLauncher`` called as the
fast path called it before e0f66b2, ``C`` the C launch function under it, called as that launcher calls it.
docs/notes/host-launch-triton38.md runs it under 3.6-3.9 on three trees.
"""

from __future__ import annotations

import argparse
import atexit
import ctypes
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import time

# every CUDA call the launchers and the driver utilities make succeeds; outputs get an H200's plausible values
_FAKE_CUDA = r"""
#include <stdint.h>
#include <stddef.h>
typedef int CUresult;
CUresult cuInit(unsigned f) { return 0; }
CUresult cuDriverGetVersion(int *v) { *v = 13000; return 0; }
CUresult cuDeviceGet(int *d, int o) { *d = o; return 0; }
CUresult cuDeviceGetCount(int *n) { *n = 1; return 0; }
CUresult cuDeviceGetAttribute(int *pi, int attrib, int dev) { *pi = attrib == 10 ? 32 : 232448; return 0; }
CUresult cuCtxGetCurrent(void **c) { *c = (void *)0x1; return 0; }
CUresult cuCtxSetCurrent(void *c) { return 0; }
CUresult cuCtxGetDevice(int *d) { *d = 0; return 0; }
CUresult cuCtxGetLimit(size_t *v, int l) { *v = 0; return 0; }
CUresult cuCtxSetLimit(int l, size_t v) { return 0; }
CUresult cuDevicePrimaryCtxRetain(void **c, int d) { *c = (void *)0x1; return 0; }
CUresult cuModuleLoadData(void **m, const void *img) { *m = (void *)0x1; return 0; }
CUresult cuModuleUnload(void *m) { return 0; }
CUresult cuModuleGetFunction(void **f, void *m, const char *n) { *f = (void *)0xF00; return 0; }
CUresult cuFuncGetAttribute(int *pi, int attrib, void *f) { *pi = attrib == 0 ? 1024 : 0; return 0; }
CUresult cuFuncSetAttribute(void *f, int a, int v) { return 0; }
CUresult cuFuncSetCacheConfig(void *f, int c) { return 0; }
CUresult cuGetErrorString(int e, const char **s) { *s = "fake"; return 0; }
CUresult cuPointerGetAttribute(void *data, int attr, uint64_t ptr) { *(uint64_t *)data = ptr; return 0; }
CUresult cuPointerGetAttributes(unsigned n, int *attrs, void **data, uint64_t ptr) { return 0; }
CUresult cuStreamIsCapturing(void *s, int *st) { *st = 0; return 0; }
static long launches;
CUresult cuLaunchKernelEx(const void *config, void *f, void **params, void **extra) { launches++; return 0; }
CUresult cuOccupancyMaxActiveClusters(int *n, void *f, const void *c) { *n = 1; return 0; }
CUresult cuTensorMapEncodeTiled(void) { return 0; }
CUresult cuTensorMapEncodeIm2col(void) { return 0; }
long fake_cuda_launches(void) { return launches; }
"""


def _load_fake_cuda() -> ctypes.CDLL:
    """Build the stand-in libcuda, point Triton at it and load it before any launcher links against it."""
    d = tempfile.mkdtemp(prefix="tritonkit-fakecuda-")
    atexit.register(shutil.rmtree, d, ignore_errors=True)  # a loaded library outlives its file
    src, lib = os.path.join(d, "fakecuda.c"), os.path.join(d, "libcuda.so.1")
    with open(src, "w") as f:
        f.write(_FAKE_CUDA)
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", lib, src], check=True)
    os.symlink(lib, os.path.join(d, "libcuda.so"))
    os.environ["TRITON_LIBCUDA_PATH"] = d
    fake = ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
    fake.fake_cuda_launches.restype = ctypes.c_long
    return fake


FAKE = _load_fake_cuda()

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.backends.nvidia.driver import CudaDriver, CudaLauncher  # noqa: E402
from triton.runtime.driver import driver as _driver_config  # noqa: E402

import tritonkit.ops.rms_norm.api as rms_api  # noqa: E402
from tritonkit.models import MODELS  # noqa: E402
from tritonkit.ops import _launch, get_spec  # noqa: E402
from tritonkit.testing import Fill  # noqa: E402


def _install_driver() -> None:
    """Triton's CUDA driver on the stand-in libcuda; device, stream and target as torch would give them on an H200."""
    drv = CudaDriver()
    drv.get_current_device = lambda: 0
    drv.get_current_stream = lambda device=None: 0x5
    drv.get_current_target = lambda: GPUTarget("cuda", 90, 32)
    drv.get_device_capability = lambda device=None: (9, 0)
    drv.set_current_device = lambda device: None
    _driver_config.set_active(drv)


def cases():
    model = MODELS["llama3-8b"]
    attn = get_spec("paged_attention")
    return [
        ("rms_norm, 1 token", get_spec("rms_norm"), get_spec("rms_norm").sweep_shape(model, 1).replace(residual=0)),
        ("attn decode 1 x 1K", attn, attn.series_at(model, 1)["decode 1K keys"]),
        ("attn prompt of 16", attn, attn.series_at(model, 16)["prefill causal"]),
    ]


def per_call_us(fn, calls: int, rounds: int) -> float:
    for _ in range(min(calls, 200)):
        fn()
    best = float("inf")
    gc.disable()
    try:
        for _ in range(rounds):
            t = time.perf_counter_ns()
            for _ in range(calls):
                fn()
            best = min(best, (time.perf_counter_ns() - t) / calls / 1e3)
    finally:
        gc.enable()
    return best


class _Record:
    """One eager call's fast-path entries (what the op hands ``_launch``) and launcher calls (``CudaLauncher`` as
    the fast path calls it); the launcher's class is patched only inside the block, so the entries made before keep
    whatever the tree makes of an unpatched launcher."""

    def __enter__(self):
        self.entries, self.launchers = [], []
        self._saved = rms_api.launch, _launch.launch_bound, CudaLauncher.__dict__["__call__"]
        launch, launch_bound, call = self._saved

        def rec_launch(*a, **kw):
            self.entries.append((launch, a, kw))
            return launch(*a, **kw)

        def rec_launch_bound(*a, **kw):
            self.entries.append((launch_bound, a, kw))
            return launch_bound(*a, **kw)

        def rec_call(launcher, *a):
            self.launchers.append((launcher, a))
            return call(launcher, *a)

        rms_api.launch, _launch.launch_bound, CudaLauncher.__call__ = rec_launch, rec_launch_bound, rec_call
        return self

    def __exit__(self, *exc):
        rms_api.launch, _launch.launch_bound, CudaLauncher.__call__ = self._saved


def c_call(launcher, args: tuple) -> tuple:
    """``(C function, arguments)``: what ``launcher(*args)`` calls, for a kernel without scratch memory (as
    ``CudaLauncher.__call__`` of 3.6 and of 3.7-3.9 calls it)."""
    grid_x, grid_y, grid_z, stream, function, packed, launch_meta, enter, exit_, *kernel_args = args
    assert launcher.global_scratch_size == 0 and launcher.profile_scratch_size == 0
    head = (grid_x, grid_y, grid_z, stream, function, launcher.launch_cooperative_grid, launcher.launch_pdl)
    if hasattr(launcher, "kernel_signature"):  # 3.7 on: Triton's generic C launcher
        tail = (launcher.arg_annotations, launcher.kernel_signature, tuple(kernel_args))
        return launcher.launch, (*head, packed, launch_meta, enter, exit_, None, None, *tail)
    return launcher.launch, (*head, None, None, packed, launch_meta, enter, exit_, *kernel_args)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    _install_driver()
    _launch._DEVICE_TENSOR = "is_cpu"
    print(f"Triton {triton.__version__}, torch {torch.__version__}, fast launch: {_launch.available()[1]}")
    print(f"{'µs per call (CPU)':<20}{'whole':>8}{'fast path':>11}{'launcher':>10}{'C':>7}  launches")
    for label, spec, shape in cases():
        inputs = spec.make_inputs(shape, torch.bfloat16, Fill("randn", torch.device("cpu"), 0))
        for _ in range(3):  # compile, then record the layout where the op does
            spec.call(inputs)
        n = FAKE.fake_cuda_launches()
        with _Record() as rec:
            spec.call(inputs)
        assert FAKE.fake_cuda_launches() - n == len(rec.launchers), "a launch skipped the stand-in driver"
        c_calls = [c_call(launcher, a) for launcher, a in rec.launchers]

        def entries(rec=rec):
            for fn, a, kw in rec.entries:
                fn(*a, **kw)

        def launchers(rec=rec):
            for launcher, a in rec.launchers:
                launcher(*a)

        def c_functions(c_calls=c_calls):
            for fn, a in c_calls:
                fn(*a)

        times = [per_call_us(f, args.calls, args.rounds) for f in (lambda: spec.call(inputs), entries, launchers)]
        times.append(per_call_us(c_functions, args.calls, args.rounds))
        print(f"{label:<20}" + "".join(f"{t:>{w}.2f}" for t, w in zip(times, (8, 11, 10, 7))) + f"  {len(c_calls)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
