"""Where ``boundctx serve`` keeps its sessions: a folder of JSONL files, or a PostgreSQL
database (``serve.sessions_dir`` set to a ``postgresql://`` URL; docs/decisions/0048).

The sessions API (:mod:`boundctx.serve.sessions`) reads and writes a session through
what both stores' sessions answer alike — a :class:`~boundctx.transcript.Transcript` for a
file, a :class:`~boundctx.stores.postgres.PostgresSession` for a row — and asks the store
here only what differs: how a session is found, listed, created, titled and opened, with
the store's failures said as HTTP errors.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from boundctx._atomic import replacing
from boundctx.errors import (
    TranscriptChanged,
    TranscriptNotAFile,
    TranscriptNotFound,
    TranscriptPermission,
)
from boundctx.serve.http import ApiError
from boundctx.transcript.chat import FIRST_LINES, refuse_unless_transcript
from boundctx.transcript.lineformat import encode_record
from boundctx.transcript.store import Transcript

__all__ = ["DatabaseSessions", "FolderSessions", "RETRY_AFTER", "SUFFIX", "TITLE_SUFFIX"]

SUFFIX = ".jsonl"
#: A session's title, when a person set one, sits beside it in ``<id>.title``.
TITLE_SUFFIX = ".title"
RETRY_AFTER = "1"
#: The most of a title file read: the longest title a person can set (200 characters) at
#: up to 4 bytes each.
TITLE_READ_BYTES = 800
#: How many files' verdicts :meth:`FolderSessions.writes_into` keeps (then it starts over).
JUDGED_KEPT = 4096


class FolderSessions:
    """Sessions as ``<id>.jsonl`` files directly inside one folder (the embedded default)."""

    def __init__(self, folder: str | os.PathLike) -> None:
        self.dir = os.fspath(folder)
        self.real_dir = os.path.realpath(self.dir)
        #: Identities of files whose first lines were judged a transcript's: a window
        #: request asks every time, and the answer holds until the file is rewritten
        #: (a new identity). Filled and read by the handler threads: a set's add and
        #: membership test are atomic, and it is emptied, not evicted, when full.
        self._judged: set[str] = set()

    def public(self, message: str) -> str:
        """``message`` without the server's own paths (the sessions folder): a client
        knows a session by its id."""
        for folder in {self.real_dir, os.path.abspath(self.dir)}:
            message = message.replace(folder + os.sep, "").replace(folder, "the sessions folder")
        return message

    def path(self, sid: str) -> str:
        return os.path.join(self.real_dir, sid + SUFFIX)

    def listing(self, is_id: Callable[[str], bool]) -> list[tuple[str, int, int]]:
        """``(id, bytes, modified in ns)`` of every session file, the most recently changed
        first (the id breaks ties, so the order, and a cursor into it, is stable)."""
        found: list[tuple[str, int, int]] = []
        try:
            entries = list(os.scandir(self.dir))
        except FileNotFoundError:
            entries = []
        for entry in entries:
            name = entry.name
            if not name.endswith(SUFFIX) or not is_id(name[: -len(SUFFIX)]):
                continue
            try:
                real = os.path.realpath(entry.path)  # EINVAL when a link is swapped for a file under it
                st = os.stat(real)
            except OSError:
                continue
            if os.path.dirname(real) != self.real_dir or not stat.S_ISREG(st.st_mode):
                continue  # a link out of the folder, a folder: no id reaches it
            found.append((name[: -len(SUFFIX)], st.st_size, st.st_mtime_ns))
        found.sort(key=lambda f: (-f[2], f[0]))
        return found

    @contextlib.contextmanager
    def open(self, sid: str) -> Iterator[Transcript]:
        """Session ``sid`` open (its write lock and sidecar beside the very file opened),
        with the store's errors said as HTTP ones: one answer for missing, outside the
        folder and not a file, so a caller cannot probe what lies outside it."""
        try:
            t = Transcript.open(self.path(sid), within=self.real_dir)
        except (TranscriptNotFound, TranscriptNotAFile):
            raise ApiError(404, f"no session {sid!r}", "session_not_found", "id") from None
        except TranscriptChanged:
            raise ApiError(409, "the session was replaced while it was being opened; try again", "session_changed",
                           headers={"Retry-After": RETRY_AFTER}) from None
        except TranscriptPermission as exc:
            raise ApiError(403, str(exc), "permission_denied", type="permission_error") from None
        with t:
            yield t

    def reading(self, sid: str, *, window: dict[str, Any] | None = None):
        """Session ``sid`` for a burst of reads: a file is read as it is opened (the
        window the burst reads first, ``window``, is read when it asks)."""
        return self.open(sid)

    def create(self, sid: str, records: Sequence[dict[str, Any]]) -> None:
        """A new session file holding ``records`` whole, or none at all."""
        lines = b"".join(encode_record(r) for r in records)
        if not os.path.isdir(self.real_dir):
            raise ApiError(500, "the sessions folder does not exist (serve.sessions_dir)", "sessions_folder_missing",
                           type="server_error")
        path = self.path(sid)
        try:
            # O_EXCL refuses anything already at the name, a dangling symlink included.
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        except FileExistsError:
            raise ApiError(409, f"session {sid!r} exists", "session_exists", "id") from None
        try:
            with os.fdopen(fd, "wb") as f:  # the carried lines whole, or no session
                f.write(lines)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            os.unlink(path)
            raise

    def title(self, sid: str) -> str | None:
        """The title a person set, kept beside the session as ``<id>.title``."""
        try:
            fd = os.open(os.path.join(self.real_dir, sid + TITLE_SUFFIX), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            return None
        try:
            data = os.read(fd, TITLE_READ_BYTES)
        finally:
            os.close(fd)
        return data.decode("utf-8", "replace").strip() or None

    def set_title(self, sid: str, title: str) -> None:
        """Set (or, with ``""``, clear) the title: beside the session, never in it, so
        another agent's file stays as it was."""
        target = os.path.join(self.real_dir, sid + TITLE_SUFFIX)
        if title:
            with replacing(target, resolve=False) as f:
                f.write(title.encode())
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(target)

    def opener(self, sid: str) -> Callable[[], Transcript]:
        """How a reply's own thread opens the session again (to search older messages)."""
        path = self.path(sid)
        return lambda: Transcript.open(path)

    def writes_into(self, t: Transcript) -> Transcript | None:
        """What a reply's writability is still to be judged on: the file itself when its
        first lines may say it is no transcript at all (``writable_style`` then refuses
        it and says why), else None. A file with :data:`FIRST_LINES` lines that passed is
        remembered by its identity, so a window does not read its first lines again."""
        key = t.identity()
        if key in self._judged:
            return None
        try:
            refuse_unless_transcript(t)
        except ValueError:
            return t
        if t.line_count >= FIRST_LINES:  # lines an append never changes
            if len(self._judged) >= JUDGED_KEPT:
                self._judged.clear()
            self._judged.add(key)
        return None


