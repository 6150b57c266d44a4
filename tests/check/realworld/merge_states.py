"""Merge two partial attention results (prefix: cached context; suffix: new tokens) by their log-sum-exps, one
program per (token, head): the clean pattern of vLLM's Triton merge_attn_states (see SOURCES.md).

No error may fire. One true, minor finding stays, as upstream: the output LSE's head stride (it is [heads, tokens],
so the stride is num_tokens) and the count of tokens that have a prefix change every call and are specialized
(equal to 1, divisible by 16 or not): up to three compiles across a serving sweep.
"""

import torch
import triton
import triton.language as tl

import tritonkit


@triton.jit
def _merge_states_kernel(  # expect: recompile
    out_ptr, out_lse_ptr, prefix_ptr, prefix_lse_ptr, suffix_ptr, suffix_lse_ptr,
    stride_head, stride_out_head, stride_plse_head, stride_plse_tok, stride_slse_head, stride_slse_tok,
    stride_olse_head, stride_olse_tok, num_with_prefix,
    HEAD_SIZE: tl.constexpr, PAD_HEAD_SIZE: tl.constexpr, OUTPUT_LSE: tl.constexpr,
):
    tok = tl.program_id(0)
    head = tl.program_id(1)
    num_heads = tl.num_programs(1)
    offs = tl.arange(0, PAD_HEAD_SIZE)
    mask = offs < HEAD_SIZE
    src = tok * num_heads * stride_head + head * stride_head + offs
    dst = tok * num_heads * stride_out_head + head * stride_out_head + offs
    s_lse = tl.load(suffix_lse_ptr + head * stride_slse_head + tok * stride_slse_tok)
    if tok >= num_with_prefix:
        # no cached prefix: the suffix is the result
        if OUTPUT_LSE:
            tl.store(out_lse_ptr + head * stride_olse_head + tok * stride_olse_tok, s_lse)
        tl.store(out_ptr + dst, tl.load(suffix_ptr + src, mask=mask), mask=mask)
        return
    p_lse = tl.load(prefix_lse_ptr + head * stride_plse_head + tok * stride_plse_tok)
    # an empty side may come back as +inf (FA2) or -inf (FA3): read both as empty
    p_lse = tl.where(p_lse == float("inf"), float("-inf"), p_lse)
    s_lse = tl.where(s_lse == float("inf"), float("-inf"), s_lse)
    m = tl.maximum(p_lse, s_lse)
    p_se = tl.exp(p_lse - m)
    s_se = tl.exp(s_lse - m)
    total = p_se + s_se
    if OUTPUT_LSE:
        lse = tl.where(m == float("-inf"), float("-inf"), tl.log(total) + m)
        tl.store(out_lse_ptr + head * stride_olse_head + tok * stride_olse_tok, lse)
    p = tl.load(prefix_ptr + src, mask=mask).to(tl.float32)
    s = tl.load(suffix_ptr + src, mask=mask).to(tl.float32)
    tl.store(out_ptr + dst, (p * (p_se / total) + s * (s_se / total)).to(out_ptr.dtype.element_ty), mask=mask)


def merge_states(out, prefix, prefix_lse, suffix, suffix_lse, out_lse, num_with_prefix):
    """out/prefix/suffix [num_tokens, num_heads, head_size]; the LSEs [num_heads, num_tokens], possibly transposed
    views; tokens >= num_with_prefix have no prefix and copy the suffix."""
    num_tokens, num_heads, head_size = out.shape
    _merge_states_kernel[(num_tokens, num_heads)](
        out, out_lse, prefix, prefix_lse, suffix, suffix_lse, prefix.stride(1), out.stride(1),
        prefix_lse.stride(0), prefix_lse.stride(1), suffix_lse.stride(0), suffix_lse.stride(1),
        out_lse.stride(0), out_lse.stride(1), num_with_prefix,
        HEAD_SIZE=head_size, PAD_HEAD_SIZE=triton.next_power_of_2(head_size), OUTPUT_LSE=True)


# chunked-prefill MLA (DeepSeek: 128 heads at TP1, 16 at TP8, v head 128) and cascade attention
@tritonkit.case(num_tokens=[1, 17, 8192, 65_536], num_heads=[16, 128])
def merge_states_prefill(num_tokens, num_heads):
    m = dict(device="meta", dtype=torch.bfloat16)
    out = torch.empty(num_tokens, num_heads, 128, **m)
    lse = dict(device="meta", dtype=torch.float32)
    merge_states(out, torch.empty_like(out), torch.empty(num_tokens, num_heads, **lse).t(), torch.empty_like(out),
                 torch.empty(num_tokens, num_heads, **lse).t(), torch.empty(num_heads, num_tokens, **lse),
                 max(1, num_tokens // 2))
