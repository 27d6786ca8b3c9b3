"""What a reply says about itself: what was dropped to fit, where it stopped and why,
and settings that reach the model (scripted provider: exact)."""

import pytest

from boundctx import config
from boundctx.analysis import Engine
from boundctx.errors import ConfigError
from boundctx.events import Done, Fitted, ReplyDelta, Stage
from boundctx.providers import ScriptedProvider, ScriptedReply

ASK = {"role": "user", "content": "And now?"}


def chat(n, size=400):
    """``n`` exchanges of user and assistant messages, ``size`` characters each."""
    out = []
    for i in range(n):
        out += [{"role": "user", "content": f"question {i} " + "q" * size},
                {"role": "assistant", "content": f"answer {i} " + "a" * size}]
    return out


def reply(provider, messages, *, max_reply_tokens=64, **settings):
    engine = Engine(provider, settings={"analysis.notes_max_tokens": 256, **settings},
                    max_reply_tokens=max_reply_tokens)
    return list(engine.reply(messages))


def test_a_reply_says_which_old_messages_were_dropped_to_fit():
    history = chat(50)
    p = ScriptedProvider(lambda r: "ok", context_window=2048)
    # What was dropped, alone: no notice of it and no search of it (decision 0046).
    events = reply(p, history + [ASK], **{"analysis.history_search": False})
    (fitted,) = [e for e in events if isinstance(e, Fitted)]
    sent = p.requests[-1].messages
    assert fitted.messages == 101 and fitted.sent == len(sent) < 101
    assert fitted.dropped == list(range(101 - len(sent)))  # the oldest, by the caller's indexes
    assert [m for i, m in enumerate(history + [ASK]) if i not in fitted.dropped] == sent
    assert fitted.prompt_limit == 2048 - 64 and events.index(fitted) == 0


def test_dropped_indexes_are_the_callers_even_with_a_system_prompt_added():
    history = chat(50)
    p = ScriptedProvider(lambda r: "ok", context_window=2048)
    events = reply(p, history + [ASK], **{"chat.system_prompt": "Be brief.", "analysis.history_search": False})
    (fitted,) = [e for e in events if isinstance(e, Fitted)]
    sent = p.requests[-1].messages
    assert sent[0] == {"role": "system", "content": "Be brief."}
    assert fitted.messages == 101 and fitted.sent == len(sent) - 1
    kept = [m for i, m in enumerate(history + [ASK]) if i not in fitted.dropped]
    assert kept == sent[1:]


def test_a_conversation_with_its_own_system_message_keeps_it_and_gets_no_second():
    p = ScriptedProvider(lambda r: "ok")
    own = {"role": "system", "content": "You are terse."}
    reply(p, [own, ASK], **{"chat.system_prompt": "Be brief."})
    assert p.requests[-1].messages == [own, ASK]


def test_earlier_research_is_counted_apart_when_dropped():
    big = "r" * 3000
    history = [{"role": "user", "content": "look it up"},
               {"role": "assistant", "content": "", "tool_calls": [
                   {"id": "t1", "type": "function", "function": {"name": "grep", "arguments": "{}"}}]},
               {"role": "tool", "tool_call_id": "t1", "content": big},
               {"role": "assistant", "content": "found"}]
    p = ScriptedProvider(lambda r: "ok", context_window=2048)
    (fitted,) = [e for e in reply(p, history + [ASK]) if isinstance(e, Fitted)]
    assert fitted.dropped == [1, 2] and fitted.dropped_research == 2


def test_a_reply_cut_at_its_budget_ends_with_length_not_stop():
    p = ScriptedProvider(lambda r: ScriptedReply("The build failed at step", finish_reason="length"))
    events = reply(p, [ASK])
    assert events[-1].finish_reason == "length"


def test_a_looping_reply_is_stopped_and_the_loop_not_passed_on():
    line = "The step that failed is step 12.\n"
    pieces = ["Answer:\n"] + [line] * 40
    p = ScriptedProvider(lambda r: pieces, context_window=8192)
    events = reply(p, [ASK], max_reply_tokens=4096)
    text = "".join(e.text for e in events if isinstance(e, ReplyDelta))
    assert text == "Answer:\n" + line  # said once, the copies withheld
    assert events[-1].finish_reason == "repetition" and events[-1].usage["withheld_chars"] == 2 * len(line)
    assert p.closed_early == 1  # the model was stopped, not read to its budget


def test_a_line_said_twice_is_not_a_loop():
    pieces = ["ok then\n", "ok then\n", "done here\n"]
    p = ScriptedProvider(lambda r: pieces)
    events = reply(p, [ASK])
    assert "".join(e.text for e in events if isinstance(e, ReplyDelta)) == "".join(pieces)
    assert events[-1].finish_reason == "stop"


def test_temperature_setting_reaches_the_answering_call():
    p = ScriptedProvider(lambda r: "ok")
    reply(p, [ASK], **{"chat.temperature": 0.0})
    assert p.requests[-1].temperature == 0.0


