"""What one launch of a kernel takes on a GPU target, compiled on this CPU: shared memory, registers, spills.

Triton's full pipeline runs here for the target (TTIR -> TTGIR -> LLVM -> PTX -> ptxas -> cubin) with the
checker's stub driver, and the cubin's resource usage is read with the ``cuobjdump`` Triton ships. A tile config
that needs more shared memory than the target has fails at launch with OutOfResources on the GPU; one that spills
registers runs, slowly. Both are known here, before any GPU time is spent.

The kernel must be compiled in a process where Triton's interpreter is off when the kernel module is imported
(a module that reads ``triton.knobs.runtime.interpret`` at import, as fused_moe's does, bakes its branches in).

From the command line, for a built-in op at one sweep point (one line per distinct launch, with ptxas's performance
warnings for a kernel on wgmma; ``--sass DIR`` also writes each kernel's SASS and counts its spill instructions)::

    python3 -m tritonkit.check.resources paged_attention --model llama3-8b --num-tokens 8192 \
        --series "prefill causal" [--shape head_dim=256] [--dtype bfloat16] [--arch sm_90] [--sass out/]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import subprocess
import sys
import textwrap
import tempfile
from collections.abc import Callable
from pathlib import Path

from .. import _triton_compat as _compat
from .capture.target import ARCHS, interpreter_off, parse_arch, stub_driver


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
    path = _compat.cuobjdump_path()
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


def compile_for(kernel, *args, arch: str = "sm_90", **kwargs):
    """Triton's CompiledKernel of ``kernel[grid](*args, **kwargs)`` for ``arch``, compiled on this CPU (tensors may
    live on ``device="meta"``; kwargs hold the constexprs and num_warps / num_stages). Raises what Triton raises when
    the config cannot compile."""
    # the JIT keeps one (target, backend, binder) per device: a fresh one, so this target is the one compiled for,
    # and the kernel's own cache (a real GPU's, in a process that has one) is left as it was
    with _compat.fresh_device_caches(kernel), interpreter_off(), stub_driver(parse_arch(arch)):
        return kernel.warmup(*args, grid=(1,), **kwargs)


def compile_resources(kernel, *args, arch: str = "sm_90", **kwargs) -> Resources:
    """Compile ``kernel[grid](*args, **kwargs)`` for ``arch`` (:func:`compile_for`) and report what one program
    takes (:func:`resources_of`)."""
    return resources_of(compile_for(kernel, *args, arch=arch, **kwargs), arch)


def resources_of(compiled, arch: str = "sm_90") -> Resources:
    """What one program of a kernel compiled for ``arch`` takes, read off its metadata, cubin and PTX."""
    target = parse_arch(arch)
    name = compiled.metadata.name
    usage = _usage(compiled.asm["cubin"], name)
    ptx = compiled.asm["ptx"]
    smem = next(v[1] for v in ARCHS.values() if v[0] == target.arch)
    return Resources(
        kernel=name,
        arch=arch,
        shared_bytes=int(compiled.metadata.shared),
        registers=usage.get("REG", 0),
        stack_bytes=usage.get("STACK", 0),
        local_bytes=usage.get("LOCAL", 0),
        num_warps=int(compiled.metadata.num_warps),
        max_shared_bytes=smem,
        wgmma="wgmma.mma_async" in ptx,
        mma="wgmma.mma_async" in ptx or "mma.sync" in ptx,
    )


def ptxas_notes(compiled, arch: str = "sm_90") -> list[str]:
    """ptxas's performance warnings for a kernel compiled for ``arch`` (:func:`compile_for`): its PTX assembled again
    with ``-v`` by the ptxas Triton used, the "Potential Performance Loss" lines (wgmma serialized, and why: C7510
    to C7520), ``[code] reason`` each. Triton keeps ptxas's log to itself; a serialized wgmma pipeline is otherwise
    visible only as one wait after each GMMA in the SASS (:func:`sass_counts`)."""
    target = parse_arch(arch)
    meta = compiled.metadata
    # the options Triton's own ptxas run took (a cached kernel's log is gone: assembling again is the way to it)
    fmad = [] if getattr(meta, "enable_fp_fusion", True) else ["--fmad=false"]
    extra = (getattr(meta, "ptx_options", None) or "").split()
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "k.ptx")
        with open(src, "w") as f:
            f.write(compiled.asm["ptx"])
        gpu = f"sm_{target.arch}{'a' if target.arch >= 90 else ''}"
        out = subprocess.run(
            [_compat.ptxas_path(target.arch), *fmad, "-v", *extra, f"--gpu-name={gpu}", src, "-o", f"{d}/k.cubin"],
            capture_output=True,
            text=True,
            check=True,
        )
    notes = []
    for line in (out.stdout + out.stderr).splitlines():
        m = re.search(r"\((C75\d\d)\) Potential Performance Loss: (.*?)(?: (?:in|for) (?:the )?function '.*)?$", line)
        if m:
            notes.append(f"[{m.group(1)}] {' '.join(m.group(2).split())}")
    return notes


@dataclasses.dataclass(frozen=True)
class Launch:
    """One recorded ``kernel[grid](*args, **kwargs)`` (kwargs: constexprs and launch options)."""

    kernel: object
    args: tuple
    kwargs: dict

    @property
    def name(self) -> str:
        return self.kernel.fn.__name__

    def options(self) -> dict:
        """The constexprs and launch options, for a report."""
        return {k: v for k, v in self.kwargs.items() if k.isupper() or k.startswith("num_")}


@contextlib.contextmanager
def _recording(into: list):
    from .._triton_compat import JITFunction

    run = JITFunction.run

    def record(self, *args, grid, warmup, **kwargs):
        into.append(Launch(self, args, kwargs))

    JITFunction.run = record
    try:
        yield
    finally:
        JITFunction.run = run


def record_launches(fn: Callable[[], object], arch: str = "sm_90") -> list[Launch]:
    """Run ``fn()`` (it launches kernels on ``device="meta"`` tensors) with launches recorded, never run, as a GPU
    of ``arch`` would see them (capability-dependent choices included): the distinct ones, in order."""
    launches: list[Launch] = []
    with interpreter_off(), stub_driver(parse_arch(arch)), _recording(launches):
        fn()
    out, seen = [], set()
    for ln in launches:
        key = (id(ln.kernel), repr(ln.options()), tuple(_arg_key(a) for a in ln.args))
        if key not in seen:
            seen.add(key)
            out.append(ln)
    return out


def _arg_key(a) -> object:
    """What of an argument can change a compile: a tensor's dtype (and 16-byte alignment, equal on meta), an
    integer's specialization class (1, divisible by 16, other)."""
    if hasattr(a, "dtype") and hasattr(a, "data_ptr"):
        return str(a.dtype)
    if isinstance(a, bool) or not isinstance(a, int):
        return repr(a)
    return "1" if a == 1 else "d16" if a % 16 == 0 else "int"


