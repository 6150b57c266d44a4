"""fused_moe's bench peer (``OpSpec.peers``): vLLM's Triton fused-MoE GEMM as the ``vllm`` provider.

``shared/peers/vllm-fused-moe.sh DIR`` cuts vLLM's ``fused_moe_kernel`` and its tuned H100/H200 tables out of its
wheel into ``DIR/vllm_moe_peer`` with a driver (``get_config``, ``align``, ``gemm``); put DIR on PYTHONPATH.

What is timed is vLLM's **two GEMM launches alone** (GEMM1 on w1, GEMM2 on w2 with the routed weights multiplied
in), with vLLM's tile config (its tuned table for (E, N, device), else its default rule), on operands prepared
outside the timing. vLLM runs the rest of its layer as CUDA C++ ops that are not in the wheel's Python (the
alignment, SiLU-and-mul, the fp8 group quantization, the top_k sum), so leaving them out makes this a lower bound
on vLLM's layer, while tritonkit's provider times its whole call: the comparison cannot flatter tritonkit.

The correctness check runs the whole layer on the same launches: the alignment (the driver's, plain PyTorch),
GEMM1, SiLU-and-mul (``tritonkit.ops.silu_and_mul``), for block-fp8 the per-128-column quantization (tritonkit's
quant kernel, the arithmetic of vLLM's ``per_token_group_quant_fp8``), GEMM2 and ``torch.sum`` over top_k.
Block-fp8 GEMMs are launched the way vLLM 0.33.0's ``invoke_fused_moe_triton_kernel`` launches them (block scales,
``BLOCK_SIZE_K`` clipped to 128, swap-AB on sm_90 below 64-row tiles), with vLLM's fp8 table or its fp8 block
default rule.

Other fp8 schemes, expert maps, gelu and router weights on the input have no such launch here: skipped by name.
"""

from __future__ import annotations

import importlib

import torch

from ...spec import Inapplicable, OpSpec, Peer, Unavailable
from ..silu_and_mul.api import forward as silu_and_mul
from .api import quantize_fp8

PEER_MODULE = "vllm_moe_peer"
FP8_BLOCK = 128
# vLLM's table file suffix for block-wise fp8 w8a8
FP8_BLOCK_KEY = f",dtype=fp8_w8a8,block_shape=[{FP8_BLOCK},{FP8_BLOCK}]"


def fp8_block_default(M: int) -> dict:
    """vLLM 0.33.0's get_default_config for block-wise fp8 on CUDA (fused_moe.py): 64-wide N tiles and deeper
    pipelines for the smallest batches, 16-row tiles through M 64."""
    small = M <= 8
    return {
        "BLOCK_SIZE_M": 16 if M <= 64 else 64,
        "BLOCK_SIZE_N": 64 if small else FP8_BLOCK,
        "BLOCK_SIZE_K": FP8_BLOCK,
        "GROUP_SIZE_M": 1 if M <= 16 else 32,
        "num_warps": 4,
        "num_stages": (4 if M <= 4 else 3) if small else 3,
    }


def _swap_ab(cfg: dict, device: torch.device) -> bool:
    """vLLM's enable_swap_ab: fp8 on sm_90 with tiles under 64 rows and at least 64 columns."""
    return (
        device.type == "cuda"
        and torch.cuda.get_device_capability(device) == (9, 0)
        and cfg["BLOCK_SIZE_M"] < 64
        and cfg["BLOCK_SIZE_N"] >= 64
    )


def _fp8_gemm(
    peer,
    A,
    A_scale,
    B,
    B_scale,
    C,
    topk_weights,
    sorted_ids,
    expert_ids,
    total,
    mul_routed_weight,
    top_k,
    cfg,
    compute_type,
):
    """One block-fp8 launch of vLLM's fused_moe_kernel, with invoke_fused_moe_triton_kernel's arguments."""
    import triton

    M = A.size(0)
    EM = sorted_ids.size(0)
    if M < cfg["BLOCK_SIZE_M"]:
        EM = min(EM, M * top_k * cfg["BLOCK_SIZE_M"])
    kw = {k: v for k, v in cfg.items() if k not in ("BLOCK_SIZE_K", "SPLIT_K")}
    grid = (triton.cdiv(EM, cfg["BLOCK_SIZE_M"]) * triton.cdiv(B.size(1), cfg["BLOCK_SIZE_N"]),)
    peer.fused_moe_kernel[grid](
        A,
        B,
        C,
        None,
        A_scale,
        B_scale,
        topk_weights,
        sorted_ids,
        expert_ids,
        total,
        B.size(1),
        B.size(2),
        EM,
        M * top_k,
        A.stride(0),
        A.stride(1),
        B.stride(0),
        B.stride(2),
        B.stride(1),
        C.stride(-2),
        C.stride(-1),
        A_scale.stride(0),
        A_scale.stride(1),
        B_scale.stride(0),
        B_scale.stride(2),
        B_scale.stride(1),
        0,
        0,
        FP8_BLOCK,
        FP8_BLOCK,
        MUL_ROUTED_WEIGHT=mul_routed_weight,
        top_k=top_k,
        compute_type=compute_type,
        use_fp8_w8a8=True,
        use_int8_w8a8=False,
        use_int8_w8a16=False,
        per_channel_quant=False,
        naive_block_assignment=False,
        HAS_BIAS=False,
        BLOCK_SIZE_K=min(cfg["BLOCK_SIZE_K"], FP8_BLOCK),
        SPLIT_K=1,
        SWAP_AB=_swap_ab(cfg, A.device),
        USE_TD=False,
        **kw,
    )


