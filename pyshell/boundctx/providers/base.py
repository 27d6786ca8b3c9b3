"""The provider interface: stream a chat completion, count a prompt, know the window."""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Generator, Mapping, Sequence
from typing import Any, Literal, get_args

import msgspec

from boundctx.errors import ContextOverflow
from boundctx.events import CutPrompt, ModelCall
from boundctx.tokens.base import Message, TokenCounter

__all__ = ["ChatRequest", "ChunkStream", "Finish", "FinishReason", "Provider", "Reply", "Sampling", "TextChunk",
           "ToolCallChunk", "ToolChoice", "finish_reason", "make_request", "noting_cuts"]

#: Why a stream ended: the OpenAI set (a remote server's own reason is passed on), and
#: ``"cancelled"`` when the caller's cancel event stopped it.
FinishReason = Literal["stop", "length", "tool_calls", "content_filter", "cancelled"]
_REASONS: dict[str, FinishReason] = {reason: reason for reason in get_args(FinishReason)}


def finish_reason(value: object) -> FinishReason:
    """A server's (or a recording's) ``finish_reason`` as one of boundctx's: the old
    ``"function_call"`` is ``"tool_calls"``; a value outside the set (a server's own word)
    or none is ``"stop"``: the server ended the reply without saying it was cut."""
    if value == "function_call":
        return "tool_calls"
    return _REASONS.get(value, "stop") if isinstance(value, str) else "stop"


class TextChunk(msgspec.Struct, frozen=True):
    """Generated text."""

    text: str


class ToolCallChunk(msgspec.Struct, frozen=True):
    """One complete tool call (providers assemble streamed pieces before yielding)."""

    id: str
    name: str
    arguments: str


class Finish(msgspec.Struct, frozen=True):
    """The last chunk of every stream.

    Attributes
    ----------
    reason : FinishReason
        ``"stop"``, ``"length"``, ``"tool_calls"``, ``"content_filter"`` (a remote
        server's filter) or ``"cancelled"``.
    prompt_tokens, completion_tokens : int or None
        As counted (local) or reported (remote).
    usage_estimated : bool
        The backend reported no usage; ``prompt_tokens`` is the provider's own
        (conservative) count. A token budget that must not guess treats it as absent.
    cached_tokens : int or None
        Prompt tokens the model did not evaluate again because it still held them (a
        local model's kept state, counted exactly; a server's
        ``usage.prompt_tokens_details.cached_tokens`` or llama.cpp's ``timings.cache_n``);
        None where the backend does not say.
    prompt_floor : int or None
        The fewest tokens the prompt as sent can be (a remote provider's: its exact
        count where it counts exactly, else :func:`boundctx.tokens.base.fewest_tokens`);
        None where the provider evaluated the prompt itself. A reported
        ``prompt_tokens`` below it means the server cut the prompt (:attr:`cut`).
    """

    reason: FinishReason
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    usage_estimated: bool = False
    cached_tokens: int | None = None
    prompt_floor: int | None = None

    @property
    def cut(self) -> bool:
        """The server said it evaluated fewer prompt tokens than were sent (decision 0043).
        A report of 0 says nothing (some servers report 0 on a cache hit), and tokens the
        server says it had cached count as read: a server that counts only what it
        evaluated anew is not taken for one that cut."""
        if self.prompt_floor is None or self.usage_estimated or not self.prompt_tokens:
            return False
        return self.prompt_tokens + (self.cached_tokens or 0) < self.prompt_floor


Chunk = TextChunk | ToolCallChunk | Finish


def noting_cuts(stream: Generator[Chunk, None, None], cuts: list[CutPrompt], call: ModelCall,
                ) -> Generator[Chunk, None, None]:
    """``stream``'s chunks as they come, with a :class:`~boundctx.events.CutPrompt` added
    to ``cuts`` when its Finish says the server cut the prompt. Closing this closes
    ``stream`` (the generation stops)."""
    try:
        for chunk in stream:
            if isinstance(chunk, Finish) and chunk.cut:
                assert chunk.prompt_floor is not None and chunk.prompt_tokens is not None
                cuts.append(CutPrompt(call, chunk.prompt_floor, chunk.prompt_tokens))
            yield chunk
    finally:
        stream.close()
#: What a provider's stream is: a generator, so its reader can close it and end the generation.
ChunkStream = Generator[Chunk, None, None]


