"""Eager PyTorch oracle for paged_attention: gathers each sequence's keys and values from the paged cache through
its block table and computes masked softmax attention with every feature. Float64 inputs compute in float64;
other dtypes in float32 (the eager baseline) and return q's dtype. Reads cu_seqlens_q / seqused_k on the host:
an oracle, not a kernel."""

from __future__ import annotations

import math

import torch


def paged_attention_reference(q, k_cache, v_cache, *, cu_seqlens_q, seqused_k, block_table, softmax_scale=None,
                              causal=True, window_size=(-1, -1), softcap=0.0, sinks=None, k_scale=None,
                              v_scale=None):
    compute = torch.float64 if q.dtype == torch.float64 else torch.float32
    out_dtype = torch.float64 if q.dtype == torch.float64 else q.dtype
    num_tokens, num_heads, head_dim = q.shape
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = num_heads // num_kv_heads
    scale = head_dim ** -0.5 if softmax_scale is None else float(softmax_scale)
    left, right = window_size
    if causal:
        right = 0  # flash-attn: causal is a window whose right edge is the query itself
    ks = 1.0 if k_scale is None else k_scale.reshape(()).to(compute)
    vs = 1.0 if v_scale is None else v_scale.reshape(()).to(compute)
    # tokens past cu_seqlens_q[-1] belong to no sequence: the kernel leaves them alone, the oracle says 0
    out = torch.zeros(num_tokens, num_heads, head_dim, dtype=compute, device=q.device)
    cu = cu_seqlens_q.tolist()
    lens = seqused_k.tolist()
    for s in range(len(lens)):
        a, b, n_keys = cu[s], cu[s + 1], lens[s]
        n = b - a
        if n <= 0 or n_keys <= 0:
            continue
        pages = block_table[s, :math.ceil(n_keys / block_size)].long()
        k = k_cache[pages].reshape(-1, num_kv_heads, head_dim)[:n_keys].to(compute) * ks
        v = v_cache[pages].reshape(-1, num_kv_heads, head_dim)[:n_keys].to(compute) * vs
        k = k.repeat_interleave(group, dim=1)  # [L, Hq, D]
        v = v.repeat_interleave(group, dim=1)
        scores = torch.einsum("nhd,khd->hnk", q[a:b].to(compute), k) * scale  # [Hq, n, L]
        if softcap > 0:
            scores = softcap * torch.tanh(scores / softcap)
        # bottom-right alignment: query j of n sits at position L - n + j
        qpos = torch.arange(n_keys - n, n_keys, device=q.device)[:, None]
        kpos = torch.arange(n_keys, device=q.device)[None, :]
        visible = torch.ones(n, n_keys, dtype=torch.bool, device=q.device)
        if right >= 0:
            visible &= kpos <= qpos + right
        if left >= 0:
            visible &= kpos >= qpos - left
        scores = scores.masked_fill(~visible, float("-inf"))
        if sinks is not None:
            # the sink is one more logit per head in the denominator, with no value
            sink_col = sinks.to(compute)[:, None, None].expand(num_heads, n, 1)
            probs = torch.softmax(torch.cat([scores, sink_col], dim=-1), dim=-1)[..., :n_keys]
        else:
            probs = torch.softmax(scores, dim=-1)
        # a row that sees no key (and has no sink) is 0, not NaN
        probs = torch.nan_to_num(probs, nan=0.0)
        out[a:b] = torch.einsum("hnk,khd->nhd", probs, v)
    return out.to(out_dtype)
