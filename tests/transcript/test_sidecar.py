"""The layout sidecar is an optimisation only: every doubtful one is rebuilt."""

import os
import shutil
import struct
import zlib
from pathlib import Path

import msgspec
import numpy as np
import pytest

from boundctx import Transcript, TranscriptChanged
from boundctx.transcript import encode_record
from boundctx.transcript import layout as layout_mod
from boundctx.transcript import store as store_mod
from boundctx.transcript.arrays import Chunked, SidecarLies
from boundctx.transcript.sidecar import MAGIC, sidecar_paths

from tests._support import rewound_session


def make(path, n, prefix="m"):
    path.write_bytes(b"".join(
        encode_record({"type": "message", "id": f"{prefix}{i}",
                       "message": {"role": "user", "content": f"text {i} " * (i % 7 + 1)}})
        for i in range(n)))
    return path


def ids(t, **kw):
    return [m.record["id"] for m in t.window(**kw).messages]


def test_first_open_builds_and_writes_the_sidecar_beside_the_transcript(tmp_path):
    path = make(tmp_path / "t.jsonl", 10)
    with Transcript.open(path) as t:
        assert t.layout_outcome == "built"
    beside = str(path) + ".layout"
    assert Path(beside).read_bytes()[:8] == MAGIC
    with Transcript.open(path) as t:
        assert t.layout_outcome == "valid"
        assert ids(t) == [f"m{i}" for i in range(10)]


def test_sidecar_arrays_are_aligned_little_endian_int64(tmp_path):
    path = make(tmp_path / "t.jsonl", 5)
    Transcript.open(path).close()
    data = Path(str(path) + ".layout").read_bytes()
    hlen, _crc = struct.unpack_from("<II", data, 8)
    header = msgspec.structs.asdict(layout_mod.decode_header(data[16 : 16 + hlen]))
    assert hlen % 8 == 0 and (16 + hlen) % 8 == 0
    starts = np.frombuffer(data, dtype="<i8", count=header["n"], offset=16 + hlen)
    raw = path.read_bytes()
    expected = [0] + [i + 1 for i, b in enumerate(raw) if b == 10][:-1]
    assert starts.tolist() == expected
    assert header["identity"][2] == len(raw) and header["end"] == len(raw)


def test_external_append_extends_instead_of_rebuilding(tmp_path):
    path = make(tmp_path / "t.jsonl", 10)
    Transcript.open(path).close()
    with open(path, "ab") as f:
        f.write(encode_record({"type": "message", "id": "new"}))
    with Transcript.open(path) as t:
        assert t.layout_outcome == "extend"
        assert ids(t)[-1] == "new" and t.message_count == 11
    with Transcript.open(path) as t:  # the extension was persisted as a segment
        assert t.layout_outcome == "valid" and t.message_count == 11


def test_many_extensions_stay_correct_and_are_compacted(tmp_path):
    path = make(tmp_path / "t.jsonl", 3)
    Transcript.open(path).close()
    for i in range(layout_mod.MAX_SEGMENTS + 3):
        with open(path, "ab") as f:
            f.write(encode_record({"type": "message", "id": f"x{i}"}))
        with Transcript.open(path) as t:
            assert t.layout_outcome == "extend"
            assert ids(t)[-1] == f"x{i}"
    with Transcript.open(path) as t:
        assert t.layout_outcome == "valid"
        assert ids(t) == [f"m{i}" for i in range(3)] + [f"x{i}" for i in range(layout_mod.MAX_SEGMENTS + 3)]


def test_atomic_replacement_by_another_file_is_rebuilt(tmp_path):
    path = make(tmp_path / "t.jsonl", 10)
    Transcript.open(path).close()
    other = make(tmp_path / "other.jsonl", 4, prefix="o")
    os.replace(other, path)
    with Transcript.open(path) as t:
        assert t.layout_outcome == "rebuilt"
        assert ids(t) == ["o0", "o1", "o2", "o3"]


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty", "flip_header", "magic"])
def test_damaged_sidecar_is_rebuilt_never_trusted(tmp_path, damage):
    path = make(tmp_path / "t.jsonl", 50)
    Transcript.open(path).close()
    side = str(path) + ".layout"
    data = bytearray(Path(side).read_bytes())
    if damage == "truncate":
        data = data[: len(data) - 9]
    elif damage == "garbage":
        data = bytearray(os.urandom(len(data)))
    elif damage == "empty":
        data = bytearray()
    elif damage == "flip_header":
        data[20] ^= 0xFF
    elif damage == "magic":
        data[:8] = b"NOTMINE!"
    Path(side).write_bytes(bytes(data))
    with Transcript.open(path) as t:
        assert t.layout_outcome == "rebuilt"
        assert ids(t) == [f"m{i}" for i in range(50)]


