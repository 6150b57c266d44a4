"""The pruning rules of fused_moe's search space: pure functions of shapes, checked over every MoE model's buckets."""

import dataclasses

import pytest

from tritonkit.models import MODELS
from tritonkit.ops.fused_moe.config import SCALE_BLOCK, FusedMoeConfig, GemmConfig, default_config, validate
from tritonkit.tune import space as S
from tritonkit.tune.fused_moe import DEFAULT_BUCKETS, Layer

MOE = [m for m in MODELS.values() if m.is_moe]
# every quant scheme on one model's shapes: validate's fp8 rules differ per scheme
LAYERS = [Layer.of(m) for m in MOE] + [
    dataclasses.replace(Layer.of(MODELS["qwen3-30b-a3b"]), quant=q)
    for q in ("fp8_tensor", "fp8_channel", "fp8_block128")
]
LAYER_IDS = [f"E{la.E}-N{la.N}-{la.quant}" for la in LAYERS]


def _all_candidates(layer, M, elem_bytes):
    default = default_config(M, layer.E, layer.N, layer.K, layer.topk, layer.quant)
    for bm in S.block_m_candidates(M, layer.E, layer.topk):
        s = S.seed(default, bm)
        for g in S.gemm_candidates(S.GEMM1, bm, M, layer.E, layer.topk, layer.quant, elem_bytes):
            yield S.GEMM1, g, FusedMoeConfig(g, s.gemm2)
        for g in S.gemm_candidates(S.GEMM2, bm, M, layer.E, layer.topk, layer.quant, elem_bytes):
            yield S.GEMM2, g, FusedMoeConfig(s.gemm1, g)


@pytest.mark.parametrize("layer", LAYERS, ids=LAYER_IDS)
def test_every_candidate_obeys_the_rules(layer):
    eb = 1 if layer.quant != "none" else 2
    n = 0
    for M in DEFAULT_BUCKETS:
        for gemm, g, cfg in _all_candidates(layer, M, eb):
            n += 1
            validate(cfg, layer.quant)  # the judge: raises on a tile the kernels cannot take
            assert S.smem_bytes(g, gemm, eb) <= S.SMEM_BYTES, (gemm, g)
            assert not (g.num_warps == 8 and g.block_m * g.block_n < 64 * 64), g
            assert g.block_m in S.block_m_candidates(M, layer.E, layer.topk)
            if layer.quant != "none":
                assert g.block_k >= 32
            if layer.quant == "fp8_block128":
                assert SCALE_BLOCK % g.block_k == 0
                assert gemm == S.GEMM2 or g.block_n in (SCALE_BLOCK // 2, SCALE_BLOCK)
    assert n > 100


def test_shared_memory_bound_is_the_documented_formula():
    g = GemmConfig(64, 128, 64, 1, 4, 3)
    assert S.smem_bytes(g, S.GEMM1, 2) == 3 * (64 * 64 + 2 * 64 * 128) * 2
    assert S.smem_bytes(g, S.GEMM2, 1) == 3 * (64 * 64 + 64 * 128) * 1


def test_the_rules_drop_what_they_say():
    M, E, topk = 4096, 8, 2  # mixtral prefill: block_m 128 and 64
    bf16 = S.gemm_candidates(S.GEMM1, 128, M, E, topk, "none", 2)
    # 5 stages of a 128 x 128 A tile and two 128 x 256 B tiles in bf16: 1.6 MB of shared memory
    assert GemmConfig(128, 256, 128, 8, 8, 5) not in bf16
    assert GemmConfig(128, 64, 64, 8, 8, 3) in bf16
    # the same tile in fp8 as GEMM2 fits (one B tile, 1-byte operands: 3 x 48 KB)
    assert GemmConfig(128, 256, 128, 8, 8, 3) in S.gemm_candidates(S.GEMM2, 128, M, E, topk, "fp8_tensor", 1)
    small = S.gemm_candidates(S.GEMM2, 16, 1, E, topk, "none", 2)
    assert any(g.num_warps == 4 and g.block_n == 128 for g in small)
    assert not any(g.num_warps == 8 and g.block_n < 256 for g in small)  # 16 x 256 is the only tile >= 64 x 64
    block = S.gemm_candidates(S.GEMM1, 16, 1, 256, 8, "fp8_block128", 1)
    assert {g.block_n for g in block} == {64, 128}
    assert {g.block_n for g in S.gemm_candidates(S.GEMM2, 16, 1, 256, 8, "fp8_block128", 1)} == {32, 64, 128, 256}


@pytest.mark.parametrize(
    "M,E,topk,want",
    [
        (1, 256, 8, [16, 32]),  # decode: the mean (0.03 rows) clamps to 16
        (2048, 256, 8, [64, 32, 128]),  # 64 rows per expert
        (1024, 8, 2, [128, 64]),  # 256 rows: clamped to 128
        (96, 8, 2, [32, 16]),  # 24 rows: 32 (4/3 away) before 16 (3/2 away); 64 is past twice the mean
    ],
)
def test_block_m_follows_the_mean_rows_per_expert(M, E, topk, want):
    assert S.block_m_candidates(M, E, topk) == want


def _program_order(num_pid_m, num_pid_n, group_m):
    """kernel.py's _grouped_tile in Python: (pid_m, pid_n) of every program id."""
    out = []
    for pid in range(num_pid_m * num_pid_n):
        in_group = group_m * num_pid_n
        first_m = (pid // in_group) * group_m
        size_m = min(num_pid_m - first_m, group_m)
        out.append((first_m + (pid % in_group) % size_m, (pid % in_group) // size_m))
    return out


@pytest.mark.parametrize("num_pid_m", [1, 2, 7, 8, 9, 40])
def test_group_m_values_keep_one_of_each_program_order(num_pid_m):
    kept = S.group_m_values(num_pid_m)
    orders = {g: tuple(_program_order(num_pid_m, 3, g)) for g in S.SPACE.group_m}
    # every order of the full set is still reachable, and no two kept values give the same one
    assert {orders[g] for g in kept} == set(orders.values())
    assert len({orders[g] for g in kept}) == len(kept)


def test_row_blocks_is_moe_align_block_sizes_grid():
    # max_padded = min(numel * block_m, numel + E * (block_m - 1)): 2 slots of 16 rows each; 8 slots + 256 pads
    assert S.row_blocks(1, 4, 2, 16) == 2
    assert S.row_blocks(1, 256, 8, 16) == 8
    assert S.row_blocks(4096, 256, 8, 64) == (4096 * 8 + 256 * 63 + 63) // 64


@pytest.mark.parametrize("M", [1, 64, 65, 4096])
def test_seed_is_the_default_at_its_block_m_and_valid_elsewhere(M):
    la = Layer.of(MODELS["deepseek-v3"])
    default = la.default(M)
    assert S.seed(default, default.block_size) == default
    for bm in S.SPACE.block_m:
        s = S.seed(default, bm)
        assert s.block_size == bm and s.gemm1.block_n == default.gemm1.block_n
        validate(s, la.quant)


def test_candidates_near_the_seed_come_first():
    near = GemmConfig(16, 64, 64, 1, 4, 4)
    cands = S.gemm_candidates(S.GEMM1, 16, 1, 8, 2, "none", 2, near=near)
    dist = [S._changed(g, near) for g in cands]
    assert cands[0] == near and dist == sorted(dist)
    assert set(cands) == set(S.gemm_candidates(S.GEMM1, 16, 1, 8, 2, "none", 2))
