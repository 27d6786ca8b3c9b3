"""A reply's events sent as a server-sent-event stream, whatever each event becomes.

Both streamed routes (``/v1/chat/completions`` and a session's replies) send the same
way and differ only in the bytes an event becomes, so the sending lives here once:

* the headers and a first write go out at once (a client sees the stream open before
  any model work);
* events that are ready together go out in one write;
* a ``: ping`` comment after ``serve.sse_ping_seconds`` without an event keeps proxies
  and clients from timing the stream out;
* a write that takes longer than ``serve.send_timeout_seconds`` (a client that stopped
  reading) or a client that disconnects ends the stream and cancels its reply, never
  another's.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from boundctx.serve.replies import ReplyRun
from boundctx.serve.wire import PING

__all__ = ["EventStream", "ProgressGate", "wait_for_disconnect"]

log = logging.getLogger("boundctx.serve")

#: ``frames(event)`` -> (the bytes it becomes, whether it ends the stream); ``None`` is
#: the end of a run that stopped without a last event.
Frames = Callable[[Any], Awaitable[tuple[bytes, bool]]]


class ProgressGate:
    """Analysis progress coalesced to ``serve.progress_max_hz``: a step that comes too
    soon after the last one sent is skipped (the next supersedes it); the end of an
    analysis is never skipped, and nothing but progress goes through the gate."""

    def __init__(self, max_hz: float) -> None:
        self.min_gap = 1.0 / max_hz
        self._last = -1e9

    def due(self, event: Any) -> bool:
        now = time.monotonic()
        if now - self._last < self.min_gap and getattr(event, "phase", None) != "done":
            return False
        self._last = now
        return True


if sys.version_info >= (3, 11):  # asyncio.timeout: a timer on the running task, no new task per write
    async def _within(seconds: float, awaitable) -> Any:
        async with asyncio.timeout(seconds):
            return await awaitable
else:  # pragma: no cover - Python 3.10
    async def _within(seconds: float, awaitable) -> Any:
        return await asyncio.wait_for(awaitable, seconds)


async def wait_for_disconnect(receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


class EventStream:
    """An ASGI response streaming ``run``'s events, ``first`` (already read) included.

    Parameters
    ----------
    run : ReplyRun
    first : Any
        The run's first event, read by the handler to choose the status.
    frames : async callable
        What one event becomes on the wire (see ``Frames``).
    opening : bytes
        Sent with the headers, before the first event.
    ping_s : float or None
        Seconds without an event before a ping; None never pings.
    send_timeout_s : float
    on_close : callable
        Called once when the stream ends, however it ends.
    """

    def __init__(self, run: ReplyRun, first: Any, *, frames: Frames, opening: bytes, ping_s: float | None,
                 send_timeout_s: float, on_close: Callable[[], None]) -> None:
        self.run = run
        self.first = first
        self.frames = frames
        self.opening = opening
        self.ping_s = ping_s
        self.send_timeout_s = send_timeout_s
        self.on_close = on_close

    async def __call__(self, scope, receive, send) -> None:
        run = self.run
        gone = asyncio.ensure_future(wait_for_disconnect(receive))
        finished = False

        gone.add_done_callback(lambda _: run.wake())

        async def put(data: bytes) -> bool:
            """Send one write; False when the client is gone or stopped reading."""
            if gone.done():
                return False
            try:
                await _within(self.send_timeout_s, send({"type": "http.response.body", "body": data,
                                                         "more_body": True}))
                return True
            except (asyncio.TimeoutError, OSError):
                log.info("boundctx serve: a client stopped reading; its reply is cancelled")
                return False

        try:
            await send({"type": "http.response.start", "status": 200, "headers": [
                (b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache"),
                (b"x-accel-buffering", b"no")]})
            events = [self.first]
            data = self.opening
            while True:
                for event in events:
                    piece, finished = await self.frames(event)
                    data += piece
                    if finished:
                        break
                if not await put(data) or finished:
                    return
                data = b""
                while True:
                    try:
                        events = await run.next_events(self.ping_s)
                    except asyncio.TimeoutError:
                        if not await put(PING):
                            return
                        continue
                    if gone.done():  # woken by the client leaving
                        return
                    if events:
                        break
        finally:
            gone.cancel()
            if not finished:  # the client left (or stopped reading) first: end its reply
                run.abandon()
            self.on_close()
            try:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            except Exception:  # the connection is gone already
                pass
