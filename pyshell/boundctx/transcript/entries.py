"""What a transcript read returns: entries, windows and the full history."""

from __future__ import annotations

from typing import Any

import msgspec

from boundctx.errors import TranscriptCorrupt

__all__ = ["Entry", "History", "RawLine", "Window"]


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
        Messages in the whole transcript.
    has_more_before : bool
        True when messages older than ``message_start`` exist.
    compactions : list of Entry
        The compaction in force at the window's first message (the nearest one before
        it) and every compaction among the window's lines, in file order.
    content_limit : int or None
        The per-message display budget this window was read with.
    """

    messages: list[Entry]
    message_start: int
    message_count: int
    has_more_before: bool
    compactions: list[Entry]
    content_limit: int | None


class RawLine(msgspec.Struct, frozen=True):
    """A line kept byte for byte through a rewrite because it is not a record."""

    data: bytes


class History:
    """The complete, uncapped contents of a transcript, for a full-history rewrite.

    Obtain it with :meth:`Transcript.history`; edit it with the methods below (message
    indices are positions in the message sequence, as in windows); give it back to
    :meth:`Transcript.rewrite`. It refuses to be built from anything but a complete read.
    """

    __slots__ = ("records", "_kinds_are_message", "_token", "_source")

    def __init__(self, records: list, is_message: list[bool], token, source) -> None:
        self.records = records
        self._kinds_are_message = is_message
        self._token = token
        self._source = source

    def _position(self, index: int) -> int:
        count = 0
        for pos, is_msg in enumerate(self._kinds_are_message):
            if is_msg:
                if count == index:
                    return pos
                count += 1
        raise IndexError(f"message index {index} is out of range (0..{count - 1})")

    @property
    def message_count(self) -> int:
        return sum(self._kinds_are_message)

    def message(self, index: int):
        """The record (dict, or RawLine for a corrupt line) of message ``index``."""
        return self.records[self._position(index)]

    def replace_message(self, index: int, record: dict[str, Any]) -> None:
        """Replace message ``index`` with ``record``."""
        self.records[self._position(index)] = record

    def delete_message(self, index: int) -> None:
        """Delete message ``index``; later messages move up by one."""
        pos = self._position(index)
        del self.records[pos]
        del self._kinds_are_message[pos]

    def truncate_messages(self, index: int) -> None:
        """Delete message ``index`` and every line after it (abort, revision switch)."""
        pos = self._position(index)
        del self.records[pos:]
        del self._kinds_are_message[pos:]

    def append(self, record: dict[str, Any], *, is_message: bool = True) -> None:
        """Add a record at the end."""
        self.records.append(record)
        self._kinds_are_message.append(is_message)
