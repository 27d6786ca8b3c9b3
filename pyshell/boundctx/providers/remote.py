"""Remote models over an OpenAI-compatible ``/v1/chat/completions`` (streaming SSE).

Counts: a :class:`~boundctx.tokens.server.LlamaServerCounter` when the server is a
llama.cpp ``llama-server`` (exact), else the conservative byte estimate, calibrated from
each reply's ``usage.prompt_tokens`` and reset by an overflow the estimate did not
predict. The window is ``chat.n_ctx`` unless the server says otherwise.

Retries only where nothing can have been generated: a connection that could not be
made, or a 429/503 answer before any stream began. A stream cut midway is an error,
never silently resent.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import httpx

from boundctx._http import bearer, error_detail, map_httpx_exceptions, retry_delay, server_root
from boundctx.errors import (
    ConfigError,
    ContextOverflow,
    GenerationError,
    GenerationTimeout,
    ServerResponseError,
    ServerUnreachable,
)
from boundctx.providers.base import (
    ChatRequest,
    Chunk,
    ChunkStream,
    Finish,
    FinishReason,
    Provider,
    Sampling,
    TextChunk,
    ToolCallChunk,
    ToolChoice,
    finish_reason,
    make_request,
)
from boundctx.tokens.base import Message, TokenCounter, fewest_tokens
from boundctx.tokens.estimate import ByteEstimateCounter

if TYPE_CHECKING:
    from boundctx import config

__all__ = ["OpenAICompatibleProvider", "api_key_of", "served_model"]

_CHAT = "/v1/chat/completions"


def _check_unicode(body: dict[str, Any]) -> None:
    """Refuse, in words, text a server cannot be sent: a lone surrogate (what Python makes
    of bytes that are not UTF-8 with ``errors="surrogateescape"``) has no UTF-8 form."""
    try:
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise GenerationError(
            f"the request holds text that is not valid Unicode ({exc.object[exc.start:exc.end]!r}, a lone "
            "surrogate: bytes that were not UTF-8); a server takes only UTF-8: decode such input with "
            "errors='replace'") from None


class OpenAICompatibleProvider(Provider):
    """A chat model behind an OpenAI-compatible HTTP API.

    A context manager: leaving the ``with`` block closes its connections
    (:meth:`close`; ``async with`` and :meth:`aclose` for :meth:`astream_chat`).

    Parameters
    ----------
    base_url : str
        ``http://host:port`` (a trailing ``/v1`` is accepted).
    model : str
        The ``model`` field of each request.
    api_key : str, optional
        Sent as a bearer token.
    context_window : int
        The model's window in tokens (``chat.n_ctx``).
    counter : TokenCounter, optional
        Default: a :class:`ByteEstimateCounter` (never under-counts byte-level
        vocabularies), calibrated from each reply's reported usage.
    timeout : float
        Seconds to connect and between streamed chunks.
    max_retries : int
        Attempts after the first for a refused connection or a 429/503 answer.
    """

    name = "remote"

    def __init__(self, base_url: str, *, model: str = "default", api_key: str | None = None,
                 context_window: int = 8192, counter: TokenCounter | None = None, timeout: float = 60.0,
                 max_retries: int = 2, transport: httpx.BaseTransport | None = None) -> None:
        if not timeout > 0:
            raise ConfigError(f"timeout must be > 0 seconds, got {timeout}")
        if max_retries < 0:
            raise ConfigError(f"max_retries must be >= 0, got {max_retries}")
        if context_window < 16:
            raise ConfigError(f"context_window must be >= 16 tokens, got {context_window}")
        self.base_url = server_root(base_url)
        self.model = model
        self.context_window = context_window
        self.counter = counter if counter is not None else ByteEstimateCounter()
        self.timeout = timeout
        self.max_retries = max_retries
        self._chat_url = self.base_url + _CHAT
        self._schema_style = "json_schema"
        # Set once a reply carries llama.cpp's ``timings``: that server keeps a prompt's
        # evaluated start for the next request only when asked (``cache_prompt``; later
        # versions ask by default), and other servers may refuse a field they do not know.
        self.llama_server = False
        self._headers = bearer(api_key)
        self._client = httpx.Client(base_url=self.base_url, headers=self._headers, timeout=timeout,
                                    transport=transport)
        self._async_client: httpx.AsyncClient | None = None

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any] | None = None, *, api_key: str | None = None,
                      api_key_flag: str = "--api-key") -> OpenAICompatibleProvider:
        """The server ``remote.*`` names, with ``chat.n_ctx`` as its window.

        The key is ``api_key`` when given (by the flag ``api_key_flag``, for errors),
        else ``$BOUNDCTX_API_KEY``, else the one in ``remote.api_key_file``
        (:func:`api_key_of`). The model is ``remote.model``, else the one model the server
        lists (:func:`served_model`), else ``"default"``.

        Raises
        ------
        ConfigError
            ``remote.base_url`` is empty or no server address.
        ValueError, OSError
            The key is blank or no key, or its file cannot be read.
        """
        from boundctx import config

        s = config.resolve(settings)
        if not s.remote.base_url:
            raise ConfigError("the remote provider needs remote.base_url, the OpenAI-compatible server "
                              "(--base-url URL, BOUNDCTX_REMOTE_BASE_URL, or base_url under [remote] in the "
                              "config file)")
        key = api_key_of(s, given=api_key, given_by=api_key_flag)
        model = s.remote.model or served_model(s.remote.base_url, key) or "default"
        return cls(s.remote.base_url, model=model, api_key=key, context_window=s.chat.n_ctx,
                   timeout=s.remote.timeout_s, max_retries=s.remote.max_retries)

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        """Close the connections of the sync client (:meth:`aclose` closes both)."""
        self._client.close()

    async def aclose(self) -> None:
        """Close the async client (and the sync one)."""
        if self._async_client is not None:
            await self._async_client.aclose()
            self._async_client = None
        self._client.close()

    def __enter__(self) -> OpenAICompatibleProvider:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> OpenAICompatibleProvider:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- one request ------------------------------------------------------------------

    def _body(self, request: ChatRequest, *, stream: bool = True) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": request.messages,
                                "max_tokens": request.max_tokens, "temperature": request.temperature,
                                "stream": stream}
        if stream:
            body["stream_options"] = {"include_usage": True}
        if request.stop:
            body["stop"] = request.stop
        if self.llama_server:
            body["cache_prompt"] = True
        if request.tools:
            body["tools"] = request.tools
            if request.tool_choice is not None:
                body["tool_choice"] = request.tool_choice
            if request.parallel_tool_calls is not None:
                body["parallel_tool_calls"] = request.parallel_tool_calls
        if request.sampling is not None:  # only what the caller set: the server keeps its defaults for the rest
            body.update(request.sampling.given())
        if request.schema is not None:
            if self._schema_style == "json_schema":  # OpenAI's form; llama-server takes it too
                body["response_format"] = {"type": "json_schema",
                                           "json_schema": {"name": "reply", "schema": request.schema, "strict": True}}
            else:  # llama-cpp-python's server knows only this form
                body["response_format"] = {"type": "json_object", "schema": request.schema}
        _check_unicode(body)
        return body

    def _other_schema_form(self, request: ChatRequest, exc: ServerResponseError) -> bool:
        """True when a server refused OpenAI's json_schema form before generating
        anything: the request is then sent once more in the other common form, which is
        kept for later requests."""
        if request.schema is None or self._schema_style != "json_schema" or "response_format" not in str(exc):
            return False
        self._schema_style = "json_object"
        return True

    # The sync and async loops below are one retry policy (retry_delay) through one
    # exception mapper; they differ only by await.

    def _open(self, body: dict[str, Any]) -> httpx.Response:
        """The response (its body not yet read), after the retries that are safe."""
        for attempt in range(self.max_retries + 1):
            try:
                with map_httpx_exceptions(self._chat_url, self.timeout, during="connect"):
                    response = self._client.send(self._client.build_request("POST", _CHAT, json=body), stream=True)
            except ServerUnreachable as exc:
                wait = retry_delay(exc, attempt, self.max_retries)
                if wait is None:
                    raise
                time.sleep(wait)
                continue
            wait = retry_delay(response, attempt, self.max_retries)
            if wait is not None:
                response.close()
                time.sleep(wait)
                continue
            if response.status_code >= 400:
                with map_httpx_exceptions(self._chat_url, self.timeout, during="error_body",
                                          status=response.status_code):
                    try:
                        response.read()
                    finally:
                        response.close()
                raise self._error(response)
            return response
        raise AssertionError("unreachable")  # pragma: no cover

    async def _aopen(self, body: dict[str, Any]) -> httpx.Response:
        """:meth:`_open` for the async client."""
        if self._async_client is None:
            self._async_client = httpx.AsyncClient(base_url=self.base_url, headers=self._headers,
                                                   timeout=self.timeout)
        client = self._async_client
        for attempt in range(self.max_retries + 1):
            try:
                with map_httpx_exceptions(self._chat_url, self.timeout, during="connect"):
                    response = await client.send(client.build_request("POST", _CHAT, json=body), stream=True)
            except ServerUnreachable as exc:
                wait = retry_delay(exc, attempt, self.max_retries)
                if wait is None:
                    raise
                await asyncio.sleep(wait)
                continue
            wait = retry_delay(response, attempt, self.max_retries)
            if wait is not None:
                await response.aclose()
                await asyncio.sleep(wait)
                continue
            if response.status_code >= 400:
                with map_httpx_exceptions(self._chat_url, self.timeout, during="error_body",
                                          status=response.status_code):
                    try:
                        await response.aread()
                    finally:
                        await response.aclose()
                raise self._error(response)
            return response
        raise AssertionError("unreachable")  # pragma: no cover

    def _error(self, response: httpx.Response) -> Exception:
        message, error = error_detail(response)
        if error is not None and (error.get("type") == "exceed_context_size_error"
                                  or error.get("code") == "context_length_exceeded"
                                  or "context" in message.lower() and response.status_code == 400):
            if isinstance(self.counter, ByteEstimateCounter):
                self.counter.observe_overflow()
            # llama-server gives the numbers as fields; OpenAI-style servers in words
            # ("maximum context length is 512 tokens. However, you requested 741").
            n_ctx, n_prompt = error.get("n_ctx"), error.get("n_prompt_tokens")
            words = re.search(r"maximum context length is (\d+) tokens.*?requested (\d+)", message, re.S)
            if words and not isinstance(n_ctx, int):
                n_ctx, n_prompt = int(words.group(1)), int(words.group(2))
            return ContextOverflow(f"the server refused the prompt: {message}",
                                   prompt_tokens=n_prompt if isinstance(n_prompt, int) else None,
                                   context_window=n_ctx if isinstance(n_ctx, int) else None)
        hint = {401: "; the server wants an API key (api_key=; on the command line --api-key, or "
                     "--upstream-api-key on serve, or BOUNDCTX_API_KEY)",
                403: "; the API key was refused: check its permissions",
                404: "; is this an OpenAI-compatible server (POST /v1/chat/completions)?"}.get(
                    response.status_code, "")
        return ServerResponseError(f"POST {self._chat_url} answered {response.status_code}: {message}{hint}")

    # -- the stream ---------------------------------------------------------------------

    def _stream(self, request: ChatRequest, *, cancel: Any, timeout_s: float | None) -> ChunkStream:
        prompt_tokens = self.count_prompt(request.messages, tools=request.tools)
        self._check_fits(prompt_tokens, request.max_tokens)
        started = time.monotonic()
        try:
            response = self._open(self._body(request))
        except ServerResponseError as exc:
            if not self._other_schema_form(request, exc):
                raise
            response = self._open(self._body(request))
        state = _StreamState(self.base_url)
        try:
            with map_httpx_exceptions(self.base_url, self.timeout, during="stream"):
                for line in response.iter_lines():
                    if state.interrupted(cancel, started, timeout_s):
                        break
                    if state.feed(line):
                        yield from state.pending()
                    if state.done:
                        break
        finally:
            response.close()
        if state.empty:
            # Some servers (llama-cpp-python's) answer 200 and then close an empty stream
            # when the request fails, e.g. a prompt over the window. Nothing was
            # generated, so asking once without streaming is safe and gets the error.
            response = self._open(self._body(request, stream=False))
            try:
                with map_httpx_exceptions(self.base_url, self.timeout, during="stream"):
                    response.read()
            finally:
                response.close()
            yield from _unstreamed_chunks(response, prompt_tokens, self, request)
            return
        yield from state.close(self, request, prompt_tokens)

    async def astream_chat(self, messages: Sequence[Message], *,
                           tools: Sequence[Mapping[str, Any]] | None = None, max_tokens: int = 256,
                           temperature: float = 0.2, stop: Sequence[str] | None = None,
                           schema: Mapping[str, Any] | None = None, cancel: Any = None,
                           timeout_s: float | None = None, sampling: Sampling | None = None,
                           tool_choice: ToolChoice | None = None,
                           parallel_tool_calls: bool | None = None) -> AsyncIterator[Chunk]:
        """:meth:`stream_chat` for asyncio: the same chunks, the same errors. ``cancel``
        may be a ``threading.Event`` or an ``asyncio.Event``."""
        request = make_request(messages, tools=tools, max_tokens=max_tokens, temperature=temperature, stop=stop,
                               schema=schema, timeout_s=timeout_s, sampling=sampling, tool_choice=tool_choice,
                               parallel_tool_calls=parallel_tool_calls)
        prompt_tokens = self.count_prompt(request.messages, tools=request.tools)
        self._check_fits(prompt_tokens, request.max_tokens)
        started = time.monotonic()
        try:
            response = await self._aopen(self._body(request))
        except ServerResponseError as exc:
            if not self._other_schema_form(request, exc):
                raise
            response = await self._aopen(self._body(request))
        state = _StreamState(self.base_url)
        try:
            with map_httpx_exceptions(self.base_url, self.timeout, during="stream"):
                async for line in response.aiter_lines():
                    if state.interrupted(cancel, started, timeout_s):
                        break
                    if state.feed(line):
                        for chunk in state.pending():
                            yield chunk
                    if state.done:
                        break
        finally:
            await response.aclose()
        if state.empty:  # as in _stream: ask once without streaming to learn why
            response = await self._aopen(self._body(request, stream=False))
            try:
                with map_httpx_exceptions(self.base_url, self.timeout, during="stream"):
                    await response.aread()
            finally:
                await response.aclose()
            for chunk in _unstreamed_chunks(response, prompt_tokens, self, request):
                yield chunk
            return
        for chunk in state.close(self, request, prompt_tokens):
            yield chunk


def cached_tokens(usage: Any, timings: Any) -> int | None:
    """Prompt tokens a server says it did not evaluate again: OpenAI's (and vLLM's)
    ``usage.prompt_tokens_details.cached_tokens``, else llama.cpp's ``timings.cache_n``;
    None when it says neither."""
    details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
    for said in (details.get("cached_tokens") if isinstance(details, dict) else None,
                 timings.get("cache_n") if isinstance(timings, dict) else None):
        if isinstance(said, int) and not isinstance(said, bool) and said >= 0:
            return said
    return None


def _prompt_floor(provider: OpenAICompatibleProvider, request: ChatRequest, prompt_tokens: int) -> int:
    """The fewest tokens the prompt sent can be: the count made to send it where it is
    exact, else the words it carries (decision 0043)."""
    return prompt_tokens if provider.counter.exact else fewest_tokens(request.messages)


def _unstreamed_chunks(response: httpx.Response, prompt_tokens: int,
                       provider: OpenAICompatibleProvider, request: ChatRequest) -> list[Chunk]:
    """The chunks of a whole (non-streamed) chat completion."""
    try:
        body = response.json()
        choice = body["choices"][0]
        usage = body.get("usage") or {}
    except (ValueError, KeyError, IndexError, TypeError):
        raise ServerResponseError(f"the server's reply has no choices: {response.text[:300]!r}") from None
    message = choice.get("message") or {}
    out: list[Chunk] = []
    if message.get("content"):
        out.append(TextChunk(message["content"]))
    for index, call in enumerate(message.get("tool_calls") or ()):
        fn = call.get("function") or {}
        out.append(ToolCallChunk(call.get("id") or f"call_{index}", fn.get("name", ""), fn.get("arguments", "")))
    reported = usage.get("prompt_tokens")
    if isinstance(body.get("timings"), dict):
        provider.llama_server = True
    out.append(Finish(finish_reason(choice.get("finish_reason")),
                      reported if isinstance(reported, int) else prompt_tokens, usage.get("completion_tokens"),
                      usage_estimated=not isinstance(reported, int),
                      cached_tokens=cached_tokens(usage, body.get("timings")),
                      prompt_floor=_prompt_floor(provider, request, prompt_tokens)))
    return out


class _StreamState:
    """What one SSE stream has said so far: text to pass on, tool calls being assembled,
    the finish reason and the usage. Shared by the sync and async streams."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.calls: dict[int, dict[str, str]] = {}
        self.reason: FinishReason = "stop"
        self.ended = False  # [DONE] or a finish_reason: the reply is complete
        self.done = False   # [DONE]: stop reading
        self.events = 0
        self.usage: dict[str, Any] = {}
        self.timings: dict[str, Any] = {}
        self._text: list[str] = []

    def interrupted(self, cancel: Any, started: float, timeout_s: float | None) -> bool:
        """True when the caller cancelled (the stream then ends as "cancelled");
        raises :class:`GenerationTimeout` past the time limit."""
        if cancel is not None and cancel.is_set():
            self.reason = "cancelled"
            return True
        if timeout_s is not None and time.monotonic() - started > timeout_s:
            raise GenerationTimeout(f"the remote generation ran past its {timeout_s:g} s limit; the stream was closed")
        return False

    def feed(self, line: str) -> bool:
        """Take one line; True when it produced text to pass on (see :meth:`pending`)."""
        if not line.startswith("data:"):
            return False
        data = line[5:].strip()
        if data == "[DONE]":
            self.ended = self.done = True
            return False
        try:
            event = json.loads(data)
        except ValueError:
            raise ServerResponseError(f"the server streamed a line that is not JSON: {data[:200]!r}") from None
        self.events += 1
        if "error" in event:
            raise ServerResponseError(f"the server failed mid-stream: {event['error']}")
        self.usage = event.get("usage") or self.usage
        if isinstance(event.get("timings"), dict):
            self.timings = event["timings"]
        for choice in event.get("choices") or ():
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self._text.append(delta["content"])
            for call in delta.get("tool_calls") or ():
                slot = self.calls.setdefault(call.get("index", len(self.calls)),
                                             {"id": "", "name": "", "arguments": ""})
                fn = call.get("function") or {}
                slot["id"] = call.get("id") or slot["id"]
                slot["name"] += fn.get("name") or ""
                slot["arguments"] += fn.get("arguments") or ""
            if choice.get("finish_reason"):
                self.reason = finish_reason(choice["finish_reason"])
                self.ended = True
        return bool(self._text)

    def pending(self) -> list[Chunk]:
        out: list[Chunk] = [TextChunk(t) for t in self._text]
        self._text.clear()
        return out

    @property
    def empty(self) -> bool:
        """Nothing at all came back (and the caller did not cancel)."""
        return not self.ended and not self.events and self.reason != "cancelled"

    def close(self, provider: OpenAICompatibleProvider, request: ChatRequest, prompt_tokens: int) -> list[Chunk]:
        """The tool calls and the Finish, after checking the stream really ended."""
        if not self.ended and self.reason != "cancelled":
            raise ServerUnreachable(f"the stream from {self.base_url} ended before the reply did; "
                                    "the reply was not resent")
        out: list[Chunk] = [ToolCallChunk(slot["id"] or f"call_{i}", slot["name"], slot["arguments"])
                            for i, slot in sorted(self.calls.items())]
        reported = self.usage.get("prompt_tokens")
        if isinstance(reported, int) and isinstance(provider.counter, ByteEstimateCounter):
            provider.counter.observe(request.messages, reported, tools=request.tools)
        if self.timings:
            provider.llama_server = True
        out.append(Finish(self.reason, reported if isinstance(reported, int) else prompt_tokens,
                          self.usage.get("completion_tokens"), usage_estimated=not isinstance(reported, int),
                          cached_tokens=cached_tokens(self.usage, self.timings),
                          prompt_floor=_prompt_floor(provider, request, prompt_tokens)))
        return out


