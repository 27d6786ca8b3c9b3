"""boundctx serve at its edges: requests from other web pages, an edit racing a rewrite
by another process, HEAD on routes that write, bodies nested deep or carrying fields
nobody reads, settings that would unbound a window, Starlette's own refusals, and the
server's paths kept out of what clients see."""

import json
import os
import subprocess
import sys
import textwrap
import threading

import httpx
import pytest

from boundctx.providers import ScriptedProvider
from boundctx.serve import sessions as sessions_module
from boundctx.serve.http import ApiError
from boundctx.serve.sessions import CONTENT_LIMIT_MAX, MESSAGE_LIMIT_MAX
from boundctx.transcript.lineformat import encode_record
from boundctx.transcript.store import Transcript

from tests._support import without_notice
from tests._support.scripted import MODEL, settings

API = "/boundctx/v1/sessions"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def message(text, role="user"):
    return {"type": "message", "message": {"role": role, "content": text}}


def seeded(folder, sid, n):
    folder.mkdir(exist_ok=True)
    path = folder / f"{sid}.jsonl"
    path.write_bytes(b"".join(encode_record(message(f"m{i}")) for i in range(n)))
    return path


def texts(path):
    return [json.loads(line)["message"]["content"] for line in path.read_bytes().splitlines()]


@pytest.fixture
def server(serve, tmp_path):
    return serve(ScriptedProvider(lambda r: "fine"), settings=settings(), model_id=MODEL,
                 sessions_dir=str(tmp_path / "sessions"))


# -- requests from other web pages ---------------------------------------------------------


def test_a_request_from_another_sites_page_is_refused_whatever_its_content_type(server, tmp_path):
    folder = tmp_path / "sessions"
    path = seeded(folder, "s1", 2)
    before = path.read_bytes()
    evil = {"Origin": "https://evil.example"}
    for method, url, body, ctype in [
            ("POST", API, b'{"id": "evil"}', "text/plain"),
            ("POST", API, b"id=evil", "application/x-www-form-urlencoded"),
            ("POST", f"{API}/s1/messages", json.dumps(message("planted")).encode(), "text/plain"),
            ("PATCH", f"{API}/s1/messages/0", json.dumps(message("changed")).encode(), "application/json"),
            ("DELETE", f"{API}/s1/messages/0", None, None),
            ("POST", f"{API}/s1/replies", b'{"content": "hi"}', "text/plain"),
            ("POST", "/v1/chat/completions", json.dumps({"model": MODEL, "messages": [
                {"role": "user", "content": "hi"}]}).encode(), "text/plain"),
            ("PATCH", "/boundctx/v1/settings", b'{"chat.temperature": 1.5}', "text/plain"),
            ("GET", f"{API}/s1/messages", None, None)]:
        headers = {**evil, **({"content-type": ctype} if ctype else {})}
        r = httpx.request(method, server.url + url, content=body, headers=headers)
        assert r.status_code == 403, (method, url, r.text)
        assert r.json()["error"]["code"] == "origin_not_allowed"
        assert "serve.cors_origins" in r.json()["error"]["message"]
    for origin in ("null", "http://127.0.0.1:1", f"https://127.0.0.1:{server.port}x", "file://"):
        r = httpx.post(server.url + API, json={"id": "evil"}, headers={"Origin": origin})
        assert r.status_code == 403, origin
    assert [n for n in os.listdir(folder) if n.endswith(".jsonl")] == ["s1.jsonl"]
    assert path.read_bytes() == before
    assert httpx.get(server.url + "/boundctx/v1/settings").json()["data"]  # still serving


