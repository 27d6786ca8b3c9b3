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
