"""The fault campaign: real processes, real files, faults at random points.

Shared by the fault tests (``tests/faults/``) and the reliability benchmark
(``bench/bench_reliability.py``): each campaign below runs one category of fault some
number of times and returns a :class:`Tally` (faults injected, records acknowledged,
records lost, wrong data, crashes, hangs, and the problems seen). A test runs a small
campaign and asserts the tally is clean; the benchmark runs large ones and tabulates.

A record is acknowledged only once ``Transcript.append`` (``sync=True``) has returned
in the process that wrote it, which then says so on a pipe (and, where writers run
side by side, in an acknowledgement log written while it still holds the transcript's
write lock, so the log's order is the order the writes happened in). Every record is
self-describing: its content is a pure function of its id, revision and size, so any
line can be checked byte for byte against what was attempted.

Run as a script, this file is one of the child processes a campaign starts
(``python tests/faults/harness.py ROLE ARGS...``); the roles are at the bottom.

Scale: the campaigns take their sizes as arguments. The tests multiply theirs by
``BOUNDCTX_FAULT_ITERATIONS`` (a number, default 1), read once at import because the
suite's conftest clears ``BOUNDCTX_*`` variables around each test.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import random
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import msgspec

from boundctx import Transcript
from boundctx.errors import TranscriptChanged, TranscriptError, TranscriptLocked
from boundctx.transcript import encode_record

HARNESS = Path(__file__).resolve()
KiB, MiB = 1 << 10, 1 << 20
SCALE_ENV = "BOUNDCTX_FAULT_ITERATIONS"
SCALE = float(os.environ.get(SCALE_ENV) or 1)
#: How long any one wait on a child may take before the child counts as hung. Long
#: enough for a cold interpreter on a loaded 2-core machine; a hang is a failure, not
#: a slow run, so it is never tight.
CHILD_TIMEOUT = 120.0

Key = tuple  # (id, rev, size): what a line must hold, byte for byte

_write = os.write  # the die-mid-* roles patch os.write; the pipe keeps the real one
_decode = msgspec.json.Decoder().decode


def scaled(n: int) -> int:
    """``n`` iterations times the campaign scale (at least 1)."""
    return max(1, round(n * SCALE))


# -- records ----------------------------------------------------------------------


def payload(rid: str, rev: int, size: int) -> str:
    unit = f"{rid}/{rev};"
    return (unit * (size // len(unit) + 1))[:size]


def make_record(rid: str, size: int, rev: int = 0) -> dict:
    """The record with this id, revision and content size (1 KiB-5 MiB in the campaign)."""
    return {"type": "message", "id": rid, "rev": rev, "size": size,
            "message": {"role": "tool", "content": payload(rid, rev, size)}}


def line_of(key: Key) -> bytes:
    rid, rev, size = key
    return encode_record(make_record(rid, size, rev))


def key_of(record) -> Key | None:
    """The (id, rev, size) a record claims, or None if it is no campaign record."""
    if not isinstance(record, dict):
        return None
    rid, rev, size = record.get("id"), record.get("rev"), record.get("size")
    if not isinstance(rid, str) or type(rev) is not int or type(size) is not int:
        return None
    return rid, rev, size


def draw_size(rng: random.Random, *, big: float = 0.15, cap: int = 5 * MiB) -> int:
    """Mostly small records, some medium, a share ``big`` of 1 MiB-``cap``."""
    r = rng.random()
    if r < big and cap > MiB:
        return rng.randint(MiB, cap)
    if r < big + 0.25:
        return rng.randint(16 * KiB, min(MiB, cap))
    return rng.randint(KiB, 16 * KiB)


_ID_IN_PREFIX = re.compile(rb'^\{"type":"message","id":"([^"]*)","rev":(\d+),"size":(\d+),')


def check_entry(entry, content_limit: int | None) -> str | None:
    """Why a window entry is not exactly the campaign record it claims to be (None: it
    is). Under a content limit a cut content must be a prefix of the real one plus the
    projection's marker, counting the bytes left out."""
    if entry.corrupt is not None or entry.record is None:
        return f"message {entry.index} is not a record: {entry.corrupt}"
    key = key_of(entry.record)
    if key is None:
        return f"message {entry.index} is no campaign record: {str(entry.record)[:200]}"
    rid, rev, size = key
    want = make_record(rid, size, rev)
    got = entry.record
    if not entry.truncated:
        if got != want:
            return f"message {entry.index} ({rid} rev {rev}) differs from what was written"
        return None
    if content_limit is None:
        return f"message {entry.index} was cut with no content limit"
    content = got.get("message", {}).get("content")
    m = re.fullmatch(r"(.*) \[\.\.\. (\d+) more bytes not shown\]", content or "", re.S)
    full = want["message"]["content"]
    # The marker counts the line's bytes after the cut (the omitted text and the
    # closing bytes the projection writes back), so at least the omitted text.
    if (m is None or not full.startswith(m[1]) or not int(m[2]) >= len(full) - len(m[1]) > 0
            or {**got, "message": {}} != {**want, "message": {}}
            or got["message"].get("role") != "tool"):
        return f"message {entry.index} ({rid} rev {rev}) is a wrong projection: {str(got)[:200]}"
    return None


