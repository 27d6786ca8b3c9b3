"""Fitting a conversation into the model's window, one decision per reply.

In order, each step only if the previous one did not make the prompt fit:

1. **Direct**: the whole conversation fits; send it as it is.
2. **Drop old history, a piece at a time**: earlier research first (old assistant tool
   calls with their tool results, oldest first), then the oldest exchanges. The current
   turn (the last user message and what follows it) is never dropped. The step taken is
   the first that fits by an exact count, and the step before it was counted exactly too
   and does not fit, so nothing is dropped that did not need to be.

   The steps are not counted one after another (that cost grows with the square of the
   history, and a front end resends the whole history every turn). An estimate from
   each message's size, corrected by every exact count made, picks which step to count;
   the search narrows the steps between one known not to fit and one known to fit, with
   bisection whenever the estimate does not halve them. It finds the same step as
   counting them in order as long as dropping a message never adds tokens to the
   prompt, which holds for every chat template we know (each message is rendered into
   its own stretch). A few exact counts of about the window's size, whatever the length
   of the history; with a counter that remembers what it counted (the local model's)
   the counts of a resent history cost little more than rendering it.
3. **Analyse**: if the current turn still does not fit, its largest items (the user's
   text, attached files, tool results) are handed to section analysis, largest first,
   until the rest fits with room for the notes (``notes_room`` once, ``item_room`` for
   each analysed item). Items that fit are passed whole. Then the history dropped to
   get there comes back as far as it fits beside the notes: the same step search as in
   2, over the conversation with the analysed items emptied and their room added, so a
   long paste into a conversation keeps the conversation (decision 0023).

With analysis off (``chat.analysis_workers = 0``) step 3 becomes the old behaviour: tool
results are clipped to ``chat.tool_result_clip_chars`` characters, and a current input
that still does not fit is refused with :class:`~boundctx.errors.ContextOverflow`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import numpy as np

from boundctx.errors import ContextOverflow

__all__ = ["Fit", "current_turn_start", "drop_order", "fit_conversation"]

Count = Callable[[Sequence[dict[str, Any]]], int]


class Fit(msgspec.Struct):
    """The decision for one reply.

    Attributes
    ----------
    messages : list of dict
        What to send (before analysed items are replaced by their notes).
    dropped : int
        Old messages dropped.
    analysed_at : list of int
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
    analysed_at: list[int] = []
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


def drop_order(messages: Sequence[dict[str, Any]], turn: int, keep_system: bool) -> list[tuple[list[int], bool]]:
    """The steps history is dropped in: ``(indexes the step drops, whether they are
    research)``, research groups oldest first, then what the oldest exchanges still hold."""
    steps: list[tuple[list[int], bool]] = [(g, True) for g in _research_groups(messages, turn)]
    dropped = {i for g, _ in steps for i in g}
    for group in _exchange_groups(messages, turn, keep_system):
        new = [i for i in group if i not in dropped]
        if new:
            dropped.update(new)
            steps.append((new, False))
    return steps


#: Tokens per character assumed before the first exact count of a reply (then measured).
_PRIOR_TOKENS_PER_CHAR = 0.3
#: Characters a message's role and template framing are taken to add to its size.
_FRAMING_CHARS = 8


def _sizes(messages: Sequence[dict[str, Any]]) -> np.ndarray:
    """Each message's size in characters, for estimates only: O(1) for plain text."""
    encode = msgspec.json.encode
    out = np.empty(len(messages), dtype=np.int64)
    for i, m in enumerate(messages):
        content = m.get("content")
        n = len(content) if type(content) is str else (0 if content is None else len(encode(content)))
        calls = m.get("tool_calls")
        out[i] = n + (len(encode(calls)) if calls else 0) + _FRAMING_CHARS
    return out


def _first_fitting_step(msgs: Sequence[dict[str, Any]], steps: list[tuple[list[int], bool]], count: Count,
                        limit: int) -> int:
    """The first step ``k`` (0 = drop nothing, ``len(steps)`` = drop every step) whose
    kept messages fit ``limit``, with ``exact(k - 1) > limit`` counted; or
    ``len(steps) + 1`` when none fits."""
    n_steps = len(steps)
    # The step that drops each message (never: past the last one).
    step_of = np.full(len(msgs), n_steps + 1, dtype=np.int64)
    for k, (new, _) in enumerate(steps, 1):
        step_of[new] = k
    sizes = _sizes(msgs)
    dropped_chars = np.bincount(step_of, weights=sizes, minlength=n_steps + 2)[: n_steps + 1]
    kept_chars = (int(sizes.sum()) - np.cumsum(dropped_chars)).tolist()  # kept_chars[k]: after step k
    counted: dict[int, int] = {}

    def exact(k: int) -> int:
        if k not in counted:
            counted[k] = count([msgs[i] for i in np.flatnonzero(step_of > k).tolist()])
        return counted[k]

    def estimate(k: int) -> float:
        """From the nearest exact count, at the slope measured between counts (or the
        prior one before there are two)."""
        if not counted:
            return _PRIOR_TOKENS_PER_CHAR * kept_chars[k]
        ref = min(counted, key=lambda j: abs(j - k))
        others = [j for j in counted if j != ref and kept_chars[j] != kept_chars[ref]]
        if others:
            j = min(others, key=lambda j: abs(j - k))
            slope = (counted[j] - counted[ref]) / (kept_chars[j] - kept_chars[ref])
        else:
            slope = counted[ref] / max(kept_chars[ref], 1)
        return counted[ref] + max(slope, 0.0) * (kept_chars[k] - kept_chars[ref])

    lo, hi = -1, n_steps + 1  # exact(lo) > limit, exact(hi) <= limit (both virtual at first)
    widths = [hi - lo]
    run, last_fit = 0, None  # probes in a row with the same verdict, and the last verdict
    while hi - lo > 1:
        bracketed = lo >= 0 and hi <= n_steps
        if bracketed and len(widths) >= 3 and widths[-1] * 2 > widths[-3]:
            guess = (lo + hi) // 2  # the estimate is not closing in: bisect
        elif not bracketed and run >= 3:
            # The estimate keeps landing on the same side: gallop away from the known
            # bound, so a bad estimate costs a logarithm of probes, not one per step.
            step = 1 << (run - 2)
            guess = max(lo + 1, hi - step) if lo < 0 else min(hi - 1, lo + step)
        else:
            # The fewest steps the estimate says fit, inside the open interval.
            a, b = lo + 1, hi  # estimate(k) falls as k grows: search [a, b) for the first fit
            while a < b:
                mid = (a + b) // 2
                if estimate(mid) <= limit:
                    b = mid
                else:
                    a = mid + 1
            guess = min(max(a, lo + 1), hi - 1)
        fits = exact(guess) <= limit
        if fits:
            hi = guess
        else:
            lo = guess
        run = run + 1 if fits == last_fit else 1
        last_fit = fits
        widths.append(hi - lo)
    return hi


