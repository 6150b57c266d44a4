"""vLLM's call forms of the ops: swap ``vllm._custom_ops`` / ``unified_attention`` for these by changing an import.

Each function takes vLLM's arguments in vLLM's order (as of vLLM 0.33.0) and has vLLM's semantics: outputs are
written into the tensors passed (``out``, or the inputs themselves for the fused and in-place forms) and nothing is
returned. Arguments are checked before anything is written, and a rejected call writes nothing.

========================  ===============================================================================
``rms_norm``              ``(out, input, weight, epsilon)``: ``out = input * rsqrt(mean(input^2) + eps) * weight``
``fused_add_rms_norm``    ``(input, residual, weight, epsilon)``: ``residual += input``, then
                          ``input = rms_norm(residual)``, both in place
``silu_and_mul``          ``(out, input)``: ``out = silu(input[..., :d]) * input[..., d:]``
``rotary_embedding``      ``(positions, query, key, head_size, cos_sin_cache, is_neox)``, in place; query/key
                          ``[T, H * head_size]`` or ``[T, H, head_size]``, key may be None
``reshape_and_cache_flash``  ``(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale,
                          v_scale)``: key/value may hold more rows than slot_mapping has entries
``unified_attention``     vLLM's Triton attention entry point (``vllm/v1/attention/ops/triton_unified_attention``)
========================  ===============================================================================

Under ``torch.compile``, ``make_fx`` or ``FakeTensorMode`` each call goes through a ``tritonkit::vllm_*`` op that
declares what it mutates.
"""

from __future__ import annotations

import torch

from . import _checks
from ._library import through_dispatcher
from .paged_attention.api import paged_attention as _paged_attention
from .reshape_and_cache.api import reshape_and_cache as _reshape_and_cache
from .rms_norm import api as _rms
from .rotary_embedding import api as _rot
from .silu_and_mul import api as _silu

__all__ = ["fused_add_rms_norm", "reshape_and_cache_flash", "rms_norm", "rotary_embedding", "silu_and_mul",
           "unified_attention"]

#: the vLLM release whose call forms these follow
VLLM_VERSION = "0.33.0"


# -- rms_norm -------------------------------------------------------------------------------------------------------
@torch.library.custom_op("tritonkit::vllm_rms_norm", mutates_args=("out",))
def _rms_norm_op(out: torch.Tensor, input: torch.Tensor, weight: torch.Tensor, epsilon: float) -> None:
    _rms._launch(input, weight, epsilon, None, out, None)


@_rms_norm_op.register_fake
def _(out, input, weight, epsilon):
    return None


def rms_norm(out: torch.Tensor, input: torch.Tensor, weight: torch.Tensor, epsilon: float) -> None:
    """``out [..., hidden] = input * rsqrt(mean(input^2, -1) + epsilon) * weight`` (input's dtype; statistics in
    float32). ``out`` has input's shape and dtype; its rows may be strided, its last dim contiguous."""
    _rms._check(input, weight, epsilon, None, x_name="input", eps_name="epsilon")
    _out("out", out, input)
    if through_dispatcher(out, input, weight):
        torch.ops.tritonkit.vllm_rms_norm(out, input, weight, float(epsilon))
    else:
        _rms._launch(input, weight, float(epsilon), None, out, None)


@torch.library.custom_op("tritonkit::vllm_fused_add_rms_norm", mutates_args=("input", "residual"))
def _fused_add_rms_norm_op(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                           epsilon: float) -> None:
    _rms._launch(input, weight, epsilon, residual, input, residual)


@_fused_add_rms_norm_op.register_fake
def _(input, residual, weight, epsilon):
    return None


def fused_add_rms_norm(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, epsilon: float) -> None:
    """In place: ``residual <- input + residual`` (rounded to input's dtype), then ``input <- rms_norm(residual) *
    weight``. Each row is read before it is written, so the two may not overlap each other but are their own
    outputs."""
    _rms._check(input, weight, epsilon, residual, x_name="input", eps_name="epsilon")
    _no_overlap("residual", residual, "input", input)
    if through_dispatcher(input, residual, weight):
        torch.ops.tritonkit.vllm_fused_add_rms_norm(input, residual, weight, float(epsilon))
    else:
        _rms._launch(input, weight, float(epsilon), residual, input, residual)


