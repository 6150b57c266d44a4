"""Run an op against its float64 reference: one case, or every case of a shape space.

Usable from a user's own pytest suite::

    from tritonkit.testing import assert_valid
    from tritonkit.ops import get_spec

    @pytest.mark.parametrize("shape", get_spec("rms_norm").boundary, ids=lambda s: s.id)
    def test_rms_norm(shape):
        assert_valid(get_spec("rms_norm"), shape, torch.float16, "near_max")
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import time
import traceback
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

import torch

from ..check.capture.isolate import CaseTimeout, UserExit, raised_by_code, this_process_only, time_limit
from ..ops import poison_outputs
from ..ops import explain_launch_error
from ..spec import OpSpec, Shape, as_shape, dtype_name, upcast
from .metric import Comparison, compare
from .guard import COPY_LIMIT, GuardAllocations, changed_inputs, guard_inputs, name_allocations
from .inputs import Fill
from .interpreter import bf16_product_defect


@dataclasses.dataclass
class CaseResult:
    op: str
    shape: str
    dtype: str
    family: str
    passed: bool
    error: float  # the worst output's tolerance ratio (inf when an output is missing or an exception was raised)
    rtol: float
    atol: float
    detail: str  # the worst output's description, or the exception
    outputs: dict[str, dict] = dataclasses.field(default_factory=dict)
    seconds: float = 0.0
    # writes out of bounds and overwritten inputs, each naming the tensor and the first offending element
    violations: list[str] = dataclasses.field(default_factory=list)
    # on a failed case, how eager PyTorch (the reference in the op's dtype) fares on the same inputs: a float32
    # limit fails there too, a kernel bug does not
    eager: str = ""

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def default_device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


@contextlib.contextmanager
def quiet_interpreter() -> Iterator[None]:
    """Silence, for the duration only, what Triton's interpreter warns about the hard inputs: it evaluates kernels
    with numpy, which warns on the overflow, NaN and inf that the input families exist for, and on its own
    ``int(array)`` (numpy >= 1.25). Warnings from anywhere else, the caller's code included, still show."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", r"(overflow|invalid value|divide by zero|underflow) encountered", RuntimeWarning, r"triton\."
        )
        warnings.filterwarnings("ignore", r"Conversion of an array with ndim > 0", DeprecationWarning, r"triton\.")
        yield


def validate_case(
    spec: OpSpec,
    shape: Shape | Mapping,
    dtype: torch.dtype,
    family: str = "randn",
    *,
    device: torch.device | str | None = None,
    seed: int = 0,
    timeout: float | None = None,
) -> CaseResult:
    """Run ``spec`` once on ``shape``/``dtype``/``family`` inputs and compare every output with the reference.
    ``shape`` is a :class:`~tritonkit.spec.Shape` or a dict of named sizes.

    Outputs the op allocates start poisoned (NaN; the minimum of a signed integer dtype), so an element the kernel
    never writes fails; outputs the op updates in place are compared whole. Each allocated output must be in the
    case's dtype, or the one ``spec.output_dtypes`` declares for it. Exceptions are caught and reported as a
    failed case, and so is a case that runs past ``timeout`` seconds (None: no limit).
    """
    shape = as_shape(shape)
    label = f"{spec.name} [{shape.id}] {dtype_name(dtype)} {family}"
    t0 = time.perf_counter()
    try:
        # a process the op forked ends here instead of validating the rest in parallel with this one
        with this_process_only(), quiet_interpreter(), time_limit(timeout, label):
            return _validate_case(spec, shape, dtype, family, device, seed)
    except CaseTimeout as e:
        tol = spec.tolerance_for(dtype)
        return CaseResult(
            spec.name,
            shape.id,
            dtype_name(dtype),
            family,
            False,
            float("inf"),
            tol.rtol,
            tol.atol,
            f"the case {e}: a failure",
            seconds=time.perf_counter() - t0,
        )


