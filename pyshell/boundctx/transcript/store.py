"""The transcript store: bounded windows over a lossless JSONL file.

Reads never parse more than the window asks for: the layout (line offsets and kinds,
cached in a sidecar) says where each message is, and lines longer than the display
budget are read as a prefix and projected natively. Writes append one complete line
with one ``write`` call under a cross-process lock, or replace the whole file
atomically from a complete history. Nothing a reader is shown is trusted blindly:
every line read is checked against the file, and a layout caught lying is rebuilt.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import secrets
import stat
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, NamedTuple

import msgspec
import numpy as np

from boundctx import config as _config
from boundctx._atomic import replacing
from boundctx._files import kind_of
from boundctx._native import lineindex
from boundctx._search import longest_fitting
from boundctx.errors import (
    EntryInvalid,
    PartialHistoryRewrite,
    TranscriptChanged,
    TranscriptLocked,
    TranscriptNotAFile,
    TranscriptNotFound,
    TranscriptPermission,
)
from boundctx.transcript.arrays import SidecarGone
from boundctx.transcript.dialects import classify_by_parse, dialect_kinds, native_table
from boundctx.transcript.entries import Entry, History, Window
from boundctx.transcript.lineformat import BOM, LineUnreadable, decode_record, encode_record
from boundctx.transcript.opening import (
    iter_transcripts,
    map_open_error,
    open_regular_fd,
    open_transcript_fd,
)
from boundctx.transcript.layout import (
    SEQUENCE_KINDS,
    Layout,
    is_sequence,
    build_layout,
    extend_layout,
    judge,
    load_layout,
    pread_exact,
    save_layout,
    sidecar_paths,
)


__all__ = ["RENDERER_PRESET", "Transcript"]

#: The ``renderer`` preset's defaults: the newest 100 messages, 64 KiB of text each.
#: They are the defaults of the settings the preset reads (``_RENDERER_SETTINGS``).
RENDERER_PRESET = {"message_limit": _config.KEYS["transcript.window_messages"].default,
                   "content_limit": _config.KEYS["transcript.window_content_bytes"].default}
# The setting behind each of the renderer preset's limits.
_RENDERER_SETTINGS = {"message_limit": "transcript.window_messages",
                      "content_limit": "transcript.window_content_bytes"}

# A projected line is read as its first content_limit + ENVELOPE bytes: room for the
# keys, ids and structure around the text without reading the rest of a huge line.
ENVELOPE = 64 * 1024
# Consecutive lines closer than this are fetched with one read.
COALESCE_GAP = 64 * 1024
# ...but no single read of a run grows past this (a full-history read stays in steps).
MAX_RUN_BYTES = 8 << 20
# edit/delete/truncate wait this long for another writer's append to finish: an
# append holds the lock for one write (and fsync), a writer that keeps it open for
# longer is refused with TranscriptLocked. Polled, as flock has no timeout.
EDIT_LOCK_WAIT_S = 5.0
LOCK_POLL_S = 0.005



class _Line(NamedTuple):
    """One line to read: where it is, what the layout says it is."""

    line: int
    index: int | None
    start: int
    end: int  # just past its "\n"
    kind: int
    projected: bool


class _StaleLayout(Exception):
    """A line read does not match what the layout says: rebuild and retry once."""


def _check_limit(name: str, value, minimum: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int or None, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum} or None, got {value}")


def _renderer_limits(settings: Mapping[str, Any] | None = None) -> dict[str, int]:
    """The renderer preset's ``message_limit`` and ``content_limit``, from settings.

    Parameters
    ----------
    settings : mapping, optional
        Resolved :class:`~boundctx.config.Settings`, or a partial mapping such as
        ``{"transcript.window_messages": 20}`` applied over :func:`boundctx.config.load`
        (default: :func:`boundctx.config.load`).

    Raises
    ------
    ConfigError
        A setting of the wrong type or out of range, naming its source.
    """
    resolved = _config.resolve(settings)
    return {limit: resolved[name] for limit, name in _RENDERER_SETTINGS.items()}


class Transcript:
    """An open JSONL transcript.

    Use :meth:`open`; a Transcript is a context manager and should be closed (closing
    persists layout extensions and releases the write lock).

    Examples
    --------
    >>> with Transcript.open("session.jsonl") as t:            # doctest: +SKIP
    ...     w = t.window(preset="renderer")
    ...     older = t.window(message_before=w.message_start, message_limit=100)
    """

    def __init__(self, path: str, fd: int, layout: Layout, *, dialect: str,
                 classify_window: int) -> None:
        self.path = path
        self.dialect = dialect
        self._type_kinds = dialect_kinds(dialect)
        self._fd = fd
        self._layout = layout
        self._window = classify_window
        self._wfd: int | None = None
        self._lock_fd: int | None = None
        self._closed = False
        #: side files holding torn tails this Transcript moved aside
        self.torn_files: list[str] = []

    # -- opening ------------------------------------------------------------------

    @classmethod
    def open(cls, path: str | os.PathLike, *, dialect: str = "auto", create: bool = False,
             progress: Callable[[int], object] | None = None,
             classify_window: int = lineindex.DEFAULT_CLASSIFY_WINDOW) -> "Transcript":
        """Open a transcript, loading or building its layout.

        Parameters
        ----------
        path : str or os.PathLike
            A JSONL transcript (boundctx, pi session v3, Claude Code or Codex CLI).
        dialect : str
            ``"auto"`` (default) reads all known dialects; or ``"boundctx"``, ``"pi"``,
            ``"claude-code"``, ``"codex"``.
        create : bool
            Create an empty transcript when none exists.
        progress : callable, optional
            ``progress(bytes_done)`` while a layout is built.

        Raises
        ------
        TranscriptNotFound, TranscriptNotAFile, TranscriptPermission
        """
        path = os.fspath(path)
        dialect_kinds(dialect)  # a clear ValueError for an unknown dialect, before any I/O
        fd = open_transcript_fd(path, create=create)
        try:
            layout = _load_or_build(path, fd, dialect, classify_window, progress)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd, layout, dialect=dialect, classify_window=classify_window)

    def close(self) -> None:
        """Persist layout extensions, release the write lock and close the file."""
        if self._closed:
            return
        self._closed = True
        try:
            self._save_layout()
        finally:
            for fd in (self._wfd, self._lock_fd, self._fd):
                if fd is not None:
                    os.close(fd)
            self._wfd = self._lock_fd = None

    def __enter__(self) -> "Transcript":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<Transcript {self.path!r} messages={self.message_count} "
                f"layout={self.layout_outcome}>")

    # -- facts --------------------------------------------------------------------

    @property
    def message_count(self) -> int:
        """Messages in the transcript (message lines and corrupt lines)."""
        return self._layout.message_count

    @property
    def compaction_count(self) -> int:
        return len(self._layout.compactions)

    @property
    def line_count(self) -> int:
        """Complete lines of every kind."""
        return self._layout.line_count

    @property
    def torn_bytes(self) -> int:
        """Bytes after the last ``\\n``: an unfinished write, never a record."""
        return self._layout.torn_bytes

    @property
    def layout_outcome(self) -> str:
        """How the layout was obtained on the last (re)load: ``"built"``, ``"valid"``,
        ``"extend"`` or ``"rebuilt"``."""
        return self._layout.outcome

    def kinds(self) -> np.ndarray:
        """Kind of every complete line (see ``boundctx._native.lineindex`` constants)."""
        return self._layout.kinds.all()

    # -- reading ------------------------------------------------------------------

    def window(self, message_before: int | None = None, message_limit: int | None = None,
               content_limit: int | None = None, *,
               preset: Literal["renderer"] | None = None,
               settings: Mapping[str, Any] | None = None) -> Window:
        """Read a bounded window of consecutive messages.

        Parameters
        ----------
        message_before : int, optional
            Exclusive end of the window (default: after the newest message).
        message_limit : int, optional
            At most this many messages, the newest before ``message_before``
            (default: all of them).
        content_limit : int, optional
            Per-message display budget in bytes of string content; longer messages are
            projected with an explicit marker (default: uncapped, the model path).
        preset : "renderer", optional
            Fill unset limits from the settings ``transcript.window_messages`` and
            ``transcript.window_content_bytes`` (default 100 messages, 64 KiB).
        settings : mapping, optional
            With ``preset``: the settings to read, resolved :class:`~boundctx.config.Settings`
            or a partial mapping applied over them (default
            :func:`boundctx.config.load`, read only when a limit is unset).

        Returns
        -------
        Window

        Raises
        ------
        ValueError
            For a limit out of range.
        ConfigError
            With ``preset``, for settings that cannot be resolved (a value of the wrong
            type or out of range; the message names where it came from).
        TranscriptChanged
            When the file keeps changing under the read even after a rebuild.
        """
        if preset is not None:
            if preset != "renderer":
                raise ValueError(f"unknown preset {preset!r}; the only preset is 'renderer'")
            if message_limit is None or content_limit is None:
                limits = _renderer_limits(settings)
                if message_limit is None:
                    message_limit = limits["message_limit"]
                if content_limit is None:
                    content_limit = limits["content_limit"]
        elif settings is not None:
            raise TypeError("settings= is read only by a preset; pass preset='renderer' with it")
        _check_limit("message_before", message_before, 0)
        _check_limit("message_limit", message_limit, 0)
        _check_limit("content_limit", content_limit, 0)
        self._check_open()
        return self._checked_read(lambda: self._read_window(message_before, message_limit, content_limit))

    def _checked_read(self, read: Callable[[], Any]) -> Any:
        """Run ``read`` on a fresh view of the file; if a line does not match the
        layout, rebuild the layout from the file once and run it again."""
        for attempt in (0, 1):
            self._refresh()
            try:
                return read()
            except (_StaleLayout, SidecarGone) as exc:
                if attempt:
                    raise TranscriptChanged(
                        f"{self.path!r} changed while it was being read ({exc}); "
                        "read it again once the writer has finished") from None
                self._rebuild("a line did not match the layout")
        raise AssertionError("unreachable")

    def _read_window(self, before, limit, content_limit) -> Window:
        layout = self._layout
        total = layout.message_count
        if before is None:
            before = total
        elif before > total:
            raise ValueError(
                f"message_before={before} is past the last message; the transcript has {total}")
        start = 0 if limit is None else max(0, before - limit)
        # One message either side comes along, so a line the arrays skip or repeat at
        # the window's edges shows up in the check below.
        ext_lo, ext_hi = max(start - 1, 0), min(before + 1, total)
        ext = layout.messages.slice(ext_lo, ext_hi)
        self._check_lines(ext, SEQUENCE_KINDS)
        lines = ext[start - ext_lo : before - ext_lo]
        messages = self._read_lines(lines, content_limit, first_index=start)
        if len(lines):
            lo, hi = int(lines[0]), int(lines[-1])
        else:
            lo = hi = layout.messages[before] if before < total else layout.line_count
        # The compaction in force at the first message, and those among the window's
        # lines; a bounded window returns at most `limit` of the latter (the newest).
        in_force = layout.compactions.bisect_right(lo)
        c_last = layout.compactions.bisect_right(hi)
        inside = c_last - in_force
        keep = inside if limit is None else min(inside, limit)
        comp_lines = layout.compactions.slice(c_last - keep, c_last)
        if in_force:
            comp_lines = np.concatenate([layout.compactions.slice(in_force - 1, in_force), comp_lines])
        self._check_lines(comp_lines, (lineindex.COMPACTION,), complete=keep == inside)
        compactions = self._read_lines(comp_lines, content_limit, first_index=None)
        return Window(messages=messages, message_start=start, message_count=total,
                      has_more_before=start > 0, compactions=compactions,
                      compactions_omitted=inside - keep, content_limit=content_limit)

    def _check_lines(self, lines: np.ndarray, kinds: tuple[int, ...], *, complete: bool = True) -> None:
        """The layout's own arrays must agree on these lines: in range, increasing, of
        the expected kinds, and (``complete``) none of those kinds missing between them.
        A sidecar whose arrays lie fails here (they carry no checksum: decision 0006)."""
        if not len(lines):
            return
        layout = self._layout
        if int(lines[0]) < 0 or int(lines[-1]) >= layout.line_count:
            raise _StaleLayout("indexed line numbers out of range")
        # Compare neighbours, never subtract them: np.diff wraps on int64 offsets.
        if len(lines) > 1 and not bool(np.all(lines[1:] > lines[:-1])):
            raise _StaleLayout("indexed line numbers not increasing")
        span = layout.kinds.slice(int(lines[0]), int(lines[-1]) + 1)
        mask = is_sequence(span) if kinds is SEQUENCE_KINDS else span == kinds[0]
        if (complete and int(mask.sum()) != len(lines)) or not bool(np.all(mask[lines - lines[0]])):
            raise _StaleLayout("indexed lines disagree with the line kinds")

    def read_lines(self, start: int, stop: int, *, content_limit: int | None = None) -> list[Entry]:
        """Read physical lines ``start:stop`` of any kind (sessions, model changes...)."""
        _check_limit("start", start, 0)
        _check_limit("stop", stop, 0)
        _check_limit("content_limit", content_limit, 0)
        self._check_open()

        def read() -> list[Entry]:
            stop_ = min(stop, self._layout.line_count)
            lines = np.arange(start, max(start, stop_), dtype=np.int64)
            return self._read_lines(lines, content_limit, first_index=None, any_kind=True)

        return self._checked_read(read)

    def _read_lines(self, lines: np.ndarray, content_limit: int | None, *,
                    first_index: int | None, any_kind: bool = False) -> list[Entry]:
        layout = self._layout
        starts, ends, kinds = layout.line_info(lines)
        kinds = kinds.tolist()
        if content_limit is None:
            projected = [False] * len(lines)
        else:
            projected = ((ends - starts - 1) > content_limit).tolist()
        indices = (range(first_index, first_index + len(lines)) if first_index is not None
                   else [None] * len(lines))
        plan = [_Line(*t) for t in zip(lines.tolist(), indices, starts.tolist(), ends.tolist(),
                                        kinds, projected)]
        entries: list[Entry] = []
        i = 0
        while i < len(plan):
            if plan[i].projected:
                entries.append(self._read_projected(plan[i], content_limit, any_kind))
                i += 1
                continue
            # Coalesce a run of whole lines that sit close together into one read; the
            # byte before the first line comes along to check it really starts a line.
            j = i + 1
            while (j < len(plan) and not plan[j].projected
                   and plan[j].start - plan[j - 1].end < COALESCE_GAP
                   and plan[j].end - plan[i].start <= MAX_RUN_BYTES):
                j += 1
            run_start, run_end = plan[i].start, plan[j - 1].end
            pre = 1 if run_start > 0 else 0
            buf = pread_exact(self._fd, run_start - pre, run_end - run_start + pre)
            if len(buf) != run_end - run_start + pre:
                raise _StaleLayout(f"line {plan[j - 1].line} runs past the end of the file")
            if pre and buf[0] != 10:
                raise _StaleLayout(f"line {plan[i].line} does not start after a newline")
            # Every other line of the run starts after a newline and ends with one: the
            # rescan proves it along with the kinds.
            self._check_framing(buf, pre, run_start, plan[i].line, plan[j - 1].line)
            for ln in plan[i:j]:
                at = ln.start - run_start + pre
                body = buf[at : at + ln.end - ln.start - 1]
                if ln.start == 0 and body.startswith(BOM):
                    body = body[3:]
                entries.append(self._entry(ln, body, body, 0, any_kind, content_limit))
            i = j
        return entries

    def _check_framing(self, buf: bytes, pre: int, start: int, first: int, last: int) -> None:
        """Frame and classify again every line whose bytes a read holds (physical lines
        ``first..last``, at ``buf[pre:]`` from file offset ``start``) and compare with
        the layout. The file's fingerprint (size, mtime, its first and last 4 KiB) cannot
        see a change of the same size in the middle within one mtime tick; this check
        sees it wherever a read goes, kinds and line counts included, at the cost of
        one native scan of bytes already in memory."""
        res = lineindex.scan_bytes(memoryview(buf)[pre:], native_table(self.dialect), base_offset=start,
                             classify_window=self._window)
        layout = self._layout
        starts = np.frombuffer(res.starts, dtype=np.int64)
        kinds = np.frombuffer(res.kinds, dtype=np.uint8)
        if res.torn_bytes or len(starts) != last - first + 1 \
                or not np.array_equal(starts, layout.starts.slice(first, last + 1)):
            raise _StaleLayout(f"lines {first}..{last} are not framed as the layout says")
        want = layout.kinds.slice(first, last + 1)
        differ = np.flatnonzero(kinds != want)
        for k in differ.tolist():
            # The scan leaves a line whose "type" lies past its window undecided; the
            # layout holds the kind a full parse gave it, which this line must still have.
            if kinds[k] == lineindex.UNDECIDED:
                a = int(starts[k]) - start + pre
                b = int(starts[k + 1]) - start + pre if k + 1 < len(starts) else len(buf)
                if classify_by_parse(buf[a:b], self._type_kinds, at_file_start=starts[k] == 0) == want[k]:
                    continue
            raise _StaleLayout(f"line {first + k} is not of the kind the layout says; "
                               "the file was changed in place")

    def _read_projected(self, ln: "_Line", content_limit: int, any_kind: bool) -> Entry:
        """A line longer than the display budget: read a prefix and project it."""
        body_len = ln.end - ln.start - 1
        bom = 3 if ln.start == 0 else 0
        want = min(body_len, content_limit + ENVELOPE + bom)
        pre = 1 if ln.start > 0 else 0
        buf = pread_exact(self._fd, ln.start - pre, want + pre)
        if len(buf) != want + pre or (pre and buf[0] != 10):
            raise _StaleLayout(f"line {ln.line} does not start after a newline")
        if pread_exact(self._fd, ln.end - 1, 1) != b"\n":
            raise _StaleLayout(f"line {ln.line} does not end with a newline")
        skip = pre + (3 if bom and buf[pre : pre + 3] == BOM else 0)
        body_len -= skip - pre
        prefix = memoryview(buf)[skip:]  # no copy of a prefix that may be 128 KiB
        display, _kept, cut = lineindex.project_display(prefix, body_len, content_limit)
        if display is not None:
            try:
                rec = decode_record(display)
            except LineUnreadable:
                rec = None
            if isinstance(rec, dict):
                return self._record_entry(ln, rec, cut, any_kind)
        # The prefix is not a record we can show. That may be the line's fault (it is
        # corrupt) or the projection's (nesting deeper than it follows): only a full
        # parse can tell, and the whole point here is not to do one. Show the raw
        # prefix, and leave the verdict on the line to a full read.
        return self._raw_entry(ln, prefix, "not displayable within the content limit",
                               content_limit, total=body_len)

    def _entry(self, ln: "_Line", source: bytes, raw: bytes, cut: int, any_kind: bool,
               content_limit: int | None, total: int | None = None) -> Entry:
        """Parse ``source`` (the line, or its display projection) into an Entry; ``raw``
        is what a corrupt entry shows."""
        try:
            rec = decode_record(source)
            if not isinstance(rec, dict):
                raise LineUnreadable("a record must be a JSON object")
        except LineUnreadable as exc:
            return self._corrupt(ln, raw, str(exc), content_limit, total=total)
        return self._record_entry(ln, rec, cut, any_kind)

    def _record_entry(self, ln: "_Line", rec: dict, cut: int, any_kind: bool) -> Entry:
        layout = self._layout
        t = rec.get("type")
        if (not any_kind and (self._type_kinds.get(t) if isinstance(t, str) else None) != ln.kind
                and ln.kind in (lineindex.MESSAGE, lineindex.COMPACTION) and ln.line not in layout.known_bad):
            if layout.from_sidecar:
                # A sidecar could put us on the wrong line; a record whose type does not
                # map to the indexed kind proves it.
                raise _StaleLayout(f"line {ln.line} is a {rec.get('type')!r} record, not the indexed kind")
            # A fresh scan said so all the same (a second "type" key): remember that,
            # so the sidecar is not taken for a liar on every open.
            layout.known_bad.add(ln.line)
            layout.bad_dirty = True
        return Entry(line=ln.line, index=ln.index, offset=ln.start, length=ln.end - ln.start,
                     record=rec, cut_bytes=cut)

    def _corrupt(self, ln: "_Line", body: bytes, why: str, content_limit: int | None,
                 total: int | None = None) -> Entry:
        layout = self._layout
        if ln.kind not in (lineindex.CORRUPT, lineindex.BLANK) and ln.line not in layout.known_bad:
            if layout.from_sidecar:
                # A sidecar said this was a good record: believe the bytes, not the
                # sidecar, until a fresh scan of this file says the same.
                raise _StaleLayout(f"line {ln.line} is not the record the layout indexed")
            layout.known_bad.add(ln.line)
            layout.bad_dirty = True
        if ln.kind == lineindex.BLANK:
            why = "blank line"
        return self._raw_entry(ln, body, why, content_limit, total=total)

    def _raw_entry(self, ln: "_Line", body, why: str, content_limit: int | None,
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
        return Entry(line=ln.line, index=ln.index, offset=ln.start, length=ln.end - ln.start,
                     record=None, cut_bytes=max(cut, 0), corrupt=why, raw=text)

    # -- layout upkeep --------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"transcript {self.path!r} is closed")

    def _refresh(self) -> None:
        """Notice a replaced, grown, shrunk or rewritten file since the last read.
        Costs one ``stat`` when nothing changed."""
        st = self._stat_path()
        mine = os.fstat(self._fd)
        if (st.st_ino, st.st_dev) != (mine.st_ino, mine.st_dev):
            # Replaced by a rename (a rewrite): follow the path to the new file, opened
            # without blocking and refused unless it is a regular file (a FIFO swapped
            # in after the stat above would otherwise block this open forever).
            fd = open_regular_fd(self.path)
            os.close(self._fd)
            self._fd = fd
            if self._wfd is not None:
                os.close(self._wfd)  # never append to the file that was replaced
                self._wfd = None
            self._layout = _load_or_build(self.path, fd, self.dialect, self._window, None)
            return
        ident = self._layout.identity
        if (st.st_size, st.st_mtime_ns) == (ident.size, ident.mtime_ns):
            return
        verdict = judge(self._layout, self._fd)
        if verdict == "valid":
            return
        if verdict == "extend":
            extend_layout(self._layout, self._fd)
            self._layout.outcome = "extend"
        else:
            self._rebuild(verdict)

    def _rebuild(self, reason: str) -> None:
        self._layout = build_layout(self._fd, dialect=self.dialect, window=self._window)
        self._layout.outcome = "rebuilt"
        self._save_layout()

    def _stat_path(self) -> os.stat_result:
        """``stat`` of the path, refused unless it is a regular file: a FIFO would block
        the next open or read, and a device would read as empty and swallow appends."""
        try:
            st = os.stat(self.path)
        except OSError as exc:
            raise map_open_error(self.path, exc) from None
        if not stat.S_ISREG(st.st_mode):
            raise TranscriptNotAFile(
                errno.EISDIR if stat.S_ISDIR(st.st_mode) else errno.EINVAL,
                f"{self.path!r} is now {kind_of(st.st_mode)}, not the regular file that was "
                "opened; nothing was read or written. Put the transcript back, or open it again")
        return st

    def _save_layout(self) -> None:
        """Persist the layout, but only while the path still names the file it describes:
        never write a sidecar beside a device or a file that replaced it."""
        if _names(self.path, self._fd):
            save_layout(self._layout, self.path)

    # -- writing ------------------------------------------------------------------

    def _acquire_lock(self, *, wait: float = 0.0) -> None:
        """Take the cross-process write lock (held until close), beside a regular file
        only (never a ``.lock`` beside a device the path was replaced by); ``wait``:
        seconds to keep trying while another writer holds it."""
        self._check_open()
        if self._lock_fd is None:
            self._stat_path()
            lock_path = os.path.realpath(self.path) + ".lock"
            try:
                lfd = os.open(lock_path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
            except OSError as exc:
                if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
                    raise
                raise TranscriptPermission(
                    exc.errno, f"cannot write beside {self.path!r}: its folder is read-only "
                               f"({exc.strerror}); copy the transcript somewhere writable") from None
            deadline = time.monotonic() + max(wait, 0.0)
            while True:
                try:
                    fcntl.flock(lfd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        os.close(lfd)
                        raise TranscriptLocked(
                            11, f"another writer holds {self.path!r}; close it there first "
                                "(readers never need the lock)") from None
                    time.sleep(LOCK_POLL_S)
            self._lock_fd = lfd
            _remove_leftovers(os.path.realpath(self.path))

    def _holds_lock_now(self) -> bool:
        """Take the write lock if it is free (kept until close, as any writer's)."""
        try:
            self._acquire_lock()
        except TranscriptLocked:
            return False
        return True

    def _acquire_writer(self) -> int:
        """The write lock and an append fd on the very file being read (call after
        :meth:`_refresh`): opened without blocking, and refused unless it is that
        regular file (same device and inode), so an append cannot go to a FIFO, a
        device or a file swapped in since the read."""
        self._acquire_lock()
        if self._wfd is None:
            flags = (os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
                     | getattr(os, "O_NOCTTY", 0))
            try:
                wfd = os.open(self.path, flags)
            except PermissionError as exc:
                raise TranscriptPermission(
                    exc.errno, f"cannot append to {self.path!r}: permission denied") from None
            except OSError as exc:  # ENXIO: a FIFO with no reader; ENOENT: gone
                raise TranscriptChanged(
                    f"{self.path!r} could not be opened for appending ({exc.strerror}); it was "
                    "replaced or removed since it was read. Nothing was written") from None
            st, mine = os.fstat(wfd), os.fstat(self._fd)
            if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (mine.st_dev, mine.st_ino):
                os.close(wfd)
                if not stat.S_ISREG(st.st_mode):
                    raise TranscriptNotAFile(
                        errno.EINVAL, f"{self.path!r} is now {kind_of(st.st_mode)}, not the regular "
                                      "file that was opened; nothing was written")
                raise TranscriptChanged(
                    f"{self.path!r} was replaced by another file just before the append; nothing "
                    "was written. Append it again")
            fcntl.fcntl(wfd, fcntl.F_SETFL, fcntl.fcntl(wfd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
            self._wfd = wfd
        return self._wfd

    def append(self, record: dict[str, Any] | msgspec.Struct, *, sync: bool = True, lock_wait: float = 0.0) -> int:
        """Append one record as one complete line, written with one ``write`` call.

        A torn tail left by an earlier crash is first moved to a side file (see
        :attr:`torn_files`), so the new line is never welded onto it.

        Parameters
        ----------
        record : dict or msgspec.Struct
            Must have a string ``"type"``; it is written as the first key.
        sync : bool
            ``fsync`` after the write (default), so a power cut cannot lose it.
        lock_wait : float
            Seconds to wait for the write lock while another writer holds it (default:
            refuse at once). Once taken, the lock is held until :meth:`close`.

        Returns
        -------
        int
            The new line's physical line number.

        Raises
        ------
        EntryInvalid, TranscriptLocked, TranscriptPermission
        """
        line = encode_record(record)
        self._acquire_lock(wait=lock_wait)
        self._refresh()  # may follow the path to a replaced file (and drop the old fd)
        wfd = self._acquire_writer()
        if self._layout.torn_bytes:
            self._quarantine_tail()
        n = os.write(wfd, line)
        if n != len(line):
            # The short write is now a torn tail; the next append moves it aside.
            extend_layout(self._layout, self._fd)
            raise OSError(f"short write appending to {self.path!r} ({n} of {len(line)} bytes); "
                          "the disk may be full")
        if sync:
            os.fsync(wfd)
        if not _names(self.path, wfd):
            # Something that ignores the write lock replaced the file mid-append.
            raise TranscriptChanged(
                f"{self.path!r} was replaced by another program during the append; the "
                "record went to the replaced file. Append it again.")
        before = self._layout.line_count
        extend_layout(self._layout, self._fd, written=line)
        return before

    def _quarantine_tail(self) -> str:
        """Move the bytes after the last ``\\n`` into a side file, then cut them off."""
        end = self._layout.indexed_end
        tail = pread_exact(self._fd, end, self._layout.scanned_end - end)
        side = f"{os.path.realpath(self.path)}{TORN_INFIX}{end}-{time.time_ns()}"
        try:
            with open(side, "xb") as f:
                f.write(tail)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            # A full disk: the tail stays in the transcript for the next try, and no
            # empty side file is left behind for each failed append.
            _unlink_quietly(side)
            raise
        os.ftruncate(self._wfd, end)
        os.fsync(self._wfd)
        self.torn_files.append(side)
        extend_layout(self._layout, self._fd)
        return side

    def history(self) -> History:
        """Read the whole transcript, uncapped, for a full-history rewrite."""
        self._check_open()
        return self._checked_read(self._read_history)

    def _read_history(self) -> History:
        layout = self._layout
        if layout.torn_bytes:
            # An unfinished write: a writer is still at it, or died mid-append. Every
            # writer holds the lock, so if it can be taken nobody is writing, and the
            # tail is moved aside (as the next append would) instead of refusing forever.
            if not self._holds_lock_now():
                raise TranscriptChanged(
                    f"{self.path!r} ends with {layout.torn_bytes} bytes of a write still in progress "
                    "in another process; take the history once it has finished")
            self._acquire_writer()
            self._quarantine_tail()
            layout = self._layout
        starts = layout.starts.all()
        kinds = layout.kinds.all()
        if layout.from_sidecar and not layout.agrees(starts, kinds):
            raise _StaleLayout("the layout's arrays disagree with each other")
        ends = np.append(starts[1:], layout.indexed_end)
        lines: list[bytes] = []
        i = 0
        # Read in runs of at most MAX_RUN_BYTES (or one longer line), checking that
        # every line starts after a newline and ends with one.
        while i < len(starts):
            j = i + 1
            while j < len(starts) and ends[j] - starts[i] <= MAX_RUN_BYTES:
                j += 1
            lo, hi = int(starts[i]), int(ends[j - 1])
            pre = 1 if lo > 0 else 0
            buf = pread_exact(self._fd, lo - pre, hi - lo + pre)
            if len(buf) != hi - lo + pre or (pre and buf[0] != 10):
                raise _StaleLayout(f"line {i} does not start after a newline")
            self._check_framing(buf, pre, lo, i, j - 1)  # and so every line ends with a newline
            view = memoryview(buf)
            for k in range(i, j):
                a, b = int(starts[k]) - lo + pre, int(ends[k]) - lo + pre
                lines.append(bytes(view[a:b]))
            i = j
        is_msg = is_sequence(kinds).tolist()
        token = (layout.identity, layout.indexed_end)
        return History(lines, starts.tolist(), is_msg, token, self)

    def rewrite(self, history: History) -> None:
        """Replace the transcript with ``history``: temp file, fsync, rename.

        Raises
        ------
        PartialHistoryRewrite
            When given anything but a :class:`History` from :meth:`history` (a window,
            or a list of its messages, would delete everything older than it).
        TranscriptChanged
            When the transcript changed since the history was read.
        """
        if not isinstance(history, History):
            raise PartialHistoryRewrite(
                f"rewrite() takes the complete history, got {type(history).__name__}: a window "
                "holds only part of the transcript and rewriting from it would delete older "
                "messages. Call history(), edit it, then rewrite() it.")
        if history._source is not self:
            raise PartialHistoryRewrite("this history was read from another Transcript object")
        self._acquire_lock()
        self._refresh()
        self._acquire_writer()
        if (self._layout.identity, self._layout.indexed_end) != history._token:
            raise TranscriptChanged(
                f"{self.path!r} changed since its history was read; read history() again")
        data = history.data()
        # Through a symlink the file is replaced, not the link; it keeps its mode.
        with replacing(self.path, temp_name=lambda name: f"{_rewrite_prefix(name)}{secrets.token_hex(8)}",
                       mode=stat.S_IMODE(os.fstat(self._fd).st_mode)) as f:
            f.write(data)
        # Invalidate both cache layers: the sidecars on disk and the layout in memory.
        for side in sidecar_paths(self.path):
            _unlink_quietly(side)
        os.close(self._wfd)
        self._wfd = None
        new_fd = open_regular_fd(self.path)
        os.close(self._fd)
        self._fd = new_fd
        self._layout = build_layout(new_fd, dialect=self.dialect, window=self._window)
        self._layout.outcome = "rebuilt"
        self._save_layout()
        history._token = (self._layout.identity, self._layout.indexed_end)

    def edit(self, message: int | Entry, record: dict[str, Any], *,
             lock_wait: float = EDIT_LOCK_WAIT_S) -> None:
        """Replace a message: rehydrates the full history, then rewrites.

        ``message`` is a message index, or the :class:`Entry` a window returned; given
        an Entry, the edit is refused (TranscriptChanged) unless that index still holds
        the line the entry was read from. The write lock is taken first (waiting up to
        ``lock_wait`` seconds for another writer's append to end), so the history read
        is the one rewritten: no append can come between them.
        """
        self._edit_under_lock(lambda h, i: h.replace_message(i, record), message, lock_wait)

    def delete(self, message: int | Entry, *, lock_wait: float = EDIT_LOCK_WAIT_S) -> None:
        """Delete a message (index or Entry, as for :meth:`edit`), then rewrite."""
        self._edit_under_lock(History.delete_message, message, lock_wait)

    def truncate(self, message: int | Entry, *, lock_wait: float = EDIT_LOCK_WAIT_S) -> None:
        """Delete a message and all after it (abort, switch to another revision)."""
        self._edit_under_lock(History.truncate_messages, message, lock_wait)

    def _edit_under_lock(self, change: Callable[[History, int], None], message: int | Entry,
                         lock_wait: float) -> None:
        self._acquire_lock(wait=lock_wait)
        h = self.history()
        change(h, self._index_in(h, message))
        self.rewrite(h)

    def _index_in(self, history: History, message: int | Entry) -> int:
        if not isinstance(message, Entry):
            _check_limit("message index", message, 0)
            return message
        if message.index is None or history.offset_of(message.index) != message.offset:
            raise TranscriptChanged(
                f"message {message.index} of {self.path!r} is no longer the line it was read "
                "from; read the window again before editing")
        return message.index


def _names(path: str, fd: int) -> bool:
    """Whether ``path`` still names the regular file open as ``fd``."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    mine = os.fstat(fd)
    return stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


# What a writer leaves beside a transcript named NAME: ".NAME.rewrite-<16 hex>" while it
# rewrites, "NAME.torn-<offset>-<ns>" for a torn tail it moved aside.
TORN_INFIX = ".torn-"
_REWRITE_INFIX = ".rewrite-"


def _rewrite_prefix(name: str) -> str:
    if len(os.fsencode(name)) > 200:  # keep the temporary name under NAME_MAX (255)
        name = f"{name[:100]}~{hashlib.sha256(os.fsencode(name)).hexdigest()[:16]}"
    return f".{name}{_REWRITE_INFIX}"


def _remove_leftovers(real: str) -> list[str]:
    """Remove what dead writers left beside transcript ``real``: the temporary copies
    of rewrites they did not finish, and torn-tail side files left empty (created, then
    the disk was full). Call with the write lock held: every rewrite of this transcript
    runs under it, so no live writer owns what is found. A torn-tail file with bytes in
    it is the user's data and stays."""
    folder, name = os.path.split(real)
    prefix, torn = _rewrite_prefix(name), name + TORN_INFIX
    removed = []
    try:
        entries = list(os.scandir(folder or "."))
    except OSError:
        return removed
    for entry in entries:
        try:
            if entry.name.startswith(prefix):
                suffix = entry.name[len(prefix):]
                if len(suffix) != 16 or any(c not in "0123456789abcdef" for c in suffix):
                    continue
            elif not (entry.name.startswith(torn) and entry.is_file(follow_symlinks=False)
                      and entry.stat(follow_symlinks=False).st_size == 0):
                continue
            if not entry.is_file(follow_symlinks=False):
                continue
            os.unlink(entry.path)
            removed.append(entry.path)
        except OSError:
            continue  # gone already, or not ours to remove: never fail the lock for it
    return removed


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _load_or_build(path: str, fd: int, dialect: str, window: int, progress) -> Layout:
    layout, verdict = load_layout(path, fd, dialect=dialect, window=window)
    if layout is None:
        layout = build_layout(fd, dialect=dialect, window=window, progress=progress)
        layout.outcome = "built" if verdict == "no sidecar" else "rebuilt"
    elif verdict == "extend":
        extend_layout(layout, fd, progress=progress)
    if _names(path, fd):  # never a sidecar beside what replaced the file meanwhile
        save_layout(layout, path)
    return layout
