"""Request fields front ends send, honoured on loopback (issue 26): ``stop`` cuts the
answer, streamed and whole, local (scripted) and remote, with no part of a stop string
ever on the wire; every chunk a hand-written parser reads has ``delta.content``; a
conversation of only a system message is answered."""

import json

import httpx
import pytest

openai = pytest.importorskip("openai", reason="the serve tests drive the server with the official openai client")

from boundctx.providers import ScriptedProvider, ToolCallChunk  # noqa: E402
from boundctx.providers.remote import OpenAICompatibleProvider  # noqa: E402

from .test_boundctx_routes import API, events_of, message, new_session, session_messages  # noqa: E402
from tests._support.scripted import ASK, MODEL, WITH_LOG, answer, client, settings  # noqa: E402
from tests._support.servers import delta  # noqa: E402

# A small model's answer running on into a turn it invents, the stop string cut over pieces.
RUN_ON = ["Step 377 ", "failed.\n", "\nUs", "er: and", " what about", " step 12?"]
STOP = "\n\nUser:"


def raw_stream(server, body):
    """Every ``data:`` payload of a streamed completion, parsed (``[DONE]`` left out),
    after checking the stream ends with it."""
    with httpx.stream("POST", server.url + "/v1/chat/completions", json={"model": MODEL, "stream": True, **body}) as r:
        assert r.status_code == 200, r.read()
        raw = b"".join(r.iter_bytes()).decode()
    assert raw.endswith("data: [DONE]\n\n")
    return [json.loads(f[6:]) for f in raw.split("\n\n") if f.startswith("data: {")]


# -- stop ------------------------------------------------------------------------------


def test_stop_cuts_the_answer_streamed_and_whole_through_the_official_client(serve):
    provider = ScriptedProvider(lambda r: RUN_ON)
    server = serve(provider, settings=settings(), model_id=MODEL)
    c = client(server)
    whole = c.chat.completions.create(model=MODEL, messages=ASK, stop=[STOP, "###"])
    assert whole.choices[0].message.content == "Step 377 failed." and whole.choices[0].finish_reason == "stop"
    chunks = list(c.chat.completions.create(model=MODEL, messages=ASK, stop=STOP, stream=True))
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks) == "Step 377 failed."
    assert chunks[-1].choices[0].finish_reason == "stop"
    with c.chat.completions.stream(model=MODEL, messages=ASK, stop=[STOP]) as stream:
        assert stream.get_final_completion().choices[0].message.content == "Step 377 failed."
    # The model was asked to stop there too (a string is a list of one).
    assert [r.stop for r in provider.requests] == [[STOP, "###"], [STOP], [STOP]]


def test_no_part_of_a_stop_string_is_ever_on_the_wire(serve):
    server = serve(ScriptedProvider(lambda r: RUN_ON), settings=settings(), model_id=MODEL)
    chunks = raw_stream(server, {"messages": ASK, "stop": STOP})
    texts = [ch["choices"][0]["delta"].get("content") for ch in chunks]
    assert "".join(t or "" for t in texts) == "Step 377 failed."
    assert not any("\n" in t or "Us" in t for t in texts if t)  # held back, then dropped, never sent
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop" and chunks[-1]["boundctx"]["finish_reason"] == "stop"


def test_text_held_back_as_a_possible_stop_string_is_sent_once_it_is_not_one(serve):
    server = serve(ScriptedProvider(lambda r: ["Use the ", "\n", "\nUs", "ual step"]), settings=settings(),
                   model_id=MODEL)
    chunks = raw_stream(server, {"messages": ASK, "stop": [STOP]})
    texts = [ch["choices"][0]["delta"]["content"] for ch in chunks if ch["choices"][0]["delta"].get("content")]
    assert texts == ["Use the ", "\n\nUsual step"]


