"""Real model configurations, per tensor-parallel rank, from which the benchmark and validation sweeps are built.

Head counts are per rank (a TP-8 Llama-3-70B rank holds 8 query heads and 1 KV head); ``hidden`` is the full
residual width, which every rank normalizes. Mixture-of-experts models also carry their expert layer: the number of
experts, how many each token is routed to, each expert's intermediate width, and the weight format the layer ships
in (``moe_quant``: "" for the activation dtype, "fp8_block128" for float8_e4m3fn weights with 128 x 128 block
scales). A model whose attention the ops do not implement (DeepSeek-V3's multi-head latent attention) has
``num_heads == 0``; the attention specs have no point on it.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    name: str
    hidden: int
    intermediate: int  # per rank: the d of silu_and_mul's [.., 2d] input
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rotary_dim: int
    is_neox: bool = True
    tp: int = 1
    num_experts: int = 0  # 0: a dense model (no expert layer)
    topk: int = 0
    moe_intermediate: int = 0  # per expert: w1 is [num_experts, 2 * moe_intermediate, hidden]
    moe_quant: str = ""

    @property
    def has_attention(self) -> bool:
        return self.num_heads > 0

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def group_size(self) -> int:
        return self.num_heads // self.num_kv_heads if self.num_kv_heads else 0


def _tp(name: str, hidden: int, intermediate: int, heads: int, kv: int, d: int, tp: int, **kw) -> ModelConfig:
    if kw.get("moe_intermediate"):
        kw["moe_intermediate"] //= tp
    return ModelConfig(
        name,
        hidden,
        intermediate // tp,
        heads // tp,
        max(kv // tp, 1) if kv else 0,
        d,
        kw.pop("rotary_dim", d),
        tp=tp,
        **kw,
    )


MODELS: dict[str, ModelConfig] = {
    m.name: m
    for m in (
        _tp("llama3-8b", 4096, 14336, 32, 8, 128, 1),
        _tp("llama3-70b-tp8", 8192, 28672, 64, 8, 128, 8),
        _tp("qwen2-7b", 3584, 18944, 28, 4, 128, 1),
        _tp("mistral-7b", 4096, 14336, 32, 8, 128, 1),
        _tp("qwen2.5-14b", 5120, 13824, 40, 8, 128, 1),
        _tp("gemma2-9b", 3584, 14336, 16, 8, 256, 1),
        _tp("phi3-mini", 3072, 8192, 32, 32, 96, 1),
        # partial rotary (rotary_dim 32 of head_dim 80) and gpt-j style (interleaved pairs)
        _tp("phi2", 2560, 10240, 32, 32, 80, 1, rotary_dim=32),
        _tp("gpt-j-6b", 4096, 16384, 16, 16, 256, 1, rotary_dim=64, is_neox=False),
        # mixture of experts, one rank holding every expert (no expert parallelism)
        _tp("mixtral-8x7b", 4096, 14336, 32, 8, 128, 1, num_experts=8, topk=2, moe_intermediate=14336),
        _tp("qwen3-30b-a3b", 2048, 6144, 32, 4, 128, 1, num_experts=128, topk=8, moe_intermediate=768),
        # MLA attention is not modelled (num_heads 0); dense layers' MLP 18432 wide
        _tp(
            "deepseek-v3",
            7168,
            18432,
            0,
            0,
            0,
            1,
            rotary_dim=0,
            num_experts=256,
            topk=8,
            moe_intermediate=2048,
            moe_quant="fp8_block128",
        ),
    )
}

#: Default benchmark models: one per distinct launch geometry worth timing.
DEFAULT_BENCH_MODELS = ("llama3-8b", "llama3-70b-tp8", "qwen2-7b", "gemma2-9b", "phi3-mini")

#: Default benchmark models of the expert-layer ops (the dense defaults have no expert layer).
DEFAULT_MOE_BENCH_MODELS = ("mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3")

#: num_tokens from decode (1) through prefill (65536).
NUM_TOKENS_SWEEP = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)


def get_model(name: str) -> ModelConfig:
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)}") from None
