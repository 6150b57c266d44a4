"""paged_attention's bench peers: vLLM's Triton attention and vLLM's FlashAttention-3 (``OpSpec.peers``) and dense
SDPA, its speed-of-light reference (``OpSpec.speed_of_light``).

vllm  ``unified_attention`` (``vllm/v1/attention/ops/triton_unified_attention``), called as vLLM's Triton backend
      calls it: the output and the split decode kernel's scratch allocated outside the timing. Optional, never a
      dependency: put vLLM, or its Triton kernels extracted by ``shared/peers/vllm-triton-kernels.sh``, on PYTHONPATH.
fa3   vLLM 0.34's FlashAttention-3 binary (what vLLM runs by default on Hopper) through ``vllm_fa3_peer.fa3_varlen``,
      which ``shared/peers/vllm-fa3.sh DIR`` cuts out of vLLM's wheel: put DIR on PYTHONPATH. Called as vLLM's
      FlashAttention backend calls it, on the same paged cache: the output and the scheduler's metadata
      (``get_scheduler_metadata``, once per batch in vLLM) built outside the timing. Sinks and fp8 caches are
      :class:`~tritonkit.spec.Inapplicable` (the wrapper passes neither ``s_aux`` nor descales), as are pages and
      head sizes vLLM never gives FA3.
sdpa  ``torch.nn.functional.scaled_dot_product_attention`` on dense copies of the point's keys and values (gathered
      from the paged cache outside the timing), where a dense call computes the same thing (a causal prompt:
      cuDNN's kernel; a prompt after cached keys: bottom-right causal mask; a decode batch of equal lengths);
      :class:`~tritonkit.spec.Inapplicable` with the reason elsewhere.
"""

from __future__ import annotations

import importlib

import torch

from ...spec import Inapplicable, OpSpec, Peer, Unavailable
from .._alloc import empty_like

#: vLLM's Triton backend: the split ("3D") decode kernel below this many sequences x KV heads, 16 segments
VLLM_3D_SEQS_X_KV_HEADS = 128
VLLM_SOFTMAX_SEGMENTS = 16


def vllm(spec: OpSpec, dtype: torch.dtype) -> Peer:
    """The ``vllm`` peer: vLLM's ``unified_attention``, called as vLLM's Triton attention backend calls it."""
    mod_name = "vllm.v1.attention.ops.triton_unified_attention"
    try:
        ua = importlib.import_module(mod_name).unified_attention
    except Exception as e:  # noqa: BLE001 - ImportError, or a stand-in module vLLM's file does not agree with
        raise Unavailable(f"vLLM not importable ({type(e).__name__}: {e})") from None

    def prepare(inputs: dict) -> dict:
        # what vLLM's Triton attention backend allocates once per batch: the output and the 3D kernel's scratch
        q = inputs["q"]
        t, hq, d = q.shape
        segs = VLLM_SOFTMAX_SEGMENTS
        f32 = dict(dtype=torch.float32, device=q.device)
        window = inputs.get("window_size", (-1, -1))
        fp8 = inputs["k_cache"].dtype == torch.float8_e4m3fn
        kw = dict(
            q=q,
            k=inputs["k_cache"],
            v=inputs["v_cache"],
            out=torch.empty_like(q),
            cu_seqlens_q=inputs["cu_seqlens_q"],
            max_seqlen_q=inputs["max_seqlen_q"],
            seqused_k=inputs["seqused_k"],
            max_seqlen_k=inputs["max_seqlen_k"],
            softmax_scale=d**-0.5,
            causal=bool(inputs.get("causal", True)),
            window_size=tuple(window),
            block_table=inputs["block_table"],
            softcap=float(inputs.get("softcap", 0.0)),
            q_descale=None,
            k_descale=inputs.get("k_scale") if fp8 else None,
            v_descale=inputs.get("v_scale") if fp8 else None,
            seq_threshold_3D=VLLM_3D_SEQS_X_KV_HEADS // inputs["k_cache"].shape[2],
            num_par_softmax_segments=segs,
            softmax_segm_output=torch.empty(t, hq, segs, 1 << (d - 1).bit_length(), **f32),
            softmax_segm_max=torch.empty(t, hq, segs, **f32),
            softmax_segm_expsum=torch.empty(t, hq, segs, **f32),
            sinks=inputs.get("sinks"),
        )
        if fp8:
            kw["kv_quant_mode"] = 1  # KVQuantMode.FP8_PER_TENSOR
        return kw

    def fn(kw: dict) -> dict:
        ua(**kw)
        return {"out": kw["out"]}

    return Peer(
        f"{mod_name}.unified_attention (vLLM's Triton backend: 3D decode below "
        f"{VLLM_3D_SEQS_X_KV_HEADS} seqs x KV heads, {VLLM_SOFTMAX_SEGMENTS} segments)",
        fn,
        (mod_name,),
        prepare=prepare,
    )


