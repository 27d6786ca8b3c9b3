"""The remote provider: against llama-cpp-python's real OpenAI-compatible server on
loopback, and against a scripted HTTP server for the failures a real one rarely shows."""

import asyncio
import json
import threading

import pytest

from boundctx.errors import ConfigError, ContextOverflow, ServerResponseError, ServerTimeout, ServerUnreachable
from boundctx.providers import TextChunk
from boundctx.providers.remote import OpenAICompatibleProvider
from boundctx.tokens import ByteEstimateCounter

from tests._support.servers import delta, free_port, llama_cpp_server, missing_server_extra

HI = [{"role": "user", "content": "Say hello."}]


@pytest.fixture(scope="module")
def server_url(tmp_path_factory):
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    missing = missing_server_extra()
    if missing:
        pytest.skip(f"llama-cpp-python's server extra is missing ({', '.join(missing)}): "
                    "pip install 'llama-cpp-python[server]'")
    with llama_cpp_server(tmp_path_factory.mktemp("server") / "server.log", n_ctx=1024) as url:
        yield url


def test_a_reply_streams_from_the_real_server(server_url):
    with OpenAICompatibleProvider(server_url + "/v1", context_window=1024) as p:
        chunks = list(p.stream_chat(HI, max_tokens=8, temperature=0))
        assert any(isinstance(c, TextChunk) and c.text for c in chunks)
        assert chunks[-1].reason in ("stop", "length")


def test_the_estimate_never_counts_fewer_tokens_than_the_model_sees(server_url):
    from boundctx.tokens.llama import LlamaCounter
    exact = LlamaCounter()
    messages = [{"role": "user", "content": "ünïcode 中文 {\"id\": 12345678} " * 20}]
    with OpenAICompatibleProvider(server_url, context_window=1024) as p:
        assert p.count_prompt(messages) >= exact.count_prompt(messages)


def test_a_schema_is_honoured_whichever_form_the_server_takes(server_url):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    with OpenAICompatibleProvider(server_url, context_window=1024) as p:
        reply = p.chat([{"role": "user", "content": "Is the sky blue? Answer in JSON."}], max_tokens=20,
                       temperature=0, schema=schema)
        assert isinstance(json.loads(reply.text)["ok"], bool)


def test_cancel_closes_the_stream(server_url):
    cancel = threading.Event()
    with OpenAICompatibleProvider(server_url, context_window=1024) as p:
        seen = []
        for chunk in p.stream_chat([{"role": "user", "content": "Count from one to fifty."}], max_tokens=80,
                                   cancel=cancel, temperature=0):
            seen.append(chunk)
            if len(seen) == 2:
                cancel.set()
        assert seen[-1].reason == "cancelled" and len(seen) == 3


def test_a_prompt_the_server_cannot_hold_is_a_context_overflow(server_url):
    counter = ByteEstimateCounter()
    counter.ratio = 0.25  # a calibration that went wrong: it thinks the prompt fits
    with OpenAICompatibleProvider(server_url, context_window=8192, counter=counter) as p:
        with pytest.raises(ContextOverflow):
            p.chat([{"role": "user", "content": "word " * 1500}], max_tokens=10)
    assert counter.ratio == 1.0  # the overflow reset the estimate to the byte bound


# -- failures, from a scripted HTTP server ---------------------------------------------


def test_a_busy_server_is_asked_again_before_anything_is_generated(scripted_server):
    s = scripted_server((503, {"error": {"message": "loading model"}}), (200, [delta("hi"), delta(finish="stop")]))
    with OpenAICompatibleProvider(s.url, max_retries=2) as p:
        assert p.chat(HI).text == "hi"
    assert len(s.requests) == 2


def test_a_stream_cut_midway_is_an_error_and_never_resent(scripted_server):
    s = scripted_server((200, [delta("partial "), None]), (200, [delta("again")]))
    with OpenAICompatibleProvider(s.url, max_retries=2) as p, pytest.raises(ServerUnreachable, match="not resent"):
        p.chat(HI)
    assert len(s.requests) == 1