# -- reading the file as bytes, independently of boundctx ---------------------------


@dataclasses.dataclass
class RawScan:
    keys: list  # the campaign record of each complete line, in file order
    bad: list  # lines that are not a campaign record byte for byte
    torn: int  # bytes after the last newline


def scan_file(path: Path) -> RawScan:
    data = Path(path).read_bytes()
    *lines, tail = data.split(b"\n")
    keys, bad = [], []
    for n, line in enumerate(lines):
        try:
            key = key_of(_decode(line))
        except msgspec.DecodeError:
            key = None
        if key is None or line_of(key) != line + b"\n":
            bad.append(f"line {n} ({len(line)} bytes) is no campaign record: {line[:120]!r}")
        else:
            keys.append(key)
    return RawScan(keys, bad, len(tail))


def torn_side_files(path: Path) -> list[Path]:
    return sorted(Path(path).parent.glob(Path(path).name + ".torn-*"))


def temp_copies(folder: Path) -> list[Path]:
    """Temporary copies a rewrite leaves beside the transcript when killed mid-way."""
    return sorted(Path(folder).glob(".*rewrite-*"))  # ".NAME.rewrite-<hex>" (older: ".rewrite-<hex>")


def side_file_problem(side: Path, attempted: dict) -> str | None:
    """A torn tail moved aside must be the start of a record that was being written."""
    tail = side.read_bytes()
    if not tail:
        return None
    m = _ID_IN_PREFIX.match(tail)
    if m:
        key = (m[1].decode(), int(m[2]), int(m[3]))
        if key in attempted.values() and line_of(key).startswith(tail):
            return None
    elif any(line_of(k).startswith(tail) for k in attempted.values()):
        return None  # shorter than its id: it still has to begin a real line
    return f"{side.name} ({len(tail)} bytes) is not the start of any attempted record"


# -- reading the file through boundctx ------------------------------------------------


def check_reads(path: Path, expected: list, *, torn: int) -> tuple[list[str], bool]:
    """Read ``path`` the ways a caller does and compare with ``expected`` (keys in file
    order): the whole window, renderer-sized pages back to message 0, the history.

    Returns (problems, history_refused): ``history_refused`` when the history was
    refused only because of a torn tail (``torn`` > 0) with TranscriptChanged.
    """
    problems: list[str] = []
    refused = False
    try:
        with Transcript.open(path) as t:
            w = t.window()
            got = [key_of(e.record) for e in w.messages]
            if got != list(expected):
                problems.append(f"window() shows {_diff(got, expected)}")
            problems += [p for e in w.messages if (p := check_entry(e, None))]
            if t.torn_bytes != torn:
                problems.append(f"torn_bytes is {t.torn_bytes}, the file has {torn}")
            before, shown = None, []
            while True:
                page = t.window(message_before=before, message_limit=3, content_limit=4096)
                problems += [p for e in page.messages if (p := check_entry(e, 4096))]
                shown[:0] = [key_of(e.record) for e in page.messages]
                if page.message_start == 0:
                    break
                before = page.message_start
            if shown != list(expected):
                problems.append(f"paging back to message 0 shows {_diff(shown, expected)}")
            try:
                h = t.history()
            except TranscriptChanged:
                if not torn:
                    raise
                refused = True
            else:
                hist = [key_of(h.message(i)) for i in range(h.message_count)]
                if hist != list(expected):
                    problems.append(f"history() holds {_diff(hist, expected)}")
    except Exception as exc:  # any error here is a finding: the reads must not raise
        problems.append(f"reading raised {type(exc).__name__}: {exc}")
    return problems, refused


def follow_up_append(path: Path, key: Key) -> list[str]:
    """After a fault, the next append must work: the torn tail moved aside, the record
    last, and the history readable again."""
    problems = []
    try:
        with Transcript.open(path) as t:
            count = t.message_count
            t.append(make_record(key[0], key[2], key[1]))
            if t.torn_bytes:
                problems.append(f"{t.torn_bytes} torn bytes left after the follow-up append")
            w = t.window(message_limit=1)
            if w.message_count != count + 1 or key_of(w.messages[0].record) != key:
                problems.append("the follow-up append is not the last message")
            t.history()
    except Exception as exc:
        problems.append(f"the follow-up append failed: {type(exc).__name__}: {exc}")
    return problems


