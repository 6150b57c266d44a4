"""Capture kernel launches instead of running them.

Inside :class:`Capture`, ``JITFunction.run`` (what ``kernel[grid](...)`` and ``kernel.warmup(...)`` call) records
the launch, computes Triton's own specialization of its arguments and compiles that specialization for the target
(cached); nothing runs. ``Autotuner.run`` compiles every config it would benchmark instead of benchmarking;
``Heuristics`` need no help. Kernels defined under ``TRITON_INTERPRET=1`` are recompiled from their Python
source.
"""

from __future__ import annotations

import contextlib
import dataclasses
import operator
import os
import sys
from collections.abc import Iterator
from typing import Any

import triton

from ... import _vocab
from ... import _triton_compat as _compat
from ..._triton_compat import Autotuner, JITFunction
from .case import CaseContext
from ..findings import Problem
from .target import CheckError, Compiled, Compiler, interpreter_off, stub_driver
from .views import View, common_byte, view_of

# with the separator: site-packages/tritonkit/... must not pass for site-packages/triton
_TRITON_DIR = os.path.dirname(triton.__file__) + os.sep
_MISSING = object()
# all of check/, not only this folder: no frame of the checker is the user's launch site
_CHECK_DIR = os.path.dirname(os.path.dirname(__file__)) + os.sep


@dataclasses.dataclass(eq=False)
class KernelInfo:
    jit: Any
    name: str
    file: str
    line: int
    launches: list[Launch] = dataclasses.field(default_factory=list)
    units: dict[str, Unit] = dataclasses.field(default_factory=dict)
    #: parameters that received a tensor (or None) in some launch: what a ``loaded_bounds`` key may name
    ptr_params: set[str] = dataclasses.field(default_factory=set)

    def max_grid(self) -> list[int]:
        g = [0, 0, 0]
        for ln in self.launches:
            if ln.grid:
                g = [max(a, b) for a, b in zip(g, ln.grid)]
        return g


@dataclasses.dataclass(eq=False)
class Unit:
    """One compiled specialization of a kernel and the launches that use it."""

    kernel: KernelInfo
    key: str
    spec: tuple
    options: Any
    ir_params: list[str]  # parameter names in the order of the IR function's arguments
    compiled: Compiled
    launches: list[Launch] = dataclasses.field(default_factory=list)
    autotune: tuple[int, int] | None = None  # (autotuner id, config index)
    _func: Any = None
    _parse_error: str | None = None

    def parsed(self):
        """:meth:`func`'s answer when the TTIR has been parsed already (None otherwise: nothing is parsed here)."""
        return self._func

    def func(self):
        """The parsed entry function of the TTIR (None if it did not compile or parse)."""
        if self._func is None and self._parse_error is None and self.compiled.ttir:
            # units that share their TTIR (autotune configs differing in num_warps alone) share its parse
            shared = self.compiled.parsed
            if shared is None:
                from ..ir.mlir import ParseError, parse_module

                try:
                    mod = parse_module(self.compiled.ttir)
                    shared = ((mod.entry_func(), mod), None)
                except ParseError as e:
                    shared = (None, str(e))
                except Exception as e:  # noqa: BLE001 - an IR form the reader does not know: reported by name
                    shared = (None, f"{type(e).__name__}: {e}")
                self.compiled.parsed = shared
            self._func, self._parse_error = shared
        return self._func


