"""Run a check: import what the user named, run every case (and OpSpec) with launches captured, apply rules."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.machinery
import json
import os
import stat
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from .. import _vocab
from .._imports import import_file
from ..testing.inputs import MetaFill
from .adopt import apply_baseline, read_baseline, suppress, unknown_suppressions
from .capture.case import PER_CALL_KEYS, REGISTRY, Case, CaseContext, Declared
from .findings import Finding, Problem
from .capture.isolate import (
    DEFAULT_CASE_TIMEOUT,
    interrupted,
    limited,
    raised_by_code,
    real_interrupts,
    this_process_only,
    time_limit,
    user_code,
)
from .progress import Progress
from .capture.target import CheckError, Compiler, arch_name, interpreter_off, parse_arch

SPACES = _vocab.SHAPE_SPACES


@dataclasses.dataclass
class Options:
    arch: str = "sm_90"
    rules: tuple[str, ...] | None = None
    spaces: tuple[str, ...] = SPACES
    ops: tuple[str, ...] | None = None
    disk_cache: bool = True
    baseline: str | None = None  # a file of accepted findings (--baseline): they do not count toward the exit code
    jobs: int | None = None  # processes lowering kernels to TTIR (None: one per CPU)
    case_timeout: float | None = DEFAULT_CASE_TIMEOUT  # seconds per case or case-file import (None: no limit)
    progress: bool = False  # a line on stderr saying what the run is doing (the CLI: on a terminal)


@dataclasses.dataclass
class Report:
    findings: list[Finding]
    problems: list[Problem]
    kernels: list[dict[str, Any]]
    stats: dict[str, Any]

    def exit_code(self) -> int:
        """2 when part of the code could not be checked (even beside findings: a CI job must not pass a kernel it
        never compiled), else 1 on an error or warning, else 0."""
        if any(p.fatal for p in self.problems) or not self.kernels:
            return 2
        if any(f.severity in ("error", "warning") and f.active for f in self.findings):
            return 1
        return 0


Bounds = dict[str, tuple[int, int]]


class Run(NamedTuple):
    """One run of a target: its case, the sweep it belongs to, the bounds it declares and the call itself."""

    case: dict[str, Any]
    #: (sweep group, its per-call parameters, whether those were inferred from all of the case's parameters): see
    #: :func:`_sweep_group`
    group: tuple[str, tuple[str, ...], bool]
    #: loaded bounds (a :class:`Declared` carries ``nondecreasing`` too), or a function making them just before
    #: the thunk (an OpSpec's bounds read the inputs the thunk then runs on)
    bounds: Bounds | Callable[[], Bounds]
    thunk: Callable[[], Any]


@dataclasses.dataclass
class Target:
    """One thing to run under capture: a case function or an OpSpec."""

    label: str
    runs: list[Run]


def _user_frame(tb) -> str:
    from .capture.launches import _CHECK_DIR, _TRITON_DIR

    frames = traceback.extract_tb(tb)
    torch_mod = sys.modules.get("torch")
    # torch's own frames too: a meta tensor's `.item()` is raised from a registration, the call is the user's
    torch_dir = os.path.dirname(torch_mod.__file__) + os.sep if getattr(torch_mod, "__file__", None) else _CHECK_DIR
    for fr in reversed(frames):
        if not fr.filename.startswith((_TRITON_DIR, _CHECK_DIR, torch_dir)):
            return f"{fr.filename}:{fr.lineno}"
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"


def _exc(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    short = msg[0] if msg else ""
    return f"{type(e).__name__}: {short}" + (f" (at {_user_frame(e.__traceback__)})" if e.__traceback__ else "")


def import_target(spec: str, base: str | None = None) -> tuple[Any | None, Problem | None]:
    """Import a file (by path, relative to ``base`` when given; as part of its package when it is in one) or a
    dotted module name."""
    p = Path(base or "", spec)
    if (why := _unreadable_path(spec, str(p))) is not None:
        return None, Problem("import", spec, why)
    try:
        with interpreter_off():
            if p.suffix == ".py" or p.exists():
                return import_file(p), None
            return importlib.import_module(spec), None
    except BaseException as e:  # noqa: BLE001 - SystemExit from a script counts as a failed import too
        if isinstance(e, KeyboardInterrupt) and not raised_by_code(e):
            raise
        hint = ""
        if isinstance(e, ModuleNotFoundError) and e.name == spec and _is_builtin_op(spec):
            hint = f"; {spec} is a built-in op: `tritonkit check --op {spec}` checks it"
        return None, Problem("import", spec, f"failed to import: {_exc(e)}{hint}")


def _unreadable_path(spec: str, path: str | None = None) -> str | None:
    """Why ``spec`` (found at ``path``), meant as a path, names no file to import (a symlink loop, a missing file or
    directory), or None: it exists, or reads as a dotted module name (no separator, no .py)."""
    path = path or spec
    try:
        st = os.stat(path)
    except OSError as e:
        if os.path.islink(path):
            return f"cannot follow the symlink: {e.strerror or e}"
        if spec.endswith(".py") or os.sep in spec or (os.altsep and os.altsep in spec) or not _dotted(spec):
            return "no such file or directory"
        return None
    # a pipe is read (`tritonkit check <(generate)`; --case-timeout stops one nobody writes), a device is not
    if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode) or stat.S_ISFIFO(st.st_mode):
        return None
    kinds = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
    kind = next((k for test, k in kinds if test(st.st_mode)), "not a regular file")
    return f"not a python file: {kind}, not read"


def _dotted(name: str) -> bool:
    return all(part.isidentifier() for part in name.split("."))


def _is_builtin_op(name: str) -> bool:
    with interpreter_off():
        from ..ops import OP_NAMES
    return name in OP_NAMES


def expand_paths(specs: list[str], problems: list[Problem] | None = None) -> list[str]:
    """The python files under each directory (hidden, __pycache__, conftest.py and setup.py left out), the other
    targets as they are. A directory that cannot be listed is a problem, not an empty directory."""
    out = []
    for s in specs:
        if not Path(s).is_dir():
            out.append(s)
            continue
        found = []
        for root, dirs, files in os.walk(
            s,
            onerror=lambda e: (
                problems is not None
                and problems.append(Problem("import", e.filename or s, f"cannot read the directory: {e.strerror or e}"))
            ),
        ):
            dirs[:] = [d for d in dirs if not d.startswith((".", "__pycache__"))]
            found += [
                os.path.join(root, f)
                for f in files
                if f.endswith(".py") and not f.startswith(".") and f not in ("conftest.py", "setup.py")
            ]
        out += sorted(found, key=lambda f: Path(f).relative_to(s).parts)
    return out


def _sweep_group(
    label: str, params: dict[str, Any], sweep: tuple[str, ...] | None
) -> tuple[str, tuple[str, ...], bool]:
    """(the sweep a run belongs to, its per-call parameters, whether those are all of its parameters for want of a
    `sweep=` or a parameter named like a per-call size): runs that differ only in them must share a compile."""
    named = {k for k in params if k in PER_CALL_KEYS}
    inferred = sweep is None and not named
    per_call = set(sweep) if sweep is not None else (named or set(params))
    fixed = ",".join(f"{k}={v}" for k, v in params.items() if k not in per_call)
    return (f"{label}[{fixed}]" if fixed else label), tuple(k for k in params if k in per_call), inferred


def _case_targets(cases: list[Case]) -> list[Target]:
    out = []
    for c in cases:
        runs = []
        for params in c.expand():
            runs.append(
                Run(
                    params,
                    _sweep_group(c.name, params, c.sweep),
                    Declared(c.loaded_bounds, c.nondecreasing),
                    lambda c=c, p=params: c.fn(**p),
                )
            )
        out.append(Target(f"{c.name} ({c.file}:{c.line})", runs))
    return out


def _spec_run(spec, shape, dtype):
    """(loaded bounds, thunk) of one spec shape: the bounds read the inputs the thunk then runs on."""
    made: dict[str, Any] = {}

    def bounds():
        made["inputs"] = spec.make_inputs(shape, dtype, MetaFill())
        return dict(spec.loaded_bounds(made["inputs"])) if spec.loaded_bounds is not None else {}

    def thunk():
        spec.call(made.pop("inputs", None) or spec.make_inputs(shape, dtype, MetaFill()))

    return bounds, thunk


def spec_targets(specs: dict[str, Any], spaces: tuple[str, ...]) -> list[Target]:
    out = []
    for name, spec in specs.items():
        runs = []
        for space in spaces:
            for shape in spec.shapes(space):
                for dtype in spec.dtypes:
                    dt = str(dtype).replace("torch.", "")
                    case = {"op": name, "space": space, **dict(shape), "dtype": dt}
                    per_call = tuple(k for k in shape if k in PER_CALL_KEYS)
                    group = _sweep_group(name, {**dict(shape), "dtype": dt}, per_call)
                    runs.append(Run(case, group, *_spec_run(spec, shape, dtype)))
        out.append(Target(f"op {name}", runs))
    return out


def unknown_bounds(bounds: dict[str, tuple[int, int]], launches) -> list[str]:
    """The ``loaded_bounds`` keys that name no pointer parameter of any kernel these launches ran (a typo would
    otherwise leave the bound silently unapplied)."""
    ptrs = {}
    for ln in launches:
        ptrs.setdefault(ln.kernel.name, set()).update(ln.kernel.ptr_params)
    bad = []
    for k in bounds:
        kk, _, p = k.rpartition(".")
        if not any(p in ps for name, ps in ptrs.items() if not kk or kk == name):
            bad.append(k)
    return bad


def _which(bad: list[str], nondecreasing: dict) -> str:
    """The case keyword a refused name came from."""
    kw = {"nondecreasing" if k in nondecreasing else "loaded_bounds" for k in bad}
    return " and ".join(sorted(kw))


#: what torch says when code reads the data of a meta tensor (``.item()``, ``.tolist()``, ``int(t)``, ``.numpy()``)
_META_DATA = ("cannot be called on meta tensors", "Cannot copy out of meta tensor", "meta device type tensor")


def _meta_hint(e: BaseException) -> str:
    """What to do when the launcher read an input's values on the host, which a meta tensor does not have."""
    if not any(m in str(e) for m in _META_DATA):
        return ""
    return (
        ": the launcher reads an input's values on the host (`.item()`, `.tolist()`, `int(t)`), and a tensor on "
        "device='meta' has none. Make those inputs (a lengths or offsets tensor, not the large ones) small real CPU "
        "tensors with the values a deployment sees, `torch.tensor([0, 7, 19], dtype=torch.int32)`; or launch the "
        "kernel from the case with the value the launcher would compute"
    )


