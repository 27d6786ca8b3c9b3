#!/usr/bin/env python
"""The two session stores side by side through real HTTP: a folder of JSONL files and a
PostgreSQL database (``serve.sessions_dir`` a ``postgresql://`` URL; decision 0048).

One run, each case measured on both stores in turns, through ``boundctx serve`` processes
(``tests._support.scripted_server``: uvicorn on loopback, the scripted model) reading the
same data:

* **newest window** of a session of ``--messages`` messages (default 1,000,000, about
  1 GB as the file holds it): ``GET /boundctx/v1/sessions/{id}/messages?message_limit=100``
  with the settings' display budgets (64 KiB per message, 1 MiB a page), the first call
  of a fresh server process apart ("cold-ish": the file's page cache is warm, the server's
  pool and the store's caches are not), then median and p90 after warm-up. The same read
  in-process (no HTTP) beside it, to tell the store from the server;
* **the page before it** (``message_before`` = the newest window's first index);
* **appends per second**, ``POST /boundctx/v1/sessions/{id}/messages`` (lossless append),
  from one client process through one server, and from three client processes each
  through a server process of its own, on one fresh session; afterwards every
  acknowledged append is checked to be there exactly once, at the line it was
  acknowledged with and in its writer's order;
* **import** of the 1 GiB list sample (``bench_transcript``'s generator, cached) into
  PostgreSQL (``PostgresStore.import_jsonl``, what ``boundctx session import`` runs), beside
  ``cp`` of the file and the file store's ``reindex`` and first ``Transcript.open`` of it.

The PostgreSQL server is the test suite's throwaway cluster (``tests/_support/postgres.py``)
with ``fsync`` turned back on (the suite runs it off), so a commit is as durable as the
file store's synced append; ``--pg-fsync off`` measures without. Without PostgreSQL the
bench says what is missing and exits 2.

Goal (issue 30): the newest window of a 1,000,000-message session from the database in
<= 5 ms (median), the file store's ~1 GiB case beside it.

Usage::

    python -m bench.bench_session_stores                          # full run: ~1 GB data, several minutes
    python -m bench.bench_session_stores --size 64M --messages 50000 --appends 200   # a short run
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bench._harness import (
    ROOT,
    human_size,
    human_time,
    markdown_table,
    parse_size,
    read_through,
    run_facts,
    run_header,
    summary,
    timed,
)
from bench.bench_transcript import BIG_EVERY, SMALL_BYTES_PER_MESSAGE, ensure_sample

API = "/boundctx/v1/sessions"
WINDOW = 100
GOAL_WINDOW_S = 0.005
#: The session the window cases read, in both stores.
BIG_ID = "million"
STORES = ("file", "postgres")
STORE_NAMES = {"file": "file store", "postgres": "PostgreSQL"}
#: A client retries a 409 (another writer held the session past the server's 1 s wait)
#: this often before it counts the append as failed.
RETRIES = 100
#: The text of an appended message: writer and sequence number first, so the check can
#: read them back, then padding to a typical chat message's size.
APPEND_TEXT = re.compile(r"writer (\d+) record (\d+) ")
APPEND_PAD = 400


class BenchError(AssertionError):
    """A case computed something wrong: the run stops instead of timing it."""


def _expect(cond: bool, what: str) -> None:
    if not cond:
        raise BenchError(what)


# -- data --------------------------------------------------------------------------------


def ensure_messages_file(data_dir: pathlib.Path, messages: int, seed: int) -> tuple[str, dict]:
    """A list transcript of exactly ``messages`` messages (no outputs over 1 MiB: a long
    chat), cached: the generator's sample of a little more, cut after message
    ``messages - 1``. Written outside the sessions folders; each store gets its own copy."""
    path = data_dir / f"session-stores-{messages}-s{seed}.jsonl"
    meta_path = path.with_suffix(".meta.json")
    if path.exists() and meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("bytes") == path.stat().st_size:
            return str(path), meta
    # ~3% over: compactions and the spread of message sizes move the count a little
    source, _ = ensure_sample(data_dir, target=int(messages * SMALL_BYTES_PER_MESSAGE * 1.03) + 4096, seed=seed,
                              big_every=0, label=f"{messages:,} messages")
    from boundctx.transcript import Transcript

    with Transcript.open(source) as t:
        _expect(t.message_count >= messages, f"{source} has {t.message_count:,} messages, fewer than {messages:,}")
        last = t.window(message_before=messages, message_limit=1, content_limit=0).messages[0]
        end = last.offset + last.length
    tmp = path.with_suffix(".partial")
    with open(source, "rb") as src, open(tmp, "wb") as dst:
        _copy_range(src, dst, end)
    os.replace(tmp, path)
    with Transcript.open(str(path)) as t:
        meta = {"bytes": end, "messages": t.message_count, "lines": t.line_count,
                "compactions": t.compaction_count, "source": source}
    _expect(meta["messages"] == messages, f"the cut file has {meta['messages']:,} messages, not {messages:,}")
    meta_path.write_text(json.dumps(meta, indent=1))
    return str(path), meta


def _copy_range(src, dst, length: int) -> None:
    left = length
    while left:
        chunk = src.read(min(left, 16 << 20))
        _expect(bool(chunk), "the source ended early")
        dst.write(chunk)
        left -= len(chunk)


# -- the servers -------------------------------------------------------------------------


class Servers:
    """``count`` boundctx serve processes on one store (a folder, or a database URL), each
    on a free loopback port, ended by :meth:`stop` (or ``with``)."""

    def __init__(self, target: str, count: int) -> None:
        from tests._support import importable_env

        self.procs: list[subprocess.Popen] = []
        self.urls: list[str] = []
        try:
            for _ in range(count):
                p = subprocess.Popen([sys.executable, "-m", "tests._support.scripted_server", target], cwd=ROOT,
                                     stdout=subprocess.PIPE, text=True, env=importable_env())
                self.procs.append(p)
                port = p.stdout.readline().strip()
                _expect(port.isdigit(), f"a serve process did not start (it printed {port!r})")
                self.urls.append(f"http://127.0.0.1:{port}")
            for url in self.urls:  # the socket is bound before the port is printed; wait for the app
                _wait_healthy(url)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            p.stdout.close()
        self.procs = []

    def __enter__(self) -> Servers:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _wait_healthy(url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        c = Client(url)
        try:
            if c.request("GET", "/health")[0] == 200:
                return
        except OSError:
            pass
        finally:
            c.close()
        if time.monotonic() > deadline:
            raise BenchError(f"boundctx serve at {url} did not answer /health in {timeout:.0f} s")
        time.sleep(0.05)


class Client:
    """One keep-alive HTTP/1.1 connection (``http.client``: no more client work per request
    than the request needs, so the timings are the server's)."""

    def __init__(self, url: str, timeout: float = 120.0) -> None:
        parts = urllib.parse.urlsplit(url)
        self.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        self.conn.request(method, path, body=body, headers=headers)
        r = self.conn.getresponse()
        return r.status, r.read()

    def close(self) -> None:
        self.conn.close()


def create_session(url: str, sid: str) -> None:
    c = Client(url)
    try:
        status, body = c.request("POST", API, json.dumps({"id": sid}).encode())
    finally:
        c.close()
    _expect(status == 201, f"POST {API} {sid!r}: {status} {body[:300]!r}")


# -- windows -----------------------------------------------------------------------------


def window_path(sid: str, before: int | None = None) -> str:
    query = {"message_limit": WINDOW}
    if before is not None:
        query["message_before"] = before
    return f"{API}/{sid}/messages?{urllib.parse.urlencode(query)}"


def check_window(status: int, body: bytes, *, start: int, total: int) -> dict:
    """The answer is the window asked for: 200, ``WINDOW`` messages from ``start``, of a
    session of ``total``."""
    _expect(status == 200, f"window: {status} {body[:300]!r}")
    w = json.loads(body)
    got = [m["index"] for m in w["messages"]]
    _expect(w["message_count"] == total and w["message_start"] == start and got == list(range(start, start + WINDOW)),
            f"window: messages {got[:1]}..{got[-1:]} of {w['message_count']}, expected {start}.. of {total}")
    return w


def bench_windows(res: Results, urls: Mapping[str, str], stores: Mapping[str, Any], targets: Mapping[str, str],
                  total: int, args) -> None:
    """The newest window and the page before it on each store: the first call of a fresh
    server apart, then ``--rounds`` rounds, the stores taking turns to go first (the
    machine is shared: a burst of other work lands on both)."""
    newest, before = total - WINDOW, total - 2 * WINDOW
    clients = {name: Client(url) for name, url in urls.items()}
    try:
        for name, c in clients.items():
            # A request for a session that is not there first (404, untimed): the server's
            # code is imported by its first request of a kind, and that is not the store's.
            status, _ = c.request("GET", window_path("not-there"))
            _expect(status == 404, f"a missing session: {status}")
            started = time.perf_counter()
            status, body = c.request("GET", window_path(BIG_ID))
            cold = time.perf_counter() - started
            check_window(status, body, start=newest, total=total)
            res.add("window", "newest 100, first call of a fresh server (cold-ish)", name, [cold],
                    key="window_cold",
                    note="after one 404 request: the code imported; the page cache warm, the server's pool not")
        samples: dict[tuple[str, str], list[float]] = {}
        per_round = max(1, args.repeats // args.rounds)
        for r in range(args.rounds):
            for name in (STORES if r % 2 == 0 else STORES[::-1]):
                c = clients[name]
                for key, path, start in (("window_newest", window_path(BIG_ID), newest),
                                         ("window_before", window_path(BIG_ID, newest), before)):
                    def call(c=c, path=path):
                        return c.request("GET", path)

                    s, _, _ = timed(call, per_round, warmup=args.warmup if r == 0 else 1,
                                    check=lambda out, start=start: check_window(*out, start=start, total=total))
                    samples.setdefault((key, name), []).extend(s)
        for name in STORES:
            res.add("window", "newest 100 (GET .../messages?message_limit=100)", name,
                    samples[("window_newest", name)], key="window_newest", goal="<= 5 ms (database)")
            res.add("window", "the page before it (message_before = its first index)", name,
                    samples[("window_before", name)], key="window_before")
    finally:
        for c in clients.values():
            c.close()
    # The same reads in this process, no HTTP: the store's share of the time above.
    for name, opener in stores.items():
        def direct(before_=None, opener=opener):
            with opener() as t:
                return t.window(message_before=before_, message_limit=WINDOW, content_limit=64 << 10,
                                page_bytes=1 << 20)

        for key, arg, start in (("direct_newest", None, newest), ("direct_before", newest, before)):
            s, _, _ = timed(lambda arg=arg: direct(arg), args.repeats, warmup=args.warmup,
                            check=lambda w, start=start: _expect(
                                w.message_start == start and len(w.messages) == WINDOW, f"direct window of {name}"))
            what = "newest 100" if arg is None else "the page before it"
            res.add("in-process", f"{what}: open + window, no HTTP", name, s, key=key)
    # And serve's own read of it (the handler's work, the version and stat with it), no
    # HTTP: between the two rows is what the sessions API adds to the store's window.
    from boundctx import config
    from boundctx.serve.sessions import Sessions
    from boundctx.serve.settings import LiveSettings

    for name, target in targets.items():
        handler = Sessions(target, LiveSettings(config.load(env={})))
        try:
            for key, query, start in (("handler_newest", {"message_limit": str(WINDOW)}, newest),
                                      ("handler_before", {"message_limit": str(WINDOW),
                                                          "message_before": str(newest)}, before)):
                s, _, _ = timed(lambda query=query: handler.window(BIG_ID, query), args.repeats, warmup=args.warmup,
                                check=lambda w, start=start: _expect(
                                    w["message_start"] == start and len(w["messages"]) == WINDOW,
                                    f"the handler's window of {name}"))
                what = "newest 100" if "message_before" not in query else "the page before it"
                res.add("in-process", f"{what}: serve's handler (Sessions.window), no HTTP", name, s, key=key)
        finally:
            if hasattr(handler.store, "close"):
                handler.store.close()


# -- appends -----------------------------------------------------------------------------


def append_record(writer: int, seq: int) -> bytes:
    text = f"writer {writer} record {seq} " + "x" * APPEND_PAD
    return json.dumps({"type": "message", "message": {"role": "user", "content": text}}).encode()


def append_client(url: str, sid: str, writer: int, count: int) -> dict:
    """What one client process does (``--append-client``): wait for ``go`` on stdin (so
    every writer starts together), then ``count`` appends one after another, each retried
    on 409 (another writer held the session), each acknowledgement kept with its line."""
    c = Client(url)
    c.request("GET", "/health")  # connect before the start, so the first append is not the connect
    print("ready", flush=True)
    sys.stdin.readline()
    acks, failures, retries, latencies = [], [], 0, []
    started = time.time()
    for seq in range(count):
        body = append_record(writer, seq)
        t0 = time.perf_counter()
        for _ in range(RETRIES):
            status, reply = c.request("POST", f"{API}/{sid}/messages", body)
            if status != 409:
                break
            retries += 1
            time.sleep(0.01)
        latencies.append(time.perf_counter() - t0)
        if status == 201:
            acks.append([seq, json.loads(reply)["line"]])
        else:
            failures.append([seq, status, reply[:300].decode(errors="replace")])
    ended = time.time()
    c.close()
    return {"writer": writer, "acks": acks, "failures": failures, "retries": retries, "started": started,
            "ended": ended, "latency_s": latencies}


def run_writers(urls: Sequence[str], sid: str, count: int) -> list[dict]:
    """One client process per server URL, all started at once; their reports."""
    from tests._support import importable_env

    procs = [subprocess.Popen([sys.executable, "-m", "bench.bench_session_stores", "--append-client", url, sid,
                               str(writer), str(count)], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env=importable_env())
             for writer, url in enumerate(urls)]
    try:
        for p in procs:
            _expect(p.stdout.readline().strip() == "ready", "an append client did not start")
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        reports = []
        for p in procs:
            out, _ = p.communicate(timeout=3600)
            _expect(p.returncode == 0, f"an append client failed ({p.returncode})")
            reports.append(json.loads(out))
        return reports
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def read_appended(opener) -> list[tuple[int, int, int]]:
    """``(line, writer, seq)`` of every message of an append session, in line order, read
    from the store directly in whole pages from the end."""
    found: list[tuple[int, int, int]] = []
    with opener() as t:
        before = t.message_count
        while before:
            w = t.window(message_before=before, message_limit=1000, content_limit=None, page_bytes=None)
            page = []
            for e in w.messages:
                m = APPEND_TEXT.match(e.record["message"]["content"]) if isinstance(e.record, dict) else None
                page.append((e.line, int(m[1]), int(m[2])) if m else (e.line, -1, -1))
            found[:0] = page
            before = w.message_start
    return found


def check_exactly_once(acks: Mapping[int, Iterable[Sequence[int]]], found: Sequence[Sequence[int]]) -> list[str]:
    """What is wrong with an append run, ``[]`` when nothing is: ``acks`` is each writer's
    acknowledged appends, ``(seq, line)`` in the order it sent them; ``found`` is every
    message the session holds, ``(line, writer, seq)`` in line order. Every acknowledged
    append must be there exactly once, at the line it was acknowledged with, each
    writer's in the order it sent them, and nothing else may be there."""
    problems: list[str] = []
    where: dict[tuple[int, int], list[int]] = {}
    for line, writer, seq in found:
        where.setdefault((writer, seq), []).append(line)
    for (writer, seq), lines in where.items():
        if writer < 0:
            problems.append(f"{len(lines)} message(s) that no writer wrote, at line(s) {lines[:5]}")
        elif len(lines) > 1:
            problems.append(f"writer {writer} record {seq} is there {len(lines)} times, at lines {lines[:5]}")
    acked: set[tuple[int, int]] = set()
    for writer, sent in acks.items():
        sent = [(int(seq), int(line)) for seq, line in sent]
        seqs = [seq for seq, _ in sent]
        if len(set(seqs)) != len(seqs):
            problems.append(f"writer {writer} was acknowledged the same record twice")
        acked.update((writer, seq) for seq in seqs)
        for seq, line in sent:
            lines = where.get((writer, seq), [])
            if not lines:
                problems.append(f"writer {writer} record {seq} was acknowledged (line {line}) and is missing")
            elif line not in lines:
                problems.append(f"writer {writer} record {seq} was acknowledged at line {line}, found at {lines}")
        # A writer sends one append after another: its records must read in that order.
        order = list(dict.fromkeys(seq for _, w, seq in found if w == writer))
        if order != [seq for seq in seqs if (writer, seq) in where]:
            problems.append(f"writer {writer}'s records are not in the order it sent them")
    unacked = sorted(key for key in where if key[0] >= 0 and key not in acked)
    if unacked:
        problems.append(f"{len(unacked)} message(s) there that no writer was acknowledged: {unacked[:5]}")
    return problems


def bench_appends(res: Results, urls: Mapping[str, Sequence[str]], openers: Mapping[str, Any], args,
                  run_id: str) -> list[str]:
    """Appends per second from 1 client (one server) and from 3 (three servers, one
    client each) on one fresh session per case and store, and the check of each run. The
    problems found (``[]``: every run checked out)."""
    problems: list[str] = []
    for writers in (1, 3):
        for name in (STORES if writers == 1 else STORES[::-1]):
            sid = f"append-{writers}w-{run_id}"
            create_session(urls[name][0], sid)
            reports = run_writers(urls[name][:writers], sid, args.appends)
            # Each client's clock is time.time(): one machine, so the span is comparable.
            elapsed = max(r["ended"] for r in reports) - min(r["started"] for r in reports)
            failures = [f for r in reports for f in r["failures"]]
            found = read_appended(lambda name=name, sid=sid: openers[name](sid))
            wrong = check_exactly_once({r["writer"]: r["acks"] for r in reports}, found)
            if failures:
                wrong.insert(0, f"{len(failures)} append(s) not acknowledged, e.g. {failures[:2]}")
            acked = sum(len(r["acks"]) for r in reports)
            latency = summary([s for r in reports for s in r["latency_s"]])
            res.add("append", f"appends/s, {writers} client process(es), each through its own server", name,
                    [elapsed], key=f"append_{writers}", appends=acked, appends_per_s=acked / elapsed,
                    retries_409=sum(r["retries"] for r in reports), latency_median_s=latency["median_s"],
                    latency_p90_s=latency["p90_s"], exactly_once=not wrong, problems=wrong[:20],
                    messages_found=len(found))
            print(f"    {acked / elapsed:,.0f} appends/s (latency median {human_time(latency['median_s'])}, p90 "
                  f"{human_time(latency['p90_s'])}); every acknowledged append once, in order: "
                  f"{'yes' if not wrong else 'NO: ' + '; '.join(wrong[:3])}", flush=True)
            problems.extend(f"{name}, {writers} writer(s): {p}" for p in wrong)
    return problems


# -- import ------------------------------------------------------------------------------


def bench_import(res: Results, sample: str, meta: dict, pg_store, scratch: pathlib.Path, args) -> None:
    """The 1 GiB sample into each store: ``cp`` into a folder (the file store's import is a
    copy), the file store's index of it (``reindex``, and the first ``Transcript.open``,
    which builds it), and ``PostgresStore.import_jsonl`` (one transaction, COPY)."""
    from boundctx.transcript import Transcript, reindex
    from boundctx.transcript.layout import sidecar_paths

    size = os.path.getsize(sample)
    lines, messages = meta["counts"]["lines"], meta["counts"]["messages"]
    read_through(sample, passes=1)
    copy = scratch / "copied.jsonl"

    def remove_copy(_=None):
        with contextlib.suppress(FileNotFoundError):
            copy.unlink()

    s, _, _ = timed(lambda: subprocess.run(["cp", sample, str(copy)], check=True), args.import_repeats + 2,
                    check=lambda _: _expect(copy.stat().st_size == size, "cp: size"), teardown=remove_copy)
    res.add("import", "cp of the file (into the page cache, not synced)", "file", s, key="import_cp", bytes_=size)

    def check_report(r):
        _expect(r.ok and r.messages == messages and r.lines == lines, f"reindex: {r}")

    s, _, _ = timed(lambda: reindex(sample), args.import_repeats + 2, check=check_report)
    res.add("import", "reindex (scan + sidecar)", "file", s, key="import_reindex", bytes_=size)

    real = os.path.realpath(sample)

    def drop_sidecars():
        for p in sidecar_paths(real):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p)
        return ()

    def first_open():
        with Transcript.open(sample) as t:
            return t.message_count

    s, _, _ = timed(first_open, args.import_repeats + 2, setup=drop_sidecars,
                    check=lambda n: _expect(n == messages, f"open: {n} messages"))
    res.add("import", "first Transcript.open (no sidecar: scan + write it)", "file", s, key="import_open",
            bytes_=size)

    done = iter(range(1_000_000))

    def setup():
        return (f"import-{next(done)}",)

    def drop(report):
        pg_store.remove(report.session)  # the next repeat imports into an empty table again

    s, _, _ = timed(lambda sid: pg_store.import_jsonl(sid, sample), args.import_repeats, warmup=0, setup=setup,
                    check=lambda r: _expect(r.messages == messages and r.lines == lines, f"import: {r}"),
                    teardown=drop)
    res.add("import", "PostgresStore.import_jsonl (one transaction, COPY)", "postgres", s, key="import_db",
            bytes_=size)


# -- results -----------------------------------------------------------------------------


class Results:
    def __init__(self, meta: dict) -> None:
        self.meta = meta
        self.rows: list[dict] = []

    def add(self, group: str, case: str, store: str, samples: Sequence[float], *, key: str,
            bytes_: int | None = None, note: str | None = None, goal: str | None = None, **extra) -> dict:
        st = summary(samples)
        row = {"group": group, "case": case, "store": store, "key": key, **st, "bytes": bytes_, "note": note,
               "goal": goal, "loadavg_1m": os.getloadavg()[0], **extra}
        if bytes_:
            row["mb_per_s"] = bytes_ / st["median_s"] / 1e6
        self.rows.append(row)
        print(f"  {group:10s} {STORE_NAMES[store]:11s} {case:62s} median {human_time(st['median_s']):>10s}"
              f"  p90 {human_time(st['p90_s']):>10s}  (n={st['n']})", flush=True)
        return row

    def find(self, key: str, store: str) -> dict | None:
        return next((r for r in self.rows if r["key"] == key and r["store"] == store), None)

    def goals(self) -> list[dict]:
        db = self.find("window_newest", "postgres")
        if db is None:
            return []
        value = db["median_s"]
        return [{"goal": f"newest {WINDOW} of a {self.meta['data']['messages_file']['messages']:,}-message session "
                         "from PostgreSQL through HTTP: median", "value_ms": value * 1e3,
                 "target_ms": GOAL_WINDOW_S * 1e3, "met": value <= GOAL_WINDOW_S,
                 "p90_ms": db["p90_s"] * 1e3}]

    def dump(self, path: str) -> None:
        out = pathlib.Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".json.partial")
        tmp.write_text(json.dumps({"meta": self.meta, "rows": self.rows, "goals": self.goals()}, indent=1,
                                  default=str) + "\n")
        os.replace(tmp, out)


