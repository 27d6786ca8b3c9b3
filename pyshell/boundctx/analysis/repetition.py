"""Stop a reply that loops, without passing the loop on.

Small models (the embedded 135M one among them) fall into repeating one line until the
token budget ends. :class:`RepetitionGuard` watches the reply as it streams:

- **Repeated lines.** A line (8 or more visible characters) that comes again right
  after itself is held back, with any blank lines between the copies, until the next
  line shows what it is: a different line passes the held copy on (a line said twice
  is allowed), a third copy is a loop. Text is held only while the line being written
  could still turn out to be a copy, so ordinary text streams through at once.
- **A phrase looping inside one line**: the line ends in four copies of the same
  8-59 characters with two words in them, or in three copies of 60-400 characters
  (a whole sentence said again and again). Data repeats legitimately (``0, 0, 0``, a
  row of ``null``, a hex string): a unit without two words of letters is not a phrase.
  These copies have been passed on by the time the loop is recognised; nothing more is.

On a loop the guard sets :attr:`looping`; the caller stops the generation and reports
it (``Done(finish_reason="repetition")``). Repeated lines held back are never passed
on and are counted in :attr:`withheld_chars`, so the stop is said, not silent.
"""

from __future__ import annotations

import re

__all__ = ["RepetitionGuard"]

#: Lines shorter than this (``}``, ``---``, a list marker) repeat legitimately.
MIN_LINE_CHARS = 8
#: Copies of a line in a row that make a loop (the first one included).
LOOP_COPIES = 3
#: Copies of a phrase at the end of one line that make a loop: short phrases need more
#: copies than a whole sentence does. Lengths in characters.
PHRASE_COPIES, SENTENCE_COPIES = 4, 3
PHRASE_MIN, SENTENCE_MIN, SENTENCE_MAX = 8, 60, 400


_WORD = re.compile(r"[^\W\d_]{2,}")
#: Words that repeat in data: a row of nulls is a table, not a loop.
_DATA_WORDS = frozenset({"null", "none", "true", "false", "nan", "inf"})


def _has_words(unit: str) -> bool:
    """Whether ``unit`` is a phrase (two words of two or more letters), not data such
    as ``0, 0, `` or a hex string, which repeats legitimately."""
    words = [w for w in _WORD.findall(unit) if w.lower() not in _DATA_WORDS]
    return len(words) >= 2


def _significant(line: str) -> bool:
    stripped = line.strip()
    return len(stripped) >= MIN_LINE_CHARS and any(c.isalnum() for c in stripped)


class RepetitionGuard:
    """Feed the reply's text in; pass on what :meth:`feed` returns.

    Attributes
    ----------
    looping : bool
        A loop was found; stop the generation and call nothing more.
    withheld_chars : int
        Characters of repeated text that were not passed on.
    """

    def __init__(self) -> None:
        self.looping = False
        self.withheld_chars = 0
        self._previous: str | None = None  # the last complete significant line, stripped
        self._copies = 0                  # copies of it seen in a row after the first
        self._held = ""                   # complete lines held back (copies, blank lines)
        self._line = ""                   # the line being written
        self._line_out = 0                # how much of it has been passed on

    def feed(self, text: str) -> str:
        """The part of ``text`` (and of earlier held text) that can be passed on now."""
        if self.looping:
            self.withheld_chars += len(text)
            return ""
        out: list[str] = []
        while text:
            newline = text.find("\n")
            piece, text = (text, "") if newline < 0 else (text[:newline + 1], text[newline + 1:])
            self._line += piece
            if piece.endswith("\n"):
                out.append(self._end_line())
            else:
                out.append(self._partial())
            if self.looping:
                self.withheld_chars += len(text)
                return "".join(out)
        return "".join(out)

    def finish(self) -> str:
        """What is still held at the end of a reply that did not loop: it is passed on
        (a copy said twice at the very end is not a loop)."""
        if self.looping:
            return ""
        rest = self._held + self._line[self._line_out:]
        self._held, self._line, self._line_out = "", "", 0
        return rest

    def _could_be_copy(self, line: str) -> bool:
        # Indentation alone (often a token of its own) may still become a copy.
        return self._previous is not None and self._previous.startswith(line.strip())

    def _partial(self) -> str:
        """The line so far: held while it may be a copy of the previous line."""
        if self._could_be_copy(self._line) and self._line_out == 0:
            return ""
        out = self._held + self._line[self._line_out:]
        self._held = ""
        self._line_out = len(self._line)
        if self._phrase_loops(self._line):
            self.looping = True
        return out

    def _end_line(self) -> str:
        line, self._line = self._line, ""
        emitted, self._line_out = self._line_out, 0
        stripped = line.strip()
        if emitted == 0 and self._previous is not None and stripped == self._previous:
            self._copies += 1
            self._held += line
            if self._copies + 1 >= LOOP_COPIES:
                self.looping = True
                self.withheld_chars += len(self._held)
                self._held = ""
            return ""
        if not stripped and self._copies > 0:
            self._held += line  # blank lines between copies stay with the copies
            return ""
        out = self._held + line[emitted:]
        self._held = ""
        if stripped:
            self._previous = stripped if _significant(stripped) else None
            self._copies = 0
        if self._phrase_loops(line):
            self.looping = True
        return out

    @staticmethod
    def _phrase_loops(line: str) -> bool:
        tail = line.rstrip("\r\n")
        n = len(tail)
        for period in range(PHRASE_MIN, min(SENTENCE_MAX, n // SENTENCE_COPIES) + 1):
            copies = PHRASE_COPIES if period < SENTENCE_MIN else SENTENCE_COPIES
            if period * copies > n or tail[-1] != tail[-1 - period]:
                continue  # cheap test first: the last character must recur one period back
            unit = tail[-period:]
            if _has_words(unit) and tail.endswith(unit * copies):
                return True
        return False
