"""``boundctx._native.filescan``: a scan of a file, in any blocks and parts, equals one
scan of its bytes (``tests/reference/lineindex.py`` and native ``scan_bytes``), and the
links it reads are ``line_links``' over those bytes (``tests/reference/linetree.py``).

Property tests cut files at every block size and into parts at arbitrary line starts;
fixed fixtures pin the edges (a line longer than a block, a multi-byte character and a
qualifier on a block boundary, offsets above 2**31, a file shorter than the range,
progress, failed reads, bad arguments).
"""

from __future__ import annotations

import array
import json
import os
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from boundctx._native import filescan as native
from boundctx._native import lineindex, linetree
from boundctx.transcript.tree import LONGEST_LINKED_LINE, link_keys

from tests._support.strategies import PI_DIALECT, classify_windows, jsonl_documents, large_documents, linked_documents
from tests.reference import lineindex as ref
from tests.reference import linetree as ref_linetree

MESSAGE, COMPACTION, OTHER, CORRUPT, BLANK, UNDECIDED = 1, 2, 3, 4, 5, 6  # sidecar format
PI = lineindex.DialectTable(PI_DIALECT)
BLOCK_SIZES = [4096, 4097, 5003, 8192, 65536]
Q = lineindex.QualifiedKind
# The shapes of the real dialects: a top-level second key, and a key inside an object.
QUALIFIED = {
    "user": MESSAGE,
    "system": Q(COMPACTION, "subtype", "compact_boundary"),
    "event_msg": Q(MESSAGE, "payload.type", "user_message"),
}
SYSTEM = b'{"type":"system"'
EVENT = b'{"type":"event_msg"'


def fields(result) -> tuple[list[int], list[int], int, int]:
    """A scan result (native or reference) as plain comparable values."""
    if isinstance(result, ref.ScanResult):
        return (result.starts, result.kinds, result.indexed_end, result.scanned_end)
    starts = array.array("q", result.starts).tolist()
    return (starts, list(result.kinds), result.indexed_end, result.scanned_end)


def scan_file(data: bytes, dialect=PI, *, offset: int = 0, **options):
    """scan_fd over a real temporary file holding ``data`` at ``offset``."""
    with tempfile.TemporaryFile() as f:
        os.pwrite(f.fileno(), data, offset)
        return native.scan_fd(f.fileno(), dialect, **options)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(large_documents(), st.sampled_from(BLOCK_SIZES), classify_windows())
def test_scan_fd_matches_scan_bytes_for_every_block_size(data, block_size, window):
    got = fields(scan_file(data, block_size=block_size, classify_window=window))
    assert got == fields(lineindex.scan_bytes(data, PI, classify_window=window))
    assert got == fields(ref.scan_bytes(data, PI_DIALECT, classify_window=window))


@settings(max_examples=50, deadline=None)
@given(jsonl_documents(max_lines=6), st.data())
def test_scan_fd_sub_range_matches_scan_bytes_of_the_slice(data, draw):
    line_starts = [0] + [i + 1 for i, b in enumerate(data) if b == ord("\n")]
    start = draw.draw(st.one_of(st.sampled_from(line_starts), st.integers(0, len(data) + 5)))
    end = draw.draw(st.one_of(st.just(-1), st.integers(start, len(data) + 5)))
    window = draw.draw(classify_windows())
    got = fields(scan_file(data, start=start, end=end, block_size=4096, classify_window=window))
    piece = data[start:] if end == -1 else data[start:end]
    assert got == fields(ref.scan_bytes(piece, PI_DIALECT, base_offset=start,
                                        classify_window=window))


def test_scan_fd_line_longer_than_a_block():
    text = "y" * 3 * 4096
    data = (b'{"type":"message","text":"' + text.encode() + b'"}\n'
            + b'{"text":"' + text.encode() + b'","type":"compaction"}\n')
    for block_size in (4096, 4097, 65536):
        result = scan_file(data, block_size=block_size)
        assert fields(result) == ([0, 4096 * 3 + 29], [MESSAGE, COMPACTION], len(data), len(data))
    assert fields(scan_file(data, block_size=4096, classify_window=4096))[1] == [MESSAGE, UNDECIDED]


@pytest.mark.parametrize("shift", range(-4, 5))
def test_scan_fd_multibyte_character_on_a_block_boundary(shift):
    # A 4-byte character whose bytes straddle offset 4096 for some shifts; the line's
    # "type" comes after it, and its closing brace lies in the next block.
    head = b'{"text":"' + b"x" * (4096 - 9 - 2 + shift)
    data = head + "\U0001f600".encode() + b'","type":"message"}\n{"type":"compaction"}\n'
    expected = fields(ref.scan_bytes(data, PI_DIALECT))
    assert expected[1] == [MESSAGE, COMPACTION]
    for block_size in (4096, 4097):
        assert fields(scan_file(data, block_size=block_size)) == expected
    assert fields(lineindex.scan_bytes(data, PI)) == expected