def test_foreign_sidecar_copied_from_another_transcript_is_rebuilt(tmp_path):
    a = make(tmp_path / "a.jsonl", 20, prefix="a")
    b = make(tmp_path / "b.jsonl", 20, prefix="b")
    Transcript.open(a).close()
    shutil.copyfile(str(a) + ".layout", str(b) + ".layout")
    with Transcript.open(b) as t:
        assert t.layout_outcome == "rebuilt"
        assert ids(t) == [f"b{i}" for i in range(20)]


def test_lying_sidecar_with_a_valid_header_is_caught_on_read_and_rebuilt(tmp_path):
    path = make(tmp_path / "t.jsonl", 30)
    Transcript.open(path).close()
    side = str(path) + ".layout"
    data = bytearray(Path(side).read_bytes())
    hlen, _ = struct.unpack_from("<II", data, 8)
    base = 16 + hlen
    # Shift the offsets of lines 10..20 by a few bytes: the header still checks out.
    for i in range(10, 20):
        v = struct.unpack_from("<q", data, base + 8 * i)[0]
        struct.pack_into("<q", data, base + 8 * i, v + 3)
    Path(side).write_bytes(bytes(data))
    with Transcript.open(path) as t:
        assert t.layout_outcome == "valid"  # nothing visible from the outside...
        assert ids(t) == [f"m{i}" for i in range(30)]  # ...but the read caught it
        assert t.layout_outcome == "rebuilt"


def test_same_size_same_mtime_rewrite_behind_the_sidecar_rebuilds_once_and_retries(tmp_path):
    path = make(tmp_path / "t.jsonl", 400)  # the middle lies outside both 4 KiB fingerprints
    Transcript.open(path).close()
    st = os.stat(path)
    lines = path.read_bytes().splitlines(keepends=True)
    # Swap two lines of different length in the middle: same size, same head and tail.
    i, j = 150, 211
    assert len(lines[i]) != len(lines[j])
    lines[i], lines[j] = lines[j], lines[i]
    with open(path, "r+b") as f:  # in place: same inode
        f.write(b"".join(lines))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_size == st.st_size
    with Transcript.open(path) as t:
        assert t.layout_outcome == "valid"
        got = ids(t)
        assert t.layout_outcome == "rebuilt"
    expected = [f"m{k}" for k in range(400)]
    expected[i], expected[j] = expected[j], expected[i]
    assert got == expected


def test_a_layout_still_wrong_after_the_rebuild_fails_with_a_clear_error(tmp_path, monkeypatch):
    path = make(tmp_path / "t.jsonl", 10)
    real_build = store_mod.build_layout

    def stale_build(fd, **kw):
        layout = real_build(fd, **kw)
        shifted = layout.starts.all() + 1
        shifted[0] = 0
        layout.starts = layout_mod.Chunked([shifted])
        return layout

    with Transcript.open(path) as t:
        path.write_bytes(b" " + path.read_bytes()[1:])  # a change that forces a read failure
        monkeypatch.setattr(store_mod, "build_layout", stale_build)
        with pytest.raises(TranscriptChanged, match="changed while it was being read"):
            t.window()


def test_unwritable_place_beside_the_transcript_uses_the_cache_directory(tmp_path):
    path = make(tmp_path / "t.jsonl", 5)
    beside, cached = sidecar_paths(str(path))
    os.mkdir(beside)  # something that cannot be replaced by a file sits there
    with Transcript.open(path) as t:
        assert t.layout_outcome == "built"
    assert os.path.isfile(cached)
    with Transcript.open(path) as t:
        assert t.layout_outcome == "valid"
        assert t.message_count == 5


