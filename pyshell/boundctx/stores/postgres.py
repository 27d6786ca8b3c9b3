"""Sessions in PostgreSQL: the file store's contract on rows (docs/decisions/0048).

A session is a row of ``boundctx_sessions`` (its counts, its version, a torn last line kept
as it was) and one row of ``boundctx_lines`` per line of its JSONL form: the line's exact
bytes (``\\n`` included), where it would sit in the file, the kind the native classifier
gives it, and its index in the message sequence. So:

- **A window is an index range scan**: the messages ``message_start..message_before - 1``
  by ``(session, message)``, never a read of the session; a line longer than the display
  budget crosses the wire only as the prefix its projection needs (``substring`` of a
  column stored uncompressed, so PostgreSQL reads only those pages), and is projected by
  the same native projection, with the same marker, as the file store projects it.
- **Lossless**: import stores every line's bytes and export writes them back, so JSONL →
  PostgreSQL → JSONL is byte-identical.
- **Appends are atomic and ordered** under any number of writers in any number of
  processes: each takes the session row's lock in its transaction, so line numbers and
  message indexes have no gaps and no doubles.
- **The layout version** is the session's ``generation``, which only a rewrite changes, as
  a file's identity changes only when a rewrite replaces it. Every generation comes from
  one sequence, so a session removed and made again under its id never has one it had.
- **A read is bounded by the head it started from**, not by a transaction: the session's
  row (counts, generation) is read first, and each statement after it reads only lines
  below its counts and says the generation it saw. Lines are only ever added past the end
  until a rewrite, and a rewrite takes a new generation, so a read that sees its own
  generation throughout saw one state of the session; one that does not raises
  TranscriptChanged (a caller holding a version reads again). So a window is two round
  trips (the head, then one statement for its lines, compactions and leaf), with no
  BEGIN and COMMIT around them (decision 0050), and one when the window is named before
  the read: its statement reads the head too (serve's requests; decision 0051).

Sessions are read as lists, in the order their lines were written: a file whose tree
forks (a rewind; decision 0047) is refused at import with the reason, never flattened.

Requires ``psycopg`` 3 (``pip install 'boundctx[postgres]'``).
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import os
import re
import select
import struct
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal, NamedTuple, TypeVar

import msgspec
import numpy as np

from boundctx._native import filescan, lineindex
from boundctx.errors import StoreUnavailable, TranscriptChanged, TranscriptLocked, TranscriptNotFound
from boundctx.transcript.branches import Branch
from boundctx.transcript.dialects import dialect_kinds, native_table, settle_undecided
from boundctx.transcript.entries import Entry, Window
from boundctx.transcript.kinds import LineKind
from boundctx.transcript.lineformat import encode_record
from boundctx.transcript.opening import open_transcript_fd
from boundctx.transcript.reading import (
    ENVELOPE,
    NOT_DISPLAYABLE,
    _Line,
    _raw_entry,
    plain_entry,
    projected_record,
    records_together,
)
from boundctx.transcript.store import UNSET, _check_limit, _span, fit_page, window_limits
from boundctx.transcript.tree import build_tree, entry_id, link_keys
from boundctx.transcript.writing import History

__all__ = ["SCHEMA_VERSION", "ImportReport", "PostgresSession", "PostgresStore", "SessionStat", "redacted"]

T = TypeVar("T")

#: The tables' layout; a database holding another version is refused, not migrated blind.
SCHEMA_VERSION = 1
#: The longest line a row can hold (a ``bytea`` value is at most 1 GB).
LINE_MAX = (1 << 30) - 1
#: A window fetches a line this short with its size, in one round trip (a page that
#: keeps fewer lines than it sized has fetched at most this much of each in vain).
SHORT_LINE = 8192
#: Lines are imported and exported in batches of about this many bytes.
BATCH_BYTES = 8 << 20

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS boundctx_schema (version integer NOT NULL);
-- Every generation a session takes (made, imported, rewritten) is the next of this
-- sequence, so a version read from a session that was removed and made again is never
-- the new one's. It starts past any generation a session counted up to before it.
CREATE SEQUENCE IF NOT EXISTS boundctx_generation START WITH 4294967296;
CREATE TABLE IF NOT EXISTS boundctx_sessions (
    id text PRIMARY KEY,
    dialect text NOT NULL,
    generation bigint NOT NULL DEFAULT 0,
    lines bigint NOT NULL DEFAULT 0,
    messages bigint NOT NULL DEFAULT 0,
    compactions bigint NOT NULL DEFAULT 0,
    bytes bigint NOT NULL DEFAULT 0,
    tail bytea NOT NULL DEFAULT ''::bytea,
    title text,
    modified timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS boundctx_lines (
    session text NOT NULL REFERENCES boundctx_sessions (id) ON DELETE CASCADE,
    line bigint NOT NULL,
    "offset" bigint NOT NULL,
    length integer NOT NULL,
    kind smallint NOT NULL,
    message bigint,
    data bytea NOT NULL,
    PRIMARY KEY (session, line)
);
-- Stored uncompressed, so a prefix of a long line is read without the rest of it.
ALTER TABLE boundctx_lines ALTER COLUMN data SET STORAGE EXTERNAL;
CREATE UNIQUE INDEX IF NOT EXISTS boundctx_lines_message ON boundctx_lines (session, message)
    WHERE message IS NOT NULL;
CREATE INDEX IF NOT EXISTS boundctx_lines_compaction ON boundctx_lines (session, line)
    WHERE kind = {int(LineKind.COMPACTION)};
-- A torn last line an append moved aside: kept, never dropped.
CREATE TABLE IF NOT EXISTS boundctx_torn (
    session text NOT NULL,
    "offset" bigint NOT NULL,
    data bytea NOT NULL,
    moved timestamptz NOT NULL DEFAULT now()
);
-- What the serve processes on this database share (boundctx.serve.coordination): the
-- replies in flight, with the listening connection of the process running each, and the
-- settings changed through the API, numbered so the newest change wins.
CREATE TABLE IF NOT EXISTS boundctx_replies (
    id text PRIMARY KEY,
    owner text NOT NULL,
    backend integer NOT NULL,
    backend_start timestamptz NOT NULL,
    cancel_asked boolean NOT NULL DEFAULT false,
    started timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS boundctx_settings (name text PRIMARY KEY, value jsonb NOT NULL);
CREATE TABLE IF NOT EXISTS boundctx_settings_version (version bigint NOT NULL);
INSERT INTO boundctx_settings_version SELECT 0 WHERE NOT EXISTS (SELECT FROM boundctx_settings_version);
"""

