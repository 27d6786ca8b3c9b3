"""Hypothesis strategies shared by the test suite.

The JSONL strategies render JSON values with a hand-written serializer so that the
bytes vary the way real and hostile transcripts do: "type" first, later, missing or
repeated; random whitespace between tokens; characters written as escapes
(``"ty\\u0070e"``); raw non-ASCII and control characters; BOM, CRLF, blank, truncated
and long lines; deep nesting.
"""

from __future__ import annotations

import json
import math
import random

from hypothesis import strategies as st

BOM = b"\xef\xbb\xbf"

# Type values a line may carry, and dialects drawn over the same vocabulary, so that
# generated lines hit, miss and nearly miss dialect names.
TYPE_NAMES = ["message", "compaction", "session", "user", "assistant", "summary", "x", "type"]
TYPE_VALUES = TYPE_NAMES + ["", "Message", "message ", "m\u00e9ssage", "\u6d88\u606f", "a" * 70]
PI_DIALECT = {"message": 1, "compaction": 2, "session": 3}

# Bytes that matter to the framer and the classifier, to make random bytes interesting.
_SIGNIFICANT = (
    b'{}[]":,\\ \t\r\n/ubfnrt0123456789aAeEfF-+.' + BOM + b"\x00\x1f\x7f\x80\xc3\xe2\xf0\xff"
)


def dialects() -> st.SearchStrategy[dict[str, int]]:
    """A dialect table: up to 32 names mapped to MESSAGE, COMPACTION or OTHER."""
    names = st.one_of(st.sampled_from(TYPE_NAMES), st.text("abcdefgh_", min_size=1, max_size=64))
    return st.one_of(
        st.just(PI_DIALECT),
        st.dictionaries(names, st.sampled_from([1, 2, 3]), max_size=32),
    )


def noisy_bytes(max_size: int = 300) -> st.SearchStrategy[bytes]:
    """Arbitrary bytes, half the time drawn mostly from JSON-significant bytes."""
    significant = st.lists(st.sampled_from(list(_SIGNIFICANT)), max_size=max_size).map(bytes)
    return st.one_of(st.binary(max_size=max_size), significant)


def classify_windows() -> st.SearchStrategy[int]:
    """Small windows that cut lines almost anywhere, and the default."""
    return st.one_of(st.integers(1, 64), st.just(1 << 20))


# ---------------------------------------------------------------------------
# JSON values and their rendering
# ---------------------------------------------------------------------------

_text = st.one_of(
    st.text(max_size=20),
    st.text(st.characters(codec="utf-8"), max_size=20),
    st.text("ab \"\\/\b\f\n\r\t\x00\x1f\x7f\u00e9\u2028\U0001f600", max_size=20),
    st.sampled_from(TYPE_VALUES),
)
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    _text,
)


def json_values(max_leaves: int = 12) -> st.SearchStrategy[object]:
    """JSON values: scalars, lists and objects (keys may be "type")."""
    return st.recursive(
        _scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.lists(st.tuples(st.one_of(_text, st.just("type")), inner), max_size=4).map(dict),
        ),
        max_leaves=max_leaves,
    )


# Built once: constructing a recursive strategy inside a composite on every draw is slow.
_small_values = json_values(6)
_values = json_values()
_non_string_values = json_values(4).filter(lambda v: not isinstance(v, str))


def objects_with_type() -> st.SearchStrategy[list[tuple[str, object]]]:
    """Members of a top-level object (a list of pairs, so "type" may repeat), with the
    "type" key first, somewhere later, missing, repeated, or not a string."""

    @st.composite
    def build(draw):
        members = draw(st.lists(st.tuples(_text, _small_values), max_size=4))
        members = [(k, v) for k, v in members if k != "type"]
        placement = draw(st.sampled_from(["first", "later", "missing", "twice", "not-string"]))
        value = draw(st.sampled_from(TYPE_VALUES))
        if placement == "first":
            members.insert(0, ("type", value))
        elif placement == "later":
            members.insert(draw(st.integers(0, len(members))), ("type", value))
        elif placement == "twice":
            members.insert(0, ("type", value))
            members.append(("type", draw(st.sampled_from(TYPE_VALUES))))
        elif placement == "not-string":
            members.insert(0, ("type", draw(_non_string_values)))
        return members

    return build()


_objects = objects_with_type()


