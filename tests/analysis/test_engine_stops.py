"""The caller's stop strings in a reply, with the scripted provider (which, like a server
that ignores the field, does not stop by itself): the answer ends before the first one,
no part of it is ever a ``ReplyDelta``, and only the answer is cut."""

import pytest

from boundctx.analysis import Engine
from boundctx.analysis.workers import WORKER_INSTRUCTIONS
from boundctx.events import Done, ReplyDelta
from boundctx.providers import ScriptedProvider, ToolCallChunk

from tests._support import notes_text
from tests._support.scripted import LOG, settings

ASK = [{"role": "user", "content": "Which step failed?"}]


def run(provider, messages=ASK, files=(), **options):
    return list(Engine(provider, settings=settings(), max_reply_tokens=256).reply(messages, files=files, **options))


def answer_of(events):
    return "".join(e.text for e in events if isinstance(e, ReplyDelta))


def test_the_answer_ends_before_a_stop_string_split_over_pieces_and_the_generation_stops():
    pieces = ["Step 377 ", "failed.\n", "\nUs", "er: and", " now an invented turn", " that never ends"]
    p = ScriptedProvider(lambda r: pieces)
    events = run(p, stop=["\n\nUser:", "###"])
    deltas = [e.text for e in events if isinstance(e, ReplyDelta)]
    assert "".join(deltas) == "Step 377 failed."
    assert not any("\n" in d or "Us" in d for d in deltas)  # no piece of the stop string was passed on
    assert events[-1] == Done("stop", {"prompt_tokens": None, "completion_tokens": None})
    assert p.requests[0].stop == ["\n\nUser:", "###"]  # the model was asked to stop there too
    assert p.closed_early == 1  # and its stream closed at the stop, not read to its end


def test_a_single_string_is_one_stop_string_and_text_held_back_for_nothing_comes_out():
    p = ScriptedProvider(lambda r: ["It ends with #", "# but not ###", "?", " No: E", "ND"])
    assert answer_of(run(p, stop="###")) == "It ends with ## but not "
    p = ScriptedProvider(lambda r: ["Held: E", "N"])  # the stream ends inside a possible stop
    events = run(p, stop="END")
    assert answer_of(events) == "Held: EN" and events[-1].finish_reason == "stop"


def test_no_stop_strings_leave_the_answer_and_the_request_as_they_were():
    p = ScriptedProvider(lambda r: ["a\n\nUser: b"])
    assert answer_of(run(p)) == "a\n\nUser: b" and p.requests[0].stop is None
    assert answer_of(run(ScriptedProvider(lambda r: ["a", "b"]), stop=[])) == "ab"


def test_what_follows_a_stop_string_is_not_judged_as_a_loop():
    # The model loops after the stop, in the same piece: the reply is a complete
    # answer, not a repetition.
    loop = "The answer is step 377 of the build.\n"
    p = ScriptedProvider(lambda r: ["Done.\n<|end|>\n" + loop * 10])
    events = run(p, stop=["<|end|>"])
    assert answer_of(events) == "Done.\n" and events[-1].finish_reason == "stop"


def test_only_the_answer_is_cut_never_the_workers_notes():
    def respond(request):
        if request.messages[0]["content"] == WORKER_INSTRUCTIONS:
            body = request.messages[-1]["content"]
            return "step 377 FAILED\nid=7f3a9c11" if "FAILED" in body else ""
        return ["The failing step is 377.", "\nid=7f3a9c11"]

    p = ScriptedProvider(respond, context_window=4096)
    events = run(p, files=[("build.log", LOG)], stop="\n")
    workers = [r for r in p.requests if r.messages[0]["content"] == WORKER_INSTRUCTIONS]
    assert workers and all(r.stop is None for r in workers)
    answering = p.requests[-1]
    notes = notes_text(answering)  # both lines of the worker's notes reached the answer
    assert answering.stop == ["\n"]
    assert "step 377 FAILED (characters " in notes and "\nid=7f3a9c11 (characters " in notes
    assert answer_of(events) == "The failing step is 377." and events[-1].finish_reason == "stop"


def test_a_call_of_the_callers_tool_before_the_stop_still_ends_the_reply_with_it():
    tools = [{"type": "function", "function": {"name": "read_log", "parameters": {"type": "object"}}}]
    p = ScriptedProvider(lambda r: [ToolCallChunk("c1", "read_log", "{}"), "Reading.\nObservation:", " made up"])
    events = run(p, tools=tools, stop="\nObservation:")
    assert answer_of(events) == "Reading."
    assert events[-1].finish_reason == "tool_calls" and [c.id for c in events[-1].tool_calls] == ["c1"]


@pytest.mark.parametrize("stop, error", [("", ValueError), (["a", ""], ValueError), ([3], TypeError),
                                         (3, TypeError)])
def test_a_bad_stop_is_refused_at_the_call_before_any_model_call(stop, error):
    p = ScriptedProvider(lambda r: "x")
    with pytest.raises(error, match="stop"):
        Engine(p, settings=settings()).reply(ASK, stop=stop)
    assert p.requests == []
