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

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import httpx

from boundctx.errors import (
    ConfigError,
    ContextOverflow,
    GenerationTimeout,
    ServerResponseError,
    ServerTimeout,
    ServerUnreachable,
)
from boundctx.providers.base import ChatRequest, Chunk, Finish, Provider, TextChunk, ToolCallChunk
from boundctx.tokens.base import TokenCounter
from boundctx.tokens.estimate import ByteEstimateCounter

__all__ = ["OpenAICompatibleProvider"]

_RETRY_STATUS = (429, 503)


class OpenAICompatibleProvider(Provider):
    """A chat model behind an OpenAI-compatible HTTP API.

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
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"base_url must start with http:// or https://, got {base_url!r}")
        if not timeout > 0:
            raise ConfigError(f"timeout must be > 0 seconds, got {timeout}")
        if max_retries < 0:
            raise ConfigError(f"max_retries must be >= 0, got {max_retries}")
        if context_window < 16:
            raise ConfigError(f"context_window must be >= 16 tokens, got {context_window}")
        base = base_url.rstrip("/")
        self.base_url = base[:-3] if base.endswith("/v1") else base
        self.model = model
        self.context_window = context_window
        self.counter = counter if counter is not None else ByteEstimateCounter()
        self.timeout = timeout
        self.max_retries = max_retries
        self._schema_style = "json_schema"
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout,
                                    transport=transport)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> OpenAICompatibleProvider:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- one request ------------------------------------------------------------------

    def _body(self, request: ChatRequest) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": request.messages,
                                "max_tokens": request.max_tokens, "temperature": request.temperature,
                                "stream": True, "stream_options": {"include_usage": True}}
        if request.stop:
            body["stop"] = request.stop
        if request.tools:
            body["tools"] = request.tools
        if request.schema is not None:
            if self._schema_style == "json_schema":  # OpenAI's form; llama-server takes it too
                body["response_format"] = {"type": "json_schema",
                                           "json_schema": {"name": "reply", "schema": request.schema, "strict": True}}
            else:  # llama-cpp-python's server knows only this form
                body["response_format"] = {"type": "json_object", "schema": request.schema}
        return body

    def _open(self, body: dict[str, Any]) -> httpx.Response:
        """The streaming response, after the retries that are safe."""
        url = f"{self.base_url}/v1/chat/completions"
        for attempt in range(self.max_retries + 1):
            last = attempt == self.max_retries
            try:
                response = self._client.send(self._client.build_request("POST", "/v1/chat/completions", json=body),
                                             stream=True)
            except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
                # No response yet (refused, or a kept-alive connection the server had
                # already dropped): nothing reached us, so trying again is safe.
                if last:
                    raise ServerUnreachable(
                        f"cannot connect to {url} ({exc}); start the server or pass the right base_url") from exc
                time.sleep(0.2 * 2 ** attempt)
                continue
            except httpx.TimeoutException as exc:
                raise ServerTimeout(f"{url} did not answer within {self.timeout:g} s") from exc
            if response.status_code in _RETRY_STATUS and not last:
                wait = _retry_after(response) or 0.5 * 2 ** attempt
                response.close()
                time.sleep(min(wait, 10.0))
                continue
            if response.status_code >= 400:
                try:
                    response.read()
                except httpx.TransportError as exc:
                    raise ServerUnreachable(f"{url} answered {response.status_code} and dropped the "
                                            f"connection before saying why ({exc})") from exc
                finally:
                    response.close()
                raise self._error(url, response)
            return response
        raise AssertionError("unreachable")  # pragma: no cover

    def _error(self, url: str, response: httpx.Response) -> Exception:
        try:
            detail = response.json()
        except ValueError:
            detail = None
        error = detail.get("error") if isinstance(detail, dict) else None
        message = (error.get("message") if isinstance(error, dict) else error) or response.text[:500]
        if isinstance(error, dict) and (error.get("type") == "exceed_context_size_error"
                                        or error.get("code") == "context_length_exceeded"
                                        or "context" in str(message).lower() and response.status_code == 400):
            if isinstance(self.counter, ByteEstimateCounter):
                self.counter.observe_overflow()
            # llama-server gives the numbers as fields; OpenAI-style servers in words
            # ("maximum context length is 512 tokens. However, you requested 741").
            n_ctx, n_prompt = error.get("n_ctx"), error.get("n_prompt_tokens")
            words = re.search(r"maximum context length is (\d+) tokens.*?requested (\d+)", str(message), re.S)
            if words and not isinstance(n_ctx, int):
                n_ctx, n_prompt = int(words.group(1)), int(words.group(2))
            return ContextOverflow(f"the server refused the prompt: {message}",
                                   prompt_tokens=n_prompt if isinstance(n_prompt, int) else None,
                                   context_window=n_ctx if isinstance(n_ctx, int) else None)
        hint = {401: "; pass api_key", 403: "; check the api_key's permissions",
                404: "; is this an OpenAI-compatible server (POST /v1/chat/completions)?"}.get(
                    response.status_code, "")
        return ServerResponseError(f"POST {url} answered {response.status_code}: {message}{hint}")

    def _stream(self, request: ChatRequest, *, cancel: Any, timeout_s: float | None) -> Iterator[Chunk]:
        prompt_tokens = self.count_prompt(request.messages, tools=request.tools)
        self._check_fits(prompt_tokens, request.max_tokens)
        started = time.monotonic()
        try:
            response = self._open(self._body(request))
        except ServerResponseError as exc:
            # A server that refuses OpenAI's json_schema form before generating anything:
            # ask once more in the other common form, and keep using it.
            if request.schema is None or self._schema_style != "json_schema" or "response_format" not in str(exc):
                raise
            self._schema_style = "json_object"
            response = self._open(self._body(request))
        calls: dict[int, dict[str, str]] = {}
        reason = "stop"
        ended = False  # [DONE] or a finish_reason: the reply is complete
        events = 0
        usage: dict[str, Any] = {}
        try:
            for line in _lines(response, self.base_url, self.timeout):
                if cancel is not None and cancel.is_set():
                    reason = "cancelled"
                    break
                if timeout_s is not None and time.monotonic() - started > timeout_s:
                    raise GenerationTimeout(f"the remote generation ran past its {timeout_s:g} s limit; "
                                            "the stream was closed")
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    ended = True
                    break
                try:
                    event = json.loads(data)
                except ValueError:
                    raise ServerResponseError(f"the server streamed a line that is not JSON: {data[:200]!r}") from None
                events += 1
                if "error" in event:
                    raise ServerResponseError(f"the server failed mid-stream: {event['error']}")
                usage = event.get("usage") or usage
                for choice in event.get("choices") or ():
                    delta = choice.get("delta") or {}
                    if delta.get("content"):
                        yield TextChunk(delta["content"])
                    for call in delta.get("tool_calls") or ():
                        slot = calls.setdefault(call.get("index", len(calls)), {"id": "", "name": "", "arguments": ""})
                        fn = call.get("function") or {}
                        slot["id"] = call.get("id") or slot["id"]
                        slot["name"] += fn.get("name") or ""
                        slot["arguments"] += fn.get("arguments") or ""
                    if choice.get("finish_reason"):
                        reason = choice["finish_reason"]
                        ended = True
        finally:
            response.close()
        if not ended and not events and reason != "cancelled":
            # Some servers (llama-cpp-python's) answer 200 and then close an empty stream
            # when the request fails, e.g. a prompt over the window. Nothing was
            # generated, so asking once without streaming is safe and gets the error.
            yield from self._without_streaming(request, prompt_tokens)
            return
        if not ended and reason != "cancelled":
            raise ServerUnreachable(f"the stream from {self.base_url} ended before the reply did; "
                                    "the reply was not resent")
        for index in sorted(calls):
            slot = calls[index]
            yield ToolCallChunk(slot["id"] or f"call_{index}", slot["name"], slot["arguments"])
        reported = usage.get("prompt_tokens")
        if isinstance(reported, int) and isinstance(self.counter, ByteEstimateCounter):
            self.counter.observe(request.messages, reported, tools=request.tools)
        yield Finish(reason, reported if isinstance(reported, int) else prompt_tokens,
                     usage.get("completion_tokens"))


    def _without_streaming(self, request: ChatRequest, prompt_tokens: int) -> Iterator[Chunk]:
        body = {**self._body(request), "stream": False}
        body.pop("stream_options")
        response = self._open(body)
        try:
            response.read()
        finally:
            response.close()
        try:
            choice = response.json()["choices"][0]
            usage = response.json().get("usage") or {}
        except (ValueError, KeyError, IndexError, TypeError):
            raise ServerResponseError(f"the server's reply has no choices: {response.text[:300]!r}") from None
        message = choice.get("message") or {}
        if message.get("content"):
            yield TextChunk(message["content"])
        for index, call in enumerate(message.get("tool_calls") or ()):
            fn = call.get("function") or {}
            yield ToolCallChunk(call.get("id") or f"call_{index}", fn.get("name", ""), fn.get("arguments", ""))
        yield Finish(choice.get("finish_reason") or "stop", usage.get("prompt_tokens", prompt_tokens),
                     usage.get("completion_tokens"))


def _lines(response: httpx.Response, base_url: str, timeout: float) -> Iterator[str]:
    try:
        yield from response.iter_lines()
    except httpx.TimeoutException as exc:
        raise ServerTimeout(f"{base_url} sent nothing for {timeout:g} s in the middle of a reply") from exc
    except httpx.TransportError as exc:
        raise ServerUnreachable(f"the connection to {base_url} broke in the middle of a reply ({exc}); "
                                "the reply was not resent") from exc


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return float(response.headers.get("retry-after", ""))
    except ValueError:
        return None
