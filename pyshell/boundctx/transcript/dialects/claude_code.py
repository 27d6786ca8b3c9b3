"""Claude Code sessions: ``user`` / ``assistant`` lines holding Anthropic messages
(``tool_use``, ``tool_result`` blocks). A compaction is a ``system`` line with subtype
``compact_boundary`` followed by a ``user`` line marked ``isCompactSummary``: that summary
replaces what came before it, and is not sent as if the user had written it. Other system
lines (turn durations, hook summaries) are not messages, and ``summary`` lines title the
session and replace nothing. Read, never written.
"""

from __future__ import annotations

import functools
from typing import Any

from boundctx.transcript.dialects.base import (
    COMPACTION,
    MESSAGE,
    Dialect,
    Notes,
    QualifiedKind,
    assistant_turn,
    parts_text,
    said,
    tool_call,
    tool_result,
)

__all__ = ["CLAUDE_CODE", "ClaudeCodeDialect"]


class ClaudeCodeDialect(Dialect):
    name = "claude-code"
    kinds = {"user": MESSAGE, "assistant": MESSAGE,
             "system": QualifiedKind(COMPACTION, "subtype", "compact_boundary")}
    links = {"uuid": "id", "parentUuid": "parent", "logicalParentUuid": "logical_parent",
             "sourceToolAssistantUUID": "answers"}

    def messages(self, record: dict[str, Any], where: str, notes: Notes) -> list[dict[str, Any]]:
        return _claude_message(record, where, notes)

    def replaces_history(self, record: dict[str, Any]) -> bool:
        # The summary after a compact_boundary line, itself a message line.
        return record.get("type") == "user" and record.get("isCompactSummary") is True

    def summary(self, record: dict[str, Any], where: str, notes: Notes) -> str | None:
        m = record.get("message")
        if not isinstance(m, dict):
            notes.add(f"{where}: its message is {said(m)}, not an object; no summary is sent")
            return None
        return parts_text(m.get("content"), where, notes)


CLAUDE_CODE = ClaudeCodeDialect()


def _claude_message(record: dict[str, Any], where: str, notes: Notes) -> list[dict[str, Any]]:
    """A ``user`` or ``assistant`` line: the line's type says whose turn it is."""
    m = record.get("message")
    if not isinstance(m, dict):
        notes.add(f"{where}: a {record.get('type')} line whose message is {said(m)}; not sent")
        return []
    content = m.get("content")
    blocks = [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
    if record.get("type") == "assistant":
        text = parts_text(content, where, notes)
        calls = [tool_call(b.get("id"), b.get("name"), b.get("input"), where, notes) for b in blocks
                 if b.get("type") == "tool_use"]
        return assistant_turn(text, calls)
    results = [b for b in blocks if b.get("type") == "tool_result"]
    out: list[dict[str, Any]] = []
    for b in results:
        text_of = functools.partial(parts_text, b.get("content"), where, notes)
        out += tool_result(b.get("tool_use_id"), text_of, where, notes)
    text = parts_text(content, where, notes)
    if text or (text is not None and not results):
        out.append({"role": "user", "content": text})
    return out
