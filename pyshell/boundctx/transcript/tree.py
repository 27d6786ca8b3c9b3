"""The tree a transcript's entries make, and the branches a reader follows.

Claude Code and pi keep a session as a tree: every entry names its parent, the file keeps
every entry in the order it was written, and a rewind starts a new child of an older
entry, leaving the old branch in the file. boundctx reads such a file along its **active
branch**: the path from a root to the newest entry (or to a leaf the caller names), with
what each agent keeps current on it (a parallel call's results, the chain across a
compaction); a replayed copy of an entry is read once. Files without parents are lists, and
read as they always were (docs/decisions/0047).

Where each line hangs is worked out once, natively, when the line is indexed
(:mod:`boundctx._native.linetree` states the rules), and kept in the layout sidecar beside
the line offsets: per line its id's hash, the line it hangs on (``up``), the messages above
it (``pos``: a message's index on any branch through it), the nearest message and the
nearest compaction at or above it (``tip``, ``comp``). A branch's newest window is a walk
of ``tip`` and ``up`` from the leaf, as long as the window; nothing is parsed. A tree in
which every line hangs on the one before (a chain: most files) keeps the last four
implicit, worked out from the message and compaction lines (decision 0053).

This module imports no numpy: ``boundctx reindex`` builds a tree with it too.
"""

from __future__ import annotations

import array
import bisect
from functools import lru_cache
from typing import NamedTuple

from boundctx._native import linetree
from boundctx.transcript.dialects import DIALECTS, FORMATS
from boundctx.transcript.sidecar import pread_exact

__all__ = ["LINK_READ_BYTES", "LONGEST_LINKED_LINE", "ROLES", "Tree", "build_tree", "entry_id", "id_hash",
           "id_index", "link_keys", "read_links"]

#: What a dialect's link keys hold, and the slot each fills.
ROLES = {"id": linetree.SLOT_ID, "parent": linetree.SLOT_PARENT,
         "logical_parent": linetree.SLOT_LOGICAL, "answers": linetree.SLOT_SOURCE}
#: Lines are read for their links in runs of about this many bytes.
LINK_READ_BYTES = 8 << 20
#: A line longer than this (its newline included) is not read for its links: it hangs on
#: the line before it (its children name it, find no such id, and hang on it all the same:
#: it is the line before them). Reading a gigabyte line whole to find a key at its end is
#: not worth it. ``filescan.scan_fd`` keeps the same limit when it reads links.
LONGEST_LINKED_LINE = linetree.LONGEST_LINKED_LINE


@lru_cache(maxsize=None)
def link_keys(dialect: str) -> tuple[tuple[bytes, int], ...]:
    """The ``(key, slot)`` pairs of dialect ``dialect`` (``auto``: every format's)."""
    formats = FORMATS if dialect == "auto" else (DIALECTS[dialect],)
    out: dict[bytes, int] = {}
    for d in formats:
        for key, role in d.links.items():
            slot = ROLES[role]
            if out.setdefault(key.encode(), slot) != slot:
                raise RuntimeError(f"the dialects give the link key {key!r} two roles")
    return tuple(out.items())


def id_hash(text: str) -> int:
    """The hash the tree keeps of an entry id ``text``, as int64 bits (the native rule:
    FNV-1a over its UTF-8, a lone surrogate as Python's ``surrogatepass`` writes it,
    never below 2)."""
    h = 0xCBF29CE484222325
    for byte in text.encode("utf-8", "surrogatepass"):
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    if h < 2:
        h += 2
    return h - (1 << 64) if h >= 1 << 63 else h


def entry_id(record: dict, dialect: str) -> str | None:
    """An entry's own id, by the keys the dialect gives it (the last present wins)."""
    found = None
    for key, slot in link_keys(dialect):
        value = record.get(key.decode())
        if slot == linetree.SLOT_ID and isinstance(value, str):
            found = value
    return found


