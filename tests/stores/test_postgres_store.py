"""The PostgreSQL store against the file store, on a real PostgreSQL server: the same
bytes give the same windows, counts and appends, and JSONL goes in and comes back out
byte for byte (docs/decisions/0048)."""

from __future__ import annotations

import itertools
import os
import threading
import time

import msgspec
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from boundctx.errors import EntryInvalid, StoreUnavailable, TranscriptChanged, TranscriptLocked, TranscriptNotFound
from boundctx.stores.postgres import SCHEMA_VERSION, PostgresStore
from boundctx.transcript import Transcript, encode_record

from tests._support import SHARED_DATA, rewound_session
from tests._support.strategies import jsonl_documents, large_documents

_ids = itertools.count()

#: Window shapes every comparison reads, newest first and paged back.
SHAPES = [dict(preset="renderer"), dict(message_limit=5, content_limit=100), dict(message_limit=3),
          dict(content_limit=40, page_bytes=500, message_limit=50), dict(message_limit=0),
          dict(content_limit=0, message_limit=7)]


@pytest.fixture
def store(postgres_db):
    with PostgresStore(postgres_db.url) as s:
        yield s


def _same(a, b) -> None:
    assert msgspec.to_builtins(a) == msgspec.to_builtins(b)


def assert_same_windows(t: Transcript, session) -> None:
    """Every window shape, from the newest back to the first message, and the counts."""
    assert session.message_count == t.message_count
    assert session.compaction_count == t.compaction_count
    for shape in SHAPES:
        before = None
        for _ in range(t.message_count + 1):
            a, b = t.window(message_before=before, **shape), session.window(message_before=before, **shape)
            _same(a, b)
            if "message_limit" in shape and "content_limit" in shape:
                # The same window asked for ahead, its lines fetched with the head.
                ask = {"message_before": before, "message_limit": shape["message_limit"],
                       "content_limit": shape["content_limit"]}
                with session.store.reading(session.id, window=ask) as held:
                    _same(a, held.window(message_before=before, **shape))
            if not a.has_more_before or not a.messages:
                break
            before = a.message_start
    middle = t.message_count // 2
    _same(t.window(message_before=middle, message_limit=4, content_limit=64),
          session.window(message_before=middle, message_limit=4, content_limit=64))


def import_both(store, tmp_path, data: bytes):
    """``data`` as a file and as a session; None for the session when the store refuses it
    (a tree that forks), which the file's own reading must then confirm."""
    path = tmp_path / f"t{next(_ids)}.jsonl"
    path.write_bytes(data)
    sid = path.stem
    try:
        store.import_jsonl(sid, path)
    except ValueError as exc:
        assert "forks" in str(exc)
        with Transcript.open(path) as t:
            assert not t.in_file_order
        return path, None
    return path, store.open(sid)


# -- real sessions -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["claude-code-sessions/ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl",
                                  "claude-code-sessions/4d5611e5-241a-462a-8d15-5122611a9569.jsonl",
                                  "claude-code-sessions/turn-2.jsonl"])
def test_real_sessions_read_alike_and_come_back_byte_for_byte(store, shared_file, tmp_path, name):
    path = shared_file(name)
    report = store.import_jsonl("real", path)
    out = tmp_path / "out.jsonl"
    assert store.export_jsonl("real", out) == os.path.getsize(path)
    assert out.read_bytes() == path.read_bytes()
    with Transcript.open(path) as t:
        assert (report.lines, report.messages, report.compactions) == (t.line_count, t.message_count,
                                                                       t.compaction_count)
        assert_same_windows(t, store.open("real"))


def test_a_codex_session_reads_alike(store, tmp_path):
    folder = SHARED_DATA / "codex-sessions"
    if not folder.exists():
        pytest.skip(f"real session data not found at {folder} (a clone without ../shared)")
    first = sorted(folder.iterdir())[0]
    path, session = import_both(store, tmp_path, first.read_bytes())
    with Transcript.open(path) as t:
        assert_same_windows(t, session)


# -- generated files ---------------------------------------------------------------------------


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.one_of(jsonl_documents(max_lines=20), large_documents(min_size=70_000)))
def test_any_file_reads_alike_and_round_trips(store, tmp_path, data):
    """Blank, corrupt, deep, long and non-object lines, a BOM, CRLF and torn tails:
    whatever the file store makes of a file, the database store makes of it too."""
    path, session = import_both(store, tmp_path, data)
    if session is None:
        return
    out = tmp_path / "back.jsonl"
    store.export_jsonl(session.id, out)
    assert out.read_bytes() == data
    with Transcript.open(path) as t:
        assert_same_windows(t, session)


