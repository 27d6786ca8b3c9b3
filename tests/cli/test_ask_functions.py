"""The plain functions behind ``boundctx ask`` and ``boundctx plan``, called directly
with the scripted provider: no command line, no server."""

import json
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boundctx import config
from boundctx.cli import main
from boundctx.cli.ask import Asked, ask, read_transcript
from boundctx.cli.plan import plan_message
from boundctx.errors import GenerationTimeout
from boundctx.events import Done, Failed, Fitted, ReplyDelta
from boundctx.providers import ScriptedProvider, ScriptedReply
from boundctx.transcript.chat import history_start


def settings():
    return config.load(env={})


def user_texts(request):
    return [m["content"] for m in request.messages if m["role"] == "user"]


def transcript_texts(path):
    from boundctx.transcript import Transcript
    from boundctx.transcript.chat import chat_messages

    with Transcript.open(path) as t:
        return [m["content"] for m in chat_messages(t.window()).messages]


# -- ask ------------------------------------------------------------------------------


def test_ask_answers_and_hands_every_event_to_the_callback_in_order():
    provider = ScriptedProvider(lambda request: ["Step 3 ", "failed."])
    events = []
    asked = ask("Which step failed?", provider=provider, settings=settings(), on_event=events.append)
    assert asked == Asked("Step 3 failed.", "stop")
    assert isinstance(events[0], Fitted) and isinstance(events[-1], Done)
    assert "".join(e.text for e in events if isinstance(e, ReplyDelta)) == "Step 3 failed."
    assert user_texts(provider.requests[0])[-1] == "Which step failed?"


def test_ask_attaches_the_files_to_the_question():
    provider = ScriptedProvider(lambda request: "ok")
    ask("What failed?", provider=provider, settings=settings(), files=[("build.log", "step 3: FAILED id=42\n")])
    assert "File build.log:\nstep 3: FAILED id=42\n" in user_texts(provider.requests[0])


def test_ask_continues_a_transcript_and_appends_each_complete_exchange(tmp_path):
    path = str(tmp_path / "chat.jsonl")  # does not exist yet: a new conversation
    answers = iter(["Step 3 failed.", "Job 77."])
    provider = ScriptedProvider(lambda request: next(answers))
    first = read_transcript(path)
    assert first.conversation.messages == [] and first.style == "text"
    assert ask("Which step failed?", provider=provider, settings=settings(), transcript=first).saved
    second = read_transcript(path)
    assert ask("And its job id?", provider=provider, settings=settings(), transcript=second).saved
    assert [(m["role"], m["content"]) for m in provider.requests[1].messages[-3:]] == [
        ("user", "Which step failed?"), ("assistant", "Step 3 failed."), ("user", "And its job id?")]
    assert transcript_texts(path) == ["Which step failed?", "Step 3 failed.", "And its job id?", "Job 77."]


def test_a_reply_that_is_not_complete_is_not_appended(tmp_path):
    path = str(tmp_path / "chat.jsonl")
    provider = ScriptedProvider(lambda request: ScriptedReply("The build failed at", finish_reason="length"))
    asked = ask("q", provider=provider, settings=settings(), transcript=read_transcript(path))
    assert asked.finish_reason == "length" and asked.answer == "The build failed at" and not asked.saved
    assert not (tmp_path / "chat.jsonl").exists()


def test_a_transcript_read_without_saving_is_left_as_it_was(tmp_path):
    path = tmp_path / "chat.jsonl"
    path.write_text(json.dumps({"type": "message", "message": {"role": "user", "content": "hi"}}) + "\n")
    before = path.read_bytes()
    provider = ScriptedProvider(lambda request: "hello")
    read_only = read_transcript(str(path), save=False)
    assert read_only.style is None
    asked = ask("q", provider=provider, settings=settings(), transcript=read_only)
    assert asked.finish_reason == "stop" and not asked.saved and path.read_bytes() == before
    assert provider.requests[0].messages[0] == {"role": "user", "content": "hi"}


def test_read_transcript_refuses_what_it_cannot_continue(tmp_path):
    with pytest.raises(FileNotFoundError, match="no transcript at"):
        read_transcript(str(tmp_path / "missing.jsonl"), save=False)
    with pytest.raises(ValueError, match="history must be >= 0"):
        read_transcript(str(tmp_path / "missing.jsonl"), history=-1)
    claude = tmp_path / "claude.jsonl"
    claude.write_text(json.dumps({"type": "user", "message": {"role": "user", "content": "hi"}}) + "\n")
    with pytest.raises(ValueError, match="another agent's format"):
        read_transcript(str(claude))
    assert read_transcript(str(claude), save=False).conversation.messages == [{"role": "user", "content": "hi"}]


def test_a_failed_reply_ends_without_a_finish_reason_and_with_the_error(tmp_path):
    path = str(tmp_path / "chat.jsonl")
    provider = ScriptedProvider(lambda request: GenerationTimeout("too slow"))
    events = []
    asked = ask("q", provider=provider, settings=settings(), transcript=read_transcript(path), on_event=events.append)
    assert asked.finish_reason is None and "too slow" in asked.error and not asked.saved
    assert isinstance(events[-1], Failed)


