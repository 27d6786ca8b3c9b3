"""The line format: what append accepts reads back as itself, what JSON allows is read
(lone surrogate escapes), and what no reader can walk (deep nesting) is shown in place."""

import json
import math
import subprocess
import sys

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from boundctx import Transcript
from boundctx._native import projection
from boundctx.errors import EntryInvalid
from boundctx.transcript import encode_record
from boundctx.transcript.chat import chat_messages
from boundctx.transcript.lineformat import MAX_DEPTH, LineUnreadable, decode_display, decode_record


def msg(content, **kw):
    return {"type": "message", "message": {"role": "user", "content": content}, **kw}


# -- append refuses what JSON cannot hold as itself ------------------------------------


class Point(msgspec.Struct):
    type: str
    data: object


@pytest.mark.parametrize("value, named", [
    (float("nan"), "nan"), (float("inf"), "inf"), (-math.inf, "-inf"),
    (b"\x00\x01", "bytes"), (bytearray(b"x"), "bytearray"), ({1, 2}, "set"),
    (frozenset({"a"}), "frozenset"), (object(), "object"), ("half \ud83d", "lone surrogate"),
])
def test_append_refuses_values_json_cannot_hold_and_writes_nothing(tmp_path, value, named):
    path = tmp_path / "t.jsonl"
    with Transcript.open(path, create=True) as t:
        t.append(msg("before"))
        size = path.stat().st_size
        for record in (msg("x", extra={"deep": [1, value]}), Point("message", [value])):
            with pytest.raises(EntryInvalid, match=named if named != "object" else "object") as info:
                t.append(record)
            if named != "lone surrogate":  # the encoder finds those, without the place
                assert "deep" in str(info.value) or "data" in str(info.value)  # where it sits
        assert path.stat().st_size == size
        assert t.message_count == 1


def test_append_refuses_keys_that_are_not_strings(tmp_path):
    with pytest.raises(EntryInvalid, match="key 1 .*JSON keys are strings"):
        encode_record(msg("x", meta={1: "one"}))


def test_append_refuses_nesting_the_reader_would_not_read(tmp_path):
    deep = "x"
    for _ in range(MAX_DEPTH):
        deep = [deep]
    with pytest.raises(EntryInvalid, match=f"deeper than {MAX_DEPTH}"):
        encode_record(msg(deep))
    shallow = "x"
    for _ in range(MAX_DEPTH - 3):  # record, message, content: three levels already
        shallow = [shallow]
    assert decode_record(encode_record(msg(shallow))[:-1])["message"]["content"] == shallow


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2**63, max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_what_append_accepts_reads_back_as_itself(value):
    record = {"type": "message", "v": value}
    line = encode_record(record)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode_record(line[:-1]) == record
    assert json.loads(line) == record  # any other JSON reader agrees


# -- lone surrogate escapes are read ---------------------------------------------------


def test_a_line_with_a_lone_surrogate_escape_is_read_with_a_replacement_character(tmp_path):
    path = tmp_path / "t.jsonl"
    cut = b'{"type":"message","message":{"role":"assistant","content":"ok \\ud83d"}}\n'
    whole = b'{"type":"message","message":{"role":"user","content":"\\ud83d\\ude00 \\udc00x"}}\n'
    path.write_bytes(encode_record(msg("first")) + cut + whole)
    for content_limit in (None, 1 << 16, 8):
        with Transcript.open(path) as t:
            w = t.window(content_limit=content_limit)
        assert [m.corrupt for m in w.messages] == [None, None, None]
        if content_limit is None:
            assert w.messages[1].record["message"]["content"] == "ok \ufffd"
            assert w.messages[2].record["message"]["content"] == "\U0001F600 \ufffdx"
    conversation = chat_messages(w)
    assert [m["content"] for m in conversation.messages][1:] == ["ok \ufffd", "\U0001F600 \ufffdx"]
    for m in conversation.messages:
        m["content"].encode("utf-8")  # nothing downstream meets an unencodable string
    with Transcript.open(path) as t:
        assert t.history().message(1)["message"]["content"] == "ok \ufffd"