def test_read_only_folder_keeps_the_sidecar_in_the_cache_directory(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root can write into a read-only folder; covered by the directory-in-the-way test")
    folder = tmp_path / "ro"
    folder.mkdir()
    path = make(folder / "t.jsonl", 5)
    folder.chmod(0o555)
    try:
        with Transcript.open(path) as t:
            assert t.message_count == 5
        assert os.path.isfile(sidecar_paths(str(path))[1])
    finally:
        folder.chmod(0o755)


def test_a_valid_open_costs_no_scan(tmp_path, monkeypatch):
    path = make(tmp_path / "t.jsonl", 100)
    Transcript.open(path).close()
    calls = []
    real = layout_mod.filescan.scan_fd
    monkeypatch.setattr(layout_mod.filescan, "scan_fd", lambda *a, **k: calls.append(1) or real(*a, **k))
    with Transcript.open(path) as t:
        t.window(preset="renderer")
    assert calls == []


def test_sidecar_is_as_readable_as_its_transcript(tmp_path):
    path = make(tmp_path / "t.jsonl", 3)
    path.chmod(0o644)
    Transcript.open(path).close()
    assert os.stat(str(path) + ".layout").st_mode & 0o777 == 0o644


def test_reindex_scans_once_even_without_a_sidecar(tmp_path, monkeypatch):
    from boundctx.transcript import reindex

    path = make(tmp_path / "t.jsonl", 30)
    calls = []
    real = layout_mod.filescan.scan_fd
    monkeypatch.setattr(layout_mod.filescan, "scan_fd", lambda *a, **k: calls.append(1) or real(*a, **k))
    report = reindex(path)
    assert report.ok and report.messages == 30 and calls == [1]
    with Transcript.open(path) as t:
        assert t.layout_outcome == "valid"


# -- sidecars whose numbers lie: crafted segment by segment -----------------------------

TREE = ("ids", "up", "pos", "tip", "comp", "id_keys", "id_lines")


def read_segments(side):
    """The segments of a sidecar: [header dict, starts, kinds, messages, compactions,
    ids, up, pos, tip, comp, id_keys, id_lines]; a chain's segment has ids alone of the
    five tree arrays (decision 0053)."""
    data = Path(side).read_bytes()
    assert data[:8] == MAGIC
    pos, segs = 8, []
    while pos < len(data):
        hlen, _crc = struct.unpack_from("<II", data, pos)
        header = msgspec.structs.asdict(layout_mod.decode_header(data[pos + 8 : pos + 8 + hlen]))
        pos += 8 + hlen
        n, m, c, k = header["n"], header["m"], header["c"], header["k"]
        arrays = []
        for dtype, count, width in (("<i8", n, 8 * n), ("u1", n, (n + 7) & ~7),
                                    ("<i8", m, 8 * m), ("<i8", c, 8 * c),
                                    *[("<i8", n, 8 * n)] * (1 if header["chain"] else 5),
                                    ("<i8", k, 8 * k), ("<i8", k, 8 * k)):
            arrays.append(np.frombuffer(data, dtype=dtype, count=count, offset=pos).copy())
            pos += width
        segs.append([header, *arrays])
    return segs


def write_segments(side, segs, *, path=None):
    """Write segments back (the arrays as they are, the header as told; ``path`` makes
    the sidecar belong to that transcript), with a header checksum that checks out."""
    out = [MAGIC]
    for header, starts, kinds, messages, compactions, *tree in segs:
        header = dict(header)
        if path is not None:
            header["path"] = os.path.realpath(path)
        h = msgspec.msgpack.encode(header)
        h += b"\0" * (-len(h) % 8)
        k = np.asarray(kinds, "u1").tobytes()
        k += b"\0" * (-len(k) % 8)
        out += [struct.pack("<II", len(h), zlib.crc32(h)), h, np.asarray(starts, "<i8").tobytes(), k,
                np.asarray(messages, "<i8").tobytes(), np.asarray(compactions, "<i8").tobytes(),
                *(np.asarray(a, "<i8").tobytes() for a in tree)]
    Path(side).write_bytes(b"".join(out))


I64_MAX, I64_MIN = 2**63 - 1, -(2**63)


def lie(segs, damage, size):
    """Apply one damage to the (single) segment of a sidecar for a file of ``size`` bytes."""
    header, starts, kinds, messages, compactions, *_tree = segs[0]
    n = len(starts)
    mid = n // 2
    # A huge positive then a huge negative offset, chosen so that every int64
    # difference between neighbours wraps to a positive number ("increasing").
    if damage == "wrap":
        starts[1], starts[2] = I64_MAX, int(starts[3]) - 2**63 + 1
    elif damage == "wrap_at_the_end":
        starts[n - 2], starts[n - 1] = I64_MAX, I64_MIN + 5
    elif damage == "wrap_in_the_middle":
        starts[mid], starts[mid + 1] = I64_MAX - 1, int(starts[mid + 2]) - 2**63 + 1
    elif damage == "negative_in_the_middle":
        starts[mid] = -5
    elif damage == "past_the_file_size":
        starts[mid] = size + 4096
    elif damage == "past_the_file_size_to_the_end":
        starts[mid:] = np.arange(size + 100, size + 100 + n - mid)
    elif damage == "empty_line":
        starts[mid] = starts[mid + 1]
    elif damage == "swapped_offsets":
        starts[mid], starts[mid + 1] = starts[mid + 1], starts[mid]
    elif damage == "messages_wrap":
        i = len(messages) // 2
        messages[i], messages[i + 1] = I64_MAX, int(messages[i + 2]) - 2**63 + 1
    elif damage == "message_out_of_range":
        messages[len(messages) // 2] = I64_MAX
    elif damage == "header_end_past_the_file":
        header["end"] = header["scanned"] = size + (1 << 40)
    elif damage == "header_scanned_past_the_file":
        header["scanned"] = 1 << 62   # a "torn tail" of 4 EiB
    elif damage == "header_end_huge":
        header["end"] = header["scanned"] = 2**64 - 1
    elif damage == "header_counts_disagree":
        header["m"] -= 1
        segs[0][3] = messages[:-1]
    elif damage == "header_counts_huge":
        header["n"] = 2**62
    elif damage == "identity_huge":
        header["identity"] = [2**64 - 1, 2**64 - 1, 2**63 - 1, -(2**63)]
    else:
        raise AssertionError(damage)


def expected_ids(n):
    return [f"m{i}" for i in range(n)]


def check_reads_give_the_file(path, n, *, near):
    """Every way of reading gives what the file holds, whatever the sidecar says."""
    with Transcript.open(path) as t:
        assert t.message_count == n and t.torn_bytes == 0
        lo = max(0, near - 3)
        got = [m.record["id"] for m in t.window(message_before=min(n, near + 3), message_limit=6).messages]
        assert got == expected_ids(n)[lo : min(n, near + 3)]
        assert [e.record["id"] for e in t.read_lines(lo, lo + 4)] == expected_ids(n)[lo : lo + 4]
        assert ids(t, message_limit=3) == expected_ids(n)[-3:]
        assert ids(t, message_before=3, message_limit=3) == expected_ids(n)[:3]
        assert t.layout_outcome in ("valid", "rebuilt")
    with Transcript.open(path) as t:  # the rebuilt sidecar is the honest one
        assert t.layout_outcome == "valid"
        assert [m.record["id"] for m in t.window(message_before=min(n, near + 3), message_limit=6).messages] \
            == expected_ids(n)[lo : min(n, near + 3)]


SMALL_DAMAGES = ["wrap", "wrap_at_the_end", "wrap_in_the_middle", "negative_in_the_middle",
                 "past_the_file_size", "past_the_file_size_to_the_end", "empty_line", "swapped_offsets",
                 "message_out_of_range", "messages_wrap", "header_end_past_the_file",
                 "header_scanned_past_the_file", "header_end_huge", "header_counts_disagree",
                 "header_counts_huge", "identity_huge"]


@pytest.mark.parametrize("damage", SMALL_DAMAGES)
def test_a_sidecar_whose_offsets_or_counts_lie_is_rebuilt_and_every_read_is_right(tmp_path, damage):
    path = make(tmp_path / "t.jsonl", 60)
    Transcript.open(path).close()
    side = str(path) + ".layout"
    segs = read_segments(side)
    lie(segs, damage, path.stat().st_size)
    write_segments(side, segs)
    check_reads_give_the_file(path, 60, near=30)
    with Transcript.open(path) as t:
        assert t.history().message_count == 60
        t.append({"type": "message", "id": "after"})
    with Transcript.open(path) as t:
        assert ids(t, message_limit=2) == ["m59", "after"]


@pytest.fixture(scope="module")
def big_transcript(tmp_path_factory):
    """A transcript with one segment too large to be checked whole on load."""
    folder = tmp_path_factory.mktemp("big")
    n = layout_mod.SMALL_SEGMENT + 100
    path = folder / "t.jsonl"
    path.write_bytes(b"".join(encode_record({"type": "message", "id": f"m{i}"}) for i in range(n)))
    Transcript.open(path).close()
    return path, n


def copy_of(big, tmp_path):
    """The big transcript and its sidecar, copied (the copy's sidecar belongs to the copy)."""
    src, n = big
    path = tmp_path / "t.jsonl"
    shutil.copyfile(src, path)
    os.utime(path, ns=(os.stat(src).st_atime_ns, os.stat(src).st_mtime_ns))
    segs = read_segments(str(src) + ".layout")
    st = os.stat(path)
    segs[0][0]["identity"] = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]
    return path, n, segs


@pytest.mark.parametrize("damage", ["wrap_in_the_middle", "negative_in_the_middle", "past_the_file_size",
                                    "empty_line", "swapped_offsets", "message_out_of_range",
                                    "messages_wrap"])
def test_a_large_sidecar_read_on_demand_that_lies_is_rebuilt_on_first_use(tmp_path, big_transcript, damage):
    path, n, segs = copy_of(big_transcript, tmp_path)
    write_segments(str(path) + ".layout", segs, path=path)
    with Transcript.open(path) as t:
        assert t.layout_outcome == "valid"  # the honest copy is used as it is
    lie(segs, damage, path.stat().st_size)
    write_segments(str(path) + ".layout", segs, path=path)
    check_reads_give_the_file(path, n, near=n // 2)


def test_a_chain_stores_no_places_and_a_rewind_appended_after_it_stores_them(tmp_path):
    # Decision 0053: while every line hangs on the one before, a segment stores ids alone
    # of the five tree arrays, and the places are worked out when read. A rewind makes
    # the tree a tree: the next segment stores them, and both read back.
    records = rewound_session(old=8, fork_after=3, new=3, header=False)
    path = tmp_path / "s.jsonl"
    side = str(path) + ".layout"
    path.write_bytes(b"".join(encode_record(r) for r in records[:8]))
    Transcript.open(path).close()
    [seg] = read_segments(side)
    assert seg[0]["chain"] == 1 and seg[0]["as_list"] == 1
    assert len(seg) == 1 + 4 + 1 + 2  # header, starts..compactions, ids, the id index
    with Transcript.open(path) as t:
        assert t.layout_outcome == "valid"
        assert [m.line for m in t.window().messages] == list(range(8))
        assert [m.line for m in t.window(leaf=4).messages] == list(range(5))
        assert [m.index for m in t.window(leaf=4, message_before=3).messages] == [0, 1, 2]
    with open(path, "ab") as f:
        f.write(b"".join(encode_record(r) for r in records[8:]))
    with Transcript.open(path) as t:
        assert t.layout_outcome == "extend"
        assert [m.line for m in t.window().messages] == [0, 1, 2, 3, 8, 9, 10]
        assert not t.in_file_order
    segs = read_segments(side)
    assert [g[0]["chain"] for g in segs] == [1, 0]
    assert len(segs[1]) == 1 + 4 + 5 + 2
    with Transcript.open(path) as t:
        assert t.layout_outcome == "valid"
        assert [m.line for m in t.window().messages] == [0, 1, 2, 3, 8, 9, 10]
        assert [m.line for m in t.window(leaf=7).messages] == list(range(8))
        assert sorted(b.leaf for b in t.branches()) == [7, 10]


@pytest.mark.parametrize("lie_about", ["a chain after a tree", "a chain that is no list"])
def test_a_segment_that_claims_a_chain_it_cannot_be_is_rebuilt(tmp_path, lie_about):
    records = rewound_session(old=8, fork_after=3, new=3, header=False)
    path = tmp_path / "s.jsonl"
    side = str(path) + ".layout"
    path.write_bytes(b"".join(encode_record(r) for r in records[:8]))
    Transcript.open(path).close()
    with open(path, "ab") as f:
        f.write(b"".join(encode_record(r) for r in records[8:]))
    Transcript.open(path).close()
    first, second = read_segments(side)
    if lie_about == "a chain after a tree":
        # The first segment a tree (its places written out), the second a chain.
        up = np.arange(-1, 7, dtype=np.int64)
        pos = np.arange(8, dtype=np.int64)
        first = [{**first[0], "chain": 0}, *first[1:6], up, pos, up + 1, np.full(8, -1), *first[6:]]
        second = [{**second[0], "chain": 1, "as_list": 1}, *second[1:6], *second[10:]]
    else:
        first = [{**first[0], "as_list": 0}, *first[1:]]
        second = [{**second[0], "chain": 0, "as_list": 0}, *second[1:]]
    write_segments(side, [first, second], path=path)
    with Transcript.open(path) as t:
        assert t.layout_outcome != "valid"
        assert [m.line for m in t.window().messages] == [0, 1, 2, 3, 8, 9, 10]


@pytest.mark.parametrize("damage", ["falls", "repeats", "negative", "at_the_end", "past_the_end"])
def test_a_span_of_lines_is_refused_when_its_offsets_do_not_rise_inside_the_file(tmp_path, damage):
    # Every read of a window goes through one span of line offsets (Layout.line_span):
    # they must rise strictly from 0 or more to the indexed end, or a read would go to a
    # negative offset, past the file, or ask for an absurd length.
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"".join(encode_record({"type": "message", "id": f"m{i}"}) for i in range(8)))
    with Transcript.open(path) as t:
        layout = t._layout
        starts = layout.starts.all().copy()
        end = layout.indexed_end
        if damage == "falls":
            starts[5] = starts[3]
        elif damage == "repeats":
            starts[5] = starts[4]
        elif damage == "negative":
            starts[0] = -1
        elif damage == "at_the_end":
            starts[7] = end
        else:
            starts[7] = end + 10
        layout.starts = Chunked([starts])
        with pytest.raises(SidecarLies):
            layout.line_span(0, 8)
        with pytest.raises(SidecarLies):
            layout.line_info(np.arange(8))


def test_random_lies_in_a_large_sidecar_never_escape_as_exceptions(tmp_path, big_transcript):
    rng = np.random.default_rng(11)
    path, n, segs = copy_of(big_transcript, tmp_path)
    honest = [a.copy() for a in segs[0][1:]]
    size = path.stat().st_size
    for _ in range(25):
        starts, kinds, messages, compactions, *tree = (a.copy() for a in honest)
        at = int(rng.integers(1, n - 2))
        which = int(rng.integers(0, 5))
        values = rng.choice([I64_MAX, I64_MIN, -1, 0, size, size + 1, int(rng.integers(-size, 2 * size)),
                             int(rng.integers(I64_MIN, I64_MAX, dtype=np.int64))], size=2)
        # tree: up and tip, or a chain's ids and id keys (it stores no places)
        target = (starts, messages, kinds, *((tree[0], tree[1]) if segs[0][0]["chain"] else (tree[1], tree[3])))[which]
        if which == 2:
            kinds[at] = int(rng.integers(0, 256))
        else:
            target[at : at + 2] = values
        write_segments(str(path) + ".layout", [[segs[0][0], starts, kinds, messages, compactions, *tree]], path=path)
        check_reads_give_the_file(path, n, near=min(at, n - 1))


# -- reindex writes what an open writes -------------------------------------------------

def sidecar_written_by_open(path):
    Transcript.open(path).close()
    side, = (p for p in sidecar_paths(str(path)) if os.path.exists(p))
    data = Path(side).read_bytes()
    os.unlink(side)
    return data


def test_reindex_writes_the_same_sidecar_bytes_as_an_open(tmp_path):
    # Messages, a compaction, a corrupt line, a blank line, a line whose "type" lies
    # past the classify window (settled by a full parse), and a torn tail.
    path = make(tmp_path / "t.jsonl", 50)
    late_type = b'{"pad":"' + b"p" * (1 << 20) + b'","type":"message","id":"late"}\n'
    with open(path, "ab") as f:
        f.write(encode_record({"type": "compaction", "summary": "s", "firstKeptEntryId": "m40"})
                + b"{not json\n\n" + late_type + b'{"type":"message","id":"torn"')
    by_open = sidecar_written_by_open(path)
    from boundctx.transcript import reindex

    report = reindex(path)
    assert report.ok and report.sidecar == str(path) + ".layout"
    assert Path(report.sidecar).read_bytes() == by_open
    assert (report.messages, report.compactions, report.corrupt) == (52, 1, 1)
    assert report.torn_bytes == len(b'{"type":"message","id":"torn"')
    with Transcript.open(path) as t:
        assert t.layout_outcome == "valid"


def test_reindex_of_real_sessions_writes_what_an_open_writes(shared_file):
    from boundctx.transcript import reindex

    for name in ("pi-sessions/large-session.jsonl",
                 "claude-code-sessions/4d5611e5-241a-462a-8d15-5122611a9569.jsonl",
                 "codex-sessions/rollout-2026-02-23T12-54-34-019c8a59-e9dd-71f0-9ae3-4079fe9726a9.jsonl"):
        path = shared_file(name)
        by_open = sidecar_written_by_open(path)
        report = reindex(path)
        assert report.ok, report.error
        assert Path(report.sidecar).read_bytes() == by_open, name
        # Other tools' session files: the sidecar is in the cache, never beside them.
        assert report.sidecar == sidecar_paths(str(path))[1] and not os.path.exists(str(path) + ".layout")


def test_a_qualified_type_past_the_classify_window_is_checked_by_the_full_parse():
    # A Claude Code "system" line is a compaction only with subtype compact_boundary,
    # also when its "type" lies past the classify window.
    from boundctx.transcript.dialects import classify_by_parse, dialect_kinds

    table = dialect_kinds("claude-code")
    pad = '"pad":"' + "p" * 100 + '",'
    boundary = ('{' + pad + '"type":"system","subtype":"compact_boundary"}').encode()
    duration = ('{' + pad + '"type":"system","subtype":"turn_duration"}').encode()
    assert classify_by_parse(boundary, table, at_file_start=False) == layout_mod.lineindex.COMPACTION
    assert classify_by_parse(duration, table, at_file_start=False) == layout_mod.lineindex.OTHER
    assert classify_by_parse(duration.replace(b'"subtype":"turn_duration"', b'"subtype":7'),
                             table, at_file_start=False) == layout_mod.lineindex.OTHER


# -- the header writer is msgspec's MessagePack, byte for byte ---------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from boundctx.transcript import sidecar  # noqa: E402

_ints = st.one_of(st.integers(-2**63, 2**64 - 1), st.integers(-300, 300),
                  st.sampled_from([127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, -32, -33,
                                   -128, -129, -32768, -32769, -2**31, -2**31 - 1]))


@settings(max_examples=300, deadline=None)
@given(st.fixed_dictionaries({
    "v": _ints, "dialect": st.text(max_size=40), "window": _ints,
    # str8/16/32 forms: a 2-byte character 40,000 times is 80,000 bytes
    "path": st.one_of(st.text(max_size=300), st.integers(0, 3).map(lambda k: "\u00fc" * (40000 + k))),
    "start": _ints, "end": _ints, "scanned": _ints, "line0": _ints, "n": _ints, "m": _ints,
    "c": _ints, "k": _ints, "as_list": st.sampled_from([0, 1]), "chain": st.sampled_from([0, 1]),
    "identity": st.tuples(_ints, _ints, _ints, _ints),
    "head": st.text(max_size=40), "tail": st.text(max_size=40),
    "bad": st.one_of(st.lists(_ints, max_size=20), st.integers(65530, 65540).map(lambda k: list(range(k)))),
}))
def test_encode_header_writes_what_msgspec_writes_and_reads(fields):
    fields = {k: fields[k] for k in sidecar.HEADER_FIELDS}
    got = sidecar.encode_header(**fields)
    assert got == msgspec.msgpack.encode(layout_mod.SegmentHeader(**fields))
    back = msgspec.msgpack.decode(got, type=layout_mod.SegmentHeader)
    assert msgspec.structs.asdict(back) == {**fields, "bad": list(fields["bad"])}


def test_encode_header_refuses_other_fields_and_values():
    fields = dict(v=2, dialect="auto", window=1, path="/p", start=0, end=0, scanned=0,
                  line0=0, n=0, m=0, c=0, k=0, as_list=1, chain=1, identity=(0, 0, 0, 0), head="", tail="",
                  bad=[])
    with pytest.raises(ValueError, match="fields"):
        sidecar.encode_header(**{k: v for k, v in fields.items() if k != "bad"})
    with pytest.raises(OverflowError):
        sidecar.encode_header(**{**fields, "n": 2**64})
    with pytest.raises(TypeError):
        sidecar.encode_header(**{**fields, "n": True})


def test_an_append_to_a_big_tree_finds_its_parent_without_reading_every_id(tmp_path, big_transcript, monkeypatch):
    """The ids of a large segment are found by binary search in its sorted index, not by
    reading every one of them: an append reads a few elements, and hangs where it says."""
    path, n, segs = copy_of(big_transcript, tmp_path)
    write_segments(str(path) + ".layout", segs, path=path)
    read_whole = []
    real_all = layout_mod.Chunked.all

    def spy(self):
        read_whole.append(len(self))
        return real_all(self)

    monkeypatch.setattr(layout_mod.Chunked, "all", spy)
    with Transcript.open(path) as t:
        assert t.layout_outcome == "valid"
        # m5 is far back: hanging on it forks the transcript.
        t.append({"type": "message", "id": "late", "parentId": "m5",
                  "message": {"role": "user", "content": "a rewind"}})
        assert not [k for k in read_whole if k > 10_000], read_whole
        w = t.window(message_limit=None)
        assert [m.record["id"] for m in w.messages] == [f"m{i}" for i in range(6)] + ["late"]
        # An id appended again is a copy, read once, found the same way.
        t.append({"type": "message", "id": "m7"})
        assert [m.record["id"] for m in t.window(message_limit=3).messages] == ["m4", "m5", "late"]


def test_a_large_sidecar_whose_id_index_lies_is_rebuilt_when_an_append_reads_it(tmp_path, big_transcript):
    from boundctx.transcript.tree import id_hash

    path, n, segs = copy_of(big_transcript, tmp_path)
    keys, lines = segs[0][-2], segs[0][-1]
    at = int(np.flatnonzero(keys == id_hash("m5"))[0])
    lines[at] = 4000  # m5 said to be another line
    write_segments(str(path) + ".layout", segs, path=path)
    with Transcript.open(path) as t:
        t.append({"type": "message", "id": "late", "parentId": "m5"})
        assert [m.record["id"] for m in t.window(message_limit=None).messages][-2:] == ["m5", "late"]


def test_a_large_sidecar_whose_id_index_lies_is_rebuilt_when_an_open_extends_it(tmp_path, big_transcript):
    from boundctx.transcript.tree import id_hash

    path, n, segs = copy_of(big_transcript, tmp_path)
    keys, lines = segs[0][-2], segs[0][-1]
    lines[int(np.flatnonzero(keys == id_hash("m5"))[0])] = 4000
    write_segments(str(path) + ".layout", segs, path=path)
    with open(path, "ab") as f:  # another writer appends: the next open extends the layout
        f.write(encode_record({"type": "message", "id": "late", "parentId": "m5"}))
    with Transcript.open(path) as t:
        assert t.layout_outcome == "rebuilt"
        assert [m.record["id"] for m in t.window(message_limit=None).messages][-2:] == ["m5", "late"]
