"""tritonkit.check.resources: a launch compiled to a cubin for the target on this CPU, its resources read back."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def probes():
    src = HERE.parents[1] / "src"
    env = {**os.environ, "TRITON_INTERPRET": "0", "PYTHONPATH": f"{src}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    p = subprocess.run(
        [sys.executable, str(HERE / "resources_probe.py")], capture_output=True, text=True, env=env, timeout=600
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return {d["probe"]: d for d in map(json.loads, p.stdout.splitlines())}


def test_shared_memory_follows_the_pipeline_stages(probes):
    # a 128 x 128 x 64 bf16 tile: (128 x 64 + 64 x 128) x 2 bytes = 32 KB a stage
    assert probes["matmul-128-s2"]["shared_bytes"] == 2 * 32768
    assert probes["matmul-128-s4"]["shared_bytes"] == 4 * 32768
    assert probes["matmul-128-s4"]["max_shared_bytes"] == 232448


def test_oversized_tile_is_reported(probes):
    big = probes["matmul-256-s4"]
    # 4 stages of (256 x 128 + 128 x 256) x 2 bytes: 512 KB, past sm_90's 227 KB: OutOfResources at launch
    assert big["shared_bytes"] == 524288 and big["shared_bytes"] > big["max_shared_bytes"]
    # a 256 x 256 float32 accumulator over 256 threads is 256 registers each: ptxas caps at 255 and spills
    assert big["registers"] == 255 and big["stack_bytes"] > 0
    fine = probes["matmul-128-s4"]
    assert fine["stack_bytes"] == 0 and fine["local_bytes"] == 0 and fine["registers"] < 255


def test_tensor_core_instruction_follows_tile_and_target(probes):
    # Hopper's wgmma from 64-row tiles; below (or on sm_80) mma.sync
    assert probes["matmul-128-s4"]["wgmma"] and probes["matmul-128-s4"]["mma"]
    assert not probes["matmul-16"]["wgmma"] and probes["matmul-16"]["mma"]
    assert not probes["matmul-128-sm80"]["wgmma"] and probes["matmul-128-sm80"]["mma"]
    assert probes["matmul-128-sm80"]["max_shared_bytes"] == 166912


def test_sass_counts_tell_loop_spills_and_mma_waits(probes):
    fine, big = probes["sass-128"], probes["sass-256"]
    # the recorded launch carries its constexprs and options
    assert fine["options"] == {"BM": 128, "BN": 128, "BK": 64, "num_warps": 8, "num_stages": 4}
    # a pipelined matmul loop issues its wgmmas back to back and waits for all of them far fewer times
    assert fine["GMMA"] > 0 and fine["wait_all"] < fine["GMMA"]
    assert fine["STL"] == fine["LDL"] == 0
    # the spilling tile stores and reloads registers inside its K loop
    assert big["loop_STL"] > 0 and big["loop_LDL"] > 0 and big["STL"] >= big["loop_STL"]
    # ... and its K loop is the innermost one
    assert big["inner_STL"] == big["loop_STL"] and big["inner_LDL"] == big["loop_LDL"]
    assert fine["inner_STL"] == fine["inner_LDL"] == 0


def test_innermost_loops_hold_no_other_loop():
    from tritonkit.check.resources import _innermost

    # a tile loop holding two KV loops, and a loop of its own after it
    assert _innermost([(0x10, 0x40), (0x50, 0x80), (0x0, 0x100), (0x200, 0x240)]) == [
        (0x10, 0x40),
        (0x50, 0x80),
        (0x200, 0x240),
    ]
    assert _innermost([]) == []


def test_ptxas_tells_when_it_serialized_the_wgmmas(probes):
    # a wait that still allows the only dot to be outstanding: ptxas waits itself, and serializes every wgmma
    (bad,) = probes["gluon-wait-1"]["ptxas"]
    assert bad.startswith("[C75") and "serialized" in bad, bad
    assert probes["gluon-wait-0"]["ptxas"] == []


def _sass(*lines: str) -> list[tuple[int, str]]:
    return [(16 * i, text) for i, text in enumerate(lines)]


def test_only_real_loops_count_as_loops():
    from tritonkit.check.resources import _loops

    ins = _sass(
        "LDC R1, c[0x0][0x28]",  # 0x00
        "@!P0 BRA 0x90",  # 0x10: into an mbarrier wait's retry stub, out of line
        "NOP",  # 0x20: a worker warp's dispatch loop: its head gives registers back
        "USETMAXREG.DEALLOC.CTAPOOL 0x78",  # 0x30
        "FFMA R2, R2, R3, R4",  # 0x40: a K loop
        "@P1 BRA 0x40",  # 0x50
        "@P2 BRA 0x20",  # 0x60
        "EXIT",  # 0x70
        "BRA 0x80",  # 0x80: the end-of-kernel self loop
        "SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R5], R6",  # 0x90: the stub: try again, then back after the wait
        "@!P0 BRA 0x90",  # 0xa0
        "BRA 0x20",  # 0xb0
    )
    assert _loops(ins) == [(0x40, 0x50)]


def test_cli_reports_each_launch_of_a_builtin_op():
    src = HERE.parents[1] / "src"
    env = {**os.environ, "TRITON_INTERPRET": "0", "PYTHONPATH": f"{src}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    p = subprocess.run(
        [sys.executable, "-m", "tritonkit.check.resources", "silu_and_mul", "--num-tokens", "4", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    (row,) = map(json.loads, p.stdout.splitlines())
    assert row["kernel"] == "_silu_and_mul_fwd_kernel" and row["shared_bytes"] >= 0 and row["registers"] > 0
    # the text form: the numbers on the kernel's line, its options wrapped under it, every line within 120 columns
    text = subprocess.run(
        [sys.executable, "-m", "tritonkit.check.resources", "paged_attention", "--num-tokens", "8192"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    ).stdout.splitlines()
    assert text and max(map(len, text)) <= 120 and any("num_warps=" in ln for ln in text)
    bad = subprocess.run(
        [sys.executable, "-m", "tritonkit.check.resources", "paged_attention", "--series", "nope"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert bad.returncode == 2 and "has no series 'nope'" in bad.stderr


def test_sass_files_never_replace_what_is_there(tmp_path):
    src = HERE.parents[1] / "src"
    env = {**os.environ, "TRITON_INTERPRET": "0", "PYTHONPATH": f"{src}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    out = tmp_path / "sass"
    cmd = [sys.executable, "-m", "tritonkit.check.resources", "silu_and_mul", "--num-tokens", "4", "--sass", str(out)]
    first = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    (written,) = out.iterdir()
    assert written.name == "_silu_and_mul_fwd_kernel.sass" and "EXIT" in written.read_text()
    written.write_text("the user's own notes")
    again = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert again.returncode == 2 and "is already there (nothing replaced)" in again.stderr
    assert written.read_text() == "the user's own notes" and len(list(out.iterdir())) == 1


def test_a_kernels_second_launch_gets_its_own_sass_file():
    from tritonkit.check.resources import _sass_paths

    got = [p.name for p in _sass_paths("d", ["a", "b", "a", "a"])]
    assert got == ["a.sass", "b.sass", "a.2.sass", "a.3.sass"]
