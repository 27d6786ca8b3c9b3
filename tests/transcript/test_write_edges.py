"""Writers at the edges: a lock file removed under its holder, a symlink swapped in at
the name, a line longer than one ``write`` call takes.

Each race is played with real processes (a child holding or racing for the lock) or
made deterministic by doing the swap at the exact moment in between.
"""

import errno
import json
import os
import subprocess
import sys
import textwrap

import pytest

from boundctx.errors import TranscriptError, TranscriptNotFound
from boundctx.transcript import writing
from boundctx.transcript.lineformat import encode_record
from boundctx.transcript.store import Transcript

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def record(text: str) -> dict:
    return {"type": "message", "message": {"role": "user", "content": text}}


def seeded(path, n=3):
    path.write_bytes(b"".join(encode_record(record(f"m{i}")) for i in range(n)))
    return path


def contents(path) -> list[str]:
    return [json.loads(line)["message"]["content"] for line in path.read_bytes().splitlines()]


class Holder:
    """A child process that opens a transcript and appends (so holds its write lock),
    then does what it is told line by line: ``append TEXT`` / ``delete N`` / ``close``."""

    SCRIPT = textwrap.dedent("""
        import json, sys
        from boundctx.transcript.store import Transcript
        t = Transcript.open(sys.argv[1])
        t.append({"type": "message", "message": {"role": "user", "content": "held"}})
        print("ready", flush=True)
        for line in sys.stdin:
            op, _, arg = line.strip().partition(" ")
            try:
                if op == "append":
                    t.append({"type": "message", "message": {"role": "user", "content": arg}}, lock_wait=0)
                elif op == "delete":
                    t.delete(int(arg), lock_wait=0)
                elif op == "close":
                    t.close()
                    print("ok", flush=True)
                    break
                print("ok", flush=True)
            except Exception as exc:
                print("error " + type(exc).__name__, flush=True)
    """)

    def __init__(self, path):
        self.proc = subprocess.Popen([sys.executable, "-c", self.SCRIPT, str(path)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, cwd=ROOT)
        assert self.proc.stdout.readline().strip() == "ready"

    def do(self, command: str) -> str:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self.proc.stdin.close()
        self.proc.stdout.close()


# -- the lock file removed or replaced while held -----------------------------------------


@pytest.mark.parametrize("how", ["removed", "replaced"])
def test_a_writer_whose_lock_file_went_takes_the_lock_again_before_it_writes(tmp_path, how):
    path = seeded(tmp_path / "t.jsonl")
    a = Holder(path)
    try:
        lock = str(path) + writing.LOCK_SUFFIX
        if how == "removed":
            os.unlink(lock)
        else:
            other = tmp_path / "other"
            other.write_bytes(b"")
            os.replace(other, lock)
        # Another writer now locks the file the name holds, and keeps it (open).
        with Transcript.open(path) as b:
            b.append(record("from b"))
            # The first writer's lock locks an orphan: it must not write alongside.
            assert a.do("append from-a") == "error TranscriptLocked"
            assert a.do("delete 0") == "error TranscriptLocked"
        # Once the other writer is done, the first one takes the lock again and writes.
        assert a.do("append from-a") == "ok"
        assert a.do("close") == "ok"
    finally:
        a.stop()
    assert contents(path) == ["m0", "m1", "m2", "held", "from b", "from-a"]
    assert not [p for p in os.listdir(tmp_path) if ".rewrite-" in p]


def test_a_lock_file_replaced_between_open_and_flock_is_not_taken_for_the_lock(tmp_path, monkeypatch):
    path = seeded(tmp_path / "t.jsonl")
    lock = str(path) + writing.LOCK_SUFFIX
    real_flock = writing.fcntl.flock
    swapped = []

    def flock_after_a_swap(fd, op):
        if not swapped:  # the name changes hands between this writer's open and its flock
            swapped.append(True)
            os.unlink(lock)
        return real_flock(fd, op)

    monkeypatch.setattr(writing.fcntl, "flock", flock_after_a_swap)
    lfd = writing.take_write_lock(str(path))
    try:
        assert swapped and writing.lock_still_held(lfd, str(path))
        assert os.fstat(lfd).st_ino == os.lstat(lock).st_ino
    finally:
        os.close(lfd)


def test_a_symlink_at_the_lock_files_name_is_refused_not_followed(tmp_path):
    path = seeded(tmp_path / "t.jsonl")
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside / "planted", str(path) + writing.LOCK_SUFFIX)
    with Transcript.open(path) as t:
        with pytest.raises(TranscriptError, match="not a regular file"):
            t.append(record("x"))
    assert os.listdir(outside) == []
    assert contents(path) == ["m0", "m1", "m2"]


