"""paged_attention's bench peers: vLLM's Triton attention (``OpSpec.peers``) and dense SDPA, its speed-of-light
reference (``OpSpec.speed_of_light``).

vllm  ``unified_attention`` (``vllm/v1/attention/ops/triton_unified_attention``), called as vLLM's Triton backend
      calls it: the output and the split decode kernel's scratch allocated outside the timing. Optional, never a
      dependency: put vLLM, or its Triton kernels extracted by ``shared/peers/vllm-triton-kernels.sh``, on PYTHONPATH.
sdpa  ``torch.nn.functional.scaled_dot_product_attention`` on dense copies of the point's keys and values (gathered
      from the paged cache outside the timing), where a dense call computes the same thing (a causal prompt:
      cuDNN's kernel; a prompt after cached keys: bottom-right causal mask; a decode batch of equal lengths);
      :class:`~tritonkit.spec.Inapplicable` with the reason elsewhere.
"""

from __future__ import annotations

import importlib

import torch

from ...spec import Inapplicable, OpSpec, Peer, Unavailable

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