FA3_MODULE = "vllm_fa3_peer"
#: the torch.ops namespace the FA3 binary registers ``fwd`` and ``get_scheduler_metadata`` in
FA3_OPS = "_vllm_fa3_C"
#: vLLM's FlashAttention backend: pages of a multiple of 16 keys (``get_supported_kernel_block_sizes``), head sizes
#: a multiple of 8 up to 256 on FA3 (``supports_head_size``)
FA3_PAGE_MULTIPLE = 16
FA3_MAX_HEAD_DIM = 256


def _fa3_scheduler_op():
    """The binary's ``get_scheduler_metadata``; None where it is not loaded (a stand-in module)."""
    return getattr(getattr(torch.ops, FA3_OPS), "get_scheduler_metadata", None)


def _fa3_schedule(inputs: dict, causal: bool, window: tuple[int, int], softcap: float):
    """The work schedule vLLM's metadata builder computes once per batch (``aot_schedule`` with FA3) and hands to
    every layer's call; None where the binary's op is not loaded (FA3 then schedules inside each call)."""
    op = _fa3_scheduler_op()
    if op is None:
        return None
    q, k_cache = inputs["q"], inputs["k_cache"]
    bs, hkv, d = k_cache.shape[1:]
    return op(
        batch_size=inputs["seqused_k"].shape[0],
        max_seqlen_q=inputs["max_seqlen_q"],
        max_seqlen_k=inputs["max_seqlen_k"],
        num_heads=q.shape[1],
        num_heads_k=hkv,
        headdim=d,
        headdim_v=d,
        qkv_dtype=q.dtype,
        seqused_k=inputs["seqused_k"],
        cu_seqlens_q=inputs["cu_seqlens_q"],
        cu_seqlens_k=None,
        cu_seqlens_k_new=None,
        seqused_q=None,
        leftpad_k=None,
        page_size=bs,
        max_seqlen_k_new=0,
        is_causal=causal,
        window_size_left=window[0],
        window_size_right=window[1],
        has_softcap=softcap != 0.0,
        num_splits=0,  # FA3's split heuristic, as vLLM outside full CUDA graphs; fwd gets the same
        pack_gqa=None,
        sm_margin=0,
    )


