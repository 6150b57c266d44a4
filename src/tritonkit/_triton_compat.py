"""Every Triton internal tritonkit reaches, in one module: a Triton upgrade is a review of this file.

tritonkit is developed against Triton 3.6.0 (:data:`DEVELOPED_AGAINST`). Public Triton (``triton.jit``, ``tl.*``,
``triton.Config``, ``triton.cdiv``, ``knobs.runtime.interpret`` read as a flag) is used directly elsewhere; what
Triton does not promise to keep is reached through here, each piece with the guard that says when a release moved
it. ``tests/test_triton_compat.py`` holds one test per internal; what Triton 3.9.0 changed is in
docs/notes/triton-newest.md.

=================================================  ===============================================================
internal                                            who needs it
=================================================  ===============================================================
``native_specialize_impl``, ``JITFunction.run``'s   ops/_launch.py: the fast launch path copies ``run``'s launch
source, ``CompiledKernel`` launch fields,            convention and keys launches as Triton does
``knobs.HookChain``, ``JITFunction.device_caches``,
``CudaLauncher.__call__``'s source and the
launcher's fields (C ``launch``, scratch sizes, ...)
``device_caches[device][0]`` (compiled kernels)     bench/providers.py: compile counts; check/resources.py
``create_function_from_signature``,                 check/capture/launches.py: binds and specializes a launch as ``run``
``JITFunction._pack_args``, ``get_jit_fn_file_line`` does, then compiles it for the target
``JITFunction.run`` / ``Autotuner.run`` signatures,  check/capture/launches.py, check/resources.py: patched to record
``InterpretedFunction``                              launches instead of running them
``make_backend``, ``ASTSource.make_ir``,            check/capture/target.py: lowers a specialization to TTIR on a CPU
``backend.add_stages``, ``libtriton.ir``
``DriverBase``, ``driver.set_active`` / ``_active``  check/capture/target.py: the stub driver for a GPU-less machine
``knobs.runtime.__dict__["interpret"]``             check/capture/target.py: interpreter off while the checker compiles
the interpreter's patches of ``triton.language``    check/runner.py, check/capture/target.py: a process the
                                                    interpreter ran in compiles wrong: put back from a copy taken
                                                    at import, else the check moves to a fresh process
``backends/nvidia/bin/cuobjdump``                   check/resources.py: registers and spills of a cubin
Gluon's TMA load (``tma.async_load`` from 3.8,      ops/paged_attention/kernel_hopper.py: K/V pages into shared
``async_copy_global_to_shared`` before), its        memory, the consumer warps' barrier
barrier (``gl.barrier`` from 3.7)
=================================================  ===============================================================
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import inspect
import os
import sys
import types
from collections.abc import Iterator
from typing import Any

import triton
from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.backends.driver import DriverBase
from triton.runtime.autotuner import Autotuner
from triton.runtime.driver import driver as _driver_config
from triton.runtime.jit import JITFunction

DEVELOPED_AGAINST = "3.6.0"
VERSION = triton.__version__


def version_key(version: str) -> tuple[int, ...]:
    """A release string as numbers to compare ("3.9.0+git1a2b" -> (3, 9, 0); a part that is not a number is 0)."""
    return tuple(int(p) if p.isdigit() else 0 for p in version.split("+")[0].split("."))


#: the Triton releases tritonkit supports, each with the PyPI torch releases that require it (the README's support
#: matrix; .ci/triton-matrix runs the tests on each, .ci/run on the first and the last)
SUPPORTED = {
    "3.6.0": "2.11",
    "3.7.1": "2.12 (Triton 3.7.0), 2.13",
    "3.8.0": "2.14 (vLLM 0.34.0's)",
    "3.9.0": "2.15",
}

__all__ = [
    "DEVELOPED_AGAINST",
    "SUPPORTED",
    "VERSION",
    "Autotuner",
    "DirectLaunch",
    "DriverBase",
    "GPUTarget",
    "KNOWN_LAUNCH_RELEASES",
    "JITFunction",
    "LaunchConvention",
    "LauncherConvention",
    "active_driver",
    "capture_missing",
    "compiled_kernels",
    "cuobjdump_path",
    "def_site",
    "device_cache",
    "direct_launch",
    "fresh_device_caches",
    "gluon_barrier",
    "gluon_tma_load",
    "interpreted_function_type",
    "interpreter_patched",
    "knob_set",
    "launch_convention",
    "launch_convention_ok",
    "launch_internals",
    "lower_to_ttir",
    "make_backend",
    "make_binder",
    "pack_args",
    "version_key",
]


# -- the fast launch path (ops/_launch.py) --------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class LaunchConvention:
    """How one family of Triton releases launches a cached kernel in ``JITFunction.run``, as far as ops/_launch.py
    must copy it: the releases it was read from, whether ``run`` adds a ``custom_pipeline`` specialization while
    ``knobs.runtime.add_stages_inspection_hook`` is set (3.7 on), and the ``knobs.compilation`` values ``run`` adds
    to the compile options, so to the cache key, beside debug and instrumentation_mode (3.9: fpsan)."""

    releases: str
    inspection_hook: bool
    compilation_options: tuple[str, ...] = ()


#: the launch conventions ops/_launch.py copies, by the sha256 prefixes of the stripped source of
#: ``JITFunction.run`` and ``CompiledKernel.launch_metadata`` (each read from the release's wheel; the launcher
#: ``CompiledKernel.run`` returns takes the same arguments in all of them: grid, stream, function, packed metadata,
#: launch metadata, the two hooks, the bound arguments, pointers as tensors or ints)
LAUNCH_CONVENTIONS = {
    ("b23b098b1d164489", "33ec15102e4d48a6"): LaunchConvention("3.6", inspection_hook=False),
    # 3.7 adds the inspection hook's pipeline field and drops the future-returning compile; 3.8 is unchanged
    ("5c544d0a2be193d8", "33ec15102e4d48a6"): LaunchConvention("3.7, 3.8", inspection_hook=True),
    # 3.9 adds knobs.compilation.fpsan_homomorphic_casts to the options it keys on
    ("40d673d756fa87b1", "33ec15102e4d48a6"): LaunchConvention(
        "3.9", inspection_hook=True, compilation_options=("fpsan_homomorphic_casts",)
    ),
}
#: the releases whose launch convention is in LAUNCH_CONVENTIONS, for messages
KNOWN_LAUNCH_RELEASES = "3.6-3.9"


def launch_internals() -> types.SimpleNamespace | None:
    """The Triton pieces the fast launch path uses, or None when this Triton lacks one of them."""
    try:
        from triton._C.libtriton import native_specialize_impl
        from triton.compiler.compiler import CompiledKernel
        from triton.knobs import HookChain
        from triton.runtime.driver import driver
    except ImportError:
        return None
    run = JITFunction.__dict__.get("run")
    try:
        params = list(inspect.signature(run).parameters)
    except (TypeError, ValueError):
        return None
    if (
        getattr(run, "__qualname__", "") != "JITFunction.run"
        or params != ["self", "args", "grid", "warmup", "kwargs"]
        or not isinstance(CompiledKernel.__dict__.get("run"), property)
        or not callable(CompiledKernel.__dict__.get("launch_metadata"))
        or not all(hasattr(knobs.runtime, k) for k in ("launch_enter_hook", "launch_exit_hook", "debug", "interpret"))
        or not hasattr(knobs.compilation, "instrumentation_mode")
        or not hasattr(HookChain(), "calls")
    ):
        return None
    return types.SimpleNamespace(
        specialize=native_specialize_impl,
        CompiledKernel=CompiledKernel,
        driver=driver,
        JITFunction=JITFunction,
        run=run,
        HookChain=HookChain,
    )


#: the host-side TMA descriptor classes, by module: ``native_specialize_impl`` keys them on their dtype, block shape
#: (and Gluon's, their shared layout), and the launcher turns each into a CUtensorMap
_DESCRIPTOR_CLASSES = (
    ("triton.tools.tensor_descriptor", "TensorDescriptor"),
    ("triton.experimental.gluon.nvidia.hopper", "TensorDescriptor"),
    ("triton.experimental.gluon.nvidia.blackwell", "TensorDescriptor"),
)


def runs_as_jit_function(cls: type) -> bool:
    """Whether kernels of class ``cls`` launch through ``JITFunction.run`` itself: JITFunction, and Gluon's subclass,
    which only compiles through another AST source (3.6-3.9: ``create_binder`` and ``is_gluon`` differ, ``run`` is
    inherited). Read from the loaded modules, importing nothing: a Gluon kernel's class is loaded once one exists."""
    if cls is JITFunction:
        return True
    gluon = getattr(sys.modules.get("triton.experimental.gluon._runtime"), "GluonJITFunction", None)
    return cls is gluon and issubclass(cls, JITFunction) and "run" not in cls.__dict__


