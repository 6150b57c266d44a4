"""Eager PyTorch oracle for rms_norm. Float64 inputs compute in float64; other dtypes in float32, as eager
PyTorch would, and return the input dtype."""

import torch


def rms_norm_reference(x, weight, eps=1e-6, residual=None, dtype=None):
    dtype = dtype or x.dtype
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    out_dtype = torch.float64 if x.dtype == torch.float64 else dtype
    xc = x.to(compute)
    r = None
    if residual is not None:
        # the op's contract: r = x + residual rounded to x's dtype, and y normalizes that rounded r
        r = (xc + residual.to(compute)).to(dtype)
        xc = r.to(compute)
    y = xc * torch.rsqrt(xc.square().mean(-1, keepdim=True) + eps) * weight.to(compute)
    if residual is None:
        return y.to(out_dtype)
    return y.to(out_dtype), r.to(out_dtype)
