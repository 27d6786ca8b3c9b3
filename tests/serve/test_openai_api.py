"""boundctx serve through the official openai client and raw HTTP, on loopback, with the
scripted provider: answers, progress apart from the answer, errors in the OpenAI shape
with real statuses, cancellation, admission and the guard."""

import json
import re
import threading
import time

import httpx
import pytest

openai = pytest.importorskip("openai", reason="the serve tests drive the server with the official openai client")

from boundctx.analysis import Engine  # noqa: E402
from boundctx.events import ReplyDelta  # noqa: E402
from boundctx.providers import ScriptedProvider  # noqa: E402
from boundctx.serve import ServeError, create_app  # noqa: E402

from tests._support.scripted import ASK, LOG, MODEL, WITH_LOG, Slow, answer, client, settings  # noqa: E402


def test_a_plain_completion_and_the_models_list(serve):
    server = serve(ScriptedProvider(answer, context_window=8192), settings=settings(), model_id=MODEL)
    c = client(server)
    out = c.chat.completions.create(model=MODEL, messages=ASK)
    assert out.choices[0].message.content == "The failing step is 377."
    assert out.choices[0].finish_reason == "stop" and out.usage.prompt_tokens > 0
    assert [m.id for m in c.models.list()] == [MODEL]
    assert httpx.get(server.url + "/health").json() == {"status": "ok"}


def direct_text(provider_factory, messages, **over):
    engine = Engine(provider_factory(), settings=settings(**over), max_reply_tokens=256)
    return "".join(e.text for e in engine.reply(messages) if isinstance(e, ReplyDelta))