def is_host_descriptor(cls: type) -> bool:
    """Whether ``cls`` is one of Triton's host-side TMA descriptor classes (read from the loaded modules)."""
    return any(getattr(sys.modules.get(module), name, None) is cls for module, name in _DESCRIPTOR_CLASSES)


def source_digest(fn) -> str:
    src = "\n".join(line.strip() for line in inspect.getsource(fn).splitlines() if line.strip())
    return hashlib.sha256(src.encode()).hexdigest()[:16]


def launch_convention(internals: types.SimpleNamespace | None) -> LaunchConvention | None:
    """How this Triton's ``JITFunction.run`` launches, where its source is one we read (else None), with the knobs
    that convention reads checked present."""
    if internals is None:
        return None
    try:
        digests = (source_digest(internals.run), source_digest(internals.CompiledKernel.launch_metadata))
    except (OSError, TypeError):
        return None
    conv = LAUNCH_CONVENTIONS.get(digests)
    if conv is None:
        return None
    if conv.inspection_hook and not hasattr(knobs.runtime, "add_stages_inspection_hook"):
        return None
    if not all(hasattr(knobs.compilation, name) for name in conv.compilation_options):
        return None
    return conv


def launch_convention_ok(internals: types.SimpleNamespace | None) -> bool:
    """Whether ``JITFunction.run`` launches in a way ops/_launch.py knows (its source is one we read)."""
    return launch_convention(internals) is not None