_LINES = {"m": encode_record({"type": "message", "message": {"role": "user", "content": "a message"}}),
          "c": encode_record({"type": "compaction", "summary": "what came before"}),
          "o": encode_record({"type": "session", "id": "other"}),
          "x": b'{"type":"message","broken\n', "b": b"\n"}


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(kinds=st.text("mmcccox b", min_size=1, max_size=40), limit=st.integers(1, 4))
@example(kinds="mcccm", limit=2)
def test_compactions_around_and_inside_windows_are_chosen_alike(store, tmp_path, kinds, limit):
    """Files dense with compactions: the one in force before a window and the newest
    ``limit`` of those inside it, with how many were left out, page after page."""
    data = b"".join(_LINES[k] for k in kinds if k != " ")
    path, session = import_both(store, tmp_path, data)
    with Transcript.open(path) as t:
        before = None
        for _ in range(t.message_count + 1):
            a, b = t.window(message_before=before, message_limit=limit), \
                session.window(message_before=before, message_limit=limit)
            _same(a, b)
            if not a.has_more_before:
                break
            before = a.message_start


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=jsonl_documents(max_lines=8),
       records=st.lists(st.sampled_from([
           {"type": "message", "message": {"role": "user", "content": "hi"}},
           {"type": "message", "message": {"role": "assistant", "content": "x" * 5000}},
           {"type": "compaction", "summary": "earlier turns"},
           {"type": "note", "text": "not a message"},
           {"type": "message", "message": {"role": "user", "content": "\u00e9\U0001f600 \u2028"}},
       ]), min_size=1, max_size=6))
def test_appends_land_where_the_file_stores_do(store, tmp_path, data, records):
    """The same records appended to the file and the session: the same line numbers, and
    the same windows after (a torn tail is moved aside in both, never lost)."""
    path, session = import_both(store, tmp_path, data)
    if session is None:
        return
    with Transcript.open(path) as t:
        torn = data[len(data) - t.torn_bytes:] if t.torn_bytes else None
        for record in records:
            assert session.append(record) == t.append(record)
        assert_same_windows(t, session)
    with store.pool.connection() as conn:
        moved = [bytes(r[0]) for r in conn.execute("SELECT data FROM boundctx_torn WHERE session = %s",
                                                   (session.id,))]
    assert moved == ([torn] if torn is not None else [])


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=jsonl_documents(max_lines=10),
       changes=st.lists(st.tuples(st.sampled_from(["edit", "delete", "truncate", "append"]), st.integers(0, 12),
                                  st.sampled_from([{"type": "message", "message": {"role": "user", "content": "new"}},
                                                   {"type": "compaction", "summary": "s"},
                                                   {"type": "note", "text": "n"}])),
                        min_size=1, max_size=5))
def test_edits_deletes_and_truncations_leave_what_the_file_stores_do(store, tmp_path, data, changes):
    """The same rewrites of the same bytes: the same windows after each, a message index
    past the end refused alike, and the version changed by a rewrite only."""
    path, session = import_both(store, tmp_path, data)
    if session is None:
        return
    with Transcript.open(path) as t:
        # A torn tail is moved aside by the first rewrite in both, but by the file store
        # also when a rewrite is then refused: the bytes compared below exclude that case.
        torn = t.torn_bytes
        for what, index, record in changes:
            version = session.version()
            if what == "append":
                assert session.append(record) == t.append(record)
                assert session.version() == version
                continue
            args = (index, record) if what == "edit" else (index,)
            try:
                getattr(t, what)(*args)
            except IndexError:
                with pytest.raises(IndexError):
                    getattr(session, what)(*args)
                assert session.version() == version
                continue
            getattr(session, what)(*args)
            assert session.version() != version
            assert_same_windows(t, session)
    out = tmp_path / "after.jsonl"
    store.export_jsonl(session.id, out)
    if not torn:
        assert out.read_bytes() == path.read_bytes()