def read_links(fd: int, starts, first: int, count: int, end: int,
               keys: tuple[tuple[bytes, int], ...], *, data: bytes | None = None,
               base: int = 0) -> bytes:
    """The links of lines ``first...first + count - 1`` (``starts``: every line's start
    offset, int64; ``end``: where the last line there is ends). From ``data`` (the bytes
    at file offset ``base``) when given, else read from ``fd`` in runs of about
    :data:`LINK_READ_BYTES`; a line longer than :data:`LONGEST_LINKED_LINE` has none."""
    starts = _i64(starts)
    if count <= 0:
        return b""
    if data is not None:
        return linetree.line_links(data, starts, first, count, end, base, keys)
    nstarts = len(starts)
    out: list[bytes] = []
    k = first
    stop = first + count
    while k < stop:
        lo = starts[k]
        # The run: lines k..j-1, as many as start within LINK_READ_BYTES of line k.
        j = min(max(bisect.bisect_left(starts, lo + LINK_READ_BYTES, k + 1, stop), k + 1), stop)
        hi = starts[j] if j < nstarts else end
        if j == k + 1 and hi - lo > LONGEST_LINKED_LINE:
            out.append(bytes(8 * linetree.SLOTS))  # too long to read for its links
        else:
            buf = pread_exact(fd, lo, hi - lo)
            if len(buf) != hi - lo:
                raise OSError(f"the file ended at byte {lo + len(buf)}, inside line {j - 1}")
            out.append(linetree.line_links(buf, starts, k, j - k, end, lo, keys))
        k = j
    return b"".join(out)


class Tree(NamedTuple):
    """The tree arrays of some lines (int64 bytes each, ``ids`` the hashes' bits) and
    whether, with the lines before them, they still read as a list, and as a chain:
    every line hung on the line before it (decision 0053). The places of a chain's
    lines are not made (``pos``, ``tip`` and ``comp`` are None): they follow from the
    message and compaction lines (:class:`~boundctx.transcript.arrays.ChainPlaces`)."""

    ids: bytes
    up: bytes
    pos: bytes | None
    tip: bytes | None
    comp: bytes | None
    reads_as_list: bool
    chain: bool = False


def build_tree(fd: int, starts: bytes, end: int, kinds: bytes, dialect: str, *,
               links: bytes | None = None) -> Tree:
    """The tree of a whole file, from its scan (``starts`` and ``kinds`` of every line,
    ``end`` the indexed end; ``links``: theirs, when the scan read them, else they are
    read here): what ``reindex`` writes, and an open's first build."""
    n = len(kinds)
    if links is None:
        links = read_links(fd, starts, 0, n, end, link_keys(dialect))
    return grow(links, kinds, 0, linetree.IdTable(n), chain_before=True)


def grow(links: bytes, kinds: bytes, line0: int, table, *, up_before: bytes = b"",
         last_kept: int = -1, refs=None, messages_before: int = 0,
         compaction_before: int = -1, chain_before: bool = False) -> Tree:
    """The tree arrays of lines ``line0...`` from their links and kinds. ``table`` holds
    the ids of the lines before (and takes theirs); ``up_before``: ``up`` of the lines
    just before ``line0`` (up to ``FANOUT_SPAN`` of them); ``last_kept``: the newest line
    before ``line0`` that is not a copy; ``refs(lines)``: ``(pos, tip, comp)`` of earlier
    lines, as int64 buffers; ``messages_before`` and ``compaction_before`` as
    :func:`linetree.reads_as_list` takes them; ``chain_before``: the lines before
    ``line0`` are a chain, so new lines that go on with it are one too, and get no
    places made."""
    ids, up = linetree.hang_lines(_u64(links), table, line0, _i64(up_before), last_kept)
    if chain_before and linetree.hangs_as_chain(_i64(up), line0):
        return Tree(ids, up, None, None, None, True, True)
    if line0 and refs is not None:
        ref_lines = sorted({u for u in _i64(up) if 0 <= u < line0})
        ref_b = array.array("q", ref_lines).tobytes()
        ref_pos, ref_tip, ref_comp = refs(ref_b)
    else:
        ref_b = ref_pos = ref_tip = ref_comp = b""
    pos, tip, comp = linetree.place_lines(_i64(up), kinds, line0, _i64(ref_b), _i64(ref_pos),
                                          _i64(ref_tip), _i64(ref_comp))
    as_list = linetree.reads_as_list(kinds, _i64(pos), _i64(comp), _i64(up), line0, messages_before,
                                     compaction_before)
    return Tree(ids, up, pos, tip, comp, as_list)


def id_index(ids, up, line0: int = 0) -> tuple[bytes, bytes]:
    """``(keys, lines)``: the sorted ids of the lines ``line0...`` that have one and are not
    copies, and the line of each (int64 bytes), as a sidecar segment keeps them."""
    return linetree.id_index(_i64(ids), _i64(up), line0)


def _i64(data) -> memoryview:
    """``data`` (a bytes-like of int64) as the typed view the native functions take."""
    return memoryview(data).cast("B").cast("q")


def _u64(data) -> memoryview:
    return memoryview(data).cast("B").cast("Q")
