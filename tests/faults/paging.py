"""Fault campaign 4: a reader paging backwards while others append and rewrite
(:func:`reader_under_rewrites`). The appenders and the rewriter are the roles of
``concurrent_appenders`` and ``rewrite_kill``."""

from __future__ import annotations

import json
import random
import select
import time
import traceback
from pathlib import Path

from boundctx import Transcript
from boundctx.errors import TranscriptChanged

from . import concurrent_appenders, rewrite_kill
from .core import (
    Child,
    ChildDied,
    ChildHung,
    Tally,
    bad_lines,
    check_entry,
    check_reads,
    diff_keys,
    key_of,
    make_record,
    pump,
    run_role,
    say,
    scan_file,
    seed_file,
    settle,
)
from .rewrite_kill import apply_op


def replay(acklog: Path, initial: list) -> tuple[list, list[str], int, int]:
    """The file the acknowledgement log says there must be: every acknowledged append
    at the end, every acknowledged rewrite applied, in lock order. Each rewrite's log
    line carries the file it saw after itself, which must match the replay so far.

    Returns (keys, problems, appends, rewrites)."""
    state, problems = list(initial), []
    appends = rewrites = 0
    data = Path(acklog).read_bytes() if Path(acklog).exists() else b""
    for n, line in enumerate(data.split(b"\n")[:-1]):  # a torn last line was no acknowledgement
        word, body = line.decode().split(" ", 1)
        if word == "A":
            rid, rev, size = body.split()
            state.append((rid, int(rev), int(size)))
            appends += 1
        else:
            op = json.loads(body)
            try:
                state = apply_op(state, op)
            except ValueError as exc:
                problems.append(f"log line {n}: {exc}")
            after = [tuple(k) for k in op["after"]]
            if after != state:
                problems.append(f"log line {n}: after {op['op']} of {op['target'][0]} the file held "
                                f"{diff_keys(after, state)}")
            state = after
            rewrites += 1
    return state, problems, appends, rewrites


def reader_under_rewrites(workdir: Path, *, appenders: int, records: int, rewrites: int,
                          seed: int) -> Tally:
    """One process pages a transcript backwards (``window(message_before=...)`` down to
    message 0, random page sizes and content limits, sometimes the whole history)
    while ``appenders`` processes append and one process edits, deletes and truncates.

    The reader must only ever see consistent data: each page a run of consecutive
    records of some version of the file, each record exactly as written (or its
    marked projection), ids unique and each writer's in order; or a clear error
    (TranscriptChanged, or ValueError for a ``message_before`` that a truncation put
    past the end). Afterwards the file is exactly what the acknowledgement log says:
    no acknowledged append lost to a rewrite, nothing doubled.
    """
    tally = Tally("reader paging during appends and rewrites")
    rng = random.Random(seed)
    started = time.monotonic()
    folder = Path(workdir) / "paging"
    folder.mkdir(exist_ok=True)
    path, acklog = folder / "t.jsonl", folder / "acks.log"
    if acklog.exists():
        acklog.unlink()
    initial = seed_file(path, rng, 24, big=0.05, prefix="seed")
    children: list[Child] = []
    reader = Child("reader", path, rng.randrange(2**32), module=__name__)
    result = None
    try:
        reader.expect("ready")
        writers = [Child("appender", path, f"a{i}", records, rng.randrange(2**32), acklog,
                         module=concurrent_appenders.__name__)
                   for i in range(appenders)]
        writers.append(Child("rewriter", path, rng.randrange(2**32), rewrites, acklog, module=rewrite_kill.__name__))
        children = writers
        for c in writers:
            c.expect("ready")
        for c in writers:
            c.send("go")
        live = list(writers)
        while live:
            for child, line in pump(live):
                if line.startswith("done") and child.role == "appender":
                    tally.note("appends refused by the write lock (then retried)", int(line.split()[1]))
                if line.startswith("done") and child.role == "rewriter":
                    tally.note("rewrites refused (TranscriptChanged/Locked, then retried)", int(line.split()[1]))
            for child in [c for c in live if c.eof]:
                live.remove(child)
                settle(tally, child, killed=False)
        reader.end_input()  # the reader stops at its next page
        for line in reader.drain():
            if line.startswith("result "):
                result = json.loads(line[7:])
        settle(tally, reader, killed=False)
    except (ChildHung, ChildDied) as exc:
        tally.child_failed(exc)
    finally:
        for c in [reader, *children]:
            c.close()
    if result is None:
        tally.crashes += 1
        tally.problem("the reader gave no result")
        result = {"violations": [], "pages": 0}
    for v in result["violations"]:
        tally.wrong += 1
        tally.problem(f"reader: {v}")
    for name in ("pages", "passes", "changed", "past_end", "histories", "repeated_across_pages"):
        tally.note(f"reader {name}", result.get(name, 0))
    state, problems, appends, done = replay(acklog, initial)
    tally.acknowledged += appends + done
    tally.faults += appends + done
    tally.note("rewrites committed under the reader", done)
    for p in problems:
        tally.wrong += 1
        tally.problem(f"replay: {p}")
    scan = scan_file(path)
    bad_lines(tally, scan)
    if scan.keys != state:
        lost = [k for k in state if k not in scan.keys]
        tally.lost += len(lost)
        tally.wrong += len(scan.keys) - (len(state) - len(lost))
        tally.problem(f"the file is not what the acknowledgements say: {diff_keys(scan.keys, state)}")
    problems, _ = check_reads(path, scan.keys, torn=scan.torn)
    for p in problems:
        tally.wrong += 1
        tally.problem(p)
    tally.seconds = time.monotonic() - started
    return tally