#: A session's next generation (made, imported or rewritten).
_NEXT_GENERATION = "nextval('boundctx_generation')"
_IN_SEQUENCE = (int(LineKind.MESSAGE), int(LineKind.CORRUPT))
_COMPACTION = int(LineKind.COMPACTION)
# The pieces of a read's statements. Each names its values (%(sid)s, the session; %(lines)s,
# its head's line count; %(generation)s, its head's generation), so one statement can use
# a value several times.
#: The session's generation as the statement sees it, to compare with the head's.
_GENERATION = "(SELECT generation FROM boundctx_sessions WHERE id = %(sid)s)"
def _leaf(lines: str = "%(lines)s") -> str:
    """The newest message or compaction below line ``lines`` (an SQL expression)."""
    return (f"(SELECT max(line) FROM boundctx_lines WHERE session = %(sid)s AND kind IN ({int(LineKind.MESSAGE)}, "
            f"{int(LineKind.CORRUPT)}, {_COMPACTION}) AND line < {lines})")


#: The newest message or compaction below the head: the line a list's reads follow.
_LEAF = _leaf()
#: Lines of the session at the head's generation (none once a rewrite has taken another).
_AT_HEAD = ("boundctx_lines JOIN boundctx_sessions ON id = session AND generation = %(generation)s "
            "WHERE session = %(sid)s")


def _around(lo: str, hi: str, lines: str = "%(lines)s") -> str:
    """What a window needs beside its lines, as four values (the SQL expressions ``lo``
    and ``hi`` bound its lines, ``lines`` is the head's line count): the generation, the
    compaction in force at ``lo``, the number of compactions after it up to ``hi``, and
    the leaf."""
    return (f"{_GENERATION}, "
            f"(SELECT max(line) FROM boundctx_lines WHERE session = %(sid)s AND kind = {_COMPACTION} "
            f"AND line <= {lo}), "
            f"(SELECT count(*) FROM boundctx_lines WHERE session = %(sid)s AND kind = {_COMPACTION} AND line > {lo} "
            f"AND line <= {hi}), {_leaf(lines)}")


def _shown_bytes(content_limit: int | None) -> str:
    """The bytes of a line a window fetches: all of them, or (with a display budget) the
    prefix the projection reads of a line longer than the budget — content_limit +
    ENVELOPE bytes of the body, and a BOM before it at byte 0 — so no more crosses the
    wire (%(content)s and %(prefix)s: :func:`_shown_params`)."""
    if content_limit is None:
        return "data"
    return ('CASE WHEN length - 1 > %(content)s THEN substring(data FROM 1 FOR least(length - 1, '
            '%(prefix)s + CASE WHEN "offset" = 0 THEN 3 ELSE 0 END)) ELSE data END')


def _shown_params(content_limit: int | None) -> dict[str, int]:
    return {} if content_limit is None else {"content": content_limit, "prefix": content_limit + ENVELOPE}


def _window_params(content_limit: int | None, limit: int | None) -> dict[str, Any]:
    """The values :func:`_window_statement` names besides the session and its bounds:
    the display budget's, the compactions kept (%(keep)s) and the longest line fetched
    with its size (%(short)s: no longer than one the window shows whole)."""
    return {**_shown_params(content_limit), "keep": limit,
            "short": SHORT_LINE if content_limit is None else min(SHORT_LINE, content_limit + 1)}


def _window_ask(window: Mapping[str, Any] | None) -> tuple[int | None, int | None, int | None] | None:
    """``(message_before, message_limit, content_limit)`` of a window asked for ahead
    (:meth:`PostgresStore.reading`), or None when there is none or a value is not one a
    window takes (the window itself then says why)."""
    if window is None:
        return None
    ask = (window.get("message_before"), window.get("message_limit"), window.get("content_limit"))
    if any(v is not None and (type(v) is not int or v < 0) for v in ask):
        return None
    return ask


def _window_statement(content_limit: int | None, *, with_head: bool = False) -> str:
    """A window in one statement, one row per thing it needs, told apart by the first
    column: 0, the lines of messages %(start)s..%(stop)s - 1 with their sizes and the
    bytes of each one shorter than %(short)s (most lines of a chat; a longer one is
    fetched only if the page keeps it); 1, the generation, the compaction in force, the
    compactions inside and the leaf (:func:`_around`); 2, the compaction in force; 3, the
    newest %(keep)s compactions among the lines (NULL: all). In no order: the caller
    sorts the few rows (a sort here would copy every line's bytes once more).

    ``with_head``: the session's head comes with the window, and the window's messages
    are reckoned from it (the %(limit)s messages before %(before)s, NULL: the newest),
    so a request's first read is one round trip instead of two: 4, the head's counts,
    generation and dialect; 5, when it changed (microseconds since 1970) and its torn
    tail's size. No rows of 4 and 5: there is no such session.

    Written so its generic plan is as good as a planned one (the pool's connections keep
    generic plans: planning this statement took longer than running it): the lines'
    first and last line numbers are two lookups by message, and every bound is a scalar,
    so each range is an index condition."""
    shown = _shown_bytes(content_limit)
    head = ""
    if with_head:
        head = (f"head AS MATERIALIZED (SELECT {_HEAD_COLUMNS} AS torn, dialect FROM boundctx_sessions "
                "WHERE id = %(sid)s), "
                "span (start, stop) AS MATERIALIZED (SELECT CASE WHEN %(limit)s::bigint IS NULL THEN 0 "
                "ELSE greatest(0, stop - %(limit)s::bigint) END, stop FROM (SELECT CASE WHEN %(before)s::bigint "
                "IS NULL THEN messages ELSE least(%(before)s::bigint, messages) END AS stop FROM head) AS b), ")
        start, stop, lines = "(SELECT start FROM span)", "(SELECT stop FROM span)", "(SELECT lines FROM head)"
    else:
        start, stop, lines = "%(start)s", "%(stop)s", "%(lines)s"
    statement = (f"WITH {head}edge (lo, hi) AS MATERIALIZED (SELECT "
                 f"(SELECT line FROM boundctx_lines WHERE session = %(sid)s AND message = {start}), "
                 f"(SELECT line FROM boundctx_lines WHERE session = %(sid)s AND message = {stop} - 1)), "
                 "around (generation, in_force, inside, leaf) AS MATERIALIZED "
                 f"(SELECT {_around('(SELECT lo FROM edge)', '(SELECT hi FROM edge)', lines)}) "
                 'SELECT 0, line, message, "offset", length::bigint, kind::bigint, '
                 "CASE WHEN length <= %(short)s THEN data END FROM boundctx_lines "
                 f"WHERE session = %(sid)s AND message >= {start} AND message < {stop} "
                 "UNION ALL SELECT 1, generation, in_force, inside, leaf, NULL, NULL FROM around "
                 f'UNION ALL SELECT 2, line, message, "offset", length, kind, {shown} FROM boundctx_lines '
                 "WHERE session = %(sid)s AND line = (SELECT in_force FROM around) "
                 f'UNION ALL (SELECT 3, line, message, "offset", length, kind, {shown} FROM boundctx_lines '
                 f"WHERE session = %(sid)s AND kind = {_COMPACTION} AND line > (SELECT lo FROM edge) "
                 "AND line <= (SELECT hi FROM edge) ORDER BY line DESC LIMIT %(keep)s)")
    if with_head:
        statement += (" UNION ALL SELECT 4, lines, messages, compactions, bytes, generation, "
                      "convert_to(dialect, 'UTF8') FROM head UNION ALL SELECT 5, "
                      "(extract(epoch FROM modified) * 1000000)::bigint, torn, NULL, NULL, NULL, NULL "
                      "FROM head")
    return statement