def _execute(capture, targets: list[Target], problems: list[Problem], progress=None) -> int:
    n = 0
    total = sum(len(t.runs) for t in targets)
    for t in targets:
        silent, rejected = [], []
        refused: set[str] = set()
        for case, (group, keys, inferred), bounds, thunk in t.runs:
            before = capture.n_launches
            problems_before = len(capture.problems)
            nondecreasing: dict[str, int | None] = {}
            try:
                with this_process_only():
                    with capture.running(CaseContext(case, group, keys, sweep_inferred=inferred)):
                        bounds = bounds() if callable(bounds) else bounds
                    nondecreasing = dict(getattr(bounds, "nondecreasing", {}))
                    with capture.running(CaseContext(case, group, keys, dict(bounds), nondecreasing, inferred)):
                        thunk()
            except BaseException as e:  # noqa: BLE001 - reported by name; the other cases still run
                if isinstance(e, KeyboardInterrupt) and not raised_by_code(e):
                    raise
                problems.append(Problem("case", f"{t.label} {case}", f"raised {_exc(e)}{_meta_hint(e)}"))
            else:
                if capture.n_launches == before:
                    # a launch Triton refused is reported by the capture (could not check); the case is named here
                    (rejected if len(capture.problems) > problems_before else silent).append(case)
            new = capture.launches[before:]
            declared = {**bounds, **nondecreasing} if isinstance(bounds, dict) else {}
            bad = unknown_bounds(declared, new) if new else []
            if bad:
                capture.discard(new)
                if not refused.issuperset(bad):
                    refused.update(bad)
                    kernels = {ln.kernel.name: sorted(ln.kernel.ptr_params) for ln in new}
                    listed = "; ".join(f"{k}: {', '.join(ps) or '(none)'}" for k, ps in kernels.items())
                    problems.append(
                        Problem(
                            "case",
                            t.label,
                            f"refused: {_which(bad, nondecreasing)} names {', '.join(map(repr, bad))}, which is no "
                            f"pointer parameter of "
                            f"the kernels it launched (their pointer parameters: {listed})",
                        )
                    )
            if interrupted():  # a Ctrl-C the case's code caught still ends the run
                raise KeyboardInterrupt
            n += 1
            if progress is not None:
                progress.stage("capturing cases", n, total)
        if rejected:
            problems.append(
                Problem(
                    "case",
                    t.label,
                    f"{len(rejected)} of {len(t.runs)} runs launched nothing that could be checked (first: "
                    f"{rejected[0]}): their launches failed as 'could not check' says",
                    fatal=False,
                )
            )
        if silent:
            problems.append(
                Problem(
                    "case",
                    t.label,
                    f"{len(silent)} of {len(t.runs)} runs launched no Triton kernel "
                    f"(first: {silent[0]}): nothing was checked for those values. If they should launch, a "
                    "torch.ops call may have dispatched to its meta implementation (call the launcher directly) or "
                    "the case returned before launching",
                    fatal=False,
                )
            )
    return n


