"""The engine under a front end's own tools (decision 0020), with the scripted provider:
the caller's tools are offered and counted, their calls end the reply for the caller to
run, rereads are still answered inside, and tool results come back into the turn."""

import copy
import json
import re

import pytest

from boundctx.analysis import READ_TOOL_NAME, Engine
from boundctx.analysis.workers import WORKER_INSTRUCTIONS
from boundctx.errors import ToolOfferError
from boundctx.events import Done, Fitted, ReplyDelta, Stage, ToolCall, ToolResult
from boundctx.providers import ScriptedProvider, ToolCallChunk

from tests._support import notes_text

LOG = "".join(f"2026-11-30 step {i:04d}: {'ok' if i != 377 else 'FAILED id=7f3a9c11'}\n" for i in range(1500))
ASK = [{"role": "user", "content": "Which step failed, and with what id?"}]


def function(name, description="", parameters=None):
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": parameters or {"type": "object", "properties": {"cmd": {"type": "string"}},
                                     "required": ["cmd"]}}}


SH = function("sh", "Run a shell command and return its output.")
GREP = function("grep", "Search files for a pattern.")
# Arguments as a model writes them, spacing and all: they are passed on untouched.
ARGS = '{"cmd":  "grep -n FAILED build.log" }'


def engine(provider, max_reply_tokens=256, **settings):
    return Engine(provider, settings={"analysis.notes_max_tokens": 256, **settings},
                  max_reply_tokens=max_reply_tokens)


def is_worker(request):
    return request.messages[0]["content"] == WORKER_INSTRUCTIONS


def coordinator(provider):
    return [r for r in provider.requests if not is_worker(r)]


def names(request):
    return [t["function"]["name"] for t in request.tools or ()]


def worker_or(answer):
    """Workers keep their notes and add the failing line with its range; the coordinator
    answers with ``answer(request)``."""

    def respond(request):
        if not is_worker(request):
            return answer(request)
        body = request.messages[-1]["content"]
        notes = re.search(r"Your notes so far:\n(.*?)\n\nSection", body, re.S).group(1)
        notes = "" if notes == "(none yet)" else notes
        m = re.search(r"Section (\d+) of \d+ of .+?, characters (\d+)-(\d+):\n(.*)\Z", body, re.S)
        hit = m.group(4).find("FAILED")
        if hit < 0:
            return notes
        at = int(m.group(2)) + hit
        return notes + f"step failed [S{m.group(1)} {at}-{at + 18}]"

    return respond


def reread_args(request, widen=12):
    """A read_chat_section call for the range the notes cite."""
    system = notes_text(request)
    oid = re.search(r"Notes on (.+?) \([\d,]+ characters", system).group(1)
    start, end = map(int, re.search(r"\(characters (\d+)-(\d+)\)", system).groups())
    return json.dumps({"section_id": oid, "start": start, "end": end + widen})


def test_the_callers_tools_go_with_the_answer_unchanged_and_for_this_reply_only():
    tools = [SH, GREP]
    before = copy.deepcopy(tools)
    p = ScriptedProvider(worker_or(lambda r: "ok"), context_window=8192)
    e = engine(p)
    events = e.reply(ASK, tools=tools)
    # What is offered was taken at the call: a caller changing its dicts later changes nothing.
    tools[0]["function"]["description"] = "changed"
    assert isinstance(list(events)[-1], Done) and p.requests[-1].tools == before
    tools[0]["function"]["description"] = before[0]["function"]["description"]
    # With analysis, read_chat_section joins them for that reply; workers get no tools.
    list(e.reply(ASK, files=[("build.log", LOG)], tools=tools))
    assert names(coordinator(p)[-1]) == ["sh", "grep", READ_TOOL_NAME]
    assert all(r.tools is None for r in p.requests if is_worker(r))
    # No registry: the next reply offers only its own tools.
    list(e.reply(ASK, tools=[GREP]))
    assert p.requests[-1].tools == [GREP]
    list(e.reply(ASK))
    assert p.requests[-1].tools is None
    assert tools == before


