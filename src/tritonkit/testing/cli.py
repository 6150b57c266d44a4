"""``tritonkit validate [OP | FILE | MODULE[:NAME] ...] [--families ...] [--shapes boundary|sweep|large] [--dtype ...]
[--json FILE]``"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import sys
import time
import warnings
from typing import TYPE_CHECKING

from .. import _vocab
from .._env import driver_version, git_info
from .._fileio import refusal, replace_refusal, write_atomic

if TYPE_CHECKING:
    import torch

from ..check.capture.isolate import UserExit, interrupted, no_process_exit, parse_seconds, real_interrupts


#: seconds one case may run: the slowest boundary case under the interpreter (fused_moe, paged_attention) takes
#: 6-7 s on 2 CPU cores, the slowest on an H200 6.5 s; the large ones allocate tens of GB
DEFAULT_CASE_TIMEOUT = 300.0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tritonkit validate",
        description=(
            "Compare ops (built-in ones, or your own OpSpecs) with their float64 references at boundary shapes and on "
            "difficult inputs. On a GPU the kernels run natively; without one they run under Triton's interpreter "
            "(TRITON_INTERPRET=1, set before your files are imported)."
        ),
    )
    p.add_argument(
        "ops",
        nargs="*",
        metavar="OP",
        help="a built-in op (rms_norm), a python file (every OpSpec at its top level), a module "
        "(mypkg.specs) or one spec (mypkg.specs:MY_SPEC, path/to/specs.py:MY_SPEC); "
        "default: all built-in ops",
    )
    p.add_argument(
        "--shapes",
        default="boundary",
        choices=_vocab.SHAPE_SPACES,
        help="shape space (large: GPU only, tensors past 2^31 elements)",
    )
    p.add_argument("--families", nargs="+", metavar="FAMILY", help="input families (default: each op's own)")
    p.add_argument(
        "--dtype", nargs="+", dest="dtypes", metavar="DTYPE", help="float16 bfloat16 float32 (default: each op's own)"
    )
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON (a FILE that exists: with --force)")
    p.add_argument(
        "--force",
        action="store_true",
        help="replace an existing --json FILE (never a file the run reads: a spec file, an op's source)",
    )
    p.add_argument(
        "--case-timeout",
        type=parse_seconds,
        default=DEFAULT_CASE_TIMEOUT,
        metavar="SECONDS",
        help=f"fail a case that runs longer, naming it (default {DEFAULT_CASE_TIMEOUT:g}; 0: no limit); under "
        f"`tritonkit validate` one that cannot be stopped ends the run, exit 2",
    )
    p.add_argument("--quiet", action="store_true", help="print failures and the summary only")
    p.add_argument(
        "--all",
        action="store_true",
        dest="every_row",
        help="print a row for every case (default: the failures, and one line per op for its passes)",
    )
    return p


def _dtype(name: str) -> torch.dtype | None:
    import torch

    d = getattr(torch, name, None)
    return d if isinstance(d, torch.dtype) else None


def _writable(path: str) -> str | None:
    """Why ``path`` cannot be written (a missing folder, a directory, no permission), or None when it can. Opened
    for append so an existing file is left as it is; a file made only to find out is removed again. A disk or
    another device write_atomic would refuse is refused here, before anything opens it."""
    if why := refusal(path):
        return why
    existed = os.path.lexists(path)
    try:
        with open(path, "a"):
            pass
    except OSError as e:
        return e.strerror or type(e).__name__
    if not existed:
        os.remove(path)
    return None


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    # torch and the specs after the arguments: `tritonkit validate --help` needs neither
    import torch

    from ..spec import dtype_name

    # the results file stays where it was named when the ops' code calls os.chdir
    cwd = os.getcwd()
    json_path = os.path.abspath(args.json) if args.json is not None else None
    # a results file that cannot be written must fail now, not after a run of minutes; the spec files named are
    # inputs, whatever the --force
    named = [(f, f"the spec file {t}") for t in args.ops if (f := _target_file(t, cwd))]
    why = (replace_refusal(json_path, args.force, named) or _writable(json_path)) if json_path is not None else None
    if why:
        print(f"tritonkit validate: --json {args.json!r}: cannot write the results there ({why})", file=sys.stderr)
        return 2
    on_gpu = torch.cuda.is_available()
    if not on_gpu:
        if args.shapes == "large":
            print("tritonkit validate: --shapes large needs a CUDA GPU (tensors past 2^31 elements)", file=sys.stderr)
            return 2
        if args.shapes == "sweep":
            print(
                "tritonkit validate: --shapes sweep is GPU-sized (num_tokens up to 65536 for every model: hours "
                "under Triton's interpreter); on a CPU validate the boundary shapes",
                file=sys.stderr,
            )
            return 2
        # must be set before any kernel module is imported: triton.jit reads it at decoration time
        os.environ["TRITON_INTERPRET"] = "1"
        # the interpreter runs one program at a time; torch's intra-op threads only contend on small tensors
        torch.set_num_threads(1)
    from .. import ops as ops_mod
    from ..spec import FAMILIES
    from . import validate as v
    from .load import LoadError, load_specs
    from .report import print_table

    specs = []
    for target in args.ops or ops_mod.OP_NAMES:
        try:
            with no_process_exit(), real_interrupts():
                # a relative path names a file where validate was started, even after an import called os.chdir
                found = load_specs(target, ops_mod.OP_NAMES, cwd)
        except LoadError as e:
            print(f"tritonkit validate: {e}", file=sys.stderr)
            return 2
        except (SystemExit, UserExit) as e:
            what = f"sys.exit({e.code!r})" if isinstance(e, SystemExit) else "os._exit()"
            print(f"tritonkit validate: {target}: importing it called {what}; nothing was validated", file=sys.stderr)
            return 2
        specs += [s for s in found if all(s is not t for t in specs)]
    names = [s.name for s in specs]
    for f in args.families or ():
        if f not in FAMILIES:
            print(f"tritonkit validate: unknown family {f!r}; known: {', '.join(FAMILIES)}", file=sys.stderr)
            return 2
    bad = [d for d in args.dtypes or () if _dtype(d) is None]
    if bad:
        print(
            f"tritonkit validate: unknown dtype {bad[0]!r} (--dtype takes torch names: float16, bfloat16, float32)",
            file=sys.stderr,
        )
        return 2
    dtypes = [_dtype(d) for d in args.dtypes] if args.dtypes else None
    for s in specs:
        if not s.shapes(args.shapes):
            field = "sweep_shape" if args.shapes == "sweep" else args.shapes
            print(
                f"tritonkit validate: {s.name} declares no {args.shapes} shapes (OpSpec.{field}); skipped",
                file=sys.stderr,
            )
    cases = [(s, c) for s in specs for c in v.iter_cases(s, args.shapes, dtypes, args.families)]
    if not cases:
        supported = "; ".join(
            f"{s.name}: dtypes {', '.join(dtype_name(d) for d in s.dtypes)}, families {', '.join(s.families)}"
            for s in specs
        )
        print(f"tritonkit validate: the options select no case ({supported})", file=sys.stderr)
        return 2
    if (why := _untolerated(cases)) is not None:
        print(f"tritonkit validate: {why}", file=sys.stderr)
        return 2
    # the ops' own modules (kernels, references), known once the specs are loaded
    if json_path is not None and (why := replace_refusal(json_path, args.force, named + _spec_files(specs))):
        print(f"tritonkit validate: --json {args.json!r}: cannot write the results there ({why})", file=sys.stderr)
        return 2
    where = torch.cuda.get_device_name() if on_gpu else "CPU (Triton interpreter)"
    listed = ", ".join(names) if len(", ".join(names)) <= 48 else f"{len(names)} ops"
    print(f"tritonkit validate: {len(cases)} cases, {listed}, shapes={args.shapes}, on {where}")
    meta = {
        "command": "tritonkit validate " + " ".join(argv),
        "device": where,
        "shapes": args.shapes,
        "torch": torch.__version__,
        "triton": _triton_version(),
        "python": platform.python_version(),
        "interpreter": not on_gpu,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "git_sha": git_info()[0],
        "cases": len(cases),
        "complete": False,
        "seconds": 0.0,
    }
    if on_gpu:
        meta["driver"] = driver_version()
    report = _JsonReport(json_path, meta, replace=args.force) if json_path is not None else None
    try:
        results, elapsed, caught = _run(specs, args, dtypes, len(cases), report)
        print_table(results, failures_only=args.quiet, every_row=args.every_row and not args.quiet)
        _summarize_warnings(caught)
        n_fail = sum(not r.passed for r in results)
        print(f"{len(results) - n_fail} passed, {n_fail} failed in {elapsed:.1f} s")
        if report is not None:
            report.write(results, elapsed, complete=True)
    except OSError as e:
        print(
            f"tritonkit validate: --json {args.json!r}: cannot write the results there ({e.strerror or e})",
            file=sys.stderr,
        )
        return 2
    return 1 if n_fail else 0


def _target_file(target: str, cwd: str) -> str | None:
    """The file a target names by path (``specs.py``, ``path/specs.py:MY_SPEC``), or None (an op, a module)."""
    for text in (target, target.rpartition(":")[0]):
        p = os.path.join(cwd, text) if text else ""
        if p and os.path.exists(p) and not os.path.isdir(p):
            return p
    return None


def _spec_files(specs) -> list[tuple[str, str]]:
    """(file, what it is) of the modules defining each spec and its functions: files the run reads."""
    out = []
    for s in specs:
        for part in (s.fn, s.reference, s.make_inputs, s.call):
            f = getattr(sys.modules.get(getattr(part, "__module__", None) or ""), "__file__", None)
            if isinstance(f, str):
                out.append((f, f"a source of the op {s.name}"))
    return out


def _untolerated(cases) -> str | None:
    """The first (spec, dtype) of the cases with no tolerance to compare by, said in a line, or None."""
    from ..spec import dtype_name
    from ..tolerance import TOLERANCES

    for s, d in {(id(s), d): (s, d) for s, (_, d, _) in cases}.values():
        try:
            s.tolerance_for(d)
        except ValueError:
            return (
                f"{s.name}: dtype {dtype_name(d)} has no tolerance (the table knows "
                f"{', '.join(map(dtype_name, TOLERANCES))}); give one in OpSpec.tolerance, or leave it out of "
                f"OpSpec.dtypes"
            )
    return None


def _run(specs, args, dtypes, total: int, report):
    """Run the cases with the progress shown and the report written as they finish: (results, seconds, the warnings
    they raised). Interrupted, the report is marked so before the interrupt goes on."""
    from . import validate as v
    from .report import progress

    results: list = []
    t0 = time.perf_counter()
    try:
        if report is not None:
            report.write(results)
        with progress(total) as advance:

            def on_result(r):
                results.append(r)
                advance(r)
                if report is not None:
                    report.tick(results, time.perf_counter() - t0)
                if interrupted():  # a Ctrl-C the case's code caught still ends the run
                    raise KeyboardInterrupt

            # warnings wait for the table: interleaved with the progress they hide it
            with warnings.catch_warnings(record=True) as caught, no_process_exit(), real_interrupts():
                warnings.simplefilter("always")
                v.run(
                    specs,
                    args.shapes,
                    dtypes,
                    args.families,
                    device=v.default_device(),
                    on_result=on_result,
                    timeout=args.case_timeout or None,
                )
    except KeyboardInterrupt:
        if report is not None:
            with contextlib.suppress(OSError):
                report.write(results, time.perf_counter() - t0, interrupted=True)
        raise
    return results, time.perf_counter() - t0, caught


_FLOATING = re.compile(r"(overflow|invalid value|divide by zero|underflow) encountered")


def _summarize_warnings(caught: list) -> None:
    """numpy's floating-point warnings (a kernel's NaN and overflow on the hard families: expected) in one line;
    any other warning once, with where it came from."""
    fp = [w for w in caught if issubclass(w.category, RuntimeWarning) and _FLOATING.search(str(w.message))]
    if fp:
        print(
            f"tritonkit validate: {len(fp)} floating-point warnings from numpy during the cases (first: "
            f"{fp[0].message}, at {fp[0].filename}:{fp[0].lineno}); expected where a case makes NaN or inf",
            file=sys.stderr,
        )
    seen = set()
    for w in caught:
        key = (w.category, str(w.message), w.filename, w.lineno)
        if w not in fp and key not in seen:
            seen.add(key)
            print(warnings.formatwarning(w.message, w.category, w.filename, w.lineno).rstrip(), file=sys.stderr)


class _JsonReport:
    """The --json file, written as the run goes: ``meta.complete`` is false until the last case is in, so a run
    that dies (a kernel that corrupted the heap) leaves a report that says it is incomplete. Each write goes to a
    temporary name and is renamed over the file: the file is always whole."""

    def __init__(self, path: str, meta: dict, replace: bool = False):
        self.path, self.meta, self.last, self.cost = path, meta, 0.0, 0.0
        # the first write creates the file (or replaces one, with --force); the later ones replace the run's own
        self.replace = replace

    def tick(self, results: list, seconds: float) -> None:
        # rewriting the whole file after every case is quadratic in a 2000-case run: writing at most a tenth of
        # the time bounds the cost, and still writes after each case while the file is small or cases slow
        if time.monotonic() - self.last >= 10 * self.cost:
            self.write(results, seconds)

    def write(self, results: list, seconds: float = 0.0, complete: bool = False, interrupted: bool = False):
        self.meta.update(seconds=seconds, complete=complete, cases_done=len(results))
        if interrupted:
            self.meta["interrupted"] = True
        t0 = time.monotonic()
        write_atomic(
            self.path,
            json.dumps({"meta": self.meta, "results": [r.as_dict() for r in results]}, indent=1, default=str),
            replace=self.replace,
        )
        self.replace = True
        self.last = time.monotonic()
        self.cost = self.last - t0


def _triton_version() -> str:
    import triton

    return triton.__version__
