#!/usr/bin/env python
"""Start-up: what a user waits for before a command does any work.

Side by side in one run, each a fresh process, warm page cache, medians:

* ``python -c pass`` (the interpreter alone) and ``boundctx --help``;
* ``boundctx reindex FILE`` against ``wc -l FILE`` on the same big transcript
  (default 1 GiB, generated once with ``boundctx sample`` under ``--data-dir``).

Goals (issue 12): ``boundctx --help`` ≤ 60 ms; the ``reindex`` process ≤ 1.0× the
``wc -l`` process on 1 GiB.

Usage::

    python -m bench.bench_startup               # 1 GiB (first run generates it: ~2 min)
    python -m bench.bench_startup --size 64M    # quicker
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import time

from bench._harness import ROOT, markdown_table, run_facts


def boundctx_command() -> list[str]:
    """The console script of the Python running this (run it from a regular install:
    an editable one checks its native build on every import)."""
    beside = pathlib.Path(sys.executable).with_name("boundctx")
    exe = str(beside) if beside.exists() else shutil.which("boundctx")
    return [exe] if exe else [sys.executable, "-m", "boundctx"]


def editable_install() -> bool:
    """Whether the boundctx this Python imports is an editable install: one that checks
    its native build on every import (scikit-build-core's, ~190 ms a process here), which
    a user's regular install never pays."""
    try:
        text = importlib.metadata.distribution("boundctx").read_text("direct_url.json")
    except importlib.metadata.PackageNotFoundError:
        return False
    try:
        return bool(json.loads(text or "{}").get("dir_info", {}).get("editable"))
    except ValueError:
        return False


def once(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def interleaved(commands: dict[str, list[str]], repeats: int) -> dict[str, list[float]]:
    """Each command once per round, round after round, so a change in the machine's load
    lands on every command alike (the first round warms the page cache and .pyc files
    and is dropped)."""
    times: dict[str, list[float]] = {name: [] for name in commands}
    for round_ in range(repeats + 1):
        for name, argv in commands.items():
            took = once(argv)
            if round_:
                times[name].append(took)
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="1G", help="transcript size for the reindex row (default 1G)")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--data-dir", default="/tmp/boundctx-bench")
    ap.add_argument("--json-out", default=str(ROOT / "bench" / "results" / "startup.json"))
    args = ap.parse_args()
    cmd = boundctx_command()
    editable = editable_install()
    if editable:
        print("[warn] boundctx is an editable install here: every process checks its native build first, "
              "so the boundctx rows are slower than a regular install's (pip install . in a venv)",
              file=sys.stderr, flush=True)
    data = pathlib.Path(args.data_dir)
    data.mkdir(parents=True, exist_ok=True)
    path = data / f"startup-sample-{args.size}.jsonl"
    if not path.exists():
        print(f"generating {path} ...", file=sys.stderr)
        subprocess.run(cmd + ["sample", str(path), "--size", args.size], check=True)
    times = interleaved({
        "python -c pass": [sys.executable, "-c", "pass"],
        "boundctx --help": cmd + ["--help"],
        "wc -l FILE": ["wc", "-l", str(path)],
        "boundctx reindex FILE": cmd + ["reindex", str(path)],
    }, args.repeats)
    rows = {name: statistics.median(t) for name, t in times.items()}
    # The ratio of each round, then their median: the two processes ran back to back.
    ratios = [r / w for r, w in zip(times["boundctx reindex FILE"], times["wc -l FILE"])]
    report = {"rows_s": rows, "samples_s": times, "file_bytes": path.stat().st_size, "command": cmd,
              "help_ms": rows["boundctx --help"] * 1e3,
              "reindex_over_wc": statistics.median(ratios),
              "reindex_over_wc_rounds": ratios,
              "load_average": os.getloadavg(), "editable_install": editable, "versions": run_facts(("boundctx",))}
    pathlib.Path(args.json_out).write_text(json.dumps(report, indent=1) + "\n")
    print(markdown_table(("process", "median"), [(name, f"{s * 1e3:.0f} ms") for name, s in rows.items()]))
    print(f"\nboundctx --help: {report['help_ms']:.0f} ms (goal <= 60 ms); reindex / wc -l: "
          f"{report['reindex_over_wc']:.2f}x (goal <= 1.0x) on {report['file_bytes'] / 2**30:.2f} GiB")
    print(f"JSON: {args.json_out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
