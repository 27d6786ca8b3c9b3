"""History dropped to fit stays one search away (issue 28, decision 0046): the model is
told earlier messages are not shown, finds what it needs in them by a few words (the
tool, or the constrained step of a model without tool calls) and answers from their
exact text; the newest of a value said twice wins; nothing of it is offered when
nothing was dropped or the search is off; the prompt's start stays the same between
drops."""

import json
import re

from boundctx.analysis import Engine
from boundctx.analysis.engine import EARLIER_LABEL, REREAD_HEADER
from boundctx.config import load
from boundctx.events import Done, Fitted, ReplyDelta, ToolCall, ToolResult
from boundctx.providers import ScriptedProvider, ToolCallChunk

FILLER = "the weather was discussed at length " * 6


def conversation(n, facts):
    """``n`` exchanges of filler, with ``facts`` ({exchange: text}) said by the user."""
    out = []
    for i in range(n):
        out += [{"role": "user", "content": facts.get(i, f"message {i}: {FILLER}")},
                {"role": "assistant", "content": f"noted {i}"}]
    return out


ASK = {"role": "user", "content": "What is the deploy key?"}
KEY = re.compile(r"deploy key is (K-\d+)")


def answer_from(text):
    found = KEY.findall(text)
    return found[-1] if found else "unknown"  # the newest said


def tool_model(request):
    """Searches the earlier messages when told they exist, answers from what it finds."""
    last = request.messages[-1]
    if last["role"] == "tool":
        return answer_from(last["content"])
    prompt = "\n".join(str(m.get("content") or "") for m in request.messages)
    if "earlier messages of this conversation are not shown" in prompt and request.tools:
        return [ToolCallChunk("s1", "read_chat_section", json.dumps({"section_id": EARLIER_LABEL,
                                                                      "search": "deploy key"}))]
    return answer_from(prompt)


def step_model(request):
    """Without tools: asks the constrained step to search, answers from what it read."""
    prompt = "\n".join(str(m.get("content") or "") for m in request.messages)
    if request.schema is not None:
        return json.dumps({"reread": [{"id": EARLIER_LABEL, "search": "deploy key"}]})
    return answer_from(prompt.partition(REREAD_HEADER)[2] or prompt)


def reply(provider, messages, **settings):
    s = load(env={}, overrides={"chat.n_ctx": 2048, **settings})
    return list(Engine(provider, settings=s, max_reply_tokens=128).reply(messages))


def answer(events):
    return "".join(e.text for e in events if isinstance(e, ReplyDelta))


def test_a_tool_calling_model_finds_a_fact_in_dropped_history_and_answers_it_exactly():
    p = ScriptedProvider(tool_model, context_window=2048)
    events = reply(p, conversation(200, {3: "remember: the deploy key is K-4471"}) + [ASK])
    fitted = events[0]
    assert isinstance(fitted, Fitted) and 6 in fitted.dropped  # the fact was dropped to fit
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert [json.loads(c.arguments) for c in calls] == [{"section_id": EARLIER_LABEL, "search": "deploy key"}]
    (result,) = [e.content for e in events if isinstance(e, ToolResult)]
    assert "«remember: the deploy key is K-4471»" in result
    assert answer(events) == "K-4471" and isinstance(events[-1], Done)
    for r in p.requests:  # every call within the window, the search's result counted
        assert p.count_prompt(r.messages, tools=r.tools) + r.max_tokens <= 2048


def test_a_value_corrected_later_in_dropped_history_is_answered_with_the_correction():
    facts = {3: "remember: the deploy key is K-1000", 120: "correction: the deploy key is K-2000 from now on"}
    for model in (tool_model, step_model):
        p = ScriptedProvider(model, context_window=2048)
        p.supports_tools = model is tool_model
        events = reply(p, conversation(200, facts) + [ASK])
        assert {6, 240} <= set(events[0].dropped)
        assert answer(events) == "K-2000", model.__name__  # never the stale K-1000