def test_scan_fd_lines_straddling_blocks():
    line = b'{"type":"message","n":12345678}\n'  # 32 bytes: boundaries fall inside lines
    data = (line[:-1] + b" \n") * 1000 + b'{"type":"compaction"}\n' + line[:10]
    for block_size in (4096, 4099, 8191):
        assert fields(scan_file(data, block_size=block_size)) == fields(
            ref.scan_bytes(data, PI_DIALECT))


def test_scan_fd_offsets_above_2_31_in_a_sparse_file():
    start = 2**32 + 5
    data = b'{"type":"message"}\n\n{"type":"compaction"}\n{"torn"'
    result = scan_file(data, offset=start, start=start, block_size=4096)
    assert fields(result) == fields(ref.scan_bytes(data, PI_DIALECT, base_offset=start))
    assert result.scanned_end == start + len(data)


def test_scan_fd_stops_at_end_of_file_before_end():
    data = b'{"type":"message"}\n{"type":"mess'
    result = scan_file(data, end=len(data) + 1000, block_size=4096)
    assert (result.indexed_end, result.scanned_end) == (19, len(data))


def test_scan_fd_reports_progress_after_each_block():
    data = b'{"type":"message"}\n' * 1000
    seen = []
    scan_file(data, start=19, block_size=4096, progress=seen.append)
    assert seen == sorted(seen) and seen[-1] == len(data) - 19
    assert len(seen) == -(-(len(data) - 19) // 4096)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(large_documents(), jsonl_documents(max_lines=30)), st.integers(2, 4),
       st.sampled_from([1, 7, 100, 4096]), st.sampled_from([4096, 5003]), classify_windows())
def test_scan_fd_in_parts_matches_one_scan(data, threads, min_part, block_size, window):
    # Cut into parts at line starts, scanned side by side: the same lines, kinds and
    # ends as one scan, wherever the cuts fall (lines torn at the end included).
    got = fields(scan_file(data, threads=threads, min_part=min_part, block_size=block_size,
                           classify_window=window))
    assert got == fields(ref.scan_bytes(data, PI_DIALECT, classify_window=window))


@settings(max_examples=40, deadline=None)
@given(jsonl_documents(max_lines=12), st.data())
def test_scan_fd_in_parts_over_a_sub_range(data, draw):
    line_starts = [0] + [i + 1 for i, b in enumerate(data) if b == ord("\n")]
    start = draw.draw(st.sampled_from(line_starts))
    end = draw.draw(st.one_of(st.just(-1), st.integers(start, len(data) + 5)))
    got = fields(scan_file(data, start=start, end=end, threads=3, min_part=1, block_size=4096))
    piece = data[start:] if end == -1 else data[start:end]
    assert got == fields(ref.scan_bytes(piece, PI_DIALECT, base_offset=start))


def test_scan_fd_in_parts_reports_every_part_s_bytes():
    data = b'{"type":"message"}\n' * 5000
    seen = []
    result = scan_file(data, threads=2, min_part=4096, block_size=4096, progress=seen.append)
    assert len(result.kinds) == 5000
    assert seen == sorted(seen) and seen[-1] == len(data)


def test_scan_fd_does_not_cut_where_no_line_starts_near_the_cut():
    # One line of 40 MiB: no line start within 16 MiB after the middle, so the scan runs
    # as one part (and finds the same two lines).
    data = b'{"type":"compaction"}\n{"type":"message","text":"' + b"z" * (40 << 20) + b'"}\n'
    result = scan_file(data, threads=2, min_part=4096)
    assert fields(result) == ([0, 22], [COMPACTION, MESSAGE], len(data), len(data))


def test_scan_fd_in_parts_on_a_write_only_fd_raises_oserror():
    with tempfile.NamedTemporaryFile() as f:
        f.write(b'{"type":"message"}\n' * 4000)
        f.flush()
        fd = os.open(f.name, os.O_WRONLY)
        try:
            with pytest.raises(OSError):
                native.scan_fd(fd, PI, threads=4, min_part=4096, block_size=4096)
        finally:
            os.close(fd)