@pytest.mark.parametrize("stop, param", [
    (5, "stop"), ({"s": "x"}, "stop"), ([1], "stop[0]"), (["ok", None], "stop[1]"),
    ("", "stop"), (["a", ""], "stop[1]"), (["a", "b", "c", "d", "e"], "stop"),
])
def test_a_bad_stop_is_a_400_naming_the_field_before_any_model_call(serve, stop, param):
    provider = ScriptedProvider(lambda r: "x")
    server = serve(provider, settings=settings(), model_id=MODEL)
    r = httpx.post(server.url + "/v1/chat/completions", json={"model": MODEL, "messages": ASK, "stop": stop})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == param and "stop" in err["message"]
    with pytest.raises(openai.BadRequestError) as info:
        client(server).chat.completions.create(model=MODEL, messages=ASK, stop=stop)
    assert info.value.param == param
    assert provider.requests == []


def test_four_stop_strings_and_a_null_stop_are_accepted(serve):
    provider = ScriptedProvider(lambda r: ["a", "b", "c"])
    server = serve(provider, settings=settings(), model_id=MODEL)
    c = client(server)
    assert c.chat.completions.create(model=MODEL, messages=ASK, stop=["x", "y", "z", "c"]).choices[0].message.content \
        == "ab"
    r = httpx.post(server.url + "/v1/chat/completions", json={"model": MODEL, "messages": ASK, "stop": None})
    assert r.json()["choices"][0]["message"]["content"] == "abc"
    assert [r.stop for r in provider.requests] == [["x", "y", "z", "c"], None]


def test_stop_is_forwarded_to_a_remote_model_and_cut_here_if_it_is_ignored(serve, scripted_server):
    # An upstream that ignores stop and streams the invented turn anyway.
    upstream = scripted_server(*[(200, [delta(t) for t in RUN_ON] + [delta(finish="stop")])] * 2)
    remote = OpenAICompatibleProvider(upstream.url, model="upstream-model", context_window=8192, max_retries=0)
    server = serve(remote, settings=settings(), model_id=MODEL)
    c = client(server)
    try:
        whole = c.chat.completions.create(model=MODEL, messages=ASK, stop=[STOP, "###"])
        chunks = list(c.chat.completions.create(model=MODEL, messages=ASK, stop=STOP, stream=True))
    finally:
        remote.close()
    assert [r["stop"] for r in upstream.requests] == [[STOP, "###"], [STOP]]
    assert whole.choices[0].message.content == "Step 377 failed." and whole.choices[0].finish_reason == "stop"
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks) == "Step 377 failed."


def test_a_session_reply_honours_stop_and_saves_the_answer_before_it(serve, tmp_path):
    server = serve(ScriptedProvider(lambda r: RUN_ON), settings=settings(), model_id=MODEL)
    new_session(server, "s", [message("user", "hi"), message("assistant", "Hello.")])
    with httpx.stream("POST", f"{server.url}{API}/sessions/s/replies",
                      json={"content": "Which step failed?", "stop": [STOP]}) as r:
        events = events_of(r)
    assert "".join(d["text"] for n, d in events if n == "reply_delta") == "Step 377 failed."
    assert events[-1][1]["finish_reason"] == "stop" and events[-1][1]["saved"] is True
    assert session_messages(tmp_path, "s")[-1] == {"role": "assistant", "content": "Step 377 failed."}
    refused = httpx.post(f"{server.url}{API}/sessions/s/replies", json={"content": "q", "stop": ["a", ""]})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "stop[1]"


# -- the chunks a hand-written parser reads ------------------------------------------------


def hand_written(chunks):
    """The reply as llama.cpp's server tests read a stream: ``delta["content"]`` of every
    chunk until the finish (a KeyError if one lacks it), none on the finish chunk."""
    content, finished = "", []
    for data in chunks:
        if not data["choices"]:  # the usage chunk
            continue
        choice = data["choices"][0]
        if choice["finish_reason"] is not None:
            assert "content" not in choice["delta"]
            finished.append(choice["finish_reason"])
        else:
            content += choice["delta"]["content"]
    assert len(finished) == 1
    return content, finished[0]


