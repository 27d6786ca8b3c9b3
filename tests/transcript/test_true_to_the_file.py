"""What a transcript shows and writes stays true to the file: a line appended while it
is scanned, a change in place that keeps the size (and even the mtime), a sidecar whose
arrays do not match, lines the display projection must bound or cannot show, an edit by
entry once its message moved, and rewrites that keep every other byte and follow a
symlink to the file; and it gets there without needless work (appends in few chunks, no
rebuild on every open for a line with a duplicate "type" key). Each case was reproduced
before its fix."""

import json
import os
import struct
from pathlib import Path

import msgspec
import numpy as np
import pytest

from boundctx import Transcript, TranscriptChanged
from boundctx._native import projection
from boundctx.transcript import encode_record
from boundctx.transcript import layout as layout_mod


def msg(i, **kw):
    return encode_record({"type": "message", "id": f"m{i}", "pad": "x" * (i % 5), **kw})


def ids(t, **kw):
    return [m.record["id"] for m in t.window(**kw).messages]


def test_line_appended_right_after_a_scan_is_not_recorded_as_seen(tmp_path, monkeypatch):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"".join(msg(i) for i in range(3)))
    real = layout_mod.filescan.scan_fd

    def scan_then_someone_appends(*a, **k):
        res = real(*a, **k)
        with open(path, "ab") as f:
            f.write(msg(3))
        return res

    monkeypatch.setattr(layout_mod.filescan, "scan_fd", scan_then_someone_appends)
    t = Transcript.open(path)
    monkeypatch.setattr(layout_mod.filescan, "scan_fd", real)
    with t:
        assert ids(t) == ["m0", "m1", "m2", "m3"]  # the next read noticed the growth
    with Transcript.open(path) as t:
        assert t.message_count == 4


def test_same_size_rewrite_in_place_with_a_new_mtime_is_rebuilt_not_extended(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"".join(msg(i, text="t" * 100) for i in range(200)))
    Transcript.open(path).close()
    lines = path.read_bytes().splitlines(keepends=True)
    # Split message 100 into two lines of the same total length.
    a = encode_record({"type": "message", "id": "a"})
    k = len(lines[100]) - len(a) - 27
    b = encode_record({"type": "message", "id": "b" * k})
    assert len(a) + len(b) == len(lines[100])
    lines[100] = a + b
    st = os.stat(path)
    path.write_bytes(b"".join(lines))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    with Transcript.open(path) as t:
        assert t.layout_outcome == "rebuilt" and t.message_count == 201
        assert ids(t, message_before=102, message_limit=2) == ["a", "b" * k]


def _sidecar_arrays(path):
    data = bytearray(Path(str(path) + ".layout").read_bytes())
    hlen, _ = struct.unpack_from("<II", data, 8)
    header = msgspec.structs.asdict(layout_mod.decode_header(bytes(data[16 : 16 + hlen])))
    base = 16 + hlen
    n = header["n"]
    return data, header, {"starts": base, "kinds": base + 8 * n,
                          "messages": base + 8 * n + ((n + 7) & ~7)}


def test_sidecar_messages_array_that_skips_a_message_is_caught(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"".join(msg(i) for i in range(50)))
    Transcript.open(path).close()
    data, _h, at = _sidecar_arrays(path)
    struct.pack_into("<q", data, at["messages"] + 8 * 3, 4)  # messages[3] = line 4
    Path(str(path) + ".layout").write_bytes(bytes(data))
    with Transcript.open(path) as t:
        assert ids(t, message_before=4, message_limit=1) == ["m3"]
        assert t.layout_outcome == "rebuilt"


@pytest.mark.slow
def test_big_sidecar_arrays_are_read_on_demand_and_checked_around_each_window(tmp_path):
    n = layout_mod.SMALL_SEGMENT + 100  # big enough to stay on disk, not in memory
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"".join(encode_record({"type": "message", "id": f"m{i}"}) for i in range(n)))
    Transcript.open(path).close()
    data, _h, at = _sidecar_arrays(path)
    struct.pack_into("<q", data, at["messages"] + 8 * 3, 4)
    Path(str(path) + ".layout").write_bytes(bytes(data))
    with Transcript.open(path) as t:
        assert t.layout_outcome == "valid"  # too big to check whole on open...
        assert ids(t, message_before=4, message_limit=1) == ["m3"]  # ...caught on read
        assert t.layout_outcome == "rebuilt"
    # A sidecar truncated under an open transcript is an error we recover from, never
    # a SIGBUS: its arrays are read, not mapped.
    with Transcript.open(path) as t:
        os.truncate(str(path) + ".layout", 100)
        assert ids(t, message_before=n - 10, message_limit=2) == [f"m{n - 12}", f"m{n - 11}"]
        assert t.layout_outcome == "rebuilt"


