"""The OpenAI wire format: completion chunks, errors and server-sent-event framing.

What a client reads, decided in one place (``shared/research/serving.md`` §2, §8.2):

* every message is ``data: <compact JSON>\\n\\n`` (LF framing), ending with
  ``data: [DONE]``;
* every chunk is a valid ``chat.completion.chunk`` with exactly one choice, except the
  usage chunk asked for with ``stream_options.include_usage`` (``choices: []``);
* every chunk whose ``finish_reason`` is null has a string ``delta.content``, ``""``
  when it carries no text (the role chunk, progress, a tool call), so a hand-written
  loop that reads ``delta["content"]`` until the finish works (llama.cpp's server tests
  read it so), and the contents joined are exactly the reply's text; the finish chunk's
  delta is empty, as OpenAI's and llama.cpp's are;
* boundctx's own progress travels as a chunk with ``delta: {"content": ""}`` and a
  top-level ``boundctx`` object (and Open WebUI's status ``event``), never as text and
  never as an ``event:``-named message, which the official client does not filter;
* errors are ``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import msgspec

__all__ = ["DONE", "PING", "Chunks", "encode_json", "error_body", "frame"]

#: A value as compact JSON bytes: every answer and event the server sends is encoded by it.
encode_json = msgspec.json.Encoder().encode

DONE = b"data: [DONE]\n\n"
PING = b": ping\n\n"


def frame(obj: Any) -> bytes:
    """One server-sent event carrying ``obj`` as compact JSON."""
    return b"data: " + encode_json(obj) + b"\n\n"


def error_body(message: str, type: str, code: str | int | None = None, param: str | None = None,
               **extra: Any) -> dict[str, Any]:
    """An error in the OpenAI shape; ``extra`` keys sit beside the standard four (as
    llama.cpp's ``n_prompt_tokens``/``n_ctx``)."""
    return {"error": {"message": message, "type": type, "param": param, "code": code, **extra}}


class Chunks:
    """The chunks of one streamed completion (one id, one creation time, one model)."""

    def __init__(self, model: str) -> None:
        self.id = f"chatcmpl-{secrets.token_hex(12)}"
        self.created = int(time.time())
        self.model = model

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None, **extra: Any) -> dict[str, Any]:
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}], **extra}

    def role(self) -> dict[str, Any]:
        return self._chunk({"role": "assistant", "content": ""})

    def content(self, text: str) -> dict[str, Any]:
        return self._chunk({"content": text})

    def tool_call(self, index: int, call: dict[str, Any]) -> dict[str, Any]:
        """One tool call, whole; ``index`` is its place in the reply's calls (clients
        merge deltas by it)."""
        return self._chunk({"content": "", "tool_calls": [{"index": index, **call}]})

    def progress(self, extension: dict[str, Any], status: str | None = None, done: bool = False) -> dict[str, Any]:
        """A chunk that says what boundctx is doing: no text (``delta.content`` is
        ``""``), the ``boundctx`` extension, and (``status``) Open WebUI's status event."""
        extra: dict[str, Any] = {"boundctx": extension}
        if status is not None:
            extra["event"] = {"type": "status", "data": {"description": status, "done": done}}
        return self._chunk({"content": ""}, **extra)

    def finish(self, reason: str, extension: dict[str, Any]) -> dict[str, Any]:
        """The last chunk with a choice: the finish reason, and no ``delta.content``
        (OpenAI's shape, which llama.cpp's server tests hold it to)."""
        return self._chunk({}, reason, boundctx=extension)

    def usage(self, usage: dict[str, Any]) -> dict[str, Any]:
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": [], "usage": usage}

    def completion(self, text: str, reason: str, usage: dict[str, Any], tool_calls: list[dict[str, Any]],
                   extension: dict[str, Any]) -> dict[str, Any]:
        """The whole (non-streamed) ``chat.completion``."""
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if tool_calls:
            message["tool_calls"] = tool_calls
        return {"id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "message": message, "finish_reason": reason}], "usage": usage,
                "boundctx": extension}