def device_cache(jit, device: int) -> tuple[dict, Any]:
    """(compiled kernels by Triton's key, the backend) that ``jit`` keeps for ``device``."""
    caches = jit.device_caches[device]
    return caches[0], caches[3]


def held_device_cache(jit, device: int) -> dict | None:
    """The compiled kernels ``jit`` keeps for ``device``, or None where it keeps none (nothing is created)."""
    caches = jit.device_caches.get(device)
    return None if caches is None else caches[0]


def compiled_kernels(jit) -> int:
    """How many specializations ``jit`` holds compiled, over all devices (0 for an object without a cache)."""
    return sum(len(entry[0]) for entry in list(getattr(jit, "device_caches", {}).values()))


@contextlib.contextmanager
def fresh_device_caches(jit) -> Iterator[None]:
    """Inside the block ``jit`` keeps new per-device caches (so a new target is compiled for); its own come back."""
    saved = jit.device_caches
    jit.device_caches = type(saved)(saved.default_factory)
    try:
        yield
    finally:
        jit.device_caches = saved


@dataclasses.dataclass(frozen=True)
class LauncherConvention:
    """How one release's CUDA launcher (``CudaLauncher``, what ``CompiledKernel.run`` returns) calls its C launch
    function in ``__call__``, as far as ops/_launch.py calls that function itself: the release it was read from,
    whether the kernel's arguments go as one tuple after the launcher's ``arg_annotations`` and ``kernel_signature``
    (3.7 on: Triton's generic C launcher) or spread after the hooks (3.6: a C launcher built per signature), and the
    launcher's flags under which ``__call__`` does more than that call (3.8 on: GSan)."""

    releases: str
    args_as_tuple: bool
    more_work_flags: tuple[str, ...] = ()


#: the launcher conventions ops/_launch.py copies, by the sha256 prefix of the stripped source of
#: ``CudaLauncher.__call__`` (read from each release's wheel). Every one of them, for a kernel without scratch memory
#: and with the flags off, makes exactly one call: ``self.launch(gridX, gridY, gridZ, stream, function,
#: launch_cooperative_grid, launch_pdl, ...)`` with the scratch buffers None and the rest of its arguments passed on
LAUNCHER_CONVENTIONS = {
    "fdaa2b81f7f24ae9": LauncherConvention("3.6", args_as_tuple=False),
    "69884760f761be99": LauncherConvention("3.7", args_as_tuple=True),
    # 3.8 adds GSan (more kernel arguments, a stream sync) and a default profile-scratch allocator
    "82f60fc62f390c57": LauncherConvention("3.8", args_as_tuple=True, more_work_flags=("gsan_enabled",)),
    "79bae830e3d12742": LauncherConvention("3.9", args_as_tuple=True, more_work_flags=("gsan_enabled",)),
}


