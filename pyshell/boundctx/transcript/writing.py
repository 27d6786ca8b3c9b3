"""Writing a transcript: the write lock, appends, torn tails, and whole rewrites.

Every writer of a transcript holds a cross-process ``flock`` on ``<transcript>.lock``
(readers never need it). An append is one complete line written with one ``write`` on
an append descriptor of the very file that was read. Bytes after the last ``\\n`` (a
writer that died mid-append) are moved to a side file before anything is appended. A
rewrite replaces the whole file atomically from a complete :class:`History`. The
functions here do the file work; the :class:`~boundctx.transcript.Transcript` decides
when, and alone keeps its layout up to date.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import secrets
import stat
import time
from typing import Any

from boundctx._atomic import replacing
from boundctx._files import kind_of
from boundctx.errors import TranscriptChanged, TranscriptLocked, TranscriptNotAFile, TranscriptPermission
from boundctx.transcript.entries import RawLine
from boundctx.transcript.lineformat import BOM, LineUnreadable, decode_record, encode_record
from boundctx.transcript.sidecar import pread_exact

__all__ = [
    "LOCK_POLL_S",
    "LOCK_SUFFIX",
    "TORN_INFIX",
    "REWRITE_TOKEN_XATTR",
    "History",
    "file_identity",
    "lock_still_held",
    "move_tail_aside",
    "open_append_fd",
    "remove_leftovers",
    "replace_file",
    "take_write_lock",
    "unlink_quietly",
    "write_line",
]

# The lock is polled while a caller agrees to wait, as flock has no timeout.
LOCK_POLL_S = 0.005
# What a writer leaves beside a transcript named NAME: ".NAME.rewrite-<16 hex>" while it
# rewrites, "NAME.torn-<offset>-<ns>" for a torn tail it moved aside.
TORN_INFIX = ".torn-"
LOCK_SUFFIX = ".lock"
_REWRITE_INFIX = ".rewrite-"


class History:
    """The complete contents of a transcript, line by line, for a full-history rewrite.

    Obtain it with :meth:`Transcript.history`; edit it with the methods below (message
    indices are positions in the message sequence, as in windows); give it back to
    :meth:`Transcript.rewrite`. Lines that were not edited are written back byte for
    byte, whatever they hold (CRLF endings, key order, lines that are not records).
    """

    __slots__ = ("_lines", "_offsets", "_is_message", "_stamp", "_source")

    def __init__(self, lines: list[bytes], offsets: list[int | None], is_message: list[bool],
                 stamp: object, source: object) -> None:
        self._lines = lines  # each ends with "\n"
        self._offsets = offsets  # where each line was read from (None: added or edited)
        self._is_message = is_message
        self._stamp = stamp
        self._source = source

    @property
    def source(self) -> object:
        """The Transcript this history was read from (only it may rewrite from it)."""
        return self._source

    @property
    def stamp(self) -> object:
        """What the file was when this history was read (its identity and indexed end):
        a rewrite is refused once the file has changed since."""
        return self._stamp

    def restamp(self, stamp: object) -> None:
        """After a rewrite from this history: it describes the new file."""
        self._stamp = stamp

    def _position(self, index: int) -> int:
        count = 0
        for pos, is_msg in enumerate(self._is_message):
            if is_msg:
                if count == index:
                    return pos
                count += 1
        raise IndexError(f"message index {index} is out of range (0..{count - 1})")

    @property
    def message_count(self) -> int:
        return sum(self._is_message)

    def message(self, index: int) -> dict[str, Any] | RawLine:
        """A fresh copy of message ``index`` (a RawLine when it is not a record)."""
        raw = self._lines[self._position(index)]
        try:
            rec = decode_record(raw[:-1].removeprefix(BOM))
        except LineUnreadable:
            return RawLine(raw)
        return rec if isinstance(rec, dict) else RawLine(raw)

    def offset_of(self, index: int) -> int | None:
        """Byte offset message ``index`` was read from (None once edited or added)."""
        return self._offsets[self._position(index)]

    def replace_message(self, index: int, record: dict[str, Any]) -> None:
        """Replace message ``index`` with ``record``."""
        pos = self._position(index)
        self._lines[pos] = encode_record(record)
        self._offsets[pos] = None

    def delete_message(self, index: int) -> None:
        """Delete message ``index``; later messages move up by one."""
        pos = self._position(index)
        for seq in (self._lines, self._offsets, self._is_message):
            del seq[pos]

    def truncate_messages(self, index: int) -> None:
        """Delete message ``index`` and every line after it (abort, revision switch)."""
        pos = self._position(index)
        for seq in (self._lines, self._offsets, self._is_message):
            del seq[pos:]

    def append(self, record: dict[str, Any], *, is_message: bool = True) -> None:
        """Add a record at the end."""
        self._lines.append(encode_record(record))
        self._offsets.append(None)
        self._is_message.append(is_message)

    def data(self) -> bytes:
        """The transcript this history describes, as bytes."""
        return b"".join(self._lines)


# -- the write lock ---------------------------------------------------------------------


def take_write_lock(real: str, *, wait: float = 0.0) -> int:
    """Take the write lock of the transcript at ``real`` (its resolved path, a regular
    file, checked by the caller) and return its descriptor; the lock is held until
    that is closed, and only while :func:`lock_still_held` says so. ``wait``: seconds to
    keep trying while another writer holds it. What dead writers left beside the
    transcript is removed once the lock is held.

    The lock file is opened without following a symlink at its name (a link put there
    would make the lock, and the cleanup beside it, land outside the folder), and the
    lock counts only once the name still names the very file locked: a lock file removed
    or replaced between the open and the ``flock`` would otherwise be a private lock on
    an orphan, and another writer would lock the new one and proceed alongside.

    Raises
    ------
    TranscriptPermission
        The folder is read-only.
    TranscriptLocked
        Another writer still holds it after ``wait``.
    TranscriptNotAFile
        Something other than a regular file is at the lock file's name.
    """
    name = real + LOCK_SUFFIX
    deadline = time.monotonic() + max(wait, 0.0)
    while True:
        lfd = _open_lock_file(name, real)
        try:
            while True:
                try:
                    fcntl.flock(lfd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise TranscriptLocked(
                            errno.EAGAIN, f"another writer holds {real!r}; close it there first "
                                          "(readers never need the lock)") from None
                    time.sleep(LOCK_POLL_S)
        except BaseException:
            os.close(lfd)
            raise
        if lock_still_held(lfd, real):
            break
        os.close(lfd)  # locked an orphan: lock whatever the name holds now
    remove_leftovers(real)
    return lfd


def _open_lock_file(name: str, real: str) -> int:
    try:
        return os.open(name, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise TranscriptPermission(
                exc.errno, f"cannot write beside {real!r}: its folder is read-only "
                           f"({exc.strerror}); copy the transcript somewhere writable") from None
        if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            raise TranscriptNotAFile(
                exc.errno, f"{name!r}, the write lock of {real!r}, is not a regular file "
                           f"({exc.strerror}); remove it and try again") from None
        raise


def lock_still_held(lfd: int, real: str) -> bool:
    """Whether the lock taken on ``lfd`` is still the lock of transcript ``real``: the
    lock file's name still names the file locked (a writer that finds it removed or
    replaced must take the lock again before it writes)."""
    try:
        st = os.lstat(real + LOCK_SUFFIX)
    except OSError:
        return False
    mine = os.fstat(lfd)
    return stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


# -- appending --------------------------------------------------------------------------


def open_append_fd(real: str, read_fd: int) -> int:
    """An append descriptor on the very file open as ``read_fd``, whose resolved path is
    ``real``: opened without blocking and without following a symlink put at the name,
    and refused unless ``real`` still names that regular file (same device and inode),
    so an append cannot go to a FIFO, a device, a file outside the folder or a file
    swapped in since the read.

    Raises
    ------
    TranscriptPermission, TranscriptNotAFile, TranscriptChanged
    """
    flags = os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY | os.O_NOFOLLOW
    try:
        wfd = os.open(real, flags)
    except PermissionError as exc:
        raise TranscriptPermission(
            exc.errno, f"cannot append to {real!r}: permission denied") from None
    except OSError as exc:  # ENXIO: a FIFO with no reader; ENOENT: gone; ELOOP: now a symlink
        raise TranscriptChanged(
            f"{real!r} could not be opened for appending ({exc.strerror}); it was "
            "replaced or removed since it was read. Nothing was written") from None
    st, mine = os.fstat(wfd), os.fstat(read_fd)
    if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (mine.st_dev, mine.st_ino):
        os.close(wfd)
        if not stat.S_ISREG(st.st_mode):
            raise TranscriptNotAFile(
                errno.EINVAL, f"{real!r} is now {kind_of(st.st_mode)}, not the regular "
                              "file that was opened; nothing was written")
        raise TranscriptChanged(
            f"{real!r} was replaced by another file just before the append; nothing "
            "was written. Append it again")
    fcntl.fcntl(wfd, fcntl.F_SETFL, fcntl.fcntl(wfd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return wfd


def write_line(wfd: int, line: bytes, *, sync: bool) -> tuple[int, OSError | None]:
    """Write one encoded line (and ``fsync`` it with ``sync``): ``(bytes written, the
    error that stopped it)``. One ``write`` call takes the whole line up to Linux's
    per-call limit (0x7ffff000 bytes); a longer line takes several, which the write
    lock keeps whole against other writers. A write that stops short (a full disk) is
    reported, not raised: the bytes written are a torn tail the next append moves aside,
    and the caller says so."""
    view = memoryview(line)
    done = 0
    while done < len(line):
        try:
            n = os.write(wfd, view[done:])
        except OSError as exc:
            return done, exc
        if n <= 0:
            break
        done += n
    if done == len(line) and sync:
        os.fsync(wfd)
    return done, None


def move_tail_aside(read_fd: int, wfd: int, real: str, start: int, end: int) -> str:
    """Copy the torn tail ``start:end`` (bytes after the last ``\\n``) into a side file
    beside the transcript at ``real`` (its resolved path), then cut it off; returns the
    side file's path."""
    tail = pread_exact(read_fd, start, end - start)
    side = f"{real}{TORN_INFIX}{start}-{time.time_ns()}"
    try:
        with open(side, "xb") as f:
            f.write(tail)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        # A full disk: the tail stays in the transcript for the next try, and no
        # empty side file is left behind for each failed append.
        unlink_quietly(side)
        raise
    os.ftruncate(wfd, start)
    os.fsync(wfd)
    return side


