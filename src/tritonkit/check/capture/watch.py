"""Run a command (``tritonkit check``, ``tritonkit validate``) in a forked child that this process watches, so that
a case past its time limit ends the run by name even when nothing inside the process can stop it.

The SIGALRM limit (:func:`.isolate.time_limit`) stops a case whose Python code runs on. It cannot stop a loop in C
(``sum(itertools.repeat(1))`` never returns to the interpreter, so no handler and no other thread runs), nor a case
that replaced or ignored SIGALRM. So every limited block also tells the watcher, through a pipe, what it runs and for
how long; past that and a grace, the watcher names the case on stderr, kills the child and exits 2. The child ends
with ``os._exit`` once its command has returned and its output is flushed: a thread the user's code left running
cannot keep the run alive after its report. Ctrl-C, SIGTERM and SIGHUP sent to the watcher are passed on; a child
ended by a signal ends the watcher by the same signal.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time
import traceback
from collections.abc import Callable

#: the longest a case may run past its limit before the watcher ends the run (the SIGALRM gets the first chance)
GRACE_MAX = 10.0
#: after a Ctrl-C, how long the child may take to stop (print "interrupted", remove temporary files)
INTERRUPT_GRACE = 10.0
_REAL_EXIT = os._exit
_channel: int | None = None  # the pipe to the watcher, in the watched child only


def grace(seconds: float) -> float:
    return min(seconds, GRACE_MAX)


def _forget_channel() -> None:
    # a process the user's code forks is no case the watcher times: its copy of the pipe goes
    global _channel
    if _channel is not None:
        with contextlib.suppress(OSError):
            os.close(_channel)
        _channel = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_channel)


def _send(line: str) -> None:
    if _channel is None:
        return
    # one write under PIPE_BUF: atomic, never interleaved with another
    data = (line.replace("\n", " ")[:2000] + "\n").encode()
    with contextlib.suppress(OSError):
        os.write(_channel, data)


def arm(seconds: float, label: str) -> None:
    """Tell the watcher (if this process has one) that ``label`` runs from now for at most ``seconds``."""
    _send(f"arm {seconds!r} {label}")


def disarm() -> None:
    _send("disarm")


def watched(command: Callable[[], int], verb: str, child_setup: Callable[[], None] | None = None) -> int:
    """``command()``'s exit code, run in a forked child under the watch the module docstring describes (run here
    where ``fork`` is missing); ``child_setup()`` runs first in the child (the caller's signal handling)."""
    if not hasattr(os, "fork"):
        return command()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        global _channel
        os.close(r)
        _channel = w
        _child(command, child_setup)
    os.close(w)
    return _watch(pid, r, verb)


def _child(command: Callable[[], int], setup: Callable[[], None] | None) -> None:
    if setup is not None:
        setup()
    code = 1
    try:
        code = command()
    except SystemExit as e:
        if isinstance(e.code, int) or e.code is None:
            code = e.code or 0
        else:
            print(e.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - the process ends here whatever happened
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        _REAL_EXIT(code)


def _watch(pid: int, r: int, verb: str) -> int:
    case = {"deadline": None, "label": "", "limit": 0.0}
    interrupted: list[float] = []

    def forward(signum, frame):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)
        if signum == signal.SIGINT:
            interrupted.append(time.monotonic())

    names = ("SIGINT", "SIGTERM", "SIGHUP")
    old = {s: signal.signal(s, forward) for s in (getattr(signal, n) for n in names if hasattr(signal, n))}
    pending = b""
    try:
        while True:
            now = time.monotonic()
            waits = [0.5]
            if case["deadline"] is not None:
                waits.append(case["deadline"] - now)
            if interrupted:
                waits.append(interrupted[0] + INTERRUPT_GRACE - now)
            ready, _, _ = select.select([r], [], [], max(0.0, min(waits)))
            if ready:
                data = os.read(r, 1 << 16)
                if not data:  # the child is exiting: only its status is left to read
                    _, status = os.waitpid(pid, 0)
                    break
                pending += data
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    _read(line.decode(errors="replace"), case)
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            now = time.monotonic()
            if case["deadline"] is not None and now >= case["deadline"]:
                _end(pid)
                print(
                    f"tritonkit {verb}: {case['label']} ran past the {case['limit']:g} s limit (--case-timeout) and "
                    f"did not stop {grace(case['limit']):g} s later (code that never returns to Python, or that "
                    f"replaced SIGALRM): the run was ended unfinished, with no report",
                    file=sys.stderr,
                )
                return 2
            if interrupted and now >= interrupted[0] + INTERRUPT_GRACE:
                _end(pid)
                print(f"\ntritonkit {verb}: interrupted (the case running did not stop)", file=sys.stderr)
                return 130
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        os.close(r)
    code = os.waitstatus_to_exitcode(status)
    if code < 0:  # ended by a signal: end this process by the same one, as if it had been the one running
        with contextlib.suppress(OSError, ValueError):  # SIGKILL has no handler to reset
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        return 128 - code
    return code


def _read(line: str, case: dict) -> None:
    word, _, rest = line.partition(" ")
    if word == "arm":
        seconds, _, label = rest.partition(" ")
        case["limit"] = float(seconds)
        case["label"] = label
        case["deadline"] = time.monotonic() + float(seconds) + grace(float(seconds))
    elif word == "disarm":
        case["deadline"] = None


def _end(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
