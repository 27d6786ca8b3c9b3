"""boundctx's own engine routes: exact counts, understanding, and cancelling a reply.

Routes::

    POST /boundctx/v1/count                 {"messages": [...], "tools": [...]}
                                            -> the prompt's tokens under the model's template
    POST /boundctx/v1/understand            {"message", "catalog" | "bfcl", "records", "click",
                                             "single_call"} -> the checked plan and its budget
    POST /boundctx/v1/replies/{id}/cancel   stop a reply in flight (a chat completion's
                                            ``chatcmpl-`` id or a session reply's ``reply-`` id),
                                            in whichever process runs it when the sessions
                                            are in a database

Understanding makes model calls, so it takes a reply slot and waits its turn as a reply
does (503 past the queue); a client that leaves stops the model call in flight, no call
starts after it, and the slot is free again.
"""

from __future__ import annotations

import asyncio
import threading

import msgspec

from boundctx.errors import BoundctxError
from boundctx.serve.http import ApiError, client_closed, read_json
from boundctx.serve.http import json_response as _json
from boundctx.serve.replies import GatedProvider
from boundctx.serve.requests import BadRequest, UnderstandRequest, decode, parse_count_request
from boundctx.serve.service import ReplyService
from boundctx.serve.streaming import wait_for_disconnect

__all__ = ["engine_routes"]


def engine_routes(service: ReplyService) -> list:
    """The routes above, relative to :data:`~boundctx.serve.http.API`, run by ``service``."""
    from starlette.concurrency import run_in_threadpool
    from starlette.routing import Route

    async def count(request):
        req = await read_json(request, service.max_body, parse_count_request, code="invalid_request")
        provider = service.provider
        tokens = await run_in_threadpool(provider.count_prompt, req.messages, tools=req.tools)
        counter = provider.counter
        return _json(200, {"object": "boundctx.count", "prompt_tokens": tokens,
                           "exact": bool(getattr(counter, "exact", False)),
                           "counter": type(counter).__name__, "context_window": provider.context_window,
                           "fits": tokens < provider.context_window,
                           # a reply without max_tokens: its prompt may take this much, and a
                           # message alone over it is read in sections where analysis is on
                           # (chat.analysis_workers > 0), else refused
                           "prompt_limit": service.default_prompt_limit(),
                           "reads_in_sections": service.settings.chat.analysis_workers > 0})

    async def understand(request):
        from boundctx.understanding import Catalog, Click, Understander

        req = await read_json(request, service.max_body, lambda body: decode(body, UnderstandRequest),
                              code="invalid_request")
        try:
            if (req.catalog is None) == (req.bfcl is None):
                raise BadRequest("send exactly one of catalog (boundctx's catalog as JSON) or bfcl (a list of "
                                 "function specs)", param="catalog", code="invalid_request")
            catalog = (Catalog.from_dict(req.catalog, source="the request") if req.catalog is not None
                       else Catalog.from_bfcl(req.bfcl, source="the request"))
            click = msgspec.convert(req.click, Click) if req.click is not None else None
        except ApiError:
            raise
        except (BoundctxError, ValueError, KeyError, TypeError, msgspec.ValidationError) as exc:
            raise ApiError(400, f"the catalog or click is not usable: {exc}", "invalid_catalog", "catalog") from None
        ticket = service.admit()
        cancel = threading.Event()
        provider = GatedProvider(service.provider, ticket, cancel)
        settings = service.settings

        def run():
            try:
                u = Understander(provider, catalog, settings=settings)
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
                raise client_closed()
            try:
                plan = work.result()
            except (BoundctxError, ValueError, KeyError) as exc:
                message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
                raise ApiError(400, f"the records or message are not usable: {message}", "invalid_records",
                               "records") from None
        finally:
            gone.cancel()
        return _json(200, {"object": "boundctx.plan", **msgspec.to_builtins(plan)})

    async def cancel(request):
        reply_id = request.path_params["id"]
        await service.cancel(reply_id)
        return _json(200, {"object": "boundctx.reply", "id": reply_id, "cancelled": True})

    return [
        Route("/count", count, methods=["POST"]),
        Route("/understand", understand, methods=["POST"]),
        Route("/replies/{id}/cancel", cancel, methods=["POST"]),
    ]
