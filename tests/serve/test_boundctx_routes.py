"""boundctx serve's own routes beyond sessions' storage: replies on a session (named
events, saved only once complete), cancelling a reply by id, exact counts,
understanding, the settings a Settings screen reads and changes, and CORS."""

import json
import re
import threading
import time

import httpx
import pytest

from boundctx import config
from boundctx.analysis.workers import WORKER_INSTRUCTIONS
from boundctx.providers import ScriptedProvider
from boundctx.serve import ServeError, create_app
from boundctx.transcript.store import Transcript

from tests._support import without_notice
from tests._support.scripted import ASK, LOG, MODEL, WITH_LOG, Slow, answer, client, settings

API = "/boundctx/v1"


def events_of(response):
    """The named events of a server-sent-event stream: [(name, data), ...], checking
    that their ids count from 0."""
    out, name, data, ids = [], None, [], []
    for line in response.iter_lines():
        if line.startswith("id: "):
            ids.append(int(line[4:]))
        elif line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            data.append(line[6:])
        elif line == "" and (name or data):
            out.append((name, json.loads("\n".join(data))))
            name, data = None, []
    if name or data:
        out.append((name, json.loads("\n".join(data))))
    assert ids == list(range(len(out)))
    return out


def new_session(server, sid, records=()):
    assert httpx.post(server.url + API + "/sessions", json={"id": sid}).status_code == 201
    for record in records:
        assert httpx.post(f"{server.url}{API}/sessions/{sid}/messages", json=record).status_code == 201


def message(role, text):
    return {"type": "message", "message": {"role": role, "content": text}}


def reply(server, sid, timeout=60, **body):
    with httpx.stream("POST", f"{server.url}{API}/sessions/{sid}/replies", json=body, timeout=timeout) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        return events_of(r)


def session_messages(tmp_path, sid):
    with Transcript.open(str(tmp_path / "sessions" / f"{sid}.jsonl")) as t:
        return [e.record["message"] for e in t.window(message_limit=1000, content_limit=None).messages]


# -- replies on a session -----------------------------------------------------------------


def test_a_session_replys_progress_and_stages_carry_the_engines_estimate_of_the_time_left(serve):
    server = serve(ScriptedProvider(answer, context_window=4096),
                   settings=settings(**{"serve.progress_max_hz": 1000.0}), model_id=MODEL)
    new_session(server, "s")
    events = reply(server, "s", content="Which step failed?\n\n" + LOG)
    fitted = next(d for n, d in events if n == "fitted")
    assert fitted["analysed_chars"] and fitted["analysed_chars"][0] > len(LOG)  # the question with the log
    progress = [d for n, d in events if n == "analysis_progress"]
    stages = [d for n, d in events if n == "stage"]
    # Every one says it (null where nothing is measured yet): the page needs no more work.
    assert progress and stages and all("remaining_s" in d for d in progress + stages)
    assert progress[0]["remaining_s"] is None  # the first section: no pace yet
    assert all(d["prompt_tokens"] > 0 for d in progress if d["phase"] == "noted")
    done = [d for d in progress if d["phase"] == "done"]
    assert done and done[-1]["remaining_s"] > 0  # the answer is still to come
    assert stages[0]["stage"] == "answering" and stages[0]["remaining_s"] > 0


def test_a_session_reply_streams_named_events_and_saves_the_exchange_once_complete(serve, tmp_path):
    seen = []

    def respond(request):
        seen.append(request.messages)
        return answer(request)

    server = serve(ScriptedProvider(respond, context_window=4096),
                   settings=settings(**{"serve.progress_max_hz": 1000.0}), model_id=MODEL)
    new_session(server, "s", [message("user", "I will paste the build log."), message("assistant", "Noted.")])
    question = "Which step failed?\n\n" + LOG  # a pasted log: read in sections by the workers
    events = reply(server, "s", content=question)
    names = [n for n, _ in events]
    assert names[0] == "reply" and events[0][1]["id"].startswith("reply-")
    assert events[0][1]["history_messages"] == 2
    assert names[1] == "fitted" and "analysis_progress" in names and names[-1] == "done"
    assert names.index("analysis_progress") < names.index("reply_delta")  # progress before the answer
    for name, data in events[1:]:
        assert data["type"] == name  # the data is the library's event, its tag the name
    text = "".join(d["text"] for n, d in events if n == "reply_delta")
    assert text == "The failing step is 377."
    done = events[-1][1]
    assert done["finish_reason"] == "stop" and done["saved"] is True and done["message_count"] == 4
    # The exchange is in the session, in order, after the history it was asked on.
    assert session_messages(tmp_path, "s")[2:] == [{"role": "user", "content": question},
                                                   {"role": "assistant", "content": text}]
    # The coordinator was sent the session's history, and the question as notes (the log
    # itself was read in sections by the workers, not sent whole).
    last = seen[-1]
    assert not any(LOG in m["content"] for m in last)
    assert any(m["content"] == "Noted." for m in last)  # the conversation before the paste stays (0023)
    assert any("Which step failed?" in m["content"] for request in seen[:-1] for m in request)


