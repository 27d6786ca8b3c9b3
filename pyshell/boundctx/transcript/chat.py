"""Transcripts as model conversations, and replies written back.

:func:`chat_messages` turns a window of transcript records into the chat messages a
model is sent (OpenAI-style: ``role``, ``content`` text, ``tool_calls``, ``tool``
results), for every dialect the store reads:

- boundctx / pi session v3: ``{"type":"message","message":{"role":...}}`` with text or
  content parts (``text``, ``toolCall``, ``thinking``, ``image``), ``toolResult`` and
  ``bashExecution`` messages; ``compaction`` lines carry a summary of what they replaced.
- Claude Code: ``user`` / ``assistant`` lines holding Anthropic messages (``tool_use``,
  ``tool_result`` blocks). A compaction is a ``system`` ``compact_boundary`` line followed
  by a ``user`` line marked ``isCompactSummary``: that summary replaces what came before
  it, and is not sent as if the user had written it.
- Codex CLI and Desktop: ``response_item`` lines (``message``, ``function_call``,
  ``function_call_output``, ``reasoning``); ``compacted`` replaces the history before it
  (with its ``replacement_history`` when it has one). ``event_msg`` ``user_message`` lines
  are user turns where no ``response_item`` user message of the same turn holds them
  (Codex Desktop writes some sessions with no other trace of what was asked); the other
  events echo response items for the agent's display and are not sent.

Nothing is dropped without a word: what a model cannot be sent (corrupt lines, images,
unknown roles, tool results whose call is outside the window, valid JSON lines whose
fields are not of the types their dialect gives them) becomes a *notice* the caller
shows, and no other message is lost with it. A model's private reasoning (``thinking``,
``reasoning``) is not sent back, as the agents that wrote it do not send it either; that
is not a notice.

:func:`append_exchange` writes a question and its answer back as two message lines in
the transcript's own style (text or content parts), so a conversation continued with
``boundctx ask --transcript`` is one a later run, or the agent that started it, reads on.
"""

from __future__ import annotations

import datetime
import secrets
from collections.abc import Sequence
from typing import Any, Callable

import msgspec

from boundctx.transcript.dialects import FORMATS, dialect_of, display
from boundctx.transcript.dialects.base import SUMMARY, Notes, said
from boundctx.transcript.entries import Entry, Window

__all__ = ["FIRST_LINES", "Conversation", "append_exchange", "chat_messages", "earlier_text", "history_start",
           "refuse_unless_transcript", "writable_style"]


