"""Transcripts as model conversations (every dialect the store reads), and replies
written back in the transcript's own style."""

import json

import pytest

from boundctx.transcript import Transcript
from boundctx.transcript.chat import append_exchange, chat_messages, writable_style

from tests._support import assert_well_formed


def write_lines(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def conversation_of(path, **window):
    with Transcript.open(path) as t:
        return chat_messages(t.window(**window))


def test_a_real_pi_session_becomes_a_conversation_with_every_user_text_and_tool_exchange(pi_session):
    path = pi_session("large-session.jsonl")
    with Transcript.open(path) as t:
        window = t.window(message_limit=300)
    conversation = chat_messages(window)
    assert_well_formed(conversation.messages)
    records = [e.record["message"] for e in window.messages]
    # Every user text, verbatim, in order.
    user_texts = ["\n\n".join(p["text"] for p in m["content"] if p["type"] == "text")
                  for m in records if m["role"] == "user"]
    sent_user = [m["content"] for m in conversation.messages if m["role"] == "user"
                 and not m["content"].startswith("I ran `")]
    assert sent_user[-len(user_texts):] == user_texts and user_texts
    # Every tool call and every tool result whose call is in the window.
    calls = [p["id"] for m in records if m["role"] == "assistant" for p in m["content"] if p["type"] == "toolCall"]
    sent_calls = [c["id"] for m in conversation.messages for c in m.get("tool_calls", [])]
    assert sent_calls == calls and calls
    results = [m["toolCallId"] for m in records if m["role"] == "toolResult" and m["toolCallId"] in set(calls)]
    assert [m["tool_call_id"] for m in conversation.messages if m["role"] == "tool"] == results
    # Reasoning is not sent back.
    assert not any("thinkingSignature" in json.dumps(m) for m in conversation.messages)


def test_a_compaction_replaces_what_it_summarised(pi_session):
    path = pi_session("before-compaction.jsonl")
    with Transcript.open(path) as t:
        window = t.window()
    last = window.compactions[-1].record
    conversation = chat_messages(window)
    first = conversation.messages[0]
    assert first["role"] == "user" and first["content"].endswith(last["summary"])
    kept = [e for e in window.messages if e.line >= last["firstKeptEntryIndex"]]
    first_kept_text = kept[0].record["message"]["content"][0]["text"]
    assert conversation.messages[1]["content"] == first_kept_text
    assert len(conversation.messages) < len(window.messages)
    assert_well_formed(conversation.messages)


def test_claude_code_lines_become_tool_exchanges(tmp_path):
    path = write_lines(tmp_path / "claude.jsonl", [
        {"type": "summary", "summary": "Fixing the build", "leafUuid": "x"},
        {"type": "user", "message": {"role": "user", "content": "why does the build fail?"}},
        {"type": "assistant", "message": {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "look at the log"},
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "tu1", "name": "Read", "input": {"file_path": "build.log"}}]}},
        {"type": "user", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "tu1", "content": [{"type": "text", "text": "error: E42"}]}]}},
        {"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": "E42."}]}},
    ])
    conversation = conversation_of(path)
    assert conversation.messages == [
        {"role": "user", "content": "why does the build fail?"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [
            {"id": "tu1", "type": "function",
             "function": {"name": "Read", "arguments": '{"file_path": "build.log"}'}}]},
        {"role": "tool", "tool_call_id": "tu1", "content": "error: E42"},
        {"role": "assistant", "content": "E42."},
    ]
    assert conversation.notices == []
    with Transcript.open(path) as t, pytest.raises(ValueError, match="another agent's format"):
        writable_style(t.window())


def test_a_claude_code_compaction_is_its_boundary_line_and_the_summary_after_it(tmp_path):
    path = write_lines(tmp_path / "claude.jsonl", [
        {"type": "summary", "summary": "Fixing the build", "leafUuid": "x"},  # a title, not a compaction
        {"type": "user", "message": {"role": "user", "content": "old question"}},
        {"type": "system", "subtype": "turn_duration", "durationMs": 5},
        {"type": "system", "subtype": "compact_boundary", "content": "Conversation compacted"},
        {"type": "user", "isCompactSummary": True, "message": {"role": "user", "content": "we fixed E42"}},
        {"type": "user", "message": {"role": "user", "content": "and now?"}},
    ])
    with Transcript.open(path) as t:
        assert (t.message_count, t.compaction_count) == (3, 1)
        window = t.window()
        assert [c.record["subtype"] for c in window.compactions] == ["compact_boundary"]
        assert chat_messages(window).messages == [
            {"role": "user", "content": "Summary of the earlier conversation (compacted):\nwe fixed E42"},
            {"role": "user", "content": "and now?"}]


