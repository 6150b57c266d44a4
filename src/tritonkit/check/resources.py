"""What one launch of a kernel takes on a GPU target, compiled on this CPU: shared memory, registers, spills.

Triton's full pipeline runs here for the target (TTIR -> TTGIR -> LLVM -> PTX -> ptxas -> cubin) with the
checker's stub driver, and the cubin's resource usage is read with the ``cuobjdump`` Triton ships. A tile config
that needs more shared memory than the target has fails at launch with OutOfResources on the GPU; one that spills
registers runs, slowly. Both are known here, before any GPU time is spent.

The kernel must be compiled in a process where Triton's interpreter is off when the kernel module is imported
(a module that reads ``triton.knobs.runtime.interpret`` at import, as fused_moe's does, bakes its branches in).
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import tempfile

import triton

from .target import ARCHS, interpreter_off, parse_arch, stub_driver


@dataclasses.dataclass(frozen=True)
class Resources:
    """One compiled specialization on one target."""

    kernel: str
    arch: str
    shared_bytes: int  # dynamic shared memory Triton allocates per program (its metadata)
    registers: int  # per thread, as ptxas allocated them (255 at most)
    stack_bytes: int  # per-thread stack frame: where ptxas puts the registers it spills
    local_bytes: int  # per-thread local memory arrays
    num_warps: int
    max_shared_bytes: int  # the target's opt-in shared memory per block
    wgmma: bool  # Hopper's warpgroup MMA in the PTX
    mma: bool  # any tensor-core MMA (mma.sync or wgmma)

    @property
    def fits(self) -> bool:
        return self.shared_bytes <= self.max_shared_bytes

    @property
    def spills(self) -> bool:
        """Values live in memory instead of registers (a stack frame, or local arrays): slow, not wrong."""
        return self.stack_bytes > 0 or self.local_bytes > 0


def _cuobjdump() -> str:
    path = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    if not os.path.exists(path):
        raise FileNotFoundError(f"Triton's cuobjdump is not at {path}: this Triton build cannot report resources")
    return path


def _usage(cubin: bytes, name: str) -> dict[str, int]:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([_cuobjdump(), "-res-usage", f.name], capture_output=True, text=True, check=True).stdout
    m = re.search(rf"Function {re.escape(name)}:\s*\n\s*(.*)", out)
    if m is None:
        raise RuntimeError(f"cuobjdump reported no function {name}: {out.strip()[:300]}")
    # "REG:119 STACK:0 SHARED:1024 LOCAL:0 CONSTANT[0]:688 ..."
    return {k: int(v) for k, v in re.findall(r"(?:^|\s)([A-Z]+):(\d+)", m.group(1))}


def compile_resources(kernel, *args, arch: str = "sm_90", **kwargs) -> Resources:
    """Compile ``kernel[grid](*args, **kwargs)`` for ``arch`` (tensors may live on ``device="meta"``; kwargs hold
    the constexprs and num_warps / num_stages) and report what one program takes. Raises what Triton raises when
    the config cannot compile (its OutOfResources names the shared memory it needed)."""
    target = parse_arch(arch)
    # the JIT keeps one (target, backend, binder) per device: a fresh one, so this target is the one compiled for,
    # and the kernel's own cache (a real GPU's, in a process that has one) is left as it was
    saved = kernel.device_caches
    kernel.device_caches = type(saved)(saved.default_factory)
    try:
        with interpreter_off(), stub_driver(target):
            compiled = kernel.warmup(*args, grid=(1,), **kwargs)
    finally:
        kernel.device_caches = saved
    name = compiled.metadata.name
    usage = _usage(compiled.asm["cubin"], name)
    ptx = compiled.asm["ptx"]
    smem = next(v[1] for v in ARCHS.values() if v[0] == target.arch)
    return Resources(kernel=name, arch=arch, shared_bytes=int(compiled.metadata.shared),
                     registers=usage.get("REG", 0), stack_bytes=usage.get("STACK", 0),
                     local_bytes=usage.get("LOCAL", 0),
                     num_warps=int(compiled.metadata.num_warps), max_shared_bytes=smem,
                     wgmma="wgmma.mma_async" in ptx, mma="wgmma.mma_async" in ptx or "mma.sync" in ptx)
