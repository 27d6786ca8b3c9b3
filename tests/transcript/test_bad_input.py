"""Bad input gets a clear error or a documented projection, and loses nothing."""

import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from boundctx import Transcript, TranscriptNotFound
from boundctx.errors import TranscriptNotAFile, TranscriptPermission
from boundctx.transcript import encode_record
from boundctx.transcript import store as store_mod

from tests._support import running_as_root


def rec(i, **kw):
    return encode_record({"type": "message", "id": f"m{i}", "message": {"role": "user", "content": f"t{i}"}, **kw})


def test_invalid_json_lines_become_visible_corrupt_entries_and_the_rest_stays_readable(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(rec(0) + b"this is not json\n" + b'{"type":"message","id":"x",}\n' + rec(3))
    with Transcript.open(path) as t:
        w = t.window()
        assert t.message_count == 4
        assert [m.type for m in w.messages] == ["message", None, None, "message"]
        bad = w.messages[1]
        assert bad.corrupt and bad.raw == "this is not json" and bad.record is None
        assert w.messages[2].corrupt and w.messages[3].record["id"] == "m3"
    assert path.read_bytes().count(b"\n") == 4  # the file is untouched


def test_welded_torn_write_is_corrupt_and_does_not_force_a_rebuild_on_every_open(tmp_path, monkeypatch):
    # A crash left half a record, and the next append welded onto it. It looks like a
    # message to the classifier (right prefix, closing brace) but does not parse.
    welded = b'{"type":"message","id":"half","message":{"ro' + rec(1)
    path = tmp_path / "t.jsonl"
    path.write_bytes(rec(0) + welded + rec(2))
    with Transcript.open(path) as t:
        w = t.window()
        assert [m.corrupt is not None for m in w.messages] == [False, True, False]
    builds = []
    real = store_mod.build_layout
    monkeypatch.setattr(store_mod, "build_layout", lambda *a, **k: builds.append(1) or real(*a, **k))
    for _ in range(2):
        with Transcript.open(path) as t:
            assert t.layout_outcome == "valid"
            assert t.window().messages[1].raw.startswith('{"type":"message","id":"half"')
    assert builds == []


def test_blank_lines_are_not_messages(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\n" + rec(0) + b"   \n\r\n" + rec(1) + b"\n")
    with Transcript.open(path) as t:
        assert t.message_count == 2 and t.line_count == 6
        assert [m.record["id"] for m in t.window().messages] == ["m0", "m1"]


def test_invalid_utf8_is_a_corrupt_entry_shown_with_replacement_characters(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(rec(0) + b'{"type":"message","id":"\xff\xfe"}\n' + rec(2))
    with Transcript.open(path) as t:
        w = t.window()
        assert t.message_count == 3
        assert w.messages[1].corrupt and "\ufffd" in w.messages[1].raw
        assert w.messages[2].record["id"] == "m2"


def test_crlf_line_endings_and_a_bom_are_read(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + rec(0).replace(b"\n", b"\r\n") + rec(1).replace(b"\n", b"\r\n"))
    with Transcript.open(path) as t:
        assert t.message_count == 2
        assert [m.record["id"] for m in t.window().messages] == ["m0", "m1"]
        assert [m.record["id"] for m in t.window(content_limit=1).messages] == ["m0", "m1"]


def test_a_run_of_nul_bytes_mid_file_is_one_corrupt_entry(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(rec(0) + b"\0" * 4096 + b"\n" + rec(2))
    with Transcript.open(path) as t:
        w = t.window(content_limit=64)
        assert [bool(m.corrupt) for m in w.messages] == [False, True, False]
        assert w.messages[1].cut_bytes == 4096 - 64


def test_empty_file_opens_with_no_messages(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"")
    with Transcript.open(path) as t:
        w = t.window(preset="renderer")
        assert (t.message_count, w.message_start, w.has_more_before, w.messages) == (0, 0, False, [])


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(TranscriptNotFound, match="no transcript at .*create=True") as exc:
        Transcript.open(tmp_path / "nope.jsonl")
    assert isinstance(exc.value, FileNotFoundError)


def test_directory_is_a_clear_error(tmp_path):
    with pytest.raises(TranscriptNotAFile, match="is a directory"):
        Transcript.open(tmp_path)


def test_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(TranscriptNotAFile, match="not a regular file"):
        Transcript.open(fifo)


def test_unreadable_file_is_a_clear_error(tmp_path):
    if running_as_root():
        pytest.skip("root reads files whatever their mode")
    path = tmp_path / "t.jsonl"
    path.write_bytes(rec(0))
    path.chmod(0)
    with pytest.raises(TranscriptPermission, match="permission denied"):
        Transcript.open(path)


def test_file_truncated_while_open_is_reread_not_crashed_on(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"".join(rec(i) for i in range(100)))
    with Transcript.open(path) as t:
        assert t.message_count == 100
        keep = sum(len(rec(i)) for i in range(40))
        os.truncate(path, keep + 7)  # cut inside message 40
        w = t.window()
        assert t.message_count == 40 and t.torn_bytes == 7
        assert [m.record["id"] for m in w.messages] == [f"m{i}" for i in range(40)]


def test_a_50_mb_line_opens_in_a_bounded_window(tmp_path):
    path = tmp_path / "t.jsonl"
    huge = "y" * (50 << 20)
    with open(path, "wb") as f:
        f.write(rec(0))
        f.write(encode_record({"type": "message", "id": "huge", "message": {"role": "tool", "content": huge}}))
        f.write(rec(2))
    del huge
    with Transcript.open(path) as t:
        w = t.window(preset="renderer")
        big = w.messages[1]
        assert big.truncated and big.cut_bytes > (50 << 20) - 70_000
        assert len(json.dumps(big.record)) < 65536 + 65536 + 200
        assert big.record["id"] == "huge" and big.record["message"]["role"] == "tool"
        assert w.messages[2].record["id"] == "m2"


def test_require_record_raises_transcript_corrupt_for_a_corrupt_line(tmp_path):
    from boundctx import TranscriptCorrupt

    path = tmp_path / "t.jsonl"
    path.write_bytes(rec(0) + b"garbage\n")
    with Transcript.open(path) as t:
        good, bad = t.window().messages
        assert good.require_record()["id"] == "m0"
        with pytest.raises(TranscriptCorrupt, match=r"message 1 \(bytes .*\) is not a record.*delete"):
            bad.require_record()


_REPLACED_BY_A_FIFO = r"""
import os, sys
from boundctx import Transcript
from boundctx.errors import TranscriptNotAFile
path = sys.argv[1]
t = Transcript.open(path)
os.rename(path, path + ".old")
os.mkfifo(path)  # no writer will ever come: a read or an open of it would block for good
for step in (t.window, lambda: t.read_lines(0, 1), t.history,
             lambda: t.append({"type": "message", "message": {"role": "user", "content": "x"}}, sync=False)):
    try:
        step()
    except TranscriptNotAFile as exc:
        assert "FIFO" in str(exc), exc
    else:
        raise SystemExit("read or appended without an error")
t.close()
print("refused")
"""


def test_a_path_replaced_by_a_fifo_while_open_is_refused_by_every_read_and_append_without_blocking(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "t.jsonl"
    path.write_bytes(rec(0) + rec(1))
    # In a child with a time limit: a regression blocks there, and fails here.
    out = subprocess.run([sys.executable, "-c", _REPLACED_BY_A_FIFO, str(path)], capture_output=True,
                         text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == 0 and out.stdout.strip() == "refused", out.stderr
    assert (tmp_path / "t.jsonl.old").read_bytes() == rec(0) + rec(1)


def test_a_path_replaced_by_a_device_while_open_is_not_read_as_empty_nor_appended_to(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(rec(0) + rec(1))
    beside_device = ["/dev/null.lock", "/dev/null.layout"]
    existed = {p for p in beside_device if os.path.lexists(p)}
    t = Transcript.open(path)
    try:
        os.rename(path, tmp_path / "t.jsonl.old")
        os.symlink("/dev/null", path)
        with pytest.raises(TranscriptNotAFile, match="now a character device"):
            t.window()
        with pytest.raises(TranscriptNotAFile, match="now a character device"):
            t.append({"type": "message", "message": {"role": "user", "content": "lost?"}}, sync=False)
        t.close()  # persists the layout: never beside the device
        made = [p for p in beside_device if os.path.lexists(p) and p not in existed]
        assert made == []
    finally:
        t.close()
        for p in beside_device:
            if p not in existed and os.path.lexists(p):
                os.unlink(p)  # what an old regression left in /dev
    assert (tmp_path / "t.jsonl.old").read_bytes() == rec(0) + rec(1)


def test_an_append_refuses_a_file_swapped_in_between_the_read_and_the_write(tmp_path, monkeypatch):
    path = tmp_path / "t.jsonl"
    path.write_bytes(rec(0))
    other = tmp_path / "other.jsonl"
    other.write_bytes(rec(5))
    with Transcript.open(path) as t:
        real_refresh = t._refresh

        def refresh_then_swap():
            real_refresh()
            os.replace(other, path)  # after the read, before the append fd is opened

        monkeypatch.setattr(t, "_refresh", refresh_then_swap)
        from boundctx.errors import TranscriptChanged
        with pytest.raises(TranscriptChanged, match="nothing was written"):
            t.append({"type": "message", "message": {"role": "user", "content": "x"}}, sync=False)
    assert path.read_bytes() == rec(5)


def test_a_fifo_at_the_sidecar_path_is_rebuilt_over_not_waited_on(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "t.jsonl"
    path.write_text("".join(f'{{"type":"message","message":{{"role":"user","content":"m{i}"}}}}\n' for i in range(5)))
    os.mkfifo(str(path) + ".layout")
    code = ("import sys; from boundctx import Transcript\n"
            "with Transcript.open(sys.argv[1]) as t: print(t.window(message_limit=2).message_count)")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout.decode().strip() == "5"


# Lines whose bytes a reader must not share out among their neighbours: two records on
# one line (with or without a comma), a blank line, a record whose brackets stay open,
# and plain good records around them.
_ODD_LINES = [
    b'{"type":"message","message":{"role":"user","content":"A"}}',
    b'{"type":"message","message":{"role":"user","content":"B"}} {"type":"message","message":{"content":"C"}}',
    b'{"type":"message","message":{"role":"user","content":"D"}},{"type":"other"}',
    b"",
    b"   ",
    b'{"type":"message","message":{"role":"user","content":[{"x":1}',
    b'{"type":"message"}]}}',
    b'{"type":"session","id":"s"}',
    b"[1, 2]",
]


@settings(max_examples=60, deadline=None)
@given(picks=st.lists(st.integers(0, len(_ODD_LINES) - 1), min_size=1, max_size=12), data=st.data())
def test_each_line_reads_as_its_own_bytes_say_whatever_its_neighbours_hold(tmp_path_factory, picks, data):
    """The slow twin: each line decoded alone. A read of many lines at once (one decode
    for a stretch of them) gives each line exactly what its own bytes give: a line with
    two records is corrupt, a blank line is blank, and no record moves to another line."""
    from boundctx.transcript.lineformat import LineUnreadable, decode_record

    lines = [b'{"type":"session","id":"first"}'] + [_ODD_LINES[k] for k in picks]
    path = tmp_path_factory.mktemp("odd") / "t.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")

    def alone(body):
        try:
            value = decode_record(body)
        except LineUnreadable:
            return None
        return value if isinstance(value, dict) else None

    with Transcript.open(str(path)) as t:
        start = data.draw(st.integers(0, t.line_count - 1))
        got = t.read_lines(start, t.line_count)
        assert [e.record for e in got] == [alone(body) for body in lines[start:]]
        w = t.window(message_limit=50)
        message_lines = [e.line for e in w.messages]
        assert [e.record for e in w.messages] == [alone(lines[k]) for k in message_lines]