def _diff(got: list, want: list) -> str:
    got, want = list(got), list(want)
    missing = [k[0] for k in want if k not in got]
    extra = [k if k is None else k[0] for k in got if k not in want]
    return (f"{len(got)} messages where {len(want)} were expected; missing {missing[:8]}, "
            f"unexpected {extra[:8]}, same order: {[k for k in got if k in want] == [k for k in want if k in got]}")


# -- the tally --------------------------------------------------------------------


@dataclasses.dataclass
class Tally:
    """What one campaign did and found."""

    category: str
    faults: int = 0  # faults injected
    acknowledged: int = 0  # records whose append (or rewrite) returned to its writer
    lost: int = 0  # acknowledged records not in the file, or not exactly once
    wrong: int = 0  # lines or reads that are not what was written (torn, altered, never attempted)
    crashes: int = 0  # a process that died of anything but our SIGKILL, or a read that raised
    hangs: int = 0  # a wait on a process that ran out of time
    notes: dict = dataclasses.field(default_factory=dict)
    problems: list = dataclasses.field(default_factory=list)
    seconds: float = 0.0

    def problem(self, text: str) -> None:
        if len(self.problems) < 40:
            self.problems.append(text)

    def child_failed(self, exc: Exception, where: str = "") -> None:
        """Count a child that hung or died (ChildHung, ChildDied) as a problem at ``where``."""
        self.hangs += isinstance(exc, ChildHung)
        self.crashes += isinstance(exc, ChildDied)
        self.problem(f"{where}: {exc}" if where else str(exc))

    def note(self, name: str, n: int = 1) -> None:
        self.notes[name] = self.notes.get(name, 0) + n

    @property
    def clean(self) -> bool:
        return not (self.lost or self.wrong or self.crashes or self.hangs or self.problems)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    def merge(self, other: "Tally") -> None:
        for f in ("faults", "acknowledged", "lost", "wrong", "crashes", "hangs", "seconds"):
            setattr(self, f, getattr(self, f) + getattr(other, f))
        for k, v in other.notes.items():
            self.note(k, v)
        for p in other.problems:
            self.problem(p)


# -- child processes --------------------------------------------------------------


class ChildHung(Exception):
    """A child process neither spoke nor exited in time."""


