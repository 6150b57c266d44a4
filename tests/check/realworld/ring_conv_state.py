"""Causal depthwise conv1d decode step over a circular conv state: the newest input of a sequence goes to row
`seen % STATE_LEN` of its state, where `seen` counts the inputs written so far (the `cache_seqlens` circular mode
of causal-conv1d updates). No upstream fix of this class was found; the pattern is ours, modeled on those kernels.
See SOURCES.md.

Tap k (k = 0 is the newest past input) sits in row `(seen - 1 - k) mod STATE_LEN`. Triton's `%` truncates toward
zero like C, not like Python: in the `negmod` kernel, `(seen - 1 - k) % STATE_LEN` is negative while seen <= k (the
first steps of a sequence), and the tap is read from before the state's first row: another sequence's state. The
twin adds STATE_LEN before taking the remainder, so the dividend is non-negative for every seen >= 0.
"""

import torch
import triton
import triton.language as tl

import tritonkit


@triton.jit
def _conv1d_ring_negmod_kernel(
    x_ptr, w_ptr, state_ptr, line_ptr, seen_ptr, out_ptr, stride_x, stride_w, stride_state_line, stride_state_row,
    stride_out, DIM: tl.constexpr, STATE_LEN: tl.constexpr, BLOCK_N: tl.constexpr,
):
    pid_seq = tl.program_id(0)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < DIM
    line = tl.load(line_ptr + pid_seq).to(tl.int64)
    seen = tl.load(seen_ptr + pid_seq)
    state = state_ptr + line * stride_state_line + offs_n
    w = w_ptr + offs_n * stride_w
    x = tl.load(x_ptr + pid_seq * stride_x + offs_n, mask=mask_n, other=0.0).to(tl.float32)
    acc = x * tl.load(w + STATE_LEN, mask=mask_n, other=0.0).to(tl.float32)
    for k in tl.static_range(STATE_LEN):
        row = (seen - 1 - k) % STATE_LEN  # expect: int-division-sign
        tap = tl.load(state + row * stride_state_row, mask=mask_n, other=0.0).to(tl.float32)
        acc += tap * tl.load(w + STATE_LEN - 1 - k, mask=mask_n, other=0.0).to(tl.float32)
    tl.store(state + (seen % STATE_LEN) * stride_state_row, x.to(state_ptr.dtype.element_ty), mask=mask_n)
    tl.store(out_ptr + pid_seq * stride_out + offs_n, (acc / (1.0 + tl.exp(-acc))).to(out_ptr.dtype.element_ty),
             mask=mask_n)


@triton.jit
def _conv1d_ring_kernel(
    x_ptr, w_ptr, state_ptr, line_ptr, seen_ptr, out_ptr, stride_x, stride_w, stride_state_line, stride_state_row,
    stride_out, DIM: tl.constexpr, STATE_LEN: tl.constexpr, BLOCK_N: tl.constexpr,
):
    pid_seq = tl.program_id(0)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < DIM
    line = tl.load(line_ptr + pid_seq).to(tl.int64)
    seen = tl.load(seen_ptr + pid_seq)
    state = state_ptr + line * stride_state_line + offs_n
    w = w_ptr + offs_n * stride_w
    x = tl.load(x_ptr + pid_seq * stride_x + offs_n, mask=mask_n, other=0.0).to(tl.float32)
    acc = x * tl.load(w + STATE_LEN, mask=mask_n, other=0.0).to(tl.float32)
    for k in tl.static_range(STATE_LEN):
        # `%` keeps the sign of the dividend: add a whole turn so it is never negative
        row = (seen + STATE_LEN - 1 - k) % STATE_LEN
        tap = tl.load(state + row * stride_state_row, mask=mask_n, other=0.0).to(tl.float32)
        acc += tap * tl.load(w + STATE_LEN - 1 - k, mask=mask_n, other=0.0).to(tl.float32)
    tl.store(state + (seen % STATE_LEN) * stride_state_row, x.to(state_ptr.dtype.element_ty), mask=mask_n)
    tl.store(out_ptr + pid_seq * stride_out + offs_n, (acc / (1.0 + tl.exp(-acc))).to(out_ptr.dtype.element_ty),
             mask=mask_n)


def conv1d_ring(kernel, x, weight, state, lines, seen, out):
    """x [batch, dim]; weight [dim, width]; state [cache_lines, width - 1, dim] (a ring of rows); lines int32
    [batch] (the sequence's state); seen int32 [batch] (inputs written so far); out [batch, dim]."""
    batch, dim = x.shape
    kernel[(batch, triton.cdiv(dim, 256))](
        x, weight, state, lines, seen, out, x.stride(0), weight.stride(0), state.stride(0), state.stride(1),
        out.stride(0), DIM=dim, STATE_LEN=state.shape[1], BLOCK_N=256)


def _run(kernel, batch):
    # Qwen3-Next linear-attention conv: dim 8192, width 4 (3 rows of state), 512 cache lines
    m = dict(device="meta", dtype=torch.bfloat16)
    i32 = dict(device="meta", dtype=torch.int32)
    x = torch.empty(batch, 8192, **m)
    conv1d_ring(kernel, x, torch.empty(8192, 4, **m), torch.empty(512, 3, 8192, **m), torch.empty(batch, **i32),
                torch.empty(batch, **i32), torch.empty_like(x))


# state lines < 512; `seen` is a count of tokens (>= 0), up to a 1M-token context
BOUNDS = {"line_ptr": (0, 511), "seen_ptr": (0, 1 << 20)}


@tritonkit.case(batch=[1, 16, 48], loaded_bounds=BOUNDS)
def conv1d_ring_negmod(batch):
    _run(_conv1d_ring_negmod_kernel, batch)


@tritonkit.case(batch=[1, 16, 48], loaded_bounds=BOUNDS)
def conv1d_ring_nonneg(batch):
    _run(_conv1d_ring_kernel, batch)