@dataclasses.dataclass(frozen=True)
class DirectLaunch:
    """One launcher's C launch function and what its ``__call__`` passes it besides grid, stream, function and the
    kernel's arguments: ``launch(gridX, gridY, gridZ, stream, function, *head, args)`` where ``args_as_tuple``, else
    ``launch(gridX, gridY, gridZ, stream, function, *head, *args)``. ``call`` is the ``__call__`` this was read from:
    once the launcher's class holds another, the launcher must be called."""

    call: Any
    launch: Any
    head: tuple
    args_as_tuple: bool


@functools.lru_cache(maxsize=8)
def _launcher_call_digest(call) -> str | None:
    try:
        return source_digest(call)
    except (OSError, TypeError):
        return None


def direct_launch(launcher, packed_metadata) -> DirectLaunch | None:
    """What ``launcher(gridX, gridY, gridZ, stream, function, packed_metadata, None, None, None, *args)`` (no launch
    metadata, no hooks: what ops/_launch.py passes) does, as one call of its C launch function; None where the launcher
    is not Triton's ``CudaLauncher`` of a release in LAUNCHER_CONVENTIONS, or where its ``__call__`` would do more for
    this kernel: allocate global or profile scratch memory (a size other than 0), or a flag of the convention is on."""
    module = sys.modules.get("triton.backends.nvidia.driver")
    cls = getattr(module, "CudaLauncher", None)
    if cls is None or type(launcher) is not cls:
        return None
    call = cls.__dict__.get("__call__")
    conv = LAUNCHER_CONVENTIONS.get(_launcher_call_digest(call)) if call is not None else None
    if conv is None:
        return None
    try:
        sizes = (launcher.global_scratch_size, launcher.profile_scratch_size)
        if any(type(n) is not int or n != 0 for n in sizes):
            return None
        if any(getattr(launcher, flag, True) for flag in conv.more_work_flags):
            return None
        grid_flags = (launcher.launch_cooperative_grid, launcher.launch_pdl)
        if conv.args_as_tuple:
            # kernel metadata, launch metadata, the two hooks, the two scratch buffers, the argument layout
            layout = (launcher.arg_annotations, launcher.kernel_signature)
            head = (*grid_flags, packed_metadata, None, None, None, None, None, *layout)
        else:
            # the two scratch buffers, then what __call__ was handed: kernel metadata, launch metadata, the hooks
            head = (*grid_flags, None, None, packed_metadata, None, None, None)
        launch = launcher.launch
    except AttributeError:
        return None
    return DirectLaunch(call, launch, head, conv.args_as_tuple)


# -- launch capture (check/capture/launches.py) ---------------------------------------------------------------------
def capture_missing() -> str | None:
    """What this Triton lacks of the launch internals the checker uses (None: nothing)."""
    try:
        from triton.runtime.jit import create_function_from_signature  # noqa: F401
    except ImportError:
        return "runtime.jit.create_function_from_signature"
    if not hasattr(JITFunction, "_pack_args"):
        return "JITFunction._pack_args"
    return None


def make_binder(jit, backend):
    """Triton's binder of ``jit``'s arguments: ``binder(*args, **kwargs) -> (bound args, specialization, options)``."""
    from triton.runtime.jit import create_function_from_signature

    return create_function_from_signature(jit.signature, jit.params, backend)


def pack_args(jit, backend, kwargs: dict, bound: dict, spec, options):
    """``(options, signature, constexprs, attrs)`` of a bound launch, as ``JITFunction.run`` computes them."""
    return jit._pack_args(backend, kwargs, bound, spec, options)


def def_site(jit) -> tuple[str, int]:
    """(file, line of its ``def``, past any decorators) where a jit function is defined."""
    try:
        from triton.runtime.jit import get_jit_fn_file_line  # through 3.6; 3.9 removed it

        return get_jit_fn_file_line(jit)
    except Exception:  # noqa: BLE001 - a moved helper: read the source as it did
        pass
    fn = getattr(jit, "fn", None)
    code = getattr(fn, "__code__", None)
    if code is None:
        return "<unknown>", 0
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return code.co_filename, code.co_firstlineno
    # co_firstlineno is the first decorator's line; the finding belongs on the def
    skip = next((i for i, line in enumerate(lines) if line.lstrip().startswith(("def ", "async def "))), 0)
    return code.co_filename, first + skip