class _Renderer:
    """Serialize JSON with random whitespace and escapes; the output always parses.

    Choices come from a ``random.Random`` seeded by one draw rather than a draw each,
    which keeps generating long lines cheap."""

    def __init__(self, rng: random.Random, spacing: bool, escaping: bool) -> None:
        self.rng = rng
        self.spacing = spacing
        self.escaping = escaping

    def ws(self) -> str:
        if not self.spacing:
            return ""
        return self.rng.choice(["", "", "", " ", "  ", "\t", "\r", " \t\r "])

    def string(self, text: str) -> str:
        if not self.escaping:
            return json.dumps(text, ensure_ascii=self.rng.random() < 0.5)
        parts = []
        for ch in text:
            choice = self.rng.randrange(4)
            if choice == 0 and ord(ch) < 0x10000:  # e.g. "ty\u0070e"
                code = f"{ord(ch):04x}"
                parts.append("\\u" + (code.upper() if self.rng.random() < 0.5 else code))
            elif choice == 1 and ch == "/":
                parts.append("\\/")
            else:
                parts.append(json.dumps(ch, ensure_ascii=False)[1:-1])
        return '"' + "".join(parts) + '"'

    def value(self, value: object) -> str:
        if isinstance(value, str):
            return self.string(value)
        if isinstance(value, list):
            inner = ",".join(self.ws() + self.value(v) + self.ws() for v in value)
            return "[" + (inner or self.ws()) + "]"
        if isinstance(value, dict):
            return self.members(list(value.items()))
        return json.dumps(value)

    def members(self, pairs: list[tuple[str, object]]) -> str:
        inner = ",".join(
            self.ws() + self.string(k) + self.ws() + ":" + self.ws() + self.value(v) + self.ws()
            for k, v in pairs
        )
        return "{" + (inner or self.ws()) + "}"


@st.composite
def json_lines(draw, values: st.SearchStrategy[object] | None = None) -> bytes:
    """One complete JSON line (no ``\\n``): a transcript-like object by default."""
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    renderer = _Renderer(rng, spacing=draw(st.booleans()), escaping=draw(st.booleans()))
    if values is None:
        text = renderer.members(draw(_objects))
    else:
        text = renderer.value(draw(values))
    return (renderer.ws() + text + renderer.ws()).encode("utf-8", "surrogatepass")


def deeply_nested_lines() -> st.SearchStrategy[bytes]:
    """Objects and arrays nested around the projection's depth limit of 256."""

    @st.composite
    def build(draw):
        depth = draw(st.integers(250, 262))
        kinds = draw(st.integers(0, 2**depth - 1))  # bit k: array or object at level k
        brackets = ['{"k":' if kinds >> k & 1 else "[" for k in range(depth)]
        closers = "".join("]" if b == "[" else "}" for b in reversed(brackets))
        leaf = draw(st.sampled_from(['"leaf text"', "1", "[]", "{}"]))
        return ('{"type":"message","v":' + "".join(brackets) + leaf + closers + "}").encode()

    return build()


@st.composite
def jsonl_lines(draw) -> bytes:
    """One line of a JSONL-ish file, without its ``\\n``: mostly JSON objects, some
    blank, truncated, long, CRLF-terminated, non-object or garbage, or two objects on one
    line (what a reader of many lines at once must not share out with a blank line)."""
    kind = draw(
        st.sampled_from(
            ["object"] * 6 + ["value", "blank", "truncated", "long", "deep", "garbage", "bom", "two"]
        )
    )
    if kind == "object":
        line = draw(json_lines())
    elif kind == "value":
        line = draw(json_lines(_values))
    elif kind == "blank":
        line = draw(st.sampled_from([b"", b" ", b"\t \r", b"\r"]))
    elif kind == "truncated":
        whole = draw(json_lines())
        line = whole[: draw(st.integers(0, len(whole)))]
    elif kind == "long":
        filler = "x" * draw(st.integers(100, 3000))
        filler += draw(st.sampled_from(["", "\u00e9", "\\u00e9"]))
        before = draw(st.booleans())
        line = (
            '{"pad":"' + filler + '","type":"message"}'
            if before
            else '{"type":"message","text":"' + filler + '"}'
        ).encode()
    elif kind == "deep":
        line = draw(deeply_nested_lines())
    elif kind == "bom":
        line = BOM + draw(json_lines())
    elif kind == "two":
        line = draw(json_lines()) + draw(st.sampled_from([b" ", b",", b"\t"])) + draw(json_lines())
    else:
        line = draw(noisy_bytes(60)).replace(b"\n", b"")
    if draw(st.integers(0, 5)) == 0:
        line += b"\r"  # CRLF
    return line


