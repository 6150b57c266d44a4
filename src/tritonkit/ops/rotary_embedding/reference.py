"""Eager PyTorch oracle for rotary_embedding. Float64 inputs compute in float64; other dtypes in float32, as eager
PyTorch would, and return the input dtype. Out of place: returns new ``(q, k)``."""

import torch

# tokens per step, so a reference over a 2^31-element q does not hold several full-size float64 temporaries
_CHUNK_TOKENS = 1 << 14


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, is_neox: bool, sign: float = -1.0) -> torch.Tensor:
    """``x [T, H, rot_dim]`` rotated by ``cos/sin [T, 1, rot_dim / 2]``; ``sign=+1`` on absolute values gives the
    magnitude of the terms instead."""
    if is_neox:
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * cos + sign * x2 * sin, x2 * cos + x1 * sin), dim=-1)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos + sign * x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)


def rotary_embedding_reference(positions, q, k, cos_sin_cache, is_neox=True, magnitude=False):
    """``magnitude=True`` returns, instead of the rotation, ``|x1 cos| + |x2 sin|`` per rotated element (0 in the
    untouched tail): the size of the terms whose difference each output is, for the validator's error bound."""
    compute = torch.float64 if q.dtype == torch.float64 else torch.float32
    if magnitude:
        q, k = q.abs(), None if k is None else k.abs()
        cos_sin_cache = cos_sin_cache.abs()
    rot = cos_sin_cache.shape[-1]
    q_out = q.clone()
    k_out = None if k is None else k.clone()
    for start in range(0, q.shape[0], _CHUNK_TOKENS):
        rows = slice(start, start + _CHUNK_TOKENS)
        cos, sin = cos_sin_cache[positions[rows].long()].to(compute)[:, None, :].chunk(2, dim=-1)
        for src, dst in ((q, q_out), (k, k_out)):
            if src is not None:
                x = src[rows, :, :rot].to(compute)
                dst[rows, :, :rot] = _rotate(x, cos, sin, is_neox, 1.0 if magnitude else -1.0).to(dst.dtype)
    if magnitude:
        q_out[..., rot:] = 0
        if k_out is not None:
            k_out[..., rot:] = 0
    return q_out, k_out
