"""``boundctx serve``: the engine behind the OpenAI chat-completions API.

Routes: ``POST /v1/chat/completions`` (streamed and not), ``GET /v1/models``,
``GET /health``. Each reply runs :class:`~boundctx.analysis.Engine` with its bounds,
fitting and section analysis; progress travels as chunks of its own (see
:mod:`boundctx.serve.wire`). A guard in front of every route checks the Host header
(DNS rebinding of a loopback server), CORS and the API key (all routes but ``/health``).

The package, one concern a module:

* ``app``: the application, the guard, replies' admission and the chat completions;
* ``wire``: the OpenAI chunk and error shapes, and SSE framing;
* ``requests``: request bodies checked, with the 400 for what is refused;
* ``replies``: reply slots, turns at the first model call, the reply's thread and its
  bridge to the loop;
* ``streaming``: sending a reply's events as an event stream (pings, send timeout,
  disconnects);
* ``sessions`` / ``session_replies``: transcripts under the sessions folder, and replies
  on them as named events;
* ``engine_routes``: counts, understanding, cancel by id;
* ``settings``: the settings schema, and changes that apply from the next reply;
* ``http``: the JSON and error responses and body reading every route shares;
* ``ui``: the reference web front end (the files in ``web/``) at ``/``.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import logging
import os
import threading
import time
import urllib.parse
from collections.abc import Mapping
from typing import Any

import msgspec

from boundctx import config
from boundctx.analysis import Engine
from boundctx.errors import BoundctxError, ConfigError, ToolOfferError
from boundctx.events import AnalysisProgress, Done, Failed, Fitted, ReplyDelta, Stage, ToolCall, ToolResult
from boundctx.providers.base import Provider
from boundctx.serve.http import busy, parsed_or_refusal
from boundctx.serve.http import error as _error
from boundctx.serve.http import json_response as _json
from boundctx.serve.replies import Busy, GatedProvider, ReplyRun, Slots
from boundctx.serve.requests import BadRequest, ChatCompletionRequest, parse_chat_request
from boundctx.serve.sessions import Sessions, session_routes
from boundctx.serve.settings import LiveSettings, settings_routes, with_values
from boundctx.serve.streaming import EventStream, ProgressGate, wait_for_disconnect
from boundctx.serve.wire import DONE, Chunks, error_body, frame

__all__ = ["ServeError", "create_app", "is_loopback", "sessions_folder"]

log = logging.getLogger("boundctx.serve")

_LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1", "[::1]"}
#: What each engine ending is called on the wire (OpenAI's finish reasons).
_FINISH = {"stop": "stop", "length": "length", "tool_calls": "tool_calls", "repetition": "stop",
           "cancelled": "stop"}
#: Default output budget of a reply when the request sets none.
DEFAULT_MAX_TOKENS = 512


class ServeError(BoundctxError, ValueError):
    """The server cannot start as configured (the message says what to change)."""


def is_loopback(host: str) -> bool:
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class Guard:
    """Pure ASGI checks in front of every route (no ``BaseHTTPMiddleware``, which hides
    client disconnects from streaming handlers): the Host header, the Origin, CORS, the
    API key.

    **Origin.** A browser sends simple requests (a POST of ``text/plain``, a form) to any
    site without asking first, and the page that sent one need not read the answer to do
    harm: it creates a session, appends to one, runs a reply that is saved. Every such
    request carries ``Origin``, so a request whose ``Origin`` is neither this server's own
    (its host and port are the ``Host`` the browser addressed, or the
    ``X-Forwarded-Host`` a proxy in front set, which a page cannot) nor one of
    ``serve.cors_origins`` is refused with 403 before any route runs, whatever its method
    or content type. Clients that are not browsers send no ``Origin`` and are not
    affected. The Host check, separately, stops DNS rebinding.

    CORS headers go only to a configured origin (``serve.cors_origins``), never with
    ``Access-Control-Allow-Credentials``: the key travels in a header the page's script
    sets, not in a cookie the browser adds on its own. A preflight is answered before
    the key check, as browsers send it without one.
    """

    def __init__(self, app, *, keys: frozenset[str], allowed_hosts: frozenset[str] | None,
                 cors: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.keys = tuple(k.encode() for k in keys)
        self.allowed_hosts = allowed_hosts
        self.cors = cors

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
        if self.allowed_hosts is not None:
            host = headers.get("host", "")
            name = host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0] + "]"
            if name.lower() not in self.allowed_hosts:
                response = _error(403, f"Host {host!r} is not this server's; a loopback server answers only "
                                       "requests addressed to it (a guard against DNS rebinding)",
                                  "invalid_request_error", "host_not_allowed")
                return await response(scope, receive, send)
        origin = headers.get("origin")
        allow_origin = self._allowed_origin(origin)
        if origin is not None and allow_origin is None and not _own_origin(origin, headers):
            response = _error(403, f"requests from the web page at {origin!r} are refused: it is not this server's "
                                   "own page. To let that site's pages use this server, add it to "
                                   "serve.cors_origins (and set an API key)", "invalid_request_error",
                              "origin_not_allowed")
            return await response(scope, receive, send)
        if allow_origin is not None:
            cors_headers = [(b"access-control-allow-origin", allow_origin.encode("latin-1")), (b"vary", b"Origin")]
            if scope.get("method") == "OPTIONS" and "access-control-request-method" in headers:
                from starlette.responses import Response

                response = Response(status_code=204, headers={
                    "access-control-allow-origin": allow_origin, "vary": "Origin",
                    "access-control-allow-methods": "GET, POST, PATCH, DELETE",
                    "access-control-allow-headers": "authorization, content-type",
                    "access-control-max-age": "600"})
                return await response(scope, receive, send)
            send = _with_headers(send, cors_headers + [(b"access-control-expose-headers", b"retry-after")])
        if self.keys and not _open_path(scope.get("path", "")):
            given = headers.get("authorization", "")
            token = given[7:].strip().encode() if given[:7].lower() == "bearer " else b""
            # Compare with every key, in constant time each: no early exit on a match.
            ok = False
            for key in self.keys:
                ok |= hmac.compare_digest(token, key)
            if not ok:
                response = _error(401, "a valid API key is required: send 'Authorization: Bearer KEY'",
                                  "authentication_error", "invalid_api_key",
                                  headers={"WWW-Authenticate": "Bearer"})
                return await response(scope, receive, send)
        return await self.app(scope, receive, send)

    def _allowed_origin(self, origin: str | None) -> str | None:
        if origin is None or not self.cors:
            return None
        if "*" in self.cors:
            return "*"
        return origin if origin.lower() in self.cors else None


def _own_origin(origin: str, headers: Mapping[str, str]) -> bool:
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
    addressed = [headers.get("host", "")]
    if "x-forwarded-host" in headers:
        addressed.append(headers["x-forwarded-host"].split(",")[0])
    return any(name.strip() and norm(name) == own for name in addressed)


def _open_path(path: str) -> bool:
    """Served without a key: the health check, and the front end's files (no data; the
    page asks for the key)."""
    return path in ("/health", "/v1/health", "/", "/favicon.ico") or path.startswith("/ui/")


def _with_headers(send, extra: list[tuple[bytes, bytes]]):
    async def sender(message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), *extra]}
        await send(message)
    return sender


def sessions_folder(settings: Mapping[str, Any]) -> str:
    """``serve.sessions_dir``, or the default under the user's data folder."""
    configured = str(settings["serve.sessions_dir"])
    if configured:
        return os.path.expanduser(configured)
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(data, "boundctx", "sessions")


