"""``boundctx session get PATH``: print one bounded window of a transcript; ``session
import`` and ``session export`` (PostgreSQL) are :mod:`boundctx.cli.session_transfer`'s."""

from __future__ import annotations

import os
import sys

import msgspec

from boundctx import config
from boundctx.cli._dialect import AUTO, add_dialect_argument
from boundctx.cli._progress import byte_progress
from boundctx.cli.session_transfer import add_parsers as add_transfer_parsers
from boundctx.errors import TranscriptError

__all__ = ["add_parser"]


def add_parser(sub, summary: str) -> None:
    p = sub.add_parser("session", help=summary)
    ssub = p.add_subparsers(dest="session_command", metavar="SUBCOMMAND")
    ssub.required = True
    g = ssub.add_parser("get", help="print a window of messages",
                        description="Print the newest messages before --before (default: the "
                                    "end), at most --limit of them and --page-bytes in all, each cut "
                                    "for display at --content-limit bytes of text. A session whose "
                                    "entries fork is read along its newest branch, or --leaf's.")
    g.add_argument("path", metavar="PATH")
    g.add_argument("--before", type=int, default=None, metavar="N",
                   help="end the window before message N (default: after the newest)")
    # Unset limits are the renderer preset's: the transcript.window_* settings.
    g.add_argument("--limit", type=int, default=None, metavar="N",
                   help="at most N messages (default: the setting transcript.window_messages, "
                        f"{config.KEYS['transcript.window_messages'].default} unless set)")
    g.add_argument("--content-limit", type=int, default=None, metavar="N",
                   help="display budget per message in bytes of text; 0 shows none (default: the "
                        "setting transcript.window_content_bytes, "
                        f"{config.KEYS['transcript.window_content_bytes'].default} unless set)")
    g.add_argument("--page-bytes", type=int, default=None, metavar="N",
                   help="bytes of the file the whole window shows at most: the newest messages "
                        "that fit (default: the setting transcript.window_page_bytes, "
                        f"{config.KEYS['transcript.window_page_bytes'].default:,} unless set)")
    g.add_argument("--leaf", default=None, metavar="LINE|ID",
                   help="read the branch ending at this line or entry id (a session whose "
                        "entries fork, as a rewind leaves them; default: the newest branch)")
    g.add_argument("--branches", action="store_true",
                   help="list the session's branches (leaf, messages, where each leaves the newest) "
                        "instead of a window")
    add_dialect_argument(g, "the transcript's")
    g.add_argument("--json", action="store_true", help="print the window as JSON")
    g.set_defaults(run=run_get)
    add_transfer_parsers(ssub)


#: The API's words in error messages, and the command line's.
_CLI_WORDS = (("message_before=", "--before "), ("message_before", "--before"), ("message_limit", "--limit"),
              ("content_limit", "--content-limit"), ("page_bytes", "--page-bytes"), ("leaf=", "--leaf "),
              (" or None, got", ", got"),
              (", or pass create=True to start one", ""))


def in_cli_words(exc: BaseException) -> str:
    """An error's message with the API's parameter names replaced by the flags a command
    line user typed (and no ``[Errno 2]`` in front)."""
    message = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    for api, cli in _CLI_WORDS:
        message = message.replace(api, cli)
    return message


def run_get(args) -> int:
    from boundctx.transcript import Transcript
    from boundctx.transcript.dialects import display

    try:
        # Settings first: a bad one is refused before a big transcript is scanned.
        settings = (config.load() if args.limit is None or args.content_limit is None or args.page_bytes is None
                    else None)
        size = os.path.getsize(args.path) if os.path.isfile(args.path) else 0
        # A first open of a big transcript scans it: show that, not a frozen terminal.
        with byte_progress(size, "indexing") as report:
            t = Transcript.open(args.path, dialect=args.dialect or AUTO, progress=report)
        with t:
            if args.branches:
                listed = t.branches()
            else:
                # An option not given is the preset's (the renderer settings), not uncapped.
                given = {k: v for k, v in (("message_limit", args.limit), ("content_limit", args.content_limit),
                                           ("page_bytes", args.page_bytes)) if v is not None}
                w = t.window(message_before=args.before, preset="renderer", settings=settings, leaf=args.leaf,
                             **given)
    except (TranscriptError, ValueError, TypeError) as exc:
        print(f"boundctx session get: {in_cli_words(exc)}", file=sys.stderr)
        return 2
    if args.branches:
        if args.json:
            sys.stdout.write(msgspec.json.encode(listed).decode() + "\n")
            return 0
        print(f"# {args.path}: {len(listed)} branch{'es' if len(listed) != 1 else ''}")
        for b in listed:
            where = "the newest, read by default" if b.active else f"leaves it after message {b.shared - 1}"
            print(f"--leaf {b.leaf}  {b.message_count} messages, {where}"
                  f"{'  (id ' + b.leaf_id + ')' if b.leaf_id else ''}")
        return 0
    if args.json:
        sys.stdout.write(msgspec.json.encode(w).decode() + "\n")
        return 0
    last = w.message_start + len(w.messages) - 1
    span = f"{w.message_start}-{last}" if w.messages else "none"
    print(f"# {args.path}: messages {span} of {w.message_count}"
          f"{' (older messages before; use --before ' + str(w.message_start) + ')' if w.has_more_before else ''}")
    # File order: the compaction in force first, later ones where they happened.
    for e in sorted([*w.compactions, *w.messages], key=lambda e: e.line):
        role, text = display(e)
        head = f"compaction (line {e.line})" if e.index is None else f"[{e.index}] {role}"
        print(f"\n## {head}\n{text}")
    return 0
