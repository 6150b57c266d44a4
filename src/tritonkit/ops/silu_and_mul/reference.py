"""Eager PyTorch oracle for silu_and_mul. Float64 inputs compute in float64; other dtypes in float32, as eager
PyTorch would, and return the input dtype."""

import torch

# rows per step, so a reference over a 2^31-element input does not hold several full-size float64 temporaries
_CHUNK_ROWS = 1 << 16


def silu_and_mul_reference(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    x2 = x.reshape(-1, 2 * d)
    y = torch.empty((x2.shape[0], d), dtype=x.dtype, device=x.device)
    for start in range(0, x2.shape[0], _CHUNK_ROWS):
        xc = x2[start : start + _CHUNK_ROWS].to(compute)
        # silu(g) = g * sigmoid(g); silu(-inf) is NaN, as the kernel's g / (1 + exp(-g))
        y[start : start + _CHUNK_ROWS] = (torch.nn.functional.silu(xc[:, :d]) * xc[:, d:]).to(x.dtype)
    return y.reshape(*x.shape[:-1], d)