def fa3(spec: OpSpec, dtype: torch.dtype) -> Peer:
    """The ``fa3`` peer: vLLM 0.34's FlashAttention-3 on the same paged cache, called as vLLM's backend calls it."""
    try:
        fa3_varlen = importlib.import_module(FA3_MODULE).fa3_varlen
    except Exception as e:  # noqa: BLE001 - ImportError, or OSError where the CUDA binary cannot load (no GPU)
        cause = f"; {e.__cause__}" if e.__cause__ is not None else ""
        raise Unavailable(
            f"vLLM's FA3 peer not importable ({type(e).__name__}: {e}{cause}): cut it with "
            f"shared/peers/vllm-fa3.sh DIR and put DIR on PYTHONPATH; it needs CUDA and a Hopper GPU"
        ) from None

    def prepare(inputs: dict) -> dict:
        q, k_cache = inputs["q"], inputs["k_cache"]
        bs, _, d = k_cache.shape[1:]
        if k_cache.dtype != q.dtype:
            raise Inapplicable(
                "fp8 KV cache: fa3_varlen passes no q/k/v descales (and FA3's fp8 path takes q in fp8 too)"
            )
        if inputs.get("sinks") is not None:
            raise Inapplicable("sinks: fa3_varlen passes no s_aux")
        if bs % FA3_PAGE_MULTIPLE:
            raise Inapplicable(f"block_size {bs}: vLLM runs FA3 on pages of a multiple of {FA3_PAGE_MULTIPLE} keys")
        if d % 8 or d > FA3_MAX_HEAD_DIM:
            raise Inapplicable(f"head_dim {d}: FA3 takes head sizes a multiple of 8 up to {FA3_MAX_HEAD_DIM}")
        causal = bool(inputs.get("causal", True))
        window = tuple(inputs.get("window_size", (-1, -1)))
        softcap = float(inputs.get("softcap", 0.0))
        return dict(
            q=q,
            k_cache=k_cache,
            v_cache=inputs["v_cache"],
            cu_seqlens_q=inputs["cu_seqlens_q"],
            seqused_k=inputs["seqused_k"],
            block_table=inputs["block_table"],
            max_seqlen_q=inputs["max_seqlen_q"],
            max_seqlen_k=inputs["max_seqlen_k"],
            softmax_scale=d**-0.5,
            causal=causal,
            window_size=window,
            softcap=softcap,
            out=empty_like(q),
            scheduler_metadata=_fa3_schedule(inputs, causal, window, softcap),
            num_splits=0,
        )

    def fn(kw: dict) -> dict:
        return {"out": fa3_varlen(**kw)}

    schedule = (
        "scheduler metadata built per batch outside the timing"
        if _fa3_scheduler_op() is not None
        else "no get_scheduler_metadata: FA3 schedules inside each call"
    )
    return Peer(
        f"{FA3_MODULE}.fa3_varlen (vLLM's FlashAttention-3, {FA3_OPS}.fwd, on the paged cache; {schedule}, FA3's "
        "split heuristic)",
        fn,
        prepare=prepare,
    )


