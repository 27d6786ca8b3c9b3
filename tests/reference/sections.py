"""Slow, obviously-correct twin of ``boundctx._native.sections`` and of the planner loop.

Written straight from the rule: estimate the end from the whole text's tokens, then
search the second half of the window for the last newline, else the last whitespace,
else the last cluster boundary; the next section starts ``overlap`` characters before
the cut, moved back (at most ``MAX_SNAP``) to a cluster boundary.
"""

from __future__ import annotations

from tests.reference import graphemes, tokenmap

MAX_SNAP = graphemes.MAX_SNAP
END, NEWLINE, WHITESPACE, GRAPHEME, HARD = range(5)
KINDS = ("end", "newline", "whitespace", "grapheme", "hard")


def next_cut(text: str, tok_start: list[int], tok_end: list[int], start: int, max_tokens: int,
             overlap: int, floor: int | None = None) -> tuple[int, int, int]:
    n = len(text)
    floor = start if floor is None else floor
    assert 0 <= floor <= start < n and max_tokens >= 1 and overlap >= 0
    overlap = min(overlap, n)
    # Tokens overlapping [start, ...): those ending after start.
    first = next((i for i, e in enumerate(tok_end) if e > start), len(tok_end))
    k = first + max_tokens - 1
    if k >= len(tok_end) - 1:
        end_estimate = n
    else:
        # Do not end inside a character another token continues.
        while k > first and tok_start[k + 1] < tok_end[k]:
            k -= 1
        end_estimate = tok_end[k]
    if end_estimate >= n:
        return n, -1, END
    e = end_estimate
    lo = max(start + overlap + 1, start + (e - start) // 2)
    if lo > e:
        return -1, -1, END

    def ok(c: int) -> bool:
        return graphemes.is_boundary(text, c, floor)

    cut, kind = next(((p + 1, NEWLINE) for p in range(e - 1, lo - 2, -1) if text[p] == "\n" and ok(p + 1)),
                     (None, None))
    if cut is None:
        cut, kind = next(((p + 1, WHITESPACE) for p in range(e - 1, lo - 2, -1)
                          if text[p].isspace() and ok(p + 1)), (None, None))
    if cut is None:
        cut, kind = next(((p, GRAPHEME) for p in range(e, lo - 1, -1) if ok(p)), (None, None))
    if cut is None:
        half = start + (e - start) // 2
        if any(ok(p) for p in range(lo - 1, start, -1) if p >= half):
            return -1, -1, END  # the overlap left no room for a whole cluster
        cut, kind = e, HARD
    next_start = cut - overlap
    for back in range(MAX_SNAP):
        if next_start - back <= start:
            break
        if ok(next_start - back):
            next_start -= back
            break
    return cut, next_start, kind


def spans(text: str, counter) -> tuple[list[int], list[int]]:
    return tokenmap.token_spans(text, [int(x) for x in counter.piece_bytes(text)])


def split(text: str, *, counter, max_tokens: int, overlap: int = 64) -> list[tuple[int, int, int, str]]:
    """(start, end, tokens, cut kind) of each section, as ``boundctx.sections.split``."""
    if not text:
        return [(0, 0, counter.count_text(""), "end")]
    tok_start, tok_end = spans(text, counter) if int(sum(counter.piece_bytes(text))) else ([], [])
    out = []
    start = floor = 0
    while True:
        k = max_tokens
        while True:
            end, next_start, kind = next_cut(text, tok_start, tok_end, start, k, overlap, floor)
            if end < 0:
                raise ValueError("budget too small")
            used = counter.count_text(text[start:end])
            if used <= max_tokens:
                break
            if k == 1:
                raise ValueError("budget too small")
            k = max(1, min(k - 1, k * max_tokens // used))
        out.append((start, end, used, KINDS[kind]))
        if end == len(text):
            return out
        if graphemes.is_boundary(text, next_start, floor):
            floor = next_start
        start = next_start


def is_sync(text: str, i: int, after_text: bool = False, at_spaces: bool = False) -> bool:
    """A sync point: either end, or right after a ``\\n`` and before a non-whitespace
    character (``after_text``: the ``\\n`` after one too), or (``at_spaces``) at a single
    space between two non-whitespace characters."""
    if i <= 0 or i >= len(text):
        return True
    if at_spaces and text[i] == " " and i + 1 < len(text) and not text[i - 1].isspace() \
            and not text[i + 1].isspace():
        return True
    if after_text and i >= 2 and text[i - 2].isspace():
        return False
    return text[i - 1] == "\n" and not text[i].isspace()


def newline_sync(text: str, tok_start: list[int], start: int, end: int,
                 after_text: bool = False, at_spaces: bool = False) -> tuple[int, int, int]:
    points = [i for i in range(start, end + 1) if is_sync(text, i, after_text, at_spaces)]
    if not points:
        return -1, -1, 0
    first, last = points[0], points[-1]
    return first, last, sum(1 for s in tok_start if first <= s < last)
