"""What a reply emits, typed: progress is never reply text.

A front end (or a voice route) consumes a stream of these. Only :class:`ReplyDelta` is
text of the reply; :class:`AnalysisProgress` reports section analysis (which section,
which worker, which phase) and must never be spoken or shown as the answer.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

__all__ = ["AnalysisProgress", "CutPrompt", "Done", "Event", "Failed", "FinishReason", "Fitted", "ModelCall", "Phase",
           "ReplyDelta", "Stage", "ToolCall", "ToolResult"]


#: What a section's analysis is at (:class:`AnalysisProgress`).
Phase = Literal["reading", "noted", "done"]
#: Which of a reply's model calls (:class:`CutPrompt`).
ModelCall = Literal["worker", "reread step", "answer"]
#: How a reply ended (:class:`Done`).
FinishReason = Literal["stop", "length", "repetition", "cancelled", "tool_rounds_exhausted", "tool_calls",
                       "content_filter"]


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
    analysed_chars : list of int
        The length in characters of each of ``analysed``, in its order: how many
        sections an input has is known only when its reading starts, and its length
        stands for it until then (the estimate of ``remaining_s``).
    prompt_limit : int
        Tokens the prompt may take: the window less the reply's budget.
    prompt_tokens : int
        Tokens of the prompt as fitted (analysed items left out: their notes come later).
    reused_tokens : int or None
        Of those, the tokens at its start the model holds evaluated already and will not
        evaluate again (a local model's kept state, as it is now); the rest,
        ``prompt_tokens - reused_tokens``, is what the turn must evaluate. None where the
        provider cannot know before the call (a remote server: :class:`Done`'s
        ``usage["cached_tokens"]`` says afterwards, where the server does).
    """

    messages: int
    sent: int
    dropped: list[int] = []
    dropped_research: int = 0
    clipped: int = 0
    analysed: list[str] = []
    prompt_limit: int = 0
    prompt_tokens: int = 0
    reused_tokens: int | None = None
    analysed_chars: list[int] = []


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
    remaining_s : float or None
        Seconds the rest of the whole reply is estimated to take from this event: the
        sections left of every input, the reread step, the answer with its output at
        the reply's token budget (:mod:`boundctx.analysis.time_left`), corrected by
        every event. Count it down from the event's arrival: once it runs out with the
        reply still going, the reply is running over its estimate. None when nothing
        is measured yet to estimate from (no section read: a reply without section
        analysis has none), or when the work left has run past its estimate; never 0
        while work remains.
    """

    stage: Literal["answering", "rereading"]
    elapsed_s: float
    round: int = 0
    remaining_s: float | None = None


class AnalysisProgress(msgspec.Struct, frozen=True, tag="analysis_progress"):
    """Section analysis is working on section ``section`` (1-based) of ``sections``.

    Attributes
    ----------
    section, sections : int
    worker : int
        The logical worker (0-based) the section is assigned to.
    phase : {"reading", "noted", "done"}
        Reading the section; its notes taken; every section read.
    elapsed_s : float
        Seconds since the reply started.
    notes_tokens : int
        After ``"noted"``: the tokens the worker's notes now take (bounded by
        ``analysis.notes_max_tokens``).
    prompt_tokens, completion_tokens : int
        After ``"noted"``: the tokens of the section's worker calls, their prompts
        evaluated and what they wrote; with the section's time, the paces the answer is
        estimated at.
    remaining_s : float or None
        The whole reply's estimated seconds left from this event, as on :class:`Stage`.
    """

    section: int
    sections: int
    worker: int
    phase: Phase
    elapsed_s: float = 0.0
    notes_tokens: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    remaining_s: float | None = None


class ReplyDelta(msgspec.Struct, frozen=True, tag="reply_delta"):
    """A piece of the reply's text: the only event that is answer text."""

    text: str


class ToolCall(msgspec.Struct, frozen=True, tag="tool_call"):
    """The model asked for a tool.

    Attributes
    ----------
    id, name : str
    arguments : str
        Exactly as the model produced them (not parsed or checked).
    internal : bool
        True for a call the engine answers itself (``read_chat_section``, or a name no
        offered tool has): a :class:`ToolResult` follows. False for a call of one of the
        tools the caller offered: the engine does not run it; the reply ends with
        ``Done("tool_calls")`` carrying it, and the caller runs it and sends the result
        back (decision 0020).
    """

    id: str
    name: str
    arguments: str
    internal: bool = True


class ToolResult(msgspec.Struct, frozen=True, tag="tool_result"):
    """What one of the engine's own tools returned to the model; or, for an internal
    call the reply ended before answering (the same turn called the caller's tools), why
    it was not run (``content`` starts ``"not run:"``)."""

    id: str
    content: str


class CutPrompt(msgspec.Struct, frozen=True):
    """A model call whose server evaluated fewer prompt tokens than were sent: it cut the
    prompt (as Ollama does past its ``num_ctx``, keeping the end, answering 200), so
    what that call answered from was not all of it (decision 0043).

    Attributes
    ----------
    call : ModelCall
        A note-taking worker's call, the constrained reread step's, or the answer's.
    sent_at_least : int
        The prompt's exact count where boundctx counts exactly, else a lower bound that
        holds for any tokenizer that never makes one token of two words.
    evaluated : int
        What the server reported (``usage.prompt_tokens``).
    """

    call: ModelCall
    sent_at_least: int
    evaluated: int


class Done(msgspec.Struct, frozen=True, tag="done"):
    """The reply finished.

    Attributes
    ----------
    finish_reason : FinishReason
        ``"stop"`` (the model ended its answer, or a caller's stop string did: the
        answer ends before it); ``"length"`` (cut at the reply's token budget: not a complete
        answer); ``"repetition"`` (stopped because the model repeated itself: repeated
        lines were not passed on, a phrase looping within a line was, three or four
        times); ``"cancelled"``; ``"tool_rounds_exhausted"`` (the model still asked
        for rereads when its rounds were spent); or ``"tool_calls"`` (the model called
        tools the caller offered: they are in ``tool_calls``, for the caller to run);
        or ``"content_filter"`` (a remote model's filter stopped it).
        A ``"length"`` stop can carry tool calls too; their arguments may then be cut.
    usage : dict
        Token counts reported or counted (``prompt_tokens``, ``completion_tokens``;
        ``cached_tokens``, the answering call's prompt tokens not evaluated again,
        where the model says); after a repetition stop also ``withheld_chars``.
    cut_prompts : list of CutPrompt
        The reply's model calls whose server cut their prompt (empty: none did, or the
        model is local and evaluates what it is given).
    tool_calls : list of ToolCall
        The calls of the caller's tools the reply ended with, in the model's order,
        each as the model produced it (``internal`` False); empty otherwise.
    """

    finish_reason: FinishReason
    usage: dict[str, Any] = {}
    tool_calls: list[ToolCall] = []
    cut_prompts: list[CutPrompt] = []


class Failed(msgspec.Struct, frozen=True, tag="failed"):
    """The reply failed; ``error`` names the problem and what to do, ``kind`` the
    class of the error (``"ContextOverflow"``, ``"ServerUnreachable"``, ...)."""

    error: str
    kind: str = ""


Event = Fitted | AnalysisProgress | Stage | ReplyDelta | ToolCall | ToolResult | Done | Failed