#: When a head's change time is counted from (its statement says it in microseconds).
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
#: A session row's head, in :class:`_Head`'s order.
_HEAD_COLUMNS = "lines, messages, compactions, bytes, generation, modified, octet_length(tail)"


def _psycopg():
    try:
        import psycopg
        import psycopg_pool
    except ImportError:
        raise RuntimeError("the PostgreSQL store needs psycopg 3 with its pool: "
                           "pip install 'boundctx[postgres]'") from None
    return psycopg, psycopg_pool


class ImportReport(NamedTuple):
    """What an import stored."""

    session: str
    lines: int
    messages: int
    compactions: int
    bytes: int
    torn_bytes: int


class PostgresStore:
    """The sessions in one PostgreSQL database.

    Parameters
    ----------
    url : str
        A ``postgresql://`` URL (or a libpq connection string).
    pool_size : int
        Connections kept open (one per concurrent request at most).
    """

    def __init__(self, url: str, *, pool_size: int = 4, connect_timeout: float = 5.0) -> None:
        psycopg, psycopg_pool = _psycopg()
        self.url = url
        self._errors = psycopg
        self._pool_timeout = psycopg_pool.PoolTimeout
        # Each connection is checked as it is taken, so one the database dropped (a restart)
        # is replaced instead of failing the call it was given to.
        self.pool = psycopg_pool.ConnectionPool(url, min_size=1, max_size=pool_size, open=True,
                                                timeout=connect_timeout, kwargs={"autocommit": True},
                                                check=_check_idle, configure=_configure)
        try:
            self._ensure_schema()
        except BaseException:
            self.pool.close()
            raise

    @contextlib.contextmanager
    def connection(self) -> Iterator[Any]:
        """A pooled connection for one call. A database that cannot be reached, or a
        connection lost during the call, is :class:`StoreUnavailable` saying so; the call's
        transaction did not commit, and the next call connects again."""
        psycopg = self._errors
        try:
            with self.pool.connection() as conn:
                yield conn
        except self._pool_timeout:
            raise StoreUnavailable(f"the sessions database {self.where} cannot be reached ({self._why()}); "
                                   "check that it is running and the URL is right") from None
        except psycopg.OperationalError as exc:
            if not _connection_lost(exc):
                raise
            raise StoreUnavailable(f"the connection to the sessions database {self.where} was lost "
                                   f"({redacted(str(exc).strip()) or type(exc).__name__}); nothing of this call was "
                                   "kept, and the next call connects again") from None

    def _why(self) -> str:
        """Why a connection cannot be made now: one attempt of its own (the pool keeps its
        attempts' reasons to its log)."""
        try:
            self._errors.connect(self.url, connect_timeout=2).close()
        except self._errors.Error as exc:
            return redacted(" ".join(str(exc).split())) or type(exc).__name__
        return "no connection came free in time"

    @property
    def where(self) -> str:
        """The database's address as a message may show it: never a password."""
        try:
            info = self._errors.conninfo.conninfo_to_dict(self.url)
        except self._errors.ProgrammingError:
            return "(an unreadable URL)"
        host = info.get("host", "localhost")
        return f"{info.get('dbname', '')!r} on {host}" + (f":{info['port']}" if info.get("port") else "")

    def close(self) -> None:
        self.pool.close()

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _ensure_schema(self) -> None:
        with self.connection() as conn, conn.transaction():
            # One creator at a time: several processes may start against a new database.
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('boundctx_schema'))")
            conn.execute(_SCHEMA)
            row = conn.execute("SELECT version FROM boundctx_schema").fetchone()
            if row is None:
                conn.execute("INSERT INTO boundctx_schema VALUES (%s)", (SCHEMA_VERSION,))
            elif row[0] != SCHEMA_VERSION:
                raise RuntimeError(f"the database holds boundctx's tables at schema version {row[0]}, "
                                   f"and this boundctx reads version {SCHEMA_VERSION}: use the boundctx "
                                   "that wrote them, or export the sessions with it and import them here")

    # -- sessions -----------------------------------------------------------------------

    def create(self, sid: str, *, dialect: str = "auto", records: Sequence[dict[str, Any]] = ()) -> None:
        """A new session ``sid``, empty or holding ``records``: there whole, or not at all
        (FileExistsError when there is one already)."""
        lines = [encode_record(r) for r in records]  # refused before anything is stored
        with self.connection() as conn, conn.transaction():
            cur = conn.execute("INSERT INTO boundctx_sessions (id, dialect, generation) "
                               f"VALUES (%s, %s, {_NEXT_GENERATION}) ON CONFLICT DO NOTHING", (sid, dialect))
            if cur.rowcount == 0:
                raise FileExistsError(f"session {sid!r} exists")
            session = PostgresSession(self, sid, dialect)
            for line in lines:
                session._append_line(conn, line)

    def title(self, sid: str) -> str | None:
        """The title a person gave session ``sid`` (None: none given)."""
        with self.connection() as conn:
            row = conn.execute("SELECT title FROM boundctx_sessions WHERE id = %s", (sid,)).fetchone()
        if row is None:
            raise TranscriptNotFound(f"no session {sid!r}")
        return row[0]

    def set_title(self, sid: str, title: str | None) -> None:
        """Give session ``sid`` a title, or (None) take it away; its lines are not touched."""
        with self.connection() as conn:
            if conn.execute("UPDATE boundctx_sessions SET title = %s WHERE id = %s", (title, sid)).rowcount == 0:
                raise TranscriptNotFound(f"no session {sid!r}")

    def listing(self) -> list[tuple[str, int, int]]:
        """``(id, bytes, modified in ns)`` of every session, the most recently changed first
        (the id breaks ties, so the order is stable)."""
        with self.connection() as conn:
            rows = conn.execute("SELECT id, bytes + octet_length(tail), modified FROM boundctx_sessions "
                                "ORDER BY modified DESC, id").fetchall()
        return [(sid, size, _ns(modified)) for sid, size, modified in rows]

    def remove(self, sid: str) -> None:
        """Remove session ``sid``: its lines, and the torn tails kept aside for it."""
        with self.connection() as conn, conn.transaction():
            if conn.execute("DELETE FROM boundctx_sessions WHERE id = %s", (sid,)).rowcount == 0:
                raise TranscriptNotFound(f"no session {sid!r}")
            conn.execute("DELETE FROM boundctx_torn WHERE session = %s", (sid,))

    def ids(self) -> list[str]:
        with self.connection() as conn:
            return [r[0] for r in conn.execute("SELECT id FROM boundctx_sessions ORDER BY id")]

    def open(self, sid: str) -> PostgresSession:
        """Session ``sid``; TranscriptNotFound when there is none."""
        with self.connection() as conn:
            row = conn.execute("SELECT dialect FROM boundctx_sessions WHERE id = %s", (sid,)).fetchone()
        if row is None:
            raise TranscriptNotFound(f"no session {sid!r}")
        return PostgresSession(self, sid, row[0])

    @contextlib.contextmanager
    def reading(self, sid: str, *, window: Mapping[str, Any] | None = None) -> Iterator[PostgresSession]:
        """Session ``sid`` held at one state for a burst of reads (a request's version,
        window, counts and size): one connection, and the session's head read once, which
        every read of the burst is bounded by (the module docstring). A rewrite under the
        burst raises TranscriptChanged from the read that meets it; the caller reads
        again. Its writes still run on connections of their own. TranscriptNotFound when
        there is none.

        ``window``: the ``message_before``, ``message_limit`` and ``content_limit`` of the
        window the burst reads first. Its lines come with the head, in one statement
        (:func:`_window_statement`), and that window is answered from them: one round
        trip fewer. Values a window would refuse are left for the window to refuse."""
        with self.connection() as conn:
            ask = _window_ask(window)
            if ask is None:
                row = conn.execute(f"SELECT dialect, {_HEAD_COLUMNS} FROM boundctx_sessions WHERE id = %s",
                                   (sid,)).fetchone()
                if row is None:
                    raise TranscriptNotFound(f"no session {sid!r}")
                session, head = PostgresSession(self, sid, row[0]), _Head(*row[1:])
            else:
                session, head = self._head_with_window(conn, sid, ask)
            session._pinned, session._pinned_head = conn, head
            try:
                yield session
            finally:
                session._pinned = session._pinned_head = session._prefetched = None

    def _head_with_window(self, conn, sid: str, ask: tuple[int | None, int | None, int | None],
                          ) -> tuple[PostgresSession, _Head]:
        """The session, its head, and the rows of the window ``ask`` (before, limit,
        content limit) kept on it for its first window, all from one statement."""
        before, limit, content_limit = ask
        found = conn.execute(_window_statement(content_limit, with_head=True), {
            "sid": sid, "before": before, "limit": limit, **_window_params(content_limit, limit)},
            binary=True).fetchall()
        heads = {r[0]: r for r in found if r[0] >= 4}
        if 4 not in heads:
            raise TranscriptNotFound(f"no session {sid!r}")
        (_, lines, messages, compactions, size, generation, dialect), changed = heads[4], heads[5]
        head = _Head(lines, messages, compactions, size, generation,
                     _EPOCH + datetime.timedelta(microseconds=changed[1]), changed[2])
        session = PostgresSession(self, sid, bytes(dialect).decode())
        session._prefetched = (ask, [r for r in found if r[0] < 4])
        return session, head

    # -- import and export --------------------------------------------------------------

    def import_jsonl(self, sid: str, path: str | os.PathLike, *, dialect: str = "auto",
                     progress: Callable[[int, int], object] | None = None,
                     replace: bool = False) -> ImportReport:
        """Store the JSONL file at ``path`` as session ``sid``, every byte of it, in one
        transaction: the session is there whole or not at all. ``progress(done, total)``
        is called with the bytes stored so far. ``replace``: a session ``sid`` there
        already is removed in the same transaction, so it is the old session or the whole
        new one, never neither, and the new one's version is not the old one's.

        Raises
        ------
        FileExistsError
            When ``sid`` exists (and ``replace`` is false).
        ValueError
            When the file's entries fork (a rewind: read along its active branch, it is
            not the list of its lines), or a line is over 1 GB.
        """
        path = os.fspath(path)
        dialect_kinds(dialect)  # an unknown dialect is refused before any I/O
        fd = open_transcript_fd(path)
        try:
            size = os.fstat(fd).st_size
            # One read of the file: the scan frames the lines and reads each one's links,
            # and the tree says whether it reads as the list of its lines (no sidecar is
            # written beside a file that is only being imported).
            res = filescan.scan_fd(fd, native_table(dialect), end=size, link_keys=link_keys(dialect))
            kinds = settle_undecided(fd, res, dialect)
            if not build_tree(fd, res.starts, res.indexed_end, kinds, dialect, links=res.links).reads_as_list:
                raise ValueError(f"{path!r} forks (its entries name parents that make a tree, and the "
                                 "active branch is not every message in order): the PostgreSQL store keeps "
                                 "sessions as lists, so it is kept as a file")
            found = _Lines.of(res, kinds)
            if found.lines and int((found.ends - found.starts).max()) > LINE_MAX:
                raise ValueError(f"{path!r} has a line over {LINE_MAX:,} bytes, more than a database row holds")
            tail = os.pread(fd, res.scanned_end - res.indexed_end, res.indexed_end)
            with self.connection() as conn, conn.transaction():
                if replace:
                    conn.execute("DELETE FROM boundctx_sessions WHERE id = %s", (sid,))
                    conn.execute("DELETE FROM boundctx_torn WHERE session = %s", (sid,))  # the old one's
                cur = conn.execute(
                    "INSERT INTO boundctx_sessions (id, dialect, generation, lines, messages, compactions, bytes, "
                    f"tail) VALUES (%s, %s, {_NEXT_GENERATION}, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                    (sid, dialect, found.lines, found.messages, found.compactions, int(res.indexed_end), tail))
                if cur.rowcount == 0:
                    raise FileExistsError(f"session {sid!r} exists")
                _copy_lines(conn, sid, found, _batches(fd, found.starts, found.ends),
                            progress=None if progress is None else lambda done: progress(done, size))
        finally:
            os.close(fd)
        return ImportReport(sid, found.lines, found.messages, found.compactions, int(res.indexed_end), len(tail))

    def export_jsonl(self, sid: str, path: str | os.PathLike, *,
                     progress: Callable[[int, int], object] | None = None) -> int:
        """Write session ``sid`` to ``path`` as the JSONL file it was imported from (or
        would be, line for line): written beside it and renamed into place, so ``path``
        is the old file or the whole new one, never part of one. Returns the bytes written."""
        path = os.fspath(path)
        folder = os.path.dirname(os.path.abspath(path))
        with self.connection() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            row = conn.execute("SELECT bytes, tail FROM boundctx_sessions WHERE id = %s", (sid,)).fetchone()
            if row is None:
                raise TranscriptNotFound(f"no session {sid!r}")
            total = row[0] + len(row[1])
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=os.path.basename(path) + ".", suffix=".export")
            try:
                written = 0
                with os.fdopen(fd, "wb") as out:
                    with conn.cursor(name="boundctx_export") as cur:
                        cur.itersize = 2048
                        cur.execute("SELECT data FROM boundctx_lines WHERE session = %s ORDER BY line", (sid,))
                        for (data,) in cur:
                            out.write(data)
                            written += len(data)
                            if progress is not None and written % BATCH_BYTES < len(data):
                                progress(written, total)
                    out.write(row[1])
                    written += len(row[1])
                    out.flush()
                    os.fsync(out.fileno())
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
                raise
        if progress is not None:
            progress(written, total)
        return written


