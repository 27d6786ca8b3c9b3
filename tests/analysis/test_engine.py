"""The reply engine with the scripted provider: every rule of section analysis, exactly."""

import json
import re
import threading

import pytest

from boundctx import config
from boundctx.analysis import READ_TOOL_NAME, Engine
from boundctx.analysis.workers import WORKER_INSTRUCTIONS
from boundctx.events import AnalysisProgress, Done, Failed, Fitted, ReplyDelta, Stage, ToolCall, ToolResult
from boundctx.providers import ScriptedProvider, ToolCallChunk

from tests._support import notes_text

LOG = "".join(f"2026-11-30 step {i:04d}: {'ok' if i != 377 else 'FAILED id=7f3a9c11'}\n" for i in range(1500))


def settings(**over):
    return config.load(env={}, overrides={"analysis.notes_max_tokens": 256,
                                          **{k.replace("__", "."): v for k, v in over.items()}})


def is_worker(request):
    return request.messages[0]["content"] == WORKER_INSTRUCTIONS


class Model:
    """Workers note the failing line with its range; the coordinator answers from the
    notes, optionally rereading the cited range first."""

    def __init__(self, reread=False):
        self.reread = reread

    def __call__(self, request):
        body = request.messages[-1]["content"] if request.messages else ""
        if is_worker(request):
            m = re.search(r"Section (\d+) of \d+ of .+?, characters (\d+)-(\d+):\n(.*)\Z", body, re.S)
            notes = re.search(r"Your notes so far:\n(.*?)\n\nSection", body, re.S).group(1)
            notes = "" if notes == "(none yet)" else notes
            start = int(m.group(2))
            hit = m.group(4).find("FAILED")
            if hit >= 0:
                line_start = start + hit
                notes += f"step failed (characters {line_start}-{line_start + 18})"
            return notes
        system = notes_text(request)
        if self.reread and request.messages[-1]["role"] != "tool" and "(characters " in system:
            oid = re.search(r"Notes on (.+?) \([\d,]+ characters", system).group(1)
            start, end = map(int, re.search(r"\(characters (\d+)-(\d+)\)", system).groups())
            return [ToolCallChunk("c1", READ_TOOL_NAME, json.dumps({"section_id": oid, "start": start,
                                                                    "end": end + 12}))]
        if request.messages[-1]["role"] == "tool":
            return "The failing step: " + request.messages[-1]["content"]
        return "answer: " + ("from notes" if "step failed" in system else "direct")


def run(provider, messages, files=(), **over):
    engine = Engine(provider, settings=settings(**over), max_reply_tokens=256)
    return list(engine.reply(messages, files=files))


ASK = [{"role": "user", "content": "Which step failed, and with what id?"}]


def test_a_short_conversation_goes_direct_in_one_call():
    p = ScriptedProvider(Model(), context_window=8192)
    events = run(p, ASK)
    assert [type(e) for e in events] == [Fitted, Stage, ReplyDelta, Done] and events[2].text == "answer: direct"
    # The prompt's tokens are those of the one call made; a scripted model holds none of them.
    assert events[0] == Fitted(1, 1, [], 0, 0, [], 8192 - 256, p.count_prompt(p.requests[0].messages), None)
    assert events[1].stage == "answering"
    assert len(p.requests) == 1 and p.requests[0].messages == ASK and p.requests[0].tools is None


def test_old_history_is_dropped_research_first_then_oldest_exchanges():
    big = "x" * 5000
    history = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "old question " + big},
        {"role": "assistant", "content": "old answer"},
        {"role": "user", "content": "look something up"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "t1", "type": "function",
                                                             "function": {"name": "grep", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "t1", "content": "research " + big},
        {"role": "assistant", "content": "found it"},
    ]
    # Only what must go (a low water of 1), to see the order.
    p = ScriptedProvider(Model(), context_window=8192)
    run(p, history + ASK, chat__low_water=1.0)
    sent = p.requests[-1].messages
    assert not any(m.get("role") == "tool" for m in sent)  # research went first...
    assert {"role": "user", "content": "old question " + big} in sent  # ...and was enough
    p = ScriptedProvider(Model(), context_window=1200)
    run(p, history + ASK, chat__low_water=1.0)
    sent = p.requests[-1].messages
    assert sent[0] == {"role": "system", "content": "be brief"} and sent[-1] == ASK[-1]
    assert not any("old question" in str(m.get("content")) for m in sent)


