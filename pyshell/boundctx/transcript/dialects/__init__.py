"""Transcript dialects: one object per format, one module each, and the table of them.

Each format (:class:`~boundctx.transcript.dialects.base.Dialect`) says which lines are
messages and compactions, how its messages become chat messages, how an entry reads for
a person, what its compactions summarise and whether boundctx writes into it. boundctx's
own lines and pi session v3 lines are one format under two names; Claude Code and Codex
CLI session files use other type values for the same roles. Reading any of them needs
only their ``kinds``, because the line index classifies by the top-level ``"type"`` key
wherever it sits in the object, and, for a type value whose lines are not all alike, by
one second key as well (a :class:`QualifiedKind`; docs/decisions/0018).

The formats' type values never collide (checked when this module loads, and tested), so
``auto`` (the default) is their union: a file of any of them opens without being told what
it is, and each line's type says which format reads it (:func:`dialect_of`).

Adding a format: one module beside these, its entry in :data:`FORMATS`, and fixtures.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from boundctx._native import lineindex
from boundctx.transcript.dialects.base import COMPACTION, MESSAGE, Dialect, QualifiedKind
from boundctx.transcript.dialects.boundctx import BOUNDCTX, PI
from boundctx.transcript.dialects.claude_code import CLAUDE_CODE
from boundctx.transcript.dialects.codex import CODEX
from boundctx.transcript.kinds import LineKind
from boundctx.transcript.sidecar import pread_exact

if TYPE_CHECKING:
    from boundctx.transcript.entries import Entry

__all__ = ["AUTO", "COMPACTION", "DIALECTS", "FORMATS", "MESSAGE", "NAMES", "Dialect", "QualifiedKind",
           "classify_by_parse", "dialect_kinds", "dialect_of", "display", "display_kind", "native_table",
           "settle_undecided", "shown"]

#: Every format, once (pi is boundctx's format under its own name).
FORMATS: tuple[Dialect, ...] = (BOUNDCTX, CLAUDE_CODE, CODEX)
#: name -> format, for ``Transcript.open(dialect=...)`` and ``--dialect``.
DIALECTS: dict[str, Dialect] = {d.name: d for d in (BOUNDCTX, PI, CLAUDE_CODE, CODEX)}
AUTO = "auto"
#: What a dialect may be called: every name, and ``auto``.
NAMES: tuple[str, ...] = (AUTO, *DIALECTS)


def _union(formats: tuple[Dialect, ...]) -> dict[str, Any]:
    """The kinds of every format together; a type value two formats claim is an error
    (``auto`` could not tell which one reads the line)."""
    out: dict[str, Any] = {}
    owner: dict[str, str] = {}
    for d in formats:
        for value, kind in d.kinds.items():
            if value in out:
                raise RuntimeError(f"the dialects {owner[value]} and {d.name} both claim lines of type {value!r}")
            out[value], owner[value] = kind, d.name
    return out


_AUTO_KINDS = _union(FORMATS)
_BY_TYPE = {value: d for d in FORMATS for value in d.kinds}


def dialect_kinds(name: str) -> Mapping[str, Any]:
    """The type-value table of dialect ``name``; a ValueError lists the known names."""
    if name == AUTO:
        return _AUTO_KINDS
    try:
        return DIALECTS[name].kinds
    except KeyError:
        raise ValueError(f"unknown transcript dialect {name!r}; choose one of {', '.join(sorted(NAMES))}") from None


def dialect_of(record: dict[str, Any]) -> Dialect | None:
    """The format whose lines have ``record``'s type, or None."""
    t = record.get("type")
    return _BY_TYPE.get(t) if isinstance(t, str) else None


def display(entry: Entry) -> tuple[str, str]:
    """(role, text) of a window entry for a person, by the format of its line."""
    if entry.record is None:
        return "corrupt", f"({entry.corrupt}) {entry.raw or ''}"
    return (dialect_of(entry.record) or BOUNDCTX).display(entry.record)


