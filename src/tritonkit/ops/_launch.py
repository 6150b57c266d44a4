"""Eager launches that skip ``JITFunction.run`` once a specialization has been launched.

``kernel[grid](*args, **constexprs)`` costs tens of µs of host time per call in Triton 3.6: the binder, one
``native_specialize_impl`` per argument, the cache-key string, launch metadata. :func:`launch` sends the first call
for a key through that path and keeps the ``CompiledKernel`` it returns; later calls with the same key call that
kernel's launcher exactly as ``JITFunction.run`` would (grid, current stream, function, packed metadata, no launch
metadata or hooks, every bound argument constexprs included). Triton (3.6 to 3.9) hands the launcher its launch-hook
chains and a metadata dict even when no hook is registered; with the chains empty nothing reads them, so None goes
instead. Each release's ``run`` is copied as a :class:`~tritonkit._triton_compat.LaunchConvention`, recognised by
its source: a Triton whose ``run`` is none of them takes the normal path and says so once
(:class:`FastLaunchOffWarning`). Where the launcher is Triton's ``CudaLauncher`` and its ``__call__`` (a
:class:`~tritonkit._triton_compat.LauncherConvention`, also recognised by its source) would only call its C launch
function, as it does for a kernel without scratch memory or GSan, that function is called with exactly those
arguments instead: the Python around it costs 0.5-0.8 µs a launch on a CPU.

The key is everything Triton specializes a launch on, so a kernel compiled for other specializations never runs:

- each non-constexpr argument as ``native_specialize_impl`` reports it with the parameter's own flags (what the
  kernel's binder calls): a tensor's dtype and 16-byte alignment, an int's ==1 / %16 / i32-i64-u64 class (only the
  class where the parameter is in ``do_not_specialize``), None, float, bool, a host TMA descriptor's dtype, block
  shape and (Gluon's) shared layout (the launcher builds its CUtensorMap from the descriptor each launch, as under
  ``run``);
- each constexpr's type and value (Triton keys on their ``str``: ``True``, ``1`` and ``1.0`` differ);
- num_warps, num_stages, the debug and instrumentation options ``run`` adds (3.9 also fpsan_homomorphic_casts),
  and the current device (Triton keeps one cache per device).

A hit also needs Triton's own cache to still hold that kernel under the key it compiled it for (a cleared
``device_caches`` recompiles, as it would without us) and the kernel's globals unchanged. Everything else takes
the normal path: interpreter kernels (neither a ``JITFunction`` nor Gluon's subclass, whose ``run`` is the same;
a Gluon kernel's trailing ``num_warps`` parameter takes the launch's, as ``run``'s binder binds it), non-CUDA
tensors, argument types not listed above,
a launch hook (a callable in ``knobs.runtime.launch_enter_hook``/``launch_exit_hook``'s chain, or in its place:
profilers), a patched ``JITFunction.run`` (``tritonkit check`` captures launches that way), pre-run hooks, an
``add_stages_inspection_hook`` (3.7 on: ``run`` then keys on a custom pipeline), ``TRITONKIT_FAST_LAUNCH=0`` (read
at import; :func:`set_enabled` switches at run time), and a Triton whose internals are none of the conventions
copied here (checked once: attributes at import, ``JITFunction.run``'s source at the first launch).

An op whose launch arguments are a function of a layout it has already checked can keep what :func:`launch` returns
with ``front=n`` (a :class:`Bound`: the compiled kernel, its grid and every argument after the first ``n``) and
repeat it through :func:`launch_bound` with only those ``n`` leading arguments, skipping the key. The op keys that
memo on everything the trailing arguments and the leading tensors' dtypes depend on, and checks each leading
tensor's 16-byte alignment per call; :func:`launch_bound` re-checks every condition above but the key.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import NamedTuple

import torch
from triton import knobs
from triton.language.core import constexpr as _constexpr

from . import _memo
from .. import _triton_compat as _compat
from . import _device

ENV_VAR = "TRITONKIT_FAST_LAUNCH"

#: every op kernel is compiled with FMA contraction, explicitly: the kernels are tuned and validated with it (Triton's
#: default through 3.9), and Triton 3.10 turns the default off (3.9 warns that it will). Passing it keeps the numerics
#: of every release the same; TRITON_FORCE_DISABLE_FP_FUSION=1 still turns it off, at compile time.
FP_FUSION = True

_MISSING = object()
_TENSOR_TYPES = frozenset((torch.Tensor, torch.nn.Parameter))
# what native_specialize_impl handles besides tensors; anything else takes the normal path
_SCALAR_TYPES = frozenset((int, float, bool, type(None)))
_CONSTEXPR_TYPES = frozenset((int, bool, str, type(None)))
_IMMUTABLE = (int, float, bool, str, bytes, type(None))
# tensors the fast path accepts: a test swaps it to "is_cpu" to drive the path without a GPU
_DEVICE_TENSOR = "is_cuda"


def _env_enabled() -> bool:
    return os.environ.get(ENV_VAR, "1").strip() != "0"


_enabled = _env_enabled()


def set_enabled(flag: bool) -> None:
    """Turn the fast path on or off for this process (the benchmark compares both)."""
    global _enabled
    _enabled = bool(flag)


_T = _compat.launch_internals()


class FastLaunchOffWarning(UserWarning):
    """This Triton launches in a way the fast path does not know: every eager launch takes ``JITFunction.run``."""


@_memo.memoized(maxsize=None)
def _convention() -> _compat.LaunchConvention | None:
    """How ``JITFunction.run`` launches on this Triton, where :func:`launch` knows it (read once, at the first
    launch); else None, said once as a :class:`FastLaunchOffWarning`."""
    conv = _compat.launch_convention(_T)
    if conv is None and _enabled:
        warnings.warn(
            f"tritonkit: Triton {_compat.VERSION} launches kernels in a way tritonkit's fast launch path does not know "
            f"(it knows Triton {_compat.KNOWN_LAUNCH_RELEASES}): every eager op call takes Triton's own launch path, "
            f"correct but tens of µs slower on the host. A tritonkit release that supports this Triton restores it; "
            f"{ENV_VAR}=0 turns the path off and this warning with it.",
            FastLaunchOffWarning,
            stacklevel=4,
        )
    return conv


def available() -> tuple[bool, str]:
    """Whether the fast path can run in this process, and why not."""
    if not _enabled:
        return False, f"disabled ({ENV_VAR}=0 or set_enabled(False))"
    if _T is None:
        return False, f"Triton {_compat.VERSION} lacks the internals it uses"
    conv = _convention()
    if conv is None:
        return False, (
            f"Triton {_compat.VERSION}'s JITFunction.run is not one it knows (Triton {_compat.KNOWN_LAUNCH_RELEASES})"
        )
    return True, f"on (Triton {_compat.VERSION}, the {conv.releases} launch convention)"


class _Entry:
    """One compiled kernel the fast path launches, and what must still hold for Triton to launch it too."""

    __slots__ = ("kernel_cache", "triton_key", "compiled", "run", "function", "packed_metadata", "direct", "globals")

    def __init__(self, kernel_cache: dict, triton_key: str, compiled, used_global_vals: dict):
        self.kernel_cache = kernel_cache
        self.triton_key = triton_key
        self.compiled = compiled
        self.run = compiled.run
        self.function = compiled.function
        self.packed_metadata = compiled.packed_metadata
        # the launcher's C launch function and its arguments, where its __call__ would make that one call (else None)
        self.direct = _compat.direct_launch(self.run, self.packed_metadata)
        # (globals dict, name, object seen now, value Triton compiled with, whether identity is enough)
        self.globals = []
        for (name, _), (val, globals_dict) in used_global_vals.items():
            obj = globals_dict.get(name, _MISSING)
            inner = val.value if isinstance(val, _constexpr) else val
            self.globals.append((globals_dict, name, obj, val, isinstance(inner, _IMMUTABLE)))

    def launchable(self, kernel_cache: dict) -> bool:
        if kernel_cache is not self.kernel_cache or kernel_cache.get(self.triton_key) is not self.compiled:
            return False
        # JITFunction.run raises when a global the kernel read has changed: let it
        for globals_dict, name, obj, val, immutable in self.globals:
            cur = globals_dict.get(name, _MISSING)
            if cur is not obj or (not immutable and cur != val):
                return False
        return True


class _FastKernel:
    """What the fast path needs of one ``JITFunction``: its parameters, and the kernels launched per key."""

    def __init__(self, jit, conv: _compat.LaunchConvention):
        self.jit = jit
        self.conv = conv
        self.names = tuple(p.name for p in jit.params)
        # per parameter: constexpr, then the flags the binder hands native_specialize_impl
        self.params = tuple(
            (p.is_constexpr, p.is_const, not p.do_not_specialize, not p.do_not_specialize_on_alignment)
            for p in jit.params
        )
        self.entries: dict[tuple, _Entry] = {}

    def bind(self, args: tuple, constexprs: dict, num_warps: int | None = None) -> tuple | None:
        """Every argument in parameter order (what ``run`` passes the launcher), or None. A kernel whose last
        parameter is ``num_warps`` (a Gluon kernel's) gets the launch's: ``run``'s binder binds the option to it."""
        if len(args) + len(constexprs) != len(self.names):
            if (
                num_warps is None
                or len(args) + len(constexprs) + 1 != len(self.names)
                or self.names[-1] != "num_warps"
                or "num_warps" in constexprs
            ):
                return None  # defaults, missing or extra arguments: the normal path binds (or raises)
            constexprs = {**constexprs, "num_warps": num_warps}
        tail = self.names[len(args) :]
        if tuple(constexprs) == tail:
            return (*args, *constexprs.values())
        try:
            return (*args, *(constexprs[n] for n in tail))
        except KeyError:
            return None

    def key(self, full: tuple, backend, options: tuple, device_attr: str | None = "is_cuda") -> tuple | None:
        """The specialization key of a bound argument list, or None for an argument the fast path does not take
        (with ``device_attr``, a tensor for which that attribute is false)."""
        specialize = _T.specialize
        key = list(options)
        for a, (constexpr, is_const, spec, align) in zip(full, self.params):
            t = type(a)
            if constexpr:
                if t is float:
                    key.append((t, repr(a)))  # -0.0 == 0.0, but Triton keys on the text
                elif t in _CONSTEXPR_TYPES:
                    key.append((t, a))
                else:
                    return None
            elif t in _SCALAR_TYPES:
                key.append(specialize(backend, a, is_const, spec, align))
            elif t in _TENSOR_TYPES and (device_attr is None or getattr(a, device_attr)):
                key.append(specialize(backend, a, is_const, spec, align))
            elif _descriptor_class(t) and (device_attr is None or getattr(a.base, device_attr, False) is True):
                # a host TMA descriptor: Triton keys it on its dtype, block shape and layout (its base, shape and
                # strides go to the launcher, which builds the CUtensorMap each launch)
                key.append(specialize(backend, a, is_const, spec, align))
            else:
                return None
        return tuple(key)

    def remember(self, key: tuple, compiled, kernel_cache: dict) -> None:
        if not isinstance(compiled, _T.CompiledKernel) or compiled.metadata.target.backend != "cuda":
            return
        triton_key = next((k for k, v in kernel_cache.items() if v is compiled), None)
        if triton_key is not None:
            self.entries[key] = _Entry(kernel_cache, triton_key, compiled, self.jit.used_global_vals)


_STATES: dict[int, _FastKernel] = {}
# per class, whether the fast path takes a kernel of it (``_compat.runs_as_jit_function``) or an argument of it as a
# host TMA descriptor (``_compat.is_host_descriptor``): decided once a class
_KERNEL_CLASSES: dict[type, bool] = {}
_DESCRIPTOR_CLASSES: dict[type, bool] = {}


def _jit_kernel(kernel) -> bool:
    t = type(kernel)
    took = _KERNEL_CLASSES.get(t)
    if took is None:
        took = _KERNEL_CLASSES[t] = _compat.runs_as_jit_function(t)
    return took


def _descriptor_class(t: type) -> bool:
    took = _DESCRIPTOR_CLASSES.get(t)
    if took is None:
        took = _DESCRIPTOR_CLASSES[t] = _compat.is_host_descriptor(t)
    return took


def _hook_set(hook) -> bool:
    """Whether a launch hook would run: anything but None or an empty ``HookChain`` (Triton's default)."""
    return hook is not None and (type(hook) is not _T.HookChain or bool(hook.calls))


def _state(kernel) -> _FastKernel | None:
    state = _STATES.get(id(kernel))
    if state is not None and state.jit is kernel:
        return state
    conv = _convention()
    if conv is None:
        return None
    state = _STATES[id(kernel)] = _FastKernel(kernel, conv)
    return state


def _compilation_extras(conv: _compat.LaunchConvention) -> tuple:
    """The ``knobs.compilation`` values this Triton's ``run`` adds to the options it keys on (3.9: fpsan)."""
    names = conv.compilation_options
    if not names:
        return ()
    comp = knobs.compilation
    if len(names) == 1:  # 3.9: one knob, read without a generator (0.2 µs a launch less on a CPU)
        return (getattr(comp, names[0]),)
    return tuple(getattr(comp, name) for name in names)


def _inspecting(conv: _compat.LaunchConvention) -> bool:
    """Whether ``run`` would add a custom pipeline to the key now (3.7 on: an add_stages inspection hook is set)."""
    return conv.inspection_hook and knobs.runtime.add_stages_inspection_hook is not None


def _options(
    kernel,
    device: int,
    num_warps: int,
    num_stages: int | None,
    launch_pdl: bool,
    extras: tuple = (),
    maxnreg: int | None = None,
) -> tuple:
    """The options JITFunction.run keys on besides the arguments and constexprs: device, warps, stages, pdl, debug,
    instrumentation, the convention's extra compilation knobs, then the register cap."""
    return (
        device,
        num_warps,
        num_stages,
        launch_pdl,
        kernel.debug or knobs.runtime.debug,
        knobs.compilation.instrumentation_mode,
        *extras,
        maxnreg,
    )


def _prepare(
    kernel,
    grid,
    args: tuple,
    constexprs: dict,
    num_warps: int,
    num_stages: int | None,
    launch_pdl: bool = False,
    maxnreg: int | None = None,
):
    """``(state, key, bound args, driver, device, Triton's kernel cache)`` for a launch the fast path may take,
    else None."""
    if _T is None or not _jit_kernel(kernel) or type(grid) is not tuple:
        return None
    rt = knobs.runtime
    if (
        _T.JITFunction.run is not _T.run
        or "run" in kernel.__dict__
        or kernel.pre_run_hooks
        or _hook_set(rt.launch_enter_hook)
        or _hook_set(rt.launch_exit_hook)
        or rt.interpret
    ):
        return None
    state = _state(kernel)
    if state is None:
        return None
    conv = state.conv
    if conv.inspection_hook and _inspecting(conv):
        return None
    full = state.bind(args, constexprs, num_warps)
    if full is None:
        return None
    try:
        drv = _T.driver.active
        dev = drv.get_current_device()
        kernel_cache, backend = _compat.device_cache(kernel, dev)
        options = _options(kernel, dev, num_warps, num_stages, launch_pdl, _compilation_extras(conv), maxnreg)
        key = state.key(full, backend, options, _DEVICE_TENSOR)
    except Exception:  # noqa: BLE001 - no driver, an int past u64, ...: the normal path reports it
        return None
    if key is None:
        return None
    return state, key, full, drv, dev, kernel_cache


class Step(NamedTuple):
    """One launch an op planned: ``kernel[grid](*args, **constexprs)`` with its warps, stages and PDL flag. Where
    ``front`` is set (paged_attention's recorded launches), the leading ``n_front`` arguments are picked from the
    call's tensors by it and ``tail`` holds the rest; otherwise ``tail`` holds every argument."""

    kernel: object
    grid: tuple
    front: Callable | None
    n_front: int
    tail: tuple
    constexprs: dict
    num_warps: int
    num_stages: int | None = None
    pdl: bool = False


def launch(
    kernel,
    grid: tuple,
    args: tuple,
    constexprs: dict,
    num_warps: int,
    num_stages: int | None = None,
    launch_pdl: bool = False,
    front: int | None = None,
    maxnreg: int | None = None,
) -> Bound | None:
    """``kernel[grid](*args, **constexprs, num_warps=num_warps, num_stages=num_stages)``, with the host overhead of
    ``JITFunction.run`` skipped on calls whose specialization was launched before. ``num_stages=None`` passes none
    (Triton's default); ``launch_pdl=True`` adds Triton's option of that name (a programmatic dependent launch,
    sm_90+: the compiled kernel's launcher carries it, so the fast path launches it the same way). With ``front``,
    the :class:`Bound` that repeats this launch with new first ``front`` arguments, where the fast path now holds
    the kernel (else None). ``maxnreg`` caps the registers a thread (Triton's option of that name; None: no cap)."""
    fast = _prepare(kernel, grid, args, constexprs, num_warps, num_stages, launch_pdl, maxnreg) if _enabled else None
    if fast is not None:
        state, key, full, drv, dev, kernel_cache = fast
        entry = state.entries.get(key)
        if entry is not None and entry.launchable(kernel_cache):
            n = len(grid)
            _fire(
                entry,
                grid[0],
                grid[1] if n > 1 else 1,
                grid[2] if n > 2 else 1,
                drv.get_current_stream(dev),
                full,
            )
            return None if front is None else Bound(kernel, entry, grid, full[front:], key, _n_extras(state))
    options = {"num_warps": num_warps, "enable_fp_fusion": FP_FUSION}
    if num_stages is not None:
        options["num_stages"] = num_stages
    if launch_pdl:
        options["launch_pdl"] = True
    if maxnreg is not None:
        options["maxnreg"] = maxnreg
    try:
        compiled = kernel[grid](*args, **constexprs, **options)
    except (RuntimeError, ValueError, TypeError) as e:
        better = _device.explain_launch_error(e)
        if better is None:
            raise
        raise better from e
    if fast is not None:
        state, key, full, _, _, kernel_cache = fast
        state.remember(key, compiled, kernel_cache)
        entry = state.entries.get(key)
        if front is not None and entry is not None and entry.launchable(kernel_cache):
            return Bound(kernel, entry, grid, full[front:], key, _n_extras(state))
    return None


def _fire(e: _Entry, grid_x: int, grid_y: int, grid_z: int, stream, args: tuple) -> None:
    """Launch ``e``'s kernel with every bound argument ``args`` as ``JITFunction.run`` would through its launcher, with
    no launch metadata and no hooks: the launcher's C function called with exactly what the launcher's ``__call__``
    would hand it, where that is all ``__call__`` would do (a release's ``CudaLauncher`` in
    ``_compat.LAUNCHER_CONVENTIONS``, no scratch memory, no GSan; 0.5-0.8 µs a launch less on a CPU), else the
    launcher itself."""
    d = e.direct
    if d is not None and type(e.run).__call__ is d.call:
        if d.args_as_tuple:
            d.launch(grid_x, grid_y, grid_z, stream, e.function, *d.head, args)
        else:
            d.launch(grid_x, grid_y, grid_z, stream, e.function, *d.head, *args)
    else:
        e.run(grid_x, grid_y, grid_z, stream, e.function, e.packed_metadata, None, None, None, *args)


def _n_extras(state: _FastKernel) -> int:
    return len(state.conv.compilation_options)


class Bound:
    """One launch the fast path holds, kept to repeat with other leading arguments: the kernel's launcher, its grid,
    the arguments after the leading ones (constexprs included) and the options its key was taken under."""

    __slots__ = ("kernel", "entry", "grid", "tail", "device", "debug", "instrumentation", "extras")

    def __init__(self, kernel, entry: _Entry, grid: tuple, tail: tuple, key: tuple, n_extras: int):
        n = len(grid)
        self.kernel, self.entry, self.tail = kernel, entry, tail
        self.grid = (grid[0], grid[1] if n > 1 else 1, grid[2] if n > 2 else 1)
        # key starts with _options(): device, warps, stages, pdl, debug, instrumentation, the convention's extras,
        # the register cap
        self.device, self.debug, self.instrumentation = key[0], key[4], key[5]
        self.extras = key[6 : 6 + n_extras]

    def ready(self, device: int, debug: bool, instrumentation, extras: tuple) -> bool:
        """Whether Triton would launch this very kernel now (what _prepare and _Entry.launchable check, key aside),
        given the current device and the runtime's debug, instrumentation and extra knobs (read once a call)."""
        k = self.kernel
        if self.device != device or "run" in k.__dict__ or k.pre_run_hooks:
            return False
        if (k.debug or debug) != self.debug or instrumentation != self.instrumentation or extras != self.extras:
            return False
        kernel_cache = _compat.held_device_cache(k, device)
        return kernel_cache is not None and self.entry.launchable(kernel_cache)


def launch_bound(bounds: tuple, fronts: list) -> bool:
    """Launch each :class:`Bound` with its leading arguments from ``fronts``, in order, on the current stream; or,
    where any of them must take the normal path now (hooks, a patched ``run``, the fast path off, another current
    device, Triton's cache cleared, ...), launch nothing and return False."""
    rt = knobs.runtime
    if (
        not _enabled
        or _T is None
        or _T.JITFunction.run is not _T.run
        or _hook_set(rt.launch_enter_hook)
        or _hook_set(rt.launch_exit_hook)
        or rt.interpret
    ):
        return False
    conv = _convention()  # a Bound exists only where it is known
    if conv is None or (conv.inspection_hook and _inspecting(conv)):
        return False
    try:
        drv = _T.driver.active
        dev = drv.get_current_device()
    except Exception:  # noqa: BLE001 - no driver: the normal path reports it
        return False
    debug, instrumentation = rt.debug, knobs.compilation.instrumentation_mode
    extras = _compilation_extras(conv) if conv.compilation_options else ()
    for b in bounds:
        if not b.ready(dev, debug, instrumentation, extras):
            return False
    stream = drv.get_current_stream(dev)
    for b, front in zip(bounds, fronts):
        _fire(b.entry, *b.grid, stream, (*front, *b.tail))
    return True


def cache_key(
    kernel,
    args: tuple,
    constexprs: dict,
    num_warps: int,
    num_stages: int | None,
    backend,
    device: int = 0,
    launch_pdl: bool = False,
    maxnreg: int | None = None,
) -> tuple | None:
    """The fast path's key for one launch on tensors of any device, for the given backend (no driver needed)."""
    if _T is None or not _jit_kernel(kernel):
        return None
    conv = _convention()
    if conv is None:
        return None
    state = _FastKernel(kernel, conv)
    full = state.bind(args, constexprs, num_warps)
    if full is None:
        return None
    options = _options(kernel, device, num_warps, num_stages, launch_pdl, _compilation_extras(conv), maxnreg)
    return state.key(full, backend, options, None)
