"""One fuzz target per native entry point: arbitrary bytes in, one call, compared with
the twin.

Each target reads the arguments of one call from a :class:`Source` (any bytes are a
valid input: reads past the end give zeros), calls the native entry point, and checks
it against its slow twin in ``tests/reference/`` (or ``twins.py``) where that is cheap,
or against the invariants its docstring promises where no twin applies (hostile
arrays). Arguments the native code must refuse are generated on purpose; the refusal
must be a ``ValueError`` (or ``TypeError`` for a wrong type), never a crash or a wrong
answer.

The same targets are driven by Hypothesis (``test_fuzz_native.py``) and by atheris
(``atheris_native.py``), so a crash file from one replays in the other.
"""

from __future__ import annotations

import array
import json
import os

import numpy as np

from boundctx._native import filescan, lineindex, linetree, projection, sections, tokenmap

from . import twins
from tests._support.strategies import BOM, HARD_PIECES, PI_DIALECT
from tests.reference import graphemes
from tests.reference import lineindex as ref_lineindex
from tests.reference import linetree as ref_linetree
from tests.reference import sections as ref_sections
from tests.reference import tokenmap as ref_tokenmap

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class Mismatch(AssertionError):
    """Native and twin disagree (or an invariant failed): a finding."""


class Source:
    """Arbitrary bytes read as the arguments of one call; every read is defined on any
    input, so each input names exactly one call."""

    def __init__(self, data: bytes) -> None:
        self.data = bytes(data)
        self.pos = 0

    def take(self, n: int) -> bytes:
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def int(self, lo: int, hi: int) -> int:
        """An integer in ``[lo, hi]``."""
        span = hi - lo + 1
        if span <= 1:
            return lo
        raw = self.take((span.bit_length() + 7) // 8)
        return lo + int.from_bytes(raw, "little") % span

    def bool(self) -> bool:
        return self.int(0, 1) == 1

    def choice(self, options):
        return options[self.int(0, len(options) - 1)]

    def int64(self) -> int:
        """Mostly edge values, sometimes any int64."""
        if self.bool():
            return self.choice([INT64_MIN, INT64_MAX, -1, 0, 1, 2, 3, 2**31, 2**32, 2**62])
        return int.from_bytes(self.take(8).ljust(8, b"\0"), "little", signed=True)

    def raw(self, max_len: int) -> bytes:
        return self.take(self.int(0, max_len))

    def jsonish(self, max_len: int) -> bytes:
        """Bytes assembled from what the framer and classifier care about, plus raw ones."""
        out, size = [], self.int(0, max_len)
        while sum(map(len, out)) < size and self.pos < len(self.data):
            out.append(self.choice(_JSON_PIECES) if self.int(0, 3) else self.raw(8))
        return b"".join(out)[:max_len]

    def text(self, max_len: int, *, surrogates: bool = True) -> str:
        """Text of hard pieces (clusters, CRLF, whitespace, CJK), words and arbitrary
        code points (lone surrogates included unless ``surrogates`` is false)."""
        out, n = [], self.int(0, max_len)
        while sum(map(len, out)) < n and self.pos < len(self.data):
            kind = self.int(0, 5)
            if kind <= 1:
                out.append(self.choice(HARD_PIECES))
            elif kind <= 3:
                out.append(self.choice(["a", "b", " ", "\n", "\t", "\r\n", "word ", "\u00e9", "\u20ac"]))
            else:
                cp = self.int(0, 0x10FFFF)
                if not surrogates and 0xD800 <= cp <= 0xDFFF:
                    cp = 0xFFFD
                out.append(chr(cp))
        return "".join(out)[: max(n, 0)]

    def partition(self, total: int, max_pieces: int = 20) -> list[int]:
        """Byte lengths that add up to ``total`` (some zero)."""
        cuts = sorted(self.int(0, total) for _ in range(self.int(0, max_pieces)))
        edges = [0, *cuts, total]
        return [b - a for a, b in zip(edges, edges[1:])]


_JSON_PIECES = [
    b'"uuid":"a"', b'"parentUuid":"a"', b'"parentUuid":null', b'"id":"b"', b'"parentId":"b"',
    b'"logicalParentUuid":"a"', b'"sourceToolAssistantUUID":"a"', b'"\\ud83d\\ude00"',
    b"{", b"}", b"[", b"]", b'"', b":", b",", b" ", b"\t", b"\r", b"\n", b"\\", b'\\"', b"\\u0070",
    b'{"type":"message"', b'{"type":"compaction"', b'"type"', b'"message"', b'"session"',
    b'"ty\\u0070e"', b'{"type":', b'{"a":1,"type":"message"}', b'"x":"' + b"y" * 40 + b'"',
    b"null", b"true", b"12", b"-1.5e3", BOM, b"\xe2\x80\xa8", b"\xe2\x80\xa9", b"\xc3\xa9",
    b"\xf0\x9f\x98\x80", b"\xff", b"\x00", b"\x1f",
    # For the link walk's 64-byte blocks: backslash runs, and a string one block long.
    b"\\\\", b'"' + b"z" * 80 + b'"', b'"message":{"content":[',
]

_DIALECTS = [PI_DIALECT, {}, {"message": 1}, {"user": 1, "assistant": 1, "summary": 2, "x": 3},
             {f"t{i}": 1 + i % 3 for i in range(32)}]
_TABLES = [lineindex.DialectTable(d) for d in _DIALECTS]


def _fields(result) -> tuple:
    if isinstance(result, ref_lineindex.ScanResult):
        return result.starts, result.kinds, result.indexed_end, result.scanned_end, result.torn_bytes
    return (array.array("q", result.starts).tolist(), list(result.kinds), result.indexed_end,
            result.scanned_end, result.torn_bytes)


def _same_refusal(native_call, twin_call) -> object:
    """Run both; they must both refuse (ValueError) or both answer. Returns the pair of
    answers, or None when both refused."""
    try:
        got = native_call()
    except ValueError as exc:
        try:
            twin_call()
        except ValueError:
            return None
        raise Mismatch(f"native refused ({exc}) what the twin accepts") from None
    try:
        want = twin_call()
    except ValueError as exc:
        raise Mismatch(f"native answered {got!r} where the twin refuses ({exc})") from None
    return got, want


# -- lineindex ---------------------------------------------------------------------


def fuzz_scan_bytes(src: Source) -> None:
    data = src.jsonish(600)
    i = src.int(0, len(_DIALECTS) - 1)
    window = src.choice([1, 2, 7, 16, 64, lineindex.DEFAULT_CLASSIFY_WINDOW])
    # The documented range is 0..2**62 - len(data): offsets keep headroom below int64.
    top = 2**62 - len(data)
    base = src.choice([0, 0, 1, 2**31 + 3, 2**40, -1, top, top + 1, INT64_MAX])
    overflow = not 0 <= base <= top
    try:
        got = lineindex.scan_bytes(data, _TABLES[i], base_offset=base, classify_window=window)
    except ValueError:
        if not overflow:
            raise Mismatch(f"scan_bytes refused base_offset={base} for {len(data)} bytes") from None
        return
    if overflow:
        raise Mismatch(f"scan_bytes accepted base_offset={base} for {len(data)} bytes (offsets overflow)")
    want = ref_lineindex.scan_bytes(data, _DIALECTS[i], base_offset=base, classify_window=window)
    if _fields(got) != _fields(want):
        raise Mismatch(f"scan_bytes({data!r}, dialect {i}, base={base}, window={window})")


def fuzz_string_skip_paths(src: Source) -> None:
    """The classifier passes over a string's plain bytes 32 at a time with AVX2, or one at
    a time: the two give every line the same kind, on any bytes."""
    if not lineindex.SIMD_AVAILABLE:
        return
    data = src.jsonish(2048)
    i = src.int(0, len(_DIALECTS) - 1)
    window = src.choice([1, 16, 64, lineindex.DEFAULT_CLASSIFY_WINDOW])
    before = lineindex.use_simd(True)
    try:
        fast = lineindex.scan_bytes(data, _TABLES[i], classify_window=window)
        lineindex.use_simd(False)
        slow = lineindex.scan_bytes(data, _TABLES[i], classify_window=window)
    finally:
        lineindex.use_simd(before)
    if _fields(fast) != _fields(slow):
        raise Mismatch(f"scan_bytes({data!r}, dialect {i}, window={window}): the AVX2 string skip "
                       f"classifies {list(fast.kinds)}, the byte loop {list(slow.kinds)}")


_memfd: int | None = None


def _file_holding(data: bytes) -> int:
    """One in-memory file per process, refilled for each input (no disk traffic)."""
    global _memfd
    if _memfd is None:
        _memfd = os.memfd_create("boundctx-fuzz") if hasattr(os, "memfd_create") else os.open(
            os.path.join(os.environ.get("TMPDIR", "/tmp"), f"boundctx-fuzz-{os.getpid()}"),
            os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    os.ftruncate(_memfd, 0)
    os.pwrite(_memfd, data, 0)
    return _memfd


def fuzz_scan_fd(src: Source) -> None:
    data = src.jsonish(600)
    if src.bool():  # a line longer than a block
        data += (b'{"type":"message","uuid":"u","t":"' + b"x" * src.int(4000, 9000) + b'","parentUuid":"p"}\n'
                 + src.jsonish(100))
    i = src.int(0, len(_DIALECTS) - 1)
    starts = [0] + [k + 1 for k, b in enumerate(data) if b == 10]
    start = src.choice(starts) if src.bool() else src.int(0, len(data) + 5)
    end = -1 if src.bool() else src.int(max(start - 2, 0), len(data) + 5)
    block = src.choice([4096, 4097, 5003, 8192, 4095])
    window = src.choice([1, 3, 16, 64, lineindex.DEFAULT_CLASSIFY_WINDOW])
    # Cut into parts scanned side by side (min_part small enough to cut these sizes).
    threads = src.choice([1, 2, 3, 4])
    min_part = src.choice([1, 5, 64, 4096])
    # Links read in the same pass, a line longer than the limit without them.
    keys = _LINK_KEYS if src.bool() else None
    limit = src.choice([1, 20, 300, 4096, 2**62, 0, -1])
    seen: list[int] = []
    fd = _file_holding(data)
    try:
        got = filescan.scan_fd(fd, _TABLES[i], start=start, end=end, block_size=block,
                               classify_window=window, threads=threads, min_part=min_part,
                               progress=seen.append, link_keys=keys, link_limit=limit)
    except ValueError:
        if block >= 4096 and (end == -1 or end >= start) and limit >= 1:
            raise Mismatch(f"scan_fd refused start={start} end={end} block={block} limit={limit}") from None
        return
    if block < 4096 or (end != -1 and end < start) or limit < 1:
        raise Mismatch(f"scan_fd accepted start={start} end={end} block={block} limit={limit}")
    piece = data[start:] if end == -1 else data[start:end]
    want = ref_lineindex.scan_bytes(piece, _DIALECTS[i], base_offset=start, classify_window=window)
    if _fields(got) != _fields(want):
        raise Mismatch(f"scan_fd of {data!r}[{start}:{end}] with block {block}, window {window}, "
                       f"{threads} threads, min_part {min_part}")
    if seen != sorted(seen) or any(s < 0 for s in seen):
        raise Mismatch(f"progress went backwards: {seen}")
    if keys is None:
        if got.links is not None:
            raise Mismatch("scan_fd read links it was not asked for")
        return
    starts = np.frombuffer(got.starts, dtype=np.int64)
    want_links = np.frombuffer(linetree.line_links(piece, starts, 0, len(starts), got.indexed_end, start, keys),
                               dtype=np.uint64).reshape(-1, 4).copy()
    ends = np.append(starts[1:], got.indexed_end)
    want_links[ends - starts > limit] = 0
    if got.links != want_links.tobytes():
        raise Mismatch(f"scan_fd's links of {data!r}[{start}:{end}] (block {block}, {threads} threads, "
                       f"min_part {min_part}, limit {limit}) are not line_links'")


def fuzz_sequence_lines(src: Source) -> None:
    kinds = src.raw(200) if src.bool() else bytes(src.int(0, 7) for _ in range(src.int(0, 60)))
    line0 = src.int64() if src.bool() else src.int(0, 1000)
    try:
        messages, compactions = lineindex.sequence_lines(kinds, line0)
    except ValueError:
        if 0 <= line0 <= 2**62:
            raise Mismatch(f"sequence_lines refused line0={line0}") from None
        return
    if not 0 <= line0 <= 2**62:
        raise Mismatch(f"sequence_lines accepted line0={line0}")
    got = (list(memoryview(messages).cast("q")), list(memoryview(compactions).cast("q")))
    if got != ref_lineindex.sequence_lines(kinds, line0):
        raise Mismatch(f"sequence_lines({kinds!r}, {line0})")


def fuzz_rises_within(src: Source) -> None:
    values = [src.int64() if src.bool() else src.int(-3, 40) for _ in range(src.int(0, 12))]
    low, high = src.int64(), src.int64()
    raw = array.array("q", values).tobytes()
    if src.bool():
        raw = raw + src.raw(7)  # a partial int64 at the end is refused
    whole = len(raw) % 8 == 0
    try:
        got = lineindex.rises_within(memoryview(b"." + raw)[1:] if src.bool() else raw, low, high)
    except ValueError:
        if whole:
            raise Mismatch(f"rises_within refused {len(raw)} bytes") from None
        return
    if not whole:
        raise Mismatch(f"rises_within accepted {len(raw)} bytes")
    if got != ref_lineindex.rises_within(values, low, high):
        raise Mismatch(f"rises_within({values}, {low}, {high})")


_NAMES = ["message", "compaction", "session", "x", "type", "", "m\u00e9ssage", "a" * 64, "a" * 65,
          b"message", 7, None, "\x00", " "]
_KINDS = [1, 2, 3, 0, 4, -1, True, 1.0, 2.5, "1", None]


def fuzz_dialect_table(src: Source) -> None:
    kinds = {}
    for _ in range(src.choice([0, 1, 3, 8, 32, 33])):
        name = src.choice(_NAMES) if src.bool() else src.take(src.int(1, 6)).decode("latin-1")
        kinds[name] = src.choice(_KINDS) if src.int(0, 3) == 0 else src.int(1, 3)
    accepts = twins.dialect_table_accepts(kinds)
    try:
        table = lineindex.DialectTable(kinds)
    except (ValueError, TypeError) as exc:
        if accepts:
            raise Mismatch(f"DialectTable refused {kinds!r}: {exc}") from None
        return
    if not accepts:
        raise Mismatch(f"DialectTable accepted {kinds!r}")
    lines = [b'{"type":"' + k.encode() + b'"' + src.choice([b"}", b',"a":1}', b" }", b""]) for k in kinds]
    data = b"\n".join(lines + [src.jsonish(100)])
    window = src.choice([1, 8, lineindex.DEFAULT_CLASSIFY_WINDOW])
    got = lineindex.scan_bytes(data, table, classify_window=window)
    want = ref_lineindex.scan_bytes(data, kinds, classify_window=window)
    if _fields(got) != _fields(want):
        raise Mismatch(f"a table of {kinds!r} classifies {data!r} differently")


_QK_PATHS = ["subtype", "payload.type", "a.b", "payload", "type", "type.x", "a.b.c", "", "a..b", ".a",
             "x" * 64, "x" * 65, "p\u00e9", 7]
_QK_VALUES = ["user_message", "a", "v", "type", "x" * 64, "", "x" * 65, "\u00e9", None]


def _qualified_member(path: str, value: bytes) -> bytes:
    keys = path.split(".")
    inner = b'"' + value + b'"'
    if len(keys) == 2:
        inner = b'{"' + keys[1].encode() + b'":' + inner + b"}"
    return b'"' + keys[0].encode() + b'":' + inner


def fuzz_qualified_kind(src: Source) -> None:
    # Mostly valid arguments (so the table gets built and scanned), sometimes not.
    hostile = src.int(0, 3) == 0
    kind = src.choice([1, 2, 3, 0, True] if hostile else [1, 2])
    path = src.choice(_QK_PATHS if hostile else _QK_PATHS[:4])
    values = tuple(src.choice(_QK_VALUES if hostile else _QK_VALUES[:5])
                   for _ in range(src.choice([0, 1, 2, 4, 5] if hostile else [1, 2, 4])))
    accepts = twins.qualified_kind_accepts(kind, path, values)
    try:
        qk = lineindex.QualifiedKind(kind, path, *values)
    except (ValueError, TypeError) as exc:
        if accepts:
            raise Mismatch(f"QualifiedKind({kind!r}, {path!r}, *{values!r}) refused: {exc}") from None
        return
    if not accepts:
        raise Mismatch(f"QualifiedKind({kind!r}, {path!r}, *{values!r}) accepted")
    if (int(qk), qk.path, qk.values) != (kind, path, values):
        raise Mismatch(f"QualifiedKind keeps {(int(qk), qk.path, qk.values)}")
    kinds = {"event": qk, "message": 1, "other": 3}
    if src.bool():  # a second qualified type on its own path (or the same one)
        kinds["item"] = lineindex.QualifiedKind(2, src.choice(["kind", "payload.type", path]), "c")
    try:
        table = lineindex.DialectTable(kinds)
    except ValueError:
        return  # two paths with the same first key: a documented refusal
    lines = []
    for _ in range(src.int(0, 8)):
        typ = src.choice([b"event", b"item", b"message", b"other", b"x"])
        member = _qualified_member(src.choice([path, "kind", "payload.type"]),
                                   src.choice([v.encode() for v in values] + [b"c", b"zz", b""]))
        parts = [b'"type":"' + typ + b'"', member]
        if src.bool():
            parts.reverse()  # the qualifier before "type"
        if src.bool():
            parts.insert(src.int(0, 2), b'"n":' + src.choice([b"1", b'"s"', b"[1,{}]", b'{"type":"x"}']))
        line = b"{" + b",".join(parts) + b"}"
        if src.int(0, 3) == 0:
            line = line[: src.int(0, len(line))]  # cut: truncated or unbalanced
        lines.append(line)
    data = b"\n".join(lines + [src.jsonish(60)])
    window = src.choice([1, 8, 24, 64, lineindex.DEFAULT_CLASSIFY_WINDOW])
    got = lineindex.scan_bytes(data, table, classify_window=window)
    want = ref_lineindex.scan_bytes(data, kinds, classify_window=window)
    if _fields(got) != _fields(want):
        raise Mismatch(f"qualified table {kinds!r} classifies {data!r} (window {window}) differently")


# -- projection --------------------------------------------------------------------


def fuzz_project_display(src: Source) -> None:
    prefix = src.jsonish(400)
    total = len(prefix) + src.choice([0, 0, 1, 5, 100, -1])
    limit = src.choice([0, 1, 5, 40, 300, -1]) if src.bool() else src.int(0, 500)
    both = _same_refusal(lambda: projection.project_display(prefix, total, limit),
                         lambda: ref_lineindex.project_display(prefix, total, limit))
    if both and both[0] != both[1]:
        raise Mismatch(f"project_display({prefix!r}, {total}, {limit}): {both[0]!r} != {both[1]!r}")


def fuzz_escape_line_separators(src: Source) -> None:
    data = src.jsonish(300)
    got = projection.escape_line_separators(data)
    want = data.replace("\u2028".encode(), b"\\u2028").replace("\u2029".encode(), b"\\u2029")
    if got != want or (want == data and got is not data):
        raise Mismatch(f"escape_line_separators({data!r}) = {got!r}")


def fuzz_count_openers(src: Source) -> None:
    data = src.jsonish(300)
    start = src.int(-2, len(data) + 2)
    end = src.int(-2, len(data) + 2)
    if not 0 <= start <= end <= len(data):
        try:
            projection.count_openers(data, start, end)
        except ValueError:
            return
        raise Mismatch(f"count_openers({data!r}, {start}, {end}) accepted a range outside the bytes")
    got = projection.count_openers(data, start, end)
    want = data.count(b"[", start, end) + data.count(b"{", start, end)
    if got != want:
        raise Mismatch(f"count_openers({data!r}, {start}, {end}) = {got}, not {want}")


# -- linetree ----------------------------------------------------------------------

_LINK_KEYS = [(b"uuid", 0), (b"id", 0), (b"parentUuid", 1), (b"parentId", 1), (b"logicalParentUuid", 2),
              (b"sourceToolAssistantUUID", 3)]
_LINK_POOL = [0, 0, 1, 2, 3, 2**63, 2**64 - 1, ref_linetree.id_hash("a"), ref_linetree.id_hash("b")]


def _lines_of(data: bytes) -> list[int]:
    return [0] + [i + 1 for i, b in enumerate(data) if b == 10 and i + 1 < len(data)]


def fuzz_line_links(src: Source) -> None:
    data = src.jsonish(600)
    starts = _lines_of(data)
    if src.int(0, 7) == 0:  # hostile ranges: refused, never read
        bad = list(starts)
        bad[src.int(0, len(bad) - 1)] = src.int64()
        try:
            linetree.line_links(data, _i64(bad), 0, len(bad), len(data), 0, _LINK_KEYS)
        except ValueError:
            return
        if not all(0 <= x <= len(data) for x in bad) or bad != sorted(bad):
            raise Mismatch(f"line_links read lines {bad} of {len(data)} bytes")
        return
    got = np.frombuffer(linetree.line_links(data, _i64(starts), 0, len(starts), len(data), 0, _LINK_KEYS),
                        dtype=np.uint64).reshape(-1, 4)
    ends = starts[1:] + [len(data)]
    for k, (a, b) in enumerate(zip(starts, ends)):
        line = data[a:b]
        try:
            json.loads(line.decode("utf-8"))
        except (ValueError, RecursionError):
            continue  # not JSON: any links, but no crash
        want = ref_linetree.links_of_line(line, _LINK_KEYS)
        if tuple(int(v) for v in got[k]) != want:
            raise Mismatch(f"line_links({line!r}) = {got[k].tolist()}, twin {want}")


def fuzz_link_walk_paths(src: Source) -> None:
    """The AVX2 link walk gives what the scalar one gives, on any bytes (not only JSON):
    blocks of 32 and 64 bytes, and the scalar tail where fewer are left."""
    if not linetree.SIMD_AVAILABLE:
        return
    data = src.jsonish(2048)
    starts = _lines_of(data)
    before = linetree.use_simd(True)
    try:
        fast = linetree.line_links(data, _i64(starts), 0, len(starts), len(data), 0, _LINK_KEYS)
        linetree.use_simd(False)
        slow = linetree.line_links(data, _i64(starts), 0, len(starts), len(data), 0, _LINK_KEYS)
    finally:
        linetree.use_simd(before)
    if fast != slow:
        got, want = (np.frombuffer(x, dtype=np.uint64).reshape(-1, 4).tolist() for x in (fast, slow))
        bad = next(k for k in range(len(starts)) if got[k] != want[k])
        raise Mismatch(f"line {bad} of {data!r}: AVX2 walk {got[bad]}, scalar walk {want[bad]}")


def _link_rows(src: Source, n: int) -> list[tuple[int, int, int, int]]:
    rows = []
    for _ in range(n):
        parent = src.choice(_LINK_POOL)
        rows.append((src.choice(_LINK_POOL), parent, src.choice(_LINK_POOL),
                     parent if src.bool() else src.choice(_LINK_POOL)))
    return rows


def fuzz_hang_lines(src: Source) -> None:
    rows = _link_rows(src, src.int(0, 30))
    kinds = [src.int(0, 7) for _ in rows]
    table = linetree.IdTable(src.choice([0, 1, len(rows), 5000]))  # room made ahead, or grown
    ids, up = linetree.hang_lines(np.array(rows, dtype=np.uint64).reshape(-1), table, 0,
                                  np.empty(0, dtype=np.int64), -1)
    want = ref_linetree.hang(rows)
    if np.frombuffer(up, dtype=np.int64).tolist() != want:
        raise Mismatch(f"hang_lines({rows}) = {np.frombuffer(up, dtype=np.int64).tolist()}, twin {want}")
    pos, tip, comp = linetree.place_lines(_i64(want), bytes(kinds), 0, _i64([]), _i64([]), _i64([]), _i64([]))
    if [np.frombuffer(x, dtype=np.int64).tolist() for x in (pos, tip, comp)] != list(ref_linetree.place(want, kinds)):
        raise Mismatch(f"place_lines({want}, {kinds}) disagrees with the twin")
    twin_pos, _tip, twin_comp = ref_linetree.place(want, kinds)
    if linetree.reads_as_list(bytes(kinds), _i64(twin_pos), _i64(twin_comp), _i64(want), 0, 0, -1) != \
            ref_linetree.reads_as_list(kinds, twin_pos, twin_comp, want):
        raise Mismatch(f"reads_as_list({kinds}, {twin_pos}, {twin_comp}) disagrees with the twin")
    for k, row in enumerate(rows):
        if row[0] >= 2 and table.lookup(row[0]) != next(j for j, r in enumerate(rows) if r[0] == row[0]):
            raise Mismatch(f"IdTable does not keep the first line of id {row[0]}")


def fuzz_hangs_as_chain(src: Source) -> None:
    """Chains, broken anywhere by a copy, a root, a fork or a wild value; any first line."""
    n = src.int(0, 12)
    line0 = src.choice([0, 1, 9, 2**62 - n, 2**62 - n + 1, -1])
    up = [line0 + k - 1 for k in range(n)]
    if n and src.bool():
        up[src.int(0, n - 1)] = src.choice([-3, -1, 0, 5, INT64_MAX, INT64_MIN])
    try:
        got = linetree.hangs_as_chain(_i64(up), line0)
    except ValueError:
        if 0 <= line0 <= 2**62 - n:
            raise Mismatch(f"hangs_as_chain refused line {line0} for {n} lines") from None
        return
    if got != ref_linetree.hangs_as_chain(up, line0):
        raise Mismatch(f"hangs_as_chain({up}, {line0}) = {got}")


def fuzz_place_lines(src: Source) -> None:
    """Hostile ``up`` arrays: later lines, lines not given, copies hung on: refused."""
    n = src.int(0, 12)
    up = [src.choice([-3, -2, -1, 0, 1, 5, 11, 12, INT64_MAX, INT64_MIN]) for _ in range(n)]
    line0 = src.choice([0, 3])
    refs = sorted({src.int(0, 2) for _ in range(src.int(0, 3))}) if line0 else []
    kinds = bytes(src.int(0, 7) for _ in range(n))
    try:
        linetree.place_lines(_i64(up), kinds, line0, _i64(refs), _i64([0] * len(refs)),
                             _i64([-1] * len(refs)), _i64([-1] * len(refs)))
    except ValueError:
        return
    for k, u in enumerate(up):
        if u >= line0 + k or (u >= 0 and u < line0 and u not in refs):
            raise Mismatch(f"place_lines accepted line {line0 + k} hung on {u} (refs {refs})")


def fuzz_id_index(src: Source) -> None:
    """The sorted ids of the lines that have one and are not copies, each with its line:
    against a plain sort."""
    n = src.int(0, 20)
    ids = [src.choice([0, 0, 5, -7, 2**63 - 1, -(2**63), src.int64()]) for _ in range(n)]
    up = [src.choice([-3, -1, 0, 1]) for _ in range(n)]
    line0 = src.choice([0, 7, 2**62 - n, 2**62 - n + 1, -1])
    try:
        keys, lines = linetree.id_index(_i64(ids), _i64(up), line0)
    except ValueError:
        if 0 <= line0 <= 2**62 - n:
            raise Mismatch(f"id_index refused line {line0} for {n} lines") from None
        return
    got = list(zip(np.frombuffer(keys, dtype=np.int64).tolist(), np.frombuffer(lines, dtype=np.int64).tolist()))
    kept = [(k, line0 + i) for i, (k, u) in enumerate(zip(ids, up)) if k != 0 and u != -3]
    if got != sorted(kept, key=lambda kl: kl[0]):  # a stable sort: equal ids in line order
        raise Mismatch(f"id_index({ids}, {up}) = {got}")


def fuzz_branch_lines(src: Source) -> None:
    n = src.int(0, 16)
    up = [src.choice([-3, -1, src.int(-2, 20), src.int64()]) for _ in range(n)]
    tip = [src.choice([-1, src.int(-2, 20), src.int64()]) for _ in range(n)]
    lo = src.choice([0, 2, src.int64()])
    start = src.choice([src.int(-2, 20), src.int64()])
    limit = src.choice([0, 1, 5, 40, -1])
    try:
        out, _short = linetree.branch_lines(_i64(tip), _i64(up), lo, start, limit)
    except (ValueError, OverflowError):
        if limit >= 0 and 0 <= lo <= 2**62 - n:
            raise Mismatch(f"branch_lines refused a limit of {limit} from line {lo}") from None
        return
    if limit < 0 or not 0 <= lo <= 2**62 - n:
        raise Mismatch(f"branch_lines accepted a limit of {limit} from line {lo}")
    lines = np.frombuffer(out, dtype=np.int64).tolist()
    if len(lines) > max(limit, 0) or any(not lo <= x < lo + n for x in lines):
        raise Mismatch(f"branch_lines walked outside the lines it was given: {lines} (lo {lo}, n {n})")



# -- sections ----------------------------------------------------------------------


def _spans(text: str, src: Source) -> tuple[list[int], list[int]]:
    return ref_tokenmap.token_spans(text, src.partition(ref_tokenmap.utf8_length(text), 40))


def _i64(values) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def fuzz_next_cut(src: Source) -> None:
    text = src.text(60)
    if not text:
        text = "a"
    n = len(text)
    start = src.int(0, n - 1)
    max_tokens, overlap = src.int(1, 30), src.int(0, 20)
    if src.int(0, 3):
        s, e = _spans(text, src)
        boundaries = [p for p in range(start + 1) if graphemes.is_boundary(text, p, 0)]
        floor = src.choice([-1, *boundaries])
        got = sections.next_cut(text, _i64(s), _i64(e), start, max_tokens, overlap, floor)
        want = ref_sections.next_cut(text, s, e, start, max_tokens, overlap, None if floor < 0 else floor)
        if got != want:
            raise Mismatch(f"next_cut({text!r}, {s}, {e}, {start}, {max_tokens}, {overlap}, {floor}): "
                           f"{got} != {want}")
        return
    # Hostile spans (as a broken TokenCounter could give): refused or a sane answer.
    k = src.int(0, 8)
    s = [src.int64() if src.bool() else src.int(-2, n + 2) for _ in range(k)]
    e = [src.int64() if src.bool() else src.int(-2, n + 2) for _ in range(src.choice([k, k, k + 1]))]
    floor = src.choice([-1, 0, start, start + 1, src.int(-3, n + 3)])
    start = src.choice([start, -1, n])
    try:
        end, nxt, kind = sections.next_cut(text, _i64(s), _i64(e), start, max_tokens, overlap, floor)
    except ValueError:
        return
    if not (kind in range(5) and -1 <= end <= n and -1 <= nxt <= n and (end < 0 or end > start)):
        raise Mismatch(f"next_cut on hostile spans {s}, {e} gave {(end, nxt, kind)} for n={n}, start={start}")


def fuzz_is_boundary(src: Source) -> None:
    text = src.text(30)
    n = len(text)
    i, floor = src.int(-3, n + 3), src.int(-2, n + 2)
    try:
        got = sections.is_boundary(text, i, floor)
    except ValueError:
        if 0 <= floor <= n:
            raise Mismatch(f"is_boundary({text!r}, {i}, {floor}) refused a floor in range") from None
        return
    if not 0 <= floor <= n:
        raise Mismatch(f"is_boundary accepted floor={floor} for a text of {n}")
    if got != graphemes.is_boundary(text, i, floor):
        raise Mismatch(f"is_boundary({text!r}, {i}, {floor}) = {got}")


def fuzz_grapheme_value(src: Source) -> None:
    c = chr(src.int(0, 0x10FFFF))
    if sections.grapheme_value(c) != graphemes.value(c):
        raise Mismatch(f"grapheme_value({c!r})")


def fuzz_is_space(src: Source) -> None:
    c = chr(src.int(0, 0x10FFFF))
    if sections.is_space(c) != c.isspace():
        raise Mismatch(f"is_space({c!r})")


def fuzz_newline_sync(src: Source) -> None:
    text = src.text(50)
    n = len(text)
    start = src.int(-1, n + 1)
    end = src.int(start - 1, n + 1)
    if src.int(0, 3):
        tok_start = _spans(text, src)[0]
    else:  # sorted, but not from any tokenization
        tok_start = sorted(src.int(-2, n + 2) for _ in range(src.int(0, 10)))
    both = _same_refusal(lambda: sections.newline_sync(text, _i64(tok_start), start, end),
                         lambda: twins.newline_sync(text, tok_start, start, end))
    if both and both[0] != both[1]:
        raise Mismatch(f"newline_sync({text!r}, {tok_start}, {start}, {end}): {both[0]} != {both[1]}")
    if src.bool():  # unsorted starts: any answer, but an answer
        hostile = _i64([src.int64() for _ in range(src.int(0, 6))])
        if 0 <= start <= end <= n:
            got = sections.newline_sync(text, hostile, start, end)
            if not (len(got) == 3 and -1 <= got[0] <= got[1] <= n):
                raise Mismatch(f"newline_sync on hostile starts gave {got}")


# -- tokenmap ----------------------------------------------------------------------


def fuzz_utf8_length(src: Source) -> None:
    text = src.text(80)
    if tokenmap.utf8_length(text) != ref_tokenmap.utf8_length(text):
        raise Mismatch(f"utf8_length({text!r})")


def fuzz_code_point_byte_offsets(src: Source) -> None:
    text = src.text(80)
    size = len(text) + 1 + src.choice([0, 0, 0, -1, 1])
    out = np.full(max(size, 0), -7, np.int64)
    try:
        tokenmap.code_point_byte_offsets(text, out)
    except ValueError:
        if size == len(text) + 1:
            raise Mismatch("code_point_byte_offsets refused a right-sized buffer") from None
        return
    if size != len(text) + 1 or out.tolist() != ref_tokenmap.code_point_byte_offsets(text):
        raise Mismatch(f"code_point_byte_offsets({text!r}) into {size} entries: {out.tolist()}")


def fuzz_token_spans(src: Source) -> None:
    text = src.text(60)
    total = ref_tokenmap.utf8_length(text)
    if src.int(0, 2):
        pieces = src.partition(total)
    else:  # lengths from no tokenization of this text
        pieces = [src.int64() if src.bool() else src.int(-1, total + 1) for _ in range(src.int(1, 8))]
    size = len(pieces) + src.choice([0, 0, 0, 1, -1])
    cp_start, cp_end = np.empty(max(size, 0), np.int64), np.empty(len(pieces), np.int64)
    try:
        tokenmap.token_spans(text, _i64(pieces), cp_start, cp_end)
    except ValueError:
        try:
            if size == len(pieces):
                ref_tokenmap.token_spans(text, pieces)
        except ValueError:
            return
        if size == len(pieces):
            raise Mismatch(f"token_spans refused pieces {pieces} of {text!r}") from None
        return
    if size != len(pieces):
        raise Mismatch("token_spans filled output buffers of the wrong size")
    want = ref_tokenmap.token_spans(text, pieces)  # raises for pieces native took: a finding
    if (cp_start.tolist(), cp_end.tolist()) != want:
        raise Mismatch(f"token_spans({text!r}, {pieces})")


#: Every target, by the native entry point it calls.
TARGETS = {
    "filescan.scan_fd": fuzz_scan_fd,
    "lineindex.scan_bytes": fuzz_scan_bytes,
    "lineindex.sequence_lines": fuzz_sequence_lines,
    "lineindex.rises_within": fuzz_rises_within,
    "lineindex.DialectTable": fuzz_dialect_table,
    "lineindex.QualifiedKind": fuzz_qualified_kind,
    "lineindex.use_simd": fuzz_string_skip_paths,
    "linetree.line_links": fuzz_line_links,
    "linetree.use_simd": fuzz_link_walk_paths,
    "linetree.hang_lines": fuzz_hang_lines,
    "linetree.place_lines": fuzz_place_lines,
    "linetree.reads_as_list": fuzz_hang_lines,
    "linetree.branch_lines": fuzz_branch_lines,
    "linetree.id_index": fuzz_id_index,
    "linetree.hangs_as_chain": fuzz_hangs_as_chain,
    "projection.project_display": fuzz_project_display,
    "projection.escape_line_separators": fuzz_escape_line_separators,
    "projection.count_openers": fuzz_count_openers,
    "sections.next_cut": fuzz_next_cut,
    "sections.is_boundary": fuzz_is_boundary,
    "sections.grapheme_value": fuzz_grapheme_value,
    "sections.is_space": fuzz_is_space,
    "sections.newline_sync": fuzz_newline_sync,
    "tokenmap.utf8_length": fuzz_utf8_length,
    "tokenmap.code_point_byte_offsets": fuzz_code_point_byte_offsets,
    "tokenmap.token_spans": fuzz_token_spans,
}
#: Names in the stubs that are not called directly: results, checked through the calls
#: that return them.
CHECKED_THROUGH = {"lineindex.ScanResult": ("lineindex.scan_bytes", "filescan.scan_fd"),
                   "linetree.IdTable": ("linetree.hang_lines",)}
_ORDER = sorted(TARGETS)


def run(data: bytes, target: str | None = None) -> str:
    """Run one input: its first byte picks the target unless ``target`` is given.
    Returns the target's name; raises :class:`Mismatch` on a finding."""
    src = Source(data)
    name = target or _ORDER[src.int(0, len(_ORDER) - 1)]
    TARGETS[name](src)
    return name
