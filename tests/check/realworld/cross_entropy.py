"""Fused cross-entropy loss and in-place logits gradient, one program per row: the clean pattern of Liger-Kernel's
cross entropy (see SOURCES.md).

No error may fire. A row whose target is ignore_index zeroes its logits row (stores only) and returns. The others:
one pass of loads (online softmax: tl.max and tl.sum of each block, which also order every earlier access of the
program), a second pass that loads each block and stores its gradient through the same offsets, a barrier, then the
target column's gradient stored over what the second pass wrote. The row index is int64 (vocab x rows passes 2^31).
One true, minor finding stays, as upstream: the per-step count of non-ignored rows is a plain int and gets
specialized (1 vs not divisible by 16).
"""

import torch
import triton
import triton.language as tl

import tritonkit


@triton.jit
def _cross_entropy_fwd_bwd_kernel(  # expect: recompile
    x_ptr, stride_x, y_ptr, loss_ptr, n_cols, n_non_ignore, ignore_index,
    LABEL_SMOOTHING: tl.constexpr, BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    y = tl.load(y_ptr + row)
    x_ptr += row * stride_x
    if y == ignore_index:
        for i in range(0, n_cols, BLOCK):
            offs = i + tl.arange(0, BLOCK)
            tl.store(x_ptr + offs, 0.0, mask=offs < n_cols)
        tl.store(loss_ptr + row, 0.0)
        return
    x_y = tl.load(x_ptr + y).to(tl.float32)
    eps = LABEL_SMOOTHING / n_cols
    m = float("-inf")
    d = 0.0
    smooth = 0.0
    for i in range(0, n_cols, BLOCK):
        offs = i + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n_cols, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x))
        d = d * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new))
        if LABEL_SMOOTHING > 0:
            smooth += tl.sum(tl.where(offs < n_cols, -eps * x, 0.0))
        m = m_new
    lse = m + tl.log(d)
    for i in range(0, n_cols, BLOCK):
        offs = i + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n_cols, other=float("-inf")).to(tl.float32)
        grad = (tl.exp(x - m) / d - eps) / n_non_ignore
        tl.store(x_ptr + offs, grad, mask=offs < n_cols)
    # the loop above wrote x[y] too: finish storing it before the target column is overwritten
    tl.debug_barrier()
    tl.store(x_ptr + y, ((tl.exp(x_y - m) / d - eps - (1 - LABEL_SMOOTHING)) / n_non_ignore))
    loss = lse - x_y
    if LABEL_SMOOTHING > 0:
        loss = loss * (1 - LABEL_SMOOTHING) + smooth + LABEL_SMOOTHING * lse
    tl.store(loss_ptr + row, loss / n_non_ignore)


def cross_entropy_fwd_bwd(logits, target, loss, n_non_ignore, label_smoothing, ignore_index=-100):
    """logits [rows, vocab] bf16, overwritten by the gradient of the mean loss; target int64 [rows]; loss [rows]."""
    rows, vocab = logits.shape
    block = min(32_768, triton.next_power_of_2(vocab))
    _cross_entropy_fwd_bwd_kernel[(rows,)](logits, logits.stride(0), target, loss, vocab, n_non_ignore, ignore_index,
                                           LABEL_SMOOTHING=label_smoothing, BLOCK=block, num_warps=32)


# Llama-3 (vocab 128,256) and Qwen2.5 (151,936); up to 65,536 rows (9.9e9 logits); targets are token ids or -100
@tritonkit.case(num_tokens=[1, 4096, 65_536], vocab=[128_256, 151_936], label_smoothing=[0.0, 0.1],
                loaded_bounds={"y_ptr": (-100, 151_935)})
def cross_entropy(num_tokens, vocab, label_smoothing):
    logits = torch.empty(num_tokens, vocab, device="meta", dtype=torch.bfloat16)
    target = torch.empty(num_tokens, device="meta", dtype=torch.int64)
    loss = torch.empty(num_tokens, device="meta", dtype=torch.float32)
    # about one row in seven is padding or prompt (ignored)
    cross_entropy_fwd_bwd(logits, target, loss, num_tokens - num_tokens // 7, label_smoothing)