def test_the_servers_own_page_and_configured_origins_are_served(serve, tmp_path):
    server = serve(ScriptedProvider(lambda r: "fine"), model_id=MODEL, sessions_dir=str(tmp_path / "s"),
                   settings=settings(**{"serve.cors_origins": "http://localhost:3000"}))
    own = {"Origin": server.url}
    assert httpx.post(server.url + API, json={"id": "a"}, headers=own).status_code == 201
    # The same page reached as localhost, and through a proxy that names the public host.
    assert httpx.post(server.url + API, json={"id": "b"},
                      headers={"Origin": f"http://localhost:{server.port}",
                               "Host": f"localhost:{server.port}"}).status_code == 201
    assert httpx.post(server.url + API, json={"id": "c"},
                      headers={"Origin": "https://chat.example", "X-Forwarded-Host": "chat.example"}
                      ).status_code == 201
    listed = httpx.post(server.url + API, json={"id": "d"}, headers={"Origin": "http://localhost:3000"})
    assert listed.status_code == 201 and listed.headers["access-control-allow-origin"] == "http://localhost:3000"
    assert httpx.post(server.url + API, json={"id": "e"}).status_code == 201  # no Origin: not a browser


# -- an edit racing a rewrite by another process ---------------------------------------------


REWRITER = textwrap.dedent("""
    import sys
    from boundctx.transcript.store import Transcript
    t = Transcript.open(sys.argv[1])
    t.append({"type": "message", "message": {"role": "user", "content": "held"}})  # holds the write lock
    print("holding", flush=True)
    sys.stdin.readline()
    t.delete(0)  # every later message moves up by one
    t.close()
    print("done", flush=True)
""")


