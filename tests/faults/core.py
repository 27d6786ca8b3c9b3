"""What every fault campaign shares: records, the judges, the tally, child processes.

The campaigns (one module each: ``kill_writer``, ``concurrent_appenders``,
``rewrite_kill``, ``paging``, ``disk_full``, ``path_replacement``, and ``odd_records``
and ``server_edges``) are shared by the fault tests (``tests/faults/``) and the
reliability benchmark (``bench/bench_reliability.py``): each runs one category of fault
some number of times and returns a :class:`Tally` (faults injected, records
acknowledged, records lost, wrong data, crashes, hangs, and the problems seen). A test
runs a small campaign and asserts the tally is clean; the benchmark runs large ones and
tabulates.

A record is acknowledged only once ``Transcript.append`` (``sync=True``) has returned
in the process that wrote it, which then says so on a pipe (and, where writers run
side by side, in an acknowledgement log written while it still holds the transcript's
write lock, so the log's order is the order the writes happened in). Every record is
self-describing: its content is a pure function of its id, revision and size, so any
line can be checked byte for byte against what was attempted.

A campaign's child processes run its own module: ``python -m tests.faults.<campaign>
ROLE ARGS...`` (:class:`Child`); the roles are at the bottom of each campaign module,
and what they share is at the bottom of this one.

Scale: the campaigns take their sizes as arguments. The tests multiply theirs by
``BOUNDCTX_FAULT_ITERATIONS`` (a number, default 1), read once at import because the
suite's conftest clears ``BOUNDCTX_*`` variables around each test.
"""

from __future__ import annotations

import dataclasses
import os
import random
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import msgspec

from boundctx import Transcript
from boundctx.errors import TranscriptChanged
from boundctx.transcript import encode_record

from tests._support import importable_env

KiB, MiB = 1 << 10, 1 << 20
SCALE_ENV = "BOUNDCTX_FAULT_ITERATIONS"
SCALE = float(os.environ.get(SCALE_ENV) or 1)
#: How long any one wait on a child may take before the child counts as hung. Long
#: enough for a cold interpreter on a loaded 2-core machine; a hang is a failure, not
#: a slow run, so it is never tight.
CHILD_TIMEOUT = 120.0

Key = tuple  # (id, rev, size): what a line must hold, byte for byte

real_write = os.write  # the die-mid-* roles patch os.write; the pipe keeps the real one
_decode = msgspec.json.Decoder().decode


def scaled(n: int) -> int:
    """``n`` iterations times the campaign scale (at least 1)."""
    return max(1, round(n * SCALE))


# -- records ------------------------------------------------------------------------------


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


# -- reading the file as bytes, independently of boundctx ---------------------------------


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


# -- reading the file through boundctx ----------------------------------------------------


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
                problems.append(f"window() shows {diff_keys(got, expected)}")
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
                problems.append(f"paging back to message 0 shows {diff_keys(shown, expected)}")
            try:
                h = t.history()
            except TranscriptChanged:
                if not torn:
                    raise
                refused = True
            else:
                hist = [key_of(h.message(i)) for i in range(h.message_count)]
                if hist != list(expected):
                    problems.append(f"history() holds {diff_keys(hist, expected)}")
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


def diff_keys(got: list, want: list) -> str:
    got, want = list(got), list(want)
    missing = [k[0] for k in want if k not in got]
    extra = [k if k is None else k[0] for k in got if k not in want]
    return (f"{len(got)} messages where {len(want)} were expected; missing {missing[:8]}, "
            f"unexpected {extra[:8]}, same order: {[k for k in got if k in want] == [k for k in want if k in got]}")


# -- the tally ----------------------------------------------------------------------------


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


def assert_clean(tally: Tally) -> None:
    """The tests' verdict on a campaign: nothing lost, wrong, crashed or hung."""
    assert tally.clean, "\n".join([f"{tally.category}: lost {tally.lost}, wrong {tally.wrong}, "
                                   f"crashes {tally.crashes}, hangs {tally.hangs}", *tally.problems])


# -- judging a file -------------------------------------------------------------------


