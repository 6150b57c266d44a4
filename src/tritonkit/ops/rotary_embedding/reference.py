"""Eager PyTorch oracle for rotary_embedding. Float64 inputs compute in float64; other dtypes in float32, as eager
PyTorch would, and return the input dtype. Out of place: returns new ``(q, k)``."""

import torch

# tokens per step, so a reference over a 2^31-element q does not hold several full-size float64 temporaries
_CHUNK_TOKENS = 1 << 14


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, is_neox: bool) -> torch.Tensor:
    """``x [T, H, rot_dim]`` rotated by ``cos/sin [T, 1, rot_dim / 2]``."""
    if is_neox:
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)


def rotary_embedding_reference(positions, q, k, cos_sin_cache, is_neox=True):
    compute = torch.float64 if q.dtype == torch.float64 else torch.float32
    rot = cos_sin_cache.shape[-1]
    q_out = q.clone()
    k_out = None if k is None else k.clone()
    for start in range(0, q.shape[0], _CHUNK_TOKENS):
        rows = slice(start, start + _CHUNK_TOKENS)
        cos, sin = cos_sin_cache[positions[rows].long()].to(compute)[:, None, :].chunk(2, dim=-1)
        for src, dst in ((q, q_out), (k, k_out)):
            if src is not None:
                dst[rows, :, :rot] = _rotate(src[rows, :, :rot].to(compute), cos, sin, is_neox).to(dst.dtype)
    return q_out, k_out
