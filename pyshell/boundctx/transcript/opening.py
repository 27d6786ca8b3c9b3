"""Opening transcript files, with the errors a user can act on, and finding them in
folders. No numpy and no layout: ``reindex`` and the CLI start here."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable

from boundctx._files import kind_of, open_regular
from boundctx.errors import TranscriptChanged, TranscriptNotAFile, TranscriptNotFound, TranscriptPermission

__all__ = ["iter_transcripts", "map_open_error", "not_a_file", "open_regular_fd", "open_transcript_fd",
           "resolved_path", "still_names"]


def map_open_error(path: str | os.PathLike, exc: OSError) -> Exception:
    """The transcript error an ``OSError`` from opening ``path`` stands for (or ``exc``)."""
    if isinstance(exc, FileNotFoundError):
        return TranscriptNotFound(
            exc.errno, f"no transcript at {path!r}: check the path, or pass create=True to start one")
    if isinstance(exc, PermissionError):
        return TranscriptPermission(
            exc.errno, f"cannot open transcript {path!r}: permission denied; check its mode and owner")
    if isinstance(exc, IsADirectoryError):
        return _a_directory(path, exc.errno)
    return exc


def _a_directory(path: str | os.PathLike, code: int | None) -> TranscriptNotAFile:
    return TranscriptNotAFile(code, f"{path!r} is a directory; give the path of a .jsonl transcript file")


def open_transcript_fd(path: str, *, create: bool = False) -> int:
    """Open a transcript for reading, with the errors a user can act on.

    Refuses directories and anything that is not a regular file (a FIFO would block).
    """
    try:
        st = os.stat(path)
    except FileNotFoundError as exc:
        if not create:
            raise map_open_error(path, exc) from None
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        except FileExistsError:
            pass
        except FileNotFoundError:
            raise TranscriptNotFound(
                errno.ENOENT, f"cannot create {path!r}: its folder does not exist") from None
        except OSError as exc2:
            raise map_open_error(path, exc2) from None
        st = os.stat(path)
    except OSError as exc:
        raise map_open_error(path, exc) from None
    if not stat.S_ISREG(st.st_mode):
        raise not_a_file(path, st.st_mode)  # a directory's error among them
    return open_regular_fd(path)


def not_a_file(path: str | os.PathLike, mode: int) -> TranscriptNotAFile:
    """The error for ``path`` being a directory, FIFO, device or socket."""
    if stat.S_ISDIR(mode):
        return _a_directory(path, errno.EISDIR)
    return TranscriptNotAFile(
        errno.EINVAL, f"{path!r} is {kind_of(mode)}, not a regular file; transcripts are plain .jsonl files")


def open_regular_fd(path: str) -> int:
    """Open ``path`` for reading without ever blocking: a FIFO or device swapped in after
    a ``stat`` is refused from the ``fstat`` of what was really opened."""
    try:
        fd, _ = open_regular(path, refuse=not_a_file)
    except TranscriptNotAFile:
        raise
    except OSError as exc:
        raise map_open_error(path, exc) from None
    return fd


def iter_transcripts(paths: Iterable[str]) -> Iterable[str]:
    """Files named, and ``*.jsonl`` files under folders named (recursively, sorted)."""
    for p in paths:
        if os.path.isdir(p):
            for root, dirs, files in os.walk(p):
                dirs.sort()
                for name in sorted(files):
                    if name.endswith(".jsonl"):
                        yield os.path.join(root, name)
        else:
            yield p


def resolved_path(path: str, fd: int, *, within: str | None = None) -> str:
    """The real path of the file open as ``fd``, reached through ``path``: every symlink
    resolved, and checked to name that very file (``lstat``, so not a link itself). A
    writer works beside this path from then on (its lock, sidecar, rewrites) and never
    follows ``path`` again for them, so a symlink swapped in later cannot send its
    writes elsewhere.

    Parameters
    ----------
    within : str, optional
        A folder's real path: the file must lie directly inside it (else
        :class:`TranscriptNotFound`, the same answer as for a missing file, so a caller
        cannot probe outside).

    Raises
    ------
    TranscriptNotFound, TranscriptChanged
    """
    changed = TranscriptChanged(
        f"{path!r} was replaced while it was being opened; nothing was read or written. Open it again")
    try:
        real = os.path.realpath(path)
    except OSError:  # a link there when looked at, gone when read (EINVAL): changing under us
        raise changed from None
    if within is not None and os.path.dirname(real) != within:
        raise TranscriptNotFound(errno.ENOENT, f"no transcript {os.path.basename(path)!r} in the folder")
    if not still_names(real, fd, follow=False):
        raise changed
    return real


def still_names(path: str, fd: int, *, follow: bool = True) -> bool:
    """Whether ``path`` still names the regular file open as ``fd`` (with ``follow``
    off, ``path`` itself: a symlink there is not the file)."""
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except OSError:
        return False
    mine = os.fstat(fd)
    return stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)
