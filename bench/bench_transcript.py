#!/usr/bin/env python
"""Transcript store benchmark: reindex, bounded open, append+reopen, side by side.

One run measures, in the same process and on the same seeded data:

* **reindex** of the big file (default 1 GiB): boundctx's native scan
  (``build_layout``), ``wc -l`` (subprocess, spawn included), the copy ceiling
  (``readinto``, no scan), the naive baselines (``json.loads`` / ``orjson.loads`` on
  every line, run once) and the Python reference twin ``tests/reference/lineindex.py``
  (on a 16 MiB slice, extrapolated per GB and labelled so);
* **open** of the newest 100 messages with the renderer preset (64 KiB per message)
  at the big file (~0.7M messages) and at a ~10k-message file, the worst 100-message
  window in the big file, the same newest window uncapped, and the naive "parse the
  whole file" open;
* **append** of a 1 MiB record to a copy of the big file, then close, reopen and read
  the renderer window (rows with and without ``fsync``);
* **forked**: the same copy after a rewind (60 messages forking 50 from the end, as pi's
  tree navigation writes them), read along its active branch: the newest window by a walk
  from the leaf, and a page from the middle (the whole branch walked once per open).

Data is generated once per (size, seed, generator parameters) into ``--data-dir``
(never into the repository) and reused. Every timed case gets an untimed warm-up; the
big file is read fully twice before timing (warm page cache). Rows are medians; GB is
1e9 bytes. Results go to ``--json-out`` (with versions and platform) and to stdout as a
markdown table with the goals.

Usage::

    python -m bench.bench_transcript                # full run, 1 GiB, several minutes
    python -m bench.bench_transcript --quick        # ~64 MiB smoke run, under a minute
    python -m bench.bench_transcript --profile open # cProfile one case, print hot functions
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import io
import json
import os
import pathlib
import pstats
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

from boundctx._native import filescan as _fs
from boundctx._native import lineindex as _li
from boundctx.transcript import Transcript, reindex
from boundctx.transcript.dialects import dialect_kinds, native_table
from boundctx.transcript.layout import build_layout, sidecar_paths
from boundctx.transcript.sample import write_sample
from boundctx.transcript.tree import link_keys

from bench._harness import (
    ROOT,
    command_output,
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

try:
    import orjson
except ImportError:
    orjson = None

try:
    from tests.reference import lineindex as ref_lineindex
except ImportError as _exc:  # a checkout without the twin: its row says so
    ref_lineindex = None
    REF_MISSING = f"tests/reference/lineindex.py not importable ({_exc})"
else:
    REF_MISSING = None


GB = 1e9
MiB = 1 << 20
#: Bump when the generator parameters below change, so cached data is not reused.
GEN_VERSION = 2  # 2: compactions are chained as pi chains them (the tree reads as a list)
#: One 1-5 MB tool output every BIG_EVERY messages: ~120 of them in 1 GiB, ~45% of bytes.
BIG_EVERY = 6000
BIG_BYTES = (1 << 20, 5 << 20)
COMPACTION_EVERY = 5000
#: The small file for the scale ratio: ~10k messages, no big outputs (~981 B/message).
SMALL_MESSAGES = 10_000
SMALL_BYTES_PER_MESSAGE = 981
REF_SLICE = 16 * MiB
WINDOW = 100

GOAL_OPEN_S = 0.005
#: The renderer window alone, on an open Transcript (issue 29: the preads and one projection
#: are about 0.5 ms of it).
GOAL_WINDOW_S = 0.001
GOAL_SCALE_RATIO = 1.5
#: A reindex of a file whose dialect names no parent (no line is walked for links), and
#: of one whose lines are read for their links (decision 0052: on two cores the walk
#: cannot fit under one ``wc -l`` beside the copy and the framing).
GOAL_REINDEX_VS_WC = 1.0
GOAL_REINDEX_TREE_VS_WC = 1.5
#: Real sessions, repeated whole into a file the big file's size: Codex's (its dialect
#: names no parent) and Claude Code's (a dozen keys a line, UUIDs, the type after the
#: message), the shapes users bring beside the synthetic sample's.
CODEX_SESSIONS = ROOT.parent / "shared" / "data" / "codex-sessions"
CLAUDE_SESSIONS = ROOT.parent / "shared" / "data" / "claude-code-sessions"


def versions() -> dict:
    """The run facts, and what else bears on these timings: numpy, the native build,
    ``wc``, the BLAS threading variables."""
    return {**run_facts(("msgspec", "orjson", "cython", "boundctx")),
            "numpy": np.__version__,
            "boundctx_native": getattr(_li, "__file__", None),
            "boundctx_native_filescan": getattr(_fs, "__file__", None),
            "wc": (command_output("wc", "--version") or "").splitlines()[0:1],
            "openblas_env": {k: v for k, v in os.environ.items() if k.startswith(("OPENBLAS", "OMP_", "MKL_"))}}


# -- data -----------------------------------------------------------------------------


def ensure_sample(data_dir: pathlib.Path, *, target: int, seed: int, big_every: int,
                  label: str) -> tuple[str, dict]:
    """The seeded transcript for these parameters, generated once and cached."""
    name = f"transcript-{target}-s{seed}-be{big_every}-g{GEN_VERSION}"
    path = data_dir / f"{name}.jsonl"
    meta_path = data_dir / f"{name}.meta.json"
    if path.exists() and meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("counts", {}).get("bytes") == path.stat().st_size:
            meta["cached"] = True
            print(f"[data] {label}: cached {path} ({human_size(meta['counts']['bytes'])}, "
                  f"{meta['counts']['messages']:,} messages; generated in "
                  f"{meta['generation_s']:.1f} s)", flush=True)
            return str(path), meta
    data_dir.mkdir(parents=True, exist_ok=True)
    tmp = data_dir / f".{name}.jsonl.partial"
    print(f"[data] {label}: generating {human_size(target)} -> {path} ...", flush=True)
    t0 = time.perf_counter()
    counts = write_sample(tmp, target_bytes=target, seed=seed, big_every=big_every,
                          big_bytes=BIG_BYTES, compaction_every=COMPACTION_EVERY)
    gen_s = time.perf_counter() - t0
    os.replace(tmp, path)
    for stale in (str(path) + ".layout", str(path) + ".lock"):
        try:
            os.unlink(stale)
        except FileNotFoundError:
            pass
    meta = {"counts": counts, "generation_s": gen_s, "seed": seed, "target_bytes": target,
            "big_every": big_every, "big_bytes": list(BIG_BYTES),
            "compaction_every": COMPACTION_EVERY, "gen_version": GEN_VERSION}
    meta_path.write_text(json.dumps(meta, indent=1))
    meta["cached"] = False
    print(f"[data] {label}: {counts['bytes']:,} bytes, {counts['lines']:,} lines, "
          f"{counts['messages']:,} messages in {gen_s:.1f} s", flush=True)
    return str(path), meta


def describe_layout(path: str) -> dict:
    """Line-size facts from the layout (for the data section and the worst window)."""
    with Transcript.open(path) as t:
        lay = t._layout
        starts = lay.starts.all()
        ends = np.append(starts[1:], lay.indexed_end)
        lens = ends - starts
        msgs = lay.messages.all()
        mlens = lens[msgs]
        facts = {
            "lines": int(len(starts)),
            "messages": int(len(msgs)),
            "compactions": int(len(lay.compactions)),
            "median_line_bytes": float(np.median(lens)),
            "mean_line_bytes": float(lens.mean()),
            "p99_line_bytes": float(np.percentile(lens, 99)),
            "max_line_bytes": int(lens.max()),
            "lines_over_1MiB": int((lens > MiB).sum()),
            "bytes_in_lines_over_64KiB": int(lens[lens > 65536].sum()),
        }
        if len(msgs) >= WINDOW:
            csum = np.concatenate([[0], np.cumsum(mlens)])
            win = csum[WINDOW:] - csum[:-WINDOW]  # win[i] = bytes of messages i..i+99
            i = int(np.argmax(win))
            facts["worst_window"] = {
                "message_before": i + WINDOW,
                "bytes": int(win[i]),
                "max_line_bytes": int(mlens[i : i + WINDOW].max()),
                "lines_over_64KiB": int((mlens[i : i + WINDOW] > 65536).sum()),
            }
            newest = mlens[-WINDOW:]
            facts["newest_window"] = {
                "bytes": int(newest.sum()),
                "max_line_bytes": int(newest.max()),
                "lines_over_64KiB": int((newest > 65536).sum()),
            }
            # The newest window with no line over 64 KiB: the like-for-like partner of
            # the small file's newest window (which has none), for the scale ratio.
            big_at = np.flatnonzero(mlens > 65536)
            plain_before = len(msgs)
            for b in big_at[::-1]:
                if b < plain_before - WINDOW:
                    break
                plain_before = int(b)
            if plain_before >= WINDOW:
                plain = mlens[plain_before - WINDOW : plain_before]
                facts["newest_plain_window"] = {
                    "message_before": plain_before,
                    "bytes": int(plain.sum()),
                    "max_line_bytes": int(plain.max()),
                }
    return facts


# -- result bookkeeping -----------------------------------------------------------------


class Results:
    def __init__(self, args, meta):
        self.rows: list[dict] = []
        self.args = args
        self.meta = meta

    def add(self, group, case, samples, *, bytes_=None, note=None, goal=None, **extra):
        st = summary(samples)
        row = {"group": group, "case": case, **st, "bytes": bytes_, "note": note,
               "loadavg_1m": os.getloadavg()[0], **extra}
        if bytes_:
            row["gb_per_s"] = bytes_ / st["median_s"] / GB
            row["s_per_gb"] = st["median_s"] * GB / bytes_
        if goal is not None:
            row["goal"] = goal
        self.rows.append(row)
        ms = st["median_s"] * 1e3
        print(f"  {group:8s} {case:62s} median {ms:10.3f} ms  p90 {st['p90_s'] * 1e3:10.3f} ms"
              f"  (n={st['n']}){'  ' + note if note else ''}", flush=True)
        return row

    def find(self, key):
        for r in self.rows:
            if r.get("key") == key:
                return r
        return None

    def dump(self, path):
        path = pathlib.Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        doc = {"meta": self.meta, "rows": self.rows, "goals": self.goals()}
        tmp = path.with_suffix(".json.partial")
        tmp.write_text(json.dumps(doc, indent=1, default=str))
        os.replace(tmp, path)

    def goals(self) -> list[dict]:
        out = []

        def goal(key, what, value, target, unit, fmt="{:.3f}"):
            r = self.find(key) if isinstance(key, str) else None
            v = value if r is None else value(r)
            if v is None:
                out.append({"goal": what, "value": None, "target": target, "met": None})
                return
            out.append({"goal": what, "value": v, "target": target, "unit": unit,
                        "met": bool(v <= target), "shown": fmt.format(v),
                        "over_by": (v / target) if v > target else None})

        wc = self.find("wc")
        native = self.find("reindex_native")
        if wc and native:
            goal(None, "reindex (build_layout, links read) time / wc -l time", native["median_s"] / wc["median_s"],
                 GOAL_REINDEX_TREE_VS_WC, "x")
        for key, what, target in (("reindex_claude", "Claude Code sessions (links read)", GOAL_REINDEX_TREE_VS_WC),
                                  ("reindex_codex", "Codex sessions (no link key)", GOAL_REINDEX_VS_WC)):
            real, real_wc = self.find(key), self.find(f"{key}_wc")
            if real and real_wc:
                goal(None, f"reindex (build_layout) of real {what} / wc -l time",
                     real["median_s"] / real_wc["median_s"], target, "x")
        for key, what in (("open_big", "open newest 100, renderer, big file: median"),
                          ("open_small", "open newest 100, renderer, 10k file: median"),
                          ("open_worst", "open worst 100-message window, renderer: median"),
                          ("append_sync", "append 1 MiB (fsync) + close + reopen + window: median"),
                          ("append_nosync", "append 1 MiB (no fsync) + close + reopen + window: median")):
            r = self.find(key)
            if r:
                goal(None, what, r["median_s"] * 1e3, GOAL_OPEN_S * 1e3, "ms")
        for key, what in (("window_only_big", "window(preset='renderer') alone, big file: median"),
                          ("window_only_forked", "window(preset='renderer') alone, big forked tree: median")):
            r = self.find(key)
            if r:
                goal(None, what, r["median_s"] * 1e3, GOAL_WINDOW_S * 1e3, "ms")
        big, small = self.find("open_big"), self.find("open_small")
        if big and small:
            goal(None, "open newest 100: median big / median 10k", big["median_s"] / small["median_s"],
                 GOAL_SCALE_RATIO, "x", "{:.2f}")
        plain = self.find("open_big_plain")
        if plain and small:
            goal(None, "same, like for like (big-file window with no line > 64 KiB) / 10k",
                 plain["median_s"] / small["median_s"], GOAL_SCALE_RATIO, "x", "{:.2f}")
        return out


# -- the cases -----------------------------------------------------------------------------


def real_sessions_file(folder: pathlib.Path, name: str, data_dir: str, size: int) -> str | None:
    """The real sessions in ``folder`` (``../shared/data``), repeated whole until the file
    holds ``size`` bytes (once per size, in ``data_dir``); None when they are not there."""
    sessions = sorted(folder.glob("*.jsonl"))
    if not sessions:
        return None
    path = os.path.join(data_dir, f"{name}-sessions-repeated-{size}.jsonl")
    if not os.path.exists(path):
        body = b"".join(p.read_bytes() for p in sessions)
        with open(path + ".partial", "wb") as f:
            for _ in range(-(-size // len(body))):
                f.write(body)
        os.replace(path + ".partial", path)
    return path


def bench_reindex_real(res: Results, args, *, folder: pathlib.Path, name: str, dialect: str, key: str,
                       goal: float, what: str) -> None:
    """build_layout of real sessions repeated to the big file's size, beside ``wc -l`` of
    the same file."""
    path = real_sessions_file(folder, name, args.data_dir, parse_size(args.size))
    if path is None:
        res.rows.append({"group": "reindex", "case": f"{name} sessions: build_layout", "key": key,
                         "median_s": None, "note": f"SKIPPED: no sessions at {folder}"})
        print(f"  reindex  {name} sessions SKIPPED: none at {folder}", flush=True)
        return
    size = os.path.getsize(path)
    read_through(path, passes=1)  # warm, as the big file is

    def wc():
        return int(subprocess.run(["wc", "-l", path], capture_output=True, check=True, text=True).stdout.split()[0])

    s, _, lines = timed(wc, args.repeats)
    res.add("reindex", f"`wc -l` of {human_size(size)} of real {name} sessions, repeated", s, bytes_=size,
            key=f"{key}_wc")
    fd = os.open(path, os.O_RDONLY)
    try:
        s, _, _ = timed(lambda: build_layout(fd, dialect=dialect), args.repeats,
                        check=lambda lay: _expect(lay.line_count == lines, f"{name} layout line count"))
    finally:
        os.close(fd)
    res.add("reindex", f"boundctx `build_layout(fd, dialect={dialect!r})` of the same ({what})", s,
            bytes_=size, key=key, goal=f"<= {goal:.1f}x wc -l")


def bench_reindex(res: Results, path: str, meta: dict, args) -> None:
    size = os.path.getsize(path)
    lines, messages = meta["counts"]["lines"], meta["counts"]["messages"]
    print(f"[reindex] {human_size(size)} warm; median of {args.repeats}", flush=True)

    def copy_ceiling():
        buf = bytearray(16 * MiB)
        n = 0
        with open(path, "rb", buffering=0) as f:
            while k := f.readinto(buf):
                n += k
        return n

    s, _, _ = timed(copy_ceiling, args.repeats, check=lambda n: _expect(n == size, "read size"))
    res.add("reindex", "copy ceiling: readinto 16 MiB, no scan (context)", s, bytes_=size,
            key="copy", naive_key="naive_json")

    def wc():
        out = subprocess.run(["wc", "-l", path], capture_output=True, check=True, text=True)
        return int(out.stdout.split()[0])

    s, _, _ = timed(wc, args.repeats, check=lambda n: _expect(n == lines, f"wc -l {n} != {lines}"))
    res.add("reindex", "`wc -l` (subprocess, spawn included)", s, bytes_=size, key="wc", naive_key="naive_json")

    fd = os.open(path, os.O_RDONLY)
    try:
        def check_layout(lay):
            _expect(lay.line_count == lines and lay.message_count == messages,
                    f"layout counts {lay.line_count}/{lay.message_count} != {lines}/{messages}")

        s, _, _ = timed(lambda: build_layout(fd, dialect="auto"), args.repeats, check=check_layout)
        res.add("reindex", "boundctx `build_layout(fd, dialect='auto')` (native scan, links read, tree)", s,
                bytes_=size, key="reindex_native", naive_key="naive_json",
                goal=f"<= {GOAL_REINDEX_TREE_VS_WC:.1f}x wc -l")

        table, keys = native_table("auto"), link_keys("auto")
        s, _, _ = timed(lambda: _fs.scan_fd(fd, table, link_keys=keys), args.repeats,
                     check=lambda r: _expect(len(r.starts) // 8 == lines, "scan_fd line count"))
        res.add("reindex", "  of which: native `scan_fd` with links (as build_layout runs it)", s,
                bytes_=size, key="scan_fd_links", naive_key="naive_json")
        s, _, _ = timed(lambda: _fs.scan_fd(fd, table), args.repeats,
                     check=lambda r: _expect(len(r.starts) // 8 == lines, "scan_fd line count"))
        res.add("reindex", "  the same scan without links (framing and kinds only)", s,
                bytes_=size, key="scan_fd", naive_key="naive_json")

        # The reference twin on a slice, and native scan_bytes on the same slice.
        piece = os.pread(fd, min(REF_SLICE, size), 0)
        s_nat, _, nat = timed(lambda: _li.scan_bytes(piece, table), args.repeats)
        res.add("reindex", f"native `scan_bytes` on a {human_size(len(piece))} slice", s_nat,
                bytes_=len(piece), key="scan_bytes_slice",
                note=f"extrapolated: {statistics.median(s_nat) * GB / len(piece):.3f} s/GB")
        if ref_lineindex is None:
            res.rows.append({"group": "reindex", "case": "reference twin (tests/reference/lineindex.py)",
                             "key": "reference", "median_s": None, "note": f"SKIPPED: {REF_MISSING}"})
            print(f"  reindex  reference twin SKIPPED: {REF_MISSING}", flush=True)
        else:
            kinds = dialect_kinds("auto")
            s_ref, _, ref = timed(lambda: ref_lineindex.scan_bytes(piece, kinds), max(3, args.repeats // 2))
            agree = (np.frombuffer(nat.starts, dtype=np.int64).tolist() == list(ref.starts)
                     and list(nat.kinds) == list(ref.kinds)
                     and nat.indexed_end == ref.indexed_end)
            per_gb = statistics.median(s_ref) * GB / len(piece)
            res.add("reindex", f"reference twin `scan_bytes` on the {human_size(len(piece))} slice", s_ref,
                    bytes_=len(piece), key="reference",
                    note=f"EXTRAPOLATED per GB: {per_gb:.1f} s/GB; "
                         f"native == reference on the slice: {agree}",
                    extrapolated_s_per_gb=per_gb, native_equals_reference=agree)
    finally:
        os.close(fd)

    bench_reindex_real(res, args, folder=CLAUDE_SESSIONS, name="claude-code", dialect="auto", key="reindex_claude",
                       goal=GOAL_REINDEX_TREE_VS_WC, what="links read")
    bench_reindex_real(res, args, folder=CODEX_SESSIONS, name="codex", dialect="codex", key="reindex_codex",
                       goal=GOAL_REINDEX_VS_WC, what="no line walked for links")

    s, _, rep = timed(lambda: reindex(path), max(3, args.repeats // 2),
                   check=lambda r: _expect(r.ok and r.messages == messages, f"reindex report {r}"))
    res.add("reindex", "`reindex(path)` (sidecar valid): open + rebuild + write sidecar", s,
            bytes_=size, key="reindex_api", naive_key="naive_json",
            note=f"sidecar {os.path.getsize(rep.sidecar):,} B" if rep.sidecar else "no sidecar written")

    # The same with no sidecar: what `boundctx reindex` costs on a file that needs it.
    sides = [p for p in sidecar_paths(path) if os.path.exists(p)]

    def drop_sidecars():
        for p in sidecar_paths(path):
            if os.path.exists(p):
                os.unlink(p)
        return ()

    s, _, _ = timed(lambda: reindex(path), max(3, args.repeats // 2), setup=drop_sidecars,
                 check=lambda r: _expect(r.ok and r.messages == messages, f"reindex report {r}"))
    res.add("reindex", "`reindex(path)` with NO sidecar (first reindex of a file)", s,
            bytes_=size, key="reindex_api_cold_sidecar", naive_key="naive_json",
            note=f"sidecar was at {len(sides)} place(s) before; removed before each sample")


def bench_naive_reindex(res: Results, path: str, meta: dict, args) -> None:
    size = os.path.getsize(path)
    messages = meta["counts"]["messages"]
    print("[naive] parse every line, run ONCE each (slow)", flush=True)

    def naive(loads):
        def run():
            n = 0
            with open(path, "rb") as f:
                for line in f:
                    rec = loads(line)
                    if rec.get("type") == "message":
                        n += 1
            return n
        return run

    check = lambda n: _expect(n == messages, f"naive count {n} != {messages}")  # noqa: E731
    s, _, _ = timed(naive(json.loads), 1, warmup=0, check=check)
    res.add("reindex", "naive: `json.loads` every line (1 run)", s, bytes_=size, key="naive_json")
    if orjson is not None:
        s, _, _ = timed(naive(orjson.loads), 1, warmup=0, check=check)
        res.add("reindex", "naive: `orjson.loads` every line (1 run)", s, bytes_=size, key="naive_orjson",
                naive_key="naive_json")
    else:
        res.rows.append({"group": "reindex", "case": "naive: orjson", "key": "naive_orjson",
                         "median_s": None, "note": "SKIPPED: orjson not installed"})


def naive_open(path: str):
    """The peers' open: parse the whole file, keep the newest 100 messages."""
    loads = orjson.loads if orjson is not None else json.loads
    newest = collections.deque(maxlen=WINDOW)
    with open(path, "rb") as f:
        for line in f:
            rec = loads(line)
            if rec.get("type") == "message":
                newest.append(rec)
    return list(newest)


