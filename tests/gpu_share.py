"""One GPU shared by pytest-xdist workers: a GPU test holds the card shared, a test marked ``gpu_alone`` (tens of GB,
or timings judged against budgets) holds it alone. Two flock(2) locks in a folder every worker of a run sees: the
card's lock, taken shared or exclusive, and a turnstile every test passes through first, which a test waiting to
run alone holds while it waits, so that no shared test starts in the meantime (a run of shared tests cannot keep it
out). Without xdist the locks are never contended."""

from __future__ import annotations

import contextlib
import fcntl
from pathlib import Path


@contextlib.contextmanager
def gpu_share(folder: Path, alone: bool):
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "gpu.turnstile", "a") as turn, open(folder / "gpu.lock", "a") as card:
        fcntl.flock(turn, fcntl.LOCK_EX)
        try:
            fcntl.flock(card, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(turn, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(card, fcntl.LOCK_UN)