@pytest.mark.parametrize(("tools", "message"), [
    ({"sh": SH}, r"tools must be a list of OpenAI function tools .* got dict"),
    (["sh"], r"tools\[0\] is a str, not a dict"),
    ([SH, {"type": "retrieval"}], r"tools\[1\] has type 'retrieval'; only function tools"),
    ([{"type": "function"}], r"tools\[0\] has no 'function' object"),
    ([{"type": "function", "function": {"description": "no name"}}], r"tools\[0\] has no function name"),
    ([SH, GREP, function("sh")], r"tools\[2\] \('sh'\) has the same name as tools\[0\]"),
    ([function(READ_TOOL_NAME)], r"\('read_chat_section'\) has the name of the engine's own tool"),
    ([function("sh", parameters={"type": "string"})], r"\('sh'\) has parameters of type 'string'; .* object"),
    ([{"type": "function", "function": {"name": "sh", "parameters": ["cmd"]}}], r"\('sh'\) has parameters of list"),
    ([function("sh", parameters={"type": "object", "properties": ["cmd"]})], r"'properties' is not an object"),
    ([function("sh", description=7)], r"\('sh'\) has a description of type int"),
    ([function("sh", parameters={"type": "object", "default": object()})], r"\('sh'\) cannot be written as JSON"),
])
def test_tools_that_cannot_be_offered_are_refused_at_the_call_naming_the_tool(tools, message):
    p = ScriptedProvider(lambda r: "ok")
    with pytest.raises(ToolOfferError, match=message) as raised:
        engine(p).reply(ASK, tools=tools)  # not iterated: refused before any event
    assert isinstance(raised.value, ValueError) and p.requests == []


def test_tools_without_parameters_or_with_an_empty_schema_are_offered():
    tools = [{"type": "function", "function": {"name": "now"}},
             {"type": "function", "function": {"name": "today", "parameters": {}}}]
    p = ScriptedProvider(lambda r: "ok")
    assert list(engine(p).reply(ASK, tools=tools))[-1].finish_reason == "stop"
    assert names(p.requests[-1]) == ["now", "today"]


def test_a_call_of_the_callers_tool_ends_the_reply_with_that_call():
    p = ScriptedProvider(lambda r: ["Let me look.", ToolCallChunk("call_1", "grep", ARGS)])
    events = list(engine(p).reply(ASK, tools=[SH, GREP]))
    assert [type(e) for e in events] == [Fitted, Stage, ReplyDelta, ToolCall, Done]
    call = ToolCall("call_1", "grep", ARGS, internal=False)
    assert events[3] == call and events[2].text == "Let me look."
    assert events[-1].finish_reason == "tool_calls" and events[-1].tool_calls == [call]
    assert len(p.requests) == 1  # the engine did not answer it: the caller runs it


def test_every_call_of_the_callers_tools_in_one_turn_ends_up_in_done_in_order():
    calls = [ToolCallChunk("a", "grep", ARGS), ToolCallChunk("b", "sh", '{"cmd": "make"}'),
             ToolCallChunk("c", "grep", '{"cmd": "x"}')]
    p = ScriptedProvider(lambda r: calls)
    events = list(engine(p).reply(ASK, tools=[SH, GREP]))
    expected = [ToolCall(c.id, c.name, c.arguments, internal=False) for c in calls]
    assert [e for e in events if isinstance(e, ToolCall)] == expected
    assert events[-1] == Done("tool_calls", events[-1].usage, expected) and len(p.requests) == 1


def test_the_callers_results_come_back_into_the_turn_and_are_answered():
    call = {"role": "assistant", "content": "Let me look.", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "grep", "arguments": ARGS}}]}
    result = {"role": "tool", "tool_call_id": "call_1", "content": "377: FAILED id=7f3a9c11"}
    p = ScriptedProvider(lambda r: "Step 377 failed: " + r.messages[-1]["content"]
                         if r.messages[-1]["role"] == "tool" else [ToolCallChunk("call_1", "grep", ARGS)])
    events = list(engine(p).reply(ASK + [call, result], tools=[GREP]))
    assert events[-1] == Done("stop", events[-1].usage)
    assert "".join(e.text for e in events if isinstance(e, ReplyDelta)) == "Step 377 failed: 377: FAILED id=7f3a9c11"
    assert p.requests[-1].messages == ASK + [call, result] and p.requests[-1].tools == [GREP]


