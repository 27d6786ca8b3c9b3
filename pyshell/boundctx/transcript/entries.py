"""What a transcript read returns: entries and windows (a full history is
:class:`boundctx.transcript.writing.History`, the write side's object)."""

from __future__ import annotations

from typing import Any

import msgspec

from boundctx.errors import TranscriptCorrupt

__all__ = ["Entry", "RawLine", "Window"]


class Entry(msgspec.Struct, frozen=True, kw_only=True):
    """One line of a transcript as read.

    Attributes
    ----------
    line : int
        Physical line number (0-based, counting every line of the file).
    index : int or None
        Position in the message sequence, or None for lines outside it (compactions).
    offset, length : int
        Byte range of the line in the file, ``\\n`` included.
    record : dict or None
        The parsed record; its strings are cut for display when ``cut_bytes > 0``.
        None when the line is corrupt.
    cut_bytes : int
        Bytes of the line the display projection left out (0: ``record`` is whole).
        The file still holds them; read the window with ``content_limit=None``.
    corrupt : str or None
        Why the line is not a record; ``raw`` then holds its bytes (decoded with
        replacement characters, and cut like text when a content limit applies).
    """

    line: int
    index: int | None
    offset: int
    length: int
    record: dict[str, Any] | None = None
    cut_bytes: int = 0
    corrupt: str | None = None
    raw: str | None = None

    @property
    def type(self) -> str | None:
        """The record's ``"type"`` value (None for a corrupt line)."""
        if self.record is None:
            return None
        t = self.record.get("type")
        return t if isinstance(t, str) else None

    def require_record(self) -> dict[str, Any]:
        """The record, or :class:`~boundctx.errors.TranscriptCorrupt` for a corrupt line
        (for callers, such as a model path, that cannot use a line that is not a record)."""
        if self.record is None:
            where = f"message {self.index}" if self.index is not None else f"line {self.line}"
            raise TranscriptCorrupt(
                f"{where} (bytes {self.offset}..{self.offset + self.length}) is not a record: "
                f"{self.corrupt}. The file keeps it as it is; repair it with "
                "Transcript.edit(index, record) or remove it with Transcript.delete(index).")
        return self.record

    @property
    def truncated(self) -> bool:
        """True when this is a display projection, not the whole record."""
        return self.cut_bytes > 0


class Window(msgspec.Struct, frozen=True, kw_only=True):
    """A bounded run of consecutive messages.

    Attributes
    ----------
    messages : list of Entry
        Messages ``message_start`` to ``message_start + len(messages) - 1``.
    message_start : int
        Index of the first message; pass it as ``message_before`` for the page before.
    message_count : int
        Messages in the whole transcript (on the branch read).
    has_more_before : bool
        True when messages older than ``message_start`` exist.
    compactions : list of Entry
        The compaction in force at the window's first message (the nearest one before
        it) and the compactions among the window's lines, in file order: all of them
        on the uncapped path, at most ``message_limit`` (the newest) otherwise.
    compactions_omitted : int
        Compactions among the window's lines left out by that bound.
    content_limit : int or None
        The per-message display budget this window was read with.
    leaf : int or None
        The line of the branch's leaf the window follows (pass it as ``leaf`` to stay on
        this branch while the file grows on another); None for an empty transcript.
    page_bytes : int or None
        The budget of shown bytes this window was read with (None: none).
    leaf_id : str or None
        For a window that reaches the end of its branch: the own id of its leaf entry
        (its newest message, or a compaction written after it), which a reply names as
        its parent to go on from it; None otherwise, or when the entry has none.
    """

    messages: list[Entry]
    message_start: int
    message_count: int
    has_more_before: bool
    compactions: list[Entry]
    content_limit: int | None
    compactions_omitted: int = 0
    leaf: int | None = None
    page_bytes: int | None = None
    leaf_id: str | None = None


class RawLine(msgspec.Struct, frozen=True):
    """A line kept byte for byte through a rewrite because it is not a record."""

    data: bytes
