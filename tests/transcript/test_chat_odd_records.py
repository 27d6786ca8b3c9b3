"""Valid JSON lines of another shape: a record of any dialect with one field, at any
depth, of another JSON type becomes a notice, never an exception, and no other record's
message is lost with it (issue 22, item 5).

The templates, the odd values and what must hold (``judge``) are in
``tests/faults/odd_records.py``, shared with the fault campaign and the reliability
benchmark."""

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from boundctx.transcript import Transcript
from boundctx.transcript.chat import append_exchange, chat_messages, writable_style

from tests._support import assert_well_formed
from tests.faults.odd_records import (
    DIALECTS,
    ISSUE_EXAMPLES,
    TEMPLATES,
    Odd,
    Reference,
    field,
    fields,
    json_type,
    judge,
    read,
    write,
)

# Words the converters look for, so drawn values reach their branches, not only defaults.
_WORDS = st.sampled_from(["type", "text", "id", "name", "content", "role", "message", "payload", "function",
                          "arguments", "input", "call_id", "tool_use_id", "toolCallId", "toolCall", "tool_use",
                          "tool_result", "user", "assistant", "function_call", "user_message", "images",
                          "summary", "input_text", "output_text", "replacement_history", "compaction"])
_KEYS = st.one_of(_WORDS, st.text(max_size=8))
_SCALARS = {
    "null": st.none(),
    "boolean": st.booleans(),
    "number": st.one_of(st.integers(-(2**53), 2**53), st.floats(allow_nan=False, allow_infinity=False)),
    "string": st.one_of(_WORDS, st.text(max_size=20)),
}
_NESTED = st.recursive(st.one_of(*_SCALARS.values()),
                       lambda inner: st.one_of(st.lists(inner, max_size=3),
                                               st.dictionaries(_KEYS, inner, max_size=4)),
                       max_leaves=8)
_VALUES = {**_SCALARS, "array": st.lists(_NESTED, max_size=4), "object": st.dictionaries(_KEYS, _NESTED, max_size=5)}


@st.composite
def odd_records(draw, dialect: str) -> Odd:
    """A template record of ``dialect`` with one field, at any depth, of another JSON type."""
    template = draw(st.sampled_from(range(len(TEMPLATES[dialect]))))
    records = TEMPLATES[dialect][template]
    at = draw(st.sampled_from(range(len(records))))
    path = draw(st.sampled_from(list(fields(records[at]))))
    kind = draw(st.sampled_from(sorted(set(_VALUES) - {json_type(field(records[at], path))})))
    return Odd(dialect, template, at, path, draw(_VALUES[kind]))


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return Reference(tmp_path_factory.mktemp("reference"))


@pytest.mark.parametrize("dialect", DIALECTS)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_an_odd_record_of_any_dialect_is_a_notice_and_every_other_message_stays(reference, dialect, data):
    odd = data.draw(odd_records(dialect), label="odd record")
    with tempfile.TemporaryDirectory() as d:
        window, conversation = read(write(Path(d) / "odd.jsonl", odd.records))
    problems, expected, _ = judge(odd, window, conversation, reference)
    assert problems == [], odd
    assert expected > 0  # every template has messages that must stay


@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_valid_templates_read_whole_with_only_the_notices_they_earn(dialect, tmp_path):
    """The baseline the property compares with: each template reads as its agent wrote it."""
    for t, records in enumerate(TEMPLATES[dialect]):
        window, conversation = read(write(tmp_path / f"{t}.jsonl", records))
        assert_well_formed(conversation.messages, json_arguments=False)
        assert not any("shape" in n or "not text" in n for n in conversation.notices), conversation.notices
    sent = json.dumps(conversation.messages)
    assert {"boundctx/pi": "old pi after", "claude-code": "cc answer", "codex": "cx desktop question"}[dialect] in sent


@pytest.mark.parametrize("name", sorted(ISSUE_EXAMPLES))
def test_the_issues_examples_are_notices(tmp_path, name):
    records, notice, texts = ISSUE_EXAMPLES[name]
    _, conversation = read(write(tmp_path / "t.jsonl", records))
    assert notice in conversation.notices
    assert [m["content"] for m in conversation.messages if m["content"]] == texts
    assert_well_formed(conversation.messages)


