"""Eager PyTorch oracle for reshape_and_cache. Imports no Triton.

Float64 inputs (the validation harness's upcast copies) compute in float64 and keep float64 caches; other dtypes
compute as eager PyTorch would. Either way the fp8 path reproduces the op's contract exactly: a correctly rounded
float32 quotient (float64 division rounded once to float32 is the same number: 53 >= 2 * 24 + 2 bits, so the double
rounding is innocuous), clamped to +-448 with NaN kept, then rounded to nearest-even e4m3fn by PyTorch."""

import torch

FP8_E4M3_MAX = 448.0


def quantize_e4m3(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``x / scale`` as the op stores it in an fp8 cache, as float8_e4m3fn."""
    wide = torch.float64 if x.dtype == torch.float64 else torch.float32
    q = (x.to(wide) / scale.to(wide).reshape(())).to(torch.float32)
    # clamp propagates NaN; without it PyTorch would turn |q| >= 464 into NaN (e4m3fn has no inf)
    return q.clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn)


def reshape_and_cache_reference(
    key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype="auto", k_scale=None, v_scale=None
):
    """Write into ``key_cache``/``value_cache`` in place, as the op does, and return them."""
    valid = slot_mapping >= 0
    padded = not bool(valid.all())
    slots = slot_mapping[valid].long()
    block_size = key_cache.shape[1]
    blk, row = slots // block_size, slots % block_size
    for src, cache, scale in ((key, key_cache, k_scale), (value, value_cache, v_scale)):
        x = src[valid] if padded else src
        if kv_cache_dtype != "auto":
            x = quantize_e4m3(x, scale)
            if cache.dtype == torch.uint8:
                x = x.view(torch.uint8)
        cache[blk, row] = x.to(cache.dtype)
    return key_cache, value_cache
