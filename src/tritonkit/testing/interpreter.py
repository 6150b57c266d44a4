"""Defects of Triton's CPU interpreter that a validation must name rather than blame on the kernel under test."""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=None)
def bf16_product_defect() -> str | None:
    """What Triton's interpreter gets wrong about a bfloat16 product in this process, in a sentence, or None where it
    gets 1.5 x 1.5 right (or kernels run compiled). Triton 3.6-3.9's interpreter gives 2.5e-29: a user's bf16 kernel
    that multiplies in bf16 then fails validation on a CPU although the GPU computes it right."""
    from ..tolerance import interpreting

    if not interpreting():
        return None
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def _square(x_ptr, out_ptr):
        x = tl.load(x_ptr)
        tl.store(out_ptr, x * x)

    x = torch.tensor([1.5], dtype=torch.bfloat16)
    out = torch.zeros_like(x)
    try:
        _square[(1,)](x, out)
    except Exception:  # noqa: BLE001 - an interpreter that cannot run the probe has no defect we can name
        return None
    got = out.item()
    if got == 2.25:
        return None
    return f"Triton {triton.__version__}'s CPU interpreter multiplies bfloat16 wrongly (1.5 x 1.5 gives {got:.3g})"
