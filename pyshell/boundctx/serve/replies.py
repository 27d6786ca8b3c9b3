"""Replies in flight: admission, turns, the engine's thread, and the bridge to the loop.

* **Admission** (:class:`Slots`): at most ``serve.active_replies`` replies generate at
  once and ``serve.queue_depth`` wait, first come first served; past that a request is
  refused at once (503 + ``Retry-After``) instead of joining an unbounded queue.
* **Turns**: a reply takes its turn at its *first model call*, not at admission, so
  fitting (which needs only the counter) runs at once and a prompt that cannot fit is
  refused with a real 400 before the first byte, even while others generate.
* **The engine's thread**: each reply runs ``Engine.reply`` (synchronous, model calls
  included) in a thread of its own, never in the loop's shared pool, which 40 long
  streams would starve.
* **The bridge**: events cross into the loop through a bounded queue; a reader that is
  slow slows its own engine (backpressure), one that is gone cancels it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from boundctx.providers.base import ChunkStream, Finish, Provider

__all__ = ["Busy", "GatedProvider", "ReplyRun", "Slots"]


class Busy(Exception):
    """Every turn and every place in the queue is taken."""


class Slots:
    """Turns to generate, handed out in arrival order."""

    def __init__(self, active: int, queue_depth: int) -> None:
        self.active_limit = active
        self.queue_depth = queue_depth
        self._cond = threading.Condition()
        self._active = 0
        self._waiting: deque[Ticket] = deque()

    def admit(self) -> "Ticket":
        """A place in the queue, or :class:`Busy`."""
        with self._cond:
            if self._active + len(self._waiting) >= self.active_limit + self.queue_depth:
                raise Busy()
            ticket = Ticket(self)
            self._waiting.append(ticket)
            return ticket

    @property
    def in_use(self) -> tuple[int, int]:
        """(generating, waiting)."""
        with self._cond:
            return self._active, len(self._waiting)


class Ticket:
    """One reply's place: waiting, then holding a turn, then released."""

    def __init__(self, slots: Slots) -> None:
        self._slots = slots
        self.held = False
        self.released = False

    def wait(self, cancel: threading.Event | _Either) -> bool:
        """Block until it is this reply's turn (True) or it is cancelled (False)."""
        s = self._slots
        with s._cond:
            while not self.held:
                if self.released or cancel.is_set():
                    return False
                if s._waiting and s._waiting[0] is self and s._active < s.active_limit:
                    s._waiting.popleft()
                    s._active += 1
                    self.held = True
                    s._cond.notify_all()
                    break
                s._cond.wait(0.05)  # re-checks the cancel token even if nobody notifies
        return True

    def release(self) -> None:
        s = self._slots
        with s._cond:
            if self.released:
                return
            self.released = True
            if self.held:
                s._active -= 1
            else:
                try:
                    s._waiting.remove(self)
                except ValueError:
                    pass
            s._cond.notify_all()


class _Either:
    """A cancel token set when either of two is (providers only ask ``is_set()``)."""

    __slots__ = ("_first", "_second")

    def __init__(self, first: Any, second: Any) -> None:
        self._first, self._second = first, second

    def is_set(self) -> bool:
        return self._first.is_set() or self._second.is_set()


class GatedProvider(Provider):
    """``provider`` for one reply: its first model call waits for the reply's turn, and
    every call stops when the reply is cancelled (the client left, or asked) as well as
    when its caller's own cancel token says so."""

    def __init__(self, provider: Provider, ticket: Ticket, cancel: threading.Event) -> None:
        self.inner = provider
        for attribute in Provider.DESCRIPTION:  # the gate is the provider, as the engine sees it
            setattr(self, attribute, getattr(provider, attribute))
        self._ticket = ticket
        self._cancel = cancel

    def count_prompt(self, messages, *, tools=None) -> int:
        return self.inner.count_prompt(messages, tools=tools)

    def reusable_prefix(self, messages, *, tools=None) -> int | None:
        return self.inner.reusable_prefix(messages, tools=tools)

    def check_schema(self, schema) -> None:
        self.inner.check_schema(schema)

    def stream(self, request, *, cancel=None, timeout_s=None) -> ChunkStream:
        # Every model call of the reply comes here (stream_chat builds the request and
        # calls this): the first waits for the reply's turn. A caller with a token of its
        # own (understanding's calls carry none, or their own) is still stopped by the
        # reply's, so a reply whose client left does not hold its turn to its bounds.
        either = self._cancel if cancel is None or cancel is self._cancel else _Either(self._cancel, cancel)
        if either.is_set() or (not self._ticket.held and not self._ticket.wait(either)):
            return _cancelled()  # a generator as every stream is: its reader may close it
        return self.inner.stream(request, cancel=either, timeout_s=timeout_s)

    @contextlib.contextmanager
    def turn(self, *, timeout_s=None) -> Iterator[None]:
        # The reply's turn first, then the model's own lock (the same order as a call).
        if not self._ticket.held and not self._ticket.wait(self._cancel):
            yield  # cancelled: the call inside answers Finish("cancelled")
            return
        with self.inner.turn(timeout_s=timeout_s):
            yield

    def _stream(self, request, *, cancel, timeout_s):  # pragma: no cover - stream() is the entry
        raise NotImplementedError


