"""The tuner's defaults, importable without torch: ``tritonkit tune --help`` shows them."""

from __future__ import annotations

from ..models import NUM_TOKENS_SWEEP

#: the sweep's buckets through 16384: past it prefill tiles stop changing (block_m is 128 from M * topk / E >= 128)
DEFAULT_BUCKETS = tuple(m for m in NUM_TOKENS_SWEEP if m <= 16384)
#: seconds of search per bucket, shared evenly by its (block_m, GEMM) phases; each phase times at least its seed
BUDGET_S = 60.0
#: compile workers at most: each holds a CUDA context and weights of compile_experts(E) experts
MAX_JOBS = 8
