"""Which lines are messages and compactions, per transcript dialect.

boundctx's own lines and pi session v3 lines share entry types (``message``,
``compaction``, ``session``, ...). Claude Code and Codex CLI session files use other
type values for the same roles; reading them only needs these tables, because the line
index classifies by the top-level ``"type"`` key wherever it sits in the object, and,
for a type value whose lines are not all alike, by one second key as well (a
:class:`QualifiedKind`; see docs/decisions/0018-qualified-line-kinds.md).

The names of the three dialects never collide, so ``auto`` (the default) is their union
and a file of any of them opens without being told what it is.
"""

from __future__ import annotations

from functools import lru_cache

from boundctx._native import lineindex
from boundctx.transcript.kinds import LineKind
from boundctx.transcript.sidecar import pread_exact

MESSAGE, COMPACTION = LineKind.MESSAGE, LineKind.COMPACTION
QualifiedKind = lineindex.QualifiedKind

__all__ = ["DIALECTS", "QualifiedKind", "classify_by_parse", "dialect_kinds", "native_table",
           "settle_undecided"]

#: dialect name -> {type value: kind}; values not listed are "other" lines. A
#: QualifiedKind is the kind only where its second key agrees (else "other"); as an int
#: it is that kind, which is what a type value can be indexed as.
DIALECTS: dict[str, dict[str, int]] = {
    # boundctx and pi session v3: {"type":"message",...}, {"type":"compaction",...}
    "boundctx": {"message": MESSAGE, "compaction": COMPACTION},
    # Claude Code: user/assistant turns. A compaction is a "system" line with subtype
    # compact_boundary (the "user" line after it, marked isCompactSummary, holds the
    # summary and stays a message); other system lines (turn durations, hook summaries)
    # are not. "summary" lines title the session and replace nothing.
    "claude-code": {"user": MESSAGE, "assistant": MESSAGE,
                    "system": QualifiedKind(COMPACTION, "subtype", "compact_boundary")},
    # Codex rollouts: every response item (message, tool call, tool output, reasoning)
    # is a turn of the conversation; "compacted" replaces history. Of the events, a
    # user_message is a user turn as the agent shows it: Codex Desktop writes some
    # questions nowhere else. Codex CLI writes it beside the response item that gave
    # the model the same question, so its window holds both lines and chat_messages
    # sends the turn once. The other events (agent messages, token counts,
    # context_compacted, ...) echo response items and compactions for the display.
    "codex": {"response_item": MESSAGE, "compacted": COMPACTION,
              "event_msg": QualifiedKind(MESSAGE, "payload.type", "user_message")},
}
DIALECTS["pi"] = DIALECTS["boundctx"]
DIALECTS["auto"] = {k: v for name in ("boundctx", "claude-code", "codex") for k, v in DIALECTS[name].items()}


def dialect_kinds(name: str) -> dict[str, int]:
    """The type-value table of dialect ``name``; a ValueError lists the known names."""
    try:
        return DIALECTS[name]
    except KeyError:
        raise ValueError(
            f"unknown transcript dialect {name!r}; choose one of {', '.join(sorted(DIALECTS))}"
        ) from None


@lru_cache(maxsize=None)
def native_table(name: str):
    """The compiled lookup table for dialect ``name`` (built once per process)."""
    return lineindex.DialectTable(dialect_kinds(name))


@lru_cache(maxsize=1)
def _type_only():
    import msgspec

    class TypeOnly(msgspec.Struct):
        type: object = None

    return msgspec.json.Decoder(TypeOnly)


def classify_by_parse(raw: bytes, table: dict[str, int], *, at_file_start: bool) -> int:
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


def settle_undecided(fd: int, res, dialect: str) -> bytes:
    """The kinds of a native scan ``res`` of ``fd``, with every line the classify window
    could not decide classified by a full parse (rare: a "type" key past the window)."""
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
        fixed[at] = classify_by_parse(pread_exact(fd, start, end - start), table,
                                      at_file_start=start == 0)
        at = kinds.find(_UNDECIDED, at + 1)
    return bytes(fixed)


_UNDECIDED = bytes([LineKind.UNDECIDED])
