"""The sessions API on a real loopback server: listing, windows identical to the library's,
cursors refused after a rewrite (never after an append), lossless writes, and ids that
are never paths."""

import http.client
import json
import os

import httpx
import msgspec
import pytest

from boundctx.serve import create_app, session_stores
from boundctx.serve import sessions as sessions_module
from boundctx.transcript.dialects import display, display_kind
from boundctx.transcript.lineformat import encode_record
from boundctx.transcript.sample import write_sample
from boundctx.transcript.store import Transcript

API = "/boundctx/v1/sessions"


@pytest.fixture
def folder(tmp_path):
    d = tmp_path / "sessions"
    d.mkdir()
    return d


@pytest.fixture
def server(folder):
    from boundctx.providers import ScriptedProvider

    from tests._support.running import Running

    app = create_app(ScriptedProvider(lambda request: "unused"), settings={"serve.max_body_bytes": 1 << 20},
                     host="127.0.0.1", sessions_dir=str(folder))
    running = Running(app)
    running.http = httpx.Client(base_url=running.url, timeout=10)
    yield running
    running.http.close()
    running.stop()


def sample(folder, sid="s1", **kw):
    """A seeded transcript with compactions and messages longer than the 64 KiB default."""
    path = folder / f"{sid}.jsonl"
    write_sample(path, target_bytes=kw.pop("target_bytes", 400_000), big_every=9,
                 big_bytes=(70_000, 90_000), compaction_every=11, sync=False, **kw)
    return path


def library_window(path, **kw):
    """The library's window as the API sends it: each entry with how it reads for a
    person (``role``, ``text``, ``kind``, ``tool``) beside it."""
    with Transcript.open(path) as t:
        w = t.window(**kw)
    out = json.loads(msgspec.json.encode(w))
    for key in ("messages", "compactions"):
        for entry, data in zip(getattr(w, key), out[key]):
            data["role"], data["text"] = display(entry)
            data["kind"], data["tool"] = display_kind(entry)
    return out


def snapshot(*folders):
    out = {}
    for f in folders:
        for root, _dirs, files in os.walk(f):
            for name in files:
                p = os.path.join(root, name)
                with open(p, "rb") as fh:
                    out[p] = fh.read()
    return out