def test_tool_calls_are_assembled_from_their_pieces_and_usage_calibrates(scripted_server):
    pieces = [delta(tool_calls=[{"index": 0, "id": "c1", "function": {"name": "read_chat_", "arguments": ""}}]),
              delta(tool_calls=[{"index": 0, "function": {"name": "section", "arguments": "{\"start\": "}}]),
              delta(tool_calls=[{"index": 0, "function": {"arguments": "0}"}}]),
              delta(finish="tool_calls"),
              {"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 9}}]
    s = scripted_server((200, pieces))
    with OpenAICompatibleProvider(s.url) as p:
        reply = p.chat(HI, tools=[{"type": "function", "function": {"name": "read_chat_section"}}])
    (call,) = reply.tool_calls
    assert (call.id, call.name, call.arguments) == ("c1", "read_chat_section", "{\"start\": 0}")
    assert reply.finish.reason == "tool_calls" and reply.finish.prompt_tokens == 12
    assert s.requests[0]["stream"] is True and s.requests[0]["tools"][0]["function"]["name"] == "read_chat_section"


def test_llama_server_overflow_errors_carry_the_real_numbers(scripted_server):
    s = scripted_server((400, {"error": {"code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": 9000,
                                  "n_ctx": 4096, "message": "request (9000 tokens) exceeds the available context"}}))
    with OpenAICompatibleProvider(s.url) as p, pytest.raises(ContextOverflow) as info:
        p.chat(HI)
    assert (info.value.prompt_tokens, info.value.context_window) == (9000, 4096)


def test_auth_errors_say_what_to_do(scripted_server):
    s = scripted_server((401, {"error": {"message": "invalid api key"}}))
    wants = "invalid api key; the server wants an API key .*BOUNDCTX_API_KEY"
    with OpenAICompatibleProvider(s.url, api_key="wrong") as p, pytest.raises(ServerResponseError, match=wants):
        p.chat(HI)


def test_no_server_is_a_clear_error():
    url = f"http://127.0.0.1:{free_port()}"
    with OpenAICompatibleProvider(url, max_retries=0) as p, pytest.raises(ServerUnreachable, match="cannot connect"):
        p.chat(HI)


def test_the_async_stream_gives_the_same_chunks_and_errors(scripted_server):
    pieces = [delta("hel"), delta("lo"), delta(tool_calls=[{"index": 0, "id": "c1", "function": {
        "name": "f", "arguments": "{}"}}]), delta(finish="tool_calls")]
    s = scripted_server((503, {"error": {"message": "loading"}}), (200, pieces), (200, [delta("partial "), None]))

    async def go():
        async with OpenAICompatibleProvider(s.url, max_retries=1) as p:
            chunks = [c async for c in p.astream_chat(HI)]
            with pytest.raises(ServerUnreachable, match="not resent"):
                [c async for c in p.astream_chat(HI)]
        assert p._client.is_closed and p._async_client is None  # both clients closed
        return chunks

    chunks = asyncio.run(go())
    assert [c.text for c in chunks if isinstance(c, TextChunk)] == ["hel", "lo"]
    assert chunks[-2].name == "f" and chunks[-1].reason == "tool_calls"
    assert len(s.requests) == 3


def test_the_async_stream_works_against_the_real_server(server_url):
    async def go():
        async with OpenAICompatibleProvider(server_url, context_window=1024) as p:
            return [c async for c in p.astream_chat(HI, max_tokens=6, temperature=0)]

    chunks = asyncio.run(go())
    assert any(isinstance(c, TextChunk) for c in chunks) and chunks[-1].reason in ("stop", "length")


def test_text_that_is_not_valid_unicode_is_refused_in_words_before_any_request(scripted_server):
    from boundctx.errors import GenerationError

    s = scripted_server()
    bad = [{"role": "user", "content": b"caf\xe9".decode("utf-8", "surrogateescape")}]
    with OpenAICompatibleProvider(s.url) as p, pytest.raises(GenerationError, match="not valid Unicode"):
        p.chat(bad)
    assert s.requests == []


def test_the_base_url_is_the_servers_root_and_must_be_http():
    with OpenAICompatibleProvider("http://127.0.0.1:9/v1/") as p:
        assert p.base_url == "http://127.0.0.1:9"
    assert p._client.is_closed  # leaving the block closed the connections
    for url in ("ftp://127.0.0.1:9", "127.0.0.1:9", "http://"):
        with pytest.raises(ConfigError, match="base_url must be http"):
            OpenAICompatibleProvider(url)


def test_a_fastapi_error_detail_is_the_message(scripted_server):
    s = scripted_server((404, {"detail": "Not Found"}))
    with OpenAICompatibleProvider(s.url) as p, pytest.raises(
            ServerResponseError, match=r"answered 404: Not Found; is this an OpenAI-compatible server"):
        p.chat(HI)


SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
REFUSED_SCHEMA = (400, {"error": {"message": "unsupported response_format type: json_schema"}})


def test_a_refused_json_schema_is_asked_again_as_json_object_and_kept_sync_and_async(scripted_server):
    ok = (200, [delta('{"ok": true}'), delta(finish="stop")])
    s = scripted_server(REFUSED_SCHEMA, ok, ok, REFUSED_SCHEMA, ok)
    with OpenAICompatibleProvider(s.url, max_retries=0) as p:
        assert p.chat(HI, schema=SCHEMA).text == '{"ok": true}'
        assert p.chat(HI, schema=SCHEMA).text == '{"ok": true}'

    async def go():
        async with OpenAICompatibleProvider(s.url, max_retries=0) as p:
            return [c async for c in p.astream_chat(HI, schema=SCHEMA)]

    assert asyncio.run(go())[0].text == '{"ok": true}'
    forms = [r["response_format"]["type"] for r in s.requests]
    assert forms == ["json_schema", "json_object", "json_object", "json_schema", "json_object"]


def _stalls_sync_and_async(url):
    """One reply asked for sync, then one async, from a server that goes quiet: each
    must fail as a stall, in boundctx's words."""
    stalled = r"sent nothing for 0.3 s in the middle of a reply"
    with OpenAICompatibleProvider(url, timeout=0.3) as p, pytest.raises(ServerTimeout, match=stalled):
        p.chat(HI)

    async def go():
        async with OpenAICompatibleProvider(url, timeout=0.3) as p:
            with pytest.raises(ServerTimeout, match=stalled):
                [c async for c in p.astream_chat(HI)]

    asyncio.run(go())


def test_a_stream_that_stalls_midway_is_a_timeout_sync_and_async(scripted_server):
    s = scripted_server((200, [delta("partial "), 1.5]), (200, [delta("partial "), 1.5]))
    _stalls_sync_and_async(s.url)
    assert len(s.requests) == 2  # neither was resent


def test_an_empty_stream_asks_once_unstreamed_and_a_silent_answer_is_a_timeout_sync_and_async(scripted_server):
    # An empty stream, then an unstreamed answer whose body never comes: reading that
    # body fails in boundctx's words, as a stream's does, not as a bare httpx error.
    s = scripted_server(*[(200, [None]), (200, [1.5])] * 2)
    _stalls_sync_and_async(s.url)
    assert [r["stream"] for r in s.requests] == [True, False, True, False]


def test_a_servers_finish_reason_is_read_into_the_closed_set():
    from boundctx.providers.remote import finish_reason

    assert [finish_reason(v) for v in ("stop", "length", "tool_calls", "content_filter")] == [
        "stop", "length", "tool_calls", "content_filter"]
    assert finish_reason("function_call") == "tool_calls"  # the older API's word
    assert finish_reason("eos_token") == "stop" and finish_reason(None) == "stop"


def test_cached_prompt_tokens_are_reported_where_the_server_says_and_llama_server_is_asked_to_keep_them(
        scripted_server):
    # llama.cpp's server says what it reused in `timings`; once it has, each request asks
    # it to keep the prompt's evaluated start (`cache_prompt`). Other servers say it in
    # usage.prompt_tokens_details and are never sent a field they may not know.
    llama = [delta("hi"), delta(finish="stop"),
             {"choices": [], "usage": {"prompt_tokens": 40, "completion_tokens": 1},
              "timings": {"cache_n": 31, "prompt_n": 9}}]
    s = scripted_server((200, llama), (200, llama))
    with OpenAICompatibleProvider(s.url) as p:
        assert p.chat(HI).finish.cached_tokens == 31
        p.chat(HI)
    assert "cache_prompt" not in s.requests[0] and s.requests[1]["cache_prompt"] is True
    openai = [delta("hi"), delta(finish="stop"),
              {"choices": [], "usage": {"prompt_tokens": 40, "completion_tokens": 1,
                                        "prompt_tokens_details": {"cached_tokens": 32}}}]
    s = scripted_server((200, openai), (200, openai), (200, [delta("hi"), delta(finish="stop")]))
    with OpenAICompatibleProvider(s.url) as p:
        assert p.chat(HI).finish.cached_tokens == 32
        p.chat(HI)
        assert p.chat(HI).finish.cached_tokens is None  # a server that does not say
    assert not any("cache_prompt" in r for r in s.requests)


def test_the_real_servers_reply_carries_no_cached_count_it_did_not_give(server_url):
    # llama-cpp-python's server reports no cached tokens: None, never a guess.
    with OpenAICompatibleProvider(server_url, context_window=1024) as p:
        reply = p.chat(HI, max_tokens=4)
    assert reply.finish.cached_tokens is None and not p.llama_server
