"""``boundctx._native.filescan``: a scan of a file, in any blocks and parts, equals one
scan of its bytes (``tests/reference/lineindex.py`` and native ``scan_bytes``).

Property tests cut files at every block size and into parts at arbitrary line starts;
fixed fixtures pin the edges (a line longer than a block, a multi-byte character and a
qualifier on a block boundary, offsets above 2**31, a file shorter than the range,
progress, failed reads, bad arguments).
"""

from __future__ import annotations

import array
import os
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from boundctx._native import filescan as native
from boundctx._native import lineindex

from tests._support.strategies import PI_DIALECT, classify_windows, jsonl_documents, large_documents
from tests.reference import lineindex as ref

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
