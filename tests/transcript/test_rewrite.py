"""Full-history rewrites: atomic, from a complete history only, never from a window."""

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from boundctx import PartialHistoryRewrite, Transcript, TranscriptChanged
from boundctx.transcript import RawLine, encode_record
from boundctx.transcript.sidecar import sidecar_paths


def make(path, n):
    lines = [encode_record({"type": "session", "version": 3, "id": "s"})]
    lines += [encode_record({"type": "message", "id": f"m{i}", "message": {"role": "user", "content": f"t{i}"}})
              for i in range(n)]
    path.write_bytes(b"".join(lines))
    return path


def ids(t):
    return [m.record["id"] for m in t.window().messages]


def test_edit_delete_truncate_rehydrate_the_whole_history(tmp_path):
    path = make(tmp_path / "t.jsonl", 10)
    with Transcript.open(path) as t:
        t.window(preset="renderer", message_limit=3)  # a partial view first, as a UI would
        t.edit(8, {"type": "message", "id": "edited"})
        t.delete(2)
        assert ids(t) == ["m0", "m1", "m3", "m4", "m5", "m6", "m7", "edited", "m9"]
        t.truncate(7)
        assert ids(t) == ["m0", "m1", "m3", "m4", "m5", "m6", "m7"]
        assert t.read_lines(0, 1)[0].type == "session"  # other lines survive
    with Transcript.open(path) as t:
        assert ids(t) == ["m0", "m1", "m3", "m4", "m5", "m6", "m7"]


def test_rewrite_from_a_window_or_a_list_is_refused(tmp_path):
    path = make(tmp_path / "t.jsonl", 10)
    before = path.read_bytes()
    with Transcript.open(path) as t:
        w = t.window(message_limit=3)
        for partial in (w, w.messages, [m.record for m in w.messages]):
            with pytest.raises(PartialHistoryRewrite, match="complete history"):
                t.rewrite(partial)
    assert path.read_bytes() == before


def test_history_from_another_transcript_object_is_refused(tmp_path):
    path = make(tmp_path / "t.jsonl", 3)
    with Transcript.open(path) as a, Transcript.open(path) as b:
        h = a.history()
        with pytest.raises(PartialHistoryRewrite):
            b.rewrite(h)


def test_stale_history_is_refused(tmp_path):
    path = make(tmp_path / "t.jsonl", 3)
    with Transcript.open(path) as t:
        h = t.history()
        t.append({"type": "message", "id": "late"})
        h.delete_message(0)
        with pytest.raises(TranscriptChanged, match="history"):
            t.rewrite(h)
        assert ids(t) == ["m0", "m1", "m2", "late"]


def test_rewrite_replaces_atomically_and_invalidates_both_cache_layers(tmp_path):
    path = make(tmp_path / "t.jsonl", 5)
    with Transcript.open(path) as reader:
        assert reader.message_count == 5
        with Transcript.open(path) as t:
            ino = os.stat(path).st_ino
            t.delete(0)
            assert os.stat(path).st_ino != ino  # a new file took the old one's place
            assert t.layout_outcome == "rebuilt"
        # the other reader follows the path to the new file
        assert ids(reader) == ["m1", "m2", "m3", "m4"]
    leftovers = [p for p in os.listdir(tmp_path) if p.startswith(".rewrite-")]
    assert leftovers == []
    with Transcript.open(path) as t:
        assert t.layout_outcome == "valid" and t.message_count == 4
    # one sidecar again: here in the cache, as the file starts with pi's session header
    assert [os.path.exists(p) for p in sidecar_paths(str(path))] == [False, True]


def test_rewrite_keeps_corrupt_and_blank_lines_byte_for_byte(tmp_path):
    path = tmp_path / "t.jsonl"
    bad = b'{"type":"message","id":"x", oops}\n'
    path.write_bytes(encode_record({"type": "message", "id": "a"}) + bad + b"\n"
                     + encode_record({"type": "message", "id": "b"}))
    with Transcript.open(path) as t:
        h = t.history()
        assert isinstance(h.message(1), RawLine)
        t.edit(2, {"type": "message", "id": "b2"})
    assert path.read_bytes() == (encode_record({"type": "message", "id": "a"}) + bad + b"\n"
                                 + encode_record({"type": "message", "id": "b2"}))


