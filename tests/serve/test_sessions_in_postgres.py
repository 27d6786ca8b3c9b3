"""The sessions API with its sessions in PostgreSQL (``serve.sessions_dir`` a URL), on a real
server and a real database: every answer is the one the same calls get from a server
whose sessions are files, a lost database is a 503 the server recovers from, and a reply
is saved whole (docs/decisions/0048)."""

from __future__ import annotations

import json
import shutil
import time

import httpx
import pytest

from boundctx.serve import create_app
from boundctx.stores.postgres import PostgresStore
from boundctx.transcript.sample import write_sample

API = "/boundctx/v1/sessions"
#: What differs between the stores by design: a file's version is its inode's, a row's its
#: generation's; modification times are the file system's or the database's clock.
STORE_OWN = ("layout_version", "modified")


@pytest.fixture
def servers(tmp_path, postgres_db):
    """A server on a folder and one on the database, each with session ``s1`` holding
    the same seeded transcript (compactions, messages over the display budget)."""
    from boundctx.providers import ScriptedProvider

    from tests._support.running import Running

    sample = tmp_path / "sample.jsonl"
    write_sample(sample, target_bytes=150_000, big_every=9, big_bytes=(70_000, 90_000), compaction_every=11,
                 sync=False)
    folder = tmp_path / "sessions"
    folder.mkdir()
    shutil.copyfile(sample, folder / "s1.jsonl")
    with PostgresStore(postgres_db.url) as store:
        store.import_jsonl("s1", sample)
    started = []
    for where in (str(folder), postgres_db.url):
        app = create_app(ScriptedProvider(lambda request: "the answer"), host="127.0.0.1", sessions_dir=where,
                         settings={"serve.max_body_bytes": 1 << 20})
        running = Running(app)
        running.http = httpx.Client(base_url=running.url, timeout=20)
        started.append(running)
    yield started
    for running in started:
        running.http.close()
        running.stop()


def both(servers, method: str, path: str, **kw) -> dict:
    """The same request to both servers: the same status and body, but for what each store
    keeps its own way. The database's answer."""
    answers = [getattr(s.http, method)(path, **kw) for s in servers]
    files, rows = answers
    assert files.status_code == rows.status_code, (files.text, rows.text)
    a, b = _without_own(files.json()), _without_own(rows.json())
    assert a == b
    return rows.json()


def _without_own(value):
    if isinstance(value, dict):
        return {k: _without_own(v) for k, v in value.items() if k not in STORE_OWN}
    if isinstance(value, list):
        return [_without_own(v) for v in value]
    return value


def test_every_route_answers_as_it_does_for_files(servers):
    both(servers, "get", f"{API}")
    meta = both(servers, "get", f"{API}/s1")
    n = meta["message_count"]
    # Paged back from the newest, with the renderer's default budgets.
    before = None
    while True:
        page = both(servers, "get", f"{API}/s1/messages", params={} if before is None else {"message_before": before})
        if not page["has_more_before"]:
            break
        before = page["message_start"]
    both(servers, "get", f"{API}/s1/messages", params={"message_limit": 3, "content_limit": 100, "page_bytes": 500})
    both(servers, "get", f"{API}/s1/messages/{n - 1}")
    both(servers, "get", f"{API}/s1/messages/{n - 1}", params={"text_limit": 50, "text_offset": 10})
    both(servers, "get", f"{API}/s1/branches")
    # Writes, each followed by the window it leaves.
    body = {"type": "message", "message": {"role": "user", "content": "caf\u00e9 \u2028 \U0001F642"}}
    both(servers, "post", f"{API}/s1/messages", content=json.dumps(body).encode(),
         headers={"content-type": "application/json"})
    both(servers, "patch", f"{API}/s1/messages/3",
         json={"type": "message", "message": {"role": "assistant", "content": "edited"}})
    both(servers, "delete", f"{API}/s1/messages/0")
    both(servers, "delete", f"{API}/s1/messages/{n - 3}", params={"and_later": "true", "message_count": n})
    both(servers, "get", f"{API}/s1/messages", params={"message_limit": 20})
    # Titles, new sessions, a session continued from another.
    both(servers, "patch", f"{API}/s1", json={"title": "a title"})
    both(servers, "post", f"{API}", json={"id": "s2"})
    both(servers, "post", f"{API}", json={"id": "s3", "continue_from": "s1", "history": 6})
    both(servers, "get", f"{API}/s3/messages")
    both(servers, "get", f"{API}", params={"limit": 2})