def raw(server, method, path, body=None):
    """A request whose path is sent byte for byte (httpx would normalise ``..``)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request(method, path, body=body, headers={"content-type": "application/json"} if body else {})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def assert_error(r, status, code=None):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) >= {"message", "type", "param", "code"} and err["message"]
    if code is not None:
        assert err["code"] == code, err


# -- list, create, get -----------------------------------------------------------------------


def test_create_get_and_list_newest_first_in_bounded_pages(server, folder):
    h = server.http
    r = h.post(API, json={"id": "alpha"})
    assert r.status_code == 201, r.text
    assert r.json()["id"] == "alpha" and r.json()["message_count"] == 0
    assert_error(h.post(API, json={"id": "alpha"}), 409, "session_exists")
    made = h.post(API)  # no body: a generated id
    assert made.status_code == 201 and sessions_module.SESSION_ID.fullmatch(made.json()["id"])
    sample(folder, "big")
    for i, sid in enumerate(["alpha", made.json()["id"], "big"]):
        os.utime(folder / f"{sid}.jsonl", ns=(10**18, 10**18 + i * 10**9))
    meta = h.get(f"{API}/big").json()
    with Transcript.open(folder / "big.jsonl") as t:
        assert (meta["message_count"], meta["compaction_count"]) == (t.message_count, t.compaction_count) \
            and t.compaction_count > 0
    assert meta["bytes"] == os.path.getsize(folder / "big.jsonl") and isinstance(meta["layout_version"], str)

    page = h.get(API, params={"limit": 2}).json()
    assert page["object"] == "list" and page["has_more"] is True
    assert [d["id"] for d in page["data"]] == ["big", made.json()["id"]]
    assert page["first_id"] == "big" and page["last_id"] == made.json()["id"]
    assert page["data"][0]["message_count"] == meta["message_count"]
    rest = h.get(API, params={"limit": 2, "after": page["last_id"]}).json()
    assert [d["id"] for d in rest["data"]] == ["alpha"] and rest["has_more"] is False
    assert_error(h.get(API, params={"limit": 0}), 400, "invalid_value")
    assert_error(h.get(API, params={"limit": 1001}), 400, "invalid_value")
    assert_error(h.get(API, params={"after": "nobody"}), 400, "invalid_cursor")
    assert_error(h.get(f"{API}/nobody"), 404, "session_not_found")


def test_a_session_that_cannot_be_opened_is_listed_with_its_error(server, folder, monkeypatch):
    sample(folder, "good", target_bytes=5_000)
    sample(folder, "bad", target_bytes=5_000)

    class Failing(Transcript):
        @classmethod
        def open(cls, path, **kw):
            if os.path.basename(path) == "bad.jsonl":
                raise PermissionError(13, "no")
            return Transcript.open(path, **kw)

    monkeypatch.setattr(session_stores, "Transcript", Failing)
    r = server.http.get(API)
    assert r.status_code == 200
    items = {d["id"]: d for d in r.json()["data"]}
    assert "error" in items["bad"] and items["bad"]["message_count"] is None
    assert "error" not in items["good"] and items["good"]["message_count"] > 0


# -- windows -------------------------------------------------------------------------------


def test_the_window_is_the_library_window(server, folder):
    path = sample(folder)
    with Transcript.open(path) as t:
        n = t.message_count
    # The defaults are the renderer preset's.
    got = server.http.get(f"{API}/s1/messages").json()
    version = got.pop("layout_version")
    # Beside the library's window: whether a reply can be saved to the session.
    assert (got.pop("writable"), got.pop("format")) == (True, "boundctx")
    assert got == library_window(path, message_limit=100, content_limit=65536, page_bytes=1 << 20) and version
    assert any(m["cut_bytes"] > 0 for m in got["messages"])
    for before, limit, content in [(n, 10, 100), (n // 2, 25, 0), (5, 100, 65536), (0, 3, 10),
                                   (n - 1, 1, 1 << 20), (7, 0, 500)]:
        r = server.http.get(f"{API}/s1/messages", params={
            "message_before": before, "message_limit": limit, "content_limit": content})
        body = r.json()
        assert body.pop("layout_version") == version
        del body["writable"], body["format"]
        assert body == library_window(path, message_before=before, message_limit=limit,
                                      content_limit=content, page_bytes=1 << 20), (before, limit, content)


def test_paging_back_to_the_start_shows_every_message_once_in_order(server, folder):
    path = sample(folder)
    seen, before, version = [], None, None
    while True:
        params = {"message_limit": 7, "content_limit": 200}
        if before is not None:
            params.update(message_before=before, layout_version=version)
        w = server.http.get(f"{API}/s1/messages", params=params).json()
        seen = [m["index"] for m in w["messages"]] + seen
        before, version = w["message_start"], w["layout_version"]
        if not w["has_more_before"]:
            break
    with Transcript.open(path) as t:
        assert seen == list(range(t.message_count))


def test_a_cursor_survives_an_append_but_not_a_rewrite(server, folder):
    sample(folder, target_bytes=50_000)
    h = server.http
    first = h.get(f"{API}/s1/messages", params={"message_limit": 5}).json()
    cursor = {"message_before": first["message_start"], "layout_version": first["layout_version"]}
    r = h.post(f"{API}/s1/messages", json={"type": "message", "message": {"role": "user", "content": "more"}})
    assert r.status_code == 201
    assert h.get(f"{API}/s1").json()["layout_version"] == first["layout_version"]
    assert h.get(f"{API}/s1/messages", params=cursor).status_code == 200

    edited = h.patch(f"{API}/s1/messages/2", json={"type": "message", "message": {"role": "user", "content": "e"}})
    assert edited.status_code == 200 and edited.json()["layout_version"] != first["layout_version"]
    assert_error(h.get(f"{API}/s1/messages", params=cursor), 409, "stale_cursor")
    cursor["layout_version"] = edited.json()["layout_version"]
    assert h.get(f"{API}/s1/messages", params=cursor).status_code == 200

    deleted = h.delete(f"{API}/s1/messages/0")
    assert deleted.status_code == 200 and deleted.json()["layout_version"] != cursor["layout_version"]
    assert_error(h.get(f"{API}/s1/messages", params=cursor), 409, "stale_cursor")
    # An edit aimed with an old version is refused before it can change the wrong message.
    before = snapshot(folder)
    assert_error(h.delete(f"{API}/s1/messages/0", params={"layout_version": cursor["layout_version"]}),
                 409, "stale_cursor")
    assert snapshot(folder) == before


# -- writes --------------------------------------------------------------------------------


def test_append_is_lossless_and_edit_and_delete_rewrite(server, folder):
    path = sample(folder, target_bytes=20_000)
    h = server.http
    with Transcript.open(path) as t:
        n = t.message_count
    old = path.read_bytes()
    body = ('{"type":"message","message":{"role":"user","content":"caf\\u00e9 \u2028 \U0001F642 1.5e3"},'
            '"n":12345678901234}')
    r = h.post(f"{API}/s1/messages", content=body.encode(), headers={"content-type": "application/json"})
    assert r.status_code == 201, r.text
    assert r.json()["message_count"] == n + 1
    assert path.read_bytes() == old + encode_record(json.loads(body))
    with Transcript.open(path) as t:
        assert t.window(message_before=n + 1, message_limit=1).messages[0].record == json.loads(body)
        assert r.json()["line"] == t.line_count - 1

    second = json.loads(path.read_bytes().splitlines()[2])  # message 1
    edit = {"type": "message", "message": {"role": "assistant", "content": "edited"}}
    r = h.patch(f"{API}/s1/messages/3", json=edit)
    assert r.status_code == 200 and r.json()["message_count"] == n + 1
    with Transcript.open(path) as t:
        assert t.window(message_before=4, message_limit=1).messages[0].record == edit
    r = h.delete(f"{API}/s1/messages/0")
    assert r.status_code == 200 and r.json()["message_count"] == n
    with Transcript.open(path) as t:
        assert t.window(message_before=1, message_limit=1).messages[0].record == second
    assert_error(h.patch(f"{API}/s1/messages/{n}", json=edit), 404, "message_not_found")


def test_and_later_deletes_a_message_and_everything_after_it_in_one_rewrite(server, folder):
    """An earlier question taken back to edit goes with every later message, in one
    rewrite checked against the version the page read; the flag is refused where it
    would mean nothing (an edit) or is not a yes or no."""
    path = sample(folder, target_bytes=20_000)
    h = server.http
    with Transcript.open(path) as t:
        n = t.message_count
        kept = [m.record for m in t.window(message_before=3, message_limit=3).messages]
    version = h.get(f"{API}/s1").json()["layout_version"]
    r = h.delete(f"{API}/s1/messages/3", params={"and_later": "true", "layout_version": version})
    assert r.status_code == 200, r.text
    assert r.json()["message_count"] == 3 < n and r.json()["layout_version"] != version
    with Transcript.open(path) as t:
        assert [m.record for m in t.window(message_before=3, message_limit=3).messages] == kept
    # the version read before is stale now: nothing more goes
    assert_error(h.delete(f"{API}/s1/messages/1", params={"and_later": "true", "layout_version": version}),
                 409, None)
    assert_error(h.delete(f"{API}/s1/messages/1", params={"and_later": "yes"}), 400, "invalid_value")
    edit = {"type": "message", "message": {"role": "user", "content": "edited"}}
    assert_error(h.patch(f"{API}/s1/messages/1", params={"and_later": "true"}, json=edit), 400, "invalid_value")
    assert_error(h.delete(f"{API}/s1/messages/3", params={"and_later": "true"}), 404, "message_not_found")
    # a message appended since the count the client saw is never deleted unseen
    h.post(f"{API}/s1/messages", json={"type": "message", "message": {"role": "user", "content": "new"}})
    assert_error(h.delete(f"{API}/s1/messages/1", params={"and_later": "true", "message_count": "3"}), 409,
                 "stale_cursor")
    assert_error(h.delete(f"{API}/s1/messages/1", params={"message_count": "4"}), 400, "invalid_value")
    r = h.delete(f"{API}/s1/messages/2", params={"and_later": "true", "message_count": "4"})
    assert r.status_code == 200 and r.json()["message_count"] == 2
    r = h.delete(f"{API}/s1/messages/1", params={"and_later": "false"})  # one message, as without the flag
    assert r.status_code == 200 and r.json()["message_count"] == 1


def test_one_message_whole_while_the_window_shows_it_cut(server, folder):
    path = sample(folder)
    w = server.http.get(f"{API}/s1/messages", params={"message_limit": 1000}).json()
    cut = next(m for m in w["messages"] if m["cut_bytes"] > 0)
    whole = server.http.get(f"{API}/s1/messages/{cut['index']}")
    assert whole.status_code == 200
    got = whole.json()
    assert got["cut_bytes"] == 0 and got["index"] == cut["index"]
    with Transcript.open(path) as t:
        full = t.window(message_before=cut["index"] + 1, message_limit=1).messages[0]
    assert got["record"] == full.record and got["length"] == full.length > 65536
    assert got["record"] != cut["record"]
    assert_error(server.http.get(f"{API}/s1/messages/{w['message_count']}"), 404, "message_not_found")


def test_a_long_message_comes_in_pages_of_its_text_that_join_to_the_whole(server, folder):
    path = sample(folder)
    w = server.http.get(f"{API}/s1/messages", params={"message_limit": 1000}).json()
    cut = next(m for m in w["messages"] if m["cut_bytes"] > 0)
    with Transcript.open(path) as t:
        full = t.window(message_before=cut["index"] + 1, message_limit=1).messages[0]
    role, text = display(full)
    pages, offset = [], 0
    while True:
        got = server.http.get(f"{API}/s1/messages/{cut['index']}",
                              params={"text_offset": offset, "text_limit": 10_000}).json()
        assert "record" not in got  # the record is the whole message: a page never carries it
        assert (got["role"], got["text_length"], got["text_offset"]) == (role, len(text), offset)
        assert len(got["text"]) <= 10_000 and got["layout_version"] == w["layout_version"]
        pages.append(got["text"])
        offset += len(got["text"])
        if offset >= got["text_length"]:
            break
    assert "".join(pages) == text and len(pages) == -(-len(text) // 10_000)
    one = f"{API}/s1/messages/{cut['index']}"
    assert_error(server.http.get(one, params={"text_offset": len(text) + 1, "text_limit": 5}), 400, "invalid_value")
    assert_error(server.http.get(one, params={"text_offset": 5}), 400, "invalid_value")
    assert_error(server.http.get(one, params={"text_limit": 0}), 400, "invalid_value")
    assert_error(server.http.get(one, params={"text_limit": (1 << 20) + 1}), 400, "invalid_value")


def test_a_locked_session_answers_409_with_retry_after(server, folder):
    path = sample(folder, target_bytes=5_000)
    rec = {"type": "message", "message": {"role": "user", "content": "x"}}
    with Transcript.open(path) as holder:
        holder.append(rec)  # takes the write lock and keeps it until close
        before = path.read_bytes()
        r = server.http.post(f"{API}/s1/messages", json=rec)
        assert_error(r, 409, "session_locked")
        assert r.headers["retry-after"]
        assert_error(server.http.patch(f"{API}/s1/messages/0", json=rec), 409, "session_locked")
        assert path.read_bytes() == before
    assert server.http.post(f"{API}/s1/messages", json=rec).status_code == 201


def test_an_append_waits_for_a_writer_that_lets_go_soon(server, folder):
    # Another writer's append (an agent, another server process) holds the lock for a
    # moment: the API append waits its turn rather than refusing.
    import threading

    path = sample(folder, target_bytes=5_000)
    rec = {"type": "message", "message": {"role": "user", "content": "x"}}
    holder = Transcript.open(path)
    holder.append(rec)
    count = holder.message_count
    threading.Timer(0.3, holder.close).start()
    r = server.http.post(f"{API}/s1/messages", json=rec)
    assert r.status_code == 201 and r.json()["message_count"] == count + 1


# -- refusals --------------------------------------------------------------------------------


def test_bad_input_is_a_clear_4xx_and_touches_nothing(server, folder, tmp_path):
    sample(folder, target_bytes=20_000)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.jsonl").write_bytes(encode_record({"type": "message", "message": {"content": "s"}}))
    os.symlink(outside / "secret.jsonl", folder / "link.jsonl")
    os.symlink(outside, folder / "dirlink.jsonl")
    os.mkdir(folder / "adir.jsonl")
    h = server.http
    h.post(f"{API}/s1/messages", json={"type": "message"})  # the lock file and sidecar exist from here
    before = snapshot(folder, outside)
    count = h.get(f"{API}/s1").json()["message_count"]
    msgs = f"{API}/s1/messages"

    for method, path in [("GET", f"{API}/../x"), ("GET", f"{API}/%2e%2e"), ("GET", f"{API}/%2e%2e/messages"),
                         ("GET", f"{API}/..%2Fs1"), ("GET", f"{API}/%2Ftmp%2Fx"), ("GET", f"{API}/s1.jsonl"),
                         ("GET", f"{API}/s%201"), ("POST", f"{API}/..%2F..%2Fx/messages"),
                         ("GET", f"{API}/{'a' * 129}"), ("GET", f"{API}/link"), ("GET", f"{API}/link/messages"),
                         ("POST", f"{API}/link/messages"), ("DELETE", f"{API}/link/messages/0"),
                         ("GET", f"{API}/dirlink"), ("GET", f"{API}/adir"), ("GET", f"{API}/s1/x/y"),
                         ("PUT", f"{API}/link/messages/0")]:
        status, body = raw(server, method, path, b'{"type":"message"}' if method == "POST" else None)
        assert status in (400, 404, 405), (method, path, status)
        assert json.loads(body)["error"]["message"], path
    for sid in ["../x", "/etc/passwd", "a.b", "", "x" * 129, 5]:
        r = h.post(API, json={"id": sid})
        assert_error(r, 400, "invalid_session_id")

    bad_windows = [{"message_before": -1}, {"message_before": count + 1}, {"message_limit": -3},
                   {"message_limit": 1001}, {"content_limit": "1.5"}, {"message_before": "abc"},
                   {"message_limit": " 5"}, {"content_limit": 10**30}, {"message_before": "٣"}]
    for params in bad_windows:
        r = h.get(msgs, params=params)
        assert_error(r, 400, "invalid_value")
        assert r.json()["error"]["param"] == next(iter(params)), params
    for index in ["-1", "x", "1.0"]:
        assert_error(h.get(f"{msgs}/{index}"), 400, "invalid_value")
    for body in [b"[1,2]", b'"text"', b"{}", b'{"type": 5}', b'{"type":"m","x":NaN}', b'{"type":"m","x":1e999}',
                 b"{not json", b"", b'{"type":"m","x":Infinity}']:
        r = h.post(msgs, content=body, headers={"content-type": "application/json"})
        assert r.status_code == 400, (body, r.text)
        r = h.patch(f"{msgs}/0", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 400, (body, r.text)
    assert h.post(msgs, content=b"{" + b" " * (1 << 20) + b"}").status_code == 413
    for body in [b"[1]", b"{bad", b'{"id": "../x"}']:
        assert h.post(API, content=body).status_code == 400

    # The list shows no file the ids cannot reach (a symlink out, a folder).
    assert [d["id"] for d in h.get(API).json()["data"]] == ["s1"]
    assert snapshot(folder, outside) == before
    assert h.get(f"{API}/s1").json()["message_count"] == count  # still serving


@pytest.mark.parametrize("name, writable, dialect", [
    ("claude-code-sessions/4d5611e5-241a-462a-8d15-5122611a9569.jsonl", False, "claude-code"),
    ("codex-sessions/rollout-2026-05-11T11-26-55-019e1625-789d-76c0-80ab-3724b5ddb799.jsonl", False, "codex"),
])
def test_a_window_says_whether_replies_can_be_saved_to_the_session(server, folder, shared_file, name, writable,
                                                                  dialect):
    import shutil

    shutil.copyfile(shared_file(name), folder / "agent.jsonl")
    sample(folder, "own", target_bytes=5_000)
    w = server.http.get(f"{API}/agent/messages", params={"message_limit": 5}).json()
    assert (w["writable"], w["format"]) == (writable, dialect)
    own = server.http.get(f"{API}/own/messages", params={"message_limit": 5}).json()
    assert own["writable"] is True
    (folder / "empty.jsonl").touch()
    assert server.http.get(f"{API}/empty/messages").json()["writable"] is True  # a new session is boundctx's


def test_a_session_is_titled_by_its_first_question_until_a_title_is_set(server, folder):
    h = server.http
    with Transcript.open(str(folder / "t.jsonl"), create=True) as t:
        t.append({"type": "message", "message": {"role": "system", "content": "be brief"}})
        t.append({"type": "message", "message": {"role": "user", "content": "\n  Why does   the build fail?\nlog..."}})
    (folder / "empty.jsonl").touch()
    got = h.get(f"{API}/t").json()
    assert (got["title"], got["title_source"]) == ("Why does the build fail?", "first_question")
    assert h.get(f"{API}/empty").json()["title"] is None
    # A long first line is cut at 80 characters, said with an ellipsis.
    with Transcript.open(str(folder / "long.jsonl"), create=True) as t:
        t.append({"type": "message", "message": {"role": "user", "content": "x" * 500}})
    assert h.get(f"{API}/long").json()["title"] == "x" * 79 + "…"
    # Set, listed, cleared; the transcript itself is never written.
    before = (folder / "t.jsonl").read_bytes()
    r = h.patch(f"{API}/t", json={"title": "  Build failure, step 377  "})
    assert r.status_code == 200 and (r.json()["title"], r.json()["title_source"]) == ("Build failure, step 377", "set")
    listed = {d["id"]: d for d in h.get(API).json()["data"]}
    assert listed["t"]["title"] == "Build failure, step 377" and listed["long"]["title_source"] == "first_question"
    assert (folder / "t.jsonl").read_bytes() == before
    assert h.patch(f"{API}/t", json={"title": ""}).json()["title"] == "Why does the build fail?"
    assert not (folder / "t.title").exists()
    # Refused: not a session, unknown fields, too long, more than one line, not JSON.
    assert_error(h.patch(f"{API}/nope", json={"title": "x"}), 404, "session_not_found")
    assert_error(h.patch(f"{API}/t", json={"title": "x", "colour": "red"}), 400, "invalid_json")
    assert_error(h.patch(f"{API}/t", json={"title": "x" * 201}), 400, "invalid_value")
    assert_error(h.patch(f"{API}/t", json={"title": "two\nlines"}), 400, "invalid_value")
    assert_error(h.patch(f"{API}/t", content=b"{"), 400, "invalid_json")
    assert not (folder / "t.title").exists()


def test_a_new_session_continues_another_agents_session_with_its_newest_messages(server, folder, shared_file):
    import shutil

    from boundctx.transcript.chat import chat_messages, history_start

    h = server.http
    src = folder / "agent.jsonl"
    shutil.copyfile(shared_file("claude-code-sessions/4d5611e5-241a-462a-8d15-5122611a9569.jsonl"), src)
    before = src.read_bytes()
    r = h.post(API, json={"id": "next", "continue_from": "agent", "history": 20})
    assert r.status_code == 201, r.text
    got = r.json()
    assert got["continued"]["from"] == "agent" and 0 < got["continued"]["messages"] <= 20
    assert got["title"].endswith("(continued)") and got["message_count"] == got["continued"]["messages"]
    # The new session holds, in boundctx's own lines, what a reply on the old one would read.
    with Transcript.open(str(src)) as t:
        n = t.message_count
        start = history_start(n, 20)  # where a reply's history starts (it moves in half steps)
        expected = chat_messages(t.window(message_before=n, message_limit=n - start, content_limit=None)).messages
    with Transcript.open(str(folder / "next.jsonl")) as t:
        w = t.window(message_limit=100, content_limit=None)
        assert [m.record["type"] for m in w.messages] == ["message"] * len(w.messages)
        assert chat_messages(w).messages == expected and len(expected) == got["continued"]["messages"]
    assert h.get(f"{API}/next/messages").json()["writable"] is True
    assert src.read_bytes() == before  # the agent's file is as it was
    # Refused: a session that is not there (nothing created), a bad history, a taken id.
    assert_error(h.post(API, json={"id": "x1", "continue_from": "nope"}), 404, "session_not_found")
    assert not (folder / "x1.jsonl").exists()
    assert_error(h.post(API, json={"id": "x2", "continue_from": "agent", "history": 0}), 400, "invalid_value")
    assert_error(h.post(API, json={"id": "x3", "continue_from": 5}), 400, "invalid_value")
    assert_error(h.post(API, json={"id": "x4", "history": 20}), 400, "invalid_value")  # nothing to carry over
    assert not (folder / "x4.jsonl").exists()
    assert_error(h.post(API, json={"id": "next", "continue_from": "agent"}), 409, "session_exists")


def test_a_file_judged_a_transcript_is_read_for_it_once_until_it_is_rewritten(folder, monkeypatch):
    """A window asks whether a reply could be saved to the session: a file's first lines
    are read for it once, and again only after a rewrite (a new file at the path), or
    while the file has too few lines for an append to leave the verdict alone."""
    from boundctx.transcript.chat import FIRST_LINES, writable_style

    store = session_stores.FolderSessions(folder)
    judged = []
    real = session_stores.refuse_unless_transcript
    monkeypatch.setattr(session_stores, "refuse_unless_transcript", lambda t: (judged.append(1), real(t))[1])

    def judge(sid):
        with store.open(sid) as t:
            on = store.writes_into(t)
            if on is not None:
                writable_style(t.window(message_limit=1), transcript=on)  # raises for no transcript

    sample(folder, "s1", target_bytes=20_000)
    with Transcript.open(str(folder / "s1.jsonl")) as t:
        assert t.line_count >= FIRST_LINES
    for _ in range(3):
        judge("s1")
    assert len(judged) == 1
    # Rewritten into something that is no transcript: a new file, judged again, refused.
    other = folder / "png.tmp"
    other.write_bytes(b"\x89PNG\r\n\x1a\n" + b"x\n" * FIRST_LINES)
    os.replace(other, folder / "s1.jsonl")
    with pytest.raises(ValueError, match="does not look like a transcript"):
        judge("s1")
    assert len(judged) == 2
    # Blank lines only, fewer than FIRST_LINES: no verdict yet, so each read judges again,
    # and the line an append adds decides.
    (folder / "few.jsonl").write_bytes(b"\n\n")
    judge("few")
    with open(folder / "few.jsonl", "ab") as f:
        f.write(b"%PDF-1.7\n")
    with pytest.raises(ValueError, match="a PDF document"):
        judge("few")
    assert len(judged) == 4


def test_pages_back_from_the_newest_are_judged_writable_without_reading_the_newest_again(folder, monkeypatch):
    """A window says whether a reply could be saved, judged by the session's newest
    message. The pages a client reads back from the newest use the verdict the newest
    window found; an append, which may change the newest message, is judged again."""
    from boundctx import config
    from boundctx.serve.settings import LiveSettings

    sample(folder, "s1", target_bytes=20_000)
    handler = sessions_module.Sessions(folder, LiveSettings(config.load(env={})))
    reads = []
    real = Transcript.window
    monkeypatch.setattr(Transcript, "window", lambda self, **kw: (reads.append(kw), real(self, **kw))[1])

    newest = handler.window("s1", {"message_limit": "5"})
    assert (newest["writable"], newest["format"]) == (True, "boundctx") and len(reads) == 1
    page = handler.window("s1", {"message_limit": "5", "message_before": str(newest["message_start"])})
    assert (page["writable"], page["format"]) == (True, "boundctx")
    assert len(reads) == 2  # the page alone, not the newest message again
    # A Claude Code record appended by another program: the next page is judged anew.
    with open(folder / "s1.jsonl", "ab") as f:
        f.write(encode_record({"type": "user", "uuid": "u1", "message": {"role": "user", "content": "hi"}}))
    page = handler.window("s1", {"message_limit": "5", "message_before": str(newest["message_start"])})
    assert len(reads) == 4 and page["writable"] is False and page["format"] == "claude-code"
