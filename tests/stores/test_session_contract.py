"""The session-store contract, one suite run against both stores: a folder of JSONL files
(a session is its :class:`~boundctx.transcript.Transcript`) and PostgreSQL
(:class:`~boundctx.stores.postgres.PostgresStore`). What the sessions routes and ``ask
--transcript`` rely on: create, list, open, bounded windows and paging, appends in order
under concurrent writers, edits, deletes and truncations that change the layout version
(appends never do), one message whole, and the same refusals with the same errors
(docs/decisions/0048). ``test_postgres_store.py`` compares the two stores window for
window on the same bytes; this suite says what each must do on its own."""

from __future__ import annotations

import contextlib
import os
import threading

import pytest

from boundctx.errors import EntryInvalid, TranscriptChanged, TranscriptLocked, TranscriptNotFound
from boundctx.transcript import Transcript, encode_record


def message(role: str, content: str) -> dict:
    return {"type": "message", "message": {"role": role, "content": content}}


class FolderStore:
    """The file store as the sessions routes use it: ``<id>.jsonl`` in one folder."""

    def __init__(self, folder) -> None:
        self.folder = folder

    def path(self, sid: str) -> str:
        return os.path.join(self.folder, sid + ".jsonl")

    def create(self, sid: str, *, records=()) -> None:
        try:
            fd = os.open(self.path(sid), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            raise FileExistsError(f"session {sid!r} exists") from None
        with os.fdopen(fd, "wb") as f:
            f.write(b"".join(encode_record(r) for r in records))

    def open(self, sid: str) -> Transcript:
        return Transcript.open(self.path(sid))

    def listing(self) -> list[str]:
        return sorted(name[:-6] for name in os.listdir(self.folder) if name.endswith(".jsonl"))

    def remove(self, sid: str) -> None:
        try:
            os.unlink(self.path(sid))
        except FileNotFoundError:
            raise TranscriptNotFound(f"no session {sid!r}") from None


@pytest.fixture(params=["files", "postgresql"])
def store(request, tmp_path):
    if request.param == "files":
        yield FolderStore(tmp_path)
        return
    from boundctx.stores.postgres import PostgresStore

    database = request.getfixturevalue("postgres_db")
    with PostgresStore(database.url) as s:
        yield s


@contextlib.contextmanager
def opened(store, sid: str):
    session = store.open(sid)
    try:
        yield session
    finally:
        session.close()


def texts(window) -> list[str]:
    return [e.record["message"]["content"] for e in window.messages]


def test_a_created_session_is_listed_and_reads_back_its_records(store):
    store.create("a", records=[message("user", "one"), message("assistant", "two")])
    store.create("empty")
    assert {"a", "empty"} <= set(_ids(store))
    with opened(store, "a") as s:
        w = s.window()
        assert texts(w) == ["one", "two"] and w.message_start == 0 and w.message_count == 2
        assert not w.has_more_before
    with opened(store, "empty") as s:
        assert s.message_count == 0 and s.window().messages == []
    with pytest.raises(FileExistsError):
        store.create("a")


def test_a_missing_session_is_not_found_and_a_removed_one_is_gone(store):
    with pytest.raises(TranscriptNotFound):
        store.open("nosuch")
    store.create("r", records=[message("user", "x")])
    store.remove("r")
    with pytest.raises(TranscriptNotFound):
        store.open("r")
    with pytest.raises(TranscriptNotFound):
        store.remove("r")


def test_paging_back_from_the_newest_reads_every_message_once_and_says_when_it_is_done(store):
    store.create("p", records=[message("user", f"m{i}") for i in range(23)])
    with opened(store, "p") as s:
        seen, before = [], None
        while True:
            w = s.window(message_before=before, message_limit=5)
            assert w.message_count == 23 and len(w.messages) <= 5
            assert w.has_more_before == (w.message_start > 0)
            seen[:0] = texts(w)
            if not w.has_more_before:
                break
            before = w.message_start
    assert seen == [f"m{i}" for i in range(23)]


def test_a_long_message_is_cut_to_the_display_budget_and_read_whole_on_its_own(store):
    long = "word " * 20_000
    store.create("l", records=[message("user", "short"), message("assistant", long)])
    with opened(store, "l") as s:
        w = s.window(content_limit=200)
        assert len(w.messages[1].record["message"]["content"]) < 1000
        assert w.content_limit == 200
        whole = s.window(message_before=2, message_limit=1, content_limit=None)
        assert whole.messages[0].record["message"]["content"] == long
        assert s.message_bytes(0, 2)[1] > len(long)


def test_a_page_is_bounded_in_bytes_and_paging_stays_exact(store):
    store.create("b", records=[message("user", "x" * 3000) for _ in range(12)])
    with opened(store, "b") as s:
        seen, before = 0, None
        while True:
            w = s.window(message_before=before, message_limit=100, content_limit=4000, page_bytes=10_000)
            assert 1 <= len(w.messages) and sum(len(e.record["message"]["content"]) for e in w.messages) <= 10_000
            seen += len(w.messages)
            if not w.has_more_before:
                break
            before = w.message_start
        assert seen == 12


def test_compactions_in_force_come_with_a_window(store):
    records = [message("user", "early"), {"type": "compaction", "summary": "what came before"},
               message("user", "late")]
    store.create("c", records=records)
    with opened(store, "c") as s:
        w = s.window(message_limit=1)
        assert texts(w) == ["late"] and s.compaction_count == 1
        assert [c.record["summary"] for c in w.compactions] == ["what came before"]


def test_appends_keep_the_version_and_rewrites_change_it(store):
    store.create("v", records=[message("user", f"m{i}") for i in range(4)])
    with opened(store, "v") as s:
        first = s.identity()
        lines = [s.append(message("user", "a1")), s.append(message("assistant", "a2"))]
        assert lines[1] == lines[0] + 1 and s.message_count == 6 and s.identity() == first
        s.edit(1, message("user", "edited"))
        after_edit = s.identity()
        assert after_edit != first
        s.delete(0)
        assert s.identity() not in (first, after_edit)
        assert texts(s.window()) == ["edited", "m2", "m3", "a1", "a2"]
        s.truncate(3)
        assert texts(s.window()) == ["edited", "m2", "m3"] and s.message_count == 3


def test_a_rewrite_from_a_stale_read_is_refused_and_changes_nothing(store):
    store.create("s", records=[message("user", f"m{i}") for i in range(3)])
    with opened(store, "s") as s:
        entry = s.window().messages[1]
        s.edit(0, message("user", "changed first"))
        with pytest.raises(TranscriptChanged):
            s.edit(entry, message("user", "from a stale read"))
        assert texts(s.window()) == ["changed first", "m1", "m2"]

        def refuse(history):
            raise TranscriptChanged("the caller's cursor is stale")

        with pytest.raises(TranscriptChanged):
            s.delete(2, check=refuse)
        assert s.message_count == 3


def test_a_record_neither_store_can_keep_is_refused_the_same_way(store):
    store.create("bad", records=[message("user", "ok")])
    with opened(store, "bad") as s:
        for record in ({"type": "message", "message": {"role": "user", "content": float("nan")}},
                       {"type": "message", "message": {"role": "user", "content": "\ud800"}}):
            with pytest.raises(EntryInvalid):
                s.append(record)
        assert texts(s.window()) == ["ok"]


def test_an_edit_of_a_message_that_is_not_there_is_refused(store):
    store.create("i", records=[message("user", "only")])
    with opened(store, "i") as s, pytest.raises(IndexError):
        s.edit(5, message("user", "x"))


def test_concurrent_writers_get_every_line_once_in_their_order(store):
    store.create("w")
    per_writer = 15

    def write(writer: int) -> None:
        with opened(store, "w") as s:
            for i in range(per_writer):
                s.append(message("user", f"{writer}:{i}"), lock_wait=30)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    with opened(store, "w") as s:
        got = texts(s.window(message_limit=1000))
    assert sorted(got) == sorted(f"{w}:{i}" for w in range(4) for i in range(per_writer))
    for w in range(4):
        assert [int(x.split(":")[1]) for x in got if x.startswith(f"{w}:")] == list(range(per_writer))


def test_a_writer_that_cannot_have_the_lock_in_time_is_told_so(store):
    store.create("k", records=[message("user", "x")])
    held, release = threading.Event(), threading.Event()

    def hold(history):
        held.set()
        release.wait(30)

    with opened(store, "k") as s:
        holder = threading.Thread(target=lambda: s.delete(0, check=hold))
        holder.start()
        try:
            assert held.wait(30)
            with opened(store, "k") as other, pytest.raises(TranscriptLocked):
                other.append(message("user", "y"), lock_wait=0.2)
        finally:
            release.set()
            holder.join(30)


def _ids(store) -> list[str]:
    found = store.listing()
    return [f if isinstance(f, str) else f[0] for f in found]
