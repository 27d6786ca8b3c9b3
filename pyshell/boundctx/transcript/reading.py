"""Reading the lines a layout points at, and checking each is what the layout says.

The trip is one way: a :class:`LineReader` reads bytes with coalesced ``pread`` calls,
checks them (each line starts after a ``\\n`` and ends with one, frames and classifies
as the layout says), and builds entries: a whole line decoded, a long line read as a
prefix and projected natively. It never changes the layout. What it learns about it
(lines indexed as records that do not parse) it collects in :attr:`LineReader.bad_lines`
for the :class:`~boundctx.transcript.Transcript` to apply; a line that proves the
layout wrong raises :class:`StaleLayout`, and the Transcript rebuilds and reads again.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from boundctx._native import lineindex, projection
from boundctx._search import longest_fitting
from boundctx.transcript.arrays import is_dense
from boundctx.transcript.dialects import classify_by_parse, dialect_kinds, native_table
from boundctx.transcript.entries import Entry
from boundctx.transcript.kinds import LineKind
from boundctx.transcript.layout import Layout, LineSpan
from boundctx.transcript.lineformat import BOM, LineUnreadable, decode_display, decode_lines, decode_record
from boundctx.transcript.sidecar import pread_exact

__all__ = ["COALESCE_GAP", "ENVELOPE", "MAX_RUN_BYTES", "NOT_DISPLAYABLE", "LineReader", "StaleLayout",
           "plain_entry", "projected_record", "records_together"]

# A projected line is read as its first content_limit + ENVELOPE bytes: room for the
# keys, ids and structure around the text without reading the rest of a huge line.
ENVELOPE = 64 * 1024
# Consecutive lines closer than this are fetched with one read.
COALESCE_GAP = 64 * 1024
# ...but no single read of a run grows past this (a full-history read stays in steps).
MAX_RUN_BYTES = 8 << 20


_I8 = np.dtype("<i8")  # the arrays' line numbers and offsets, as the native scan writes them


class StaleLayout(Exception):
    """A line read does not match what the layout says: rebuild and retry once."""


class _Line(NamedTuple):
    """One line to read: where it is, what the layout says it is."""

    line: int
    message_index: int | None  # (``index`` would hide tuple.index)
    start: int
    end: int  # just past its "\n"
    kind: int
    projected: bool


class _Run(NamedTuple):
    """The lines ``i:j`` (of those asked for) read with one ``pread``: ``buf[pre:]``
    sits at file offset ``start``; ``buf[:pre]`` is the byte before, a newline."""

    i: int
    j: int
    start: int
    pre: int
    buf: bytes


class LineReader:
    """Reads and checks lines of one open file against one layout.

    Parameters
    ----------
    fd : int
        The transcript, open for reading.
    layout : Layout
        What the file is believed to hold; read, never changed.
    dialect : str
    classify_window : int
        The window the layout was classified with (rescans use the same).
    """

    def __init__(self, fd: int, layout: Layout, *, dialect: str, classify_window: int) -> None:
        self.fd = fd
        self.layout = layout
        self.dialect = dialect
        self.classify_window = classify_window
        self.type_kinds = dialect_kinds(dialect)
        #: lines indexed as records that a read found not to be (see the module docstring)
        self.bad_lines: set[int] = set()
        # The layout's lines this reader read last (one read of each array per window).
        self._span: LineSpan | None = None

    def _cover(self, lo: int, hi: int) -> LineSpan:
        """Lines ``lo..hi - 1`` of the layout, from the span read last when it holds them."""
        span = self._span
        if span is None or not span.covers(lo, hi):
            span = self._span = self.layout.line_span(lo, hi)
        return span

    def line_info(self, lines: np.ndarray) -> tuple[list[int], list[int], list[int]]:
        """Start offset, end offset (after the ``\\n``) and kind of each of ``lines``
        (rising strictly: :meth:`check_lines` first), as lists: :meth:`Layout.line_info`,
        from the span read last when it holds the lines. A run of consecutive lines (a
        window's page) is sliced from the span's lists, with no array made."""
        count = len(lines)
        if count:
            lo, hi = int(lines[0]), int(lines[-1]) + 1
            if is_dense(lo, hi, count):
                span = self._cover(lo, hi)
                offs, kinds = span.lists()
                a, b = lo - span.lo, hi - span.lo
                if b - a == count:  # every line from lo to hi
                    return offs[a:b], offs[a + 1 : b + 1], kinds[a:b]
                rel = [line - span.lo for line in lines.tolist()]
                return [offs[k] for k in rel], [offs[k + 1] for k in rel], [kinds[k] for k in rel]
        starts, ends, kinds_a = self.layout.line_info(lines)  # scattered: element by element
        return starts.tolist(), ends.tolist(), kinds_a.tolist()

    # -- what the layout's arrays say ---------------------------------------------

    def check_lines(self, lines: np.ndarray, *, kind: LineKind | None = None,
                    complete: bool = True) -> None:
        """The layout's own arrays must agree on these lines: in range, increasing, of
        the message sequence (or of ``kind``), and (``complete``) no such line missing
        between them. A sidecar whose arrays lie fails here (they carry no checksum:
        decision 0006)."""
        if not len(lines):
            return
        layout = self.layout
        lo, hi = int(lines[0]), int(lines[-1]) + 1
        if lo < 0 or hi > layout.line_count:
            raise StaleLayout("indexed line numbers out of range")
        cover = self._cover(lo, hi)
        kinds = cover.kinds[lo - cover.lo : hi - cover.lo]
        # The lines of the sequence (or of ``kind``) among the kinds: one native pass.
        if kind in (None, LineKind.COMPACTION):
            messages, compactions = lineindex.sequence_lines(kinds, lo)
            found = messages if kind is None else compactions
            # Complete: every such line from the first to the last and no other, so the
            # lines must be exactly those.
            if complete and found == np.asarray(lines, dtype=_I8).tobytes():
                return
            of_kind: Sequence[int] = memoryview(found).cast("q")
        else:
            of_kind = [lo + k for k, c in enumerate(kinds) if c == kind]
        if not lineindex.rises_within(np.ascontiguousarray(lines, dtype=_I8).data, lo, hi - 1):
            raise StaleLayout("indexed line numbers not increasing")
        # Each line must be one of them; complete: and no other.
        if (complete and len(of_kind) != len(lines)) or not set(lines.tolist()).issubset(of_kind):
            raise StaleLayout("indexed lines disagree with the line kinds")

    # -- entries ------------------------------------------------------------------

    def entries(self, lines: np.ndarray, content_limit: int | None, *,
                first_index: int | None, any_kind: bool = False,
                info: tuple[list[int], list[int], list[int]] | None = None) -> list[Entry]:
        """Entries of physical ``lines`` (sorted). ``first_index``: the message index of
        the first (None: lines outside the message sequence); ``any_kind``: lines of
        every kind are expected, so a record's type is not held to the indexed kind;
        ``info``: their :meth:`line_info`, when the caller has it already."""
        # Parallel lists, not a _Line per line: most lines are whole records, read and
        # checked in runs, and a window holds a hundred of them. A _Line is made for a
        # line read on its own.
        starts_l, ends_l, kinds_l = self.line_info(lines) if info is None else info
        numbers = lines.tolist()
        count = len(numbers)
        # The lines longer than the budget are projected, each read on its own; the
        # whole lines between them are read in coalesced runs.
        projected: list[int] = []
        if content_limit is not None and count:
            lengths = list(map(int.__sub__, ends_l, starts_l))
            longest = content_limit + 1  # the body and its "\n"
            if max(lengths) > longest:
                projected = [k for k, n in enumerate(lengths) if n > longest]

        entries: list[Entry] = []
        i = 0
        for cut in [*projected, count]:
            if i < cut:
                entries.extend(self._whole_lines(numbers, starts_l, ends_l, kinds_l, i, cut, first_index,
                                                 any_kind, content_limit))
            if cut < count and content_limit is not None:
                ln = _Line(numbers[cut], None if first_index is None else first_index + cut, starts_l[cut],
                           ends_l[cut], kinds_l[cut], True)
                entries.append(self._projected(ln, content_limit, any_kind))
            i = cut + 1
        return entries

    def _whole_lines(self, numbers: list[int], starts: list[int], ends: list[int], kinds: list[int], i: int,
                     j: int, first_index: int | None, any_kind: bool, content_limit: int | None) -> list[Entry]:
        """:meth:`entries` of the whole lines ``i:j`` of those asked for, read in runs."""
        out: list[Entry] = []
        starts, ends, numbers, kinds = starts[i:j], ends[i:j], numbers[i:j], kinds[i:j]
        first = None if first_index is None else first_index + i
        for run in self._runs(starts, ends, numbers):
            a, b = run.i, run.j
            records = _decoded_together(run, starts[a:b], ends[a:b], kinds[a:b])
            if records is not None:
                out.extend(self._record_entries(numbers[a:b], None if first is None else first + a, starts[a:b],
                                                ends[a:b], kinds[a:b], records, any_kind))
                continue
            for k in range(a, b):
                ln = _Line(numbers[k], None if first is None else first + k, starts[k], ends[k], kinds[k], False)
                at = ln.start - run.start + run.pre
                body = _without_bom(run.buf[at : at + ln.end - ln.start - 1], ln.start)
                out.append(self._entry(ln, body, raw=body, cut=0, any_kind=any_kind, content_limit=content_limit))
        return out

    # -- the full history ---------------------------------------------------------

    def history_lines(self) -> list[bytes]:
        """Every complete line, ``\\n`` included, checked as any read is."""
        layout = self.layout
        starts = layout.starts.all()
        kinds = layout.kinds.all()
        if layout.from_sidecar and not layout.agrees(starts, kinds):
            raise StaleLayout("the layout's arrays disagree with each other")
        ends = np.append(starts[1:], layout.indexed_end).tolist()
        starts_l = starts.tolist()
        lines: list[bytes] = []
        for run in self._runs(starts_l, ends, range(len(starts_l))):
            view = memoryview(run.buf)
            for k in range(run.i, run.j):
                a, b = starts_l[k] - run.start + run.pre, ends[k] - run.start + run.pre
                lines.append(bytes(view[a:b]))
        return lines

    # -- reading and checking bytes -----------------------------------------------

    def _runs(self, starts: list[int], ends: list[int], numbers) -> Iterator[_Run]:
        """Read the lines at ``starts``/``ends`` (sorted; physical line ``numbers``) in
        runs: a run grows while the next line starts within ``COALESCE_GAP`` of the
        last and the run stays within ``MAX_RUN_BYTES`` (or is one longer line). The
        byte before each run comes along, to check its first line starts after a
        newline; a rescan of the run's bytes checks every line in it (those between the
        lines asked for included) against the layout."""
        numbers = list(numbers)
        count = len(starts)
        if count and ends[-1] - starts[0] <= MAX_RUN_BYTES and starts[1:] == ends[:-1]:
            # Back to back and short enough (a window's page): one run, without asking
            # line by line.
            yield self._read_run(0, count, starts[0], ends[-1], numbers)
            return
        i = 0
        while i < count:
            j = i + 1
            while (j < count and starts[j] - ends[j - 1] < COALESCE_GAP
                   and ends[j] - starts[i] <= MAX_RUN_BYTES):
                j += 1
            yield self._read_run(i, j, starts[i], ends[j - 1], numbers)
            i = j

    def _read_run(self, i: int, j: int, lo: int, hi: int, numbers: list[int]) -> _Run:
        """Lines ``i:j`` (physical ``numbers[i:j]``), bytes ``lo..hi`` of the file, read
        and checked as one run (see :meth:`_runs`)."""
        pre = 1 if lo > 0 else 0
        buf = pread_exact(self.fd, lo - pre, hi - lo + pre)
        if len(buf) != hi - lo + pre:
            raise StaleLayout(f"line {numbers[j - 1]} runs past the end of the file")
        if pre and buf[0] != 10:
            raise StaleLayout(f"line {numbers[i]} does not start after a newline")
        self._check_framing(buf, pre, lo, numbers[i], numbers[j - 1])
        return _Run(i, j, lo, pre, buf)

    def _check_framing(self, buf: bytes, pre: int, start: int, first: int, last: int) -> None:
        """Frame and classify again every line whose bytes a read holds (physical lines
        ``first..last``, at ``buf[pre:]`` from file offset ``start``) and compare with
        the layout. The file's fingerprint (size, mtime, its first and last 4 KiB) cannot
        see a change of the same size in the middle within one mtime tick; this check
        sees it wherever a read goes, kinds and line counts included, at the cost of
        one native scan of bytes already in memory."""
        res = lineindex.scan_bytes(memoryview(buf)[pre:], native_table(self.dialect),
                                   base_offset=start, classify_window=self.classify_window)
        span = self._cover(first, last + 1)
        a, b = first - span.lo, last + 1 - span.lo
        if res.torn_bytes or res.starts != span.offs[8 * a : 8 * b]:
            raise StaleLayout(f"lines {first}..{last} are not framed as the layout says")
        if res.kinds == span.kinds[a:b]:
            return
        want = np.frombuffer(span.kinds[a:b], dtype=np.uint8)
        starts = np.frombuffer(res.starts, dtype=_I8)
        kinds = np.frombuffer(res.kinds, dtype=np.uint8)
        differ = np.flatnonzero(kinds != want)
        for k in differ.tolist():
            # The scan leaves a line whose "type" lies past its window undecided; the
            # layout holds the kind a full parse gave it, which this line must still have.
            if kinds[k] == LineKind.UNDECIDED:
                a = int(starts[k]) - start + pre
                b = int(starts[k + 1]) - start + pre if k + 1 < len(starts) else len(buf)
                if classify_by_parse(buf[a:b], self.type_kinds, at_file_start=starts[k] == 0) == want[k]:
                    continue
            raise StaleLayout(f"line {first + k} is not of the kind the layout says; "
                              "the file was changed in place")

    def _projected(self, ln: _Line, content_limit: int, any_kind: bool) -> Entry:
        """A line longer than the display budget: read a prefix and project it."""
        body_len = ln.end - ln.start - 1
        bom = 3 if ln.start == 0 else 0
        want = min(body_len, content_limit + ENVELOPE + bom)
        pre = 1 if ln.start > 0 else 0
        buf = pread_exact(self.fd, ln.start - pre, want + pre)
        if len(buf) != want + pre or (pre and buf[0] != 10):
            raise StaleLayout(f"line {ln.line} does not start after a newline")
        if pread_exact(self.fd, ln.end - 1, 1) != b"\n":
            raise StaleLayout(f"line {ln.line} does not end with a newline")
        rec, cut, prefix, body_len = projected_record(ln, memoryview(buf)[pre:], content_limit)
        if rec is not None:
            return self._record_entry(ln, rec, cut=cut, any_kind=any_kind)
        # The prefix is not a record we can show. That may be the line's fault (it is
        # corrupt) or the projection's (nesting deeper than it follows): only a full
        # parse can tell, and the whole point here is not to do one. Show the raw
        # prefix, and leave the verdict on the line to a full read.
        return _raw_entry(ln, prefix, NOT_DISPLAYABLE, content_limit, total=body_len)

    # -- entries from bytes ---------------------------------------------------------

    def _entry(self, ln: _Line, source: bytes, *, raw: bytes, cut: int, any_kind: bool,
               content_limit: int | None) -> Entry:
        """Parse ``source`` (the whole line) into an Entry; ``raw`` is what a corrupt
        entry shows."""
        try:
            rec = decode_record(source)
            if not isinstance(rec, dict):
                raise LineUnreadable("a record must be a JSON object")
        except LineUnreadable as exc:
            return self._corrupt(ln, raw, str(exc), content_limit)
        return self._record_entry(ln, rec, cut=cut, any_kind=any_kind)

    def _known_bad(self, line: int) -> bool:
        return line in self.layout.known_bad or line in self.bad_lines

    def _record_entries(self, numbers: list[int], first_index: int | None, starts: list[int], ends: list[int],
                        kinds: list[int], records: list[dict], any_kind: bool) -> list[Entry]:
        """:meth:`_record_entry` of whole records (lines ``numbers``, message indexes from
        ``first_index``, ``starts``, ``ends`` and ``kinds`` as the layout says): when every
        record's type maps to its line's kind (so, unless the file or the layout is
        wrong), all are taken at once, without a call per line (a window holds a
        hundred); else line by line, each saying why."""
        count = len(records)
        indices = [None] * count if first_index is None else range(first_index, first_index + count)
        if not any_kind:
            type_kinds: Mapping[Any, int] = self.type_kinds
            try:
                agree = [type_kinds.get(rec.get("type")) for rec in records] == kinds
            except TypeError:  # a "type" that is no key at all (a list, an object)
                agree = False
            if not agree:
                return [self._record_entry(_Line(number, index, start, end, kind, False), rec, cut=0,
                                           any_kind=False)
                        for number, index, start, end, kind, rec in zip(numbers, indices, starts, ends, kinds,
                                                                        records)]
        return [Entry(line=number, index=index, offset=start, length=end - start, record=rec)
                for number, index, start, end, rec in zip(numbers, indices, starts, ends, records)]

    def _record_entry(self, ln: _Line, rec: dict, *, cut: int, any_kind: bool) -> Entry:
        t = rec.get("type")
        if (not any_kind and (self.type_kinds.get(t) if isinstance(t, str) else None) != ln.kind
                and ln.kind in (LineKind.MESSAGE, LineKind.COMPACTION) and not self._known_bad(ln.line)):
            if self.layout.from_sidecar:
                # A sidecar could put us on the wrong line; a record whose type does not
                # map to the indexed kind proves it.
                raise StaleLayout(f"line {ln.line} is a {rec.get('type')!r} record, not the indexed kind")
            # A fresh scan said so all the same (a second "type" key): remember that,
            # so the sidecar is not taken for a liar on every open.
            self.bad_lines.add(ln.line)
        return Entry(line=ln.line, index=ln.message_index, offset=ln.start, length=ln.end - ln.start,
                     record=rec, cut_bytes=cut)

    def _corrupt(self, ln: _Line, body: bytes, why: str, content_limit: int | None) -> Entry:
        if ln.kind not in (LineKind.CORRUPT, LineKind.BLANK) and not self._known_bad(ln.line):
            if self.layout.from_sidecar:
                # A sidecar said this was a good record: believe the bytes, not the
                # sidecar, until a fresh scan of this file says the same.
                raise StaleLayout(f"line {ln.line} is not the record the layout indexed")
            self.bad_lines.add(ln.line)
        if ln.kind == LineKind.BLANK:
            why = "blank line"
        return _raw_entry(ln, body, why, content_limit)


def _decoded_together(run: _Run, starts: list[int], ends: list[int], kinds: list[int]) -> list | None:
    """The records of the lines at ``starts``/``ends`` (all of ``run``; ``kinds`` as the
    layout says) decoded in one call (:func:`records_together`); None when they cannot
    be (a gap between them)."""
    if starts[1:] != ends[:-1]:
        return None
    return _records_of(run.buf, starts[0] - run.start + run.pre, starts, ends, kinds) if starts else None


#: The kinds of lines that begin with ``{`` and end with ``}`` (the scan frames them so).
_OBJECT_KINDS = frozenset({LineKind.MESSAGE, LineKind.COMPACTION, LineKind.OTHER})


def records_together(buf, at: int, lines: list[_Line]) -> list[dict] | None:
    """The records of ``lines``, whole and back to back in ``buf`` from ``at`` (their
    bytes, newlines included), decoded in one call, each line its own JSON value: the
    same values :func:`decode_record` gives, one call instead of one a line (a window
    holds a hundred). None when that cannot be said at once: the file's first line (a
    BOM may begin it), a blank or corrupt line, a line any record check refuses, or a
    value that is not an object. Each line is then read on its own, and says why.

    One decode of many lines is one value a line only when no line can hold two values
    while another holds none, or run into the next: so every line must be of a kind the
    scan frames as ``{...}``. A ``}`` and the ``{`` after it, with only a newline
    between, never continue one value, and a blank line (no value) is left out."""
    return _records_of(buf, at, [ln.start for ln in lines], [ln.end for ln in lines], [ln.kind for ln in lines])


def _records_of(buf, at: int, starts: list[int], ends: list[int], kinds: list[int]) -> list[dict] | None:
    """:func:`records_together` of the lines at ``starts``/``ends`` of ``kinds``."""
    if len(starts) < 2 or starts[0] == 0 or not _OBJECT_KINDS.issuperset(kinds):
        return None
    try:
        records = decode_lines(buf, at, list(map(int.__sub__, ends, starts)))
    except LineUnreadable:
        return None
    if set(map(type, records)) != {dict}:
        return None  # a line that is not a record: one by one, each saying so
    return records


#: Why a long line shows as bytes: its prefix projects to no record (see ``_projected``).
NOT_DISPLAYABLE = "not displayable within the content limit"


def projected_record(ln: _Line, head, content_limit: int) -> tuple[dict | None, int, memoryview, int]:
    """A long line's display record from ``head``, its first bytes (at least
    ``content_limit + ENVELOPE`` of them, a BOM included at byte 0):
    ``(record or None, bytes cut, the prefix projected, the body's length)``. Every
    store projects a long line with this one function, and so shows it alike."""
    body_len = ln.end - ln.start - 1
    skip = 3 if ln.start == 0 and bytes(head[:3]) == BOM else 0
    body_len -= skip
    prefix = memoryview(head)[skip:]  # no copy of a prefix that may be 128 KiB
    display, _kept, cut = projection.project_display(prefix, body_len, content_limit)
    rec = None
    if display is not None:
        try:
            rec = decode_display(display)
        except LineUnreadable:
            rec = None
    return (rec if isinstance(rec, dict) else None), cut, prefix, body_len


def plain_entry(ln: _Line, body: bytes, content_limit: int | None) -> Entry:
    """The entry of one whole line's bytes (without its ``\\n``) as a fresh read of a file
    shows it: its record, or the line itself, saying why it is not one."""
    body = _without_bom(body, ln.start)
    try:
        rec = decode_record(body)
        if not isinstance(rec, dict):
            raise LineUnreadable("a record must be a JSON object")
    except LineUnreadable as exc:
        why = "blank line" if ln.kind == LineKind.BLANK else str(exc)
        return _raw_entry(ln, body, why, content_limit)
    return Entry(line=ln.line, index=ln.message_index, offset=ln.start, length=ln.end - ln.start, record=rec)


def _without_bom(body: bytes, start: int) -> bytes:
    """A UTF-8 byte-order mark is tolerated at byte 0 of the file, never part of a record."""
    return body[3:] if start == 0 and body.startswith(BOM) else body


def _raw_entry(ln: _Line, body, why: str, content_limit: int | None, *,
               total: int | None = None) -> Entry:
    """An entry that shows a line's bytes, not a record: decoded with replacement
    characters and, under a content limit, cut to that many bytes *after* decoding
    (each invalid byte becomes a 3-byte replacement character)."""
    total = len(body) if total is None else total
    if content_limit is None:
        text, cut = bytes(body).decode("utf-8", "replace"), 0
    else:
        # The longest prefix whose decoded text fits the budget, by bisection.
        def fits(k: int) -> bool:
            return len(bytes(body[:k]).decode("utf-8", "replace").encode()) <= content_limit

        lo = longest_fitting(min(len(body), content_limit), fits)
        text = bytes(body[:lo]).decode("utf-8", "replace")
        cut = total - lo
        if cut > 0:
            text += f" [... {cut} more bytes not shown]"
    return Entry(line=ln.line, index=ln.message_index, offset=ln.start, length=ln.end - ln.start,
                 record=None, cut_bytes=max(cut, 0), corrupt=why, raw=text)
