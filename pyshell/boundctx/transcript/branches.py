"""The branches of a layout's tree: which leaf a read follows, the messages of its branch,
the compactions on it, and the list of every branch.

The tree is built when lines are indexed (:mod:`boundctx.transcript.tree`); here it is only
walked. A layout whose tree reads as a list has one branch, the message sequence itself,
and reads go the list's way; otherwise a branch's newest window is a walk of ``tip`` and
``up`` from its leaf, as long as the window, over arrays read in growing spans near it,
and an older page walks the branch whole once and keeps it (:class:`BranchCache`).
"""

from __future__ import annotations

from typing import NamedTuple

import msgspec
import numpy as np

from boundctx._native import linetree
from boundctx.transcript.kinds import LineKind
from boundctx.transcript.layout import Layout

__all__ = ["Branch", "BranchCache", "active_leaf", "branch_compactions", "branch_lines",
           "branch_size", "list_branches", "NEWEST_WALK", "resolve_leaf"]

_i8 = np.dtype("<i8")
#: A window of at most this many messages that ends at the leaf is walked from the leaf;
#: older pages walk the branch whole once (and keep it).
NEWEST_WALK = 4096
#: Lines of ``tip`` and ``up`` read near the leaf for a first walk (doubled until enough).
_FIRST_SPAN = 1024


class Branch(msgspec.Struct, frozen=True, kw_only=True):
    """One branch of a transcript's tree, named by its leaf.

    Attributes
    ----------
    leaf : int
        The line of its leaf (pass it as ``leaf`` to read this branch): its newest
        message, or for the active branch the newest line reads follow (a compaction
        after its newest message).
    leaf_id : str or None
        That entry's own id, when it has one.
    message_count : int
        Messages on the branch, root to leaf.
    shared : int
        Messages it shares with the active branch (from the root): where it forks.
    active : bool
        Whether this is the branch reads follow by default.
    """

    leaf: int
    leaf_id: str | None
    message_count: int
    shared: int
    active: bool


class BranchCache(NamedTuple):
    """A branch walked whole: its leaf, the layout state it was walked on, its message
    lines root first."""

    leaf: int
    line_count: int
    lines: np.ndarray


#: The kinds of line a branch can end at.
_LEAF_KINDS = frozenset({LineKind.MESSAGE, LineKind.CORRUPT, LineKind.COMPACTION})


def active_leaf(layout: Layout) -> int:
    """The line reads follow by default: the newest message or compaction that is not a
    replayed copy (-1: there is none). A rewind starts with a message, so the newest
    message names the branch in use; progress and bookkeeping lines do not."""
    hi = layout.line_count
    if hi and layout.kinds[hi - 1] in _LEAF_KINDS and layout.up[hi - 1] != linetree.COPY:
        return hi - 1  # the newest line, as it mostly is: two elements read, not a block
    while hi > 0:
        lo = max(0, hi - 1024)
        kinds = layout.kinds.slice(lo, hi)
        up = layout.up.slice(lo, hi)
        ok = np.flatnonzero(((kinds == LineKind.MESSAGE) | (kinds == LineKind.CORRUPT)
                             | (kinds == LineKind.COMPACTION)) & (up != linetree.COPY))
        if len(ok):
            return lo + int(ok[-1])
        hi = lo
    return -1


def resolve_leaf(layout: Layout, leaf: int | None) -> int:
    """The leaf a read follows: the active one, or ``leaf`` (a line number) checked."""
    if leaf is None:
        return active_leaf(layout)
    if not 0 <= leaf < layout.line_count:
        raise ValueError(f"leaf={leaf} is not a line of the transcript; it has {layout.line_count} lines")
    if layout.up[leaf] == linetree.COPY:
        raise ValueError(f"leaf={leaf} is a replayed copy of an earlier entry, on no branch of its own; "
                         "name the earlier entry's line")
    return leaf


def branch_size(layout: Layout, leaf: int) -> tuple[int, int]:
    """``(messages, newest message line)`` of the branch ending at ``leaf`` (-1: none)."""
    if leaf < 0:
        return 0, -1
    top = layout.tip[leaf]
    if top < 0:
        return 0, -1
    return layout.pos[top] + 1, top


