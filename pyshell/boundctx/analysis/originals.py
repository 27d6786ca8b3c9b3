"""The originals of one reply, and the read-only tool that rereads them exactly.

Workers read a long input once, in sections, and leave notes; notes lose exact strings.
So the originals stay in memory for the rest of the reply under random ids that belong
to this reply alone, and the coordinator can ask for an exact character range of one of
them with ``read_chat_section``. The tool cannot open a path, reach another reply's
originals, or return more than its bound.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any

import msgspec

from boundctx.errors import SectionReadError

__all__ = ["READ_TOOL_NAME", "Originals"]

READ_TOOL_NAME = "read_chat_section"


class Original(msgspec.Struct, frozen=True):
    id: str
    label: str
    text: str


class Originals:
    """The texts one reply analysed, by reply-specific id.

    Parameters
    ----------
    max_read_chars : int
        The most characters one ``read_chat_section`` call returns.
    """

    def __init__(self, *, max_read_chars: int = 4000) -> None:
        if max_read_chars < 1:
            raise ValueError(f"max_read_chars must be >= 1, got {max_read_chars}")
        self.max_read_chars = max_read_chars
        self._prefix = secrets.token_hex(4)  # differs between replies
        self._texts: dict[str, Original] = {}

    def add(self, text: str, label: str) -> str:
        """Keep ``text``; returns its id (``src-<reply>-<n>``)."""
        oid = f"src-{self._prefix}-{len(self._texts) + 1}"
        self._texts[oid] = Original(oid, label, text)
        return oid

    def __contains__(self, oid: object) -> bool:
        return oid in self._texts

    def __len__(self) -> int:
        return len(self._texts)

    def __iter__(self):
        """The ids, in the order they were added."""
        return iter(self._texts)

    def _get(self, oid: str) -> Original:
        if not isinstance(oid, str) or oid not in self._texts:
            known = ", ".join(self) or "none"
            raise SectionReadError(f"no original {oid!r} in this reply (its originals: {known})")
        return self._texts[oid]

    def read(self, oid: str, start: int, end: int) -> str:
        """Exactly ``text[start:end]`` of original ``oid``.

        Raises
        ------
        SectionReadError
            An unknown id, a range outside the text or backwards, or longer than
            ``max_read_chars``.
        """
        original = self._get(oid)
        n = len(original.text)
        if not (isinstance(start, int) and isinstance(end, int)) or isinstance(start, bool) or isinstance(end, bool):
            raise SectionReadError(f"start and end must be integers, got {start!r} and {end!r}")
        if not 0 <= start <= end <= n:
            raise SectionReadError(f"range [{start}, {end}) is outside {oid} (0 to {n} characters)")
        if end - start > self.max_read_chars:
            raise SectionReadError(f"range [{start}, {end}) is {end - start} characters; one read returns at "
                                   f"most {self.max_read_chars}: ask for a narrower range")
        return original.text[start:end]

    def tool_schema(self) -> dict[str, Any]:
        """The OpenAI-style function tool the coordinator gets (counted in its prompt)."""
        return {"type": "function", "function": {
            "name": READ_TOOL_NAME,
            "description": ("Return the exact text of a character range of one of this reply's originals "
                            f"(at most {self.max_read_chars} characters). Use it to check exact strings, ids "
                            "and numbers the notes mention, by the section ranges they cite."),
            "parameters": {"type": "object", "additionalProperties": False,
                           "required": ["section_id", "start", "end"],
                           "properties": {
                               "section_id": {"type": "string", "enum": list(self)},
                               "start": {"type": "integer", "minimum": 0},
                               "end": {"type": "integer", "minimum": 0}}}}}

    def call(self, arguments: str | Mapping[str, Any]) -> str:
        """Run the tool on a call's arguments (JSON text or a mapping)."""
        if isinstance(arguments, str):
            try:
                arguments = msgspec.json.decode(arguments)
            except msgspec.DecodeError as exc:
                raise SectionReadError(f"{READ_TOOL_NAME} arguments are not JSON: {exc}") from None
        if not isinstance(arguments, Mapping):
            raise SectionReadError(f"{READ_TOOL_NAME} arguments must be an object")
        extra = set(arguments) - {"section_id", "start", "end"}
        if extra:
            raise SectionReadError(f"{READ_TOOL_NAME} takes section_id, start and end, not {sorted(extra)}")
        return self.read(arguments.get("section_id"), arguments.get("start"), arguments.get("end"))
