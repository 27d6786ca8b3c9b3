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
unknown roles, tool results whose call is outside the window) becomes a *notice* the
caller shows. A model's private reasoning (``thinking``, ``reasoning``) is not sent back,
as the agents that wrote it do not send it either; that is not a notice.

:func:`append_exchange` writes a question and its answer back as two message lines in
the transcript's own style (text or content parts), so a conversation continued with
``boundctx ask --transcript`` is one a later run, or the agent that started it, reads on.
"""

from __future__ import annotations

import datetime
import json
import secrets
from typing import Any

import msgspec

from boundctx.transcript.entries import Entry, Window

__all__ = ["Conversation", "append_exchange", "chat_messages", "writable_style"]


class Conversation(msgspec.Struct):
    """Chat messages read from a transcript window.

    Attributes
    ----------
    messages : list of dict
        OpenAI-style messages, oldest first.
    notices : list of str
        What could not be sent to a model, one line each.
    last_id : str or None
        The ``id`` of the newest message record, for a reply's ``parentId``.
    """

    messages: list[dict[str, Any]]
    notices: list[str]
    last_id: str | None = None


def _stringify(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _parts_text(content: Any, where: str, notices: list[str], *,
                text_types=("text", "input_text", "output_text")) -> str:
    """The text of a content value: a string, or the text parts of a list, joined by
    blank lines. Images and other parts a text model cannot take become notices."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if not isinstance(content, list):
        notices.append(f"{where}: content of type {type(content).__name__} is not text; not sent")
        return ""
    texts = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in text_types and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind in ("thinking", "redacted_thinking", "reasoning", "toolCall", "tool_use", "tool_result"):
            continue  # handled by the caller, or private reasoning
        else:
            notices.append(f"{where}: a {kind or 'non-text'} part is not sent to a text model")
    return "\n\n".join(texts)


def _tool_call(call_id: Any, name: Any, arguments: Any) -> dict[str, Any]:
    return {"id": str(call_id), "type": "function",
            "function": {"name": str(name), "arguments": _stringify(arguments if arguments is not None else {})}}


def _pi_message(m: dict[str, Any], where: str, notices: list[str]) -> list[dict[str, Any]]:
    role = m.get("role")
    content = m.get("content")
    if role in ("user", "system", "developer"):
        return [{"role": "system" if role == "developer" else role, "content": _parts_text(content, where, notices)}]
    if role == "assistant":
        text = _parts_text(content, where, notices)
        calls = [_tool_call(p.get("id"), p.get("name"), p.get("arguments"))
                 for p in (content if isinstance(content, list) else []) if isinstance(p, dict)
                 and p.get("type") == "toolCall"]
        calls += [dict(c) for c in m.get("tool_calls") or [] if isinstance(c, dict)]  # OpenAI-style records
        if not text and not calls:
            return []  # an aborted turn that produced nothing
        out: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:
            out["tool_calls"] = calls
        return [out]
    if role in ("toolResult", "tool"):
        call_id = m.get("toolCallId", m.get("tool_call_id"))
        return [{"role": "tool", "tool_call_id": str(call_id), "content": _parts_text(content, where, notices)}]
    if role == "bashExecution":  # a command the user ran in the agent; the model saw its output
        code = m.get("exitCode")
        return [{"role": "user",
                 "content": f"I ran `{m.get('command', '')}` (exit code {code}):\n{m.get('output', '')}"}]
    notices.append(f"{where}: role {role!r} is not a chat role; not sent")
    return []