def test_history_bounds_what_a_session_reply_starts_from(serve):
    seen = []

    def respond(request):
        seen.append([without_notice(m["content"]) for m in request.messages])
        assert request.messages[0]["content"].startswith("(6 earlier messages")  # the session's older ones
        return "ok"

    server = serve(ScriptedProvider(respond), settings=settings(), model_id=MODEL)
    new_session(server, "h", [message("user" if i % 2 == 0 else "assistant", f"m{i}") for i in range(10)])
    events = reply(server, "h", content="now?", history=4)
    assert events[0][1]["history_messages"] == 4
    assert [c for c in seen[-1] if c.startswith("m")] == ["m6", "m7", "m8", "m9"]


def test_the_history_a_session_reply_starts_from_keeps_its_start_for_half_the_history(serve):
    # Each reply adds two messages; the newest 8 alone would start one exchange later on
    # every reply. The start moves 4 messages at a time, so it stays for two replies.
    seen = []

    def respond(request):
        seen.append([without_notice(m["content"]) for m in request.messages])
        return "ok"

    server = serve(ScriptedProvider(respond), settings=settings(), model_id=MODEL)
    new_session(server, "k", [message("user" if i % 2 == 0 else "assistant", f"m{i}") for i in range(10)])
    sent = []
    for turn in range(6):
        events = reply(server, "k", content=f"q{turn}", history=8)
        sent.append(events[0][1]["history_messages"])
    starts = [request[0] for request in seen]
    assert starts == ["m4", "m4", "m8", "m8", "q1", "q1"] and all(4 < n <= 8 for n in sent)


def test_a_session_reply_searches_the_sessions_older_messages_when_the_model_asks(serve, tmp_path):
    # The reply reads the newest 20 messages; the fact is in message 7 of 120, found by
    # the model's search of the earlier messages and answered exactly (decision 0046).
    from boundctx.providers import ToolCallChunk

    def respond(request):
        last = request.messages[-1]
        if last["role"] == "tool":
            found = re.findall(r"deploy key is (K-\d+)", last["content"])
            return found[-1] if found else "unknown"
        if request.tools and "earlier messages of this conversation are not shown" in request.messages[0]["content"]:
            return [ToolCallChunk("s1", "read_chat_section",
                                  json.dumps({"section_id": "earlier messages", "search": "deploy key"}))]
        return "unknown"

    server = serve(ScriptedProvider(respond, context_window=4096), settings=settings(), model_id=MODEL)
    new_session(server, "old", [message("user" if i % 2 == 0 else "assistant",
                                        "remember: the deploy key is K-707" if i == 7 else f"m{i} chat")
                                for i in range(120)])
    events = reply(server, "old", content="What is the deploy key?", history=20)
    calls = [d for n, d in events if n == "tool_call"]
    assert [json.loads(c["arguments"])["search"] for c in calls] == ["deploy key"]
    assert [c["said"] for c in calls] == ["searching earlier messages for 'deploy key'"]  # the page's words
    assert "".join(d["text"] for n, d in events if n == "reply_delta") == "K-707"
    assert events[-1][1]["saved"] is True