# -- rewriting --------------------------------------------------------------------------


def replace_file(real: str, data: bytes, *, mode: int) -> None:
    """Replace the transcript at ``real`` (its resolved path) with ``data``: a temporary
    file beside it, ``fsync``, rename; it keeps ``mode``. ``real`` is not resolved again:
    a symlink put at the name since is replaced, never followed out of the folder. The new
    file carries a token of its own (:func:`file_identity`)."""
    with replacing(real, temp_name=lambda name: f"{_rewrite_prefix(name)}{secrets.token_hex(8)}",
                   mode=mode, resolve=False) as f:
        f.write(data)
        _give_token(f.fileno())


# -- what tells one file from the next at the same path ------------------------------------

#: The extended attribute a rewrite gives its new file: a random token of its own.
REWRITE_TOKEN_XATTR = "user.boundctx.rewrite"
# FS_IOC_GETVERSION (_IOR('v', 1, long)): the inode's generation, drawn anew each time
# the file system hands out an inode number (ext4, xfs, btrfs).
_FS_IOC_GETVERSION = 0x80087601


def _give_token(fd: int) -> None:
    try:
        os.setxattr(fd, REWRITE_TOKEN_XATTR, secrets.token_bytes(8))
    except (OSError, AttributeError):  # no user xattrs here: the generation, or the inode alone
        pass


