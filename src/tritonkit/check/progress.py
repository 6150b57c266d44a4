"""What `tritonkit check` is doing, on one line of stderr rewritten in place (on a terminal only): the cases
captured, the kernels lowered to TTIR, the rules run. A run of 20-35 s is otherwise silent."""

from __future__ import annotations

import sys
import time


class Progress:
    """``stage(what, done, total)`` rewrites the line; ``close()`` clears it."""

    def __init__(self, enabled: bool = False, stream=None):
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.t0 = time.perf_counter()
        self._last = 0.0
        self._what = ""
        self._shown = False

    def stage(self, what: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        # a new stage and the last step of one always show; steps in between at most ten times a second
        if what == self._what and done < total and now - self._last < 0.1:
            return
        self._last, self._what = now, what
        self._shown = True
        self.stream.write(f"\r\033[Ktritonkit check: {what} {done}/{total} ({now - self.t0:.0f} s)")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self._shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self._shown = False