class Child:
    """One harness role in its own Python process, read line by line with deadlines."""

    def __init__(self, role: str, *args, cwd: Path | None = None) -> None:
        self.role = role
        self._err = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, str(HARNESS), role, *map(str, args)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err, bufsize=0, cwd=cwd)
        self._buf = b""
        self.eof = False

    def fileno(self) -> int:
        return self.proc.stdout.fileno()

    def _fill(self) -> None:
        chunk = os.read(self.fileno(), 1 << 16)
        if chunk:
            self._buf += chunk
        else:
            self.eof = True

    def pending(self) -> list[str]:
        """Complete lines already read; a partial last line at EOF (a death mid-print)
        is dropped."""
        *lines, self._buf = self._buf.split(b"\n")
        if self.eof:
            self._buf = b""
        return [line.decode() for line in lines]

    def readline(self, timeout: float = CHILD_TIMEOUT) -> str | None:
        """The next line, or None at EOF."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf and not self.eof:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChildHung(f"{self.role} (pid {self.proc.pid}) said nothing for {timeout:.0f} s"
                                f"{self.stderr_tail()}")
            if select.select([self.fileno()], [], [], left)[0]:
                self._fill()
        if b"\n" not in self._buf:
            self._buf = b""
            return None
        line, self._buf = self._buf.split(b"\n", 1)
        return line.decode()

    def expect(self, word: str, timeout: float = CHILD_TIMEOUT) -> str:
        line = self.readline(timeout)
        if line is None or not line.startswith(word):
            raise ChildDied(f"{self.role} said {line!r} where {word!r} was expected{self.stderr_tail()}")
        return line

    def drain(self, timeout: float = CHILD_TIMEOUT) -> list[str]:
        """Every line until EOF (call after the child exits or is killed)."""
        lines = []
        while (line := self.readline(timeout)) is not None:
            lines.append(line)
        return lines

    def send(self, text: str) -> None:
        self.proc.stdin.write(text.encode() + b"\n")
        self.proc.stdin.flush()

    def end_input(self) -> None:
        if not self.proc.stdin.closed:
            self.proc.stdin.close()

    def kill(self) -> None:
        """SIGKILL this child (by its pid: it is ours)."""
        if self.proc.poll() is None:
            self.proc.kill()

    def wait(self, timeout: float = CHILD_TIMEOUT) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self.proc.wait(30)
            raise ChildHung(f"{self.role} (pid {self.proc.pid}) did not exit within {timeout:.0f} s"
                            f"{self.stderr_tail()}") from None

    def stderr_tail(self, n: int = 1500) -> str:
        try:
            self._err.seek(0)
            text = self._err.read().decode(errors="replace")
        except (OSError, ValueError):
            return ""
        return f"; its stderr: {text[-n:]}" if text.strip() else ""

    def close(self) -> None:
        self.kill()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            pass
        for f in (self.proc.stdin, self.proc.stdout, self._err):
            try:
                f.close()
            except OSError:
                pass

    def __enter__(self) -> "Child":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class ChildDied(Exception):
    """A child said something other than what its role promises (or nothing)."""


def pump(children: list[Child], timeout: float = CHILD_TIMEOUT) -> list[tuple[Child, str]]:
    """Wait until at least one child has a line or reaches EOF; return every complete
    line now available, as (child, line)."""
    open_ = [c for c in children if not c.eof]
    out = [(c, line) for c in children for line in c.pending()]
    if out or not open_:
        return out
    ready = select.select(open_, [], [], timeout)[0]
    if not ready:
        raise ChildHung(f"none of {[c.role for c in open_]} said anything for {timeout:.0f} s"
                        + "".join(c.stderr_tail(500) for c in open_))
    for c in ready:
        c._fill()
    return [(c, line) for c in children for line in c.pending()]


def _settle(tally: Tally, child: Child, *, killed: bool) -> None:
    """Count how a child ended: our SIGKILL is the fault, anything else unexpected is a
    crash (an uncaught exception, a signal of its own)."""
    rc = child.wait()
    if rc == (-signal.SIGKILL if killed else 0):
        return
    if killed and rc == 0:
        return  # it finished before the kill landed
    tally.crashes += 1
    tally.problem(f"{child.role} exited with {rc}{child.stderr_tail()}")


def _fresh_file(path: Path) -> None:
    """Remove a transcript and everything beside it (sidecar, lock, torn tails)."""
    for p in Path(path).parent.glob(Path(path).name + "*"):
        p.unlink()


# -- campaign 1: kill -9 of a writer -----------------------------------------------


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
            _fresh_file(path)
            attempted, order, acked = {}, [], set()
        # Where the kill lands: after some acknowledgements (anywhere in the next
        # append or between appends); as a big record's append begins; or partway
        # through a write, at a random byte (the writer kills itself there).
        mode = rng.choice(["acks", "acks", "big", "tear"])
        child = Child("writer", path, rng.randrange(2**32), big, f"k{k}", int(mode == "tear"))
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
            _settle(tally, child, killed=True)
        except (ChildHung, ChildDied) as exc:
            tally.child_failed(exc, f"kill {k}")
            continue
        finally:
            child.close()
        _judge_sequential(tally, path, attempted, order, acked, f"kill {k}")
        if _judge_reads_and_recover(tally, path, attempted, order, acked, f"kill {k}", f"follow{k}.0"):
            tally.acknowledged += 1
    tally.seconds = time.monotonic() - started
    return tally


def _judge_sequential(tally: Tally, path: Path, attempted: dict, order: list, acked: set, where: str) -> RawScan:
    """One writer at a time: the file is a subsequence of the attempts, in order,
    holding every acknowledged one exactly once."""
    scan = _judge_disk(tally, path, attempted, acked, where)
    if scan.torn:
        tally.note("kills that left a torn tail")
    ids = [k[0] for k in scan.keys]
    position = {rid: i for i, rid in enumerate(order)}
    seq = [position.get(rid, -1) for rid in ids]
    if seq != sorted(seq) or len(set(ids)) != len(ids):
        tally.wrong += 1
        tally.problem(f"{where}: records are not in the order they were appended")
    return scan


def _judge_reads_and_recover(tally: Tally, path: Path, attempted: dict, order: list, acked: set,
                             where: str, follow_id: str) -> bool:
    """Reads show the file; the next append works; returns whether it was acknowledged."""
    scan = scan_file(path)
    problems, refused = check_reads(path, scan.keys, torn=scan.torn)
    if refused:
        tally.note("history() refused a torn tail left by a dead writer")
    for p in problems:
        tally.crashes += p.startswith("reading raised")
        tally.wrong += not p.startswith("reading raised")
        tally.problem(f"{where}: {p}")
    key = (follow_id, 0, KiB)
    attempted[follow_id] = key
    order.append(follow_id)
    problems = follow_up_append(path, key)
    for p in problems:
        tally.crashes += 1
        tally.problem(f"{where}: {p}")
    for side in torn_side_files(path):
        if (p := side_file_problem(side, attempted)):
            tally.wrong += 1
            tally.problem(f"{where}: {p}")
    if not problems:
        acked.add(follow_id)
    return not problems


# -- campaign 2: concurrent appenders, some killed ---------------------------------


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
    _fresh_file(path)
    Transcript.open(path, create=True).close()
    attempted: dict[str, Key] = {}
    acked: set[str] = set()
    names = iter(f"c{i}" for i in range(10**6))
    live: list[Child] = []

    def spawn(n: int) -> Child:
        c = Child("appender", path, next(names), n, rng.randrange(2**32), "-")
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
                _settle(tally, child, killed=False)
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
                _settle(tally, victim, killed=True)
                victim.close()
                spawn(records // 2 + 1).send("go")  # its "ready" is read with the others' lines
    except (ChildHung, ChildDied) as exc:
        tally.child_failed(exc)
    finally:
        for c in live:
            c.close()
    scan = scan_file(path)
    ids = [k[0] for k in scan.keys]
    for b in scan.bad:
        tally.wrong += 1
        tally.problem(b)
    for rid in acked:
        if ids.count(rid) != 1:
            tally.lost += 1
            tally.problem(f"acknowledged {rid} appears {ids.count(rid)} times")
    for key in scan.keys:
        if attempted.get(key[0]) != key:
            tally.wrong += 1
            tally.problem(f"{key} was never attempted")
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
    _judge_reads_and_recover(tally, path, attempted, list(attempted), acked, "concurrent", "follow.0")
    tally.seconds = time.monotonic() - started
    return tally


# -- campaign 3: kill -9 mid-rewrite -----------------------------------------------


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


def _seed_file(path: Path, rng: random.Random, n: int, *, big: float, prefix: str) -> list:
    _fresh_file(path)
    keys = []
    with Transcript.open(path, create=True) as t:
        for i in range(n):
            key = (f"{prefix}.{i}", 0, draw_size(rng, big=big))
            t.append(make_record(key[0], key[2]), sync=False)
            keys.append(key)
    with open(path, "rb") as f:
        os.fsync(f.fileno())
    return keys


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
            state = _seed_file(path, rng, 30, big=0.1, prefix=f"s{k}")
        child = Child("rewriter", path, rng.randrange(2**32), 10**6, "-")
        inflight = None
        try:
            child.expect("ready")
            child.send("go")
            target = rng.randint(0, 2)
            acks = 0
            while acks < target:
                line = child.readline()
                if line is None:
                    break
                word, body = line.split(" ", 1)
                if word == "try":
                    inflight = json.loads(body)
                elif word == "ack":
                    state = [tuple(k_) for k_ in json.loads(body)["after"]]
                    inflight = None
                    acks += 1
                    tally.acknowledged += 1
            time.sleep(rng.uniform(0, 0.05))  # the random point the kill lands at
            child.kill()
            tally.faults += 1
            for line in child.drain():
                word, body = line.split(" ", 1)
                if word == "try":
                    inflight = json.loads(body)
                elif word == "ack":
                    state = [tuple(k_) for k_ in json.loads(body)["after"]]
                    inflight = None
                    tally.acknowledged += 1
            _settle(tally, child, killed=True)
        except (ChildHung, ChildDied) as exc:
            tally.child_failed(exc, f"rewrite kill {k}")
            continue
        finally:
            child.close()
        scan = scan_file(path)
        for b in scan.bad:
            tally.wrong += 1
            tally.problem(f"rewrite kill {k}: {b}")
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
                          f"{inflight and inflight['op']}: {_diff(scan.keys, state)}")
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


# -- campaign 4: a reader paging while others append and rewrite ----------------------


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
                                f"{_diff(after, state)}")
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
    initial = _seed_file(path, rng, 24, big=0.05, prefix="seed")
    children: list[Child] = []
    reader = Child("reader", path, rng.randrange(2**32))
    result = None
    try:
        reader.expect("ready")
        writers = [Child("appender", path, f"a{i}", records, rng.randrange(2**32), acklog)
                   for i in range(appenders)]
        writers.append(Child("rewriter", path, rng.randrange(2**32), rewrites, acklog))
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
                _settle(tally, child, killed=False)
        reader.end_input()  # the reader stops at its next page
        for line in reader.drain():
            if line.startswith("result "):
                result = json.loads(line[7:])
        _settle(tally, reader, killed=False)
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
    for b in scan.bad:
        tally.wrong += 1
        tally.problem(b)
    if scan.keys != state:
        lost = [k for k in state if k not in scan.keys]
        tally.lost += len(lost)
        tally.wrong += len(scan.keys) - (len(state) - len(lost))
        tally.problem(f"the file is not what the acknowledgements say: {_diff(scan.keys, state)}")
    problems, _ = check_reads(path, scan.keys, torn=scan.torn)
    for p in problems:
        tally.wrong += 1
        tally.problem(p)
    tally.seconds = time.monotonic() - started
    return tally


# -- campaign 5: disk full ------------------------------------------------------------


def mount_small_tmpfs(folder: Path, size: str = "2m") -> str | None:
    """Mount a tmpfs of ``size`` on ``folder``; None when done, else why it cannot be."""
    if not (hasattr(os, "geteuid") and os.geteuid() == 0):
        return "mounting a tmpfs needs root (run as root, e.g. in a container that allows mounts)"
    if shutil.which("mount") is None:
        return "no mount command"
    try:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"mount -t tmpfs failed to run: {exc}"
    if r.returncode:
        return (f"mount -t tmpfs failed ({(r.stderr or r.stdout).strip()}): this container "
                "forbids mounts (needs CAP_SYS_ADMIN)")
    why = resize_tmpfs(folder, size)  # the campaign frees space by growing it
    if why:
        unmount(folder)
        return f"the tmpfs cannot be resized ({why})"
    return None


def resize_tmpfs(folder: Path, size: str) -> str | None:
    """Grow (or shrink) the tmpfs on ``folder``; None when done, else why not."""
    r = subprocess.run(["mount", "-o", f"remount,size={size}", str(folder)],
                       capture_output=True, text=True, timeout=30)
    return (r.stderr or r.stdout).strip() or "remount failed" if r.returncode else None


def unmount(folder: Path) -> None:
    r = subprocess.run(["umount", str(folder)], capture_output=True, timeout=30)
    if r.returncode:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True, timeout=30)


def disk_full(mount: Path, *, rounds: int, seed: int) -> Tally:
    """On a 2 MiB tmpfs (mounted by :func:`mount_small_tmpfs`) partly filled by a
    ballast file, a process appends records of 1 KiB-5 MiB until the disk is full.

    - The failing append must raise an OSError (a clear one: ENOSPC, or a short write
      that says the disk may be full) and lose nothing acknowledged; a second try
      fails the same way.
    - Space is freed (the ballast deleted and the tmpfs grown to 8 MiB: a short write
      leaves a torn tail, and moving it aside takes as much room again) and the same
      open Transcript appends again: the torn tail moved aside as the start of the
      record that failed, reads showing exactly the file.
    - The disk is filled again and an edit (a full-history rewrite, which needs room
      for a whole copy) must fail with an OSError, leaving the transcript byte for
      byte as it was and no temporary copy; with room again, the same edit works.
    """
    tally = Tally("disk full (2 MiB tmpfs)")
    rng = random.Random(seed)
    started = time.monotonic()
    mount = Path(mount)
    path, ballast = mount / "t.jsonl", mount / "ballast"
    for r in range(rounds):
        for p in mount.iterdir():
            p.unlink()
        if (why := resize_tmpfs(mount, "2m")):
            tally.problem(f"round {r}: cannot shrink the tmpfs back to 2 MiB: {why}")
            break
        ballast.write_bytes(b"\0" * rng.randint(0, 1536 * KiB))
        attempted: dict[str, Key] = {}
        acked: set[str] = set()
        child = Child("fill", path, rng.randrange(2**32), f"f{r}")

        def take(line: str) -> dict | None:
            """Note a try or an ack; return an error's details."""
            word, body = line.split(" ", 1)
            if word == "try":
                rid, size = body.split()
                attempted[rid] = (rid, 0, int(size))
            elif word == "ack":
                acked.add(body.split()[0])
                tally.acknowledged += 1
            elif word == "error":
                return json.loads(body)
            return None

        def rewrite() -> dict | None:
            """Ask for an edit of message 0; return the error, or None when it worked."""
            child.send("rewrite")
            _, outcome, body = child.expect("rewrite").split(" ", 2)
            if outcome == "error":
                return json.loads(body)
            if json.loads(body):  # message 0 is its next revision now, 2 KiB long
                rid, rev, _ = json.loads(body)
                attempted[rid] = (rid, rev + 1, 2 * KiB)
            return None

        try:
            child.expect("ready")
            errors = []
            while len(errors) < 2:
                line = child.readline()
                if line is None:
                    raise ChildDied(f"fill ended early{child.stderr_tail()}")
                if (e := take(line)):
                    errors.append(e)
            tally.faults += 1
            for e in errors:
                if "OSError" not in e["mro"]:
                    tally.wrong += 1
                    tally.problem(f"round {r}: a full disk raised {e['type']} (not an OSError): {e['message']}")
                elif not (e["errno"] == errno.ENOSPC or "full" in e["message"]):
                    tally.problem(f"round {r}: the error does not say the disk is full: {e['message']}")
                tally.note(f"full-disk errors: {e['type']} errno={e['errno']}")
            full = _judge_disk(tally, path, attempted, acked, f"round {r}, disk full")

            # Free space; the same open Transcript appends again.
            ballast.unlink()
            vfs = os.statvfs(mount)
            if full.torn and vfs.f_bavail * vfs.f_frsize < full.torn + 64 * KiB:
                # Deleting the ballast alone would not do: the torn tail is copied to a
                # side file before it is cut off, so appends fail until that fits too.
                tally.note("rounds where the freed ballast was too small to move the torn tail aside")
            if (why := resize_tmpfs(mount, "8m")):
                raise ChildDied(f"cannot grow the tmpfs: {why}")
            for _ in range(3):
                child.send("append")
                while (line := child.readline()) is not None and not line.startswith(("ack", "error")):
                    take(line)
                if line is None or (e := take(line)):
                    tally.crashes += 1
                    tally.problem(f"round {r}: after freeing space the append failed: {line}")
            scan = _judge_disk(tally, path, attempted, acked, f"round {r}, after freeing")
            if scan.torn:
                tally.wrong += 1
                tally.problem(f"round {r}: {scan.torn} torn bytes left after appending on a freed disk")

            # Full again: a rewrite must fail cleanly, then work once there is room.
            vfs = os.statvfs(mount)
            try:  # every free block: even the smallest copy cannot fit
                Path(str(ballast) + "2").write_bytes(b"\0" * (vfs.f_bavail * vfs.f_frsize))
            except OSError:
                pass
            before = path.read_bytes()
            e = rewrite()
            tally.faults += 1
            if e is None:
                tally.note("full-disk rewrites that fitted")
            else:
                tally.note(f"full-disk rewrites refused: {e['type']} errno={e['errno']}")
                if "OSError" not in e["mro"]:
                    tally.wrong += 1
                    tally.problem(f"round {r}: a rewrite on a full disk raised {e['type']}: {e['message']}")
                if path.read_bytes() != before:
                    tally.wrong += 1
                    tally.problem(f"round {r}: a rewrite that failed changed the transcript")
            if temp_copies(mount):
                tally.wrong += 1
                tally.problem(f"round {r}: a rewrite on a full disk left {len(temp_copies(mount))} temporary copies")
            Path(str(ballast) + "2").unlink()
            if (e := rewrite()) is not None:
                tally.crashes += 1
                tally.problem(f"round {r}: with room again the rewrite failed: {e['type']}: {e['message']}")
            else:
                tally.acknowledged += 1
            child.end_input()
            for line in child.drain():
                take(line)
            _settle(tally, child, killed=False)
        except (ChildHung, ChildDied) as exc:
            tally.child_failed(exc, f"round {r}")
            continue
        finally:
            child.close()
        scan = _judge_disk(tally, path, attempted, acked, f"round {r}, at the end")
        problems, _ = check_reads(path, scan.keys, torn=scan.torn)
        for p in problems:
            tally.wrong += 1
            tally.problem(f"round {r}: {p}")
        sides = torn_side_files(path)
        for side in sides:
            if (p := side_file_problem(side, attempted)):
                tally.wrong += 1
                tally.problem(f"round {r}: {p}")
        if len(sides) > bool(full.torn):
            # Each append that failed while moving the tail aside left its side file,
            # empty or holding part of the tail, beside the one that succeeded.
            tally.note("extra torn side files left by appends that failed on the full disk",
                       len(sides) - bool(full.torn))
    tally.seconds = time.monotonic() - started
    return tally


