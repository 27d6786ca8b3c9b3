"""``boundctx._native.lineindex`` against its slow twin ``tests/reference/lineindex.py``.

Property tests assert native == reference on arbitrary bytes and on JSONL-ish files;
fixed fixtures pin the edges (empty file, torn tail, CRLF, BOM, offsets above 2**31,
bad arguments). Reading files (``filescan.scan_fd``) is tested in ``test_filescan.py``.
"""

from __future__ import annotations

import array
import copy
import ctypes
import json
import mmap
import os
import pickle
import random
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from boundctx._native import lineindex as native
from boundctx._native import projection

from tests._support.strategies import (
    BOM,
    PI_DIALECT,
    _Renderer,
    classify_windows,
    dialects,
    jsonl_documents,
    jsonl_lines,
    noisy_bytes,
)
from tests.reference import lineindex as ref

MESSAGE, COMPACTION, OTHER, CORRUPT, BLANK, UNDECIDED = 1, 2, 3, 4, 5, 6  # sidecar format
PI = native.DialectTable(PI_DIALECT)

# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def fields(result) -> tuple[list[int], list[int], int, int]:
    """A scan result (native or reference) as plain comparable values."""
    if isinstance(result, ref.ScanResult):
        return (result.starts, result.kinds, result.indexed_end, result.scanned_end)
    starts = array.array("q", result.starts).tolist()
    return (starts, list(result.kinds), result.indexed_end, result.scanned_end)


def scan_both(data: bytes, dialect: dict[str, int], **options):
    got = fields(native.scan_bytes(data, native.DialectTable(dialect), **options))
    want = fields(ref.scan_bytes(data, dialect, **options))
    return got, want


def kinds_of(data: bytes, dialect=PI_DIALECT, **options) -> list[int]:
    got, want = scan_both(data, dialect, **options)
    assert got == want
    return got[1]


def test_kind_numbers_are_part_of_the_format():
    assert (native.MESSAGE, native.COMPACTION, native.OTHER, native.CORRUPT, native.BLANK,
            native.UNDECIDED) == (MESSAGE, COMPACTION, OTHER, CORRUPT, BLANK, UNDECIDED)
    assert (ref.MESSAGE, ref.COMPACTION, ref.OTHER, ref.CORRUPT, ref.BLANK,
            ref.UNDECIDED) == (MESSAGE, COMPACTION, OTHER, CORRUPT, BLANK, UNDECIDED)


# ---------------------------------------------------------------------------
# scan_bytes == reference
# ---------------------------------------------------------------------------


@given(noisy_bytes(), dialects(), classify_windows(), st.sampled_from([0, 1, 2**31 + 3]))
def test_scan_bytes_matches_reference_on_arbitrary_bytes(data, dialect, window, base):
    got, want = scan_both(data, dialect, base_offset=base, classify_window=window)
    assert got == want


@settings(max_examples=60)
@given(jsonl_documents(), dialects(), classify_windows())
def test_scan_bytes_matches_reference_on_jsonl_documents(data, dialect, window):
    got, want = scan_both(data, dialect, classify_window=window)
    assert got == want
    longest = max((len(line) for line in data.split(b"\n")[:-1]), default=0)
    if window >= longest:  # a window that holds every line leaves none undecided
        assert UNDECIDED not in got[1]


@given(jsonl_lines(), dialects(), classify_windows(), st.booleans())
def test_classify_line_matches_native_on_single_lines(line, dialect, window, at_file_start):
    base = 0 if at_file_start else 1
    result = native.scan_bytes(line + b"\n", native.DialectTable(dialect),
                               base_offset=base, classify_window=window)
    expected = ref.classify_line(line, dialect, classify_window=window,
                                 at_file_start=at_file_start)
    assert list(result.kinds) == [expected]


@settings(max_examples=2000, deadline=None)
@given(st.binary(max_size=600), classify_windows(), st.integers(0, 2**40), st.integers(0, 99))
def test_native_never_crashes_on_random_bytes(data, window, base, limit):
    result = native.scan_bytes(data, PI, base_offset=base, classify_window=window)
    starts = array.array("q", result.starts).tolist()
    assert len(starts) == len(result.kinds) == data.count(b"\n")
    assert set(result.kinds) <= {MESSAGE, COMPACTION, OTHER, CORRUPT, BLANK, UNDECIDED}
    assert result.scanned_end == base + len(data)
    assert result.torn_bytes == len(data) - (data.rfind(b"\n") + 1)
    total_len = len(data) + window % 7
    display, kept, cut = projection.project_display(data, total_len, limit)
    assert kept <= limit and 0 <= cut <= total_len


# ---------------------------------------------------------------------------
# classification: fixed examples
# ---------------------------------------------------------------------------

