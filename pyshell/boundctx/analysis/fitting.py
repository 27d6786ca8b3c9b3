"""Fitting a conversation into the model's window, one decision per reply.

In order, each step only if the previous one did not make the prompt fit:

1. **Direct**: the whole conversation fits; send it as it is.
2. **Drop old history, a piece at a time**: earlier research first (old assistant tool
   calls with their tool results, oldest first), then the oldest exchanges. The current
   turn (the last user message and what follows it) is never dropped. Every step is an
   exact recount, so nothing is dropped that did not need to be.
3. **Analyse**: if the current turn still does not fit, its largest items (the user's
   text, attached files, tool results) are handed to section analysis, largest first,
   until the rest fits with room for the notes. Items that fit are passed whole.

With analysis off (``chat.analysis_workers = 0``) step 3 becomes the old behaviour: tool
results are clipped to ``chat.tool_result_clip_chars`` characters, and a current input
that still does not fit is refused with :class:`~boundctx.errors.ContextOverflow`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from boundctx.errors import ContextOverflow

__all__ = ["Fit", "current_turn_start", "fit_conversation"]

Count = Callable[[Sequence[dict[str, Any]]], int]


class Fit(msgspec.Struct):
    """The decision for one reply.

    Attributes
    ----------
    messages : list of dict
        What to send (before analysed items are replaced by their notes).
    dropped : int
        Old messages dropped.
    analyse : list of int
        Indexes into ``messages`` of current-turn items to analyse, largest first.
    clipped : list of int
        Indexes into ``messages`` of tool results clipped (analysis off).
    dropped_at : list of int
        Indexes, in the conversation given, of the messages dropped (ascending).
    dropped_research : int
        How many of them were earlier research (tool calls and their results).
    """

    messages: list[dict[str, Any]]
    dropped: int = 0
    analyse: list[int] = []
    clipped: list[int] = []
    dropped_at: list[int] = []
    dropped_research: int = 0


def current_turn_start(messages: Sequence[dict[str, Any]]) -> int:
    """Index of the last user message (the current turn starts there)."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            return i
    return len(messages)


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else ""


def _research_groups(messages: Sequence[dict[str, Any]], end: int) -> list[list[int]]:
    """Old tool exchanges: an assistant message with tool calls and the tool results
    that answer it, oldest first."""
    groups: list[list[int]] = []
    i = 0
    while i < end:
        m = messages[i]
        if m.get("role") == "assistant" and m.get("tool_calls"):
            group = [i]
            j = i + 1
            while j < end and messages[j].get("role") == "tool":
                group.append(j)
                j += 1
            groups.append(group)
            i = j
        elif m.get("role") == "tool":  # a result without its call: research all the same
            groups.append([i])
            i += 1
        else:
            i += 1
    return groups


def _exchange_groups(messages: Sequence[dict[str, Any]], end: int, keep_first_system: bool) -> list[list[int]]:
    """Old exchanges: a user message and everything up to the next user message."""
    groups: list[list[int]] = []
    current: list[int] = []
    for i in range(end):
        role = messages[i].get("role")
        if role == "system" and keep_first_system and i == 0:
            continue
        if role == "user" and current:
            groups.append(current)
            current = []
        current.append(i)
    if current:
        groups.append(current)
    return groups


def fit_conversation(messages: Sequence[dict[str, Any]], *, count: Count, limit: int, analysis_on: bool,
                     notes_room: int, clip_chars: int, turn_start: int | None = None) -> Fit:
    """Decide what the coordinator gets (see the module docstring).

    Parameters
    ----------
    messages : sequence of dict
        The conversation; the current turn starts at the last user message.
    count : callable
        Exact tokens of a list of messages as the model will see them.
    limit : int
        Tokens the prompt may take (the window minus the reply's output budget).
    analysis_on : bool
        ``chat.analysis_workers > 0``.
    notes_room : int
        Tokens to leave for analysis notes when something is analysed.
    clip_chars : int
        Characters kept of each tool result when analysis is off.
    turn_start : int, optional
        Where the current turn starts (default: the last user message); attached
        files that precede the question belong to it.

    Raises
    ------
    ContextOverflow
        Analysis is off and the current turn alone does not fit.
    """
    msgs = [dict(m) for m in messages]
    if count(msgs) <= limit:
        return Fit(msgs)
    turn = current_turn_start(msgs) if turn_start is None else turn_start
    keep_system = bool(msgs) and msgs[0].get("role") == "system"
    dropped: set[int] = set()
    research = 0

    def kept() -> list[dict[str, Any]]:
        return [m for i, m in enumerate(msgs) if i not in dropped]

    def decided(messages: list[dict[str, Any]], **more: Any) -> Fit:
        return Fit(messages, dropped=len(dropped), dropped_at=sorted(dropped), dropped_research=research, **more)

    for phase, groups in enumerate((_research_groups(msgs, turn), _exchange_groups(msgs, turn, keep_system))):
        for group in groups:
            if all(i in dropped for i in group):
                continue
            dropped.update(group)
            if phase == 0:
                research = len(dropped)
            if count(kept()) <= limit:
                return decided(kept())
    remaining = kept()
    turn -= sum(1 for i in dropped if i < turn)
    if not analysis_on:
        clipped = []
        for i in range(turn, len(remaining)):
            if remaining[i].get("role") == "tool" and len(_text(remaining[i])) > clip_chars:
                remaining[i] = {**remaining[i], "content": _text(remaining[i])[:clip_chars]}
                clipped.append(i)
        used = count(remaining)
        if used > limit:
            raise ContextOverflow(
                f"the current message takes {used} tokens with all older history dropped, over the {limit} "
                "tokens available, and section analysis is off (chat.analysis_workers = 0); shorten it or "
                "turn analysis on", prompt_tokens=used, context_window=limit)
        return decided(remaining, clipped=clipped)
    # Analyse the largest current-turn items until the rest fits beside the notes.
    candidates = sorted((i for i in range(turn, len(remaining)) if _text(remaining[i])),
                        key=lambda i: len(_text(remaining[i])), reverse=True)
    analyse: list[int] = []
    trial = list(remaining)
    for i in candidates:
        analyse.append(i)
        trial[i] = {**trial[i], "content": ""}
        if count(trial) + notes_room <= limit:
            return decided(remaining, analyse=analyse)
    used = count(trial) + notes_room
    raise ContextOverflow(
        f"even with every current item analysed, the prompt needs {used} tokens (notes included), over the "
        f"{limit} available; raise chat.n_ctx or lower analysis.notes_max_tokens or chat.analysis_workers",
        prompt_tokens=used, context_window=limit)