def interpreter_patched() -> bool:
    """Whether Triton's interpreter has run in this process and left ``triton.language`` patched: its
    device-function calls swap ``tensor.__add__``, ``dtype.to_ir``, ``tl.range`` and ``tl.reduce`` for its own and do
    not restore them."""
    if "triton.runtime.interpreter" not in sys.modules:
        return False
    import triton.language as tl

    probes = (
        vars(tl.core.tensor).get("__add__"),
        vars(tl.core.dtype).get("to_ir"),
        getattr(tl.core, "range", None),
        getattr(tl, "reduce", None),
    )
    return any(getattr(getattr(p, "__code__", None), "co_filename", "").endswith("interpreter.py") for p in probes)


def _language_namespaces() -> tuple:
    import triton.language as tl

    spaces = (tl, tl.core, tl.math, tl.core.tensor, tl.core.dtype, getattr(tl.core, "tensor_descriptor_base", None))
    return tuple(ns for ns in spaces if ns is not None)


def _snapshot_language() -> list | None:
    """``triton.language``'s namespaces as Triton defined them (None where the interpreter has patched them
    already): what :func:`restore_language` puts back."""
    if interpreter_patched():
        return None
    return [(ns, dict(vars(ns))) for ns in _language_namespaces()]


_PRISTINE_LANGUAGE = _snapshot_language()


def restore_language() -> bool:
    """Undo what :func:`interpreter_patched` finds, from the copy of ``triton.language`` taken at this module's
    import; True when nothing is patched any more, False where no clean copy was taken (the interpreter ran a
    device function before tritonkit was imported): then only a fresh process compiles correctly."""
    if not interpreter_patched():
        return True
    if _PRISTINE_LANGUAGE is None:
        return False
    for ns, saved in _PRISTINE_LANGUAGE:
        current = vars(ns)
        for name in [n for n in current if n not in saved and not n.startswith("__")]:
            delattr(ns, name)
        for name, value in saved.items():
            if current.get(name, _ABSENT) is not value and not name.startswith("__dict__"):
                setattr(ns, name, value)
    return not interpreter_patched()


_ABSENT = object()


def interpreted_function_type() -> type | None:
    """The class ``@triton.jit`` makes under ``TRITON_INTERPRET=1`` (None if this Triton has none)."""
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:
        return None
    return InterpretedFunction


# -- compiling for a target on a CPU (check/capture/target.py) ------------------------------------------------------
def make_backend(target: GPUTarget):
    from triton.compiler.compiler import make_backend as make

    return make(target)


def lower_to_ttir(jit, signature, constexprs, attrs, options, target: GPUTarget, backend):
    """(TTIR module, the backend's stages) of one specialization, through Triton's frontend and TTIR passes."""
    from triton._C.libtriton import ir

    src = _source_class(jit)(jit, signature, constexprs, attrs)
    ctx = ir.context()
    ir.load_dialects(ctx)
    backend.load_dialects(ctx)
    codegen_fns = backend.get_codegen_implementation(options)
    module_map = backend.get_module_map()
    # make_ir gained a target argument in Triton 3.3; accept both
    if "target" in inspect.signature(src.make_ir).parameters:
        mod = src.make_ir(target, options, codegen_fns, module_map, ctx)
    else:
        mod = src.make_ir(options, codegen_fns, module_map, ctx)
    stages: dict[str, Any] = {}
    try:
        backend.add_stages(stages, options, src.language)
    except TypeError:
        backend.add_stages(stages, options)
    if "ttir" not in stages:
        # a Gluon kernel: its frontend IR is already at the TTGIR level (layouts, warp specialization) and has no
        # TTIR stage. Inlined and simplified as Gluon's own first passes do, the rules read its ops as they read a
        # TTIR module's
        return _gluon_inlined(mod), stages
    return stages["ttir"](mod, {}), stages