def test_a_model_without_tools_searches_in_the_constrained_step_and_answers_without_ranges():
    p = ScriptedProvider(step_model, context_window=2048)
    p.supports_tools = False
    events = reply(p, conversation(200, {50: "remember: the deploy key is K-4471"}) + [ASK])
    step = [r for r in p.requests if r.schema is not None]
    assert len(step) == 1
    items = step[0].schema["properties"]["reread"]["items"]["anyOf"]
    assert any("search" in i["properties"] for i in items)
    # shown an example drawn from the question, which a small model may copy as it stands
    assert '{"id": "earlier messages", "search": "deploy key"}' in step[0].messages[-1]["content"]
    answering = p.requests[-1]
    said = "\n".join(str(m.get("content")) for m in answering.messages)
    assert "remember: the deploy key is K-4471" in said
    assert not re.search(r"characters \d+-\d+", said)  # no reread follows: no range (decision 0044)
    assert answer(events) == "K-4471"
    assert p.count_prompt(answering.messages) + answering.max_tokens <= 2048


def test_nothing_is_said_or_offered_when_nothing_was_dropped_or_the_search_is_off():
    short = conversation(2, {}) + [ASK]
    p = ScriptedProvider(tool_model, context_window=2048)
    reply(p, short)
    assert p.requests[-1].tools is None
    assert "not shown" not in json.dumps(p.requests[-1].messages)
    p = ScriptedProvider(tool_model, context_window=2048)
    events = reply(p, conversation(200, {3: "the deploy key is K-1"}) + [ASK], **{"analysis.history_search": False})
    assert events[0].dropped and p.requests[-1].tools is None and answer(events) == "unknown"
    p = ScriptedProvider(tool_model, context_window=2048)  # no workers: no search either
    events = reply(p, conversation(200, {3: "the deploy key is K-1"}) + [ASK], **{"chat.analysis_workers": 0})
    assert events[0].dropped and p.requests[-1].tools is None


def test_the_notice_opens_the_kept_history_and_keeps_the_prompts_start_between_drops():
    p = ScriptedProvider(lambda r: "noted " * 30, context_window=2048)
    convo = conversation(20, {}) + [ASK]
    sent, fitted = [], []
    for turn in range(25):
        events = reply(p, convo, **{"chat.system_prompt": "Be brief."})
        fitted.append(events[0])
        request = p.requests[-1]
        sent.append(request.messages)
        assert fitted[-1].prompt_tokens == p.count_prompt(request.messages, tools=request.tools) <= 2048 - 128
        convo = convo + [{"role": "assistant", "content": answer(events)},
                         {"role": "user", "content": f"turn {turn} " + "more " * 50}]
    assert sent[-1][0]["content"].startswith("Be brief.\n\n(") and "earlier messages" in sent[-1][0]["content"]
    drops = [t for t in range(1, 25) if fitted[t].dropped != fitted[t - 1].dropped]
    changed = [t for t in range(1, 25) if sent[t][:len(sent[t - 1])] != sent[t - 1]]
    assert drops and changed == drops  # the start changes only where more is dropped


# -- a transcript's older messages ------------------------------------------------------


def _transcript(path, n, facts):
    from boundctx.transcript.lineformat import encode_record
    with open(path, "wb") as f:  # a transcript another process wrote: lines as pi writes them
        f.write(encode_record({"type": "session", "version": 3, "id": "long"}) + b"\n")
        for i in range(n):
            text = facts.get(i, f"message {i}: {FILLER}")
            f.write(encode_record({"type": "message", "message": {"role": "user" if i % 2 == 0 else "assistant",
                                                                  "content": text}}) + b"\n")