def test_a_record_of_a_shape_no_check_foresaw_is_a_notice_naming_its_line(tmp_path, monkeypatch):
    """The guard behind the checks: any TypeError, KeyError, AttributeError or
    ValueError of one record's conversion is a notice with its message, line and error."""
    from boundctx.transcript.dialects import boundctx as boundctx_dialect

    def unforeseen(m, where, notes):
        if m.get("content") == "boom":
            return [{}["missing"]]
        return real(m, where, notes)

    real = boundctx_dialect._pi_message
    monkeypatch.setattr(boundctx_dialect, "_pi_message", unforeseen)
    path = write(tmp_path / "t.jsonl", [{"type": "message", "message": {"role": "user", "content": c}}
                                        for c in ("before", "boom", "after")])
    _, conversation = read(path)
    assert [m["content"] for m in conversation.messages] == ["before", "after"]
    assert conversation.notices == ["message 1 (line 1): a record of a shape this reader does not know "
                                    "(KeyError: 'missing'); not sent"]


def test_a_message_a_converter_builds_wrong_is_never_returned(tmp_path, monkeypatch):
    from boundctx.transcript.dialects import boundctx as boundctx_dialect

    monkeypatch.setattr(boundctx_dialect, "_bash", lambda m, where, notes: [{"role": "user", "content": 7}])
    path = write(tmp_path / "t.jsonl", [{"type": "message", "message": {"role": "bashExecution", "command": "ls"}},
                                        {"type": "message", "message": {"role": "user", "content": "ok"}}])
    _, conversation = read(path)
    assert conversation.messages == [{"role": "user", "content": "ok"}]
    assert "ValueError: a message of role 'user' without text content" in conversation.notices[0]


def test_a_compaction_whose_kept_message_is_not_found_keeps_every_message(tmp_path):
    """A pi compaction keeps from an id; when no message of the window has it (its id was
    changed, or it is older than the window), nothing of the window is cut."""
    records = [{"type": "message", "id": "a", "message": {"role": "user", "content": "first"}},
               {"type": "message", "id": "b", "message": {"role": "assistant", "content": "second"}},
               {"type": "compaction", "summary": "they talked", "firstKeptEntryId": "gone"},
               {"type": "message", "id": "d", "message": {"role": "user", "content": "third"}}]
    _, conversation = read(write(tmp_path / "t.jsonl", records))
    assert [m["content"] for m in conversation.messages] == [
        "Summary of the earlier conversation (compacted):\nthey talked", "first", "second", "third"]
    assert "compaction at line 2: the first message it kept ('gone') is no message" in conversation.notices[0]
    with Transcript.open(write(tmp_path / "t.jsonl", records)) as t:  # older than a window of the last two
        window = t.window(message_limit=2, content_limit=None)
    assert [m["content"] for m in chat_messages(window).messages][1:] == ["second", "third"]
    assert chat_messages(window).notices == []


def test_a_reply_is_written_after_an_odd_newest_record_and_a_parent_id_must_be_one(tmp_path):
    path = write(tmp_path / "t.jsonl", [{"type": "message", "id": "m1", "message": {"role": "user", "content": "q"}},
                                        {"type": "message", "id": 5, "message": {"role": "assistant", "content": 7}}])
    with Transcript.open(path) as t:
        window = t.window(content_limit=None)
        assert writable_style(window) == "text"
        conversation = chat_messages(window)
        assert conversation.last_id == "m1"  # the odd record's id is no id
        append_exchange(t, "again?", "yes", style="text", parent_id=conversation.last_id)
        with pytest.raises(TypeError, match="parent_id must be a message id"):
            append_exchange(t, "again?", "yes", style="text", parent_id=5)
        with pytest.raises(ValueError, match="style must be"):
            append_exchange(t, "again?", "yes", style="markdown", parent_id=None)
    _, conversation = read(path)
    assert [m["content"] for m in conversation.messages] == ["q", "again?", "yes"]
