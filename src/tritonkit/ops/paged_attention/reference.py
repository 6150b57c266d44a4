"""Eager PyTorch oracle for paged_attention: gathers each sequence's keys and values from the paged cache through
its block table and computes masked softmax attention with every feature. Float64 inputs compute in float64;
other dtypes in float32 (the eager baseline) and return q's dtype.

Sequences with the same (query tokens, keys) share every mask, so they are bucketed by that pair and each bucket
is computed a batch of sequences at a time: one gather of the batch's pages, GQA as a reshape of q (K/V are never
repeated per query head), one [rows, keys] mask broadcast over the batch and heads. Steps are cut to a memory
budget, by sequences and, for a long prefill, by query rows. Reads cu_seqlens_q / seqused_k on the host once: an
oracle, not a kernel."""

from __future__ import annotations

import math

import torch

# Bytes of one step's scores [B, Hkv, group, R, L] plus the keys and values [B, Hkv, L, D] it reads, in the compute
# dtype (softmax's temporaries add a small multiple of the scores). A sequence whose keys and values alone pass the
# budget runs alone, in chunks of query rows whose scores fit it.
# On a GPU a step is ~15 kernel launches, so steps are large: 512 MiB keeps a 4096-sequence decode batch to a handful
# of steps and a float64 16K-token prefill (68 GB of scores at once) to ~0.5 GB a step.
STEP_BUDGET_BYTES = 512 << 20
# On a CPU large steps are slower, not faster: their temporaries leave the caches and fresh large allocations
# page-fault. float64, 1 thread (32 MiB L3): 4096 decode sequences x 256 keys 1.0 s at 8 MiB, 3.5 s at 512 MiB; a
# 2048-token prefill 0.55 s at 8 MiB, 1.4 s at 32 MiB.
CPU_STEP_BUDGET_BYTES = 8 << 20


def paged_attention_reference(
    q,
    k_cache,
    v_cache,
    *,
    cu_seqlens_q,
    seqused_k,
    block_table,
    softmax_scale=None,
    causal=True,
    window_size=(-1, -1),
    softcap=0.0,
    sinks=None,
    k_scale=None,
    v_scale=None,
    magnitude=False,
):
    """Attention of each sequence's new query rows over its cached keys.

    q: [num_tokens, Hq, D]; sequence s owns rows cu_seqlens_q[s]:cu_seqlens_q[s + 1] (n of them) and attends its
    first L = seqused_k[s] keys; query j sits at key position L - n + j (bottom-right alignment).
    k_cache, v_cache: [num_blocks, block_size, Hkv, D], Hq a multiple of Hkv (query head h reads KV head
    h // (Hq / Hkv)); key t of sequence s lives in page block_table[s, t // block_size], slot t % block_size.
    Cache slots past key L - 1 never enter the math. fp8 caches are dequantized by the per-tensor k_scale / v_scale.
    sinks: [Hq] or None, one extra logit per head in the softmax denominator, with no value.
    magnitude: attend |v| instead of v (sum(p |v|) / sum(p), the scale of the error rounding p makes), gathering
    no more than the plain oracle does, in float32 and returned in float32.
    Returns [num_tokens, Hq, D] in q's dtype (computed in float64 for float64 q, float32 otherwise); rows outside
    every sequence, and rows that see no key and have no sink, are 0.
    """
    # the magnitude only scales a bound: float32, and returned so (a float64 copy of a million-token output is 32 GiB)
    compute = torch.float64 if q.dtype == torch.float64 and not magnitude else torch.float32
    dev = q.device
    num_tokens, num_heads, head_dim = q.shape
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = num_heads // num_kv_heads
    scale = head_dim**-0.5 if softmax_scale is None else float(softmax_scale)
    left, right = window_size
    if causal:
        right = 0  # flash-attn: causal is a window whose right edge is the query itself
    # query head kvh * group + g is [kvh, g] of this view: [Hkv, group, 1, 1]
    sink = None if sinks is None else sinks.to(compute).view(num_kv_heads, group, 1, 1)
    budget = (CPU_STEP_BUDGET_BYTES if dev.type == "cpu" else STEP_BUDGET_BYTES) // compute.itemsize
    # tokens past cu_seqlens_q[-1] belong to no sequence: the kernel leaves them alone, the oracle says 0
    out = torch.zeros(num_tokens, num_heads, head_dim, dtype=compute, device=dev)

    num_seqs = seqused_k.shape[0]
    # the one host read: sequence boundaries, then key counts
    bounds = torch.cat([cu_seqlens_q.long(), seqused_k.long()]).tolist()
    cu, lens = bounds[: num_seqs + 1], bounds[len(cu_seqlens_q) :]
    buckets: dict[tuple[int, int], list[int]] = {}
    for s in range(num_seqs):
        n, n_keys = cu[s + 1] - cu[s], lens[s]
        if n > 0 and n_keys > 0:
            buckets.setdefault((n, n_keys), []).append(s)

    first_row = cu_seqlens_q.long()  # [num_seqs + 1]
    for (n, n_keys), seqs in buckets.items():
        seqs = torch.tensor(seqs, dtype=torch.int64, device=dev)  # [S] the bucket's sequences
        batch, rows = _step_shape(budget, len(seqs), n, n_keys, num_heads, num_kv_heads, head_dim)
        n_pages = math.ceil(n_keys / block_size)
        kpos = torch.arange(n_keys, device=dev)[None, :]  # [1, L]
        for b0 in range(0, len(seqs), batch):
            sb = seqs[b0 : b0 + batch]  # [B]
            pages = block_table[sb, :n_pages].long()  # [B, P]
            k = _gather(k_cache, pages, n_keys, compute, k_scale)  # [B, Hkv, L, D]
            v = _gather(v_cache, pages, n_keys, compute, v_scale)  # [B, Hkv, L, D]
            if magnitude:
                v = v.abs()
            for r0 in range(0, n, rows):
                j = torch.arange(r0, min(r0 + rows, n), device=dev)  # [R] query index within its sequence
                tok = first_row[sb][:, None] + j[None, :]  # [B, R] rows of q and out
                qpos = (n_keys - n + j)[:, None]  # [R, 1]
                visible = torch.ones(len(j), n_keys, dtype=torch.bool, device=dev)  # [R, L], one for all of sb
                if right >= 0:
                    visible &= kpos <= qpos + right
                if left >= 0:
                    visible &= kpos >= qpos - left
                qb = q[tok].to(compute).view(len(sb), len(j), num_kv_heads, group, head_dim)  # [B, R, Hkv, group, D]
                o = _attend(qb.permute(0, 2, 3, 1, 4), k, v, visible, scale, softcap, sink)  # [B, Hkv, group, R, D]
                out[tok] = o.permute(0, 3, 1, 2, 4).reshape(len(sb), len(j), num_heads, head_dim)
    return out if magnitude else out.to(q.dtype)


