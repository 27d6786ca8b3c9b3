"""Slow, obviously-correct twin of ``boundctx._native.lineindex``.

Written from the module's contract, not from its code: lines come from ``bytes.split``,
and each line is read by a small recursive-descent reader over a cursor that raises
``RanOut`` when the bytes end and ``Malformed`` when they cannot be JSON. Nothing here
is fast; everything here should be easy to check by reading it.

The three public functions mirror the native ones:

- ``scan_bytes(data, dialect, *, base_offset, classify_window)`` frames ``data`` into
  complete lines and classifies each one;
- ``classify_line(line, dialect, *, classify_window, at_file_start)`` classifies one line
  (given without its ``\\n``);
- ``project_display(prefix, total_len, content_limit)`` builds the bounded display form
  of one line from a prefix of it.

A dialect here is a plain ``dict[str, int]`` (type value -> kind); a kind with ``path``
and ``values`` attributes (``lineindex.QualifiedKind``) applies only where the string at
that path is one of the values, and a line of that type is otherwise OTHER.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

MESSAGE = 1
COMPACTION = 2
OTHER = 3
CORRUPT = 4
BLANK = 5
UNDECIDED = 6

DEFAULT_CLASSIFY_WINDOW = 1 << 20
MAX_DEPTH = 256  # deepest nesting the display projection follows
SHORT_STRING = 128  # string values at most this long (as written) are kept whole

BOM = b"\xef\xbb\xbf"
WHITESPACE = b" \t\r"  # JSON whitespace less "\n", which never occurs inside a line
HEX_DIGITS = b"0123456789abcdefABCDEF"
SIMPLE_ESCAPES = {  # the byte after a backslash -> the byte it stands for
    ord('"'): ord('"'),
    ord("\\"): ord("\\"),
    ord("/"): ord("/"),
    ord("b"): 0x08,
    ord("f"): 0x0C,
    ord("n"): 0x0A,
    ord("r"): 0x0D,
    ord("t"): 0x09,
}
QUOTE, BACKSLASH, COLON, COMMA = b'"\\:,'
OPEN_OBJECT, CLOSE_OBJECT, OPEN_ARRAY, CLOSE_ARRAY = b"{}[]"
CLOSER_OF = {OPEN_OBJECT: CLOSE_OBJECT, OPEN_ARRAY: CLOSE_ARRAY}


class RanOut(Exception):
    """The bytes ended before the construct being read did: more bytes could decide."""


class Malformed(Exception):
    """Not JSON, whatever bytes follow."""


class Cursor:
    """A read position in a byte string. Reading past the end raises ``RanOut``."""

    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data = data
        self.pos = pos

    def at_end(self) -> bool:
        return self.pos >= len(self.data)

    def peek(self) -> int:
        if self.at_end():
            raise RanOut
        return self.data[self.pos]

    def take(self) -> int:
        byte = self.peek()
        self.pos += 1
        return byte

    def take_many(self, count: int) -> bytes:
        if self.pos + count > len(self.data):
            raise RanOut
        chunk = self.data[self.pos : self.pos + count]
        self.pos += count
        return chunk

    def skip_whitespace(self) -> None:
        while not self.at_end() and self.data[self.pos] in WHITESPACE:
            self.pos += 1


# ---------------------------------------------------------------------------
# JSON pieces shared by the classifier and the projection
# ---------------------------------------------------------------------------


def read_string(cur: Cursor) -> bytes | None:
    """Read a JSON string whose opening quote was just taken, through its closing quote.

    Returns the decoded bytes, or None when a ``\\u`` escape decodes to a non-ASCII code
    point (dialect names are ASCII, so such a string can never match one). Raw non-ASCII
    bytes are kept as they are.
    """
    decoded = bytearray()
    matchable = True
    while True:
        byte = cur.take()
        if byte == QUOTE:
            return bytes(decoded) if matchable else None
        if byte == BACKSLASH:
            escape = cur.take()
            if escape in SIMPLE_ESCAPES:
                decoded.append(SIMPLE_ESCAPES[escape])
            elif escape == ord("u"):
                digits = cur.take_many(4)
                if not all(d in HEX_DIGITS for d in digits):
                    raise Malformed(f"bad \\u escape {digits!r}")
                code_point = int(digits, 16)
                if code_point < 0x80:
                    decoded.append(code_point)
                else:
                    matchable = False
            else:
                raise Malformed(f"unknown escape \\{chr(escape)}")
        elif byte < 0x20:
            raise Malformed("raw control character inside a string")
        else:
            decoded.append(byte)


def skip_value(cur: Cursor) -> None:
    """Skip one JSON value. A skipper, not a validator: containers are skipped by
    counting brackets of either kind, strings escape-aware, scalars up to a separator."""
    first = cur.peek()
    if first == QUOTE:
        cur.take()
        read_string(cur)
    elif first in (OPEN_OBJECT, OPEN_ARRAY):
        skip_container(cur)
    else:
        skip_scalar(cur)


def skip_container(cur: Cursor) -> None:
    depth = 0
    while True:
        byte = cur.take()
        if byte == QUOTE:
            read_string(cur)
        elif byte in (OPEN_OBJECT, OPEN_ARRAY):
            depth += 1
        elif byte in (CLOSE_OBJECT, CLOSE_ARRAY):
            depth -= 1
            if depth == 0:
                return


def skip_scalar(cur: Cursor) -> None:
    """Skip a number, true, false or null: the bytes up to ``,`` ``}`` ``]`` or whitespace.
    A scalar that reaches the end of the bytes may go on past them: ``RanOut``."""
    start = cur.pos
    while not cur.at_end() and cur.data[cur.pos] not in b",}]" + WHITESPACE:
        if cur.data[cur.pos] in b':"{[':
            raise Malformed("structural byte inside a scalar")
        cur.pos += 1
    if cur.pos == start:
        raise Malformed("empty value")
    if cur.at_end():
        raise RanOut


# ---------------------------------------------------------------------------
# Framing and classification
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ScanResult:
    starts: list[int]
    kinds: list[int]
    indexed_end: int
    scanned_end: int

    @property
    def torn_bytes(self) -> int:
        return self.scanned_end - self.indexed_end


def scan_bytes(
    data: bytes,
    dialect: Mapping[str, int],
    *,
    base_offset: int = 0,
    classify_window: int = DEFAULT_CLASSIFY_WINDOW,
) -> ScanResult:
    """Frame ``data`` (which sits at file offset ``base_offset``) into complete lines and
    classify each. The piece after the last ``\\n`` is torn: not a line."""
    if base_offset < 0:
        raise ValueError(f"base_offset must be >= 0, got {base_offset}")
    if classify_window < 1:
        raise ValueError(f"classify_window must be >= 1, got {classify_window}")
    data = bytes(data)
    *lines, _torn = data.split(b"\n")
    starts, kinds = [], []
    offset = base_offset
    for line in lines:
        starts.append(offset)
        kinds.append(
            classify_line(
                line, dialect, classify_window=classify_window, at_file_start=offset == 0
            )
        )
        offset += len(line) + 1
    return ScanResult(starts, kinds, indexed_end=offset, scanned_end=base_offset + len(data))


def sequence_lines(kinds: bytes, line0: int = 0) -> tuple[list[int], list[int]]:
    """Line numbers of the message sequence (message and corrupt lines) and of
    compaction lines, the first kind being line ``line0``."""
    messages = [line0 + i for i, kind in enumerate(kinds) if kind in (MESSAGE, CORRUPT)]
    compactions = [line0 + i for i, kind in enumerate(kinds) if kind == COMPACTION]
    return messages, compactions


def rises_within(values: list[int], low: int, high: int) -> bool:
    """Whether ``values`` rise strictly, the first at least ``low`` and the last at
    most ``high`` (True of none)."""
    if not values:
        return True
    pairs_rise = all(a < b for a, b in zip(values, values[1:]))
    return pairs_rise and values[0] >= low and values[-1] <= high


def classify_line(
    line: bytes,
    dialect: Mapping[str, int],
    *,
    classify_window: int = DEFAULT_CLASSIFY_WINDOW,
    at_file_start: bool = False,
) -> int:
    """Classify one line (without its ``\\n``) from its first ``classify_window`` bytes
    and its last byte that is not whitespace."""
    line = bytes(line)
    visible = line[:classify_window]
    whole = len(line) <= classify_window
    ends_with_brace = line.rstrip(WHITESPACE).endswith(b"}")
    if at_file_start and visible.startswith(BOM):
        visible = visible[len(BOM) :]
    body = visible.lstrip(WHITESPACE)
    if not body:
        return BLANK if whole else UNDECIDED
    if body[0] != OPEN_OBJECT or not ends_with_brace:
        return CORRUPT
    try:
        return _kind_from_top_level_keys(Cursor(body, 1), _Table(dialect))
    except Malformed:
        return CORRUPT
    except RanOut:
        return CORRUPT if whole else UNDECIDED


@dataclass(frozen=True)
class _Rule:
    """What a type value stands for: ``kind`` for every line of it (``path`` None), or
    ``kind`` only where the string at ``path`` is one of ``values`` (else OTHER)."""

    kind: int
    path: tuple[bytes, ...] | None = None
    values: frozenset[bytes] = frozenset()

    def qualified(self, found: bytes | None) -> int:
        return self.kind if found in self.values else OTHER


class _Table:
    """A dialect as rules by encoded type value, and its paths by their first key."""

    def __init__(self, dialect: Mapping[str, int]) -> None:
        self.rules: dict[bytes, _Rule] = {}
        self.paths: dict[bytes, tuple[bytes, ...]] = {}
        for name, kind in dialect.items():
            path = getattr(kind, "path", None)  # a lineindex.QualifiedKind
            if path is None:
                self.rules[name.encode("ascii")] = _Rule(int(kind))
                continue
            keys = tuple(k.encode("ascii") for k in path.split("."))
            values = frozenset(v.encode("ascii") for v in kind.values)
            self.rules[name.encode("ascii")] = _Rule(int(kind), keys, values)
            self.paths[keys[0]] = keys


def _kind_from_top_level_keys(cur: Cursor, table: _Table) -> int:
    """Walk the members of the top-level object (its ``{`` already taken) until the
    first ``"type"`` key decides, or the object ends.

    A type value with a qualified rule decides only once its path is known: a member
    whose key begins a path is read as that path says wherever it sits (the first such
    member only), so the path may come before "type" or after it."""
    found: dict[tuple[bytes, ...], bytes | None] = {}  # path -> its string (None: none)
    waiting: _Rule | None = None  # the type's rule, while its path is not yet known
    typed = False
    cur.skip_whitespace()
    if cur.peek() == CLOSE_OBJECT:
        return OTHER  # no "type" key
    while True:
        key = _member_key(cur)
        if key == b"type" and not typed:
            typed = True
            if cur.take() != QUOTE:
                return OTHER  # a "type" that is not a string: not a record we know
            rule = table.rules.get(read_string(cur))
            if rule is None:
                return OTHER
            if rule.path is None:
                return rule.kind
            if rule.path in found:
                return rule.qualified(found[rule.path])
            waiting = rule
        elif key in table.paths and table.paths[key] not in found:
            path = table.paths[key]
            decides = waiting is not None and waiting.path == path
            found[path] = _read_path_value(cur, path, decides=decides)
            if decides:
                return waiting.qualified(found[path])
        else:
            skip_value(cur)
        if _end_of_member(cur):
            return OTHER  # no "type" key, or its path is not in the object


def _member_key(cur: Cursor) -> bytes | None:
    """Read a member's key and the ``:`` after it; the cursor is left on its value."""
    if cur.take() != QUOTE:
        raise Malformed("a key must be a string")
    key = read_string(cur)
    cur.skip_whitespace()
    if cur.take() != COLON:
        raise Malformed("':' must follow a key")
    cur.skip_whitespace()
    cur.peek()  # a value must follow
    return key


def _end_of_member(cur: Cursor) -> bool:
    """After a member's value: True at the object's ``}``, False after a ``,`` (and the
    next key's quote, when the bytes go on)."""
    cur.skip_whitespace()
    separator = cur.take()
    if separator == CLOSE_OBJECT:
        return True
    if separator != COMMA:
        raise Malformed("',' or '}' must follow a value")
    cur.skip_whitespace()
    if not cur.at_end() and cur.peek() != QUOTE:
        raise Malformed("a key must follow ','")
    return False


def _read_path_value(cur: Cursor, path: tuple[bytes, ...], *, decides: bool) -> bytes | None:
    """The string a path's value holds (None when there is none) with the cursor on that
    value. When the answer ``decides`` the line, reading stops as soon as it is known;
    otherwise the whole value is read."""
    if len(path) == 1:
        if cur.peek() == QUOTE:
            cur.take()
            return read_string(cur)
    elif cur.peek() == OPEN_OBJECT:
        return _read_inner(cur, path[1], decides=decides)
    if not decides:
        skip_value(cur)
    return None


def _read_inner(cur: Cursor, inner: bytes, *, decides: bool) -> bytes | None:
    """The string value of the first member named ``inner`` of the object at the cursor."""
    cur.take()  # "{"
    cur.skip_whitespace()
    if cur.peek() == CLOSE_OBJECT:
        cur.take()
        return None
    seen, value = False, None
    while True:
        key = _member_key(cur)
        if key == inner and not seen:
            seen = True
            if cur.peek() == QUOTE:
                cur.take()
                value = read_string(cur)
            elif not decides:
                skip_value(cur)
            if decides:
                return value
        else:
            skip_value(cur)
        if _end_of_member(cur):
            return value


# ---------------------------------------------------------------------------
# Display projection
# ---------------------------------------------------------------------------

# Why a projection came out as it did (the tests use these; the native module has no
# such field).
COMPLETE = "complete"  # the whole value was represented
CUT_IN_TEXT = "cut in text"  # a string value was cut and ends with the marker
ROLLED_BACK = "rolled back"  # the prefix ended elsewhere: output rolled back to a safe point
NOT_JSON = "not json"  # wrong token, control character, too deep, bytes after the root
LINE_ENDS_EARLY = "line ends early"  # whole line, between tokens: not JSON
LINE_ENDS_IN_STRING = "line ends in a string"  # whole line, inside a key or string value
NOTHING_COMPLETE = "nothing complete"  # the prefix ends before any value could be shown


@dataclass(frozen=True)
class Projection:
    display: bytes | None
    kept: int
    cut: int
    reason: str

    def as_tuple(self) -> tuple[bytes | None, int, int]:
        return (self.display, self.kept, self.cut)


def marker(more_bytes: int) -> bytes:
    """What a cut string value ends with, closing quote included."""
    return f' [... {more_bytes} more bytes not shown]"'.encode("ascii")


def utf8_unit_length(lead: int) -> int:
    """Length of a UTF-8 character from its lead byte (a stray continuation byte: 1)."""
    if lead < 0x80:
        return 1
    if lead >= 0xF0:
        return 4
    if lead >= 0xE0:
        return 3
    if lead >= 0xC0:
        return 2
    return 1


def project_display(
    prefix: bytes, total_len: int, content_limit: int
) -> tuple[bytes | None, int, int]:
    """``(display, kept, cut)`` for one line given its first bytes: see ``project``."""
    return project(prefix, total_len, content_limit).as_tuple()


def project(prefix: bytes, total_len: int, content_limit: int) -> Projection:
    """Copy the JSON value in ``prefix`` without whitespace between tokens. Keys,
    scalars and short string values (at most ``SHORT_STRING`` bytes as written) are kept
    whole; at most ``content_limit`` bytes of the longer string values are kept; a cut
    string value ends with a marker and every open container is closed. ``total_len``
    is the length of the whole line."""
    prefix = bytes(prefix)
    if content_limit < 0:
        raise ValueError(f"content_limit must be >= 0, got {content_limit}")
    if total_len < len(prefix):
        raise ValueError(f"total_len ({total_len}) is shorter than the prefix ({len(prefix)})")
    whole = total_len == len(prefix)
    projector = _Projector(prefix, content_limit, whole)
    try:
        projector.root()
    except Malformed:
        return Projection(None, projector.kept, total_len, NOT_JSON)
    except _StringCut as cut:
        if cut.by_prefix_end and whole:
            return Projection(None, projector.kept, total_len, LINE_ENDS_IN_STRING)
        display = bytes(projector.out) + marker(total_len - cut.index)
        display += _closers(projector.open)
        return Projection(display, projector.kept, total_len - cut.index, CUT_IN_TEXT)
    except _KeyRanOut:
        if whole:
            return Projection(None, projector.kept, total_len, LINE_ENDS_IN_STRING)
        return projector.rolled_back(total_len)
    except RanOut:
        if whole:
            return Projection(None, projector.kept, total_len, LINE_ENDS_EARLY)
        return projector.rolled_back(total_len)
    return Projection(bytes(projector.out), projector.kept, 0, COMPLETE)


class _StringCut(Exception):
    """A string value stops at prefix index ``index``: the budget is spent, or the next
    character or escape would pass the end of the prefix (``by_prefix_end``)."""

    def __init__(self, index: int, by_prefix_end: bool) -> None:
        super().__init__(index, by_prefix_end)
        self.index = index
        self.by_prefix_end = by_prefix_end


class _KeyRanOut(RanOut):
    """The prefix ended inside a key."""


@dataclass(frozen=True)
class _SafePoint:
    """A place where the output, closed, is valid JSON: right after ``{`` or ``[`` or
    after a complete value."""

    out_len: int
    open: tuple[int, ...]
    src: int  # prefix bytes represented


def _closers(open_brackets) -> bytes:
    return bytes(CLOSER_OF[b] for b in reversed(open_brackets))


class _Projector:
    def __init__(self, prefix: bytes, content_limit: int, whole: bool) -> None:
        self.src = Cursor(prefix)
        self.whole = whole
        self.out = bytearray()
        self.budget = content_limit
        self.kept = 0
        self.open: list[int] = []  # opening bracket of each container open in out
        self.safe = _SafePoint(0, (), 0)

    def mark_safe(self) -> None:
        self.safe = _SafePoint(len(self.out), tuple(self.open), self.src.pos)

    def rolled_back(self, total_len: int) -> Projection:
        if self.safe.out_len == 0:
            return Projection(None, self.kept, total_len, NOTHING_COMPLETE)
        display = bytes(self.out[: self.safe.out_len]) + _closers(self.safe.open)
        return Projection(display, self.kept, total_len - self.safe.src, ROLLED_BACK)

    def root(self) -> None:
        self.value()
        self.src.skip_whitespace()
        if not self.src.at_end():
            raise Malformed("bytes after the root value")

    def value(self) -> None:
        self.src.skip_whitespace()
        first = self.src.peek()
        if first in (OPEN_OBJECT, OPEN_ARRAY):
            self.container()
        elif first == QUOTE:
            self.string_value()
        else:
            self.scalar()
        self.mark_safe()

    def container(self) -> None:
        if len(self.open) == MAX_DEPTH:
            raise Malformed(f"nesting deeper than {MAX_DEPTH}")
        opener = self.src.take()
        closer = CLOSER_OF[opener]
        self.open.append(opener)
        self.out.append(opener)
        self.mark_safe()
        self.src.skip_whitespace()
        if self.src.peek() == closer:
            self.close_container()
            return
        while True:
            if opener == OPEN_OBJECT:
                self.key()
            self.value()
            self.src.skip_whitespace()
            if self.src.peek() == COMMA:
                self.out.append(self.src.take())
            elif self.src.peek() == closer:
                self.close_container()
                return
            else:
                raise Malformed("',' or the closing bracket must follow a value")

    def close_container(self) -> None:
        self.out.append(self.src.take())
        self.open.pop()

    def key(self) -> None:
        """A key is copied whole (it is not text content), or not at all."""
        self.src.skip_whitespace()
        start = self.src.pos
        if self.src.take() != QUOTE:
            raise Malformed("a key must be a string")
        try:
            read_string(self.src)
        except RanOut:
            raise _KeyRanOut from None
        self.out += self.src.data[start : self.src.pos]
        self.src.skip_whitespace()
        if self.src.take() != COLON:
            raise Malformed("':' must follow a key")
        self.out.append(COLON)

    def string_value(self) -> None:
        """A short string (metadata: ids, roles, timestamps) is copied whole outside the
        budget; a longer one is text content, copied one character or escape at a time
        under the budget."""
        data = self.src.data
        start = self.src.pos
        # Does the string close within SHORT_STRING bytes of content (and the prefix)?
        window = Cursor(data[: min(len(data), start + 2 + SHORT_STRING)], start + 1)
        try:
            read_string(window)
        except RanOut:
            pass  # longer, or the prefix ends first: text content
        else:
            self.out += data[start : window.pos]
            self.src.pos = window.pos
            return
        self.out.append(self.src.take())  # the opening quote
        while True:
            pos = self.src.pos
            if pos == len(data):
                raise _StringCut(pos, by_prefix_end=True)
            lead = data[pos]
            if lead == QUOTE:
                self.out.append(self.src.take())
                return
            if lead == BACKSLASH:
                unit = 6 if data[pos + 1 : pos + 2] == b"u" else 2
            elif lead < 0x20:
                raise Malformed("raw control character inside a string")
            else:
                unit = utf8_unit_length(lead)
            if pos + unit > len(data):
                raise _StringCut(pos, by_prefix_end=True)
            if lead == BACKSLASH:
                escape = data[pos + 1]
                if escape == ord("u"):
                    if not all(d in HEX_DIGITS for d in data[pos + 2 : pos + 6]):
                        raise Malformed("bad \\u escape")
                    if 0xD800 <= int(data[pos + 2 : pos + 6], 16) <= 0xDBFF:
                        # a high surrogate: never cut from its low half
                        if pos + 12 > len(data):
                            raise _StringCut(pos, by_prefix_end=True)
                        second = data[pos + 6 : pos + 12]
                        if (second[:2] == b"\\u" and all(d in HEX_DIGITS for d in second[2:])
                                and 0xDC00 <= int(second[2:], 16) <= 0xDFFF):
                            unit = 12
                elif escape not in SIMPLE_ESCAPES:
                    raise Malformed("unknown escape")
            elif unit > 1 and not all(0x80 <= b <= 0xBF for b in data[pos + 1 : pos + unit]):
                unit = 1  # invalid UTF-8: the lead byte alone, never swallowing a quote
            if unit > self.budget:
                raise _StringCut(pos, by_prefix_end=False)
            self.out += self.src.take_many(unit)
            self.budget -= unit
            self.kept += unit

    def scalar(self) -> None:
        """A number, true, false or null: copied whole, or dropped when it reaches the
        end of a prefix that is not the whole line (it may go on)."""
        start = self.src.pos
        try:
            skip_scalar(self.src)
        except RanOut:
            if not self.whole:
                raise
        self.out += self.src.data[start : self.src.pos]
