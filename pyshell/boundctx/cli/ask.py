"""``boundctx ask "question"``: one bounded reply, on the embedded model or a server.

Progress (which section, which worker, how long) goes to stderr, kept apart from the
streamed answer on stdout, so ``boundctx ask ... > answer.txt`` holds only the answer.
"""

from __future__ import annotations

import sys
import threading
import time

import msgspec

from boundctx.cli._provider import add_provider_arguments, make_provider

__all__ = ["add_parser"]


def add_parser(sub) -> None:
    p = sub.add_parser(
        "ask", help="answer a question, reading long inputs completely",
        description="Answer QUESTION with the embedded local model (default) or an OpenAI-compatible "
                    "server. Files too large for the context are read completely, section by section, "
                    "by note-taking workers.")
    p.add_argument("question", metavar="QUESTION")
    p.add_argument("--file", action="append", default=[], metavar="F", help="attach a text file (repeatable)")
    p.add_argument("--transcript", metavar="T",
                   help="continue the conversation in transcript T (JSONL; boundctx, pi, Claude Code or Codex "
                        "CLI): its newest messages come first, and the question and answer are appended "
                        "(a new file is started if T does not exist)")
    p.add_argument("--history", type=int, default=50, metavar="N",
                   help="newest N messages of the transcript to start from (default 50)")
    p.add_argument("--no-save", action="store_true", help="read the transcript but do not append to it")
    add_provider_arguments(p)
    p.add_argument("--analysis-workers", type=int, metavar="N", help="note-taking workers, 0-8 (chat.analysis_workers)")
    p.add_argument("--max-tokens", type=int, default=512, help="reply budget in tokens (default 512)")
    p.add_argument("--json", action="store_true", help="print every event as a JSON line")
    p.set_defaults(run=run)


def _read_transcript(args):
    """(conversation or None, write style or None) of ``--transcript``.

    The write style is settled here, before any model call, so a transcript boundctx
    will not write into is refused before minutes of generation, not after. A missing
    file is a new conversation (created when the answer is appended)."""
    if not args.transcript:
        return None, None
    import os

    from boundctx.transcript import Transcript
    from boundctx.transcript.chat import Conversation, chat_messages, writable_style

    if args.history < 0:
        raise ValueError(f"--history must be >= 0, got {args.history}")
    if not os.path.exists(args.transcript):
        if args.no_save:
            raise FileNotFoundError(f"no transcript at {args.transcript!r} (with --no-save it is only read)")
        return Conversation([], []), "text"
    with Transcript.open(args.transcript) as transcript:
        window = transcript.window(message_limit=args.history)
    return chat_messages(window), None if args.no_save else writable_style(window)


def _save(args, conversation, style, answer: str, files) -> None:
    from boundctx.transcript import Transcript
    from boundctx.transcript.chat import append_exchange

    with Transcript.open(args.transcript, create=True) as transcript:
        append_exchange(transcript, args.question, answer, style=style, parent_id=conversation.last_id,
                        attachments=[(path, len(text)) for path, text in files])


def _progress_line(event) -> str:
    return (f"reading section {event.section}/{event.sections} (worker {event.worker + 1}, "
            f"{event.phase}) {event.elapsed_s:5.1f} s")


def run(args) -> int:
    from boundctx import config
    from boundctx.analysis import Engine
    from boundctx.errors import BoundctxError
    from boundctx.events import AnalysisProgress, Done, Failed, ReplyDelta, ToolCall

    overrides = {}
    if args.n_ctx is not None:
        overrides["chat.n_ctx"] = args.n_ctx
    if args.analysis_workers is not None:
        overrides["chat.analysis_workers"] = args.analysis_workers
    style = None
    try:
        settings = config.load(overrides=overrides)
        files = []
        for path in args.file:
            with open(path, "rb") as f:  # bytes that are not UTF-8 are kept, not dropped
                files.append((path, f.read().decode("utf-8", "surrogateescape")))
        conversation, style = _read_transcript(args)
        messages = (conversation.messages if conversation else []) + [{"role": "user", "content": args.question}]
        for notice in conversation.notices if conversation else []:
            print(f"boundctx ask: transcript: {notice}", file=sys.stderr)
        provider = make_provider(args, settings["chat.n_ctx"])
    except (OSError, ValueError, ImportError, BoundctxError) as exc:
        print(f"boundctx ask: {exc}", file=sys.stderr)
        return 2
    cancel = threading.Event()
    answer: list[str] = []
    live = sys.stderr.isatty() and not args.json
    started = time.monotonic()
    answered = False
    status = 1
    try:
        for event in Engine(provider, settings=settings, max_reply_tokens=args.max_tokens).reply(
                messages, files=files, cancel=cancel):
            if args.json:
                sys.stdout.buffer.write(msgspec.json.encode(event) + b"\n")
                sys.stdout.flush()
            elif isinstance(event, AnalysisProgress):
                line = _progress_line(event)
                print(("\r" + line + "\x1b[K") if live else line, end="" if live else "\n", file=sys.stderr,
                      flush=True)
            elif isinstance(event, ReplyDelta):
                if live and not answered:
                    print("\r\x1b[K", end="", file=sys.stderr, flush=True)
                answered = True
                answer.append(event.text)
                sys.stdout.write(event.text)
                sys.stdout.flush()
            elif isinstance(event, ToolCall):
                print(f"[rereading: {event.arguments}]", file=sys.stderr, flush=True)
            if isinstance(event, Done):
                status = 0 if event.finish_reason != "cancelled" else 130
                if status == 0 and style is not None:
                    _save(args, conversation, style, "".join(answer), files)
            elif isinstance(event, Failed):
                print(f"\nboundctx ask: {event.error}", file=sys.stderr)
                status = 1
    except KeyboardInterrupt:
        cancel.set()
        print("\ninterrupted", file=sys.stderr)
        return 130
    finally:
        close = getattr(provider, "close", None)
        if close is not None:
            close()
        if style is not None and status != 0:
            print("boundctx ask: nothing was appended to the transcript (no complete answer)", file=sys.stderr)
    if not args.json:
        if answered:
            print()
        print(f"({time.monotonic() - started:.1f} s)", file=sys.stderr)
    return status
