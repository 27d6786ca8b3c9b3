"""The checks in front of every route, each a pure ASGI middleware of its own.

They are pure ASGI, not Starlette's ``BaseHTTPMiddleware``, which hides client
disconnects from streaming handlers. In the order a request meets them:

* :class:`HostCheck`: the ``Host`` header of a loopback server (DNS rebinding);
* :class:`Origins`: pages of other sites refused, CORS for the configured ones;
* :class:`BearerKeys`: the API key, on every route but the open ones.

**Origin.** A browser sends simple requests (a POST of ``text/plain``, a form) to any site
without asking first, and the page that sent one need not read the answer to do harm: it
creates a session, appends to one, runs a reply that is saved. Every such request carries
``Origin``, so a request whose ``Origin`` is neither this server's own (its host and port
are the ``Host`` the browser addressed, or the ``X-Forwarded-Host`` a proxy in front set,
which a page cannot) nor one of ``serve.cors_origins`` is refused with 403 before any
route runs, whatever its method or content type. Clients that are not browsers send no
``Origin`` and are not affected.

CORS headers go only to a configured origin, never with
``Access-Control-Allow-Credentials``: the key travels in a header the page's script sets,
not in a cookie the browser adds on its own. A preflight is answered before the key check,
as browsers send it without one.
"""

from __future__ import annotations

import hmac
import ipaddress
import urllib.parse
from collections.abc import Callable, Collection

from boundctx.serve.http import ApiError

__all__ = ["LOOPBACK_NAMES", "BearerKeys", "HostCheck", "Origins", "cors_origins", "is_loopback", "own_origin"]

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _header(scope, name: bytes) -> str | None:
    """The request header ``name`` (lower case; the last one sent), or None."""
    found = None
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            found = value
    return None if found is None else found.decode("latin-1")


class HostCheck:
    """Requests addressed to a name other than the server's own are refused (403): a
    loopback server reached through a rebound DNS name answers nothing."""

    def __init__(self, app, allowed_hosts: Collection[str]) -> None:
        self.app = app
        self.allowed_hosts = frozenset(allowed_hosts)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            host = _header(scope, b"host") or ""
            name = host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0] + "]"
            if name.lower() not in self.allowed_hosts:
                refusal = ApiError(403, f"Host {host!r} is not this server's; a loopback server answers only "
                                        "requests addressed to it (a guard against DNS rebinding)",
                                   "host_not_allowed")
                return await refusal.response()(scope, receive, send)
        await self.app(scope, receive, send)


class Origins:
    """Pages of other sites refused (403), and CORS for the ``allowed`` origins (``*``
    is any); see the module docstring."""

    def __init__(self, app, allowed: Collection[str] = ()) -> None:
        self.app = app
        self.allowed = frozenset(allowed)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        origin = _header(scope, b"origin")
        if origin is None:
            return await self.app(scope, receive, send)
        allow = self._allowed(origin)
        if allow is None:
            if own_origin(origin, _header(scope, b"host") or "", _header(scope, b"x-forwarded-host")):
                return await self.app(scope, receive, send)
            refusal = ApiError(403, f"requests from the web page at {origin!r} are refused: it is not this server's "
                                    "own page. To let that site's pages use this server, add it to "
                                    "serve.cors_origins (and set an API key)", "origin_not_allowed")
            return await refusal.response()(scope, receive, send)
        if scope.get("method") == "OPTIONS" and _header(scope, b"access-control-request-method") is not None:
            from starlette.responses import Response

            preflight = Response(status_code=204, headers={
                "access-control-allow-origin": allow, "vary": "Origin",
                "access-control-allow-methods": "GET, POST, PATCH, DELETE",
                "access-control-allow-headers": "authorization, content-type",
                "access-control-max-age": "600"})
            return await preflight(scope, receive, send)
        await self.app(scope, receive, _with_headers(send, [
            (b"access-control-allow-origin", allow.encode("latin-1")), (b"vary", b"Origin"),
            (b"access-control-expose-headers", b"retry-after")]))

    def _allowed(self, origin: str) -> str | None:
        if not self.allowed:
            return None
        if "*" in self.allowed:
            return "*"
        return origin if origin.lower() in self.allowed else None


class BearerKeys:
    """Every request but those ``is_open(path)`` allows must send one of ``keys`` as
    ``Authorization: Bearer KEY`` (401 otherwise). No keys: nothing is asked."""

    def __init__(self, app, keys: Collection[str], is_open: Callable[[str], bool]) -> None:
        self.app = app
        self.keys = tuple(k.encode() for k in keys)
        self.is_open = is_open

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and self.keys and not self.is_open(scope.get("path", "")):
            given = _header(scope, b"authorization") or ""
            token = given[7:].strip().encode() if given[:7].lower() == "bearer " else b""
            # Compare with every key, in constant time each: no early exit on a match.
            ok = False
            for key in self.keys:
                ok |= hmac.compare_digest(token, key)
            if not ok:
                refusal = ApiError(401, "a valid API key is required: send 'Authorization: Bearer KEY'",
                                   "invalid_api_key", type="authentication_error",
                                   headers={"WWW-Authenticate": "Bearer"})
                return await refusal.response()(scope, receive, send)
        await self.app(scope, receive, send)


def own_origin(origin: str, host: str, forwarded_host: str | None = None) -> bool:
    """Whether ``origin`` is the page of this server itself: its ``host[:port]`` is the
    one the request was addressed to (``Host``; behind a proxy, the first
    ``X-Forwarded-Host``). A port left out is the scheme's default."""
    parts = urllib.parse.urlsplit(origin)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.path or parts.query:
        return False  # "null" (a sandboxed frame, a file), or not an origin at all
    default = "80" if parts.scheme == "http" else "443"

    def norm(netloc: str) -> str:
        netloc = netloc.strip().lower()
        return netloc if netloc.rsplit("]", 1)[-1].count(":") else f"{netloc}:{default}"

    own = norm(parts.netloc)
    addressed = [host]
    if forwarded_host is not None:
        addressed.append(forwarded_host.split(",")[0])
    return any(name.strip() and norm(name) == own for name in addressed)


def cors_origins(text: str) -> frozenset[str]:
    """The origins of ``serve.cors_origins`` (comma-separated; ``*`` is any origin).

    Raises
    ------
    ValueError
        An entry that is not an origin (``scheme://host[:port]``, no path).
    """
    out = set()
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        if item != "*":
            parts = urllib.parse.urlsplit(item)
            if parts.scheme not in ("http", "https") or not parts.netloc or parts.path or parts.query:
                raise ValueError(f"serve.cors_origins: {item!r} is not an origin; write scheme://host[:port], "
                                 "e.g. http://localhost:3000 (or * for any origin)")
            item = f"{parts.scheme}://{parts.netloc.lower()}"
        out.add(item)
    return frozenset(out)


def _with_headers(send, extra: list[tuple[bytes, bytes]]):
    async def sender(message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), *extra]}
        await send(message)
    return sender
