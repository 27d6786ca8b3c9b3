"""boundctx's own engine routes: exact counts, understanding, and cancelling a reply.

Routes::

    POST /boundctx/v1/count                 {"messages": [...], "tools": [...]}
                                            -> the prompt's tokens under the model's template
    POST /boundctx/v1/understand            {"message", "catalog" | "bfcl", "records", "click",
                                             "single_call"} -> the checked plan and its budget
    POST /boundctx/v1/replies/{id}/cancel   stop a reply in flight (a chat completion's
                                            ``chatcmpl-`` id or a session reply's ``reply-`` id)

Understanding makes model calls, so it takes a reply slot and waits its turn as a reply
does (503 past the queue); a client that leaves stops the model call in flight, no call
starts after it, and the slot is free again.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import msgspec

from boundctx.errors import BoundctxError
from boundctx.serve.http import busy, parsed_or_refusal
from boundctx.serve.http import error as _error
from boundctx.serve.http import json_response as _json
from boundctx.serve.replies import Busy, GatedProvider
from boundctx.serve.requests import BadRequest, UnderstandRequest, decode, parse_count_request
from boundctx.serve.streaming import wait_for_disconnect

__all__ = ["engine_routes"]

PREFIX = "/boundctx/v1"


def engine_routes(server: Any) -> list:
    """The routes above, over ``server`` (the app's shared state)."""
    from starlette.concurrency import run_in_threadpool
    from starlette.routing import Route

    async def parsed(request, parse):
        return await parsed_or_refusal(request, int(server.settings["serve.max_body_bytes"]), parse,
                                       code="invalid_request")

    async def count(request):
        req, refusal = await parsed(request, parse_count_request)
        if refusal is not None:
            return refusal
        provider = server.provider
        tokens = await run_in_threadpool(provider.count_prompt, req.messages, tools=req.tools)
        counter = provider.counter
        return _json(200, {"object": "boundctx.count", "prompt_tokens": tokens,
                           "exact": bool(getattr(counter, "exact", False)),
                           "counter": type(counter).__name__, "context_window": provider.context_window,
                           "fits": tokens < provider.context_window})

    async def understand(request):
        from boundctx.understanding import Catalog, Click, Understander

        req, refusal = await parsed(request, lambda body: decode(body, UnderstandRequest))
        if refusal is not None:
            return refusal
        try:
            if (req.catalog is None) == (req.bfcl is None):
                raise BadRequest("send exactly one of catalog (boundctx's catalog as JSON) or bfcl (a list of "
                                 "function specs)", param="catalog")
            catalog = (Catalog.from_dict(req.catalog, source="the request") if req.catalog is not None
                       else Catalog.from_bfcl(req.bfcl, source="the request"))
            click = msgspec.convert(req.click, Click) if req.click is not None else None
        except BadRequest as exc:
            return _error(400, str(exc), "invalid_request_error", exc.code or "invalid_request", exc.param)
        except (BoundctxError, ValueError, KeyError, TypeError, msgspec.ValidationError) as exc:
            return _error(400, f"the catalog or click is not usable: {exc}", "invalid_request_error",
                          "invalid_catalog", "catalog")
        try:
            ticket = server.slots.admit()
        except Busy:
            return busy()
        cancel = threading.Event()
        provider = GatedProvider(server.provider, ticket, cancel)

        def run():
            try:
                u = Understander(provider, catalog, settings=server.settings)
                return (u.single_call(req.message, records=req.records) if req.single_call
                        else u.understand(req.message, records=req.records, click=click))
            finally:
                ticket.release()

        work = asyncio.ensure_future(asyncio.to_thread(run))
        gone = asyncio.ensure_future(wait_for_disconnect(request.receive))
        try:
            await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
            if not work.done():  # the client left: the call in flight stops, and the turn with it
                cancel.set()
                return _error(499, "the client closed the connection", "invalid_request_error", "client_closed")
            try:
                plan = work.result()
            except (BoundctxError, ValueError, KeyError) as exc:
                message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
                return _error(400, f"the records or message are not usable: {message}", "invalid_request_error",
                              "invalid_records", "records")
        finally:
            gone.cancel()
        return _json(200, {"object": "boundctx.plan", **msgspec.to_builtins(plan)})

    async def cancel(request):
        reply_id = request.path_params["id"]
        run = server.replies.get(reply_id)
        if run is None:
            return _error(404, f"no reply {reply_id!r} is in flight here (it ended, or another server process "
                               "runs it)", "invalid_request_error", "reply_not_found", "id")
        run.cancel.set()  # the engine ends with finish reason "cancelled" at its next check
        return _json(200, {"object": "boundctx.reply", "id": reply_id, "cancelled": True})

    return [
        Route(PREFIX + "/count", count, methods=["POST"]),
        Route(PREFIX + "/understand", understand, methods=["POST"]),
        Route(PREFIX + "/replies/{id}/cancel", cancel, methods=["POST"]),
    ]
