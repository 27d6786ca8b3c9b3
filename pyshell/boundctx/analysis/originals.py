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

import dataclasses
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec

from boundctx.errors import SectionReadError

__all__ = ["GRAMMAR_UNSAFE", "MAX_NAME_CHARS", "MAX_SEARCH_CHARS", "READ_TOOL_NAME", "SEARCH_PASSAGE_CHARS",
           "Earlier", "Originals", "described", "name_originals"]

READ_TOOL_NAME = "read_chat_section"
#: The longest name an original is given: a longer label keeps its start and end.
MAX_NAME_CHARS = 48
#: What a name (or the constrained step's search) may not hold: a quote, a backslash or a
#: control character, which llama-cpp-python's server writes into a grammar unescaped
#: when a name is in a schema's enum (the constrained reread step's).
GRAMMAR_UNSAFE = re.compile(r'["\\\x00-\x1f\x7f]+')
#: The longest search a model may ask for, in characters (a few words).
MAX_SEARCH_CHARS = 32
#: The most characters of one passage a search returns (its line, around the first word).
SEARCH_PASSAGE_CHARS = 400
# Characters one step of a search reads before it looks at the clock.
_SEARCH_BLOCK = 1 << 18


def _name(label: str) -> str:
    name = " ".join(GRAMMAR_UNSAFE.sub(" ", label).split()) or "input"
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


