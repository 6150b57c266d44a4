"""An op's kernel.py as it was at an earlier commit, for A/B runs against this tree's kernels in one process.

Git already holds every old kernel, so none is committed again: ``kernel_at(rev, op)`` writes
``src/tritonkit/ops/<op>/kernel.py`` at ``rev`` (``git show``) under benchmarks/gpu/.snapshots/ (git-ignored) and
imports it. The device tool's copy of the tree has no git objects: write the snapshots in a checkout first and carry
the folder with the call:

    python3 benchmarks/gpu/snapshots.py 4ec9a8a:paged_attention 7374bb5:reshape_and_cache
    (device call with carry ["benchmarks/gpu/.snapshots"])
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
DIR = os.path.join(HERE, ".snapshots")


def path(rev: str, op: str) -> str:
    return os.path.join(DIR, f"{op}_{rev}.py")


def write(rev: str, op: str) -> str:
    text = subprocess.run(["git", "show", f"{rev}:src/tritonkit/ops/{op}/kernel.py"], cwd=HERE, capture_output=True,
                          text=True, check=True).stdout
    os.makedirs(DIR, exist_ok=True)
    with open(path(rev, op), "w") as f:
        f.write(text)
    return path(rev, op)


def kernel_at(rev: str, op: str) -> types.ModuleType:
    """The kernel module of ``op`` at commit ``rev`` (its kernels are the module's attributes)."""
    p = path(rev, op)
    if not os.path.exists(p):
        try:
            write(rev, op)
        except (OSError, subprocess.CalledProcessError) as e:
            raise RuntimeError(f"no snapshot of {op}'s kernel at {rev} and no git to make one: run "
                               f"`python3 benchmarks/gpu/snapshots.py {rev}:{op}` in a checkout and carry "
                               f"benchmarks/gpu/.snapshots") from e
    spec = importlib.util.spec_from_file_location(f"_{op}_kernel_{rev}", p)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        rev, op = arg.split(":")
        print(write(rev, op))