def _cancelled() -> ChunkStream:
    yield Finish("cancelled")


_END = object()


def _expire(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(False)


class ReplyRun:
    """``produce()`` (an iterator of events) run in its own thread, its events read
    with ``await next_event(timeout)``.

    Parameters
    ----------
    produce : callable
        Returns the iterator to run (called in the thread).
    cancel : threading.Event
        Set by :meth:`abandon`; the engine stops at its next check.
    loop : asyncio.AbstractEventLoop
    depth : int
        Events in flight between the thread and the loop.
    """

    def __init__(self, produce: Callable[[], Iterator[Any]], cancel: threading.Event,
                 loop: asyncio.AbstractEventLoop, *, depth: int = 64, on_end: Callable[[], None] | None = None) -> None:
        self._produce = produce
        self.cancel = cancel
        self._loop = loop
        # The events handed over and not read yet, and the reader's wait for more: a
        # plain future, not a Task or asyncio.Queue per event. Each event's handover
        # wakes the loop, and the engine's thread waits for the interpreter lock for as
        # long as the loop then runs, so the loop's work per event is the cost per token.
        self._ready: deque[Any] = deque()
        self._waiter: asyncio.Future | None = None
        # Backpressure without a round trip per event: the thread takes a place before
        # it hands an event over, the reader gives places back as it takes events.
        self._places = threading.Semaphore(depth)
        self._abandoned = threading.Event()
        self._on_end = on_end
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="boundctx-reply", daemon=True)
        self._thread.start()

    def _put(self, item: Any) -> None:
        while not self._places.acquire(timeout=0.1):
            if self._abandoned.is_set():  # nobody reads any more: drop, let the engine wind down
                return
        try:
            self._loop.call_soon_threadsafe(self._deliver, item)
        except RuntimeError:  # the loop is closed (server shutting down)
            pass

    def _deliver(self, item: Any) -> None:  # on the loop
        self._ready.append(item)
        self.wake()

    def wake(self) -> None:
        """End the reader's wait now (on the loop): with nothing ready it gets ``[]``,
        so it can look at what else happened (the client left)."""
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(True)

    def _run(self) -> None:
        try:
            for event in self._produce():
                if self._abandoned.is_set():
                    continue  # the engine was cancelled; let it finish its own way
                self._put(event)
        except BaseException as exc:  # reported to the reader, never lost in a thread
            self.error = exc
        finally:
            if self._on_end is not None:
                self._on_end()
            if not self._abandoned.is_set():
                self._put(_END)

    async def _wait(self, timeout: float | None) -> None:
        """Until an event is ready, :meth:`wake` is called, or ``timeout`` seconds pass
        (``TimeoutError``)."""
        if self._ready:
            return
        waiter = self._waiter = self._loop.create_future()
        timer = self._loop.call_later(timeout, _expire, waiter) if timeout else None
        try:
            woken = await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()
        if not woken:
            raise asyncio.TimeoutError()

    async def next_events(self, timeout: float | None) -> list[Any]:
        """The events ready now, waiting up to ``timeout`` seconds for one (else
        ``TimeoutError``: a ping is due); ``[]`` when woken with none; a ``None`` in the
        list ends the run. Taking all that are ready lets a slow moment send them in one
        write."""
        await self._wait(timeout)
        items = list(self._ready)
        self._ready.clear()
        for _ in items:
            self._places.release()
        return [None if i is _END else i for i in items]

    async def next_event(self, timeout: float | None) -> Any:
        """One event (the first of a reply is read alone, to decide the status)."""
        while not self._ready:
            await self._wait(timeout)
        item = self._ready.popleft()
        self._places.release()
        return None if item is _END else item

    def abandon(self) -> None:
        """The reader is gone: cancel the reply and stop handing events over."""
        self.cancel.set()
        self._abandoned.set()

    def join(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()
