"""The transcript store: bounded windows over a lossless JSONL file.

Reads never parse more than the window asks for: the layout (line offsets and kinds,
cached in a sidecar) says where each message is, and lines longer than the display
budget are read as a prefix and projected natively. Writes append one complete line
with one ``write`` call under a cross-process lock, or replace the whole file
atomically from a complete history. Nothing a reader is shown is trusted blindly:
every line read is checked against the file, and a layout caught lying is rebuilt.
"""

from __future__ import annotations

import bisect
import errno
import itertools
import os
import stat
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import msgspec
import numpy as np

from boundctx import config as _config
from boundctx._files import kind_of
from boundctx.errors import PartialHistoryRewrite, TranscriptChanged, TranscriptLocked, TranscriptNotAFile
from boundctx.transcript import branches as _branches
from boundctx.transcript.arrays import SidecarGone
from boundctx.transcript.dialects import dialect_kinds
from boundctx.transcript.entries import Entry, Window
from boundctx.transcript.kinds import DEFAULT_CLASSIFY_WINDOW, LineKind
from boundctx.transcript.layout import (
    Layout,
    Outcome,
    build_layout,
    extend_layout,
    is_sequence,
    judge,
    load_layout,
    save_layout,
)
from boundctx.transcript.lineformat import encode_record
from boundctx.transcript.opening import (
    map_open_error,
    open_regular_fd,
    open_transcript_fd,
    resolved_path,
    still_names,
)
from boundctx.transcript.reading import ENVELOPE, LineReader, StaleLayout
from boundctx.transcript.sidecar import sidecar_paths
from boundctx.transcript.tree import entry_id, id_hash
from boundctx.transcript.writing import (
    History,
    file_identity,
    lock_still_held,
    move_tail_aside,
    open_append_fd,
    replace_file,
    take_write_lock,
    unlink_quietly,
    write_line,
)

__all__ = ["RENDERER_PRESET", "UNSET", "Transcript"]

#: A window limit not given (``None`` is a real value: uncapped).
UNSET = msgspec.UNSET

#: The ``renderer`` preset's defaults: the newest 100 messages, 64 KiB of text each.
#: They are the defaults of the settings the preset reads (``transcript.window_*``).
RENDERER_PRESET = {"message_limit": _config.KEYS["transcript.window_messages"].default,
                   "content_limit": _config.KEYS["transcript.window_content_bytes"].default,
                   "page_bytes": _config.KEYS["transcript.window_page_bytes"].default}

# edit/delete/truncate wait this long for another writer's append to finish: an
# append holds the lock for one write (and fsync), a writer that keeps it open for
# longer is refused with TranscriptLocked. Polled, as flock has no timeout.
EDIT_LOCK_WAIT_S = 5.0



def _check_limit(name: str, value, minimum: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int or None, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum} or None, got {value}")


def _span(before: int | None, limit: int | None, total: int, of: str) -> tuple[int, int]:
    """``(message_before, message_start)`` of a window of ``total`` messages."""
    if before is None:
        before = total
    elif before > total:
        raise ValueError(f"message_before={before} is past the last message; {of} has {total}")
    return before, 0 if limit is None else max(0, before - limit)


def _identity_of(fd: int) -> tuple[int, int]:
    """``(inode, device)`` of an open file."""
    st = os.fstat(fd)
    return st.st_ino, st.st_dev


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
    window = _config.resolve(settings).transcript
    return {"message_limit": window.window_messages, "content_limit": window.window_content_bytes,
            "page_bytes": window.window_page_bytes}


def window_limits(message_before, message_limit, content_limit, preset, settings, page_bytes,
                  ) -> tuple[int | None, int | None, int | None]:
    """``(message_limit, content_limit, page_bytes)`` of a window as
    :meth:`Transcript.window` takes its arguments (a preset fills the limits not given),
    each checked: every store reads windows by the same rules."""
    if preset is not None:
        if preset != "renderer":
            raise ValueError(f"unknown preset {preset!r}; the only preset is 'renderer'")
        if message_limit is UNSET or content_limit is UNSET or page_bytes is UNSET:
            limits = _renderer_limits(settings)
            if message_limit is UNSET:
                message_limit = limits["message_limit"]
            if content_limit is UNSET:
                content_limit = limits["content_limit"]
            if page_bytes is UNSET:
                page_bytes = limits["page_bytes"]
    elif settings is not None:
        raise TypeError("settings= is read only by a preset; pass preset='renderer' with it")
    if message_limit is UNSET:
        message_limit = None
    if content_limit is UNSET:
        content_limit = None
    if page_bytes is UNSET:
        page_bytes = None
    _check_limit("message_before", message_before, 0)
    _check_limit("message_limit", message_limit, 0)
    _check_limit("content_limit", content_limit, 0)
    _check_limit("page_bytes", page_bytes, 1)
    return message_limit, content_limit, page_bytes


