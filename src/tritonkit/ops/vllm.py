"""vLLM's call forms of the ops: swap ``vllm._custom_ops`` / ``unified_attention`` for these by changing an import.

Each function takes vLLM's arguments in vLLM's order (as of vLLM 0.33.0) and has vLLM's semantics: outputs are
written into the tensors passed (``out``, or the inputs themselves for the fused and in-place forms) and nothing is
returned (``fused_experts`` returns its output, as vLLM's does). Arguments are checked before anything is written,
and a rejected call writes nothing.

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
``topk_softmax``          ``(topk_weights, topk_ids, token_expert_indices, gating_output, renormalize)``: the
                          router's softmax and top-k, into the three ``[M, topk]`` buffers
``moe_align_block_size``  ``(topk_ids, num_experts, block_size, sorted_token_ids, experts_ids,
                          num_tokens_post_pad, expert_map)``: slots sorted by expert, into the buffers
``fused_experts``         ``(hidden_states, w1, w2, topk_weights, topk_ids, activation, apply_router_weight_on_input,
                          global_num_experts, expert_map, quant_config)`` (``vllm.model_executor.layers.fused_moe``):
                          returns the MoE layer's output
========================  ===============================================================================

Under ``torch.compile``, ``make_fx`` or ``FakeTensorMode`` each call goes through a ``tritonkit::vllm_*`` op that
declares what it mutates.
"""

from __future__ import annotations

import torch

from . import _checks
from ._ints import cdiv
from ._library import through_dispatcher
from .fused_moe import api as _moe
from .moe_align_block_size import api as _align
from .moe_align_block_size.config import max_padded as _max_padded
from .paged_attention.api import paged_attention as _paged_attention
from .reshape_and_cache.api import reshape_and_cache as _reshape_and_cache
from .rms_norm import api as _rms
from .rotary_embedding import api as _rot
from .silu_and_mul import api as _silu
from .topk_softmax import api as _topk

__all__ = ["fused_add_rms_norm", "fused_experts", "moe_align_block_size", "reshape_and_cache_flash", "rms_norm",
           "rotary_embedding", "silu_and_mul", "topk_softmax", "unified_attention"]

#: the vLLM release whose call forms these follow
VLLM_VERSION = "0.33.0"


# -- rms_norm -------------------------------------------------------------------------------------------------------
@torch.library.custom_op("tritonkit::vllm_rms_norm", mutates_args=("out",))
def _rms_norm_op(out: torch.Tensor, input: torch.Tensor, weight: torch.Tensor, epsilon: float) -> None:
    _rms.launch_into(input, weight, epsilon, None, out, None)


@_rms_norm_op.register_fake
def _(out, input, weight, epsilon):
    return None


def rms_norm(out: torch.Tensor, input: torch.Tensor, weight: torch.Tensor, epsilon: float) -> None:
    """``out [..., hidden] = input * rsqrt(mean(input^2, -1) + epsilon) * weight`` (input's dtype; statistics in
    float32). ``out`` has input's shape and dtype; its rows may be strided, its last dim contiguous. ``out`` may be
    ``input`` itself (exactly in place: each row is read before it is written) but may not otherwise overlap it or
    weight."""
    _rms.check_args(input, weight, epsilon, None, x_name="input", eps_name="epsilon")
    _out("out", out, input)
    _checks.distinct_elements("out", out)
    _checks.no_overlap("out", out, in_place_ok=True, input=input)
    _checks.no_overlap("out", out, weight=weight)
    if through_dispatcher(out, input, weight):
        torch.ops.tritonkit.vllm_rms_norm(out, input, weight, float(epsilon))
    else:
        _rms.launch_into(input, weight, float(epsilon), None, out, None)


@torch.library.custom_op("tritonkit::vllm_fused_add_rms_norm", mutates_args=("input", "residual"))
def _fused_add_rms_norm_op(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                           epsilon: float) -> None:
    _rms.launch_into(input, weight, epsilon, residual, input, residual)


@_fused_add_rms_norm_op.register_fake
def _(input, residual, weight, epsilon):
    return None


