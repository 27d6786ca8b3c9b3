"""The reply service every route takes: the model, the live settings, the reply slots and
the replies in flight.

A route reads a request, asks the service to start a reply (:meth:`ReplyService.begin`),
and streams or collects what it gets back; the service owns admission, the engine each
reply runs and the replies' ids (for cancel by id). Everything it cannot do is an
:class:`~boundctx.serve.http.ApiError` raised before any byte of a reply, so a route has
one way to fail.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

from boundctx import config
from boundctx.analysis import Engine
from boundctx.analysis.originals import Earlier
from boundctx.errors import ConfigError, ResponseSchemaError, StoreUnavailable, ToolOfferError
from boundctx.events import Failed
from boundctx.providers.base import Provider, Sampling, ToolChoice
from boundctx.serve.coordination import Coordination
from boundctx.serve.http import ApiError, busy, store_unavailable
from boundctx.serve.replies import Busy, GatedProvider, ReplyRun, Slots, Ticket
from boundctx.serve.requests import BadRequest
from boundctx.serve.settings import LiveSettings, with_values

__all__ = ["DEFAULT_MAX_TOKENS", "ReplyService", "Started", "failure_code"]

log = logging.getLogger("boundctx.serve")

#: Default output budget of a reply when the request sets none.
DEFAULT_MAX_TOKENS = 512


class Started(NamedTuple):
    """A reply admitted and running: its run, and its first event (not a failure)."""

    run: ReplyRun
    first: Any


class ReplyService:
    """Replies of one model, admitted in turn.

    Parameters
    ----------
    provider : Provider
    settings : Settings
        What the server started with; changes through the settings API apply from the
        next reply (:attr:`live`).
    model_id : str
        The name clients send as ``model``.
    """

    def __init__(self, provider: Provider, settings: config.Settings, model_id: str) -> None:
        self.provider = provider
        self.live = LiveSettings(settings)
        self.model_id = model_id
        #: ``serve.max_body_bytes``: fixed while serving, so read once.
        self.max_body = settings.serve.max_body_bytes
        # A local model generates one reply at a time whatever the setting says.
        active = 1 if provider.serialises else settings.serve.active_replies
        self.slots = Slots(active, settings.serve.queue_depth)
        self.created = int(time.time())
        self._replies: dict[str, ReplyRun] = {}
        #: What this process shares with the others of its deployment (cancels, settings):
        #: nothing unless its sessions are in a database (:mod:`boundctx.serve.coordination`).
        self.coordination: Coordination = Coordination(self.live)

    @property
    def settings(self) -> config.Settings:
        """The settings a reply starting now runs with."""
        return self.live.current

    def admit(self) -> Ticket:
        """A place in the reply queue (503 past it).

        Raises
        ------
        ApiError
        """
        try:
            return self.slots.admit()
        except Busy:
            raise busy() from None

    async def begin(self, messages: list[dict[str, Any]], *, reply_id: str, max_tokens: int | None = None,
                    temperature: float | None = None, tools: list[dict[str, Any]] | None = None,
                    stop: str | Sequence[str] | None = None, tool_choice: ToolChoice | None = None,
                    parallel_tool_calls: bool | None = None, sampling: Sampling | None = None,
                    response_schema: dict[str, Any] | None = None, earlier: Earlier | None = None) -> Started:
        """Admit and start one reply, and read its first event. The run can be cancelled
        by ``reply_id`` until :meth:`end`. ``stop``, ``tool_choice``,
        ``parallel_tool_calls``, ``sampling``, ``response_schema`` and ``earlier`` are
        :meth:`~boundctx.analysis.Engine.reply`'s.

        Raises
        ------
        ApiError
            Before any byte of the reply: settings the request makes unusable (400), no
            slot (503), a bad tool (400), or a reply that failed before its first output
            (400 for a prompt that cannot fit, else 500).
        """
        settings = self._settings_for(temperature)
        max_tokens = self._max_tokens(max_tokens)
        ticket = self.admit()
        cancel = threading.Event()
        try:
            engine = Engine(GatedProvider(self.provider, ticket, cancel), settings=settings,
                            max_reply_tokens=max_tokens)
        except (ConfigError, ValueError) as exc:
            ticket.release()
            raise BadRequest(str(exc)) from None
        try:
            # The tools are checked here, before any event: a bad one is a 400.
            events = engine.reply(messages, cancel=cancel, tools=tools, stop=stop, tool_choice=tool_choice,
                                  parallel_tool_calls=parallel_tool_calls, sampling=sampling,
                                  response_schema=response_schema, earlier=earlier)
        except ToolOfferError as exc:
            ticket.release()
            param = "tool_choice" if exc.about == "tool_choice" else "tools"
            raise ApiError(400, str(exc), f"invalid_{param}", param) from None
        except ResponseSchemaError as exc:
            ticket.release()
            where = "response_format.json_schema.schema" + (f".{exc.at}" if exc.at else "")
            raise ApiError(400, f"{where}: {exc}", "invalid_response_format", where) from None
        run = ReplyRun(lambda: events, cancel, asyncio.get_running_loop(), on_end=ticket.release)
        self._replies[reply_id] = run
        try:
            await self.coordination.registered(reply_id)  # cancellable from any process
            first = await run.next_event(None)
        except BaseException:
            run.abandon()
            self.end(reply_id)
            raise
        if isinstance(first, Failed) or first is None:
            self.end(reply_id)
            raise self._failed_before_output(first, run)
        return Started(run, first)

    def end(self, reply_id: str) -> None:
        """The reply ``reply_id`` is over: it can no longer be cancelled by id."""
        if self._replies.pop(reply_id, None) is not None:
            self.coordination.ended(reply_id)

    def in_flight(self) -> list[str]:
        """The ids of the replies running in this process."""
        return list(self._replies)

    def cancel_here(self, reply_id: str) -> bool:
        """Stop ``reply_id`` if it runs in this process (any thread may ask)."""
        run = self._replies.get(reply_id)
        if run is not None:
            run.cancel.set()
        return run is not None

    async def cancel(self, reply_id: str) -> None:
        """Stop the reply ``reply_id``, in this process or (its sessions in a database)
        whichever process of the deployment runs it: it ends with finish reason
        ``cancelled`` at the engine's next check.

        Raises
        ------
        ApiError
            404: no such reply in flight (here, or where a cancel can reach); 503: the
            database that reaches the other processes is lost.
        """
        if self.cancel_here(reply_id):
            return
        if self.coordination.shared:
            try:
                if await asyncio.to_thread(self.coordination.cancel_elsewhere, reply_id):
                    return
            except StoreUnavailable as exc:
                raise store_unavailable(f"reply {reply_id!r} is not running in this process, and the others "
                                        f"cannot be asked: {exc}") from None
            raise ApiError(404, f"no reply {reply_id!r} is in flight (it ended, or never ran)", "reply_not_found",
                           "id")
        raise ApiError(404, f"no reply {reply_id!r} is in flight here (it ended, or another server process "
                            "runs it)", "reply_not_found", "id")

    def stream_settings(self) -> dict[str, Any]:
        """The keyword arguments of :class:`~boundctx.serve.streaming.EventStream` from
        the current settings."""
        serve = self.settings.serve
        return {"ping_s": serve.sse_ping_seconds or None, "send_timeout_s": serve.send_timeout_seconds}

    def model_meta(self) -> dict[str, Any]:
        """``/v1/models`` ``meta``: the window, the replies generating and waiting now,
        and a local model's state cache (what it holds, in bytes, and what it has done:
        decision 0030)."""
        generating, waiting = self.slots.in_use
        meta: dict[str, Any] = {"n_ctx": self.provider.context_window,
                                "replies": {"generating": generating, "waiting": waiting}}
        cache = getattr(self.provider, "state_cache", None)
        if cache is not None:
            meta["state_cache"] = cache.stats()
        return meta

    # -- the parts of begin ------------------------------------------------------------

    def _settings_for(self, temperature: float | None) -> config.Settings:
        settings = self.settings
        if temperature is None:
            return settings
        return with_values(settings, {"chat.temperature": temperature}, "the request")

    def default_prompt_limit(self) -> int:
        """Tokens a prompt may take in a reply that does not set ``max_tokens``: the
        window less the default reply budget (what a front end compares a draft with)."""
        return self.provider.context_window - self._max_tokens(None)

    def _max_tokens(self, asked: int | None) -> int:
        window = self.provider.context_window
        max_tokens = asked or min(DEFAULT_MAX_TOKENS, max(1, window // 4))
        if max_tokens >= window:
            raise BadRequest(f"max_tokens = {max_tokens} leaves no room for the prompt in the "
                             f"{window}-token window", param="max_tokens", code="context_length_exceeded")
        return max_tokens

    def _failed_before_output(self, failed: Failed | None, run: ReplyRun) -> ApiError:
        if failed is None:  # the engine ended without a word: a bug, said as one
            message = f"the reply ended without a result ({run.error!r})" if run.error else "the reply ended early"
            log.error("boundctx serve: %s", message)
            return ApiError(500, message, "internal_error", type="server_error", headers={"x-should-retry": "false"})
        if failed.kind == "ContextOverflow":
            return ApiError(400, failed.error, "context_length_exceeded", "messages",
                            n_ctx=self.provider.context_window)
        # Nothing a retry fixes (the same input fails the same way): the official
        # client retries 5xx twice unless told.
        return ApiError(500, failed.error, failure_code(failed), type="server_error",
                        headers={"x-should-retry": "false"})


def failure_code(failed: Failed) -> str:
    """The error code of a reply that failed."""
    return {"IncompleteCoverage": "analysis_failed", "GenerationTimeout": "timeout",
            "GenerationError": "generation_failed"}.get(failed.kind, "reply_failed")