@pytest.mark.parametrize("bad", [{"threads": -1}, {"min_part": 0}])
def test_scan_fd_refuses_bad_part_options(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        scan_file(b'{"type":"message"}\n', **bad)


@pytest.mark.parametrize("shift", range(-3, 4))
def test_scan_fd_qualifier_on_a_block_boundary(shift):
    # The line's "payload" object straddles offset 4096 for some shifts; its inner
    # "type" comes after the boundary, and the next line is qualified the other way.
    head = EVENT + b',"ts":"' + b"t" * (4096 - len(EVENT) - 30 + shift) + b'",'
    data = (head + b'"payload":{"message":"hi","type":"user_message"}}\n'
            + SYSTEM + b',"subtype":"compact_boundary"}\n' + EVENT + b',"payload":{"type":"x"}}\n')
    table = lineindex.DialectTable(QUALIFIED)
    expected = fields(ref.scan_bytes(data, QUALIFIED))
    assert expected[1] == [MESSAGE, COMPACTION, OTHER]
    for block_size in (4096, 4097):
        assert fields(scan_file(data, table, block_size=block_size)) == expected


def test_scan_fd_on_a_closed_fd_raises_oserror():
    fd, path = tempfile.mkstemp()
    os.close(fd)
    os.unlink(path)
    with pytest.raises(OSError):
        native.scan_fd(fd, PI)


def test_scan_fd_on_a_write_only_fd_raises_oserror():
    with tempfile.NamedTemporaryFile() as f:
        fd = os.open(f.name, os.O_WRONLY)
        try:
            with pytest.raises(OSError):
                native.scan_fd(fd, PI)
        finally:
            os.close(fd)


def test_scan_fd_on_a_directory_raises_oserror():
    with tempfile.TemporaryDirectory() as d:
        fd = os.open(d, os.O_RDONLY)
        try:
            with pytest.raises(OSError):
                native.scan_fd(fd, PI)
        finally:
            os.close(fd)


def test_result_is_lineindex_s_scan_result():
    assert type(scan_file(b'{"type":"message"}\n')) is lineindex.ScanResult


def test_build_flag_is_the_same_as_lineindex_s():
    # One build turns the checks on for every module (CMake's BOUNDCTX_CYTHON_CHECKS).
    assert native.BUILT_WITH_CHECKS is lineindex.BUILT_WITH_CHECKS


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: native.scan_fd(0, PI, classify_window=0), "classify_window must be >= 1"),
        (lambda: native.scan_fd(0, PI, block_size=4095), "block_size must be >= 4096"),
        (lambda: native.scan_fd(0, PI, start=-1), "start must be >= 0"),
        (lambda: native.scan_fd(0, PI, start=10, end=9), "end must be -1 or >= start"),
    ],
)
def test_invalid_arguments_raise_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# -- links: read in the scan's own blocks ------------------------------------------

KEYS = link_keys("auto")


def expected_links(data: bytes, result, *, base: int = 0, limit: int = LONGEST_LINKED_LINE) -> list[tuple]:
    """The links of the scan's lines as ``line_links`` reads them from ``data`` (the file's
    bytes from offset ``base``), a line longer than ``limit`` with none; checked against
    the twin on every line that is JSON."""
    starts = array.array("q", result.starts)
    n = len(starts)
    rows = np.frombuffer(linetree.line_links(data, np.frombuffer(result.starts, dtype=np.int64), 0, n,
                                             result.indexed_end, base, KEYS), dtype=np.uint64).reshape(-1, 4)
    out = []
    for k in range(n):
        a, b = starts[k], starts[k + 1] if k + 1 < n else result.indexed_end
        line = data[a - base:b - base]
        if b - a > limit:
            out.append((0, 0, 0, 0))
            continue
        got = tuple(int(v) for v in rows[k])
        try:
            json.loads(line.decode("utf-8"))
        except (ValueError, RecursionError):
            pass  # not JSON: line_links' answer is the rule
        else:
            assert got == ref_linetree.links_of_line(line, KEYS), line
        out.append(got)
    return out


def links_of(result) -> list[tuple]:
    assert result.links is not None and len(result.links) == 32 * len(result.kinds)
    return [tuple(int(v) for v in row) for row in np.frombuffer(result.links, dtype=np.uint64).reshape(-1, 4)]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 30000), st.booleans(), st.integers(0, 3)), min_size=1, max_size=8),
       st.integers(1, 4), st.sampled_from([1, 4096, 20000]), st.sampled_from([LONGEST_LINKED_LINE, 30000, 9000]))
def test_lines_over_many_blocks_link_as_line_links_in_a_scan_cut_into_parts(lines, threads, min_part, limit):
    # A part reads the blocks that continue a line it carries in after the carry, not
    # into its buffer: lines of up to ~7 blocks, their links before and after the long
    # value (escapes and brackets inside it), cut anywhere by blocks and parts.
    rows = []
    for k, (size, after, escapes) in enumerate(lines):
        text = ("x" * size + '\\"}]{[' * escapes)
        record = {"uuid": f"u{k}", "message": {"content": [{"text": text}]}}
        if after:
            record["parentUuid"] = f"u{k - 1}"
        rows.append(json.dumps(record).encode())
    data = b"".join(r + b"\n" for r in rows)
    result = scan_file(data, block_size=4096, threads=threads, min_part=min_part, link_keys=KEYS,
                       link_limit=limit)
    assert fields(result) == fields(ref.scan_bytes(data, PI_DIALECT))
    assert links_of(result) == expected_links(data, result, limit=limit)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(linked_documents(), st.sampled_from(BLOCK_SIZES), st.integers(1, 4), st.sampled_from([1, 7, 100, 4096]),
       st.sampled_from([LONGEST_LINKED_LINE, 5000, 4096, 300, 1]))