def test_a_turn_calling_a_reread_and_the_callers_tool_returns_the_callers_call_only():
    def answer(request):
        return [ToolCallChunk("r1", READ_TOOL_NAME, reread_args(request)), ToolCallChunk("c1", "grep", ARGS)]

    p = ScriptedProvider(worker_or(answer), context_window=8192)
    events = list(engine(p).reply(ASK, files=[("build.log", LOG)], tools=[GREP]))
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert [(c.id, c.internal) for c in calls] == [("r1", True), ("c1", False)]
    (unrun,) = [e for e in events if isinstance(e, ToolResult)]
    assert unrun.id == "r1" and unrun.content.startswith("not run:") and "grep" in unrun.content
    assert events[-1].finish_reason == "tool_calls"
    assert events[-1].tool_calls == [ToolCall("c1", "grep", ARGS, internal=False)]
    assert len(coordinator(p)) == 1


def test_rereads_are_answered_inside_and_the_last_round_still_offers_the_callers_tools():
    def answer(request):
        if request.messages[-1]["role"] == "tool":
            return ["Found it.", ToolCallChunk("c1", "grep", ARGS)]
        return [ToolCallChunk("r1", READ_TOOL_NAME, reread_args(request))]

    p = ScriptedProvider(worker_or(answer), context_window=8192)
    e = Engine(p, settings={"analysis.notes_max_tokens": 256}, max_reply_tokens=256, max_tool_rounds=1)
    events = list(e.reply(ASK, files=[("build.log", LOG)], tools=[GREP]))
    first, second = coordinator(p)
    assert names(first) == ["grep", READ_TOOL_NAME] and names(second) == ["grep"]  # rereads spent
    (reread,) = [x for x in events if isinstance(x, ToolResult)]
    args = json.loads([x for x in events if isinstance(x, ToolCall) and x.internal][0].arguments)
    assert reread.content == LOG[args["start"]:args["end"]] and "id=7f3a9c11" in reread.content
    assert second.messages[-1] == {"role": "tool", "tool_call_id": "r1", "content": reread.content}
    assert events[-1].finish_reason == "tool_calls" and [c.id for c in events[-1].tool_calls] == ["c1"]


def test_a_call_of_a_tool_nobody_offered_is_answered_inside_naming_the_tools():
    p = ScriptedProvider(lambda r: "done" if r.messages[-1]["role"] == "tool" else
                         [ToolCallChunk("x1", "rm", '{"path": "/"}')])
    events = list(engine(p).reply(ASK, tools=[SH, GREP]))
    (call,) = [e for e in events if isinstance(e, ToolCall)]
    (result,) = [e for e in events if isinstance(e, ToolResult)]
    assert call.internal and "no tool named 'rm'" in result.content and "sh, grep" in result.content
    assert events[-1] == Done("stop", events[-1].usage) and len(p.requests) == 2


def test_a_call_cut_at_the_reply_budget_ends_with_length_and_still_carries_the_call():
    p = ScriptedProvider(lambda r: [ToolCallChunk("c1", "sh", ARGS), " ".join(f"w{i}" for i in range(400))])
    events = list(engine(p, max_reply_tokens=64).reply(ASK, tools=[SH]))
    assert events[-1].finish_reason == "length"
    assert events[-1].tool_calls == [ToolCall("c1", "sh", ARGS, internal=False)]


