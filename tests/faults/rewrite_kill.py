"""Fault campaign 3: kill -9 mid-rewrite (edit/delete/truncate) (:func:`kill_rewriters`)."""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from pathlib import Path

from boundctx import Transcript
from boundctx.errors import TranscriptChanged, TranscriptLocked

from .core import (
    CHILD_TIMEOUT,
    Child,
    ChildDied,
    ChildHung,
    KiB,
    Tally,
    backoff,
    bad_lines,
    check_reads,
    diff_keys,
    draw_size,
    follow_up_append,
    key_of,
    log_ack,
    make_record,
    open_log,
    run_role,
    say,
    scan_file,
    seed_file,
    settle,
    temp_copies,
)


def apply_op(state: list, op: dict) -> list:
    """The keys after one rewrite ``op`` (as a rewriter reports it) on ``state``."""
    target = tuple(op["target"])
    if target not in state:
        raise ValueError(f"{op['op']} of {target}, which is not in the file")
    i = state.index(target)
    if op["op"] == "edit":
        return state[:i] + [tuple(op["new"])] + state[i + 1:]
    if op["op"] == "delete":
        return state[:i] + state[i + 1:]
    return state[:i]


def kill_rewriters(workdir: Path, *, kills: int, seed: int, per_file: int = 4) -> Tally:
    """A process edits, deletes and truncates messages of a ~10 MiB transcript (each a
    full-history rewrite through a temporary copy and a rename) and is SIGKILLed at a
    random point. After each kill the file is exactly the version before the last
    rewrite it began or the version after it, never a mix, never a torn tail; reads
    show it; an append works, and that next writer removes the temporary copy a kill
    may have left (kills that left one are counted)."""
    tally = Tally("kill -9 mid-rewrite (edit/delete/truncate)")
    rng = random.Random(seed)
    started = time.monotonic()
    folder = Path(workdir) / "rewrite"
    folder.mkdir(exist_ok=True)
    path = folder / "t.jsonl"
    state: list = []
    for k in range(kills):
        if k % per_file == 0:
            state = seed_file(path, rng, 30, big=0.1, prefix=f"s{k}")
        child = Child("rewriter", path, rng.randrange(2**32), 10**6, "-", module=__name__)
        inflight = None

        def heard(line: str) -> bool:
            """Take one line of the child's: the rewrite it tries, or the one it
            acknowledges (True), after which the file must be that rewrite's."""
            nonlocal inflight, state
            word, body = line.split(" ", 1)
            if word == "try":
                inflight = json.loads(body)
            elif word == "ack":
                state = [tuple(k_) for k_ in json.loads(body)["after"]]
                inflight = None
                tally.acknowledged += 1
                return True
            return False

        try:
            child.expect("ready")
            child.send("go")
            target = rng.randint(0, 2)
            acks = 0
            while acks < target:
                line = child.readline()
                if line is None:
                    break
                acks += heard(line)
            time.sleep(rng.uniform(0, 0.05))  # the random point the kill lands at
            child.kill()
            tally.faults += 1
            for line in child.drain():
                heard(line)
            settle(tally, child, killed=True)
        except (ChildHung, ChildDied) as exc:
            tally.child_failed(exc, f"rewrite kill {k}")
            continue
        finally:
            child.close()
        scan = scan_file(path)
        bad_lines(tally, scan, f"rewrite kill {k}")
        if scan.torn:
            tally.wrong += 1
            tally.problem(f"rewrite kill {k}: a rewrite left {scan.torn} torn bytes")
        after = apply_op(state, inflight) if inflight else None
        if scan.keys == after:
            tally.note("kills after the rename, before the acknowledgement")
            state = after
        elif scan.keys != state:
            lost = [key for key in state if key not in scan.keys]
            tally.lost += len(lost)
            tally.wrong += 1
            tally.problem(f"rewrite kill {k}: the file is neither the version before nor after "
                          f"{inflight and inflight['op']}: {diff_keys(scan.keys, state)}")
            state = scan.keys
        if temp_copies(folder):
            tally.note("kills that left a temporary copy")
        problems, _ = check_reads(path, state, torn=scan.torn)
        for p in problems:
            tally.crashes += p.startswith("reading raised")
            tally.wrong += not p.startswith("reading raised")
            tally.problem(f"rewrite kill {k}: {p}")
        key = (f"follow{k}.0", 0, KiB)
        problems = follow_up_append(path, key)
        for p in problems:
            tally.crashes += 1
            tally.problem(f"rewrite kill {k}: {p}")
        if not problems:
            state = state + [key]
            tally.acknowledged += 1
        # The next writer (it holds the lock, so no live rewrite owns a copy) removes
        # what a dead rewriter left: a copy as large as the transcript, per crash.
        if (left := temp_copies(folder)):
            tally.wrong += 1
            tally.problem(f"rewrite kill {k}: the next writer left {[p.name for p in left]} behind")
            for tmp in left:
                tmp.unlink()  # keep the disk use bounded
    tally.seconds = time.monotonic() - started
    return tally


