"""Causal depthwise conv1d over a varlen batch (prefill): the conv-state update of a sequence's first chunk,
modeled on vLLM's Triton causal_conv1d forward and SGLang's copy of it. See SOURCES.md.

A sequence's length is the difference of two entries of the cumulative offsets (`query_start_loc[i + 1] -
query_start_loc[i]`). Shorter than the state (`seqlen < STATE_LEN`), the state keeps its newest rows, shifted up
by `seqlen`, and takes the sequence's tokens after them; otherwise it takes the last STATE_LEN tokens. Both
kernels are correct: the offsets are non-decreasing, so `seqlen >= 0` and every row index below is in
[0, STATE_LEN). The case declares it (`nondecreasing=`), as a user does once the checker names the declaration.

`_conv1d_varlen_state_kernel` branches as vLLM's does (`if STATE_LEN <= seqlen: ... else: VAL = STATE_LEN -
seqlen`). `_conv1d_chunk_state_kernel` is chunked as SGLang's forward is (a program per 64-token chunk): a chunk
past the sequence's end returns early (`segment_len = min(BLOCK_M, seqlen - chunk * BLOCK_M)`, `if segment_len
<= 0: return`), which already proves `seqlen >= 1` with no declaration; the state update then branches on
`seqlen < STATE_LEN`, an `elif` and an `else`.
"""

import torch
import triton
import triton.language as tl

import tritonkit


@triton.jit
def _conv1d_varlen_state_kernel(
    x_ptr, state_ptr, query_start_loc_ptr, state_lines_ptr, has_state_ptr,
    stride_x_token, stride_state_line, stride_state_tok,
    DIM: tl.constexpr, STATE_LEN: tl.constexpr, NP2_STATE: tl.constexpr, BLOCK_N: tl.constexpr,
):
    pid_seq = tl.program_id(0)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < DIM
    start = tl.load(query_start_loc_ptr + pid_seq)
    seqlen = tl.load(query_start_loc_ptr + pid_seq + 1) - start
    line = tl.load(state_lines_ptr + pid_seq).to(tl.int64)
    if line < 0:
        return
    state = state_ptr + line * stride_state_line + offs_n[None, :]  # [1, BLOCK_N]
    x_seq = x_ptr + start * stride_x_token + offs_n[None, :]
    rows = tl.arange(0, NP2_STATE)
    mask_rows = (rows < STATE_LEN)[:, None] & mask_n[None, :]  # [NP2_STATE, BLOCK_N]
    if STATE_LEN <= seqlen:
        last = seqlen - STATE_LEN + rows
        new = tl.load(x_seq + (last * stride_x_token)[:, None], mask=mask_rows, other=0.0)
    else:
        keep = (rows + seqlen < STATE_LEN)[:, None] & mask_n[None, :]
        has_state = tl.load(has_state_ptr + pid_seq)
        old = tl.load(state + ((rows + seqlen) * stride_state_tok)[:, None], mask=keep & (has_state != 0),
                      other=0.0)
        VAL = STATE_LEN - seqlen
        mask_x = (rows - VAL >= 0)[:, None] & (rows - VAL < seqlen)[:, None] & mask_n[None, :]
        x = tl.load(x_seq + ((rows - VAL) * stride_x_token)[:, None], mask=mask_x, other=0.0)
        new = tl.where(keep, old, x)
        # the shifted rows are read above and overwritten below by other threads
        tl.debug_barrier()
    tl.store(state + (rows * stride_state_tok)[:, None], new, mask=mask_rows)