def shown(entry: Entry) -> tuple[str, str, str, str | None]:
    """:func:`display` and :func:`display_kind` of a window entry together: role, text,
    kind and tool, its format looked up once."""
    if entry.record is None:
        return (*display(entry), *display_kind(entry))  # a corrupt line: no format to look up
    return (dialect_of(entry.record) or BOUNDCTX).shown(entry.record)


def display_kind(entry: Entry) -> tuple[str, str | None]:
    """What a window entry is for a person (:meth:`Dialect.kind`): ``"text"``,
    ``"tool_call"`` with the tool's name, ``"tool_result"`` or ``"reasoning"``."""
    if entry.record is None:
        return "text", None
    return (dialect_of(entry.record) or BOUNDCTX).kind(entry.record)


@lru_cache(maxsize=None)
def native_table(name: str):
    """The compiled lookup table for dialect ``name`` (built once per process)."""
    return lineindex.DialectTable(dict(dialect_kinds(name)))


@lru_cache(maxsize=1)
def _type_only():
    import msgspec

    class TypeOnly(msgspec.Struct):
        type: object = None

    return msgspec.json.Decoder(TypeOnly)


def classify_by_parse(raw: bytes, table: Mapping[str, Any], *, at_file_start: bool) -> int:
    """The kind of one line (its bytes, ``\n`` included or not) by a full parse: the
    slow path for a line whose "type" key lies past the classify window (the parser is
    imported only then: ``boundctx reindex`` rarely needs it)."""
    import msgspec

    from boundctx.transcript.lineformat import BOM, LineUnreadable, decode_record

    if at_file_start and raw.startswith(BOM):
        raw = raw[3:]
    rec = None
    try:
        t = _type_only().decode(raw).type
    except (msgspec.DecodeError, RecursionError):  # ValidationError is a DecodeError
        # The reader's own rules decide (a lone surrogate escape is still a record;
        # nesting past its depth is not), so the kind agrees with what a read shows.
        try:
            rec = decode_record(raw)
        except LineUnreadable:
            return int(LineKind.BLANK) if not raw.strip() else int(LineKind.CORRUPT)
        if not isinstance(rec, dict):
            return int(LineKind.CORRUPT)
        t = rec.get("type")
    if not isinstance(t, str) or t not in table:
        return int(LineKind.OTHER)
    kind = table[t]
    if isinstance(kind, QualifiedKind):
        # Only where the second key holds one of the values (as the native walk reads it).
        if rec is None:
            try:
                rec = decode_record(raw)
            except LineUnreadable:
                return int(LineKind.CORRUPT)
        value = rec
        for key in kind.path.split("."):
            value = value.get(key) if isinstance(value, dict) else None
        return int(kind) if isinstance(value, str) and value in kind.values else int(LineKind.OTHER)
    return int(kind)


def settle_undecided(fd: int | None, res, dialect: str, *, data: bytes | None = None) -> bytes:
    """The kinds of a native scan ``res`` of ``fd`` (or of ``data``, bytes scanned from
    offset 0), with every line the classify window could not decide classified by a full
    parse (rare: a "type" key past the window)."""
    kinds = res.kinds
    at = kinds.find(_UNDECIDED)
    if at < 0:
        return kinds
    fixed = bytearray(kinds)
    starts = memoryview(res.starts).cast("q")
    table = dialect_kinds(dialect)
    # Invariant: no line before `at` is undecided in `fixed`.
    while at >= 0:
        start = starts[at]
        end = starts[at + 1] if at + 1 < len(starts) else res.indexed_end
        if data is not None:
            raw = data[start:end]
        else:
            assert fd is not None, "a scan of a file is settled from that file"
            raw = pread_exact(fd, start, end - start)
        fixed[at] = classify_by_parse(raw, table, at_file_start=start == 0)
        at = kinds.find(_UNDECIDED, at + 1)
    return bytes(fixed)


_UNDECIDED = bytes([LineKind.UNDECIDED])