def markdown(res: Results) -> str:
    """One line per case, the two stores side by side and the database's time over the
    file store's (for appends: its rate over the file store's)."""
    cases: dict[str, dict[str, dict]] = {}
    for r in res.rows:
        cases.setdefault(r["key"], {})[r["store"]] = r
    rows = []
    for key, by_store in cases.items():
        first = next(iter(by_store.values()))

        def cell(store: str) -> str:
            r = by_store.get(store)
            if r is None:
                return ""
            if "appends_per_s" in r:
                return f"{r['appends_per_s']:,.0f}/s" + ("" if r["exactly_once"] else " **(check FAILED)**")
            text = human_time(r["median_s"])
            if r["n"] > 1:
                text += f" (p90 {human_time(r['p90_s'])})"
            if r.get("mb_per_s"):
                text += f", {r['mb_per_s']:,.0f} MB/s"
            return text

        ratio = ""
        f, d = by_store.get("file"), by_store.get("postgres")
        if f and d:
            if "appends_per_s" in f:
                ratio = f"{d['appends_per_s'] / f['appends_per_s']:.2f}× the rate"
            else:
                ratio = f"{d['median_s'] / f['median_s']:.2f}×"
        rows.append((first["group"], first["case"], cell("file"), cell("postgres"), ratio, first.get("goal") or ""))
    imp = {r["key"]: r for r in res.rows if r["group"] == "import"}
    if "import_db" in imp:
        for other in ("import_cp", "import_reindex", "import_open"):
            if other in imp:
                rows.append(("import", f"PostgreSQL import ÷ {imp[other]['case']}", "", "",
                             f"{imp['import_db']['median_s'] / imp[other]['median_s']:.1f}×", ""))
    goals = [(g["goal"], f"{g['value_ms']:.2f} ms (p90 {g['p90_ms']:.2f})", f"≤ {g['target_ms']:.0f} ms",
              "**met**" if g["met"] else f"**NOT met** ({g['value_ms'] / g['target_ms']:.2f}× the target)")
             for g in res.goals()]
    return (markdown_table(("Group", "Case", "file store", "PostgreSQL", "database ÷ file", "goal"), rows)
            + "\n\n" + markdown_table(("Goal", "measured", "target", "met"), goals))


