"""``boundctx reindex PATH...``: rebuild layout sidecars, with a per-file summary."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from boundctx.cli._dialect import AUTO, add_dialect_argument
from boundctx.cli._progress import byte_progress

if TYPE_CHECKING:
    from boundctx.transcript import ReindexReport

__all__ = ["LOGS", "add_parser", "reindex_paths"]

#: Nothing reindex runs logs (a test holds that it never imports logging), so the CLI
#: need not set logging up: on a slow machine that import alone is ~15 ms of a command
#: timed against `wc -l`.
LOGS = False


def add_parser(sub, summary: str) -> None:
    p = sub.add_parser(
        "reindex", help=summary,
        description="Rescan JSONL transcripts and rewrite their layout sidecars. "
                    "Folders are searched recursively for *.jsonl files.")
    p.add_argument("paths", nargs="+", metavar="PATH")
    add_dialect_argument(p, "the transcripts'")
    p.add_argument("--json", action="store_true", help="print one JSON report per file")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="force the progress bar on or off (default: on a terminal, for big jobs)")
    p.set_defaults(run=run)


def reindex_paths(paths: list[str], *, dialect: str = "auto",
                  progress: bool | None = None) -> list[ReindexReport]:
    """Reindex every transcript named or found under ``paths``."""
    from boundctx.transcript import ReindexReport, iter_transcripts, reindex

    files: list[str] = []
    reports: list[ReindexReport] = []
    for p in paths:
        if not os.path.exists(p):
            reports.append(ReindexReport(path=p, ok=False, error=f"no such file or folder: {p!r}"))
            continue
        found = list(iter_transcripts([p]))
        if os.path.isdir(p) and not found:
            reports.append(ReindexReport(path=p, ok=False, error=f"no *.jsonl transcripts under {p!r}"))
        files.extend(found)
    total = 0
    for f in files:
        try:
            total += os.path.getsize(f)
        except OSError:
            pass
    base = 0
    with byte_progress(total, "reindex", enabled=progress) as report:
        for f in files:
            r = reindex(f, dialect=dialect, progress=lambda n: report(base + n))
            base += r.bytes
            reports.append(r)
    return reports


def run(args) -> int:
    reports = reindex_paths(args.paths, dialect=args.dialect or AUTO, progress=args.progress)
    if args.json:
        import json
    for r in reports:
        if args.json:
            sys.stdout.write(json.dumps(r._asdict()) + "\n")
        elif r.ok:
            extra = f", {r.corrupt} corrupt" if r.corrupt else ""
            extra += f", {r.torn_bytes} torn bytes at the end" if r.torn_bytes else ""
            print(f"{r.path}: {r.messages} messages, {r.compactions} compactions, "
                  f"{r.lines} lines, {r.bytes} bytes{extra} ({r.seconds * 1000:.1f} ms)")
        else:
            print(f"{r.path}: FAILED: {r.error}", file=sys.stderr)
    failed = sum(not r.ok for r in reports)
    if failed and not args.json:
        print(f"{failed} of {len(reports)} failed", file=sys.stderr)
    return 1 if failed else 0
