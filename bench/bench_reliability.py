"""Reliability: the fault campaign at size, tabulated by category.

Runs the campaigns of ``tests/faults/`` (one module each, the same code the fault tests run
small) with real processes and real files, and counts per category: faults injected,
records acknowledged, records lost, wrong data, crashes, hangs. Categories:

- **kill**: kill -9 of a writer at random points (records of 1 KiB-5 MiB)
- **concurrent**: several appenders at once under the write lock, some killed
- **rewrite**: kill -9 during edit/delete/truncate (full-history rewrites)
- **paging**: a reader paging back to message 0 while others append and rewrite
- **disk-full**: appends on a full 2 MiB tmpfs (root only; skipped with the reason otherwise)
- **replace**: the path replaced (file, symlink, directory, FIFO, device, nothing) while open
- **odd-records**: valid JSON lines of every dialect (boundctx/pi, Claude Code, Codex) with
  one field, at any depth, of another JSON type (``tests/faults/odd_records.py``): every
  one through ``chat_messages`` on a real file, some through ``boundctx ask --transcript``
  in real processes; its "records acknowledged" are the other records' messages that must
  stay, "records lost" those missing, "wrong data" malformed messages or lines gone
  without a notice
- **cross-origin**, **cursor-edits**, **hostile-connections**, **settings-extremes**,
  **path-races**: the server's edges (``tests/faults/server_edges.py``), each against a
  real ``boundctx serve`` process on loopback with the scripted model: requests from other
  web pages; edits by cursor while other processes rewrite; hostile request heads and
  idle connections beside a probe; every writable setting at its ends, then replies; a
  session's name swapped to symlinks out of the folder, FIFOs and folders under requests
- **fuzz**: the coverage-guided native fuzzer (``tests/fuzz/atheris_native.py``) for
  ``--fuzz-seconds``; its "faults" are inputs run (skipped without atheris)

Run: ``python -m bench.bench_reliability`` (15-20 minutes on 2 cores; ``--scale``
multiplies every campaign's size, ``--quick`` is a seconds-long smoke run). Writes
``bench/results/reliability.json`` (``reliability-quick.json`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

from bench._harness import ROOT, markdown_table, run_facts, run_header
from tests.faults import (  # the campaigns, shared with tests/faults
    concurrent_appenders,
    disk_full,
    kill_writer,
    paging,
    path_replacement,
    rewrite_kill,
)
from tests.faults import odd_records as odd
from tests.faults import server_edges as edges
from tests.faults.core import Tally

#: Each category's campaign at scale 1 (15-20 minutes in all on 2 cores, with the fuzzer;
#: the five of the server's edges take about 10).
SIZES = {
    "kill": {"kills": 300},
    "concurrent": {"rounds": 6, "writers": 4, "records": 40, "kills": 6},
    "rewrite": {"kills": 80},
    "paging": {"rounds": 4, "appenders": 2, "records": 40, "rewrites": 15},
    "disk-full": {"rounds": 40},
    "replace": {"rounds": 3},
    "odd-records": {"per_dialect": None, "asks": 4},  # None: every odd record of every template
    "cross-origin": {"rounds": 25, "foreign": 500},
    "cursor-edits": {"rounds": 6, "clients": 3, "attempts": 150},
    "hostile-connections": {"seconds": 120},
    "settings-extremes": {"rounds": 16, "combinations": 16},
    "path-races": {"rounds": 8, "seconds": 15, "clients": 4},
}
QUICK = {
    "kill": {"kills": 4},
    "concurrent": {"rounds": 1, "writers": 2, "records": 4, "kills": 1},
    "rewrite": {"kills": 2},
    "paging": {"rounds": 1, "appenders": 1, "records": 4, "rewrites": 2},
    "disk-full": {"rounds": 2},
    "replace": {"rounds": 1},
    "odd-records": {"per_dialect": 40, "asks": 1},
    "cross-origin": {"rounds": 1, "foreign": 40},
    "cursor-edits": {"rounds": 1, "clients": 2, "attempts": 8},
    "hostile-connections": {"seconds": 2},
    "settings-extremes": {"rounds": 1, "combinations": 1},
    "path-races": {"rounds": 1, "seconds": 2, "clients": 2},
}
CATEGORIES = (*SIZES, "fuzz")


def _scaled(size: dict, scale: float) -> dict:
    # Counts of processes and clients stay as they are; counts of faults, records and
    # seconds scale.
    fixed = {"writers", "appenders", "clients"}
    return {k: v if k in fixed or v is None else max(1, round(v * scale)) for k, v in size.items()}


def run_category(name: str, size: dict, workdir: pathlib.Path, seed: int) -> Tally:
    """One category's campaign (several rounds where the campaign is one run)."""
    if name == "kill":
        return kill_writer.kill_writers(workdir, kills=size["kills"], seed=seed)
    if name == "rewrite":
        return rewrite_kill.kill_rewriters(workdir, kills=size["kills"], seed=seed)
    if name == "replace":
        return path_replacement.path_replacement(workdir, rounds=size["rounds"], seed=seed)
    if name == "odd-records":
        return odd.odd_records(workdir, per_dialect=size["per_dialect"], asks=size["asks"], seed=seed)
    if name == "cross-origin":
        return edges.cross_origin(workdir, rounds=size["rounds"], foreign=size["foreign"], seed=seed)
    if name == "cursor-edits":
        return edges.cursor_edits(workdir, rounds=size["rounds"], clients=size["clients"], attempts=size["attempts"],
                                  seed=seed)
    if name == "hostile-connections":
        return edges.hostile_connections(workdir, seconds=size["seconds"], seed=seed)
    if name == "settings-extremes":
        return edges.settings_extremes(workdir, rounds=size["rounds"], combinations=size["combinations"], seed=seed)
    if name == "path-races":
        return edges.path_races(workdir, rounds=size["rounds"], seconds=size["seconds"], clients=size["clients"],
                                seed=seed)
    if name == "disk-full":
        mount = workdir / "small"
        mount.mkdir(exist_ok=True)
        why = disk_full.mount_small_tmpfs(mount)
        if why:
            tally = Tally("disk full (2 MiB tmpfs)")
            tally.notes["skipped"] = why
            return tally
        try:
            return disk_full.disk_full(mount, rounds=size["rounds"], seed=seed)
        finally:
            disk_full.unmount(mount)
    total = None
    for r in range(size["rounds"]):
        if name == "concurrent":
            t = concurrent_appenders.concurrent_appenders(workdir, writers=size["writers"], records=size["records"],
                                             kills=size["kills"], seed=seed + r)
        else:
            t = paging.reader_under_rewrites(workdir, appenders=size["appenders"], records=size["records"],
                                              rewrites=size["rewrites"], seed=seed + r)
        if total is None:
            total = t
        else:
            total.merge(t)
    return total


