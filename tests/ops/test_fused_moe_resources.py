"""fused_moe's tiles, the default rule's and the shipped tables', compiled for sm_90 on this CPU
(tests/ops/fused_moe_resources.py, in its own process): each fits the 227 KB of shared memory, none spills registers,
every GEMM runs on tensor cores, and tiles of 64 or more rows use Hopper's wgmma (16- and 32-row tiles are below its
64-row warpgroup M and use mma.sync)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def rows():
    src = HERE.parents[1] / "src"
    env = {**os.environ, "TRITON_INTERPRET": "0", "PYTHONPATH": f"{src}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    p = subprocess.run(
        [sys.executable, str(HERE / "fused_moe_resources.py")], capture_output=True, text=True, env=env, timeout=900
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return [json.loads(line) for line in p.stdout.splitlines()]


def test_every_model_and_gemm_was_compiled(rows):
    assert {(r["model"], r["gemm"]) for r in rows} == {
        (m, g) for m in ("mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3") for g in ("gemm1", "gemm2")
    }


def test_default_tiles_fit_shared_memory_and_do_not_spill(rows):
    for r in rows:
        assert 0 < r["shared_bytes"] <= r["max_shared_bytes"], r
        assert r["stack_bytes"] == 0 and r["local_bytes"] == 0, r
        assert 0 < r["registers"] <= 255, r


def test_gemms_use_tensor_cores_and_wgmma_from_64_rows_or_swapped(rows):
    # fp8 tiles of fewer rows swap A and B so the weights are wgmma's M (Hopper's fp8 MMA is wgmma only)
    for r in rows:
        assert r["mma"], r
        assert r["wgmma"] == (r["config"]["block_m"] >= 64 or r["config"]["swap_ab"] == 1), r
    assert any(r["config"]["swap_ab"] for r in rows if r["model"] == "deepseek-v3")
    # the shipped H200 tables' tiles are compiled too, not only the default rule's
    assert {r["source"] for r in rows} >= {"default", "NVIDIA H200 table"}
