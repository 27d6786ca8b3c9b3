"""Slow, obviously-correct twin of the history-dropping step of
``boundctx.analysis.fitting.fit_conversation``: drop one group at a time, in order, and
count the whole kept conversation again after every step; the first that fits wins.

Its cost grows with the square of the history (every step is a full count); the fast
path must choose exactly what this chooses whenever dropping never adds tokens.
"""

from __future__ import annotations

from boundctx.analysis.fitting import drop_order


def fit_by_dropping(messages, count, limit, turn, keep_system):
    """``(kept messages, dropped indexes, research dropped)`` of the first step that
    fits, or None when no step does."""
    if count(list(messages)) <= limit:
        return list(messages), [], 0
    dropped: set[int] = set()
    research = 0
    for new, is_research in drop_order(messages, turn, keep_system):
        dropped.update(new)
        research += len(new) if is_research else 0
        kept = [m for i, m in enumerate(messages) if i not in dropped]
        if count(kept) <= limit:
            return kept, sorted(dropped), research
    return None


def fit_analysing(messages, count, limit, turn, keep_system, notes_room, item_room):
    """Step 3 done the slow way: drop every old step; empty the current turn's largest
    items one by one until the rest fits beside their notes' room; then drop old steps
    again one at a time, counting everything after each, over the conversation with
    those items emptied. ``(dropped indexes, research dropped, analysed indexes)`` in the
    caller's indexes, or None when even every item analysed does not fit."""
    found = _items_to_analyse(messages, count, limit, turn, keep_system, notes_room, item_room)
    if found is None:
        return None
    blank, chosen, room = found
    _, dropped, research = fit_by_dropping(blank, count, limit - room, turn, keep_system)
    return dropped, research, chosen


def _items_to_analyse(messages, count, limit, turn, keep_system, notes_room, item_room):
    """Every old step dropped, the current turn's largest items emptied one by one until
    the rest fits beside their notes' room: ``(the messages with them emptied, their
    indexes, the room)``, or None when even all of them do not make it fit."""
    from boundctx.analysis.fitting import _text

    steps = drop_order(messages, turn, keep_system)
    every = {i for new, _ in steps for i in new}
    rest = [i for i in range(len(messages)) if i not in every]
    items = sorted((i for i in rest if i >= turn and _text(messages[i])), key=lambda i: len(_text(messages[i])),
                   reverse=True)
    blank = list(messages)
    chosen = []
    for i in items:
        chosen.append(i)
        blank[i] = {**blank[i], "content": ""}
        room = notes_room + item_room * len(chosen)
        if count([blank[j] for j in rest]) + room <= limit:
            return blank, chosen, room
    return None


def drops_turn_by_turn(messages, count, limit, turn, keep_system, low_water):
    """The stable drops of ``fitting.stable_drops`` the slow way: ``(dropped indexes,
    whether what is kept fits)``. Each earlier user message ends a request (the
    conversation up to it), the last user message ends the current one, and a request
    that goes on past it is one more. Each request keeps the drops before it if the rest
    fits, and otherwise drops one more step at a time, counting everything again after
    each, until the rest is at most ``low_water`` of the limit (or, if no step gets
    there, until it fits the limit)."""
    from boundctx.analysis.fitting import current_turn_start

    target = max(1, min(limit, int(limit * low_water)))
    if target >= limit:
        found = fit_by_dropping(messages, count, limit, turn, keep_system)
        if found is None:
            return {i for new, _ in drop_order(messages, turn, keep_system) for i in new}, False
        return set(found[1]), True
    end = max(current_turn_start(messages), turn) + 1
    requests = [(u + 1, u) for u in range(turn) if messages[u].get("role") == "user"] + [(end, turn)]
    if end < len(messages):
        requests.append((len(messages), turn))
    dropped, fits = set(), True
    for end, start in requests:
        conv = messages[:end]

        def kept(d, conv=conv):
            return [m for i, m in enumerate(conv) if i not in d]

        if count(kept(dropped)) <= limit:
            fits = True
            continue
        steps = drop_order(conv, start, keep_system)

        def walk(bound, steps=steps, kept=kept):
            d = set(dropped)
            for new, _ in steps:
                if set(new) <= d:
                    continue
                d.update(new)
                if count(kept(d)) <= bound:
                    return d
            return None

        found = walk(target) or walk(limit)
        fits = found is not None
        dropped = found if fits else dropped | {i for new, _ in steps for i in new}
    return dropped, fits


def fit_analysing_stable(messages, count, limit, turn, keep_system, notes_room, item_room, low_water):
    """:func:`fit_analysing` with decision 0031's start: the history comes back beside the
    notes from the cut of the request before (:func:`drops_turn_by_turn` of the
    conversation up to the last user message before ``turn``). The fewest leading steps
    that drop all of that cut are dropped first, then one more step at a time, counting
    everything after each; from no drop when ``low_water`` is 1, when there is no request
    before, or when no steps cover its cut."""

    users = [u for u in range(turn) if messages[u].get("role") == "user"]
    carried = set()
    if users and max(1, min(limit, int(limit * low_water))) < limit:
        last = users[-1]
        carried = set(drops_turn_by_turn(messages[:last + 1], count, limit, last, keep_system, low_water)[0])
    steps = drop_order(messages, turn, keep_system)
    start, covered = 0, set()
    for k, (new, _) in enumerate(steps, 1):
        if not carried:
            break
        covered.update(new)
        if carried <= covered:
            start = k
            break
    found = _items_to_analyse(messages, count, limit, turn, keep_system, notes_room, item_room)
    if found is None:
        return None
    blank, chosen, room = found
    for k in range(start, len(steps) + 1):
        gone = {j for new, _ in steps[:k] for j in new}
        if count([m for j, m in enumerate(blank) if j not in gone]) <= limit - room:
            return sorted(gone), sum(len(new) for new, research in steps[:k] if research), chosen
    return sorted({j for new, _ in steps for j in new}), sum(len(new) for new, research in steps if research), chosen