def test_a_codex_question_is_sent_once_whether_written_as_an_item_an_event_or_both(tmp_path):
    def user_item(text):
        return {"type": "response_item", "payload": {"type": "message", "role": "user",
                                                     "content": [{"type": "input_text", "text": text}]}}

    def event(kind, **fields):
        return {"type": "event_msg", "payload": {"type": kind, **fields}}

    path = write_lines(tmp_path / "codex.jsonl", [
        {"type": "session_meta", "payload": {"id": "s"}},
        user_item("cli question"), event("user_message", message="cli question", images=[]),  # Codex CLI
        event("token_count", info=None),
        {"type": "response_item", "payload": {"type": "message", "role": "assistant",
                                              "content": [{"type": "output_text", "text": "answer"}]}},
        event("user_message", message="desktop question", images=[]),  # Codex Desktop: the event only
        event("agent_message", message="answer again"),
    ])
    with Transcript.open(path) as t:
        assert t.message_count == 4  # both lines of the first question, the answer, the event
        assert chat_messages(t.window()).messages == [
            {"role": "user", "content": "cli question"}, {"role": "assistant", "content": "answer"},
            {"role": "user", "content": "desktop question"}]
        # A window that holds only one of the two lines of a question still sends it once.
        assert chat_messages(t.window(message_before=1)).messages == [{"role": "user", "content": "cli question"}]
        assert chat_messages(t.window(message_limit=3)).messages[0] == {"role": "user", "content": "cli question"}


def test_a_codex_question_whose_item_cannot_be_sent_is_sent_from_its_event(tmp_path):
    """The event is an echo only of an item that was sent: when the item's content is not
    content items, the event is the question's only copy."""
    path = write_lines(tmp_path / "codex.jsonl", [
        {"type": "response_item", "payload": {"type": "message", "role": "user", "content": "bare text"}},
        {"type": "event_msg", "payload": {"type": "user_message", "message": "the question", "images": []}},
    ])
    conversation = conversation_of(path)
    assert conversation.messages == [{"role": "user", "content": "the question"}]
    assert conversation.notices == ["message 0: a message item whose content is 'bare text', not content items; "
                                    "not sent"]


def test_codex_items_merge_their_calls_and_a_compacted_line_replaces_history(tmp_path):
    def item(payload):
        return {"type": "response_item", "payload": payload}

    path = write_lines(tmp_path / "codex.jsonl", [
        {"type": "session_meta", "payload": {"id": "s"}},
        item({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "old question"}]}),
        {"type": "compacted", "payload": {"message": "the user asked about tests"}},
        item({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "run both"}]}),
        item({"type": "reasoning", "summary": []}),
        item({"type": "function_call", "name": "shell", "arguments": '{"cmd": "a"}', "call_id": "c1"}),
        item({"type": "function_call", "name": "shell", "arguments": '{"cmd": "b"}', "call_id": "c2"}),
        item({"type": "function_call_output", "call_id": "c1", "output": "ok a"}),
        item({"type": "function_call_output", "call_id": "c2", "output": "ok b"}),
        item({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "both ran"}]}),
    ])
    messages = conversation_of(path).messages
    assert messages[0] == {"role": "user", "content": "Summary of the earlier conversation (compacted):\n"
                                                      "the user asked about tests"}
    assert "old question" not in json.dumps(messages)
    assert [m["role"] for m in messages] == ["user", "user", "assistant", "tool", "tool", "assistant"]
    assert [c["id"] for c in messages[2]["tool_calls"]] == ["c1", "c2"]
    assert_well_formed(messages)


def test_what_cannot_be_sent_is_named_never_dropped_silently(tmp_path):
    path = write_lines(tmp_path / "pi.jsonl", [
        {"type": "message", "message": {"role": "toolResult", "toolCallId": "gone", "content": "orphan"}},
        {"type": "message", "message": {"role": "user", "content": [
            {"type": "text", "text": "what is in this picture?"}, {"type": "image", "data": "..."}]}},
        {"type": "message", "message": {"role": "narrator", "content": "?"}},
    ])
    with open(path, "a") as f:
        f.write('{"type":"message", broken\n')
    conversation = conversation_of(path)
    assert conversation.messages == [{"role": "user", "content": "what is in this picture?"}]
    text = "\n".join(conversation.notices)
    assert "image part" in text and "'narrator'" in text and "corrupt" in text
    assert "1 tool result(s) whose call is older than the window" in text


def test_a_display_window_is_refused(tmp_path):
    path = write_lines(tmp_path / "pi.jsonl", [{"type": "message", "message": {"role": "user", "content": "x" * 500}}])
    with Transcript.open(path) as t, pytest.raises(ValueError, match="uncapped window"):
        chat_messages(t.window(content_limit=100))


@pytest.mark.parametrize("style", ["text", "parts"])
def test_an_exchange_appended_reads_back_as_the_newest_two_messages(tmp_path, style):
    content = "earlier" if style == "text" else [{"type": "text", "text": "earlier"}]
    path = write_lines(tmp_path / "t.jsonl", [
        {"type": "message", "id": "m1", "parentId": None, "message": {"role": "user", "content": content}}])
    with Transcript.open(path) as t:
        assert writable_style(t.window()) == style
        conversation = chat_messages(t.window())
        assert conversation.last_id == "m1"
        append_exchange(t, "and now?", "now this", style=style, parent_id=conversation.last_id,
                        attachments=[("build.log", 12345)])
    with Transcript.open(path) as t:
        window = t.window()
        assert t.message_count == 3
    user, assistant = (e.record for e in window.messages[1:])
    assert user["type"] == "message" and user["parentId"] == "m1" and assistant["parentId"] == user["id"]
    assert isinstance(user["message"]["content"], str if style == "text" else list)
    messages = chat_messages(window).messages
    assert messages[-2] == {"role": "user", "content": "and now?\n\n[attached: build.log (12,345 characters)]"}
    assert messages[-1] == {"role": "assistant", "content": "now this"}