# -- a symlink swapped in at the transcript's name -----------------------------------------


def test_writes_stay_beside_the_file_that_was_opened_when_a_symlink_is_swapped_in(tmp_path, monkeypatch):
    """Between the open and the writes, the name becomes a symlink to a file in another
    folder: the lock, the sidecar, a torn tail's side file and a rewrite never go there."""
    folder, outside = tmp_path / "sessions", tmp_path / "outside"
    folder.mkdir()
    outside.mkdir()
    path = seeded(folder / "s.jsonl")
    with open(path, "ab") as f:
        f.write(b'{"type":"message","message":{"role":"user","content":"to')  # a torn tail
    target = seeded(outside / "victim.jsonl")
    before = target.read_bytes()
    t = Transcript.open(path, within=folder)
    try:
        aside = folder / "aside.jsonl"
        os.replace(path, aside)
        os.symlink(target, path)
        # The open file is still the one in the folder; the name now leads out of it.
        with pytest.raises(TranscriptError):
            t.append(record("x"))
        with pytest.raises(TranscriptError):
            t.delete(0)
    finally:
        t.close()
    assert sorted(os.listdir(outside)) == ["victim.jsonl"]
    assert target.read_bytes() == before


def test_within_refuses_a_name_that_leads_out_of_the_folder_before_anything_is_written(tmp_path):
    folder, outside = tmp_path / "sessions", tmp_path / "outside"
    folder.mkdir()
    outside.mkdir()
    seeded(outside / "victim.jsonl")
    os.symlink(outside / "victim.jsonl", folder / "s.jsonl")
    with pytest.raises(TranscriptNotFound):
        Transcript.open(folder / "s.jsonl", within=folder)
    assert sorted(os.listdir(outside)) == ["victim.jsonl"]
    # A link that stays inside the folder is the file it names.
    seeded(folder / "real.jsonl")
    os.symlink(folder / "real.jsonl", folder / "inside.jsonl")
    with Transcript.open(folder / "inside.jsonl", within=folder) as t:
        t.append(record("via link"))
    assert contents(folder / "real.jsonl")[-1] == "via link"


def test_within_follows_a_rename_inside_the_folder_but_not_a_link_out(tmp_path):
    folder, outside = tmp_path / "sessions", tmp_path / "outside"
    folder.mkdir()
    outside.mkdir()
    path = seeded(folder / "s.jsonl")
    other = seeded(folder / "other.jsonl", n=5)
    with Transcript.open(path, within=folder) as t:
        os.replace(other, path)  # a rewrite by another process: followed
        assert len(t.window().messages) == 5  # a read refreshes
        os.replace(path, folder / "aside.jsonl")
        seeded(outside / "victim.jsonl", n=7)
        os.symlink(outside / "victim.jsonl", path)
        with pytest.raises(TranscriptNotFound):
            t.window()
    assert sorted(os.listdir(outside)) == ["victim.jsonl"]


# -- a line longer than one write call ------------------------------------------------------


