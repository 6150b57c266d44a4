"""Comparing an op's output with its float64 reference.

The metric: ``error = max |out - ref| / (atol + rtol * |ref|)`` over finite reference elements, so an output
passes at ``error <= 1``. Non-finite values are matched exactly: where the reference is NaN the output must be NaN,
and where the reference is +-inf, or is finite but rounds to +-inf in the output's dtype, the output must be that
infinity. A NaN or inf in the output where the reference is finite makes the error inf. The relative L2 error
``||out - ref|| / ||ref||`` over finite elements is reported beside it.

Integer and bool outputs (ids, indices, counts, masks) are compared exactly, whatever the tolerance: any element
that differs from the reference is a mismatch and makes the error inf (0 when all match). The comparison is done
in int64 where the reference is an integer tensor too, so int64 values past 2^53 stay exact.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from ..tolerance import Tolerance

_CHUNK = 1 << 26  # elements compared per step, so a 2^31-element output does not need 5 float64 copies at once


@dataclasses.dataclass(frozen=True)
class Comparison:
    error: float  # max tolerance ratio; <= 1 passes
    max_abs: float
    rel_l2: float
    mismatches: int  # elements outside tolerance or with mismatched non-finite values
    numel: int
    first_bad: tuple[int, ...] | None
    first_bad_values: tuple[float, float] | None  # (out, ref) at first_bad; ints for integer outputs

    @property
    def passed(self) -> bool:
        return self.mismatches == 0 and self.error <= 1.0

    def describe(self) -> str:
        if self.passed:
            return f"error {self.error:.3g} (max abs {self.max_abs:.3g}, rel L2 {self.rel_l2:.3g})"
        o, r = self.first_bad_values or (math.nan, math.nan)
        return (
            f"{self.mismatches}/{self.numel} elements mismatch, error {self.error:.3g}; first at "
            f"{self.first_bad}: got {o!r}, expected {r!r}"
        )


def _expected(ref: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    """The reference with overflow to +-inf applied as the output dtype would round it."""
    if out_dtype.is_floating_point and out_dtype.itemsize < 8 and torch.finfo(out_dtype).max < 1e300:
        fmax = torch.finfo(out_dtype).max
        if "float8" in str(out_dtype):
            return ref  # fp8 formats here saturate or have no inf; the reference models that itself
        # round-to-nearest overflows past max + half an ulp at the top binade
        top_ulp = 2.0 ** math.floor(math.log2(fmax)) * torch.finfo(out_dtype).eps
        limit = fmax + 0.5 * top_ulp
        over = ref.abs() >= limit
        if over.any():
            ref = torch.where(
                over, torch.copysign(torch.tensor(math.inf, dtype=ref.dtype, device=ref.device), ref), ref
            )
    return ref


def _exact(dtype: torch.dtype) -> bool:
    return not (dtype.is_floating_point or dtype.is_complex)


def _compare_exact(out: torch.Tensor, ref: torch.Tensor) -> Comparison:
    """Integer or bool ``out`` against ``ref``: equal element for element, or a mismatch."""
    as_int = _exact(ref.dtype)
    o_all, r_all = out.reshape(-1), ref.reshape(-1)
    n = o_all.numel()
    max_abs = sq_err = sq_ref = 0.0
    bad_total = 0
    first_bad = first_vals = None
    for start in range(0, n, _CHUNK):
        o = o_all[start : start + _CHUNK].to(torch.int64 if as_int else torch.float64)
        r = r_all[start : start + _CHUNK].to(device=o.device, dtype=o.dtype)
        bad = o != r
        nb = int(bad.sum())
        if nb:
            if first_bad is None:
                i = int(bad.nonzero()[0, 0])
                first_bad = tuple(int(v) for v in torch.unravel_index(torch.tensor(start + i), tuple(out.shape)))
                first_vals = (o[i].item(), r[i].item())
            bad_total += nb
        od, rd = o.to(torch.float64), r.to(torch.float64)
        diff = (od - rd).abs()
        max_abs = max(max_abs, float(diff.nan_to_num(nan=math.inf).max()))
        sq_err += float(diff.square().sum())
        sq_ref += float(rd.square().sum())
    rel_l2 = math.sqrt(sq_err / sq_ref) if sq_ref > 0 else math.sqrt(sq_err)
    return Comparison(math.inf if bad_total else 0.0, max_abs, rel_l2, bad_total, n, first_bad, first_vals)


def compare(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance, scale: torch.Tensor | None = None) -> Comparison:
    """Compare ``out`` (any float dtype) with ``ref`` (float64) elementwise under ``tol``; ``scale`` (optional, the
    magnitude of the terms behind each element) widens the bound by ``tol.compute_eps * scale``. An integer or bool
    ``out`` is compared exactly instead (``tol`` and ``scale`` unused)."""
    if tuple(out.shape) != tuple(ref.shape):
        raise ValueError(f"output shape {tuple(out.shape)} differs from the reference's {tuple(ref.shape)}")
    if _exact(out.dtype):
        return _compare_exact(out, ref)
    out_dtype = out.dtype
    o_all = out.reshape(-1)
    r_all = ref.reshape(-1)
    s_all = None if scale is None else scale.reshape(-1)
    n = o_all.numel()
    error = 0.0
    max_abs = 0.0
    sq_err = 0.0
    sq_ref = 0.0
    bad_total = 0
    first_bad = None
    first_vals = None
    for start in range(0, max(n, 1), _CHUNK):
        o = o_all[start : start + _CHUNK].to(torch.float64)
        r = _expected(r_all[start : start + _CHUNK].to(device=o.device, dtype=torch.float64), out_dtype)
        if o.numel() == 0:
            break
        r_fin = torch.isfinite(r)
        # non-finite reference values must be matched exactly (NaN by NaN, inf by the same inf)
        special_bad = (~r_fin) & ~((torch.isnan(r) & torch.isnan(o)) | (o == r))
        o_fin = torch.isfinite(o)
        diff = torch.where(r_fin & o_fin, (o - r).abs(), torch.zeros_like(o))
        bound = tol.atol + tol.rtol * r.abs().where(r_fin, torch.zeros_like(r))
        if s_all is not None:
            sc = s_all[start : start + _CHUNK].to(device=o.device, dtype=torch.float64)
            bound = bound + tol.compute_eps * sc.where(torch.isfinite(sc), torch.zeros_like(sc))
        ratio = diff / bound
        ratio = torch.where(r_fin & ~o_fin, torch.full_like(ratio, math.inf), ratio)
        bad = special_bad | (ratio > 1.0)
        nb = int(bad.sum())
        if nb:
            if first_bad is None:
                i = int(bad.nonzero()[0, 0])
                first_bad = tuple(int(v) for v in torch.unravel_index(torch.tensor(start + i), tuple(out.shape)))
                first_vals = (float(o[i]), float(r[i]))
            bad_total += nb
            if bool(special_bad.any()):
                error = math.inf
        if ratio.numel():
            error = max(error, float(ratio.max()))
            max_abs = max(max_abs, float(diff.max()))
        both = r_fin & o_fin
        sq_err += float(((o - r) * both).square().where(both, torch.zeros_like(o)).sum())
        sq_ref += float(r.where(r_fin, torch.zeros_like(r)).square().sum())
    rel_l2 = math.sqrt(sq_err / sq_ref) if sq_ref > 0 else math.sqrt(sq_err)
    return Comparison(error, max_abs, rel_l2, bad_total, n, first_bad, first_vals)