def test_a_check_that_refuses_leaves_the_session_as_it_was(store, tmp_path):
    store.create("c")
    session = store.open("c")
    for k in range(3):
        session.append({"type": "message", "message": {"role": "user", "content": str(k)}})
    version = session.version()
    seen = []

    def refuse(history):
        seen.append((history.source.message_count, history.source.identity()))
        raise RuntimeError("the cursor is stale")

    with pytest.raises(RuntimeError, match="stale"):
        session.delete(1, check=refuse)
    assert seen == [(3, session.identity())]
    assert session.version() == version
    assert [e.record["message"]["content"] for e in session.window().messages] == ["0", "1", "2"]


def test_an_entry_read_before_another_rewrite_is_not_edited(store):
    store.create("e")
    session = store.open("e")
    for k in range(3):
        session.append({"type": "message", "message": {"role": "user", "content": str(k)}})
    stale = session.window().messages[2]
    session.delete(0)
    with pytest.raises(TranscriptChanged):
        session.edit(stale, {"type": "message", "message": {"role": "user", "content": "x"}})
    fresh = session.window().messages[1]
    session.edit(fresh, {"type": "message", "message": {"role": "user", "content": "x"}})
    assert [e.record["message"]["content"] for e in session.window().messages] == ["1", "x"]


# -- reads bounded by their head, with no transaction ------------------------------------------


def _said(n: int) -> list[dict]:
    return [{"type": "message", "message": {"role": "user", "content": str(k)}} for k in range(n)]


def _contents(window) -> list[str]:
    return [e.record["message"]["content"] for e in window.messages]


def test_a_held_read_sees_the_state_its_head_saw_under_appends(store):
    """Lines appended by another writer during a held read are past its head: its
    windows, counts and leaf are the state it started from, as one snapshot's would be."""
    store.create("h", records=_said(4))
    writer = store.open("h")
    with store.reading("h") as t:
        version = t.version()
        writer.append_records(_said(3))
        w = t.window()
        assert _contents(w) == ["0", "1", "2", "3"] and w.message_count == 4 == t.message_count
        assert w.leaf == 3 and t.message_bytes(0, 10) == [len(encode_record(r)) for r in _said(4)]
        assert t.version() == version
    assert store.open("h").message_count == 7


def test_a_rewrite_under_a_held_read_is_said_not_mixed_in(store):
    """A rewrite between a held read's head and its window: the window raises
    TranscriptChanged (the sessions API reads again) instead of showing the rewritten
    lines under the old version."""
    store.create("r", records=_said(4))
    with store.reading("r") as t:
        t.version()
        store.open("r").delete(0)
        with pytest.raises(TranscriptChanged):
            t.window()
        with pytest.raises(TranscriptChanged):
            t.message_bytes(0, 4)
    store.remove("r")
    store.create("r", records=_said(2))
    with store.reading("r") as t:
        t.head()
        store.remove("r")
        with pytest.raises(TranscriptChanged):
            t.window()


def test_a_read_of_its_own_reads_again_when_a_rewrite_lands_under_it(store, monkeypatch):
    """Outside a held read, a window whose statement meets a rewrite that landed after its
    head reads again, and answers the rewritten session."""
    from boundctx.stores import postgres

    store.create("o", records=_said(4))
    session = store.open("o")
    real = postgres.PostgresSession._window
    calls = []

    def rewritten_once(self, conn, head, *args):
        calls.append(head.messages)
        if len(calls) == 1:
            store.open("o").delete(0)  # after the head was read, before the lines are
        return real(self, conn, head, *args)

    monkeypatch.setattr(postgres.PostgresSession, "_window", rewritten_once)
    assert _contents(session.window()) == ["1", "2", "3"]
    assert calls == [4, 3]


def test_a_session_made_again_under_its_id_has_a_new_version(store, tmp_path):
    """Every generation comes from one sequence: a version read from a session that was
    removed (or imported over) is never the version of the one made under its id after."""
    store.create("v", records=_said(2))
    versions = {store.open("v").version()}
    store.remove("v")
    store.create("v", records=_said(2))
    versions.add(store.open("v").version())
    path = tmp_path / "v.jsonl"
    path.write_bytes(b"".join(encode_record(r) for r in _said(2)))
    store.import_jsonl("v", path, replace=True)
    versions.add(store.open("v").version())
    store.open("v").edit(0, _said(1)[0])
    versions.add(store.open("v").version())
    assert len(versions) == 4