def _judge_disk(tally: Tally, path: Path, attempted: dict, acked: set, where: str) -> RawScan:
    """Every acknowledged record present exactly once, nothing that was never attempted,
    no damaged line (order is not judged: see _judge_sequential)."""
    scan = scan_file(path)
    ids = [k[0] for k in scan.keys]
    for b in scan.bad:
        tally.wrong += 1
        tally.problem(f"{where}: {b}")
    for rid in acked:
        if ids.count(rid) != 1:
            tally.lost += 1
            tally.problem(f"{where}: acknowledged {rid} appears {ids.count(rid)} times")
    for key in scan.keys:
        if attempted.get(key[0]) != key:
            tally.wrong += 1
            tally.problem(f"{where}: {key} was never attempted")
    return scan


# -- campaign 6: the path replaced while a Transcript is open ---------------------------

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
    # "removed": nothing at the path any more


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
            mine = _seed_file(path, rng, 3, big=0, prefix=f"mine{n}")
            theirs = _seed_file(other, rng, 2, big=0, prefix=f"theirs{n}")
            child = Child("replace", path, f"x{n}")
            try:
                child.expect("ready")
                tally.acknowledged += 1  # the append it made before the replacement
                mine.append((f"x{n}.0", 0, KiB))
                _replace_path(kind, path, other, aside)
                tally.faults += 1
                child.send("go")
                line = child.expect("result")
                _settle(tally, child, killed=False)
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
                tally.problem(f"{kind}: {op} shows {_diff(got, want)} (old file: {got == mine})")
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