# -- the child's roles ---------------------------------------------------------------


def _check_page(w, before, limit, climit) -> list[str]:
    out = []
    end = w.message_count if before is None else before
    if w.message_start != max(0, end - limit) or len(w.messages) != end - w.message_start:
        out.append(f"window(before={before}, limit={limit}) starts at {w.message_start} "
                   f"with {len(w.messages)} of {w.message_count} messages")
    ids, last = set(), {}
    for i, e in enumerate(w.messages):
        if e.index != w.message_start + i:
            out.append(f"entry {i} has index {e.index}, the window starts at {w.message_start}")
        if (p := check_entry(e, climit)):
            out.append(p)
            continue
        rid = e.record["id"]
        writer, seq = rid.rsplit(".", 1)
        if rid in ids or int(seq) <= last.get(writer, -1):
            out.append(f"{rid} repeated or out of order within one page")
        ids.add(rid)
        last[writer] = int(seq)
    return out


def role_reader(path: str, seed: str) -> None:
    """Page backwards to message 0 again and again until stdin closes; report what was
    seen as one ``result`` line."""
    rng = random.Random(int(seed))
    t = Transcript.open(path)
    stats = {"pages": 0, "passes": 0, "changed": 0, "past_end": 0, "histories": 0,
             "repeated_across_pages": 0, "violations": []}
    say("ready")

    def stop() -> bool:
        return bool(select.select([0], [], [], 0)[0])  # the parent closed our stdin

    while not stop():
        before, seen = None, set()
        try:
            while True:
                limit = rng.randint(1, 16)
                climit = rng.choice([None, None, 256, 4096, 65536])
                w = t.window(message_before=before, message_limit=limit, content_limit=climit)
                stats["pages"] += 1
                stats["violations"] += _check_page(w, before, limit, climit)
                ids = {e.record["id"] for e in w.messages if e.record}
                # A delete between two pages moves later messages down by one: the next
                # page may show one already seen. Counted, not wrong: each page is right.
                stats["repeated_across_pages"] += len(ids & seen)
                seen |= ids
                if w.message_start == 0 or stop():
                    stats["passes"] += 1
                    break
                before = w.message_start
            if rng.random() < 0.15:
                h = t.history()
                stats["histories"] += 1
                for i in range(h.message_count):
                    rec = h.message(i)
                    key = key_of(rec)
                    if key is None or rec != make_record(key[0], key[2], key[1]):
                        stats["violations"].append(f"history message {i} is not what was written")
        except TranscriptChanged:
            stats["changed"] += 1
        except ValueError as exc:
            if "past the last message" not in str(exc):
                stats["violations"].append(f"ValueError: {exc}")
            stats["past_end"] += 1
        except Exception:
            stats["violations"].append(traceback.format_exc(limit=4))
        del stats["violations"][20:]
    say("result " + json.dumps(stats))


ROLES = {"reader": role_reader}

if __name__ == "__main__":
    run_role(ROLES)
