"""Codex CLI and Desktop rollouts: ``response_item`` lines (``message``,
``function_call``, ``function_call_output``, ``reasoning``) are the turns; ``compacted``
replaces the history before it (with its ``replacement_history`` when it has one).
``event_msg`` ``user_message`` lines are user turns where no ``response_item`` user
message of the same turn holds them (Codex Desktop writes some sessions with no other
trace of what was asked); the other events (agent messages, token counts,
``context_compacted``...) echo response items for the agent's display and are not sent.
Read, never written.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from boundctx.transcript.dialects.base import (
    COMPACTION,
    MESSAGE,
    Dialect,
    Notes,
    QualifiedKind,
    assistant_turn,
    parts_text,
    said,
    short,
    tool_call,
    tool_result,
)

if TYPE_CHECKING:
    from boundctx.transcript.entries import Entry

__all__ = ["CODEX", "CodexDialect"]

_CODEX_CALLS = ("function_call", "custom_tool_call", "local_shell_call")
_CODEX_OUTPUTS = ("function_call_output", "custom_tool_call_output")


class CodexDialect(Dialect):
    name = "codex"
    # Of the events, a user_message is a user turn as the agent shows it: Codex Desktop
    # writes some questions nowhere else. Codex CLI writes it beside the response item
    # that gave the model the same question, so its window holds both lines and
    # chat_messages sends the turn once (echoed).
    kinds = {"response_item": MESSAGE, "compacted": COMPACTION,
             "event_msg": QualifiedKind(MESSAGE, "payload.type", "user_message")}

    def messages(self, record: dict[str, Any], where: str, notes: Notes) -> list[dict[str, Any]]:
        if record.get("type") == "event_msg":
            return _codex_event(record.get("payload"), where, notes)
        return codex_item(record.get("payload"), where, notes)

    def replaces_history(self, record: dict[str, Any]) -> bool:
        return record.get("type") == "compacted"

    def summary(self, record: dict[str, Any], where: str, notes: Notes) -> str | None:
        p = record.get("payload")
        if p is not None and not isinstance(p, dict):
            notes.add(f"{where}: its payload is {said(p)}, not an object; no summary is sent")
            return None
        summary = (p or {}).get("message")
        if summary is None or isinstance(summary, str):
            return summary or ""
        notes.add(f"{where}: its message is {said(summary)}, not text; no summary is sent")
        return None

    def replacement(self, record: dict[str, Any], where: str, notes: Notes) -> list[Any] | None:
        payload = record.get("payload")
        history = payload.get("replacement_history") if isinstance(payload, dict) else None
        if history is not None and not isinstance(history, list):
            notes.add(f"{where}: its replacement_history is {said(history)}, not a list; not sent")
            return None
        return history

    def history_item(self, item: Any, where: str, notes: Notes) -> list[dict[str, Any]]:
        if isinstance(item, dict) and item.get("type") == "compaction":
            notes.add(f"{where}: the agent's encrypted compaction summary cannot be sent to another model; "
                      "the turns it kept are sent")
            return []
        return codex_item(item, where, notes)

    def echoed(self, entries: list[Entry], converted: list[list[dict[str, Any]]]) -> set[int]:
        return _echoed_user_events(entries, converted)


CODEX = CodexDialect()


def _codex_output(output: Any, where: str, notes: Notes) -> str:
    """A Codex call's output: a string, content items, or an object holding either."""
    if isinstance(output, dict) and "content" in output:
        output = output["content"]
    if isinstance(output, list):
        return parts_text(output, where, notes) or ""
    if output is None:
        return ""
    return output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)


def codex_item(p: Any, where: str, notes: Notes) -> list[dict[str, Any]]:
    """A ``response_item`` line's payload (or an item of a compaction's history)."""
    if not isinstance(p, dict):
        notes.add(f"{where}: a response item that is {said(p)}, not an object; not sent")
        return []
    kind = p.get("type")
    if kind == "message":
        role = p.get("role")
        role = "system" if role == "developer" else role
        if role not in ("user", "assistant", "system"):
            notes.add(f"{where}: role {said(role)} is not a chat role; not sent")
            return []
        content = p.get("content")
        if not isinstance(content, list):  # Codex writes content items, never bare text
            notes.add(f"{where}: a message item whose content is {said(content)}, not content items; not sent")
            return []
        return [{"role": role, "content": parts_text(content, where, notes) or ""}]
    if kind in _CODEX_CALLS:
        name = p["name"] if "name" in p else kind
        arguments = p["arguments"] if "arguments" in p else p["input"] if "input" in p else p.get("action")
        return assistant_turn("", [tool_call(p.get("call_id"), name, arguments, where, notes)])
    if kind in _CODEX_OUTPUTS:
        return tool_result(p.get("call_id"), lambda: _codex_output(p.get("output"), where, notes), where, notes)
    if kind == "reasoning":
        return []
    if isinstance(kind, str):
        notes.add(f"{where}: a {short(kind)} item is not a chat message; not sent")
    else:
        notes.add(f"{where}: an item whose type is {said(kind)} is not a chat message; not sent")
    return []


def _codex_event(p: Any, where: str, notes: Notes) -> list[dict[str, Any]]:
    """An ``event_msg`` line's payload: a ``user_message`` is a user turn; other events
    (agent messages, token counts, command ends, ...) echo response items for the display."""
    if not isinstance(p, dict) or p.get("type") != "user_message":
        return []
    images = 0
    for key in ("images", "local_images"):
        value = p.get(key)
        if isinstance(value, list):
            images += len(value)
        elif value is not None:
            notes.add(f"{where}: the user message's {key} is {said(value)}, not a list; ignored")
    if images:
        notes.add(f"{where}: {images} image(s) of a user message are not sent to a text model")
    text = p.get("message")
    if not isinstance(text, str):
        notes.add(f"{where}: a user_message event whose message is {said(text)}, not text; not sent")
        return []
    return [{"role": "user", "content": text}]


def _echoed_user_events(entries: list[Entry], converted: list[list[dict[str, Any]]]) -> set[int]:
    """Positions of ``user_message`` events whose turn also holds a ``response_item`` that
    was sent as a user message: Codex writes the question twice there, and the item is
    what the model got. An event whose item could not be sent, or was sent without text,
    is the question's only copy and is sent."""
    echoed: set[int] = set()
    run: list[int] = []

    def close() -> None:
        items = [m for i in run if entries[i].type == "response_item" for m in converted[i] if m["role"] == "user"]
        if items:
            asked = any(m["content"] for m in items)
            echoed.update(i for i in run if entries[i].type == "event_msg"
                          and (asked or not any(m["content"] for m in converted[i])))
        run.clear()

    for i, e in enumerate(entries):
        if _is_turn_input(e.record):
            run.append(i)
        else:
            close()
    close()
    return echoed


def _is_turn_input(record: dict[str, Any] | None) -> bool:
    """A line that opens a Codex turn: a user or developer message item, or an event."""
    r = record if isinstance(record, dict) else {}
    p = r.get("payload")
    return r.get("type") == "event_msg" or (
        r.get("type") == "response_item" and isinstance(p, dict) and p.get("type") == "message"
        and p.get("role") in ("user", "developer", "system"))
