"""Sliding-window KV cache kept as a ring of CAP slots per sequence: the key `WINDOW` positions back from the newest
lives at slot `(pos - WINDOW) % CAP`. Triton's `%` keeps the dividend's sign (C), so for the first WINDOW positions
of a sequence the slot is negative and the read lands before the sequence's ring. The twin adds a whole turn of the
ring first, non-negative for every pos >= 0."""

import torch
import triton
import triton.language as tl

import tritonkit


@triton.jit
def _window_evict_negmod_kernel(cache_ptr, pos_ptr, out_ptr, stride_seq, CAP: tl.constexpr, WINDOW: tl.constexpr,
                                D: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    pos = tl.load(pos_ptr + pid)
    slot = (pos - WINDOW) % CAP  # seeded bug: int-division-sign
    offs = tl.arange(0, D)
    old = tl.load(cache_ptr + pid * stride_seq + slot * D + offs)
    tl.store(out_ptr + pid * D + offs, old)


@triton.jit
def _window_evict_kernel(cache_ptr, pos_ptr, out_ptr, stride_seq, CAP: tl.constexpr, WINDOW: tl.constexpr,
                         D: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    pos = tl.load(pos_ptr + pid)
    # a whole turn of the ring keeps the dividend >= 0
    slot = (pos - WINDOW + CAP) % CAP
    offs = tl.arange(0, D)
    old = tl.load(cache_ptr + pid * stride_seq + slot * D + offs)
    tl.store(out_ptr + pid * D + offs, old)


def _run(kernel, num_seqs):
    cache = torch.empty(num_seqs, 4096, 128, device="meta", dtype=torch.bfloat16)
    pos = torch.empty(num_seqs, device="meta", dtype=torch.int32)
    out = torch.empty(num_seqs, 128, device="meta", dtype=torch.bfloat16)
    kernel[(num_seqs,)](cache, pos, out, cache.stride(0), CAP=4096, WINDOW=4000, D=128)


# positions are token counts: never negative
@tritonkit.case(num_seqs=[1, 64], loaded_bounds={"pos_ptr": (0, 1 << 20)})
def window_evict_negmod(num_seqs):
    _run(_window_evict_negmod_kernel, num_seqs)


@tritonkit.case(num_seqs=[1, 64], loaded_bounds={"pos_ptr": (0, 1 << 20)})
def window_evict(num_seqs):
    _run(_window_evict_kernel, num_seqs)
