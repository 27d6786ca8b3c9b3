"""Instructions executed by the native scans, counted by callgrind: a measure of the
hot paths that the machine's load does not move, for comparing two builds.

Cases, on seeded transcripts from ``boundctx.transcript.sample.write_sample`` (the
generator ``bench_transcript.py`` uses):

- ``scan_bytes``: ``lineindex.scan_bytes`` over a ~50 MB buffer already in memory;
- ``scan_fd``: ``filescan.scan_fd`` over a ~200 MB file, cut into two parts scanned
  side by side (``threads=2``);
- ``scan_fd_one_part``: the same file in one part, a reader thread ahead of the scan
  (``threads=1``).

Each case runs in a child Python under ``valgrind --tool=callgrind`` twice: once
making the call, and once doing everything else that child does (start, imports,
reading the input) but not the call. The difference is the call's instructions, in
every thread it starts. Callgrind counts user space only, so the kernel's copy into
the read buffers is never in it; ``PYTHONHASHSEED=0`` keeps the two children's other
work the same (their difference, without the call, is a few ten thousand instructions
in about 300 million)::

    python -m bench.bench_native_instructions --label after

Each run records its label's counts in ``--json-out``, keeping the other labels there;
with both ``before`` and ``after`` present it adds their ratios.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib

from bench._harness import ROOT, callgrind_instructions, command_output, labelled_run, run_facts

MB = 1_000_000
SEED = 1234
#: The shape of bench_transcript.py's data: a 1-5 MiB tool output every 6,000 messages.
SAMPLE = {"seed": SEED, "big_every": 6000, "big_bytes": (1 << 20, 5 << 20), "compaction_every": 5000}
#: case -> (file size, the call's keyword arguments)
CASES = {
    "scan_bytes": (50 * MB, {}),
    "scan_fd": (200 * MB, {"threads": 2}),
    "scan_fd_one_part": (200 * MB, {"threads": 1}),
}


def ensure_sample(data_dir: pathlib.Path, size: int) -> tuple[pathlib.Path, dict]:
    """The seeded sample of about ``size`` bytes, generated once and reused."""
    from boundctx.transcript.sample import write_sample

    path = data_dir / f"instructions-{size // MB}MB-s{SEED}.jsonl"
    meta_path = path.with_suffix(".meta.json")
    if path.exists() and meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta["bytes"] == path.stat().st_size:
            return path, meta
    data_dir.mkdir(parents=True, exist_ok=True)
    counts = write_sample(path, target_bytes=size, sync=False, **SAMPLE)
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 24):
            digest.update(block)
    meta = {**counts, "sha256": digest.hexdigest()}
    meta_path.write_text(json.dumps(meta, indent=1))
    return path, meta


def child(case: str, path: str, *, call: bool) -> None:
    """Run one case's call once (under callgrind) and print its line count; without
    ``call``, all but the call."""
    from boundctx._native import lineindex
    from boundctx.transcript.dialects import native_table

    try:
        from boundctx._native.filescan import scan_fd
    except ModuleNotFoundError:  # a build from before the file scan had its own module
        scan_fd = lineindex.scan_fd

    table = native_table("auto")
    options = CASES[case][1]
    if case == "scan_bytes":
        data = pathlib.Path(path).read_bytes()
        if call:
            print(len(lineindex.scan_bytes(data, table, **options).kinds))
    else:
        fd = os.open(path, os.O_RDONLY)
        try:
            if call:
                print(len(scan_fd(fd, table, **options).kinds))
        finally:
            os.close(fd)


def counted(case: str, path: pathlib.Path, mode: str) -> tuple[int, list[str], str]:
    """Instructions callgrind counted in a child (``mode``: ``call`` or ``dry``), the
    command, and what the child printed."""
    return callgrind_instructions("bench.bench_native_instructions", "--child", case, str(path), mode)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", help="the build's name in the JSON (before, after, ...)")
    parser.add_argument("--json-out", default=str(ROOT / "bench" / "results" / "native-split.json"))
    parser.add_argument("--data-dir", default="/tmp/boundctx-bench")
    parser.add_argument("--only", action="append", choices=sorted(CASES))
    parser.add_argument("--child", nargs=3, metavar=("CASE", "PATH", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        case, path, mode = args.child
        child(case, path, call=mode == "call")
        return
    if not args.label:
        parser.error("--label is required")

    run = {"commit": command_output("git", "-C", str(ROOT), "rev-parse", "HEAD"),
           "facts": run_facts(("cython", "boundctx")),
           "valgrind": command_output("valgrind", "--version"), "cases": {}}
    for case in args.only or CASES:
        size, options = CASES[case]
        path, meta = ensure_sample(pathlib.Path(args.data_dir), size)
        total, command, printed = counted(case, path, "call")
        dry, _, _ = counted(case, path, "dry")
        instructions, lines = total - dry, int(printed.split()[-1])
        if lines != meta["lines"]:
            raise SystemExit(f"{case}: {lines} lines, the sample has {meta['lines']}")
        run["cases"][case] = {"instructions": instructions, "child_with_call": total, "child_without_call": dry,
                              "options": options, "file": {"path": str(path), **meta},
                              "command": " ".join(command)}
        print(f"{args.label:>8} {case:<18} {instructions:>15,} instructions  "
              f"({meta['bytes']:,} bytes, {lines:,} lines)", flush=True)
    labelled_run(pathlib.Path(args.json_out), args.label, run, measure="instructions",
                 how=("callgrind instruction counts (Ir, user space, every thread): a child making the call "
                      "minus the same child without it; python -m bench.bench_native_instructions --label <build>"))

if __name__ == "__main__":
    main()
