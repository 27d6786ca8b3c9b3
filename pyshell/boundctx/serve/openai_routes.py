"""The OpenAI-compatible surface: chat completions (streamed and whole), the models list
and the health check.

Routes::

    POST /v1/chat/completions   (also /chat/completions)
    GET  /v1/models             (also /models)
    GET  /health                (also /v1/health)

A streamed reply is one chunk per engine event: the answer's text in ``delta.content``,
the caller's tool calls in ``delta.tool_calls``, and boundctx's progress (fitting,
sections read, stages) as chunks of its own, whose ``delta.content`` is ``""``
(:mod:`boundctx.serve.wire`).
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec

from boundctx import config
from boundctx.analysis.originals import described
from boundctx.events import AnalysisProgress, Done, Failed, Fitted, ReplyDelta, Stage, ToolCall, ToolResult
from boundctx.providers.base import Sampling
from boundctx.serve.http import ApiError, client_closed, read_json
from boundctx.serve.http import json_response as _json
from boundctx.serve.replies import ReplyRun
from boundctx.serve.requests import ChatCompletionRequest, parse_chat_request
from boundctx.serve.service import ReplyService, failure_code
from boundctx.serve.streaming import EventStream, ProgressGate, wait_for_disconnect
from boundctx.serve.wire import DONE, Chunks, error_body, frame

__all__ = ["openai_routes"]

#: What each engine ending is called on the wire (OpenAI's finish reasons).
_FINISH = {"stop": "stop", "length": "length", "tool_calls": "tool_calls", "repetition": "stop",
           "cancelled": "stop"}


def openai_routes(service: ReplyService) -> list:
    """The routes above, run by ``service``."""
    from starlette.routing import Route

    async def health(request):
        return _json(200, {"status": "ok"})

    async def models(request):
        return _json(200, {"object": "list", "data": [
            {"id": service.model_id, "object": "model", "created": service.created, "owned_by": "boundctx",
             "meta": service.model_meta()}]})

    async def chat_completions(request):
        req = await read_json(request, service.max_body, parse_chat_request)
        if req.model != service.model_id:
            raise ApiError(404, f"the model {req.model!r} does not exist here; this server serves "
                                f"{service.model_id!r} (GET /v1/models)", "model_not_found", "model")
        chunks = Chunks(service.model_id)
        run, first = await service.begin(req.messages, reply_id=chunks.id,
                                         max_tokens=req.max_completion_tokens or req.max_tokens,
                                         temperature=req.temperature, tools=req.tools, stop=req.stop,
                                         tool_choice=req.tool_choice, parallel_tool_calls=req.parallel_tool_calls,
                                         sampling=_sampling(req), response_schema=req.response_format)
        if req.stream:
            frames = _ChatFrames(chunks, req, service.settings)
            return EventStream(run, first, frames=frames, opening=frame(chunks.role()),
                               on_close=lambda: service.end(chunks.id), **service.stream_settings())
        try:
            return await _complete(request, chunks, run, first)
        finally:
            service.end(chunks.id)

    async def text_completions(request):
        # The legacy text-completion API: clients that fall back to it are told where to
        # go, in the API's error shape, rather than answered as a prompt would not be.
        raise ApiError(404, f"{request.url.path} (text completions) is not served: boundctx serve answers chat "
                            "completions only; send messages to POST /v1/chat/completions", "not_found")

    return [
        Route("/v1/completions", text_completions, methods=["POST"]),
        Route("/completions", text_completions, methods=["POST"]),
        Route("/health", health, methods=["GET"]),
        Route("/v1/health", health, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/models", models, methods=["GET"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/chat/completions", chat_completions, methods=["POST"]),
    ]


def _sampling(req: ChatCompletionRequest) -> Sampling | None:
    """The request's sampling fields (the wire names are Sampling's), None when it set none."""
    sampling = Sampling(**{name: getattr(req, name) for name in Sampling.__struct_fields__})
    return sampling if sampling.given() else None


async def _complete(request, chunks: Chunks, run: ReplyRun, first: Any):
    """The whole reply as one completion object, or the error it ended with."""
    text: list[str] = []
    watcher = asyncio.ensure_future(wait_for_disconnect(request.receive))
    watcher.add_done_callback(lambda _: run.wake())
    events = [first]
    try:
        while True:
            for event in events:
                if event is None:
                    raise ApiError(500, "the reply ended without a result", "internal_error", type="server_error",
                                   headers={"x-should-retry": "false"})
                if isinstance(event, ReplyDelta):
                    text.append(event.text)
                elif isinstance(event, Failed):
                    raise ApiError(500, event.error, failure_code(event), type="server_error",
                                   headers={"x-should-retry": "false"})
                elif isinstance(event, Done):
                    return _json(200, chunks.completion("".join(text), _finish(event), _usage(event),
                                                        [_wire_call(c) for c in event.tool_calls],
                                                        _done_extension(event)))
            events = await run.next_events(None)
            if watcher.done():  # the client went away: stop its reply, not another's
                run.abandon()
                raise client_closed()
    finally:
        watcher.cancel()


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
    if done.cut_prompts:  # the server behind boundctx cut a call's prompt (decision 0043)
        ext["cut_prompts"] = msgspec.to_builtins(done.cut_prompts)
    return ext


def _time_left(remaining_s: float | None) -> str:
    """The reply's estimate of its time left, as the status line says it (the CLI's words)."""
    if remaining_s is None:
        return ""
    return f" · about {max(1, round(remaining_s)):,} s left"


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
        return ext, (f"Reading section {event.section} of {event.sections} (worker {event.worker + 1})"
                     + _time_left(event.remaining_s))
    if isinstance(event, Stage):
        return {"type": "stage", **msgspec.to_builtins(event)}, (
            ("Answering" if event.stage == "answering" else "Rereading the originals") + _time_left(event.remaining_s))
    if isinstance(event, ToolCall):
        if not event.internal:
            return {"type": "tool_call", **msgspec.to_builtins(event)}, None
        said = described(event.arguments)  # "searching earlier messages for 'deploy key'"
        return {"type": "tool_call", **msgspec.to_builtins(event), "said": said}, said[:1].upper() + said[1:]
    if isinstance(event, ToolResult):
        return {"type": "tool_result", "id": event.id, "chars": len(event.content)}, None
    return {"type": type(event).__name__}, None


class _ChatFrames:
    """What each engine event becomes in a streamed chat completion."""

    def __init__(self, chunks: Chunks, req: ChatCompletionRequest, settings: config.Settings) -> None:
        self.chunks = chunks
        self.include_usage = req.stream_options is not None and req.stream_options.include_usage
        self.progress = ProgressGate(settings.serve.progress_max_hz)
        self.openwebui = settings.serve.progress_openwebui
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
            return frame(error_body(event.error, "server_error", failure_code(event))) + DONE, True
        if isinstance(event, AnalysisProgress) and not self.progress.due(event):
            return b"", False
        ext, said = _extension(event)
        ext["reply_id"] = chunks.id
        return frame(chunks.progress(ext, said if self.openwebui else None)), False
