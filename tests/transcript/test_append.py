"""Appends: one complete line per write, torn tails moved aside, one writer at a time."""

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from boundctx import Transcript, TranscriptLocked
from boundctx.errors import EntryInvalid
from boundctx.transcript import encode_record
from boundctx.transcript import store as store_mod


def msg(i, text="hello"):
    return {"id": f"m{i}", "type": "message", "message": {"role": "user", "content": text}}


def test_append_writes_type_first_and_one_line(tmp_path):
    path = tmp_path / "t.jsonl"
    with Transcript.open(path, create=True) as t:
        assert t.message_count == 0
        line = t.append(msg(0, "two\nlines \u2028 sep"))
        assert line == 0 and t.message_count == 1
    raw = path.read_bytes()
    assert raw.startswith(b'{"type":"message","id":"m0"') and raw.count(b"\n") == 1
    assert b"\xe2\x80\xa8" not in raw and b"\\u2028" in raw
    assert json.loads(raw)["message"]["content"] == "two\nlines \u2028 sep"


def test_append_uses_exactly_one_write_call(tmp_path, monkeypatch):
    path = tmp_path / "t.jsonl"
    writes = []
    real_write = os.write
    with Transcript.open(path, create=True) as t:
        t.append(msg(0))  # the lock and the append fd are taken on the first append
        monkeypatch.setattr(store_mod.os, "write", lambda fd, b: writes.append(len(b)) or real_write(fd, b))
        t.append(msg(1, "x" * 200_000))
        assert len(writes) == 1 and writes[0] > 200_000


def test_append_extends_the_layout_in_memory_and_reads_back(tmp_path):
    path = tmp_path / "t.jsonl"
    with Transcript.open(path, create=True) as t:
        for i in range(50):
            t.append(msg(i), sync=False)
            assert t.window(message_limit=1).messages[0].record["id"] == f"m{i}"
        assert t.message_count == 50
    with Transcript.open(path) as t:  # close persisted the extension
        assert t.layout_outcome == "valid" and t.message_count == 50


def test_append_refuses_records_it_cannot_store_and_writes_nothing(tmp_path):
    path = tmp_path / "t.jsonl"
    with Transcript.open(path, create=True) as t:
        for bad in ({"no": "type"}, {"type": 3}, {"type": ""}, ["type", "message"],
                    {"type": "message", "obj": object()}):
            with pytest.raises(EntryInvalid):
                t.append(bad)
    assert path.read_bytes() == b""


def test_second_writer_is_refused_while_readers_never_block(tmp_path):
    path = tmp_path / "t.jsonl"
    with Transcript.open(path, create=True) as writer:
        writer.append(msg(0))
        with Transcript.open(path) as other:
            assert other.window().messages[0].record["id"] == "m0"  # reading is fine
            with pytest.raises(TranscriptLocked, match="another writer"):
                other.append(msg(1))
    with Transcript.open(path) as t:  # released on close
        t.append(msg(1))
        assert t.message_count == 2


def test_writer_lock_is_cross_process(tmp_path):
    path = tmp_path / "t.jsonl"
    Transcript.open(path, create=True).close()
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from boundctx import Transcript
        t = Transcript.open({str(path)!r})
        t.append({{"type": "message", "id": "held"}})
        print("locked", flush=True)
        sys.stdin.readline()
        t.close()
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with Transcript.open(path) as t:
            with pytest.raises(TranscriptLocked):
                t.append(msg(1))
    finally:
        holder.communicate("\n", timeout=30)
    with Transcript.open(path) as t:
        t.append(msg(1))
        assert [m.record["id"] for m in t.window().messages] == ["held", "m1"]


def test_torn_tail_is_moved_to_a_side_file_before_the_next_append(tmp_path):
    path = tmp_path / "t.jsonl"
    good = encode_record(msg(0))
    torn = b'{"type":"message","id":"m1","message":{"role":"assi'
    path.write_bytes(good + torn)
    with Transcript.open(path) as t:
        assert t.message_count == 1 and t.torn_bytes == len(torn)
        t.append(msg(2))
        assert len(t.torn_files) == 1
        side = Path(t.torn_files[0])
        assert [m.record["id"] for m in t.window().messages] == ["m0", "m2"]
    assert side.read_bytes() == torn  # nothing deleted
    assert path.read_bytes() == good + encode_record(msg(2))  # nothing welded


def test_process_killed_mid_write_leaves_a_readable_transcript(tmp_path):
    """A real writer process is SIGKILLed while appending large records; every record
    it completed stays readable, and the next writer continues cleanly."""
    path = tmp_path / "t.jsonl"
    Transcript.open(path, create=True).close()
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os
        from boundctx import Transcript
        t = Transcript.open({str(path)!r})
        i = 0
        while True:
            t.append({{"type": "message", "id": f"k{{i}}", "message": {{"role": "tool",
                      "content": "z" * (3 << 20)}}}}, sync=False)
            i += 1
            if i == 3:
                print("ready", flush=True)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        time.sleep(0.05)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        child.stdout.close()
    # Simulate the worst case too: a write the kernel took only partly.
    with open(path, "ab") as f:
        f.write(b'{"type":"message","id":"half","message":{"role":"tool","content":"zzz')
    with Transcript.open(path) as t:
        n = t.message_count
        assert n >= 3 and t.torn_bytes > 0
        ids = [m.record["id"] for m in t.window(content_limit=100).messages]
        assert ids == [f"k{i}" for i in range(n)]
        t.append(msg("after"))
        assert t.window(message_limit=1).messages[0].record["id"] == "mafter"
        assert t.message_count == n + 1


def test_short_write_becomes_a_torn_tail_not_a_lost_record(tmp_path, monkeypatch):
    path = tmp_path / "t.jsonl"
    with Transcript.open(path, create=True) as t:
        t.append(msg(0))
        real_write = os.write
        calls = []

        def full_disk(fd, b):  # what a filling disk does: a short write, then ENOSPC
            calls.append(fd)
            if len(calls) > 1:
                raise OSError(errno.ENOSPC, "No space left on device")
            return real_write(fd, b[:10])

        monkeypatch.setattr(store_mod.os, "write", full_disk)
        with pytest.raises(OSError, match="short write"):
            t.append(msg(1))
        monkeypatch.setattr(store_mod.os, "write", real_write)
        assert t.torn_bytes == 10
        t.append(msg(2))
        assert [m.record["id"] for m in t.window().messages] == ["m0", "m2"]
        assert Path(t.torn_files[0]).read_bytes() == encode_record(msg(1))[:10]


def test_append_after_the_file_was_replaced_goes_to_the_new_file(tmp_path):
    path = tmp_path / "t.jsonl"
    with Transcript.open(path, create=True) as t:
        t.append(msg(0))
        other = tmp_path / "other.jsonl"
        other.write_bytes(encode_record(msg("x")))
        os.replace(other, path)  # an editor that ignores the lock saved over it
        t.append(msg(1))
        assert [m.record["id"] for m in t.window().messages] == ["mx", "m1"]
    assert path.read_bytes() == encode_record(msg("x")) + encode_record(msg(1))


def test_create_in_a_missing_folder_says_so(tmp_path):
    from boundctx import TranscriptNotFound

    with pytest.raises(TranscriptNotFound, match="folder does not exist"):
        Transcript.open(tmp_path / "no" / "t.jsonl", create=True)
