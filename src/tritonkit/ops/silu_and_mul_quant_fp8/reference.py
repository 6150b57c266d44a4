"""Float64 oracle for silu_and_mul_quant_fp8, rounded where vLLM's kernels round.

``exp`` is computed in float64 and rounded once to float32 (the kernel does the same, a correctly rounded expf, or
for bfloat16 static and per-token on a GPU a float32 exp proven to give the same activation for every input); every
other step is exact in float64 and then rounded as vLLM's float32 (or x-dtype) operation rounds, so the fp8
codes and scales match the op's bit for bit. ``dtype`` is the op's dtype (x's before the harness upcast it).
"""

import torch

from .. import _fp8
from .._fp8 import rnd

F32 = torch.float32
# rows per step, so a reference over a 2^31-element input does not hold several full-size float64 temporaries
_CHUNK_ROWS = 1 << 14


def _activation(x: torch.Tensor, quant: str, dtype: torch.dtype) -> torch.Tensor:
    d = x.shape[-1] // 2
    g, u = x[:, :d].to(torch.float64), x[:, d:].to(torch.float64)
    e = rnd(torch.exp(-g), F32)
    if quant == "group":
        # vLLM's silu_and_mul_per_block_quant: float32 throughout, sigmoid as a reciprocal
        sig = rnd(1.0 / rnd(1.0 + e, F32), F32)
        return rnd(rnd(g * sig, F32) * u, F32)
    # vLLM's silu_and_mul (and silu_and_mul_quant): silu rounded to x's dtype, the product rounded again
    return rnd(rnd(rnd(g / rnd(1.0 + e, F32), F32), dtype) * u, dtype)


def silu_and_mul_quant_fp8_reference(x, quant="group", scale=None, scale_ub=None, group_size=128, dtype=None) -> dict:
    """``{"q": fp8 [..., d], "scale": float32 scales}`` (static: the one given): ``[rows, 1]`` per token, ``[rows,
    d / group_size]`` per group. Given float64 inputs both are float64, holding those values."""
    dtype = dtype or x.dtype
    d = x.shape[-1] // 2
    x2 = x.reshape(-1, 2 * d)
    qs, ss = [], []
    for start in range(0, max(x2.shape[0], 1), _CHUNK_ROWS):
        y = _activation(x2[start : start + _CHUNK_ROWS], quant, dtype)
        if quant == "static":
            qs.append(_fp8.saturate(rnd(y * _fp8.reciprocal(scale.reshape(())), F32)))
        elif quant == "token":
            s = _fp8.dynamic_scale(_fp8.nan_dropped_amax(y, -1), scale_ub)
            qs.append(_fp8.saturate(rnd(y / s, F32)))
            ss.append(s)
        else:
            yg = y.reshape(y.shape[0], d // group_size, group_size)
            s = _fp8.dynamic_scale(_fp8.nan_dropped_amax(yg, -1), scale_ub, ub_on_scale=True)
            qs.append(_fp8.saturate(rnd(yg / s, F32)).reshape(y.shape))
            ss.append(s.reshape(y.shape[0], -1))
    # float64 inputs (the oracle) get float64 outputs holding the fp8 and float32 values, as the harness asks
    wide = x.dtype == torch.float64
    q = torch.cat(qs)
    out = {"q": (q.to(torch.float64) if wide else q).reshape(*x.shape[:-1], d)}
    s = torch.cat(ss) if ss else scale.reshape(1).to(torch.float64)
    out["scale"] = s if wide else s.to(F32)
    return out