class _Lines(NamedTuple):
    """The lines a scan found: each one's start and end offset and kind, which of them are
    in the message sequence, and the counts a session's row keeps."""

    starts: np.ndarray
    ends: np.ndarray
    kinds: np.ndarray
    in_sequence: np.ndarray
    messages: int
    compactions: int

    @property
    def lines(self) -> int:
        return len(self.starts)

    @classmethod
    def of(cls, scan, kinds: bytes) -> _Lines:
        """From a native scan and its kinds, settled (``settle_undecided``)."""
        starts = np.frombuffer(scan.starts, dtype=np.int64)
        kind = np.frombuffer(kinds, dtype=np.uint8)
        seq = np.isin(kind, _IN_SEQUENCE)
        return cls(starts, np.append(starts[1:], scan.indexed_end), kind, seq, int(seq.sum()),
                   int(np.count_nonzero(kind == LineKind.COMPACTION)))


def _copy_lines(conn, sid: str, found: _Lines, batches, *, progress: Callable[[int], object] | None = None) -> None:
    """Store the lines of session ``sid`` (``batches`` yields ``(lo, hi, bytes of lines
    lo..hi - 1)``), numbering the message sequence. ``progress(bytes stored)`` after each
    batch.

    In COPY's binary format, written here a batch at a time: a line's bytes go as they
    are (the text format would send a ``bytea`` as hex, twice its size, for the server to
    parse back), and a row's fixed fields are one ``struct`` pack, not a per-field
    conversion."""
    index = (np.cumsum(found.in_sequence) - 1).tolist()
    seq = found.in_sequence.tolist()
    starts, ends, kinds = found.starts.tolist(), found.ends.tolist(), found.kinds.tolist()
    name = sid.encode()
    # Each row: 7 fields; the session's id; then line, offset, length, kind, message (or
    # NULL: length -1) and the data's length, each field's length before it.
    session = _FIELDS.pack(7) + _INT4.pack(len(name)) + name
    with conn.cursor().copy('COPY boundctx_lines (session, line, "offset", length, kind, message, data) '
                            "FROM STDIN (FORMAT BINARY)") as copy:
        copy.write(_COPY_SIGNATURE)
        for lo, hi, buf in batches:
            base = starts[lo]
            view = memoryview(buf)
            parts: list[Any] = []
            for k in range(lo, hi):
                a, b = starts[k], ends[k]
                size = b - a
                if seq[k]:
                    fixed = _ROW_MESSAGE.pack(8, k, 8, a, 4, size, 2, kinds[k], 8, index[k], size)
                else:
                    fixed = _ROW_OTHER.pack(8, k, 8, a, 4, size, 2, kinds[k], -1, size)
                parts += (session, fixed, view[a - base : b - base])
            copy.write(b"".join(parts))
            if progress is not None:
                progress(ends[hi - 1])
        copy.write(_FIELDS.pack(-1))  # the trailer