def test_the_callers_tool_schemas_are_counted_when_history_is_fitted():
    # Without the schema the whole history fits; with it, the oldest exchanges must go.
    history = []
    for i in range(8):
        history += [{"role": "user", "content": f"question {i} " + "q" * 100},
                    {"role": "assistant", "content": f"answer {i} " + "a" * 100}]
    big = function("sh", "Run a shell command. " + "Mind the sandbox. " * 50)
    p = ScriptedProvider(lambda r: "ok", context_window=2048 + 64)
    limit = 2048
    assert p.count_prompt(history + ASK) <= limit < p.count_prompt(history + ASK, tools=[big])
    # (The dropped history unsearched: its tool would take room of its own, decision 0046.)
    events = list(engine(p, max_reply_tokens=64, **{"analysis.history_search": False}).reply(history + ASK,
                                                                                             tools=[big]))
    (fitted,) = [e for e in events if isinstance(e, Fitted)]
    assert events[-1].finish_reason == "stop" and fitted.dropped
    sent = p.requests[-1]
    assert sent.tools == [big] and p.count_prompt(sent.messages, tools=sent.tools) <= limit
    # Exactly as much as needed: one exchange fewer dropped would not fit with the schema.
    assert p.count_prompt((history + ASK)[len(fitted.dropped) - 2:], tools=[big]) > limit


def test_the_callers_schemas_leave_room_for_the_reread_tool_and_the_notes():
    # An input that would pass whole beside the notes without the schema is read in
    # sections with it, and every coordinator prompt fits with all tools offered.
    medium = "".join(f"config line {i}: value {i * 7}\n" for i in range(160))
    big = function("sh", "Run a shell command. " + "Mind the sandbox. " * 220)
    p = ScriptedProvider(worker_or(lambda r: "ok"), context_window=8192)
    files = [("build.log", LOG), ("config.txt", medium)]
    events = list(engine(p).reply(ASK, files=files, tools=[big]))
    (fitted,) = [e for e in events if isinstance(e, Fitted)]
    assert events[-1].finish_reason == "stop" and fitted.analysed == ["build.log", "config.txt"]
    (answering,) = coordinator(p)
    assert answering.tools[0] == big and names(answering) == ["sh", READ_TOOL_NAME]
    assert p.count_prompt(answering.messages, tools=answering.tools) + 256 <= 8192


def test_tool_schemas_that_leave_no_room_fail_before_any_model_call():
    huge = function("sh", "x" * 9000)
    p = ScriptedProvider(lambda r: "ok", context_window=8192)
    events = list(engine(p).reply(ASK, tools=[huge]))
    assert events[-1].kind == "ContextOverflow" and "schemas of the 1 tools offered" in events[-1].error
    assert p.requests == []


def test_current_tool_results_pass_whole_when_they_fit_and_are_read_in_sections_when_not():
    small = "exit 0, 3 files changed"
    turn = ASK + [
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "sh", "arguments": '{"cmd": "cat build.log"}'}},
            {"id": "b", "type": "function", "function": {"name": "sh", "arguments": '{"cmd": "git diff"}'}}]},
        {"role": "tool", "tool_call_id": "a", "content": LOG},
        {"role": "tool", "tool_call_id": "b", "content": small}]

    def answer(request):
        if request.messages[-1]["role"] == "tool" and request.messages[-1]["tool_call_id"] == "r1":
            return "Step 377: " + request.messages[-1]["content"]
        return [ToolCallChunk("r1", READ_TOOL_NAME, reread_args(request))]

    p = ScriptedProvider(worker_or(answer), context_window=8192)
    events = list(engine(p).reply(turn, tools=[SH]))
    (fitted,) = [e for e in events if isinstance(e, Fitted)]
    assert fitted.analysed == ["tool result 2"] and fitted.dropped == []
    first = coordinator(p)[0]
    results = {m["tool_call_id"]: m["content"] for m in first.messages if m["role"] == "tool"}
    assert results["b"] == small and results["a"].startswith("[tool result 2: ") and "read completely" in results["a"]
    assert first.messages[1] == turn[1] and names(first) == ["sh", READ_TOOL_NAME]
    assert all(small not in r.messages[-1]["content"] and r.tools is None for r in p.requests if is_worker(r))
    # The analysed result is kept as an original: the exact failing line can be reread.
    assert "id=7f3a9c11" in "".join(e.text for e in events if isinstance(e, ReplyDelta))
    assert events[-1].finish_reason == "stop"