def test_surrogate_pairs_are_never_cut_in_half_by_the_projection():
    line = json.dumps({"type": "message", "t": "x" * 130 + "\U0001F600" * 5}).encode()
    for limit in range(125, 200):
        display, _kept, _cut = projection.project_display(line, len(line), limit)
        assert isinstance(msgspec.json.decode(display), dict)  # msgspec rejects lone halves
    for end in range(140, len(line)):
        display, _kept, _cut = projection.project_display(line[:end], len(line), 10_000)
        if display is not None:
            msgspec.json.decode(display)


def test_emoji_written_as_escapes_show_and_never_mark_the_line_bad(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(json.dumps({"type": "message", "t": "\U0001F600" * 500}).encode() + b"\n")
    with Transcript.open(path) as t:
        for limit in range(1, 40):
            assert t.window(content_limit=limit).messages[0].record is not None
    with Transcript.open(path) as t:
        assert t.layout_outcome == "valid" and t._layout.known_bad == set()


def test_a_line_the_projection_cannot_show_is_not_declared_corrupt(tmp_path):
    deep = {"type": "message", "d": json.loads("[" * 300 + "]" * 300), "t": "y" * 200}
    path = tmp_path / "t.jsonl"
    path.write_bytes(encode_record(deep))
    with Transcript.open(path) as t:
        shown = t.window(content_limit=10).messages[0]
        assert shown.record is None and "not displayable" in shown.corrupt
        assert t.window().messages[0].record["t"] == "y" * 200  # the model path has it all
    with Transcript.open(path) as t:
        assert t.layout_outcome == "valid" and t._layout.known_bad == set()


def test_compactions_in_a_bounded_window_are_bounded_too(tmp_path):
    path = tmp_path / "t.jsonl"
    comp = [encode_record({"type": "compaction", "summary": f"s{i}"}) for i in range(500)]
    path.write_bytes(msg(0) + msg(1) + b"".join(comp) + msg(2))
    with Transcript.open(path) as t:
        w = t.window(message_limit=2, content_limit=100)
        assert len(w.compactions) == 2 and w.compactions_omitted == 498
        assert [c.record["summary"] for c in w.compactions] == ["s498", "s499"]
        assert len(t.window().compactions) == 500  # the uncapped path gets them all


def test_a_corrupt_lines_display_stays_within_the_content_limit(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\xff" * 200_000 + b"\n")
    with Transcript.open(path) as t:
        e = t.window(content_limit=65536).messages[0]
        shown = e.raw.split(" [... ")[0]
        # 21,845 invalid bytes shown as 3-byte replacement characters: 65,535 bytes
        assert len(shown.encode()) <= 65536 and e.cut_bytes == 200_000 - len(shown)


def test_rewrite_through_a_symlink_replaces_the_file_not_the_link(tmp_path):
    real = tmp_path / "real.jsonl"
    real.write_bytes(b"".join(msg(i) for i in range(3)))
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    with Transcript.open(link) as t:
        t.delete(0)
    assert link.is_symlink()
    assert [json.loads(line)["id"] for line in real.read_bytes().splitlines()] == ["m1", "m2"]


def test_rewrite_keeps_every_unedited_line_byte_for_byte(tmp_path):
    path = tmp_path / "t.jsonl"
    lines = [
        b'{"id":"first","type":"message","k":1,"k":2,"n":-0,"f":1.0e2}\r\n',  # key order, dups
        b'{"no_type_at_all":true}\n',
        b'{"type":"message","id":"edit me"}\n',
        b'{"type":"message","s":"\\u00e9\\/"}\n',
    ]
    path.write_bytes(b"".join(lines))
    with Transcript.open(path) as t:
        t.edit(1, {"type": "message", "id": "edited"})
    assert path.read_bytes() == b"".join(lines[:2] + [encode_record({"type": "message", "id": "edited"})] + lines[3:])


def test_in_process_appends_stay_in_few_chunks(tmp_path):
    path = tmp_path / "t.jsonl"
    with Transcript.open(path, create=True) as t:
        for i in range(1000):
            t.append({"type": "message", "id": f"m{i}"}, sync=False)
        assert t._layout.starts.chunk_count <= 2
        assert ids(t, message_limit=1) == ["m999"]


def test_edit_by_entry_is_refused_when_the_message_moved(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"".join(msg(i) for i in range(5)))
    with Transcript.open(path) as t:
        shown = t.window(message_limit=2).messages[0]  # m3
        t.delete(0)  # now index 3 holds m4
        with pytest.raises(TranscriptChanged, match="no longer the line"):
            t.edit(shown, {"type": "message", "id": "x"})
        fresh = t.window(message_limit=2).messages[0]
        t.edit(fresh, {"type": "message", "id": "x"})
        assert ids(t) == ["m1", "m2", "x", "m4"]


def test_bounded_compactions_with_one_in_force_and_some_omitted(tmp_path):
    path = tmp_path / "t.jsonl"
    comp = [encode_record({"type": "compaction", "summary": f"s{i}"}) for i in range(10)]
    path.write_bytes(comp[0] + msg(0) + msg(1) + b"".join(comp[1:]) + msg(2))
    with Transcript.open(path) as t:
        w = t.window(message_limit=2)
        assert [c.record["summary"] for c in w.compactions] == ["s0", "s8", "s9"]
        assert w.compactions_omitted == 7 and t.layout_outcome == "built"


def test_a_duplicate_type_key_does_not_force_a_rebuild_on_every_open(tmp_path, monkeypatch):
    from boundctx.transcript import store as store_mod

    path = tmp_path / "t.jsonl"
    path.write_bytes(msg(0) + b'{"type":"message","id":"dup","type":["not", "a", "str"]}\n' + msg(2))
    with Transcript.open(path) as t:
        assert [m.record["id"] for m in t.window().messages] == ["m0", "dup", "m2"]
    builds = []
    real = store_mod.build_layout
    monkeypatch.setattr(store_mod, "build_layout", lambda *a, **k: builds.append(1) or real(*a, **k))
    for _ in range(2):
        with Transcript.open(path) as t:
            assert t.message_count == 3 and len(t.window().messages) == 3
            assert t.layout_outcome == "valid"
    assert builds == []


def _same_size_same_mtime(path, change):
    """Apply ``change(lines)`` in place, keeping size and mtime: the change the file's
    fingerprint cannot see (it is neither at either 4 KiB end nor in the stat)."""
    st = os.stat(path)
    lines = path.read_bytes().splitlines(keepends=True)
    change(lines)
    data = b"".join(lines)
    assert len(data) == st.st_size
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _sized(record, length):
    """``record`` with its "text" cut so that its line is ``length`` bytes."""
    over = len(encode_record(record)) - length
    line = encode_record({**record, "text": record["text"][:len(record["text"]) - over]})
    assert len(line) == length
    return line


@pytest.mark.parametrize("reopen", [False, True], ids=["same-object", "from-the-sidecar"])
@pytest.mark.parametrize("change", ["message-to-other", "other-to-message"])
def test_an_in_place_change_the_fingerprint_cannot_see_is_caught_by_the_read(tmp_path, reopen, change):
    path = tmp_path / "t.jsonl"
    lines = [msg(i, text="t" * 100) for i in range(200)]
    lines[101] = encode_record({"type": "session", "id": "s", "text": "t" * 100})
    path.write_bytes(b"".join(lines))
    t = Transcript.open(path)
    try:
        assert t.message_count == 199
        where = 100 if change == "message-to-other" else 101
        if change == "message-to-other":  # message 100 (line 100) becomes a session line
            new = _sized({"type": "session", "id": "m100", "text": "t" * 200}, len(lines[where]))
        else:  # the session line between messages 100 and 101 becomes a message
            new = _sized({"type": "message", "id": "new", "text": "t" * 200}, len(lines[where]))

        def put(ls):
            ls[where] = new

        _same_size_same_mtime(path, put)
        if reopen:
            t.close()
            t = Transcript.open(path)
            assert t.layout_outcome == "valid"  # the fingerprint saw nothing
        # A window whose bytes span the changed line (reads cannot vouch for lines
        # they never read: the count is put right once a read covers the change).
        got = ids(t, message_before=101 if change == "message-to-other" else 102, message_limit=3)
        if change == "message-to-other":
            assert t.message_count == 198 and got == ["m98", "m99", "m102"]  # line 101 is not a message
        else:
            assert t.message_count == 200 and got == ["m99", "m100", "new"]
    finally:
        t.close()


def test_check_lines_refuses_lines_the_kinds_do_not_bear_out(tmp_path):
    """A window holds the layout's own arrays to each other before it reads: lines that
    fall or repeat, a line of another kind, and (complete) a message left out are each
    refused, for the message sequence, compactions and any other kind."""
    from boundctx.transcript.kinds import LineKind
    from boundctx.transcript.reading import LineReader, StaleLayout

    path = tmp_path / "t.jsonl"
    rows = [msg(0), msg(1), encode_record({"type": "compaction", "summary": "s"}), msg(2),
            encode_record({"type": "session", "id": "x"}), msg(3), msg(4)]
    path.write_bytes(b"".join(rows))
    with Transcript.open(path) as t:
        reader = LineReader(t._fd, t._layout, dialect=t.dialect, classify_window=t._classify_window)

        def check(lines, **kw):
            reader.check_lines(np.array(lines, dtype=np.int64), **kw)

        check([0, 1, 3, 5, 6])
        check([1, 3], complete=True)
        check([0, 3, 6], complete=False)
        check([2], kind=LineKind.COMPACTION)
        check([4], kind=LineKind.OTHER)
        for lines, kw in [([0, 1, 5, 6], {}),  # message 3 left out
                          ([0, 0, 1], {"complete": False}),  # a repeat
                          ([3, 1], {"complete": False}),  # a fall
                          ([0, 2, 3], {"complete": False}),  # a compaction among the messages
                          ([1, 2], {"kind": LineKind.COMPACTION, "complete": False}),
                          ([2, 4], {"kind": LineKind.OTHER, "complete": False}),
                          ([4, 7], {"complete": False})]:  # past the last line
            with pytest.raises(StaleLayout):
                check(lines, **kw)