def test_a_cancelled_session_reply_saves_nothing_and_the_cancel_route_names_it(serve, tmp_path):
    slow = Slow(pieces=500, gap=0.01)
    server = serve(ScriptedProvider(slow), settings=settings(), model_id=MODEL)
    new_session(server, "c", [message("user", "hello"), message("assistant", "hi")])
    got = []
    with httpx.stream("POST", f"{server.url}{API}/sessions/c/replies", json={"content": "go on"},
                      timeout=60) as r:
        lines = r.iter_lines()
        for name, data in iter_events(lines):
            got.append((name, data))
            if name == "reply_delta" and sum(n == "reply_delta" for n, _ in got) == 3:
                reply_id = got[0][1]["id"]
                cancelled = httpx.post(f"{server.url}{API}/replies/{reply_id}/cancel")
                assert cancelled.status_code == 200 and cancelled.json()["cancelled"] is True
    name, done = got[-1]
    assert name == "done" and done["finish_reason"] == "cancelled" and done["saved"] is False
    assert "not complete" in done["not_saved"]
    assert slow.produced < 100
    assert len(session_messages(tmp_path, "c")) == 2  # nothing appended
    # The reply is over: its id is no longer in flight.
    again = httpx.post(f"{server.url}{API}/replies/{got[0][1]['id']}/cancel")
    assert again.status_code == 404 and again.json()["error"]["code"] == "reply_not_found"


def iter_events(lines):
    name, data = None, []
    for line in lines:
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            data.append(line[6:])
        elif line == "" and (name or data):
            yield name, json.loads("\n".join(data))
            name, data = None, []


def test_a_client_that_leaves_a_session_reply_cancels_it_and_saves_nothing(serve, tmp_path):
    slow = Slow(pieces=500, gap=0.01)
    server = serve(ScriptedProvider(slow), settings=settings(), model_id=MODEL)
    new_session(server, "d")
    with httpx.stream("POST", f"{server.url}{API}/sessions/d/replies", json={"content": "go"}, timeout=60) as r:
        for name, _ in iter_events(r.iter_lines()):
            if name == "reply_delta":
                break
    deadline = time.monotonic() + 10
    while any(t.name == "boundctx-reply" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(t.name == "boundctx-reply" for t in threading.enumerate())
    assert slow.produced < 100
    assert session_messages(tmp_path, "d") == []


def test_a_failed_session_reply_says_why_and_saves_nothing(serve, tmp_path):
    def respond(request):
        def gen():
            yield "partial "
            raise RuntimeError("the model server went away")
        return gen()

    server = serve(ScriptedProvider(respond), settings=settings(), model_id=MODEL)
    new_session(server, "f")
    events = reply(server, "f", content="q")
    name, failed = events[-1]
    assert name == "failed" and "went away" in failed["error"] and failed["saved"] is False
    assert session_messages(tmp_path, "f") == []


def test_another_agents_session_is_answered_only_without_saving(serve, tmp_path):
    server = serve(ScriptedProvider(lambda r: "fine"), settings=settings(), model_id=MODEL)
    path = tmp_path / "sessions" / "cc.jsonl"
    path.write_text(json.dumps({"type": "user", "message": {"role": "user", "content": "hi"},
                                "uuid": "u1", "sessionId": "x"}) + "\n")
    before = path.read_bytes()
    refused = httpx.post(f"{server.url}{API}/sessions/cc/replies", json={"content": "q"})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "session_read_only"
    assert "save" in refused.json()["error"]["message"]
    events = reply(server, "cc", content="q", save=False)
    assert events[-1][0] == "done" and events[-1][1]["saved"] is False
    assert path.read_bytes() == before


def test_a_reply_on_a_file_that_is_no_transcript_is_refused_without_the_servers_path(serve, tmp_path):
    server = serve(ScriptedProvider(lambda r: "fine"), settings=settings(), model_id=MODEL)
    folder = tmp_path / "sessions"
    (folder / "png.jsonl").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) + b"\n")
    refused = httpx.post(f"{server.url}{API}/sessions/png/replies", json={"content": "q"})
    error = refused.json()["error"]
    assert refused.status_code == 400 and error["code"] == "session_read_only", error
    assert "does not look like a transcript" in error["message"] and str(folder) not in error["message"]
    assert "png.jsonl" in error["message"]