# -- silu_and_mul ---------------------------------------------------------------------------------------------------
@torch.library.custom_op("tritonkit::vllm_silu_and_mul", mutates_args=("out",))
def _silu_and_mul_op(out: torch.Tensor, input: torch.Tensor) -> None:
    _silu._forward(input, out)


@_silu_and_mul_op.register_fake
def _(out, input):
    return None


def silu_and_mul(out: torch.Tensor, input: torch.Tensor) -> None:
    """``out [..., d] = silu(input[..., :d]) * input[..., d:]``, in float32 with one rounding."""
    _silu._check(input, x_name="input")
    _checks.inference_only(out=out)
    _checks.tensor("out", out, dtypes=(input.dtype,), last_contiguous=True)
    _checks.shape_equal("out", out, (*input.shape[:-1], input.shape[-1] // 2), "input's shape with half its last "
                        "dimension")
    _checks.same_device(out=out, input=input)
    _no_overlap("out", out, "input", input)
    if through_dispatcher(out, input):
        torch.ops.tritonkit.vllm_silu_and_mul(out, input)
    else:
        _silu._forward(input, out)


# -- rotary_embedding -----------------------------------------------------------------------------------------------
def rotary_embedding(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None, head_size: int,
                     cos_sin_cache: torch.Tensor, is_neox: bool) -> None:
    """Rotary embedding of query and key in place, as ``vllm._custom_ops.rotary_embedding``.

    positions      ``[T]`` int32/int64, or ``[B, S]`` (a batch of sequences: ``T = B * S`` tokens).
    query, key     per token ``[H * head_size]`` (vLLM's flat form) or ``[H, head_size]``, after the leading dims of
                   positions: ``[T, ...]`` or ``[B, S, ...]`` (``[B * S, ...]`` beside ``[B, S]`` positions is read
                   as the same tokens). key may be None. Views into one fused qkv
                   projection are fine; the last dim must be contiguous (the rotation writes through a view).
    cos_sin_cache  ``[max_position, rot_dim]``, cos then sin; ``rot_dim < head_size`` rotates the first rot_dim dims
                   of every head (partial rotary) and leaves the rest.
    """
    if isinstance(head_size, bool) or not isinstance(head_size, int) or head_size < 1:
        raise ValueError(f"head_size must be a positive int, got {head_size!r}")
    _checks.tensor("positions", positions)
    if positions.dim() not in (1, 2):
        raise ValueError(f"positions must be [num_tokens] or [batch_size, seq_len], got shape "
                         f"{tuple(positions.shape)}")
    lead = tuple(positions.shape)
    q = _heads("query", query, head_size, lead)
    k = _heads("key", key, head_size, lead) if key is not None else None
    positions = positions.reshape(-1)
    _rot._check(positions, q, k, cos_sin_cache, is_neox, q_name="query", k_name="key")
    _rot._run(positions, q, k, cos_sin_cache, is_neox)


def _heads(name: str, t, head_size: int, lead: tuple) -> torch.Tensor:
    """``t`` as ``[T, H, head_size]``, a view the rotation writes through: ``t`` is ``lead`` (the positions'
    shape) followed by ``[H * head_size]`` or ``[H, head_size]``."""
    _checks.tensor(name, t, last_contiguous=True)
    forms = (f"{name} must be [{', '.join(map(str, lead))}, num_heads * head_size] or "
             f"[{', '.join(map(str, lead))}, num_heads, head_size] (positions' shape {list(lead)} first) with "
             f"head_size {head_size}, got shape {tuple(t.shape)}")
    if len(lead) == 2 and tuple(t.shape[:2]) != lead and t.dim() >= 1 and t.shape[0] == lead[0] * lead[1]:
        lead = (lead[0] * lead[1],)  # [B, S] positions beside [B * S, ...] tokens: the same tokens, flattened
    rest = tuple(t.shape[len(lead):])
    if tuple(t.shape[:len(lead)]) != lead or not (
            (len(rest) == 1 and rest[0] % head_size == 0 and rest[0] > 0)
            or (len(rest) == 2 and rest[1] == head_size and rest[0] > 0)):
        raise ValueError(forms)
    n = 1
    for x in lead:
        n *= x
    try:
        return t.view(n, (rest[0] if len(rest) == 2 else rest[0] // head_size), head_size)
    except RuntimeError:
        raise ValueError(f"{name} of shape {tuple(t.shape)} and strides {t.stride()} cannot be viewed as "
                         f"[num_tokens, num_heads, head_size] (its leading dims are not evenly strided); the "
                         f"rotation writes in place, so it needs a view, not a copy") from None


# -- reshape_and_cache_flash ----------------------------------------------------------------------------------------
def reshape_and_cache_flash(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
                            value_cache: torch.Tensor, slot_mapping: torch.Tensor, kv_cache_dtype: str,
                            k_scale: torch.Tensor, v_scale: torch.Tensor) -> None:
    """Write key/value rows into the flash-layout caches ``[num_blocks, block_size, num_kv_heads, head_size]`` at
    ``slot_mapping`` (``-1``: padding, skipped). key/value ``[num_rows, num_kv_heads, head_size]`` may hold more
    rows than slot_mapping has entries (vLLM pads them to a CUDA-graph size): only the first
    ``slot_mapping.shape[0]`` are written. ``kv_cache_dtype`` "auto" copies, "fp8"/"fp8_e4m3" stores ``x / scale``
    in float8_e4m3fn (or uint8) caches; k_scale/v_scale are one-element float32 tensors."""
    _reshape_and_cache(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype=kv_cache_dtype,
                       k_scale=k_scale, v_scale=v_scale)


# -- unified_attention ----------------------------------------------------------------------------------------------
def unified_attention(q, k, v, out, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k, softmax_scale, causal,
                      window_size, block_table, softcap, q_descale, k_descale, v_descale, seq_threshold_3D=None,
                      num_par_softmax_segments=None, softmax_segm_output=None, softmax_segm_max=None,
                      softmax_segm_expsum=None, alibi_slopes=None, output_scale=None, qq_bias=None, sinks=None,
                      mm_prefix_range=None, rswa_prefix_lens=None, rswa_window=None, use_alibi_sqrt=False,
                      kv_quant_mode=None, k_scale_cache=None, v_scale_cache=None, chunk_lookback=-1, use_td=False,
                      mm_prefix_clamp_sliding_window=False) -> None:
    """vLLM's ``unified_attention``: attention of a varlen batch over a paged cache, written into ``out``.

    q ``[T, Hq, D]``; k/v the caches ``[num_blocks, block_size, Hkv, D]`` (q's dtype or float8_e4m3fn); out
    ``[T, Hq, D]``; cu_seqlens_q ``[num_seqs + 1]``, seqused_k ``[num_seqs]``, block_table ``[num_seqs,
    max_blocks]`` int32; window_size ``(left, right)``, -1 unbounded; softcap 0 for none; sinks ``[Hq]``.
    k_descale/v_descale: the per-tensor scales of an fp8 cache, float32; as in vLLM's kernel the first element is
    the scale (a one-element tensor, or it broadcast or filled to ``[num_seqs, num_kv_heads]``); ignored for a
    q-dtype cache. Query rows past
    ``cu_seqlens_q[-1]`` (CUDA-graph padding) are left untouched in ``out``.

    vLLM's scratch arguments (``seq_threshold_3D``, ``num_par_softmax_segments``, ``softmax_segm_*``) and
    ``use_td`` are accepted and not needed. Features this kernel does not implement are refused by name: fp8
    queries (``q_descale``), an fp8 output (``output_scale``), ALiBi, ``qq_bias``, PrefixLM ranges, R-SWA, chunked
    attention, per-token-head KV quantization, a per-sequence ``causal`` tensor.
    """
    unsupported = {"q_descale": q_descale is not None, "output_scale": output_scale is not None,
                   "alibi_slopes": alibi_slopes is not None, "use_alibi_sqrt": bool(use_alibi_sqrt),
                   "qq_bias": qq_bias is not None, "mm_prefix_range": mm_prefix_range is not None,
                   "rswa_prefix_lens": rswa_prefix_lens is not None, "rswa_window": rswa_window is not None,
                   "chunk_lookback": chunk_lookback not in (-1, None), "k_scale_cache": k_scale_cache is not None,
                   "v_scale_cache": v_scale_cache is not None,
                   "causal": isinstance(causal, torch.Tensor)}
    bad = [name for name, used in unsupported.items() if used]
    if bad:
        raise NotImplementedError(f"unified_attention: {', '.join(bad)} {'is' if len(bad) == 1 else 'are'} not "
                                  f"supported by tritonkit's paged attention (pass the default)")
    mode = getattr(kv_quant_mode, "name", kv_quant_mode)
    if mode not in (None, "NONE", "FP8_PER_TENSOR", 0, 1):
        raise NotImplementedError(f"unified_attention: kv_quant_mode {mode} is not supported (only none and fp8 "
                                  f"per-tensor)")
    if out is None:
        raise TypeError("out must be a tensor of q's shape and dtype: unified_attention writes into it")
    fp8 = isinstance(k, torch.Tensor) and k.dtype == torch.float8_e4m3fn
    k_scale = _descale("k_descale", k_descale, cu_seqlens_q, k) if fp8 else None
    v_scale = _descale("v_descale", v_descale, cu_seqlens_q, k) if fp8 else None
    _paged_attention(q, k, v, cu_seqlens_q=cu_seqlens_q, seqused_k=seqused_k, block_table=block_table,
                     max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, softmax_scale=softmax_scale,
                     causal=bool(causal), window_size=tuple(window_size), softcap=float(softcap), sinks=sinks,
                     out=out, k_scale=k_scale, v_scale=v_scale)


def _descale(name: str, s, cu_seqlens_q, k) -> torch.Tensor:
    """The per-tensor scale: the first element of ``s``, which is what vLLM's kernel reads (a one-element tensor,
    or the scale broadcast or materialized to ``[num_seqs, num_kv_heads]``, as vLLM's callers and tests pass it).
    Per-head scales are not supported, by vLLM's kernel either: the other elements are not read."""
    if not isinstance(s, torch.Tensor) or s.dtype != torch.float32 or s.numel() < 1:
        got = (f"{s.dtype} tensor of shape {tuple(s.shape)}" if isinstance(s, torch.Tensor) else type(s).__name__)
        raise TypeError(f"{name} must be a float32 tensor holding the fp8 cache's per-tensor scale, got {got}")
    return s.as_strided((1,), (1,))


# -- shared checks --------------------------------------------------------------------------------------------------
def _out(name: str, out, input: torch.Tensor) -> None:
    _checks.inference_only(**{name: out})
    _checks.tensor(name, out, dtypes=(input.dtype,), last_contiguous=True)
    _checks.shape_equal(name, out, tuple(input.shape), "input's shape")
    _checks.same_device(**{name: out, "input": input})


def _no_overlap(name: str, a: torch.Tensor, other: str, b: torch.Tensor) -> None:
    """Two separate tensors of a call (one written while the other is read) must not share memory; decided by their
    byte spans, which separate allocations never share."""
    if a.device.type == "meta" or not a.numel() or not b.numel() or through_dispatcher(a, b):
        return  # meta and fake tensors have no data pointers (functionalization rejects overlapping writes)
    a0, b0 = a.data_ptr(), b.data_ptr()
    a1 = a0 + (sum((n - 1) * s for n, s in zip(a.shape, a.stride())) + 1) * a.element_size()
    b1 = b0 + (sum((n - 1) * s for n, s in zip(b.shape, b.stride())) + 1) * b.element_size()
    if a0 < b1 and b0 < a1:
        raise ValueError(f"{name} must not overlap {other} (the kernel writes one while it reads the other)")
