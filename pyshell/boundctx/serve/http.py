"""The HTTP edge both route modules share: JSON and OpenAI-shaped error responses, and
reading a body within its cap."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from boundctx.serve.wire import error_body

__all__ = ["ClientGone", "TooLarge", "body_or_refusal", "busy", "client_gone", "error", "json_response",
           "parsed_or_refusal", "read_body", "too_large"]

_encode = msgspec.json.Encoder().encode
#: Bodies up to this size are parsed on the event loop (well under a millisecond);
#: larger ones in a worker thread.
PARSE_ON_LOOP_BYTES = 64 * 1024


def json_response(status: int, body: Any, headers: Mapping[str, str] | None = None):
    from starlette.responses import Response

    return Response(_encode(body), status_code=status, media_type="application/json", headers=dict(headers or {}))


def error(status: int, message: str, type: str, code: Any = None, param: str | None = None,
          headers: Mapping[str, str] | None = None, **extra: Any):
    """An error response in the OpenAI shape."""
    return json_response(status, error_body(message, type, code, param, **extra), headers)


class TooLarge(Exception):
    """The body is over its cap (answered 413)."""


class ClientGone(Exception):
    """The client left before its body was whole (nobody reads the answer: 499)."""


async def read_body(request, limit: int) -> bytes:
    """The whole body, refused as soon as it passes ``limit`` bytes (declared or sent)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise TooLarge()
    from starlette.requests import ClientDisconnect

    parts, size = [], 0
    try:
        async for part in request.stream():
            size += len(part)
            if size > limit:
                raise TooLarge()
            parts.append(part)
    except ClientDisconnect:
        # The client left, or the connection layer closed a body that stalled (408):
        # an answer nobody reads, not an error of the server's.
        raise ClientGone() from None
    return b"".join(parts)


def too_large(limit: int):
    """413 for a body over ``serve.max_body_bytes``."""
    return error(413, f"the request body is over {limit:,} bytes (serve.max_body_bytes); send long inputs in "
                      "smaller parts", "invalid_request_error", "request_too_large")


def client_gone():
    """499 for a client that left before its request was whole."""
    return error(499, "the client closed the connection before the request body was whole",
                 "invalid_request_error", "client_closed")


def busy():
    """503 when every reply slot and queue place is taken."""
    return error(503, "every reply slot and queue place is taken; retry shortly", "server_overloaded",
                 "server_busy", headers={"Retry-After": "5"})


async def body_or_refusal(request, limit: int):
    """The body, or the 413 response to send instead."""
    try:
        return await read_body(request, limit)
    except TooLarge:
        return too_large(limit)
    except ClientGone:
        return client_gone()


async def parsed_or_refusal(request, limit: int, parse, *, code: str | None = None):
    """``(parse(body), None)`` for the body read within ``limit``, or ``(None, response)``:
    413 past the cap, 400 naming the field for a :class:`~boundctx.serve.requests.BadRequest`
    (its code, else ``code``)."""
    from boundctx.serve.requests import BadRequest

    body = await body_or_refusal(request, limit)
    if not isinstance(body, bytes):
        return None, body
    try:
        if len(body) <= PARSE_ON_LOOP_BYTES:
            return parse(body), None
        # A large body (200,000 messages) takes a second to decode and check: not on
        # the event loop, where every other client would wait for it.
        from starlette.concurrency import run_in_threadpool

        return await run_in_threadpool(parse, body), None
    except BadRequest as exc:
        return None, error(400, str(exc), "invalid_request_error", exc.code or code, exc.param)
