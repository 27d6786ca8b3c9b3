"""The scripted provider: the deterministic twin every engine test stands on."""

import threading

import pytest

from boundctx.errors import ContextOverflow, GenerationTimeout
from boundctx.providers import Finish, ScriptedProvider, TextChunk, ToolCallChunk

HI = [{"role": "user", "content": "hi"}]


def test_it_answers_records_and_counts():
    p = ScriptedProvider(lambda req: "hello " + req.messages[-1]["content"])
    reply = p.chat(HI, max_tokens=50, temperature=0)
    assert reply.text == "hello hi" and reply.finish.reason == "stop"
    assert reply.finish.prompt_tokens == p.count_prompt(HI)
    assert reply.finish.completion_tokens == p.counter.count_text("hello hi")
    assert p.requests[0].messages == HI and p.requests[0].temperature == 0.0


def test_pieces_stream_in_order_with_tool_calls():
    call = ToolCallChunk("c1", "read_chat_section", '{"section_id": "s1", "start": 0, "end": 10}')
    p = ScriptedProvider(lambda req: ["a", "b", call])
    chunks = list(p.stream_chat(HI))
    assert chunks[:3] == [TextChunk("a"), TextChunk("b"), call]
    assert isinstance(chunks[-1], Finish) and chunks[-1].reason == "tool_calls"


def test_replies_are_cut_at_max_tokens():
    p = ScriptedProvider(lambda req: ["x" * 30, "y" * 30])
    reply = p.chat(HI, max_tokens=40)
    assert reply.finish.reason == "length" and p.counter.count_text(reply.text) <= 40
    assert reply.text == "x" * 30 + "y" * 10


def test_cancel_stops_before_the_next_piece():
    cancel = threading.Event()
    p = ScriptedProvider(lambda req: ["1", "2", "3", "4"])
    seen = []
    for chunk in p.stream_chat(HI, cancel=cancel):
        seen.append(chunk)
        if chunk == TextChunk("2"):
            cancel.set()
    assert seen[-1].reason == "cancelled" and TextChunk("3") not in seen
    assert p.active == 0


def test_a_time_limit_stops_the_generation():
    now = [0.0]
    p = ScriptedProvider(lambda req: (now.__setitem__(0, now[0] + 1) or str(i) for i in range(10)),
                         clock=lambda: now[0])
    with pytest.raises(GenerationTimeout, match="3.5 s"):
        list(p.stream_chat(HI, timeout_s=3.5))
    assert p.active == 0 and p.closed_early == 1


def test_an_exception_from_the_script_is_raised():
    p = ScriptedProvider(lambda req: RuntimeError("model crashed"))
    with pytest.raises(RuntimeError, match="model crashed"):
        p.chat(HI)


def test_a_prompt_that_does_not_fit_is_refused_before_the_call():
    calls = []
    p = ScriptedProvider(lambda req: calls.append(req) or "x", context_window=100)
    with pytest.raises(ContextOverflow) as info:
        p.chat([{"role": "user", "content": "z" * 200}], max_tokens=10)
    assert calls == [] and info.value.context_window == 100 and info.value.prompt_tokens > 100


def test_concurrency_is_tracked():
    p = ScriptedProvider(lambda req: ["a", "b"])
    one, two = p.stream_chat(HI), p.stream_chat(HI)
    next(one)
    next(two)
    assert p.max_active == 2  # the engine's tests assert it stays 1
    one.close()
    two.close()
    assert p.active == 0


def test_bad_options_are_refused():
    p = ScriptedProvider(lambda req: "x")
    with pytest.raises(ValueError, match="max_tokens"):
        p.chat(HI, max_tokens=0)
    with pytest.raises(ValueError, match="timeout_s"):
        p.chat(HI, timeout_s=0)