def fused_add_rms_norm(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, epsilon: float) -> None:
    """In place: ``residual <- input + residual`` (rounded to input's dtype), then ``input <- rms_norm(residual) *
    weight``. Each row is read before it is written, so the two may not overlap each other but are their own
    outputs."""
    _rms.check_args(input, weight, epsilon, residual, x_name="input", eps_name="epsilon")
    _checks.distinct_elements("input", input, "it is written in place")
    _checks.distinct_elements("residual", residual, "it is written in place")
    _checks.no_overlap("residual", residual, input=input)
    _checks.no_overlap("input", input, weight=weight)
    _checks.no_overlap("residual", residual, weight=weight)
    if through_dispatcher(input, residual, weight):
        torch.ops.tritonkit.vllm_fused_add_rms_norm(input, residual, weight, float(epsilon))
    else:
        _rms.launch_into(input, weight, float(epsilon), residual, input, residual)


# -- silu_and_mul ---------------------------------------------------------------------------------------------------
@torch.library.custom_op("tritonkit::vllm_silu_and_mul", mutates_args=("out",))
def _silu_and_mul_op(out: torch.Tensor, input: torch.Tensor) -> None:
    _silu.forward(input, out)


@_silu_and_mul_op.register_fake
def _(out, input):
    return None


def silu_and_mul(out: torch.Tensor, input: torch.Tensor) -> None:
    """``out [..., d] = silu(input[..., :d]) * input[..., d:]``, in float32 with one rounding."""
    _silu.check_args(input, x_name="input")
    _checks.inference_only(out=out)
    _checks.tensor("out", out, dtypes=(input.dtype,), last_contiguous=True)
    _checks.shape_equal("out", out, (*input.shape[:-1], input.shape[-1] // 2), "input's shape with half its last "
                        "dimension")
    _checks.same_device(out=out, input=input)
    _checks.distinct_elements("out", out)
    _checks.no_overlap("out", out, input=input)
    if through_dispatcher(out, input):
        torch.ops.tritonkit.vllm_silu_and_mul(out, input)
    else:
        _silu.forward(input, out)


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
    _rot.check_args(positions, q, k, cos_sin_cache, is_neox, q_name="query", k_name="key")
    _rot.run_in_place(positions, q, k, cos_sin_cache, is_neox)


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


# -- topk_softmax ---------------------------------------------------------------------------------------------------
def topk_softmax(topk_weights: torch.Tensor, topk_ids: torch.Tensor, token_expert_indices: torch.Tensor,
                 gating_output: torch.Tensor, renormalize: bool = False, e_score_correction_bias=None,
                 is_padding=None) -> None:
    """The router's float32 softmax over ``gating_output [M, E]`` and its top ``topk`` experts, written into
    ``topk_weights [M, topk]`` float32, ``topk_ids [M, topk]`` int32/int64 and ``token_expert_indices [M, topk]``
    int32 (``j * M + m``: slot (m, j)'s row in the expert-major order, as vLLM's kernel writes it). Ties go to the
    lower expert. ``e_score_correction_bias`` and ``is_padding`` are not supported (pass None)."""
    bad = [n for n, v in (("e_score_correction_bias", e_score_correction_bias), ("is_padding", is_padding))
           if v is not None]
    if bad:
        raise NotImplementedError(f"topk_softmax: {', '.join(bad)} not supported (pass None)")
    _checks.inference_only(topk_weights=topk_weights, topk_ids=topk_ids, token_expert_indices=token_expert_indices)
    _checks.tensor("topk_weights", topk_weights, dtypes=(torch.float32,), ndim=2)
    m, k = topk_weights.shape
    _checks.tensor("topk_ids", topk_ids, dtypes=_checks.INDEX_DTYPES, ndim=2)
    _checks.shape_equal("topk_ids", topk_ids, (m, k), "topk_weights's [M, topk]")
    _checks.tensor("token_expert_indices", token_expert_indices, dtypes=_checks.INDEX_DTYPES, ndim=2)
    _checks.shape_equal("token_expert_indices", token_expert_indices, (m, k), "topk_weights's [M, topk]")
    _checks.tensor("gating_output", gating_output, ndim=2)
    if gating_output.shape[0] != m:
        raise ValueError(f"gating_output must have topk_weights's {m} rows, got shape {tuple(gating_output.shape)}")
    _checks.same_device(topk_weights=topk_weights, topk_ids=topk_ids, token_expert_indices=token_expert_indices,
                        gating_output=gating_output)
    _distinct_outputs(topk_weights=topk_weights, topk_ids=topk_ids, token_expert_indices=token_expert_indices)
    _topk.check_args(gating_output, k, bool(renormalize))
    w, ids = _topk.topk_softmax(gating_output, k, renormalize=bool(renormalize))
    topk_weights.copy_(w)
    topk_ids.copy_(ids)
    rows = torch.arange(m, dtype=token_expert_indices.dtype, device=token_expert_indices.device)
    token_expert_indices.copy_(torch.arange(k, dtype=rows.dtype, device=rows.device)[None, :] * m + rows[:, None])


# -- moe_align_block_size -------------------------------------------------------------------------------------------
def moe_align_block_size(topk_ids: torch.Tensor, num_experts: int, block_size: int, sorted_token_ids: torch.Tensor,
                         experts_ids: torch.Tensor, num_tokens_post_pad: torch.Tensor,
                         expert_map: torch.Tensor | None = None, scatter_idx=None) -> None:
    """``vllm._custom_ops.moe_align_block_size``: slots ``m * topk + j`` of ``topk_ids`` sorted by expert, each
    expert's run padded to a multiple of block_size with ``numel``, into the caller's int32 buffers
    ``sorted_token_ids`` (at least ``min(numel * block_size, numel + num_experts * (block_size - 1))`` long, as
    vLLM sizes it; entries past the padded runs hold numel), ``experts_ids`` (one expert per block; -1 past the
    runs) and ``num_tokens_post_pad [1]``. With ``expert_map`` (global id -> local index or -1) slots of experts on
    other ranks are left out and experts_ids holds local indices, as vLLM's op with a map does. ``scatter_idx``
    is not supported (pass None)."""
    if scatter_idx is not None:
        raise NotImplementedError("moe_align_block_size: scatter_idx not supported (pass None)")
    _align.check_args(topk_ids, block_size, num_experts, expert_map)
    numel = topk_ids.numel()
    need = _max_padded(numel, block_size, num_experts)
    for name, t, n in (("sorted_token_ids", sorted_token_ids, need), ("experts_ids", experts_ids,
                                                                       cdiv(need, block_size)),
                       ("num_tokens_post_pad", num_tokens_post_pad, 1)):
        _checks.inference_only(**{name: t})
        _checks.tensor(name, t, dtypes=(torch.int32,), ndim=1)
        if t.shape[0] < n:
            raise ValueError(f"{name} must hold at least {n} entries for {numel} slots, {num_experts} experts and "
                             f"block_size {block_size}, got shape {tuple(t.shape)}")
    _checks.same_device(topk_ids=topk_ids, sorted_token_ids=sorted_token_ids, experts_ids=experts_ids,
                        num_tokens_post_pad=num_tokens_post_pad, expert_map=expert_map)
    _distinct_outputs(sorted_token_ids=sorted_token_ids, experts_ids=experts_ids,
                      num_tokens_post_pad=num_tokens_post_pad)
    ids = topk_ids
    if expert_map is not None:
        # slots of other ranks' experts drop out (local -1 is out of range); the run ids are local indices
        valid = (topk_ids >= 0) & (topk_ids < num_experts)
        ids = torch.where(valid, expert_map[torch.where(valid, topk_ids, 0)].to(topk_ids.dtype), -1)
    # the ids were checked above as the caller passed them: the mapped ones (-1 for other ranks) are not re-checked
    if through_dispatcher(ids):
        s, e, n = torch.ops.tritonkit.moe_align_block_size(ids, block_size, num_experts, None)
    else:
        s, e, n = _align.forward(ids, block_size, num_experts, None)
    sorted_token_ids[:need].copy_(s)
    sorted_token_ids[need:].fill_(numel)
    experts_ids[:e.shape[0]].copy_(e)
    experts_ids[e.shape[0]:].fill_(-1)
    num_tokens_post_pad[:1].copy_(n)


# -- fused_experts --------------------------------------------------------------------------------------------------
# FusedMoEQuantConfig fields vLLM reads in fused_experts that tritonkit has no kernel for: refused when set
_QUANT_REFUSED = ("use_int8_w8a8", "use_int8_w8a16", "use_int4_w4a16", "ocp_mx_scheme", "w1_zp", "w2_zp", "w1_bias",
                  "w2_bias")


def fused_experts(hidden_states: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor,
                  topk_ids: torch.Tensor, activation="silu", apply_router_weight_on_input: bool = False,
                  global_num_experts: int = -1, expert_map: torch.Tensor | None = None,
                  quant_config=None) -> torch.Tensor:
    """``vllm.model_executor.layers.fused_moe.fused_experts``: the MoE layer, returned as a new ``[M, K]`` tensor.

    hidden_states ``[M, K]`` bf16/fp16 (vLLM also takes float32; tritonkit does not); w1 ``[E, 2N, K]`` (gate rows
    then up rows), w2 ``[E, K, N]``; topk_* ``[M, topk]``. ``activation``: "silu" or "gelu", or vLLM's
    ``MoEActivation`` member of that value. ``quant_config``: None (weights in the activation dtype) or vLLM's
    ``FusedMoEQuantConfig`` (any object with its fields): fp8 w8a8 with per-tensor, per-channel or 128 x 128
    block weight scales, static ``a1_scale``/``a2_scale`` or dynamic activation scales (per token when
    ``per_act_token_quant``, else one per tensor, as vLLM). int8/int4/MX schemes, zero points and biases are
    refused by name. See :func:`tritonkit.ops.fused_moe` for the arithmetic."""
    act = getattr(activation, "value", activation)
    if global_num_experts not in (-1, None):
        e_global = expert_map.shape[0] if isinstance(expert_map, torch.Tensor) else w1.shape[0]
        if global_num_experts != e_global:
            raise ValueError(f"global_num_experts must be -1 or the number of global experts {e_global} "
                             f"(expert_map's length, else w1.shape[0]), got {global_num_experts}")
    q = {}
    if quant_config is not None:
        # "is", not "in": a zero-point tensor compared with False would be an elementwise test
        bad = [f for f in _QUANT_REFUSED if getattr(quant_config, f, None) is not None
               and getattr(quant_config, f) is not False]
        if bad:
            raise NotImplementedError(f"fused_experts: quant_config.{', quant_config.'.join(bad)} not supported "
                                      f"(bf16/fp16 and fp8 w8a8 only)")
        fp8 = bool(getattr(quant_config, "use_fp8_w8a8", False))
        is_fp8 = isinstance(w1, torch.Tensor) and w1.dtype == _moe.FP8_DTYPE
        if fp8 != is_fp8:
            raise ValueError(f"quant_config.use_fp8_w8a8 is {fp8} but w1 is "
                             f"{w1.dtype if isinstance(w1, torch.Tensor) else type(w1).__name__}")
        q = {k: getattr(quant_config, k, None) for k in ("w1_scale", "w2_scale", "a1_scale", "a2_scale",
                                                           "block_shape")}
        q["per_act_token_quant"] = bool(getattr(quant_config, "per_act_token_quant", False))
        if q["block_shape"] is not None:
            q["per_act_token_quant"] = True  # block-wise: per 128-column group whatever the flag
    elif isinstance(w1, torch.Tensor) and w1.dtype == _moe.FP8_DTYPE:
        raise ValueError("quant_config must describe the fp8 scheme: w1 is float8_e4m3fn")
    return _moe.fused_moe(hidden_states, w1, w2, topk_weights, topk_ids, activation=act,
                          apply_router_weight_on_input=bool(apply_router_weight_on_input), expert_map=expert_map,
                          **q)


# -- shared checks --------------------------------------------------------------------------------------------------
def _out(name: str, out, input: torch.Tensor) -> None:
    _checks.inference_only(**{name: out})
    _checks.tensor(name, out, dtypes=(input.dtype,), last_contiguous=True)
    _checks.shape_equal(name, out, tuple(input.shape), "input's shape")
    _checks.same_device(**{name: out, "input": input})


def _distinct_outputs(**outs: torch.Tensor) -> None:
    """Output buffers a form copies into one after another: each must have one element per memory location (no
    ``expand``), and no two may share memory, or a later copy would fail (or silently overwrite) after an earlier
    one has written."""
    items = list(outs.items())
    for i, (name, t) in enumerate(items):
        if not through_dispatcher(t):
            _checks.distinct_elements(name, t, "a copy into it would fail")
            _checks.no_overlap(name, t, **dict(items[:i]))