def test_refusals_are_the_same(servers):
    version = servers[1].http.get(f"{API}/s1").json()["layout_version"]
    both(servers, "delete", f"{API}/s1/messages/1")
    rows = servers[1].http.get(f"{API}/s1/messages", params={"layout_version": version})
    assert rows.status_code == 409 and rows.json()["error"]["code"] == "stale_cursor"
    for path, kw in [(f"{API}/nobody", {}), (f"{API}/s1/messages", {"params": {"message_before": 10**6}}),
                     (f"{API}/s1/messages/999999", {})]:
        both(servers, "get", path, **kw)
    # A leaf no entry has: refused alike, each store saying why in its own words (a
    # session in rows is one branch).
    files, rows = (s.http.get(f"{API}/s1/messages", params={"leaf": "x"}) for s in servers)
    assert files.status_code == rows.status_code == 400
    assert {k: files.json()["error"][k] for k in ("code", "param")} == \
        {k: rows.json()["error"][k] for k in ("code", "param")} == {"code": "invalid_value", "param": "leaf"}
    both(servers, "post", f"{API}", json={"id": "s1"})
    both(servers, "post", f"{API}/s1/messages", content=b'{"no type": 1}',
         headers={"content-type": "application/json"})


def test_a_reply_on_a_session_is_saved_whole(servers):
    rows = servers[1]
    before = rows.http.get(f"{API}/s1").json()["message_count"]
    with httpx.stream("POST", f"{rows.url}{API}/s1/replies", json={"content": "a question"}, timeout=60) as r:
        assert r.status_code == 200
        events = [line for line in r.iter_lines() if line.startswith("event:")]
    assert events[-1] == "event: done"
    newest = rows.http.get(f"{API}/s1/messages", params={"message_limit": 2}).json()["messages"]
    assert [m["text"] for m in newest] == ["a question", "the answer"]
    assert rows.http.get(f"{API}/s1").json()["message_count"] == before + 2


def test_a_lost_database_is_a_503_and_the_server_recovers(servers, postgres_server):
    rows = servers[1]
    assert rows.http.get(f"{API}/s1/messages").status_code == 200
    postgres_server.kill()
    for method, path in [("get", f"{API}/s1/messages"), ("get", f"{API}"), ("post", f"{API}/s1/messages")]:
        kw = {"json": {"type": "message", "message": {"role": "user", "content": "x"}}} if method == "post" else {}
        r = getattr(rows.http, method)(path, **kw)
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "store_unavailable" and r.headers["retry-after"]
        assert "sessions database" in r.json()["error"]["message"]
    postgres_server.start()
    deadline = time.monotonic() + 60
    while rows.http.get(f"{API}/s1/messages").status_code == 503:
        assert time.monotonic() < deadline, "the server did not recover once the database was back"
        time.sleep(0.2)
    assert rows.http.get(f"{API}/s1/messages").status_code == 200


def test_a_window_request_is_one_statement_with_the_head_and_no_transaction(servers, monkeypatch):
    """The handler asks the session its version twice, its size and its count beside the
    window; on the database the window's lines come in one statement with the session's
    head, and those are answered from that head (decisions 0048 and 0050): no BEGIN and
    COMMIT round trips, no head of its own, and no ping of a quiet pooled connection. A
    page back from the newest is one statement too (its writability is the newest's)."""
    import psycopg

    rows = servers[1]
    statements = []
    real = psycopg.Connection.execute

    def counted(self, query, *args, **kwargs):
        statements.append(str(query).split()[0].upper() if str(query).strip() else "")
        return real(self, query, *args, **kwargs)

    rows.http.get(f"{API}/s1/messages")  # warm: the pool's connections made
    monkeypatch.setattr(psycopg.Connection, "execute", counted)
    page = rows.http.get(f"{API}/s1/messages", params={"message_limit": 3})
    assert page.status_code == 200 and len(page.json()["messages"]) == 3
    # The head with the lines, the compactions and the leaf; the long lines the page
    # keeps (this session has messages over the display budget).
    assert statements == ["WITH", "SELECT"], statements
    statements.clear()
    before = rows.http.get(f"{API}/s1/messages", params={"message_limit": 3,
                                                         "message_before": page.json()["message_start"]})
    assert before.status_code == 200 and before.json()["message_start"] == page.json()["message_start"] - 3
    assert statements[0] == "WITH" and statements.count("WITH") == 1, statements