def create_app(provider: Provider, *, settings: Mapping[str, Any] | None = None, model_id: str | None = None,
               api_keys: frozenset[str] | set[str] | None = None, host: str | None = None,
               sessions_dir: str | None = None):
    """The ASGI application serving ``provider``.

    Parameters
    ----------
    provider : Provider
    settings : mapping, optional
        Resolved settings or a partial mapping over :func:`boundctx.config.load`
        (``serve.*`` and the engine's own).
    model_id : str, optional
        The name clients send as ``model`` and ``/v1/models`` lists (default: the
        provider's name).
    api_keys : set of str, optional
        Keys a client may send; none means no key is asked for.
    host : str, optional
        The address the server is bound to: a loopback one turns the Host-header check on.
    sessions_dir : str, optional
        The folder the session routes read and write (default
        :func:`sessions_folder`); created when missing.

    Raises
    ------
    ServeError
        A non-loopback ``host`` without an API key.
    """
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.routing import Route

    from boundctx.serve.engine_routes import engine_routes
    from boundctx.serve.session_replies import session_reply_routes
    from boundctx.serve.ui import ui_routes

    resolved = config.resolve(settings)
    keys = frozenset(api_keys or ())
    bad = [k for k in keys if not k or k != k.strip() or not k.isprintable()]
    if bad:
        # An empty key would match the empty token of a request that sends none.
        raise ServeError("an API key is empty, or has spaces or control characters at its ends or inside: give "
                         "each key as printable text without surrounding whitespace")
    host = host if host is not None else str(resolved["serve.host"])
    if not is_loopback(host) and not keys:
        raise ServeError(f"refusing to serve on {host!r} without an API key: anyone who can reach it could use "
                         "the model and read the sessions. Give a key (--api-key, serve.api_key_file or "
                         "BOUNDCTX_SERVE_API_KEY), or bind 127.0.0.1")
    allowed = (frozenset(_LOOPBACK_NAMES | {host.lower(), f"[{host.lower()}]"}) if is_loopback(host) else None)
    origins = cors_origins(str(resolved["serve.cors_origins"]))
    server = _Server(provider, resolved, model_id or provider.name)
    folder = sessions_dir if sessions_dir is not None else sessions_folder(resolved)
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise ServeError(f"cannot use the sessions folder {folder!r} ({exc.strerror}); "
                         "set serve.sessions_dir") from None
    sessions = Sessions(folder, server.live)
    app = Starlette(exception_handlers={HTTPException: _http_exception}, routes=[
        *session_routes(sessions, extra=session_reply_routes(server, sessions)),
        *settings_routes(server.live, int(resolved["serve.max_body_bytes"])),
        *engine_routes(server),
        *ui_routes(),
        Route("/health", server.health, methods=["GET"]),
        Route("/v1/health", server.health, methods=["GET"]),
        Route("/v1/models", server.models, methods=["GET"]),
        Route("/models", server.models, methods=["GET"]),
        Route("/v1/chat/completions", server.chat_completions, methods=["POST"]),
        Route("/chat/completions", server.chat_completions, methods=["POST"]),
    ])
    app.state.boundctx = server
    return Guard(app, keys=keys, allowed_hosts=allowed, cors=origins)


