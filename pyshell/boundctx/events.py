"""What a reply emits, typed: progress is never reply text.

A front end (or a voice route) consumes a stream of these. Only :class:`ReplyDelta` is
text of the reply; :class:`AnalysisProgress` reports section analysis (which section,
which worker, which phase) and must never be spoken or shown as the answer.
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["AnalysisProgress", "Done", "Event", "Failed", "ReplyDelta", "ToolCall", "ToolResult"]


class AnalysisProgress(msgspec.Struct, frozen=True, tag="analysis_progress"):
    """Section analysis is working on section ``section`` (1-based) of ``sections``.

    Attributes
    ----------
    section, sections : int
    worker : int
        The logical worker (0-based) the section is assigned to.
    phase : str
        ``"planned"``, ``"reading"``, ``"noted"`` or ``"done"``.
    elapsed_s : float
        Seconds since the reply started.
    notes_tokens : int
        After ``"noted"``: the tokens the worker's notes now take (bounded by
        ``analysis.notes_max_tokens``).
    """

    section: int
    sections: int
    worker: int
    phase: str
    elapsed_s: float = 0.0
    notes_tokens: int = 0


class ReplyDelta(msgspec.Struct, frozen=True, tag="reply_delta"):
    """A piece of the reply's text: the only event that is answer text."""

    text: str


class ToolCall(msgspec.Struct, frozen=True, tag="tool_call"):
    """The model asked for a tool."""

    id: str
    name: str
    arguments: str


class ToolResult(msgspec.Struct, frozen=True, tag="tool_result"):
    """What a tool returned to the model."""

    id: str
    content: str


class Done(msgspec.Struct, frozen=True, tag="done"):
    """The reply finished.

    Attributes
    ----------
    finish_reason : str
        ``"stop"``, ``"length"``, ``"tool_calls"`` or ``"cancelled"``.
    usage : dict
        Token counts reported or counted (``prompt_tokens``, ``completion_tokens``).
    """

    finish_reason: str
    usage: dict[str, Any] = {}


class Failed(msgspec.Struct, frozen=True, tag="failed"):
    """The reply failed; ``error`` names the problem and what to do."""

    error: str
    kind: str = ""


Event = AnalysisProgress | ReplyDelta | ToolCall | ToolResult | Done | Failed
