"""Where a result came from: the tree's git sha and the NVIDIA driver, for the metadata of every JSON written."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess


def git_info(start: pathlib.Path | None = None) -> tuple[str | None, bool | None]:
    """(sha, dirty) of the tree this package runs from. ``$TRITONKIT_GIT_SHA`` wins when set (dirty unknown): a copy
    of the tree on another machine can carry a stale .git, whose HEAD is not the tree. Otherwise ``git`` from the
    package's directory; (None, None) without a checkout, or with one whose HEAD commit is missing (a copy of .git
    without its objects)."""
    env = os.environ.get("TRITONKIT_GIT_SHA", "").strip()
    if env:
        return env, None
    where = start or pathlib.Path(__file__).resolve().parent
    try:
        # --verify HEAD^{commit} fails where the ref is there but its commit object is not
        sha = subprocess.run(
            ["git", "rev-parse", "--verify", "-q", "HEAD^{commit}"],
            cwd=where,
            capture_output=True,
            text=True,
            timeout=10,
        )
        if sha.returncode == 0 and sha.stdout.strip():
            st = subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no"],
                cwd=where,
                capture_output=True,
                text=True,
                timeout=10,
            )
            return sha.stdout.strip(), bool(st.stdout.strip()) if st.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        pass
    return None, None


def driver_version() -> str:
    """The NVIDIA driver release (580.159.04), from NVML or nvidia-smi; the CUDA driver API version otherwise."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            v = pynvml.nvmlSystemGetDriverVersion()
            return v.decode() if isinstance(v, bytes) else str(v)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no NVML, or a driver it cannot read: the next source is tried
        pass
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
            )
            if out.returncode == 0 and out.stdout.strip():
                return out.stdout.strip().splitlines()[0]
        except (OSError, subprocess.SubprocessError):
            pass
    try:
        import torch

        v = torch._C._cuda_getDriverVersion()
        return f"cuda-driver-api-{v // 1000}.{v % 1000 // 10}"
    except Exception:  # noqa: BLE001 - metadata only: a driver version nobody can read is recorded as unknown
        return "unknown"
