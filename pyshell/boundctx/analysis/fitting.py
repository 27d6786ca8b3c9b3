"""Fitting a conversation into the model's window, one decision per reply.

In order, each step only if the previous one did not make the prompt fit:

1. **Direct**: the whole conversation fits; send it as it is.
2. **Drop old history, a piece at a time**: earlier research first (old assistant tool
   calls with their tool results, oldest first), then the oldest exchanges. The current
   turn (the last user message and what follows it) is never dropped. What was dropped
   for the conversation's previous turn stays dropped while the rest still fits (so a
   resent, growing conversation keeps the same prefix, and a model's cache of it); when
   it no longer fits, steps are dropped in that order until the prompt is at most
   ``low_water`` of the limit by an exact count (the step before it counted exactly too,
   and over), so the turns after it append without dropping (decision 0029). "The
   previous turn's drops" are worked out from the conversation itself, turn by turn from
   its start, and remembered by a hash of the conversation up to each turn: any process
   given the same conversation makes the same cut, and a resent one costs a count or two.

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

import bisect
import collections
import hashlib
import threading
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import numpy as np

from boundctx.errors import ContextOverflow

__all__ = ["DROPS", "DropMemo", "Fit", "current_turn_start", "drop_order", "fit_conversation"]

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
    item_room : int
        The room left for each analysed item (0 when nothing is).
    """

    messages: list[dict[str, Any]]
    dropped: int = 0
    analysed_at: list[int] = []
    clipped: list[int] = []
    dropped_at: list[int] = []
    dropped_research: int = 0
    item_room: int = 0


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


class DropMemo:
    """What each conversation's turns dropped, by a hash of the conversation up to the
    turn (and of what its counts depend on): the ``entries`` most recently used.

    Only a shortcut: a turn not found is worked out again from the conversation, to the
    same result, and whatever is found is checked by an exact count before it is used,
    so a memo never lets a prompt past its limit. Threads may share one."""

    def __init__(self, entries: int = 4096) -> None:
        self.entries = entries
        self._found: collections.OrderedDict[bytes, tuple[int, ...]] = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: bytes) -> frozenset[int] | None:
        with self._lock:
            found = self._found.get(key)
            if found is None:
                return None
            self._found.move_to_end(key)
            return frozenset(found)

    def put(self, key: bytes, dropped: frozenset[int]) -> None:
        with self._lock:
            self._found[key] = tuple(sorted(dropped))
            self._found.move_to_end(key)
            while len(self._found) > self.entries:
                self._found.popitem(last=False)

    def __len__(self) -> int:
        return len(self._found)


#: The memo the engine uses: shared by every reply of the process.
DROPS = DropMemo()


def _more_drops(msgs: Sequence[dict[str, Any]], turn: int, keep_system: bool, dropped: frozenset[int],
                count: Count, limit: int, target: int, *, known_over: bool = False,
                keep: list[int] | None = None) -> tuple[frozenset[int], bool]:
    """``dropped`` as it is if what it keeps fits ``limit``; else with more of the drop
    order (what its steps still hold) until what is kept is at most ``target`` by an
    exact count, or, where no step gets there, the first that fits ``limit``. The flag
    says whether it fits; when nothing does, every step is dropped. ``known_over``: the
    caller counted what ``dropped`` keeps, and it is over the limit; ``keep``: the
    indexes not in ``dropped``, ascending, where the caller has them."""
    if keep is None:
        keep = [i for i in range(len(msgs)) if i not in dropped]
    sub = [msgs[i] for i in keep]
    # Steps drop whole groups, so what is kept is whole groups, and the drop order of
    # the kept messages is the order's rest: counted over them alone, not the history.
    rest_steps = [(r, False) for r, _ in drop_order(sub, bisect.bisect_left(keep, turn), keep_system)]
    if target >= limit:  # the fewest steps that fit; the search counts no more than it must
        k = _first_fitting_step(sub, rest_steps, count, limit)
    else:
        if not known_over and count(sub) <= limit:  # what stays dropped is enough: one count
            return dropped, True
        k = _first_fitting_step(sub, rest_steps, count, target)
        if k > len(rest_steps):
            k = _first_fitting_step(sub, rest_steps, count, limit)
    return dropped | {keep[j] for r, _ in rest_steps[:k] for j in r}, k <= len(rest_steps)