def test_a_torn_tail_is_moved_aside_for_the_history_unless_its_writer_is_still_at_it(tmp_path):
    path = make(tmp_path / "t.jsonl", 2)
    with open(path, "ab") as f:
        f.write(b'{"type":"mess')
    writer = Transcript.open(path)
    writer._acquire_lock()  # a live writer, mid-append, as far as anyone can tell
    try:
        with Transcript.open(path) as t:
            with pytest.raises(TranscriptChanged, match="write still in progress"):
                t.history()
    finally:
        writer.close()
    with Transcript.open(path) as t:  # its writer is gone: nobody holds the lock
        h = t.history()
        assert h.message_count == 2 and [Path(f).read_bytes() for f in t.torn_files] == [b'{"type":"mess']
    assert not path.read_bytes().endswith(b"mess")


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 30), seed=st.integers(0, 2**32 - 1))
def test_no_sequence_of_window_and_edit_calls_deletes_older_messages(tmp_path_factory, n, seed):
    rng = random.Random(seed)
    path = make(tmp_path_factory.mktemp("w") / "t.jsonl", n)
    expected = [f"m{i}" for i in range(n)]
    with Transcript.open(path) as t:
        for step in range(6):
            limit = rng.randint(1, n)
            before = rng.randint(0, n)
            w = t.window(message_before=before, message_limit=limit,
                         content_limit=rng.choice([None, 0, 3, 100]))
            if not w.messages:
                continue
            target = rng.choice(w.messages)
            t.edit(target.index, {"type": "message", "id": f"e{step}"})
            expected[target.index] = f"e{step}"
            # an edit from a projected window still writes the edit, not the projection
            assert ids(t) == expected
            with pytest.raises(PartialHistoryRewrite):
                t.rewrite(w)
        assert t.message_count == n


def test_history_from_a_lying_sidecar_is_read_after_one_rebuild(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"".join(encode_record({"type": "message", "id": f"m{i}", "pad": "x" * (i % 5)})
                              for i in range(600)))
    Transcript.open(path).close()
    st = os.stat(path)
    lines = path.read_bytes().splitlines(keepends=True)
    lines[151], lines[303] = lines[303], lines[151]  # different lengths, same total size
    path.write_bytes(b"".join(lines))  # in place: same inode, size, head and tail
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    with Transcript.open(path) as t:
        assert t.layout_outcome == "valid"
        h = t.history()
        assert t.layout_outcome == "rebuilt"
        assert h.message(151)["id"] == "m303" and h.message(303)["id"] == "m151"


APPENDER = """
import sys, time
from boundctx import Transcript, TranscriptLocked
path, until = sys.argv[1], time.monotonic() + float(sys.argv[2])
n = 0
print("started", flush=True)
while time.monotonic() < until:
    try:
        with Transcript.open(path) as t:
            t.append({"type": "message", "id": f"a{n}", "message": {"role": "user", "content": "x"}})
        n += 1
    except TranscriptLocked:  # an edit holds it: try again
        time.sleep(0.001)
print(n, flush=True)
"""


