"""The ``--dialect`` option of the commands that open transcripts, checked against the
table of formats (:data:`boundctx.transcript.dialects.NAMES`).

The table is imported only when the option is given: describing a command
(``--help``) must not load the transcript package and the native core.
"""

from __future__ import annotations

import argparse

__all__ = ["AUTO", "add_dialect_argument"]

AUTO = "auto"


def add_dialect_argument(parser: argparse.ArgumentParser, whose: str) -> None:
    # No string default: argparse would pass it through `type`, importing the table.
    parser.add_argument("--dialect", default=None, type=_dialect_name, metavar="NAME",
                        help=f"{whose} format: auto (the default: any format boundctx reads), or one "
                             "format's name (a name it does not know is answered with the list)")


def _dialect_name(text: str) -> str:
    from boundctx.transcript.dialects import NAMES

    if text not in NAMES:
        raise argparse.ArgumentTypeError(f"unknown transcript dialect {text!r}; choose one of {', '.join(NAMES)}")
    return text