def test_a_transcripts_older_messages_are_searched_only_when_asked_and_within_the_bound(tmp_path, monkeypatch):
    from boundctx.cli.ask import ask, read_transcript
    from boundctx.transcript import chat

    path = tmp_path / "long.jsonl"
    _transcript(path, 2000, {10: "remember: the deploy key is K-1010", 1500: "the deploy key is K-1500 now"})
    reads = []
    real = chat.earlier_text
    monkeypatch.setattr(chat, "earlier_text", lambda *a: reads.append(a) or real(*a))
    settings = load(env={}, overrides={"chat.n_ctx": 2048})
    continued = read_transcript(str(path), history=50, save=False)
    assert continued.conversation.start == 1950
    # A model that does not search reads nothing of the file beyond its history.
    quiet = ScriptedProvider(lambda r: "fine", context_window=2048)
    ask("How are you?", provider=quiet, settings=settings, transcript=continued, max_tokens=128)
    said = int(re.match(r"\((\d+) earlier messages", quiet.requests[-1].messages[0]["content"]).group(1))
    assert reads == [] and said == 1950 + (50 - len(quiet.requests[-1].messages) + 1)  # older, and dropped to fit
    # One that searches finds the newest value, in one bounded read.
    p = ScriptedProvider(tool_model, context_window=2048)
    asked = ask("What is the deploy key?", provider=p, settings=settings, transcript=continued, max_tokens=128)
    assert asked.answer == "K-1500" and len(reads) == 1
    # With a bound that holds only the newest older messages, the oldest are said unread,
    # and a search reads no more of the file than the bound.
    for bound, found in ((20_000, None), (200_000, "K-1500")):
        p = ScriptedProvider(tool_model, context_window=2048)
        events = []
        ask("What is the deploy key?", provider=p, on_event=events.append, transcript=continued, max_tokens=128,
            settings=load(env={}, overrides={"chat.n_ctx": 2048, "analysis.search_max_chars": bound}))
        (result,) = [e.content for e in events if isinstance(e, ToolResult)]
        said = re.search(r"the oldest ([\d,]+) earlier messages were not read", result)
        unread = int(said.group(1).replace(",", ""))
        path_, before, asked_chars = reads[-1]
        assert before == 1950 and asked_chars <= bound
        assert "K-1010" not in result and 10 < unread < 1950
        if found is None:
            assert unread > 1500 and result.startswith("No passage") and "not searched" not in result
        else:
            assert unread < 1500 and found in result


def test_a_search_that_does_not_fit_gives_the_best_of_what_it_found_that_fits():
    # Six long lines hold the words; all six do not fit beside the prompt. The newest
    # (the correction) ranks first among equals, so it is never the one cut.
    said = {i: f"note {i}: the deploy key is K-{1000 + i} " + "and more about it " * 25
            for i in (3, 10, 20, 30, 40, 50)}
    said[0] = "a chat of its own"  # no earlier reply's cut to keep (decision 0029): the drop goes to its low water
    for model, window in ((tool_model, 4096), (step_model, 2048)):  # (a byte a token: the tool's schema is long)
        p = ScriptedProvider(model, context_window=window)
        p.supports_tools = model is tool_model
        events = reply(p, conversation(200, said) + [ASK], **{"chat.n_ctx": window})
        (result,) = [e.content for e in events if isinstance(e, ToolResult)]
        best = re.search(r"\(the best (\d) of 6 found\)", result)
        assert best and 1 <= int(best.group(1)) < 6, result
        assert answer(events) == "K-1050", model.__name__
        for r in p.requests:
            assert p.count_prompt(r.messages, tools=r.tools) + r.max_tokens <= window


def test_the_steps_example_search_is_the_questions_own_words_within_the_longest_search():
    from boundctx.analysis.engine import SEARCH_PATTERN, search_example
    from boundctx.analysis.originals import MAX_SEARCH_CHARS
    assert search_example("What is the door code of project Sharenpim? Answer with the value only.") == \
        "door code project Sharenpim"
    assert search_example("Which step failed, and what is its job id?") == "step failed job id"
    for question in ("?", "", "x" * 80, 'a "quoted" \\ back\x00slash', "日本語の質問です " * 20, "long " * 10_000):
        example = search_example(question)
        assert 1 <= len(example) <= MAX_SEARCH_CHARS and re.fullmatch(SEARCH_PATTERN, example), example
