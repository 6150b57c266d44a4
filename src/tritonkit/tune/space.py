"""fused_moe's tile search space and the rules that prune it, as pure functions of shapes (no device, no data).

Candidates per bucket M (num_tokens), for a layer of E experts, top-k routing, intermediate N and hidden K:

- block_m: the values of ``Space.block_m`` within a factor of two of the mean rows per expert, ``M * topk / E``
  clamped to [16, 128] (``block_m_candidates``). Both GEMMs share it: they read one sorted layout.
- each GEMM's (block_n, block_k, group_m, num_warps, num_stages): the product of the ``Space`` values, minus
  (``gemm_candidates``)

  1. tiles ``config.validate`` rejects (the kernels' own limits: fp8 needs block_k >= 32, block-wise fp8 a block_k
     dividing 128 and GEMM1 block_n 128 or 64);
  2. tiles whose pipelined operands overflow shared memory: ``num_stages * (block_m * block_k + n_b * block_k *
     block_n) * bytes`` over ``SMEM_BYTES``, with n_b = 2 for GEMM1 (gate and up tiles) and 1 for GEMM2, bytes the
     operands' element size (1 under fp8, both GEMMs: the intermediate is fp8 too);
  3. 8 warps on a tile under 64 x 64;
  4. group_m values that order the programs identically: every group_m at or past the grid's row blocks gives the
     same order, so only the smallest of those is kept.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from ..models import ModelConfig
from ..ops.fused_moe.config import FusedMoeConfig, GemmConfig, default_config, validate
from ..spec import Shape


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for non-negative ints."""
    return -(-a // b)


GEMM1, GEMM2 = "gemm1", "gemm2"
#: H100/H200 shared memory one block may opt into (227 KB); the pipeliner holds num_stages copies of A and B tiles
SMEM_BYTES = 227 * 1024
#: tiles below 64 x 64 hold too few accumulators for two warpgroups: 8 warps only split them thinner
MIN_TILE_8_WARPS = 64 * 64
#: the default rule's lower and upper block_m (the tensor core's smallest M, the widest tile the kernels use)
BLOCK_M_RANGE = (16, 128)


@dataclasses.dataclass(frozen=True)
class Space:
    """The values the search takes per field; tests pass a small one."""

    block_m: tuple[int, ...] = (16, 32, 64, 128)
    block_n: tuple[int, ...] = (32, 64, 128, 256)
    block_k: tuple[int, ...] = (64, 128)
    group_m: tuple[int, ...] = (1, 8, 16)
    num_warps: tuple[int, ...] = (4, 8)
    num_stages: tuple[int, ...] = (2, 3, 4, 5)


SPACE = Space()


@dataclasses.dataclass(frozen=True)
class Layer:
    """One expert layer: E experts of w1 [E, 2N, K] and w2 [E, K, N], topk per token, the weights' quant scheme."""

    E: int
    N: int
    K: int
    topk: int
    quant: str

    @classmethod
    def of(cls, model: ModelConfig) -> Layer:
        return cls(model.num_experts, model.moe_intermediate, model.hidden, model.topk, model.moe_quant or "none")

    def shape(self, M: int, **kw) -> Shape:
        """The spec's shape of this layer at M tokens (``kw`` replaces keys)."""
        return Shape(
            num_tokens=M, hidden=self.K, inter=self.N, experts=self.E, topk=self.topk, quant=self.quant
        ).replace(**kw)

    def default(self, M: int) -> FusedMoeConfig:
        return default_config(M, self.E, self.N, self.K, self.topk, self.quant)

    def elem_bytes(self, dtype) -> int:
        """Bytes of one GEMM operand element (``dtype`` the activations' torch dtype): fp8 (both GEMMs) or dtype's."""
        return 1 if self.quant != "none" else dtype.itemsize


def mean_rows(M: int, E: int, topk: int) -> float:
    """Mean sorted slots (rows) per expert of a bucket: M tokens x topk slots over E experts."""
    return M * topk / E


def block_m_candidates(M: int, E: int, topk: int, space: Space = SPACE) -> list[int]:
    """block_m values within a factor of two of the mean rows per expert (clamped to BLOCK_M_RANGE), nearest first
    (the smaller of two equally near first): a block much larger pads, a much smaller one rereads each weight
    tile once per extra block."""
    lo, hi = BLOCK_M_RANGE
    t = min(max(mean_rows(M, E, topk), lo), hi)
    keep = [b for b in space.block_m if t / 2 <= b <= 2 * t]
    return sorted(keep, key=lambda b: (abs(b - t) / min(b, t), b))


def row_blocks(M: int, E: int, topk: int, block_m: int) -> int:
    """The grid's row blocks (moe_align_block_size's ``expert_ids`` length): ``cdiv(max_padded, block_m)`` with
    ``max_padded = min(numel * block_m, numel + E * (block_m - 1))`` and numel = M * topk slots."""
    numel = M * topk
    return cdiv(min(numel * block_m, numel + E * (block_m - 1)), block_m)


def group_m_values(num_pid_m: int, space: Space = SPACE) -> list[int]:
    """group_m values that give distinct program orders over ``num_pid_m`` row blocks: those below it, and the
    smallest at or past it (any group_m >= num_pid_m puts all rows in one group: the same order)."""
    below = [g for g in sorted(space.group_m) if g < num_pid_m]
    past = [g for g in sorted(space.group_m) if g >= num_pid_m]
    return below + past[:1]


def smem_bytes(g: GemmConfig, gemm: str, elem_bytes: int) -> int:
    """Shared memory the pipelined operand tiles take, bytes: num_stages x (A tile + n_b B tiles)."""
    n_b = 2 if gemm == GEMM1 else 1  # GEMM1 loads a gate and an up tile per step
    return g.num_stages * (g.block_m * g.block_k + n_b * g.block_k * g.block_n) * elem_bytes


def _valid(g: GemmConfig, gemm: str, quant: str) -> bool:
    """Whether ``config.validate`` accepts ``g`` as this GEMM (paired with a copy of itself as the other)."""
    other = dataclasses.replace(g, block_n=128) if gemm == GEMM2 else g  # GEMM1's block_n rule only binds GEMM1
    cfg = FusedMoeConfig(g, other) if gemm == GEMM1 else FusedMoeConfig(other, g)
    try:
        validate(cfg, quant)
    except ValueError:
        return False
    return True


def keep(g: GemmConfig, gemm: str, quant: str, elem_bytes: int) -> bool:
    """Rules 1-3 of the module docstring."""
    if not _valid(g, gemm, quant):
        return False
    if smem_bytes(g, gemm, elem_bytes) > SMEM_BYTES:
        return False
    return not (g.num_warps >= 8 and g.block_m * g.block_n < MIN_TILE_8_WARPS)


def _changed(g: GemmConfig, near: GemmConfig) -> int:
    return sum(getattr(g, f) != getattr(near, f) for f in ("block_n", "block_k", "group_m", "num_warps", "num_stages"))


def gemm_candidates(
    gemm: str,
    block_m: int,
    M: int,
    E: int,
    topk: int,
    quant: str,
    elem_bytes: int,
    space: Space = SPACE,
    near: GemmConfig | None = None,
) -> list[GemmConfig]:
    """Every kept tile of one GEMM at ``block_m`` for bucket M (rules 1-4). With ``near``, the fewest fields away
    from it come first (a time budget that runs out has covered the default's neighbourhood), else grid order."""
    out = []
    for bn in space.block_n:
        for bk in space.block_k:
            for gm in group_m_values(row_blocks(M, E, topk, block_m), space):
                for w in space.num_warps:
                    for s in space.num_stages:
                        g = GemmConfig(block_m, bn, bk, gm, w, s)
                        if keep(g, gemm, quant, elem_bytes):
                            out.append(g)
    if near is not None:
        out.sort(key=lambda g: _changed(g, near))  # stable: grid order within a distance
    return out


def seed(default: FusedMoeConfig, block_m: int) -> FusedMoeConfig:
    """The default rule's config moved to ``block_m``: the partner a GEMM is tuned beside. At the rule's own block_m
    it is the rule's config (its slot blocks included); elsewhere the sorted layout, warps and stages following
    block_m as the rule's do (8 warps and 3 stages from 128 rows, else 4 and 4)."""
    if block_m == default.block_size:
        return default
    warps, stages = (8, 3) if block_m >= 128 else (4, 4)

    def move(g: GemmConfig) -> GemmConfig:
        return dataclasses.replace(g, block_m=block_m, num_warps=warps, num_stages=stages)

    return FusedMoeConfig(move(default.gemm1), move(default.gemm2))


def phase_candidates(
    gemm: str,
    M: int,
    block_m: int,
    layer: Layer,
    elem_bytes: int,
    space: Space,
    near: GemmConfig,
    banned: Iterable = (),
) -> list[GemmConfig]:
    """One search phase's tiles: the seed tile ``near`` first, then the kept tiles nearest it; ``banned`` (gemm,
    GemmConfig) pairs (those that failed to compile) left out."""
    cands = gemm_candidates(gemm, block_m, M, layer.E, layer.topk, layer.quant, elem_bytes, space, near=near)
    banned = set(banned)
    return [g for g in [near] + [g for g in cands if g != near] if (gemm, g) not in banned]


def block_ms(M: int, layer: Layer, space: Space = SPACE) -> list[int]:
    """The block_m values a bucket searches: the default rule's first, then ``block_m_candidates``."""
    first = layer.default(M).block_size
    return [first] + [b for b in block_m_candidates(M, layer.E, layer.topk, space) if b != first]


def compile_units(buckets: Iterable[int], layer: Layer, elem_bytes: int, space: Space = SPACE) -> dict:
    """{(gemm, GemmConfig): a FusedMoeConfig that runs it} over every phase of ``buckets``: each GEMM tile once (its
    kernel's compile does not depend on the other GEMM's tiles)."""
    units: dict = {}
    for M in buckets:
        default = layer.default(M)
        for bm in block_ms(M, layer, space):
            s = seed(default, bm)
            for g in phase_candidates(GEMM1, M, bm, layer, elem_bytes, space, s.gemm1):
                units.setdefault((GEMM1, g, s.slots), FusedMoeConfig(g, s.gemm2, s.slots))
            for g in phase_candidates(GEMM2, M, bm, layer, elem_bytes, space, s.gemm2):
                units.setdefault((GEMM2, g, s.slots), FusedMoeConfig(s.gemm1, g, s.slots))
    return units
