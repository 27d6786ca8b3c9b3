"""The ``boundctx`` command line: each command parses its arguments and calls a plain
function of its module."""

from __future__ import annotations

import argparse
import sys

from boundctx.cli import ask as _ask
from boundctx.cli import config as _config
from boundctx.cli import plan as _plan
from boundctx.cli import reindex as _reindex
from boundctx.cli import sample as _sample
from boundctx.cli import session as _session
from boundctx.cli import split as _split

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="boundctx",
        description="Bounded-context engine for chat with local and remote language models.")
    from boundctx import __version__

    parser.add_argument("--version", action="version", version=f"boundctx {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    _ask.add_parser(sub)
    _plan.add_parser(sub)
    _reindex.add_parser(sub)
    _session.add_parser(sub)
    _sample.add_parser(sub)
    _split.add_parser(sub)
    _config.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