def ttir_to_ttgir(ttir: str, options, target: GPUTarget) -> str:
    """The TTGIR text Triton's passes for ``target`` make of the TTIR text ``ttir`` under launch ``options`` (as the
    GPU host would run them): the layouts every load and store gets. Raises what Triton raises."""
    import tempfile

    import triton.backends.compiler as bc
    from triton._C.libtriton import ir

    backend = make_backend(target)
    ctx = ir.context()
    ir.load_dialects(ctx)
    backend.load_dialects(ctx)
    with tempfile.TemporaryDirectory(prefix="tritonkit-") as d:
        path = os.path.join(d, "unit.ttir")
        with open(path, "w") as fh:
            fh.write(ttir)
        mod = ir.parse_mlir_module(path, ctx)
    mod.context = ctx
    stages: dict[str, Any] = {}
    lang = getattr(bc, "Language", None)
    try:
        backend.add_stages(stages, options, lang.TRITON if lang is not None else None)
    except TypeError:
        backend.add_stages(stages, options)
    out = stages["ttgir"](mod, {})
    return (out if out is not None else mod).str()


def _gluon_inlined(mod):
    """Gluon's own first passes (3.6-3.9 alike): its calls inlined, canonicalized, common subexpressions merged."""
    from triton._C.libtriton import ir, passes

    pm = ir.pass_manager(mod.context)
    passes.gluon.add_inliner(pm)
    passes.gluon.add_canonicalizer(pm)
    passes.common.add_cse(pm)
    pm.run(mod, "tritonkit_gluon")
    return mod


def _source_class(jit):
    """Triton's ASTSource, or Gluon's for a ``gluon.jit`` kernel (its IR carries the module's warps and target)."""
    from triton.compiler.compiler import ASTSource

    try:
        from triton.experimental.gluon._runtime import GluonASTSource, GluonJITFunction
    except ImportError:
        return ASTSource
    return GluonASTSource if isinstance(jit, GluonJITFunction) else ASTSource


@contextlib.contextmanager
def active_driver(drv) -> Iterator[None]:
    """Make ``drv`` Triton's active driver inside the block (restored on exit, even where building the default
    driver would fail: a machine without a GPU)."""
    prev = getattr(_driver_config, "_active", None)
    _driver_config.set_active(drv)
    try:
        yield
    finally:
        if hasattr(_driver_config, "_active"):
            _driver_config._active = prev
        elif prev is not None:
            _driver_config.set_active(prev)


@contextlib.contextmanager
def knob_set(group, name: str, value) -> Iterator[None]:
    """Override one knob (``knobs.runtime``'s ``interpret``) inside the block, whatever the environment says: a
    value in the group's ``__dict__`` shadows the knob's environment lookup."""
    had, prev = name in group.__dict__, group.__dict__.get(name)
    group.__dict__[name] = value
    try:
        yield
    finally:
        if had:
            group.__dict__[name] = prev
        else:
            group.__dict__.pop(name, None)


# -- resources of a compiled kernel (check/resources.py) ------------------------------------------------------------
def cuobjdump_path() -> str:
    """The ``cuobjdump`` Triton's NVIDIA backend ships."""
    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")


def ptxas_path(arch: int) -> str:
    """The ``ptxas`` Triton assembles ``arch`` (90 for sm_90) with: its backend's choice, knobs and environment
    included (3.9 takes its ``ptxas-blackwell`` for sm_90 as well)."""
    from triton.backends.nvidia.compiler import get_ptxas

    return get_ptxas(arch).path


# -- Gluon (ops/paged_attention/kernel_hopper.py) -------------------------------------------------------------------
def gluon_tma_load():
    """Gluon's TMA load (global -> shared, signalled on an mbarrier): ``tma.async_load`` from 3.8, where 3.9 removed
    the ``async_copy_global_to_shared`` of 3.6 and 3.7 (same arguments: descriptor, coordinates, barrier, buffer).
    Imported when asked: importing tritonkit does not import Gluon."""
    from triton.experimental.gluon.language.nvidia.hopper import tma

    return getattr(tma, "async_load", None) or tma.async_copy_global_to_shared


def gluon_async_load():
    """Gluon's cp.async copy (a pointer tensor's elements into shared memory): ``async_copy.async_load`` from 3.8,
    where 3.9 removed the ``async_copy_global_to_shared`` of 3.6 and 3.7 (same arguments: buffer, pointers, mask)."""
    from triton.experimental.gluon.language.nvidia.ampere import async_copy

    return getattr(async_copy, "async_load", None) or async_copy.async_copy_global_to_shared


def gluon_barrier():
    """Gluon's barrier over the warps that run it (a partition's, inside ``warp_specialize``): ``gl.barrier`` from
    3.7, ``gl.thread_barrier`` in 3.6."""
    from triton.experimental.gluon import language as gl

    return getattr(gl, "barrier", None) or gl.thread_barrier