def test_a_partial_settings_mapping_is_merged_over_the_defaults():
    engine = Engine(ScriptedProvider(lambda r: "ok"), settings={"chat.analysis_workers": 0})
    assert engine.settings["chat.analysis_workers"] == 0
    assert engine.settings["analysis.notes_max_tokens"] == config.KEYS["analysis.notes_max_tokens"].default
    assert isinstance(list(engine.reply([ASK]))[-1], Done)


def test_a_bad_settings_key_fails_when_the_engine_is_made_not_mid_reply():
    with pytest.raises(ConfigError, match="did you mean 'chat.analysis_workers'"):
        Engine(ScriptedProvider(lambda r: "ok"), settings={"chat.analysis_worker": 0})
    with pytest.raises(ConfigError, match="accepted 0–8"):
        Engine(ScriptedProvider(lambda r: "ok"), settings={"chat.analysis_workers": 9})


def test_the_answering_stage_comes_before_the_first_reply_text():
    p = ScriptedProvider(lambda r: "ok")
    events = reply(p, [ASK])
    stages = [i for i, e in enumerate(events) if isinstance(e, Stage)]
    first_text = next(i for i, e in enumerate(events) if isinstance(e, ReplyDelta))
    assert stages == [1] and stages[0] < first_text


def test_the_notes_take_the_place_of_what_they_note_and_the_prompt_before_it_is_the_conversations_own():
    # Decision 0031: the system prompt and the history before the analysed item go as
    # they are, byte for byte the start of the turn before's prompt (the start a model
    # still holds); the notes follow in the item's own message.
    big = "".join(f"line {i}: ok\n" for i in range(3000))
    p = ScriptedProvider(lambda r: "noted" if "\n\nSection " in str(r.messages[-1]["content"]) else "ok",
                         context_window=4096)
    engine = Engine(p, settings={"chat.system_prompt": "Be brief.", "analysis.notes_max_tokens": 128},
                    max_reply_tokens=64)
    history = [ASK, {"role": "assistant", "content": "Step 3."}]
    list(engine.reply(history[:1]))
    before = p.requests[-1].messages
    events = list(engine.reply([*history, {"role": "user", "content": "And in this log?"}], files=[("big.log", big)]))
    coordinator = p.requests[-1].messages
    assert [m["role"] for m in coordinator].count("system") == 1
    assert coordinator[:len(before)] == before and coordinator[0] == {"role": "system", "content": "Be brief."}
    (noted,) = [m for m in coordinator if "Notes on big.log" in str(m["content"])]
    assert noted["content"].startswith("File big.log:") or "[big.log: " in noted["content"]
    assert coordinator.index(noted) == len(before) + 1 and coordinator[-1]["content"] == "And in this log?"
    assert events[-1].finish_reason == "stop"


def test_analysed_tool_results_are_named_by_the_callers_index():
    history = chat(20, size=100)
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "t1", "type": "function", "function": {"name": "grep", "arguments": "{}"}}]}
    result = {"role": "tool", "tool_call_id": "t1", "content": "".join(f"hit {i}\n" for i in range(2500))}
    messages = history + [ASK, call, result]
    p = ScriptedProvider(lambda r: "noted" if "\n\nSection " in str(r.messages[-1]["content"]) else "ok",
                         context_window=4096)
    events = list(Engine(p, settings={"analysis.notes_max_tokens": 128}, max_reply_tokens=64).reply(messages))
    (fitted,) = [e for e in events if isinstance(e, Fitted)]
    assert fitted.analysed == [f"tool result {len(messages) - 1}"] and fitted.dropped


def test_clipped_tool_results_are_counted_when_analysis_is_off():
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "t1", "type": "function", "function": {"name": "grep", "arguments": "{}"}}]}
    result = {"role": "tool", "tool_call_id": "t1", "content": "x" * 9000}
    p = ScriptedProvider(lambda r: "ok", context_window=2048)
    events = reply(p, [ASK, call, result], **{"chat.analysis_workers": 0, "chat.tool_result_clip_chars": 1000})
    (fitted,) = [e for e in events if isinstance(e, Fitted)]
    assert fitted.clipped == 1 and len(p.requests[-1].messages[-1]["content"]) == 1000


@pytest.mark.parametrize("error", [RuntimeError("llama_decode returned -1"), KeyError("choices"), MemoryError()])
def test_a_backend_failure_in_a_worker_is_a_failed_reply_naming_the_unread_sections(error):
    big = "".join(f"line {i}: ok\n" for i in range(3000))
    calls = []

    def respond(request):
        calls.append(request)
        return error if len(calls) == 2 else "noted"

    p = ScriptedProvider(respond, context_window=4096)
    events = list(Engine(p, settings={"analysis.notes_max_tokens": 128}, max_reply_tokens=64).reply(
        [ASK], files=[("big.log", big)]))
    failed = events[-1]
    assert failed.kind == "IncompleteCoverage" and "failed on section 2" in failed.error
    assert type(error).__name__ in failed.error and "were not read" in failed.error


def test_a_backend_failure_while_answering_is_a_failed_reply():
    p = ScriptedProvider(lambda r: RuntimeError("llama_decode returned -1"))
    events = reply(p, [ASK])
    assert events[-1].kind == "GenerationError" and "RuntimeError: llama_decode returned -1" in events[-1].error