@pytest.mark.parametrize("body, status, param", [
    ({"content": "q", "colour": "red"}, 400, None),     # an unknown field is refused, not ignored
    ({"content": "   "}, 400, "content"),
    ({}, 400, None),
    ({"content": "q", "history": -1}, 400, "history"),
    ({"content": "q", "history": 5000}, 400, "history"),
    ({"content": "q", "max_tokens": 0}, 400, "max_tokens"),
    ({"content": "q", "temperature": 9}, 400, "temperature"),
    ({"content": 5}, 400, "content"),
])
def test_bad_session_replies_are_400_and_touch_nothing(serve, tmp_path, body, status, param):
    server = serve(ScriptedProvider(lambda r: "x"), settings=settings(), model_id=MODEL)
    new_session(server, "b", [message("user", "hi")])
    before = (tmp_path / "sessions" / "b.jsonl").read_bytes()
    r = httpx.post(f"{server.url}{API}/sessions/b/replies", json=body)
    assert r.status_code == status and r.json()["error"]["message"]
    if param is not None:
        assert r.json()["error"]["param"] == param
    assert (tmp_path / "sessions" / "b.jsonl").read_bytes() == before
    for bad, want in (("../b", 404), ("no-such", 404), ("a.b", 400)):
        r = httpx.post(f"{server.url}{API}/sessions/{bad}/replies", json={"content": "q"})
        assert r.status_code == want
    r = httpx.post(f"{server.url}{API}/sessions/b/replies", content=b"{not json")
    assert r.status_code == 400
    assert httpx.get(server.url + "/health").status_code == 200  # still serving


# -- cancel by id on a chat completion ------------------------------------------------------


def test_a_chat_completion_is_cancelled_by_its_id(serve):
    slow = Slow(pieces=500, gap=0.01)
    server = serve(ScriptedProvider(slow), settings=settings(), model_id=MODEL)
    stream = client(server).chat.completions.create(model=MODEL, messages=ASK, stream=True)
    text, last = [], None
    for ch in stream:
        if ch.choices and ch.choices[0].delta.content:
            text.append(ch.choices[0].delta.content)
            if len(text) == 3:
                assert httpx.post(f"{server.url}{API}/replies/{ch.id}/cancel").status_code == 200
        last = ch
    assert last.choices[0].finish_reason == "stop" and last.model_extra["boundctx"]["cancelled"] is True
    assert slow.produced < 100
    assert httpx.post(f"{server.url}{API}/replies/chatcmpl-nope/cancel").status_code == 404


# -- counts -------------------------------------------------------------------------------


def test_count_is_the_providers_own_count_of_the_prompt(serve):
    provider = ScriptedProvider(lambda r: "x", context_window=4096)
    server = serve(provider, settings=settings(), model_id=MODEL)
    tools = [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}}]
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello " * 50}]
    plain = httpx.post(server.url + API + "/count", json={"messages": messages}).json()
    with_tools = httpx.post(server.url + API + "/count", json={"messages": messages, "tools": tools}).json()
    assert plain["prompt_tokens"] == provider.count_prompt(messages)
    assert with_tools["prompt_tokens"] == provider.count_prompt(messages, tools=tools) > plain["prompt_tokens"]
    assert plain["context_window"] == 4096 and plain["fits"] is True
    # a reply without max_tokens keeps min(512, window / 4) tokens for its answer
    assert plain["prompt_limit"] == 4096 - 512 and plain["reads_in_sections"] is True
    assert plain["exact"] is bool(provider.counter.exact)
    for bad in ({"messages": []}, {"messages": [{"role": "wizard", "content": "x"}]}, {"message": []},
                {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}):
        r = httpx.post(server.url + API + "/count", json=bad)
        assert r.status_code == 400 and r.json()["error"]["message"]


def test_count_on_the_embedded_models_tokenizer(serve):
    llama_tokens = pytest.importorskip("boundctx.tokens.llama")
    try:
        counter = llama_tokens.LlamaCounter(llama_tokens.default_model_path())
    except Exception as exc:  # no llama-cpp-python or no embedded model here
        pytest.skip(f"the embedded model's tokenizer is not available: {exc}")
    provider = ScriptedProvider(lambda r: "x", counter=counter, context_window=2048)
    server = serve(provider, settings=settings(), model_id=MODEL)
    messages = [{"role": "user", "content": "Count me, exactly."}]
    got = httpx.post(server.url + API + "/count", json={"messages": messages}).json()
    assert got["exact"] is True and got["prompt_tokens"] == counter.count_prompt(messages)