def _encoded(message: dict[str, Any]) -> bytes:
    try:
        return msgspec.json.encode(message, order="sorted")
    except (TypeError, msgspec.EncodeError):
        return repr(sorted(message.items(), key=lambda kv: str(kv[0]))).encode("utf-8", "surrogatepass")


def stable_drops(msgs: Sequence[dict[str, Any]], turn: int, keep_system: bool, count: Count, limit: int,
                 low_water: float, *, memo: DropMemo | None = None, salt: bytes = b"") -> tuple[frozenset[int], bool]:
    """The history this request drops: ``(indexes, whether what is kept fits limit)``.

    The conversation is taken as its turns were sent: each earlier user message ended
    one request (everything before it was that request's history), and the current one
    ends at the last user message. From the first turn on, each turn keeps what the turn
    before dropped while the rest fits and otherwise drops down to ``low_water`` of the
    limit (:func:`_more_drops`); a request that goes on past the last user message (tool
    calls and their results) continues from its turn's start in the same way. ``memo``
    remembers each turn's drops under a hash of ``salt`` and the conversation up to it,
    so only the turns not found are worked out; ``salt`` names what the counts depend on
    (the model, its tools, the limit). With ``low_water`` 1 there is nothing to keep
    stable: the request drops the fewest steps that fit, as if it were the first."""
    target = max(1, min(limit, int(limit * low_water)))
    if target >= limit:  # no low water: each request drops only what it must, from nothing
        return _more_drops(msgs, turn, keep_system, frozenset(), count, limit, limit)
    last_user = current_turn_start(msgs)
    ends = [u + 1 for u in range(turn) if msgs[u].get("role") == "user"] + [max(last_user, turn) + 1]
    starts = [e - 1 for e in ends[:-1]] + [turn]
    h = hashlib.blake2b(salt + repr((limit, target)).encode(), digest_size=16)
    keys, at = [], 0
    for end in ends:
        for m in msgs[at:end]:
            h.update(_encoded(m))
            h.update(b"\x1e")
        at = end
        keys.append(h.copy().digest())
    first, dropped = 0, frozenset[int]()
    for j in range(len(keys) - 1, -1, -1):
        found = memo.get(keys[j]) if memo is not None else None
        if found is not None:
            first, dropped = j + 1, found
            break

    gone = np.zeros(len(msgs), dtype=bool)  # what ``dropped`` holds, as a mask

    def over(j: int) -> bool:  # turn j's conversation, less what is dropped, is over the limit
        return count([msgs[i] for i in np.flatnonzero(~gone[:ends[j]]).tolist()]) > limit

    # Replayed a drop at a time, not a turn at a time: while nothing more is dropped,
    # each turn's prompt is the one before with more after it, so its count only grows,
    # and the first turn over the limit is found by galloping and bisecting.
    fits, last = None, len(keys) - 1
    gone[list(dropped)] = True
    while first <= last:
        turn_over = _first_true(first, last, over)
        if turn_over is None:
            fits = True
            break
        end = ends[turn_over]
        before = dropped
        dropped, fits = _more_drops(msgs[:end], starts[turn_over], keep_system, dropped, count, limit, target,
                                    known_over=True, keep=np.flatnonzero(~gone[:end]).tolist())
        gone[list(dropped - before)] = True
        if memo is not None:
            memo.put(keys[turn_over], dropped)
        first = turn_over + 1
    if memo is not None:
        memo.put(keys[last], dropped)
    if fits is None or ends[-1] < len(msgs):
        dropped, fits = _more_drops(msgs, turn, keep_system, dropped, count, limit, target)
    return dropped, fits