def open_window(path: str, **kw):
    with Transcript.open(path) as t:
        w = t.window(**kw)
        outcome = t.layout_outcome
    return w, outcome


def _check_window(expect_start: int, expect_n: int = WINDOW):
    def check(r):
        w, outcome = r
        _expect(outcome == "valid", f"layout outcome {outcome!r}, expected 'valid' (sidecar)")
        _expect(len(w.messages) == expect_n and w.message_start == expect_start,
                f"window {w.message_start}+{len(w.messages)}, expected {expect_start}+{expect_n}")
    return check


def bench_open(res: Results, big: str, small: str, facts: dict, args) -> None:
    n = args.open_repeats
    print(f"[open] median/p90 of {n}; sidecar present and valid", flush=True)
    for p in (big, small):
        open_window(p, preset="renderer")  # builds or validates the sidecar
    bf, sf = facts["big"], facts["small"]
    nb = bf["messages"]
    ns = sf["messages"]
    renderer = dict(preset="renderer")

    s, _, _ = timed(lambda: open_window(big, **renderer), n, warmup=3, check=_check_window(nb - WINDOW))
    res.add("open", f"newest 100, renderer, big file ({nb:,} messages)", s, key="open_big", naive_key="naive_open_big",
            goal="<= 5 ms", note=f"window {human_size(bf['newest_window']['bytes'])}")
    s, _, _ = timed(lambda: open_window(small, **renderer), n, warmup=3, check=_check_window(ns - WINDOW))
    res.add("open", f"newest 100, renderer, small file ({ns:,} messages)", s, key="open_small",
            naive_key="naive_open_small", goal="<= 5 ms", note=f"window {human_size(sf['newest_window']['bytes'])}")

    pw = bf.get("newest_plain_window")
    if pw and pw["message_before"] != nb:
        pb = pw["message_before"]
        s, _, _ = timed(lambda: open_window(big, message_before=pb, **renderer), n, warmup=3,
                     check=_check_window(pb - WINDOW))
        res.add("open", f"newest 100 with no line > 64 KiB, renderer, big file (message_before={pb})",
                s, key="open_big_plain", naive_key="naive_open_big",
                note=f"window {human_size(pw['bytes'])}; like-for-like with the small file's newest 100")

    ww = bf["worst_window"]
    before = ww["message_before"]

    def check_page(r):
        w, outcome = r
        _expect(outcome == "valid", f"layout outcome {outcome!r}, expected 'valid' (sidecar)")
        shown = sum(m.length - m.cut_bytes for m in w.messages)
        _expect(w.messages[-1].index == before - 1 and (shown <= w.page_bytes or len(w.messages) == 1),
                f"page of {len(w.messages)} ending at {w.messages[-1].index}, {shown:,} bytes shown")

    s, _, r = timed(lambda: open_window(big, message_before=before, **renderer), n, warmup=3, check=check_page)
    cut = sum(m.cut_bytes for m in r[0].messages)
    res.add("open", f"worst 100-message window, renderer (message_before={before})", s,
            key="open_worst", naive_key="naive_open_big", goal="<= 5 ms",
            note=f"window {human_size(ww['bytes'])}, largest line {human_size(ww['max_line_bytes'])}; the page "
                 f"holds {len(r[0].messages)} messages within {human_size(r[0].page_bytes)}, {cut:,} bytes cut")
    s, _, r = timed(lambda: open_window(big, message_before=before, page_bytes=None, **renderer), n, warmup=3,
                    check=_check_window(before - WINDOW))
    res.add("open", "  the same without a page budget (page_bytes=None: 100 messages of up to 64 KiB)", s,
            key="open_worst_unpaged", naive_key="naive_open_big",
            note=f"{sum(m.length - m.cut_bytes for m in r[0].messages):,} bytes shown")

    s, _, _ = timed(lambda: open_window(big, message_limit=WINDOW, content_limit=None), n, warmup=3,
                 check=_check_window(nb - WINDOW))
    res.add("open", "newest 100, uncapped (content_limit=None), big file", s, key="open_big_uncapped",
            naive_key="naive_open_big")
    s, _, _ = timed(lambda: open_window(big, message_before=before, message_limit=WINDOW,
                                     content_limit=None), max(5, n // 5), warmup=1,
                 check=_check_window(before - WINDOW))
    res.add("open", "worst window, uncapped (content_limit=None)", s, key="open_worst_uncapped",
            naive_key="naive_open_big")

    def open_only():
        with Transcript.open(big) as t:
            return t.layout_outcome
    s, _, _ = timed(open_only, n, warmup=3, check=lambda o: _expect(o == "valid", o))
    res.add("open", "  of which: `Transcript.open` + close alone, big file", s, key="open_only_big")
    t = Transcript.open(big)
    try:
        s, _, _ = timed(lambda: t.window(preset="renderer"), n, warmup=3,
                     check=lambda w: _expect(len(w.messages) == WINDOW, "window size"))
        res.add("open", "  of which: `window(preset='renderer')` alone on an open Transcript", s,
                key="window_only_big")
    finally:
        t.close()

    s, _, _ = timed(lambda: naive_open(small), max(3, n // 10), warmup=1,
                 check=lambda m: _expect(len(m) == WINDOW, "naive window"))
    res.add("open", "naive open: parse the whole small file (orjson), keep newest 100", s,
            key="naive_open_small")


def bench_naive_open_big(res: Results, big: str, args) -> None:
    s, _, _ = timed(lambda: naive_open(big), 1, warmup=0,
                 check=lambda m: _expect(len(m) == WINDOW, "naive window"))
    res.add("open", "naive open: parse the whole big file (orjson), keep newest 100 (1 run)", s,
            key="naive_open_big")


def _append_record() -> tuple[dict, int]:
    block = "".join(f"{i:06d} INFO bench append step={i * 7919 % 100003} payload abcdefghij\n"
                    for i in range(2000))
    text = (block * (MiB // len(block) + 1))[:MiB]
    rec = {"type": "message", "id": "bench-append", "parentId": None,
           "timestamp": "2026-01-01T00:00:00Z",
           "message": {"role": "toolResult", "content": [{"type": "text", "text": text}]}}
    from boundctx.transcript import encode_record
    return rec, len(encode_record(rec))


def _append_copy(big: str, args):
    """A durable, warm copy of the big file with a valid sidecar, and a function that
    restores it (file, mtime and sidecar) to exactly that state."""
    copy = str(pathlib.Path(args.data_dir) / (pathlib.Path(big).stem + ".append-copy.jsonl"))
    size = os.path.getsize(big)
    if not os.path.exists(copy) or os.path.getsize(copy) != size:
        t0 = time.perf_counter()
        shutil.copyfile(big, copy)
        print(f"[append] copied to {copy} in {time.perf_counter() - t0:.1f} s", flush=True)
    else:
        print(f"[append] reusing {copy}", flush=True)
    # Make the copy durable and warm, so a timed fsync pays for the appended line only.
    fd = os.open(copy, os.O_RDWR)
    os.fsync(fd)
    os.close(fd)
    read_through(copy, passes=2)
    with Transcript.open(copy) as t:
        _ = t.window(preset="renderer")
    with Transcript.open(copy) as t:
        side = t._layout.sidecar_path
        _expect(t.layout_outcome == "valid", f"copy layout {t.layout_outcome}")
    st = os.stat(copy)
    side_size = os.path.getsize(side)

    def restore(*_):
        os.truncate(copy, size)
        os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns))
        os.truncate(side, side_size)
        for p in (copy, side):
            fd = os.open(p, os.O_RDWR)
            os.fsync(fd)
            os.close(fd)

    return copy, restore


def bench_append(res: Results, big: str, args) -> None:
    copy, restore = _append_copy(big, args)
    with Transcript.open(copy) as t:
        base_messages = t.message_count
    rec, rec_len = _append_record()
    n = args.append_repeats

    for sync in (True, False):
        parts = {"append": [], "close": [], "reopen_window": []}
        outcomes = collections.Counter()

        def setup():
            t = Transcript.open(copy)
            outcomes["pre:" + t.layout_outcome] += 1
            return (t,)

        def run(t):
            t0 = time.perf_counter()
            t.append(rec, sync=sync)
            t1 = time.perf_counter()
            t.close()
            t2 = time.perf_counter()
            with Transcript.open(copy) as t2o:
                w = t2o.window(preset="renderer")
                outcome = t2o.layout_outcome
            t3 = time.perf_counter()
            parts["append"].append(t1 - t0)
            parts["close"].append(t2 - t1)
            parts["reopen_window"].append(t3 - t2)
            return w, outcome

        def check(r):
            w, outcome = r
            outcomes["reopen:" + outcome] += 1
            last = w.messages[-1]
            _expect(w.message_count == base_messages + 1 and last.record["id"] == "bench-append"
                    and last.truncated, "appended record not the newest, or not projected")

        restore()
        s, _, _ = timed(run, n, warmup=2, setup=setup, check=check, teardown=lambda r: restore())
        for k in parts:
            parts[k] = parts[k][2:]  # drop the warm-ups
        label = "WITH fsync (sync=True)" if sync else "no fsync (sync=False)"
        res.add("append", f"append 1 MiB {label} + close + reopen + window", s,
                key="append_sync" if sync else "append_nosync", goal="<= 5 ms",
                note=f"record {rec_len:,} B; layout outcomes {dict(outcomes)}",
                record_bytes=rec_len, outcomes=dict(outcomes))
        res.add("append", f"  of which: `append(sync={sync})`", parts["append"],
                key=f"append_call_{'sync' if sync else 'nosync'}")
        res.add("append", "  of which: close (persists the layout segment)", parts["close"],
                key=f"append_close_{'sync' if sync else 'nosync'}")
        res.add("append", "  of which: reopen + window(preset='renderer')", parts["reopen_window"],
                key=f"append_reopen_{'sync' if sync else 'nosync'}")
    restore()


def bench_forked(res: Results, big: str, args) -> None:
    """The big file's copy after a rewind: its newest window follows the new branch."""
    copy, restore = _append_copy(big, args)
    from boundctx.transcript import encode_record

    with Transcript.open(copy) as t:
        total = t.message_count
        fork = t.window(message_before=total - 50, message_limit=1, content_limit=64).messages[0].record["id"]
    parent, lines = fork, []
    for k in range(60):
        rec = {"type": "message", "id": f"fork{k:04d}", "parentId": parent, "timestamp": "2026-01-01T00:00:00Z",
               "message": {"role": "user" if k % 2 == 0 else "assistant",
                           "content": [{"type": "text", "text": f"rewound {k} " + "r" * 900}]}}
        lines.append(encode_record(rec))
        parent = rec["id"]
    n = args.open_repeats
    try:
        with open(copy, "ab") as f:
            f.write(b"".join(lines))
        with Transcript.open(copy) as t:
            _expect(not t.in_file_order, "the rewind did not fork the copy")
            count = t.message_count
            _expect(count == total - 50 + 60, f"branch of {count} messages, expected {total + 10}")
            t.window(preset="renderer")

        def check(r):
            w, outcome = r
            _expect(outcome == "valid", f"layout outcome {outcome!r}")
            _expect(w.messages[-1].record["id"] == "fork0059" and w.message_count == count, "not the new branch")

        s, _, _ = timed(lambda: open_window(copy, preset="renderer"), n, warmup=3, check=check)
        res.add("forked", f"newest 100, renderer, big file forked 50 from its end ({count:,} on the branch)", s,
                key="open_forked", naive_key="naive_open_big", goal="<= 5 ms")
        t = Transcript.open(copy)
        try:
            s, _, _ = timed(lambda: t.window(preset="renderer"), n, warmup=3,
                            check=lambda w: _expect(w.message_count == count, "window size"))
            res.add("forked", "  of which: `window(preset='renderer')` alone on an open Transcript", s,
                    key="window_only_forked", goal="<= 1 ms")
        finally:
            t.close()
        middle = count // 2
        s, _, _ = timed(lambda: open_window(copy, preset="renderer", message_before=middle), max(5, n // 5),
                        warmup=1, check=lambda r: _expect(r[0].messages[-1].index == middle - 1, "middle page"))
        res.add("forked", f"open + the page before message {middle:,} (the branch walked whole, once per open)", s,
                key="open_forked_middle", naive_key="naive_open_big")
    finally:
        restore()


class BenchError(AssertionError):
    pass


def _expect(cond: bool, what: str) -> None:
    if not cond:
        raise BenchError(what)


# -- output -----------------------------------------------------------------------------------


def markdown(res: Results) -> str:
    """One table row per result row. ``× wc -l`` compares seconds per GB (for a slice
    row that is its extrapolated rate); ``naive ÷ this`` is how many times faster the
    row is than its naive counterpart (``naive_key``) on the same file."""
    wc = res.find("wc")
    rows = []
    for r in res.rows:
        med = r.get("median_s")
        gbps = f"{r['gb_per_s']:.2f}" if r.get("gb_per_s") else ""
        vs_wc = ""
        if wc and med and r.get("s_per_gb") and r["group"] == "reindex":
            vs_wc = f"{r['s_per_gb'] / wc['s_per_gb']:.2f}×"
        vs_naive = ""
        nv = res.find(r.get("naive_key")) if r.get("naive_key") else None
        if nv and med and nv.get("median_s"):
            ratio = nv["median_s"] / med
            vs_naive = f"{ratio:,.0f}×" if ratio >= 10 else f"{ratio:.1f}×"
        case = r["case"] + (f" — {r['note']}" if r.get("note") else "")
        p90 = human_time(r.get("p90_s")) if (r.get("n") or 0) > 1 else ""
        rows.append((r["group"], case, human_time(med), p90, r.get("n", ""), gbps, vs_wc, vs_naive,
                     r.get("goal", "")))
    goals = []
    for g in res.goals():
        if g["value"] is None:
            goals.append((g["goal"], "—", g["target"], "n/a"))
            continue
        met = "**met**" if g["met"] else f"**NOT met** ({g['over_by']:.2f}× the target)"
        goals.append((g["goal"], f"{g['shown']} {g['unit']}", f"≤ {g['target']} {g['unit']}", met))
    return (markdown_table(("Group", "Case", "median", "p90", "n", "GB/s", "× `wc -l`", "naive ÷ this", "goal"),
                           rows)
            + "\n\n" + markdown_table(("Goal", "measured", "target", "met"), goals))


# -- profiling --------------------------------------------------------------------------------


def profile_case(case: str, big: str, small: str, facts: dict, args) -> None:
    """cProfile ``n`` calls of one case (setup and teardown are not profiled)."""
    before = facts["big"]["worst_window"]["message_before"]
    setup = teardown = None
    cleanup = []
    if case == "reindex":
        fd = os.open(big, os.O_RDONLY)
        cleanup.append(lambda: os.close(fd))
        fn, n = (lambda: build_layout(fd, dialect="auto")), 3
    elif case == "open":
        fn, n = (lambda: open_window(big, preset="renderer")), 200
    elif case == "open-small":
        fn, n = (lambda: open_window(small, preset="renderer")), 200
    elif case == "worst":
        fn, n = (lambda: open_window(big, message_before=before, preset="renderer")), 200
    elif case == "uncapped":
        fn, n = (lambda: open_window(big, message_limit=WINDOW, content_limit=None)), 50
    elif case in ("append", "append-sync"):
        copy, restore = _append_copy(big, args)
        rec, _ = _append_record()
        sync = case == "append-sync"
        holder = {}

        def setup():
            holder["t"] = Transcript.open(copy)

        def fn():
            t = holder.pop("t")
            t.append(rec, sync=sync)
            t.close()
            return open_window(copy, preset="renderer")

        teardown, n = restore, 30
        restore()
    else:
        raise SystemExit(f"unknown profile case {case!r}")
    for _ in range(2):
        if setup:
            setup()
        fn()
        if teardown:
            teardown()
    prof = cProfile.Profile()
    wall = 0.0
    for _ in range(n):
        if setup:
            setup()
        t0 = time.perf_counter()
        prof.enable()
        fn()
        prof.disable()
        wall += time.perf_counter() - t0
        if teardown:
            teardown()
    for c in cleanup:
        c()
    print(f"[profile] {case}: {n} calls, {wall / n * 1e3:.3f} ms per call under cProfile")
    for key in ("tottime", "cumulative"):
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).strip_dirs().sort_stats(key).print_stats(25)
        print(f"--- sorted by {key} ---")
        print(buf.getvalue())


# -- main ---------------------------------------------------------------------------------------


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="1G", help="size of the big transcript (default 1G = 1 GiB)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--repeats", type=int, default=7, help="timed repeats of the reindex rows")
    ap.add_argument("--open-repeats", type=int, default=50, help="timed repeats of the open rows")
    ap.add_argument("--append-repeats", type=int, default=20, help="timed repeats of the append rows")
    ap.add_argument("--json-out", default=None,
                    help="default bench/results/transcript.json (transcript-quick.json with --quick)")
    ap.add_argument("--data-dir", default="/tmp/boundctx-bench")
    ap.add_argument("--quick", action="store_true", help="~64 MiB smoke run with fewer repeats")
    ap.add_argument("--skip-naive", action="store_true", help="skip the full-file parse rows")
    ap.add_argument("--only", choices=("reindex", "open", "append", "forked"), action="append",
                    help="run only these sections (repeatable)")
    ap.add_argument("--profile",
                    choices=("reindex", "open", "open-small", "worst", "uncapped", "append", "append-sync"),
                    help="cProfile one case and print its hot functions (no table, no JSON)")
    args = ap.parse_args(argv)
    if args.quick:
        args.size = "64M"
        args.repeats = min(args.repeats, 3)
        args.open_repeats = min(args.open_repeats, 20)
        args.append_repeats = min(args.append_repeats, 5)
    if args.json_out is None:
        args.json_out = str(ROOT / "bench" / "results" /
                            ("transcript-quick.json" if args.quick else "transcript.json"))
    sections = set(args.only or ("reindex", "open", "append", "forked"))

    data_dir = pathlib.Path(args.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    # Sidecars go beside the transcripts (data dir); the cache directory is the fallback.
    os.environ.setdefault("BOUNDCTX_CACHE_DIR", str(data_dir / "cache"))
    size = parse_size(args.size)
    big, big_meta = ensure_sample(data_dir, target=size, seed=args.seed, big_every=BIG_EVERY,
                                  label="big")
    small, small_meta = ensure_sample(data_dir, target=SMALL_MESSAGES * SMALL_BYTES_PER_MESSAGE,
                                      seed=args.seed, big_every=0, label="small")
    load1 = os.getloadavg()[0]
    if load1 > 0.5:
        print(f"[warn] 1-minute load average is {load1:.2f} on {os.cpu_count()} CPUs: "
              "other work is running and will show in the timings", flush=True)
    print(f"[warm] read {human_size(os.path.getsize(big))} twice: "
          f"{read_through(big, passes=2):.2f} s", flush=True)
    read_through(small, passes=2)
    facts = {"big": describe_layout(big), "small": describe_layout(small)}

    if args.profile:
        profile_case(args.profile, big, small, facts, args)
        return 0

    meta = {
        **run_header(args, versions()),
        "data": {"big": {"path": big, **big_meta, "facts": facts["big"]},
                 "small": {"path": small, **small_meta, "facts": facts["small"]}},
        "units": "seconds; GB = 1e9 bytes; p90 = nearest rank",
    }
    res = Results(args, meta)
    print(json.dumps(meta["versions"], indent=1))
    print(json.dumps(facts, indent=1))
    t_start = time.perf_counter()
    if "reindex" in sections:
        bench_reindex(res, big, big_meta, args)
        res.dump(args.json_out)
    if "open" in sections:
        bench_open(res, big, small, facts, args)
        res.dump(args.json_out)
    if "append" in sections:
        bench_append(res, big, args)
        res.dump(args.json_out)
    if "forked" in sections:
        bench_forked(res, big, args)
        res.dump(args.json_out)
    if not args.skip_naive:
        if "reindex" in sections:
            bench_naive_reindex(res, big, big_meta, args)
        if "open" in sections:
            bench_naive_open_big(res, big, args)
    meta["loadavg_end"] = os.getloadavg()
    meta["wall_s"] = time.perf_counter() - t_start
    res.dump(args.json_out)
    print()
    print(markdown(res))
    print(f"\nJSON: {args.json_out}  (wall {meta['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