# -- the child's roles ---------------------------------------------------------------


def role_rewriter(path: str, seed: str, count: str, acklog: str) -> None:
    """Edit, delete or truncate one message ``count`` times (each a full-history
    rewrite), retrying when the file changed under it or the lock is taken. Prints
    each operation before it starts and the resulting file after it succeeded."""
    rng = random.Random(int(seed))
    log = open_log(acklog)
    refused = 0
    say("ready")
    sys.stdin.readline()  # "go"
    for _ in range(int(count)):
        deadline = time.monotonic() + CHILD_TIMEOUT / 2
        while True:
            t = Transcript.open(path)
            try:
                w = t.window(content_limit=64)  # ids, revs and sizes survive the projection
                n = len(w.messages)
                op = rng.choices(["edit", "delete", "truncate"], [6, 3, 1])[0] if n > 8 else "edit"
                if n == 0:
                    raise TranscriptChanged("nothing to rewrite yet")
                i = rng.randrange(max(0, n - 3), n) if op == "truncate" else rng.randrange(n)
                entry = w.messages[i]
                target = key_of(entry.record)
                spec = {"op": op, "target": target}
                if op == "edit":
                    spec["new"] = (target[0], target[1] + 1, draw_size(rng, big=0, cap=256 * KiB))
                say("try " + json.dumps(spec))
                new = make_record(spec["new"][0], spec["new"][2], spec["new"][1]) if op == "edit" else None
                if rng.random() < 0.5:
                    # By hand, as the docs show it: history(), change it, rewrite(). The
                    # think time between lets appends land meanwhile, which rewrite()
                    # must notice (TranscriptChanged) rather than write over.
                    hist = t.history()
                    time.sleep(rng.uniform(0, 0.01))
                    if entry.index >= hist.message_count or key_of(hist.message(entry.index)) != target:
                        raise TranscriptChanged("the message moved before the history was read")
                    if op == "edit":
                        hist.replace_message(entry.index, new)
                    elif op == "delete":
                        hist.delete_message(entry.index)
                    else:
                        hist.truncate_messages(entry.index)
                    t.rewrite(hist)
                elif op == "edit":
                    t.edit(entry, new)
                elif op == "delete":
                    t.delete(entry)
                else:
                    t.truncate(entry)
            except (TranscriptChanged, TranscriptLocked):
                t.close()
                refused += 1
                backoff(rng, deadline, "rewrites refused")
                continue
            # Still the writer (the lock is held until close): the file is ours to report.
            spec["after"] = [key_of(e.record) for e in t.window(content_limit=64).messages]
            log_ack(log, "S " + json.dumps(spec))
            say("ack " + json.dumps(spec))
            t.close()
            break
        # Think time, as a user between edits: without it the rewriter holds the lock
        # nearly always and the appenders only ever append between its rewrites.
        time.sleep(rng.uniform(0, 0.02))
    say(f"done {refused}")


def role_die_mid_rewrite(path: str) -> None:
    """Start a rewrite and die (SIGKILL, by itself) after the temporary copy is written,
    before it is renamed over the transcript."""
    t = Transcript.open(path)
    say("ready")
    os.replace = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
    t.delete(0)


ROLES = {"rewriter": role_rewriter, "die-mid-rewrite": role_die_mid_rewrite}

if __name__ == "__main__":
    run_role(ROLES)
