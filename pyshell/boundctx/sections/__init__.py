"""Cut a text into contiguous, overlapping sections that fit a token budget exactly.

Two entry points:

- :func:`split` sizes the section text itself: ``counter.count_text(text[s:e]) <=
  max_tokens`` for every section.
- :func:`plan` sizes the *whole worker prompt* each section will be sent in: the
  prompt around the section, the worker's notes at their maximum size and the output
  headroom must fit the worker's context. It refuses, before any model call, a source
  over ``max_source_chars`` or one that needs more than ``max_sections`` sections.

How: the whole text is tokenized once and every token mapped to a code-point span
(``boundctx._native.tokenmap``). For each section the native cut rule
(``boundctx._native.sections``) reads off where the budget's worth of tokens ends and
cuts in the second half of that window at the last newline, else whitespace, else
grapheme-cluster boundary. Token counts are not additive (a slice may tokenize
differently from the same stretch of the whole text), so each section is then counted
exactly once; if it is over, the estimate shrinks by the excess and the cut is redone.

Invariants, on every input: ``sections[0].start == 0``; ``sections[-1].end ==
len(text)``; ``text[s.start:s.end]`` is the section (offsets by construction, never by
search); ``next.start == prev.end - overlap``, moved back by fewer than
``boundctx._native.sections.MAX_SNAP`` code points only to keep a grapheme cluster (or
``\\r\\n``) whole (left inside the cluster only when moving back would reach the previous
section's start); every measured count is within its limit.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence

import msgspec
import numpy as np

from boundctx._native import sections as cut_rule  # the cut rule of the planner
from boundctx._native import tokenmap
from boundctx.errors import SectionBudgetTooSmall, SourceTooLarge, TooManySections
from boundctx.tokens.base import Message, TokenCounter

__all__ = ["JOIN_ALLOWANCE", "Section", "SectionPlan", "plan", "split"]

#: How each cut was chosen, by the native rule's code.
CUT_KINDS = ("end", "newline", "whitespace", "grapheme", "hard")

#: Tokens allowed for the joins when the worker's notes are inserted into a prompt
#: that was counted without them (a merge across each edge of the notes can change the
#: count by one token).
JOIN_ALLOWANCE = 2


class Section(msgspec.Struct, frozen=True):
    """One section: ``text[start:end]``.

    Attributes
    ----------
    index : int
    start, end : int
        Code-point offsets into the source.
    tokens : int
        The exact count the section was held to: its text's tokens for :func:`split`,
        the whole worker prompt's tokens (notes allowance included) for :func:`plan`.
    cut : str
        How the end was chosen: ``"end"`` (end of text), ``"newline"``, ``"whitespace"``,
        ``"grapheme"`` (a cluster boundary) or ``"hard"`` (inside a cluster wider than
        the search window, which only pathological text has).
    """

    index: int
    start: int
    end: int
    tokens: int
    cut: str


class SectionPlan(msgspec.Struct, frozen=True):
    """Sections for one source and the budget they were planned against.

    Attributes
    ----------
    sections : list of Section
    source_chars : int
    limit : int
        Tokens each measured prompt may hold (worker context minus output headroom).
    fixed_tokens : int
        Tokens of the prompt with an empty section, notes allowance included.
    overlap : int
    """

    sections: list[Section]
    source_chars: int
    limit: int
    fixed_tokens: int
    overlap: int


def _token_spans(text: str, counter: TokenCounter) -> tuple[np.ndarray, np.ndarray]:
    pieces = np.ascontiguousarray(counter.piece_bytes(text), dtype=np.int64)
    if not len(pieces):
        # The tokenizer drops the whole text (llama.cpp drops some control characters):
        # no tokens to place cuts by; the cut rule then treats the rest as one estimate.
        return pieces, pieces.copy()
    starts = np.empty(len(pieces), dtype=np.int64)
    ends = np.empty(len(pieces), dtype=np.int64)
    tokenmap.token_spans(text, pieces, starts, ends)
    return starts, ends


def _cut(text: str, counter: TokenCounter, measure: Callable[[int, int], int] | None, limit: int,
         estimate: int, overlap: int, too_small: Callable[[int, int], Exception], fixed: int = 0,
         stop_after: int | None = None) -> list[Section]:
    """Sections whose ``measure(start, end)`` is at most ``limit``, starting from an
    estimate of ``estimate`` whole-text tokens per section. ``measure=None`` counts
    the section text itself; ``fixed`` is what ``measure`` gives an empty section.
    ``stop_after``: return once that many sections are cut, the text not yet covered
    (nothing past them is counted)."""
    n = len(text)
    if n == 0:
        return [Section(0, 0, 0, counter.count_text("") if measure is None else measure(0, 0), "end")]
    tok_start, tok_end = _token_spans(text, counter)
    if measure is None:
        measure = _text_measure(text, counter, tok_start)
    sections: list[Section] = []
    # floor: the last start known to be a cluster boundary (a start that could not be
    # moved back to one, after a section barely longer than the overlap, is not).
    start = floor = 0
    while True:
        k = estimate
        while True:
            end, next_start, kind = cut_rule.next_cut(text, tok_start, tok_end, start, k, overlap, floor)
            if end < 0:
                raise too_small(start, k)
            used = measure(start, end)
            if used <= limit:
                break
            # Over: the slice tokenizes longer than the whole text suggested. Shrink the
            # estimate in proportion to the section's share of the count (a prompt may
            # hold the section more than once), by at least one token, and cut again.
            if k == 1:
                raise too_small(start, 0)
            k = max(1, min(k - 1, k * (limit - fixed) // (used - fixed)))
        sections.append(Section(len(sections), start, end, used, CUT_KINDS[kind]))
        if end == n or len(sections) == stop_after:
            return sections
        if cut_rule.is_boundary(text, next_start, floor):
            floor = next_start
        start = next_start


def _text_measure(text: str, counter: TokenCounter, tok_start: np.ndarray) -> Callable[[int, int], int]:
    """``count_text(text[s:e])``, exactly. For a counter whose counts add up across
    newline sync points (``TokenCounter.newline_sync``), only the stretches before the
    first and after the last sync point are re-counted; the whole text's tokens stand
    for the rest. The twin and the tests use the full count."""
    if not counter.newline_sync:
        return lambda s, e: counter.count_text(text[s:e])

    after_text, at_spaces = counter.sync_after_text, counter.sync_at_spaces

    def measure(s: int, e: int) -> int:
        first, last, between = cut_rule.newline_sync(text, tok_start, s, e, after_text, at_spaces)
        if first < 0:
            return counter.count_text(text[s:e])
        head = counter.count_text(text[s:first]) if first > s else 0
        tail = counter.count_text(text[last:e]) if last < e else 0
        return head + between + tail

    return measure


#: The native core's offsets are ssize_t: a larger value is a clear error, not an
#: OverflowError (one this large already means "the whole text").
_LARGEST = sys.maxsize


def _check(name: str, value: int, least: int) -> None:
    if value < least:
        raise ValueError(f"{name} must be >= {least}, got {value}")
    if value > _LARGEST:
        raise ValueError(f"{name} must be at most {_LARGEST:,}, got {value}")


def _check_overlap(overlap: int) -> None:
    if overlap < 0:
        raise ValueError(f"overlap must be >= 0 characters, got {overlap}")
    _check("overlap", overlap, 0)


def split(text: str, *, counter: TokenCounter, max_tokens: int, overlap: int = 64) -> list[Section]:
    """Cut ``text`` into sections of at most ``max_tokens`` tokens each.

    Parameters
    ----------
    text : str
    counter : TokenCounter
        Counts the sections (``count_text``) and gives the whole text's token
        boundaries (``piece_bytes``).
    max_tokens : int
        Tokens each section's text may hold, overlap included.
    overlap : int
        Code points each section repeats from the end of the previous one.

    Returns
    -------
    list of Section
        At least one section (an empty text gives one empty section).

    Raises
    ------
    SectionBudgetTooSmall
        Somewhere the budget holds no more than ``overlap`` characters (a run of
        characters that take many tokens each), so sections could not advance.

    Examples
    --------
    >>> from boundctx.tokens import ByteEstimateCounter
    >>> [(s.start, s.end) for s in split("ab\\ncd\\nef", counter=ByteEstimateCounter(),
    ...                                  max_tokens=4, overlap=1)]
    [(0, 3), (2, 6), (5, 8)]
    """
    _check("max_tokens", max_tokens, 1)
    _check_overlap(overlap)

    def too_small(at: int, k: int) -> Exception:
        return SectionBudgetTooSmall(
            f"a section of at most {max_tokens} tokens cannot hold more than the "
            f"{overlap}-character overlap at character {at}; raise max_tokens or lower overlap")

    return _cut(text, counter, None, max_tokens, max_tokens, overlap, too_small)


def plan(text: str, *, counter: TokenCounter, prompt: Callable[[str], Sequence[Message]],
         context: int, output_tokens: int, notes_tokens: int = 0, overlap: int = 64,
         max_source_chars: int = 1_000_000, max_sections: int = 64) -> SectionPlan:
    """Plan the sections of ``text`` so that every worker prompt fits its context.

    Parameters
    ----------
    text : str
        The source.
    counter : TokenCounter
        The worker model's counter; each planned prompt is counted once with
        ``count_prompt``.
    prompt : callable
        ``prompt(section_text) -> messages``: the worker prompt for one section, with
        the notes left empty (their room is ``notes_tokens``).
    context : int
        The worker's context window, in tokens.
    output_tokens : int
        Headroom kept free for the worker's reply.
    notes_tokens : int
        The most tokens the worker's notes may take inside the prompt.
    overlap : int
        Code points each section repeats from the previous one.
    max_source_chars, max_sections : int
        Limits checked before any model call (``analysis.max_source_chars`` and
        ``analysis.max_sections``).

    Returns
    -------
    SectionPlan

    Raises
    ------
    SourceTooLarge
        ``text`` is longer than ``max_source_chars``.
    TooManySections
        The source needs more than ``max_sections`` sections; the error says how many.
    SectionBudgetTooSmall
        The prompt, notes and headroom leave no room for a section longer than the
        overlap.
    """
    for name, value, least in (("context", context, 1), ("output_tokens", output_tokens, 0),
                               ("notes_tokens", notes_tokens, 0), ("max_source_chars", max_source_chars, 1),
                               ("max_sections", max_sections, 1)):
        _check(name, value, least)
    _check_overlap(overlap)
    n = len(text)
    if n > max_source_chars:
        raise SourceTooLarge(
            f"the source has {n:,} characters, over the limit of {max_source_chars:,} "
            "(analysis.max_source_chars); split it or raise the limit", chars=n, limit=max_source_chars)
    limit = context - output_tokens
    allowance = notes_tokens + JOIN_ALLOWANCE if notes_tokens else 0

    def measure(s: int, e: int) -> int:
        return counter.count_prompt(list(prompt(text[s:e])), add_generation_prompt=True) + allowance

    fixed = measure(0, 0)
    room = limit - fixed

    def too_small(at: int, k: int) -> Exception:
        return SectionBudgetTooSmall(
            f"the worker prompt takes {fixed} of the {limit} tokens left after {output_tokens} "
            f"output tokens in a {context}-token context (notes allowance {allowance} included), "
            f"leaving {max(room, 0)} for the section; at character {at} that is not more than the "
            f"{overlap}-character overlap. Raise the worker context, or shorten the prompt, "
            "the notes or the output headroom")

    if room < 1:
        raise too_small(0, 0)
    # Cutting stops one section past the limit: what lies beyond is never counted, so a
    # source far too large is refused for the cost of what could have been analysed.
    sections = _cut(text, counter, measure, limit, room, overlap, too_small, fixed, stop_after=max_sections + 1)
    if len(sections) > max_sections:
        covered = sections[-1].end
        estimated = max(len(sections), math.ceil(len(sections) * n / max(covered, 1)))
        raise TooManySections(
            f"the source ({n:,} characters) needs more than {max_sections} sections at {limit} tokens "
            f"per worker prompt (about {estimated} at the pace of the first {len(sections)}, which cover "
            f"{covered:,} characters), over the limit of {max_sections} (analysis.max_sections); "
            "shorten the source, raise the worker context, or raise the limit",
            needed=len(sections), limit=max_sections, estimated=estimated)
    return SectionPlan(sections, n, limit, fixed, overlap)
