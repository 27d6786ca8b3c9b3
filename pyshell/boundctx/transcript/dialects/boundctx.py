"""boundctx's own lines, which are pi's session v3 lines: ``{"type":"message",
"message":{"role":...}}`` with text or content parts (``text``, ``toolCall``, ``thinking``,
``image``), ``toolResult`` and ``bashExecution`` messages; ``compaction`` lines carry a
summary of what they replaced (and, pi, the id or line of the first message they kept).
The one format boundctx writes.
"""

from __future__ import annotations

from typing import Any

from boundctx.transcript.dialects.base import (
    COMPACTION,
    MESSAGE,
    Dialect,
    Notes,
    assistant_turn,
    openai_calls,
    parts_text,
    said,
    tool_call,
    tool_result,
)

__all__ = ["BOUNDCTX", "PI", "BoundctxDialect"]


class BoundctxDialect(Dialect):
    kinds = {"message": MESSAGE, "compaction": COMPACTION}
    writable = True
    links = {"id": "id", "parentId": "parent"}

    def __init__(self, name: str) -> None:
        self.name = name

    def messages(self, record: dict[str, Any], where: str, notes: Notes) -> list[dict[str, Any]]:
        m = record.get("message")
        if not isinstance(m, dict):
            notes.add(f"{where}: a message line whose message is {said(m)}, not an object; not sent")
            return []
        return _pi_message(m, where, notes)

    def replaces_history(self, record: dict[str, Any]) -> bool:
        return record.get("type") == "compaction"

    def summary(self, record: dict[str, Any], where: str, notes: Notes) -> str | None:
        summary = record.get("summary")
        if summary is None or isinstance(summary, str):
            return summary or ""
        notes.add(f"{where}: its summary is {said(summary)}, not text; no summary is sent")
        return None


#: The same lines under both names: boundctx writes pi's format.
BOUNDCTX, PI = BoundctxDialect("boundctx"), BoundctxDialect("pi")


def _pi_message(m: dict[str, Any], where: str, notes: Notes) -> list[dict[str, Any]]:
    role = m.get("role")
    content = m.get("content")
    if role in ("user", "system", "developer"):
        text = parts_text(content, where, notes)
        return [] if text is None else [{"role": "system" if role == "developer" else role, "content": text}]
    if role == "assistant":
        text = parts_text(content, where, notes)
        calls = [tool_call(p.get("id"), p.get("name"), p.get("arguments"), where, notes)
                 for p in (content if isinstance(content, list) else []) if isinstance(p, dict)
                 and p.get("type") == "toolCall"]
        calls += openai_calls(m.get("tool_calls"), where, notes)  # OpenAI-style records
        return assistant_turn(text, calls)
    if role in ("toolResult", "tool"):
        call_id = m["toolCallId"] if "toolCallId" in m else m.get("tool_call_id")
        return tool_result(call_id, lambda: parts_text(content, where, notes), where, notes)
    if role == "bashExecution":  # a command the user ran in the agent; the model saw its output
        return _bash(m, where, notes)
    notes.add(f"{where}: role {said(role)} is not a chat role; not sent")
    return []


def _bash(m: dict[str, Any], where: str, notes: Notes) -> list[dict[str, Any]]:
    command, output, code = m.get("command"), m.get("output"), m.get("exitCode")
    for field, value in (("command", command), ("output", output)):
        if value is not None and not isinstance(value, str):
            notes.add(f"{where}: a bashExecution message whose {field} is {said(value)}; not sent")
            return []
    exit_code = f" (exit code {code})" if isinstance(code, int) and not isinstance(code, bool) else ""
    return [{"role": "user", "content": f"I ran `{command or ''}`{exit_code}:\n{output or ''}"}]