def history_start(total: int, history: int) -> int:
    """Where the messages sent from a transcript of ``total`` messages start: at most
    ``history`` of the newest, and at least half of them (rounded up).

    The start moves forward in steps of half the history, not one message a turn: the
    turns between two steps resend the same start, which a model (its kept state, a
    server's prompt cache) still holds (decision 0029). Worked out from the count alone,
    so every run, and every process behind a load balancer, picks the same start.
    """
    if total <= history:
        return 0
    step = max(1, history // 2)
    return -(-(total - history) // step) * step


def earlier_text(source, before: int, max_chars: int) -> tuple[str, int]:
    """The messages of a transcript before message ``before``, as one text a reply can
    search (decision 0046): the newest of them whose lines hold at most ``max_chars``
    bytes together, each headed ``[transcript message N, role]`` and written as a person
    reads it. Returns the text and the index of the first message it holds.

    ``source`` is the transcript's path, or a function that opens it (a session of any
    store, used as a context manager). Bounded whatever its size: the sizes come from
    the layout, and only the lines chosen are read.
    """
    from boundctx.transcript import Transcript

    opened = source() if callable(source) else Transcript.open(source)
    with opened as transcript:
        before = min(before, transcript.message_count)
        first, used = before, 0
        # The sizes a block at a time, newest first: as many as the bound takes, not every
        # older message's (a transcript may hold millions).
        while first > 0:
            sizes = transcript.message_bytes(max(0, first - 1024), first)
            taken = 0
            for size in reversed(sizes):
                if used + size > max_chars:
                    break
                used, taken = used + size, taken + 1
            first -= taken
            if taken < len(sizes):
                break
        if first == before:
            return "", before
        window = transcript.window(message_before=before, message_limit=before - first, content_limit=None)
    parts = []
    for k, entry in enumerate(window.messages):
        role, text = display(entry)
        parts.append(f"[transcript message {window.message_start + k}, {role}]\n{text}")
    return "\n\n".join(parts), window.message_start


class Conversation(msgspec.Struct):
    """Chat messages read from a transcript window.

    Attributes
    ----------
    messages : list of dict
        OpenAI-style messages, oldest first.
    notices : list of str
        What could not be sent to a model, one line each.
    last_id : str or None
        The ``id`` of the newest record read (a message, or a compaction after it), for
        a reply's ``parentId``.
    start : int
        The transcript message the window read starts at: how many older messages the
        transcript holds before these (a reply may search them: decision 0046).
    """

    messages: list[dict[str, Any]]
    notices: list[str]
    last_id: str | None = None
    start: int = 0


#: The roles of the messages read (every provider takes these).
_ROLES = ("system", "user", "assistant", "tool")
#: What a record's conversion may raise on a shape no check foresaw: the final guard
#: makes any of them a notice about that record, never an error of the whole read.
_SHAPE_ERRORS = (TypeError, KeyError, AttributeError, ValueError, RecursionError)
#: Characters of an error a notice repeats.
_WHY = 200


def _record_messages(record: dict[str, Any], where: str, notes: Notes) -> list[dict[str, Any]]:
    """The chat messages of one message line, by the format its type belongs to."""
    dialect = dialect_of(record)
    if dialect is None:
        notes.add(f"{where}: line type {said(record.get('type'))} is not a message; not sent")
        return []
    return dialect.messages(record, where, notes)


def _check_message(m: dict[str, Any]) -> None:
    """Raise ValueError unless ``m`` is a message every provider takes: a known role,
    text content, calls ``{"id", "type": "function", "function": {"name", "arguments"}}``
    of strings, and a tool result's call id a string."""
    role = m.get("role")
    if role not in _ROLES or not isinstance(m.get("content"), str):
        raise ValueError(f"a message of role {said(role)} without text content")
    if role == "tool" and not isinstance(m.get("tool_call_id"), str):
        raise ValueError("a tool result without a call id")
    calls = m.get("tool_calls", [])
    if not isinstance(calls, list):
        raise ValueError("tool_calls that is not a list")
    for call in calls:
        fn = call.get("function") if isinstance(call, dict) else None
        if not (isinstance(fn, dict) and call.keys() == {"id", "type", "function"} and isinstance(call["id"], str)
                and call["type"] == "function" and fn.keys() == {"name", "arguments"}
                and isinstance(fn["name"], str) and isinstance(fn["arguments"], str)):
            raise ValueError("a tool call not of the form {id, type: function, function: {name, arguments}}")


def _guarded(convert: Callable[[], list[dict[str, Any]]], where: str, notes: Notes) -> list[dict[str, Any]]:
    """``convert()``'s messages, each checked to be well-formed. The checks of each field
    are in the converters; this is the guard behind them: a record of a shape none of
    them foresaw is a notice saying what was odd, and no other record is lost with it."""
    mark = len(notes.notices)
    try:
        out = convert()
        for m in out:
            _check_message(m)
        return out
    except _SHAPE_ERRORS as exc:
        del notes.notices[mark:]
        why = f"{type(exc).__name__}: {exc}"
        why = why if len(why) <= _WHY else why[:_WHY] + "…"
        notes.add(f"{where}: a record of a shape this reader does not know ({why}); not sent")
        return []


def _replaces_history(entry: Entry) -> bool:
    """Whether ``entry`` is a compaction in force (Claude Code's "summary" lines title a
    session and replace nothing; its compact_boundary lines only mark the summary after
    them, a message line that is the compaction)."""
    r = entry.record if isinstance(entry.record, dict) else {}
    dialect = dialect_of(r)
    return dialect is not None and dialect.replaces_history(r)


def _compaction_where(compaction: Entry) -> str:
    """How a notice names a compaction: its message (Claude Code's summaries are message
    lines), or its line."""
    if compaction.index is not None:
        return f"message {compaction.index} (line {compaction.line}, a compaction summary)"
    return f"compaction at line {compaction.line}"


def _kept_from(compaction: Entry, entries: list[Entry], window: Window, notes: Notes) -> int:
    """Where the messages sent after ``compaction``'s summary begin: after its line, or
    (pi) at the first message it kept. When that message cannot be found in the window,
    every message of the window is sent: a summary sent beside what it summarised loses
    nothing, a kept message left out does."""
    where = _compaction_where(compaction)
    after = next((i for i, e in enumerate(entries) if e.line > compaction.line), len(entries))
    record = compaction.record if isinstance(compaction.record, dict) else {}
    first_id, first_line = record.get("firstKeptEntryId"), record.get("firstKeptEntryIndex")
    if isinstance(first_id, str):  # pi v3: the id of the first message the compaction kept
        kept = next((i for i, e in enumerate(entries)
                     if isinstance(e.record, dict) and e.record.get("id") == first_id), None)
        if kept is not None:
            return min(after, kept)
        if not window.has_more_before:
            notes.add(f"{where}: the first message it kept ({said(first_id)}) is no message of the transcript; "
                      "the messages before it are sent as well")
        return 0  # older than the window: every message of the window before the compaction is kept
    if isinstance(first_line, int) and not isinstance(first_line, bool):  # older pi sessions: its line number
        kept = next((i for i, e in enumerate(entries) if e.line >= first_line), None)
        return after if kept is None else min(after, kept)
    for key, value in (("firstKeptEntryId", first_id), ("firstKeptEntryIndex", first_line)):
        if key in record:  # there, but neither an id nor a line number: where it kept from is unknown
            what = "an id" if key == "firstKeptEntryId" else "a line number"
            notes.add(f"{where}: its {key} is {said(value)}, not {what}; the messages before it are sent as well")
            return 0
    return after


def _compaction_messages(compaction: Entry, notes: Notes) -> list[dict[str, Any]]:
    """What a compaction puts in place of the history before it: its summary, said to be
    one, and (Codex) the history the agent's model continued from."""
    where = _compaction_where(compaction)
    record = compaction.record if isinstance(compaction.record, dict) else {}
    dialect = dialect_of(record)
    if dialect is None:
        return []
    summary = dialect.summary(record, where, notes)
    history = dialect.replacement(record, where, notes)
    out: list[dict[str, Any]] = []
    if history is None:
        if summary is not None:
            out.append({"role": "user", "content": SUMMARY + summary})
        return out
    if summary:  # Codex: the history the model continued from
        out.append({"role": "user", "content": SUMMARY + summary})
    for n, item in enumerate(history):
        out += _guarded(lambda: dialect.history_item(item, where, notes), f"{where}, replacement_history[{n}]",
                        notes)
    return out


def _merge_tool_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An assistant message that only calls tools joins the assistant message before it
    (Codex writes one item per call, Claude Code one line per content block), so a turn's
    text and calls are one message and every tool result follows the call it answers."""
    out: list[dict[str, Any]] = []
    for m in messages:
        prev = out[-1] if out else None
        if (prev is not None and m["role"] == "assistant" and not m.get("content") and m.get("tool_calls")
                and prev["role"] == "assistant"):
            prev["tool_calls"] = prev.get("tool_calls", []) + m["tool_calls"]
        else:
            out.append(m)
    return out


def _drop_orphans(messages: list[dict[str, Any]], notices: list[str], unsent_calls: set[str]) -> list[dict[str, Any]]:
    """Tool results whose call is not in the window (it began between a call and its
    result), or whose call could not be sent, cannot be sent: every chat API rejects a
    result without its call."""
    called: set[str] = set()
    out = []
    orphans = unanswerable = 0
    for m in messages:
        if m["role"] == "assistant":
            called.update(c["id"] for c in m.get("tool_calls") or [])
        if m["role"] == "tool" and m["tool_call_id"] not in called:
            if m["tool_call_id"] in unsent_calls:
                unanswerable += 1
            else:
                orphans += 1
            continue
        out.append(m)
    if unanswerable:
        notices.append(f"{unanswerable} tool result(s) whose call could not be sent (named above) were not sent "
                       "either")
    if orphans:
        notices.append(f"{orphans} tool result(s) whose call is older than the window were not sent; "
                       "widen the window (--history) to include their calls")
    return out


def chat_messages(window: Window) -> Conversation:
    """The chat messages of ``window`` (read it uncapped: ``content_limit=None``).

    The newest compaction in force replaces what it summarised: its summary comes
    first, as a user message saying what it is, and only the messages after it (pi:
    from its ``firstKeptEntryId`` or, in older sessions, ``firstKeptEntryIndex``) follow.
    A Claude Code compaction is the message marked ``isCompactSummary`` (the
    ``compact_boundary`` line before it is not a message); a Codex ``compacted`` line
    with a ``replacement_history`` puts that history in place of what came before it.

    Every field is checked for the type its dialect gives it before it is used. A record
    that does not hold what its dialect says (a valid JSON line of another shape) is a
    notice naming its message and what was odd, as a corrupt line is; the rest of the
    conversation is read as if it were not there, and every message returned is one
    every provider takes (see ``_check_message``).
    """
    unsent_calls: set[str] = set()
    top = Notes(unsent_calls)
    entries = list(window.messages)
    compaction = None
    for c in window.compactions:
        if _replaces_history(c):
            compaction = c
    for e in entries:  # Claude Code's summaries are message lines, not compaction lines
        if _replaces_history(e) and (compaction is None or e.line > compaction.line):
            compaction = e
    messages: list[dict[str, Any]] = []
    keep_from = 0
    if compaction is not None:
        keep_from = _kept_from(compaction, entries, window, top)
        messages += _guarded(lambda: _compaction_messages(compaction, top), _compaction_where(compaction), top)
    kept_entries = entries[keep_from:]
    converted: list[list[dict[str, Any]]] = []
    notices_of: list[list[str]] = []
    last_id = None
    for entry in kept_entries:
        where = f"message {entry.index}"
        notes = Notes(unsent_calls)
        record = entry.record
        got: list[dict[str, Any]] = []
        if record is None:
            notes.add(f"{where} (line {entry.line}) is corrupt ({entry.corrupt}); not sent")
        elif entry.truncated:
            raise ValueError("chat_messages needs an uncapped window (content_limit=None): a model must get "
                             "whole messages, not display projections")
        elif not isinstance(record, dict):
            notes.add(f"{where} (line {entry.line}) is {said(record)}, not a record; not sent")
        else:
            if isinstance(record.get("id"), str):
                last_id = record["id"]
            got = _guarded(lambda: _record_messages(record, where, notes), f"{where} (line {entry.line})", notes)
        converted.append(got)
        notices_of.append(notes.notices)
    # A reply follows the newest entry of the branch read, a compaction written after its
    # newest message included: hung on that message instead, it would leave the
    # compaction off the branch (decision 0047).
    if window.leaf_id is not None:
        last_id = window.leaf_id
    for dialect in FORMATS:
        for pos in dialect.echoed(kept_entries, converted):
            converted[pos], notices_of[pos] = [], []
    for sent, noted in zip(converted, notices_of):
        messages += sent
        top.notices += noted
    notices = top.notices
    return Conversation(_drop_orphans(_merge_tool_calls(messages), notices, unsent_calls), notices, last_id,
                        window.message_start)


# What a file that is not a transcript often begins with (its first line, decoded with
# replacement characters), and what to call it.
_MAGIC = (("\ufffdPNG", "a PNG image"), ("%PDF", "a PDF document"), ("PK\x03\x04", "a ZIP archive"),
          ("GIF8", "a GIF image"), ("\x7fELF", "an executable (ELF)"), ("\x1f\ufffd", "gzip-compressed data"))
# The reason a window gives a line too long to show whole that it could not project.
_UNPROJECTED = "not displayable within the content limit"


def _looks_like(raw: str) -> str:
    for magic, words in _MAGIC:
        if raw.startswith(magic):
            return words
    return "binary data" if "\ufffd" in raw or "\x00" in raw else "text"


#: How many of a file's first lines :func:`refuse_unless_transcript` reads: once a file
#: has this many, its verdict holds until the file is rewritten (an append adds lines
#: after them).
FIRST_LINES = 8


def refuse_unless_transcript(transcript) -> None:
    """A non-empty file is written into only when its first non-blank line is a JSON
    record: anything else (an image, a log, a pretty-printed JSON file) is no transcript,
    and appending would move its tail to a side file and cut it there.

    Raises
    ------
    ValueError
        Saying what the file looks like instead, and what to do.
    """
    path = transcript.path
    how = ("Nothing was written to it. Give a .jsonl transcript or a path that does not exist yet, "
           "or pass --no-save to only read it")
    if transcript.line_count == 0:
        if transcript.torn_bytes:
            raise ValueError(f"{path!r} does not look like a transcript: its {transcript.torn_bytes:,} bytes "
                             f"hold no complete line, so no JSON record. {how}")
        return  # empty: a new conversation
    for entry in transcript.read_lines(0, min(FIRST_LINES, transcript.line_count), content_limit=256):
        if entry.record is not None:
            return
        if entry.corrupt == "blank line":
            continue
        if entry.corrupt == _UNPROJECTED and entry.raw.lstrip().startswith("{"):
            return  # a long record whose prefix could not be projected: no verdict against it
        raise ValueError(f"{path!r} does not look like a transcript: its first line is not a JSON record; "
                         f"it looks like {_looks_like(entry.raw)} (it begins {entry.raw[:32]!r}). {how}")


def writable_style(window: Window, *, transcript=None) -> str:
    """How replies are written to this transcript: ``"text"`` (string content, the
    boundctx format and a new file) or ``"parts"`` (pi's content-part lists).

    Parameters
    ----------
    window : Window
        The newest messages of the transcript.
    transcript : Transcript, optional
        The open transcript the window was read from: a non-empty one whose first line
        is not a JSON record is refused (it is not a transcript at all).

    Raises
    ------
    ValueError
        For another agent's format (Claude Code, Codex CLI): boundctx reads those but
        does not write into them; and for a file that is not a transcript.
    """
    if transcript is not None:
        refuse_unless_transcript(transcript)
    for entry in reversed(window.messages):
        record = entry.record
        if not isinstance(record, dict):
            continue  # a corrupt line says nothing of the style
        dialect = dialect_of(record)
        if dialect is None or not dialect.writable:
            raise ValueError(f"this transcript is in another agent's format (its lines have type "
                             f"{said(record.get('type'))}); boundctx reads it but does not write into it. "
                             "Continue in a new transcript, or pass --no-save")
        message = record.get("message")
        return "parts" if isinstance(message, dict) and isinstance(message.get("content"), list) else "text"
    return "text"


def _record(role: str, text: str, *, style: str, parent_id: str | None, extra: dict[str, Any] | None = None
            ) -> dict[str, Any]:
    now = datetime.datetime.now(datetime.timezone.utc)
    message: dict[str, Any] = {"role": role,
                               "content": [{"type": "text", "text": text}] if style == "parts" else text}
    if style == "parts":
        message["timestamp"] = int(now.timestamp() * 1000)
    if extra:
        message.update(extra)
    return {"type": "message", "id": secrets.token_hex(4), "parentId": parent_id,
            "timestamp": now.isoformat(timespec="milliseconds").replace("+00:00", "Z"), "message": message}


def append_exchange(transcript, question: str, answer: str, *, style: str, parent_id: str | None,
                    attachments: Sequence[tuple[str, int]] = (), lock_wait: float = 0.0) -> list[int]:
    """Append the question and the answer as two message lines (each written whole and
    synced); attached files are named, with their size, in the question's line.
    ``lock_wait``: seconds to wait for another writer's lock (held across both lines).

    Returns the two lines' physical line numbers.

    Raises
    ------
    TypeError
        ``parent_id`` is neither a string nor None (a reply's parent is the ``id`` of a
        message line, :attr:`Conversation.last_id`), or the texts are not strings.
    ValueError
        ``style`` is neither ``"text"`` nor ``"parts"``.
    """
    if parent_id is not None and not isinstance(parent_id, str):
        raise TypeError(f"parent_id must be a message id (a string) or None, not {said(parent_id)}")
    if not (isinstance(question, str) and isinstance(answer, str)):
        raise TypeError("the question and the answer must be strings")
    if style not in ("text", "parts"):
        raise ValueError(f"style must be 'text' or 'parts', not {said(style)}")
    text = question
    if attachments:
        text += "\n\n" + "\n".join(f"[attached: {name} ({chars:,} characters)]" for name, chars in attachments)
    user = _record("user", text, style=style, parent_id=parent_id)
    assistant = _record("assistant", answer, style=style, parent_id=user["id"])
    return transcript.append_records([user, assistant], lock_wait=lock_wait)
