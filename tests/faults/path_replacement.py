"""Fault campaign 6: the path replaced while a Transcript is open (:func:`path_replacement`)."""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path

from boundctx import Transcript
from boundctx.errors import TranscriptError

from .core import (
    Child,
    ChildDied,
    ChildHung,
    KiB,
    Tally,
    diff_keys,
    key_of,
    line_of,
    make_record,
    run_role,
    say,
    scan_file,
    seed_file,
    settle,
)

#: What replaces the path, and what the open Transcript must do about it.
REPLACEMENTS = {
    "renamed-over": "follow",  # another transcript renamed over the path
    "rewritten-in-place": "follow",  # the same file (inode) truncated and filled with another
    "symlink-to-other": "follow",  # the path becomes a symlink to another transcript
    "directory": "refuse",
    "fifo": "refuse",
    "symlink-to-fifo": "refuse",
    "symlink-to-device": "refuse",  # /dev/null: reads as empty, swallows writes
    "removed": "refuse",
    "dangling-symlink": "refuse",
}


def _replace_path(kind: str, path: Path, other: Path, aside: Path) -> None:
    if kind == "renamed-over":
        os.replace(other, path)
        return
    if kind == "rewritten-in-place":
        data = other.read_bytes()
        with open(path, "r+b") as f:  # an editor that saves in place, ignoring the lock
            f.truncate(0)
            f.write(data)
        other.unlink()
        return
    os.replace(path, aside)
    if kind == "symlink-to-other":
        os.symlink(other, path)
    elif kind == "directory":
        os.mkdir(path)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink-to-fifo":
        os.mkfifo(str(path) + ".fifo")
        os.symlink(str(path) + ".fifo", path)
    elif kind == "symlink-to-device":
        os.symlink("/dev/null", path)
    elif kind == "dangling-symlink":
        os.symlink(str(path) + ".nowhere", path)


def path_replacement(workdir: Path, *, rounds: int = 1, seed: int = 0,
                     kinds: tuple[str, ...] = tuple(REPLACEMENTS)) -> Tally:
    """A process holds a transcript open (it has read it and appended to it, so it
    holds the write lock) while another replaces the path: a file renamed over it, a
    symlink to another transcript, a directory, a FIFO, a symlink to a FIFO or to
    /dev/null, nothing, a dangling symlink. Then it reads (window, message_count,
    history), appends and edits.

    Every call must follow the new file (show exactly its records; an append lands in
    it) or refuse with a TranscriptError; never show the old data or an empty window,
    never block on a FIFO, never write outside the file the path names."""
    tally = Tally("path replaced while open")
    rng = random.Random(seed)
    started = time.monotonic()
    n = 0
    for r in range(rounds):
        for kind in kinds:
            contract = REPLACEMENTS[kind]
            n += 1
            folder = Path(workdir) / f"replace-{kind}-{r}"
            folder.mkdir()
            path, other, aside = folder / "t.jsonl", folder / "other.jsonl", folder / "aside.jsonl"
            mine = seed_file(path, rng, 3, big=0, prefix=f"mine{n}")
            theirs = seed_file(other, rng, 2, big=0, prefix=f"theirs{n}")
            child = Child("replace", path, f"x{n}", module=__name__)
            try:
                child.expect("ready")
                tally.acknowledged += 1  # the append it made before the replacement
                mine.append((f"x{n}.0", 0, KiB))
                _replace_path(kind, path, other, aside)
                tally.faults += 1
                child.send("go")
                line = child.expect("result")
                settle(tally, child, killed=False)
            except (ChildHung, ChildDied) as exc:
                tally.child_failed(exc, kind)
                continue
            finally:
                child.close()
            _judge_replacement(tally, kind, contract, json.loads(line[7:]), mine, theirs,
                               folder, n)
    tally.seconds = time.monotonic() - started
    return tally


def _judge_replacement(tally: Tally, kind: str, contract: str, out: dict, mine: list, theirs: list,
                       folder: Path, n: int) -> None:
    appended = (f"x{n}.1", 0, KiB)
    appended_ok = "ok" in out.get("append", {})
    for op, res in out.items():
        if "error" in res:
            if "TranscriptError" not in res["mro"]:
                tally.wrong += 1
                tally.problem(f"{kind}: {op} raised {res['error']} (no TranscriptError): {res['message']}")
            continue
        if contract == "refuse" and op != "count":  # a cached fact, no I/O: it may lag
            tally.wrong += 1
            tally.problem(f"{kind}: {op} returned {res['ok']} instead of refusing")
            continue
        want = {"window": theirs, "history": theirs, "count": len(theirs),
                "append": None, "after_append": theirs + [appended] * appended_ok,
                "edit": None}.get(op)
        if op in ("window", "history", "after_append"):
            got = [tuple(k) for k in res["ok"]]
            if got != want:
                tally.wrong += 1
                tally.problem(f"{kind}: {op} shows {diff_keys(got, want)} (old file: {got == mine})")
        elif op == "count" and contract == "follow" and res["ok"] != want:
            tally.wrong += 1
            tally.problem(f"{kind}: message_count is {res['ok']}, the new file has {want}")
    # Where the append went: into the file the path names now, or nowhere.
    landed = [p.name for p in folder.iterdir() if p.is_file() and not p.is_symlink()
              and p.suffix == ".jsonl" and line_of(appended) in p.read_bytes()]
    if appended_ok:
        tally.acknowledged += 1
        target = folder / ("other.jsonl" if kind == "symlink-to-other" else "t.jsonl")
        if landed != [target.name]:
            tally.lost += 1
            tally.problem(f"{kind}: the acknowledged append is in {landed}, not in {target.name}")
    elif landed:
        tally.wrong += 1
        tally.problem(f"{kind}: a refused append was written to {landed}")
    aside = folder / "aside.jsonl"
    if aside.exists() and scan_file(aside).keys != mine:
        tally.wrong += 1
        tally.problem(f"{kind}: the file moved aside changed after it was no longer at the path")


# -- the child's roles ---------------------------------------------------------------


def role_replace(path: str, writer: str) -> None:
    """Hold the transcript open as its writer; after "go" (the path has been replaced),
    try every call and report each outcome."""
    t = Transcript.open(path)
    t.window()
    t.append(make_record(f"{writer}.0", KiB))
    say("ready")
    sys.stdin.readline()
    out = {}

    def run(name, fn):
        try:
            out[name] = {"ok": fn()}
        except Exception as exc:
            out[name] = {"error": type(exc).__name__, "mro": [c.__name__ for c in type(exc).__mro__],
                         "message": str(exc)}

    run("window", lambda: [key_of(e.record) for e in t.window().messages])
    run("count", lambda: t.message_count)
    run("history", lambda: [key_of(h.message(i)) for h in [t.history()] for i in range(h.message_count)])
    def append():
        t.append(make_record(f"{writer}.1", KiB))

    run("append", append)
    run("after_append", lambda: [key_of(e.record) for e in t.window().messages])
    def edit():
        t.edit(0, t.window(message_limit=1, message_before=1).messages[0].record)

    run("edit", edit)
    say("result " + json.dumps(out))
    try:
        t.close()
    except TranscriptError:
        pass


ROLES = {"replace": role_replace}

if __name__ == "__main__":
    run_role(ROLES)