class Sampling(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """How one reply's tokens are drawn, where its caller asked (an OpenAI request's
    ``seed``, ``top_p``, penalties; llama.cpp's ``top_k`` and ``min_p``). None leaves
    the model's own default: a local model's llama.cpp sampler, a server's.

    Attributes
    ----------
    seed : int, optional
        The same seed, prompt and settings give the same reply (a local model: per
        call, not once per process; a server: forwarded, where it honours one).
    top_p, min_p : float, optional
        Nucleus and minimum-probability cut-offs, 0–1.
    top_k : int, optional
        Only the k most likely tokens (0 = all).
    presence_penalty, frequency_penalty : float, optional
        −2 to 2, OpenAI's meaning.
    """

    seed: int | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None

    def given(self) -> dict[str, Any]:
        """The fields the caller set, by name."""
        return {name: value for name in self.__struct_fields__ if (value := getattr(self, name)) is not None}


#: OpenAI's ``tool_choice``: ``"auto"``, ``"none"``, ``"required"``, or one function
#: named (``{"type": "function", "function": {"name": ...}}``).
ToolChoice = str | dict[str, Any]


class ChatRequest(msgspec.Struct, frozen=True):
    """Everything one call asked for (what the scripted provider records).

    ``keep_state`` False marks one-off work (a note-taking worker, an understanding
    task): a later prompt is not expected to start the way this one does, so a local
    model does not copy the state it leaves into its state cache.
    """

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    max_tokens: int = 256
    temperature: float = 0.2
    stop: list[str] | None = None
    schema: dict[str, Any] | None = None
    keep_state: bool = True
    sampling: Sampling | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None


def make_request(messages: Sequence[Message], *, tools: Sequence[Mapping[str, Any]] | None, max_tokens: int,
                 temperature: float, stop: Sequence[str] | None, schema: Mapping[str, Any] | None,
                 timeout_s: float | None, keep_state: bool = True, sampling: Sampling | None = None,
                 tool_choice: ToolChoice | None = None, parallel_tool_calls: bool | None = None) -> ChatRequest:
    """A checked :class:`ChatRequest` (shared by the sync and async entry points)."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    if timeout_s is not None and not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    if not tools and tool_choice not in (None, "auto", "none"):
        raise ValueError(f"tool_choice {tool_choice!r} needs tools to choose from")
    return ChatRequest([dict(m) for m in messages], [dict(t) for t in tools] if tools else None,
                       max_tokens, float(temperature), list(stop) if stop else None, dict(schema) if schema else None,
                       bool(keep_state), sampling if sampling is not None and sampling.given() else None,
                       tool_choice if tools else None, parallel_tool_calls if tools else None)


class Reply(msgspec.Struct, frozen=True):
    """A whole completion, collected from a stream by :meth:`Provider.chat`."""

    text: str
    tool_calls: list[ToolCallChunk]
    finish: Finish


class Provider(ABC):
    """A chat model.

    Subclasses implement :meth:`_stream` and set ``counter`` (the model's token counter)
    and ``context_window``. A provider that holds resources (a model, connections)
    frees them in :meth:`close`; ``with provider:`` closes it on the way out.
    """

    #: What a provider says about itself beside its window; a wrapper of a provider
    #: (serve's per-reply gate) passes each of them on.
    DESCRIPTION = ("name", "counter", "context_window", "supports_tools", "supports_tool_choice", "reports_usage",
                   "serialises")

    name: str = "provider"
    counter: TokenCounter
    context_window: int
    #: Whether the model can be offered tools (function calling).
    supports_tools: bool = True
    #: Whether replies carry token usage. False refuses a token-bounded turn up front;
    #: a reply that comes back without usage anyway exhausts the bound (never guessed).
    reports_usage: bool = True
    #: Whether a request's ``tool_choice`` can hold the model to calling a tool
    #: (``"required"``, a named function); ``"auto"`` and ``"none"`` every tool-capable
    #: provider honours (``"none"`` by not offering the tools).
    supports_tool_choice: bool = True
    #: Whether generations run one at a time whatever the caller does (local models):
    #: :meth:`turn` then waits for the model.
    serialises: bool = False

    def reusable_prefix(self, messages: Sequence[Message], *,
                        tools: Sequence[Mapping[str, Any]] | None = None) -> int | None:
        """Prompt tokens of ``messages`` the model holds evaluated already and would not
        evaluate again if it were called now, or None where the provider cannot know
        (a remote server says afterwards: :attr:`Finish.cached_tokens`)."""
        return None

    def count_prompt(self, messages: Sequence[Message], *,
                     tools: Sequence[Mapping[str, Any]] | None = None) -> int:
        """Tokens the prompt for ``messages`` takes (exact where the counter is)."""
        return self.counter.count_prompt(messages, tools=tools)

    def check_schema(self, schema: Mapping[str, Any]) -> None:
        """Raise :class:`~boundctx.errors.ResponseSchemaError` when an answer cannot be
        held to ``schema`` here. A server is sent the schema and holds it or refuses it
        itself, so by default there is nothing to check before the call."""

    def stream_chat(self, messages: Sequence[Message], *,
                    tools: Sequence[Mapping[str, Any]] | None = None, max_tokens: int = 256,
                    temperature: float = 0.2, stop: Sequence[str] | None = None,
                    schema: Mapping[str, Any] | None = None, cancel: Any = None,
                    timeout_s: float | None = None, keep_state: bool = True, sampling: Sampling | None = None,
                    tool_choice: ToolChoice | None = None, parallel_tool_calls: bool | None = None) -> ChunkStream:
        """Stream a completion: :class:`TextChunk` and :class:`ToolCallChunk`, then one
        :class:`Finish` (the request is built by :func:`make_request` and sent by
        :meth:`stream`).

        Parameters
        ----------
        messages : sequence of dict
        tools : sequence of dict, optional
            OpenAI-style function tools.
        max_tokens : int
            Most tokens to generate.
        temperature : float
        stop : sequence of str, optional
        schema : dict, optional
            A JSON schema the output must follow (grammar-constrained where supported).
        cancel : threading.Event, optional
            When set, generation stops before the next chunk and the stream ends with
            ``Finish("cancelled")``.
        timeout_s : float, optional
            Wall-clock limit for the whole generation; past it the generator is closed
            and :class:`~boundctx.errors.GenerationTimeout` raised.
        keep_state : bool
            False: one-off work, whose state a local model need not keep for later
            prompts (:class:`ChatRequest`).
        sampling : Sampling, optional
            The caller's sampling (seed, cut-offs, penalties); the model's defaults
            for what it leaves out.
        tool_choice : str or dict, optional
            OpenAI's ``tool_choice`` for ``tools`` (``"required"`` and a named function
            only where :attr:`supports_tool_choice`).
        parallel_tool_calls : bool, optional
            Whether the model may call several tools in one reply (forwarded).

        Raises
        ------
        ContextOverflow
            The prompt plus ``max_tokens`` does not fit ``context_window``; checked before
            any model call where counts are exact.
        """
        request = make_request(messages, tools=tools, max_tokens=max_tokens, temperature=temperature, stop=stop,
                               schema=schema, timeout_s=timeout_s, keep_state=keep_state, sampling=sampling,
                               tool_choice=tool_choice, parallel_tool_calls=parallel_tool_calls)
        return self.stream(request, cancel=cancel, timeout_s=timeout_s)

    def stream(self, request: ChatRequest, *, cancel: Any = None, timeout_s: float | None = None) -> ChunkStream:
        """Stream the completion of a request built by :func:`make_request`, as it is:
        a caller that keeps the request (to hash or log it) sends that very request.

        ``cancel`` and ``timeout_s`` are :meth:`stream_chat`'s. The stream is a
        generator: nothing runs until its first chunk is asked for, and the time limit
        counts from then.
        """
        if timeout_s is not None and not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        return self._stream(request, cancel=cancel, timeout_s=timeout_s)

    @abstractmethod
    def _stream(self, request: ChatRequest, *, cancel: Any, timeout_s: float | None) -> ChunkStream:
        """The provider's stream for one checked request (a generator: nothing runs
        until the first chunk is asked for; the time limit counts from then)."""

    def turn(self, *, timeout_s: float | None = None) -> contextlib.AbstractContextManager[None]:
        """A turn on the model: a model that takes one generation at a time
        (``serialises``) is held for the block, so a caller can wait for it first and
        count the wait against its own clock; elsewhere the block just runs.

        Every stream started inside the block is read to its end (or closed) before the
        block ends.

        Parameters
        ----------
        timeout_s : float, optional
            Longest wait for the model (default: the provider's own limit).

        Raises
        ------
        GenerationTimeout
            The model stayed busy for ``timeout_s``.
        """
        return contextlib.nullcontext()

    def close(self) -> None:
        """Free what the provider holds (by default nothing)."""

    def __enter__(self) -> Provider:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def chat(self, messages: Sequence[Message], **options: Any) -> Reply:
        """The whole completion (see :meth:`stream_chat` for the options)."""
        text: list[str] = []
        calls: list[ToolCallChunk] = []
        finish = Finish("stop")
        for chunk in self.stream_chat(messages, **options):
            if isinstance(chunk, TextChunk):
                text.append(chunk.text)
            elif isinstance(chunk, ToolCallChunk):
                calls.append(chunk)
            else:
                finish = chunk
        return Reply("".join(text), calls, finish)

    def _check_fits(self, prompt_tokens: int, max_tokens: int) -> None:
        if prompt_tokens + max_tokens > self.context_window:
            raise ContextOverflow(
                f"the prompt takes {prompt_tokens} tokens and the reply may take {max_tokens}, "
                f"more than the {self.context_window}-token context window of {self.name}; "
                "shorten the prompt or lower max_tokens", prompt_tokens=prompt_tokens,
                context_window=self.context_window)