def test_a_cancelled_reply_says_so():
    cancel = threading.Event()

    def respond(request):
        cancel.set()  # as Ctrl-C would, while the model is answering
        return ["one ", "two ", "three"]

    asked = ask("q", provider=ScriptedProvider(respond), settings=settings(), cancel=cancel)
    assert asked.finish_reason == "cancelled" and not asked.saved


def test_the_command_with_json_appends_the_answer_it_streamed(tmp_path, scripted_server, capsys):
    from tests._support.servers import delta

    server = scripted_server((200, [delta("Step 3 "), delta("failed."), delta(finish="stop")]))
    path = tmp_path / "chat.jsonl"
    assert main(["ask", "--provider", "remote", "--base-url", server.url, "--transcript", str(path), "--json",
                 "Which step failed?"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["type"] == "done"
    assert transcript_texts(path) == ["Which step failed?", "Step 3 failed."]


# -- plan -----------------------------------------------------------------------------

CATALOG = {"operations": [{"name": "cancel_booking", "description": "Cancel a booking", "record_kind": "booking"}]}
RECORDS = [{"id": "b1", "kind": "booking", "label": "Luigi's"}, {"id": "b2", "kind": "booking", "label": "Sakura"}]
#: The single-call baseline's answer: operations and records by the aliases its prompt gives them.
SINGLE_CALL_ANSWER = json.dumps({"acts": [{"operation": "o1", "record": "r2", "arguments": {}}]})


def test_plan_message_makes_the_single_call_plan_and_logs_the_attempt(tmp_path):
    from boundctx.understanding import Catalog, ReplayLog, read_attempts

    provider = ScriptedProvider(lambda request: SINGLE_CALL_ANSWER)
    calls = []
    with ReplayLog(str(tmp_path / "replay.jsonl")) as log:
        plan = plan_message("cancel Sakura", catalog=Catalog.from_dict(CATALOG, source="test"), provider=provider,
                            settings=settings(), records=RECORDS, single_call=True, log=log,
                            progress=lambda kind, role: calls.append((kind, role)))
    assert plan.status == "ready"
    assert [(a.operation, a.record) for a in plan.acts] == [("cancel_booking", "b2")]
    assert calls == [("single_call", "call")] and len(provider.requests) == 1
    assert [a.task for a in read_attempts(str(tmp_path / "replay.jsonl"))] == ["single_call"]


def test_plan_message_runs_the_task_pipeline_unless_asked_for_the_single_call():
    from boundctx.understanding import Catalog
    calls = []
    plan = plan_message("cancel Sakura", catalog=Catalog.from_dict(CATALOG, source="test"),
                        provider=ScriptedProvider(lambda request: "not json"), settings=settings(),
                        records=RECORDS, progress=lambda kind, role: calls.append(kind))
    assert calls and "single_call" not in calls and calls[0] in ("segment", "route")  # the pipeline's tasks
    assert plan.acts == [] and plan.status != "ready"  # none of its answers was JSON


def test_plan_message_refuses_a_click_on_an_unknown_operation_before_any_model_call():
    from boundctx.understanding import Catalog, Click
    provider = ScriptedProvider(lambda request: SINGLE_CALL_ANSWER)
    with pytest.raises(KeyError, match="fly"):
        plan_message("x", catalog=Catalog.from_dict(CATALOG, source="test"), provider=provider,
                     settings=settings(), click=Click("fly"))
    assert provider.requests == []


def test_the_history_sent_from_a_transcript_keeps_its_start_for_half_the_history(tmp_path):
    # A resent transcript's start moves in steps of half --history, never one message a
    # turn, so the prompt's start stays the same between steps (a server's cache holds it).
    path = str(tmp_path / "chat.jsonl")
    provider = ScriptedProvider(lambda request: "ok")
    history, starts = 10, []
    for turn in range(14):
        sent = read_transcript(path, history=history)
        messages = sent.conversation.messages
        assert len(messages) <= history and (turn < 5 or len(messages) > history // 2)
        starts.append(messages[0]["content"] if messages else None)
        assert ask(f"question {turn}", provider=provider, settings=settings(), transcript=sent).saved
        assert provider.requests[-1].messages[-1]["content"] == f"question {turn}"
    moves = [i for i, (a, b) in enumerate(zip(starts, starts[1:]), 1) if a != b and a is not None]
    # Two messages a turn: the newest 10 alone would move the start on each of the last 8
    # turns; in steps of 5 it moves on 4 of them.
    assert moves == [6, 8, 11, 13]
    texts = transcript_texts(path)
    assert starts[-1] == texts[history_start(len(texts) - 2, history)] == texts[20]


@given(st.integers(0, 500), st.integers(0, 60))
def test_the_history_start_keeps_at_most_n_at_least_half_and_moves_in_steps(total, history):
    start = history_start(total, history)
    assert 0 <= start <= total and total - start <= history
    if total > history:
        assert total - start >= history - max(1, history // 2) + 1 or history <= 1
        assert start % max(1, history // 2) == 0
    assert history_start(total + 1, history) >= start