def collect(paths: list[str], problems: list[Problem], timeout: float | None = None) -> list[Target]:
    from ..spec import OpSpec

    targets: list[Target] = []
    # as pytest does: `from mypkg.kv import ...` in a case file works from a checkout's root without PYTHONPATH
    # (each file's own folder, or its package's root, is added by import_target)
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    # a file named twice (`a.py a.py`, `cases/ cases/a.py`, a file and its dotted module name) is checked once
    seen_files: set[str] = set()
    seen_modules: set[int] = set()
    # a case file imported by another under a second name registers its cases again, an OpSpec imported by another
    # target is the same spec: each is run once
    seen_cases: set[tuple[str, int, str]] = set()
    seen_specs: set[int] = set()
    for spec in expand_paths(paths, problems):
        file = source_file(spec, cwd)
        if file is not None and file in seen_files:
            continue
        start = len(REGISTRY)
        with this_process_only(), time_limit(timeout, f"the import of {spec}"):
            # relative to where the run started, even after an earlier file called os.chdir
            mod, prob = import_target(spec, cwd)
        if interrupted():  # a Ctrl-C the file's code caught still ends the run
            raise KeyboardInterrupt
        seen_files.update(f for f in (file, _module_file(mod)) if f is not None)
        if prob is not None:
            problems.append(prob)
            continue
        if id(mod) in seen_modules:
            continue
        seen_modules.add(id(mod))
        cases = [c for c in REGISTRY[start:]]
        known = {id(c) for c in cases}
        for v in vars(mod).values():
            c = getattr(v, "__tritonkit_case__", None)
            if isinstance(c, Case) and id(c) not in known:
                cases.append(c)
                known.add(id(c))
        specs = {v.name: v for v in vars(mod).values() if isinstance(v, OpSpec)}
        if not cases and not specs:
            problems.append(
                Problem("import", spec, "defines no @tritonkit.case and no OpSpec: nothing to run", fatal=False)
            )
        cases = [c for c in cases if _case_key(c) not in seen_cases]
        seen_cases.update(map(_case_key, cases))
        specs = {k: v for k, v in specs.items() if id(v) not in seen_specs}
        seen_specs.update(map(id, specs.values()))
        targets += _case_targets(cases) + spec_targets(specs, SPACES)
        problems += [_boundary_only(s) for s in specs.values() if not s.shapes("sweep") and not s.large]
    return targets


