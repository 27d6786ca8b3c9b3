"""How a line reads for a person beside its text: an agent's tool call (with the tool's
name and its arguments as words, not the call's JSON), a tool's result, reasoning, or
plain text, in every format boundctx reads."""

import pytest

from boundctx.transcript.dialects import display, display_kind, shown
from boundctx.transcript.entries import Entry


def entry(record):
    return Entry(line=0, index=0, offset=0, length=1, record=record)


CASES = [
    # Claude Code: tool_use blocks in an assistant message; tool_result blocks in a user one.
    ({"type": "assistant", "message": {"role": "assistant", "content": [
        {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "git status"}}]}},
     ("tool_call", "Bash"), "Bash: git status"),
    ({"type": "user", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": "On branch main"}]}},
     ("tool_result", None), "On branch main"),
    ({"type": "assistant", "message": {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm"}]}},
     ("reasoning", None), "hmm"),
    # Codex CLI: each call and output a payload of its own, arguments a JSON string.
    ({"type": "response_item", "payload": {"type": "function_call", "name": "exec_command",
                                           "arguments": "{\"cmd\": \"ls -la\"}", "call_id": "c1"}},
     ("tool_call", "exec_command"), "exec_command: ls -la"),
    ({"type": "response_item", "payload": {"type": "function_call_output", "call_id": "c1", "output": "total 0"}},
     ("tool_result", None), "total 0"),
    # pi / boundctx: toolCall parts, toolResult messages, OpenAI-style tool_calls and tool messages.
    ({"type": "message", "message": {"role": "assistant", "content": [
        {"type": "toolCall", "id": "p1", "name": "read", "arguments": {"path": "a.txt", "limit": 5}}]}},
     ("tool_call", "read"), 'read: {\n  "path": "a.txt",\n  "limit": 5\n}'),
    ({"type": "message", "message": {"role": "toolResult", "toolCallId": "p1", "toolName": "read",
                                     "content": [{"type": "text", "text": "hello"}]}},
     ("tool_result", "read"), "hello"),
    ({"type": "message", "message": {"role": "assistant", "content": "", "tool_calls": [
        {"id": "o1", "type": "function", "function": {"name": "search", "arguments": "{}"}}]}},
     ("tool_call", "search"), "search: {}"),
    ({"type": "message", "message": {"role": "tool", "tool_call_id": "o1", "content": "found"}},
     ("tool_result", None), "found"),
    # Words stay words, even beside a call.
    ({"type": "message", "message": {"role": "assistant", "content": [
        {"type": "text", "text": "Let me look."},
        {"type": "toolCall", "id": "p2", "name": "ls", "arguments": {}}]}},
     ("text", None), "Let me look.\nls: {}"),
    ({"type": "message", "message": {"role": "user", "content": "hi"}}, ("text", None), "hi"),
]


@pytest.mark.parametrize("record, kind, text", CASES)
def test_a_line_reads_as_what_it_is(record, kind, text):
    e = entry(record)
    assert display_kind(e) == kind
    assert display(e)[1] == text
    assert shown(e) == (*display(e), *kind)  # both at once, as a window shows them


def test_a_corrupt_line_is_text():
    e = Entry(line=0, index=0, offset=0, length=1, record=None, corrupt="not JSON", raw="{")
    assert display_kind(e) == ("text", None)
    assert shown(e) == (*display(e), "text", None)


@pytest.mark.parametrize("name", [
    "claude-code-sessions/ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl",
    "codex-sessions/rollout-2026-05-11T11-26-55-019e1625-789d-76c0-80ab-3724b5ddb799.jsonl",
    "pi-sessions/large-session.jsonl",
])
def test_every_line_of_real_sessions_shows_as_display_and_kind_say(shared_file, name):
    """``shown`` (what a window sends) is ``display`` and ``display_kind`` of each line, on
    the real sessions of three agents: every message, corrupt lines included."""
    from boundctx.transcript.store import Transcript

    with Transcript.open(str(shared_file(name))) as t:
        entries = t.read_lines(0, t.line_count, content_limit=4096)
    assert len(entries) > 50
    assert len({display_kind(e) for e in entries}) > 1  # not all one kind
    for e in entries:
        assert shown(e) == (*display(e), *display_kind(e)), e.line
