"""The caller's stop strings: a reply ends where the first one is complete, and none of
it is passed on.

The provider is asked to stop there too (llama-cpp-python and OpenAI-compatible servers
take ``stop``), but the engine does not count on it: a server may ignore the field, the
scripted provider does, and a stream may hand over a piece that ends inside a stop
string. So the answer is cut here as well, the same way for every provider, streamed or
whole (decision 0036). :class:`StopCut` passes text on as soon as it can no longer be
part of a stop string and holds back the rest (at most the longest stop string less one
character) until the next piece decides it.

Where two stop strings could both match, the one completed first wins, as a server that
checks after each token would find it; among those completed at the same character, the
one that starts earlier. Said by character, so the cut is the same however the text is
split into pieces.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["StopCut", "check_stops"]


def check_stops(stop: str | Sequence[str] | None) -> list[str]:
    """``stop`` as a list of stop strings (empty for None).

    Raises
    ------
    TypeError
        ``stop`` is not a string or a sequence of strings.
    ValueError
        A stop string is empty (it would match before any text).
    """
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, Sequence):
        raise TypeError(f"stop must be a string or a list of strings, got {type(stop).__name__}")
    out: list[str] = []
    for i, s in enumerate(stops):
        if not isinstance(s, str):
            raise TypeError(f"stop[{i}] is of type {type(s).__name__}; each stop string is a str")
        if not s:
            raise ValueError(f"stop[{i}] is empty; a stop string needs at least one character")
        out.append(s)
    return out


class StopCut:
    """Feed the reply's text in; pass on what :meth:`feed` returns, and :meth:`finish`'s
    rest when the stream ends without a stop.

    Each stop string is followed with its own matcher (Knuth-Morris-Pratt): the length
    of its longest start that the text so far ends with. The work is linear in the text
    whatever the stop strings are; a stop string of a hundred thousand ``a`` is as cheap
    as ``"\\n"``, so a request cannot make the cut slow.

    Attributes
    ----------
    hit : bool
        A stop string was completed: the reply ends; nothing after it is passed on.
    """

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = list(stops)
        self.hit = False
        self._fallback = [_fallback(s) for s in self.stops]
        self._matched = [0] * len(self.stops)  # of each stop, how much the text ends with
        self._firsts = "".join(dict.fromkeys(s[0] for s in self.stops))
        self._held = ""

    def feed(self, text: str) -> str:
        """The part of the text so far that is known not to belong to a stop string."""
        if self.hit:
            return ""
        if not self.stops:
            return text
        stops, fallback, matched = self.stops, self._fallback, self._matched
        j = 0
        while j < len(text):
            if not any(matched):
                # Nothing is under way: no stop string can start before the next
                # character that begins one (found at C speed).
                j = _next_of(text, self._firsts, j)
                if j == len(text):
                    break
            ch = text[j]
            done = 0  # the longest stop string completed at this character
            for i, s in enumerate(stops):
                k = matched[i]
                while k and s[k] != ch:
                    k = fallback[i][k - 1]
                if s[k] == ch:
                    k += 1
                if k == len(s):
                    done = max(done, k)
                matched[i] = k
            if done:
                self.hit = True
                buffer, self._held = self._held + text[:j + 1], ""
                return buffer[:len(buffer) - done]
            j += 1
        buffer = self._held + text
        keep = max(matched)
        self._held = buffer[len(buffer) - keep:]
        return buffer[:len(buffer) - keep]

    def finish(self) -> str:
        """What is still held when the stream ended: no stop string came of it."""
        rest, self._held = ("" if self.hit else self._held), ""
        return rest


def _fallback(s: str) -> list[int]:
    """KMP's table: for each prefix ``s[:k + 1]``, the longest proper prefix of ``s``
    it ends with."""
    table = [0] * len(s)
    k = 0
    for i in range(1, len(s)):
        while k and s[i] != s[k]:
            k = table[k - 1]
        if s[i] == s[k]:
            k += 1
        table[i] = k
    return table


def _next_of(text: str, chars: str, start: int) -> int:
    """Where the first of ``chars`` is in ``text`` from ``start`` on (``len(text)``: none)."""
    found = [at for at in (text.find(c, start) for c in chars) if at >= 0]
    return min(found) if found else len(text)