@dataclasses.dataclass(frozen=True)
class Earlier:
    """Messages before the conversation a reply is given, kept where the caller can read
    them again (a transcript's older messages): how many, and how to read the newest of
    them within a number of characters, as one text to search (decision 0046).

    Attributes
    ----------
    count : int
        How many messages come before the conversation.
    read : callable
        ``read(max_chars) -> (text, first)``: the text of the newest of them that fit
        ``max_chars`` (each headed by its place and role), and the index of the first
        message it holds (0 when it holds them all). Called once, when a search or a
        read first needs it, never before.
    """

    count: int
    read: Callable[[int], tuple[str, int]]


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
    search_max_chars, search_max_hits, search_max_seconds
        One search's bounds: the characters it reads (the newest first), the passages it
        returns, its wall-clock time (``analysis.search_*``).
    """

    def __init__(self, *, max_read_chars: int = 4000, search_max_chars: int = 16_000_000,
                 search_max_hits: int = 6, search_max_seconds: float = 5.0) -> None:
        if max_read_chars < 1:
            raise ValueError(f"max_read_chars must be >= 1, got {max_read_chars}")
        self.max_read_chars = max_read_chars
        self.search_max_chars = search_max_chars
        self.search_max_hits = search_max_hits
        self.search_max_seconds = search_max_seconds
        self._texts: dict[str, Original] = {}
        # Originals whose text is read when first needed, and what each could not read.
        self._pending: dict[str, tuple[str, Callable[[], tuple[str, str | None]]]] = {}
        self._unread: dict[str, str] = {}
        self._order: list[str] = []  # every id, in the order added, read or not
        self._searches: dict[tuple[str, str], tuple[str, list[tuple[int, int]], int, int]] = {}
        self._keys: dict[str, dict[str, tuple[str, int, int]]] = {}  # oid -> normalised key -> (key, start, end)

    def add(self, text: str, label: str, *, name: str | None = None) -> str:
        """Keep ``text``; returns its id: ``name`` (a name :func:`name_originals` gave, so
        the one a bound was counted on), else the name it gives ``label`` after the names
        already given. A name already taken is refused."""
        oid = name if name is not None else name_originals([*(o.label for o in self._texts.values()), label])[-1]
        if oid in self or GRAMMAR_UNSAFE.search(oid):
            raise ValueError(f"the name {oid!r} is taken, or holds a quote, backslash or control character")
        self._texts[oid] = Original(oid, label, text)
        self._order.append(oid)
        return oid

    def add_later(self, load: Callable[[], tuple[str, str | None]], label: str, *, name: str) -> str:
        """Keep an original whose text is read only when a search or a read first needs
        it: ``load()`` gives the text and what it could not read (said in every search
        of it), or raises :class:`~boundctx.errors.SectionReadError`."""
        if name in self or GRAMMAR_UNSAFE.search(name):
            raise ValueError(f"the name {name!r} is taken, or holds a quote, backslash or control character")
        self._pending[name] = (label, load)
        self._order.append(name)
        return name

    def __contains__(self, oid: object) -> bool:
        return oid in self._texts or oid in self._pending

    def __len__(self) -> int:
        return len(self._order)

    def __iter__(self):
        """The ids, in the order they were added."""
        return iter(list(self._order))

    def _get(self, oid: str) -> Original:
        if isinstance(oid, str) and oid in self._pending:
            label, load = self._pending.pop(oid)
            text, unread = load()
            self._texts[oid] = Original(oid, label, text)
            if unread:
                self._unread[oid] = unread
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

    def search(self, oid: str, query: str, *, cite: bool = True, hits: int | None = None) -> str:
        """The passages of original ``oid`` that hold words of ``query``, each as its
        exact text with its characters: the lines with the most of the words first (the
        newest of equals), at most ``search_max_hits`` of them (or ``hits``, fewer), each
        cut to :data:`SEARCH_PASSAGE_CHARS` around its first word, all within one read's
        ``max_read_chars``. Words are matched case-insensitively, as parts of words too.

        Bounded whatever the original's size: at most ``search_max_chars`` characters
        are read, the newest (the end) first, for at most ``search_max_seconds``; what
        was not read is said in the result, never left unsaid. ``cite=False``: the
        passages without their characters, for an answer no reread can follow
        (decision 0044). The same search again (fewer hits, another form) reads nothing
        again.

        Raises
        ------
        SectionReadError
            An unknown id, or a query that is not a few words.
        """
        text, ranked, reached, lo = self._found(oid, query)
        passages, used = [], 0
        for a, end in ranked[:min(hits or self.search_max_hits, self.search_max_hits)]:
            line = f"characters {a}-{end}: «{text[a:end]}»" if cite else f"«{text[a:end]}»"
            if used + len(line) > self.max_read_chars:
                break
            passages.append((a, line))
            used += len(line) + 1
        said = [line for _, line in sorted(passages)]
        head = (f"{len(said)} passage{'s' * (len(said) != 1)} of {oid} hold{'s' * (len(said) == 1)} words of "
                f"{query!r}" if said else f"No passage of {oid} holds any of the words of {query!r}")
        if len(said) < min(len(ranked), self.search_max_hits):
            head += f" (the best {len(said)} of {min(len(ranked), self.search_max_hits)} found)"
        if oid in self._unread:
            head += f"; {self._unread[oid]}"
        if reached > 0 and not cite:
            head += f"; its oldest {reached:,} characters were not searched"
        elif reached > 0:
            why = ("the search's time ran out: analysis.search_max_seconds" if reached > lo else
                   "one search reads at most analysis.search_max_chars characters")
            head += f"; characters 0-{reached} were not searched ({why})"
        return head + (":\n" + "\n".join(said) if said else ".")

    def _found(self, oid: str, query: str) -> tuple[str, list[tuple[int, int]], int, int]:
        """The search itself, once per original and query: the text, the passages ranked
        (each cut around its first word), where reading stopped, and where it could."""
        if not isinstance(query, str) or not query.strip() or len(query) > MAX_SEARCH_CHARS:
            raise SectionReadError(f"search must be a few words (1 to {MAX_SEARCH_CHARS} characters), "
                                   f"got {query!r}"[:200])
        original = self._get(oid)
        memo = self._searches.get((oid, query))
        if memo is not None:
            return memo
        words = sorted(set(query.casefold().split()), key=len, reverse=True)
        each = [re.compile(re.escape(w), re.I) for w in words]
        anyone = re.compile("|".join(p.pattern for p in each), re.I)
        text = original.text
        deadline = time.monotonic() + self.search_max_seconds
        lo = _line_at_or_after(text, len(text) - self.search_max_chars)
        found: dict[int, tuple[int, int]] = {}  # line start -> (line end, its first match)
        reached = len(text)
        # Backwards a block of whole lines at a time: the newest is searched first, and
        # the clock is read between blocks. No word holds a line break, so no match
        # crosses a block's edge; within a block, a line with a match is passed over
        # after its first.
        while reached > lo:
            start = max(lo, text.rfind("\n", lo, max(lo, reached - _SEARCH_BLOCK)) + 1)
            at = start
            while (m := anyone.search(text, at, reached)) is not None:
                a = text.rfind("\n", start, m.start()) + 1 or start
                e = text.find("\n", m.end(), reached)
                end = reached if e < 0 else e
                found[a] = (end, m.start())
                at = end + 1
            reached = start
            if time.monotonic() > deadline:
                break
        # A line's rank: how many of the words it holds, each looked for alone.
        held = {a: sum(1 for p in each if p.search(text, a, end)) for a, (end, _) in found.items()}
        ranked = sorted(found.items(), key=lambda kv: (held[kv[0]], kv[0]), reverse=True)
        memo = (text, [_around(a, end, first) for a, (end, first) in ranked[:self.search_max_hits]], reached, lo)
        self._searches[(oid, query)] = memo
        return memo

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
            "description": ("Return exactly a character range of one of this reply's originals (at most "
                            f"{self.max_read_chars} characters), the value the workers noted for a key, or the "
                            "passages holding some words. Give start and end from a range the notes cite, key: "
                            "a key's name (any key the workers saw, listed or not), or search: a few words."),
            "parameters": {"type": "object", "additionalProperties": False,
                           "required": ["section_id"],
                           "properties": {
                               "section_id": {"type": "string", "enum": ids},
                               "start": {"type": "integer", "minimum": 0},
                               "end": {"type": "integer", "minimum": 0},
                               "key": {"type": "string"},
                               "search": {"type": "string", "maxLength": MAX_SEARCH_CHARS}}}}}

    def call(self, arguments: str | Mapping[str, Any]) -> str:
        """Run the tool on a call's arguments (JSON text or a mapping)."""
        if isinstance(arguments, str):
            try:
                arguments = msgspec.json.decode(arguments)
            except msgspec.DecodeError as exc:
                raise SectionReadError(f"{READ_TOOL_NAME} arguments are not JSON: {exc}") from None
        if not isinstance(arguments, Mapping):
            raise SectionReadError(f"{READ_TOOL_NAME} arguments must be an object")
        extra = set(arguments) - {"section_id", "start", "end", "key", "search"}
        if extra:
            raise SectionReadError(f"{READ_TOOL_NAME} takes section_id with start and end, with key, or with "
                                   f"search, not {sorted(extra)}")
        if "search" in arguments:
            if set(arguments) - {"section_id", "search"}:
                raise SectionReadError(f"{READ_TOOL_NAME} takes a search alone (with section_id), not with a "
                                       "range or a key")
            return self.search(_argument(arguments, "section_id"), _argument(arguments, "search"))
        if "key" in arguments:
            if "start" in arguments or "end" in arguments:
                raise SectionReadError(f"{READ_TOOL_NAME} takes a key or a range (start and end), not both")
            return self.read_key(_argument(arguments, "section_id"), _argument(arguments, "key"))
        return self.read(_argument(arguments, "section_id"), _argument(arguments, "start"), _argument(arguments, "end"))


