"""Run a user's code (case files and cases) so that nothing it does passes for a clean check.

- ``os._exit`` raises instead of ending the process with no report (a file calling ``os._exit(0)`` gave exit 0).
- What it prints goes to stderr, Python's ``sys.stdout`` and file descriptor 1 alike: stdout carries the report
  (``--format json``) and nothing else.
- Each import and each case runs under a time limit (``--case-timeout``): past it, the case ends as a problem.
- A ``KeyboardInterrupt`` the user's code raises is that code's failure, not the user's Ctrl-C: only a real SIGINT
  (seen by :func:`real_interrupts`) ends the run as interrupted.
- A process the user's code forks (``os.fork``, ``multiprocessing`` with fork) never runs the rest of the tool: it
  ends when its code returns or raises into the tool's, and its ``os._exit`` is the real one.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

from . import watch

#: seconds a case (or the import of a case file) may run; capture compiles later, so a case is fast
DEFAULT_CASE_TIMEOUT = 120.0


class UserExit(BaseException):
    """A case or case file called ``os._exit``: a BaseException, so that ``except Exception`` does not hide it."""


class CaseTimeout(BaseException):
    """A case or case file ran past the time limit (infinite loop, a read that never finishes)."""


#: ``os._exit`` itself, kept before any block below replaces it
_REAL_EXIT = os._exit


def _after_fork_in_child() -> None:
    # a forked child ends as its own code says (multiprocessing's child ends in os._exit): only the tool's process
    # refuses it
    os._exit = _REAL_EXIT


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _leave(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    _REAL_EXIT(code)


@contextlib.contextmanager
def this_process_only() -> Iterator[None]:
    """Wrap one call into user code: a process it forked that comes back out of the block (the child's side of an
    ``os.fork`` returned or raised) ends here, with the exit status that code gave, instead of running the rest of
    the tool (its other cases, its report, its exit code)."""
    pid = os.getpid()
    code = 0
    try:
        yield
    except BaseException as e:
        if os.getpid() == pid:
            raise
        if isinstance(e, SystemExit):
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        else:
            traceback.print_exc()
            code = 1
    if os.getpid() != pid:
        _leave(code)


_interrupts = {"watching": False, "signalled": False, "last": -1e9}
#: SIGINTs closer than this are one Ctrl-C: the terminal sends it to the whole process group, watcher included,
#: and the watcher passes its copy on
_SAME_CTRL_C = 1.0


def _on_sigint(signum, frame):
    now = time.monotonic()
    if now - _interrupts["last"] < _SAME_CTRL_C:
        return
    _interrupts.update(signalled=True, last=now)
    raise KeyboardInterrupt


def watch_interrupts() -> None:
    """For a whole process (a watched child, see :mod:`.watch`): SIGINT goes through the handler
    :func:`real_interrupts` installs, so that one Ctrl-C delivered twice raises once."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)


@contextlib.contextmanager
def real_interrupts() -> Iterator[None]:
    """Within: a SIGINT (Ctrl-C) is recorded before it raises KeyboardInterrupt, so that :func:`raised_by_code`
    tells it from a KeyboardInterrupt that a case's code raised itself. Only where Python's own handler is set, in
    the main thread (a caller's handler stays theirs). An ignored SIGINT stays ignored: no Ctrl-C can raise then (a
    shell starts a script's background jobs so), so every KeyboardInterrupt is the code's."""
    main = threading.current_thread() is threading.main_thread()
    handler = signal.getsignal(signal.SIGINT) if main else None
    ignored = handler is signal.SIG_IGN
    if not ignored and handler not in (signal.default_int_handler, _on_sigint):
        yield
        return
    _interrupts.update(watching=True, signalled=False)
    old = None if ignored else signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    finally:
        if old is not None:
            signal.signal(signal.SIGINT, old)
        _interrupts["watching"] = False


def raised_by_code(e: BaseException) -> bool:
    """Whether ``e`` is a KeyboardInterrupt that user code raised (``raise KeyboardInterrupt``), not a Ctrl-C: known
    only inside :func:`real_interrupts`; outside it every KeyboardInterrupt counts as the user's."""
    return isinstance(e, KeyboardInterrupt) and _interrupts["watching"] and not _interrupts["signalled"]


def interrupted() -> bool:
    """Whether a Ctrl-C arrived inside :func:`real_interrupts` (user code may have caught its KeyboardInterrupt)."""
    return _interrupts["signalled"]


def _refuse_exit(code: int = 0) -> None:
    raise UserExit(f"called os._exit({code}), which would end the check with no report")


@contextlib.contextmanager
def no_process_exit() -> Iterator[None]:
    """Within: ``os._exit`` raises :class:`UserExit` instead of ending the process with no report (``sys.exit``
    raises SystemExit already: the caller catches it)."""
    real_exit = os._exit
    os._exit = _refuse_exit
    try:
        yield
    finally:
        os._exit = real_exit


@contextlib.contextmanager
def user_code() -> Iterator[None]:
    """Within: ``os._exit`` raises :class:`UserExit`, and stdout (both levels) is redirected to stderr."""
    saved = None
    with contextlib.suppress(OSError, ValueError, AttributeError):
        sys.stdout.flush()
        saved = os.dup(1)
        os.dup2(2, 1)
    try:
        with no_process_exit(), contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        if saved is not None:
            with contextlib.suppress(OSError, ValueError, AttributeError):
                sys.stderr.flush()
            os.dup2(saved, 1)
            os.close(saved)


def parse_seconds(v: str) -> float:
    """``--case-timeout``'s value: seconds, 0 for no limit (argparse's type)."""
    import argparse

    try:
        x = float(v)
    except ValueError:
        x = -1.0
    if not x >= 0 or x == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds (0: no limit), got {v!r}")
    return x


@contextlib.contextmanager
def time_limit(seconds: float | None, label: str = "a case") -> Iterator[None]:
    """Raise :class:`CaseTimeout` in this thread after ``seconds`` (SIGALRM: the main thread of a POSIX process;
    with None or 0, no limit). Under ``tritonkit check`` or ``validate`` the watcher (:mod:`.watch`) also knows
    ``label`` runs: past the limit and a grace it ends the run naming it, when the SIGALRM could not."""
    if not seconds:
        yield
        return
    alarm = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()

    def expired(signum, frame):
        raise CaseTimeout(f"ran past the {seconds:g} s limit (--case-timeout) and was stopped")

    watch.arm(seconds, label)
    old = None
    try:
        if alarm:
            old = signal.signal(signal.SIGALRM, expired)
            signal.setitimer(signal.ITIMER_REAL, seconds)
        yield
    finally:
        if alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        watch.disarm()


def limited(fn: Callable[[], Any] | Any, seconds: float | None, label: str = "a case") -> Callable[[], Any] | Any:
    """``fn`` run under :func:`time_limit`; a value that is not callable is returned as it is."""
    if not callable(fn) or not seconds:
        return fn

    def run():
        with time_limit(seconds, label):
            return fn()

    return run
