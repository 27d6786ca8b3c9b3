"""The HTTP edge: what boundctx's HTTP clients share.

The remote provider (sync and async) and the llama-server token counter send their
requests with httpx. This module is the one place where httpx's failures become
boundctx's errors (:func:`map_httpx_exceptions`), where an error answer's body is read
(:func:`error_detail`) and where a failed attempt is judged safe to repeat
(:func:`retry_delay`). httpx keeps separate sync and async transports but maps
httpcore's exceptions in one function; the provider's sync and async loops follow it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

import httpx
import msgspec

from boundctx.errors import ConfigError, ServerTimeout, ServerUnreachable

__all__ = ["During", "bearer", "error_detail", "map_httpx_exceptions", "retry_delay", "server_root"]

#: What a client was doing when httpx failed (see :func:`map_httpx_exceptions`).
During = Literal["connect", "stream", "error_body", "request"]

#: Sends that failed before any answer began: refused, or a kept-alive connection the
#: server had already dropped. Nothing reached the server's model, so repeating is safe.
_UNSENT = (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)
#: Answers that mean "busy: ask again", given before any work.
_BUSY = (429, 503)
#: Characters of an error body quoted when it has no message of its own.
_QUOTED = 500


def server_root(base_url: str, *, what: str = "base_url") -> str:
    """The server's root URL: ``base_url`` without trailing slashes or a trailing
    ``/v1`` (an OpenAI base URL names the same server).

    Raises
    ------
    ConfigError
        When ``base_url`` is not ``http(s)://host[:port]``, optionally with a path;
        ``what`` names it in the message.
    """
    url = base_url.strip().rstrip("/")
    if url.endswith("/v1"):
        url = url[: -len("/v1")]
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise ConfigError(f"not a server URL: {base_url!r} ({exc})") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ConfigError(f"{what} must be http(s)://host[:port], got {base_url!r}")
    return url


def bearer(api_key: str | None) -> dict[str, str]:
    """The ``Authorization`` header that sends ``api_key`` (no header without a key)."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


@contextmanager
def map_httpx_exceptions(url: str, timeout: float, *, during: During, request: str = "",
                         status: int | None = None) -> Iterator[None]:
    """Raise the httpx transport failures of the block as boundctx's errors.

    A timeout becomes :class:`~boundctx.errors.ServerTimeout` and any other transport
    failure :class:`~boundctx.errors.ServerUnreachable`, with the httpx exception as the
    cause. The message names ``url`` and says what was under way.

    Parameters
    ----------
    url : str
        The server or endpoint the block talks to.
    timeout : float
        The client's timeout in seconds, quoted when it runs out.
    during : {"connect", "stream", "error_body", "request"}
        ``"connect"``: sending a request until its answer begins. ``"stream"``: reading
        a reply, which is never resent. ``"error_body"``: reading the body of an error
        answer with ``status`` (a timeout there is ServerUnreachable too: the answer
        was an error already). ``"request"``: one whole request to a llama-server,
        ``request`` naming it (``"GET /props"``).
    """
    try:
        yield
    except httpx.TransportError as exc:
        raise _translated(exc, url, timeout, during, request, status) from exc


def _translated(exc: httpx.TransportError, url: str, timeout: float, during: During, request: str,
                status: int | None) -> ServerUnreachable:
    timed_out = isinstance(exc, httpx.TimeoutException)
    said = str(exc) or type(exc).__name__
    if during == "connect":
        if timed_out:
            return ServerTimeout(f"{url} did not answer within {timeout:g} s")
        return ServerUnreachable(f"cannot connect to {url} ({said}); start the server or pass the right base_url")
    if during == "stream":
        if timed_out:
            return ServerTimeout(f"{url} sent nothing for {timeout:g} s in the middle of a reply")
        return ServerUnreachable(f"the connection to {url} broke in the middle of a reply ({said}); "
                                 "the reply was not resent")
    if during == "error_body":
        return ServerUnreachable(f"{url} answered {status} and dropped the connection before saying why ({said})")
    if timed_out:
        return ServerTimeout(f"the llama-server at {url} did not answer {request} within {timeout:g} s "
                             f"({type(exc).__name__}); it may be busy or still loading its model: try again, "
                             "or pass a larger timeout=")
    return ServerUnreachable(f"cannot reach the llama-server at {url} ({said}): start it "
                             "(llama-server -m MODEL.gguf --port PORT) or pass the URL it listens on")


# -- error answers ---------------------------------------------------------------------


class _ErrorBody(msgspec.Struct):
    # OpenAI-style servers and llama-server: {"error": {"message": ..., "type": ..., ...}};
    # some servers: {"error": "..."}. Unknown fields are ignored.
    error: dict[str, Any] | str | None = None
    detail: Any = None  # FastAPI servers (llama_cpp.server) answer {"detail": ...}


def error_detail(response: httpx.Response) -> tuple[str, dict[str, Any] | None]:
    """What an error answer says: its message, and the fields of its ``error`` object
    (None when the body has no such object). The body must have been read.

    The message is ``error.message``, a string ``error``, or ``detail`` (as JSON when it
    is not a string); failing those, the body's first 500 characters; for an empty body,
    the status's reason phrase.
    """
    try:
        body = msgspec.json.decode(response.content, type=_ErrorBody)
    except msgspec.DecodeError:
        body = _ErrorBody()
    error = body.error if isinstance(body.error, dict) else None
    said = error.get("message") if error is not None else body.error
    if said is None:
        said = body.detail
    if said is not None and not isinstance(said, str):
        said = msgspec.json.encode(said).decode()[:_QUOTED]
    return said or response.text[:_QUOTED] or response.reason_phrase, error


# -- retries ---------------------------------------------------------------------------


def retry_delay(outcome: ServerUnreachable | httpx.Response, attempt: int, max_retries: int) -> float | None:
    """Seconds to wait before sending a request again, or None when it must not be.

    Only what cannot have started any work is repeated: a send that failed before any
    answer began (0.2 s, doubling each attempt), and a 429 or 503 answer (its
    ``Retry-After``, else 0.5 s doubling; at most 10 s). A timeout is not: the server
    may be working on the request.

    Parameters
    ----------
    outcome : ServerUnreachable or httpx.Response
        What attempt ``attempt`` (from 0) got: the error :func:`map_httpx_exceptions`
        raised for the send, or the answer.
    attempt, max_retries : int
        None once ``attempt`` reaches ``max_retries``.
    """
    if attempt >= max_retries:
        return None
    if isinstance(outcome, httpx.Response):
        if outcome.status_code not in _BUSY:
            return None
        return min(_retry_after(outcome) or 0.5 * 2 ** attempt, 10.0)
    if isinstance(outcome, ServerTimeout) or not isinstance(outcome.__cause__, _UNSENT):
        return None
    return 0.2 * 2 ** attempt


def _retry_after(response: httpx.Response) -> float | None:
    """The answer's ``Retry-After`` in seconds (None when absent, a date, or not a
    positive finite number)."""
    try:
        seconds = float(response.headers.get("retry-after", ""))
    except ValueError:
        return None
    return seconds if 0 < seconds and math.isfinite(seconds) else None