def _dense_kv(inputs: dict, s: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequence s's keys and values gathered from the paged cache into [Hkv, L, D]."""
    n = int(inputs["seqused_k"][s])
    bs = inputs["k_cache"].shape[1]
    pages = inputs["block_table"][s, : -(-n // bs)].long()
    hkv, d = inputs["k_cache"].shape[2:]
    k = inputs["k_cache"][pages].reshape(-1, hkv, d)[:n].transpose(0, 1).contiguous()
    v = inputs["v_cache"][pages].reshape(-1, hkv, d)[:n].transpose(0, 1).contiguous()
    return k, v


def sdpa(spec: OpSpec, dtype: torch.dtype) -> Peer:
    """The ``sdpa`` speed-of-light reference: torch SDPA on dense copies of the point's keys and values."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def prepare(inputs: dict) -> dict:
        q = inputs["q"]
        cu = inputs["cu_seqlens_q"].tolist()
        q_lens = [b - a for a, b in zip(cu, cu[1:])]
        seq_k = inputs["seqused_k"].tolist()
        plain = (
            bool(inputs.get("causal", True))
            and tuple(inputs.get("window_size", (-1, -1))) == (-1, -1)
            and not inputs.get("softcap")
            and inputs.get("sinks") is None
        )
        if inputs["k_cache"].dtype != q.dtype or not plain:
            raise Inapplicable("SDPA has no paged fp8 cache, window, softcap or sinks: no dense equivalent")
        if len(q_lens) == 1 and q_lens[0] > 1:
            # one causal prompt: cuDNN's attention (the fastest SDPA backend on Hopper), KV heads expanded; a
            # prompt after cached keys (chunked prefill) needs the bottom-right causal mask, which SDPA runs on its
            # memory-efficient kernel
            k, v = _dense_kv(inputs, 0)
            group = q.shape[1] // k.shape[0]
            kw = {
                "q": q.transpose(0, 1).unsqueeze(0),
                "k": k.repeat_interleave(group, 0).unsqueeze(0),
                "v": v.repeat_interleave(group, 0).unsqueeze(0),
                "causal": True,
                "mask": None,
                "backend": SDPBackend.CUDNN_ATTENTION if q.is_cuda else SDPBackend.MATH,
            }
            if q_lens[0] != seq_k[0]:
                from torch.nn.attention.bias import causal_lower_right

                kw.update(causal=False, mask=causal_lower_right(q_lens[0], seq_k[0]))
            return kw
        if len(set(q_lens)) == 1 and q_lens[0] > 1 and len(set(seq_k)) == 1:
            # equal chunks after equal contexts (speculative decoding's verify step): [B, Hq, n, D] against the
            # dense [B, Hq, L, D] keys, bottom-right causal
            from torch.nn.attention.bias import causal_lower_right

            ks, vs = zip(*(_dense_kv(inputs, s) for s in range(len(q_lens))))
            b, n = len(q_lens), q_lens[0]
            group = q.shape[1] // ks[0].shape[0]
            return {
                "q": q.view(b, n, q.shape[1], q.shape[2]).transpose(1, 2),
                "k": torch.stack(ks).repeat_interleave(group, 1),
                "v": torch.stack(vs).repeat_interleave(group, 1),
                "causal": False,
                "mask": causal_lower_right(n, seq_k[0]),
                "backend": None,
                "batched": True,
            }
        if all(n == 1 for n in q_lens) and len(set(seq_k)) == 1:
            # a decode batch of equal lengths: [B, Hq, 1, D] against [B, Hkv, L, D]
            ks, vs = zip(*(_dense_kv(inputs, s) for s in range(len(q_lens))))
            return {
                "q": q.unsqueeze(2),
                "k": torch.stack(ks),
                "v": torch.stack(vs),
                "causal": False,
                "mask": None,
                "backend": None,
            }
        raise Inapplicable("a varlen batch (mixed lengths or prefill beside decode) has no single dense SDPA call")

    def fn(kw: dict) -> dict:
        if kw.get("batched"):
            o = F.scaled_dot_product_attention(kw["q"], kw["k"], kw["v"], attn_mask=kw["mask"])
            return {"out": o.transpose(1, 2).reshape(-1, o.shape[1], o.shape[3])}  # [B, Hq, n, D] -> [B n, Hq, D]
        if kw["causal"]:
            with sdpa_kernel(kw["backend"]):
                o = F.scaled_dot_product_attention(kw["q"], kw["k"], kw["v"], is_causal=True)
            return {"out": o[0].transpose(0, 1)}  # [1, Hq, T, D] -> [T, Hq, D]
        if kw["mask"] is not None:
            o = F.scaled_dot_product_attention(kw["q"], kw["k"], kw["v"], attn_mask=kw["mask"])
            return {"out": o[0].transpose(0, 1)}
        o = F.scaled_dot_product_attention(kw["q"], kw["k"], kw["v"], enable_gqa=True)
        return {"out": o[:, :, 0]}  # [B, Hq, 1, D] -> [B, Hq, D]

    return Peer(
        "torch SDPA on dense K/V gathered outside the timing (causal prompt: cuDNN; decode "
        "batch of equal lengths: default backend with GQA; equal chunks after equal contexts: "
        "bottom-right causal mask): the dense speed-of-light",
        fn,
        prepare=prepare,
    )