def bad_lines(tally: Tally, scan: RawScan, where: str = "") -> None:
    """Count every line of ``scan`` that is not a campaign record byte for byte."""
    for b in scan.bad:
        tally.wrong += 1
        tally.problem(f"{where}: {b}" if where else b)


def check_acknowledged(tally: Tally, scan: RawScan, attempted: dict, acked: set, where: str = "") -> None:
    """Every acknowledged record in the file exactly once, nothing that was never
    attempted, no damaged line (order is not judged: each campaign judges its own)."""
    bad_lines(tally, scan, where)
    at = f"{where}: " if where else ""
    ids = [k[0] for k in scan.keys]
    for rid in acked:
        if ids.count(rid) != 1:
            tally.lost += 1
            tally.problem(f"{at}acknowledged {rid} appears {ids.count(rid)} times")
    for key in scan.keys:
        if attempted.get(key[0]) != key:
            tally.wrong += 1
            tally.problem(f"{at}{key} was never attempted")


def judge_file(tally: Tally, path: Path, attempted: dict, acked: set, where: str = "") -> RawScan:
    """Scan ``path`` and :func:`check_acknowledged` it; returns the scan."""
    scan = scan_file(path)
    check_acknowledged(tally, scan, attempted, acked, where)
    return scan


def judge_reads_and_recover(tally: Tally, path: Path, attempted: dict, order: list, acked: set,
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


# -- transcripts to start from ------------------------------------------------------------


def fresh_file(path: Path) -> None:
    """Remove a transcript and everything beside it (sidecar, lock, torn tails)."""
    for p in Path(path).parent.glob(Path(path).name + "*"):
        p.unlink()


def seed_file(path: Path, rng: random.Random, n: int, *, big: float, prefix: str) -> list:
    fresh_file(path)
    keys = []
    with Transcript.open(path, create=True) as t:
        for i in range(n):
            key = (f"{prefix}.{i}", 0, draw_size(rng, big=big))
            t.append(make_record(key[0], key[2]), sync=False)
            keys.append(key)
    with open(path, "rb") as f:
        os.fsync(f.fileno())
    return keys


# -- child processes -----------------------------------------------------------------


class ChildHung(Exception):
    """A child process neither spoke nor exited in time."""


class Child:
    """One role of a campaign module in its own Python process (``python -m MODULE ROLE
    ARGS...``, the repository root on its path), read line by line with deadlines."""

    def __init__(self, role: str, *args, module: str, cwd: Path | None = None) -> None:
        self.role = role
        self._err = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, role, *map(str, args)], env=importable_env(),
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


def settle(tally: Tally, child: Child, *, killed: bool) -> None:
    """Count how a child ended: our SIGKILL is the fault, anything else unexpected is a
    crash (an uncaught exception, a signal of its own)."""
    rc = child.wait()
    if rc == (-signal.SIGKILL if killed else 0):
        return
    if killed and rc == 0:
        return  # it finished before the kill landed
    tally.crashes += 1
    tally.problem(f"{child.role} exited with {rc}{child.stderr_tail()}")


# ======================================================================================
# Child roles: each prints "ready", then protocol lines on stdout (one os.write each, so
# a SIGKILL never leaves half a line that is taken for a whole one).
# ======================================================================================


def say(text: str) -> None:
    real_write(1, (text + "\n").encode())


def log_ack(fd: int | None, text: str) -> None:
    """An acknowledgement in the shared log, synced before the writer lets go of the lock."""
    if fd is not None:
        real_write(fd, (text + "\n").encode())
        os.fsync(fd)


def open_log(name: str) -> int | None:
    return None if name == "-" else os.open(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


def backoff(rng: random.Random, deadline: float, what: str) -> None:
    if time.monotonic() > deadline:
        raise SystemExit(f"starved: {what} for {CHILD_TIMEOUT / 2:.0f} s")
    time.sleep(rng.uniform(0.0005, 0.004))  # retry spacing after a refusal, not a sync


def run_role(roles: dict[str, Callable[..., None]]) -> None:
    """A campaign module run as a child: the role named by the first argument."""
    roles[sys.argv[1]](*sys.argv[2:])
