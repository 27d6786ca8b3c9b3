"""Opening named files for reading: regular files only.

A FIFO blocks ``open`` until a writer comes and then ``read`` until it leaves;
``/dev/zero`` never ends; a directory cannot be read at all. Every path boundctx reads
(config, attachments, ``split`` input, catalogs, records, transcripts) goes through
:func:`open_regular`, which opens without blocking (``O_NONBLOCK``), looks at what it
opened (``fstat``, so no swap between a check and the open can slip through) and
refuses anything that is not a regular file, naming the path and what it is.
"""

from __future__ import annotations

import fcntl
import os
import stat
from collections.abc import Callable

__all__ = ["kind_of", "not_a_regular_file", "open_regular", "read_bytes"]

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link"))


def kind_of(mode: int) -> str:
    """What a file of this ``st_mode`` is, in words (``"a FIFO (named pipe)"``)."""
    for test, words in _KINDS:
        if test(mode):
            return words
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


def not_a_regular_file(path: str | os.PathLike, mode: int, *, what: str = "file") -> OSError:
    """The error for ``path`` being something else than a regular file (its message is
    the whole ``str``: no ``[Errno N]`` prefix)."""
    shown = os.fsdecode(path)
    words = kind_of(mode)
    cls = IsADirectoryError if stat.S_ISDIR(mode) else OSError
    return cls(f"{shown!r} is {words}, not a regular file; give the path of a {what}")


def open_regular(path: str | os.PathLike, *, what: str = "file",
                 refuse: Callable[[str | os.PathLike, int], Exception] | None = None,
                 ) -> tuple[int, os.stat_result]:
    """Open ``path`` for reading: ``(fd, fstat of it)``, the fd blocking as usual.

    ``refuse(path, st_mode)`` makes the error for what is not a regular file (default:
    :func:`not_a_regular_file`).

    Raises
    ------
    OSError
        What ``os.open`` raises (``FileNotFoundError``, ``PermissionError``...), or, for
        anything but a regular file, :func:`not_a_regular_file`'s error
        (``IsADirectoryError`` for a directory).
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise (refuse(path, st.st_mode) if refuse is not None
                   else not_a_regular_file(path, st.st_mode, what=what))
        # Regular files ignore O_NONBLOCK; clear it all the same, so the fd is ordinary.
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_bytes(path: str | os.PathLike, *, what: str = "file") -> bytes:
    """The whole content of the regular file ``path`` (see :func:`open_regular`)."""
    fd, _ = open_regular(path, what=what)
    with os.fdopen(fd, "rb") as f:
        return f.read()