@st.composite
def jsonl_documents(draw, max_lines: int = 12) -> bytes:
    """A JSONL-ish file: lines joined by ``\\n``, maybe a BOM first, maybe a torn tail."""
    lines = draw(st.lists(jsonl_lines(), max_size=max_lines))
    data = b"".join(line + b"\n" for line in lines)
    if draw(st.booleans()):
        data = BOM + data
    tail = draw(st.sampled_from(["none", "none", "truncated-line", "bytes"]))
    if tail == "truncated-line":
        whole = draw(json_lines())
        data += whole[: draw(st.integers(1, max(1, len(whole))))]
    elif tail == "bytes":
        data += draw(noisy_bytes(20)).replace(b"\n", b"")
    return data


@st.composite
def large_documents(draw, min_size: int = 5000) -> bytes:
    """A JSONL-ish file of at least ``min_size`` bytes, so that it spans several blocks
    of ``scan_fd``; some lines are longer than a block, some hold multi-byte text."""
    parts = [draw(jsonl_documents(max_lines=6))]
    size = len(parts[0])
    while size < min_size:
        length = draw(st.sampled_from([10, 500, 4093, 4096, 5000, 9000]))
        char = draw(st.sampled_from(["x", "\u00e9", "\u20ac", "\U0001f600"]))
        line = ('{"type":"message","text":"' + char * length + '"}').encode()
        if draw(st.booleans()):
            line = line.replace(b'"type":"message",', b"") + b" "  # no type, trailing space
        parts.append(line + b"\n")
        parts.append(draw(jsonl_documents(max_lines=3)).rstrip(b"\n") + b"\n")
        size += len(parts[-1]) + len(parts[-2])
    if draw(st.booleans()):
        parts.append(b'{"type":"message","torn":"')  # a torn tail
    return b"".join(parts)


_LINK_NAMES = ["uuid", "parentUuid", "id", "parentId", "logicalParentUuid", "sourceToolAssistantUUID"]
_LINK_IDS = ["a", "b", "c", "\u00fc", "\U0001f600", 'x"y', "\\", "id-" + "q" * 40, ""]


@st.composite
def linked_lines(draw) -> bytes:
    """One line of a tree-shaped transcript, without its ``\n``: an object naming its id
    and parent (sometimes null, an integer, repeated, or escaped), with a pad of 0-9000
    bytes before, between or after them, so lines straddle ``scan_fd``'s blocks."""
    pairs: list[tuple[str, object]] = [("type", "message")]
    for _ in range(draw(st.integers(0, 4))):
        pairs.append((draw(st.sampled_from(_LINK_NAMES)),
                      draw(st.one_of(st.sampled_from(_LINK_IDS), st.none(), st.integers(0, 9)))))
    pad = draw(st.sampled_from([0, 10, 500, 4000, 4096, 9000]))
    if pad:
        text = draw(st.sampled_from(["x", "\u00e9", "\\", '"', "\U0001f600"])) * pad
        pairs.insert(draw(st.integers(0, len(pairs))),
                     (draw(st.sampled_from(["text", "message"])), {"content": [{"text": text}]}))
    ascii_ = draw(st.booleans())
    space = draw(st.sampled_from(["", " "]))
    # Written by hand, so a key may repeat (the last one counts).
    body = ("," + space).join(json.dumps(k) + ":" + space + json.dumps(v, ensure_ascii=ascii_) for k, v in pairs)
    return ("{" + body + "}").encode("utf-8")


@st.composite
def linked_documents(draw, max_lines: int = 20) -> bytes:
    """A tree-shaped JSONL file: linked lines among the JSONL-ish ones of
    :func:`jsonl_lines` (blank, truncated, garbage, CRLF, BOM), maybe a torn tail."""
    lines = draw(st.lists(st.one_of(linked_lines(), linked_lines(), jsonl_lines()), max_size=max_lines))
    data = b"".join(line + b"\n" for line in lines)
    if draw(st.booleans()):
        data += draw(linked_lines())[: draw(st.integers(1, 50))]  # a torn tail
    return data