def source_file(spec: str, base: str | None = None) -> str | None:
    """The real path of the file a target names, found without running any code: a path (relative to ``base``), or
    a dotted module name looked up on ``base`` and sys.path as the import system would; None when it names no file
    found so (a directory, a module found only by an installed import hook)."""
    p = os.path.join(base or "", spec)
    if os.path.lexists(p) or spec.endswith(".py") or not _dotted(spec):
        return os.path.realpath(p) if os.path.exists(p) and not os.path.isdir(p) else None
    parts = spec.split(".")
    search: list[str] | None = [base or os.getcwd(), *sys.path]
    found = None
    for i in range(len(parts)):
        name = ".".join(parts[: i + 1])
        if search is None:
            return None
        mod = sys.modules.get(name)
        try:
            found = (
                getattr(mod, "__spec__", None)
                if mod is not None
                else importlib.machinery.PathFinder.find_spec(name, search)
            )
        except (ImportError, ValueError):
            return None
        if found is None:
            return None
        search = list(found.submodule_search_locations) if found.submodule_search_locations is not None else None
    return os.path.realpath(found.origin) if found is not None and found.has_location and found.origin else None


def _case_key(c: Case) -> tuple[str, int, str]:
    return os.path.realpath(c.file), c.line, c.name


def _module_file(mod) -> str | None:
    f = getattr(mod, "__file__", None) if mod is not None else None
    return os.path.realpath(f) if isinstance(f, str) else None