def test_a_line_longer_than_one_write_call_takes_is_written_whole(tmp_path, monkeypatch):
    """Linux writes at most 0x7ffff000 bytes a call; here the cap is 1 MiB, so the same
    loop is exercised on a small line."""
    path = seeded(tmp_path / "t.jsonl")
    real_write = os.write
    calls = []

    def capped(fd, data):
        calls.append(len(data))
        return real_write(fd, bytes(memoryview(data)[: 1 << 20]))

    big = "x" * (3 << 20)
    with Transcript.open(path) as t:
        monkeypatch.setattr(writing.os, "write", capped)
        t.append(record(big))
        monkeypatch.undo()
        assert t.message_count == 4 and t.torn_bytes == 0
        assert t.window(message_limit=1).messages[0].record["message"]["content"] == big
    assert len(calls) >= 4
    assert contents(path)[-1] == big


def test_a_write_that_stops_short_says_so_and_leaves_a_tail_the_next_append_moves_aside(tmp_path, monkeypatch):
    path = seeded(tmp_path / "t.jsonl")
    real_write = os.write
    state = {"calls": 0}

    def full_after_one(fd, data):
        state["calls"] += 1
        if state["calls"] > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, bytes(memoryview(data)[:10]))

    with Transcript.open(path) as t:
        monkeypatch.setattr(writing.os, "write", full_after_one)
        with pytest.raises(OSError, match="short write .*10 of .*No space left") as caught:
            t.append(record("y" * 100))
        assert caught.value.errno == errno.ENOSPC
        monkeypatch.undo()
        assert t.torn_bytes == 10
        t.append(record("after"))
        assert len(t.torn_files) == 1
    assert contents(path) == ["m0", "m1", "m2", "after"]


@pytest.mark.slow
def test_a_real_line_over_2_gib_is_appended_whole(tmp_path):
    """The kernel's own cap on one write call (0x7ffff000 bytes), met for real."""
    path = seeded(tmp_path / "t.jsonl", n=1)
    size = 0x7FFFF000 + (1 << 20)
    with Transcript.open(path) as t:
        t.append(record("z" * size), sync=False)
        assert t.torn_bytes == 0 and t.message_count == 2
        entry = t.window(message_limit=1, content_limit=64).messages[0]
        assert entry.index == 1
    end = os.path.getsize(path)
    assert end > size
    with open(path, "rb") as f:
        f.seek(end - 5)
        assert f.read() == b'z"}}\n'


# -- a file's identity across rewrites --------------------------------------------------------


def test_every_rewrite_gives_the_file_an_identity_of_its_own_and_appends_keep_it(tmp_path):
    path = seeded(tmp_path / "t.jsonl", n=30)
    seen, inodes = [], []
    with Transcript.open(path) as t:
        for _ in range(10):
            t.delete(0)
            seen.append(t.identity())
            inodes.append(t.stat().st_ino)
            t.append(record("more"))
            assert t.identity() == seen[-1]
    assert len(set(seen)) == len(seen)
    with Transcript.open(path) as again:  # another reader computes the same
        assert again.identity() == seen[-1]


def test_an_entry_from_before_another_processs_delete_is_not_taken_for_the_message_now_at_its_offset(tmp_path):
    """Another process deletes an earlier message of the same length: the next message
    now starts at the entry's offset. The edit by Entry must see it is another line."""
    path = seeded(tmp_path / "t.jsonl", n=4)
    with Transcript.open(path) as t:
        entry = t.window().messages[2]
        subprocess.run([sys.executable, "-c", "import sys\nfrom boundctx import Transcript\n"
                        "with Transcript.open(sys.argv[1]) as o:\n    o.delete(1)", str(path)],
                       check=True, cwd=ROOT, timeout=60)
        with pytest.raises(TranscriptError, match="no longer the line"):
            t.delete(entry)
        with pytest.raises(TranscriptError, match="no longer the line"):
            t.edit(entry, record("edited"))
        fresh = t.window().messages[1]
        t.delete(fresh)  # a fresh entry for the same message works
    assert contents(path) == ["m0", "m3"]
