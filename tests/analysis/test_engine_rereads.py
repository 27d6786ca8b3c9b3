"""Exact rereads for a model without tool calls: one step held to a JSON schema."""

import json
import re

from boundctx import config
from boundctx.analysis import READ_TOOL_NAME, Engine
from boundctx.analysis.engine import REREAD_HEADER
from boundctx.analysis.notes import INDEX_HEADER
from boundctx.analysis.workers import WORKER_INSTRUCTIONS
from boundctx.events import Done, ReplyDelta, Stage, ToolCall, ToolResult
from boundctx.providers import ScriptedProvider

from tests._support import notes_text

# Twelve facts with long values: the notes cannot keep every value, only every key.
FACTS = [(f"code of unit{i}", f"{1000 + i}-XQ " + "padding " * 8) for i in range(12)]
DOC = "".join(f"Filler line {n} about nothing in particular.\n" for n in range(400))
for i, (key, value) in enumerate(FACTS):
    at = DOC.find("\n", len(DOC) * (i + 1) // 14) + 1
    DOC = DOC[:at] + f"The {key} is {value}.\n" + DOC[at:]
ASK = [{"role": "user", "content": "What is the code of unit0? Give the value."}]


def settings(**over):
    return config.load(env={}, overrides={"analysis.notes_max_tokens": 600, "chat.analysis_workers": 1,
                                          **{k.replace("__", "."): v for k, v in over.items()}})


class Model:
    """Workers report each fact with its exact range; the coordinator asks, in the
    constrained step, for the range the index gives for unit0, and answers from the
    exact text, else says it could not confirm it."""

    def __init__(self, ask_for=None):
        self.ask_for = ask_for  # what the reread step answers (None: the cited range)

    def __call__(self, request):
        first = notes_text(request)
        body = request.messages[-1]["content"]
        if request.messages[0]["content"] == WORKER_INSTRUCTIONS:
            m = re.search(r"Section (\d+) of \d+ of .+?, characters (\d+)-(\d+):\n(.*)\Z", body, re.S)
            k, start, section = int(m.group(1)), int(m.group(2)), m.group(4)
            lines = [f"{f.group(1)}: {f.group(2)} [S{k} {start + f.start()}-{start + f.end()}]"
                     for f in re.finditer(r"The (code of unit\d+) is (.*?)\.\n", section)]
            return "\n".join(lines) or "nothing relevant"
        if request.schema is not None:
            if self.ask_for is not None:
                return self.ask_for(first)
            oid = re.search(r"Notes on (.+?) \([\d,]+ characters", first).group(1)
            cite = re.search(r"^code of unit0 \(characters (\d+)-(\d+)\)$", first, re.M)
            wanted = [] if cite is None else [{"id": oid, "start": int(cite.group(1)), "end": int(cite.group(2))}]
            return json.dumps({"reread": wanted})
        reread = first.split(REREAD_HEADER)[1] if REREAD_HEADER in first else ""
        exact = re.search(r"The code of unit0 is (\d+-XQ)", reread)
        noted = re.search(r"^code of unit0: (\d+-XQ)", first, re.M)
        return (exact or noted).group(1) if exact or noted else "could not be confirmed"


def run(model, **over):
    p = ScriptedProvider(model, context_window=8192)
    p.supports_tools = False
    events = list(Engine(p, settings=settings(**over), max_reply_tokens=256).reply(ASK, files=[("doc", DOC)]))
    return p, events


def test_an_evicted_value_is_read_again_exactly_in_the_constrained_step():
    p, events = run(Model())
    (step,) = [r for r in p.requests if r.schema is not None]
    assert INDEX_HEADER in notes_text(step)  # the value was evicted, its key kept
    ids = step.schema["properties"]["reread"]["items"]["properties"]["id"]["enum"]
    assert ids == ["doc"]  # the original is named as the file is
    calls = [e for e in events if isinstance(e, ToolCall)]
    results = [e for e in events if isinstance(e, ToolResult)]
    assert [c.name for c in calls] == [READ_TOOL_NAME] and calls[0].internal
    assert results[0].content.startswith("The code of unit0 is 1000-XQ")
    assert "".join(e.text for e in events if isinstance(e, ReplyDelta)) == "1000-XQ"
    stages = [e.stage for e in events if isinstance(e, Stage)]
    assert stages == ["rereading", "answering"] and isinstance(events[-1], Done)


def test_a_range_the_engine_refuses_is_said_to_the_caller_and_the_answer_does_not_guess():
    def name(system):
        return re.search(r"Notes on (.+?) \([\d,]+ characters", system).group(1)

    p, events = run(Model(ask_for=lambda system: json.dumps({"reread": [{"id": name(system), "start": 0,
                                                                         "end": 10**9}]})))
    (result,) = [e for e in events if isinstance(e, ToolResult)]
    assert result.content.startswith("error:") and "outside" in result.content
    answer_prompt = notes_text(p.requests[-1])
    # The answer is told nothing of the step's refusal (decision 0044): a small model
    # copies it; its instructions already say to call what the notes lack unconfirmed.
    assert "outside" not in answer_prompt and "could not be read" not in answer_prompt
    assert "".join(e.text for e in events if isinstance(e, ReplyDelta)) == "could not be confirmed"


def test_a_reread_request_that_is_not_valid_reads_nothing_and_adds_nothing_to_the_answers_notes():
    p, events = run(Model(ask_for=lambda system: '{"reread": "everything"}'))
    assert not any(isinstance(e, ToolCall) for e in events)
    answer_prompt = notes_text(p.requests[-1])
    assert REREAD_HEADER not in answer_prompt and "not valid" not in answer_prompt
    assert "".join(e.text for e in events if isinstance(e, ReplyDelta)) == "could not be confirmed"


def test_the_step_is_off_when_the_setting_says_so_and_for_models_with_tools():
    p, events = run(Model(), analysis__constrained_rereads=False)
    assert not any(r.schema is not None for r in p.requests)
    assert "".join(e.text for e in events if isinstance(e, ReplyDelta)) == "could not be confirmed"
    with_tools = ScriptedProvider(Model(), context_window=8192)
    list(Engine(with_tools, settings=settings(), max_reply_tokens=256).reply(ASK, files=[("doc", DOC)]))
    assert not any(r.schema is not None for r in with_tools.requests)


def test_a_backend_failure_in_the_reread_step_is_a_failed_reply():
    model = Model()

    def respond(request):
        if request.schema is not None:
            return RuntimeError("llama_decode returned -1")
        return model(request)

    p, events = run(respond)
    failed = events[-1]
    assert failed.kind == "GenerationError", failed
    assert "the reread step failed (RuntimeError: llama_decode returned -1)" in failed.error
    assert p.active == 0  # the stream was closed


def test_refusals_are_counted_before_they_join_the_notes_so_the_answer_fits_its_window():
    """The step on its own, at a window the notes fill but for a few tokens: ranges that
    do not fit are refused, each refusal counted before it is added, so what the model
    answers from stays within the window."""
    from boundctx.analysis.originals import Originals

    originals = Originals()
    oid = originals.add(DOC, "doc")
    # Two ranges, written compactly: the step's output room is counted in the scripted
    # counter's tokens (a byte each).
    asked = json.dumps({"reread": [{"id": oid, "start": k * 3000, "end": k * 3000 + 3000} for k in range(2)]},
                       separators=(",", ":"))
    p = ScriptedProvider(lambda request: asked, context_window=8192)
    p.supports_tools = False
    messages = [{"role": "system", "content": "Notes on doc:\n" + "code of unit0: (indexed) [S1 0-40]\n" * 40},
                {"role": "user", "content": ASK[0]["content"]}]
    limit = p.count_prompt(messages) + 12  # room for the notes as they are, and hardly a line more
    step = Engine(p, settings=settings(), max_reply_tokens=256)._constrained_rereads(messages, 0, originals, limit,
                                                                                     None, 0.0, [])
    events = []
    try:
        while True:
            events.append(next(step))
    except StopIteration as end:
        final = end.value
    results = [e for e in events if isinstance(e, ToolResult)]
    assert len(results) == 2 and all("do not fit" in r.content for r in results)
    assert p.count_prompt(final) <= limit


def widest_answer(oid, ranges):
    """The largest answer the step's grammar lets a model write: every optional space,
    every number at its widest."""
    item = f'{{ "id" : "{oid}" , "start" : 0 , "end" : 9999999999999999 }} '
    return f'{{ "reread" : [ {" , ".join([item] * ranges)} ] }} '


def test_the_steps_output_room_holds_its_largest_answer_whole():
    """The room was a guess of 24 tokens a range: four ranges were cut, refused, and
    nothing was read again. Now it is counted from the largest answer itself."""
    from boundctx.analysis.engine import REREAD_MAX_RANGES

    def ask_widest(system):
        oid = re.search(r"Notes on (.+?) \([\d,]+ characters", system).group(1)
        return widest_answer(oid, REREAD_MAX_RANGES)

    p, events = run(Model(ask_for=ask_widest))
    (step,) = [r for r in p.requests if r.schema is not None]
    assert step.schema["properties"]["reread"]["maxItems"] == REREAD_MAX_RANGES
    assert len([e for e in events if isinstance(e, ToolCall)]) == REREAD_MAX_RANGES  # read, not refused as cut
    assert "not valid" not in notes_text(p.requests[-1])


def test_the_step_asks_for_fewer_ranges_where_four_would_not_fit():
    from boundctx.analysis.engine import reread_output_room

    probe, _ = run(Model())
    (step,) = [r for r in probe.requests if r.schema is not None]
    ids = step.schema["properties"]["reread"]["items"]["properties"]["id"]["enum"]
    window = probe.count_prompt(step.messages) + reread_output_room(ids, 2) + 1
    from boundctx.analysis.originals import Originals

    originals = Originals()
    originals.add(DOC, "doc")  # an id as long as the probe's
    p = ScriptedProvider(Model(), context_window=window)
    p.supports_tools = False
    notes = step.messages[:-1]
    at = next(i for i, m in enumerate(notes) if "Notes on doc" in m["content"])
    list(Engine(p, settings=settings(), max_reply_tokens=256)._constrained_rereads(notes, at, originals, window - 256,
                                                                                    None, 0.0, []))
    (asked,) = [r for r in p.requests if r.schema is not None]
    assert asked.schema["properties"]["reread"]["maxItems"] == 2
    assert "at most 2 in all" in asked.messages[-1]["content"]


def test_the_output_room_covers_the_embedded_models_own_count_of_the_largest_answer(smollm2):
    from boundctx.analysis.engine import REREAD_MAX_RANGES, reread_output_room

    for ids in (["src-0a1b2c3d-1"], [f"src-ffffffff-{k}" for k in range(12)]):
        longest = max(ids, key=len)
        for ranges in range(1, REREAD_MAX_RANGES + 1):
            widest = widest_answer(longest, ranges).replace("0 ,", "-9999999999999999 ,")
            assert smollm2.count_text(widest) <= reread_output_room(ids, ranges)


def test_a_key_the_notes_had_no_room_to_list_is_read_again_by_its_name():
    """Sixty keys, notes with room for few of them: the oldest keys are not even listed,
    yet a tool-calling model asks for one by name and gets its exact text."""
    from boundctx.providers import ToolCallChunk

    facts = [(f"code of unit{i}", f"{5000 + i}-ZK") for i in range(60)]
    doc = "".join(f"Filler line {n} about nothing in particular.\n" for n in range(300))
    for i, (key, value) in enumerate(facts):
        at = doc.find("\n", len(doc) * (i + 1) // 62) + 1
        doc = doc[:at] + f"The {key} is {value}.\n" + doc[at:]
    worker = Model()

    def respond(request):
        if request.messages[0]["content"] == WORKER_INSTRUCTIONS:
            return worker(request)
        last = request.messages[-1]
        if last["role"] == "tool":
            found = re.search(r"The code of unit0 is (\S+)\.", last["content"])
            return found.group(1) if found else "could not be confirmed"
        oid = re.search(r"Notes on (.+?) \([\d,]+ characters", notes_text(request)).group(1)
        return [ToolCallChunk("k1", READ_TOOL_NAME, json.dumps({"section_id": oid, "key": "Code of unit0"}))]

    p = ScriptedProvider(respond, context_window=8192)
    events = list(Engine(p, settings=settings(analysis__notes_max_tokens=200), max_reply_tokens=256)
                  .reply(ASK, files=[("doc", doc)]))
    coordinator = [r for r in p.requests if r.messages[0]["content"] != WORKER_INSTRUCTIONS]
    assert "code of unit0 " not in notes_text(coordinator[0])  # not listed in the notes
    (result,) = [e for e in events if isinstance(e, ToolResult)]
    assert result.content.strip() == "The code of unit0 is 5000-ZK."
    assert "".join(e.text for e in events if isinstance(e, ReplyDelta)) == "5000-ZK"


def test_a_model_without_tool_calls_rereads_a_key_the_notes_had_no_room_to_list():
    facts = [(f"code of unit{i}", f"{5000 + i}-ZK") for i in range(60)]
    doc = "".join(f"Filler line {n} about nothing in particular.\n" for n in range(300))
    for i, (key, value) in enumerate(facts):
        at = doc.find("\n", len(doc) * (i + 1) // 62) + 1
        doc = doc[:at] + f"The {key} is {value}.\n" + doc[at:]

    def by_key(system):
        oid = re.search(r"Notes on (.+?) \([\d,]+ characters", system).group(1)
        return json.dumps({"reread": [{"id": oid, "key": "code of unit0"}]})

    model = Model(ask_for=by_key)

    def respond(request):
        first = notes_text(request)
        if request.messages[0]["content"] == WORKER_INSTRUCTIONS or request.schema is not None:
            return model(request)
        exact = re.search(r"The code of unit0 is (\S+)\.", first.partition(REREAD_HEADER)[2])
        return exact.group(1) if exact else "could not be confirmed"

    p = ScriptedProvider(respond, context_window=8192)
    p.supports_tools = False
    events = list(Engine(p, settings=settings(analysis__notes_max_tokens=200), max_reply_tokens=256)
                  .reply(ASK, files=[("doc", doc)]))
    (step,) = [r for r in p.requests if r.schema is not None]
    assert "code of unit0 [" not in notes_text(step)  # not listed in the notes
    item = step.schema["properties"]["reread"]["items"]
    assert item["required"] == ["id"] and "code of unit0" in item["properties"]["key"]["enum"]
    (result,) = [e for e in events if isinstance(e, ToolResult)]
    assert result.content.strip() == "The code of unit0 is 5000-ZK."
    assert "".join(e.text for e in events if isinstance(e, ReplyDelta)) == "5000-ZK"
