"""``boundctx sample PATH``: write a seeded synthetic transcript to try things on."""

from __future__ import annotations

import os
import sys

from boundctx.cli._progress import byte_progress

__all__ = ["add_parser"]

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_size(text: str) -> int:
    """'2M', '1G', '500k' or a number of bytes."""
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    unit = t[-1:] if t[-1:] in _UNITS else ""
    try:
        value = float(t[: len(t) - len(unit)])
    except ValueError:
        raise ValueError(f"size {text!r} is not a number of bytes like 2M, 1G or 500k") from None
    if not value > 0 or value == float("inf"):  # nan, inf: not a size
        raise ValueError(f"size must be a positive number of bytes like 2M, got {text!r}")
    return int(value * _UNITS[unit])


def add_parser(sub, summary: str) -> None:
    p = sub.add_parser(
        "sample", help=summary,
        description="Write a synthetic transcript (messages in several "
                    "scripts, big tool outputs, compactions) to PATH. It is "
                    "written beside PATH as .NAME.HEX.partial and renamed onto "
                    "PATH only when complete: an interrupted run leaves no PATH.")
    p.add_argument("path", metavar="PATH")
    p.add_argument("--size", default="2M", help="about this many bytes (default 2M; e.g. 1G)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--force", action="store_true",
                   help="replace PATH if it exists (once the new sample is complete)")
    p.set_defaults(run=run)


def run(args) -> int:
    try:
        size = parse_size(args.size)
    except ValueError as exc:
        print(f"boundctx sample: {exc}", file=sys.stderr)
        return 2
    if os.path.lexists(args.path) and not args.force:
        print(f"boundctx sample: {args.path!r} exists; pass --force to replace it", file=sys.stderr)
        return 2
    folder = os.path.dirname(os.path.realpath(args.path))
    if not os.path.isdir(folder):
        print(f"boundctx sample: no folder {folder!r} to write {args.path!r} in", file=sys.stderr)
        return 2
    from boundctx.transcript.sample import write_sample

    try:
        with byte_progress(size, "sample") as report:
            # A compaction every 500 messages, so even a small sample shows one in force.
            counts = write_sample(args.path, target_bytes=size, seed=args.seed, compaction_every=500,
                                  replace=args.force, progress=report)
    except OSError as exc:  # the folder is read-only, the disk is full, PATH appeared meanwhile
        print(f"boundctx sample: {exc}; nothing was written to {args.path!r}", file=sys.stderr)
        return 1
    print(f"{args.path}: {counts['messages']} messages, {counts['compactions']} compactions, "
          f"{counts['bytes']} bytes")
    return 0
