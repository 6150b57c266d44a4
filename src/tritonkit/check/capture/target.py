"""Compile Triton kernels for a GPU target on a machine without one.

The active Triton driver is replaced by :class:`StubDriver`, whose ``get_current_target()`` names the requested
GPU; kernels are lowered with Triton's own frontend and TTIR passes (TTGIR only to time autotune configs), never
to LLVM or ``ptxas``. Compiled IR is cached in memory and on disk by (kernel source hash, specialization,
options, arch, Triton version).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import triton
from triton import knobs

from ... import _triton_compat as _compat
from ... import _vocab
from ..._triton_compat import DriverBase, GPUTarget

#: arch name -> (compute capability, shared memory per block in bytes, SM count of the flagship part)
ARCHS = {
    f"sm_{cc}": (cc, smem, _vocab.sms_of_major(cc // 10)) for cc, smem in ((80, 166912), (90, 232448), (100, 232448))
}


class CheckError(Exception):
    """A problem the checker reports by name instead of a traceback."""


def parse_arch(arch: str) -> GPUTarget:
    m = re.fullmatch(r"sm_?(\d+)a?", arch.strip().lower())
    name = f"sm_{m.group(1)}" if m else arch
    if name not in ARCHS:
        raise CheckError(f"unknown --arch {arch!r}; choose one of {', '.join(ARCHS)}")
    target = GPUTarget("cuda", ARCHS[name][0], 32)
    try:
        _compat.make_backend(target).parse_options({})
    except Exception as e:  # noqa: BLE001 - any failure means this Triton cannot target it
        raise CheckError(f"the installed Triton {triton.__version__} cannot target {name}: {e}") from None
    return target


def arch_name(target: GPUTarget) -> str:
    return f"sm_{target.arch}"


class _Utils:
    def __init__(self, cc: int):
        _, smem, sms = next(v for v in ARCHS.values() if v[0] == cc)
        self.props = {
            "max_shared_mem": smem,
            "multiprocessor_count": sms,
            "max_num_regs": 65536,
            "warpSize": 32,
            "sm_clock_rate": 1980000,
            "mem_clock_rate": 2619000,
            "mem_bus_width": 5120,
        }

    def get_device_properties(self, device=0):
        return dict(self.props)


def _stub_driver_class():
    def _unsupported(name):
        def f(self, *a, **k):
            raise CheckError(f"tritonkit check runs no kernel: the stub driver has no {name}()")

        return f

    body: dict[str, Any] = {
        "is_active": classmethod(lambda cls: False),
        "map_python_to_cpp_type": lambda self, ty: "void*" if str(ty).startswith("*") else "int64_t",
        "get_current_target": lambda self: self.target,
        "get_active_torch_device": lambda self: __import__("torch").device("meta"),
        "get_benchmarker": _unsupported("get_benchmarker"),
        "get_current_device": lambda self: 0,
        "set_current_device": lambda self, d: None,
        "get_current_stream": lambda self, d=None: 0,
        "get_device_capability": lambda self, d=0: divmod(self.target.arch, 10),
        "get_device_interface": lambda self: None,
        "clear_cache": lambda self, *a, **k: None,
        "get_empty_cache_for_benchmark": _unsupported("get_empty_cache_for_benchmark"),
    }
    # abstract methods a newer Triton adds still get an implementation that names itself
    for name in getattr(DriverBase, "__abstractmethods__", ()):
        body.setdefault(name, _unsupported(name))

    def __init__(self, target):
        self.target = target
        self.backend = target.backend
        self.utils = _Utils(target.arch)

    body["__init__"] = __init__
    return type("StubDriver", (DriverBase,), body)


StubDriver = _stub_driver_class()


@contextlib.contextmanager
def stub_driver(target: GPUTarget):
    """Make ``triton.runtime.driver.active`` a stub for ``target`` (restored on exit, even on this GPU-less box
    where building the default driver would fail)."""
    with _compat.active_driver(StubDriver(target)):
        yield


@contextlib.contextmanager
def interpreter_off():
    """The checker compiles: kernels defined (decorated) inside this block are ``JITFunction`` even when
    ``TRITON_INTERPRET=1`` is set for the rest of the process. Patches the interpreter left on ``triton.language``
    are undone first (``_compat.restore_language``): with them nothing compiles."""
    _compat.restore_language()
    prev_env = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "0"
    try:
        with _compat.knob_set(knobs.runtime, "interpret", False):
            yield
    finally:
        if prev_env is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = prev_env


@dataclasses.dataclass
class Compiled:
    """One specialization of one kernel, lowered to TTIR."""

    key: str
    ttir: str | None = None
    error: str | None = None
    seconds: float = 0.0  # frontend + TTIR passes, measured when it was compiled (cache hits keep it)
    ttgir_seconds: float | None = None
    cached: bool = False
    #: (the parsed entry function and module, or None and the parse error), shared by the units of this TTIR
    parsed: Any = dataclasses.field(default=None, repr=False, compare=False)


def _cache_dir() -> Path | None:
    d = os.environ.get("TRITONKIT_CACHE_DIR")
    if d == "":
        return None
    return Path(d) if d else Path.home() / ".cache" / "tritonkit" / "check"


def _short_error(e: BaseException) -> str:
    msg = str(e).strip() or type(e).__name__
    lines = [ln for ln in msg.splitlines() if ln.strip()]
    if len(lines) > 12:
        lines = lines[:4] + ["..."] + lines[-7:]
    return f"{type(e).__name__}: " + "\n".join(lines)


def _is_record(d) -> bool:
    """Whether ``d`` (a parsed cache file) is a cache record: both fields, TTIR (a module with a function in it) or
    an error (str), and its timings. Anything else (a hand-edited or half-written file) is a miss."""
    if not isinstance(d, dict) or not all(k in d and isinstance(d[k], (str, type(None))) for k in ("ttir", "error")):
        return False
    ttir = d["ttir"]
    return (
        (ttir is not None or d["error"] is not None)
        and (ttir is None or ("module" in ttir and "tt.func" in ttir))
        and isinstance(d.get("seconds", 0.0), (int, float))
        and isinstance(d.get("ttgir_seconds"), (int, float, type(None)))
    )


#: launch options the frontend and the TTIR passes do not read (they shape TTGIR and what follows): TTIR is shared
#: across them, checked by tests/check/test_compile_speed.py
_AFTER_TTIR = ("num_warps", "num_stages", "maxnreg")


class Compiler:
    """Lowers captured launches to TTIR for one target, with an in-memory and an on-disk cache."""

    def __init__(self, target: GPUTarget, disk_cache: bool = True):
        self.target = target
        self.backend = _compat.make_backend(target)
        self.memory: dict[str, Compiled] = {}
        self.disk = _cache_dir() if disk_cache else None
        self.bad_entries = 0  # disk cache entries that were not cache records (a miss each)
        self.compile_seconds = 0.0
        self.n_compiled = 0
        #: with ``defer``, compile() only records what to lower and finish() lowers it all, on several processes
        self.defer = False
        self.progress = None  # a check.progress.Progress told of each kernel lowered
        self._lowered = self._to_lower = 0
        self.pending: dict[str, tuple[Compiled, tuple, bool]] = {}

    def cache_key(self, kernel, signature, constexprs, attrs, options, ir: bool = False) -> str:
        """The key of one specialization (a unit: what Triton compiles once); with ``ir``, of its TTIR, which the
        launch options only TTGIR and later read do not change (autotune configs that differ in num_warps or
        num_stages alone share one)."""
        skip = ("extern_libs",) + (_AFTER_TTIR if ir else ())
        opts = {k: v for k, v in sorted(options.__dict__.items()) if k not in skip}
        consts = sorted((str(k), getattr(v, "cache_key", None) or repr(v)) for k, v in constexprs.items())
        # the IR's locations name the file and line it was compiled from: the same source elsewhere is another entry
        code = getattr(getattr(kernel, "fn", None), "__code__", None)
        where = [code.co_filename, code.co_firstlineno] if code is not None else []
        raw = json.dumps(
            [
                triton.__version__,
                self.target.arch,
                kernel.cache_key,
                where,
                repr(sorted(signature.items())),
                consts,
                repr(sorted(attrs.items())),
                repr(opts),
            ],
            default=str,
        )
        return hashlib.sha256(raw.encode()).hexdigest()

    def _load(self, key: str) -> Compiled | None:
        if self.disk is None:
            return None
        path = self.disk / f"{key}.json"
        try:
            d = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError, RecursionError):
            d = None
        if not _is_record(d):
            # a miss: compiled again and the entry rewritten; said once a run, not once an entry
            if not self.bad_entries:
                print(
                    f"tritonkit check: ignoring a corrupt IR cache entry {path} (and any more in that folder); "
                    "each is compiled again and rewritten",
                    file=sys.stderr,
                )
            self.bad_entries += 1
            return None
        return Compiled(key, d["ttir"], d["error"], d.get("seconds", 0.0), d.get("ttgir_seconds"), True)

    def _store(self, c: Compiled) -> None:
        if self.disk is None:
            return
        with contextlib.suppress(OSError):
            self.disk.mkdir(parents=True, exist_ok=True)
            tmp = self.disk / f"{c.key}.{os.getpid()}.tmp"
            tmp.write_text(
                json.dumps({"ttir": c.ttir, "error": c.error, "seconds": c.seconds, "ttgir_seconds": c.ttgir_seconds})
            )
            tmp.replace(self.disk / f"{c.key}.json")

    def compile(self, kernel, signature, constexprs, attrs, options, want_ttgir: bool = False) -> Compiled:
        """The TTIR of one specialization: from the caches, else lowered now (or, with ``defer``, filled in by
        :meth:`finish`; the object returned is the one that gets filled)."""
        key = self.cache_key(kernel, signature, constexprs, attrs, options, ir=True)
        if key in self.pending:
            c, args, tg = self.pending[key]
            self.pending[key] = (c, args, tg or want_ttgir)
            return c
        c = self.memory.get(key) or self._load(key)
        if c is not None and (not want_ttgir or c.ttgir_seconds is not None or c.error):
            self.memory[key] = c
            return c
        c = Compiled(key)
        self.memory[key] = c
        args = (kernel, signature, constexprs, attrs, options)
        if self.defer:
            self.pending[key] = (c, args, want_ttgir)
            return c
        self._lower(c, args, want_ttgir)
        self._done(c)
        return c

    def _lower(self, c: Compiled, args: tuple, want_ttgir: bool) -> None:
        t0 = time.perf_counter()
        try:
            mod, stages = self._ttir(*args)
            c.seconds = time.perf_counter() - t0
            c.ttir = mod.str()
            if want_ttgir:
                t1 = time.perf_counter()
                stages["ttgir"](mod, {})
                c.ttgir_seconds = time.perf_counter() - t1
        except Exception as e:  # noqa: BLE001 - reported by name, the rest is still checked
            c.error = _short_error(e)
            c.seconds = time.perf_counter() - t0

    def _done(self, c: Compiled) -> None:
        self.compile_seconds += c.seconds + (c.ttgir_seconds or 0.0)
        self.n_compiled += 1
        self._store(c)
        self._lowered += 1
        if self.progress is not None:
            self.progress.stage("lowering kernels", self._lowered, self._to_lower)

    def finish(self, jobs: int | None = None) -> None:
        """Lower everything :meth:`compile` deferred, on up to ``jobs`` processes (default: one per CPU). Triton's
        frontend is Python under one interpreter lock, so the extra processes are forks of this one (they inherit
        the captured kernels) that send their IR back; where fork is missing, or a worker dies, the rest is
        lowered here."""
        todo = list(self.pending.values())
        self.pending = {}
        self._lowered, self._to_lower = 0, len(todo)
        n = max(1, min(jobs or os.cpu_count() or 1, 8, len(todo)))
        workers = []
        if n > 1 and hasattr(os, "fork"):
            for w in range(1, n):
                r, wfd = os.pipe()
                pid = os.fork()
                if pid == 0:  # the worker: lower its share, send it back, leave without running any cleanup
                    code = 1
                    try:
                        os.close(r)
                        out = []
                        for c, args, tg in todo[w::n]:
                            self._lower(c, args, tg)
                            out.append([c.ttir, c.error, c.seconds, c.ttgir_seconds])
                        with os.fdopen(wfd, "wb") as fh:
                            fh.write(json.dumps(out).encode())
                        code = 0
                    finally:
                        os._exit(code)
                os.close(wfd)
                workers.append((w, pid, r))
        else:
            n = 1
        for c, args, tg in todo[0::n]:
            self._lower(c, args, tg)
            self._done(c)
        for w, pid, r in workers:
            with os.fdopen(r, "rb") as fh:
                data = fh.read()
            os.waitpid(pid, 0)
            share = todo[w::n]
            try:
                got = json.loads(data)
            except ValueError:
                got = None
            for i, (c, args, tg) in enumerate(share):
                if got is not None and len(got) == len(share):
                    c.ttir, c.error, c.seconds, c.ttgir_seconds = got[i]
                else:
                    self._lower(c, args, tg)
                self._done(c)

    def _ttir(self, kernel, signature, constexprs, attrs, options):
        return _compat.lower_to_ttir(kernel, signature, constexprs, attrs, options, self.target, self.backend)