_SASS_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?);")


def _loops(ins: list[tuple[int, str]]) -> list[tuple[int, int]]:
    """(head, back edge) address ranges of the SASS's loops: backward branches, except those that only look like
    one. Out of line after the last EXIT sit the retry stubs of mbarrier waits (try-wait, branch to itself, branch
    back to after the wait), and a warp-specialized kernel's worker warps enter their partition through a dispatch
    loop whose head gives registers back (USETMAXREG); each runs once per wait or per program, not per iteration."""
    exits = [addr for addr, text in ins if re.search(r"\bEXIT\b", text)]
    last_exit = exits[-1] if exits else float("inf")
    at = {addr: i for i, (addr, _) in enumerate(ins)}
    loops = []
    for addr, text in ins:
        m = re.search(r"\bBRA\s+0x([0-9a-f]+)", text)
        if not m or (head := int(m.group(1), 16)) >= addr or addr > last_exit:
            continue
        after = ins[at[head] : at[head] + 3] if head in at else []
        if any("USETMAXREG" in t for _, t in after):
            continue
        loops.append((head, addr))
    return loops


def _innermost(loops: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The loops that hold no other loop (a KV loop inside a persistent kernel's tile loop)."""
    return [(lo, hi) for lo, hi in loops if not any(lo <= a and b <= hi and (a, b) != (lo, hi) for a, b in loops)]


def sass_counts(cubin: bytes) -> tuple[dict[str, int], str]:
    """Counts read off the SASS, and the SASS text: local-memory stores and loads (STL, LDL: spills and stack
    arrays) over the whole kernel, inside its loops (between a backward branch and its target: where a spill
    costs every iteration) and inside its innermost loops (``inner_``: those holding no other loop); Hopper
    warpgroup MMAs (``GMMA``: HGMMA for 16-bit operands, QGMMA for fp8, IGMMA for int8) and the waits for all of
    them to finish (``WARPGROUP.DEPBAR.LE gsb0, 0x0``): one wait per GMMA means no MMA overlaps the next
    instruction that needs its registers."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        sass = subprocess.run([_cuobjdump(), "-sass", f.name], capture_output=True, text=True, check=True).stdout
    ins = [(int(a, 16), text) for a, text in _SASS_LINE.findall(sass)]
    loops = _loops(ins)
    inner = _innermost(loops)

    def count(op: str, within: list | None) -> int:
        return sum(
            1
            for addr, text in ins
            if re.search(rf"\b{op}(\.|\b)", text) and (within is None or any(lo <= addr <= hi for lo, hi in within))
        )

    waits = sum(1 for _, text in ins if re.search(r"WARPGROUP\.DEPBAR\.LE\s+gsb0,\s*0x0\b", text))
    return {
        "STL": count("STL", None),
        "LDL": count("LDL", None),
        "loop_STL": count("STL", loops),
        "loop_LDL": count("LDL", loops),
        "inner_STL": count("STL", inner),
        "inner_LDL": count("LDL", inner),
        "GMMA": count("[HQI]GMMA", None),
        "wait_all": waits,
    }, sass


def _op_call(op: str, model: str, num_tokens: int, series: str | None, shape_kv: dict, dtype) -> Callable[[], object]:
    from ..models import get_model
    from ..ops import get_spec
    from ..testing import MetaFill

    spec = get_spec(op)
    points = spec.series_at(get_model(model), num_tokens)
    if not points:
        raise ValueError(f"{op} has no point on {model} at num_tokens={num_tokens}")
    name = series if series is not None else next(iter(points))
    if name not in points:
        raise ValueError(
            f"{op} has no series {name!r} at num_tokens={num_tokens}; it has: {', '.join(map(repr, points))}"
        )
    shape = points[name].replace(**shape_kv)
    return lambda: spec.call(spec.make_inputs(shape, dtype, MetaFill()))


def _parse_kv(text: str) -> dict:
    """``"head_dim=64,quant=fp8_block128"`` -> ``{"head_dim": 64, "quant": "fp8_block128"}`` (ints, else strings)."""
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        k, eq, v = part.partition("=")
        if not eq or not k.strip():
            raise ValueError(f"--shape: expected key=value, got {part!r}")
        v = v.strip()
        out[k.strip()] = int(v) if v.lstrip("-").isdigit() else v
    return out


def _sass_paths(folder: str, names: list[str]) -> list[Path]:
    """Where each launch's SASS goes: ``<name>.sass`` for a kernel's first launch, ``<name>.<k>.sass`` for its k-th
    (an op may launch one kernel twice, e.g. plain quantization by a dynamic per-tensor scale)."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        k = seen[name] = seen.get(name, 0) + 1
        out.append(Path(folder) / (f"{name}.sass" if k == 1 else f"{name}.{k}.sass"))
    return out


def main(argv: list[str] | None = None) -> int:
    import torch

    p = argparse.ArgumentParser(
        prog="python3 -m tritonkit.check.resources",
        description="Shared memory, registers and spills of a built-in op's launches, "
        "compiled for a GPU target on this CPU.",
    )
    p.add_argument("op")
    p.add_argument("--model", default="llama3-8b")
    p.add_argument("--num-tokens", type=int, default=16)
    p.add_argument("--series", help="the op's sweep series (default: its first)")
    p.add_argument("--shape", default="", metavar="k=v,...", help="shape keys replaced on the point")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--arch", default="sm_90")
    p.add_argument(
        "--sass",
        metavar="DIR",
        help="write each launch's SASS there (<kernel>.sass, <kernel>.2.sass for its second launch, ...; a file "
        "already there is an error, never replaced) and count its spill instructions",
    )
    p.add_argument("--json", action="store_true", help="one JSON object per launch instead of the table")
    args = p.parse_args(argv)
    try:
        dtype = getattr(torch, args.dtype)
        launches = record_launches(
            _op_call(args.op, args.model, args.num_tokens, args.series, _parse_kv(args.shape), dtype), args.arch
        )
    except (ValueError, AttributeError) as e:
        print(f"resources: {e}", file=sys.stderr)
        return 2
    sass_paths = _sass_paths(args.sass, [ln.name for ln in launches]) if args.sass else []
    if args.sass:
        taken = [str(q) for q in sass_paths if os.path.lexists(q)]
        if taken:
            print(f"resources: --sass {args.sass}: {taken[0]} is already there (nothing replaced): name another "
                  f"folder", file=sys.stderr)  # fmt: skip
            return 2
        try:
            Path(args.sass).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            print(f"resources: --sass {args.sass}: cannot make the folder: {e.strerror or e}", file=sys.stderr)
            return 2
    for i, ln in enumerate(launches):
        compiled = compile_for(ln.kernel, *ln.args, arch=args.arch, **ln.kwargs)
        r = resources_of(compiled, args.arch)
        row = {"kernel": ln.name, **dataclasses.asdict(r), "options": ln.options()}
        if args.sass:
            counts, sass = sass_counts(compiled.asm["cubin"])
            with open(sass_paths[i], "x") as fh:  # "x": a file that appeared since the check is not replaced either
                fh.write(sass)
            row.update(counts)
        if r.wgmma:
            row["ptxas"] = ptxas_notes(compiled, args.arch)
        if args.json:
            print(json.dumps(row))
        else:
            extra = (
                (
                    f", STL {row['STL']} LDL {row['LDL']} (in loops {row['loop_STL']} / {row['loop_LDL']}), "
                    f"GMMA {row['GMMA']} waited on by {row['wait_all']} wait-alls"
                )
                if args.sass
                else ""
            )
            if row.get("ptxas"):
                extra += ", ptxas: " + "; ".join(row["ptxas"])
            # the numbers on the kernel's line, its options wrapped below (a launch's constexprs run to 300+ columns)
            print(
                textwrap.fill(
                    f"{ln.name}: shared {r.shared_bytes / 1024:.1f} KB of {r.max_shared_bytes / 1024:.0f}, "
                    f"{r.registers} regs x {r.num_warps} warps, stack {r.stack_bytes} B, local {r.local_bytes} B, "
                    f"{'wgmma' if r.wgmma else 'mma.sync' if r.mma else 'no MMA'}{extra}",
                    120,
                    subsequent_indent="    ",
                    break_on_hyphens=False,
                )
            )
            opts = ", ".join(f"{k}={v}" for k, v in ln.options().items())
            print(textwrap.fill(opts, 120, initial_indent="    ", subsequent_indent="    ", break_on_hyphens=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
