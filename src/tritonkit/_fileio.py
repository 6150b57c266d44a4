"""Files the tools write (check's report and baseline, validate's JSON): whole or not at all, and never in place of
something that is not a regular file."""

from __future__ import annotations

import contextlib
import os
import stat


def write_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path``.

    A regular file (or none yet) gets it whole or not at all: the text goes to a temporary name beside the file,
    which is then renamed over it, so a run interrupted, or out of space, leaves the old file or none, never a
    truncated one that looks complete. A symbolic link is followed and stays a link: the file it points to is the
    one replaced (its mode kept). Anything else (``/dev/null``, ``/dev/stdout``, a FIFO, a terminal) is written
    into as it is, never replaced by a file; an error writing it (``/dev/full``) is raised."""
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