def _validate_case(spec: OpSpec, shape: Shape, dtype: torch.dtype, family: str, device, seed: int) -> CaseResult:
    device = torch.device(device) if device is not None else default_device()
    tol = spec.tolerance_for(dtype)
    res = CaseResult(spec.name, shape.id, dtype_name(dtype), family, False, float("inf"), tol.rtol, tol.atol, "")
    t0 = time.perf_counter()
    try:
        inputs = spec.make_inputs(shape, dtype, Fill(family, device, seed))
        in_dtypes = {k: t.dtype for k, t in inputs.items() if isinstance(t, torch.Tensor)}
        # a layer too large to upcast whole (DeepSeek-V3's experts: 90 GB in float64) is checked on sampled rows
        ref_inputs, rows = spec.oracle_inputs(inputs) if spec.oracle_inputs else (upcast(inputs, device), {})
        outs = _guarded_call(spec, inputs, device, res)
        ref_before = {
            k: t.clone()
            for k, t in ref_inputs.items()
            if isinstance(t, torch.Tensor) and k not in spec.inplace and t.untyped_storage().nbytes() <= COPY_LIMIT
        }
        refs = spec.reference(ref_inputs, dtype)
        for what, d in (("call", outs), ("reference", refs)):
            if not isinstance(d, Mapping):
                raise TypeError(
                    f"{what} returned {type(d).__name__}, not a dict of named outputs "
                    f"({{'out': tensor}} matches the default call of an fn returning one tensor)"
                )
        _check_reference(ref_inputs, ref_before, refs)
        scales = spec.error_scale(ref_inputs) if spec.error_scale else {}
        if set(outs) != set(refs):
            raise AssertionError(f"op returned outputs {sorted(outs)}, reference {sorted(refs)}")
        undeclared = sorted(set(spec.output_dtypes) - set(outs))
        if undeclared:
            raise AssertionError(
                f"output_dtypes names {undeclared}, which the op does not return (it returns {sorted(outs)})"
            )
        for name, t in outs.items():
            # an op allocates its outputs in the case's dtype (x's dtype, q's dtype), or the one its contract fixes,
            # on the inputs' device: a kernel that skipped its final cast would otherwise pass, and hide overflow
            # to inf as well. In-place outputs are the caller's buffers, in whatever dtype the caller chose.
            if name in spec.inplace and name not in spec.output_dtypes:
                continue
            want = spec.output_dtypes.get(name, dtype)
            if t.dtype != want or t.device.type != device.type:
                raise AssertionError(
                    f"output {name} is {dtype_name(t.dtype)} on {t.device.type}, expected "
                    f"{dtype_name(want)} on {device.type}"
                )
        worst: tuple[str, Comparison] | None = None
        for name in outs:
            got = outs[name] if rows.get(name) is None else outs[name][rows[name]]
            c = compare(got, refs[name], tol, scales.get(name))
            res.outputs[name] = {
                "error": c.error,
                "max_abs": c.max_abs,
                "rel_l2": c.rel_l2,
                "mismatches": c.mismatches,
                "numel": c.numel,
            }
            if worst is None or (c.error > worst[1].error) or (not c.passed and worst[1].passed):
                worst = (name, c)
        assert worst is not None
        res.error = worst[1].error
        res.passed = all(v["mismatches"] == 0 and v["error"] <= 1.0 for v in res.outputs.values())
        res.detail = f"{worst[0]}: {worst[1].describe()}"
        if not res.passed:
            res.eager = _eager(spec, ref_inputs, in_dtypes, dtype, refs, tol, scales)
            res.detail += f"; eager PyTorch on the same inputs: {res.eager}"
            if torch.bfloat16 in (dtype, *in_dtypes.values()) and (defect := bf16_product_defect()):
                res.detail += (
                    f"; but {defect}: a bf16 product in the kernel may be the interpreter's error, not the kernel's "
                    f"(multiply in float32, x.to(tl.float32), or validate on a GPU)"
                )
        del ref_inputs
        if res.violations:
            res.passed, res.error = False, float("inf")
            res.detail = res.violations[0] + (
                f" (and {len(res.violations) - 1} more)" if len(res.violations) > 1 else ""
            )
    except KeyboardInterrupt as e:
        if not raised_by_code(e):
            raise
        # raised by the op, make_inputs or the reference, not by a Ctrl-C: this case fails, the run goes on
        res.detail = "the case's code raised KeyboardInterrupt (no Ctrl-C was pressed): a failure"
        res.outputs["exception"] = {"traceback": traceback.format_exc(limit=6)}
    except (SystemExit, UserExit) as e:
        # sys.exit / os._exit in the op, make_inputs or the reference would end the run with exit 0 and no result
        what = f"sys.exit({e.code!r})" if isinstance(e, SystemExit) else "os._exit()"
        res.detail = f"the case's code called {what}, which would end the run with no result: a failure"
        res.outputs["exception"] = {"traceback": traceback.format_exc(limit=6)}
    except Exception as e:  # noqa: BLE001 - reported as a failed case, with the exception, so one bad case never hides the rest
        # "0 active drivers" from a user's kernel gets the sentence tritonkit's own ops give
        better = explain_launch_error(e)
        res.detail = f"{type(better or e).__name__}: {better or e}".strip()
        res.outputs["exception"] = {"traceback": traceback.format_exc(limit=6)}
    finally:
        res.seconds = time.perf_counter() - t0
    return res


class ReferenceFault(AssertionError):
    """The reference broke its contract: the comparison would blame the op for the reference's error."""