def test_the_lenient_reader_still_refuses_what_json_does_not_allow():
    for bad in (b'{"type":"message","x":NaN}', b'{"type":"message","x":1e400}',
                b'{"type":"message","x":"\\ud83d",}', b'{"type":"m","x":"\xff\\ud83d"}'):
        with pytest.raises(LineUnreadable):
            decode_record(bad)


# -- deep nesting is shown in place ----------------------------------------------------


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 1_000, 100_000])
def test_a_deeply_nested_line_is_a_corrupt_entry_in_place_and_its_neighbours_read(tmp_path, depth):
    path = tmp_path / "t.jsonl"
    deep = b'{"type":"message","message":{"role":"user","content":' + b"[" * depth + b"]" * depth + b"}}\n"
    path.write_bytes(encode_record(msg("before")) + deep + encode_record(msg("after")))
    for content_limit in (None, 1 << 16, 64):
        with Transcript.open(path) as t:
            w = t.window(content_limit=content_limit)
            assert t.message_count == 3
        assert w.messages[0].record and w.messages[2].record
        assert w.messages[1].record is None and w.messages[1].raw.startswith('{"type":"message"')
        if content_limit is None:
            assert f"deeper than {MAX_DEPTH}" in w.messages[1].corrupt
    conversation = chat_messages(w)
    assert [m["content"] for m in conversation.messages if m["role"] == "user"][0] == "before"
    with Transcript.open(path) as t:  # the history keeps the line byte for byte
        h = t.history()
        assert h.data() == path.read_bytes()


def test_session_get_shows_a_deeply_nested_line_instead_of_a_traceback(tmp_path):
    path = tmp_path / "t.jsonl"
    deep = b'{"type":"message","message":{"role":"user","content":' + b"[" * 1000 + b"]" * 1000 + b"}}\n"
    path.write_bytes(encode_record(msg("before")) + deep)
    run = subprocess.run([sys.executable, "-m", "boundctx", "session", "get", str(path), "--json"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr and "deeper than" in run.stdout


_NESTED = 256  # the deepest the display projection follows


@pytest.mark.parametrize("line", [
    b'{"type":"message","text":"' + b"x" * 5000 + b'","n":1.5}',
    b'{"type":"message","text":"\\ud83d half then ' + "\u00e9\U0001f680".encode() * 900 + b'"}',  # a lone surrogate
    b'{"type":"message","a":' + b"[" * (_NESTED - 1) + b'"' + b"y" * 3000 + b'"' + b"]" * (_NESTED - 1) + b"}",
    b'{"type":"message","big":123456789012345678901234567890,"text":"' + b"z\\n" * 2000 + b'"}',
])
@pytest.mark.parametrize("budget", [0, 100, 4096])
def test_a_display_decodes_as_any_record_does_without_counting_its_brackets(line, budget):
    display, _kept, _cut = projection.project_display(line, len(line), budget)
    assert display is not None
    assert decode_display(display) == decode_record(display)


def test_a_display_too_deep_for_the_callers_stack_is_unreadable_not_an_error():
    import sys

    line = b'{"type":"message","a":' + b"[" * 200 + b'"' + b"y" * 300 + b'"' + b"]" * 200 + b"}"
    display, _kept, _cut = projection.project_display(line, len(line), 100)
    old = sys.getrecursionlimit()

    def frames() -> int:
        f, n = sys._getframe(), 0
        while f is not None:
            f, n = f.f_back, n + 1
        return n

    sys.setrecursionlimit(frames() + 60)  # room for the call, not for 200 levels
    try:
        with pytest.raises(LineUnreadable):
            decode_display(display)
    finally:
        sys.setrecursionlimit(old)
