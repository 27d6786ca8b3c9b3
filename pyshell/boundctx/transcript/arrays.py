"""The layout's integer arrays: in memory, or read from the sidecar on demand.

A sidecar's arrays are not memory-mapped: a mapped file that another process truncates
raises SIGBUS in the reader, and that kills the host program (decision 0006). They are
read with ``pread`` when used instead; a window needs a few hundred elements, so an open
costs the same for a 10 MB and a 10 GB transcript.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Sequence

import numpy as np

from boundctx._files import open_regular
from boundctx._native import lineindex
from boundctx.transcript.sidecar import pread_exact

__all__ = ["ChainPlaces", "Chunked", "FileArray", "SidecarFile", "SidecarGone", "SidecarLies", "is_dense",
           "pread_exact"]

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1

# Up to this many elements a file-backed chunk is read whole when searched (and so its
# order checked whole); a chunk shorter than this takes in-memory appends (they merge
# into it, so many single-line appends stay one chunk).
_SMALL = 1 << 16
# Elements one probe of a search reads (4 KiB of int64s).
_PROBE = 512
# An array this short (a few compactions, a small segment's ids) is read whole once and
# kept: a window asks it several small questions, each of which would be a read. A
# segment's bytes never change while its sidecar is open (a sidecar grows by new
# segments after the old, and is replaced only by a new file), so what was read stays true.
_KEPT = 4096


def is_dense(lo: int, hi: int, count: int) -> bool:
    """Whether ``count`` elements between ``lo`` and ``hi`` are read as the whole span (a
    window: one read of each array) rather than element by element."""
    return hi - lo <= 64 * count + 1024


class SidecarGone(OSError):
    """The sidecar cannot serve this read: it ended early under it (truncated by
    someone else), or (:class:`SidecarLies`) what it says cannot be true. Readers
    rebuild the layout from the transcript once and read again."""


class SidecarLies(SidecarGone):
    """Arrays read on demand from a sidecar say something impossible (a line outside
    the indexed bytes, or ending before it starts): the sidecar lied."""


class SidecarFile:
    """An open sidecar, shared by the arrays read from it; closed with its last user."""

    __slots__ = ("fd", "path")

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = -1  # so __del__ is safe when the open below fails
        # Not os.open: a FIFO put at the sidecar's path would block the open for good; a
        # sidecar that is not a regular file is refused (and so rebuilt).
        self.fd, _ = open_regular(path, what="layout sidecar")

    def pread(self, offset: int, length: int) -> bytes:
        data = pread_exact(self.fd, offset, length)
        if len(data) != length:
            raise SidecarGone(f"layout sidecar {self.path!r} was truncated under a read")
        return data

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self) -> None:
        self.close()


class _ReadIndexed:
    """Indexing by reads: a slice, an array of indices (one read of the span they
    cover) or one index, answered by ``read(lo, hi)`` of ``count`` elements of ``dtype``.
    What a :class:`FileArray` and :class:`ChainPlaces` answer alike."""

    __slots__ = ()
    count: int
    dtype: np.dtype

    def read(self, lo: int, hi: int) -> np.ndarray:
        raise NotImplementedError

    def __getitem__(self, key):
        if isinstance(key, slice):
            lo, hi, step = key.indices(self.count)
            assert step == 1
            return self.read(lo, max(lo, hi))
        if isinstance(key, np.ndarray):
            if len(key) == 0:
                return np.empty(0, dtype=self.dtype)
            lo, hi = int(key.min()), int(key.max()) + 1
            if lo < 0 or hi > self.count:
                raise IndexError(f"index out of range 0..{self.count - 1}")
            return self.read(lo, hi)[key - lo]  # one read of the span the indices cover
        i = int(key)
        if not 0 <= i < self.count:
            raise IndexError(i)
        return self._item(i)

    def _item(self, i: int):
        return self.read(i, i + 1)[0]


class FileArray(_ReadIndexed):
    """``count`` elements of ``dtype`` stored at ``offset`` in a sidecar, read on demand.

    ``increasing``: the array must be strictly increasing (line offsets, line numbers);
    every read checks that of what it read, so a lie inside the array (only its ends are
    checked on load) surfaces as :class:`SidecarLies` where it is used."""

    __slots__ = ("file", "offset", "count", "dtype", "increasing", "_kept", "_kept_raw", "_end_values")

    def __init__(self, file: SidecarFile, offset: int, count: int, dtype, *,
                 increasing: bool = False) -> None:
        self.file = file
        self.offset = offset
        self.count = count
        self.dtype = np.dtype(dtype)
        self.increasing = increasing
        self._kept: np.ndarray | None = None
        self._kept_raw = b""
        self._end_values: tuple[int, int] | None = None

    def __len__(self) -> int:
        return self.count

    def read(self, lo: int, hi: int) -> np.ndarray:
        if self.count <= _KEPT:
            return self._whole()[lo:hi]
        return np.frombuffer(self._raw(lo, hi), dtype=self.dtype)

    def read_bytes(self, lo: int, hi: int) -> bytes:
        """Elements ``lo:hi`` as their stored bytes (no array made: a window's checks
        and reads go through bytes and lists)."""
        if self.count <= _KEPT:
            self._whole()
            size = self.dtype.itemsize
            return self._kept_raw[lo * size : hi * size]
        return self._raw(lo, hi)

    def _whole(self) -> np.ndarray:
        if self._kept is None:
            self._kept_raw = self._raw(0, self.count)
            self._kept = np.frombuffer(self._kept_raw, dtype=self.dtype)
        return self._kept

    def _raw(self, lo: int, hi: int) -> bytes:
        size = self.dtype.itemsize
        raw = self.file.pread(self.offset + lo * size, (hi - lo) * size)
        if self.increasing and not lineindex.rises_within(raw, _INT64_MIN, _INT64_MAX):
            raise SidecarLies(f"layout sidecar {self.file.path!r}: elements {lo}..{hi - 1} "
                              "of an increasing array are not increasing")
        return raw

    def searchsorted_right(self, value: int) -> int:
        """Elements <= ``value`` (the array is sorted). An array of up to ``_SMALL``
        elements is read whole, so its order is checked whole. A longer one is read by
        probes of ``_PROBE`` elements, each checked rising and inside the values around
        it. A probe goes where the values at the ends of the range left put ``value``,
        were they spread evenly (line numbers and offsets nearly are, so a probe or two
        find it where a bisection took a read per halving), or halfway when the probe
        before did not halve the range (so no spread of values costs more than about
        twice a bisection's probes)."""
        count = self.count
        if count <= _SMALL:
            # Read whole (from the kept copy, when short), so the read checks the whole
            # array's order: a lie anywhere in it is caught here, not answered around.
            return bisect.bisect_right(self._values(0, count), value)
        first, last = self._ends()
        if value < first:
            return 0
        if value >= last:
            return count
        # The answer r lies in lo..hi: element lo - 1 (lo_v) is <= value, element hi
        # (hi_v) is above it.
        lo, hi, lo_v, hi_v = 1, count - 1, first, last
        even = True
        while hi - lo > _PROBE:
            if even:
                guess = lo - 1 + (value - lo_v) * (hi - lo + 1) // (hi_v - lo_v)
            else:
                guess = (lo + hi) // 2
            a = min(max(guess - _PROBE // 2, lo), hi - _PROBE)
            block = self._values(a, a + _PROBE)  # checked rising by the read
            if block[0] < lo_v or block[-1] > hi_v:
                raise SidecarLies(f"layout sidecar {self.file.path!r}: elements {a}..{a + _PROBE - 1} "
                                  "of an increasing array lie outside the elements around them")
            k = bisect.bisect_right(block, value)
            if 0 < k < _PROBE:
                return a + k
            before = hi - lo
            if k == 0:
                hi, hi_v = a, block[0]
            else:
                lo, lo_v = a + _PROBE, block[-1]
            even = 2 * (hi - lo) <= before
        return lo + bisect.bisect_right(self._values(lo, hi), value)

    def _item(self, i: int) -> int:
        if i == 0 or i == self.count - 1:  # a search asks the ends again and again
            return self._ends()[i > 0]
        return self._values(i, i + 1)[0]

    def _ends(self) -> tuple[int, int]:
        """The first and last elements (read once: a segment's bytes do not change)."""
        if self._end_values is None:
            first, last = self._values(0, 1)[0], self._values(self.count - 1, self.count)[0]
            if self.increasing and self.count > 1 and not first < last:
                raise SidecarLies(f"layout sidecar {self.file.path!r}: an increasing array ends "
                                  "where it starts, or below")
            self._end_values = (first, last)
        return self._end_values

    def _values(self, lo: int, hi: int) -> Sequence[int]:
        """Elements ``lo:hi`` as a sequence of ints, with no array made."""
        view = memoryview(self.read_bytes(lo, hi))
        return view.cast("q") if self.dtype.itemsize == 8 else view.cast("B")  # int64s, or kinds


class ChainPlaces(_ReadIndexed):
    """``up``, ``pos``, ``tip`` or ``comp`` (``what``) of lines ``line0...line0 + count -
    1`` of a tree that is a chain (decision 0053): each line hangs on the one before, so
    ``up`` is the line before, ``pos`` the messages before the line, ``tip`` and ``comp``
    the newest message and the newest compaction at or before it (-1: none). Worked out
    on demand from the layout's message and compaction lines, as ``linetree.place_lines``
    would have placed them, and indexed like a :class:`FileArray` (chunk-relative)."""

    __slots__ = ("what", "line0", "count", "messages", "compactions")
    dtype = np.dtype(np.int64)

    def __init__(self, what: str, line0: int, count: int, messages: Chunked, compactions: Chunked) -> None:
        if what not in ("up", "pos", "tip", "comp"):
            raise ValueError(f"no place is called {what!r}")
        self.what = what
        self.line0 = line0
        self.count = count
        self.messages = messages
        self.compactions = compactions

    def __len__(self) -> int:
        return self.count

    def read(self, lo: int, hi: int) -> np.ndarray:
        lines = np.arange(self.line0 + lo, self.line0 + hi, dtype=np.int64)
        if self.what == "up":
            return lines - 1
        seq = self.compactions if self.what == "comp" else self.messages
        if not len(lines):
            return lines
        first = seq.bisect_right(int(lines[0]) - 1)  # entries before the first line
        inside = seq.slice(first, seq.bisect_right(int(lines[-1])))
        if self.what == "pos":
            return first + np.searchsorted(inside, lines, side="left")
        at = np.searchsorted(inside, lines, side="right")  # entries of `inside` at or before each
        newest = np.full(len(lines), seq[first - 1] if first else -1, dtype=np.int64)
        newest[at > 0] = inside[at[at > 0] - 1]
        return newest


def _searchsorted_right(arr, value: int) -> int:
    if isinstance(arr, FileArray):
        return arr.searchsorted_right(value)
    return int(np.searchsorted(arr, value, side="right"))


class Chunked:
    """A read-only integer sequence stored as a list of chunks (sidecar segments and
    in-process appends), so extending it never copies what is already there."""

    __slots__ = ("_chunks", "_bounds")

    def __init__(self, chunks=()):
        self._chunks: list = []
        self._bounds: list[int] = [0]
        for c in chunks:
            self.extend(c)

    def extend(self, arr) -> None:
        if len(arr) == 0:
            return
        last = self._chunks[-1] if self._chunks else None
        if isinstance(last, ChainPlaces) and isinstance(arr, ChainPlaces) and last.what == arr.what \
                and last.line0 + last.count == arr.line0:
            # A chain goes on: still one chunk (its places are worked out, not stored).
            last.count += arr.count
            self._bounds[-1] += len(arr)
        elif last is not None and len(last) < _SMALL and isinstance(arr, np.ndarray) \
                and not isinstance(last, ChainPlaces):
            # Merge into a small tail chunk, so many single-line appends stay one chunk
            # (lookups walk the chunks).
            if isinstance(last, FileArray):
                last = last.read(0, len(last))
            self._chunks[-1] = np.concatenate([last, arr])
            self._bounds[-1] += len(arr)
        else:
            self._chunks.append(arr)
            self._bounds.append(self._bounds[-1] + len(arr))

    @property
    def chunk_count(self) -> int:
        return len(self._chunks)

    def __len__(self) -> int:
        return self._bounds[-1]

    def _locate(self, i: int) -> tuple[int, int]:
        # Few chunks: a linear scan from the end (recent data is read most).
        for c in range(len(self._chunks) - 1, -1, -1):
            if i >= self._bounds[c]:
                return c, i - self._bounds[c]
        raise IndexError(i)

    def __getitem__(self, i: int) -> int:
        if not 0 <= i < len(self):
            raise IndexError(i)
        c, j = self._locate(i)
        return int(self._chunks[c][j])

    def _pieces(self, lo: int, hi: int):
        """``(chunk, i, j)`` for each chunk holding elements of ``lo:hi`` (clamped):
        its elements ``i:j`` are theirs, in order."""
        lo, hi = max(lo, 0), min(hi, len(self))
        if lo >= hi:
            return
        for c, arr in enumerate(self._chunks):
            a, b = self._bounds[c], self._bounds[c + 1]
            if b <= lo or a >= hi:
                continue
            yield arr, max(lo - a, 0), min(hi, b) - a

    def slice(self, lo: int, hi: int) -> np.ndarray:
        """Elements ``lo:hi`` as one array."""
        parts = [arr[i:j] for arr, i, j in self._pieces(lo, hi)]
        if not parts:
            return np.empty(0, dtype=np.int64)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def slice_bytes(self, lo: int, hi: int) -> bytes:
        """Elements ``lo:hi`` as bytes (native int64s, or the kinds' bytes)."""
        parts = [arr.read_bytes(i, j) if isinstance(arr, FileArray) else arr[i:j].tobytes()
                 for arr, i, j in self._pieces(lo, hi)]
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def bisect_right(self, value: int) -> int:
        """Number of elements <= ``value`` (the sequence is sorted)."""
        for c in range(len(self._chunks) - 1, -1, -1):
            arr = self._chunks[c]
            if arr[0] <= value:
                return self._bounds[c] + _searchsorted_right(arr, value)
        return 0

    def take(self, indices: np.ndarray) -> np.ndarray:
        """Elements at ``indices``, gathered chunk by chunk (IndexError when out of range)."""
        indices = np.asarray(indices, dtype=np.int64)
        if not len(indices):
            return np.empty(0, dtype=np.int64)
        lo, hi = int(indices.min()), int(indices.max()) + 1
        if lo < 0 or hi > len(self):
            raise IndexError(f"index out of range 0..{len(self) - 1}")
        if len(self._chunks) == 1:
            return np.asarray(self._chunks[0][indices])
        if is_dense(lo, hi, len(indices)):  # a window's: one slice of the span, then picked
            return self.slice(lo, hi)[indices - lo]
        out = np.empty(len(indices), dtype=np.int64)
        which = np.searchsorted(np.asarray(self._bounds), indices, side="right") - 1
        for c in np.unique(which).tolist():
            sel = which == c
            out[sel] = self._chunks[c][indices[sel] - self._bounds[c]]
        return out

    def all(self) -> np.ndarray:
        return self.slice(0, len(self))
