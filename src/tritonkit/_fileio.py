"""Files the tools write (check's report and baseline, validate's JSON): whole or not at all, never in place of
something that is not a regular file, and never into a disk or another device a report has no business in.

What is already at an output path is the user's: :func:`replace_refusal` says when a tool must not write there (a
file that exists, unless ``--force``; a file the run reads, even with it; a link to a file elsewhere), and
:func:`write_atomic` with ``replace=False`` creates a new file without ever putting it in place of one that appeared
meanwhile."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import sys
from collections.abc import Iterable

# the devices a report may be written into: the sinks (whatever their numbers: /dev/null is 1:3 on Linux, 3:2 on
# macOS) and terminals, on Linux by their device numbers (ttys 4 and 5, pseudo-terminals 136-143), elsewhere by name.
# /dev/zero discards what is written as /dev/null does; /dev/full fails every write, which the tools report (exit 2)
_SINKS = ("/dev/null", "/dev/zero", "/dev/full")

# a descriptor of this process named as a path: /dev/stdout is a link to /proc/self/fd/1
_OWN_FD = re.compile(r"/(?:proc/(self|\d+)/fd|dev/fd)/(\d+)")


def _terminal_or_sink(path: str, st: os.stat_result) -> bool:
    for sink in _SINKS:
        with contextlib.suppress(OSError):
            if os.path.samestat(st, os.stat(sink)):
                return True
    if sys.platform.startswith("linux"):
        major = os.major(st.st_rdev)
        return major in (4, 5) or 136 <= major <= 143
    return os.path.realpath(path).startswith(
        ("/dev/tty", "/dev/pts/", "/dev/fd/", "/dev/console", "/dev/stdout", "/dev/stderr")
    )


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
            "/dev/null, /dev/zero or /dev/full; reports go to files, pipes or terminals"
        )
    if stat.S_ISSOCK(mode):
        return "it is a socket"
    return None


def own_stream(path: str) -> int | None:
    """The descriptor of this process that ``path`` names, itself or through its links (``/dev/stdout`` ->
    ``/proc/self/fd/1``, ``/dev/fd/2``), or None. Such a path is the stream the process was given (a pipe, a
    terminal, or the file a shell redirected it to), written into through the descriptor."""
    p = os.path.abspath(path)
    for _ in range(40):
        m = _OWN_FD.fullmatch(p)
        if m and m.group(1) in (None, "self", str(os.getpid())):
            return int(m.group(2))
        if not os.path.islink(p):
            return None
        p = os.path.normpath(os.path.join(os.path.dirname(p), os.readlink(p)))
    return None


def same_file(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` name one file: the same inode where both exist, else the same real path."""
    try:
        return os.path.samestat(os.stat(a), os.stat(b))
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def is_stream(path: str) -> bool:
    """Whether ``path`` is something written into rather than a file replaced: a FIFO, a terminal, a sink, or a
    stream of this process."""
    if own_stream(path) is not None:
        return True
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def replace_refusal(path: str, force: bool = False, inputs: Iterable[tuple[str, str]] = ()) -> str | None:
    """Why a tool must not write its output at ``path`` given what is there now, or None.

    A symbolic link is refused unless it leads to a stream (``/dev/stdout``, a FIFO, a terminal, /dev/null): written
    through, a link to a regular file would replace a file somewhere else than where the user looked. A file the run
    reads, one of ``inputs`` (``(path, what it is)``), is refused even with ``force``; any other regular file that
    exists, unless ``force``. A missing folder, a directory or a device is for the caller's own checks
    (:func:`refusal`)."""
    fd = own_stream(path)
    if fd is not None:
        try:
            os.fstat(fd)
        except OSError:
            return f"it names descriptor {fd} of this process, which is not open"
    elif os.path.islink(path):
        where = os.readlink(path)
        real = os.path.realpath(path)
        shown = where if os.path.normpath(os.path.join(os.path.dirname(path), where)) == real else f"{where} ({real})"
        try:
            mode = os.stat(path).st_mode
        except OSError:
            return f"it is a symbolic link to {shown}, which is not there; name the file to write itself"
        if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
            kind = "a regular file" if stat.S_ISREG(mode) else "a directory"
            return (
                f"it is a symbolic link to {shown}, {kind} elsewhere; a link is only written through to a pipe, "
                "a terminal or /dev/null: name the file to write itself"
            )
    for other, what in inputs:
        if os.path.lexists(path) and os.path.exists(other) and same_file(path, other):
            return f"it is {what}, which this run reads; it is not written over, even with --force"
    try:
        regular = stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        regular = False
    if regular and fd is None and not force:
        return "the file exists; pass --force to replace it"
    return None


def write_atomic(path: str, text: str, *, replace: bool = True) -> None:
    """Write ``text`` to ``path``.

    A regular file (or none yet) gets it whole or not at all: the text goes to a temporary name beside the file,
    which is then renamed over it, so a run interrupted, or out of space, leaves the old file or none, never a
    truncated one that looks complete. With ``replace=False`` a file must not be there (FileExistsError, EEXIST,
    nothing written), and one that appears while the text is written is not replaced either. A symbolic link is
    followed and stays a link: the file it points to is the one replaced (its mode kept). A stream of this process
    (``/dev/stdout``) is written into through its descriptor, wherever it leads; ``/dev/null``, a FIFO or a terminal
    is written into as it is, never replaced by a file; an error writing it (``/dev/full``) is raised. What
    :func:`refusal` names (a disk, any other device, a socket) is not touched: OSError (EINVAL) saying why."""
    why = refusal(path)
    if why:
        raise OSError(errno.EINVAL, f"refused: {why}", path)
    fd = own_stream(path)
    if fd is not None:
        # what the process itself printed to that stream first comes first
        for s in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                if s.fileno() == fd:
                    s.flush()
        with os.fdopen(os.dup(fd), "w") as fh:
            fh.write(text)
        return
    try:
        st = os.stat(path)  # follows links: /proc/<pid>/fd/1 is the pipe or terminal it names
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        with open(path, "w") as fh:
            fh.write(text)
        return
    if not replace and (st is not None or os.path.lexists(path)):
        raise FileExistsError(errno.EEXIST, "the file exists; not replaced", path)
    target = os.path.realpath(path)  # a link (even one whose file is not there yet) keeps pointing at its file
    tmp = f"{target}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w") as fh:
            fh.write(text)
        if st is not None:
            os.chmod(tmp, stat.S_IMODE(st.st_mode))
        if replace:
            os.replace(tmp, target)
        else:
            _place_new(tmp, target)
    finally:
        with contextlib.suppress(OSError):
            os.remove(tmp)


def _place_new(tmp: str, target: str) -> None:
    """Give ``tmp`` the name ``target``, which must not exist: a hard link fails rather than replace a file that
    appeared meanwhile; where the file system has none, a check just before the rename."""
    try:
        os.link(tmp, target)
    except FileExistsError:
        raise FileExistsError(errno.EEXIST, "the file appeared while the run wrote it; not replaced", target) from None
    except OSError:
        if os.path.lexists(target):
            raise FileExistsError(
                errno.EEXIST, "the file appeared while the run wrote it; not replaced", target
            ) from None
        os.replace(tmp, target)
