"""fused_moe's bench peer (``OpSpec.peers``): vLLM's Triton fused-MoE GEMM as the ``vllm`` provider.

``shared/peers/vllm-fused-moe.sh DIR`` (vLLM 0.34.0 by default) cuts vLLM's ``fused_moe_kernel`` out of its wheel
into ``DIR/vllm_moe_peer``, unmodified, with the Python that launches it (``invoke_fused_moe_triton_kernel``), its
expert assignment, its tile-config lookup and tuned H100/H200 tables, its fp8 group quantization, and a driver over
them (``get_config``, ``assign``, ``gemm``, ``gemm_fp8_block``, ``quantize_act``); put DIR on PYTHONPATH. This
provider calls only that driver, so every launch is vLLM's own: its tile config (its tuned table for (E, N, device,
dtype) at the nearest M, else its default rule, block-fp8's included), its expert assignment (one slot per block
with no sorted ids at decode, where M * top_k * 4 <= E), its small-batch grid, and for block-fp8 its swap-AB below
64-row tiles on sm_90 and, in 0.34, B through a TMA descriptor on sm_90/sm_100 (pointers elsewhere, the CPU
interpreter included). The provider's description names the vLLM version of the wheel the peer was cut from.

What is timed is vLLM's **two GEMM launches alone** (GEMM1 on w1, GEMM2 on w2 with the routed weights multiplied
in) on operands prepared outside the timing (the expert assignment, the fp8 activations and their scales). vLLM runs
the rest of its layer as CUDA C++ ops that are not in the wheel's Python (the alignment, SiLU-and-mul, the fp8 group
quantization, the top_k sum), so leaving them out makes this a lower bound on vLLM's layer, while tritonkit's
provider times its whole call: the comparison cannot flatter tritonkit.

The correctness check runs the whole layer on the same launches: vLLM's expert assignment (its alignment in the
driver's PyTorch), GEMM1, SiLU-and-mul (``tritonkit.ops.silu_and_mul``, standing in for vLLM's CUDA op), for
block-fp8 ``quantize_act`` (vLLM's ``per_token_group_quant_fp8``, its Triton kernel) before each GEMM, GEMM2 and
``torch.sum`` over top_k.

The driver launches bf16/fp16 weights and fp8 with 128 x 128 weight blocks; other fp8 schemes, static activation
scales, expert maps, gelu and router weights on the input have no launch there: skipped by name.
"""

from __future__ import annotations

import importlib
import re

import torch

from ...spec import Inapplicable, OpSpec, Peer, Unavailable
from ..silu_and_mul.api import forward as silu_and_mul
from .api import check_args

PEER_MODULE = "vllm_moe_peer"
#: what the provider calls: the driver ``shared/peers/vllm-fused-moe.sh`` writes since vLLM 0.34 (the one it wrote
#: for 0.33 had ``align`` and ``gemm`` only, and the provider then launched block-fp8 itself)
DRIVER = ("WHEEL", "FP8_BLOCK_KEY", "get_config", "assign", "gemm", "gemm_fp8_block", "quantize_act")
_WHEEL = re.compile(r"vllm-([^-]+)-.*\.whl")

#: fused_moe's keyword arguments a point may carry (the spec's inputs also hold ``act_dtype``, not an argument)
_OPTIONAL = (
    "activation",
    "apply_router_weight_on_input",
    "expert_map",
    "w1_scale",
    "w2_scale",
    "a1_scale",
    "a2_scale",
    "block_shape",
    "per_act_token_quant",
)


def vllm_version(peer) -> str:
    """The vLLM version of the wheel ``peer`` was cut from (its ``WHEEL``, e.g. vllm-0.34.0-cp38-abi3-...whl)."""
    m = _WHEEL.fullmatch(str(peer.WHEEL))
    if m is None:
        raise Unavailable(f"{PEER_MODULE}.WHEEL is {peer.WHEEL!r}, not a vLLM wheel's file name: no vLLM version")
    return m.group(1)


