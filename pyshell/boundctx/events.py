"""What a reply emits, typed: progress is never reply text.

A front end (or a voice route) consumes a stream of these. Only :class:`ReplyDelta` is
text of the reply; :class:`AnalysisProgress` reports section analysis (which section,
which worker, which phase) and must never be spoken or shown as the answer.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

__all__ = ["AnalysisProgress", "Done", "Event", "Failed", "Fitted", "ReplyDelta", "Stage", "ToolCall",
           "ToolResult"]


class Fitted(msgspec.Struct, frozen=True, tag="fitted"):
    """What of the conversation the model gets, decided before any model call (the
    first event of every reply that gets that far; one refused before it has only
    :class:`Failed`): nothing is dropped without this saying so.

    Attributes
    ----------
    messages : int
        Messages given (attached files count as one message each, before the question).
    sent : int
        Messages sent (clipped tool results included; analysed items are not).
    dropped : list of int
        Indexes, in the messages given to :meth:`Engine.reply`, of old messages dropped to
        fit the window (earlier research first, then the oldest exchanges).
    dropped_research : int
        How many of the dropped messages were earlier tool calls and results.
    clipped : int
        Tool results cut to ``chat.tool_result_clip_chars`` (analysis off).
    analysed : list of str
        Items read by section analysis instead of being sent whole (their notes are).
    prompt_limit : int
        Tokens the prompt may take: the window less the reply's budget.
    """

    messages: int
    sent: int
    dropped: list[int] = []
    dropped_research: int = 0
    clipped: int = 0
    analysed: list[str] = []
    prompt_limit: int = 0


class Stage(msgspec.Struct, frozen=True, tag="stage"):
    """The reply moved to a new step after analysis: ``"answering"`` (the model reads
    the prompt and starts its answer) or ``"rereading"`` (answering again with exact
    ranges of the originals it asked for).

    Attributes
    ----------
    stage : str
    elapsed_s : float
        Seconds since the reply started.
    round : int
        0 for the first answer, k for the k-th reread round.
    """

    stage: Literal["answering", "rereading"]
    elapsed_s: float
    round: int = 0


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
        ``"stop"``; ``"length"`` (cut at the reply's token budget: not a complete
        answer); ``"repetition"`` (stopped because the model repeated itself: repeated
        lines were not passed on, a phrase looping within a line was, three or four
        times); ``"cancelled"``; or ``"tool_rounds_exhausted"`` (the model still asked
        for rereads when its rounds were spent).
    usage : dict
        Token counts reported or counted (``prompt_tokens``, ``completion_tokens``);
        after a repetition stop also ``withheld_chars``.
    """

    finish_reason: str
    usage: dict[str, Any] = {}


class Failed(msgspec.Struct, frozen=True, tag="failed"):
    """The reply failed; ``error`` names the problem and what to do."""

    error: str
    kind: str = ""


Event = Fitted | AnalysisProgress | Stage | ReplyDelta | ToolCall | ToolResult | Done | Failed