@triton.jit
def _conv1d_chunk_state_kernel(
    x_ptr, state_ptr, query_start_loc_ptr, state_lines_ptr,
    stride_x_token, stride_state_line, stride_state_tok,
    DIM: tl.constexpr, STATE_LEN: tl.constexpr, NP2_STATE: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    pid_seq = tl.program_id(0)
    chunk = tl.program_id(1)
    offs_n = tl.program_id(2) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < DIM
    start = tl.load(query_start_loc_ptr + pid_seq)
    seqlen = tl.load(query_start_loc_ptr + pid_seq + 1) - start
    # the chunks past the sequence's end have nothing to do: from here on seqlen > chunk * BLOCK_M >= 0
    segment_len = min(BLOCK_M, seqlen - chunk * BLOCK_M)
    if segment_len <= 0:
        return
    line = tl.load(state_lines_ptr + pid_seq).to(tl.int64)
    state = state_ptr + line * stride_state_line + offs_n[None, :]
    x_seq = x_ptr + start * stride_x_token + offs_n[None, :]
    rows = tl.arange(0, NP2_STATE)
    mask_rows = (rows < STATE_LEN)[:, None] & mask_n[None, :]
    if chunk == 0:
        if seqlen < STATE_LEN:
            keep = (rows + seqlen < STATE_LEN)[:, None] & mask_n[None, :]
            old = tl.load(state + ((rows + seqlen) * stride_state_tok)[:, None], mask=keep, other=0.0)
            x = tl.load(x_seq + ((rows - (STATE_LEN - seqlen)) * stride_x_token)[:, None],
                        mask=mask_rows & ~keep, other=0.0)
            new = tl.where(keep, old, x)
            tl.debug_barrier()
        elif seqlen == STATE_LEN:
            new = tl.load(x_seq + (rows * stride_x_token)[:, None], mask=mask_rows, other=0.0)
        else:
            back = seqlen - STATE_LEN
            new = tl.load(x_seq + ((back + rows) * stride_x_token)[:, None], mask=mask_rows, other=0.0)
        tl.store(state + (rows * stride_state_tok)[:, None], new, mask=mask_rows)


def conv1d_varlen_state(kernel, x, state, query_start_loc, state_lines, has_state=None, chunks=0):
    """x [total_tokens, dim]; state [cache_lines, STATE_LEN, dim]; query_start_loc int32 [batch + 1] (cumulative
    token offsets, non-decreasing); state_lines int32 [batch] (the sequence's state line, -1: padding); chunks > 0:
    the chunked kernel, `chunks` programs of 64 tokens per sequence."""
    batch, dim = query_start_loc.shape[0] - 1, x.shape[1]
    args = (x, state, query_start_loc, state_lines) + ((has_state,) if has_state is not None else ())
    grid = (batch, chunks, triton.cdiv(dim, 256)) if chunks else (batch, triton.cdiv(dim, 256))
    extra = dict(BLOCK_M=64) if chunks else {}
    kernel[grid](
        *args, x.stride(0), state.stride(0), state.stride(1),
        DIM=dim, STATE_LEN=state.shape[1], NP2_STATE=triton.next_power_of_2(state.shape[1]), BLOCK_N=256, **extra)


def _run(kernel, batch, has_state, chunks=0):
    # Nemotron-H-style conv: dim 24,576, width 4 (3 rows of state), 32,768 cache lines: 2.4e9 state elements
    m = dict(device="meta", dtype=torch.bfloat16)
    i32 = dict(device="meta", dtype=torch.int32)
    x = torch.empty(8192, 24_576, **m)
    state = torch.empty(32_768, 3, 24_576, **m)
    hs = torch.empty(batch, device="meta", dtype=torch.bool) if has_state else None
    conv1d_varlen_state(kernel, x, state, torch.empty(batch + 1, **i32), torch.empty(batch, **i32), hs, chunks)


# the state line is a line of this cache; cumulative offsets never decrease
LINES = {"state_lines_ptr": (-1, 32_767)}


@tritonkit.case(batch=[1, 16, 256], loaded_bounds=LINES, nondecreasing=["query_start_loc_ptr"])
def conv1d_varlen_state_case(batch):
    _run(_conv1d_varlen_state_kernel, batch, True)


# no declaration needed: past the early return, seqlen > chunk * BLOCK_M >= 0
@tritonkit.case(batch=[1, 16, 256], loaded_bounds=LINES)
def conv1d_chunk_state_case(batch):
    _run(_conv1d_chunk_state_kernel, batch, False, chunks=128)


# the same kernel as a newcomer's case would run it, with nothing declared about the offsets (issue 40): a
# difference of two entries of one array, the larger index minus the smaller, is a length by default
@tritonkit.case(batch=[1, 16, 256], loaded_bounds=LINES)
def conv1d_varlen_state_undeclared_case(batch):
    _run(_conv1d_varlen_state_kernel, batch, True)
