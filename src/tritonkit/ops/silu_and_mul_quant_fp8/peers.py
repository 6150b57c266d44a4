"""silu_and_mul_quant_fp8's bench peers (``OpSpec.peers``): the unfused sequence of tritonkit's own ops
(silu_and_mul, then plain fp8 quantization), and vLLM's fused CUDA ops (optional, never a dependency: with vLLM not
importable the peer is :class:`~tritonkit.spec.Unavailable`)."""

from __future__ import annotations

import importlib

import torch

from ...spec import Inapplicable, OpSpec, Peer, Unavailable
from ..rms_norm_quant_fp8.api import quantize_fp8
from ..silu_and_mul.api import silu_and_mul

GROUP = 128


def unfused(spec: OpSpec, dtype: torch.dtype) -> Peer:
    """tritonkit's ``silu_and_mul``, then ``quantize_fp8`` of its output (rms_norm_quant_fp8's plain
    quantization): two launches and a round trip of the activation through memory."""

    def fn(inputs: dict) -> dict:
        quant = inputs["quant"]
        y = silu_and_mul(inputs["x"])
        q, s = quantize_fp8(y, quant, inputs.get("scale"), inputs.get("scale_ub"))
        return {"q": q, "scale": s}

    def prepare(inputs: dict) -> dict:
        if inputs["quant"] == "group" and inputs.get("scale_ub") is not None:
            raise Inapplicable("quantize_fp8 bounds the amax; this op's group mode bounds the scale")
        return inputs

    return Peer(
        "tritonkit silu_and_mul, then quantize_fp8",
        fn,
        ("tritonkit.ops.silu_and_mul", "tritonkit.ops.rms_norm_quant_fp8"),
        prepare,
    )


def vllm(spec: OpSpec, dtype: torch.dtype) -> Peer:
    """vLLM's CUDA ops: ``silu_and_mul_quant`` (static) and ``silu_and_mul_per_block_quant``; per token, its
    ``silu_and_mul`` then ``scaled_fp8_quant`` (it has no fused per-token op)."""
    try:
        ops = importlib.import_module("vllm._custom_ops")
        torch.ops._C.silu_and_mul_per_block_quant  # noqa: B018 - the compiled ops are present
    except Exception as e:  # noqa: BLE001 - ImportError, or a vLLM built without its CUDA ops
        raise Unavailable(f"vLLM's CUDA ops not importable ({type(e).__name__}: {e})") from None
    fp8 = torch.float8_e4m3fn

    def prepare(inputs: dict) -> dict:
        x = inputs["x"]
        shape = (*x.shape[:-1], x.shape[-1] // 2)
        return {
            **inputs,
            "out": torch.empty(shape, dtype=fp8, device=x.device),
            "y": torch.empty(shape, dtype=x.dtype, device=x.device),
        }

    def fn(inputs: dict) -> dict:
        quant, x = inputs["quant"], inputs["x"]
        if quant == "static":
            torch.ops._C.silu_and_mul_quant(inputs["out"], x, inputs["scale"])
            return {"q": inputs["out"], "scale": inputs["scale"]}
        if quant == "group":
            q, s = ops.silu_and_mul_per_block_quant(x, GROUP, fp8, inputs.get("scale_ub"), inputs["transposed"])
            return {"q": q, "scale": s}
        torch.ops._C.silu_and_mul(inputs["y"], x)
        q, s = ops.scaled_fp8_quant(inputs["y"], scale_ub=inputs.get("scale_ub"), use_per_token_if_dynamic=True)
        return {"q": q, "scale": s}

    return Peer("vllm._custom_ops fused SiLU-and-mul + fp8 quant (CUDA)", fn, (), prepare)