class DatabaseSessions:
    """Sessions in a PostgreSQL database, for serve processes on several machines."""

    def __init__(self, url: str) -> None:
        from boundctx.stores.postgres import PostgresStore

        self.store = PostgresStore(url)

    def public(self, message: str) -> str:
        return message  # a store error names the database, never a password

    def listing(self, is_id: Callable[[str], bool]) -> list[tuple[str, int, int]]:
        return [row for row in self.store.listing() if is_id(row[0])]

    @contextlib.contextmanager
    def open(self, sid: str) -> Iterator[Any]:
        try:
            session = self.store.open(sid)
        except TranscriptNotFound:
            raise ApiError(404, f"no session {sid!r}", "session_not_found", "id") from None
        with session:
            yield session

    @contextlib.contextmanager
    def reading(self, sid: str, *, window: dict[str, Any] | None = None) -> Iterator[Any]:
        """Session ``sid`` held at one state for a burst of reads (a window request's
        version, window, count and size): its head read once, each read bounded by it, so
        the burst is a few round trips; a rewrite under it raises TranscriptChanged.
        ``window``: the arguments of the window the burst reads first, fetched with the
        head in its round trip."""
        try:
            with self.store.reading(sid, window=window) as session:
                yield session
        except TranscriptNotFound:
            raise ApiError(404, f"no session {sid!r}", "session_not_found", "id") from None

    def create(self, sid: str, records: Sequence[dict[str, Any]]) -> None:
        try:
            self.store.create(sid, records=records)
        except FileExistsError:
            raise ApiError(409, f"session {sid!r} exists", "session_exists", "id") from None

    def title(self, sid: str) -> str | None:
        return self.store.title(sid)

    def set_title(self, sid: str, title: str) -> None:
        self.store.set_title(sid, title or None)

    def opener(self, sid: str) -> Callable[[], Any]:
        return lambda: self.store.open(sid)

    def writes_into(self, t: Any) -> None:
        return None  # a session row always holds records

    def close(self) -> None:
        self.store.close()
