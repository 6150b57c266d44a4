"""rms_norm_quant_fp8's bench peers (``OpSpec.peers``): the unfused sequence of tritonkit's own ops (rms_norm, then
plain fp8 quantization), and vLLM's fused CUDA ops (optional, never a dependency: with vLLM not importable the peer
is :class:`~tritonkit.spec.Unavailable`)."""

from __future__ import annotations

import importlib

import torch

from ...spec import OpSpec, Peer, Unavailable
from ..rms_norm.api import rms_norm
from . import api

EPS = 1e-6
GROUP = 128


def _named(q, s, r, quant: str) -> dict:
    out = {"q": q, "scale": s}
    if r is not None:
        out["r"] = r
    return out


def unfused(spec: OpSpec, dtype: torch.dtype) -> Peer:
    """tritonkit's ``rms_norm`` (fused with the residual add where there is one), then ``quantize_fp8`` of its
    output: two launches and a round trip of y through memory."""

    def fn(inputs: dict) -> dict:
        quant, residual = inputs["quant"], inputs.get("residual")
        out = rms_norm(inputs["x"], inputs["weight"], EPS, residual=residual)
        y, r = out if residual is not None else (out, None)
        q, s = api.quantize_fp8(y, quant, inputs.get("scale"), inputs.get("scale_ub"))
        return _named(q, s, r, quant)

    return Peer(
        "tritonkit rms_norm, then quantize_fp8", fn, ("tritonkit.ops.rms_norm", "tritonkit.ops.rms_norm_quant_fp8")
    )


def vllm(spec: OpSpec, dtype: torch.dtype) -> Peer:
    """vLLM's CUDA ops: ``rms_norm_static_fp8_quant`` / ``fused_add_rms_norm_static_fp8_quant``,
    ``rms_norm_dynamic_per_token_quant`` and ``rms_norm_per_block_quant`` (their residual updated in place)."""
    try:
        ops = importlib.import_module("vllm._custom_ops")
        torch.ops._C.rms_norm_dynamic_per_token_quant  # noqa: B018 - the compiled ops are present
    except Exception as e:  # noqa: BLE001 - ImportError, or a vLLM built without its CUDA ops
        raise Unavailable(f"vLLM's CUDA ops not importable ({type(e).__name__}: {e})") from None
    fp8 = torch.float8_e4m3fn

    def prepare(inputs: dict) -> dict:
        inputs = dict(inputs)
        if inputs.get("residual") is not None:
            # vLLM adds into the residual in place: the timed calls work on a copy
            inputs["residual"] = inputs["residual"].clone()
        inputs["out"] = torch.empty(inputs["x"].shape, dtype=fp8, device=inputs["x"].device)
        return inputs

    def fn(inputs: dict) -> dict:
        quant, x, w, residual = inputs["quant"], inputs["x"], inputs["weight"], inputs.get("residual")
        s = inputs.get("scale")
        if quant == "static":
            if residual is None:
                torch.ops._C.rms_norm_static_fp8_quant(inputs["out"], x, w, inputs["scale"], EPS)
            else:
                torch.ops._C.fused_add_rms_norm_static_fp8_quant(inputs["out"], x, residual, w, inputs["scale"], EPS)
            q = inputs["out"]
        elif quant == "token":
            q, s = ops.rms_norm_dynamic_per_token_quant(x, w, EPS, fp8, inputs.get("scale_ub"), residual)
        else:
            q, s = ops.rms_norm_per_block_quant(
                x, w, EPS, fp8, [1, GROUP], inputs.get("scale_ub"), residual, inputs["transposed"]
            )
        return _named(q, s, residual, quant)

    return Peer("vllm._custom_ops fused RMSNorm + fp8 quant (CUDA)", fn, (), prepare)