def api_key_of(settings: config.Settings, *, given: str | None = None, given_by: str = "--api-key",
               env: Mapping[str, str] | None = None) -> str | None:
    """The remote server's bearer token: ``given`` (by the flag ``given_by``), else ``$BOUNDCTX_API_KEY``,
    else the one key of ``remote.api_key_file``; None when there is none.

    Raises
    ------
    ValueError
        A blank key or one that is not one word of printable ASCII (naming where it
        came from, never the key), or a key file holding more than one key.
    OSError
        The key file cannot be read.
    """
    from boundctx._keys import checked_key, key_in_variable, keys_in_file

    if given is not None:
        return checked_key(given, given_by)
    variable = key_in_variable(os.environ if env is None else env, "BOUNDCTX_API_KEY")
    if variable is not None:
        return variable
    path = settings.remote.api_key_file
    if not path:
        return None
    keys = keys_in_file(os.path.expanduser(path))
    if len(keys) > 1:
        raise ValueError(f"the API key file {path!r} (remote.api_key_file) holds {len(keys)} keys; the remote "
                         "server is sent one: leave one line")
    return keys[0]


def served_model(base_url: str, api_key: str | None) -> str | None:
    """The one model a server lists at ``/v1/models``, when it lists exactly one: a
    server that checks the name (boundctx serve, vLLM) refuses a made-up one, and a user
    who named no model meant the model that is there. None when the listing is missing,
    fails, or names several (then ``remote.model`` must choose)."""
    try:
        r = httpx.get(server_root(base_url) + "/v1/models", timeout=5, headers=bearer(api_key))
        data = r.json().get("data") if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):  # a bad base_url is a ConfigError(ValueError)
        return None
    ids = [m.get("id") for m in data or () if isinstance(m, dict) and isinstance(m.get("id"), str)]
    return ids[0] if len(ids) == 1 else None