# -- main --------------------------------------------------------------------------------


def engine_facts() -> dict:
    """Which boundctx the servers ran: the package imported (an editable install may be
    another checkout than the bench's), its checkout's commit and the files changed in
    the package since (the run's own commit is the bench's)."""
    import boundctx

    package = pathlib.Path(boundctx.__file__).resolve().parent

    def git(*argv: str) -> str | None:
        try:
            return subprocess.run(["git", "-C", str(package), *argv], capture_output=True, text=True,
                                  timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None

    status = git("status", "--porcelain", "--", ".")
    return {"package": str(package), "commit": git("rev-parse", "HEAD"),
            "changed_files_in_package": None if status is None else status.splitlines()}


def start_postgres(fsync: bool):
    """The suite's throwaway server, with ``fsync`` as asked (the suite's cluster has it
    off: its tests kill the server, they never crash the machine)."""
    from tests._support.postgres import PostgresServer, import_psycopg

    import_psycopg()
    server = PostgresServer()
    server.start()
    if fsync:
        with open(server.data / "postgresql.conf", "a", encoding="utf-8") as conf:
            conf.write("\n# bench/bench_session_stores.py: commits as durable as the file store's synced appends\n"
                       "fsync = on\n")
        server.restart()
    return server


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--append-client"]:
        url, sid, writer, count = argv[1], argv[2], int(argv[3]), int(argv[4])
        print(json.dumps(append_client(url, sid, writer, count)), flush=True)
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="1G", help="the import sample (default 1G = 1 GiB, bench_transcript's)")
    ap.add_argument("--messages", type=int, default=1_000_000, help="messages of the windowed session (1,000,000)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--repeats", type=int, default=100, help="timed windows per store and case (default 100)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds the window repeats are split into (default 5)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed windows before the first round (default 5)")
    ap.add_argument("--appends", type=int, default=1000, help="appends per client process (default 1,000)")
    ap.add_argument("--import-repeats", type=int, default=1,
                    help="timed imports into the database (default 1; cp and reindex run 2 more)")
    ap.add_argument("--pg-fsync", choices=("on", "off"), default="on")
    ap.add_argument("--data-dir", default="/tmp/boundctx-bench")
    ap.add_argument("--json-out", default=str(ROOT / "bench" / "results" / "session_stores.json"))
    args = ap.parse_args(argv)
    _expect(args.messages > 2 * WINDOW, f"--messages must be over {2 * WINDOW}")

    from tests._support.postgres import PostgresUnavailable

    data_dir = pathlib.Path(args.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("BOUNDCTX_CACHE_DIR", str(data_dir / "cache"))
    try:
        server = start_postgres(args.pg_fsync == "on")
    except PostgresUnavailable as exc:
        print(f"bench_session_stores: PostgreSQL is not available, so the stores cannot be compared: {exc}",
              file=sys.stderr)
        return 2
    try:
        return run(args, data_dir, server)
    finally:
        server.close()


def run(args, data_dir: pathlib.Path, server) -> int:
    from boundctx.stores.postgres import PostgresStore
    from boundctx.transcript import Transcript

    load1 = os.getloadavg()[0]
    if load1 > 0.5:
        print(f"[warn] 1-minute load average is {load1:.2f} on {os.cpu_count()} CPUs: other work is running "
              "and will show in the timings", flush=True)
    sample, sample_meta = ensure_sample(data_dir, target=parse_size(args.size), seed=args.seed,
                                        big_every=BIG_EVERY, label="import sample")
    with Transcript.open(sample) as t:
        _expect(t.in_file_order, f"{sample} forks: the database refuses it (use the list sample)")
    big, big_meta = ensure_messages_file(data_dir, args.messages, args.seed)
    print(f"[data] {args.messages:,}-message session: {big} ({human_size(big_meta['bytes'])})", flush=True)

    work = data_dir / "session-stores"
    shutil.rmtree(work, ignore_errors=True)  # the folder store of the last run, its append sessions with it
    folder = work / "sessions"
    folder.mkdir(parents=True)
    # The folder store's copy, and its layout sidecar made now: the servers read an
    # indexed session, as the database's is indexed by its import.
    shutil.copyfile(big, folder / f"{BIG_ID}.jsonl")
    with Transcript.open(str(folder / f"{BIG_ID}.jsonl")) as t:
        _expect(t.message_count == args.messages, "the folder store's copy")
    db = server.create_database("bench")
    t0 = time.perf_counter()
    with PostgresStore(db.url) as store:
        report = store.import_jsonl(BIG_ID, big)
    setup_import_s = time.perf_counter() - t0
    _expect(report.messages == args.messages, f"import of the {args.messages:,}-message session: {report}")
    read_through(str(folder / f"{BIG_ID}.jsonl"))

    meta = {**run_header(args, run_facts(("boundctx", "psycopg", "psycopg-pool", "starlette", "uvicorn", "uvloop",
                                          "httptools"))),
            "engine": engine_facts(),
            "postgres": {"bindir": str(server.bindir), "fsync": args.pg_fsync, "socket": "unix (the servers' and "
                         "this process's connections)", "setup_import_of_messages_file_s": setup_import_s},
            "data": {"messages_file": {"path": big, **big_meta},
                     "import_sample": {"path": sample, **sample_meta}},
            "units": "seconds; MB = 1e6 bytes; p90 = nearest rank",
            "http_client": "http.client, one keep-alive connection per client, in this process (windows) or "
                           "one process per writer (appends)"}
    print(json.dumps(meta["versions"], indent=1), flush=True)
    res = Results(meta)
    problems: list[str] = []
    started = time.perf_counter()
    with PostgresStore(db.url) as pg:
        def folder_open(sid: str):
            return Transcript.open(str(folder / f"{sid}.jsonl"))

        openers = {"file": folder_open, "postgres": pg.open}
        with Servers(str(folder), 3) as file_servers, Servers(db.url, 3) as db_servers:
            urls = {"file": file_servers.urls, "postgres": db_servers.urls}
            print(f"[window] {args.repeats} per store and case in {args.rounds} rounds, after {args.warmup} "
                  "untimed", flush=True)
            bench_windows(res, {name: u[0] for name, u in urls.items()},
                          {name: (lambda name=name: openers[name](BIG_ID)) for name in STORES},
                          {"file": str(folder), "postgres": db.url}, args.messages, args)
            res.dump(args.json_out)
            print(f"[append] {args.appends:,} per client process", flush=True)
            problems = bench_appends(res, urls, openers, args, run_id=str(os.getpid()))
            res.dump(args.json_out)
        print(f"[import] {human_size(os.path.getsize(sample))}", flush=True)
        bench_import(res, sample, sample_meta, pg, work, args)
    meta["loadavg_end"] = os.getloadavg()
    meta["wall_s"] = time.perf_counter() - started
    meta["append_problems"] = problems
    res.dump(args.json_out)
    print()
    print(markdown(res))
    print(f"\nJSON: {args.json_out}  (wall {meta['wall_s']:.0f} s)")
    if problems:
        print("appends NOT all exactly once and in order:\n  " + "\n  ".join(problems[:20]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