def vllm(spec: OpSpec, dtype: torch.dtype) -> Peer:
    """The ``vllm`` peer: vLLM's two fused-MoE GEMM launches timed alone, the whole layer checked."""
    script = "shared/peers/vllm-fused-moe.sh DIR and put DIR on PYTHONPATH"
    try:
        peer = importlib.import_module(PEER_MODULE)
    except Exception as e:  # noqa: BLE001 - ImportError, or a broken cut
        raise Unavailable(f"vLLM's fused-MoE peer not importable ({type(e).__name__}: {e}); run {script}") from None
    missing = [name for name in DRIVER if not hasattr(peer, name)]
    if missing:
        raise Unavailable(
            f"{PEER_MODULE} ({getattr(peer, '__file__', None)}) has no {', '.join(missing)}: a driver another "
            f"vLLM version's peer script wrote; rerun {script}"
        )
    version = vllm_version(peer)

    def prepare(inputs: dict) -> dict:
        a = check_args(
            inputs["hidden_states"],
            inputs["w1"],
            inputs["w2"],
            inputs["topk_weights"],
            inputs["topk_ids"],
            **{k: inputs[k] for k in inputs if k in _OPTIONAL},
        )
        skip = [k for k in ("expert_map", "a1_scale", "a2_scale") if getattr(a, k) is not None]
        skip += ["apply_router_weight_on_input"] if a.apply_router_weight_on_input else []
        skip += [f"activation {a.activation}"] if a.activation != "silu" else []
        skip += [f"{a.quant} (per-tensor/per-channel fp8)"] if a.quant in ("fp8_tensor", "fp8_channel") else []
        K, N = a.w2.shape[1:]
        if a.quant == "fp8_block128" and (K % 128 or N % 128):
            # vLLM's per_token_group_quant_fp8 asserts whole 128-column groups of x [M, K] and GEMM1's [M, N] half
            skip.append(f"hidden {K}, inter {N} (block-fp8 activations go in whole 128-column groups)")
        if skip:
            raise Inapplicable(f"vLLM {version}'s peer driver has no launch with {', '.join(skip)}")
        x, ids = a.hidden_states, a.topk_ids
        M = x.shape[0]
        E, N2, _ = a.w1.shape
        topk = ids.shape[1]
        block = a.quant == "fp8_block128"
        cfg = peer.get_config(M, E, N2 // 2, K, topk, peer.FP8_BLOCK_KEY if block else "")
        sorted_ids, expert_ids, total = peer.assign(ids, cfg, E)
        kw = {
            "x": x,
            "w1": a.w1,
            "w2": a.w2,
            "w1_scale": a.w1_scale,
            "w2_scale": a.w2_scale,
            "block": block,
            "topk": topk,
            "cfg": cfg,
            "routing": (a.topk_weights.contiguous(), sorted_ids, expert_ids, total),
            "c1": torch.empty(M, topk, N2, dtype=x.dtype, device=x.device),
            "c3": torch.empty(M, topk, K, dtype=x.dtype, device=x.device),
        }
        # the two GEMMs' operands, made once outside the timing from the point's own data
        kw["a"], kw["a_s"] = activations(kw, x)
        gemm1(kw, kw["a"], kw["a_s"])
        kw["h"], kw["h_s"] = glue(kw)
        return kw

    def activations(kw: dict, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """A GEMM's A operand: ``t`` itself, or for block-fp8 vLLM's fp8 copy with one scale per 128 columns."""
        return peer.quantize_act(t) if kw["block"] else (t, None)

    def gemm1(kw: dict, a: torch.Tensor, a_s: torch.Tensor | None) -> None:
        if kw["block"]:
            peer.gemm_fp8_block(
                a, a_s, kw["w1"], kw["w1_scale"], kw["c1"], *kw["routing"], False, kw["topk"], kw["cfg"]
            )
        else:
            peer.gemm(a, kw["w1"], kw["c1"], *kw["routing"], False, kw["topk"], kw["cfg"])

    def gemm2(kw: dict, h: torch.Tensor, h_s: torch.Tensor | None) -> None:
        if kw["block"]:
            peer.gemm_fp8_block(h, h_s, kw["w2"], kw["w2_scale"], kw["c3"], *kw["routing"], True, 1, kw["cfg"])
        else:
            peer.gemm(h, kw["w2"], kw["c3"], *kw["routing"], True, 1, kw["cfg"])

    def glue(kw: dict) -> tuple[torch.Tensor, torch.Tensor | None]:
        """GEMM2's operand from GEMM1's output: SiLU-and-mul (vLLM's CUDA op, tritonkit's here), fp8 for block-fp8."""
        return activations(kw, silu_and_mul(kw["c1"].view(-1, kw["c1"].shape[-1])))

    def whole(kw: dict) -> dict:
        """The layer from x, for the check: GEMM1, SiLU-and-mul, GEMM2, the top_k sum."""
        gemm1(kw, *activations(kw, kw["x"]))
        gemm2(kw, *glue(kw))
        return {"out": kw["c3"].sum(dim=1)}

    def gemms(kw: dict) -> dict:
        """What is timed: vLLM's two GEMM launches alone, on operands prepared outside the timing."""
        gemm1(kw, kw["a"], kw["a_s"])
        gemm2(kw, kw["h"], kw["h_s"])
        return {"c3": kw["c3"]}

    return Peer(
        f"vLLM {version}'s fused_moe_kernel launched by its invoke_fused_moe_triton_kernel (cut from "
        f"{peer.WHEEL}) with its tuned table or default rule and its expert assignment: its two GEMM "
        "launches alone are timed (alignment, SiLU-and-mul, fp8 quantization and the top_k sum are vLLM CUDA "
        "ops, left out; the check runs the whole layer)",
        gemms,
        (PEER_MODULE,),
        prepare=prepare,
        check_fn=whole,
    )
