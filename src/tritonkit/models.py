"""Real model configurations, per tensor-parallel rank, from which the benchmark and validation sweeps are built.

Head counts are per rank (a TP-8 Llama-3-70B rank holds 8 query heads and 1 KV head); ``hidden`` is the full
residual width, which every rank normalizes.
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

    @property
    def group_size(self) -> int:
        return self.num_heads // self.num_kv_heads


def _tp(name: str, hidden: int, intermediate: int, heads: int, kv: int, d: int, tp: int, **kw) -> ModelConfig:
    return ModelConfig(name, hidden, intermediate // tp, heads // tp, max(kv // tp, 1), d, kw.pop("rotary_dim", d),
                       tp=tp, **kw)


MODELS: dict[str, ModelConfig] = {m.name: m for m in (
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
)}

#: Default benchmark models: one per distinct launch geometry worth timing.
DEFAULT_BENCH_MODELS = ("llama3-8b", "llama3-70b-tp8", "qwen2-7b", "gemma2-9b", "phi3-mini")

#: num_tokens from decode (1) through prefill (65536).
NUM_TOKENS_SWEEP = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)


def get_model(name: str) -> ModelConfig:
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)}") from None