@pytest.mark.parametrize("method", ["PATCH", "DELETE"])
def test_an_edit_whose_cursor_was_checked_before_a_rewrite_by_another_process_is_refused(server, tmp_path,
                                                                                         method):
    """The edit's cursor is good when it arrives; another process then rewrites the
    session while the edit waits for the write lock. The edit must not land on the
    message that moved into its index."""
    folder = tmp_path / "sessions"
    path = seeded(folder, "s1", 5)
    version = httpx.get(f"{server.url}{API}/s1/messages").json()["layout_version"]
    rewriter = subprocess.Popen([sys.executable, "-c", REWRITER, str(path)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert rewriter.stdout.readline().strip() == "holding"
        result = {}

        def edit():
            url = f"{server.url}{API}/s1/messages/2?layout_version={version}"
            body = json.dumps(message("edited m2")).encode() if method == "PATCH" else None
            result["r"] = httpx.request(method, url, content=body, timeout=30)

        thread = threading.Thread(target=edit)
        thread.start()
        threading.Event().wait(0.3)  # the edit is in, waiting for the lock (it waits up to 1 s)
        rewriter.stdin.write("go\n")
        rewriter.stdin.flush()
        assert rewriter.stdout.readline().strip() == "done"
        thread.join(30)
    finally:
        rewriter.kill()
        rewriter.wait(10)
        rewriter.stdin.close()
        rewriter.stdout.close()
    r = result["r"]
    assert r.status_code == 409, r.text
    assert r.json()["error"]["code"] == "stale_cursor"
    # m0 went (the other process's delete); nothing else changed: m3 was not edited or deleted.
    assert texts(path) == ["m1", "m2", "m3", "m4", "held"]


def test_an_edit_with_a_current_cursor_changes_exactly_its_message(server, tmp_path):
    path = seeded(tmp_path / "sessions", "s1", 4)
    version = httpx.get(f"{server.url}{API}/s1/messages").json()["layout_version"]
    r = httpx.patch(f"{server.url}{API}/s1/messages/1?layout_version={version}", json=message("new m1"))
    assert r.status_code == 200 and r.json()["layout_version"] != version
    assert texts(path) == ["m0", "new m1", "m2", "m3"]
    r = httpx.delete(f"{server.url}{API}/s1/messages/9?layout_version={r.json()['layout_version']}")
    assert r.status_code == 404 and r.json()["error"]["code"] == "message_not_found"


# -- HEAD, deep bodies, unknown fields, Starlette's refusals --------------------------------


def test_head_reads_and_never_writes(server, tmp_path):
    folder = tmp_path / "sessions"
    path = seeded(folder, "s1", 2)
    before = path.read_bytes()
    for url in (API, f"{API}/s1", f"{API}/s1/messages", f"{API}/s1/messages/0"):
        r = httpx.head(server.url + url)
        assert r.status_code == 200, url
    assert sorted(n for n in os.listdir(folder) if n.endswith(".jsonl")) == ["s1.jsonl"]
    assert path.read_bytes() == before


def test_deeply_nested_bodies_are_a_400_in_the_apis_shape(server):
    deep = b"[" * 100_000 + b"]" * 100_000
    deep_object = b'{"a":' * 50_000 + b"1" + b"}" * 50_000
    for url, method in ((API, "POST"), ("/boundctx/v1/settings", "PATCH"), (f"{API}/x/replies", "POST"),
                        ("/v1/chat/completions", "POST"), ("/boundctx/v1/count", "POST")):
        for body in (deep, deep_object):
            r = httpx.request(method, server.url + url, content=body, headers={"content-type": "application/json"})
            assert 400 <= r.status_code < 500, (url, r.status_code, r.text[:200])
            assert r.json()["error"]["message"], url
    assert httpx.get(server.url + "/health").status_code == 200


def test_an_unknown_field_in_boundctxs_own_bodies_is_refused(server, tmp_path):
    r = httpx.post(server.url + API, json={"Id": "work"})
    assert r.status_code == 400 and "Id" in r.json()["error"]["message"]
    assert not os.path.exists(tmp_path / "sessions") or os.listdir(tmp_path / "sessions") == []
    assert httpx.post(server.url + API, json={"id": "work"}).status_code == 201


def test_starlettes_own_refusals_are_in_the_apis_error_shape(serve, tmp_path):
    server = serve(ScriptedProvider(lambda r: "x"), settings=settings(), model_id=MODEL, api_keys={"k"},
                   sessions_dir=str(tmp_path / "s"))
    auth = {"Authorization": "Bearer k"}
    for method, url in (("DELETE", "/v1/models"), ("OPTIONS", "/v1/chat/completions"),
                        ("PUT", "/boundctx/v1/settings"), ("GET", "/v1/chat/completions")):
        r = httpx.request(method, server.url + url, headers=auth)
        assert r.status_code == 405, (method, url)
        assert r.headers["content-type"] == "application/json"
        assert r.json()["error"]["code"] == "method_not_allowed" and r.headers["allow"]
    r = httpx.get(server.url + "/v2/nothing", headers=auth)
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


# -- settings that would unbound a window ------------------------------------------------------


def test_a_plain_window_is_bounded_whatever_the_settings_say(server, tmp_path):
    seeded(tmp_path / "sessions", "s1", MESSAGE_LIMIT_MAX + 50)
    for key, value in (("transcript.window_messages", MESSAGE_LIMIT_MAX * 10),
                       ("transcript.window_content_bytes", CONTENT_LIMIT_MAX * 10)):
        r = httpx.patch(server.url + "/boundctx/v1/settings", json={key: value})
        assert r.status_code == 400 and r.json()["error"]["param"] == key
    w = httpx.get(f"{server.url}{API}/s1/messages").json()
    assert len(w["messages"]) <= MESSAGE_LIMIT_MAX and w["content_limit"] <= CONTENT_LIMIT_MAX


def test_window_defaults_past_the_routes_caps_are_held_to_them(tmp_path):
    """The route's own guard, met with settings no check has seen (a library user
    handing Sessions values of their own)."""
    from boundctx.config import Settings, load
    from boundctx.serve.settings import LiveSettings

    path = seeded(tmp_path / "sessions", "s1", MESSAGE_LIMIT_MAX + 5)
    # Over the defaults (Settings hold every key: their typed views are built from them),
    # by hand, so no check sees these.
    values = {**load(env={}), "serve.max_body_bytes": 1 << 20, "transcript.window_messages": MESSAGE_LIMIT_MAX * 3,
              "transcript.window_content_bytes": CONTENT_LIMIT_MAX * 3}
    s = sessions_module.Sessions(str(path.parent), LiveSettings(Settings(values, dict.fromkeys(values, "test"))))
    w = s.window("s1", {})
    assert len(w["messages"]) == MESSAGE_LIMIT_MAX and w["content_limit"] == CONTENT_LIMIT_MAX


# -- the server's paths stay on the server -----------------------------------------------------


def test_errors_and_the_session_list_name_sessions_not_the_servers_paths(server, tmp_path, monkeypatch):
    folder = tmp_path / "sessions"
    seeded(folder, "s1", 1)
    seeded(folder, "s2", 1)
    from boundctx.errors import TranscriptChanged, TranscriptPermission

    real_open = Transcript.open

    def failing(path, *a, **kw):
        if str(path).endswith("s2.jsonl"):
            raise TranscriptPermission(13, f"cannot open transcript {str(path)!r}: permission denied")
        return real_open(path, *a, **kw)

    monkeypatch.setattr(Transcript, "open", staticmethod(failing))
    listed = httpx.get(server.url + API).text
    assert "permission denied" in listed and str(folder) not in listed and str(tmp_path) not in listed

    def changed(self, *a, **kw):
        raise TranscriptChanged(f"{self.path!r} was replaced by another file just before the append")

    monkeypatch.setattr(Transcript, "append", changed)
    r = httpx.post(f"{server.url}{API}/s1/messages", json=message("x"))
    assert r.status_code == 409 and "s1.jsonl" in r.text and str(tmp_path) not in r.text


# -- large bodies are parsed off the event loop ------------------------------------------------


def test_a_large_chat_body_is_parsed_in_a_worker_thread_not_on_the_event_loop(server, monkeypatch):
    from boundctx.serve import requests as requests_module

    seen = []
    real = requests_module.check_messages

    def recording(messages):
        seen.append((len(messages), threading.current_thread() is server.thread))
        return real(messages)

    monkeypatch.setattr(requests_module, "check_messages", recording)
    small = [{"role": "user", "content": "hi"}]
    big = [{"role": "user", "content": f"message {i}"} for i in range(20_000)]
    for messages in (small, big):
        httpx.post(server.url + "/v1/chat/completions", json={"model": MODEL, "messages": messages,
                                                              "max_tokens": 4}, timeout=60)
    assert seen == [(1, True), (20_000, False)]


# -- a symlink swapped in and out at a session's name -----------------------------------------


SWAPPER = textwrap.dedent("""
    import os, sys, time
    name, keep, victim, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    os.link(name, keep)  # the session's file stays reachable under another name
    end, n = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        os.symlink(victim, name + ".l")
        os.replace(name + ".l", name)  # the name now leads out of the folder
        os.link(keep, name + ".h")
        os.replace(name + ".h", name)  # and back to the session's own file
        n += 1
    print(n, flush=True)
""")


def test_a_symlink_swapped_in_and_out_under_requests_never_sends_a_write_outside(server, tmp_path):
    folder, outside = tmp_path / "sessions", tmp_path / "outside"
    outside.mkdir()
    seeded(folder, "s1", 3)
    victim = seeded(outside, "victim", 2)
    before = victim.read_bytes()
    swapper = subprocess.Popen([sys.executable, "-c", SWAPPER, str(folder / "s1.jsonl"), str(folder / "keep"),
                                str(victim), "3"], stdout=subprocess.PIPE, text=True)
    statuses = []

    def client():
        with httpx.Client(base_url=server.url, timeout=30) as http:
            while swapper.poll() is None:
                statuses.append(http.post(f"{API}/s1/messages", json=message("appended")).status_code)
                statuses.append(http.get(f"{API}/s1", params={"message_limit": 2}).status_code)
                statuses.append(http.delete(f"{API}/s1/messages/0").status_code)

    clients = [threading.Thread(target=client) for _ in range(4)]
    for c in clients:
        c.start()
    for c in clients:
        c.join(60)
    swaps = int(swapper.stdout.read())
    swapper.stdout.close()
    assert swaps > 100 and len(statuses) > 30
    assert set(statuses) <= {200, 201, 404, 409}, sorted(set(statuses))
    assert sorted(os.listdir(outside)) == ["victim.jsonl"]
    assert victim.read_bytes() == before


def test_a_symlink_swapped_in_just_before_the_open_sends_nothing_outside(server, tmp_path, monkeypatch):
    """The swap at the worst moment, every time: after the request was routed to an
    existing session, just before its file is opened."""
    folder, outside = tmp_path / "sessions", tmp_path / "outside"
    outside.mkdir()
    path = seeded(folder, "s1", 3)
    victim = seeded(outside, "victim", 2)
    before = victim.read_bytes()
    real_open = Transcript.open

    def swap_then_open(name, *a, **kw):
        if os.path.basename(str(name)) == "s1.jsonl" and not os.path.islink(path):
            os.replace(path, folder / "aside")
            os.symlink(victim, path)
        return real_open(name, *a, **kw)

    monkeypatch.setattr(Transcript, "open", staticmethod(swap_then_open))
    for method, url, body in (("POST", f"{API}/s1/messages", message("x")), ("GET", f"{API}/s1/messages", None),
                              ("PATCH", f"{API}/s1/messages/0", message("y")), ("DELETE", f"{API}/s1/messages/0", None),
                              ("GET", f"{API}/s1", None), ("GET", API, None)):
        r = httpx.request(method, server.url + url, json=body)
        assert r.status_code in (200, 404), (method, url, r.status_code, r.text)
        if os.path.islink(path):
            os.unlink(path)
        os.replace(folder / "aside", path)
    assert sorted(os.listdir(outside)) == ["victim.jsonl"]
    assert victim.read_bytes() == before


# -- a session reply reads its history within a byte bound --------------------------------------


def test_a_session_reply_reads_its_history_within_a_byte_bound_and_says_what_it_left(serve, tmp_path):
    seen = []

    def respond(request):
        seen.append([m["content"] for m in request.messages])
        return "ok"

    folder = tmp_path / "sessions"
    resolved = settings(**{"analysis.max_source_chars": 1000})
    server = serve(ScriptedProvider(respond, context_window=1 << 16), model_id=MODEL, sessions_dir=str(folder),
                   settings=resolved)
    budget = sessions_module.history_bytes(resolved)
    folder.mkdir(exist_ok=True)
    lines = [encode_record(message(f"{i:02d} " + "x" * 997)) for i in range(20)]
    (folder / "s1.jsonl").write_bytes(b"".join(lines))
    fits = budget // len(lines[0])
    with httpx.stream("POST", f"{server.url}{API}/s1/replies", json={"content": "and?", "history": 50,
                                                                        "save": False}, timeout=60) as r:
        assert r.status_code == 200
        data = [line for line in r.iter_lines() if line.startswith("data: ")]
    opening = json.loads(data[0][6:])
    assert opening["history_messages"] == fits
    assert any(f"{20 - fits} of the newest 20 messages were not read" in n for n in opening["notices"])
    sent = [without_notice(text)[:2] for text in seen[-1] if text.endswith("x" * 10)]
    assert sent == [f"{i:02d}" for i in range(20 - fits, 20)]  # the newest, in order
    # and those left out are one search away: the notice opens the history sent
    assert seen[-1][0].startswith(f"({20 - fits} earlier messages of this conversation are not shown.")


TWO_REWRITES = textwrap.dedent("""
    import sys
    from boundctx.transcript.store import Transcript
    for _ in range(2):
        with Transcript.open(sys.argv[1]) as t:
            t.delete(0)
""")


@pytest.mark.parametrize("method", ["PATCH", "DELETE"])
def test_a_cursor_from_before_two_rewrites_is_stale_though_the_inode_number_came_back(server, tmp_path, method):
    """A rewrite frees the old file's inode number and ext4 hands it to the next
    rewrite's file: after two rewrites by another process the session has its old
    number again. The edit must still see the cursor is stale."""
    folder = tmp_path / "sessions"
    path = seeded(folder, "s1", 6)
    assert httpx.delete(f"{server.url}{API}/s1/messages/5").status_code == 200  # one rewrite already
    version = httpx.get(f"{server.url}{API}/s1/messages").json()["layout_version"]
    inode = os.stat(path).st_ino
    subprocess.run([sys.executable, "-c", TWO_REWRITES, str(path)], check=True, cwd=ROOT, timeout=60)
    assert texts(path) == ["m2", "m3", "m4"]
    reused = os.stat(path).st_ino == inode  # on ext4, always: what the inode alone could not tell
    body = json.dumps(message("edited m2")).encode() if method == "PATCH" else None
    r = httpx.request(method, f"{server.url}{API}/s1/messages/2?layout_version={version}", content=body)
    assert r.status_code == 409, (r.status_code, r.text, f"inode number reused: {reused}")
    assert r.json()["error"]["code"] == "stale_cursor"
    assert texts(path) == ["m2", "m3", "m4"]
    assert httpx.get(f"{server.url}{API}/s1/messages", params={"layout_version": version}).status_code == 409


# -- what the server-edges campaign found, each at its exact moment -----------------------------


def test_an_edit_that_happened_is_answered_200_though_another_rewrite_follows_at_once(server, tmp_path,
                                                                                        monkeypatch):
    """The answer describes the file the edit made, held open; a fresh read after it
    (which another process's rewrite can refuse) is not part of it."""
    path = seeded(tmp_path / "sessions", "s1", 4)

    def refused(self, sid):
        raise ApiError(409, "the session keeps being rewritten under the read; try again", "session_changed")

    monkeypatch.setattr(sessions_module.Sessions, "get", refused)
    r = httpx.patch(f"{server.url}{API}/s1/messages/1", json=message("new m1"))
    assert r.status_code == 200 and r.json()["message_count"] == 4, r.text
    assert texts(path) == ["m0", "new m1", "m2", "m3"]


def test_the_list_skips_a_name_that_turns_from_a_link_into_a_file_under_it(server, tmp_path, monkeypatch):
    import errno

    folder = tmp_path / "sessions"
    folder.mkdir(exist_ok=True)
    keep = folder / "keep"
    keep.write_bytes(encode_record(message("m0")))
    name = folder / "s1.jsonl"
    os.symlink(keep, name)
    real_readlink = os.readlink

    def readlink(path, *a, **kw):  # between realpath's lstat and its readlink, the link became a file
        if os.fspath(path) == str(name):
            os.replace(keep, name)
            raise OSError(errno.EINVAL, "Invalid argument", path)
        return real_readlink(path, *a, **kw)

    monkeypatch.setattr(os, "readlink", readlink)
    r = httpx.get(server.url + API)
    monkeypatch.undo()
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert httpx.get(server.url + API).json()["data"][0]["id"] == "s1"  # and the next list shows it


def test_a_rewrite_that_meets_a_folder_at_the_name_is_answered_in_the_apis_shape(server, tmp_path, monkeypatch):
    path = seeded(tmp_path / "sessions", "s1", 3)
    from boundctx.transcript import store

    real_replace = store.replace_file

    def folder_put_there(real, data, *, mode):
        os.replace(path, tmp_path / "aside")
        os.mkdir(path)
        return real_replace(real, data, mode=mode)

    monkeypatch.setattr(store, "replace_file", folder_put_there)
    r = httpx.delete(f"{server.url}{API}/s1/messages/0")
    assert r.status_code in (404, 409) and r.headers["content-type"] == "application/json", r.text
    assert os.path.isdir(path) and texts(tmp_path / "aside") == ["m0", "m1", "m2"]