def file_identity(fd: int) -> str:
    """What tells the file open as ``fd`` apart from every other file that was at its
    path: its device and inode, the inode's generation where the file system reports
    one, and the token a rewrite gave it. An append keeps it; a rewrite changes it.

    The inode alone is not enough: a rewrite frees the old file's number and ext4 gives
    it to the next rewrite's file, so after two rewrites a session is back to the number
    it had, and a cursor from before both would be taken for current."""
    st = os.fstat(fd)
    try:
        generation = int.from_bytes(fcntl.ioctl(fd, _FS_IOC_GETVERSION, bytes(8))[:4], "little")
    except OSError:
        generation = 0
    try:
        token = os.getxattr(fd, REWRITE_TOKEN_XATTR).hex()
    except (OSError, AttributeError):
        token = ""
    return f"{st.st_dev}:{st.st_ino}:{generation}:{token}"


def _rewrite_prefix(name: str) -> str:
    if len(os.fsencode(name)) > 200:  # keep the temporary name under NAME_MAX (255)
        name = f"{name[:100]}~{hashlib.sha256(os.fsencode(name)).hexdigest()[:16]}"
    return f".{name}{_REWRITE_INFIX}"


def remove_leftovers(real: str) -> list[str]:
    """Remove what dead writers left beside transcript ``real``: the temporary copies
    of rewrites they did not finish, and torn-tail side files left empty (created, then
    the disk was full). Call with the write lock held: every rewrite of this transcript
    runs under it, so no live writer owns what is found. A torn-tail file with bytes in
    it is the user's data and stays."""
    folder, name = os.path.split(real)
    prefix, torn = _rewrite_prefix(name), name + TORN_INFIX
    removed: list[str] = []
    try:
        entries = list(os.scandir(folder or "."))
    except OSError:
        return removed
    for entry in entries:
        try:
            if entry.name.startswith(prefix):
                suffix = entry.name[len(prefix):]
                if len(suffix) != 16 or any(c not in "0123456789abcdef" for c in suffix):
                    continue
            elif not (entry.name.startswith(torn) and entry.is_file(follow_symlinks=False)
                      and entry.stat(follow_symlinks=False).st_size == 0):
                continue
            if not entry.is_file(follow_symlinks=False):
                continue
            os.unlink(entry.path)
            removed.append(entry.path)
        except OSError:
            continue  # gone already, or not ours to remove: never fail the lock for it
    return removed


def unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