@pytest.mark.parametrize("with_head", [False, True])
@pytest.mark.parametrize("content_limit", [None, 4096])
def test_the_window_statement_keeps_one_plan_of_index_scans(store, content_limit, with_head):
    """The pool's connections keep one (generic) plan per prepared statement; the window's
    must be index scans bounded on every side whatever its values, never a scan of a
    session's lines or compactions filtered after."""
    import re

    from boundctx.stores.postgres import _window_statement

    store.create("p", records=_said(30))
    sql = _window_statement(content_limit, with_head=with_head)
    names = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", sql)))
    for i, name in enumerate(names, 1):
        sql = sql.replace(f"%({name})s", f"${i}")
    types = ["text" if n == "sid" else "integer" if n in ("content", "prefix", "short") else "bigint" for n in names]
    values = {"sid": "'p'", "lines": "30", "content": "4096", "prefix": "8192", "start": "20", "stop": "30",
              "keep": "100", "short": "8192", "before": "NULL", "limit": "10"}
    with store.pool.connection() as conn:
        assert conn.execute("SHOW plan_cache_mode").fetchone()[0] == "force_generic_plan"
        conn.execute(f"PREPARE w ({', '.join(types)}) AS {sql}")
        plan = [r[0] for r in conn.execute(f"EXPLAIN (COSTS OFF) EXECUTE w ({', '.join(values[n] for n in names)})")]
        conn.execute("DEALLOCATE w")
    text = "\n".join(plan)
    assert "Seq Scan" not in text and "Join Filter" not in text and "Filter: ((line" not in text, text
    scans = [i for i, line in enumerate(plan) if "Scan" in line and "boundctx_lines" in line]
    assert scans and all("Index Cond" in plan[i + 1] for i in scans), text


# -- what the store refuses, and how ----------------------------------------------------------


def test_a_session_that_forks_is_refused_at_import_with_the_reason(store, tmp_path):
    path = tmp_path / "rewound.jsonl"
    path.write_bytes(b"".join(encode_record(r) for r in rewound_session()))
    with pytest.raises(ValueError, match="forks"):
        store.import_jsonl("rewound", path)
    assert store.ids() == []  # nothing half-imported


