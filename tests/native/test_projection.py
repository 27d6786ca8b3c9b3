"""``boundctx._native.projection`` against its slow twin (``project_display`` in
``tests/reference/lineindex.py``).

Property tests assert native == reference on arbitrary bytes and on prefixes of JSON
lines, and that the display is bounded, valid JSON; fixed examples pin the cut rules
(short strings kept whole, surrogate pairs and multi-byte characters never split, the
nesting limit, bad arguments).
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from boundctx._native import projection as native

from tests._support.strategies import display_inputs, noisy_bytes
from tests.reference import lineindex as ref

# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def compare_projection(prefix: bytes, total_len: int, content_limit: int):
    """Assert native == reference for one projection (in @given tests only)."""
    want = ref.project(prefix, total_len, content_limit)
    got = native.project_display(prefix, total_len, content_limit)
    assert got == want.as_tuple()
    return got


def string_spans(line: bytes) -> list[tuple[int, int]]:
    """(opening quote, closing quote) of every string in a valid JSON line."""
    spans, i = [], 0
    while i < len(line):
        if line[i] == ord('"'):
            j = i + 1
            while line[j] != ord('"'):
                j += 2 if line[j] == ord("\\") else 1
            spans.append((i, j))
            i = j
        i += 1
    return spans


def value_spans(line: bytes) -> list[tuple[int, int]]:
    """The string spans that are values: not followed by ':'."""
    return [(a, b) for a, b in string_spans(line) if line[b + 1 :].lstrip(b" \t\r")[:1] != b":"]


def max_depth(prefix: bytes, spans: list[tuple[int, int]]) -> int:
    inside = {k for a, b in spans for k in range(a, b + 1)}
    depth = deepest = 0
    for i, byte in enumerate(prefix):
        if i in inside:
            continue
        if byte in b"{[":
            depth += 1
            deepest = max(deepest, depth)
        elif byte in b"}]":
            depth -= 1
    return deepest


# ---------------------------------------------------------------------------
# project_display == reference, and its properties
# ---------------------------------------------------------------------------


@given(noisy_bytes(200), st.integers(0, 50), st.booleans(), st.integers(0, 300))
def test_project_display_matches_reference_on_arbitrary_bytes(prefix, extra, whole, limit):
    total_len = len(prefix) if whole else len(prefix) + extra
    display, kept, cut = compare_projection(prefix, total_len, limit)
    assert kept <= limit
    assert 0 <= cut <= total_len


# The pieces of a long string value's bytes: ASCII, two-, three- and four-byte
# characters, escapes (a surrogate pair among them), and bytes that are not UTF-8 (a
# stray continuation byte, lead bytes with a bad or missing continuation, 0xFF).
_TEXT_PIECES = [b"a", b"word ", "\u00e9".encode(), "\u0416".encode(), "\u4e2d".encode(), "\U0001f680".encode(),
                b"\\n", b'\\"', b"\\\\", b"\\u00e9", b"\\ud83d\\ude80", b"\x80", b"\xc3", b"\xe4\xb8", b"\xf0\x9f\x9a",
                b"\xc3A", b"\xff", b"\x01"]


@settings(max_examples=400)
@given(st.lists(st.sampled_from(_TEXT_PIECES), min_size=40, max_size=120),
       st.one_of(st.integers(0, 400), st.integers(400, 2000)), st.integers(0, 600), st.booleans())
def test_project_display_matches_reference_on_long_text_in_any_script(pieces, limit, cut, whole):
    """Long string values (past the metadata length, so under the budget) in mixed
    scripts and broken UTF-8, cut by the budget and by the prefix anywhere."""
    line = b'{"type":"message","text":"' + b"".join(pieces) + b'","n":1}'
    prefix = line if whole else line[: min(cut, len(line))]
    compare_projection(prefix, len(line), limit)


@given(display_inputs())
def test_project_display_matches_reference_on_json_line_prefixes(case):
    _line, prefix, total_len, limit = case
    compare_projection(prefix, total_len, limit)


@given(display_inputs())
def test_project_display_of_a_json_prefix_is_bounded_json(case):
    line, prefix, total_len, limit = case
    display, kept, cut = native.project_display(prefix, total_len, limit)
    assert kept <= limit
    assert 0 <= cut <= total_len
    spans = string_spans(line)
    if display is None:
        # refused only when nested deeper than 256, or when nothing complete can be
        # shown yet (only whitespace so far, or a root scalar that may go on)
        assert (max_depth(prefix, spans) > ref.MAX_DEPTH
                or prefix.lstrip(b" \t\r")[:1] not in (b"{", b"[", b'"'))
        assert cut == total_len
        return
    assert display != b""
    assert len(display) <= len(prefix) + 300 + len(ref.marker(cut))
    parsed = json.loads(display)
    if cut == 0:
        assert parsed == json.loads(line)
    # The marker appears iff the cut index lies inside a string of the line.
    index = total_len - cut
    in_string = any(a < index <= b for a, b in spans)
    assert (ref.marker(cut)[:-1] in display) == in_string


@given(display_inputs())
def test_project_display_of_a_whole_line_with_ample_budget_is_the_line(case):
    line = case[0]
    display, kept, cut = native.project_display(line, len(line), len(line))
    if display is not None:  # None only when nested deeper than 256
        text_bytes = [b - a - 1 for a, b in value_spans(line) if b - a - 1 > ref.SHORT_STRING]
        assert (kept, cut) == (sum(text_bytes), 0)
        assert json.loads(display) == json.loads(line)


TEXT = b"w" * 140  # longer than SHORT_STRING (128): text, under the budget
HEAD = b'{"type":"message","text":"'
PROJECT_EXAMPLES = [
    # (prefix, total_len, content_limit) -> (display, kept, cut)
    ((HEAD + TEXT + b'"}', None, 1000), (HEAD + TEXT + b'"}', 140, 0)),
    ((b'{ "type" : "message" , "n" : [ 1 , 2 ] }', None, 100),
     (b'{"type":"message","n":[1,2]}', 0, 0)),  # short strings are not text: kept 0
    ((HEAD + TEXT + b'"}', None, 10),
     (HEAD + b"w" * 10 + b' [... 132 more bytes not shown]"}', 10, 132)),
    ((b'{"a":"x","b":"yz', 100, 100),
     (b'{"a":"x","b":"yz [... 84 more bytes not shown]"}', 2, 84)),
    ((b'{"a":"x","b', 100, 100), (b'{"a":"x"}', 0, 92)),  # the key is dropped
    ((b'{"a":[1,2', 100, 100), (b'{"a":[1]}', 0, 93)),  # 2 may go on: dropped
    ((b'{"a":[1,2,', 100, 100), (b'{"a":[1,2]}', 0, 91)),
    ((b'{"a":"\\u00e9\\n' + TEXT + b'"}', None, 7),
     (b'{"a":"\\u00e9 [... 144 more bytes not shown]"}', 6, 144)),
    (('{"a":"\u00e9\u00e9'.encode() + TEXT + b'"}', None, 3),
     ('{"a":"\u00e9 [... 144 more bytes not shown]"}'.encode(), 2, 144)),
    (('{"a":"\u20ac'.encode()[:-1], 50, 99), (b'{"a":" [... 44 more bytes not shown]"}', 0, 44)),
    ((b'{"a":"\\u00', 50, 99), (b'{"a":" [... 44 more bytes not shown]"}', 0, 44)),
    ((b'[]', None, 0), (b"[]", 0, 0)),
    ((b'"text"', None, 2), (b'"text"', 0, 0)),  # a short root string is kept whole
    ((b'"' + TEXT + b'"', None, 2), (b'"ww [... 139 more bytes not shown]"', 2, 139)),
    ((b'{"a":"x"} {}', None, 99), (None, 0, 12)),  # bytes after the root value
    ((b'{"a":"x\x01"}', None, 99), (None, 0, 10)),  # control character in a string
    ((b'{"a":1,}', None, 99), (None, 0, 8)),
    ((b'{"a":[1}}', None, 99), (None, 0, 9)),  # brackets must match here
    ((b'{"a":1', None, 99), (None, 0, 6)),  # the whole line ends early
    ((b"", 0, 99), (None, 0, 0)),
]


@pytest.mark.parametrize(("args", "expected"), PROJECT_EXAMPLES)
def test_project_display_fixed_examples(args, expected):
    prefix, total_len, limit = args
    total_len = len(prefix) if total_len is None else total_len
    assert native.project_display(prefix, total_len, limit) == expected
    assert ref.project_display(prefix, total_len, limit) == expected


@pytest.mark.parametrize("depth", [255, 256, 257])
def test_project_display_follows_nesting_up_to_256(depth):
    line = b"[" * depth + b"]" * depth
    expected = (line, 0, 0) if depth <= 256 else (None, 0, len(line))
    assert native.project_display(line, len(line), 0) == expected
    assert ref.project_display(line, len(line), 0) == expected


def test_project_display_on_a_multibyte_character_cut_by_the_prefix():
    line = '{"t":"ab\U0001f600cd"}'.encode()
    for cut_at in range(len(line) + 1):
        prefix = line[:cut_at]
        got = native.project_display(prefix, len(line), 100)
        assert got == ref.project_display(prefix, len(line), 100)
        if got[0] is not None and got[0]:
            json.loads(got[0])  # never splits the character


def test_whole_line_ending_inside_a_string_value_is_not_json():
    assert native.project_display(b'{"a":"x', 7, 100) == (None, 1, 7)


def test_whole_line_ending_inside_a_key_is_not_json():
    assert native.project_display(b'{"ab', 4, 100) == (None, 0, 4)


def test_short_string_values_are_metadata_kept_whole_outside_the_budget():
    text = "x" * 500
    line = json.dumps({"type": "message", "id": "a" * 128, "role": "user", "text": text},
                      separators=(",", ":")).encode()
    display, kept, cut = native.project_display(line, len(line), 10)
    rec = json.loads(display)
    assert rec["type"] == "message" and rec["id"] == "a" * 128 and rec["role"] == "user"
    assert rec["text"] == "x" * 10 + f" [... {cut} more bytes not shown]"
    assert kept == 10 and (display, kept, cut) == ref.project_display(line, len(line), 10)
    # one byte longer than the metadata limit is text, and counts
    line = b'{"id":"' + b"a" * 129 + b'"}'
    assert native.project_display(line, len(line), 5)[1] == 5


@pytest.mark.parametrize("line", [
    b'{"a":"' + b"x" * 200 + b'\\q"}',      # unknown escape in a long string
    b'{"a":"' + b"x" * 200 + b'\\u12G4"}',  # bad hex digit
])
def test_invalid_escapes_in_long_strings_are_not_json(line):
    line = line.replace(b"\\\\", b"\\")
    assert native.project_display(line, len(line), 1000) == (None, 200, len(line))
    assert ref.project_display(line, len(line), 1000) == (None, 200, len(line))


def test_invalid_utf8_lead_byte_never_swallows_the_closing_quote():
    line = b'{"a":"' + b"x" * 200 + b'\xe0"}'
    line = line.replace(b"\\xe0", b"\xe0")
    got = native.project_display(line, len(line), 1000)
    assert got == ref.project_display(line, len(line), 1000)
    assert got[0] is not None and got[0].endswith(b'\xe0"}') and got[2] == 0


def test_a_prefix_with_nothing_complete_to_show_is_none():
    assert native.project_display(b"12", 5, 10) == (None, 0, 5)
    assert ref.project_display(b"12", 5, 10) == (None, 0, 5)


# ---------------------------------------------------------------------------
# arguments
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: native.project_display(b"{}", 2, -1), "content_limit must be >= 0"),
        (lambda: native.project_display(b"{}", 1, 5), "shorter than the prefix"),
    ],
)
def test_invalid_arguments_raise_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_reference_rejects_the_same_arguments():
    with pytest.raises(ValueError, match="content_limit"):
        ref.project_display(b"{}", 2, -1)
    with pytest.raises(ValueError, match="shorter than the prefix"):
        ref.project_display(b"{}", 1, 5)


# ---------------------------------------------------------------------------
# escape_line_separators
# ---------------------------------------------------------------------------


@given(st.lists(st.sampled_from(["a", "\u2028", "\u2029", "\u2027", "\u202a", "\u00e2", "—", "\u20ac", '"', "\\"]),
                max_size=40))
def test_escape_line_separators_matches_two_replaces(chars):
    data = "".join(chars).encode()
    want = data.replace("\u2028".encode(), b"\\u2028").replace("\u2029".encode(), b"\\u2029")
    got = native.escape_line_separators(data)
    assert got == want
    if want == data:
        assert got is data  # nothing to escape: no copy


# ---------------------------------------------------------------------------
# count_openers
# ---------------------------------------------------------------------------


@given(st.binary(max_size=300), st.data())
def test_count_openers_counts_both_brackets_in_any_range(data, draw):
    start = draw.draw(st.integers(0, len(data)))
    end = draw.draw(st.integers(start, len(data)))
    assert native.count_openers(data, start, end) == data.count(b"[", start, end) + data.count(b"{", start, end)
    assert native.count_openers(memoryview(data), start, end) == native.count_openers(data, start, end)


@pytest.mark.parametrize("data", [b"{" * 1000, b"[{" * 700 + b"x" * 3, bytes(range(256)) * 9])
def test_count_openers_across_many_blocks_of_nothing_but_openers(data):
    for start, end in [(0, len(data)), (1, len(data) - 1), (254, 511), (255, 256)]:
        assert native.count_openers(data, start, end) == data.count(b"[", start, end) + data.count(b"{", start, end)


@pytest.mark.parametrize("start,end", [(-1, 2), (2, 1), (0, 4)])
def test_count_openers_refuses_a_range_outside_the_bytes(start, end):
    with pytest.raises(ValueError, match="not a range"):
        native.count_openers(b"[{]", start, end)

