"""The ``boundctx`` command line: each command parses its arguments and calls a plain
function of its module."""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings
from collections.abc import Iterable

__all__ = ["COMMANDS", "build_parser", "main"]

#: Every command: the module that defines it (``add_parser(sub, summary)`` and the
#: functions it runs) and the line ``boundctx --help`` shows for it. A module is
#: imported only when its command runs or its help is asked for: ``boundctx --help``
#: and a command's start-up never pay for the others' imports (numpy, the native core,
#: llama-cpp-python).
COMMANDS: dict[str, tuple[str, str]] = {
    "ask": ("boundctx.cli.ask", "answer a question, reading long inputs completely"),
    "plan": ("boundctx.cli.plan", "turn a message into a plan of operations (nothing is carried out)"),
    "reindex": ("boundctx.cli.reindex", "rebuild the layout of transcripts (files or folders)"),
    "session": ("boundctx.cli.session", "read transcripts in bounded windows; move sessions to and from PostgreSQL"),
    "sample": ("boundctx.cli.sample", "write a seeded synthetic transcript"),
    "split": ("boundctx.cli.split", "cut a text file into sections that fit a token budget"),
    "config": ("boundctx.cli.config", "show, read or change settings"),
    "doctor": ("boundctx.cli.doctor", "check what this machine runs and whether local generation works"),
    "serve": ("boundctx.cli.serve", "serve the OpenAI chat-completions API with boundctx's bounds behind it"),
}

#: What ``-v`` / ``-q`` show: the level of boundctx's own log (what was decided and
#: done) and of llama.cpp's (its load and evaluation chatter, quiet by default), as
#: logging's levels (ERROR 40, WARNING 30, INFO 20, DEBUG 10).
_LOG_LEVELS = {-1: (40, 40), 0: (30, 40), 1: (20, 30), 2: (10, 10)}


def _add_verbosity(parser: argparse.ArgumentParser) -> None:
    # SUPPRESS: a subcommand's own default must not clobber `boundctx -v COMMAND`.
    parser.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                        help="say more: -v what boundctx decided, -vv llama.cpp's own log too")
    parser.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                        help="only answers and errors: no progress lines, no notices")


def _verbosity(args: argparse.Namespace) -> int:
    return -1 if getattr(args, "quiet", False) else min(getattr(args, "verbose", 0), 2)


def _configure_logging(level: int):
    """Show boundctx's log on stderr at ``level``; returns what undoes it (``main`` may be
    called again in the same process, by a test or a front end)."""
    import logging

    class Handler(logging.StreamHandler):
        """Log records on stderr as ``boundctx: message`` (read when the record is
        emitted, so a test's captured stderr gets them)."""

        def __init__(self) -> None:
            super().__init__(sys.stderr)
            self.setFormatter(logging.Formatter("boundctx: %(message)s"))

        def emit(self, record: logging.LogRecord) -> None:
            self.setStream(sys.stderr)
            super().emit(record)

    own, llama = _LOG_LEVELS[level]
    root = logging.getLogger("boundctx")
    llama_logger = logging.getLogger("boundctx.llama_cpp")
    before = (root.level, root.propagate, llama_logger.level)
    handler = Handler()
    handler.setLevel(min(own, llama))
    root.addHandler(handler)
    root.setLevel(min(own, llama))
    root.propagate = False  # one line per record, not a second one from the root logger
    llama_logger.setLevel(llama)

    def restore() -> None:
        root.removeHandler(handler)
        root.level, root.propagate = before[0], before[1]
        llama_logger.setLevel(before[2])

    return restore


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    print(f"boundctx: warning: {message}", file=sys.stderr)


def build_parser(commands: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """The command line's parser: every command's arguments (default), or only those of
    ``commands``, the others standing in by name and summary (enough for ``--help``
    and for argparse to name the choices)."""
    load = set(COMMANDS) if commands is None else set(commands)
    parser = argparse.ArgumentParser(
        prog="boundctx",
        description="Bounded-context engine for chat with local and remote language models.")
    from boundctx import __version__

    parser.add_argument("--version", action="version", version=f"boundctx {__version__}")
    _add_verbosity(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, (module, summary) in COMMANDS.items():
        if name in load:
            importlib.import_module(module).add_parser(sub, summary)
        else:
            sub.add_parser(name, help=summary)
    _add_verbosity_below(sub)  # `boundctx COMMAND -v` as well as `boundctx -v COMMAND`
    return parser


def _add_verbosity_below(sub: argparse._SubParsersAction) -> None:
    for command in sub.choices.values():
        _add_verbosity(command)
        for action in command._actions:
            if isinstance(action, argparse._SubParsersAction):  # `config show -v`
                _add_verbosity_below(action)


def _command_named(argv: list[str]) -> str | None:
    """The command ``argv`` names: its first word that is not an option (the top-level
    options take no values)."""
    return next((a for a in argv if not a.startswith("-")), None)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    named = _command_named(argv)
    parser = build_parser([named] if named is not None and named in COMMANDS else [])
    args = parser.parse_args(argv)
    args.verbosity = _verbosity(args)
    command = COMMANDS.get(args.command)
    logs = command is None or getattr(importlib.import_module(command[0]), "LOGS", True)
    restore_logging = _configure_logging(args.verbosity) if logs else (lambda: None)
    try:
        with warnings.catch_warnings():
            # boundctx's warnings are for the user: one plain line each on stderr.
            from boundctx.errors import InexactCountWarning, UnknownVariableWarning

            for category in (InexactCountWarning, UnknownVariableWarning):
                warnings.simplefilter("default", category)
            warnings.showwarning = _show_warning
            return int(args.run(args) or 0)
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        restore_logging()