#: The binary COPY header: its signature, no flags, no header extension.
_COPY_SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
_FIELDS = struct.Struct(">h")
_INT4 = struct.Struct(">i")
_ROW_MESSAGE = struct.Struct(">iqiqiiihiqi")
_ROW_OTHER = struct.Struct(">iqiqiiihii")


_USERINFO = re.compile(r"""([^\s:/@'"]+:)[^\s/@'"]+@""")
_PASSWORD = re.compile(r"""(?i)\b(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&'"]+)""")


def redacted(text: str) -> str:
    """``text`` (a URL, a connection string, or a message quoting one) with every
    password in it shown as ``***``: the driver quotes a URL it cannot read whole."""
    return _PASSWORD.sub(r"\1***", _USERINFO.sub(r"\1***@", text))


def _ns(moment) -> int:
    """A timestamp as nanoseconds since the epoch, as a file's ``st_mtime_ns``."""
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000


def _configure(conn) -> None:
    """A new pooled connection keeps one plan per prepared statement (psycopg prepares a
    statement on its fifth use). PostgreSQL would plan a window's statement again on every
    run, as the values of its bounds change the estimates, and planning it costs more than
    running it; its statements are written so the one plan is the indexed one whatever the
    values (:func:`_window_statement`)."""
    conn.execute("SET plan_cache_mode = force_generic_plan")


def _check_idle(conn) -> None:
    """The pool's check of a connection it hands out. An idle connection the server has
    let go (a restart, a terminated backend) has something to read — the server's last
    word, or the end of the stream — so only then is it asked for a round trip (which
    fails, and the pool replaces it); a quiet one is handed out as it is. Checking every
    connection with a round trip would cost one per call, a window's slowest part."""
    import psycopg_pool

    readable, _, _ = select.select([conn.fileno()], [], [], 0)
    if readable:
        psycopg_pool.ConnectionPool.check_connection(conn)


def _connection_lost(exc: Exception) -> bool:
    """Whether a psycopg OperationalError is the connection's (the server gone, shutting
    down or not yet accepting) rather than the statement's (a lock timeout)."""
    state = getattr(exc, "sqlstate", None)
    return state is None or state.startswith("08") or state in ("57P01", "57P02", "57P03")