CLASSIFY_EXAMPLES = [
    (b'{"type":"message","id":"a"}', MESSAGE),
    (b'{"type":"compaction"}', COMPACTION),
    (b'{"type":"session","version":3}', OTHER),
    (b'{"type":"unknown"}', OTHER),
    (b'{"id":"a","type":"message"}', MESSAGE),
    (b'{ "type" : "message" }', MESSAGE),
    (b'\t{"type":"message"}\r', MESSAGE),
    (b'{"ty\\u0070e":"message"}', MESSAGE),
    (b'{"type":"mess\\u0061ge"}', MESSAGE),
    (b'{"type":"MESS\\u0041GE"}', OTHER),
    (b'{"type":"m\\u00e9ssage"}', OTHER),
    (b'{"type":"message","type":"compaction"}', MESSAGE),
    (b'{"type":1}', OTHER),
    (b'{"type":null,"x":"message"}', OTHER),
    (b'{}', OTHER),
    (b'{"a":{"type":"message"}}', OTHER),
    (b'{"a":[}, "type":"message"}', MESSAGE),  # bracket kinds are not matched
    (b'{"a":"\\"}", "type":"message"}', MESSAGE),
    (b'', BLANK),
    (b' \t\r', BLANK),
    (b'[{"type":"message"}]', CORRUPT),
    (b'{"type":"message"', CORRUPT),
    (b'{"type":"message"} x', CORRUPT),
    (b'{"a":1,}', CORRUPT),
    (b'{"a":1 "type":"message"}', CORRUPT),
    (b'{"a" 1}', CORRUPT),
    (b'{"a":tr"ue}', CORRUPT),
    (b'{"a":,"type":"message"}', CORRUPT),
    (b'{"a":"\\q","type":"message"}', CORRUPT),
    (b'{"a":"\\u12G4","type":"message"}', CORRUPT),
    (b'{"a":"\x01","type":"message"}', CORRUPT),
    (b'{"type":"mess\x01age"}', CORRUPT),
    (b'{type:"message"}', CORRUPT),
]


@pytest.mark.parametrize(("line", "kind"), CLASSIFY_EXAMPLES)
def test_classify_line_fixed_examples(line, kind):
    assert ref.classify_line(line, PI_DIALECT) == kind
    assert kinds_of(line + b"\n", base_offset=1) == [kind]


@pytest.mark.parametrize(
    ("line", "window", "kind"),
    [
        (b'{"type":"message"}', 5, UNDECIDED),  # the walk runs out inside the window
        (b'{"type":"message"}', 1, UNDECIDED),
        (b'{"type":"message"}', 16, UNDECIDED),  # the value's closing quote is not seen
        (b'{"type":"message"}', 17, MESSAGE),  # the closing brace need not be seen
        (b"    ", 2, UNDECIDED),  # whitespace so far, more to come
        (b"    ", 4, BLANK),
        (b'{"type":"message"] ', 5, CORRUPT),  # last significant byte is not "}"
        (b'{"a":"\\q"} ', 8, CORRUPT),  # the bad escape is inside the window
        (b'{"a":"\\q"} ', 7, UNDECIDED),  # only its backslash is
        (b'{"a":12345,"type":"message"}', 8, UNDECIDED),  # scalar reaches the window end
    ],
)
def test_classify_window_cuts_the_walk(line, window, kind):
    assert kinds_of(line + b"\n", classify_window=window, base_offset=1) == [kind]


def test_empty_input_has_no_lines():
    result = native.scan_bytes(b"", PI)
    assert fields(result) == ([], [], 0, 0) == fields(ref.scan_bytes(b"", PI_DIALECT))
    assert result.torn_bytes == 0


def test_input_without_trailing_newline_leaves_a_torn_tail():
    data = b'{"type":"message"}\n{"type":"message"'
    result = native.scan_bytes(data, PI)
    assert fields(result) == ([0], [MESSAGE], 19, len(data))
    assert result.torn_bytes == len(data) - 19
    assert kinds_of(b'{"type":"message"}') == []  # a lone unterminated line is no record


def test_crlf_lines_classify_like_lf_lines():
    data = b'{"type":"message"}\r\n\r\n{"type":"compaction"} \r\n'
    result = native.scan_bytes(data, PI)
    assert fields(result) == ([0, 20, 22], [MESSAGE, BLANK, COMPACTION], len(data), len(data))
    assert kinds_of(data) == [MESSAGE, BLANK, COMPACTION]


def test_bom_at_file_start_is_skipped():
    assert kinds_of(BOM + b'{"type":"message"}\n') == [MESSAGE]
    assert kinds_of(BOM + b"\n") == [BLANK]


def test_bom_not_at_file_start_is_not_skipped():
    line = BOM + b'{"type":"message"}\n'
    assert kinds_of(b"\n" + line) == [BLANK, CORRUPT]
    assert kinds_of(line, base_offset=1) == [CORRUPT]
    assert kinds_of(line, classify_window=2) == [CORRUPT]  # BOM cut by the window