def test_import_reads_the_file_once_and_writes_nothing_beside_it(store, tmp_path, monkeypatch):
    """One scan frames the lines and reads their links (the fork check needs them); no
    layout sidecar or lock is left beside a file that is only imported."""
    from boundctx._native import filescan

    path = tmp_path / "tree.jsonl"
    path.write_bytes(b"".join(encode_record(r) for r in rewound_session()[:3]))
    scans = []
    real = filescan.scan_fd
    monkeypatch.setattr(filescan, "scan_fd", lambda *a, **kw: scans.append(kw) or real(*a, **kw))
    store.import_jsonl("tree", path)
    assert len(scans) == 1 and scans[0]["link_keys"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tree.jsonl"]
    with Transcript.open(path) as t:
        assert store.open("tree").message_count == t.message_count


def test_torn_tails_kept_aside_go_with_their_session(store, tmp_path):
    """A torn tail moved aside by an append is the session's: removed with it, and not
    handed to a session imported over it."""
    path = tmp_path / "torn.jsonl"
    path.write_bytes(encode_record({"type": "message", "message": {"role": "user", "content": "one"}}) + b'{"ty')
    for _ in range(2):
        store.import_jsonl("t", path, replace=True)
        store.open("t").append({"type": "message", "message": {"role": "user", "content": "two"}})
    with store.pool.connection() as conn:
        assert conn.execute("SELECT count(*) FROM boundctx_torn WHERE session = 't'").fetchone()[0] == 1
        store.remove("t")
        assert conn.execute("SELECT count(*) FROM boundctx_torn WHERE session = 't'").fetchone()[0] == 0


def test_an_existing_session_is_not_overwritten(store, tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_bytes(encode_record({"type": "message", "message": {"role": "user", "content": "one"}}))
    store.import_jsonl("a", path)
    with pytest.raises(FileExistsError):
        store.import_jsonl("a", path)
    with pytest.raises(FileExistsError):
        store.create("a")
    assert store.open("a").message_count == 1


def test_a_missing_session_is_said(store):
    with pytest.raises(TranscriptNotFound):
        store.open("nobody")
    with pytest.raises(TranscriptNotFound):
        store.remove("nobody")


def test_a_record_the_file_store_refuses_is_refused_alike(store, tmp_path):
    store.create("s")
    session = store.open("s")
    for bad in ({"type": "message", "n": float("nan")}, {"type": "message", "s": "\ud800"},
                {"type": "message", "k": object()}, [1]):
        with pytest.raises(EntryInvalid) as db_error:
            session.append(bad)
        with Transcript.open(tmp_path / "f.jsonl", create=True) as t, pytest.raises(EntryInvalid) as file_error:
            t.append(bad)
        assert str(db_error.value) == str(file_error.value)
    assert session.line_count == 0


def test_a_writer_held_past_the_lock_wait_is_told_so(store):
    store.create("busy")
    session = store.open("busy")
    with store.pool.connection() as conn, conn.transaction():
        conn.execute("SELECT 1 FROM boundctx_sessions WHERE id = 'busy' FOR UPDATE")
        with pytest.raises(TranscriptLocked):
            session.append({"type": "message", "message": {"role": "user", "content": "x"}}, lock_wait=0.05)
    assert session.append({"type": "message", "message": {"role": "user", "content": "x"}}) == 0


def test_concurrent_appends_get_every_line_once_in_order(postgres_db):
    """Writers on separate connections: line numbers and message indexes have no gap
    and no double, and each writer's records keep its own order."""
    with PostgresStore(postgres_db.url, pool_size=6) as store:
        store.create("many")
        session = store.open("many")
        per, writers = 40, 5
        errors: list[BaseException] = []

        def write(w: int) -> None:
            try:
                for k in range(per):
                    session.append({"type": "message", "message": {"role": "user", "content": f"{w}:{k}"}},
                                   lock_wait=30)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert not errors
        window = session.window()
        assert [e.index for e in window.messages] == list(range(per * writers))
        assert [e.line for e in window.messages] == list(range(per * writers))
        seen: dict[int, list[int]] = {}
        for e in window.messages:
            w, k = map(int, e.record["message"]["content"].split(":"))
            seen.setdefault(w, []).append(k)
        assert seen == {w: list(range(per)) for w in range(writers)}
        offsets = [e.offset for e in window.messages]
        lengths = [e.length for e in window.messages]
        assert offsets == [sum(lengths[:k]) for k in range(len(lengths))]


def test_a_long_record_crosses_the_wire_as_the_prefix_a_window_needs(store, tmp_path, monkeypatch):
    """A 5 MB tool output: a renderer window fetches at most the content limit and the
    envelope of it, and shows it cut with the file store's marker."""
    big = {"type": "message", "message": {"role": "tool", "content": "y" * (5 << 20)}}
    store.create("big")
    session = store.open("big")
    session.append(big)
    import psycopg

    # Every bytes value any statement of the window brings back, as the cursor hands it over.
    fetched: list[int] = []
    for name in ("fetchall", "fetchone"):
        real = getattr(psycopg.Cursor, name)

        def counting(self, real=real):
            got = real(self)
            for row in got if isinstance(got, list) else [got] if got is not None else []:
                fetched.extend(len(v) for v in row if isinstance(v, (bytes, memoryview)))
            return got

        monkeypatch.setattr(psycopg.Cursor, name, counting)
    w = session.window(content_limit=1000)
    assert fetched and max(fetched) <= 1000 + 64 * 1024 + 3
    assert w.messages[0].cut_bytes > 0 and w.messages[0].length > 5 << 20
    path = tmp_path / "big.jsonl"
    with Transcript.open(path, create=True) as t:
        t.append(big)
        _same(t.window(content_limit=1000), w)


def test_a_database_of_another_schema_version_is_refused(postgres_db):
    with PostgresStore(postgres_db.url) as store:
        with store.pool.connection() as conn:
            conn.execute("UPDATE boundctx_schema SET version = %s", (SCHEMA_VERSION + 1,))
    with pytest.raises(RuntimeError, match="schema version"):
        PostgresStore(postgres_db.url)


def test_export_replaces_the_target_whole_or_not_at_all(store, tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_bytes(encode_record({"type": "message", "message": {"role": "user", "content": "one"}}))
    store.import_jsonl("s", path)
    target = tmp_path / "target.jsonl"
    target.write_bytes(b"old contents\n")
    with pytest.raises(TranscriptNotFound):
        store.export_jsonl("missing", target)
    assert target.read_bytes() == b"old contents\n"
    assert [p.name for p in tmp_path.iterdir() if ".export" in p.name] == []
    seen: list[tuple[int, int]] = []
    store.export_jsonl("s", target, progress=lambda done, total: seen.append((done, total)))
    assert target.read_bytes() == path.read_bytes()
    assert seen[-1] == (len(path.read_bytes()), len(path.read_bytes()))


def test_a_lost_database_is_said_and_the_store_recovers_when_it_is_back(postgres_server, postgres_db):
    """Killed under a store: each call raises StoreUnavailable naming the database (never
    its password) and changes nothing; once the server is back, the same store works."""
    with PostgresStore(postgres_db.url, connect_timeout=1) as store:
        store.create("s")
        session = store.open("s")
        record = {"type": "message", "message": {"role": "user", "content": "kept"}}
        assert session.append(record) == 0
        postgres_server.kill()
        for call in (lambda: session.append(record), lambda: session.window(), lambda: session.message_count,
                     lambda: store.open("s")):
            with pytest.raises(StoreUnavailable, match=postgres_db.name) as caught:
                call()
            assert "password" not in str(caught.value)
        postgres_server.start()
        # The pool reconnects on its own schedule (a backoff of seconds): until then a call
        # is still told the database cannot be reached, never anything else.
        deadline = time.monotonic() + 60
        while True:
            try:
                window = session.window()
                break
            except StoreUnavailable:
                assert time.monotonic() < deadline, "the store did not recover once the database was back"
                time.sleep(0.2)
        assert window.message_count == 1  # nothing half-written while it was down
        assert session.append(record) == 1
        assert [e.record["message"]["content"] for e in session.window().messages] == ["kept", "kept"]


def test_a_store_that_cannot_connect_says_why_without_the_password(tmp_path):
    url = f"postgresql://someone:hunter2@/postgres?host={tmp_path}"
    with pytest.raises(StoreUnavailable) as caught:
        PostgresStore(url, connect_timeout=0.5)
    assert "hunter2" not in str(caught.value)
    assert str(tmp_path) in str(caught.value) and "No such file" in str(caught.value)



def test_a_window_asked_for_ahead_comes_with_the_head_in_one_statement(store, monkeypatch):
    """``reading(window=...)``: the window's lines come in the head's statement, and that
    window is answered from them; a different window in the same burst reads its own; a
    missing session is said at once; values a window refuses are refused by the window,
    as they are without asking ahead."""
    import psycopg

    store.create("a", records=[*_said(5), {"type": "compaction", "summary": "s"}, *_said(5)])
    plain = store.open("a")
    version = plain.version()
    statements = []
    real = psycopg.Connection.execute

    def counted(self, query, *args, **kwargs):
        statements.append(str(query).split()[0])
        return real(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "execute", counted)
    for before, limit, content in [(None, 3, 64), (4, 3, None), (None, None, 2), (0, 5, 10), (10, 0, 5)]:
        ask = {"message_before": before, "message_limit": limit, "content_limit": content}
        statements.clear()
        alone = plain.window(**ask)  # the head, then the window's statement and any after it
        assert statements[:2] == ["SELECT", "WITH"]
        expected, statements[:] = statements[1:], []
        with store.reading("a", window=ask) as t:
            held = t.window(**ask)
            assert (t.message_count, t.version()) == (10, version)
        assert statements == expected, (ask, statements)  # the same, without the head's own
        _same(held, alone)
    with store.reading("a", window={"message_before": None, "message_limit": 3, "content_limit": None}) as t:
        _same(t.window(message_limit=2, content_limit=None), plain.window(message_limit=2, content_limit=None))
    with pytest.raises(TranscriptNotFound):
        with store.reading("missing", window={"message_before": None, "message_limit": 3, "content_limit": None}):
            pass
    for bad in ({"message_before": 11, "message_limit": 3, "content_limit": None},
                {"message_before": -1, "message_limit": 3, "content_limit": None}):
        with pytest.raises(ValueError) as held_error, store.reading("a", window=bad) as t:
            t.window(**bad)
        with pytest.raises(ValueError) as plain_error:
            plain.window(**bad)
        assert str(held_error.value) == str(plain_error.value)
