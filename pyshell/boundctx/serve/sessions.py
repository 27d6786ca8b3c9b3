"""``boundctx serve``'s sessions API: transcripts under one folder (or in a PostgreSQL
database: :mod:`boundctx.serve.session_stores`), read in bounded windows.

Routes (``shared/research/serving.md`` §3, §8.1)::

    GET    /boundctx/v1/sessions?limit=&after=                  list, newest first
    POST   /boundctx/v1/sessions                                create ({"id"} optional; {"continue_from":
                                                                id}: start with its newest messages)
    GET    /boundctx/v1/sessions/{id}                           metadata (with its title)
    PATCH  /boundctx/v1/sessions/{id}                           {"title": "..."}: set or clear the title
    GET    /boundctx/v1/sessions/{id}/messages?message_before=&message_limit=&content_limit=&page_bytes=
                                                &leaf=&layout_version=
    GET    /boundctx/v1/sessions/{id}/branches?limit=           the branches of a session whose entries
                                                                fork (a rewind), the active one first
    POST   /boundctx/v1/sessions/{id}/messages                  lossless append
    GET    /boundctx/v1/sessions/{id}/messages/{index}?leaf=    one message, uncapped
    GET    /boundctx/v1/sessions/{id}/messages/{index}?text_offset=&text_limit=
                                                                one page of its text
    PATCH  /boundctx/v1/sessions/{id}/messages/{index}          edit (full-history rewrite)
    DELETE /boundctx/v1/sessions/{id}/messages/{index}          delete (full-history rewrite)
    DELETE /boundctx/v1/sessions/{id}/messages/{index}?and_later=true&message_count=N
                                                                delete it and every later message
                                                                (one rewrite: edit an earlier question),
                                                                refused if the session no longer has N

A session whose entries name their parents (Claude Code, pi) is read along its active
branch: the path to its newest message, rewinds' abandoned branches left out. ``leaf``
(a line number or an entry id, from ``/branches`` or a window's ``leaf``) reads another
branch, or stays on one while another grows; indexes count along the branch read.

Every entry a window or the one-message route returns carries ``role`` and ``text``
beside its record: how it reads for a person, by its format's rule
(:func:`boundctx.transcript.dialects.display`), so no client derives them again.

A session id is a name, never a path: ``[A-Za-z0-9_-]{1,128}``, stored as
``<sessions_dir>/<id>.jsonl``, and refused unless that resolves (symlinks followed) to a
regular file directly inside the real sessions folder. The check is made on what was
opened, not on the name before the open, and every later write of the request (the
lock, the sidecar, an append, a rewrite) goes beside that file without following the
name again (``Transcript.open(..., within=...)``): a symlink swapped in meanwhile
cannot send a write outside the folder.

In a database (decision 0048) a session is a row and its lines, an id is a key, and a
layout version is a digest of the session's generation, which only a rewrite changes: the
same cursors, the same refusals.

Layout versions
---------------
A message index is a cursor only while the messages before it stay where they are. An
append keeps them there; a rewrite (edit, delete) moves them, and the store always
rewrites by writing a new file and renaming it over the old one. ``layout_version`` is a
hash of that file's identity (``Transcript.identity``: device, inode, the inode's
generation, and a token each rewrite gives its new file): it changes on every rewrite,
never on an append, and every server process sharing the folder computes the same one
(several ``boundctx serve`` behind one balancer). The inode number alone would not do:
ext4 hands a rewrite's new file the number the previous rewrite freed, so after two
rewrites a session would be back at its old version.

An edit or delete compares the version it was given with the file under the write
lock, the very file its history is read from and rewritten (``Transcript.edit(...,
check=...)``): a rewrite by another client or process just before cannot make it land
on a different message.

What it cannot see: a change that keeps the inode (another program truncating or
editing the file in place; a window past the end is still refused with 400), and, on a
file system with neither inode generations nor user extended attributes, rewrites by
several writers that land on a freed inode number reused.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import msgspec

from boundctx import config
from boundctx.analysis.originals import Earlier
from boundctx.errors import (
    EntryInvalid,
    StoreUnavailable,
    TranscriptChanged,
    TranscriptLocked,
    TranscriptNotAFile,
    TranscriptNotFound,
    TranscriptPermission,
)
from boundctx.serve.http import ApiError, encode_json, encoded_response, read_body, read_json, store_unavailable
from boundctx.serve.requests import HISTORY_MAX, BadRequest, SessionCreateRequest, SessionPatchRequest, decode
from boundctx.serve.session_stores import RETRY_AFTER, DatabaseSessions, FolderSessions
from boundctx.serve.settings import LiveSettings
from boundctx.stores import SESSION_ID, is_database_url
from boundctx.transcript.chat import (
    Conversation,
    append_exchange,
    chat_messages,
    earlier_text,
    history_start,
    writable_style,
)
from boundctx.transcript.dialects import dialect_of, display, shown
from boundctx.transcript.entries import Entry, Window
from boundctx.transcript.lineformat import LineUnreadable, decode_record, encode_record
from boundctx.transcript.store import Transcript

__all__ = ["SESSION_ID", "Sessions", "layout_version", "session_routes"]

T = TypeVar("T")
#: The longest title a person may set, and the most of a first question shown as one.
TITLE_MAX, TITLE_SHOWN = 200, 80
LIST_DEFAULT, LIST_MAX = 50, 1000
BRANCHES_DEFAULT, BRANCHES_MAX = 100, 1000
#: The longest entry id ``leaf`` may name (Claude Code's and pi's are 36 and 8 characters).
LEAF_MAX = 256
MESSAGE_LIMIT_MAX = 1000
#: The largest per-message display budget a window may ask for: 1,000 messages of this
#: much stay a bounded reply; the whole of one message is the single-message route's job.
CONTENT_LIMIT_MAX = 1 << 20
#: The most shown bytes one window may ask for in all (``page_bytes``).
PAGE_BYTES_MAX = config.WINDOW_PAGE_BYTES_MAX
#: Writes wait this long for another writer (another server process, an agent appending)
#: before answering 409 with Retry-After; short, as a request thread waits with it.
LOCK_WAIT_S = 1.0
#: How many sessions' verdicts ``Sessions._writable`` keeps (then it starts over).
NEWEST_KEPT = 4096


def _stale(param: str = "layout_version") -> ApiError:
    return ApiError(409, "the session was rewritten (a message edited or deleted) since this cursor was "
                         "issued, so message indexes have moved; read the window again from the end",
                    "stale_cursor", param)


def layout_version(t: Transcript) -> str:
    """The layout version of a session file (see the module docstring): the same in every
    server process, so a client paging through several behind a balancer is not refused
    for switching between them."""
    return hashlib.blake2b(t.identity().encode(), digest_size=8).hexdigest()


class Sessions:
    """The sessions of one store, and the blocking work of each route (run in a thread).

    Parameters
    ----------
    target : path or str
        The sessions folder, or a ``postgresql://`` URL of the database that keeps them
        (:mod:`boundctx.serve.session_stores`).
    settings : LiveSettings
        Where the window defaults (``transcript.window_*``) are read at each request,
        so a settings change applies to the next window.
    """

    def __init__(self, target: str | os.PathLike, settings: LiveSettings) -> None:
        where = os.fspath(target)
        self.store: FolderSessions | DatabaseSessions = (DatabaseSessions(where) if is_database_url(where)
                                                         else FolderSessions(where))
        self._live = settings
        #: ``serve.max_body_bytes``: fixed while serving, so read once.
        self.max_body = settings.started.serve.max_body_bytes
        #: Each session's verdict of :meth:`_writable` by its version, size and count.
        #: Read and written by the handler threads (a dict's get and set are atomic);
        #: emptied, not evicted, when full.
        self._newest: dict[tuple[str, str, int, int], dict[str, Any]] = {}

    @property
    def settings(self) -> config.Settings:
        return self._live.current

    # -- names --------------------------------------------------------------------

    def _id(self, value: Any) -> str:
        if not isinstance(value, str) or not SESSION_ID.fullmatch(value):
            raise ApiError(400, f"{value!r} is not a session id: ids are 1 to 128 letters, digits, '_' or '-' "
                                "(never a path)", "invalid_session_id", "id")
        return value

    def public(self, message: str) -> str:
        """``message`` without the server's own paths (the sessions folder): a client
        knows a session by its id."""
        return self.store.public(message)

    async def run(self, work: Callable[[], T]) -> T:
        """``work()`` (blocking) in the thread pool; an error it raises is said without
        the server's own paths, and a lost database as 503."""
        from starlette.concurrency import run_in_threadpool

        try:
            return await run_in_threadpool(work)
        except ApiError as exc:
            raise exc.with_message(self.public(exc.message)) from None
        except StoreUnavailable as exc:
            raise store_unavailable(str(exc)) from None

    # -- the parts of a reply --------------------------------------------------------

    def _read(self, sid: str, read: Callable[[Transcript, str], Any], *,
              window: dict[str, Any] | None = None) -> tuple[Any, str, Any]:
        """``read(session, version)`` on one session that stayed the same throughout (a
        rewrite under the read is retried, then refused as 409). Also the stat of what
        was read (``st_size``, ``st_mtime_ns``). ``window``: the arguments of the window
        ``read`` reads first, which a database fetches with the session's head."""
        for _ in range(3):
            try:
                with self.store.reading(sid, window=window) as t:
                    version = layout_version(t)
                    out = read(t, version)
                    # a read that followed the path to a rewrite's new file shows here
                    after, version_after = t.stat(), layout_version(t)
            except TranscriptChanged:
                continue
            except (TranscriptNotFound, TranscriptNotAFile):  # the name now leads out of the folder
                raise ApiError(404, "the session is gone", "session_not_found", "id") from None
            if version_after == version:
                return out, version, after
        raise ApiError(409, "the session keeps being rewritten under the read; try again", "session_changed",
                       headers={"Retry-After": RETRY_AFTER})

    # -- handlers (blocking: run in the thread pool) ----------------------------------

    def list(self, limit: int, after: str | None) -> dict[str, Any]:
        # Newest first; the id breaks ties so the order (and `after`) is stable.
        found = self.store.listing(lambda sid: bool(SESSION_ID.fullmatch(sid)))
        start = 0
        if after is not None:
            ids = [f[0] for f in found]
            if after not in ids:
                raise ApiError(400, f"after={after!r} is not a listed session; page from the start again",
                               "invalid_cursor", "after")
            start = ids.index(after) + 1
        page = found[start : start + limit]
        data = [self._summary(sid, size, modified) for sid, size, modified in page]
        return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None, "has_more": start + limit < len(found)}

    def _summary(self, sid: str, size: int, modified_ns: int) -> dict[str, Any]:
        item: dict[str, Any] = {"id": sid, "object": "boundctx.session", "bytes": size,
                                "modified": modified_ns // 1_000_000_000}
        try:
            # Read as a window is: a rewrite under the read is read again, not said as an error.
            (counts, title), _, _ = self._read(sid, lambda t, v: ((t.message_count, t.compaction_count),
                                                                   self._title(sid, t)))
            item["message_count"], item["compaction_count"] = counts
            item.update(title)
        except StoreUnavailable:
            raise  # the database, not this session: the whole list fails with 503
        except ApiError as exc:  # gone since it was listed
            item["message_count"] = item["compaction_count"] = None
            item["error"] = self.public(exc.message)
        except Exception as exc:  # one unreadable file must not hide the others
            item["message_count"] = item["compaction_count"] = None
            item["error"] = self.public(f"{type(exc).__name__}: {exc}")
        return item

    def create(self, sid: str, continue_from: str | None = None, history: int = 50) -> dict[str, Any]:
        """A new session ``sid``: empty, or, with ``continue_from``, starting with that
        session's newest ``history`` messages as chat messages in boundctx's own lines
        (read as a reply on it reads them: the same byte bound, what it leaves out said),
        so another agent's session, which boundctx does not write into, can go on here."""
        records: list[dict[str, Any]] = []
        carried, source = None, None
        if continue_from is not None:
            source = self._id(continue_from)
            conversation, _ = self.conversation(source, history, save=False)
            records = [{"type": "message", "message": m} for m in conversation.messages]
            carried = {"from": source, "messages": len(conversation.messages), "notices": conversation.notices}
        _writing(lambda: self.store.create(sid, records))
        if source is not None:
            title = self.get(source).get("title") or source
            return {**self.set_title(sid, f"{title} (continued)"[:TITLE_MAX]), "continued": carried}
        return self.get(sid)

    def get(self, sid: str) -> dict[str, Any]:
        sid = self._id(sid)
        (counts, title, in_order), version, st = self._read(
            sid, lambda t, v: ((t.message_count, t.compaction_count), self._title(sid, t), t.in_file_order))
        return {**_metadata(sid, counts, version, st, in_order), **title}

    # -- titles ------------------------------------------------------------------------

    def _title(self, sid: str, t: Transcript) -> dict[str, Any]:
        """``title`` and where it comes from: the one a person set (``"set"``), else the
        first line of the session's first question (``"first_question"``), else none."""
        title = self.store.title(sid)
        if title:
            return {"title": title, "title_source": "set"}
        first = _first_question(t)
        return {"title": first, "title_source": "first_question" if first else None}

    def set_title(self, sid: str, title: str) -> dict[str, Any]:
        """Set (or, with ``""``, clear) the title of session ``sid``: kept beside it (a
        file's in ``<id>.title``), never in the transcript, so another agent's file stays
        as it was."""
        sid = self._id(sid)
        self._read(sid, lambda t, v: None)  # the session is there (404 otherwise)
        self.store.set_title(sid, title)
        return self.get(sid)

    def window(self, sid: str, query: Mapping[str, str]) -> dict[str, Any]:
        sid = self._id(sid)
        before = _int_param(query, "message_before", None, 0)
        window = self.settings.transcript
        # The defaults come from settings a PATCH can change: they are held to the same
        # caps as the query, so a plain window is as bounded as any asked for.
        limit = _int_param(query, "message_limit", min(window.window_messages, MESSAGE_LIMIT_MAX), 0,
                           MESSAGE_LIMIT_MAX)
        content = _int_param(query, "content_limit", min(window.window_content_bytes, CONTENT_LIMIT_MAX), 0,
                             CONTENT_LIMIT_MAX)
        # A page's bytes in all: the newest messages that fit, so 100 long ones are not
        # 100 times the per-message budget in one answer.
        page = _int_param(query, "page_bytes", min(window.window_page_bytes, PAGE_BYTES_MAX), 1, PAGE_BYTES_MAX)
        wanted = query.get("layout_version")
        leaf = _leaf_param(query)

        def read(t: Transcript, version: str):
            if wanted is not None and wanted != version:
                raise _stale()
            w = _on_leaf(lambda: t.window(message_before=before, message_limit=limit, content_limit=content,
                                          leaf=leaf, page_bytes=page))
            if leaf is not None:  # another branch: judged by it, as it is, never kept
                return w, _writable(t, w, self.store.writes_into(t))
            return w, self._writable(sid, version, t, w)

        ahead = {"message_before": before, "message_limit": limit, "content_limit": content}
        (w, writable), version, _ = self._read(sid, read, window=ahead if leaf is None else None)
        out = msgspec.structs.asdict(w)
        for key in ("messages", "compactions"):
            out[key] = [_entry_out(entry) for entry in out[key]]
        return {**out, "layout_version": version, **writable}

    def _writable(self, sid: str, version: str, t: Transcript, w: Window) -> dict[str, Any]:
        """:func:`_writable` of window ``w``, remembered for the session as it is now (its
        version, size and count: an append or a rewrite changes one of them), so the pages
        a client reads back from the newest are judged without the newest message read
        again each time."""
        key = (sid, version, t.stat().st_size, t.message_count)
        holds_newest = bool(w.messages) and w.messages[-1].index == key[3] - 1
        known = None if holds_newest else self._newest.get(key)
        if known is None:
            known = _writable(t, w, self.store.writes_into(t))
            if len(self._newest) >= NEWEST_KEPT:
                self._newest.clear()
            self._newest[key] = known
        return dict(known)

    def message(self, sid: str, index_text: str, query: Mapping[str, str]) -> dict[str, Any]:
        """One message whole, or, with ``text_limit``, one page of how it reads for a
        person: characters ``text_offset`` to ``text_offset + text_limit`` of its text,
        with the text's whole length, and without the record (which is the whole of it).
        A front end opens a long message page by page, its payload bounded."""
        sid = self._id(sid)
        index = _index(index_text)
        wanted = query.get("layout_version")
        text_limit = _int_param(query, "text_limit", None, 1, CONTENT_LIMIT_MAX)
        text_offset = _int_param(query, "text_offset", 0, 0)
        if text_limit is None and "text_offset" in query:
            raise ApiError(400, "text_offset pages a message's text: send text_limit with it", "invalid_value",
                           "text_offset")

        leaf = _leaf_param(query)

        def read(t: Transcript, version: str):
            if wanted is not None and wanted != version:
                raise _stale()
            # The default branch's size is the transcript's; another's is a (bounded) read.
            count = t.message_count if leaf is None else _on_leaf(
                lambda: t.window(message_limit=0, content_limit=0, leaf=leaf)).message_count
            _check_index(index, count)
            return t.window(message_before=index + 1, message_limit=1, content_limit=None, leaf=leaf).messages[0]

        entry, version, _ = self._read(sid, read)
        if text_limit is None:
            return {**_entry_out(entry), "layout_version": version}
        page = _shown(entry, {"index": entry.index, "line": entry.line})
        text = page["text"]
        assert text_offset is not None
        if text_offset > len(text):
            raise ApiError(400, f"text_offset={text_offset} is past the end of the message's text "
                                f"({len(text):,} characters)", "invalid_value", "text_offset")
        return {**page, "text_length": len(text), "text_offset": text_offset,
                "text": text[text_offset : text_offset + text_limit], "layout_version": version}

    def branches(self, sid: str, query: Mapping[str, str]) -> dict[str, Any]:
        """The branches of session ``sid``'s tree, the active one first, then the others
        newest first (at most ``limit``; one for a session that never forked)."""
        sid = self._id(sid)
        limit = _int_param(query, "limit", BRANCHES_DEFAULT, 1, BRANCHES_MAX)
        assert limit is not None
        (listed, in_order), version, _ = self._read(sid, lambda t, v: (t.branches(), t.in_file_order))
        return {"object": "list", "data": [msgspec.to_builtins(b) for b in listed[:limit]],
                "branch_count": len(listed), "has_more": len(listed) > limit, "in_file_order": in_order,
                "layout_version": version}

    def append(self, sid: str, body: bytes) -> dict[str, Any]:
        sid = self._id(sid)
        record = _record(body)
        with self.store.open(sid) as t:
            line = _writing(lambda: t.append(record, lock_wait=LOCK_WAIT_S))
            count = t.message_count
        return {"line": line, "message_count": count}

    def rewrite(self, sid: str, index_text: str, query: Mapping[str, str], body: bytes | None) -> dict[str, Any]:
        """Edit (``body``: the replacement record) or delete (``body`` None) one message;
        with ``and_later=true``, delete it and every message after it, in one rewrite."""
        later = _bool_param(query, "and_later")
        if later and body is not None:
            raise ApiError(400, "and_later is for DELETE only: an edit replaces one message", "invalid_value",
                           "and_later")
        # An append keeps the layout version (cursors stay good), so what "every later
        # message" covers is held to the count the client saw: one appended since is not
        # deleted unseen.
        seen = _int_param(query, "message_count", None, 0)
        if seen is not None and not later:
            raise ApiError(400, "message_count goes with and_later=true (the messages it deletes)", "invalid_value",
                           "message_count")
        sid = self._id(sid)
        index = _index(index_text)
        record = _record(body) if body is not None else None
        if record is not None:
            _writing(lambda: encode_record(record))  # refused before the lock and the history read
        wanted = query.get("layout_version")

        def check(history) -> None:
            # Under the write lock, against the file the history was read from and is
            # rewritten: nothing can move the messages between this and the rename.
            if wanted is not None and wanted != layout_version(history.source):
                raise _stale()
            # Counted along the branch reads follow (the file's own count when it never forked).
            count = history.source.message_count
            if seen is not None and seen != count:
                raise ApiError(409, f"the session has {count:,} messages, not the {seen:,} this "
                               "delete was asked for (a message was added since): read it again and ask again",
                               "stale_cursor", "message_count")
            _check_index(index, count)

        with self.store.open(sid) as t:
            if record is not None:
                _writing(lambda: t.edit(index, record, lock_wait=LOCK_WAIT_S, check=check))
            elif later:
                _writing(lambda: t.truncate(index, lock_wait=LOCK_WAIT_S, check=check))
            else:
                _writing(lambda: t.delete(index, lock_wait=LOCK_WAIT_S, check=check))
            # The answer is the file this rewrite made, as it is held open: a fresh read
            # could meet another process's rewrite and answer 409 for an edit that happened.
            return _metadata(sid, (t.message_count, t.compaction_count), layout_version(t), t.stat())

    def conversation(self, sid: str, history: int, save: bool) -> tuple[Conversation, str | None]:
        """What a reply on session ``sid`` starts from: the chat messages of its newest
        ``history`` messages, and the style the exchange will be written in (None with
        ``save`` off). A session in a format boundctx does not write is
        refused here, before any model call, unless ``save`` is off."""
        sid = self._id(sid)
        budget = history_bytes(self.settings)

        def read(t: Transcript, version: str):
            window, notices = None, []
            if history:
                total = t.message_count
                # The start moves in steps of half the history, so the turns between keep
                # the prompt's start (and a model's kept state of it).
                sizes = t.message_bytes(history_start(total, history), total)
                keep, used = 0, 0
                for size in reversed(sizes):  # the newest messages that fit the byte bound together
                    if used + size > budget:
                        break
                    used, keep = used + size, keep + 1
                if keep < len(sizes):
                    notices.append(f"{len(sizes) - keep} of the newest {len(sizes)} messages were not read: "
                                   f"with them the history is over {budget:,} bytes, the most one reply reads "
                                   "(8 bytes for each of analysis.max_source_chars)")
                window = t.window(message_before=total, message_limit=keep, content_limit=None)
            style = None
            if save:
                try:
                    style = (writable_style(window, transcript=self.store.writes_into(t)) if window is not None
                             else "text")
                except ValueError as exc:
                    raise ApiError(400, f"{exc} (send \"save\": false to reply without writing)",
                                   "session_read_only", "save") from None
            conversation = chat_messages(window) if window is not None else Conversation([], [])
            conversation.notices[:0] = notices
            return conversation, style

        (conversation, style), _, _ = self._read(sid, read)
        return conversation, style

    def earlier(self, sid: str, before: int) -> Earlier:
        """Session ``sid``'s messages before message ``before``, for a reply to search
        (decision 0046): read, in the reply's own thread, only if the model asks."""
        sid = self._id(sid)
        opener = self.store.opener(sid)
        return Earlier(before, lambda max_chars: earlier_text(opener, before, max_chars))

    def save_exchange(self, sid: str, question: str, answer: str, style: str, parent_id: str | None) -> dict[str, Any]:
        """Append a complete exchange to session ``sid``: its lines and the new count."""
        sid = self._id(sid)
        with self.store.open(sid) as t:
            lines = _writing(lambda: append_exchange(t, question, answer, style=style, parent_id=parent_id,
                                                     lock_wait=LOCK_WAIT_S))
            count, version = t.message_count, layout_version(t)
        return {"lines": lines, "message_count": count, "layout_version": version}


# -- helpers -------------------------------------------------------------------------------


def _entry_out(entry: Entry) -> dict[str, Any]:
    """An entry as the API sends it: its fields, and how it reads (:func:`_shown`). Its
    record goes to the encoder as it is, not copied into new dicts first (a window's
    records are most of its bytes)."""
    return _shown(entry, msgspec.structs.asdict(entry))


def _shown(entry: Entry, data: dict[str, Any]) -> dict[str, Any]:
    """An entry as the API sends it: with ``role`` and ``text``, how it reads for a
    person by its format's rule, and ``kind`` (text, tool_call with its ``tool``,
    tool_result, reasoning), so no client derives them again."""
    data["role"], data["text"], data["kind"], data["tool"] = shown(entry)
    return data


def _writable(t: Transcript, w: Window, judged: Transcript | None) -> dict[str, Any]:
    """Whether a reply on this session can be saved to it, and the format its newest
    record is in: ``{"writable": False, "format": "claude-code"}`` for another agent's
    session, which a front end offers to ask without saving instead. Judged by the
    newest message's record: taken from window ``w`` when it holds it (the newest
    window, which a view opens with), else one bounded read of it."""
    count = t.message_count
    if w.messages and w.messages[-1].index == count - 1:
        newest: Window | None = w
    else:
        # The newest as the file is now: another process may have rewritten it since
        # ``w`` was read, and a cursor taken then may be past its end.
        newest = t.window(message_limit=1, content_limit=4096) if count else None
    record = newest.messages[-1].record if newest is not None and newest.messages else None
    dialect = dialect_of(record) if isinstance(record, dict) else None
    try:
        if newest is not None:
            writable_style(newest, transcript=judged)
    except ValueError:
        return {"writable": False, "format": dialect.name if dialect is not None else None}
    return {"writable": True, "format": dialect.name if dialect is not None else None}


def _first_question(t: Transcript) -> str | None:
    """The first line of the session's first question, at most :data:`TITLE_SHOWN`
    characters: read from its first few messages, each at a small display budget."""
    n = min(t.message_count, 8)
    if not n:
        return None
    try:
        first = t.window(message_before=n, message_limit=n, content_limit=2048).messages
    except ValueError:  # rewritten shorter by another process since it was counted
        return None  # untitled for this answer; the next one reads it again
    for entry in first:
        if entry.record is None:
            continue
        role, text = display(entry)
        if role != "user":
            continue
        line = next((" ".join(part.split()) for part in text.splitlines() if part.strip()), "")
        if line:
            return line if len(line) <= TITLE_SHOWN else line[: TITLE_SHOWN - 1] + "…"
    return None


def _title_of(body: bytes) -> str:
    """The title a ``PATCH`` of a session sets: one line of at most :data:`TITLE_MAX`
    characters (``""`` clears it)."""
    try:
        given = decode(body, SessionPatchRequest)
    except BadRequest as exc:
        raise BadRequest(f"{exc}; send {{\"title\": \"...\"}}", exc.param, "invalid_json") from None
    title = given.title.strip()
    if len(title) > TITLE_MAX:
        raise ApiError(400, f"title must be at most {TITLE_MAX} characters, got {len(title):,}", "invalid_value",
                       "title")
    if any(ord(c) < 32 or c == "\x7f" for c in title):
        raise ApiError(400, "title must be one line of text (no line breaks or control characters)",
                       "invalid_value", "title")
    return title


def _metadata(sid: str, counts: tuple[int, int], version: str, st: Any,
              in_order: bool = True) -> dict[str, Any]:
    return {"id": sid, "object": "boundctx.session", "message_count": counts[0], "compaction_count": counts[1],
            "bytes": st.st_size, "modified": st.st_mtime_ns // 1_000_000_000, "in_file_order": in_order,
            "layout_version": version}


def history_bytes(settings: config.Settings) -> int:
    """The most bytes of a session's lines one reply reads before fitting: what the
    engine could take of one input (``analysis.max_source_chars``) at up to 8 bytes a
    character as JSON holds it (4 of UTF-8, escapes beyond). The model never gets more
    than that of any input, so a larger history would be read only to be dropped."""
    return 8 * settings.analysis.max_source_chars


def _writing(write: Callable[[], Any]) -> Any:
    try:
        return write()
    except EntryInvalid as exc:
        raise ApiError(400, str(exc), "invalid_record", "record") from None
    except TranscriptLocked:
        raise ApiError(409, "another writer holds this session; retry shortly", "session_locked",
                       headers={"Retry-After": RETRY_AFTER}) from None
    except TranscriptChanged as exc:
        raise ApiError(409, str(exc), "session_changed", headers={"Retry-After": RETRY_AFTER}) from None
    except TranscriptPermission as exc:
        raise ApiError(403, str(exc), "permission_denied", type="permission_error") from None
    except (TranscriptNotFound, TranscriptNotAFile):
        # The name no longer leads to a file in the folder (removed, or replaced by
        # something that is not one): nothing more was written.
        raise ApiError(404, "the session is gone", "session_not_found", "id") from None
    except IndexError as exc:  # the message went between the check and the rewrite
        raise ApiError(404, str(exc), "message_not_found", "index") from None


def _leaf_param(query: Mapping[str, str]) -> str | None:
    """``leaf``: an entry's own id, or a line number (the store tells them apart)."""
    text = query.get("leaf")
    if text is not None and not 0 < len(text) <= LEAF_MAX:
        raise ApiError(400, f"leaf must be a line number or an entry id of 1 to {LEAF_MAX} characters",
                       "invalid_value", "leaf")
    return text


def _on_leaf(read: Callable[[], Any]) -> Any:
    """A window read, its refusals said as a 400 naming the parameter at fault (the
    store's messages begin with it: ``leaf=...`` or ``message_before=...``)."""
    try:
        return read()
    except ValueError as exc:
        text = str(exc)
        param = "leaf" if text.startswith("leaf=") else "message_before"
        raise ApiError(400, text.replace("the branch has", "the session has"), "invalid_value", param) from None


def _int_param(query: Mapping[str, str], name: str, default: int | None, minimum: int,
               maximum: int | None = None) -> int | None:
    text = query.get(name)
    if text is None:
        return default
    # int() alone would take " 5", "+5", "5_0" and "٥"; a cursor is plain ASCII digits.
    if not (text.isascii() and text.isdigit()) or len(text) > 18:
        raise ApiError(400, f"{name} must be a non-negative integer, got {text!r}", "invalid_value", name)
    value = int(text)
    if value < minimum or (maximum is not None and value > maximum):
        top = f" and at most {maximum:,}" if maximum is not None else ""
        raise ApiError(400, f"{name} must be at least {minimum}{top}, got {value}", "invalid_value", name)
    return value


def _bool_param(query: Mapping[str, str], name: str) -> bool:
    text = query.get(name)
    if text is None or text == "false":
        return False
    if text == "true":
        return True
    raise ApiError(400, f"{name} must be true or false, got {text!r}", "invalid_value", name)


def _index(text: str) -> int:
    return _int_param({"index": text}, "index", None, 0)  # type: ignore[return-value]


def _check_index(index: int, count: int) -> None:
    if index >= count:
        raise ApiError(404, f"no message {index}: the session has {count} (indexes 0 to {count - 1})",
                       "message_not_found", "index")


def _record(body: bytes) -> dict[str, Any]:
    """A request body as a record, read as the store reads a line (no NaN or Infinity,
    no numbers out of a double's range, bounded nesting)."""
    try:
        value = decode_record(body)
    except LineUnreadable as exc:
        raise ApiError(400, f"the body is not JSON the store can keep: {exc}", "invalid_json", "record") from None
    if not isinstance(value, dict):
        raise ApiError(400, f"the body must be a JSON object (a record), got {type(value).__name__}",
                       "invalid_record", "record")
    return value


# -- routes --------------------------------------------------------------------------------


def session_routes(sessions: Sessions) -> list:
    """The sessions API's routes, relative to :data:`~boundctx.serve.http.API`."""
    from starlette.routing import Route

    s = sessions

    async def answer(status: int, work: Callable[[], Any]):
        # Encoded in the worker thread that built the answer, not on the event loop.
        return encoded_response(status, await s.run(lambda: encode_json(work())))

    def create_request(body: bytes) -> SessionCreateRequest:
        try:
            return decode(body, SessionCreateRequest) if body.strip() else SessionCreateRequest()
        except BadRequest as exc:
            raise BadRequest(str(exc), exc.param, "invalid_json") from None

    # Each handler names the methods it writes with: Starlette answers HEAD on every
    # route that takes GET, and a HEAD must read, never create, append or edit.

    async def sessions_(request):
        if request.method in ("GET", "HEAD"):
            limit = _int_param(request.query_params, "limit", LIST_DEFAULT, 1, LIST_MAX)
            return await answer(200, lambda: s.list(limit, request.query_params.get("after")))
        assert request.method == "POST"
        given = await read_json(request, s.max_body, create_request)
        sid = s._id(given.id) if given.id is not None else secrets.token_hex(12)
        if given.continue_from is None and given.history is not None:
            raise BadRequest("history says how many messages continue_from carries over: send it with "
                             "continue_from, or leave it out", "history", "invalid_value")
        history = 50 if given.history is None else given.history
        if not 1 <= history <= HISTORY_MAX:
            raise BadRequest(f"history must be 1 to {HISTORY_MAX} messages, got {history}", "history",
                             "invalid_value")
        if given.continue_from is not None and not isinstance(given.continue_from, str):
            raise BadRequest("continue_from must be a session id", "continue_from", "invalid_value")
        return await answer(201, lambda: s.create(sid, given.continue_from, history))

    async def session(request):
        sid = request.path_params["id"]
        if request.method == "PATCH":
            title = await read_json(request, s.max_body, _title_of)
            return await answer(200, lambda: s.set_title(sid, title))
        return await answer(200, lambda: s.get(sid))

    async def messages(request):
        sid = request.path_params["id"]
        if request.method in ("GET", "HEAD"):
            return await answer(200, lambda: s.window(sid, request.query_params))
        assert request.method == "POST"
        body = await read_body(request, s.max_body)
        return await answer(201, lambda: s.append(sid, body))

    async def branches(request):
        return await answer(200, lambda: s.branches(request.path_params["id"], request.query_params))

    async def message(request):
        sid, index = request.path_params["id"], request.path_params["index"]
        if request.method in ("GET", "HEAD"):
            return await answer(200, lambda: s.message(sid, index, request.query_params))
        if request.method == "DELETE":
            return await answer(200, lambda: s.rewrite(sid, index, request.query_params, None))
        assert request.method == "PATCH"
        body = await read_body(request, s.max_body)
        return await answer(200, lambda: s.rewrite(sid, index, request.query_params, body))

    return [
        Route("/sessions", sessions_, methods=["GET", "POST"]),
        Route("/sessions/{id}", session, methods=["GET", "PATCH"]),
        Route("/sessions/{id}/messages", messages, methods=["GET", "POST"]),
        Route("/sessions/{id}/branches", branches, methods=["GET"]),
        Route("/sessions/{id}/messages/{index}", message, methods=["GET", "PATCH", "DELETE"]),
    ]