def fit_conversation(messages: Sequence[dict[str, Any]], *, count: Count, limit: int, analysis_on: bool,
                     notes_room: int, clip_chars: int, turn_start: int | None = None, item_room: int = 0) -> Fit:
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
        Tokens to leave once when something is analysed (the notes' instructions).
    item_room : int
        Tokens to leave for each analysed item (its notes, their headers, and what the
        item becomes in the prompt).
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
    msgs = list(messages)  # copied below only where kept: the caller's dicts are never changed
    turn = current_turn_start(msgs) if turn_start is None else turn_start
    keep_system = bool(msgs) and msgs[0].get("role") == "system"
    steps = drop_order(msgs, turn, keep_system)
    k = _first_fitting_step(msgs, steps, count, limit)
    taken = steps[:k]
    dropped = {i for new, _ in taken for i in new}
    research = sum(len(new) for new, is_research in taken if is_research)

    def kept() -> list[dict[str, Any]]:
        return [dict(m) for i, m in enumerate(msgs) if i not in dropped]

    def decided(messages: list[dict[str, Any]], **more: Any) -> Fit:
        return Fit(messages, dropped=len(dropped), dropped_at=sorted(dropped), dropped_research=research, **more)

    if k <= len(steps):
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
        at, fit = _history_back(msgs, steps, dropped, {j: remaining[j] for j in clipped}, count, limit)
        fit.clipped = at
        return fit
    # Analyse the largest current-turn items until the rest fits beside the notes.
    candidates = sorted((i for i in range(turn, len(remaining)) if _text(remaining[i])),
                        key=lambda i: len(_text(remaining[i])), reverse=True)
    analyse: list[int] = []
    trial = list(remaining)
    for i in candidates:
        analyse.append(i)
        trial[i] = {**trial[i], "content": ""}
        room = notes_room + item_room * len(analyse)
        if count(trial) + room <= limit:
            # What the engine is sent keeps each analysed item's content (it reads them);
            # the search counts them emptied, with their room beside.
            at, fit = _history_back(msgs, steps, dropped, {j: trial[j] for j in analyse}, count, limit - room)
            originals = {j: remaining[j] for j in analyse}
            for new_at, j in zip(at, analyse):
                fit.messages[new_at] = dict(originals[j])
            fit.analysed_at = at
            return fit
    used = count(trial) + notes_room + item_room * len(analyse)
    raise ContextOverflow(
        f"even with every current item analysed, the prompt needs {used} tokens (notes included), over the "
        f"{limit} available; raise chat.n_ctx or lower analysis.notes_max_tokens or chat.analysis_workers",
        prompt_tokens=used, context_window=limit)


def _history_back(msgs: list[dict[str, Any]], steps: list[tuple[list[int], bool]], dropped: set[int],
                  changed: dict[int, dict[str, Any]], count: Count, limit: int) -> tuple[list[int], Fit]:
    """The end of step 3: with the current turn's items changed (``changed``: position
    among the messages left after every step in ``dropped`` -> what it becomes), the
    first drop step that fits ``limit``. It drops no more than every step did, as that
    one is known to fit. Returns the new position of each changed item (in the order of
    ``changed``) and the fit, its messages with the changed items in their new form."""
    kept_all = [i for i in range(len(msgs)) if i not in dropped]  # dropped: a set
    new_form = {kept_all[j]: m for j, m in changed.items()}
    trial = [new_form.get(i, m) for i, m in enumerate(msgs)]
    k = _first_fitting_step(trial, steps, count, limit)
    taken = steps[:k]
    gone = {i for new, _ in taken for i in new}
    kept = [i for i in range(len(msgs)) if i not in gone]
    where = {c: j for j, c in enumerate(kept)}
    fit = Fit([dict(trial[i]) for i in kept], dropped=len(gone), dropped_at=sorted(gone),
              dropped_research=sum(len(new) for new, is_research in taken if is_research))
    return [where[kept_all[j]] for j in changed], fit
