"""Files the tools write (check's report and baseline, validate's JSON): whole or not at all."""

from __future__ import annotations

import contextlib
import os


def write_atomic(path: str, text: str) -> None:
    """Write ``text`` to a temporary name beside ``path``, then rename it over ``path``: a run interrupted, or out
    of space, leaves the old file or none, never a truncated one that looks complete."""
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            os.remove(tmp)
