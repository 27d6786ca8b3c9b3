"""Fault campaign 1: kill -9 of a writer, at random points (:func:`kill_writers`)."""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

from boundctx import Transcript

from .core import (
    Child,
    ChildDied,
    ChildHung,
    Key,
    KiB,
    MiB,
    RawScan,
    Tally,
    draw_size,
    fresh_file,
    judge_file,
    judge_reads_and_recover,
    make_record,
    real_write,
    run_role,
    say,
    settle,
)


def kill_writers(workdir: Path, *, kills: int, seed: int, per_file: int = 5, big: float = 0.15) -> Tally:
    """A writer appends records of 1 KiB-5 MiB with ``sync=True`` and is SIGKILLed at a
    random point: after a random number of acknowledgements or as a big record's
    append starts, plus a random delay; or (a quarter of the kills) it kills itself
    partway through a write, after a random number of bytes. ``per_file`` writers in
    turn work on one file, each continuing after the last one's death. After each kill:

    - every acknowledged record is in the file exactly once, byte for byte; every line
      is a record that was attempted, in the order attempted; a partial write is only
      ever a torn tail (bytes after the last newline), never a line;
    - reads (the whole window, pages back to message 0, the history) never raise and
      show exactly the file's records (the history may refuse a torn tail: counted);
    - the next append works and moves the torn tail aside; the tail moved aside is the
      start of a record that was being written.
    """
    tally = Tally("kill -9 of a writer (records 1 KiB-5 MiB)")
    rng = random.Random(seed)
    started = time.monotonic()
    path = Path(workdir) / "kill.jsonl"
    attempted: dict[str, Key] = {}
    order: list[str] = []  # attempts in the order they were made (one writer at a time)
    acked: set[str] = set()
    for k in range(kills):
        if k % per_file == 0:
            fresh_file(path)
            attempted, order, acked = {}, [], set()
        # Where the kill lands: after some acknowledgements (anywhere in the next
        # append or between appends); as a big record's append begins; or partway
        # through a write, at a random byte (the writer kills itself there).
        mode = rng.choice(["acks", "acks", "big", "tear"])
        child = Child("writer", path, rng.randrange(2**32), big, f"k{k}", int(mode == "tear"), module=__name__)
        try:
            child.expect("ready")
            acks = 0
            big_try = False
            target = rng.randint(0, 3)

            def take(line: str) -> None:
                nonlocal acks, big_try
                word, rid, size = line.split()
                if word == "try":
                    attempted[rid] = (rid, 0, int(size))
                    order.append(rid)
                    big_try = int(size) >= MiB
                elif word == "ack":
                    acked.add(rid)
                    tally.acknowledged += 1
                    acks += 1
                    big_try = False

            while not ((acks >= target) if mode == "acks" else big_try if mode == "big" else False):
                line = child.readline()
                if line is None:
                    break  # a tearing writer killed itself
                take(line)
            # The random point the kill lands at: a 1-5 MiB record takes a few ms to
            # encode and write, then its fsync.
            time.sleep(rng.uniform(0, 0.02) if mode == "acks" else rng.uniform(0, 0.03))
            child.kill()
            tally.faults += 1
            for line in child.drain():
                take(line)  # acknowledgements already in the pipe count: the writer gave them
            settle(tally, child, killed=True)
        except (ChildHung, ChildDied) as exc:
            tally.child_failed(exc, f"kill {k}")
            continue
        finally:
            child.close()
        judge_sequential(tally, path, attempted, order, acked, f"kill {k}")
        if judge_reads_and_recover(tally, path, attempted, order, acked, f"kill {k}", f"follow{k}.0"):
            tally.acknowledged += 1
    tally.seconds = time.monotonic() - started
    return tally


def judge_sequential(tally: Tally, path: Path, attempted: dict, order: list, acked: set, where: str) -> RawScan:
    """One writer at a time: the file is a subsequence of the attempts, in order,
    holding every acknowledged one exactly once."""
    scan = judge_file(tally, path, attempted, acked, where)
    if scan.torn:
        tally.note("kills that left a torn tail")
    ids = [k[0] for k in scan.keys]
    position = {rid: i for i, rid in enumerate(order)}
    seq = [position.get(rid, -1) for rid in ids]
    if seq != sorted(seq) or len(set(ids)) != len(ids):
        tally.wrong += 1
        tally.problem(f"{where}: records are not in the order they were appended")
    return scan


# -- the child's roles ---------------------------------------------------------------


def role_writer(path: str, seed: str, big: str, writer: str, tear: str = "0") -> None:
    """Append forever, one record at a time, until killed. With ``tear`` = 1 it kills
    itself instead, partway through the write of its 1st-4th record, after a random
    number of that record's bytes: the kill mid-write that an outside SIGKILL only
    rarely hits (the write of even 5 MiB takes about a millisecond)."""
    rng = random.Random(int(seed))
    t = Transcript.open(path, create=True)
    say("ready")
    tear_at = rng.randint(0, 3) if tear == "1" else -1
    for seq in range(10**9):
        size = draw_size(rng, big=float(big))
        rid = f"{writer}.{seq}"
        if seq == tear_at:
            os.write = _tearing_write(rng)
        say(f"try {rid} {size}")
        t.append(make_record(rid, size), sync=True)
        say(f"ack {rid} {size}")


def _tearing_write(rng: random.Random):
    def write(fd, data):
        if len(data) < 2:
            return real_write(fd, data)
        real_write(fd, bytes(memoryview(data)[: rng.randint(1, len(data) - 1)]))
        os.kill(os.getpid(), signal.SIGKILL)
    return write


def role_die_mid_append(path: str) -> None:
    """Append one record, then die (SIGKILL, by itself) halfway through writing the next:
    the deterministic version of a kill mid-write."""
    t = Transcript.open(path, create=True)
    t.append(make_record("d.0", KiB))
    say("ack d.0")

    def half_then_die(fd, data):
        real_write(fd, bytes(data)[: len(data) // 2])
        os.kill(os.getpid(), signal.SIGKILL)

    os.write = half_then_die
    t.append(make_record("d.1", 64 * KiB))


ROLES = {"writer": role_writer, "die-mid-append": role_die_mid_append}

if __name__ == "__main__":
    run_role(ROLES)