async def _http_exception(request, exc):
    """Starlette's own refusals (no such route, a method a route does not take) in the
    API's error shape, as every other error, instead of plain text."""
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        return _error(405, f"{request.method} is not a method of {request.url.path} "
                           f"(use {headers.get('allow', 'another')})", "invalid_request_error",
                      "method_not_allowed", headers=headers)
    if exc.status_code == 404:
        return _error(404, f"no such route: {request.url.path}", "invalid_request_error", "not_found",
                      headers=headers)
    return _error(exc.status_code, str(exc.detail), "invalid_request_error", None, headers=headers)


def cors_origins(text: str) -> frozenset[str]:
    """The origins of ``serve.cors_origins`` (comma-separated; ``*`` is any origin).

    Raises
    ------
    ServeError
        An entry that is not an origin (``scheme://host[:port]``, no path).
    """
    out = set()
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        if item != "*":
            parts = urllib.parse.urlsplit(item)
            if parts.scheme not in ("http", "https") or not parts.netloc or parts.path or parts.query:
                raise ServeError(f"serve.cors_origins: {item!r} is not an origin; write scheme://host[:port], "
                                 "e.g. http://localhost:3000 (or * for any origin)")
            item = f"{parts.scheme}://{parts.netloc.lower()}"
        out.add(item)
    return frozenset(out)