def test_base_offset_above_2_31_shifts_every_offset():
    base = 2**31 + 17
    data = b'{"type":"message"}\n\n{"type":"compaction"}\ntorn'
    low = fields(native.scan_bytes(data, PI))
    high = fields(native.scan_bytes(data, PI, base_offset=base))
    assert high[0] == [s + base for s in low[0]]
    assert high[1] == low[1]
    assert (high[2], high[3]) == (low[2] + base, low[3] + base)
    assert high == fields(ref.scan_bytes(data, PI_DIALECT, base_offset=base))
    assert max(high[0]) > 2**31


def test_scan_accepts_any_contiguous_buffer():
    data = b'{"type":"message"}\nx\n'
    expected = fields(native.scan_bytes(data, PI))
    assert fields(native.scan_bytes(bytearray(data), PI)) == expected
    assert fields(native.scan_bytes(memoryview(data), PI)) == expected


# ---------------------------------------------------------------------------
# qualified kinds: a type value that needs a second key
# ---------------------------------------------------------------------------

Q = native.QualifiedKind
# The shapes of the real dialects: a top-level second key, and a key inside an object.
QUALIFIED = {
    "user": MESSAGE,
    "system": Q(COMPACTION, "subtype", "compact_boundary"),
    "event_msg": Q(MESSAGE, "payload.type", "user_message"),
}

# Vocabularies that hit, nearly miss and miss the keys and values the drawn tables name.
Q_TYPES = ["system", "event_msg", "user", "message", "x"]
Q_PATHS = ["subtype", "payload.type", "payload", "meta.kind", "p.q", "x"]
Q_VALUES = ["compact_boundary", "user_message", "a", "b"]
TOP_KEYS = ["type", "subtype", "payload", "meta", "p", "x", "Subtype", "subtype ", "payload.type"]
INNER_KEYS = ["type", "kind", "q", "x", "Type"]
LEAF_STRINGS = Q_TYPES + Q_VALUES + ["", "A", "user_message ", "compact_boundar", "\u00e9", "a" * 70]


@st.composite
def qualified_dialects(draw) -> dict[str, int]:
    """Tables mixing plain and qualified kinds, over paths that begin with different keys."""
    table, first_keys = {}, {}
    for name in draw(st.lists(st.sampled_from(Q_TYPES), unique=True, max_size=5)):
        path = draw(st.sampled_from([None, *Q_PATHS]))
        kind = draw(st.sampled_from([MESSAGE, COMPACTION]))
        first = path.split(".")[0] if path else None
        if path is None or first_keys.get(first, path) != path or (first not in first_keys
                                                                    and len(first_keys) == 4):
            table[name] = draw(st.sampled_from([MESSAGE, COMPACTION, OTHER]))
            continue
        first_keys[first] = path
        values = draw(st.lists(st.sampled_from(Q_VALUES), min_size=1, max_size=4))
        table[name] = Q(kind, path, *values)
    return table


class Obj(tuple):
    """An object as (key, value) pairs, so that a key may repeat."""


class PairsRenderer(_Renderer):
    def value(self, value):
        if isinstance(value, Obj):
            return self.members(list(value))
        return super().value(value)


def either(*strategies):
    """One of ``strategies``, each as likely (``st.one_of`` favours some branches)."""
    return st.sampled_from(strategies).flatmap(lambda s: s)


_leaf = either(st.sampled_from(LEAF_STRINGS), st.none(), st.booleans(), st.integers(-9, 9),
               st.text(max_size=4))
_named = st.sampled_from(Q_VALUES + Q_TYPES)  # strings a drawn table names, to hit it often
_deeper = st.lists(st.tuples(st.sampled_from(INNER_KEYS), either(_named, _leaf)), max_size=2).map(Obj)
_inner = st.lists(st.tuples(st.sampled_from(INNER_KEYS),
                            either(_named, _named, _leaf, st.lists(_leaf, max_size=2), _deeper)),
                  max_size=4).map(Obj)
_member = either(_leaf, _inner, st.lists(_inner, max_size=2),
                 st.integers(0, 300).map(lambda k: "f" * k))  # long fillers reach window edges
# Members that satisfy a path of QUALIFIED or of a drawn table with the first value.
ON_PATH_HITS = [("subtype", "compact_boundary"), ("payload", Obj([("type", "user_message")])),
                ("payload", Obj([("type", "user_message"), ("message", "hi")])),
                ("subtype", "a"), ("payload", "a"), ("meta", Obj([("kind", "a")])),
                ("p", Obj([("q", "compact_boundary")])), ("x", "compact_boundary"),
                ("payload", Obj([("type", "compact_boundary")])),
                ("payload", Obj([("type", "token_count"), ("type", "user_message")]))]  # a near hit
# Members on a path that settle it with no match: a later hit must not count.
ON_PATH_MISSES = [("subtype", 1), ("subtype", None), ("subtype", ["compact_boundary"]), ("payload", Obj([])),
                  ("payload", Obj([("x", "user_message")])), ("payload", "user_message"),
                  ("payload", Obj([("type", False)])), ("meta", Obj([("x", Obj([("kind", "a")]))]))]
_on_path = either(_named, _named, _inner, _inner, _leaf, st.lists(_inner, max_size=1))