def previous_cut(msgs: Sequence[dict[str, Any]], turn: int, keep_system: bool, count: Count, limit: int,
                 low_water: float, *, memo: DropMemo | None = None, salt: bytes = b"") -> frozenset[int]:
    """What the request before this one dropped (:func:`stable_drops` of the conversation
    up to the last user message before ``turn``): the start a model still holds. Empty
    for a first request, and with ``low_water`` 1, which keeps nothing stable. Its turns
    are found in ``memo`` when the requests before were fitted with it."""
    target = max(1, min(limit, int(limit * low_water)))
    users = [u for u in range(turn) if msgs[u].get("role") == "user"]
    if target >= limit or not users:
        return frozenset()
    last = users[-1]
    return stable_drops(msgs[:last + 1], last, keep_system, count, limit, low_water, memo=memo, salt=salt)[0]


def _first_true(lo: int, hi: int, test: Callable[[int], bool]) -> int | None:
    """The smallest ``k`` in ``[lo, hi]`` with ``test(k)``, for a test false then true;
    None when it is false at ``hi``. Gallops from ``lo`` (a drop is most often soon
    after the last), then bisects."""
    step, below = 1, lo - 1  # test(below) is false (or below is before lo)
    probe = lo
    while True:
        if test(probe):
            break
        below = probe
        if probe == hi:
            return None
        probe = min(hi, probe + step)
        step *= 2
    top = probe  # test(top) is true
    while top - below > 1:
        mid = (below + top) // 2
        if test(mid):
            top = mid
        else:
            below = mid
    return top