@dataclasses.dataclass(eq=False, kw_only=True)
class Launch:
    kernel: KernelInfo
    unit: Unit | None
    grid: tuple[int, int, int] | None
    int_args: dict[str, int]
    spec: tuple
    context: CaseContext
    constexprs: dict[str, Any]  # the launch's constexpr values, by parameter name
    #: elements of the allocation behind each tensor argument (its storage, in the tensor's element size)
    extents: dict[str, int]
    site: tuple[str, int] | None
    #: the outermost user frame of the launch (the line of the case, or of the code a case or op called, that led to
    #: it): launches a run makes from different lines of the case are different uses of the kernel
    case_site: tuple[str, int] | None
    #: argument pairs (sorted) whose views share bytes: (view of the first, view of the second, a shared byte)
    aliases: dict[tuple[str, str], tuple[View, View, int | bool]]
    autotune: tuple[int, int] | None

    @property
    def case(self) -> dict[str, Any]:
        return self.context.case

    @property
    def sweep_group(self) -> str:
        return self.context.sweep_group

    @property
    def sweep_keys(self) -> tuple[str, ...]:
        return self.context.sweep_keys

    @property
    def sweep_inferred(self) -> bool:
        return self.context.sweep_inferred

    @property
    def loaded_bounds(self) -> dict[str, tuple[int, int]]:
        return self.context.loaded_bounds

    @property
    def nondecreasing(self) -> dict[str, int | None]:
        return self.context.nondecreasing


def _magnitude(ln: Launch) -> int:
    """How far a launch reaches: its largest grid, integer argument or allocation (where offsets grow)."""
    g = ln.grid or (1, 1, 1)
    return max([g[0] * g[1] * g[2], *(abs(v) for v in ln.int_args.values()), *ln.extents.values()])


@dataclasses.dataclass
class Distinct:
    """The launches a rule analyses one by one: the first ``first`` in case order, then the largest of the rest;
    ``total`` distinct ones in all."""

    launches: list[Launch]
    first: int
    total: int

    def __iter__(self):
        return iter(self.launches)

    @property
    def left_out(self) -> int:
        return self.total - len(self.launches)

    def unchecked(self, rule: str, what: str) -> str:
        """The problem to report when ``what`` stays unconfirmed while launches were left out."""
        return (
            f"{rule} could not decide: {what} is possible in the union of this kernel's launches, but none of the "
            f"{len(self.launches)} launches analysed (the first {self.first} of {self.total} distinct ones in "
            f"case order, then the largest of the rest) shows it, and {self.left_out} were not analysed: "
            f"split the case or narrow its sweep"
        )