def test_a_drop_goes_down_to_the_low_water_and_the_next_turns_keep_its_start():
    # A chat resent turn after turn at the window's edge: the first drop goes down to
    # half the prompt's limit (the default), and the turns after it send the same start
    # with the new messages appended, until the window fills again.
    limit = 2048 - 256

    def chat(**over):
        over = {"analysis__history_search": False, **over}  # the drop alone (its search: test_history_search)
        p = ScriptedProvider(lambda r: "noted " * 30, context_window=2048)
        convo = [{"role": "user", "content": "first " * 60}]
        sent, fitted = [], []
        for turn in range(30):
            events = run(p, convo, **over)
            fitted.append(events[0])
            sent.append(p.requests[-1].messages)
            # (what is sent includes the notice of the dropped messages and their tool)
            assert fitted[-1].prompt_tokens == p.count_prompt(sent[-1], tools=p.requests[-1].tools) <= limit
            convo = convo + [{"role": "assistant", "content": "".join(e.text for e in events if hasattr(e, "text"))},
                             {"role": "user", "content": f"turn {turn} " + "more " * 50}]
        changed = [t for t in range(1, 30) if sent[t][:len(sent[t - 1])] != sent[t - 1]]
        return p, sent, fitted, changed

    p, sent, fitted, changed = chat()
    drops = [t for t in range(1, 30) if fitted[t].dropped != fitted[t - 1].dropped]
    assert changed == drops and drops  # the start changes only where something more is dropped
    for t in drops:
        assert fitted[t].prompt_tokens <= limit // 2  # and then down to the low water
    # Between drops, the turns' growth fills the half the drop freed.
    grown = sum(p.count_prompt(sent[t]) - p.count_prompt(sent[t - 1]) for t in range(1, 30) if t not in drops)
    assert len(drops) <= 1 + grown / (limit - limit // 2)
    # Dropping only what must go changes the start of nearly every turn at the edge.
    _, _, _, every_turn = chat(chat__low_water=1.0)
    assert len(every_turn) >= 2 * len(drops) and len(every_turn) >= 20


def test_files_are_told_apart_by_their_place_not_their_text():
    # A question that reads exactly like the attached file's message is still the
    # user's message: each is analysed under its own label, the file without a header.
    p = ScriptedProvider(Model(), context_window=8192)
    question = {"role": "user", "content": "File a.log:\n" + LOG}
    events = run(p, [question], files=[("a.log", LOG)])
    fitted = events[0]
    assert isinstance(fitted, Fitted)
    assert sorted(fitted.analysed) == ["a.log", "the user's message"], fitted.analysed


def test_an_input_too_big_for_the_context_is_read_in_sections_and_answered_from_notes():
    p = ScriptedProvider(Model(), context_window=8192)
    events = run(p, ASK, files=[("build.log", LOG)])
    workers = [r for r in p.requests if is_worker(r)]
    coordinator = [r for r in p.requests if not is_worker(r)]
    assert len(workers) > 3 and len(coordinator) == 1
    assert p.max_active == 1
    # Workers are one-off work: a local model keeps the reply's state, not theirs.
    assert not any(r.keep_state for r in workers) and coordinator[0].keep_state
    system = notes_text(coordinator[0])
    assert "step failed (characters " in system  # the notes reached the coordinator
    assert p.count_prompt(coordinator[0].messages) < p.counter.count_text(LOG)  # smaller than the input
    progress = [e for e in events if isinstance(e, AnalysisProgress)]
    replies = [e for e in events if isinstance(e, ReplyDelta)]
    assert progress and replies and events.index(progress[-1]) < events.index(replies[0])
    assert "".join(r.text for r in replies) == "answer: from notes"
    assert isinstance(events[-1], Done)


def test_a_voice_route_that_speaks_only_reply_text_never_speaks_notes():
    p = ScriptedProvider(Model(), context_window=8192)
    spoken = "".join(e.text for e in run(p, ASK, files=[("build.log", LOG)])
                     if isinstance(e, ReplyDelta))
    assert "step failed (characters " not in spoken and "[S" not in spoken


def test_the_coordinator_rereads_exact_ranges_of_this_replys_originals():
    p = ScriptedProvider(Model(reread=True), context_window=8192)
    events = run(p, ASK, files=[("build.log", LOG)])
    (call,) = [e for e in events if isinstance(e, ToolCall)]
    (result,) = [e for e in events if isinstance(e, ToolResult)]
    args = json.loads(call.arguments)
    assert result.content == LOG[args["start"]:args["end"]] and "id=7f3a9c11" in result.content
    assert "".join(e.text for e in events if isinstance(e, ReplyDelta)).endswith(LOG[args["start"]:args["end"]])
    coordinator = [r for r in p.requests if not is_worker(r)]
    assert coordinator[0].tools[0]["function"]["name"] == READ_TOOL_NAME
    # The tool's schema was counted: every coordinator prompt fits with the reply budget.
    assert all(p.count_prompt(r.messages, tools=r.tools) + 256 <= 8192 for r in coordinator)


def test_an_original_of_another_reply_cannot_be_read():
    """Originals are named for a reader (the file's name), and a name is looked up in
    this reply's originals only: one the previous reply read is not there."""
    first = ScriptedProvider(Model(), context_window=8192)
    run(first, ASK, files=[("build.log", LOG)])
    old_name = re.search(r"Notes on (.+?) \([\d,]+ characters",
                         [r for r in first.requests if not is_worker(r)][0].messages[0]["content"]).group(1)
    assert old_name == "build.log"

    def coordinator_tries_old_name(request):
        if is_worker(request):
            return "nothing"
        if request.messages[-1]["role"] == "tool":
            return "done"
        return [ToolCallChunk("c1", READ_TOOL_NAME, json.dumps({"section_id": old_name, "start": 0, "end": 5}))]

    second = ScriptedProvider(coordinator_tries_old_name, context_window=8192)
    events = run(second, ASK, files=[("deploy.log", LOG)])
    (result,) = [e for e in events if isinstance(e, ToolResult)]
    assert result.content.startswith("error: no original 'build.log'") and "deploy.log" in result.content


def test_with_analysis_off_tool_results_are_clipped_and_oversized_input_fails_clearly():
    convo = [{"role": "user", "content": "run the build"},
             {"role": "assistant", "content": "", "tool_calls": [{"id": "t1", "type": "function",
                                                                  "function": {"name": "sh", "arguments": "{}"}}]},
             {"role": "tool", "tool_call_id": "t1", "content": LOG[:20000]}]
    p = ScriptedProvider(Model(), context_window=8192)
    events = run(p, convo, chat__analysis_workers=0)
    assert isinstance(events[-1], Done)
    (tool,) = [m for m in p.requests[-1].messages if m["role"] == "tool"]
    assert tool["content"] == LOG[:4000]
    p = ScriptedProvider(Model(), context_window=4096)
    events = run(p, ASK, files=[("build.log", LOG)], chat__analysis_workers=0)
    assert isinstance(events[-1], Failed) and events[-1].kind == "ContextOverflow"
    assert "chat.analysis_workers = 0" in events[-1].error and p.requests == []


def test_a_worker_failure_fails_the_reply_and_names_the_unread_sections():
    p = ScriptedProvider(lambda r: ValueError("bad output") if is_worker(r) and "Section 2 of " in
                         r.messages[-1]["content"] else Model()(r), context_window=8192)
    events = run(p, ASK, files=[("build.log", LOG)])
    assert isinstance(events[-1], Failed) and events[-1].kind == "IncompleteCoverage"
    assert "sections 2, 3" in events[-1].error and not any(isinstance(e, ReplyDelta) for e in events)


def test_limits_fail_the_reply_before_any_model_call():
    p = ScriptedProvider(Model(), context_window=8192)
    events = run(p, ASK, files=[("build.log", LOG)], analysis__max_sections=2)
    assert isinstance(events[-1], Failed) and events[-1].kind == "TooManySections" and p.requests == []


def test_cancelling_stops_before_another_section_runs():
    cancel = threading.Event()

    def respond(request):
        if is_worker(request) and "Section 2 of " in request.messages[-1]["content"]:
            cancel.set()
        return Model()(request)

    p = ScriptedProvider(respond, context_window=8192)
    engine = Engine(p, settings=settings(analysis__worker_n_ctx=2048), max_reply_tokens=256)
    events = list(engine.reply(ASK, files=[("build.log", LOG)], cancel=cancel))
    assert events[-1] == Done("cancelled") and len(p.requests) == 2 and p.active == 0


def test_tool_results_that_fit_pass_whole_while_the_one_that_does_not_is_read():
    small = "exit 0, 3 files changed"
    convo = [{"role": "user", "content": "run both"},
             {"role": "assistant", "content": "", "tool_calls": [
                 {"id": "a", "type": "function", "function": {"name": "sh", "arguments": "{}"}},
                 {"id": "b", "type": "function", "function": {"name": "sh", "arguments": "{}"}}]},
             {"role": "tool", "tool_call_id": "a", "content": LOG},
             {"role": "tool", "tool_call_id": "b", "content": small}]
    p = ScriptedProvider(Model(), context_window=8192)
    events = run(p, convo)
    assert isinstance(events[-1], Done)
    coordinator = [r for r in p.requests if not is_worker(r)][-1]
    tools = {m["tool_call_id"]: m["content"] for m in coordinator.messages if m["role"] == "tool"}
    assert tools["b"] == small and tools["a"].startswith("[tool result") and "read completely" in tools["a"]
    workers = [r for r in p.requests if is_worker(r)]
    assert workers and all(small not in r.messages[-1]["content"] for r in workers)


def test_a_real_agent_session_is_fitted_to_a_small_window_with_exact_counts(pi_session, smollm2):
    """The newest 60 messages of a real pi session (tool calls, large tool results) as
    history at 2,048 tokens: old research goes first, the reply runs, the prompt the
    model got fits as the real template and tokenizer count it."""
    from boundctx.transcript import Transcript
    from boundctx.transcript.chat import chat_messages

    with Transcript.open(pi_session("large-session.jsonl")) as t:
        history = chat_messages(t.window(message_limit=60)).messages
    question = {"role": "user", "content": "What did we change last?"}
    assert smollm2.count_prompt(history + [question]) > 2048
    provider = ScriptedProvider(lambda request: "the last change", context_window=2048, counter=smollm2)
    events = run(provider, history + [question])
    assert isinstance(events[-1], Done)
    sent = provider.requests[-1].messages
    assert sent[-1] == question and smollm2.count_prompt(sent) <= 2048 - 256
    assert len(sent) < len(history) + 1


#: Forty facts, each in its own stretch of filler: notes that outgrow a small room.
UNIT_FACTS = "".join(f"Line {i}: the code of unit{i} is C{i:04d}.\n" + "filler words here. " * 30 for i in range(40))


def note_units(request) -> str:
    """A worker's answer on UNIT_FACTS: one line per whole fact in its section."""
    body = request.messages[-1]["content"]
    m = re.search(r"Section (\d+) of \d+ of .+?, characters (\d+)-(\d+):\n(.*)\Z", body, re.S)
    k, start = int(m.group(1)), int(m.group(2))
    return "\n".join(f"code of unit{f.group(1)}: C{int(f.group(1)):04d} [S{k} {start + f.start()}-{start + f.end()}]"
                     for f in re.finditer(r"the code of unit(\d+) is C\d+\.", m.group(4))) or "nothing relevant"


def test_notes_more_workers_write_than_the_window_holds_get_one_workers_room_and_every_key_stays_readable():
    # Eight workers at a 384-token notes budget need 3,072 tokens beside a prompt whose
    # limit is 2,816: the notes get one worker's room instead, values past it go to the
    # index, and a key not shown is read again by its name (decision 0028).
    def model(request):
        if is_worker(request):
            return note_units(request)
        if request.messages[-1]["role"] == "tool":
            return "read: " + request.messages[-1]["content"]
        system = notes_text(request)
        oid = re.search(r"Notes on (.+?) \([\d,]+ characters", system).group(1)
        return [ToolCallChunk("k1", READ_TOOL_NAME, json.dumps({"section_id": oid, "key": "code of unit3"}))]

    p = ScriptedProvider(model, context_window=3072)
    events = run(p, ASK, files=[("units.txt", UNIT_FACTS)], chat__analysis_workers=8, analysis__notes_max_tokens=384,
                 analysis__worker_n_ctx=3072)
    assert isinstance(events[-1], Done), events[-1]
    answering = [r for r in p.requests if not is_worker(r)]
    notes = notes_text(answering[0]).split("):\n", 1)[1]
    assert p.counter.count_text(notes) <= 384  # one worker's room, not eight
    assert "code of unit0" not in notes  # the oldest value went to make room
    assert "".join(e.text for e in events if isinstance(e, ReplyDelta)) == "read: the code of unit3 is C0003."
    assert all(p.count_prompt(r.messages, tools=r.tools) + r.max_tokens <= 3072 for r in p.requests)


def test_without_tools_the_notes_give_way_until_the_reread_step_can_ask_for_one_key():
    # A model without tool calls asks for rereads in one constrained step. When the notes
    # at their full room leave the step no room to write even one request, they are shown
    # in less, and the step reads the key again (what the notes no longer show stays
    # readable by name).
    def model(request):
        if is_worker(request):
            return note_units(request)
        if request.schema is not None:
            oid = re.search(r"Notes on (.+?) \([\d,]+ characters", notes_text(request)).group(1)
            return json.dumps({"reread": [{"id": oid, "key": "code of unit3"}]})
        return "answered"

    p = ScriptedProvider(model, context_window=2200)
    p.supports_tools = False
    engine = Engine(p, settings=settings(chat__analysis_workers=3, analysis__notes_max_tokens=384,
                                         analysis__worker_n_ctx=2200), max_reply_tokens=32)
    events = list(engine.reply([{"role": "user", "content": "What is the code of unit3?"}],
                               files=[("units.txt", UNIT_FACTS)]))
    assert isinstance(events[-1], Done)
    (call,) = [e for e in events if isinstance(e, ToolCall)]
    assert json.loads(call.arguments)["key"] == "code of unit3"
    (step,) = [r for r in p.requests if r.schema is not None]
    notes = notes_text(step).split("):\n", 1)[1]
    assert 384 < p.counter.count_text(notes) < 3 * 384 - 100  # less than their room, more than one worker's
    answer = notes_text(p.requests[-1])
    assert "the code of unit3 is C0003." in answer  # the exact text read again reached the answer
    assert all(p.count_prompt(r.messages, tools=r.tools) + r.max_tokens <= 2200 for r in p.requests)


def test_the_reread_step_offers_by_name_only_keys_a_servers_grammar_can_hold():
    # llama-cpp-python's server makes a grammar of the schema's enum without escaping
    # quotes or backslashes; a small model's notes can have such keys (`json.dump({"key"`).
    # They are left out of the enum (still read again by their cited range), the rest kept.
    log = 'config = json.dump({"key": 1})\nstatus ok\n' * 400

    def model(request):
        if is_worker(request):
            body = request.messages[-1]["content"]
            m = re.search(r"Section (\d+) of \d+ of .+?, characters (\d+)-(\d+):\n(.*)\Z", body, re.S)
            start = int(m.group(2))
            return (f'json.dump({{"key": 1 (characters {start}-{start + 20})\n'
                    f"status: ok (characters {start + 31}-{start + 40})\ntab\there: x (characters {start}-{start + 3})")
        if request.schema is not None:
            return json.dumps({"reread": []})
        return "answered"

    p = ScriptedProvider(model, context_window=4096)
    p.supports_tools = False
    events = run(p, ASK, files=[("app.log", log)])
    assert isinstance(events[-1], Done)
    (step,) = [r for r in p.requests if r.schema is not None]
    offered = step.schema["properties"]["reread"]["items"]["properties"]["key"]["enum"]
    assert offered == ["status"]


def test_a_model_without_tools_or_reread_step_answers_from_the_notes():
    # No tool calls and the constrained step off: the notes alone, and they are there.
    p = ScriptedProvider(Model(), context_window=4096)
    p.supports_tools = False
    events = run(p, ASK, files=[("build.log", LOG)], analysis__constrained_rereads=False)
    assert isinstance(events[-1], Done)
    answering = [r for r in p.requests if not is_worker(r)]
    assert len(answering) == 1 and answering[0].schema is None
    system = notes_text(answering[0])
    # The value is there; its range is not, since no reread can follow (decision 0044).
    assert "Notes on build.log" in system and "step failed" in system and "(characters " not in system
    assert "".join(e.text for e in events if isinstance(e, ReplyDelta)) == "answer: from notes"


# -- a conversation without a user message ---------------------------------------------------

TITLE = [{"role": "system", "content": "Write a five-word title for this conversation.\n\nUser: Which step failed?"}]


def test_a_system_message_alone_is_answered_as_it_stands():
    # A front end's title request: the instruction and the conversation in one system message.
    p = ScriptedProvider(lambda r: "Build step 377 failed", context_window=8192)
    events = run(p, TITLE, **{"chat__system_prompt": "Be brief."})
    assert [type(e) for e in events] == [Fitted, Stage, ReplyDelta, Done]
    assert events[2].text == "Build step 377 failed" and events[-1].finish_reason == "stop"
    assert p.requests[0].messages == TITLE  # its own system message: no other is added
    assert (events[0].messages, events[0].sent, events[0].dropped) == (1, 1, [])


def test_without_a_user_message_every_message_is_the_turn_and_a_long_one_is_read_in_sections():
    # Nothing is history to drop: the system message too big for the window is read by
    # the workers, for the question it asks, and the answer comes from their notes.
    p = ScriptedProvider(Model(), context_window=8192)
    long = [{"role": "system", "content": "Which step failed, and with what id?\n\n" + LOG}]
    events = run(p, long)
    fitted = next(e for e in events if isinstance(e, Fitted))
    assert fitted.analysed == ["system message 0"] and fitted.dropped == []
    workers = [r for r in p.requests if is_worker(r)]
    assert workers and all("Which step failed, and with what id?" in r.messages[-1]["content"] for r in workers)
    assert "".join(e.text for e in events if isinstance(e, ReplyDelta)) == "answer: from notes"
    assert "step failed (characters " in notes_text(p.requests[-1])


def test_without_a_user_message_files_follow_the_conversation():
    p = ScriptedProvider(lambda r: "ok", context_window=8192)
    opening = [{"role": "assistant", "content": "How can I help?"}]
    events = run(p, opening, files=[("notes.txt", "a short file")], **{"chat__system_prompt": "Be brief."})
    assert [m["role"] for m in p.requests[0].messages] == ["system", "assistant", "user"]
    assert p.requests[0].messages[-1]["content"] == "File notes.txt:\na short file"
    assert (events[0].messages, events[0].sent) == (2, 2) and events[-1].finish_reason == "stop"


def test_an_empty_conversation_is_refused_at_the_call():
    p = ScriptedProvider(lambda r: "x")
    with pytest.raises(ValueError, match="empty"):
        Engine(p, settings=settings()).reply([], files=[("a.txt", "text")])
    assert p.requests == []
