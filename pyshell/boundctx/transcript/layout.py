"""The layout of a transcript: where each line starts and what kind it is.

A layout is a disposable cache. It is built by the native line index, kept in a sidecar
file so the next open costs a ``stat``, two 4 KiB reads and a few small reads, and checked
again on every read. Nothing in it is trusted: a missing, old, foreign, truncated or
lying sidecar is rebuilt.

The sidecar's format is in :mod:`boundctx.transcript.sidecar`; extensions are appended
as new segments, so growing a 1 GB transcript by a few lines never rewrites the arrays;
past ``MAX_SEGMENTS`` the file is rewritten whole.
"""

from __future__ import annotations

import fcntl
import os
import zlib
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

import msgspec
import numpy as np

from boundctx._native import filescan, lineindex, linetree
from boundctx.transcript.arrays import (
    ChainPlaces,
    Chunked,
    FileArray,
    SidecarFile,
    SidecarGone,
    SidecarLies,
)
from boundctx.transcript.dialects import native_table, settle_undecided
from boundctx.transcript.kinds import DEFAULT_CLASSIFY_WINDOW, LineKind
from boundctx.transcript.sidecar import (
    FORMAT_VERSION,
    MAGIC,
    SEG_HEAD,
    Identity,
    beside_allowed,
    encode_header,
    file_hashes,
    pad8,
    segment_pieces,
    sidecar_paths,
    write_first_place,
)
from boundctx.transcript.tree import grow, id_index, link_keys, read_links

__all__ = [
    "Judgement",
    "Layout",
    "Outcome",
    "Verdict",
    "build_layout",
    "decode_header",
    "extend_layout",
    "judge",
    "load_layout",
    "save_layout",
]

MAX_SEGMENTS = 16
# Segments of at most this many lines are read into memory and checked whole on load.
SMALL_SEGMENT = 1 << 16



def is_sequence(kinds: np.ndarray) -> np.ndarray:
    """Mask of the lines that are in the message sequence (faster than np.isin)."""
    return (kinds == LineKind.MESSAGE) | (kinds == LineKind.CORRUPT)


