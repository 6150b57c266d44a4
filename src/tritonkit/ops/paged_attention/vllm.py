"""unified_attention in vLLM's call form (``vllm/v1/attention/ops/triton_unified_attention``).

:mod:`tritonkit.ops.vllm` re-exports it (vLLM's release: its ``VLLM_VERSION``). Arguments are checked before anything is
written.
"""

from __future__ import annotations

import torch

from .api import paged_attention


def unified_attention(
    q,
    k,
    v,
    out,
    cu_seqlens_q,
    max_seqlen_q,
    seqused_k,
    max_seqlen_k,
    softmax_scale,
    causal,
    window_size,
    block_table,
    softcap,
    q_descale,
    k_descale,
    v_descale,
    seq_threshold_3D=None,
    num_par_softmax_segments=None,
    softmax_segm_output=None,
    softmax_segm_max=None,
    softmax_segm_expsum=None,
    alibi_slopes=None,
    output_scale=None,
    qq_bias=None,
    sinks=None,
    mm_prefix_range=None,
    rswa_prefix_lens=None,
    rswa_window=None,
    use_alibi_sqrt=False,
    kv_quant_mode=None,
    k_scale_cache=None,
    v_scale_cache=None,
    chunk_lookback=-1,
    use_td=False,
    mm_prefix_clamp_sliding_window=False,
) -> None:
    """vLLM's ``unified_attention``: attention of a varlen batch over a paged cache, written into ``out``.

    q ``[T, Hq, D]``; k/v the caches ``[num_blocks, block_size, Hkv, D]`` (q's dtype or float8_e4m3fn); out
    ``[T, Hq, D]``; cu_seqlens_q ``[num_seqs + 1]``, seqused_k ``[num_seqs]``, block_table ``[num_seqs,
    max_blocks]`` int32; window_size ``(left, right)``, -1 unbounded (``(-1, -1)`` for no window: None is refused,
    as vLLM's own function cannot take it); softcap 0 for none; sinks ``[Hq]``.
    k_descale/v_descale: the per-tensor scales of an fp8 cache, float32; as in vLLM's kernel the first element is
    the scale (a one-element tensor, or it broadcast or filled to ``[num_seqs, num_kv_heads]``); ignored for a
    q-dtype cache. Query rows past
    ``cu_seqlens_q[-1]`` (CUDA-graph padding) are left untouched in ``out``.

    vLLM's scratch arguments (``seq_threshold_3D``, ``num_par_softmax_segments``, ``softmax_segm_*``) and
    ``use_td`` are accepted and not needed. Features this kernel does not implement are refused by name: fp8
    queries (``q_descale``), an fp8 output (``output_scale``), ALiBi, ``qq_bias``, PrefixLM ranges, R-SWA, chunked
    attention, per-token-head KV quantization, a per-sequence ``causal`` tensor.
    """
    unsupported = {
        "q_descale": q_descale is not None,
        "output_scale": output_scale is not None,
        "alibi_slopes": alibi_slopes is not None,
        "use_alibi_sqrt": bool(use_alibi_sqrt),
        "qq_bias": qq_bias is not None,
        "mm_prefix_range": mm_prefix_range is not None,
        "rswa_prefix_lens": rswa_prefix_lens is not None,
        "rswa_window": rswa_window is not None,
        "chunk_lookback": chunk_lookback not in (-1, None),
        "k_scale_cache": k_scale_cache is not None,
        "v_scale_cache": v_scale_cache is not None,
        "causal": isinstance(causal, torch.Tensor),
    }
    bad = [name for name, used in unsupported.items() if used]
    if bad:
        raise NotImplementedError(
            f"unified_attention: {', '.join(bad)} {'is' if len(bad) == 1 else 'are'} not "
            f"supported by tritonkit's paged attention (pass the default)"
        )
    mode = getattr(kv_quant_mode, "name", kv_quant_mode)
    if mode not in (None, "NONE", "FP8_PER_TENSOR", 0, 1):
        raise NotImplementedError(
            f"unified_attention: kv_quant_mode {mode} is not supported (only none and fp8 per-tensor)"
        )
    if out is None:
        raise TypeError("out must be a tensor of q's shape and dtype: unified_attention writes into it")
    fp8 = isinstance(k, torch.Tensor) and k.dtype == torch.float8_e4m3fn
    k_scale = _descale("k_descale", k_descale, cu_seqlens_q, k) if fp8 else None
    v_scale = _descale("v_descale", v_descale, cu_seqlens_q, k) if fp8 else None
    paged_attention(
        q,
        k,
        v,
        cu_seqlens_q=cu_seqlens_q,
        seqused_k=seqused_k,
        block_table=block_table,
        max_seqlen_q=max_seqlen_q,
        max_seqlen_k=max_seqlen_k,
        softmax_scale=softmax_scale,
        causal=bool(causal),
        # vLLM's own function indexes window_size[0]: None is no window there either, so it gets the op's TypeError
        window_size=tuple(window_size) if isinstance(window_size, (tuple, list)) else window_size,
        softcap=float(softcap),
        sinks=sinks,
        out=out,
        k_scale=k_scale,
        v_scale=v_scale,
    )


def _descale(name: str, s, cu_seqlens_q, k) -> torch.Tensor:
    """The per-tensor scale: the first element of ``s``, which is what vLLM's kernel reads (a one-element tensor,
    or the scale broadcast or materialized to ``[num_seqs, num_kv_heads]``, as vLLM's callers and tests pass it).
    Per-head scales are not supported, by vLLM's kernel either: the other elements are not read."""
    if not isinstance(s, torch.Tensor) or s.dtype != torch.float32 or s.numel() < 1:
        got = f"{s.dtype} tensor of shape {tuple(s.shape)}" if isinstance(s, torch.Tensor) else type(s).__name__
        raise TypeError(f"{name} must be a float32 tensor holding the fp8 cache's per-tensor scale, got {got}")
    return s.as_strided((1,), (1,))