@st.composite
def qualified_lines(draw, *, mutate: bool = True) -> bytes:
    """A line whose members are on and around qualifier paths: "type" and second keys
    missing, repeated, before or after each other, nested deeper, of the wrong JSON type,
    written with escapes and whitespace; some of them then damaged (a byte inserted or
    deleted, or cut short, perhaps closed with a brace)."""
    members = draw(st.lists(st.tuples(st.sampled_from(TOP_KEYS[1:]), _member), max_size=3))
    for key in draw(st.lists(st.sampled_from(TOP_KEYS[1:6]), max_size=3)):
        members.insert(draw(st.integers(0, len(members))), (key, draw(_on_path)))
    chosen = [draw(st.sampled_from(ON_PATH_HITS)) for _ in range(draw(st.sampled_from([1, 1, 0, 2])))]
    chosen += [draw(st.sampled_from(ON_PATH_MISSES)) for _ in range(draw(st.sampled_from([0, 1])))]
    for key, value in chosen:
        if isinstance(value, Obj):  # the hit among other members of its object
            value = Obj(draw(st.lists(st.tuples(st.sampled_from(INNER_KEYS[1:]), _leaf), max_size=2))
                        + list(value) + draw(st.lists(st.tuples(st.sampled_from(INNER_KEYS), _leaf),
                                                      max_size=2)))
        members.insert(draw(st.integers(0, len(members))), (key, value))
    for _ in range(draw(st.sampled_from([1, 1, 1, 0, 2]))):
        value = draw(either(st.sampled_from(Q_TYPES[:2]), st.sampled_from(Q_TYPES), _leaf))
        members.insert(draw(st.integers(0, len(members))), ("type", value))
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    renderer = PairsRenderer(rng, spacing=draw(st.booleans()), escaping=draw(st.booleans()))
    line = renderer.members(members).encode("utf-8", "surrogatepass")
    damage = draw(st.sampled_from(["none"] * 4 + ["insert", "delete", "cut", "cut and close"])) if mutate else "none"
    if damage != "none" and line:
        at = draw(st.integers(0, len(line) - 1))
        if damage == "insert":
            line = line[:at] + bytes([draw(st.sampled_from(list(b'{}[]":,\\ x1')))]) + line[at:]
        elif damage == "delete":
            line = line[:at] + line[at + 1:]
        elif damage == "cut":
            line = line[:at]
        else:  # still {...}, so the walk runs into the end of the line wherever it was cut
            line = line[:at] + b"}"
    return line


def first_key_object(pairs):
    """A decoded object keeping the first of repeated keys, as the classifier reads them."""
    out = {}
    for key, value in pairs:
        out.setdefault(key, value)
    return out


def plain_parse_kind(line: bytes, dialect: dict[str, int]) -> int:
    """What a json.loads of a whole, valid line says its kind is under ``dialect``."""
    record = json.loads(line, object_pairs_hook=first_key_object)
    kind_of_type = dialect.get(record.get("type")) if isinstance(record.get("type"), str) else None
    if kind_of_type is None:
        return OTHER
    if not isinstance(kind_of_type, Q):
        return int(kind_of_type)
    value = record
    for key in kind_of_type.path.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return int(kind_of_type) if isinstance(value, str) and value in kind_of_type.values else OTHER


@settings(max_examples=600)
@given(qualified_lines(), either(st.just(QUALIFIED), qualified_dialects()), classify_windows(),
       st.booleans())
def test_qualified_classification_matches_reference_on_adversarial_lines(line, dialect, window, at_file_start):
    base = 0 if at_file_start else 1
    got = native.scan_bytes(line + b"\n", native.DialectTable(dialect), base_offset=base,
                            classify_window=window)
    assert list(got.kinds) == [ref.classify_line(line, dialect, classify_window=window,
                                                 at_file_start=at_file_start)]


@settings(max_examples=400)
@given(qualified_lines(mutate=False), either(st.just(QUALIFIED), qualified_dialects()))
def test_qualified_classification_of_a_whole_valid_line_is_what_a_plain_parse_says(line, dialect):
    assert kinds_of(line + b"\n", dialect, base_offset=1) == [plain_parse_kind(line, dialect)]


@given(noisy_bytes(), either(st.just(QUALIFIED), qualified_dialects()), classify_windows())
def test_qualified_scan_matches_reference_on_arbitrary_bytes(data, dialect, window):
    got, want = scan_both(data, dialect, classify_window=window)
    assert got == want


@settings(max_examples=60)
@given(st.lists(qualified_lines(), max_size=8), qualified_dialects(), classify_windows())
def test_qualified_scan_matches_reference_on_documents(lines, dialect, window):
    got, want = scan_both(b"".join(line + b"\n" for line in lines), dialect, classify_window=window)
    assert got == want