# -- understanding ------------------------------------------------------------------------


def test_understand_returns_the_checked_plan_with_its_budget(serve):
    import msgspec

    from tests._support.booking import CATALOG, GOLD, MESSAGE, RECORDS
    from tests._support.oracle import Oracle

    server = serve(ScriptedProvider(Oracle(GOLD, RECORDS)), settings=settings(), model_id=MODEL)
    records = msgspec.to_builtins(RECORDS)
    r = httpx.post(server.url + API + "/understand", json={"message": MESSAGE, "catalog": CATALOG,
                                                          "records": records}, timeout=60)
    assert r.status_code == 200, r.text
    plan = r.json()
    assert plan["status"] == "ready"
    assert [(a["operation"], a["record"]) for a in plan["acts"]] == [("book_table", "sakura"),
                                                                     ("cancel_booking", "b1")]
    assert plan["budget"]["model_calls"] == 6
    for bad in ({"message": MESSAGE}, {"message": MESSAGE, "catalog": {"operations": "nope"}},
                {"message": MESSAGE, "catalog": CATALOG, "bfcl": []}, {"message": MESSAGE, "catalog": CATALOG,
                                                                         "records": [{"id": 1}]}):
        r = httpx.post(server.url + API + "/understand", json=bad, timeout=60)
        assert r.status_code == 400 and r.json()["error"]["message"], bad


# -- settings -----------------------------------------------------------------------------


def test_the_settings_schema_and_values_a_settings_screen_renders(serve):
    server = serve(ScriptedProvider(lambda r: "x"), settings=settings(), model_id=MODEL)
    schema = httpx.get(server.url + API + "/settings/schema").json()["data"]
    assert schema == json.loads(json.dumps(config.schema()))
    view = {item["name"]: item for item in httpx.get(server.url + API + "/settings").json()["data"]}
    workers = view["chat.analysis_workers"]
    assert (workers["minimum"], workers["maximum"], workers["writable"]) == (0, 8, True)
    assert workers["value"] == config.load(env={})["chat.analysis_workers"]
    assert view["serve.port"]["writable"] is False and view["chat.n_ctx"]["writable"] is False


def test_a_settings_change_applies_to_the_next_reply_and_a_refused_one_changes_nothing(serve):
    server = serve(ScriptedProvider(answer, context_window=8192),
                   settings=settings(**{"serve.progress_max_hz": 1000.0}), model_id=MODEL)
    url = server.url + API + "/settings"
    big = WITH_LOG  # a tool result far larger than the window

    def kinds():
        chunks = list(client(server).chat.completions.create(model=MODEL, messages=big, stream=True,
                                                             max_tokens=256))
        return [c.model_extra["boundctx"] for c in chunks if (c.model_extra or {}).get("boundctx")]

    assert any(p["type"] == "analysis_progress" for p in kinds())  # sections read by workers
    changed = httpx.patch(url, json={"chat.analysis_workers": 0})
    assert changed.status_code == 200
    item = next(i for i in changed.json()["data"] if i["name"] == "chat.analysis_workers")
    assert item["value"] == 0 and item["source"].startswith("PATCH")
    progress = kinds()
    assert not any(p["type"] == "analysis_progress" for p in progress)  # the clipping path
    assert progress[0]["type"] == "fitted" and progress[0]["clipped"] > 0
    for body, param, words in (({"chat.analysis_workers": 9}, "chat.analysis_workers", "0–8"),
                               ({"chat.analysis_workers": "two"}, "chat.analysis_workers", "not an int"),
                               ({"serve.port": 9000}, "serve.port", "restart"),
                               # What the model was built from (issue 25: a registry and remote.*).
                               ({"chat.provider": "remote"}, "chat.provider", "restart"),
                               ({"remote.base_url": "http://127.0.0.1:9"}, "remote.base_url", "restart"),
                               ({"local.model": "/tmp/other.gguf"}, "local.model", "restart"),
                               ({"chat.no_such": 1}, "chat.no_such", "not a setting"),
                               ({"chat.temperature": 0.5, "chat.analysis_workers": -1}, "chat.analysis_workers",
                                "accepted")):
        r = httpx.patch(url, json=body)
        assert r.status_code == 400 and r.json()["error"]["param"] == param and words in r.json()["error"]["message"]
    now = {i["name"]: i["value"] for i in httpx.get(url).json()["data"]}
    assert now["chat.analysis_workers"] == 0  # refused requests changed nothing, not even their valid keys
    assert now["chat.temperature"] == settings()["chat.temperature"]
    for bad in (b"[1]", b"{}", b"nope"):
        assert httpx.patch(url, content=bad).status_code == 400
    back = httpx.patch(url, json={"chat.analysis_workers": None}).json()["data"]
    item = next(i for i in back if i["name"] == "chat.analysis_workers")
    assert item["value"] == settings()["chat.analysis_workers"] and not item["source"].startswith("PATCH")