# ======================================================================================
# Child roles: each prints "ready", then protocol lines on stdout (one os.write each, so
# a SIGKILL never leaves half a line that is taken for a whole one).
# ======================================================================================


def say(text: str) -> None:
    _write(1, (text + "\n").encode())


def _log(fd: int | None, text: str) -> None:
    """An acknowledgement in the shared log, synced before the writer lets go of the lock."""
    if fd is not None:
        _write(fd, (text + "\n").encode())
        os.fsync(fd)


def _open_log(name: str) -> int | None:
    return None if name == "-" else os.open(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


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
            return _write(fd, data)
        _write(fd, bytes(memoryview(data)[: rng.randint(1, len(data) - 1)]))
        os.kill(os.getpid(), signal.SIGKILL)
    return write


def _backoff(rng: random.Random, deadline: float, what: str) -> None:
    if time.monotonic() > deadline:
        raise SystemExit(f"starved: {what} for {CHILD_TIMEOUT / 2:.0f} s")
    time.sleep(rng.uniform(0.0005, 0.004))  # retry spacing after a refusal, not a sync


def role_appender(path: str, writer: str, count: str, seed: str, acklog: str) -> None:
    """Append ``count`` records, each with its own open/append/close; retry when the
    write lock refuses. The acknowledgement goes to the log while the lock is held."""
    rng = random.Random(int(seed))
    log = _open_log(acklog)
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
                _backoff(rng, deadline, "the write lock")
                continue
            # The lock is held until close, so this log line is in lock order.
            _log(log, f"A {rid} 0 {size}")
            say(f"ack {rid} {size}")
            t.close()
            break
    say(f"done {refused}")


def role_rewriter(path: str, seed: str, count: str, acklog: str) -> None:
    """Edit, delete or truncate one message ``count`` times (each a full-history
    rewrite), retrying when the file changed under it or the lock is taken. Prints
    each operation before it starts and the resulting file after it succeeded."""
    rng = random.Random(int(seed))
    log = _open_log(acklog)
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
                _backoff(rng, deadline, "rewrites refused")
                continue
            # Still the writer (the lock is held until close): the file is ours to report.
            spec["after"] = [key_of(e.record) for e in t.window(content_limit=64).messages]
            _log(log, "S " + json.dumps(spec))
            say("ack " + json.dumps(spec))
            t.close()
            break
        # Think time, as a user between edits: without it the rewriter holds the lock
        # nearly always and the appenders only ever append between its rewrites.
        time.sleep(rng.uniform(0, 0.02))
    say(f"done {refused}")


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


def role_fill(path: str, seed: str, writer: str) -> None:
    """Append until the disk is full, and once more; then obey stdin: "append" (1 KiB),
    "rewrite" (edit message 0 into its next revision, 2 KiB); close at EOF."""
    rng = random.Random(int(seed))
    t = Transcript.open(path, create=True)
    say("ready")

    def failure(exc: BaseException) -> str:
        return json.dumps({"type": type(exc).__name__, "mro": [c.__name__ for c in type(exc).__mro__],
                           "errno": getattr(exc, "errno", None), "message": str(exc)})

    def attempt(rid: str, size: int) -> bool:
        say(f"try {rid} {size}")
        try:
            t.append(make_record(rid, size))
        except Exception as exc:
            say("error " + failure(exc))
            return False
        say(f"ack {rid} {size}")
        return True

    seq = 0
    while attempt(f"{writer}.{seq}", draw_size(rng, big=0.1)):
        seq += 1
    attempt(f"{writer}.{seq + 1}", KiB)
    extra = 0
    for command in sys.stdin:
        if command.strip() == "append":
            attempt(f"{writer}.after{extra}", KiB)
            extra += 1
        elif command.strip() == "rewrite":
            try:
                first = t.window(message_limit=1, message_before=1).messages[0] if t.message_count else None
                key = first and key_of(first.record)
                if first is not None:
                    t.edit(first, make_record(key[0], 2 * KiB, key[1] + 1))
                say("rewrite ok " + json.dumps(key))
            except Exception as exc:
                say("rewrite error " + failure(exc))
    t.close()


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


def role_die_mid_append(path: str) -> None:
    """Append one record, then die (SIGKILL, by itself) halfway through writing the next:
    the deterministic version of a kill mid-write."""
    t = Transcript.open(path, create=True)
    t.append(make_record("d.0", KiB))
    say("ack d.0")

    def half_then_die(fd, data):
        _write(fd, bytes(data)[: len(data) // 2])
        os.kill(os.getpid(), signal.SIGKILL)

    os.write = half_then_die
    t.append(make_record("d.1", 64 * KiB))


def role_die_mid_rewrite(path: str) -> None:
    """Start a rewrite and die (SIGKILL, by itself) after the temporary copy is written,
    before it is renamed over the transcript."""
    t = Transcript.open(path)
    say("ready")
    os.replace = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
    t.delete(0)


ROLES = {
    "writer": role_writer, "appender": role_appender, "rewriter": role_rewriter,
    "reader": role_reader, "fill": role_fill, "replace": role_replace,
    "die-mid-append": role_die_mid_append, "die-mid-rewrite": role_die_mid_rewrite,
}

if __name__ == "__main__":
    ROLES[sys.argv[1]](*sys.argv[2:])
