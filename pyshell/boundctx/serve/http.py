"""The HTTP edge both route modules share: JSON and OpenAI-shaped error responses, and
reading a body within its cap."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from boundctx.serve.wire import error_body

__all__ = ["TooLarge", "error", "json_response", "read_body"]

_encode = msgspec.json.Encoder().encode


def json_response(status: int, body: Any, headers: Mapping[str, str] | None = None):
    from starlette.responses import Response

    return Response(_encode(body), status_code=status, media_type="application/json", headers=dict(headers or {}))


def error(status: int, message: str, type: str, code: Any = None, param: str | None = None,
          headers: Mapping[str, str] | None = None, **extra: Any):
    """An error response in the OpenAI shape."""
    return json_response(status, error_body(message, type, code, param, **extra), headers)


class TooLarge(Exception):
    """The body is over its cap (answered 413)."""


async def read_body(request, limit: int) -> bytes:
    """The whole body, refused as soon as it passes ``limit`` bytes (declared or sent)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise TooLarge()
    parts, size = [], 0
    async for part in request.stream():
        size += len(part)
        if size > limit:
            raise TooLarge()
        parts.append(part)
    return b"".join(parts)
