"""Replace a file whole or not at all: write beside it, flush it to disk, rename it over.

A reader (or a crash) sees the old file or the new one, never a part of either. Used
wherever boundctx writes a file a user keeps: transcript rewrites, samples, the config
file.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import BinaryIO

__all__ = ["fsync_dir", "replacing"]


def fsync_dir(folder: str) -> None:
    """Flush a folder's entries (a rename into it) to disk; a folder that cannot be
    opened or synced (some file systems) is left to the kernel."""
    try:
        dfd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


@contextmanager
def replacing(path: str | os.PathLike, *, temp_name: Callable[[str], str] | None = None,
              mode: int | None = None, sync: bool = True, resolve: bool = True) -> Iterator[BinaryIO]:
    """Yield a new binary file that replaces ``path`` when the block ends cleanly.

    Parameters
    ----------
    path : path
        The file to replace (or create). Through a symlink, the file it points to is
        replaced, not the link.
    temp_name : callable, optional
        ``temp_name(name)``: the temporary file's name in the same folder (default
        ``.<name>.<16 hex>.tmp``); it is created exclusively, so it must be unique.
    mode : int, optional
        Permission bits to give the new file (default: 0666 less the umask, as a plain
        ``open(path, "w")`` gives).
    sync : bool
        Flush the file and the folder to disk (off only for throwaway data).
    resolve : bool
        Follow a symlink at ``path`` (default). False: ``path`` is already resolved, and
        whatever is at the name now (a symlink put there since) is replaced, not followed.

    An exception in the block (``KeyboardInterrupt`` included) removes the temporary
    file and leaves ``path`` as it was.
    """
    real = os.path.realpath(path) if resolve else os.fspath(path)
    folder, name = os.path.split(real)
    tmp = os.path.join(folder, temp_name(name) if temp_name else f".{name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            if sync:
                f.flush()
                os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, real)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if sync:
        fsync_dir(folder)
