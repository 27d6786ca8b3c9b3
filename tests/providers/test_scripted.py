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


# -- the provider interface, on its scripted twin ------------------------------------


def test_a_ready_request_is_streamed_as_it_is():
    from boundctx.providers.base import make_request

    p = ScriptedProvider(lambda req: "ok")
    request = make_request(HI, tools=None, max_tokens=9, temperature=0, stop=None, schema=None, timeout_s=None)
    assert [c.text for c in p.stream(request) if isinstance(c, TextChunk)] == ["ok"]
    assert p.requests[0] is request
    with pytest.raises(ValueError, match="timeout_s must be > 0"):
        p.stream(request, timeout_s=0)


def test_stream_chat_builds_the_request_and_sends_it_through_stream():
    class Watched(ScriptedProvider):
        def stream(self, request, *, cancel=None, timeout_s=None):
            sent.append((request, timeout_s))
            return super().stream(request, cancel=cancel, timeout_s=timeout_s)

    sent = []
    p = Watched(lambda req: "ok")
    assert p.chat(HI, max_tokens=5, temperature=0.5, timeout_s=2.0).text == "ok"
    (request, timeout_s), = sent
    assert (request.max_tokens, request.temperature, timeout_s) == (5, 0.5, 2.0) and p.requests == [request]


def test_a_provider_that_does_not_serialise_gives_a_turn_at_once():
    p = ScriptedProvider(lambda req: "ok")
    assert p.serialises is False
    with p.turn(timeout_s=0.001), p.turn():  # nothing held: nested and in any thread
        done = []
        worker = threading.Thread(target=lambda: done.append(p.chat(HI).text))
        worker.start()
        worker.join(5)
        assert done == ["ok"]


def test_with_closes_the_provider():
    class Closing(ScriptedProvider):
        closed = 0

        def close(self):
            self.closed += 1

    with Closing(lambda req: "ok") as p:
        assert p.chat(HI).text == "ok"
    assert p.closed == 1
    with ScriptedProvider(lambda req: "ok") as plain:  # close() is a no-op by default
        pass
    assert plain.chat(HI).text == "ok"


def test_every_finish_reason_is_in_the_closed_set():
    import typing

    import msgspec

    from boundctx.providers import ScriptedReply
    from boundctx.providers.base import FinishReason

    cancel = threading.Event()
    cancel.set()
    reasons = {
        ScriptedProvider(lambda req: "hi").chat(HI).finish.reason,
        ScriptedProvider(lambda req: "x" * 50).chat(HI, max_tokens=2).finish.reason,
        ScriptedProvider(lambda req: [ToolCallChunk("c", "f", "{}")]).chat(HI).finish.reason,
        ScriptedProvider(lambda req: ["a"]).chat(HI, cancel=cancel).finish.reason,
        ScriptedProvider(lambda req: ScriptedReply("", "content_filter")).chat(HI).finish.reason,
    }
    assert reasons == set(typing.get_args(FinishReason))
    with pytest.raises(msgspec.ValidationError, match="Invalid enum value 'eof'"):
        msgspec.convert({"reason": "eof"}, Finish)