def test_a_stream_carries_progress_apart_from_the_answer_byte_for_byte(serve):
    make = lambda: ScriptedProvider(answer, context_window=4096)  # noqa: E731
    server = serve(make(), settings=settings(**{"serve.progress_max_hz": 1000.0}), model_id=MODEL)
    messages = WITH_LOG
    chunks = list(client(server).chat.completions.create(
        model=MODEL, messages=messages, stream=True, max_tokens=256, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"  # the role chunk first
    assert all(len(ch.choices) == 1 for ch in chunks[:-1]) and chunks[-1].choices == []  # usage last, asked for
    assert chunks[-1].usage.completion_tokens > 0
    content = "".join(ch.choices[0].delta.content or "" for ch in chunks[:-1])
    assert content == direct_text(make, messages) == "The failing step is 377."
    progress = [ch.model_extra["boundctx"] for ch in chunks if (ch.model_extra or {}).get("boundctx")]
    kinds = [p["type"] for p in progress]
    assert kinds[0] == "fitted" and "analysis_progress" in kinds and kinds[-1] == "done"
    sections = {p["sections"] for p in progress if p["type"] == "analysis_progress"}
    assert len(sections) == 1 and sections.pop() > 1
    # The reply's estimate of its time left travels with its progress, as on a session.
    assert all("remaining_s" in p for p in progress if p["type"] in ("analysis_progress", "stage"))
    assert next(p for p in progress if p["type"] == "stage")["remaining_s"] > 0
    timed = 0
    for ch in chunks:  # a progress chunk never carries text, and says so for Open WebUI
        ext = (ch.model_extra or {}).get("boundctx")
        if ext and ext["type"] == "analysis_progress":
            assert not ch.choices[0].delta.content
            assert ch.model_extra["event"]["type"] == "status"
            # and its time left, once the reply has an estimate, in the line a person reads there
            said = ch.model_extra["event"]["data"]["description"]
            assert bool(re.search(r" · about [\d,]+ s left$", said)) == (ext["remaining_s"] is not None), said
            timed += ext["remaining_s"] is not None
    assert timed > 0


def test_a_chat_completions_dropped_history_is_searched_and_the_stream_says_so(serve):
    # A front end sends the whole chat; what does not fit is dropped, and the model
    # searches it by the engine's tool, which the caller never sees (decision 0046).
    from boundctx.providers import ToolCallChunk

    def respond(request):
        last = request.messages[-1]
        if last["role"] == "tool":
            return re.findall(r"deploy key is (K-\d+)", last["content"])[-1]
        return [ToolCallChunk("s1", "read_chat_section",
                              json.dumps({"section_id": "earlier messages", "search": "deploy key"}))]

    server = serve(ScriptedProvider(respond, context_window=4096),
                   settings=settings(**{"serve.progress_max_hz": 1000.0}), model_id=MODEL)
    history = []
    for i in range(200):
        history += [{"role": "user", "content": "the deploy key is K-42" if i == 3 else f"message {i} " + "x" * 80},
                    {"role": "assistant", "content": "noted"}]
    chunks = list(client(server).chat.completions.create(
        model=MODEL, stream=True, max_tokens=64,
        messages=history + [{"role": "user", "content": "What is the deploy key?"}]))
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) == "K-42"
    calls = [ch for ch in chunks if ((ch.model_extra or {}).get("boundctx") or {}).get("type") == "tool_call"]
    assert [c.model_extra["boundctx"]["said"] for c in calls] == ["searching earlier messages for 'deploy key'"]
    assert calls[0].model_extra["event"]["data"]["description"] == "Searching earlier messages for 'deploy key'"
    assert all(not (ch.choices and ch.choices[0].delta.tool_calls) for ch in chunks)  # never the caller's


def test_usage_chunk_only_when_asked_and_the_stream_helper_works(serve):
    server = serve(ScriptedProvider(answer, context_window=8192), settings=settings(), model_id=MODEL)
    chunks = list(client(server).chat.completions.create(model=MODEL, messages=ASK, stream=True))
    assert all(len(ch.choices) == 1 for ch in chunks) and chunks[-1].choices[0].finish_reason == "stop"
    with client(server).chat.completions.stream(model=MODEL, messages=ASK) as stream:
        final = stream.get_final_completion()
    assert final.choices[0].message.content == "The failing step is 377."


def test_the_raw_stream_is_lf_framed_json_ending_with_done(serve):
    server = serve(ScriptedProvider(answer, context_window=8192), settings=settings(), model_id=MODEL)
    with httpx.stream("POST", server.url + "/v1/chat/completions",
                      json={"model": MODEL, "messages": ASK, "stream": True}) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        raw = b"".join(r.iter_bytes())
    assert b"\r" not in raw and raw.endswith(b"data: [DONE]\n\n")
    events = raw.split(b"\n\n")[:-1]
    assert all(e.startswith(b"data: ") for e in events)
    bodies = [json.loads(e[6:]) for e in events[:-1]]
    assert all(b["object"] == "chat.completion.chunk" and len(b["choices"]) == 1 for b in bodies)
    assert "error" not in json.dumps(bodies)


@pytest.mark.parametrize("body, code, param", [
    (b"{not json", None, None),
    (json.dumps({"model": MODEL, "messages": ASK, "n": 2}).encode(), None, "n"),
    (json.dumps({"model": MODEL, "messages": "hi"}).encode(), None, "messages"),
    (json.dumps({"model": MODEL, "messages": [{"role": "robot", "content": "x"}]}).encode(), None,
     "messages[0].role"),
    (json.dumps({"model": MODEL, "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}).encode(),
     None, "messages[0].content[0]"),
    (json.dumps({"model": MODEL, "messages": ASK, "max_tokens": 0}).encode(), None, "max_tokens"),
    (json.dumps({"model": MODEL, "messages": [{"role": "tool", "content": "r"}]}).encode(), None,
     "messages[0].tool_call_id"),
])
def test_bad_requests_get_a_clear_400_and_the_server_keeps_serving(serve, body, code, param):
    provider = ScriptedProvider(answer, context_window=8192)
    server = serve(provider, settings=settings(), model_id=MODEL)
    r = httpx.post(server.url + "/v1/chat/completions", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["message"] and err["param"] == param
    assert provider.requests == []  # nothing reached the model
    assert client(server).chat.completions.create(model=MODEL, messages=ASK).choices[0].message.content


def test_an_unknown_model_is_404_in_the_openai_shape(serve):
    server = serve(ScriptedProvider(answer), settings=settings(), model_id=MODEL)
    with pytest.raises(openai.NotFoundError) as info:
        client(server).chat.completions.create(model="gpt-4", messages=ASK)
    assert info.value.code == "model_not_found"


def test_a_prompt_analysis_cannot_fit_is_a_400_context_length_exceeded_before_any_byte(serve):
    provider = ScriptedProvider(answer, context_window=1024)
    server = serve(provider, settings=settings(**{"chat.analysis_workers": 0}), model_id=MODEL)
    messages = WITH_LOG
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as info:
            out = client(server).chat.completions.create(model=MODEL, messages=messages, stream=stream,
                                                         max_tokens=128)
            list(out) if stream else None
        assert info.value.code == "context_length_exceeded" and info.value.status_code == 400
        assert info.value.body["n_ctx"] == 1024
    assert provider.requests == []


def test_api_keys_guard_every_route_but_health(serve):
    server = serve(ScriptedProvider(answer), settings=settings(), model_id=MODEL, api_keys={"k1", "k2"})
    with pytest.raises(openai.AuthenticationError):
        client(server, key="wrong").chat.completions.create(model=MODEL, messages=ASK)
    assert httpx.get(server.url + "/v1/models").status_code == 401
    assert httpx.get(server.url + "/health").status_code == 200
    assert client(server, key="k2").chat.completions.create(model=MODEL, messages=ASK).choices[0].message.content


def test_a_body_over_the_cap_is_413_before_it_is_parsed(serve):
    server = serve(ScriptedProvider(answer), settings=settings(**{"serve.max_body_bytes": 4096}), model_id=MODEL)
    big = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x" * 10_000}]})
    r = httpx.post(server.url + "/v1/chat/completions", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"


def test_every_route_that_reads_a_body_refuses_one_over_the_cap_in_the_same_words(serve):
    server = serve(ScriptedProvider(answer), settings=settings(**{"serve.max_body_bytes": 4096}), model_id=MODEL)
    assert httpx.post(server.url + "/boundctx/v1/sessions", json={"id": "s1"}).status_code == 201
    big = json.dumps({"content": "x" * 10_000})
    errors = {}
    for method, path in [("POST", "/v1/chat/completions"), ("POST", "/boundctx/v1/count"),
                         ("POST", "/boundctx/v1/understand"), ("POST", "/boundctx/v1/sessions"),
                         ("POST", "/boundctx/v1/sessions/s1/messages"), ("POST", "/boundctx/v1/sessions/s1/replies"),
                         ("PATCH", "/boundctx/v1/sessions/s1/messages/0"), ("PATCH", "/boundctx/v1/settings")]:
        r = httpx.request(method, server.url + path, content=big, headers={"content-type": "application/json"})
        assert r.status_code == 413, (path, r.text)
        errors[path] = r.json()["error"]
    assert len({json.dumps(e, sort_keys=True) for e in errors.values()}) == 1, errors
    assert "4,096 bytes (serve.max_body_bytes)" in errors["/v1/chat/completions"]["message"]


def test_a_host_header_that_is_not_loopback_is_refused(serve):
    server = serve(ScriptedProvider(answer), settings=settings(), model_id=MODEL)
    r = httpx.get(server.url + "/v1/models", headers={"host": "evil.example:8765"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "host_not_allowed"
    assert httpx.get(server.url + "/v1/models", headers={"host": f"localhost:{server.port}"}).status_code == 200


def test_binding_beyond_loopback_without_a_key_is_refused(tmp_path):
    with pytest.raises(ServeError, match="without an API key"):
        create_app(ScriptedProvider(answer), settings=settings(), host="0.0.0.0", sessions_dir=str(tmp_path))
    create_app(ScriptedProvider(answer), settings=settings(), host="0.0.0.0", api_keys={"k"},
               sessions_dir=str(tmp_path))


def test_past_the_queue_a_request_is_503_with_retry_after(serve):
    slow = Slow(pieces=100, gap=0.02)
    server = serve(ScriptedProvider(slow), model_id=MODEL,
                   settings=settings(**{"serve.active_replies": 1, "serve.queue_depth": 0}))
    first = threading.Thread(target=lambda: client(server).chat.completions.create(model=MODEL, messages=ASK))
    first.start()
    try:
        assert slow.started.wait(10)
        r = httpx.post(server.url + "/v1/chat/completions", json={"model": MODEL, "messages": ASK})
        assert r.status_code == 503 and r.headers["retry-after"] == "5"
        assert r.json()["error"]["code"] == "server_busy"
    finally:
        first.join(30)
    assert client(server).chat.completions.create(model=MODEL, messages=ASK).choices[0].message.content


def test_a_client_that_closes_its_stream_cancels_its_reply_and_not_the_other(serve):
    slow_a, slow_b = Slow(pieces=300, gap=0.01), Slow(pieces=30, gap=0.01)
    pick = {}

    def respond(request):
        return pick[request.messages[-1]["content"]](request)

    pick["a"], pick["b"] = slow_a, slow_b
    server = serve(ScriptedProvider(respond), model_id=MODEL, settings=settings(**{"serve.active_replies": 2}))
    done_b = {}

    def run_b():
        chunks = client(server).chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "b"}], stream=True)
        done_b["text"] = "".join(ch.choices[0].delta.content or "" for ch in chunks)

    tb = threading.Thread(target=run_b)
    stream = client(server).chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "a"}],
                                                    stream=True)
    tb.start()
    got = 0
    for ch in stream:
        got += bool(ch.choices and ch.choices[0].delta.content)
        if got == 3:
            break
    stream.close()
    tb.join(30)
    deadline = time.monotonic() + 10
    while any(t.name == "boundctx-reply" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(t.name == "boundctx-reply" for t in threading.enumerate())  # no thread left behind
    assert slow_a.produced < 40  # stopped within a few pieces of the close, not run on into the queue
    assert done_b["text"] == "".join(f"w{i} " for i in range(30))  # the other reply untouched


def test_a_client_that_stops_reading_is_dropped_after_the_send_timeout(serve):
    # A reader that keeps the connection open but takes nothing: the socket buffers fill,
    # a write waits past serve.send_timeout_seconds, and the reply is cancelled.
    import socket

    big = "x" * 16_384

    class Flood(Slow):
        def __call__(self, request):
            def gen():
                for _ in range(self.pieces):
                    self.produced += 1
                    yield big
            return gen()

    flood = Flood(pieces=5_000)  # 80 MB if nobody stopped it
    server = serve(ScriptedProvider(flood, context_window=8192), model_id=MODEL,
                   settings=settings(**{"serve.send_timeout_seconds": 0.5}))
    body = json.dumps({"model": MODEL, "messages": ASK, "stream": True, "max_tokens": 4000}).encode()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", server.port))
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    assert sock.recv(64).startswith(b"HTTP/1.1 200")  # then read nothing more
    try:
        deadline = time.monotonic() + 20
        while any(t.name == "boundctx-reply" for t in threading.enumerate()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(t.name == "boundctx-reply" for t in threading.enumerate())  # the reply ended
        assert flood.produced < flood.pieces  # cancelled, not run to the end into a full buffer
        assert httpx.get(server.url + "/health").status_code == 200  # and the server serves others
    finally:
        sock.close()


def test_a_failure_mid_stream_is_an_error_chunk_then_done(serve):
    def respond(request):
        def gen():
            yield "partial "
            raise RuntimeError("llama_decode returned -1")
        return gen()

    server = serve(ScriptedProvider(respond), settings=settings(), model_id=MODEL)
    with httpx.stream("POST", server.url + "/v1/chat/completions",
                      json={"model": MODEL, "messages": ASK, "stream": True}) as r:
        raw = b"".join(r.iter_bytes()).decode()
    frames = [json.loads(f[6:]) for f in raw.split("\n\n") if f.startswith("data: {")]
    assert "error" in frames[-1] and frames[-1]["error"]["type"] == "server_error"
    assert raw.endswith("data: [DONE]\n\n")
    with pytest.raises(openai.APIError):
        list(client(server).chat.completions.create(model=MODEL, messages=ASK, stream=True))


def test_a_node_fetch_reader_gets_the_same_text(serve, tmp_path):
    import shutil
    import subprocess

    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the plain JavaScript fetch check needs it")
    server = serve(ScriptedProvider(answer, context_window=4096), settings=settings(), model_id=MODEL)
    script = tmp_path / "read.mjs"
    script.write_text("""import fs from "node:fs";
const res = await fetch(process.argv[2] + "/v1/chat/completions", {method: "POST",
  headers: {"content-type": "application/json"},
  body: JSON.stringify({model: process.argv[3], stream: true,
                        messages: JSON.parse(fs.readFileSync(process.argv[4], "utf8"))})});
const reader = res.body.getReader(); const dec = new TextDecoder(); let buf = "", text = "", progress = 0;
for (;;) { const {value, done} = await reader.read(); if (done) break; buf += dec.decode(value, {stream: true});
  let i; while ((i = buf.indexOf("\\n\\n")) >= 0) { const msg = buf.slice(0, i); buf = buf.slice(i + 2);
    if (!msg.startsWith("data: ") || msg === "data: [DONE]") continue;
    const c = JSON.parse(msg.slice(6)); if (c.boundctx) progress++;
    text += c.choices[0].delta.content || ""; } }
console.log(JSON.stringify({text, progress}));
""")
    messages = tmp_path / "messages.json"
    messages.write_text(json.dumps(WITH_LOG))
    run = subprocess.run([node, str(script), server.url, MODEL, str(messages)], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["text"] == "The failing step is 377." and out["progress"] > 1


def test_a_non_streaming_client_that_gives_up_cancels_its_reply(serve):
    # Plain Starlette runs a non-streaming handler to the end after the client left;
    # here the disconnect ends the reply (an openai client's timeout retries would
    # otherwise pile up expensive replies).
    slow = Slow(pieces=500, gap=0.01)
    server = serve(ScriptedProvider(slow), settings=settings(), model_id=MODEL)
    with pytest.raises(openai.APITimeoutError):
        client(server, timeout=0.5).chat.completions.create(model=MODEL, messages=ASK)
    deadline = time.monotonic() + 10
    while any(t.name == "boundctx-reply" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(t.name == "boundctx-reply" for t in threading.enumerate())
    assert slow.produced < 150


TOOLS = [{"type": "function", "function": {"name": "read_log", "description": "Read the build log.",
                                           "parameters": {"type": "object", "properties": {}}}}]


def test_a_tools_round_trip_through_the_official_client(serve):
    from boundctx.providers import ToolCallChunk

    def respond(request):
        if request.messages[-1]["role"] == "tool":
            return "It read: " + request.messages[-1]["content"]
        return [ToolCallChunk("call_1", "read_log", "{}")]

    provider = ScriptedProvider(respond, context_window=8192)
    server = serve(provider, settings=settings(), model_id=MODEL)
    c = client(server)
    first = c.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS)
    assert first.choices[0].finish_reason == "tool_calls"
    call = first.choices[0].message.tool_calls[0]
    assert (call.id, call.function.name, call.function.arguments) == ("call_1", "read_log", "{}")
    assert [t["function"]["name"] for t in provider.requests[0].tools] == ["read_log"]
    messages = ASK + [first.choices[0].message.model_dump(exclude_none=True),
                      {"role": "tool", "tool_call_id": "call_1", "content": "step 377 FAILED"}]
    second = c.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
    assert second.choices[0].message.content == "It read: step 377 FAILED"
    chunks = list(c.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, stream=True))
    streamed = [tc for ch in chunks for tc in (ch.choices[0].delta.tool_calls or [])]
    assert [(t.id, t.function.name) for t in streamed] == [("call_1", "read_log")]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_a_bad_tool_is_a_400_naming_it(serve):
    server = serve(ScriptedProvider(answer), settings=settings(), model_id=MODEL)
    bad = TOOLS + [{"type": "function", "function": {"name": "read_log"}}]
    with pytest.raises(openai.BadRequestError) as info:
        client(server).chat.completions.create(model=MODEL, messages=ASK, tools=bad)
    assert info.value.code == "invalid_tools" and "read_log" in str(info.value)


def test_a_log_pasted_under_the_question_is_read_in_sections(serve):
    # The user message *is* the long input: workers quote its head and tail as the
    # question (analysis.workers.worker_question), so each has room for its section.
    from boundctx.analysis.workers import QUESTION_MAX_CHARS, worker_question

    server = serve(ScriptedProvider(answer, context_window=4096), settings=settings(), model_id=MODEL)
    pasted = [{"role": "user", "content": "Which step failed?\n\n" + LOG}]
    chunks = list(client(server).chat.completions.create(model=MODEL, messages=pasted, stream=True, max_tokens=256))
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks) == "The failing step is 377."
    assert any((ch.model_extra or {}).get("boundctx", {}).get("type") == "analysis_progress" for ch in chunks)
    quoted = worker_question(pasted[0]["content"])
    assert quoted.startswith("Which step failed?") and len(quoted) < QUESTION_MAX_CHARS + 120
    assert f"{len(pasted[0]['content']) - QUESTION_MAX_CHARS:,} characters" in quoted
    assert worker_question("short question") == "short question"


def test_a_quiet_stream_gets_keepalive_pings(serve):
    def respond(request):
        def gen():
            time.sleep(0.8)  # a long prompt evaluation: nothing to send for a while
            yield "late"
        return gen()

    server = serve(ScriptedProvider(respond), settings=settings(**{"serve.sse_ping_seconds": 0.2}), model_id=MODEL)
    with httpx.stream("POST", server.url + "/v1/chat/completions",
                      json={"model": MODEL, "messages": ASK, "stream": True}) as r:
        raw = b"".join(r.iter_bytes()).decode()
    assert raw.count(": ping\n\n") >= 2 and raw.index(": ping") < raw.index('"late"')


def test_boundctx_own_remote_provider_reads_boundctx_serve(serve):
    # One boundctx in front of another: the remote provider parses what serve streams
    # (progress chunks included) into the same answer.
    from boundctx.providers.remote import OpenAICompatibleProvider

    server = serve(ScriptedProvider(answer, context_window=8192), settings=settings(), model_id=MODEL)
    remote = OpenAICompatibleProvider(server.url, model=MODEL, context_window=8192, max_retries=0)
    try:
        text = direct_text(lambda: remote, ASK, **{"chat.analysis_workers": 0})
    finally:
        remote.close()
    assert text == "The failing step is 377."


def test_boundctx_ask_without_a_model_name_uses_the_one_the_server_lists(serve, capsys):
    # boundctx serve refuses a model it does not serve (404): the CLI, given no --model,
    # asks /v1/models and uses the one model there instead of a made-up "default".
    from boundctx.cli import main
    from boundctx.providers.remote import served_model

    server = serve(ScriptedProvider(answer, context_window=8192), settings=settings(), model_id=MODEL)
    assert served_model(server.url + "/v1", None) == MODEL
    assert main(["ask", "--provider", "remote", "--base-url", server.url, "--n-ctx", "8192",
                 "Which step failed?"]) == 0
    assert "The failing step is 377." in capsys.readouterr().out
    assert served_model("http://127.0.0.1:9", None) is None  # nothing there: the old default stands


def test_the_sessions_routes_sit_behind_the_same_guard(serve, tmp_path):
    server = serve(ScriptedProvider(answer), settings=settings(), model_id=MODEL, api_keys={"k"},
                   sessions_dir=str(tmp_path / "s"))
    url = server.url + "/boundctx/v1/sessions"
    assert httpx.get(url).status_code == 401
    auth = {"authorization": "Bearer k"}
    assert httpx.post(url, json={"id": "chat-1"}, headers=auth).status_code == 201
    assert [s["id"] for s in httpx.get(url, headers=auth).json()["data"]] == ["chat-1"]
    assert (tmp_path / "s" / "chat-1.jsonl").exists()


def test_two_servers_on_one_sessions_folder_agree_on_layout_versions(serve, tmp_path):
    # Several boundctx serve processes behind one balancer: paging through either one
    # must not be refused as stale.
    folder = str(tmp_path / "shared")
    a = serve(ScriptedProvider(answer), settings=settings(), model_id=MODEL, sessions_dir=folder)
    b = serve(ScriptedProvider(answer), settings=settings(), model_id=MODEL, sessions_dir=folder)
    assert httpx.post(a.url + "/boundctx/v1/sessions", json={"id": "s"}).status_code == 201
    rec = {"type": "message", "message": {"role": "user", "content": "hi"}}
    for server in (a, b, a):
        assert httpx.post(server.url + "/boundctx/v1/sessions/s/messages", json=rec).status_code == 201
    va, vb = (httpx.get(x.url + "/boundctx/v1/sessions/s").json()["layout_version"] for x in (a, b))
    assert va == vb
    page = httpx.get(b.url + "/boundctx/v1/sessions/s/messages", params={"layout_version": va, "message_limit": 2})
    assert page.status_code == 200 and page.json()["message_count"] == 3


def test_several_tool_calls_stream_as_separate_calls(serve):
    # A client merges tool-call deltas by index: each call needs its own.
    from boundctx.providers import ToolCallChunk

    tools = TOOLS + [{"type": "function", "function": {"name": "grep", "parameters": {"type": "object"}}}]
    calls = [ToolCallChunk("call_1", "read_log", "{}"), ToolCallChunk("call_2", "grep", '{"q": "FAILED"}')]
    server = serve(ScriptedProvider(lambda request: list(calls), context_window=8192), settings=settings(),
                   model_id=MODEL)
    with client(server).chat.completions.stream(model=MODEL, messages=ASK, tools=tools) as stream:
        final = stream.get_final_completion()
    got = [(c.id, c.function.name, c.function.arguments) for c in final.choices[0].message.tool_calls]
    assert got == [("call_1", "read_log", "{}"), ("call_2", "grep", '{"q": "FAILED"}')]
    assert final.choices[0].finish_reason == "tool_calls"
    whole = client(server).chat.completions.create(model=MODEL, messages=ASK, tools=tools)
    assert [c.id for c in whole.choices[0].message.tool_calls] == ["call_1", "call_2"]


def test_a_failed_analysis_is_not_run_again_by_the_clients_retries(serve):
    # The official client retries a 5xx twice by default: a failure no retry can fix
    # says so (x-should-retry: false), so an expensive analysis runs once.
    from boundctx.analysis.workers import WORKER_INSTRUCTIONS

    worker_calls = []

    def respond(request):
        if request.messages[0]["content"] == WORKER_INSTRUCTIONS:
            worker_calls.append(1)
            raise RuntimeError("the worker's model crashed")
        return "unused"

    server = serve(ScriptedProvider(respond, context_window=4096), settings=settings(), model_id=MODEL)
    retrying = openai.OpenAI(base_url=server.url + "/v1", api_key="none")  # max_retries=2, the default
    with pytest.raises(openai.InternalServerError) as info:
        retrying.chat.completions.create(model=MODEL, messages=WITH_LOG, max_tokens=256)
    assert info.value.response.headers["x-should-retry"] == "false"
    assert len(worker_calls) == 1  # one request, one failed section: no second or third run