@settings(max_examples=1000, deadline=None)
@given(st.binary(max_size=400), qualified_dialects(), classify_windows())
def test_native_never_crashes_on_random_bytes_with_qualified_kinds(data, dialect, window):
    result = native.scan_bytes(data, native.DialectTable(dialect), classify_window=window)
    assert len(result.kinds) == data.count(b"\n")
    assert set(result.kinds) <= {MESSAGE, COMPACTION, OTHER, CORRUPT, BLANK, UNDECIDED}


@pytest.fixture(scope="module")
def page_before_a_guard():
    """A writable page followed by one that faults on any access (Linux)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("the guard page is set with Linux mprotect")
    page = mmap.PAGESIZE
    libc = ctypes.CDLL(None, use_errno=True)
    area = mmap.mmap(-1, 2 * page)
    pin = ctypes.c_char.from_buffer(area)  # the area's address, for mprotect
    guard = ctypes.c_void_p(ctypes.addressof(pin) + page)
    assert libc.mprotect(guard, page, 0) == 0, os.strerror(ctypes.get_errno())  # PROT_NONE
    view = memoryview(area)[:page]
    yield view
    view.release()
    libc.mprotect(guard, page, mmap.PROT_READ | mmap.PROT_WRITE)
    del pin
    area.close()


@settings(max_examples=500, deadline=None)
@given(either(qualified_lines(), st.binary(max_size=300)), either(st.just(QUALIFIED), qualified_dialects()),
       classify_windows())
def test_classification_never_reads_past_the_end_of_the_bytes(page_before_a_guard, line, dialect, window):
    # The bytes end where the guard page begins: one byte read past them is a SIGSEGV.
    page = page_before_a_guard
    table = native.DialectTable(dialect)
    for data in (line.replace(b"\n", b"") + b"\n", b" " + line.replace(b"\n", b"")):
        page[len(page) - len(data):] = data
        got = native.scan_bytes(page[len(page) - len(data):], table, base_offset=1, classify_window=window)
        assert len(got.kinds) == data.count(b"\n")


SYSTEM = b'{"type":"system"'
EVENT = b'{"type":"event_msg"'
QUALIFIED_EXAMPLES = [
    # Claude Code: a compaction is a system line whose subtype says so.
    (SYSTEM + b',"subtype":"compact_boundary","content":"Conversation compacted"}', COMPACTION),
    (SYSTEM + b',"subtype":"turn_duration"}', OTHER),
    (SYSTEM + b'}', OTHER),  # the key is missing
    (b'{"subtype":"compact_boundary","type":"system"}', COMPACTION),  # before "type"
    (b'{"uuid":"u","subtype":"compact_boundary","cwd":"/","type":"system"}', COMPACTION),
    (SYSTEM + b',"subtype":"compact_boundary","subtype":"x"}', COMPACTION),  # first key wins
    (SYSTEM + b',"subtype":"x","subtype":"compact_boundary"}', OTHER),
    (b'{"subtype":"x","type":"system","subtype":"compact_boundary"}', OTHER),
    (b'{"subtype":1,"type":"system","subtype":"compact_boundary"}', OTHER),
    (b'{"subtype":1,"type":"system","x":tr"ue}', OTHER),  # settled before "type": decided there
    (b'{"payload":{},"type":"event_msg","payload":{"type":"user_message"}}', OTHER),
    (b'{"payload":{"x":1},"type":"event_msg","x":tr"ue}', OTHER),
    (b'{"payload":{"type":2},"type":"event_msg","payload":{"type":"user_message"}}', OTHER),
    (b'{"payload":"user_message","type":"event_msg","x":tr"ue}', OTHER),
    (SYSTEM + b',"sub\\u0074ype":"compact_\\u0062oundary"}', COMPACTION),  # escaped
    (SYSTEM + b',"subtype":"COMPACT_BOUNDARY"}', OTHER),
    (SYSTEM + b',"subtype":"compact_boundary "}', OTHER),
    (SYSTEM + b',"subtype":"compact_boundar\\u00e9"}', OTHER),
    (SYSTEM + b',"subtype":["compact_boundary"]}', OTHER),  # the wrong JSON type
    (SYSTEM + b',"subtype":null}', OTHER),
    (SYSTEM + b',"subtype":{"type":"compact_boundary"}}', OTHER),
    (SYSTEM + b',"x":{"subtype":"compact_boundary"}}', OTHER),  # nested deeper
    (SYSTEM + b',"subtype":"' + b"c" * 70 + b'"}', OTHER),  # longer than any value
    (b'{"type":"summary","summary":"A title","leafUuid":"u"}', OTHER),  # not in this table
    (b'{"type":"user","subtype":"compact_boundary"}', MESSAGE),  # a plain kind needs nothing
    (b'{"type":"user","x":tr"ue}', MESSAGE),  # ... so the walk stops at "type"
    (SYSTEM + b',"x":tr"ue,"subtype":"compact_boundary"}', CORRUPT),  # a qualified one walks on
    (SYSTEM + b',"subtype":"compact_boundary","x":tr"ue}', COMPACTION),  # and stops when it knows
    (SYSTEM + b',"subtype":"compact_boundary",}', COMPACTION),
    (SYSTEM + b',"subtype":"compact\x01"}', CORRUPT),
    (b'{"type":1,"subtype":"compact_boundary"}', OTHER),
    # Codex: a user turn is an event_msg whose payload is a user_message.
    (EVENT + b',"payload":{"type":"user_message","message":"hi"}}', MESSAGE),
    (EVENT + b',"payload":{"type":"token_count","info":null}}', OTHER),
    (EVENT + b',"payload":{"message":"hi","type":"user_message"}}', MESSAGE),
    (EVENT + b',"payload":{"message":"hi"}}', OTHER),  # the inner key is missing
    (EVENT + b',"payload":{}}', OTHER),
    (EVENT + b'}', OTHER),
    (b'{"payload":{"type":"user_message"},"type":"event_msg"}', MESSAGE),  # before "type"
    (b'{"payload":{"type":"user_message","x":[1,{"a":"}"}]},"ts":1,"type":"event_msg"}', MESSAGE),
    (EVENT + b',"payload":{"type":"user_message","type":"x"}}', MESSAGE),  # first key wins
    (EVENT + b',"payload":{"type":"x","type":"user_message"}}', OTHER),
    (b'{"payload":{"type":"user_message","type":"x"},"type":"event_msg"}', MESSAGE),
    (b'{"payload":{"type":"x","type":"user_message"},"type":"event_msg"}', OTHER),
    (EVENT + b',"payload":{"type":"x"},"payload":{"type":"user_message"}}', OTHER),
    (EVENT + b',"payload":{"x":{"type":"user_message"}}}', OTHER),  # nested deeper
    (EVENT + b',"payload":[{"type":"user_message"}]}', OTHER),  # the wrong JSON type
    (EVENT + b',"payload":"user_message"}', OTHER),
    (EVENT + b',"payload":{"type":["user_message"]}}', OTHER),
    (EVENT + b',"payload":{"type":null,"x":1}}', OTHER),
    (EVENT + b',"type":"user_message"}', OTHER),  # a second top-level "type" is not the path
    (EVENT + b',"pay\\u006coad":{"\\u0074ype":"user_\\u006dessage"}}', MESSAGE),  # escaped
    (EVENT + b',"payload":{"type":"user_message"}]', CORRUPT),  # not {...}
    (EVENT + b',"payload":{"type":"user_message"}', MESSAGE),  # only what it walks is checked
    (EVENT + b',"payload":{"a" 1,"type":"user_message"}}', CORRUPT),  # walked, so validated
    (EVENT + b',"payload":{"type":"user_message","a" 1}}', MESSAGE),  # decided before it
    (b'{"payload":{"type":"user_message","a" 1},"type":"event_msg"}', CORRUPT),
    (EVENT + b',"payload":{"type":"user_message",}}', MESSAGE),
    (b'{"payload":{"type":"user_message",},"type":"event_msg"}', CORRUPT),
    (b'{"type":"response_item","payload":{"type":"user_message"}}', OTHER),  # not in this table
]


@pytest.mark.parametrize(("line", "kind"), QUALIFIED_EXAMPLES)
def test_qualified_fixed_examples(line, kind):
    assert ref.classify_line(line, QUALIFIED) == kind
    assert kinds_of(line + b"\n", QUALIFIED, base_offset=1) == [kind]


@pytest.mark.parametrize(
    ("line", "window", "kind"),
    [
        (SYSTEM + b',"subtype":"compact_boundary"}', 15, UNDECIDED),  # "type" is cut
        (SYSTEM + b',"subtype":"compact_boundary"}', 16, UNDECIDED),  # its path is past the edge
        (SYSTEM + b',"subtype":"compact_boundary"}', 20, UNDECIDED),  # the path's key is cut
        (SYSTEM + b',"subtype":"compact_boundary"}', 44, UNDECIDED),  # its value is cut
        (SYSTEM + b',"subtype":"compact_boundary"}', 45, COMPACTION),
        (SYSTEM + b',"subtype":"turn_duration"}', 42, OTHER),
        (b'{"subtype":"compact_boundary","type":"system"}', 44, UNDECIDED),  # now "type" is cut
        (b'{"subtype":"compact_boundary","type":"system"}', 45, COMPACTION),
        (b'{"type":"user","subtype":"compact_boundary"}', 16, MESSAGE),  # plain: needs no path
        (EVENT + b',"payload":{"type":"user_message","message":"' + b"m" * 50 + b'"}}', 51, UNDECIDED),
        (EVENT + b',"payload":{"type":"user_message","message":"' + b"m" * 50 + b'"}}', 52, MESSAGE),
        (EVENT + b',"payload":{"message":"' + b"m" * 50 + b'","type":"user_message"}}', 100, UNDECIDED),
        (EVENT + b',"payload":{"type":"token_count"}}', 50, UNDECIDED),
        (EVENT + b',"payload":{"type":"token_count"}}', 51, OTHER),
    ],
)
def test_a_qualifier_past_the_window_edge_leaves_the_line_undecided(line, window, kind):
    assert kinds_of(line + b"\n", QUALIFIED, classify_window=window, base_offset=1) == [kind]
    assert kinds_of(line + b"\n", QUALIFIED, classify_window=len(line), base_offset=1) != [UNDECIDED]


def test_qualified_kind_is_its_kind_and_says_where_it_looks():
    kind = Q(COMPACTION, "subtype", "compact_boundary", "microcompact_boundary")
    assert kind == COMPACTION and isinstance(kind, int) and hash(kind) == hash(COMPACTION)
    assert kind.path == "subtype" and kind.values == ("compact_boundary", "microcompact_boundary")
    assert repr(kind) == "QualifiedKind(2, 'subtype', 'compact_boundary', 'microcompact_boundary')"
    line = b'{"type":"system","subtype":"microcompact_boundary"}\n'
    assert kinds_of(line, {"system": kind}) == [COMPACTION]
    for copied in (copy.deepcopy(kind), pickle.loads(pickle.dumps(kind))):
        assert (type(copied), copied, copied.path, copied.values) == (Q, kind, kind.path, kind.values)


def test_a_qualified_table_holds_4_paths_and_32_names():
    paths = ["a", "b.c", "d", "e.f"]
    table = {f"t{i}": Q(MESSAGE, paths[i % 4], "v") for i in range(32)}
    native.DialectTable(table)
    assert kinds_of(b'{"e":{"f":"v"},"type":"t31"}\n', table) == [MESSAGE]
    assert kinds_of(b'{"e":{"f":"v"},"type":"t30"}\n', table) == [OTHER]


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=300).map(lambda b: bytes(x % 7 for x in b)), st.integers(0, 2**40))
def test_sequence_lines_are_the_message_corrupt_and_compaction_lines(kinds, line0):
    messages, compactions = native.sequence_lines(kinds, line0)
    assert list(memoryview(messages).cast("q")) == [
        line0 + i for i, k in enumerate(kinds) if k in (MESSAGE, CORRUPT)]
    assert list(memoryview(compactions).cast("q")) == [
        line0 + i for i, k in enumerate(kinds) if k == COMPACTION]


_INT64 = st.integers(-(2**63), 2**63 - 1)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.lists(_INT64, max_size=12),
                 # mostly rising runs, so the bounds and a single fall are what decide
                 st.lists(st.integers(0, 3), max_size=40).map(
                     lambda steps: [sum(steps[:i + 1]) - 5 for i in range(len(steps))])),
       _INT64, _INT64, st.sampled_from(["bytes", "array", "slice"]))
def test_rises_within_agrees_with_its_twin_on_any_values_and_bounds(values, low, high, form):
    raw = array.array("q", values).tobytes()
    if form == "array":
        buf = np.frombuffer(raw, dtype=np.int64)
    elif form == "slice":  # a view one byte in: unaligned int64s
        buf = memoryview(b"x" + raw)[1:]
    else:
        buf = raw
    assert native.rises_within(buf, low, high) == ref.rises_within(values, low, high)


def test_rises_within_refuses_a_buffer_of_partial_int64s():
    with pytest.raises(ValueError, match="whole int64s"):
        native.rises_within(b"\0" * 12, 0, 1)
    assert native.rises_within(b"", 5, 1)  # none: nothing to fall or stray


@pytest.mark.parametrize("names, message", [
    ({"m\u00e9": 1}, "ASCII"),
    ({b"x": 1}, "ASCII"),
])
def test_dialect_table_names_must_be_ascii_strings(names, message):
    names = {(k.encode().decode("unicode_escape") if isinstance(k, str) else k): v for k, v in names.items()}
    with pytest.raises(ValueError, match=message):
        native.DialectTable(names)


def test_scan_bytes_refuses_offsets_that_would_overflow():
    with pytest.raises(ValueError, match="base_offset"):
        native.scan_bytes(b"{}\n", PI, base_offset=2**63 - 2)


def test_build_flag_says_whether_native_checks_are_on():
    assert isinstance(native.BUILT_WITH_CHECKS, bool)


# ---------------------------------------------------------------------------
# arguments
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: native.scan_bytes(b"", PI, classify_window=0), "classify_window must be >= 1"),
        (lambda: native.scan_bytes(b"", PI, base_offset=-1), "base_offset must be in 0"),
        (lambda: native.DialectTable({f"t{i}": 1 for i in range(33)}), "at most 32"),
        (lambda: native.DialectTable({"": 1}), "must be 1-64 ASCII bytes"),
        (lambda: native.DialectTable({"x" * 65: 1}), "must be 1-64 ASCII bytes"),
        (lambda: native.DialectTable({"m\u00e9ssage": 1}), "ASCII characters"),
        (lambda: native.DialectTable({"message": 4}), "must be MESSAGE, COMPACTION or OTHER"),
        (lambda: native.DialectTable({"message": 0}), "must be MESSAGE, COMPACTION or OTHER"),
        (lambda: native.QualifiedKind(OTHER, "subtype", "x"), "MESSAGE or COMPACTION"),
        (lambda: native.QualifiedKind(4, "subtype", "x"), "MESSAGE or COMPACTION"),
        (lambda: native.QualifiedKind(MESSAGE, "a.b.c", "x"), "at most two keys"),
        (lambda: native.QualifiedKind(MESSAGE, "type", "x"), "cannot begin with"),
        (lambda: native.QualifiedKind(MESSAGE, "type.x", "x"), "cannot begin with"),
        (lambda: native.QualifiedKind(MESSAGE, "a.", "x"), "must be 1-64 ASCII bytes"),
        (lambda: native.QualifiedKind(MESSAGE, "a" * 65, "x"), "must be 1-64 ASCII bytes"),
        (lambda: native.QualifiedKind(MESSAGE, "p\u00e9", "x"), "ASCII characters"),
        (lambda: native.QualifiedKind(MESSAGE, b"subtype", "x"), "must be a str"),
        (lambda: native.QualifiedKind(MESSAGE, "subtype"), "1-4 values"),
        (lambda: native.QualifiedKind(MESSAGE, "subtype", *"abcde"), "1-4 values"),
        (lambda: native.QualifiedKind(MESSAGE, "subtype", ""), "must be 1-64 ASCII bytes"),
        (lambda: native.QualifiedKind(MESSAGE, "subtype", "x" * 65), "must be 1-64 ASCII bytes"),
        (lambda: native.QualifiedKind(MESSAGE, "subtype", 1), "ASCII characters"),
        (lambda: native.DialectTable({"a": native.QualifiedKind(MESSAGE, "payload.type", "x"),
                                      "b": native.QualifiedKind(MESSAGE, "payload", "x")}),
         "must begin with different keys"),
        (lambda: native.DialectTable({f"t{i}": native.QualifiedKind(MESSAGE, f"k{i}", "x") for i in range(5)}),
         "at most 4 qualifier paths"),
    ],
)
def test_invalid_arguments_raise_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_reference_rejects_the_same_arguments():
    with pytest.raises(ValueError, match="classify_window"):
        ref.scan_bytes(b"", PI_DIALECT, classify_window=0)
    with pytest.raises(ValueError, match="base_offset"):
        ref.scan_bytes(b"", PI_DIALECT, base_offset=-1)


def test_dialect_table_accepts_32_names_of_64_bytes():
    names = {f"{i:02d}" + "n" * 62: MESSAGE for i in range(32)}
    table = native.DialectTable(names)
    line = b'{"type":"31' + b"n" * 62 + b'"}\n'
    assert list(native.scan_bytes(line, table).kinds) == [MESSAGE]
    assert kinds_of(line, names) == [MESSAGE]


# -- the AVX2 pass over a string's plain bytes ------------------------------------------

# Pieces of keys and values around the 32 bytes the AVX2 skip takes at a time: runs just
# under and over 32, escapes (a quote, a backslash, \u), a raw control byte and a stray
# quote or backslash at any offset, UTF-8, and a key longer than any name a dialect has.
_STRING_PIECES = [b"a" * 31, b"b" * 33, b"t" * 64, b'\\"', b"\\\\", b"\\u00e9", b"\\u12", b"\\n", b"\x01",
                  b"\x1f", b"\xc3\xa9", b"\xff", b'"', b"\\", b"type", b"message", b"compaction"]


@st.composite
def long_string_lines(draw) -> bytes:
    """A line of one object (or its start) whose keys and values are built of pieces."""
    def text() -> bytes:
        return b"".join(draw(st.lists(st.sampled_from(_STRING_PIECES), max_size=6)))

    members = []
    for _ in range(draw(st.integers(0, 4))):
        key = text() if draw(st.booleans()) else draw(st.sampled_from([b"type", b"subtype", b"message"]))
        value = (b'"' + text() + b'"' if draw(st.booleans())
                 else draw(st.sampled_from([b'"message"', b'"compaction"', b'{"type":"x"}', b"1"])))
        members.append(b'"' + key + b'":' + value)
    line = b"{" + b",".join(members) + b"}"
    return line[: draw(st.integers(0, len(line)))] if draw(st.booleans()) else line


@settings(max_examples=300)
@given(st.lists(long_string_lines(), min_size=1, max_size=5), dialects(), classify_windows())
def test_strings_are_passed_over_alike_with_and_without_avx2(lines, dialect, window):
    data = b"".join(line.replace(b"\n", b" ") + b"\n" for line in lines)
    table = native.DialectTable(dialect)
    before = native.use_simd(True)
    try:
        fast = fields(native.scan_bytes(data, table, classify_window=window))
        native.use_simd(False)
        slow = fields(native.scan_bytes(data, table, classify_window=window))
    finally:
        native.use_simd(before)
    assert fast == slow == fields(ref.scan_bytes(data, dialect, classify_window=window))
