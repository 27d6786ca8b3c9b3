"""The layout sidecar's format and where it lives: bytes in, bytes out.

A sidecar lives in the cache directory (``$BOUNDCTX_CACHE_DIR``, else
``$XDG_CACHE_HOME/boundctx/layouts``), named by a hash of the transcript's resolved path;
a transcript of boundctx's own gets it beside itself instead (``<transcript>.layout``),
the cache when its folder is read-only. Other tools' session files (Claude Code's,
Codex's, pi's) never get a boundctx file beside them (decision 0039). Either place is
read. The format::

    b"BCTXLAY\\x01"                                 magic, 8 bytes
    segment+                                        one for the build, one per extension
      <u32 header length> <u32 crc32 of header>
      header (MessagePack map), zero-padded to a multiple of 8
      starts       int64[n]   little-endian, start offset of each line
      kinds        uint8[n]   padded to a multiple of 8
      messages     int64[m]   line numbers of the message sequence
      compactions  int64[c]   line numbers of compaction lines
      ids          int64[n]   the hash of each line's entry id (0: none)
      up           int64[n]   the line each line hangs on (-1: a root; -3: a replayed copy)
      pos          int64[n]   messages above each line on its branch
      tip          int64[n]   the nearest message at or above each line (-1: none)
      comp         int64[n]   the nearest compaction at or above each line (-1: none)
      id_keys      int64[k]   the segment's entry ids (of lines that are not copies), sorted
      id_lines     int64[k]   the line of each

The last seven are the tree of the entries (``tree.py``) and the index an append finds
earlier ids by (binary search, not a read of every id); the header's ``as_list`` says
whether the tree, up to the segment's end, still reads as a list, and ``chain`` whether it
is a chain: every line hung on the line before it. A chain's segment stores no ``up``,
``pos``, ``tip`` or ``comp``: they follow from ``messages`` and ``compactions``
(decision 0053), and most transcripts are chains. The header says which
byte range the segment covers (``start``..``end``), the line number of its first line,
the counts, the file identity ``(dev, ino, size, mtime_ns)``
seen when it was written, and hashes of the first 4 KiB and of the 4 KiB before
``end``.

Both writers come here: the layout of an open transcript (``layout.py``, whose arrays
are numpy's) and ``reindex`` (whose arrays are the native scan's bytes), so both write
the same bytes. ``boundctx reindex`` of a 1 GiB file is timed against ``wc -l``, and on
a slow machine every import counts (``dataclasses`` alone took 20 ms on one): this
module imports no numpy, no msgspec, nothing it can do without. The header is written by
:func:`encode_header`, a small MessagePack writer held to msgspec's bytes by a property
test; ``layout.py`` reads it back with msgspec.
"""

from __future__ import annotations

import hashlib
import os
import stat
import struct
import sys
import zlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "FOREIGN_DIALECTS",
    "FORMAT_VERSION",
    "HASH_SPAN",
    "HEADER_FIELDS",
    "MAGIC",
    "OWN_TYPES",
    "Identity",
    "beside_allowed",
    "encode_header",
    "file_hashes",
    "pread_exact",
    "segment_pieces",
    "sidecar_paths",
    "write_first_place",
    "write_whole",
]

MAGIC = b"BCTXLAY\x01"
# 2: Claude Code compact_boundary and Codex user_message lines (decision 0018);
# 3: the tree of the entries (decision 0047); 4: a chain stores no places (decision 0053)
FORMAT_VERSION = 4
HASH_SPAN = 4096
SEG_HEAD = struct.Struct("<II")
#: The header's keys, in the order they are written (layout.SegmentHeader's fields).
HEADER_FIELDS = ("v", "dialect", "window", "path", "start", "end", "scanned", "line0", "n",
                 "m", "c", "k", "as_list", "chain", "identity", "head", "tail", "bad")

if sys.byteorder != "little":  # the arrays are written as the native scan makes them
    raise ImportError("boundctx's layout sidecar is little-endian; this platform is not")


class Identity(tuple):
    """What ``stat`` says about a file, ``(dev, ino, size, mtime_ns)``; ``ino == 0``
    means the filesystem cannot say."""

    __slots__ = ()

    def __new__(cls, dev: int, ino: int, size: int, mtime_ns: int) -> Identity:
        return tuple.__new__(cls, (dev, ino, size, mtime_ns))

    @classmethod
    def of(cls, st: os.stat_result) -> Identity:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    dev = property(lambda self: self[0])
    ino = property(lambda self: self[1])
    size = property(lambda self: self[2])
    mtime_ns = property(lambda self: self[3])

    def __repr__(self) -> str:
        return f"Identity(dev={self[0]}, ino={self[1]}, size={self[2]}, mtime_ns={self[3]})"