@st.composite
def display_inputs(draw) -> tuple[bytes, bytes, int, int]:
    """``(line, prefix, total_len, content_limit)`` for ``project_display``: a complete
    JSON line and a prefix of it (often the whole line)."""
    line = draw(
        st.one_of(
            json_lines(),
            json_lines(_values),
            deeply_nested_lines(),
        )
    )
    cut = draw(st.one_of(st.just(len(line)), st.integers(0, len(line))))
    limit = draw(st.one_of(st.integers(0, 40), st.integers(0, 2 * len(line) + 1)))
    return line, line[:cut], len(line), limit


# -- text for tokenizers and the section splitter ------------------------------------

#: Pieces that are hard to cut: grapheme clusters of several code points (ZWJ
#: sequences, skin tones, VS16, flags, tags, combining marks, Hangul jamo, an Indic
#: conjunct), CRLF, whitespace runs, special-token text, CJK and long runs without
#: spaces.
HARD_PIECES = [
    "\U0001F469\u200D\U0001F4BB", "\U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466",
    "\U0001F44D\U0001F3FD", "\u2764\uFE0F", "\U0001F1EB\U0001F1F7", "\U0001F1EF\U0001F1F5\U0001F1FA\U0001F1F8",
    "\U0001F3F4\U000E0067\U000E0062\U000E0073\U000E0063\U000E0074\U000E007F", "e\u0301", "a\u0300\u0316\u0323",
    "\u1100\u1161\u11A8", "\uAC00\u11A8", "\u0915\u094D\u0937", "\r\n", "\r\n\r\n", "\n", "\n\n", "\t", " ",
    "   ", "\u3000", "\u00A0", "<|im_end|>", "<|endoftext|>", "\u4E2D\u6587\u30C6\u30AD\u30B9\u30C8",
    "\uD55C\uAD6D\uC5B4", "=" * 40, "x" * 50, "aGVsbG8gd29ybGQ=", "https://example.com/a/b?c=d&e=f", "{\"k\":[1,2,3]}",
]


def hard_texts(max_pieces: int = 40, *, surrogates: bool = False) -> st.SearchStrategy[str]:
    """Text made of hard pieces, words and arbitrary characters, in any order."""
    chars = st.characters(codec="utf-8") if not surrogates else st.characters()
    piece = st.one_of(
        st.sampled_from(HARD_PIECES),
        st.text("abcdefghij ", min_size=1, max_size=12),
        st.text(chars, min_size=1, max_size=6),
    )
    return st.lists(piece, max_size=max_pieces).map("".join)


# -- conversations to fit (tests/analysis) ----------------------------------------------


def conversation(rng: random.Random, n: int, *, system: bool) -> list[dict]:
    """A history with plain exchanges, tool exchanges (a call and its results), a
    stray result, and a current turn at the end."""
    msgs = [{"role": "system", "content": "be brief"}] if system else []
    while len(msgs) < n:
        r = rng.random()
        words = " ".join("w" * rng.randint(1, 9) for _ in range(rng.randint(0, 60)))
        if r < 0.45:
            msgs.append({"role": "user", "content": words})
        elif r < 0.8:
            msgs.append({"role": "assistant", "content": words})
        elif r < 0.97:
            calls = [{"id": f"c{len(msgs)}-{j}", "type": "function",
                      "function": {"name": "read", "arguments": "{}"}} for j in range(rng.randint(1, 3))]
            msgs.append({"role": "assistant", "content": "", "tool_calls": calls})
            msgs.extend({"role": "tool", "tool_call_id": c["id"], "content": words * rng.randint(1, 4)}
                        for c in calls)
        else:
            msgs.append({"role": "tool", "tool_call_id": "orphan", "content": words})
    msgs.append({"role": "user", "content": "the question " + "q" * rng.randint(0, 300)})
    return msgs


def nonadditive_counter(rng: random.Random):
    """An exact count that is not additive: tokens per character vary by message, each
    message adds framing, and each join between neighbours adds a little; dropping a
    message never adds tokens (each message costs more than any join it removes)."""
    per_char = rng.choice([0.2, 0.25, 0.33, 0.5, 1.0])
    base = rng.randint(0, 40)

    def cost(m):
        text = m.get("content") or ""
        return 4 + math.ceil(len(text) * per_char) + 7 * len(m.get("tool_calls") or ())

    def join(a, b):
        return (len(a.get("content") or "") + len(b.get("content") or "")) % 3

    calls = []

    def count(msgs):
        calls.append(len(msgs))
        return base + sum(cost(m) for m in msgs) + sum(join(a, b) for a, b in zip(msgs, msgs[1:]))

    return count, calls