def distinct(launches: list[Launch], extra=lambda ln: (), limit: int = 512) -> Distinct:
    """The launches that bind different values (grid, integer arguments, loaded bounds, and what ``extra`` adds),
    in case order: what a rule analyses one by one to find the case that shows a finding. Past ``limit``, the
    first ``limit`` and then the ``limit // 8`` largest of the rest (overflows show in the largest; the last case
    of a sweep is often the one)."""
    seen: set = set()
    out = []
    for ln in launches:
        key = (
            ln.grid,
            tuple(sorted(ln.int_args.items())),
            tuple(sorted(ln.loaded_bounds.items())),
            tuple(sorted(ln.nondecreasing.items())),
            extra(ln),
        )
        if key not in seen:
            seen.add(key)
            out.append(ln)
    if len(out) <= limit:
        return Distinct(out, len(out), len(out))
    rest = sorted(out[limit:], key=_magnitude, reverse=True)[: limit // 8]
    return Distinct(out[:limit] + rest, limit, len(out))


@dataclasses.dataclass(eq=False)
class AutotuneInfo:
    name: str
    file: str
    line: int
    key_names: list[str]
    n_configs: int
    keys: dict[tuple, int] = dataclasses.field(default_factory=dict)  # autotune key -> configs compiled
    units: list[Unit] = dataclasses.field(default_factory=list)
    #: autotune key -> ids of the launches it made (a refused case's keys go with its launches)
    key_launches: dict[tuple, set[int]] = dataclasses.field(default_factory=dict)


def _base_jit(fn):
    while fn is not None and not isinstance(fn, JITFunction):
        fn = getattr(fn, "fn", None)
    return fn


def _def_site(jit) -> tuple[str, int]:
    return _compat.def_site(jit)


def _user_frame(fn: str) -> bool:
    return not (fn.startswith(_TRITON_DIR) or fn.startswith(_CHECK_DIR) or fn.startswith("<"))


def user_site(depth: int = 2) -> tuple[str, int] | None:
    f = sys._getframe(depth)
    while f is not None:
        fn = f.f_code.co_filename
        if _user_frame(fn):
            return fn, f.f_lineno
        f = f.f_back
    return None


def outer_user_site(depth: int = 2) -> tuple[str, int] | None:
    """The outermost of the user frames nearest the launch: from the innermost user frame outwards, the last one
    before a frame of the checker (the runner that called the case) or the end of the stack."""
    f, last = sys._getframe(depth), None
    while f is not None:
        fn = f.f_code.co_filename
        if _user_frame(fn):
            last = (fn, f.f_lineno)
        elif last is not None and fn.startswith(_CHECK_DIR):
            break
        f = f.f_back
    return last


def _as_int(v) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if hasattr(v, "__index__") and not hasattr(v, "data_ptr"):
        try:
            return int(v.__index__())
        except Exception:  # noqa: BLE001
            return None
    return None


def _aliases(bound: dict[str, Any]) -> dict[tuple[str, str], tuple[View, View, int | bool]]:
    """Pairs of tensor arguments (sorted by name) that share bytes of one storage: their views and a shared byte
    (True when the search for one gave up)."""
    views = [(k, v) for k, t in bound.items() if hasattr(t, "data_ptr") and (v := view_of(t)) is not None]
    out = {}
    for i, (a, va) in enumerate(views):
        for b, vb in views[i + 1 :]:
            if va.storage == vb.storage and (byte := common_byte(va, vb)) is not None:
                (x, vx), (y, vy) = sorted(((a, va), (b, vb)), key=lambda kv: kv[0])
                out[(x, y)] = (vx, vy, byte)
    return out


def _storage_elements(t) -> int | None:
    try:
        return t.untyped_storage().nbytes() // t.element_size()
    except Exception:  # noqa: BLE001 - no storage to read: no bound
        return None


class GridError(Exception):
    """A grid Triton's launcher refuses on a GPU (the checker's own conversion would have let it through)."""


def _grid3(grid, bound) -> tuple[int, int, int] | None:
    """The launch's grid as three integers. Raises :class:`GridError` for what a GPU launch raises on: Triton takes
    ``len(grid)`` and ``grid[0]``, and its launcher parses each dimension as a C int (``operator.index``: an int, a
    numpy or torch integer; not 1.5, not '8')."""
    if grid is None:
        return None
    if callable(grid):
        grid = grid(bound)
    try:
        dims = tuple(grid)
    except TypeError:
        raise GridError(
            f"the grid is {grid!r}, a {type(grid).__name__}, not a tuple: on a GPU Triton takes len(grid) and the "
            f"launch raises TypeError (write ({grid!r},))"
        ) from None
    if not dims:
        raise GridError("the grid is empty: on a GPU Triton reads grid[0] and the launch raises IndexError")
    g = []
    for i, x in enumerate(dims[:3]):
        try:
            g.append(operator.index(x))
        except TypeError:
            raise GridError(
                f"grid[{i}] is {x!r}, a {type(x).__name__}, not an integer: on a GPU the launch raises TypeError "
                f"(triton.cdiv or // give an int where / gives a float)"
            ) from None
    return tuple(g + [1] * (3 - len(g)))  # type: ignore[return-value]


class Capture:
    """Context manager: while active, kernel launches are recorded and compiled, never run."""

    def __init__(self, compiler: Compiler):
        self.compiler = compiler
        self.backend = _compat.make_backend(compiler.target)
        self.kernels: dict[int, KernelInfo] = {}
        self.autotuners: dict[int, AutotuneInfo] = {}
        self.problems: list[Problem] = []
        self._context = CaseContext()
        self.n_launches = 0
        self.launches: list[Launch] = []
        self._binders: dict[int, Any] = {}
        self._autotune: tuple[int, int] | None = None
        self._converted: dict[int, JITFunction] = {}
        self._stack = contextlib.ExitStack()
        self._saved: list[tuple[Any, str, Any]] = []

    # -- patching -------------------------------------------------------------------------------------------
    def __enter__(self) -> Capture:
        missing = _compat.capture_missing()
        if missing is not None:
            raise CheckError(
                f"Triton {triton.__version__} lacks the launch internals the checker uses ({missing}); "
                f"tritonkit check is developed against Triton {_compat.DEVELOPED_AGAINST}"
            )
        try:
            self._install()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _install(self) -> None:
        cap = self

        def jit_run(kernel, *args, grid=None, warmup=False, **kwargs):
            return cap._launch(kernel, args, kwargs, grid, warmup)

        def autotune_run(tuner, *args, **kwargs):
            return cap._autotuned(tuner, args, kwargs)

        def autotune_warmup(tuner, *args, **kwargs):
            kwargs.setdefault("warmup", True)
            return cap._autotuned(tuner, args, kwargs)

        self._patch(JITFunction, "run", jit_run)
        self._patch(Autotuner, "run", autotune_run)
        self._patch(Autotuner, "warmup", autotune_warmup)
        interpreted = _compat.interpreted_function_type()
        if interpreted is not None:

            def interp_run(fn, *args, grid=None, warmup=False, **kwargs):
                return cap._launch(cap._from_interpreted(fn), args, kwargs, grid, warmup)

            self._patch(interpreted, "run", interp_run)
            # imported under TRITON_INTERPRET=1, Triton's own jit library (tl.sum, tl.cdiv, ...) is interpreted too
            for name, mod in list(sys.modules.items()):
                if name == "triton.language" or name.startswith("triton.language."):
                    self._swap_interpreted(mod)
        self._stack.enter_context(stub_driver(self.compiler.target))
        self._stack.enter_context(interpreter_off())
        self._cuda_shims()

    def _cuda_shims(self) -> None:
        """Launchers ask torch.cuda about the device (capability, current device, a device context); on a machine
        without one, answer for the target instead of raising."""
        import torch

        cuda = torch.cuda
        if cuda.is_available():
            return
        cc = divmod(int(self.compiler.target.arch), 10)
        sms = _vocab.sms_of_major(cc[0])
        props = type(
            "DeviceProperties",
            (),
            {
                "major": cc[0],
                "minor": cc[1],
                "multi_processor_count": sms,
                "name": f"tritonkit stub sm_{cc[0]}{cc[1]}",
                "warp_size": 32,
                "total_memory": 141 << 30,
                "L2_cache_size": 50 << 20,
            },
        )()
        self._patch(cuda, "get_device_capability", lambda *a, **k: cc)
        self._patch(cuda, "get_device_properties", lambda *a, **k: props)
        self._patch(cuda, "current_device", lambda: 0)
        self._patch(cuda, "set_device", lambda *a, **k: None)
        self._patch(cuda, "device", lambda *a, **k: contextlib.nullcontext())

    def __exit__(self, *exc) -> None:
        for obj, name, old in reversed(self._saved):
            if old is _MISSING:
                delattr(obj, name)
            else:
                setattr(obj, name, old)
        self._saved.clear()
        self._stack.close()

    def _patch(self, obj, name, new) -> None:
        self._saved.append((obj, name, vars(obj).get(name, _MISSING)))
        setattr(obj, name, new)

    def _jit_of(self, fn) -> JITFunction:
        jit = self._converted.get(id(fn))
        if jit is None:
            kw = {
                k: v
                for k, v in getattr(fn, "kwargs", {}).items()
                if k
                in (
                    "version",
                    "do_not_specialize",
                    "do_not_specialize_on_alignment",
                    "debug",
                    "noinline",
                    "repr",
                    "launch_metadata",
                )
            }
            jit = JITFunction(fn.fn, **kw)
            self._converted[id(fn)] = jit
        return jit

    def _swap_interpreted(self, mod) -> None:
        """Replace the interpreted jit functions a module holds by compiled ones, until the capture ends."""
        interpreted = _compat.interpreted_function_type()
        for k, v in list(vars(mod).items()):
            if interpreted is not None and isinstance(v, interpreted):
                self._patch(mod, k, self._jit_of(v))

    def _from_interpreted(self, fn) -> JITFunction:
        new = id(fn) not in self._converted
        jit = self._jit_of(fn)
        if new:
            mod = sys.modules.get(getattr(fn.fn, "__module__", ""))
            if mod is not None:
                self._swap_interpreted(mod)
            self.problems.append(
                Problem(
                    "capture",
                    jit.__name__,
                    "defined while TRITON_INTERPRET=1; compiled from its Python source instead (helpers it imports "
                    "from other modules must be jit functions: run `tritonkit check` without TRITON_INTERPRET)",
                    fatal=False,
                )
            )
        return jit

    # -- launches -------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def running(self, context: CaseContext) -> Iterator[None]:
        """Launches made inside the block belong to the case ``context`` describes."""
        outer, self._context = self._context, context
        try:
            yield
        finally:
            self._context = outer

    def _kernel(self, jit) -> KernelInfo:
        info = self.kernels.get(id(jit))
        if info is None:
            file, line = _def_site(jit)
            info = KernelInfo(jit, jit.__name__, file, line)
            self.kernels[id(jit)] = info
        return info

    def _binder(self, jit):
        b = self._binders.get(id(jit))
        if b is None:
            b = _compat.make_binder(jit, self.backend)
            self._binders[id(jit)] = b
        return b

    def _launch(self, jit, args, kwargs, grid, warmup):
        info = self._kernel(jit)
        site = user_site(3)
        case_site = outer_user_site(3)
        where = f"{info.name} launched at {site[0]}:{site[1]}" if site else info.name
        try:
            kw = dict(kwargs)
            kw["debug"] = bool(kw.get("debug", getattr(jit, "debug", None)) or False)
            bound, spec, options = self._binder(jit)(*args, **kw)
            opts, signature, constexprs, attrs = _compat.pack_args(jit, self.backend, kw, bound, spec, options)
        except Exception as e:  # noqa: BLE001
            self.problems.append(
                Problem("capture", where, f"Triton rejected the launch arguments: {type(e).__name__}: {e}")
            )
            return None
        try:
            g = _grid3(grid, bound)
        except GridError as e:
            # a warmup launches nothing on a GPU, so Triton never reads its grid there
            if not warmup:
                self.problems.append(Problem("capture", where, str(e)))
            g = None
        except Exception as e:  # noqa: BLE001
            self.problems.append(Problem("capture", where, f"the grid could not be evaluated: {type(e).__name__}: {e}"))
            g = None
        spec_t = tuple(tuple(x) if isinstance(x, (list, tuple)) else (x,) for x in spec)
        unit = self._unit(info, jit, spec_t, opts, signature, constexprs, attrs)
        int_args = {}
        for p in jit.params:
            if not p.is_constexpr and p.name in bound and (v := _as_int(bound[p.name])) is not None:
                int_args[p.name] = v
        consts = {p.name: bound.get(p.name) for p in jit.params if p.is_constexpr and p.name in bound}
        extents = {k: e for k, v in bound.items() if hasattr(v, "data_ptr") and (e := _storage_elements(v)) is not None}
        ln = Launch(
            kernel=info,
            unit=unit,
            grid=g,
            int_args=int_args,
            spec=spec_t,
            context=self._context,
            constexprs=consts,
            extents=extents,
            site=site,
            case_site=case_site,
            aliases=_aliases(bound),
            autotune=self._autotune,
        )
        info.launches.append(ln)
        # an optional pointer passed as None in this launch is still a pointer parameter a bound may name
        info.ptr_params.update(k for k, v in bound.items() if hasattr(v, "data_ptr") or v is None)
        if unit is not None:
            unit.launches.append(ln)
        self.launches.append(ln)
        self.n_launches += 1
        return None

    def discard(self, launches: list[Launch]) -> None:
        """Forget launches (a case that was refused): compiles and kernels left with no launch go too."""
        drop = {id(ln) for ln in launches}
        for ln in launches:
            info = ln.kernel
            info.launches = [x for x in info.launches if id(x) not in drop]
            if ln.unit is not None:
                ln.unit.launches = [x for x in ln.unit.launches if id(x) not in drop]
                if not ln.unit.launches:
                    info.units.pop(ln.unit.key, None)
                    for rec in self.autotuners.values():
                        rec.units = [u for u in rec.units if u is not ln.unit]
            if not info.launches:
                self.kernels.pop(id(info.jit), None)
        for rec in self.autotuners.values():
            for key, ids in list(rec.key_launches.items()):
                if ids and ids <= drop:  # every launch of this key was refused: the key was never hit
                    rec.key_launches.pop(key)
                    rec.keys.pop(key, None)
        self.launches = [x for x in self.launches if id(x) not in drop]
        self.n_launches = len(self.launches)

    def _unit(self, info, jit, spec_t, opts, signature, constexprs, attrs) -> Unit | None:
        key = self.compiler.cache_key(jit, signature, constexprs, attrs, opts)
        unit = info.units.get(key)
        if unit is None:
            # autotune-cost quotes one config's time to TTGIR: measured on the autotuner's first config only (the
            # rules read TTIR; TTGIR of every config was three quarters of a cold run of an autotuned file)
            first = self._autotune is not None and not self.autotuners[self._autotune[0]].units
            compiled = self.compiler.compile(jit, signature, constexprs, attrs, opts, want_ttgir=first)
            ir_params = []
            for name, ty in signature.items():
                if ty == "constexpr":
                    continue
                if isinstance(ty, tuple):
                    ir_params += [f"{name}[{i}]" for i in range(len(ty))]
                else:
                    ir_params.append(name)
            unit = Unit(info, key, spec_t, opts, ir_params, compiled, autotune=self._autotune)
            info.units[key] = unit
            if self._autotune is not None:
                self.autotuners[self._autotune[0]].units.append(unit)
        return unit

    def _autotuned(self, tuner, args, kwargs):
        jit = _base_jit(tuner.fn)
        rec = self.autotuners.get(id(tuner))
        if rec is None:
            file, line = _def_site(jit) if jit is not None else ("<unknown>", 0)
            rec = AutotuneInfo(jit.__name__ if jit else "?", file, line, list(tuner.keys), len(tuner.configs))
            self.autotuners[id(tuner)] = rec
        nargs = dict(zip(tuner.arg_names, args))
        all_args = {**nargs, **kwargs}
        key = [all_args[k] for k in tuner.keys if k in all_args]
        key += [str(v.dtype) for k, v in all_args.items() if k in tuner.arg_names and hasattr(v, "dtype")]
        key = tuple(key)
        tuner.nargs = nargs
        try:
            configs = list(tuner.prune_configs(kwargs)) if len(tuner.configs) > 1 else list(tuner.configs)
        except Exception:  # noqa: BLE001 - a perf model that needs a GPU: compile them all
            configs = list(tuner.configs)
        finally:
            tuner.nargs = None
        rec.keys[key] = len(configs)
        outer = self._autotune
        n0 = len(self.launches)
        try:
            for i, cfg in enumerate(configs):
                self._autotune = (id(tuner), i)
                tuner.fn.run(*args, **{**kwargs, **cfg.all_kwargs()})
        finally:
            self._autotune = outer
            rec.key_launches.setdefault(key, set()).update(id(ln) for ln in self.launches[n0:])
        return None