def described(arguments: str) -> str:
    """What a ``read_chat_section`` call does, for a person watching the progress:
    ``searching earlier messages for 'deploy key'``, ``rereading characters 10-40 of
    build.log``, ``rereading the value noted as 'job id' in build.log``; the arguments
    as they came when they are not a call's."""
    try:
        args = msgspec.json.decode(arguments)
    except msgspec.DecodeError:
        return f"rereading: {arguments}"
    if not isinstance(args, dict):
        return f"rereading: {arguments}"
    name = args.get("section_id")
    if "search" in args:
        return f"searching {name} for {args['search']!r}"
    if "key" in args:
        return f"rereading the value noted as {args['key']!r} in {name}"
    return f"rereading characters {args.get('start')}-{args.get('end')} of {name}"


def _line_at_or_after(text: str, at: int) -> int:
    """Where the first line starting at or after ``at`` starts (``len(text)`` if none)."""
    if at <= 0:
        return 0
    nl = text.find("\n", at - 1)
    return len(text) if nl < 0 else nl + 1


def _around(start: int, end: int, first: int) -> tuple[int, int]:
    """A line's characters cut to :data:`SEARCH_PASSAGE_CHARS` around its first match."""
    if end - start <= SEARCH_PASSAGE_CHARS:
        return start, end
    a = max(start, min(first - SEARCH_PASSAGE_CHARS // 4, end - SEARCH_PASSAGE_CHARS))
    return a, a + SEARCH_PASSAGE_CHARS


def _norm(key: str) -> str:
    return " ".join(key.casefold().split())


def _argument(arguments: Mapping[str, Any], name: str) -> Any:
    """A model's argument as it came (None when missing): untyped until :meth:`Originals.read`
    or :meth:`Originals.read_key` checks it, with an error the model can act on."""
    return arguments.get(name)