def test_an_assistant_message_read_in_sections_is_named_as_one():
    turn = ASK + [{"role": "assistant", "content": LOG, "tool_calls": [
                      {"id": "a", "type": "function", "function": {"name": "sh", "arguments": "{}"}}]},
                  {"role": "tool", "tool_call_id": "a", "content": "exit 0"}]
    p = ScriptedProvider(worker_or(lambda r: "ok"), context_window=8192)
    (fitted,) = [e for e in engine(p).reply(turn, tools=[SH]) if isinstance(e, Fitted)]
    assert fitted.analysed == ["assistant message 1"]


def test_old_research_is_dropped_first_with_the_callers_tools_offered():
    research = "".join(f"match {i}: src/module_{i}.py\n" for i in range(110))
    history = [
        {"role": "user", "content": "old question " + "q" * 500},
        {"role": "assistant", "content": "old answer"},
        {"role": "user", "content": "look it up"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "grep", "arguments": '{"cmd": "x"}'}}]},
        {"role": "tool", "tool_call_id": "t1", "content": research},
        {"role": "assistant", "content": "found it"},
    ]
    big = function("grep", "Search files for a pattern. " + "Mind the sandbox. " * 90)
    p = ScriptedProvider(lambda r: "ok", context_window=4096)
    limit = 4096 - 64
    # Without the schema nothing would need to go; with it, the research does, and only it.
    assert p.count_prompt(history + ASK) <= limit < p.count_prompt(history + ASK, tools=[big])
    # Only what must go (a low water of 1): which step that is depends on the schema.
    # (The dropped history unsearched: its tool would take room of its own, decision 0046.)
    events = list(engine(p, max_reply_tokens=64, **{"chat.low_water": 1.0, "analysis.history_search": False}
                         ).reply(history + ASK, tools=[big]))
    (fitted,) = [e for e in events if isinstance(e, Fitted)]
    assert fitted.dropped == [3, 4] and fitted.dropped_research == 2
    sent = p.requests[-1]
    assert sent.messages == history[:3] + history[5:] + ASK and sent.tools == [big]
    assert p.count_prompt(sent.messages, tools=sent.tools) <= limit and events[-1].finish_reason == "stop"


def test_a_model_that_cannot_call_tools_is_refused_when_tools_are_offered():
    p = ScriptedProvider(lambda r: "ok")
    p.supports_tools = False
    with pytest.raises(ToolOfferError, match=r"cannot call tools .*\(sh, grep\).*tool-capable model"):
        engine(p).reply(ASK, tools=[SH, GREP])
    assert p.requests == []
    # Without tools (none, or an empty list) it answers as before.
    for tools in (None, []):
        assert list(engine(p).reply(ASK, tools=tools))[-1].finish_reason == "stop"
    assert all(r.tools is None for r in p.requests)



def test_a_round_of_rereads_that_cannot_fit_is_left_out_and_the_reply_answers_within_the_window():
    """The model's calls and their results are counted before they join the prompt: a
    round too big even with every result refused is left out whole, the rereads stop,
    and the answer comes from the notes, never a prompt past the window."""
    def answer(request):
        if READ_TOOL_NAME in names(request):
            # Many calls, each with arguments far longer than the room left.
            args = json.loads(reread_args(request))
            return [ToolCallChunk(f"r{k}", READ_TOOL_NAME, json.dumps({**args, "why": "x" * 400}))
                    for k in range(40)]
        return ["Step 377 failed; its id could not be confirmed."]

    p = ScriptedProvider(worker_or(answer), context_window=4096)
    events = list(engine(p).reply(ASK, files=[("build.log", LOG)]))
    assert not [e for e in events if type(e).__name__ == "Failed"], events[-1]
    assert isinstance(events[-1], Done) and events[-1].finish_reason == "stop"
    assert "".join(e.text for e in events if isinstance(e, ReplyDelta)).startswith("Step 377 failed")
    for request in coordinator(p):  # every prompt the model got fit its window with the reply's room
        assert p.count_prompt(request.messages, tools=request.tools) + 256 <= p.context_window
    last = coordinator(p)[-1]
    assert READ_TOOL_NAME not in names(last)  # the offer stopped
    assert not any(m.get("tool_calls") for m in last.messages)  # the round that could not fit is not there
    assert "No more exact text can be read" in notes_text(last)