def fit_conversation(messages: Sequence[dict[str, Any]], *, count: Count, limit: int, analysis_on: bool,
                     notes_room: int, clip_chars: int, turn_start: int | None = None, item_room: int = 0,
                     item_room_least: int | None = None, low_water: float = 1.0, memo: DropMemo | None = None,
                     salt: bytes = b"") -> Fit:
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
    item_room_least : int, optional
        The least of that an item can do with (its notes shown in less room): taken
        only when the full room does not fit; :attr:`Fit.item_room` says which.
    clip_chars : int
        Characters kept of each tool result when analysis is off.
    turn_start : int, optional
        Where the current turn starts (default: the last user message); attached
        files that precede the question belong to it.
    low_water : float
        Where a drop goes down to, as a share of ``limit`` (1.0: only what must go,
        every turn at the window's edge; see :func:`stable_drops`).
    memo, salt
        Where earlier turns' drops are remembered, and what the counts depend on
        (:func:`stable_drops`).

    Raises
    ------
    ContextOverflow
        Analysis is off and the current turn alone does not fit.
    """
    msgs = list(messages)  # copied below only where kept: the caller's dicts are never changed
    turn = current_turn_start(msgs) if turn_start is None else turn_start
    keep_system = bool(msgs) and msgs[0].get("role") == "system"
    steps = drop_order(msgs, turn, keep_system)
    dropped_now, fits = stable_drops(msgs, turn, keep_system, count, limit, low_water, memo=memo, salt=salt)
    dropped = set(dropped_now) if fits else {i for new, _ in steps for i in new}
    research = len(dropped & {i for new, is_research in steps if is_research for i in new})

    def kept() -> list[dict[str, Any]]:
        return [dict(m) for i, m in enumerate(msgs) if i not in dropped]

    def decided(messages: list[dict[str, Any]], **more: Any) -> Fit:
        return Fit(messages, dropped=len(dropped), dropped_at=sorted(dropped), dropped_research=research, **more)

    if fits:
        return decided(kept())
    remaining = kept()
    asked_turn = turn  # in ``msgs``; ``turn`` below is in ``remaining``
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
    # Analyse the largest current-turn items until the rest fits beside the notes: at
    # their full room if that fits, else at the least room notes can have (every key
    # stays one reread away however little of the notes is shown).
    # The history comes back beside the notes from the previous request's cut, not from
    # nothing: the prompt then starts as the turns around it do (decision 0031).
    carried = previous_cut(msgs, asked_turn, keep_system, count, limit, low_water, memo=memo, salt=salt)
    candidates = sorted((i for i in range(turn, len(remaining)) if _text(remaining[i])),
                        key=lambda i: len(_text(remaining[i])), reverse=True)
    rooms = [item_room] + ([item_room_least] if item_room_least is not None and item_room_least < item_room else [])
    for each in rooms:
        analyse: list[int] = []
        trial = list(remaining)
        for i in candidates:
            analyse.append(i)
            trial[i] = {**trial[i], "content": ""}
            room = notes_room + each * len(analyse)
            if count(trial) + room <= limit:
                # What the engine is sent keeps each analysed item's content (it reads
                # them); the search counts them emptied, with their room beside.
                at, fit = _history_back(msgs, steps, dropped, {j: trial[j] for j in analyse}, count, limit - room,
                                        carried=carried)
                originals = {j: remaining[j] for j in analyse}
                for new_at, j in zip(at, analyse):
                    fit.messages[new_at] = dict(originals[j])
                fit.analysed_at = at
                fit.item_room = each
                return fit
    used = count(trial) + notes_room + rooms[-1] * len(analyse)
    raise ContextOverflow(
        f"even with every current item analysed, the prompt needs {used} tokens (notes included), over the "
        f"{limit} available; raise chat.n_ctx or lower analysis.notes_max_tokens or chat.analysis_workers",
        prompt_tokens=used, context_window=limit)


def _history_back(msgs: list[dict[str, Any]], steps: list[tuple[list[int], bool]], dropped: set[int],
                  changed: dict[int, dict[str, Any]], count: Count, limit: int,
                  carried: frozenset[int] = frozenset()) -> tuple[list[int], Fit]:
    """The end of step 3: with the current turn's items changed (``changed``: position
    among the messages left after every step in ``dropped`` -> what it becomes), the
    first drop step that fits ``limit``, from the first step that drops all of
    ``carried`` on (the previous request's cut; from none when no steps cover it). It
    drops no more than every step did, as that one is known to fit. Returns the new
    position of each changed item (in the order of ``changed``) and the fit, its
    messages with the changed items in their new form."""
    kept_all = [i for i in range(len(msgs)) if i not in dropped]  # dropped: a set
    new_form = {kept_all[j]: m for j, m in changed.items()}
    trial = [new_form.get(i, m) for i, m in enumerate(msgs)]
    start = _covering_steps(steps, carried)
    if start:
        # Steps before ``start`` as one: the search begins with them all dropped.
        merged = [([i for new, _ in steps[:start] for i in new], False), *steps[start:]]
        k = start - 1 + max(1, _first_fitting_step(trial, merged, count, limit))
    else:
        k = _first_fitting_step(trial, steps, count, limit)
    taken = steps[:k]
    gone = {i for new, _ in taken for i in new}
    kept = [i for i in range(len(msgs)) if i not in gone]
    where = {c: j for j, c in enumerate(kept)}
    fit = Fit([dict(trial[i]) for i in kept], dropped=len(gone), dropped_at=sorted(gone),
              dropped_research=sum(len(new) for new, is_research in taken if is_research))
    return [where[kept_all[j]] for j in changed], fit


def _covering_steps(steps: list[tuple[list[int], bool]], cut: frozenset[int]) -> int:
    """The fewest leading steps that drop every index of ``cut`` (0 when ``cut`` is
    empty or no number of steps does)."""
    if not cut:
        return 0
    left = set(cut)
    for k, (new, _) in enumerate(steps, 1):
        left.difference_update(new)
        if not left:
            return k
    return 0
