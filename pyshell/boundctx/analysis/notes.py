"""Notes that keep every key: what workers report, kept by code within a token bound.

A worker writes only what its section says that bears on the question, one fact per
line: ``key: value (characters a-b)`` (the characters ``a-b`` of the original it comes
from; the older ``[S<k> a-b]`` is read too). The engine, not the model, keeps the notes. :class:`NoteLedger` merges each
section's lines. A key written again with another value is a correction: the latest
value wins, and the earlier one is marked stale. :meth:`NoteLedger.render` writes the
notes within a token bound as the model's tokenizer counts them.

Over the bound, the oldest values are evicted first, and their keys stay in an index
with the range that holds them, so an evicted value is one exact reread away. If even
that index does not fit, it is compacted by section. Only past that are the oldest keys
dropped, and a last line says how many and from which sections. Models keep notes
poorly (they drop old facts when rewriting, and echo stale values), so this is done
in code, where it is bounded, exact and testable.

A worker line that is not of this form is kept anyway: a line with a citation and no
``key:`` keys itself by its text, and a line with no citation is cited as the whole
section.

A range a worker read but could not note whole (its answer was cut at its budget and
reading on made no progress) is kept as *not noted*: those lines come first in every
rendering, before any value, so the coordinator always knows which characters to
reread and that a value noted before them may have been corrected there.

The notes are written for a reader, in words (decision 0041): a small model copies what
it is shown into its answer, and ``[S2 2089-4144]`` or ``S3: key 10-40`` copied there
reads as a fault of boundctx, where ``(characters 2089-4144)`` reads as a reference.
Where no reread can follow (an answer from a model without tool calls), the notes are
rendered without what a reread needs: values without ranges, the keys not kept on one
line (decision 0044).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

import msgspec

from boundctx._search import longest_fitting

__all__ = ["ANSWER_INDEX_HEADER", "ANSWER_UNNOTED", "INDEX_HEADER", "NOTHING_RELEVANT", "UNNOTED_HEADER",
           "NoteEntry", "NoteLedger", "cited_end", "parse_worker_lines"]

#: What a worker writes when its section has nothing that bears on the question.
NOTHING_RELEVANT = "nothing relevant"
#: Heads the index of the keys whose values are not kept.
INDEX_HEADER = "Values not kept here (reread the range to read them):"
#: Heads the ranges read but not noted whole.
UNNOTED_HEADER = "Not noted (reread; may correct values above):"
#: In notes an answer is written from (no reread can follow): heads the keys whose values
#: are not kept, on one line.
ANSWER_INDEX_HEADER = "Also noted, with no room here for the value:"
#: In notes an answer is written from: says that part was read but not noted whole.
ANSWER_UNNOTED = "Part of the text was read but could not be noted whole, so a value from there may be missing."

# A citation at the end of a worker's line, in words or in the older notation (with the
# section's number), maybe followed by a correction's mark the worker copied.
_CITE = re.compile(r"\s*(?:\((?:characters|chars?)\s+(\d+)\s*[-–]\s*(\d+)\)|\[S(\d+)\s+(\d+)\s*-\s*(\d+)\])"
                   r"\s*(?:\(correct(?:ed|s)\b[^)]*\))?\s*[.;,]?\s*$", re.I)
# The form's placeholders copied as they stand (a small model's habit), where a citation
# goes (at the end): said nowhere.
_PLACEHOLDER = re.compile(r"\s*(?:\[S<k> start-end\]|\((?:characters )?start-end\))\s*[.;,]?\s*$", re.I)
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")
_KEY_MAX = 120


class NoteEntry(msgspec.Struct):
    """One key's latest value and where it is.

    Attributes
    ----------
    key : str
        As the worker wrote it (matched case- and space-insensitively).
    value : str
    section, start, end : int
        The section (1-based) and the characters of the original the value comes from.
    seq : int
        When the value was last set (the ledger's counter): the lowest is evicted first.
    stale : tuple of (section, start, end), or None
        Where the value this one corrected was.
    """

    key: str
    value: str
    section: int
    start: int
    end: int
    seq: int
    stale: tuple[int, int, int] | None = None

    def cite(self) -> str:
        """Where the value is, as the coordinator reads it."""
        return f"(characters {self.start}-{self.end})"


def _norm(key: str) -> str:
    return " ".join(key.casefold().split())


def parse_worker_lines(text: str, *, section: int, start: int, end: int) -> list[tuple[str, str, int, int]]:
    """The facts of one worker answer, as ``(key, value, start, end)``, cited within the
    section ``section`` (characters ``start..end`` of the original). A citation of
    another section or outside this one's characters is replaced by the whole section:
    the worker read only this one."""
    return [fact[:4] for fact in _facts(text, section=section, start=start, end=end)]


def _facts(text: str, *, section: int, start: int, end: int) -> list[tuple[str, str, int, int, bool]]:
    facts = []
    for raw in text.splitlines():
        line = _PLACEHOLDER.sub("", _BULLET.sub("", raw)).strip()
        if not line or line.casefold().strip(" .") == NOTHING_RELEVANT:
            continue
        a, b, own = start, end, False
        cite = _CITE.search(line)
        if cite:
            words_x, words_y, k, old_x, old_y = cite.groups()
            in_words = words_x is not None
            x, y = int(words_x if in_words else old_x), int(words_y if in_words else old_y)
            if (in_words or int(k) == section) and start <= x <= y <= end:
                a, b, own = x, y, True
            line = line[:cite.start()].rstrip()
        if not line:
            continue
        key, sep, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if sep and key and not value:
            continue  # a heading ("Notes:"), not a fact
        if not sep or not key or len(key) > _KEY_MAX:
            key, value = line[:_KEY_MAX], line  # no "key:": the line is its own key
        facts.append((key, value, a, b, own))
    return facts


def cited_end(text: str, *, section: int, start: int, end: int) -> int | None:
    """The furthest character that a fact of ``text`` cites with a citation of its own
    within the section (None when no line cites its own range): how far a worker got."""
    ends = [b for _, _, a, b, own in _facts(text, section=section, start=start, end=end) if own]
    return max(ends) if ends else None


class NoteLedger:
    """The notes of one worker, or of every worker on one input (:meth:`merged`)."""

    def __init__(self) -> None:
        self._entries: dict[str, NoteEntry] = {}
        self._seq = 0
        self._unnoted: list[tuple[int, int, int]] = []  # (section, start, end) read but not noted whole

    def add_unnoted(self, section: int, start: int, end: int) -> None:
        """Characters ``start..end`` of ``section`` were read but not noted whole."""
        self._unnoted.append((section, start, end))

    @property
    def unnoted(self) -> list[tuple[int, int, int]]:
        return sorted(self._unnoted)

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self) -> list[NoteEntry]:
        """In the order of the text (section, then characters)."""
        return sorted(self._entries.values(), key=lambda e: (e.section, e.start, e.seq))

    def add(self, key: str, value: str, *, section: int, start: int, end: int,
            stale: tuple[int, int, int] | None = None) -> None:
        """Note ``key: value`` from ``section``. The same value again changes nothing
        (workers may repeat their notes); another value corrects the one noted, which is
        marked stale (``stale``: where a value this one corrected was, when no value is
        noted here yet)."""
        norm = _norm(key)
        old = self._entries.get(norm)
        if old is not None and _norm(old.value) == _norm(value):
            return
        self._seq += 1
        if old is not None:
            stale = (old.section, old.start, old.end)
        self._entries[norm] = NoteEntry(key, value, section, start, end, self._seq, stale)

    def add_answer(self, text: str, *, section: int, start: int, end: int) -> int:
        """Merge a worker's answer for ``section``; returns how many facts it gave."""
        facts = parse_worker_lines(text, section=section, start=start, end=end)
        for key, value, a, b in facts:
            self.add(key, value, section=section, start=a, end=b)
        return len(facts)

    @classmethod
    def merged(cls, ledgers: Iterable[NoteLedger]) -> NoteLedger:
        """One ledger from several workers' on the same input: where two hold a key, the
        value from the later place in the text wins and the other is marked stale."""
        out = cls()
        ledgers = list(ledgers)
        everything = [e for ledger in ledgers for e in ledger._entries.values()]
        for e in sorted(everything, key=lambda e: (e.section, e.start, e.seq)):
            out.add(e.key, e.value, section=e.section, start=e.start, end=e.end, stale=e.stale)
        for ledger in ledgers:
            out._unnoted += ledger._unnoted
        return out

    # -- rendering within a bound ----------------------------------------------------

    def render(self, budget: int, count: Callable[[str], int], *, for_answer: bool = False) -> str:
        """The notes as text of at most ``budget`` tokens by ``count`` (exact: the
        result is counted). Empty when there are no notes. The ranges not noted come
        first, whatever else must give way (in one line by sections if they do not fit
        one a line).

        ``for_answer``: the notes an answer is written from when no reread can follow
        it (decision 0044). What serves only a reread (the ranges, the sections, the
        corrections' places, the advice to read again) is left out, since a small model
        copies it into its answer; the values and the keys not kept are said in words."""
        if for_answer:
            unnoted = ANSWER_UNNOTED if self._unnoted else ""
        else:
            unnoted = _unnoted_text(self.unnoted, count, budget)
        if not unnoted:
            return self._render_entries(budget, count, for_answer)
        if count(unnoted) > budget:  # a bound too small even for the summary line: as much of it as fits
            return unnoted[:longest_fitting(len(unnoted), lambda k: count(unnoted[:k]) <= budget)]
        rest = self._render_entries(max(budget - count(unnoted + "\n"), 0), count, for_answer)
        joined = f"{unnoted}\n{rest}" if rest else unnoted
        return joined if count(joined) <= budget else unnoted

    def _render_entries(self, budget: int, count: Callable[[str], int], for_answer: bool) -> str:
        entries = self.entries()
        if not entries:
            return ""
        values_and_index, compact_index = ((_answer_values_and_index, _answer_compact_index) if for_answer else
                                           (_values_and_index, _compact_index))
        by_age = sorted(entries, key=lambda e: e.seq)  # evicted in this order
        n = len(by_age)

        def with_values(evicted: int) -> str:
            gone = {id(e) for e in by_age[:evicted]}
            return values_and_index([e for e in entries if id(e) not in gone],
                                    [e for e in entries if id(e) in gone])

        # The fewest values evicted (oldest first) that fit, if any: all of them kept
        # is tried first. Each candidate is counted once; longest_fitting assumes k = 0
        # fits, so that one (every value evicted) is counted here.
        keep = longest_fitting(n, lambda k: count(with_values(n - k)) <= budget)
        if keep > 0 or count(with_values(n)) <= budget:
            return with_values(n - keep)
        # Not even every key with its range fits: a compact index by section, then the
        # newest keys only, saying how many are not listed.
        compact = compact_index(entries, dropped=[])
        if count(compact) <= budget:
            return compact
        newest_first = sorted(entries, key=lambda e: e.seq, reverse=True)

        def listing(k: int) -> str:
            kept = {id(e) for e in newest_first[:k]}
            return compact_index([e for e in entries if id(e) in kept],
                                 dropped=[e for e in entries if id(e) not in kept])

        k = longest_fitting(n, lambda k: count(listing(k)) <= budget)
        text = listing(k)
        return text if k > 0 or count(text) <= budget else ""  # k > 0 was counted to fit


def _fact(e: NoteEntry) -> str:
    return e.value if e.key == e.value[:_KEY_MAX] else f"{e.key}: {e.value}"


def _value_line(e: NoteEntry) -> str:
    line = f"{_fact(e)} {e.cite()}"
    if e.stale is not None:
        s, a, b = e.stale
        line += f" (corrects the value at characters {a}-{b})"
    return line


def _values_and_index(kept: Sequence[NoteEntry], evicted: Sequence[NoteEntry]) -> str:
    lines = [_value_line(e) for e in kept]
    if evicted:
        lines.append(INDEX_HEADER)
        lines += [f"{e.key} {e.cite()}" for e in evicted]
    return "\n".join(lines)


def _compact_index(entries: Sequence[NoteEntry], *, dropped: Sequence[NoteEntry]) -> str:
    # A line per range, its keys after it: what a small model copies from here is a
    # reference a person reads ("characters 0-2191"), and keys noted over one range (a
    # worker that cited its whole section) say it once.
    lines = [INDEX_HEADER]
    by_range: dict[tuple[int, int], list[NoteEntry]] = {}
    for e in entries:
        by_range.setdefault((e.start, e.end), []).append(e)
    for start, end in sorted(by_range):
        lines.append(f"characters {start}-{end}: " + "; ".join(e.key for e in by_range[(start, end)]))
    if dropped:
        sections = sorted({e.section for e in dropped})
        lo, hi = min(e.start for e in dropped), max(e.end for e in dropped)
        lines.append(f"({len(dropped)} more keys, at characters {lo}-{hi} (sections {_sections(sections)}), "
                     "are not listed: read any of them again by its key)")
    return "\n".join(lines)


def _answer_values_and_index(kept: Sequence[NoteEntry], evicted: Sequence[NoteEntry]) -> str:
    # The latest value of each key, in the order of the text, in the key's own words; a
    # value corrected later is not shown at all (its correction is).
    lines = [_fact(e) for e in kept]
    if evicted:
        lines.append(f"{ANSWER_INDEX_HEADER} " + "; ".join(e.key for e in evicted) + ".")
    return "\n".join(lines)


def _answer_compact_index(entries: Sequence[NoteEntry], *, dropped: Sequence[NoteEntry]) -> str:
    keys = "; ".join(e.key for e in entries)
    if dropped:
        keys += f"; and {len(dropped)} more" if keys else f"{len(dropped)} keys"
    return f"{ANSWER_INDEX_HEADER} {keys}."


def _unnoted_text(ranges: Sequence[tuple[int, int, int]], count: Callable[[str], int], budget: int) -> str:
    """The ranges not noted, one a line; over ``budget``, one line for all of them."""
    if not ranges:
        return ""
    text = UNNOTED_HEADER + "\n" + "\n".join(f"characters {a}-{b}" for _, a, b in ranges)
    if count(text) <= budget:
        return text
    sections = sorted({k for k, _, _ in ranges})
    return (f"{UNNOTED_HEADER} {len(ranges)} ranges at characters {min(a for _, a, _ in ranges)}-"
            f"{max(b for _, _, b in ranges)} (sections {_sections(sections)})")


def _sections(numbers: Sequence[int]) -> str:
    return ", ".join(map(str, numbers)) if len(numbers) <= 4 else f"{numbers[0]} to {numbers[-1]}"
