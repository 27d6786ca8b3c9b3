"""Slow, obviously-correct twin of ``Originals.search``'s choice of passages: split the
searched text into lines, ask of every line which words of the query it holds (a
case-insensitive search for each word alone), and rank the lines by how many, the
newest of equals first.

It reads every line of the searched part once per word; the fast path reads the part
once with one pattern, backwards a block at a time, passing over a line after its first
match. Both must choose the same lines, each with the same first match, whenever the
search is not cut short by its clock.
"""

from __future__ import annotations

import re


def searched_from(text: str, max_chars: int) -> int:
    """Where the searched part starts: the first line that starts at or after the
    newest ``max_chars`` characters."""
    at = len(text) - max_chars
    if at <= 0:
        return 0
    starts = [0] + [k + 1 for k, c in enumerate(text) if c == "\n"]
    return next((s for s in starts if s >= at), len(text))


def chosen_lines(text: str, query: str, max_chars: int, max_hits: int) -> list[tuple[int, int, int]]:
    """``(line start, line end, first match)`` of the lines a search chooses, in the
    order they are ranked."""
    words = set(query.casefold().split())
    lo = searched_from(text, max_chars)
    lines, start = [], lo
    for k in range(lo, len(text) + 1):
        if k == len(text) or text[k] == "\n":
            lines.append((start, k))
            start = k + 1
    ranked = []
    for a, b in lines:
        line = text[a:b]
        firsts = [m.start() for w in words for m in [re.search(re.escape(w), line, re.I)] if m]
        if firsts:
            ranked.append((len(firsts), a, b, a + min(firsts)))
    ranked.sort(key=lambda r: (r[0], r[1]), reverse=True)
    return [(a, b, first) for _, a, b, first in ranked[:max_hits]]
