"""Slow, obviously-correct twin of ``boundctx._native.linetree`` and of the branch reads.

Written from the rules in the native module's docstring, not from its code: each line is
parsed whole with ``json.loads``; where each line hangs is worked out by the rules read
plainly (a dictionary of ids, a full walk up for every "does this descend from that");
a branch is every line on the way up from its leaf, and its messages are those of them
that are messages, in file order.

- ``links_of_line(raw, keys)``: the four links of one line.
- ``hang(links)``: ``up`` of every line.
- ``place(up, kinds)``: ``(pos, tip, comp)`` of every line.
- ``reads_as_list(kinds, pos, comp, up)``.
- ``branch_messages(up, kinds, leaf)``: the message lines of the branch to ``leaf``.
- ``active_leaf(up, kinds)``: the newest message or compaction that is not a copy.
"""

from __future__ import annotations

import json

SLOT_ID, SLOT_PARENT, SLOT_LOGICAL, SLOT_SOURCE = range(4)
ABSENT, NULL = 0, 1
ROOT, COPY = -1, -3
FANOUT_SPAN = 4096
MESSAGE, COMPACTION, CORRUPT = 1, 2, 4


def id_hash(text: str) -> int:
    """FNV-1a, 64 bits, over the text's UTF-8 (lone surrogates as surrogatepass writes
    them), moved up by 2 when below 2 (0 and 1 mean "absent" and "null")."""
    h = 0xCBF29CE484222325
    for byte in text.encode("utf-8", "surrogatepass"):
        h = ((h ^ byte) * 0x100000001B3) % (1 << 64)
    return h + 2 if h < 2 else h


class _Pairs(list):
    """An object's members in order, as ``json.loads`` hands them over (a plain list would
    not tell an object from an array)."""


def links_of_line(raw: bytes, keys) -> tuple[int, int, int, int]:
    """The links of one line (its bytes, a trailing newline allowed). A line that is not
    one JSON object has none; where a slot's key appears twice, or two of its names
    appear, the last in the line counts."""
    body = raw[:-1] if raw.endswith(b"\n") else raw
    if body.startswith(b"\xef\xbb\xbf"):
        body = body[3:]
    try:
        pairs = json.loads(body.decode("utf-8"), object_pairs_hook=_Pairs)
    except (ValueError, RecursionError):
        return (ABSENT,) * 4
    if not isinstance(pairs, _Pairs):  # an array, a string, a number: not an object
        return (ABSENT,) * 4
    names = {name.decode(): slot for name, slot in keys}
    found = [ABSENT] * 4
    for key, value in pairs:
        if key in names:
            if isinstance(value, str):
                found[names[key]] = id_hash(value)
            elif value is None:
                found[names[key]] = NULL
            else:
                found[names[key]] = ABSENT
    return tuple(found)


def hang(links: list[tuple[int, int, int, int]]) -> list[int]:
    """Where each line hangs, by the four rules."""
    first_line_of: dict[int, int] = {}
    up: list[int] = []
    for i, (own, parent, logical, source) in enumerate(links):
        if own >= 2 and own in first_line_of:
            up.append(COPY)
            continue
        earlier = [j for j in range(i) if up[j] != COPY]
        prev = earlier[-1] if earlier else -1
        if parent == NULL:
            where = first_line_of.get(logical, prev) if logical >= 2 else prev
        elif parent >= 2 and parent in first_line_of:
            where = first_line_of[parent]
            if source == parent and i - where - 1 <= FANOUT_SPAN:
                for c in range(i - 1, where, -1):
                    if _descends(up, c, where):
                        where = c
                        break
        else:
            where = prev
        if own >= 2:
            first_line_of[own] = i
        up.append(where)
    return up


def hangs_as_chain(up: list[int], line0: int = 0) -> bool:
    """Whether each line hangs on the line just before it (the first of a file on nothing)."""
    return all(u == line0 + k - 1 for k, u in enumerate(up))


def _descends(up: list[int], c: int, a: int) -> bool:
    while c >= 0:
        if c == a:
            return True
        c = up[c]
    return False


def in_sequence(kind: int) -> bool:
    return kind in (MESSAGE, CORRUPT)


def ancestors(up: list[int], line: int) -> list[int]:
    """The line and every line above it, root last."""
    out = []
    while line >= 0:
        out.append(line)
        line = up[line]
    return out


def place(up: list[int], kinds: list[int]) -> tuple[list[int], list[int], list[int]]:
    pos, tip, comp = [], [], []
    for i, u in enumerate(up):
        if u == COPY:
            pos.append(-1)
            tip.append(-1)
            comp.append(-1)
            continue
        above = ancestors(up, u) if u >= 0 else []
        pos.append(sum(1 for a in above if in_sequence(kinds[a])))
        mine = [i] + above
        tip.append(next((a for a in mine if in_sequence(kinds[a])), -1))
        comp.append(next((a for a in mine if kinds[a] == COMPACTION), -1))
    return pos, tip, comp


def reads_as_list(kinds: list[int], pos: list[int], comp: list[int], up: list[int]) -> bool:
    seen = 0
    last = -1
    for i, kind in enumerate(kinds):
        if in_sequence(kind):
            if pos[i] != seen or comp[i] != last:
                return False
            seen += 1
        elif kind == COMPACTION:
            # ...and the compaction above the line it hangs on is the one before it in
            # the file (two compactions hung on one line are a fork)
            if pos[i] != seen or (comp[up[i]] if up[i] >= 0 else -1) != last:
                return False
            last = i
    return True


def active_leaf(up: list[int], kinds: list[int]) -> int:
    for i in range(len(up) - 1, -1, -1):
        if up[i] != COPY and (in_sequence(kinds[i]) or kinds[i] == COMPACTION):
            return i
    return -1


def branch_messages(up: list[int], kinds: list[int], leaf: int) -> list[int]:
    if leaf < 0:
        return []
    return sorted(a for a in ancestors(up, leaf) if in_sequence(kinds[a]))


def branch_compactions(up: list[int], kinds: list[int], leaf: int) -> list[int]:
    if leaf < 0:
        return []
    return sorted(a for a in ancestors(up, leaf) if kinds[a] == COMPACTION)