# -- CORS ---------------------------------------------------------------------------------


def test_no_cors_headers_unless_an_origin_is_configured(serve):
    server = serve(ScriptedProvider(lambda r: "x"), settings=settings(), model_id=MODEL)
    r = httpx.get(server.url + "/v1/models", headers={"Origin": "http://localhost:3000"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "origin_not_allowed"
    assert not any(k.startswith("access-control-") for k in r.headers)
    r = httpx.get(server.url + "/v1/models")  # no Origin: not a web page, served
    assert r.status_code == 200 and not any(k.startswith("access-control-") for k in r.headers)


def test_a_configured_origin_gets_cors_headers_never_credentials(serve):
    server = serve(ScriptedProvider(lambda r: "x"), model_id=MODEL, api_keys={"k"},
                   settings=settings(**{"serve.cors_origins": "http://localhost:3000, https://app.example"}))
    pre = httpx.options(server.url + "/v1/chat/completions", headers={
        "Origin": "http://localhost:3000", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    assert pre.status_code == 204  # a preflight carries no key
    assert pre.headers["access-control-allow-origin"] == "http://localhost:3000"
    assert "authorization" in pre.headers["access-control-allow-headers"]
    ok = httpx.get(server.url + "/v1/models", headers={"Origin": "https://app.example", "Authorization": "Bearer k"})
    assert ok.status_code == 200 and ok.headers["access-control-allow-origin"] == "https://app.example"
    denied = httpx.get(server.url + "/v1/models", headers={"Origin": "https://app.example"})
    assert denied.status_code == 401 and denied.headers["access-control-allow-origin"] == "https://app.example"
    other = httpx.get(server.url + "/v1/models", headers={"Origin": "https://evil.example",
                                                          "Authorization": "Bearer k"})
    assert "access-control-allow-origin" not in other.headers
    for r in (pre, ok, denied, other):
        assert "access-control-allow-credentials" not in r.headers


def test_a_cors_origin_that_is_not_one_is_refused_at_start(tmp_path):
    for bad in ("localhost:3000", "http://x/path", "ftp://x"):
        with pytest.raises(ServeError, match="not an origin"):
            create_app(ScriptedProvider(lambda r: "x"), settings=settings(**{"serve.cors_origins": bad}),
                       sessions_dir=str(tmp_path))


def test_a_cancel_during_analysis_stops_before_another_worker_section(serve):
    calls = []

    def respond(request):
        if request.messages[0]["content"] == WORKER_INSTRUCTIONS:
            calls.append(time.monotonic())
            time.sleep(0.1)  # a worker reading its section
        return answer(request)

    server = serve(ScriptedProvider(respond, context_window=4096),
                   settings=settings(**{"serve.progress_max_hz": 1000.0}), model_id=MODEL)
    new_session(server, "w")
    got, at_cancel = [], None
    with httpx.stream("POST", f"{server.url}{API}/sessions/w/replies",
                      json={"content": "Which step failed?\n\n" + LOG}, timeout=60) as r:
        for name, data in iter_events(r.iter_lines()):
            got.append((name, data))
            if name == "analysis_progress" and data["section"] == 2:
                assert httpx.post(f"{server.url}{API}/replies/{got[0][1]['id']}/cancel").status_code == 200
                at_cancel = len(calls)
    name, done = got[-1]
    assert name == "done" and done["finish_reason"] == "cancelled" and done["saved"] is False
    sections = next(d["sections"] for n, d in got if n == "analysis_progress")
    assert sections > 4
    assert len(calls) <= at_cancel + 1  # the section running when the cancel came, at most
    assert "reply_delta" not in [n for n, _ in got]