_UINTS = ((1 << 8, 0xCC, ">B"), (1 << 16, 0xCD, ">H"), (1 << 32, 0xCE, ">I"), (1 << 64, 0xCF, ">Q"))
_INTS = ((1 << 7, 0xD0, ">b"), (1 << 15, 0xD1, ">h"), (1 << 31, 0xD2, ">i"), (1 << 63, 0xD3, ">q"))


def _pack(value, out: list) -> None:
    """Append the MessagePack form of ``value`` (an int, a str, a list or tuple of them,
    or a dict with str keys) to ``out``: the smallest form, as msgspec writes it."""
    if isinstance(value, bool) or value is None:
        raise TypeError(f"cannot write {value!r} in a sidecar header")
    if isinstance(value, int):
        if -32 <= value < 0x80:
            out.append(bytes((value & 0xFF,)))  # positive or negative fixint
            return
        for bound, tag, fmt in (_UINTS if value >= 0 else _INTS):
            if (value < bound) if value >= 0 else (value >= -bound):
                out.append(bytes((tag,)) + struct.pack(fmt, value))
                return
        raise OverflowError(f"{value} does not fit a sidecar header")
    if isinstance(value, str):
        data = value.encode("utf-8")
        n = len(data)
        if n < 32:
            out.append(bytes((0xA0 | n,)))
        elif n < 1 << 8:
            out.append(bytes((0xD9, n)))
        elif n < 1 << 16:
            out.append(b"\xda" + struct.pack(">H", n))
        else:
            out.append(b"\xdb" + struct.pack(">I", n))
        out.append(data)
    elif isinstance(value, (list, tuple)):
        _pack_length(len(value), 0x90, 0xDC, out)
        for item in value:
            _pack(item, out)
    elif isinstance(value, dict):
        _pack_length(len(value), 0x80, 0xDE, out)
        for key, item in value.items():
            _pack(key, out)
            _pack(item, out)
    else:
        raise TypeError(f"cannot write {type(value).__name__} in a sidecar header")


def _pack_length(n: int, fix: int, tag16: int, out: list) -> None:
    if n < 16:
        out.append(bytes((fix | n,)))
    elif n < 1 << 16:
        out.append(bytes((tag16,)) + struct.pack(">H", n))
    else:
        out.append(bytes((tag16 + 1,)) + struct.pack(">I", n))


def encode_header(**fields) -> bytes:
    """The MessagePack map of a segment header, keys in :data:`HEADER_FIELDS` order."""
    if tuple(fields) != HEADER_FIELDS:
        raise ValueError(f"a segment header has the fields {HEADER_FIELDS}, got {tuple(fields)}")
    out: list[bytes] = []
    _pack(fields, out)
    return b"".join(out)


def pad8(n: int) -> int:
    return (n + 7) & ~7


def segment_pieces(header: bytes, starts, kinds, messages, compactions, tree) -> list:
    """One segment: the header (from :func:`encode_header`), the four arrays and those
    of ``tree`` (seven, or three for a chain: buffers of little-endian int64, of uint8
    for ``kinds``), padded as the format says, as the pieces it is made of, in order. A
    whole sidecar of a big transcript is tens of megabytes: written piece by piece
    (:func:`write_whole`), it is never copied into one buffer first."""
    head = header
    head += b"\0" * (pad8(len(head)) - len(head))
    kinds_b = bytes(kinds)
    kinds_b += b"\0" * (pad8(len(kinds_b)) - len(kinds_b))
    return [SEG_HEAD.pack(len(head), zlib.crc32(head)), head, starts, kinds_b, messages, compactions, *tree]