def lines_of_kinds(kinds, line0: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Line numbers of the message sequence and of compactions, derived from kinds
    (``line0`` is the number of the first line)."""
    if not isinstance(kinds, (bytes, bytearray)):
        kinds = np.ascontiguousarray(kinds, dtype=np.uint8)
    messages, compactions = lineindex.sequence_lines(kinds, line0)
    return np.frombuffer(messages, dtype=_i8), np.frombuffer(compactions, dtype=_i8)


def arrays_disagree(starts: np.ndarray, kinds: np.ndarray, messages: np.ndarray,
                    compactions: np.ndarray, *, line0: int, start: int, end: int) -> str | None:
    """Why arrays held in memory for lines ``line0...`` (bytes ``start:end``) do not
    agree with each other, or None when they do."""
    if len(starts) and (int(starts[0]) != start or int(starts[-1]) >= end):
        return "line offsets outside their range"
    # Compared, never subtracted: np.diff wraps on int64, so a huge positive offset
    # followed by a huge negative one would pass as "increasing".
    if len(starts) > 1 and not bool(np.all(starts[1:] > starts[:-1])):
        return "line offsets not increasing"
    seq, comp = lines_of_kinds(kinds, line0)
    if not (np.array_equal(seq, messages) and np.array_equal(comp, compactions)):
        return "message or compaction lines disagree with the line kinds"
    return None
_i8 = np.dtype("<i8")


#: How a layout came to be for an open: built (no sidecar), loaded "valid", loaded and
#: extended over appended bytes ("extend"), or rebuilt (a sidecar or a read said so).
Outcome = Literal["built", "valid", "extend", "rebuilt"]
#: What a sidecar's layout can do for the file it describes (``"absent"``: there is none).
Verdict = Literal["valid", "extend", "rebuild", "absent"]


class Judgement(NamedTuple):
    """A verdict on a layout, and for ``"rebuild"`` (or ``"absent"``) why."""

    verdict: Verdict
    reason: str = ""


def _lines_outside(layout: Layout, lo: int, hi: int) -> SidecarLies:
    """Arrays read on demand from a sidecar are checked only at their ends on load: every
    offset handed out must lie inside the indexed bytes, and every line must hold at
    least its ``\\n``, or reads would go to negative offsets, past the file, or ask for
    absurd lengths. A layout that fails this lied."""
    return SidecarLies(f"the layout puts lines {lo}..{hi - 1} outside the indexed bytes "
                       f"0..{layout.indexed_end} or makes one end before it starts")


class LineSpan:
    """Lines ``lo..hi - 1`` of a layout as one read: ``offs`` their start offsets and the
    end of the last (``hi - lo + 1`` native int64s), ``kinds`` theirs (a byte each). A
    reader keeps the span it read last, so the checks and reads of one window fetch each
    array once. Bytes, not arrays: a window compares them with a rescan's bytes and
    slices them into lists, and a small numpy step costs more than the work it does."""

    __slots__ = ("lo", "hi", "offs", "kinds", "_lists")

    def __init__(self, lo: int, hi: int, offs: bytes, kinds: bytes) -> None:
        self.lo = lo
        self.hi = hi
        self.offs = offs
        self.kinds = kinds
        self._lists: tuple[list[int], list[int]] | None = None

    def covers(self, lo: int, hi: int) -> bool:
        return self.lo <= lo and hi <= self.hi

    def lists(self) -> tuple[list[int], list[int]]:
        """``offs`` and ``kinds`` as lists of ints (made once)."""
        if self._lists is None:
            self._lists = (memoryview(self.offs).cast("q").tolist(), list(self.kinds))
        return self._lists


@dataclass
class Layout:
    """Line offsets and kinds of one transcript, up to ``indexed_end``.

    Attributes
    ----------
    starts : Chunked
        Start offset of every complete line; line ``i`` spans up to the next line's
        start (or ``indexed_end``), its ``\\n`` included.
    kinds : Chunked
        Kind byte per line, chunked like ``starts``.
    messages, compactions : Chunked
        Line numbers of the message sequence and of compaction lines.
    ids, up, pos, tip, comp : Chunked
        The tree of the entries (:mod:`boundctx.transcript.tree`): per line its id's
        hash (as int64 bits), the line it hangs on, the messages above it, the nearest
        message and compaction at or above it.
    reads_as_list : bool
        Every message follows the one before it in the file: the tree is a list, read
        as one (the message arrays above are its only branch).
    reads_as_chain : bool
        Every line hangs on the line before it (decision 0053): ``up``, ``pos``, ``tip``
        and ``comp`` are worked out from the message and compaction lines
        (:class:`~boundctx.transcript.arrays.ChainPlaces`), and a sidecar stores none
        of them. A chain reads as a list.
    indexed_end : int
        Offset just past the last ``\\n`` indexed.
    scanned_end : int
        File size when last scanned; bytes past ``indexed_end`` are a torn tail.
    """

    dialect: str
    classify_window: int
    identity: Identity
    starts: Chunked = field(default_factory=Chunked)
    kinds: Chunked = field(default_factory=Chunked)
    messages: Chunked = field(default_factory=Chunked)
    compactions: Chunked = field(default_factory=Chunked)
    ids: Chunked = field(default_factory=Chunked)
    up: Chunked = field(default_factory=Chunked)
    pos: Chunked = field(default_factory=Chunked)
    tip: Chunked = field(default_factory=Chunked)
    comp: Chunked = field(default_factory=Chunked)
    reads_as_list: bool = True
    reads_as_chain: bool = True
    indexed_end: int = 0
    scanned_end: int = 0
    head_hash: str = ""
    tail_hash: str = ""
    #: how this layout came to be for this open
    outcome: Outcome = "built"
    #: segments already in the sidecar, and the first line not yet persisted
    persisted_segments: int = 0
    persisted_lines: int = 0
    persisted_end: int = 0
    sidecar_size: int = 0
    sidecar_path: str | None = None
    #: lines indexed as records that turned out not to parse (a torn write welded onto
    #: the next record looks like a record to the classifier); persisted so a sidecar
    #: that lists them is not mistaken for a lying one
    known_bad: set = field(default_factory=set)
    bad_dirty: bool = False
    #: a layout from a sidecar may lie; one scanned in this process from this file may not
    from_sidecar: bool = False
    #: per run of lines (a sidecar segment, or lines indexed since): the entry ids of its
    #: lines that are not copies, sorted, and the line of each (binary searched by an
    #: append, which so reads a few elements, never every id)
    id_index: list = field(default_factory=list)
    #: runs of lines indexed in this process whose ids are not in ``id_index`` yet:
    #: ``(line0, ids, up)``, in line order. Sorting a run's ids costs about as much as
    #: placing its lines, and only an append (``lines_of_ids``) reads the index, so a
    #: build that is then only read never pays for it; the first append sorts them, in
    #: order, into the runs it would have had.
    unsorted_ids: list = field(default_factory=list, repr=False)

    @property
    def line_count(self) -> int:
        return len(self.starts)

    @property
    def message_count(self) -> int:
        return len(self.messages)

    @property
    def torn_bytes(self) -> int:
        return self.scanned_end - self.indexed_end

    def line_span(self, lo: int, hi: int) -> LineSpan:
        """Lines ``lo..hi - 1`` as one read of each array: see :class:`LineSpan`. The
        offsets are checked here, once for every read of the span: they rise strictly
        and lie inside the indexed bytes, so each line of it starts in the file and
        holds at least its ``\\n`` (:meth:`line_info` says why that must hold)."""
        offs = self.starts.slice_bytes(lo, hi + 1)
        if hi == len(self.starts):
            offs += self.indexed_end.to_bytes(8, "little", signed=True)
        if not lineindex.rises_within(offs, 0, self.indexed_end):
            raise _lines_outside(self, lo, hi)
        return LineSpan(lo, hi, offs, self.kinds.slice_bytes(lo, hi))

    def line_info(self, lines: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Start offset, end offset (after the ``\\n``) and kind of each of ``lines``
        (rising strictly: readers check them first, ``LineReader.check_lines``), gathered
        element by element and checked. A window's lines (dense) are read as a span
        instead: :meth:`line_span`, ``LineReader.line_info``."""
        lines = np.asarray(lines, dtype=np.int64)
        if not len(lines):
            empty = np.empty(0, dtype=np.int64)
            return empty, empty, empty
        lo, hi = int(lines[0]), int(lines[-1]) + 1
        starts = self.starts.take(lines)
        nxt = lines + 1
        last = nxt >= len(self.starts)
        ends = np.empty_like(starts)
        ends[~last] = self.starts.take(nxt[~last])
        ends[last] = self.indexed_end
        if not (int(starts.min()) >= 0 and int(ends.max()) <= self.indexed_end and bool(np.all(ends > starts))):
            raise _lines_outside(self, lo, hi)
        return starts, ends, self.kinds.take(lines)

    def agrees(self, starts: np.ndarray, kinds: np.ndarray) -> bool:
        """Whether the arrays agree with each other throughout (O(lines): for reads that
        touch every line anyway, such as a full history)."""
        return arrays_disagree(starts, kinds, self.messages.all(), self.compactions.all(),
                               line0=0, start=0, end=self.indexed_end) is None

    # -- building -----------------------------------------------------------------

    def add_scan(self, fd: int, res, *, identity: Identity, written: bytes | None = None) -> None:
        """Append the lines of one scan (which began at ``indexed_end``; ``written``: its
        bytes, when it scanned them from memory; ``res.links``: the lines' links, when
        the scan read them, else they are read here)."""
        kinds_b = settle_undecided(fd, res, self.dialect)
        starts = np.frombuffer(res.starts, dtype=_i8)
        kinds = np.frombuffer(kinds_b, dtype=np.uint8)
        line0 = len(self.starts)
        self._grow_tree(fd, res.starts, kinds_b, line0, res.indexed_end, written, res.links)
        self.starts.extend(starts)
        self.kinds.extend(kinds)
        messages, compactions = lines_of_kinds(kinds_b, line0)
        self.messages.extend(messages)
        self.compactions.extend(compactions)
        self.indexed_end = res.indexed_end
        self.scanned_end = res.scanned_end
        self.identity = identity
        self.head_hash, self.tail_hash = file_hashes(fd, self.indexed_end)

    def _grow_tree(self, fd: int, starts_b: bytes, kinds_b: bytes, line0: int, end: int,
                   written: bytes | None, links: bytes | None) -> None:
        """Where the new lines ``line0...`` hang (before the other arrays take them)."""
        n = len(kinds_b)
        if not n:
            return
        if links is None:
            links = read_links(fd, starts_b, 0, n, end, link_keys(self.dialect), data=written,
                               base=self.indexed_end)
        # From the first line, every id goes in as it comes. Else only the ids the new lines
        # name (their own, to tell a copy; their parents) are looked up, in the sorted
        # index of each earlier run.
        table = linetree.IdTable(n)
        if line0:
            named = np.frombuffer(links, dtype=np.uint64)
            keys, lines = self.lines_of_ids(np.unique(named[named >= 2]).view(_i8))
            order = np.argsort(lines, kind="stable")
            for key, line in zip(keys[order].tolist(), lines[order].tolist()):
                table.add_ids(np.array([key], dtype=_i8).view(np.uint64), line)
        tail = min(linetree.FANOUT_SPAN, line0)
        tree = grow(links, kinds_b, line0, table,
                    up_before=np.ascontiguousarray(self.up.slice(line0 - tail, line0), dtype=_i8).tobytes(),
                    last_kept=self._last_kept(line0), refs=self._places,
                    messages_before=len(self.messages),
                    compaction_before=self.compactions[len(self.compactions) - 1] if len(self.compactions) else -1,
                    chain_before=self.reads_as_chain)
        self.ids.extend(np.frombuffer(tree.ids, dtype=_i8))
        if tree.chain:
            self._extend_chain(line0, n)
        else:
            for arr, data in ((self.up, tree.up), (self.pos, tree.pos), (self.tip, tree.tip), (self.comp, tree.comp)):
                arr.extend(np.frombuffer(data, dtype=_i8))  # type: ignore[arg-type]
        self.unsorted_ids.append((line0, tree.ids, tree.up))
        self.reads_as_list = self.reads_as_list and tree.reads_as_list
        self.reads_as_chain = self.reads_as_chain and tree.chain

    def _extend_chain(self, line0: int, n: int) -> None:
        """``up``, ``pos``, ``tip`` and ``comp`` of lines ``line0...line0 + n - 1`` of a
        chain: worked out when read, never stored."""
        for arr, what in ((self.up, "up"), (self.pos, "pos"), (self.tip, "tip"), (self.comp, "comp")):
            arr.extend(ChainPlaces(what, line0, n, self.messages, self.compactions))

    def sort_ids(self) -> None:
        """Put the runs in ``unsorted_ids`` into ``id_index``, in their order."""
        pending, self.unsorted_ids = self.unsorted_ids, []
        for line0, ids, up in pending:
            self._index_ids(*id_index_of(np.frombuffer(ids, dtype=_i8), np.frombuffer(up, dtype=_i8), line0))

    def _index_ids(self, keys: np.ndarray, lines: np.ndarray) -> None:
        """Add a run's sorted ids to ``id_index``, merged into the last run when both are
        small (so appends one line at a time keep few runs to search)."""
        if self.id_index:
            last_keys, last_lines = self.id_index[-1]
            if isinstance(last_keys, np.ndarray) and len(last_keys) + len(keys) <= SMALL_SEGMENT:
                merged_keys = np.concatenate([last_keys, keys])
                merged_lines = np.concatenate([last_lines, lines])
                # An id in both is a copy in the second (never indexed): keys stay unique.
                order = np.argsort(merged_keys, kind="stable")
                self.id_index[-1] = (merged_keys[order], merged_lines[order])
                return
        self.id_index.append((keys, lines))

    def lines_of_ids(self, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(keys, lines)``: those of the id hashes ``wanted`` (int64 bits, unique) that an
        entry has, and the first line (not a copy) that has each, by binary search in
        the sorted index of each run. A line found is checked to have the id."""
        self.sort_ids()
        found_keys, found_lines = [], []
        remaining = np.asarray(wanted, dtype=_i8)
        for keys, lines in self.id_index:
            if not len(remaining):
                break
            if not len(keys):
                continue
            at = _find_sorted(keys, remaining)
            hit = at >= 0
            if bool(hit.any()):
                found_keys.append(remaining[hit])
                found_lines.append(np.asarray(lines[at[hit]], dtype=_i8))
                remaining = remaining[~hit]  # the earliest run holding an id has its first line
        if not found_keys:
            return np.empty(0, dtype=_i8), np.empty(0, dtype=_i8)
        keys_all, lines_all = np.concatenate(found_keys), np.concatenate(found_lines)
        if int(lines_all.min()) < 0 or int(lines_all.max()) >= len(self.starts) \
                or not np.array_equal(self.ids.take(lines_all), keys_all):
            raise SidecarLies("the layout's id index names a line that does not have the id")
        return keys_all, lines_all

    def _last_kept(self, line0: int) -> int:
        """The newest line before ``line0`` that is not a replayed copy (-1: none)."""
        hi = line0
        while hi > 0:
            lo = max(0, hi - 256)
            kept = np.flatnonzero(self.up.slice(lo, hi) != linetree.COPY)
            if len(kept):
                return lo + int(kept[-1])
            hi = lo
        return -1

    def _places(self, lines: bytes) -> tuple[bytes, bytes, bytes]:
        """``(pos, tip, comp)`` of earlier ``lines`` (int64 bytes), for the tree's growth."""
        idx = np.frombuffer(lines, dtype=_i8)
        return tuple(np.ascontiguousarray(a.take(idx), dtype=_i8).tobytes()
                     for a in (self.pos, self.tip, self.comp))  # type: ignore[return-value]


def id_index_of(ids: np.ndarray, up: np.ndarray, line0: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`boundctx.transcript.tree.id_index` as arrays."""
    keys, lines = id_index(np.ascontiguousarray(ids, dtype=_i8), np.ascontiguousarray(up, dtype=_i8), line0)
    return np.frombuffer(keys, dtype=_i8), np.frombuffer(lines, dtype=_i8)


def _find_sorted(keys, wanted: np.ndarray) -> np.ndarray:
    """Where each of ``wanted`` is in sorted ``keys`` (an array, or a FileArray read by
    binary search), or -1."""
    out = np.full(len(wanted), -1, dtype=_i8)
    if isinstance(keys, np.ndarray):
        at = np.searchsorted(keys, wanted)
        ok = at < len(keys)
        ok[ok] = keys[at[ok]] == wanted[ok]
        out[ok] = at[ok]
        return out
    for k, key in enumerate(wanted.tolist()):
        at = keys.searchsorted_right(key) - 1
        if at >= 0 and int(keys[at]) == key:
            out[k] = at
    return out


def build_layout(fd: int, *, dialect: str, classify_window: int = DEFAULT_CLASSIFY_WINDOW,
                 progress=None) -> Layout:
    """Scan the whole file behind ``fd`` into a fresh layout."""
    layout = Layout(dialect=dialect, classify_window=classify_window, identity=Identity(0, 0, -1, -1))
    extend_layout(layout, fd, progress=progress)
    return layout


def extend_layout(layout: Layout, fd: int, *, progress=None, written: bytes | None = None) -> None:
    """Scan only the bytes after ``indexed_end`` (the file grew, or a torn tail was
    completed or moved aside). ``written``: the bytes this process just appended there,
    scanned from memory when the file holds exactly them after ``indexed_end``."""
    # The identity is taken *before* the scan, and the scan stops at that size: bytes
    # appended meanwhile are then beyond the recorded size, and the next read sees the
    # file grew. (Taken after, they would be recorded as seen without being indexed.)
    st = os.fstat(fd)
    if written is not None and st.st_size != layout.indexed_end + len(written):
        written = None  # the file holds more than this process wrote: scan the file
    if written is not None:
        res = lineindex.scan_bytes(written, native_table(layout.dialect), base_offset=layout.indexed_end,
                                   classify_window=layout.classify_window)
    else:
        res = filescan.scan_fd(fd, native_table(layout.dialect), start=layout.indexed_end,
                               end=max(st.st_size, layout.indexed_end),
                               classify_window=layout.classify_window, progress=progress,
                               link_keys=link_keys(layout.dialect))
    ident = Identity.of(st)
    if res.scanned_end != st.st_size:
        ident = Identity(ident.dev, ident.ino, -1, -1)  # shrank mid-scan: judge again
    layout.add_scan(fd, res, identity=ident, written=written)


# -- sidecar ------------------------------------------------------------------------


class SegmentHeader(msgspec.Struct, forbid_unknown_fields=False):
    """A segment header as read back (written by ``sidecar.encode_header``, in this
    field order: ``sidecar.HEADER_FIELDS``)."""

    v: int
    dialect: str
    window: int
    path: str
    start: int
    end: int
    scanned: int
    line0: int
    n: int
    m: int
    c: int
    k: int
    as_list: int
    chain: int
    identity: tuple[int, int, int, int]
    head: str
    tail: str
    bad: list[int] = []


def _segment_pieces(layout: Layout, path: str, line0: int, start: int) -> list:
    n = len(layout.starts) - line0
    starts = layout.starts.slice(line0, line0 + n).astype(_i8, copy=False)
    kinds = layout.kinds.slice(line0, line0 + n).astype(np.uint8)
    mlo = layout.messages.bisect_right(line0 - 1)
    clo = layout.compactions.bisect_right(line0 - 1)
    messages = layout.messages.slice(mlo, len(layout.messages)).astype(_i8, copy=False)
    compactions = layout.compactions.slice(clo, len(layout.compactions)).astype(_i8, copy=False)
    ident = layout.identity
    # A chain's sidecar stores only its ids of the tree arrays (decision 0053).
    chain = layout.reads_as_chain
    tree_arrays = [np.ascontiguousarray(a.slice(line0, line0 + n), dtype=_i8)
                   for a in ((layout.ids, layout.up) if chain else
                             (layout.ids, layout.up, layout.pos, layout.tip, layout.comp))]
    keys, lines = id_index_of(tree_arrays[0], tree_arrays[1], line0)
    tree = [a.tobytes() for a in (tree_arrays[:1] if chain else tree_arrays)] + [keys.tobytes(), lines.tobytes()]
    header = encode_header(
        v=FORMAT_VERSION, dialect=layout.dialect, window=layout.classify_window, path=path,
        start=start, end=layout.indexed_end, scanned=layout.scanned_end, line0=line0,
        n=n, m=len(messages), c=len(compactions), k=len(keys), as_list=int(layout.reads_as_list),
        chain=int(chain), identity=tuple(ident), head=layout.head_hash, tail=layout.tail_hash,
        bad=sorted(layout.known_bad))
    return segment_pieces(header, starts.tobytes(), kinds.tobytes(), messages.tobytes(),
                          compactions.tobytes(), tree)


def save_layout(layout: Layout, real: str, fd: int) -> str | None:
    """Persist what the sidecar of the transcript at ``real`` (its resolved path, open at
    ``fd``) lacks: append one segment, or rewrite it whole when it has none yet or too
    many (beside the transcript only when it is boundctx's own: :func:`beside_allowed`).
    Returns where it went, or None when no place is writable (the layout still works;
    only the next open pays a scan)."""
    if layout.persisted_lines == len(layout.starts) and layout.persisted_end == layout.indexed_end \
            and layout.persisted_segments and not layout.bad_dirty:
        return None
    try:
        if layout.persisted_segments and layout.persisted_segments < MAX_SEGMENTS and layout.sidecar_path:
            if _append_segment(layout, real, layout.sidecar_path):
                return layout.sidecar_path
        # Encoded once, whichever place takes it.
        pieces = [MAGIC, *_segment_pieces(layout, real, 0, 0)]
        target = write_first_place(pieces, real, beside=beside_allowed(fd, layout.dialect))
        if target is not None:
            _mark_persisted(layout, target, sum(len(piece) for piece in pieces), 1)
        return target
    except SidecarGone:
        # Copying arrays read from the old sidecar found it lying or cut short: write
        # nothing (never copy a lie); the next read that meets the lie rebuilds.
        return None
    return None


def _append_segment(layout: Layout, real: str, sidecar: str) -> bool:
    seg = b"".join(_segment_pieces(layout, real, layout.persisted_lines, layout.persisted_end))
    try:
        # Never through a symlink put at the sidecar's name: the append would land outside.
        fd = os.open(sidecar, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # another process is extending it; ours is only a cache
        if os.fstat(fd).st_size != layout.sidecar_size:
            return False  # it changed since we read it: leave it to a whole rewrite
        os.write(fd, seg)
    except OSError:
        return False
    finally:
        os.close(fd)
    _mark_persisted(layout, sidecar, layout.sidecar_size + len(seg),
                    layout.persisted_segments + 1)
    return True


def _mark_persisted(layout: Layout, target: str, size: int, segments: int) -> None:
    """Record that the sidecar at ``target`` now holds all of ``layout``."""
    layout.sidecar_path = target
    layout.sidecar_size = size
    layout.persisted_segments = segments
    layout.persisted_lines = len(layout.starts)
    layout.persisted_end = layout.indexed_end
    layout.bad_dirty = False


def load_layout(real: str, fd: int, *, dialect: str,
                classify_window: int = DEFAULT_CLASSIFY_WINDOW) -> tuple[Layout | None, Judgement]:
    """Load the sidecar of the transcript at ``real`` (its resolved path) and judge it
    against the file behind ``fd``:
    ``(layout, judgement)`` when it can serve (``"valid"`` or ``"extend"``), else
    ``(None, judgement)`` saying why a layout must be built (``"absent"``: there is no
    sidecar; ``"rebuild"``: there is one that cannot serve)."""
    why = Judgement("absent", "no sidecar")
    for target in sidecar_paths(real):
        try:
            layout = _read_sidecar(target, real, dialect, classify_window)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            continue  # nothing there (or nothing a sidecar could be)
        except (OSError, ValueError, msgspec.DecodeError, msgspec.ValidationError) as exc:
            why = Judgement("rebuild", f"unreadable sidecar ({exc})")
            continue
        judgement = judge(layout, fd)
        verdict = judgement.verdict
        if verdict == "valid" or verdict == "extend":
            layout.outcome = verdict
            return layout, judgement
        why = judgement
    return None, why


def _read_sidecar(target: str, real: str, dialect: str, classify_window: int) -> Layout:
    f = SidecarFile(target)
    try:
        return _read_segments(f, real, dialect, classify_window)
    except BaseException:
        f.close()
        raise


def _read_segments(f: SidecarFile, real: str, dialect: str, classify_window: int) -> Layout:
    size = os.fstat(f.fd).st_size
    if size < len(MAGIC) or f.pread(0, len(MAGIC)) != MAGIC:
        raise ValueError("not a boundctx layout of this format")
    pos = len(MAGIC)
    layout: Layout | None = None
    segments = 0
    while pos < size:
        if pos + SEG_HEAD.size > size:
            raise ValueError("truncated segment")
        hlen, crc = SEG_HEAD.unpack(f.pread(pos, SEG_HEAD.size))
        pos += SEG_HEAD.size
        if pos + hlen > size:
            raise ValueError("truncated segment header")
        hbytes = f.pread(pos, hlen)
        if zlib.crc32(hbytes) != crc:
            raise ValueError("segment header checksum mismatch")
        h = decode_header(hbytes)
        pos += hlen
        if h.v != FORMAT_VERSION or h.dialect != dialect or h.window != classify_window:
            raise ValueError("made by another format, dialect or classify window")
        if h.path != real:
            raise ValueError(f"belongs to {h.path!r}")
        if min(h.n, h.m, h.c, h.start, h.line0) < 0 or h.end < h.start or h.scanned < h.end \
                or h.m + h.c > h.n:
            raise ValueError("inconsistent counts")
        if not 0 <= h.k <= h.n:
            raise ValueError("inconsistent counts")
        if h.chain and not (h.as_list and (layout is None or layout.reads_as_chain)):
            raise ValueError("a segment says its tree is a chain where the tree before it is not one, "
                             "or where it does not read as a list")
        # A chain stores ids alone of the five tree arrays (decision 0053).
        per_line = 1 if h.chain else 5
        need = 8 * h.n + pad8(h.n) + 8 * h.m + 8 * h.c + per_line * 8 * h.n + 2 * 8 * h.k
        if pos + need > size:
            raise ValueError("truncated arrays")
        stored: list[FileArray] = []
        for dtype, count, width, increasing in ((_i8, h.n, 8 * h.n, True), (np.uint8, h.n, pad8(h.n), False),
                                                (_i8, h.m, 8 * h.m, True), (_i8, h.c, 8 * h.c, True),
                                                *[(_i8, h.n, 8 * h.n, False)] * per_line,
                                                (_i8, h.k, 8 * h.k, True), (_i8, h.k, 8 * h.k, False)):
            stored.append(FileArray(f, pos, count, dtype, increasing=increasing))
            pos += width
        arrays: list[FileArray | np.ndarray] = list(stored)
        if h.n <= SMALL_SEGMENT:
            # Small segments (every appended one) are read whole and checked whole.
            arrays = [a.read(0, len(a)) for a in stored]
        elif len(stored[3]) <= SMALL_SEGMENT:
            # Compactions are few: hold them, for the binary searches every window does.
            arrays[3] = stored[3].read(0, len(stored[3]))
        starts, kinds, messages, compactions = arrays[:4]
        tree = arrays[4 : 4 + per_line]
        id_keys, id_lines = arrays[4 + per_line :]
        if layout is None:
            layout = Layout(dialect=dialect, classify_window=classify_window, identity=Identity(*h.identity))
        # Segments must tile the file and the line numbering without gaps.
        if h.start != layout.indexed_end or h.line0 != len(layout.starts):
            raise ValueError("segments do not join up")
        _check_segment(h, starts, kinds, messages, compactions)
        if h.chain:
            _check_chain(h, tree[0], id_keys, id_lines)
        else:
            _check_tree(layout, h, kinds, tree, id_keys, id_lines)
        layout.starts.extend(starts)
        layout.kinds.extend(kinds)
        layout.messages.extend(messages)
        layout.compactions.extend(compactions)
        layout.ids.extend(tree[0])
        if h.chain:
            layout._extend_chain(h.line0, h.n)
        else:
            for arr, part in zip((layout.up, layout.pos, layout.tip, layout.comp), tree[1:]):
                arr.extend(part)
        layout.id_index.append((id_keys, id_lines))
        layout.reads_as_list = layout.reads_as_list and bool(h.as_list)
        layout.reads_as_chain = layout.reads_as_chain and bool(h.chain)
        layout.indexed_end = h.end
        layout.scanned_end = h.scanned
        layout.identity = Identity(*h.identity)
        layout.head_hash, layout.tail_hash = h.head, h.tail
        layout.known_bad.update(b for b in h.bad if 0 <= b < len(layout.starts))
        segments += 1
    if layout is None:
        raise ValueError("no segments")
    layout.from_sidecar = True
    _mark_persisted(layout, f.path, size, segments)
    return layout


def decode_header(padded: bytes) -> SegmentHeader:
    """A segment header without its zero padding. The padding cannot simply be stripped:
    the header itself may end in a zero byte (a last value of 0), so each length from the
    stripped one up is tried; MessagePack is self-delimiting, and only the header's own
    length decodes."""
    bare = len(padded.rstrip(b"\0"))
    for length in range(bare, min(len(padded), bare + 8) + 1):
        try:
            return msgspec.msgpack.decode(padded[:length], type=SegmentHeader)
        except msgspec.DecodeError as exc:
            if length >= min(len(padded), bare + 8) or isinstance(exc, msgspec.ValidationError):
                raise
    raise ValueError("an empty segment header")


def _check_segment(h: SegmentHeader, starts, kinds, messages, compactions) -> None:
    """What a sidecar segment claims, checked as far as is cheap: whole for arrays held
    in memory, at both ends for arrays read on demand (reads check the rest)."""
    if isinstance(starts, np.ndarray):
        why = arrays_disagree(starts, kinds, messages, compactions,
                              line0=h.line0, start=h.start, end=h.end)
        if why:
            raise ValueError(why)
        return
    lo, hi = h.line0, h.line0 + h.n
    if h.n and (int(starts[0]) != h.start or int(starts[h.n - 1]) >= h.end):
        raise ValueError("line offsets outside the segment")
    for name, arr in (("messages", messages), ("compactions", compactions)):
        if len(arr) and not (lo <= int(arr[0]) and int(arr[len(arr) - 1]) < hi):
            raise ValueError(f"{name} outside the segment")


def _check_chain(h: SegmentHeader, ids, id_keys, id_lines) -> None:
    """What a chain's segment claims of its tree (decision 0053), checked whole where its
    ids are held in memory: the id index is the one its lines make, each line hung on the
    line before it. (That the tree before it is a chain, and that it reads as a list, is
    checked by the reader.)"""
    if isinstance(ids, np.ndarray):
        _check_id_index(h, ids, np.arange(h.line0 - 1, h.line0 + h.n - 1, dtype=_i8), id_keys, id_lines)


def _check_id_index(h: SegmentHeader, ids: np.ndarray, up: np.ndarray, id_keys, id_lines) -> None:
    """A segment's id index must be the one its lines make (its ids, where they hang)."""
    keys, lines = id_index_of(ids, up, h.line0)
    if not (np.array_equal(keys, id_keys) and np.array_equal(lines, id_lines)):
        raise ValueError("the segment's id index is not the one its lines make")


def _check_tree(layout: Layout, h: SegmentHeader, kinds, tree, id_keys, id_lines) -> None:
    """What a segment's tree arrays claim, checked whole where they are held in memory:
    every line hangs on an earlier one (or is a root or a copy), the places follow from
    where lines hang, as a fresh build would have placed them, and the id index is the
    one its lines make. Arrays read on demand are checked where they are read (an id
    index's keys must increase; a line it names must be one the layout holds)."""
    ids, up, pos, tip, comp = tree
    if not isinstance(up, np.ndarray):
        return
    _check_id_index(h, ids, up, id_keys, id_lines)
    lines = np.arange(h.line0, h.line0 + h.n, dtype=_i8)
    if not bool(np.all((up < lines) & ((up >= 0) | (up == linetree.ROOT) | (up == linetree.COPY)))):
        raise ValueError("a line hangs on a later line, or on nothing a tree allows")
    earlier = np.unique(up[(up >= 0) & (up < h.line0)])
    if len(earlier) and int(earlier[-1]) >= len(layout.up):
        raise ValueError("a line hangs on a line the earlier segments do not hold")
    up_b = np.ascontiguousarray(up, dtype=_i8)
    places = [np.frombuffer(b, dtype=_i8) for b in layout._places(earlier.tobytes())]
    want = linetree.place_lines(up_b, np.ascontiguousarray(kinds, dtype=np.uint8), h.line0,
                                earlier, *places)
    for name, got, expected in zip(("pos", "tip", "comp"), (pos, tip, comp), want):
        if not np.array_equal(got, np.frombuffer(expected, dtype=_i8)):
            raise ValueError(f"the tree's {name} array disagrees with where its lines hang")
    comp_before = layout.compactions[len(layout.compactions) - 1] if len(layout.compactions) else -1
    as_list = linetree.reads_as_list(np.ascontiguousarray(kinds, dtype=np.uint8), pos, comp, up_b, h.line0,
                                     len(layout.messages), comp_before)
    if bool(h.as_list) != (as_list and layout.reads_as_list):
        raise ValueError("the segment says whether its tree reads as a list, and is wrong")


def judge(layout: Layout, fd: int) -> Judgement:
    """Whether ``layout`` still describes the file behind ``fd``: ``"valid"``,
    ``"extend"`` (the file grew, and what was indexed is unchanged), or ``"rebuild"``
    with the reason."""
    st = os.fstat(fd)
    now = Identity.of(st)
    old = layout.identity
    # st_ino is only an identity when non-zero (network and some Windows filesystems).
    if now.ino and old.ino and now.ino != old.ino:
        return Judgement("rebuild", "a different file (inode changed)")
    if now.size < layout.indexed_end:
        return Judgement("rebuild", "the file shrank below the indexed end")
    if now.size < layout.scanned_end:
        # A torn tail the file does not hold (a lying sidecar can claim 4 EiB of one).
        return Judgement("rebuild", "the file is shorter than the layout says it scanned")
    head, tail = file_hashes(fd, layout.indexed_end)
    if (head, tail) != (layout.head_hash, layout.tail_hash):
        return Judgement("rebuild", "content changed (fingerprint mismatch)")
    if now.size == old.size and now.mtime_ns == old.mtime_ns:
        return Judgement("valid")
    if now.size > old.size:
        return Judgement("extend")  # grew, and what was indexed still fingerprints the same
    # Same size or smaller with a new mtime: written in place. Extending would scan
    # nothing and keep stale offsets, so start over.
    return Judgement("rebuild", "rewritten in place (size did not grow, mtime changed)")
