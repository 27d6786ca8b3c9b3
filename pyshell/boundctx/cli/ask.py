"""``boundctx ask "question"``: one bounded reply, on the embedded model or a server.

Progress (which step, which section and worker, seconds so far, what remains) and
notices (history dropped to fit, a reply cut at its budget) go to stderr, kept apart
from the streamed answer on stdout, so ``boundctx ask ... > answer.txt`` holds only the
answer. Text piped in (``cat log | boundctx ask ...``, or ``--file -``) is attached as a
file named ``stdin``. Exit status: 0 for a complete answer, 3 for one cut at its budget
(:data:`EXIT_CUT`), 1 for a failed reply, 2 for a refusal before it (with ``--json``
also one ``failed`` event on stdout), 130 when interrupted.

``run(args)`` parses and renders; :func:`ask` is the reply itself, callable without a
command line: a question, a provider, attached files and optionally a transcript to
continue (:func:`read_transcript`), events to a callback.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from boundctx._files import read_bytes
from boundctx.cli._progress import LiveStatus
from boundctx.cli._provider import add_provider_arguments, load_settings, make_provider

if TYPE_CHECKING:  # `boundctx ask --help` imports neither the store nor the engine
    from boundctx.events import Event
    from boundctx.providers.base import Provider
    from boundctx.transcript.chat import Conversation

__all__ = ["Asked", "Continuation", "add_parser", "ask", "read_transcript"]


def add_parser(sub, summary: str) -> None:
    p = sub.add_parser(
        "ask", help=summary,
        description="Answer QUESTION with the embedded local model (default) or an OpenAI-compatible "
                    "server. Files too large for the context are read completely, section by section, "
                    "by note-taking workers.")
    p.add_argument("question", metavar="QUESTION")
    p.add_argument("--file", action="append", default=[], metavar="F",
                   help="attach a text file (repeatable); - reads standard input, which is also attached "
                        "when something is piped in")
    p.add_argument("--transcript", metavar="T",
                   help="continue the conversation in transcript T (JSONL; boundctx, pi, Claude Code or Codex "
                        "CLI), or in session ID of a PostgreSQL database given as postgresql://...#ID: its newest "
                        "messages come first, and the question and answer are appended (if T does not exist, a "
                        "new transcript is started there, and said on stderr)")
    p.add_argument("--history", type=int, default=50, metavar="N",
                   help="send at most the newest N messages of the transcript (default 50); their start moves "
                        "forward N/2 messages at a time, so a server's prompt cache keeps holding it")
    p.add_argument("--no-save", action="store_true", help="read the transcript but do not append to it")
    p.add_argument("--no-stdin", action="store_true",
                   help="do not attach standard input even when something is piped in")
    p.add_argument("--repeat-penalty", type=float, metavar="P",
                   help="local models: penalty on tokens already said, 1 = none (chat.repeat_penalty)")
    add_provider_arguments(p)
    p.add_argument("--analysis-workers", type=int, metavar="N", help="note-taking workers, 0-8 (chat.analysis_workers)")
    p.add_argument("--max-tokens", type=int, default=512, help="reply budget in tokens (default 512)")
    p.add_argument("--temperature", type=float, metavar="T", help="sampling temperature of the reply "
                                                                 "(chat.temperature)")
    p.add_argument("--system", metavar="TEXT", help="a system prompt for the reply (chat.system_prompt)")
    p.add_argument("--json", action="store_true",
                   help="print every event as a JSON line on stdout; an error before the reply starts is one "
                        "'failed' event there too (the exit status is the same)")
    p.set_defaults(run=run)


class Continuation(msgspec.Struct, frozen=True):
    """A transcript's newest messages, for :func:`ask` to continue.

    Attributes
    ----------
    path : str
        The transcript (a file that does not exist yet is a new conversation).
    conversation : Conversation
        Its newest messages as chat messages, with notices about what could not be sent.
    style : str or None
        How the exchange is appended (``"text"`` or ``"parts"``, see
        :func:`boundctx.transcript.chat.writable_style`); None: the transcript is only read.
    new : bool
        There was no file at ``path``: a new transcript is started there (created when
        the first answer is appended).
    """

    path: str
    conversation: Conversation
    style: str | None
    new: bool = False


class Asked(msgspec.Struct, frozen=True):
    """How a reply of :func:`ask` ended.

    Attributes
    ----------
    answer : str
        The reply's text, as streamed (also when it is not complete).
    finish_reason : str or None
        ``Done.finish_reason`` (``"stop"``, ``"length"``, ``"repetition"``,
        ``"cancelled"``, ...); None when the reply failed.
    error : str or None
        ``Failed.error`` when the reply failed.
    withheld_chars : int
        Repeated characters not shown (a reply stopped because it looped).
    saved : bool
        Whether the exchange was appended to the transcript.
    cut_prompts : list of CutPrompt
        ``Done.cut_prompts``: the model calls whose server cut their prompt.
    not_saved : str or None
        Why a complete answer could not be appended to the transcript (the database
        was lost, the disk full); None when it was, or was not to be.
    """

    answer: str
    finish_reason: str | None
    error: str | None = None
    withheld_chars: int = 0
    saved: bool = False
    cut_prompts: list[Any] = []
    not_saved: str | None = None


def read_transcript(path: str, *, history: int = 50, save: bool = True) -> Continuation:
    """At most the newest ``history`` messages of the transcript at ``path``, to
    continue; their start moves in steps of half of ``history``
    (:func:`boundctx.transcript.chat.history_start`).

    The write style is settled here, before any model call, so a transcript boundctx
    will not write into is refused before minutes of generation, not after. A missing
    file is a new conversation (created when the answer is appended), unless ``save``
    is false.

    Raises
    ------
    ValueError
        ``history`` is negative; or, with ``save``, the file is in another agent's
        format or is not a transcript at all.
    FileNotFoundError
        No file at ``path`` and ``save`` is false.
    """
    from boundctx.errors import TranscriptNotFound
    from boundctx.stores import database_session
    from boundctx.transcript.chat import Conversation, chat_messages, history_start, writable_style

    if history < 0:
        raise ValueError(f"--history must be >= 0, got {history}")
    in_database = database_session(path) is not None
    try:
        if not in_database and not os.path.exists(path):
            raise TranscriptNotFound(path)
        with opened_transcript(path) as transcript:
            total = transcript.message_count
            start = history_start(total, history)
            window = transcript.window(message_before=total, message_limit=total - start)
            # A file is checked to be a transcript at all; a session row always holds records.
            style = writable_style(window, transcript=None if in_database else transcript) if save else None
    except TranscriptNotFound:
        if not save:
            raise FileNotFoundError(f"no transcript at {_shown(path)!r} (with --no-save it is only read)") from None
        return Continuation(path, Conversation([], []), "text", new=True)
    return Continuation(path, chat_messages(window), style)


@contextlib.contextmanager
def opened_transcript(target: str, *, create: bool = False) -> Iterator[Any]:
    """The transcript ``--transcript`` names: a JSONL file, or ``postgresql://...#ID``, a
    session in a PostgreSQL database (decision 0048). ``create``: start it when missing.

    Raises
    ------
    TranscriptNotFound
        No such transcript, and ``create`` is false.
    ConnectionError
        The database cannot be reached when the session is opened (which URL, the driver's
        reason, what to check).
    StoreUnavailable
        The connection is lost during a call.
    """
    from boundctx.stores import database_session
    from boundctx.transcript import Transcript

    where = database_session(target)
    if where is None:
        with Transcript.open(target, create=create) as transcript:
            yield transcript
        return
    from boundctx.cli.session_transfer import open_store

    url, sid = where
    try:
        # One plain connection first: a database that does not answer is said at once, in
        # the driver's words (ConnectionError), not after the pool's wait.
        store = open_store(url)
    except RuntimeError as exc:  # no psycopg, or tables of another schema version
        raise ValueError(f"cannot use the database of --transcript: {exc}") from None
    with store:
        if create:
            with contextlib.suppress(FileExistsError):
                store.create(sid)
        with store.open(sid) as session:
            yield session


def _shown(target: str) -> str:
    """``target`` as a message may show it: a database URL without its password."""
    from boundctx.stores import is_database_url

    if is_database_url(target):
        from boundctx.stores.postgres import redacted

        return redacted(target)
    return target


def _append(to: Continuation, style: str, question: str, answer: str, files: Sequence[tuple[str, str]]) -> None:
    from boundctx.transcript.chat import append_exchange

    with opened_transcript(to.path, create=True) as transcript:
        append_exchange(transcript, question, answer, style=style, parent_id=to.conversation.last_id,
                        attachments=[(path, len(text)) for path, text in files])


def ask(question: str, *, provider: Provider, settings: Mapping[str, Any], files: Sequence[tuple[str, str]] = (),
        transcript: Continuation | None = None, max_tokens: int = 512, cancel: threading.Event | None = None,
        on_event: Callable[[Event], None] | None = None) -> Asked:
    """Answer ``question`` after the messages of ``transcript``, with ``files`` attached.

    Only a complete answer (``finish_reason == "stop"``) joins the conversation: one
    cut at its budget or stopped in a loop was shown, not kept.

    Parameters
    ----------
    question : str
    provider : Provider
        The model; the caller made it and closes it.
    settings : mapping
        The settings (``boundctx.config.load``).
    files : sequence of (label, text)
        Attached to the question; inputs too long to send whole are read in sections.
    transcript : Continuation, optional
        The conversation to continue (:func:`read_transcript`); the exchange is appended
        to it unless it is only read.
    max_tokens : int
        The reply budget in tokens.
    cancel : threading.Event, optional
        Set it to stop the reply (it then ends ``"cancelled"``).
    on_event : callable, optional
        Called with each event of the reply as it comes (``Engine.reply``'s events).

    Returns
    -------
    Asked
    """
    from boundctx.analysis import Engine
    from boundctx.analysis.originals import Earlier
    from boundctx.errors import BoundctxError
    from boundctx.events import Done, Failed, ReplyDelta
    from boundctx.transcript.chat import earlier_text

    engine = Engine(provider, settings=settings, max_reply_tokens=max_tokens)
    history = transcript.conversation.messages if transcript is not None else []
    earlier = None
    if transcript is not None and transcript.conversation.start > 0:
        # The transcript's messages before the history read: searched only if the model
        # asks, within analysis.search_max_chars (decision 0046).
        path, start = transcript.path, transcript.conversation.start
        earlier = Earlier(start, lambda max_chars: earlier_text(lambda: opened_transcript(path), start, max_chars))
    messages = [*history, {"role": "user", "content": question}]
    pieces: list[str] = []
    finish = error = None
    withheld = 0
    saved = False
    not_saved = None
    cuts: list[Any] = []
    for event in engine.reply(messages, files=files, cancel=cancel, earlier=earlier):
        if on_event is not None:
            on_event(event)
        if isinstance(event, ReplyDelta):
            pieces.append(event.text)
        elif isinstance(event, Done):
            finish = event.finish_reason
            withheld = int(event.usage.get("withheld_chars") or 0)
            cuts = list(event.cut_prompts)
            if finish == "stop" and transcript is not None and transcript.style is not None:
                try:
                    _append(transcript, transcript.style, question, "".join(pieces), files)
                    saved = True
                except (OSError, BoundctxError) as exc:  # a lost database, a full disk: the answer stands
                    not_saved = str(exc)
        elif isinstance(event, Failed):
            error = event.error
    return Asked("".join(pieces), finish, error, withheld, saved, cuts, not_saved)


def cut_prompt_warning(cut: Any) -> str:
    """What ``ask`` says of a model call whose server cut its prompt (decision 0043)."""
    return (f"boundctx ask: the server evaluated {cut.evaluated:,} prompt tokens of the {cut.call}'s "
            f"{cut.sent_at_least:,} or more: it cut the prompt, so that call did not see all of it (unless the "
            "server counts only tokens it had not cached). Give the server a context of at least chat.n_ctx "
            "(Ollama: num_ctx), or set chat.n_ctx to the server's")


STDIN_LABEL = "stdin"


def _piped_stdin() -> bool:
    """Whether standard input is a pipe or a file (``cat log | boundctx ask``), not a
    terminal, ``/dev/null`` or a capture that cannot be read."""
    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (OSError, ValueError, AttributeError):
        return False  # closed, or replaced by an object with no descriptor
    return stat.S_ISFIFO(mode) or stat.S_ISREG(mode)


def _decode(label: str, data: bytes, notes: list[str]) -> str:
    """UTF-8 text of an attachment. Bytes that are not UTF-8 cannot be sent to a model
    as they are: they become U+FFFD, and a notice says how many."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("utf-8", "replace")
        bad = text.count("\ufffd") - data.decode("utf-8", "ignore").count("\ufffd")
        notes.append(f"{label}: {bad:,} byte sequence(s) that are not UTF-8 were replaced by U+FFFD")
        return text


def _read_files(paths: Sequence[str], *, piped_stdin: bool,
                status: LiveStatus) -> tuple[list[tuple[str, str]], list[str]]:
    """(label, text) of each attachment, and notices about them for stderr. ``-`` is
    standard input; with ``piped_stdin`` a pipe or file on standard input is attached too."""
    files: list[tuple[str, str]] = []
    notes: list[str] = []
    paths = list(paths)
    implicit = "-" not in paths and piped_stdin and _piped_stdin()
    if implicit:
        paths.append("-")
    for path in paths:
        if path == "-":
            if any(label == STDIN_LABEL for label, _ in files):
                continue
            status.set("reading standard input (until it ends)")
            data = sys.stdin.buffer.read()
            if not data and implicit:
                continue  # an empty pipe attaches nothing
            files.append((STDIN_LABEL, _decode(STDIN_LABEL, data, notes)))
            if implicit:  # said, so a `while read` loop's swallowed lines are not a mystery
                notes.append(f"attached standard input ({len(data):,} bytes) as {STDIN_LABEL!r}; "
                             "--no-stdin leaves it alone")
        else:
            # Never a FIFO or a device: reading one could block or never end.
            files.append((path, _decode(path, read_bytes(path, what="text file to attach"), notes)))
    return files, notes


def _fitted_notice(event) -> str | None:
    """What the model does not get whole, in words; None when it gets everything."""
    parts = []
    if event.dropped:
        research = (f" ({event.dropped_research} of them earlier tool calls and results)"
                    if event.dropped_research else "")
        parts.append(f"{len(event.dropped)} oldest of {event.messages} messages were left out to fit the "
                     f"{event.prompt_limit:,}-token prompt budget{research}")
    if event.clipped:
        parts.append(f"{event.clipped} tool result(s) cut to chat.tool_result_clip_chars")
    if event.analysed:
        parts.append(f"{', '.join(event.analysed)} too long to send whole: read completely in sections")
    return "; ".join(parts) or None


class _Progress:
    """Turns reply events into the status line: the step, and the time the whole reply
    has left as the events say (``remaining_s``: the estimate the page shows too)."""

    def __init__(self, status: LiveStatus) -> None:
        self.status = status

    def on(self, event) -> None:
        from boundctx.events import AnalysisProgress, Stage

        if isinstance(event, AnalysisProgress):
            if event.phase == "reading":
                self.status.set(f"reading section {event.section}/{event.sections} (worker {event.worker + 1})",
                                eta_s=event.remaining_s)
            elif event.phase == "done":
                self.status.set(f"read all {event.sections} sections", eta_s=event.remaining_s)
        elif isinstance(event, Stage):
            self.status.set("answering" if event.stage == "answering"
                            else f"rereading the original (round {event.round})", eta_s=event.remaining_s)


def _on_interrupt(cancel: threading.Event):
    """SIGINT handler: the first Ctrl-C cancels the reply (a local model stops within a
    batch of its prompt evaluation), a second one interrupts at once."""

    def handler(signum, frame):
        if cancel.is_set():
            raise KeyboardInterrupt
        cancel.set()
        print("\nboundctx ask: stopping (Ctrl-C again to quit at once)", file=sys.stderr, flush=True)

    return handler


#: The exit status of a reply cut at its token budget (``finish_reason`` ``"length"``):
#: its text was shown, but it is not a complete answer, and a script must be able to
#: tell (README, "Exit codes").
EXIT_CUT = 3


def _refuse(message: str, kind: str, *, as_json: bool) -> int:
    """A refusal before the reply starts: exit status 2, the message on stderr and, with
    ``--json``, also as the one ``failed`` event on stdout, where a script reads events."""
    if as_json:
        from boundctx.events import Failed

        sys.stdout.buffer.write(msgspec.json.encode(Failed(message, kind)) + b"\n")
        sys.stdout.flush()
    print(f"boundctx ask: {message}", file=sys.stderr)
    return 2


def run(args) -> int:
    from boundctx.analysis.originals import described
    from boundctx.errors import BoundctxError
    from boundctx.events import Failed, Fitted, ReplyDelta, ToolCall

    quiet = getattr(args, "verbosity", 0) < 0
    transcript = None
    status_line = LiveStatus(enabled=not (quiet or args.json))
    try:
        if args.max_tokens < 1:
            raise ValueError(f"--max-tokens must be >= 1, got {args.max_tokens}")
        if not args.question.strip():
            raise ValueError("the question is empty: say what to ask, e.g. boundctx ask --file build.log "
                             "\"What failed?\"")
        settings = load_settings(args)
        files, notes = _read_files(args.file, piped_stdin=not args.no_stdin, status=status_line)
        status_line.set("preparing")
        if args.transcript:
            transcript = read_transcript(args.transcript, history=args.history, save=not args.no_save)
        # A question typed in a locale that is not UTF-8 arrives with surrogate escapes.
        question = _decode("the question", os.fsencode(args.question), notes)
        if transcript is not None:
            if transcript.new and transcript.style is not None:
                notes.append(f"{_shown(args.transcript)} does not exist: a new transcript is started there")
            history = transcript.conversation
            notes += [f"transcript: {notice}" for notice in history.notices]
            if args.system is not None and history.messages and history.messages[0].get("role") == "system":
                notes.append("--system is not used: the transcript starts with its own system message")
        provider = make_provider(args, settings)
    except (OSError, ValueError, ImportError, BoundctxError) as exc:
        status_line.close()
        return _refuse(str(exc), type(exc).__name__, as_json=args.json)
    if not quiet:
        for note in notes:
            status_line.note(f"boundctx ask: {note}")
    progress = _Progress(status_line)
    answered = False

    def show(event) -> None:
        nonlocal answered
        if args.json:
            sys.stdout.buffer.write(msgspec.json.encode(event) + b"\n")
            sys.stdout.flush()
        elif isinstance(event, Fitted):
            notice = _fitted_notice(event)
            if notice and not quiet:
                status_line.note(f"boundctx ask: {notice}")
        elif isinstance(event, ReplyDelta):
            if not answered:
                status_line.close()
            answered = True
            sys.stdout.write(event.text)
            sys.stdout.flush()
        elif isinstance(event, ToolCall):
            if not quiet:
                status_line.note(f"[{described(event.arguments)}]")
        else:
            progress.on(event)
        if isinstance(event, Failed):
            status_line.close()
            print(f"\nboundctx ask: {event.error}", file=sys.stderr)

    cancel = threading.Event()
    asked = None
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, _on_interrupt(cancel)) if in_main else None
    try:
        asked = ask(question, provider=provider, settings=settings, files=files, transcript=transcript,
                    max_tokens=args.max_tokens, cancel=cancel, on_event=show)
    except KeyboardInterrupt:
        cancel.set()
        status_line.close()
        print("\ninterrupted", file=sys.stderr)
        return 130
    finally:
        status_line.close()
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        provider.close()
        if transcript is not None and transcript.style is not None and not (asked and asked.saved):
            why = asked.not_saved if asked is not None and asked.not_saved else "no complete answer"
            print(f"boundctx ask: nothing was appended to the transcript ({why})", file=sys.stderr)
    finish, withheld = asked.finish_reason, asked.withheld_chars
    # An answer cut at its budget or stopped in a loop is not complete: a script can tell.
    status = (1 if finish is None else 130 if finish == "cancelled"
              else EXIT_CUT if finish in ("length", "repetition") else 0)
    if not args.json:
        if answered:
            print()
        if finish == "length":
            print(f"boundctx ask: the reply was cut at its {args.max_tokens}-token budget and is not complete; "
                  "raise --max-tokens for a longer one", file=sys.stderr)
        elif finish == "repetition":
            shown = f" ({withheld:,} repeated characters not shown)" if withheld else ""
            print(f"boundctx ask: the model began repeating itself, so the reply was stopped there{shown}",
                  file=sys.stderr)
        elif finish == "cancelled":
            print("boundctx ask: stopped; the reply is not complete", file=sys.stderr)
        for cut in asked.cut_prompts:
            print(cut_prompt_warning(cut), file=sys.stderr)
        if not quiet:
            print(f"({status_line.elapsed():.1f} s)", file=sys.stderr)
    return status