def run_fuzz(seconds: int, workdir: pathlib.Path) -> Tally:
    """The atheris harness for ``seconds``; a finding is a crash, a stall a hang."""
    tally = Tally("native entry points, arbitrary inputs (atheris)")
    try:
        import atheris  # noqa: F401
    except ImportError:
        tally.notes["skipped"] = "atheris is not installed (pip install atheris)"
        return tally
    started = time.monotonic()
    art = workdir / "fuzz-artifacts"
    art.mkdir(exist_ok=True)
    try:
        out = subprocess.run([sys.executable, "-m", "tests.fuzz.atheris_native",
                              f"-max_total_time={seconds}", "-max_len=2048", f"-artifact_prefix={art}/",
                              "-timeout=30"], cwd=ROOT, capture_output=True, text=True, timeout=seconds + 300)
    except subprocess.TimeoutExpired:
        tally.hangs += 1
        tally.problem(f"the fuzzer did not finish within {seconds + 300} s")
        return tally
    log = out.stdout + out.stderr
    done = re.search(r"Done (\d+) runs in (\d+) second", log)
    tally.faults = int(done[1]) if done else 0
    cov = re.findall(r"cov: (\d+) ft: (\d+)", log)
    if cov:
        tally.notes["coverage (edges, features)"] = f"{cov[-1][0]}, {cov[-1][1]}"
    crashes = sorted(art.glob("crash-*")) + sorted(art.glob("timeout-*"))
    if out.returncode != 0 or crashes:
        tally.crashes += 1
        tally.problem(f"fuzzer exit {out.returncode}; artifacts {[c.name for c in crashes]}: {log[-1500:]}")
    tally.seconds = time.monotonic() - started
    return tally


def table(rows: list[dict]) -> str:
    return markdown_table(
        ("category", "faults injected", "records acknowledged", "records lost", "wrong data", "crashes", "hangs", "s"),
        [(r["category"], f"skipped: {r['notes']['skipped']}") if "skipped" in r["notes"] else
         (r["category"], f"{r['faults']:,}", f"{r['acknowledged']:,}", r["lost"], r["wrong"], r["crashes"], r["hangs"],
          f"{r['seconds']:.0f}") for r in rows])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every campaign's size (default 1)")
    ap.add_argument("--quick", action="store_true", help="a smoke run of seconds")
    ap.add_argument("--only", action="append", choices=CATEGORIES, help="run only these categories")
    ap.add_argument("--fuzz-seconds", type=int, default=60, help="the atheris run's length (default 60)")
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--workdir", default=None, help="where the transcripts go (default a temporary folder)")
    ap.add_argument("--json-out", default=None,
                    help="default bench/results/reliability.json (reliability-quick.json with --quick)")
    args = ap.parse_args(argv)
    sizes = QUICK if args.quick else {k: _scaled(v, args.scale) for k, v in SIZES.items()}
    fuzz_seconds = min(args.fuzz_seconds, 5) if args.quick else args.fuzz_seconds
    json_out = pathlib.Path(args.json_out or ROOT / "bench" / "results" /
                            ("reliability-quick.json" if args.quick else "reliability.json"))
    workdir = pathlib.Path(args.workdir or tempfile.mkdtemp(prefix="boundctx-reliability-"))
    workdir.mkdir(parents=True, exist_ok=True)
    # Layout sidecars that cannot live beside a transcript: a cache of the run's own.
    os.environ["BOUNDCTX_CACHE_DIR"] = str(workdir / "cache")
    meta = {**run_header(args, run_facts(("boundctx", "numpy", "msgspec", "atheris"))),
            "sizes": sizes, "fuzz_seconds": fuzz_seconds, "workdir": str(workdir)}
    rows = []
    started = time.monotonic()
    try:
        for name in args.only or CATEGORIES:
            print(f"== {name}", flush=True)
            if name == "fuzz":
                tally = run_fuzz(fuzz_seconds, workdir)
            else:
                folder = workdir / name
                folder.mkdir(exist_ok=True)
                tally = run_category(name, sizes[name], folder, args.seed)
            row = {"key": name, **tally.as_dict()}
            rows.append(row)
            print(table([row]).splitlines()[-1], flush=True)
            for p in tally.problems[:5]:
                print("   problem:", p[:500], flush=True)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    meta["wall_s"] = time.monotonic() - started
    json_out.parent.mkdir(parents=True, exist_ok=True)
    json_out.write_text(json.dumps({"meta": meta, "categories": rows}, indent=1, default=str))
    print()
    print(table(rows))
    print(f"\nwall {meta['wall_s']:.0f} s; [json] {json_out}")
    return 0 if all(r["lost"] == r["wrong"] == r["crashes"] == r["hangs"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