def vllm(spec: OpSpec, dtype: torch.dtype) -> Peer:
    """The ``vllm`` peer: vLLM's two fused-MoE GEMM launches timed alone, the whole layer checked."""
    try:
        peer = importlib.import_module(PEER_MODULE)
        peer.fused_moe_kernel  # noqa: B018 - the driver imports vLLM's kernel: a stand-in without it is no peer
    except Exception as e:  # noqa: BLE001 - ImportError, or a stand-in module the peer script did not write
        raise Unavailable(
            f"vLLM's fused-MoE peer not importable ({type(e).__name__}: {e}); run "
            f"shared/peers/vllm-fused-moe.sh DIR and put DIR on PYTHONPATH"
        ) from None

    def prepare(inputs: dict) -> dict:
        skip = [k for k in ("expert_map", "a1_scale", "a2_scale") if inputs.get(k) is not None]
        skip += [k for k in ("apply_router_weight_on_input",) if inputs.get(k)]
        if inputs.get("activation", "silu") != "silu":
            skip.append("activation")
        block = inputs.get("block_shape") is not None
        if inputs["w1"].dtype == torch.float8_e4m3fn and not block:
            skip.append("per-tensor/per-channel fp8")
        if skip:
            raise Inapplicable(f"the vLLM peer launch here has no {', '.join(skip)}")
        x, w1, w2 = inputs["hidden_states"], inputs["w1"], inputs["w2"]
        ids, weights = inputs["topk_ids"], inputs["topk_weights"].contiguous()
        M, K = x.shape
        E, N2, _ = w1.shape
        topk = ids.shape[1]
        if block:
            cfg = (
                peer.get_config(M, E, N2 // 2, K, topk, FP8_BLOCK_KEY)
                if peer._table(E, N2 // 2, FP8_BLOCK_KEY)
                else fp8_block_default(M)
            )
        else:
            cfg = peer.get_config(M, E, N2 // 2, K, topk)
        sorted_ids, expert_ids, total = peer.align(ids.long(), cfg["BLOCK_SIZE_M"], E)
        kw = {
            "x": x,
            "w1": w1,
            "w2": w2,
            "weights": weights,
            "topk": topk,
            "cfg": cfg,
            "block": block,
            "sorted": sorted_ids,
            "experts": expert_ids,
            "total": total,
            "w1_scale": inputs.get("w1_scale"),
            "w2_scale": inputs.get("w2_scale"),
            "c1": torch.empty(M, topk, N2, dtype=x.dtype, device=x.device),
            "c3": torch.empty(M, topk, K, dtype=x.dtype, device=x.device),
        }
        return inputs_of_gemms(kw)

    def gemm1(kw: dict, a: torch.Tensor, a_s: torch.Tensor | None) -> None:
        routing = (kw["weights"], kw["sorted"], kw["experts"], kw["total"])
        if kw["block"]:
            _fp8_gemm(
                peer, a, a_s, kw["w1"], kw["w1_scale"], kw["c1"], *routing, False, kw["topk"], kw["cfg"], kw["ct"]
            )
        else:
            peer.gemm(a, kw["w1"], kw["c1"], *routing, False, kw["topk"], kw["cfg"])

    def gemm2(kw: dict, h: torch.Tensor, h_s: torch.Tensor | None) -> None:
        routing = (kw["weights"], kw["sorted"], kw["experts"], kw["total"])
        if kw["block"]:
            _fp8_gemm(peer, h, h_s, kw["w2"], kw["w2_scale"], kw["c3"], *routing, True, 1, kw["cfg"], kw["ct"])
        else:
            peer.gemm(h, kw["w2"], kw["c3"], *routing, True, 1, kw["cfg"])

    def glue(kw: dict) -> tuple[torch.Tensor, torch.Tensor | None]:
        """SiLU-and-mul of GEMM1's output (and its fp8 groups): vLLM's CUDA ops, stood in for by tritonkit's."""
        h = silu_and_mul(kw["c1"].view(-1, kw["c1"].shape[-1]))
        if kw["block"]:
            hq, h_s, *_ = quantize_fp8(h, "group", None)
            return hq, h_s
        return h, None

    def inputs_of_gemms(kw: dict) -> dict:
        """The two GEMMs' operands, made once outside the timing from the point's own data."""
        if kw["block"]:
            import triton.language as tl

            kw["ct"] = tl.bfloat16 if kw["x"].dtype == torch.bfloat16 else tl.float16
            kw["a"], kw["a_s"], *_ = quantize_fp8(kw["x"], "group", None)
        else:
            kw["a"], kw["a_s"] = kw["x"], None
        gemm1(kw, kw["a"], kw["a_s"])
        kw["h"], kw["h_s"] = glue(kw)
        return kw

    def whole(kw: dict) -> dict:
        """The layer from x, for the check: GEMM1, SiLU-and-mul, GEMM2, the top_k sum."""
        a, a_s = quantize_fp8(kw["x"], "group", None)[:2] if kw["block"] else (kw["x"], None)
        gemm1(kw, a, a_s)
        gemm2(kw, *glue(kw))
        return {"out": kw["c3"].sum(dim=1)}

    def gemms(kw: dict) -> dict:
        """What is timed: vLLM's two GEMM launches alone, on operands prepared outside the timing."""
        gemm1(kw, kw["a"], kw["a_s"])
        gemm2(kw, kw["h"], kw["h_s"])
        return {"c3": kw["c3"]}

    return Peer(
        "vLLM 0.33.0's fused_moe_kernel with its tuned table or default rule: its two GEMM "
        "launches alone are timed (alignment, SiLU-and-mul, fp8 quantization and the top_k sum "
        "are vLLM CUDA ops, left out; the check runs the whole layer)",
        gemms,
        (PEER_MODULE,),
        prepare=prepare,
        check_fn=whole,
    )
