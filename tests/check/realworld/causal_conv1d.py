"""Causal depthwise conv1d decode step with a rolling conv state, modeled on SGLang's Triton causal_conv1d update
kernel (Mamba / Gated-DeltaNet layers). See SOURCES.md: sgl-project/sglang#16899.

One program per (sequence, block of BLOCK_N channels). The state holds the last STATE_LEN inputs of each channel,
[cache_lines, STATE_LEN, dim] with channels contiguous. The program reads the state twice: as STATE_LEN [BLOCK_N]
columns (the conv taps) and as one [NP2_STATELEN, BLOCK_N] tile shifted by `seqlen` rows (the part that survives
the shift); then stores the shifted tile back over the same cells. The 1-D and 2-D accesses give a channel to
different threads, and the shifted tile gives row t to the thread that read row t + seqlen: without a barrier a
thread can overwrite a cell another thread has not read yet. The `nobarrier` kernel has the barrier commented
out, as it was before the fix; the twin has it.

`batch` is a plain specialized int in both (1 vs divisible by 16: two compiles across a decode sweep), as upstream:
a true, minor finding the fix did not touch.
"""

import torch
import triton
import triton.language as tl

import tritonkit


@triton.jit
def _conv1d_update_nobarrier_kernel(  # expect: recompile
    x_ptr, w_ptr, state_ptr, state_idx_ptr, out_ptr, batch,
    stride_x_seq, stride_x_tok, stride_w_dim, stride_state_line, stride_state_tok, stride_out_seq, stride_out_tok,
    DIM: tl.constexpr, SEQLEN: tl.constexpr, STATE_LEN: tl.constexpr, NP2_STATELEN: tl.constexpr,
    WIDTH: tl.constexpr, BLOCK_N: tl.constexpr,
):
    pid_seq = tl.program_id(0)
    if pid_seq >= batch:
        return
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < DIM
    line = tl.load(state_idx_ptr + pid_seq).to(tl.int64)
    if line < 0:
        return
    state = state_ptr + line * stride_state_line + offs_n  # [BLOCK_N]
    # the conv taps: the oldest WIDTH - 1 inputs of each channel, one [BLOCK_N] column each
    col0 = tl.load(state, mask=mask_n, other=0.0).to(tl.float32)
    col1 = tl.load(state + stride_state_tok, mask=mask_n, other=0.0).to(tl.float32)
    col2 = tl.load(state + 2 * stride_state_tok, mask=mask_n, other=0.0).to(tl.float32)
    # shift left by SEQLEN rows: row t of the new state is row t + SEQLEN of the old one, or a new input
    rows = tl.arange(0, NP2_STATELEN)
    keep = ((rows + SEQLEN) < STATE_LEN)[:, None] & mask_n[None, :]
    kept = tl.load(state[None, :] + ((rows + SEQLEN) * stride_state_tok)[:, None], mask=keep, other=0.0)
    x_rows = rows - (STATE_LEN - SEQLEN)
    mask_x = ((x_rows >= 0) & (x_rows < SEQLEN))[:, None] & mask_n[None, :]
    x_tile = tl.load(x_ptr + pid_seq * stride_x_seq + (x_rows * stride_x_tok)[:, None] + offs_n[None, :],
                     mask=mask_x, other=0.0)
    # no barrier here: upstream had commented it out
    new_state = tl.where(keep, kept, x_tile)
    mask_s = (rows < STATE_LEN)[:, None] & mask_n[None, :]
    tl.store(state[None, :] + (rows * stride_state_tok)[:, None], new_state, mask=mask_s)  # expect: load-then-store
    w = w_ptr + offs_n * stride_w_dim
    x = tl.load(x_ptr + pid_seq * stride_x_seq + offs_n, mask=mask_n, other=0.0).to(tl.float32)
    acc = col0 * tl.load(w, mask=mask_n, other=0.0).to(tl.float32)
    acc += col1 * tl.load(w + 1, mask=mask_n, other=0.0).to(tl.float32)
    acc += col2 * tl.load(w + 2, mask=mask_n, other=0.0).to(tl.float32)
    acc += x * tl.load(w + 3, mask=mask_n, other=0.0).to(tl.float32)
    acc = acc / (1.0 + tl.exp(-acc))
    tl.store(out_ptr + pid_seq * stride_out_seq + offs_n, acc.to(out_ptr.dtype.element_ty), mask=mask_n)


