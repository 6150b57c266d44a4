"""Files the tools write (check's report and baseline, validate's JSON): whole or not at all, never in place of
something that is not a regular file, and never into a disk or another device a report has no business in."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys

# the devices a report may be written into: the sinks (whatever their numbers: /dev/null is 1:3 on Linux, 3:2 on
# macOS) and terminals, on Linux by their device numbers (ttys 4 and 5, pseudo-terminals 136-143), elsewhere by name
_SINKS = ("/dev/null", "/dev/zero", "/dev/full")


def _terminal_or_sink(path: str, st: os.stat_result) -> bool:
    for sink in _SINKS:
        with contextlib.suppress(OSError):
            if os.path.samestat(st, os.stat(sink)):
                return True
    if sys.platform.startswith("linux"):
        major = os.major(st.st_rdev)
        return major in (4, 5) or 136 <= major <= 143
    return os.path.realpath(path).startswith(("/dev/tty", "/dev/pts/", "/dev/fd/", "/dev/console"))


def refusal(path: str) -> str | None:
    """Why a report must not be written at ``path``, or None: a block device (a disk or a partition: writing a
    report there destroys what it holds), a character device that is neither a terminal nor /dev/null, /dev/zero or
    /dev/full (``/dev/mem``, a GPU node, a tape), or a socket. Links are followed; nothing there yet, a regular file,
    a FIFO and a terminal are fine."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    mode = st.st_mode
    if stat.S_ISBLK(mode):
        return "it is a block device (a disk or partition); reports go to files, pipes or terminals"
    if stat.S_ISCHR(mode) and not _terminal_or_sink(path, st):
        return (
            f"it is a character device ({os.major(st.st_rdev)}:{os.minor(st.st_rdev)}) that is not a terminal or "
            "/dev/null; reports go to files, pipes or terminals"
        )
    if stat.S_ISSOCK(mode):
        return "it is a socket"
    return None


def write_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path``.

    A regular file (or none yet) gets it whole or not at all: the text goes to a temporary name beside the file,
    which is then renamed over it, so a run interrupted, or out of space, leaves the old file or none, never a
    truncated one that looks complete. A symbolic link is followed and stays a link: the file it points to is the
    one replaced (its mode kept). ``/dev/null``, ``/dev/stdout``, a FIFO or a terminal is written into as it is,
    never replaced by a file; an error writing it (``/dev/full``) is raised. What :func:`refusal` names (a disk, any
    other device, a socket) is not touched: OSError (EINVAL) saying why."""
    why = refusal(path)
    if why:
        raise OSError(errno.EINVAL, f"refused: {why}", path)
    try:
        st = os.stat(path)  # follows links: /proc/self/fd/1 is the pipe or terminal it names
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        with open(path, "w") as fh:
            fh.write(text)
        return
    target = os.path.realpath(path)  # a link (even one whose file is not there yet) keeps pointing at its file
    tmp = f"{target}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w") as fh:
            fh.write(text)
        if st is not None:
            os.chmod(tmp, stat.S_IMODE(st.st_mode))
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(OSError):
            os.remove(tmp)