def _check_reference(ref_inputs: Mapping, before: Mapping, refs: Mapping) -> None:
    """Raise :class:`ReferenceFault` when the reference changed an input it does not own (``before`` holds copies
    of those), or returned a floating output less precise than its floating inputs (a ``.to(dtype)`` or ``.float()``
    on the way out: an oracle that rounds like the op it judges)."""
    changed = [c.removeprefix("input ") for c in changed_inputs(before, ref_inputs)]
    if changed:
        raise ReferenceFault(
            f"the reference, not the op, is at fault: it changed its input in place ({changed[0]}); copy before "
            f"writing (an input it updates on purpose belongs in OpSpec.inplace)"
        )
    widest = max(
        (t.dtype for t in ref_inputs.values() if isinstance(t, torch.Tensor) and t.is_floating_point()),
        key=lambda d: torch.finfo(d).bits,
        default=None,
    )
    for name, t in refs.items():
        if (
            widest is not None
            and isinstance(t, torch.Tensor)
            and t.is_floating_point()
            and torch.finfo(t.dtype).bits < torch.finfo(widest).bits
        ):
            raise ReferenceFault(
                f"the reference, not the op, is at fault: it returned {name} in {dtype_name(t.dtype)} from "
                f"{dtype_name(widest)} inputs; it must compute in, and return, the precision it is given (no "
                f".to(dtype) or .float() on its outputs)"
            )


def _eager(
    spec: OpSpec, ref_inputs: dict, in_dtypes: dict, dtype: torch.dtype, refs: Mapping, tol, scales: Mapping
) -> str:
    """The reference run in the op's dtype on the case's inputs (the float64 copies cast back: exact), compared
    with the float64 reference like the kernel was: its worst output, described."""
    try:
        inputs = {
            k: v.to(in_dtypes[k]) if k in in_dtypes and isinstance(v, torch.Tensor) else v
            for k, v in ref_inputs.items()
        }
        got = spec.reference(inputs, dtype)
        worst = max(((k, compare(got[k], refs[k], tol, scales.get(k))) for k in refs), key=lambda kc: kc[1].error)
    except Exception as e:  # noqa: BLE001 - the comparison is a hint; the case has failed already
        return f"raised {type(e).__name__}: {e}"
    return f"{'passes' if worst[1].passed else 'fails too'}, {worst[0]}: {worst[1].describe()}"


def _guarded_call(spec: OpSpec, inputs: dict, device: torch.device, res: CaseResult):
    """``spec.call`` with every tensor inside guard regions (see :mod:`.guard`); what broke them, and the inputs
    the op changed without owning them, go to ``res.violations``."""
    inputs, in_guards = guard_inputs(inputs)
    before = {
        k: t.clone()
        for k, t in inputs.items()
        if isinstance(t, torch.Tensor) and k not in spec.inplace and t.untyped_storage().nbytes() <= COPY_LIMIT
    }
    mode = GuardAllocations()
    with poison_outputs(), mode:
        outs = spec.call(inputs)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    if isinstance(outs, Mapping):
        name_allocations(mode.guards, outs)
        # an input whose storage comes back as an output (or holds an in-place one) is the op's to write
        owned = {t.untyped_storage().data_ptr() for t in outs.values() if isinstance(t, torch.Tensor)}
        owned |= {
            inputs[k].untyped_storage().data_ptr() for k in spec.inplace if isinstance(inputs.get(k), torch.Tensor)
        }
        before = {k: v for k, v in before.items() if inputs[k].untyped_storage().data_ptr() not in owned}
    for g in in_guards + mode.guards:
        if (why := g.breach()) is not None:
            res.violations.append(f"{g.name}: {why}")
    res.violations += changed_inputs(before, inputs)
    return outs


def assert_valid(spec: OpSpec, shape: Shape | Mapping, dtype: torch.dtype, family: str = "randn", **kw) -> CaseResult:
    """``validate_case`` that raises AssertionError with the details when the case fails."""
    r = validate_case(spec, shape, dtype, family, **kw)
    if not r.passed:
        tb = r.outputs.get("exception", {}).get("traceback", "")
        raise AssertionError(
            f"{r.op} [{r.shape}] {r.dtype} {r.family}: {r.detail} (rtol {r.rtol}, atol {r.atol})\n{tb}"
        )
    return r


def iter_cases(
    spec: OpSpec,
    space: str = "boundary",
    dtypes: Sequence[torch.dtype] | None = None,
    families: Sequence[str] | None = None,
) -> Iterator[tuple[Shape, torch.dtype, str]]:
    """Every (shape, dtype, family) of a shape space, restricted to what the spec supports."""
    dts = [d for d in (dtypes or spec.dtypes) if d in spec.dtypes]
    fams = [f for f in (families or spec.families) if f in spec.families]
    for shape, dtype, fam in itertools.product(spec.shapes(space), dts, fams):
        # large cases need GPU memory and GPU time: one data family is enough to prove the addressing
        if space == "large" and fam != fams[0]:
            continue
        yield shape, dtype, fam


def run(
    specs: Iterable[OpSpec],
    space: str = "boundary",
    dtypes=None,
    families=None,
    *,
    device=None,
    on_result: Callable[[CaseResult], None] | None = None,
    timeout: float | None = None,
) -> list[CaseResult]:
    results = []
    for spec in specs:
        for shape, dtype, fam in iter_cases(spec, space, dtypes, families):
            r = validate_case(spec, shape, dtype, fam, device=device, timeout=timeout)
            results.append(r)
            if on_result:
                on_result(r)
            if space == "large" and torch.cuda.is_available():
                # large cases hold several GB each; give it back before the next one
                torch.cuda.empty_cache()
    return results