def _boundary_only(spec) -> Problem:
    """The note for an OpSpec with no sweep and no large shapes: the sizes where offsets overflow go unchecked."""
    return Problem(
        "case",
        f"op {spec.name}",
        f"declares no sweep_shape and no large shapes: only its "
        f"{len(spec.boundary)} boundary shapes are checked (overflows show at deployment sizes: declare "
        f"sweep_shape, or large)",
        fatal=False,
    )


def builtin_targets(ops: tuple[str, ...] | None, spaces: tuple[str, ...], problems: list[Problem]) -> list[Target]:
    try:
        with interpreter_off():
            from .. import ops as ops_pkg

            names = list(ops or ops_pkg.OP_NAMES)
            specs = {}
            for n in names:
                try:
                    specs[n] = ops_pkg.get_spec(n)
                except Exception as e:  # noqa: BLE001
                    problems.append(Problem("import", f"op {n}", f"its OpSpec failed to load: {_exc(e)}"))
    except Exception as e:  # noqa: BLE001
        problems.append(Problem("import", "tritonkit.ops", f"failed to import: {_exc(e)}"))
        return []
    return spec_targets(specs, spaces)


def interpreter_leaked() -> bool:
    """True when Triton's interpreter has run in this process and left ``triton.language`` patched (interpreted
    device-function calls patch it without restoring) and no clean copy puts it back: nothing compiles correctly in
    this process any more."""
    from .._triton_compat import restore_language

    return not restore_language()


def _run_in_child(paths: list[str] | None, opts: Options) -> Report:
    env = {
        **os.environ,
        "_TRITONKIT_CHECK_CHILD": "1",
        "TRITON_INTERPRET": "0",
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
    }
    arg = json.dumps({"paths": paths or [], "options": dataclasses.asdict(opts), "cwd": os.getcwd()})
    r = subprocess.run([sys.executable, "-m", "tritonkit.check.runner", arg], capture_output=True, text=True, env=env)
    try:
        d = json.loads(r.stdout)
    except ValueError:
        tail = (r.stderr or r.stdout).strip().splitlines()[-5:]
        return Report(
            [], [Problem("capture", "check", "the checker's fresh process failed: " + " | ".join(tail))], [], {}
        )
    # what the cases printed, and the checker's own notes (a corrupt cache entry), as a run in this process shows them
    sys.stderr.write(r.stderr)
    note = Problem(
        "capture",
        "check",
        "Triton's interpreter had run in this process and left triton.language "
        "patched; the check ran in a fresh process",
        fatal=False,
    )

    def tuples(case):
        return {k: tuple(v) if isinstance(v, list) else v for k, v in case.items()}

    findings = [Finding(**{**f, "case": tuples(f["case"])}) for f in d["findings"]]
    return Report(findings, [note] + [Problem(**p) for p in d["problems"]], d["kernels"], d["stats"])