def fit_page(lines: np.ndarray, lengths: Sequence[int] | np.ndarray | None, start: int, content_limit: int | None,
             page_bytes: int | None, entries: Callable[[np.ndarray, int], list[Entry]],
             ) -> tuple[list[Entry], int, np.ndarray]:
    """The entries of message ``lines`` (indexes ``start...``; ``lengths``: each line's
    bytes, ``\\n`` included), or under ``page_bytes`` the newest of them whose shown bytes
    fit together (at least one): ``(entries, index of the first, their lines)``.
    ``entries(some_lines, first_index)`` reads lines. What a line shows is known before it
    is read for a whole line (its length), and bounded below for a projected one (its
    length, or the content limit): lines are read from the newest as far as that bound
    lets the page grow, and trimmed on their exact shown bytes. The lengths are summed as a
    list: for a hundred of them, Python is faster than numpy's first call."""
    if page_bytes is None or lengths is None or not len(lines):
        return entries(lines, start), start, lines
    high = low = lengths.tolist() if isinstance(lengths, np.ndarray) else list(lengths)
    if content_limit is not None:
        # A projected line shows at most the prefix it is projected from, and at
        # least the content limit (or its whole line).
        cap = content_limit + ENVELOPE + 4
        high = [n if n < cap else cap for n in high]
    if sum(high) <= page_bytes:
        return entries(lines, start), start, lines
    if content_limit is not None:
        low = [n if n < content_limit else content_limit for n in low]
    kept: list[Entry] = []
    used = 0
    hi = len(lines)
    while hi > 0:
        # The older lines the page could still take, by the lower bound.
        room = page_bytes - used
        take = bisect.bisect_right(list(itertools.accumulate(reversed(low[:hi]))), room)
        lo = hi - max(take, 1)
        batch = entries(lines[lo:hi], start + lo)
        fitted = 0
        for entry in reversed(batch):
            shown = entry.length - entry.cut_bytes
            if kept and used + shown > page_bytes:
                break
            kept.append(entry)
            used += shown
            fitted += 1
        if fitted < len(batch) or used >= page_bytes:
            break
        hi = lo
    kept.reverse()
    first = len(lines) - len(kept)
    return kept, start + first, lines[first:]


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
                 classify_window: int, real: str, within: str | None = None) -> None:
        self.path = path
        self.dialect = dialect
        self._fd = fd
        # The open file's identity, which an fd keeps for life: a refresh compares the
        # path's with it, so a read costs one stat.
        self._fd_ident = _identity_of(fd)
        # Where the open file really is (checked against the fd): the lock, the sidecar,
        # torn tails and rewrites go beside this, never beside wherever ``path`` points
        # later. It changes only when a refresh follows ``path`` to a replacement file.
        self._real = real
        self._within = within
        self._layout = layout
        self._classify_window = classify_window
        self._wfd: int | None = None
        self._lock_fd: int | None = None
        self._closed = False
        #: side files holding torn tails this Transcript moved aside
        self.torn_files: list[str] = []
        #: the last branch walked whole, for the next page of it
        self._branch_cache: _branches.BranchCache | None = None

    # -- opening ------------------------------------------------------------------

    @classmethod
    def open(cls, path: str | os.PathLike, *, dialect: str = "auto", create: bool = False,
             progress: Callable[[int], object] | None = None,
             classify_window: int = DEFAULT_CLASSIFY_WINDOW,
             within: str | os.PathLike | None = None) -> Transcript:
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
        classify_window : int
            How many leading bytes of a line decide its kind (a line whose ``"type"``
            lies further in is settled by a full parse); part of the sidecar's identity.
        within : str or os.PathLike, optional
            A folder the transcript must lie directly inside, symlinks resolved, now and
            whenever the path is followed again (a served sessions folder): anything
            else is :class:`TranscriptNotFound`, before anything is written.

        Raises
        ------
        TranscriptNotFound, TranscriptNotAFile, TranscriptPermission, TranscriptChanged
        """
        path = os.fspath(path)
        dialect_kinds(dialect)  # a clear ValueError for an unknown dialect, before any I/O
        folder = os.path.realpath(within) if within is not None else None
        fd, real = _open_resolved(path, folder, lambda: open_transcript_fd(path, create=create))
        try:
            layout = _load_or_build(real, fd, dialect, classify_window, progress)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd, layout, dialect=dialect, classify_window=classify_window, real=real,
                   within=folder)

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

    def __enter__(self) -> Transcript:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<Transcript {self.path!r} messages={self.message_count} "
                f"layout={self.layout_outcome}>")

    # -- facts --------------------------------------------------------------------

    @property
    def message_count(self) -> int:
        """Messages in the transcript (message lines and corrupt lines) on the branch reads
        follow by default: every one of them, unless the file is a tree that forks
        (:meth:`branches`)."""
        layout = self._layout
        return layout.message_count if layout.reads_as_list else self._active_branch()[1]

    @property
    def in_file_order(self) -> bool:
        """Whether every message line of the file is on the branch reads follow, once, in
        the order written (a list, or a tree that never forked). False when a rewind left
        another branch in the file (:meth:`branches` lists them) or an entry was appended
        again (read once)."""
        return self._layout.reads_as_list

    def branches(self) -> list[_branches.Branch]:
        """Every branch of messages, the active one first, then the others newest first:
        a file without forks has one. Costs a pass over the layout's arrays (not the file)."""
        self._check_open()

        def read() -> list[_branches.Branch]:
            return _branches.list_branches(self._layout, self._entry_ids)

        return self._checked_read(read)

    def _entry_ids(self, lines: list[int]) -> list[str | None]:
        """The own ids of the entries at ``lines`` (read whole, up to a few hundred)."""
        reader = self._reader()
        out: list[str | None] = []
        for line in lines:
            [entry] = reader.entries(np.array([line], dtype=np.int64), 4096, first_index=None, any_kind=True)
            out.append(entry_id(entry.record, self.dialect) if entry.record is not None else None)
        return out

    def stat(self) -> os.stat_result:
        """``fstat`` of the file open now (the one the last read used)."""
        self._check_open()
        return os.fstat(self._fd)

    def identity(self) -> str:
        """What tells the file open now (the one the last read used) apart from every
        file that was at its path before or comes after: a rewrite changes it, an append
        never does (:func:`~boundctx.transcript.writing.file_identity`)."""
        self._check_open()
        return file_identity(self._fd)

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
    def layout_outcome(self) -> Outcome:
        """How the layout was obtained on the last (re)load: ``"built"``, ``"valid"``,
        ``"extend"`` or ``"rebuilt"``."""
        return self._layout.outcome

    def kinds(self) -> np.ndarray:
        """The kind of every complete line, one byte each: a :class:`~boundctx.transcript.kinds.LineKind`
        value (``LineKind(kinds[i])`` names it)."""
        return self._layout.kinds.all()

    # -- reading ------------------------------------------------------------------

    def window(self, *, message_before: int | None = None,
               message_limit: int | None | msgspec.UnsetType = UNSET,
               content_limit: int | None | msgspec.UnsetType = UNSET,
               preset: Literal["renderer"] | None = None,
               settings: Mapping[str, Any] | None = None,
               leaf: int | str | None = None,
               page_bytes: int | None | msgspec.UnsetType = UNSET) -> Window:
        """Read a bounded window of consecutive messages.

        In a transcript whose entries name their parents (Claude Code, pi), the messages
        are those of one branch: the path from the root to the newest message (what the
        agent holds current: a rewind's abandoned branch is left out, a parallel call's
        results and the chain across a compaction are kept), or to ``leaf``. A message's
        index is its place on the branch, counted from the root: stable while the branch
        grows, and the same on every branch through it. A file without parents is one
        branch, in file order.

        Parameters
        ----------
        message_before : int, optional
            Exclusive end of the window (default: after the newest message).
        message_limit : int or None, optional
            At most this many messages, the newest before ``message_before``; None:
            all of them (the default without a preset).
        content_limit : int or None, optional
            Per-message display budget in bytes of string content; longer messages are
            projected with an explicit marker. None: uncapped, the model path (the
            default without a preset).
        page_bytes : int or None, optional
            Bytes of the file the whole window shows, at most: each message counts the
            bytes of its line it shows (``Entry.length - Entry.cut_bytes``), and the
            window holds the newest messages before ``message_before`` that fit together,
            at most ``message_limit``; the newest always comes, so paging never stalls.
            ``message_start`` and ``has_more_before`` say where the page began. None:
            no page budget (the default without a preset).
        preset : "renderer", optional
            Fill the limits not given from the settings ``transcript.window_messages``,
            ``transcript.window_content_bytes`` and ``transcript.window_page_bytes``
            (default 100 messages, 64 KiB each, 1 MiB in all). A limit given as None stays
            uncapped.
        settings : mapping, optional
            With ``preset``: the settings to read, resolved :class:`~boundctx.config.Settings`
            or a partial mapping applied over them (default
            :func:`boundctx.config.load`, read only when a limit is unset).
        leaf : int or str, optional
            The branch to read, by its leaf: a line number (``Branch.leaf``, ``Entry.line``)
            or an entry's own id (``uuid``, ``id``); a string of digits that is no entry's
            id is read as a line number (so a command line or a query passes what it was
            given). Default: the newest message's branch.

        Returns
        -------
        Window

        Raises
        ------
        ValueError
            For a limit out of range, or a leaf that is no line or entry of the transcript.
        ConfigError
            With ``preset``, for settings that cannot be resolved (a value of the wrong
            type or out of range; the message names where it came from).
        TranscriptChanged
            When the file keeps changing under the read even after a rebuild.
        """
        message_limit, content_limit, page_bytes = window_limits(message_before, message_limit, content_limit,
                                                                 preset, settings, page_bytes)
        if leaf is not None and not isinstance(leaf, (int, str)) or isinstance(leaf, bool):
            raise TypeError(f"leaf must be a line number or an entry id, not {type(leaf).__name__}")
        self._check_open()
        return self._checked_read(lambda: self._read_window(message_before, message_limit, content_limit, leaf,
                                                            page_bytes))

    def _checked_read(self, read: Callable[[], Any]) -> Any:
        """Run ``read`` on a fresh view of the file; if a line does not match the
        layout, rebuild the layout from the file once and run it again."""
        for attempt in (0, 1):
            self._refresh()
            try:
                return read()
            except (StaleLayout, SidecarGone) as exc:
                if attempt:
                    raise TranscriptChanged(
                        f"{self.path!r} changed while it was being read ({exc}); "
                        "read it again once the writer has finished") from None
                self._rebuild()  # a line did not match the layout
        raise AssertionError("unreachable")

    def _reader(self) -> LineReader:
        return LineReader(self._fd, self._layout, dialect=self.dialect,
                          classify_window=self._classify_window)

    def _note_bad(self, reader: LineReader) -> None:
        """What a read learnt about lines the layout indexed as records (kept in the
        sidecar, so it is not taken for a liar on the next open)."""
        if reader.bad_lines - self._layout.known_bad:
            self._layout.known_bad |= reader.bad_lines
            self._layout.bad_dirty = True

    def _read_window(self, before, limit, content_limit, leaf=None, page_bytes=None) -> Window:
        layout = self._layout
        if leaf is not None or not layout.reads_as_list:
            return self._read_branch_window(before, limit, content_limit, leaf, page_bytes)
        reader = self._reader()
        total = layout.message_count
        before, start = _span(before, limit, total, "the transcript")
        # One message either side comes along, so a line the arrays skip or repeat at
        # the window's edges shows up in the check below.
        ext_lo, ext_hi = max(start - 1, 0), min(before + 1, total)
        ext = layout.messages.slice(ext_lo, ext_hi)
        reader.check_lines(ext)
        lines = ext[start - ext_lo : before - ext_lo]
        messages, start, lines = self._page(reader, lines, start, content_limit, page_bytes)
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
        reader.check_lines(comp_lines, kind=LineKind.COMPACTION, complete=keep == inside)
        compactions = reader.entries(comp_lines, content_limit, first_index=None)
        self._note_bad(reader)
        # A list's leaf is its newest message or compaction (none of them is a copy).
        newest = int(ext[-1]) if before == total and len(ext) else (layout.messages[total - 1] if total else -1)
        leaf_line = max(newest,
                        layout.compactions[len(layout.compactions) - 1] if len(layout.compactions) else -1)
        return Window(messages=messages, message_start=start, message_count=total,
                      has_more_before=start > 0, compactions=compactions,
                      compactions_omitted=inside - keep, content_limit=content_limit,
                      leaf=leaf_line if leaf_line >= 0 else None, page_bytes=page_bytes,
                      leaf_id=self._leaf_id(reader, leaf_line, messages) if before == total else None)

    def _leaf_id(self, reader: LineReader, leaf_line: int, messages: list[Entry]) -> str | None:
        """The own id of the entry at ``leaf_line``: from the window's newest message when
        it is the leaf, else read (a compaction after it: one line)."""
        if leaf_line < 0:
            return None
        if messages and messages[-1].line == leaf_line:
            entry = messages[-1]
        else:
            [entry] = reader.entries(np.array([leaf_line], dtype=np.int64), None, first_index=None, any_kind=True)
        return entry_id(entry.record, self.dialect) if entry.record is not None else None

    def _page(self, reader: LineReader, lines: np.ndarray, start: int, content_limit: int | None,
              page_bytes: int | None) -> tuple[list[Entry], int, np.ndarray]:
        """:func:`fit_page` of message ``lines`` read by ``reader``."""
        starts, ends, kinds = reader.line_info(lines)  # once: the page's lengths, then each read's

        def read(some: np.ndarray, first: int) -> list[Entry]:
            k, n = first - start, len(some)
            return reader.entries(some, content_limit, first_index=first,
                                  info=(starts[k : k + n], ends[k : k + n], kinds[k : k + n]))
        return fit_page(lines, list(map(int.__sub__, ends, starts)) if page_bytes is not None else None, start,
                        content_limit, page_bytes, read)

    def _leaf_line(self, leaf: int | str | None) -> int:
        """The line of the leaf a read follows (-1: an empty transcript)."""
        layout = self._layout
        if isinstance(leaf, str):
            _keys, lines = layout.lines_of_ids(np.array([id_hash(leaf)], dtype=np.int64))
            if len(lines):
                return int(lines[0])
            if not (leaf.isascii() and leaf.isdigit()):
                raise ValueError(f"leaf={leaf!r} is the id of no entry of {self.path!r}")
            leaf = int(leaf)  # digits no entry has for its id: a line number, as typed
        return _branches.resolve_leaf(layout, leaf)

    def _branch_lines(self, leaf_line: int, lo_index: int, hi_index: int) -> np.ndarray:
        """Message lines ``lo_index..hi_index - 1`` of the branch ending at ``leaf_line``."""
        lines, self._branch_cache = _branches.branch_lines(self._layout, leaf_line, lo_index, hi_index,
                                                           self._branch_cache)
        return lines

    def _active_branch(self) -> tuple[int, int]:
        """``(leaf line, messages)`` of the branch reads follow by default."""
        leaf = _branches.active_leaf(self._layout)
        return leaf, _branches.branch_size(self._layout, leaf)[0]

    def _read_branch_window(self, before, limit, content_limit, leaf, page_bytes=None) -> Window:
        layout = self._layout
        reader = self._reader()
        leaf_line = self._leaf_line(leaf)
        total, _top = _branches.branch_size(layout, leaf_line)
        before, start = _span(before, limit, total, "the branch")
        lines = self._branch_lines(leaf_line, start, before)
        reader.check_lines(lines, complete=False)
        if layout.pos.take(lines).tolist() != list(range(start, start + len(lines))):
            raise StaleLayout("the tree's message positions disagree with its branch")
        messages, start, lines = self._page(reader, lines, start, content_limit, page_bytes)
        if len(lines):
            comp_lines, omitted = _branches.branch_compactions(layout, int(lines[0]), int(lines[-1]), -1, limit)
        else:
            anchor = self._branch_lines(leaf_line, before, before + 1)[0] if before < total else leaf_line
            comp_lines, omitted = _branches.branch_compactions(layout, -1, -1, int(anchor), limit)
        reader.check_lines(comp_lines, kind=LineKind.COMPACTION, complete=False)
        compactions = reader.entries(comp_lines, content_limit, first_index=None)
        self._note_bad(reader)
        return Window(messages=messages, message_start=start, message_count=total,
                      has_more_before=start > 0, compactions=compactions,
                      compactions_omitted=omitted, content_limit=content_limit,
                      leaf=leaf_line if leaf_line >= 0 else None, page_bytes=page_bytes,
                      leaf_id=self._leaf_id(reader, leaf_line, messages) if before == total else None)

    def message_bytes(self, message_start: int, message_stop: int) -> list[int]:
        """The size in bytes of each of messages ``message_start:message_stop`` as the file
        holds it (its line, ``\\n`` included), from the layout alone: nothing is read, so
        a caller can choose what to read within a byte bound before reading it."""
        _check_limit("message_start", message_start, 0)
        _check_limit("message_stop", message_stop, 0)
        self._check_open()
        self._refresh()
        layout = self._layout
        if layout.reads_as_list:
            lines = layout.messages.slice(message_start, message_stop)
        else:
            leaf, count = self._active_branch()
            lines = self._branch_lines(leaf, min(message_start, count), min(message_stop, count))
        if not len(lines):
            return []
        starts = layout.starts.take(lines)
        after = lines + 1
        last = after == layout.line_count
        ends = layout.starts.take(np.where(last, lines, after))
        ends[last] = layout.indexed_end
        return (ends - starts).tolist()

    def read_lines(self, start: int, stop: int, *, content_limit: int | None = None) -> list[Entry]:
        """Read physical lines ``start:stop`` of any kind (sessions, model changes...)."""
        _check_limit("start", start, 0)
        _check_limit("stop", stop, 0)
        _check_limit("content_limit", content_limit, 0)
        self._check_open()

        def read() -> list[Entry]:
            reader = self._reader()
            stop_ = min(stop, self._layout.line_count)
            lines = np.arange(start, max(start, stop_), dtype=np.int64)
            entries = reader.entries(lines, content_limit, first_index=None, any_kind=True)
            self._note_bad(reader)
            return entries

        return self._checked_read(read)

    # -- layout upkeep --------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"transcript {self.path!r} is closed")

    def _refresh(self) -> None:
        """Notice a replaced, grown, shrunk or rewritten file since the last read.
        Costs one ``stat`` when nothing changed."""
        st = self._stat_path()
        if (st.st_ino, st.st_dev) != self._fd_ident:
            # Replaced by a rename (a rewrite): follow the path to the new file.
            self._reopen()
            self._layout = _load_or_build(self._real, self._fd, self.dialect, self._classify_window, None)
            return
        ident = self._layout.identity
        if (st.st_size, st.st_mtime_ns) == (ident.size, ident.mtime_ns):
            return
        judgement = judge(self._layout, self._fd)
        if judgement.verdict == "extend":
            self._extend()
            self._layout.outcome = "extend"
        elif judgement.verdict != "valid":
            self._rebuild()

    def _reopen(self) -> None:
        """Open the file the path names now (after a rename replaced the one open):
        without blocking, and refused unless it is a regular file (a FIFO swapped in
        would otherwise block this open forever). Appends never go to the old file."""
        fd, real = _open_resolved(self.path, self._within, lambda: open_regular_fd(self.path))
        os.close(self._fd)
        self._fd, self._real = fd, real
        self._fd_ident = _identity_of(fd)
        if self._wfd is not None:
            os.close(self._wfd)
            self._wfd = None

    def _extend(self, written: bytes | None = None) -> None:
        """Index the bytes the file grew by; a layout whose arrays (read on demand from a
        sidecar) are caught lying meanwhile is rebuilt from the file instead."""
        try:
            extend_layout(self._layout, self._fd, written=written)
        except SidecarGone:
            self._rebuild()

    def _rebuild(self) -> None:
        """Scan the open file from scratch into a new layout, and persist it."""
        self._layout = build_layout(self._fd, dialect=self.dialect, classify_window=self._classify_window)
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
        if still_names(self._real, self._fd, follow=False):
            save_layout(self._layout, self._real, self._fd)

    # -- writing ------------------------------------------------------------------

    def _acquire_lock(self, *, wait: float = 0.0) -> None:
        """Take the cross-process write lock (held until close), beside a regular file
        only (never a ``.lock`` beside a device the path was replaced by); ``wait``:
        seconds to keep trying while another writer holds it."""
        self._check_open()
        if self._lock_fd is not None and not lock_still_held(self._lock_fd, self._real):
            # The lock file was removed or replaced under us, or the path now leads to
            # another file: what is held locks nothing any more.
            os.close(self._lock_fd)
            self._lock_fd = None
        if self._lock_fd is None:
            self._stat_path()
            self._lock_fd = take_write_lock(self._real, wait=wait)

    def _holds_lock_now(self) -> bool:
        """Take the write lock if it is free (kept until close, as any writer's)."""
        try:
            self._acquire_lock()
        except TranscriptLocked:
            return False
        return True

    def _acquire_writer(self) -> int:
        """The write lock and an append fd on the very file being read (call after
        :meth:`_refresh`)."""
        self._acquire_lock()
        if self._wfd is None:
            self._wfd = open_append_fd(self._real, self._fd)
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
            self._quarantine_tail(wfd)
        n, error = write_line(wfd, line, sync=sync)
        if n != len(line):
            if not n and error is not None:
                raise error
            # The short write is now a torn tail; the next append moves it aside.
            self._extend()
            why = f": {error.strerror}" if error is not None else ""
            raise OSError(error.errno if error is not None else None,
                          f"short write appending to {self.path!r} ({n} of {len(line)} bytes{why}); "
                          "the disk may be full")
        if not still_names(self._real, wfd, follow=False):
            # Something that ignores the write lock replaced the file mid-append.
            raise TranscriptChanged(
                f"{self.path!r} was replaced by another program during the append; the "
                "record went to the replaced file. Append it again.")
        before = self._layout.line_count
        self._extend(written=line)
        return before

    def _quarantine_tail(self, wfd: int) -> str:
        """Move the bytes after the last ``\\n`` into a side file, then cut them off."""
        layout = self._layout
        side = move_tail_aside(self._fd, wfd, self._real, layout.indexed_end, layout.scanned_end)
        self.torn_files.append(side)
        self._extend()
        return side

    def append_records(self, records: list[dict[str, Any]], *, lock_wait: float = 0.0) -> list[int]:
        """Append ``records`` in order, each line written whole and synced, the write lock
        held from the first to the last: no other writer's line comes between them (a
        question and its answer). Their physical line numbers."""
        # The lock taken by the first append is kept until close, so the rest need no wait.
        return [self.append(record, lock_wait=lock_wait if k == 0 else 0.0) for k, record in enumerate(records)]

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
            self._quarantine_tail(self._acquire_writer())
            layout = self._layout
        lines = self._reader().history_lines()
        starts = layout.starts.all().tolist()
        is_msg = is_sequence(layout.kinds.all()).tolist()
        return History(lines, starts, is_msg, self._stamp(), self)

    def _stamp(self) -> tuple:
        """What the file is now, as far as a rewrite must know: its identity and end."""
        return (self._layout.identity, self._layout.indexed_end)

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
        if history.source is not self:
            raise PartialHistoryRewrite("this history was read from another Transcript object")
        self._acquire_lock()
        self._refresh()
        self._acquire_writer()
        if self._stamp() != history.stamp:
            raise TranscriptChanged(
                f"{self.path!r} changed since its history was read; read history() again")
        try:
            replace_file(self._real, history.data(), mode=stat.S_IMODE(os.fstat(self._fd).st_mode))
        except FileNotFoundError:
            # The temporary copy went before the rename: a process that ignores the
            # write lock cleaned it up. The transcript is as it was.
            raise TranscriptChanged(
                f"another process removed the rewrite's temporary copy of {self.path!r}; nothing was "
                "changed. Read history() again and retry") from None
        except (IsADirectoryError, NotADirectoryError):
            # A folder was put at the name since the history was read (the rename cannot
            # replace it); the temporary copy is gone, nothing was changed.
            raise TranscriptNotAFile(
                errno.EISDIR, f"{self.path!r} is now a directory, not the transcript that was read; nothing "
                              "was changed") from None
        # Invalidate both cache layers: the sidecars on disk and the layout in memory.
        for side in sidecar_paths(self._real):
            unlink_quietly(side)
        self._reopen()
        self._rebuild()
        history.restamp(self._stamp())

    def edit(self, message: int | Entry, record: dict[str, Any], *,
             lock_wait: float = EDIT_LOCK_WAIT_S, check: Callable[[History], None] | None = None) -> None:
        """Replace a message: rehydrates the full history, then rewrites.

        ``message`` is a message index, or the :class:`Entry` a window returned; given
        an Entry, the edit is refused (TranscriptChanged) unless that index still holds
        the line the entry was read from: at its offset, and the same record when the
        entry holds it whole (an entry cut for display is held to its offset alone). The
        write lock is taken first (waiting up to
        ``lock_wait`` seconds for another writer's append to end), so the history read
        is the one rewritten: no append can come between them.

        ``check(history)``, when given, runs with the lock held and the history read,
        before the change: a cursor the caller holds (a message index from a window of
        some version, :meth:`identity`) is compared there, against the very file the
        history comes from; a ``check`` that raises leaves the transcript as it was.
        """
        self._edit_under_lock(lambda h, i: h.replace_message(i, record), message, lock_wait, check)

    def delete(self, message: int | Entry, *, lock_wait: float = EDIT_LOCK_WAIT_S,
               check: Callable[[History], None] | None = None) -> None:
        """Delete a message (index or Entry, and ``check``, as for :meth:`edit`), then rewrite."""
        self._edit_under_lock(History.delete_message, message, lock_wait, check)

    def truncate(self, message: int | Entry, *, lock_wait: float = EDIT_LOCK_WAIT_S,
                 check: Callable[[History], None] | None = None) -> None:
        """Delete a message and all after it (abort, switch to another revision)."""
        self._edit_under_lock(History.truncate_messages, message, lock_wait, check)

    def _edit_under_lock(self, change: Callable[[History, int], None], message: int | Entry,
                         lock_wait: float, check: Callable[[History], None] | None = None) -> None:
        self._acquire_lock(wait=lock_wait)
        h = self.history()
        if check is not None:
            check(h)
        change(h, self._index_in(h, message))
        self.rewrite(h)

    def _index_in(self, history: History, message: int | Entry) -> int:
        if not isinstance(message, Entry):
            _check_limit("message index", message, 0)
            return self._file_index(message)
        # The same offset is not the same line: a rewrite that deleted an earlier message
        # of the same length puts the next one there. A whole record must be the same
        # record too (a record cut for display can only be held to its offset).
        at = None if message.index is None else self._file_index(message.index)
        if (at is None or at >= history.message_count
                or history.offset_of(at) != message.offset
                or (message.record is not None and not message.cut_bytes
                    and history.message(at) != message.record)):
            raise TranscriptChanged(
                f"message {message.index} of {self.path!r} is no longer the line it was read "
                "from; read the window again before editing")
        return at

    def _file_index(self, index: int) -> int:
        """The place in the file's message sequence of message ``index`` of the active
        branch (the same number unless the file forks; past the branch: unchanged, and
        refused by the history as out of range)."""
        layout = self._layout
        if layout.reads_as_list:
            return index
        leaf, count = self._active_branch()
        if index >= count:
            return layout.message_count + index  # out of range for the history
        line = int(self._branch_lines(leaf, index, index + 1)[0])
        return layout.messages.bisect_right(line - 1)


