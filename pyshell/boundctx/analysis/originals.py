"""The originals of one reply, and the read-only tool that rereads them exactly.

Workers read a long input once, in sections, and leave notes; notes lose exact strings.
So the originals stay in memory for the rest of the reply, each under a name that
says what it is (its file's name, "the user's message", "tool result 3"; a second of
the same name gets " (2)"), and the coordinator can ask for an exact character range of one of
them with ``read_chat_section``, by a character range or by a key the workers noted
(answered from the range the notes hold for that key's latest value, whether or not the
notes had room to show it). The tool cannot open a path, reach another reply's
originals, or return more than its bound: a name is looked up among this reply's
originals only, never as a path.

The names were random ids (``src-36425d87-1``) until small models copied them into their
answers, where they read as a fault of boundctx (decision 0041).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from boundctx.errors import SectionReadError

__all__ = ["MAX_NAME_CHARS", "READ_TOOL_NAME", "Originals", "name_originals"]

READ_TOOL_NAME = "read_chat_section"
#: The longest name an original is given: a longer label keeps its start and end.
MAX_NAME_CHARS = 48
# What a name may not hold: a quote, a backslash or a control character, which
# llama-cpp-python's server writes into a grammar unescaped when a name is in a schema's
# enum (the constrained reread step's).
_UNSAFE = re.compile(r'["\\\x00-\x1f\x7f]+')


def _name(label: str) -> str:
    name = " ".join(_UNSAFE.sub(" ", label).split()) or "input"
    if len(name) > MAX_NAME_CHARS:
        half = (MAX_NAME_CHARS - 1) // 2
        name = f"{name[:half]}…{name[-(MAX_NAME_CHARS - 1 - half):]}"
    return name


def name_originals(labels: Sequence[str]) -> list[str]:
    """The names originals with these labels get, added in this order: the label made
    safe for a grammar and cut to :data:`MAX_NAME_CHARS`, with `` (2)``, `` (3)``… on a
    name already given."""
    names: list[str] = []
    for label in labels:
        base = name = _name(label)
        n = 2
        while name in names:
            name, n = f"{base} ({n})", n + 1
        names.append(name)
    return names


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
        self._texts: dict[str, Original] = {}
        self._keys: dict[str, dict[str, tuple[str, int, int]]] = {}  # oid -> normalised key -> (key, start, end)

    def add(self, text: str, label: str, *, name: str | None = None) -> str:
        """Keep ``text``; returns its id: ``name`` (a name :func:`name_originals` gave, so
        the one a bound was counted on), else the name it gives ``label`` after the names
        already given. A name already taken is refused."""
        oid = name if name is not None else name_originals([*(o.label for o in self._texts.values()), label])[-1]
        if oid in self._texts or _UNSAFE.search(oid):
            raise ValueError(f"the name {oid!r} is taken, or holds a quote, backslash or control character")
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

    def set_keys(self, oid: str, keys: list[tuple[str, int, int]]) -> None:
        """The keys noted on original ``oid``, each with the range of its latest value."""
        self._get(oid)
        self._keys[oid] = {_norm(key): (key, start, end) for key, start, end in keys}

    def noted_keys(self) -> list[str]:
        """Every key noted on any of this reply's originals, as the workers wrote it."""
        return sorted({key for keys in self._keys.values() for key, _, _ in keys.values()})

    def read_key(self, oid: str, key: str) -> str:
        """The exact text the notes cite for ``key`` on original ``oid``.

        Raises
        ------
        SectionReadError
            An unknown id or key (naming keys that share a word with it).
        """
        self._get(oid)
        if not isinstance(key, str) or not key.strip():
            raise SectionReadError("key must be the name of a noted key, as the notes write it")
        keys = self._keys.get(oid, {})
        found = keys.get(_norm(key))
        if found is None:
            words = set(_norm(key).split())
            near = [k for k, _, _ in keys.values() if words & set(_norm(k).split())][:5]
            hint = f"; keys with a word of it: {'; '.join(near)}" if near else ""
            raise SectionReadError(f"no key {key!r} was noted on {oid}{hint}")
        _, start, end = found
        return self.read(oid, start, min(end, start + self.max_read_chars))

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
        return self._schema(list(self))

    def tool_schema_for(self, names: Sequence[str]) -> dict[str, Any]:
        """The tool as it will be if originals of every one of ``names`` (given by
        :func:`name_originals`) are kept: what the room kept free for it is counted on,
        before any is. Those kept are some of them, under the same names."""
        return self._schema(list(names))

    def _schema(self, ids: list[str]) -> dict[str, Any]:
        return {"type": "function", "function": {
            "name": READ_TOOL_NAME,
            "description": ("Return the exact text of a character range of one of this reply's originals "
                            f"(at most {self.max_read_chars} characters), or of the value the workers noted "
                            "for a key. Use it to check exact strings, ids and numbers: give start and end "
                            "from a range the notes cite, or key: a key's name (any key the workers saw, "
                            "listed in the notes or not)."),
            "parameters": {"type": "object", "additionalProperties": False,
                           "required": ["section_id"],
                           "properties": {
                               "section_id": {"type": "string", "enum": ids},
                               "start": {"type": "integer", "minimum": 0},
                               "end": {"type": "integer", "minimum": 0},
                               "key": {"type": "string"}}}}}

    def call(self, arguments: str | Mapping[str, Any]) -> str:
        """Run the tool on a call's arguments (JSON text or a mapping)."""
        if isinstance(arguments, str):
            try:
                arguments = msgspec.json.decode(arguments)
            except msgspec.DecodeError as exc:
                raise SectionReadError(f"{READ_TOOL_NAME} arguments are not JSON: {exc}") from None
        if not isinstance(arguments, Mapping):
            raise SectionReadError(f"{READ_TOOL_NAME} arguments must be an object")
        extra = set(arguments) - {"section_id", "start", "end", "key"}
        if extra:
            raise SectionReadError(f"{READ_TOOL_NAME} takes section_id with start and end, or with key, "
                                   f"not {sorted(extra)}")
        if "key" in arguments:
            if "start" in arguments or "end" in arguments:
                raise SectionReadError(f"{READ_TOOL_NAME} takes a key or a range (start and end), not both")
            return self.read_key(_argument(arguments, "section_id"), _argument(arguments, "key"))
        return self.read(_argument(arguments, "section_id"), _argument(arguments, "start"), _argument(arguments, "end"))


def _norm(key: str) -> str:
    return " ".join(key.casefold().split())


def _argument(arguments: Mapping[str, Any], name: str) -> Any:
    """A model's argument as it came (None when missing): untyped until :meth:`Originals.read`
    or :meth:`Originals.read_key` checks it, with an error the model can act on."""
    return arguments.get(name)