def run_check(paths: list[str] | None = None, options: Options | None = None) -> Report:
    """Check the files/modules in ``paths`` (their cases and OpSpecs), or every built-in op when empty."""
    from . import rules as rules_pkg
    from .capture.launches import Capture

    opts = options or Options()
    t0 = time.perf_counter()
    target = parse_arch(opts.arch)
    available = rules_pkg.all_rules()
    selected = opts.rules or tuple(available)
    unknown = [r for r in selected if r not in available]
    if unknown:
        raise CheckError(f"unknown rule {', '.join(unknown)}; rules: {', '.join(available)}")
    accepted = read_baseline(opts.baseline) if opts.baseline else None  # a bad file fails before the run
    if os.environ.get("_TRITONKIT_CHECK_CHILD") != "1" and interpreter_leaked():
        return _run_in_child(paths, opts)
    problems: list[Problem] = []
    compiler = Compiler(target, disk_cache=opts.disk_cache)
    cwd = os.getcwd()
    try:
        with real_interrupts():
            with interpreter_off(), user_code():
                targets = (
                    collect(paths, problems, opts.case_timeout)
                    if paths
                    else builtin_targets(opts.ops, opts.spaces, problems)
                )
            for t in targets:
                t.runs = [
                    r._replace(
                        bounds=limited(r.bounds, opts.case_timeout, f"{t.label} {r.case}"),
                        thunk=limited(r.thunk, opts.case_timeout, f"{t.label} {r.case}"),
                    )
                    for r in t.runs
                ]
            compiler.defer = True
            compiler.progress = prog = Progress(opts.progress)
            with Capture(compiler) as cap:
                with user_code():
                    n_runs = _execute(cap, targets, problems, prog)
                compiler.finish(opts.jobs)
    finally:
        # a case that called os.chdir: the report names files relative to where the run was started
        with contextlib.suppress(OSError):
            os.chdir(cwd)
    problems += cap.problems
    ctx = rules_pkg.Context(cap, arch_name(target))
    t_capture = time.perf_counter() - t0
    found: dict[tuple, Finding] = {}
    for i, rid in enumerate(selected):
        prog.stage("running rules", i, len(selected))
        try:
            for f in available[rid].check(ctx):
                prev = found.get(f.key())
                if prev is None:
                    found[f.key()] = f
                else:
                    prev.count += f.count
        except Exception as e:  # noqa: BLE001 - a rule bug must not hide the other rules' findings
            problems.append(Problem("rule", rid, f"the rule failed: {_exc(e)}"))
    ctx.budget_notes()
    problems += ctx.problems
    prog.stage("running rules", len(selected), len(selected))
    prog.close()
    order = {"error": 0, "warning": 1, "info": 2}
    findings = sorted(found.values(), key=lambda f: (order.get(f.severity, 3), f.file, f.line, f.rule))
    suppress(findings)
    problems += unknown_suppressions({f.file for f in findings} | {i.file for i in cap.kernels.values()}, available)
    if accepted is not None:
        apply_baseline(
            opts.baseline, accepted, findings, problems, set(selected), {info.name for info in cap.kernels.values()}
        )
    kernels = []
    for info in cap.kernels.values():
        kernels.append(
            {
                "kernel": info.name,
                "file": info.file,
                "line": info.line,
                "launches": len(info.launches),
                "compiles": len(info.units),
                "max_grid": info.max_grid(),
            }
        )
    if not kernels and not any(p.fatal for p in problems):
        problems.append(Problem("capture", "check", "no kernel launch was captured: nothing was checked"))
    stats = {
        "arch": arch_name(target),
        "triton": __import__("triton").__version__,
        "cases": n_runs,
        "launches": cap.n_launches,
        "compiles": sum(k["compiles"] for k in kernels),
        "compiled_now": compiler.n_compiled,
        "compile_seconds": round(compiler.compile_seconds, 3),
        "capture_seconds": round(t_capture, 3),
        "seconds": round(time.perf_counter() - t0, 3),
        "rules": list(selected),
        "baseline": opts.baseline,
    }
    return Report(findings, problems, kernels, stats)


def _child_main(arg: str) -> int:
    d = json.loads(arg)
    o = d["options"]
    opts = Options(**{k: tuple(v) if isinstance(v, list) else v for k, v in o.items()})
    rep = run_check(d["paths"] or None, opts)
    print(
        json.dumps(
            {
                "findings": [dataclasses.asdict(f) for f in rep.findings],
                "problems": [dataclasses.asdict(p) for p in rep.problems],
                "kernels": rep.kernels,
                "stats": rep.stats,
            },
            default=str,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1]))