#: Opens tried when the path keeps being replaced between an open and the check of
#: what it opened (each rewrite by another writer renames a new file over it).
_OPEN_TRIES = 8


def _open_resolved(path: str, within: str | None, open_fd: Callable[[], int]) -> tuple[int, str]:
    """``open_fd()`` and the real path of what it opened (:func:`resolved_path`), opened
    again while a rename replaces the file between the two: the file the path names when
    the check holds is the one opened."""
    for attempt in range(_OPEN_TRIES):
        fd = open_fd()
        try:
            return fd, resolved_path(path, fd, within=within)
        except TranscriptChanged:
            os.close(fd)
            if attempt == _OPEN_TRIES - 1:
                raise
        except BaseException:
            os.close(fd)
            raise
    raise AssertionError("unreachable")


def _load_or_build(real: str, fd: int, dialect: str, classify_window: int, progress) -> Layout:
    layout, judgement = load_layout(real, fd, dialect=dialect, classify_window=classify_window)
    if layout is None:
        layout = build_layout(fd, dialect=dialect, classify_window=classify_window, progress=progress)
        layout.outcome = "built" if judgement.verdict == "absent" else "rebuilt"
    elif judgement.verdict == "extend":
        try:
            extend_layout(layout, fd, progress=progress)
        except SidecarGone:  # its arrays, read to extend it, were caught lying
            layout = build_layout(fd, dialect=dialect, classify_window=classify_window, progress=progress)
            layout.outcome = "rebuilt"
    if still_names(real, fd, follow=False):  # never a sidecar beside what replaced the file meanwhile
        save_layout(layout, real, fd)
    return layout