TOOLS = [{"type": "function", "function": {"name": "read_log", "parameters": {"type": "object"}}}]


def test_every_chunk_before_the_finish_has_content_and_they_join_into_the_reply(serve):
    def respond(request):
        if request.tools and request.messages[-1]["content"] == "Call it.":
            return ["Reading it.", ToolCallChunk("c1", "read_log", "{}")]
        return answer(request)

    server = serve(ScriptedProvider(respond, context_window=4096),
                   settings=settings(**{"serve.progress_max_hz": 1000.0}), model_id=MODEL)
    hello = raw_stream(server, {"messages": [{"role": "user", "content": "Say hello"}],
                                "stream_options": {"include_usage": True}})
    assert hand_written(hello) == ("The failing step is 377.", "stop")
    kinds = [ch.get("boundctx", {}).get("type") for ch in hello]
    assert "fitted" in kinds and "stage" in kinds  # even a short reply has progress chunks: they have content
    long = raw_stream(server, {"messages": WITH_LOG, "max_tokens": 256})
    assert hand_written(long) == ("The failing step is 377.", "stop")
    progress = [ch for ch in long if ch.get("boundctx", {}).get("type") == "analysis_progress"]
    assert progress and all(ch["choices"][0]["delta"] == {"content": ""} for ch in progress)
    called = raw_stream(server, {"messages": [{"role": "user", "content": "Call it."}], "tools": TOOLS})
    assert hand_written(called) == ("Reading it.", "tool_calls")
    (call,) = [ch for ch in called if "tool_calls" in ch["choices"][0]["delta"]]
    assert call["choices"][0]["delta"]["tool_calls"][0]["function"]["name"] == "read_log"
    assert hello[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}  # the role chunk, as OpenAI's


def test_the_official_client_sees_empty_content_not_none_on_progress_and_assembles_the_same_reply(serve):
    server = serve(ScriptedProvider(answer, context_window=4096), settings=settings(), model_id=MODEL)
    chunks = list(client(server).chat.completions.create(model=MODEL, messages=WITH_LOG, max_tokens=256,
                                                         stream=True))
    before_finish = [ch for ch in chunks if ch.choices[0].finish_reason is None]
    assert all(isinstance(ch.choices[0].delta.content, str) for ch in before_finish)
    assert "".join(ch.choices[0].delta.content for ch in before_finish) == "The failing step is 377."
    assert any((ch.model_extra or {}).get("boundctx", {}).get("type") == "analysis_progress" for ch in before_finish)
    with client(server).chat.completions.stream(model=MODEL, messages=WITH_LOG, max_tokens=256) as stream:
        assert stream.get_final_completion().choices[0].message.content == "The failing step is 377."


# -- a conversation without a user message ---------------------------------------------------

TITLE = [{"role": "system", "content": "Write a five-word title for this conversation.\n\nUser: Which step failed?"}]


def test_a_system_message_alone_is_answered_whole_and_streamed(serve):
    provider = ScriptedProvider(lambda r: ["Build ", "step 377 failed"])
    server = serve(provider, settings=settings(), model_id=MODEL)
    c = client(server)
    whole = c.chat.completions.create(model=MODEL, messages=TITLE)
    assert whole.choices[0].message.content == "Build step 377 failed" and whole.choices[0].finish_reason == "stop"
    assert hand_written(raw_stream(server, {"messages": TITLE})) == ("Build step 377 failed", "stop")
    assert [r.messages for r in provider.requests] == [TITLE, TITLE]
    counted = httpx.post(server.url + API + "/count", json={"messages": TITLE})
    assert counted.status_code == 200 and counted.json()["prompt_tokens"] > 0


def test_an_empty_conversation_is_still_a_400(serve):
    provider = ScriptedProvider(lambda r: "x")
    server = serve(provider, settings=settings(), model_id=MODEL)
    with pytest.raises(openai.BadRequestError) as info:
        client(server).chat.completions.create(model=MODEL, messages=[])
    assert info.value.param == "messages" and provider.requests == []