def pread_exact(fd: int, offset: int, length: int) -> bytes:
    """Read ``length`` bytes at ``offset``; fewer only when the file ends first."""
    data = os.pread(fd, length, offset)
    if len(data) == length or not data:
        return data
    parts = [data]
    got = len(data)
    while got < length:
        more = os.pread(fd, length - got, offset + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def file_hashes(fd: int, end: int) -> tuple[str, str]:
    """Hashes of the first 4 KiB and of the 4 KiB before ``end``."""
    head = pread_exact(fd, 0, min(HASH_SPAN, end))
    tail_start = max(0, end - HASH_SPAN)
    tail = pread_exact(fd, tail_start, end - tail_start)
    return (hashlib.blake2b(head, digest_size=16).hexdigest(),
            hashlib.blake2b(tail, digest_size=16).hexdigest())


#: The type values of boundctx's own lines (its format's messages and compactions): no
#: other format has them (the dialect table refuses two formats claiming one value, and a
#: test holds this to the boundctx dialect's kinds; this module imports no dialect).
OWN_TYPES = (b"message", b"compaction")
#: Dialects named for another tool's files: their sidecars always go to the cache.
FOREIGN_DIALECTS = ("claude-code", "codex", "pi")
#: How much of the file's start :func:`beside_allowed` reads.
OWN_HEAD_BYTES = 512


def beside_allowed(fd: int, dialect: str) -> bool:
    """Whether the sidecar of the transcript open at ``fd`` may go beside it: only when
    the file is boundctx's own, empty or starting with a line boundctx writes (``"type"``
    first, a message or a compaction), and not opened as another tool's dialect. Claude
    Code and Codex files start otherwise, and a pi session with its ``session`` header,
    which boundctx never writes (decision 0039). One read of the first bytes."""
    if dialect in FOREIGN_DIALECTS:
        return False
    head = pread_exact(fd, 0, OWN_HEAD_BYTES)
    rest = head.removeprefix(b"\xef\xbb\xbf").lstrip(b" \t\r\n")
    if not rest:
        return len(head) < OWN_HEAD_BYTES  # empty (or blank): a transcript boundctx starts
    if not rest.startswith(b"{"):
        return False
    rest = rest[1:].lstrip(b" \t")
    if not rest.startswith(b'"type"'):
        return False
    rest = rest[6:].lstrip(b" \t")
    if not rest.startswith(b":"):
        return False
    rest = rest[1:].lstrip(b" \t")
    return any(rest.startswith(b'"' + value + b'"') for value in OWN_TYPES)


def _cache_root() -> str:
    root = os.environ.get("BOUNDCTX_CACHE_DIR")
    if root:
        return root
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "boundctx", "layouts")


def sidecar_paths(real: str) -> tuple[str, str]:
    """The two places a transcript's sidecar may be read from: beside it, and in the
    cache. ``real`` is the transcript's resolved path (``os.path.realpath``): it is not
    resolved again here, so a symlink put at the name since cannot move the sidecar
    elsewhere."""
    digest = hashlib.sha256(os.fsencode(real)).hexdigest()[:32]
    return real + ".layout", os.path.join(_cache_root(), digest + ".layout")


def write_first_place(pieces: Sequence[bytes], real: str, *, beside: bool) -> str | None:
    """Write a whole sidecar, the bytes of ``pieces`` one after another, for the
    transcript at ``real`` (its resolved path) to the first place that takes it: with
    ``beside`` (:func:`beside_allowed`), beside the transcript, else the cache; without,
    the cache only. Returns where, or None when no place does (the layout still works;
    only the next open pays a scan)."""
    beside_it, cached = sidecar_paths(real)
    for target in (beside_it, cached) if beside else (cached,):
        if write_whole(pieces, real, target):
            return target
    return None


def write_whole(pieces: Sequence[bytes], real: str, target: str) -> bool:
    """Replace the sidecar at ``target`` with the bytes of ``pieces`` atomically, as
    readable as the transcript ``real``. False when that place is not writable."""
    try:
        transcript_mode = stat.S_IMODE(os.stat(real).st_mode)
    except OSError:
        transcript_mode = 0
    folder = os.path.dirname(target)
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = _new_temporary(folder)
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as f:
            for piece in pieces:
                f.write(piece)
            # Created 0600; a sidecar is as readable as its transcript, so other
            # users of a shared transcript can use it instead of rebuilding on every open.
            os.fchmod(f.fileno(), transcript_mode & 0o666 if transcript_mode else 0o644)
        os.replace(tmp, target)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return False
    return True


def _new_temporary(folder: str) -> tuple[int, str]:
    """A new file ``.layout-<random>`` in ``folder``, open for writing, mode 0600."""
    for _ in range(100):
        tmp = os.path.join(folder, ".layout-" + os.urandom(8).hex())
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name in {folder!r}")
