"""A provider that answers from a Python function: exact, deterministic tests of logic."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Union

import msgspec

from boundctx._search import longest_fitting
from boundctx.errors import GenerationTimeout
from boundctx.providers.base import (
    ChatRequest,
    ChunkStream,
    Finish,
    FinishReason,
    Provider,
    TextChunk,
    ToolCallChunk,
)
from boundctx.tokens.base import TokenCounter
from boundctx.tokens.estimate import ByteEstimateCounter

__all__ = ["COUNTED", "ScriptedProvider", "ScriptedReply"]

#: ``ScriptedReply`` usage that is counted as usual.
COUNTED = -1


class ScriptedReply(msgspec.Struct, frozen=True):
    """A reply with its ending given, not worked out: for faults (an output cut at
    ``max_tokens``, a backend that reports no usage) and for replaying recorded calls.

    ``prompt_tokens`` / ``completion_tokens``: the usage to report; ``COUNTED`` (the
    default) counts them as usual, None reports none; ``usage_estimated`` marks usage
    the backend did not report (a provider's own count).
    """

    text: str
    finish_reason: FinishReason = "stop"
    prompt_tokens: int | None = COUNTED
    completion_tokens: int | None = COUNTED
    usage_estimated: bool = False

Script = Callable[[ChatRequest], Union[str, ScriptedReply, Iterable[Union[str, ToolCallChunk]], BaseException]]


class ScriptedProvider(Provider):
    """Answers each request with ``respond(request)``.

    ``respond`` returns the reply as a string, as an iterable of text pieces and
    :class:`ToolCallChunk` (streamed one by one, so cancellation and time limits can fall
    between them), as a :class:`ScriptedReply` (its ending and usage given), or an
    exception, which the call raises. ``stop`` is recorded, not applied, as by a server
    that ignores the field: what a test sees of stop strings is the engine's own cut
    (decision 0036). Every request is recorded in :attr:`requests`; :attr:`max_active`
    is the most generations that were ever running at once (1 when calls are strictly
    sequential).

    Parameters
    ----------
    respond : callable
    context_window : int
    counter : TokenCounter, optional
        Counts prompts and replies (default: the byte estimate).
    clock : callable
        Seconds, for time limits (tests may pass a fake clock).
    """

    name = "scripted"

    def __init__(self, respond: Script, *, context_window: int = 8192,
                 counter: TokenCounter | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.respond = respond
        self.context_window = context_window
        self.counter = counter if counter is not None else ByteEstimateCounter()
        self.clock = clock
        self.requests: list[ChatRequest] = []
        self.active = 0
        self.max_active = 0
        self._count_lock = threading.Lock()  # callers may run in threads
        self.closed_early = 0

    def _stream(self, request: ChatRequest, *, cancel: Any, timeout_s: float | None) -> ChunkStream:
        self.requests.append(request)
        prompt_tokens = self.count_prompt(request.messages, tools=request.tools)
        self._check_fits(prompt_tokens, request.max_tokens)
        deadline = None if timeout_s is None else self.clock() + timeout_s
        with self._count_lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        finished = False
        try:
            result = self.respond(request)
            if isinstance(result, BaseException):
                raise result
            if isinstance(result, ScriptedReply):
                if result.text:
                    yield TextChunk(result.text)
                finished = True
                yield Finish(result.finish_reason,
                             prompt_tokens if result.prompt_tokens == COUNTED else result.prompt_tokens,
                             self.counter.count_text(result.text) if result.completion_tokens == COUNTED
                             else result.completion_tokens, usage_estimated=result.usage_estimated)
                return
            pieces = [result] if isinstance(result, str) else result
            text = ""
            called = False
            for piece in pieces:
                if cancel is not None and cancel.is_set():
                    finished = True
                    yield Finish("cancelled", prompt_tokens, self.counter.count_text(text))
                    return
                if deadline is not None and self.clock() > deadline:
                    raise GenerationTimeout(f"the scripted generation ran past its {timeout_s} s limit")
                if isinstance(piece, ToolCallChunk):
                    called = True
                    yield piece
                    continue
                fitting = self._fit(text, piece, request.max_tokens)
                text += fitting
                if fitting:
                    yield TextChunk(fitting)
                if fitting != piece:
                    finished = True
                    yield Finish("length", prompt_tokens, self.counter.count_text(text))
                    return
            finished = True
            yield Finish("tool_calls" if called else "stop", prompt_tokens, self.counter.count_text(text))
        finally:
            with self._count_lock:
                self.active -= 1
            if not finished:
                self.closed_early += 1

    def _fit(self, text: str, piece: str, max_tokens: int) -> str:
        """The longest prefix of ``piece`` that keeps the reply within ``max_tokens``."""
        return piece[:longest_fitting(len(piece), lambda k: self.counter.count_text(text + piece[:k]) <= max_tokens)]