def _claude_message(record: dict[str, Any], where: str, notices: list[str]) -> list[dict[str, Any]]:
    m = record.get("message")
    if not isinstance(m, dict):
        notices.append(f"{where}: a {record.get('type')} line without a message; not sent")
        return []
    content = m.get("content")
    blocks = content if isinstance(content, list) else []
    if m.get("role") == "assistant":
        text = _parts_text(content, where, notices)
        calls = [_tool_call(b.get("id"), b.get("name"), b.get("input")) for b in blocks
                 if isinstance(b, dict) and b.get("type") == "tool_use"]
        if not text and not calls:
            return []
        out: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:
            out["tool_calls"] = calls
        return [out]
    out_messages = [{"role": "tool", "tool_call_id": str(b.get("tool_use_id")),
                     "content": _parts_text(b.get("content"), where, notices)}
                    for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
    text = _parts_text(content, where, notices)
    if text or not out_messages:
        out_messages.append({"role": "user", "content": text})
    return out_messages


def _codex_item(record: dict[str, Any], where: str, notices: list[str]) -> list[dict[str, Any]]:
    p = record.get("payload")
    kind = p.get("type") if isinstance(p, dict) else None
    if kind == "message":
        role = p.get("role")
        role = "system" if role == "developer" else role
        if role not in ("user", "assistant", "system"):
            notices.append(f"{where}: role {role!r} is not a chat role; not sent")
            return []
        return [{"role": role, "content": _parts_text(p.get("content"), where, notices)}]
    if kind in ("function_call", "custom_tool_call", "local_shell_call"):
        return [{"role": "assistant", "content": "",
                 "tool_calls": [_tool_call(p.get("call_id"), p.get("name", kind), p.get("arguments", p.get("input",
                                                                                                   p.get("action"))))]}]
    if kind in ("function_call_output", "custom_tool_call_output"):
        output = p.get("output")
        if isinstance(output, dict):
            output = output.get("content", output)
        return [{"role": "tool", "tool_call_id": str(p.get("call_id")), "content": _stringify(output)}]
    if kind == "reasoning":
        return []
    notices.append(f"{where}: a {kind or 'untyped'} item is not a chat message; not sent")
    return []


def _codex_event(record: dict[str, Any], where: str, notices: list[str]) -> list[dict[str, Any]]:
    """An ``event_msg`` line: a ``user_message`` is a user turn; other events (agent
    messages, token counts, command ends, ...) echo response items for the display."""
    p = record.get("payload")
    if not isinstance(p, dict) or p.get("type") != "user_message":
        return []
    images = [i for key in ("images", "local_images") for i in p.get(key) or []]
    if images:
        notices.append(f"{where}: {len(images)} image(s) of a user message are not sent to a text model")
    text = p.get("message")
    if not isinstance(text, str):
        notices.append(f"{where}: a user_message event without message text; not sent")
        return []
    return [{"role": "user", "content": text}]


def _is_item_user(record: dict[str, Any] | None) -> bool:
    p = (record or {}).get("payload")
    return ((record or {}).get("type") == "response_item" and isinstance(p, dict)
            and p.get("type") == "message" and p.get("role") == "user")


def _is_turn_input(record: dict[str, Any] | None) -> bool:
    """A line that opens a Codex turn: a user or developer message item, or an event."""
    r = record or {}
    p = r.get("payload")
    return r.get("type") == "event_msg" or (
        r.get("type") == "response_item" and isinstance(p, dict) and p.get("type") == "message"
        and p.get("role") in ("user", "developer", "system"))


def _echoed_user_events(entries: list[Entry]) -> set[int]:
    """Positions of ``user_message`` events whose turn also holds a ``response_item`` user
    message: Codex writes the question twice there, and the item is what the model got."""
    echoed: set[int] = set()
    run: list[int] = []

    def close() -> None:
        if any(_is_item_user(entries[i].record) for i in run):
            echoed.update(i for i in run if entries[i].type == "event_msg")
        run.clear()

    for i, e in enumerate(entries):
        if _is_turn_input(e.record):
            run.append(i)
        else:
            close()
    close()
    return echoed


def _is_claude_compact_summary(entry: Entry) -> bool:
    r = entry.record or {}
    return r.get("type") == "user" and r.get("isCompactSummary") is True


def _summary(entry: Entry) -> str | None:
    r = entry.record or {}
    if r.get("type") == "compaction":
        return r.get("summary") if isinstance(r.get("summary"), str) else ""
    if r.get("type") == "compacted":
        p = r.get("payload")
        return p.get("message", "") if isinstance(p, dict) else ""
    if _is_claude_compact_summary(entry):
        return _parts_text((r.get("message") or {}).get("content"), f"message {entry.index}", [])
    return None  # Claude Code's "summary" lines title a session; they replace nothing


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


def _drop_orphans(messages: list[dict[str, Any]], notices: list[str]) -> list[dict[str, Any]]:
    """Tool results whose call is not in the window (it began between a call and its
    result) cannot be sent: every chat API rejects a result without its call."""
    called: set[str] = set()
    out = []
    orphans = 0
    for m in messages:
        if m["role"] == "assistant":
            called.update(c["id"] for c in m.get("tool_calls") or [])
        if m["role"] == "tool" and m.get("tool_call_id") not in called:
            orphans += 1
            continue
        out.append(m)
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
    """
    notices: list[str] = []
    entries = list(window.messages)
    compaction = None
    for c in window.compactions:
        if _summary(c) is not None:
            compaction = c
    for e in entries:  # Claude Code's summaries are message lines, not compaction lines
        if _is_claude_compact_summary(e) and (compaction is None or e.line > compaction.line):
            compaction = e
    keep_from = 0
    if compaction is not None:
        record = compaction.record or {}
        first_id, first_line = record.get("firstKeptEntryId"), record.get("firstKeptEntryIndex")
        keep_from = next((i for i, e in enumerate(entries) if e.line > compaction.line), len(entries))
        kept = None
        if first_id is not None:  # pi v3: the id of the first message the compaction kept
            kept = next((i for i, e in enumerate(entries) if (e.record or {}).get("id") == first_id), None)
        elif isinstance(first_line, int):  # older pi sessions: its line number
            kept = next((i for i, e in enumerate(entries) if e.line >= first_line), None)
        if kept is not None:
            keep_from = min(keep_from, kept)
    messages: list[dict[str, Any]] = []
    if compaction is not None:
        record = compaction.record or {}
        payload = record.get("payload") if record.get("type") == "compacted" else None
        history = payload.get("replacement_history") if isinstance(payload, dict) else None
        if isinstance(history, list):  # Codex: the history the model continued from
            where = f"compaction at line {compaction.line}"
            summary = _summary(compaction)
            if summary:
                messages.append({"role": "user", "content": "Summary of the earlier conversation (compacted):\n"
                                                            + summary})
            for item in history:
                if isinstance(item, dict) and item.get("type") == "compaction":
                    notices.append(f"{where}: the agent's encrypted compaction summary cannot be sent to "
                                   "another model; the turns it kept are sent")
                elif isinstance(item, dict):
                    messages += _codex_item({"payload": item}, where, notices)
        else:
            messages.append({"role": "user", "content": "Summary of the earlier conversation (compacted):\n"
                                                        + (_summary(compaction) or "")})
    kept_entries = entries[keep_from:]
    echoed = _echoed_user_events(kept_entries)
    last_id = None
    for pos, entry in enumerate(kept_entries):
        where = f"message {entry.index}"
        if entry.record is None:
            notices.append(f"{where} (line {entry.line}) is corrupt ({entry.corrupt}); not sent")
            continue
        if entry.truncated:
            raise ValueError("chat_messages needs an uncapped window (content_limit=None): a model must get "
                             "whole messages, not display projections")
        record = entry.record
        if isinstance(record.get("id"), str):
            last_id = record["id"]
        kind = record.get("type")
        if kind == "message":
            m = record.get("message")
            messages += _pi_message(m, where, notices) if isinstance(m, dict) else []
            if not isinstance(m, dict):
                notices.append(f"{where}: a message line without a message object; not sent")
        elif kind in ("user", "assistant"):
            messages += _claude_message(record, where, notices)
        elif kind == "response_item":
            messages += _codex_item(record, where, notices)
        elif kind == "event_msg":
            if pos not in echoed:
                messages += _codex_event(record, where, notices)
        else:
            notices.append(f"{where}: line type {kind!r} is not a message; not sent")
    return Conversation(_drop_orphans(_merge_tool_calls(messages), notices), notices, last_id)


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


def _refuse_unless_transcript(transcript) -> None:
    """A non-empty file is written into only when its first non-blank line is a JSON
    record: anything else (an image, a log, a pretty-printed JSON file) is no transcript,
    and appending would move its tail to a side file and cut it there."""
    path = transcript.path
    how = ("Nothing was written to it. Give a .jsonl transcript or a path that does not exist yet, "
           "or pass --no-save to only read it")
    if transcript.line_count == 0:
        if transcript.torn_bytes:
            raise ValueError(f"{path!r} does not look like a transcript: its {transcript.torn_bytes:,} bytes "
                             f"hold no complete line, so no JSON record. {how}")
        return  # empty: a new conversation
    for entry in transcript.read_lines(0, min(8, transcript.line_count), content_limit=256):
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
        _refuse_unless_transcript(transcript)
    for entry in reversed(window.messages):
        record = entry.record
        if record is None:
            continue
        if record.get("type") != "message":
            raise ValueError(f"this transcript is in another agent's format (its lines have type "
                             f"{record.get('type')!r}); boundctx reads it but does not write into it. "
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
                    attachments: list[tuple[str, int]] = (), lock_wait: float = 0.0) -> list[int]:
    """Append the question and the answer as two message lines (each written whole and
    synced); attached files are named, with their size, in the question's line.
    ``lock_wait``: seconds to wait for another writer's lock (held across both lines).

    Returns the two lines' physical line numbers.
    """
    text = question
    if attachments:
        text += "\n\n" + "\n".join(f"[attached: {name} ({chars:,} characters)]" for name, chars in attachments)
    user = _record("user", text, style=style, parent_id=parent_id)
    assistant = _record("assistant", answer, style=style, parent_id=user["id"])
    return [transcript.append(user, lock_wait=lock_wait), transcript.append(assistant)]