def _step_shape(
    budget: int, num_seqs: int, n: int, n_keys: int, num_heads: int, num_kv_heads: int, head_dim: int
) -> tuple[int, int]:
    """(sequences, query rows) of one step under ``budget`` elements: as many whole sequences as fit; a sequence
    too large alone runs alone, in chunks of query rows (its keys and values stay whole: the oracle never splits L)."""
    kv = 2 * num_kv_heads * n_keys * head_dim  # one sequence's keys and values
    row = num_heads * n_keys  # one query row's scores
    fit = budget // (kv + n * row)
    if fit >= 1:
        return min(fit, num_seqs), n
    return 1, min(n, max(1, budget // row))


def _gather(cache, pages, n_keys, dtype, scale):
    """The first n_keys keys (or values) of each sequence, dequantized by ``scale`` (a 1-element tensor) if given:
    cache [num_blocks, block_size, Hkv, D], pages [B, P] -> [B, Hkv, n_keys, D] in ``dtype``, contiguous: the layout
    the batched matmuls read as [B * Hkv, L, D] without copying again. Slots past n_keys in the last page are sliced
    off unread."""
    b, p = pages.shape
    kv = cache[pages].reshape(b, p * cache.shape[1], *cache.shape[2:])[:, :n_keys]  # [B, L, Hkv, D]
    kv = kv.transpose(1, 2).to(dtype, memory_format=torch.contiguous_format)  # [B, Hkv, L, D]
    return kv if scale is None else kv * scale.reshape(()).to(dtype)


def _attend(q, k, v, visible, scale, softcap, sink):
    """One step of softmax attention. q: [B, Hkv, group, R, D]; k, v: [B, Hkv, L, D]; visible: [R, L] (one mask for
    the whole batch); sink: [Hkv, group, 1, 1] or None. Returns [B, Hkv, group, R, D]."""
    scores = torch.einsum("bhgrd,bhld->bhgrl", q, k) * scale  # [B, Hkv, group, R, L]
    if softcap > 0:
        scores = softcap * torch.tanh(scores / softcap)
    scores = scores.masked_fill(~visible, float("-inf"))
    if sink is not None:
        # the sink is one more logit per head in the denominator, with no value
        sink_col = sink.expand(*scores.shape[:-1], 1)
        probs = torch.softmax(torch.cat([scores, sink_col], dim=-1), dim=-1)[..., :-1]
    else:
        probs = torch.softmax(scores, dim=-1)
    # a row that sees no key (and has no sink) is 0, not NaN
    probs = torch.nan_to_num(probs, nan=0.0)
    return torch.einsum("bhgrl,bhld->bhgrd", probs, v)