def test_edits_succeed_while_another_process_keeps_appending(tmp_path):
    # The history is read under the write lock, so an append cannot come between
    # reading it and rewriting it; before that, nearly every edit was TranscriptChanged.
    path = make(tmp_path / "t.jsonl", 30)  # each edit below removes at most one old message
    child = subprocess.Popen([sys.executable, "-c", APPENDER, str(path), "8"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "started"
        done = []
        for k in range(12):
            with Transcript.open(path) as t:
                if k % 3 == 0:
                    t.edit(0, {"type": "message", "id": f"m0-{k}", "message": {"role": "user", "content": "e"}})
                elif k % 3 == 1:
                    t.delete(t.message_count - 1)
                else:
                    t.truncate(t.message_count - 1)
            done.append(k)
    finally:
        appended = int(child.communicate(timeout=60)[0].strip())
    assert done == list(range(12)) and appended > 0
    with Transcript.open(path) as t:
        got = ids(t)
    assert got[0] == "m0-9" and len(got) == len(set(got))


STALLED_REWRITER = """
import sys, time
from boundctx import Transcript
from boundctx.transcript import writing

real = writing.replacing
def stalled(*a, **k):
    cm = real(*a, **k)
    f = cm.__enter__()
    f.write(b"x" * 100_000)
    f.flush()
    print("writing", flush=True)
    time.sleep(600)  # killed here, mid-rewrite
writing.replacing = stalled
with Transcript.open(sys.argv[1]) as t:
    t.delete(0)
"""


def test_the_next_writer_removes_what_a_writer_killed_mid_rewrite_left_and_nothing_else(tmp_path):
    path = make(tmp_path / "t.jsonl", 3)
    other = make(tmp_path / "t.jsonl2", 1)  # a neighbour whose name starts the same
    before = path.read_bytes()
    seen = []
    for _ in range(2):
        child = subprocess.Popen([sys.executable, "-c", STALLED_REWRITER, str(path)],
                                 stdout=subprocess.PIPE, text=True)
        with child.stdout:
            assert child.stdout.readline().strip() == "writing"
        child.kill()
        child.wait(timeout=30)
        seen.append(sorted(p.name for p in tmp_path.iterdir() if ".rewrite-" in p.name))
    # Each kill left its copy; the second writer removed the first's when it took the lock.
    assert [len(s) for s in seen] == [1, 1] and seen[0] != seen[1]
    left = seen[1]
    assert left[0].startswith(".t.jsonl.rewrite-")
    assert path.read_bytes() == before  # the rewrite never landed: nothing lost
    # Files that are not a dead rewriter's temporary copy of this transcript stay.
    keep = [tmp_path / ".t.jsonl2.rewrite-0123456789abcdef", tmp_path / ".t.jsonl.rewrite-notours",
            tmp_path / "t.jsonl.torn-10-1", tmp_path / ".rewrite-0123456789abcdef"]
    for p in keep:
        p.write_bytes(b"data")
    empty_torn = tmp_path / "t.jsonl.torn-11-2"
    empty_torn.write_bytes(b"")
    with Transcript.open(path) as t:
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".t.jsonl.rewrite-")][0:1]  # readers leave them
        t.append({"type": "message", "id": "after", "message": {"role": "user", "content": "x"}})
    assert not [p for p in tmp_path.iterdir() if p.name in left] and not empty_torn.exists()
    assert all(p.read_bytes() == b"data" for p in keep)
    with Transcript.open(path) as t, Transcript.open(other) as o:
        assert ids(t) == ["m0", "m1", "m2", "after"] and ids(o) == ["m0"]


def test_a_full_disk_while_moving_a_torn_tail_aside_leaves_no_empty_side_file(tmp_path, monkeypatch):
    path = tmp_path / "t.jsonl"
    torn = b'{"type":"message","id":"half'
    path.write_bytes(encode_record({"type": "message", "id": "m0"}) + torn)
    import builtins
    real_open = builtins.open

    class Full:
        def __init__(self, f):
            self.f = f
        def __enter__(self):
            return self
        def __exit__(self, *exc):
            self.f.close()
        def write(self, data):
            raise OSError(28, "No space left on device")

    def full_open(file, mode="r", *a, **k):
        f = real_open(file, mode, *a, **k)
        return Full(f) if ".torn-" in str(file) and "x" in mode else f

    with Transcript.open(path) as t:
        monkeypatch.setattr(builtins, "open", full_open)
        for _ in range(3):
            with pytest.raises(OSError, match="No space"):
                t.append({"type": "message", "id": "m1"})
        monkeypatch.setattr(builtins, "open", real_open)
        assert not [p for p in tmp_path.iterdir() if ".torn-" in p.name]
        assert t.torn_bytes == len(torn)  # kept in place for the next try
        t.append({"type": "message", "id": "m1"})
        assert [Path(f).read_bytes() for f in t.torn_files] == [torn]
