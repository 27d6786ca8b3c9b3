"""One record per line: the only place a transcript line is turned into a record or
back.

Reading (windows, histories, the layout's slow path) and writing (append, rewrite,
samples) both come here, so what a line may hold is decided once: a record that
:func:`encode_record` accepts reads back from :func:`decode_record` as the same value
(tuples come back as lists), and nothing is written that would read back as something
else.

What reading accepts beyond strict JSON, and why:

* A lone UTF-16 surrogate escape (``"\\ud83d"`` with no partner) is what a JavaScript
  agent writes when it cuts an emoji in half. The line is valid JSON; it is read, and
  the lone half shows as U+FFFD (a Python string holding it could not be encoded to
  UTF-8 anywhere downstream).

What it refuses, so that no caller ever meets it:

* Nesting deeper than :data:`MAX_DEPTH`. Code that walks a record recursively (JSON
  encoders and decoders included) fails near Python's recursion limit (1,000 frames),
  later and far from the line, at a depth that depends on the caller's stack; a fixed
  bound well below it gives every reader the same verdict. Such a line is shown as
  unreadable in place, never dropped. (The display projection follows 256 levels; a
  line between the two is a record the display cannot show, not a corrupt line.)
* Numbers out of a double's range and the ``NaN``/``Infinity`` literals: no JSON reader
  agrees on them.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import msgspec

from boundctx._native import projection
from boundctx.errors import EntryInvalid

__all__ = ["BOM", "MAX_DEPTH", "LineUnreadable", "decode_display", "decode_lines", "decode_record",
           "encode_record"]

#: A UTF-8 byte-order mark; tolerated before the first line only, never part of a record.
BOM = b"\xef\xbb\xbf"
#: The deepest nesting a record may have (objects and arrays; the record itself is 1).
MAX_DEPTH = 512

_decoder = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class LineUnreadable(ValueError):
    """A line that is not one readable JSON value; the message says why."""


def decode_record(body: bytes) -> Any:
    """The JSON value of one line's bytes (without its ``\\n`` or a leading BOM).

    Raises
    ------
    LineUnreadable
        Not JSON, nested deeper than :data:`MAX_DEPTH`, or a number JSON readers
        disagree on.
    """
    try:
        value = _decoder.decode(body)
    except RecursionError:
        raise LineUnreadable(f"nested deeper than {MAX_DEPTH} levels") from None
    except msgspec.DecodeError as exc:
        value = _decode_lenient(body, str(exc))
    else:
        if _nests_too_deep(body, 0, len(body), value):
            raise LineUnreadable(f"nested deeper than {MAX_DEPTH} levels")
    return value


def decode_display(display: bytes) -> Any:
    """:func:`decode_record` of a display the projection built. It nests at most
    ``projection.DISPLAY_DEPTH`` levels, fewer than :data:`MAX_DEPTH`, so its brackets are
    not counted (a window's display holds 64 KiB of text)."""
    try:
        return _decoder.decode(display)
    except RecursionError:  # a deep caller's stack: refused as decode_record refuses it
        raise LineUnreadable(f"nested deeper than this caller's stack allows ({MAX_DEPTH} at most)") from None
    except msgspec.DecodeError as exc:
        return _decode_lenient(display, str(exc))


if projection.DISPLAY_DEPTH >= MAX_DEPTH:  # decode_display would then need the count
    raise ImportError("the display projection follows nesting deeper than a record may hold")


def _nests_too_deep(buf: bytes, start: int, end: int, value: Any) -> bool:
    """Whether ``value``, decoded from ``buf[start:end]``, nests past :data:`MAX_DEPTH`.
    It can only when those bytes hold that many brackets, and as many closing ones (so
    more than twice as many bytes): counting them is a C loop, so the exact walk runs
    only on rare big lines."""
    return (end - start > 2 * MAX_DEPTH
            and projection.count_openers(buf, start, end) > MAX_DEPTH
            and _depth(value) > MAX_DEPTH)


def decode_lines(buf: bytes, start: int, lengths: list[int]) -> list[Any]:
    """The JSON values of consecutive whole lines (``buf[start:]``: their bytes, newlines
    included; ``lengths``: each line's), one each, held to :func:`decode_record`'s rules.
    :class:`LineUnreadable` when the values cannot be told line by line in one call (a
    line msgspec refuses, as many values as lines not found, nesting past
    :data:`MAX_DEPTH`): the caller then reads each line with :func:`decode_record`, and
    learns which and why. msgspec reads a stream of values, so the count proves which
    value is which line's only when no line can hold two beside one that holds none:
    the caller makes sure of that (``reading.records_together``: lines framed ``{...}``)."""
    end = start + sum(lengths)
    try:
        values = _decoder.decode_lines(memoryview(buf)[start:end])
    except (msgspec.DecodeError, RecursionError):
        raise LineUnreadable("a line of the block is not one readable JSON value") from None
    if len(values) != len(lengths):
        raise LineUnreadable("a line of the block is blank")
    if projection.count_openers(buf, start, end) <= MAX_DEPTH:
        return values  # not brackets enough in the whole block for one line to nest too deep
    at = start
    for value, length in zip(values, lengths):
        if _nests_too_deep(buf, at, at + length, value):
            raise LineUnreadable(f"a line of the block is nested deeper than {MAX_DEPTH} levels")
        at += length
    return values


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


def _decode_lenient(body, strict_error: str) -> Any:
    """The stdlib reader, for what msgspec refuses but JSON allows (lone surrogate
    escapes); anything it refuses too keeps msgspec's reason, the sharper one."""
    try:
        text = bytes(body).decode("utf-8")
        value = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except RecursionError:
        raise LineUnreadable(f"nested deeper than {MAX_DEPTH} levels") from None
    except ValueError:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise LineUnreadable(strict_error) from None
    if _depth(value) > MAX_DEPTH:
        raise LineUnreadable(f"nested deeper than {MAX_DEPTH} levels")
    return _replace_lone_surrogates(value)


def _depth(value: Any) -> int:
    """Nesting depth of a decoded value, walked without recursion."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            v = v.values()
        elif not isinstance(v, list):
            continue
        deepest = max(deepest, d)
        if deepest > MAX_DEPTH:
            return deepest
        stack.extend((child, d + 1) for child in v)
    return deepest


def _replace_lone_surrogates(value: Any) -> Any:
    def fix(s: str) -> str:
        return _LONE_SURROGATE.sub("\ufffd", s)

    if isinstance(value, str):
        return fix(value)
    root = [value]
    stack: list[Any] = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            items = list(node.items())
            node.clear()
            for k, v in items:
                node[fix(k)] = fix(v) if isinstance(v, str) else v
                if isinstance(v, (dict, list)):
                    stack.append(v)
        else:
            for i, v in enumerate(node):
                if isinstance(v, str):
                    node[i] = fix(v)
                elif isinstance(v, (dict, list)):
                    stack.append(v)
    return root[0]


def encode_record(record: dict[str, Any] | msgspec.Struct) -> bytes:
    """One record as one JSONL line: ``"type"`` first, no raw line separators.

    Raises
    ------
    EntryInvalid
        No string ``"type"``, or a value JSON cannot hold as itself (named with its
        place in the record): NaN or infinity, bytes, sets, keys that are not strings,
        strings with lone surrogates, other Python objects, or nesting deeper than
        :data:`MAX_DEPTH`. Nothing is written.
    """
    checked = isinstance(record, msgspec.Struct)
    if checked:
        _check_json(record, "record")  # before to_builtins turns bytes and sets into lists
        record = msgspec.to_builtins(record)
    if not isinstance(record, dict):
        raise EntryInvalid(f"a record must be a dict with a 'type', got {type(record).__name__}")
    t = record.get("type")
    if not isinstance(t, str) or not t:
        raise EntryInvalid(f"a record needs a non-empty string 'type', got {t!r}")
    if not checked:
        _check_json(record, f"record of type {t!r}")
    ordered = {"type": t}
    ordered.update((k, v) for k, v in record.items() if k != "type")
    try:
        data = _encoder.encode(ordered)
    except UnicodeEncodeError:
        raise EntryInvalid(f"record of type {t!r} holds a string with a lone surrogate character, "
                           "which UTF-8 cannot encode; replace it (for example with U+FFFD)") from None
    except (TypeError, ValueError, OverflowError, msgspec.EncodeError) as exc:
        raise EntryInvalid(f"record of type {t!r} cannot be written as JSON: {exc}") from None
    # U+2028/U+2029 are line breaks to some other readers; escaped, the line stays one
    # line for everyone.
    return projection.escape_line_separators(data) + b"\n"


def _check_json(record: Any, what: str) -> None:
    """Refuse any value that would be stored as something else (the encoder writes NaN
    as null, bytes as base64, sets as lists) or that no reader could read back."""
    stack: list[tuple[Any, str, int]] = [(record, "", 1)]
    while stack:
        v, where, depth = stack.pop()
        if v is None or isinstance(v, (bool, int)):
            continue
        if isinstance(v, float):
            if not math.isfinite(v):
                raise EntryInvalid(f"{what}: {where or 'the value'} is {v!r}, which JSON cannot "
                                   "hold; store it as null or a string")
            continue
        if isinstance(v, str):
            continue  # a lone surrogate fails in the encoder, said there
        if depth > MAX_DEPTH and isinstance(v, (dict, list, tuple, msgspec.Struct)):
            raise EntryInvalid(f"{what} is nested deeper than {MAX_DEPTH} levels")
        if isinstance(v, dict):
            for k, child in v.items():
                if not isinstance(k, str):
                    raise EntryInvalid(f"{what}: key {k!r}{_at(where)} is a {type(k).__name__}; "
                                       "JSON keys are strings")
                stack.append((child, f"{where}[{k!r}]", depth + 1))
        elif isinstance(v, (list, tuple)):
            stack.extend((child, f"{where}[{i}]", depth + 1) for i, child in enumerate(v))
        elif isinstance(v, msgspec.Struct):
            for name in v.__struct_fields__:
                child = getattr(v, name)
                if child is not msgspec.UNSET:
                    stack.append((child, f"{where}.{name}", depth + 1))
        else:
            hints: dict[type, str] = {bytes: "decode or base64-encode it first", bytearray: "decode it first",
                                      set: "store a sorted list", frozenset: "store a sorted list"}
            hint = hints.get(type(v), "convert it to a string, number, list or dict first")
            raise EntryInvalid(f"{what}: {where or 'the value'} is a {type(v).__name__}, which "
                               f"JSON cannot hold as itself; {hint}")


def _at(where: str) -> str:
    return f" at {where}" if where else ""
