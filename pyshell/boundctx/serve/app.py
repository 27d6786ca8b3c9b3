"""``boundctx serve``: the engine behind the OpenAI chat-completions API, composed.

Routes: ``POST /v1/chat/completions`` (streamed and not), ``GET /v1/models``,
``GET /health``, boundctx's own under ``/boundctx/v1`` (sessions, settings, counts,
understanding, cancel), and the web front end at ``/``. Each reply runs
:class:`~boundctx.analysis.Engine` with its bounds, fitting and section analysis;
progress travels as chunks of its own (see :mod:`boundctx.serve.wire`). In front of every
route: the Host check (DNS rebinding of a loopback server), the Origin check and CORS,
and the API key (all routes but ``/health`` and the front end's files).

The package, one concern a module:

* ``app``: this composition: the guard, the routes, the one error handler;
* ``guard``: the checks in front of every route, one pure ASGI middleware each;
* ``service``: the reply service every route takes (admission, the engine, replies by id);
* ``openai_routes``: chat completions, models, health;
* ``session_replies`` / ``sessions``: transcripts under the sessions folder, and replies
  on them as named events;
* ``engine_routes``: counts, understanding, cancel by id;
* ``coordination``: what the processes on one sessions database share (cancels, settings);
* ``settings``: the settings schema, and changes that apply from the next reply;
* ``replies``: reply slots, turns at the first model call, the reply's thread and its
  bridge to the loop;
* ``streaming``: sending a reply's events as an event stream (pings, send timeout,
  disconnects);
* ``requests``: request bodies checked, with the 400 for what is refused;
* ``http``: the one API error, JSON responses, and reading a body within its cap;
* ``wire``: the OpenAI chunk and error shapes, and SSE framing;
* ``connections``: bounds on connections before the app sees them;
* ``ui``: the reference web front end (the files in ``web/``) at ``/``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from boundctx import config
from boundctx.errors import BoundctxError
from boundctx.providers.base import Provider
from boundctx.serve.guard import LOOPBACK_NAMES, BearerKeys, HostCheck, Origins, cors_origins, is_loopback
from boundctx.serve.http import API, ApiError

__all__ = ["Served", "ServeError", "create_app", "is_loopback", "sessions_folder"]


class ServeError(BoundctxError, ValueError):
    """The server cannot start as configured (the message says what to change)."""


def open_path(path: str) -> bool:
    """Served without a key: the health check, and the front end's files (no data; the
    page asks for the key)."""
    return path in ("/health", "/v1/health", "/", "/favicon.ico") or path.startswith("/ui/")


def sessions_folder(settings: config.Settings) -> str:
    """``serve.sessions_dir``, or the default under the user's data folder."""
    configured = settings.serve.sessions_dir
    if configured:
        from boundctx.stores import is_database_url

        return configured if is_database_url(configured) else os.path.expanduser(configured)
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
    from starlette.routing import Mount

    from boundctx.errors import StoreUnavailable
    from boundctx.serve.coordination import DatabaseCoordination
    from boundctx.serve.engine_routes import engine_routes
    from boundctx.serve.openai_routes import openai_routes
    from boundctx.serve.service import ReplyService
    from boundctx.serve.session_replies import session_reply_routes
    from boundctx.serve.session_stores import DatabaseSessions
    from boundctx.serve.sessions import Sessions, session_routes
    from boundctx.serve.settings import settings_routes
    from boundctx.serve.ui import ui_routes
    from boundctx.stores import is_database_url

    resolved = config.resolve(settings)
    keys = frozenset(api_keys or ())
    bad = [k for k in keys if not k or k != k.strip() or not k.isprintable()]
    if bad:
        # An empty key would match the empty token of a request that sends none.
        raise ServeError("an API key is empty, or has spaces or control characters at its ends or inside: give "
                         "each key as printable text without surrounding whitespace")
    host = host if host is not None else resolved.serve.host
    if not is_loopback(host) and not keys:
        raise ServeError(f"refusing to serve on {host!r} without an API key: anyone who can reach it could use "
                         "the model and read the sessions. Give a key (--api-key, serve.api_key_file or "
                         "BOUNDCTX_SERVE_API_KEY), or bind 127.0.0.1")
    try:
        origins = cors_origins(resolved.serve.cors_origins)
    except ValueError as exc:
        raise ServeError(str(exc)) from None
    service = ReplyService(provider, resolved, model_id or provider.name)
    folder = sessions_dir if sessions_dir is not None else sessions_folder(resolved)
    if not is_database_url(folder):
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as exc:
            raise ServeError(f"cannot use the sessions folder {folder!r} ({exc.strerror}); "
                             "set serve.sessions_dir") from None
    try:
        sessions = Sessions(folder, service.live)
    except (StoreUnavailable, RuntimeError) as exc:  # no database there, or no psycopg to reach one
        raise ServeError(f"cannot use the sessions database (serve.sessions_dir): {exc}") from None
    if isinstance(sessions.store, DatabaseSessions):
        # The processes on one database share cancels and settings through it.
        try:
            service.coordination = DatabaseCoordination(sessions.store.store, service.live,
                                                        in_flight=service.in_flight, cancel_here=service.cancel_here)
        except StoreUnavailable as exc:
            sessions.store.close()
            raise ServeError(f"cannot use the sessions database (serve.sessions_dir): {exc}") from None
    coordination = service.coordination
    app = Starlette(exception_handlers={ApiError: _render, HTTPException: _http_exception}, routes=[
        Mount(API, routes=[*session_routes(sessions), *session_reply_routes(service, sessions),
                           *settings_routes(coordination, service.max_body), *engine_routes(service)]),
        *openai_routes(service),
        *ui_routes(),
    ])
    guarded: Any = BearerKeys(app, keys, open_path)
    guarded = Origins(guarded, origins)
    if is_loopback(host):
        guarded = HostCheck(guarded, LOOPBACK_NAMES | {host.lower(), f"[{host.lower()}]"})
    return Served(guarded, closing=[coordination.close, getattr(sessions.store, "close", lambda: None)])


class Served:
    """The application as a server runs it, and what to let go when it stops serving
    (:meth:`close`: the database connections and the listener of a deployment's
    coordination; nothing for a sessions folder)."""

    def __init__(self, app, *, closing) -> None:
        self.app = app
        self._closing = list(closing)

    async def __call__(self, scope, receive, send) -> None:
        await self.app(scope, receive, send)

    def close(self) -> None:
        closing, self._closing = self._closing, []
        for close in closing:
            close()


async def _render(request, exc: Exception):
    """Every refusal of every route, in the API's one error shape."""
    assert isinstance(exc, ApiError), "registered for ApiError only"
    return exc.response()


async def _http_exception(request, exc):
    """Starlette's own refusals (no such route, a method a route does not take) in the
    API's error shape, as every other error, instead of plain text."""
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        allowed = ", ".join(sorted(set(headers.get("allow", "").replace(" ", "").split(",")) - {"HEAD", ""}))
        return ApiError(405, f"{request.method} is not a method of {request.url.path} (use {allowed or 'another'})",
                        "method_not_allowed", headers=headers).response()
    if exc.status_code == 404:
        return ApiError(404, f"no such route: {request.url.path}", "not_found", headers=headers).response()
    return ApiError(exc.status_code, str(exc.detail), headers=headers).response()