class _Server:
    """What every route shares: the provider, the live settings, the reply slots, and
    the replies in flight by id (for the cancel route)."""

    def __init__(self, provider: Provider, settings: config.Settings, model_id: str) -> None:
        self.provider = provider
        self.live = LiveSettings(settings)
        self.model_id = model_id
        # A local model generates one reply at a time whatever the setting says.
        active = 1 if provider.serialises else int(settings["serve.active_replies"])
        self.slots = Slots(active, int(settings["serve.queue_depth"]))
        self.created = int(time.time())
        self.replies: dict[str, ReplyRun] = {}

    @property
    def settings(self) -> config.Settings:
        return self.live.current

    # -- plain routes -------------------------------------------------------------------

    async def health(self, request):
        return _json(200, {"status": "ok"})

    async def models(self, request):
        return _json(200, {"object": "list", "data": [
            {"id": self.model_id, "object": "model", "created": self.created, "owned_by": "boundctx",
             "meta": self._model_meta()}]})

    def _model_meta(self) -> dict[str, Any]:
        """``/v1/models`` ``meta``: the window, and a local model's state cache (what it
        holds, in bytes, and what it has done: decision 0030)."""
        meta: dict[str, Any] = {"n_ctx": self.provider.context_window}
        cache = getattr(self.provider, "state_cache", None)
        if cache is not None:
            meta["state_cache"] = cache.stats()
        return meta

    # -- one reply ----------------------------------------------------------------------

    async def begin(self, messages: list[dict[str, Any]], *, reply_id: str, max_tokens: int | None = None,
                    temperature: float | None = None, tools: list[dict[str, Any]] | None = None):
        """Admit and start one reply: ``(run, first event)``, or the error response to
        send instead (before any byte of a reply). The run is in :attr:`replies` until
        :meth:`end`."""
        try:
            engine = self._engine(max_tokens, temperature)
        except BadRequest as exc:
            return _error(400, str(exc), "invalid_request_error", exc.code, exc.param)
        try:
            ticket = self.slots.admit()
        except Busy:
            return busy()
        cancel = threading.Event()
        engine.provider = GatedProvider(self.provider, ticket, cancel)
        try:
            # The tools are checked here, before any event: a bad one is a 400.
            events = engine.reply(messages, cancel=cancel, tools=tools)
        except ToolOfferError as exc:
            ticket.release()
            return _error(400, str(exc), "invalid_request_error", "invalid_tools", "tools")
        run = ReplyRun(lambda: events, cancel, asyncio.get_running_loop(), on_end=ticket.release)
        self.replies[reply_id] = run
        try:
            first = await run.next_event(None)
        except BaseException:
            run.abandon()
            self.end(reply_id)
            raise
        if isinstance(first, Failed) or first is None:
            self.end(reply_id)
            return self._failed_before_output(first, run)
        return run, first

    def end(self, reply_id: str) -> None:
        self.replies.pop(reply_id, None)

    def _engine(self, max_tokens: int | None, temperature: float | None) -> Engine:
        settings = self.settings
        if temperature is not None:
            settings = with_values(settings, {"chat.temperature": temperature}, "the request")
        window = self.provider.context_window
        max_tokens = max_tokens or min(DEFAULT_MAX_TOKENS, max(1, window // 4))
        if max_tokens >= window:
            raise BadRequest(f"max_tokens = {max_tokens} leaves no room for the prompt in the "
                             f"{window}-token window", param="max_tokens", code="context_length_exceeded")
        try:
            return Engine(self.provider, settings=settings, max_reply_tokens=max_tokens)
        except (ConfigError, ValueError) as exc:
            raise BadRequest(str(exc)) from None

    def _failed_before_output(self, failed: Failed | None, run: ReplyRun):
        if failed is None:  # the engine ended without a word: a bug, said as one
            message = f"the reply ended without a result ({run.error!r})" if run.error else "the reply ended early"
            log.error("boundctx serve: %s", message)
            return _error(500, message, "server_error", "internal_error", headers={"x-should-retry": "false"})
        if failed.kind == "ContextOverflow":
            return _error(400, failed.error, "invalid_request_error", "context_length_exceeded", "messages",
                          n_ctx=self.provider.context_window)
        # Nothing a retry fixes (the same input fails the same way): the official
        # client retries 5xx twice unless told.
        return _error(500, failed.error, "server_error", _code(failed), headers={"x-should-retry": "false"})

    def stream_settings(self) -> dict[str, Any]:
        """The keyword arguments of :class:`EventStream` from the current settings."""
        s = self.settings
        return {"ping_s": float(s["serve.sse_ping_seconds"]) or None,
                "send_timeout_s": float(s["serve.send_timeout_seconds"])}

    # -- chat completions ---------------------------------------------------------------

    async def chat_completions(self, request):
        req, refusal = await parsed_or_refusal(request, int(self.settings["serve.max_body_bytes"]), parse_chat_request)
        if refusal is not None:
            return refusal
        if req.model != self.model_id:
            return _error(404, f"the model {req.model!r} does not exist here; this server serves "
                               f"{self.model_id!r} (GET /v1/models)", "invalid_request_error", "model_not_found",
                          "model")
        chunks = Chunks(self.model_id)
        started = await self.begin(req.messages, reply_id=chunks.id,
                                   max_tokens=req.max_completion_tokens or req.max_tokens,
                                   temperature=req.temperature, tools=req.tools)
        if not isinstance(started, tuple):
            return started
        run, first = started
        if req.stream:
            frames = _ChatFrames(chunks, req, self.settings)
            return EventStream(run, first, frames=frames, opening=frame(chunks.role()),
                               on_close=lambda: self.end(chunks.id), **self.stream_settings())
        return await self._complete(request, chunks, run, first)

    async def _complete(self, request, chunks: Chunks, run: ReplyRun, first: Any):
        text: list[str] = []
        watcher = asyncio.ensure_future(wait_for_disconnect(request.receive))
        watcher.add_done_callback(lambda _: run.wake())
        events = [first]
        try:
            while True:
                for event in events:
                    if event is None:
                        return _error(500, "the reply ended without a result", "server_error", "internal_error",
                                      headers={"x-should-retry": "false"})
                    if isinstance(event, ReplyDelta):
                        text.append(event.text)
                    elif isinstance(event, Failed):
                        return _error(500, event.error, "server_error", _code(event),
                                      headers={"x-should-retry": "false"})
                    elif isinstance(event, Done):
                        return _json(200, chunks.completion("".join(text), _finish(event), _usage(event),
                                                            [_wire_call(c) for c in event.tool_calls],
                                                            _done_extension(event)))
                events = await run.next_events(None)
                if watcher.done():  # the client went away: stop its reply, not another's
                    run.abandon()
                    return _error(499, "the client closed the connection", "invalid_request_error",
                                  "client_closed")
        finally:
            watcher.cancel()
            self.end(chunks.id)


def _code(failed: Failed) -> str:
    return {"IncompleteCoverage": "analysis_failed", "GenerationTimeout": "timeout",
            "GenerationError": "generation_failed"}.get(failed.kind, "reply_failed")


def _finish(done: Done) -> str:
    """The OpenAI finish reason of an engine ending; a reply that carries calls of the
    caller's tools ended with them."""
    return "tool_calls" if done.tool_calls else _FINISH.get(done.finish_reason, "stop")


def _wire_call(event: ToolCall) -> dict[str, Any]:
    return {"id": event.id, "type": "function", "function": {"name": event.name, "arguments": event.arguments}}


def _usage(done: Done) -> dict[str, Any]:
    u = done.usage or {}
    prompt, completion = int(u.get("prompt_tokens", 0) or 0), int(u.get("completion_tokens", 0) or 0)
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                             "total_tokens": prompt + completion}
    if u.get("cached_tokens") is not None:  # the model's kept prefix (decisions 0029, 0030), OpenAI's field
        usage["prompt_tokens_details"] = {"cached_tokens": int(u["cached_tokens"])}
    return usage


def _done_extension(done: Done) -> dict[str, Any]:
    ext: dict[str, Any] = {"type": "done", "finish_reason": done.finish_reason,
                           "cancelled": done.finish_reason == "cancelled"}
    if done.finish_reason == "repetition":
        ext["withheld_chars"] = (done.usage or {}).get("withheld_chars", 0)
    return ext


def _extension(event: Any) -> tuple[dict[str, Any], str | None]:
    """boundctx's extension object for a non-text event, and Open WebUI's status line."""
    if isinstance(event, Fitted):
        ext = {"type": "fitted", **msgspec.to_builtins(event)}
        said = None
        if event.dropped or event.analysed or event.clipped:
            said = (f"Fitting the conversation: {len(event.dropped)} older messages left out, "
                    f"{len(event.analysed)} inputs to read in sections")
        return ext, said
    if isinstance(event, AnalysisProgress):
        ext = {"type": "analysis_progress", **msgspec.to_builtins(event)}
        return ext, f"Reading section {event.section} of {event.sections} (worker {event.worker + 1})"
    if isinstance(event, Stage):
        return {"type": "stage", **msgspec.to_builtins(event)}, (
            "Answering" if event.stage == "answering" else "Rereading the originals")
    if isinstance(event, ToolCall):
        return {"type": "tool_call", **msgspec.to_builtins(event)}, None
    if isinstance(event, ToolResult):
        return {"type": "tool_result", "id": event.id, "chars": len(event.content)}, None
    return {"type": type(event).__name__}, None


class _ChatFrames:
    """What each engine event becomes in a streamed chat completion."""

    def __init__(self, chunks: Chunks, req: ChatCompletionRequest, settings: config.Settings) -> None:
        self.chunks = chunks
        self.include_usage = req.stream_options is not None and req.stream_options.include_usage
        self.progress = ProgressGate(float(settings["serve.progress_max_hz"]))
        self.openwebui = bool(settings["serve.progress_openwebui"])
        self._calls = 0  # the caller's tool calls sent so far

    async def __call__(self, event: Any) -> tuple[bytes, bool]:
        chunks = self.chunks
        if event is None:
            return frame(error_body("the reply ended without a result", "server_error", "internal_error")) + DONE, True
        if isinstance(event, ReplyDelta):
            return frame(chunks.content(event.text)), False
        if isinstance(event, ToolCall) and not event.internal:
            self._calls += 1
            return frame(chunks.tool_call(self._calls - 1, _wire_call(event))), False
        if isinstance(event, Done):
            data = frame(chunks.finish(_finish(event), _done_extension(event)))
            if self.include_usage:
                data += frame(chunks.usage(_usage(event)))
            return data + DONE, True
        if isinstance(event, Failed):
            return frame(error_body(event.error, "server_error", _code(event))) + DONE, True
        if isinstance(event, AnalysisProgress) and not self.progress.due(event):
            return b"", False
        ext, said = _extension(event)
        ext["reply_id"] = chunks.id
        return frame(chunks.progress(ext, said if self.openwebui else None)), False