def test_scan_fd_links_are_line_links_for_any_blocks_and_parts(data, block_size, threads, min_part, limit):
    # Lines straddle blocks (pads up to 9000 bytes), parts cut anywhere, a limit below
    # some lines' lengths: the links are those line_links reads, line by line.
    result = scan_file(data, block_size=block_size, threads=threads, min_part=min_part, link_keys=KEYS,
                       link_limit=limit)
    assert fields(result) == fields(ref.scan_bytes(data, PI_DIALECT))
    assert links_of(result) == expected_links(data, result, limit=limit)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(linked_documents(), st.data())
def test_scan_fd_links_over_a_sub_range(data, draw):
    line_starts = [0] + [i + 1 for i, b in enumerate(data) if b == ord("\n")]
    start = draw.draw(st.sampled_from(line_starts))
    end = draw.draw(st.one_of(st.just(-1), st.integers(start, len(data) + 5)))
    result = scan_file(data, start=start, end=end, block_size=4096, threads=3, min_part=1, link_keys=KEYS)
    assert links_of(result) == expected_links(data[start:], result, base=start)


def test_scan_fd_links_of_a_line_just_under_and_over_the_limit():
    line = b'{"uuid":"a","t":"' + b"x" * 9000 + b'","parentUuid":"b"}\n'
    data = line + b'{"uuid":"c"}\n' + line
    want = ref_linetree.links_of_line(line, KEYS)
    for block_size in (4096, 4097, 65536):
        for limit, first in ((len(line), want), (len(line) - 1, (0, 0, 0, 0))):
            got = links_of(scan_file(data, block_size=block_size, link_keys=KEYS, link_limit=limit))
            assert got == [first, ref_linetree.links_of_line(b'{"uuid":"c"}', KEYS), first]


def test_scan_fd_links_of_a_file_that_grows_while_it_is_scanned():
    line = b'{"uuid":"%d","parentUuid":"%d","t":"' + b"y" * 3000 + b'"}\n'
    data = b"".join(line % (k, k - 1) for k in range(40))
    with tempfile.TemporaryFile() as f:
        fd = f.fileno()
        os.pwrite(fd, data, 0)
        grown = [0]

        def grow(_done):
            # A writer appends whole lines, and a torn one, while the scan reads.
            at = os.fstat(fd).st_size
            os.pwrite(fd, (line % (100 + grown[0], 99 + grown[0])) + b'{"uuid":"torn', at)
            grown[0] += 1

        result = native.scan_fd(fd, PI, block_size=4096, progress=grow, link_keys=KEYS)
        final = os.pread(fd, os.fstat(fd).st_size, 0)
    assert grown[0] > 1 and result.indexed_end > len(data)
    assert fields(result)[:3] == fields(ref.scan_bytes(final[:result.indexed_end], PI_DIALECT))[:3]
    assert links_of(result) == expected_links(final, result)


def test_scan_fd_without_link_keys_has_no_links():
    assert scan_file(b'{"uuid":"a"}\n').links is None
    assert links_of(scan_file(b"", link_keys=KEYS)) == []


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(linked_documents(), st.integers(1, 4), st.sampled_from([1, 4096]))
def test_scan_fd_with_no_link_key_gives_every_line_absent_links(data, threads, min_part):
    # A dialect whose entries name no parent (codex) has no key to look for: no line is
    # walked, and every line's links are absent, as line_links gives them with no key.
    result = scan_file(data, block_size=4096, threads=threads, min_part=min_part, link_keys=())
    assert fields(result) == fields(ref.scan_bytes(data, PI_DIALECT))
    starts = np.frombuffer(result.starts, dtype=np.int64)
    walked = linetree.line_links(data, starts, 0, len(starts), result.indexed_end, 0, ())
    assert links_of(result) == [(0, 0, 0, 0)] * len(starts)
    assert result.links == walked


@pytest.mark.parametrize(("keys", "limit", "message"), [
    (KEYS, 0, "link_limit must be >= 1"),
    ([(b"", 0)], 64, "a link key is"),
    ([(b"uuid", 4)], 64, "no link slot"),
])
def test_scan_fd_refuses_bad_link_options(keys, limit, message):
    with pytest.raises(ValueError, match=message):
        scan_file(b'{"uuid":"a"}\n', link_keys=keys, link_limit=limit)