def branch_lines(layout: Layout, leaf: int, lo_index: int, hi_index: int,
                 cache: BranchCache | None = None) -> tuple[np.ndarray, BranchCache | None]:
    """The message lines ``lo_index..hi_index - 1`` of the branch ending at line ``leaf``,
    root first, and the cache for the next page: a window that ends at the leaf and
    holds at most :data:`NEWEST_WALK` messages is a walk from it; any other walks the
    branch whole once, and the whole branch is kept (``cache``, while the layout holds
    the same lines) for the pages after it."""
    if hi_index <= lo_index:
        return np.empty(0, dtype=_i8), cache
    if cache is not None and cache.leaf == leaf and cache.line_count == layout.line_count:
        return cache.lines[lo_index:hi_index], cache
    count, top = branch_size(layout, leaf)
    if hi_index == count and count - lo_index <= NEWEST_WALK:
        return _walk(layout, top, count - lo_index)[::-1].copy(), cache
    whole = _walk(layout, top, count)[::-1].copy()
    if len(whole) != count:
        raise _lies(f"the branch to line {top} holds {len(whole)} messages, not {count}")
    return whole[lo_index:hi_index], BranchCache(leaf, layout.line_count, whole)


def _walk(layout: Layout, top: int, limit: int) -> np.ndarray:
    """Up to ``limit`` message lines of the branch from line ``top`` up, newest first,
    reading ``tip`` and ``up`` in spans that double near the leaf until the walk fits."""
    span = _FIRST_SPAN
    while True:
        lo = max(0, top + 1 - span)
        tip = np.ascontiguousarray(layout.tip.slice(lo, top + 1), dtype=_i8)
        up = np.ascontiguousarray(layout.up.slice(lo, top + 1), dtype=_i8)
        out, short = linetree.branch_lines(tip, up, lo, top, limit)
        lines = np.frombuffer(out, dtype=_i8)
        if not short or lo == 0:
            # Reads of a sidecar's arrays are trusted only as far as they agree: lines
            # must go up the file, and hold one message each.
            if len(lines) > 1 and not bool(np.all(lines[1:] < lines[:-1])):
                raise _lies("a branch's messages do not go up the file")
            return lines
        span *= 4


def branch_compactions(layout: Layout, first: int, last: int, anchor: int,
                       limit: int | None) -> tuple[np.ndarray, int]:
    """Compaction lines for a window of a branch whose first and last messages are lines
    ``first`` and ``last`` (-1, -1 for an empty window, ``anchor`` then the line it is
    anchored at): the one in force at the first message and, up to ``limit`` (the newest),
    those between; and how many between were left out."""
    if first < 0:
        c = layout.comp[anchor] if anchor >= 0 else -1
        return (np.array([c], dtype=_i8) if c >= 0 else np.empty(0, dtype=_i8)), 0
    inside: list[int] = []
    c = layout.comp[last]
    while c > first:
        inside.append(c)
        u = layout.up[c]
        c = layout.comp[u] if u >= 0 else -1
    in_force = c
    keep = len(inside) if limit is None else min(len(inside), limit)
    chosen = inside[:keep][::-1]
    if in_force >= 0:
        chosen.insert(0, in_force)
    return np.array(chosen, dtype=_i8), len(inside) - keep


def list_branches(layout: Layout, ids_of) -> list[Branch]:
    """Every branch of the tree, by its leaf message: the active one first, then the
    others newest first. ``ids_of(lines)`` reads the entries' own ids."""
    kinds = layout.kinds.all()
    up = layout.up.all()
    tip = layout.tip.all()
    pos = layout.pos.all()
    seq = np.flatnonzero(((kinds == LineKind.MESSAGE) | (kinds == LineKind.CORRUPT)) & (up != linetree.COPY))
    parents = up[seq]
    hung = parents >= 0
    before = np.full(len(seq), -1, dtype=_i8)
    before[hung] = tip[parents[hung]]
    leaves = np.setdiff1d(seq, before[before >= 0])
    active = active_leaf(layout)
    active_top = int(tip[active]) if active >= 0 else -1
    on_active = set(_walk(layout, active_top, int(pos[active_top]) + 1).tolist()) if active_top >= 0 else set()
    # The active branch first (by its leaf, which may be a compaction after a message
    # other branches go on from), then the others, newest first.
    order = ([active] if active_top >= 0 else []) + sorted(
        (m for m in leaves.tolist() if m != active_top), reverse=True)
    ids = ids_of(order)
    out: list[Branch] = []
    for m, leaf_id in zip(order, ids):
        top = int(tip[m])
        x = top
        while x >= 0 and x not in on_active:
            u = int(up[x])
            x = int(tip[u]) if u >= 0 else -1
        shared = int(pos[x]) + 1 if x >= 0 else 0
        out.append(Branch(leaf=m, leaf_id=leaf_id, message_count=int(pos[top]) + 1, shared=shared,
                          active=m == active))
    return out


def _lies(why: str) -> Exception:
    from boundctx.transcript.arrays import SidecarLies

    return SidecarLies(f"the layout's tree lies: {why}")
