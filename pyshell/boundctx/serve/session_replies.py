"""Replies on a session: the engine's typed events as a named event stream, and the
exchange written to the session only once the answer is complete.

Route::

    POST /boundctx/v1/sessions/{id}/replies   {"content": "...", "history": 50,
                                               "max_tokens": N, "temperature": T,
                                               "stop": ["..."], "save": true}

The reply starts from at most the session's newest ``history`` messages, their start
moving forward half of ``history`` at a time so the turns between keep the prompt's
start (``transcript.chat.history_start``), read whole, newest first, up to a byte
bound (``sessions.history_bytes``; what the bound leaves out is
named in the ``reply`` event's notices), then fitted and analysed as any reply is,
with ``content`` as the new user message; ``stop`` (a string or up to 4) ends the
answer before the first stop string, as on chat completions. The answer is a
``text/event-stream`` of named events, each one's ``data`` the event as the library
encodes it (``msgspec.json.encode(event)``, its ``type`` field equal to the event name),
each numbered by its ``id:`` from 0::

    event: reply             {"id", "session", "notices", "history_messages"}  (first, always)
    event: fitted            what fitting dropped, clipped or sent to analysis
    event: analysis_progress section k of n, worker, phase, elapsed, remaining_s
    event: stage             answering / rereading, elapsed, remaining_s
    event: tool_call         the engine rereading its originals (read_chat_section)
    event: tool_result       the characters it got back
    event: reply_delta       answer text
    event: done              the ending, and whether the exchange was saved
    event: failed            why the reply failed (nothing is saved)

``remaining_s`` is the engine's one estimate of the seconds the whole reply has left
(``boundctx.analysis.time_left``; null when unknown): the page counts it down between
events, as ``boundctx ask`` does on its status line.

The question and the answer are appended (one message line each, in the session's own
style) only after a ``done`` with finish reason ``stop``: an answer cut at its budget,
stopped in a loop, cancelled or failed leaves the session as it was, and ``done`` says
why nothing was saved. ``POST /boundctx/v1/replies/{id}/cancel`` with the id of the
``reply`` event stops it; so does closing the stream.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from boundctx.analysis.originals import described
from boundctx.events import AnalysisProgress, Done, Failed, ReplyDelta, ToolCall
from boundctx.serve.http import ApiError, read_json
from boundctx.serve.requests import parse_session_reply
from boundctx.serve.service import ReplyService
from boundctx.serve.sessions import Sessions
from boundctx.serve.streaming import EventStream, ProgressGate
from boundctx.serve.wire import encode_json

__all__ = ["named_event", "session_reply_routes"]

#: What the end of a reply does with a complete answer: the fields it adds to ``done``.
Finish = Callable[[Done, str], Awaitable[dict[str, Any]]]


def named_event(name: str, data: Any, seq: int) -> bytes:
    """One server-sent event named ``name``, numbered ``seq`` (its ``id:``, counted from 0
    in each reply), its data compact JSON."""
    return b"event: " + name.encode() + b"\nid: " + str(seq).encode() + b"\ndata: " + encode_json(data) + b"\n\n"


def _name(event: Any) -> str:
    return type(event).__struct_config__.tag


class _SessionFrames:
    """What each engine event becomes as a named event. The answer's text is gathered
    for ``finish``, which the route gives (it saves the exchange), and whose fields
    ``done`` carries."""

    def __init__(self, progress_max_hz: float, finish: Finish) -> None:
        self.finish = finish
        self.answer: list[str] = []
        self.seq = 0  # the reply event is 0
        self.progress = ProgressGate(progress_max_hz)

    def _named(self, name: str, data: Any) -> bytes:
        self.seq += 1
        return named_event(name, data, self.seq)

    async def __call__(self, event: Any) -> tuple[bytes, bool]:
        if event is None:
            return self._named("failed", {"type": "failed", "error": "the reply ended without a result",
                                          "kind": "internal_error", "saved": False}), True
        if isinstance(event, ReplyDelta):
            self.answer.append(event.text)
        elif isinstance(event, AnalysisProgress) and not self.progress.due(event):
            return b"", False
        data = msgspec.to_builtins(event)
        if isinstance(event, ToolCall) and event.internal:
            data["said"] = described(event.arguments)  # what a page shows, in the CLI's words
        if isinstance(event, Done):
            data.update(await self.finish(event, "".join(self.answer)))
            return self._named("done", data), True
        if isinstance(event, Failed):
            data["saved"] = False
            return self._named("failed", data), True
        return self._named(_name(event), data), False


def session_reply_routes(service: ReplyService, sessions: Sessions) -> list:
    """The replies route over ``sessions``, run by ``service``."""
    from starlette.routing import Route

    async def reply(request):
        sid = request.path_params["id"]
        req = await read_json(request, service.max_body, parse_session_reply, code="invalid_request")
        # Through Sessions.run, as every session route: a refusal names no server path.
        conversation, style = await sessions.run(lambda: sessions.conversation(sid, req.history, req.save))
        messages = conversation.messages + [{"role": "user", "content": req.content}]
        reply_id = f"reply-{secrets.token_hex(12)}"
        # The session's messages before the history read: searched only if the model asks.
        earlier = sessions.earlier(sid, conversation.start) if conversation.start > 0 else None
        run, first = await service.begin(messages, reply_id=reply_id, max_tokens=req.max_tokens,
                                         temperature=req.temperature, stop=req.stop, earlier=earlier)

        async def save(done: Done, answer: str) -> dict[str, Any]:
            if style is None:
                return {"saved": False, "not_saved": "the request asked not to save (save: false)"}
            if done.finish_reason != "stop":
                return {"saved": False, "not_saved": f"the answer is not complete (finish reason "
                                                     f"{done.finish_reason!r}); the session is as it was"}
            try:
                where = await sessions.run(lambda: sessions.save_exchange(sid, req.content, answer, style,
                                                                          conversation.last_id))
            except ApiError as refused:
                return {"saved": False, "not_saved": f"the exchange could not be appended: {refused}"}
            return {"saved": True, **where}

        frames = _SessionFrames(service.settings.serve.progress_max_hz, save)
        opening = named_event("reply", {"type": "reply", "id": reply_id, "session": sid,
                                        "notices": conversation.notices,
                                        "history_messages": len(conversation.messages)}, 0)
        return EventStream(run, first, frames=frames, opening=opening, on_close=lambda: service.end(reply_id),
                           **service.stream_settings())

    return [Route("/sessions/{id}/replies", reply, methods=["POST"])]