def _batches(fd: int, starts: np.ndarray, ends: np.ndarray) -> Iterator[tuple[int, int, bytes]]:
    """Lines ``lo..hi - 1`` and their bytes, read in runs of about :data:`BATCH_BYTES`."""
    n = len(starts)
    lo = 0
    while lo < n:
        hi = max(int(np.searchsorted(ends, int(starts[lo]) + BATCH_BYTES, side="right")), lo + 1)
        hi = min(hi, n)
        a, b = int(starts[lo]), int(ends[hi - 1])
        buf = os.pread(fd, b - a, a)
        if len(buf) != b - a:
            raise OSError(f"the file ended at byte {a + len(buf)} while it was imported; import it again")
        yield lo, hi, buf
        lo = hi


class SessionStat(NamedTuple):
    """A session's size and last change, named as ``os.stat_result`` names a file's."""

    st_size: int
    st_mtime_ns: int


class _Head(NamedTuple):
    lines: int
    messages: int
    compactions: int
    bytes: int
    generation: int
    modified: Any  # a datetime
    torn_bytes: int


class _Row(NamedTuple):
    line: int
    message: int | None
    offset: int
    length: int
    kind: int
    data: bytes


def _line_of(row: _Row, content_limit: int | None) -> _Line:
    """Where a row's line lies, and whether a window shows it projected."""
    return _Line(row.line, row.message, row.offset, row.offset + row.length, row.kind,
                 content_limit is not None and row.length - 1 > content_limit)