@triton.jit
def _conv1d_update_kernel(  # expect: recompile
    x_ptr, w_ptr, state_ptr, state_idx_ptr, out_ptr, batch,
    stride_x_seq, stride_x_tok, stride_w_dim, stride_state_line, stride_state_tok, stride_out_seq, stride_out_tok,
    DIM: tl.constexpr, SEQLEN: tl.constexpr, STATE_LEN: tl.constexpr, NP2_STATELEN: tl.constexpr,
    WIDTH: tl.constexpr, BLOCK_N: tl.constexpr,
):
    pid_seq = tl.program_id(0)
    if pid_seq >= batch:
        return
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < DIM
    line = tl.load(state_idx_ptr + pid_seq).to(tl.int64)
    if line < 0:
        return
    state = state_ptr + line * stride_state_line + offs_n
    col0 = tl.load(state, mask=mask_n, other=0.0).to(tl.float32)
    col1 = tl.load(state + stride_state_tok, mask=mask_n, other=0.0).to(tl.float32)
    col2 = tl.load(state + 2 * stride_state_tok, mask=mask_n, other=0.0).to(tl.float32)
    rows = tl.arange(0, NP2_STATELEN)
    keep = ((rows + SEQLEN) < STATE_LEN)[:, None] & mask_n[None, :]
    kept = tl.load(state[None, :] + ((rows + SEQLEN) * stride_state_tok)[:, None], mask=keep, other=0.0)
    x_rows = rows - (STATE_LEN - SEQLEN)
    mask_x = ((x_rows >= 0) & (x_rows < SEQLEN))[:, None] & mask_n[None, :]
    x_tile = tl.load(x_ptr + pid_seq * stride_x_seq + (x_rows * stride_x_tok)[:, None] + offs_n[None, :],
                     mask=mask_x, other=0.0)
    # the store below overwrites cells that other threads read above (columns, and the tile shifted by SEQLEN)
    tl.debug_barrier()
    new_state = tl.where(keep, kept, x_tile)
    mask_s = (rows < STATE_LEN)[:, None] & mask_n[None, :]
    tl.store(state[None, :] + (rows * stride_state_tok)[:, None], new_state, mask=mask_s)
    w = w_ptr + offs_n * stride_w_dim
    x = tl.load(x_ptr + pid_seq * stride_x_seq + offs_n, mask=mask_n, other=0.0).to(tl.float32)
    acc = col0 * tl.load(w, mask=mask_n, other=0.0).to(tl.float32)
    acc += col1 * tl.load(w + 1, mask=mask_n, other=0.0).to(tl.float32)
    acc += col2 * tl.load(w + 2, mask=mask_n, other=0.0).to(tl.float32)
    acc += x * tl.load(w + 3, mask=mask_n, other=0.0).to(tl.float32)
    acc = acc / (1.0 + tl.exp(-acc))
    tl.store(out_ptr + pid_seq * stride_out_seq + offs_n, acc.to(out_ptr.dtype.element_ty), mask=mask_n)


def conv1d_update(kernel, x, weight, conv_state, state_indices, out):
    """x [batch, seqlen, dim]; weight [dim, 4]; conv_state [cache_lines, 3, dim] (channels contiguous);
    state_indices int32 [batch] (-1: padding); out like x."""
    batch, seqlen, dim = x.shape
    state_len = conv_state.shape[1]
    block_n = 256
    kernel[(batch, triton.cdiv(dim, block_n))](
        x, weight, conv_state, state_indices, out, batch,
        x.stride(0), x.stride(1), weight.stride(0), conv_state.stride(0), conv_state.stride(1), out.stride(0),
        out.stride(1), DIM=dim, SEQLEN=seqlen, STATE_LEN=state_len, NP2_STATELEN=triton.next_power_of_2(state_len),
        WIDTH=weight.shape[1], BLOCK_N=block_n,
    )


def _run(kernel, batch):
    # Qwen3-Next-80B linear-attention layers: conv dim 2*16*128 + 32*128 = 8192, width 4, 512 cache lines
    m = dict(device="meta", dtype=torch.bfloat16)
    x = torch.empty(batch, 1, 8192, **m)
    conv_state = torch.empty(512, 3, 8192, **m)
    conv1d_update(kernel, x, torch.empty(8192, 4, **m), conv_state,
                  torch.empty(batch, device="meta", dtype=torch.int32), torch.empty_like(x))


@tritonkit.case(batch=[1, 16, 48], loaded_bounds={"state_idx_ptr": (-1, 511)})
def conv1d_update_nobarrier(batch):
    _run(_conv1d_update_nobarrier_kernel, batch)


@tritonkit.case(batch=[1, 16, 48], loaded_bounds={"state_idx_ptr": (-1, 511)})
def conv1d_update_barrier(batch):
    _run(_conv1d_update_kernel, batch)
