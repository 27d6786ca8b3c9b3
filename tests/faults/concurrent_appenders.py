"""Fault campaign 2: concurrent appenders, some killed (:func:`concurrent_appenders`)."""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

from boundctx import Transcript
from boundctx.errors import TranscriptLocked

from .core import (
    CHILD_TIMEOUT,
    Child,
    ChildDied,
    ChildHung,
    Key,
    MiB,
    Tally,
    backoff,
    draw_size,
    fresh_file,
    judge_file,
    judge_reads_and_recover,
    log_ack,
    make_record,
    open_log,
    pump,
    run_role,
    say,
    settle,
)


def concurrent_appenders(workdir: Path, *, writers: int, records: int, kills: int, seed: int) -> Tally:
    """``writers`` processes append ``records`` records each to one transcript at the
    same time, each opening it, appending and closing (the write lock refuses a second
    writer with TranscriptLocked; a refused writer retries). ``kills`` of them are
    SIGKILLed at random points and replaced by new writers. At the end every
    acknowledged record is in the file exactly once and whole (no interleaved or
    welded lines), each writer's records are in its own order, nothing appears that
    no writer attempted, reads show exactly the file, and one more append works.
    """
    tally = Tally("concurrent appenders, some killed")
    rng = random.Random(seed)
    started = time.monotonic()
    path = Path(workdir) / "concurrent.jsonl"
    fresh_file(path)
    Transcript.open(path, create=True).close()
    attempted: dict[str, Key] = {}
    acked: set[str] = set()
    names = iter(f"c{i}" for i in range(10**6))
    live: list[Child] = []

    def spawn(n: int) -> Child:
        c = Child("appender", path, next(names), n, rng.randrange(2**32), "-", module=__name__)
        live.append(c)
        return c

    first = [spawn(records) for _ in range(writers)]
    for c in first:
        c.expect("ready")
    for c in first:
        c.send("go")
    # Kill points in the first half of the appends: a killed writer's remaining records
    # are never written, so a point near the end might never be reached.
    half = max(2, writers * records // 2)
    kill_at = sorted(rng.sample(range(1, half), min(kills, half - 1)))
    seen_acks = 0

    def take(line: str) -> None:
        nonlocal seen_acks
        word, *rest = line.split()
        if word == "try":
            attempted[rest[0]] = (rest[0], 0, int(rest[1]))
        elif word == "ack":
            acked.add(rest[0])
            tally.acknowledged += 1
            seen_acks += 1
        elif word == "done":
            tally.note("appends refused by the write lock (then retried)", int(rest[0]))

    try:
        while live:
            for _child, line in pump(live):
                take(line)
            for child in [c for c in live if c.eof]:
                live.remove(child)
                settle(tally, child, killed=False)
                child.close()
            if kill_at and seen_acks >= kill_at[0] and live:
                kill_at.pop(0)
                victim = rng.choice(live)
                time.sleep(rng.uniform(0, 0.005))  # the random point the kill lands at
                victim.kill()
                tally.faults += 1
                for line in victim.drain():
                    take(line)
                live.remove(victim)
                settle(tally, victim, killed=True)
                victim.close()
                spawn(records // 2 + 1).send("go")  # its "ready" is read with the others' lines
    except (ChildHung, ChildDied) as exc:
        tally.child_failed(exc)
    finally:
        for c in live:
            c.close()
    scan = judge_file(tally, path, attempted, acked)
    ids = [k[0] for k in scan.keys]
    by_writer: dict[str, list[int]] = {}
    for rid in ids:
        w, seq = rid.rsplit(".", 1)
        by_writer.setdefault(w, []).append(int(seq))
    for w, seqs in by_writer.items():
        if seqs != sorted(set(seqs)):
            tally.wrong += 1
            tally.problem(f"writer {w}'s records are out of order or repeated: {seqs[:20]}")
    if scan.torn:
        tally.note("runs that ended with a torn tail")
    judge_reads_and_recover(tally, path, attempted, list(attempted), acked, "concurrent", "follow.0")
    tally.seconds = time.monotonic() - started
    return tally


# -- the child's roles ---------------------------------------------------------------


def role_appender(path: str, writer: str, count: str, seed: str, acklog: str) -> None:
    """Append ``count`` records, each with its own open/append/close; retry when the
    write lock refuses. The acknowledgement goes to the log while the lock is held."""
    rng = random.Random(int(seed))
    log = open_log(acklog)
    refused = 0
    say("ready")
    sys.stdin.readline()  # "go": every writer starts at once, so they contend
    for seq in range(int(count)):
        size = draw_size(rng, big=0.05, cap=2 * MiB)
        rid = f"{writer}.{seq}"
        say(f"try {rid} {size}")
        deadline = time.monotonic() + CHILD_TIMEOUT / 2
        while True:
            t = Transcript.open(path, create=True)
            try:
                t.append(make_record(rid, size), sync=True)
            except TranscriptLocked:
                t.close()
                refused += 1
                backoff(rng, deadline, "the write lock")
                continue
            # The lock is held until close, so this log line is in lock order.
            log_ack(log, f"A {rid} 0 {size}")
            say(f"ack {rid} {size}")
            t.close()
            break
    say(f"done {refused}")


ROLES = {"appender": role_appender}

if __name__ == "__main__":
    run_role(ROLES)