class PostgresSession:
    """One session of a :class:`PostgresStore`, read and written by the contract
    :class:`~boundctx.transcript.Transcript` keeps for a file."""

    def __init__(self, store: PostgresStore, sid: str, dialect: str) -> None:
        self.store = store
        self.id = sid
        self.dialect = dialect
        # Inside PostgresStore.reading: its connection, and the head its reads are bounded by.
        self._pinned: Any = None
        self._pinned_head: _Head | None = None
        # Inside PostgresStore.reading(window=...): the window asked for ahead, and its rows.
        self._prefetched: tuple[tuple[int | None, int | None, int | None], list] | None = None

    def close(self) -> None:
        """Nothing is held between calls: each runs on a pooled connection."""

    def __enter__(self) -> PostgresSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _read(self, work: Callable[[Any, _Head], T]) -> T:
        """``work(conn, head)``: in the held burst, on its connection and head; else on a
        pooled connection with the head read now, and again (three times at most) when a
        rewrite lands between the head and a statement after it."""
        if self._pinned is not None:
            assert self._pinned_head is not None
            return work(self._pinned, self._pinned_head)
        for attempt in range(3):
            with self.store.connection() as conn:
                row = conn.execute(f"SELECT {_HEAD_COLUMNS} FROM boundctx_sessions WHERE id = %s",
                                   (self.id,)).fetchone()
                if row is None:
                    raise TranscriptNotFound(f"no session {self.id!r}")
                try:
                    return work(conn, _Head(*row))
                except TranscriptChanged:
                    if attempt == 2:
                        raise
        raise AssertionError("unreachable")

    def _check(self, head: _Head, generation: int | None) -> None:
        """A statement saw ``generation``: it read the head's state, or a rewrite (or a
        removal) came between them."""
        if generation != head.generation:
            raise TranscriptChanged(f"session {self.id!r} was rewritten or removed during the read; read it again")

    def head(self) -> _Head:
        """The session's counts, size, generation and last change, as one state of it."""
        return self._read(lambda conn, head: head)

    @property
    def message_count(self) -> int:
        return self.head().messages

    @property
    def compaction_count(self) -> int:
        return self.head().compactions

    @property
    def line_count(self) -> int:
        return self.head().lines

    @property
    def in_file_order(self) -> bool:
        return True  # a session is kept as a list (the module docstring)

    def stat(self) -> SessionStat:
        """The size and last change of the session's JSONL form, as ``os.stat`` says them
        of a file."""
        head = self.head()
        return SessionStat(head.bytes + head.torn_bytes, _ns(head.modified))

    def branches(self) -> list[Branch]:
        """A list's one branch (as :meth:`Transcript.branches` lists a file without forks)."""
        def read(conn, head: _Head) -> list[Branch]:
            generation, leaf = conn.execute(f"SELECT {_GENERATION}, {_LEAF}", self._values(head)).fetchone()
            self._check(head, generation)
            if leaf is None:
                return []
            entry = self._entry(self._rows(conn, head, "line = %(line)s", {"line": leaf}, None, expect=1)[0], None)
            leaf_id = entry_id(entry.record, self.dialect) if entry.record is not None else None
            return [Branch(leaf=leaf, leaf_id=leaf_id, message_count=head.messages, shared=head.messages,
                           active=True)]

        return self._read(read)

    def identity(self) -> str:
        """What a cursor is taken against: the session and its generation, which only a
        rewrite changes (a file's identity changes only when a rewrite replaces it)."""
        return _identity(self.id, self.head().generation)

    def version(self) -> str:
        """The layout version: a digest of :meth:`identity`."""
        return hashlib.blake2b(self.identity().encode(), digest_size=8).hexdigest()

    def message_bytes(self, message_start: int, message_stop: int) -> list[int]:
        """The size in bytes of each of messages ``message_start:message_stop`` as its
        line holds it (``\\n`` included), from the lengths alone: nothing else is read."""
        _check_limit("message_start", message_start, 0)
        _check_limit("message_stop", message_stop, 0)

        def read(conn, head: _Head) -> list[int]:
            stop = min(message_stop, head.messages)
            if stop <= message_start:
                return []
            sizes = [r[0] for r in conn.execute(
                f"SELECT length FROM {_AT_HEAD} AND message >= %(start)s AND message < %(stop)s ORDER BY message",
                {**self._values(head), "start": message_start, "stop": stop})]
            if len(sizes) != stop - message_start:
                self._check(head, None)
            return sizes

        return self._read(read)

    def _values(self, head: _Head) -> dict[str, Any]:
        """The values every read's statement may name (:data:`_AT_HEAD`)."""
        return {"sid": self.id, "lines": head.lines, "generation": head.generation}

    # -- windows --------------------------------------------------------------------------

    def window(self, *, message_before: int | None = None,
               message_limit: int | None | msgspec.UnsetType = UNSET,
               content_limit: int | None | msgspec.UnsetType = UNSET,
               preset: Literal["renderer"] | None = None,
               settings: Mapping[str, Any] | None = None,
               leaf: int | str | None = None,
               page_bytes: int | None | msgspec.UnsetType = UNSET) -> Window:
        """:meth:`Transcript.window <boundctx.transcript.Transcript.window>` of this session:
        the same arguments, limits and answer. A session is one branch, so ``leaf`` can
        only name none."""
        limit, content, page = window_limits(message_before, message_limit, content_limit, preset, settings,
                                             page_bytes)
        if leaf is not None:
            raise ValueError(f"leaf={leaf!r}: this session is kept as a list, one branch read from its newest "
                             "message; leave leaf out")
        return self._read(lambda conn, head: self._window(conn, head, message_before, limit, content, page))

    def _window(self, conn, head: _Head, before, limit, content_limit, page_bytes) -> Window:
        line_count, total = head.lines, head.messages
        ask = (before, limit, content_limit)
        before, start = _span(before, limit, total, "the transcript")
        # One statement: the lines with their sizes and the bytes of each short one (a
        # longer one the page keeps is a second), and what the compactions and the leaf
        # need for a page that keeps every line it sized (the usual page). The burst's
        # first read may have fetched them with the head already.
        values = self._values(head)
        prefetched, self._prefetched = self._prefetched, None
        if prefetched is not None and prefetched[0] == ask:
            found = prefetched[1]
        else:
            found = conn.execute(_window_statement(content_limit), {
                **values, "start": start, "stop": before, **_window_params(content_limit, limit)},
                binary=True).fetchall()
        parts: list[list[Any]] = [[], [], [], []]
        for r in sorted(found, key=lambda r: (r[0], r[1])):
            parts[r[0]].append(r[1:])
        generation, in_force, inside, leaf_line = parts[1][0][:4]
        self._check(head, generation)
        meta = [_Row(*r) for r in parts[0]]
        lines = np.array([m.line for m in meta], dtype=np.int64)
        lengths = np.array([m.length for m in meta], dtype=np.int64)
        by_line = {m.line: m for m in meta}

        def entries(some: np.ndarray, first: int) -> list[Entry]:
            rows = [by_line[int(line)] for line in some]
            missing = [r.line for r in rows if r.data is None]
            if missing:
                fetched = {r.line: r for r in self._rows(conn, head, "line = ANY(%(some)s)", {"some": missing},
                                                         content_limit, expect=len(missing))}
                rows = [fetched[r.line] if r.data is None else r for r in rows]
            return self._entries(rows, content_limit)

        sized = (int(lines[0]), int(lines[-1])) if len(lines) else None
        messages, start, lines = fit_page(lines, lengths, start, content_limit, page_bytes, entries)
        if sized is not None and len(lines) and sized == (int(lines[0]), int(lines[-1])):
            comp = [_Row(*r) for r in parts[2] + parts[3]]  # answered with the lines
            keep = len(parts[3])
        else:  # the page kept fewer lines than it sized, or none: one more round trip, or two
            if len(lines):
                lo, hi = int(lines[0]), int(lines[-1])
            elif before < total:
                row = conn.execute(f"SELECT line FROM {_AT_HEAD} AND message = %(m)s",
                                   {**values, "m": before}).fetchone()
                if row is None:
                    self._check(head, None)
                lo = hi = row[0]
            else:
                lo = hi = line_count
            generation, in_force, inside, leaf_line = conn.execute(
                f"SELECT {_around('%(lo)s', '%(hi)s')}", {**values, "lo": lo, "hi": hi}).fetchone()
            self._check(head, generation)
            keep = inside if limit is None else min(inside, limit)
            comp = self._rows(conn, head, f"kind = {_COMPACTION} AND line > %(lo)s AND line <= %(hi)s",
                              {"lo": lo, "hi": hi}, content_limit, expect=keep, newest=keep) if keep else []
            if in_force is not None:
                comp = self._rows(conn, head, "line = %(line)s", {"line": in_force}, content_limit, expect=1) + comp
        compactions = [self._entry(r, content_limit) for r in comp]
        leaf_id = None
        if before == total and leaf_line is not None:
            if messages and messages[-1].line == leaf_line:
                leaf_entry = messages[-1]
            else:
                leaf_entry = self._entry(self._rows(conn, head, "line = %(line)s", {"line": leaf_line}, None,
                                                    expect=1)[0], None)
            leaf_id = entry_id(leaf_entry.record, self.dialect) if leaf_entry.record is not None else None
        return Window(messages=messages, message_start=start, message_count=total, has_more_before=start > 0,
                      compactions=compactions, compactions_omitted=inside - keep, content_limit=content_limit,
                      leaf=leaf_line, page_bytes=page_bytes, leaf_id=leaf_id)

    def _rows(self, conn, head: _Head, where: str, values: dict[str, Any], content_limit: int | None, *,
              expect: int, newest: int | None = None) -> list[_Row]:
        """The ``expect`` lines of the head's state matching ``where`` (the newest
        ``newest`` of them), in line order; a line longer than the display budget comes
        as the prefix its projection reads. Fewer than ``expect``: the session was
        rewritten since the head (TranscriptChanged)."""
        order = "ORDER BY line" if newest is None else f"ORDER BY line DESC LIMIT {int(newest)}"
        rows = conn.execute(f'SELECT line, message, "offset", length, kind, {_shown_bytes(content_limit)} '
                            f"FROM {_AT_HEAD} AND {where} {order}",
                            {**self._values(head), **_shown_params(content_limit), **values}, binary=True).fetchall()
        if len(rows) != expect:
            self._check(head, None)
        found = [_Row(*r) for r in rows]
        return found if newest is None else found[::-1]

    def _entries(self, rows: list[_Row], content_limit: int | None) -> list[Entry]:
        """:meth:`_entry` of each row, whole records decoded in one call when every row is
        one (:func:`~boundctx.transcript.reading.records_together`: a window's hundred)."""
        lines = [_line_of(r, content_limit) for r in rows]
        if not any(ln.projected for ln in lines):
            records = records_together(b"".join(r.data for r in rows), 0, lines)
            if records is not None:
                return [Entry(line=ln.line, index=ln.message_index, offset=ln.start, length=ln.end - ln.start,
                              record=rec) for ln, rec in zip(lines, records)]
        return [self._entry(r, content_limit) for r in rows]

    def _entry(self, row: _Row, content_limit: int | None) -> Entry:
        ln = _line_of(row, content_limit)
        if ln.projected:
            assert content_limit is not None
            rec, cut, prefix, body_len = projected_record(ln, row.data, content_limit)
            if rec is not None:
                return Entry(line=ln.line, index=ln.message_index, offset=ln.start, length=row.length, record=rec,
                             cut_bytes=cut)
            return _raw_entry(ln, prefix, NOT_DISPLAYABLE, content_limit, total=body_len)
        return plain_entry(ln, bytes(row.data[:-1]), content_limit)

    # -- writing ---------------------------------------------------------------------------

    def append(self, record: dict[str, Any] | msgspec.Struct, *, sync: bool = True, lock_wait: float = 0.0) -> int:
        """Append one record; returns its line number. Refused as the file store refuses
        (EntryInvalid); TranscriptLocked when another writer holds the session past
        ``lock_wait`` seconds. Committed (durably: ``sync`` is PostgreSQL's) on return."""
        data = encode_record(record)
        with self.store.connection() as conn, conn.transaction():
            self._lock(conn, lock_wait)
            return self._append_line(conn, data)

    def append_records(self, records: Sequence[dict[str, Any]], *, lock_wait: float = 0.0) -> list[int]:
        """Append ``records`` in order, in one transaction: no other writer's line comes
        between them (a question and its answer). Their line numbers."""
        lines = [encode_record(r) for r in records]
        with self.store.connection() as conn, conn.transaction():
            self._lock(conn, lock_wait)
            return [self._append_line(conn, line) for line in lines]

    def _append_line(self, conn, data: bytes) -> int:
        """Store one encoded line at the end, in ``conn``'s transaction (which must hold
        the session row's lock, or have created the row)."""
        if len(data) > LINE_MAX:
            raise ValueError(f"the record is {len(data):,} bytes as a line, more than a database row holds")
        scan = lineindex.scan_bytes(data, native_table(self.dialect))
        kind = settle_undecided(None, scan, self.dialect, data=data)[0]
        lines, messages, _c, size, tail = conn.execute(
            "SELECT lines, messages, compactions, bytes, tail FROM boundctx_sessions WHERE id = %s",
            (self.id,)).fetchone()
        if tail:
            self._move_tail_aside(conn, size, tail)
        in_seq = kind in _IN_SEQUENCE
        conn.execute('INSERT INTO boundctx_lines (session, line, "offset", length, kind, message, data) '
                     "VALUES (%s, %s, %s, %s, %s, %s, %s)",
                     (self.id, lines, size, len(data), kind, messages if in_seq else None, data))
        conn.execute("UPDATE boundctx_sessions SET lines = lines + 1, messages = messages + %s, "
                     "compactions = compactions + %s, bytes = bytes + %s, tail = ''::bytea, modified = now() "
                     "WHERE id = %s",
                     (int(in_seq), int(kind == LineKind.COMPACTION), len(data), self.id))
        return lines

    def edit(self, message: int | Entry, record: dict[str, Any], *, lock_wait: float = 0.0,
             check: Callable[[History], None] | None = None) -> None:
        """Replace a message, as :meth:`Transcript.edit <boundctx.transcript.Transcript.edit>`
        does: from the complete history, in one transaction that changes the version."""
        encode_record(record)  # refused before the lock, as the file store refuses it
        self._rewrite(lambda h, i: h.replace_message(i, record), message, lock_wait, check)

    def delete(self, message: int | Entry, *, lock_wait: float = 0.0,
               check: Callable[[History], None] | None = None) -> None:
        """Delete a message; later messages move up by one."""
        self._rewrite(lambda h, i: h.delete_message(i), message, lock_wait, check)

    def truncate(self, message: int | Entry, *, lock_wait: float = 0.0,
                 check: Callable[[History], None] | None = None) -> None:
        """Delete a message and every line after it."""
        self._rewrite(lambda h, i: h.truncate_messages(i), message, lock_wait, check)

    def _rewrite(self, change: Callable[[History, int], None], message: int | Entry, lock_wait: float,
                 check: Callable[[History], None] | None) -> None:
        with self.store.connection() as conn, conn.transaction():
            self._lock(conn, lock_wait)
            messages, size, tail, generation = conn.execute(
                "SELECT messages, bytes, tail, generation FROM boundctx_sessions WHERE id = %s", (self.id,)).fetchone()
            rows = conn.execute('SELECT data, "offset", message IS NOT NULL FROM boundctx_lines '
                                "WHERE session = %s ORDER BY line", (self.id,)).fetchall()
            history = History([bytes(r[0]) for r in rows], [r[1] for r in rows], [r[2] for r in rows],
                              generation, _Locked(self.id, generation, messages))
            if check is not None:
                check(history)
            change(history, _index_in(history, message, self.id))
            if tail:
                self._move_tail_aside(conn, size, tail)
            data = history.data()
            conn.execute("DELETE FROM boundctx_lines WHERE session = %s", (self.id,))
            scan = lineindex.scan_bytes(data, native_table(self.dialect))
            found = _Lines.of(scan, settle_undecided(None, scan, self.dialect, data=data))
            _copy_lines(conn, self.id, found, [(0, found.lines, data)] if found.lines else [])
            conn.execute("UPDATE boundctx_sessions SET lines = %s, messages = %s, compactions = %s, bytes = %s, "
                         f"tail = ''::bytea, generation = {_NEXT_GENERATION}, modified = now() WHERE id = %s",
                         (found.lines, found.messages, found.compactions, len(data), self.id))

    def _lock(self, conn, lock_wait: float) -> None:
        """Take the session row's lock for this transaction, waiting ``lock_wait`` seconds
        at most (TranscriptLocked after that)."""
        psycopg = self.store._errors
        # lock_timeout takes milliseconds; 0 would mean wait forever, so "no wait" is 1 ms.
        conn.execute(f"SET LOCAL lock_timeout = {max(1, int(lock_wait * 1000))}")
        try:
            row = conn.execute("SELECT 1 FROM boundctx_sessions WHERE id = %s FOR UPDATE", (self.id,)).fetchone()
        except psycopg.errors.LockNotAvailable:
            raise TranscriptLocked(f"session {self.id!r} is being written by another writer; retry shortly") from None
        if row is None:
            raise TranscriptNotFound(f"no session {self.id!r}")

    def _move_tail_aside(self, conn, size: int, tail: bytes) -> None:
        """An unfinished line from the file the session was imported from: kept aside, as
        the file store moves a torn tail into a side file before it writes."""
        conn.execute('INSERT INTO boundctx_torn (session, "offset", data) VALUES (%s, %s, %s)', (self.id, size, tail))


class _Locked(NamedTuple):
    """A rewrite's ``history.source``: the session as its lock found it, for a ``check``
    that compares a cursor (:meth:`identity`, ``message_count``) under the lock."""

    id: str
    generation: int
    message_count: int

    def identity(self) -> str:
        return _identity(self.id, self.generation)


def _identity(sid: str, generation: int) -> str:
    return f"postgresql session {sid} generation {generation}"


def _index_in(history: History, message: int | Entry, sid: str) -> int:
    """Message ``message`` of ``history``: an index, or an Entry a window returned, which
    must still be the line it was read from (the file store's rule)."""
    if not isinstance(message, Entry):
        _check_limit("message index", message, 0)
        return message
    at = message.index
    if (at is None or at >= history.message_count or history.offset_of(at) != message.offset
            or (message.record is not None and not message.cut_bytes and history.message(at) != message.record)):
        raise TranscriptChanged(f"message {message.index} of session {sid!r} is no longer the line it was read "
                                "from; read the window again before editing")
    return at
