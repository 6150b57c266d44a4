"""Startup, apart from steady state: time to the first correct result in a fresh process.

A child Python process with an empty ``TRITON_CACHE_DIR`` imports torch and tritonkit, makes one input set, calls
the op once and synchronizes: import + CUDA context + JIT compile (cold). The same again with the cache the first
child filled (warm): import + loading the compiled kernel from disk. The result is then checked against the
float64 reference outside the timed region; a wrong first result is reported as such.

This module's top level imports nothing heavy: the child's clock starts before ``import torch``.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

_CHILD = "import time; T0 = time.perf_counter(); from tritonkit.bench.startup import child_main; child_main(T0)"


def child_main(t0: float) -> None:
    """Entry of the child process: argv[1:] = op, shape JSON, dtype name, device. Prints one JSON line."""
    op, shape_json, dtype_name, device = sys.argv[1:5]
    import torch

    import tritonkit.ops as ops
    from tritonkit.spec import Shape

    t_import = time.perf_counter()
    spec = ops.get_spec(op)
    on_gpu = device == "cuda"

    def sync():
        if on_gpu:
            torch.cuda.synchronize()

    torch.empty(1, device=device)
    sync()
    t_ctx = time.perf_counter()

    from tritonkit.bench.providers import check, make_provider, reference
    from tritonkit.testing.inputs import Fill

    shape = Shape(json.loads(shape_json))
    dtype = getattr(torch, dtype_name)
    inputs = spec.make_inputs(shape, dtype, Fill("randn", device, 0))
    sync()
    t_in = time.perf_counter()
    spec.call(inputs)
    sync()
    t_first = time.perf_counter()
    spec.call(inputs)
    sync()
    t_second = time.perf_counter()

    fresh = spec.make_inputs(shape, dtype, Fill("randn", device, 1))
    c = check(make_provider("tritonkit", spec, dtype), spec, dtype, fresh, reference(spec, dtype, fresh))
    print(
        json.dumps(
            {
                "import_s": t_import - t0,
                "cuda_init_s": t_ctx - t_import,
                "first_call_s": t_first - t_in,
                "second_call_s": t_second - t_first,
                # what a user waits for: import, context, first call (inputs are theirs, not counted)
                "to_first_result_s": (t_import - t0) + (t_ctx - t_import) + (t_first - t_in),
                "correct": c.passed,
                "check": c.detail,
            }
        )
    )


def _run_child(op: str, shape: dict, dtype_name: str, cache_dir: str, timeout: float, device: str) -> dict:
    env = dict(os.environ)
    env["TRITON_CACHE_DIR"] = cache_dir
    if device == "cuda":
        env.pop("TRITON_INTERPRET", None)
    # the child must import this tritonkit, installed or not
    src = str(pathlib.Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, op, json.dumps(shape), dtype_name, device],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"child did not finish in {timeout:.0f} s"}
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return {"error": f"child exited {proc.returncode}: {proc.stderr.strip()[-800:]}"}
    try:
        res = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": f"child printed no result: {proc.stdout[-400:]} {proc.stderr[-400:]}"}
    res["process_s"] = wall
    return res


def measure_startup(op: str, shape: dict, dtype_name: str, *, timeout: float = 180.0, device: str = "cuda") -> dict:
    """``{"cold": {...}, "warm": {...}, "shape": ...}`` for one op: two fresh processes sharing one cache dir
    that starts empty. Times in seconds. (``device="cpu"`` runs the kernels under the interpreter: tests only.)"""
    cache_dir = tempfile.mkdtemp(prefix="tritonkit-startup-")
    try:
        cold = _run_child(op, shape, dtype_name, cache_dir, timeout, device)
        warm = _run_child(op, shape, dtype_name, cache_dir, timeout, device)
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)
    return {"shape": shape, "dtype": dtype_name, "cold": cold, "warm": warm}
