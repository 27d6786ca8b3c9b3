"""Connections before the app sees them: a bounded request head, a deadline for it, and
a bounded number of open connections.

uvicorn runs the app, but what happens on a connection before a request head is complete
is uvicorn's: with httptools nothing bounds a head's size (the parser accumulates a long
header on the event loop, so one connection can stall every client and make the process
hold whatever it sends), nothing bounds how long a head may take, and nothing bounds how
many connections may sit open (idle sockets pile up until descriptors run out). Each
bound here is one a connection meets before the app runs:

* ``serve.max_head_bytes``: the bytes of one request head. Past it the connection gets
  431 in the API's error shape and is closed. Counted exactly from the start of a
  connection and from the end of each request; the next head's first bytes that arrive
  in the same read as the end of a request are not counted (one read, at most 256 KiB).
* ``serve.head_timeout_seconds``: the time a connection has to send a complete head,
  from when it opens or its previous response is complete. Then it is closed, with 408
  if part of a head had arrived.
* a request's body, once its head is complete, must keep coming: at least
  :data:`MIN_BODY_RATE` bytes a second on average after ``serve.head_timeout_seconds``
  of grace. A body trickled a byte at a time would otherwise hold its connection, which
  counts as a request in progress and is never evicted, for as long as the client
  likes. Past it the connection gets 408 and is closed.
* ``serve.max_connections`` (lowered to what ``RLIMIT_NOFILE`` leaves, with a reserve for
  the server's own files): past it, a new connection closes the one that has waited
  longest for a request without one in progress, so a flood of idle sockets cannot lock
  real clients out; only when every connection has a request in progress is the new
  one closed.

The bounds live in a subclass of uvicorn's protocol (:func:`protocol_class`), written
against uvicorn's internals and checked against them before it is used
(:func:`_fits`): httptools' protocol when httptools is installed and fits, else h11's
with its own ``h11_max_incomplete_event_size`` as the head cap; when neither fits,
the server refuses to start rather than run without the bounds. :func:`run_server` is
the one way ``boundctx serve`` starts uvicorn.
"""

from __future__ import annotations

import asyncio
import collections
import os
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from boundctx import config
from boundctx.serve.wire import error_body

__all__ = ["Limits", "connection_limit", "listening_socket", "protocol_class", "run_server"]

#: Descriptors kept free beside the connections: the listening socket, the model and
#: transcript files, lock files, connections to a remote model server.
RESERVED_DESCRIPTORS = 64
#: How long a refused connection stays open after its 431 or 408, so that closing it does
#: not reset the connection before the client has read why.
LINGER_SECONDS = 1.0

#: The slowest a request body may come, on average, once its grace
#: (``serve.head_timeout_seconds``) is spent: 1 MiB in a minute, far below any real link.
MIN_BODY_RATE = 16 * 1024

_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large"}


class Limits(msgspec.Struct, frozen=True):
    """What a connection may do before its request reaches the app."""

    max_head_bytes: int
    head_timeout: float
    max_connections: int

    @classmethod
    def from_settings(cls, settings: config.Settings, *, max_connections: int | None = None) -> Limits:
        serve = settings.serve
        return cls(serve.max_head_bytes, serve.head_timeout_seconds,
                   max_connections if max_connections is not None else serve.max_connections)


def connection_limit(setting: int) -> int:
    """``setting``, lowered to what the soft ``RLIMIT_NOFILE`` leaves beside the
    descriptors open now and :data:`RESERVED_DESCRIPTORS` (at least 1)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows has no descriptor limit to derive from
        return setting
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return setting
    try:
        in_use = len(os.listdir("/proc/self/fd"))
    except OSError:  # no /proc: count nothing, the reserve still applies
        in_use = 0
    return max(1, min(setting, soft - in_use - RESERVED_DESCRIPTORS))


class _Open:
    """A server's open connections, the one that has waited longest for a request first."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.order: collections.OrderedDict[Any, None] = collections.OrderedDict()

    def waiting(self, conn) -> None:
        """``conn`` opened, or finished a response, and waits for a request."""
        self.order[conn] = None
        self.order.move_to_end(conn)

    def first(self, conn) -> None:
        """``conn`` is being closed: the first to go if room is needed."""
        if conn in self.order:
            self.order.move_to_end(conn, last=False)

    def discard(self, conn) -> None:
        self.order.pop(conn, None)

    def make_room(self, newcomer) -> None:
        if len(self.order) <= self.limit:
            return
        victim = next((c for c in self.order if c is not newcomer and c._waiting()), newcomer)
        self.discard(victim)
        victim._drop()


if TYPE_CHECKING:
    class _UvicornHttp(asyncio.Protocol):
        """What :func:`_fits` checks a uvicorn HTTP protocol has, as a type checker sees
        it (at run time the real protocol comes after :class:`_Bounded` in the bases)."""

        transport: asyncio.Transport
        loop: asyncio.AbstractEventLoop
        cycle: Any
        server_state: Any

        def on_response_complete(self) -> None: ...
else:
    _UvicornHttp = object


class _Bounded(_UvicornHttp):
    """The bounds, mixed into a uvicorn HTTP protocol. The subclass says when a head is
    complete (:meth:`_head_complete`) and whether part of one has arrived
    (:meth:`_head_started`)."""

    limits: Limits
    open: _Open

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._body_started_at = 0.0
        self._body_bytes: int | None = None  # bytes of the body being received; None outside one
        self._refused = False

    # asyncio.Protocol

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self.open.waiting(self)
        self._arm_head_timer()
        self.open.make_room(self)

    def connection_lost(self, exc) -> None:
        self.open.discard(self)
        self._cancel_head_timer()
        self._body_ended()
        super().connection_lost(exc)

    # uvicorn's callback when a response has been sent whole

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and not self._refused and self._waiting():
            self.open.waiting(self)
            self._arm_head_timer()

    # the bounds

    def _waiting(self) -> bool:
        """No request in progress: nothing of a head yet, part of one, or between requests."""
        return self.cycle is None or self.cycle.response_complete

    def _head_complete(self) -> None:
        self._cancel_head_timer()
        self._body_started_at, self._body_bytes = self.loop.time(), 0
        self._arm_body_timer(0)

    def _body_received(self, n: int) -> None:
        if self._body_bytes is not None:
            self._body_bytes += n
            self._arm_body_timer(self._body_bytes)

    def _body_ended(self) -> None:
        self._body_bytes = None
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _arm_body_timer(self, received: int) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
        deadline = self._body_started_at + self.limits.head_timeout + received / MIN_BODY_RATE
        self._body_timer = self.loop.call_at(deadline, self._body_timed_out)

    def _body_timed_out(self) -> None:
        self._body_timer = None
        if self._body_bytes is None or self.transport.is_closing() or self._refused:
            return
        message = (f"the request body came slower than {MIN_BODY_RATE // 1024} KiB a second after "
                   f"{self.limits.head_timeout:g} s (serve.head_timeout_seconds); send it whole")
        cycle = self.cycle
        if cycle is not None and not cycle.response_started:
            # The app is still reading the body: nothing of a response is on the wire, so
            # the 408 goes out in its place (what the app sends later goes nowhere).
            self._refused = True
            self._write_refusal(408, "request_timeout", message)
        else:
            self.transport.close()

    def _head_started(self) -> bool:
        raise NotImplementedError

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(self.limits.head_timeout, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or self._refused or not self._waiting():
            return
        if self._head_started():
            self._refuse(408, "request_timeout", f"the request head did not arrive within "
                                                 f"{self.limits.head_timeout:g} s (serve.head_timeout_seconds)")
        else:
            self.transport.close()

    def _refuse(self, status: int, code: str, message: str) -> None:
        """Answer ``status`` and close, unless a response is under way on this connection
        (a pipelined head): then there is no place for an answer, only the close."""
        self._refused = True
        self._cancel_head_timer()
        if not self._waiting():
            self.open.first(self)
            self.transport.close()
            return
        self._write_refusal(status, code, message)

    def _write_refusal(self, status: int, code: str, message: str) -> None:
        """Write ``status`` with its error body, then close (see below)."""
        self.open.first(self)
        self._body_ended()
        body = msgspec.json.encode(error_body(message, "invalid_request_error", code))
        head = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS[status])]
        head += [name + b": " + value + b"\r\n" for name, value in self.server_state.default_headers]
        head.append(b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % len(body))
        self.transport.write(b"".join(head) + body)
        # Closing now, with what the client sent still unread, would reset the connection,
        # and a reset can discard the answer before the client reads it: end the writing
        # side, stop reading (what more is sent waits in the socket buffers, bounded), and
        # close a moment later.
        if self.transport.can_write_eof():
            self.transport.write_eof()
            self.transport.pause_reading()
            self.loop.call_later(LINGER_SECONDS, self.transport.close)
        else:
            self.transport.close()

    def _drop(self) -> None:
        """Closed to make room for a new connection."""
        self._cancel_head_timer()
        if self.transport.get_write_buffer_size():
            self.transport.abort()  # a client that does not read holds no descriptor
        else:
            self.transport.close()


def _httptools_class():
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class BoundedHttpToolsProtocol(_Bounded, HttpToolsProtocol):
        """uvicorn's httptools protocol with a head of at most ``limits.max_head_bytes``."""

        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            # Bytes of the head being received; None from a head's end to its message's end.
            self._head_bytes: int | None = 0

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return
            cap = self.limits.max_head_bytes
            while self._head_bytes is not None and len(data) > cap - self._head_bytes:
                # More than the head may still have: feed only that much, and see whether
                # the head ended inside it.
                room = cap - self._head_bytes
                part, data = data[:room], data[room:]
                self._head_bytes = cap
                super().data_received(part)
                if self.transport.is_closing():
                    return
                if self._head_bytes == cap:
                    self._refuse(431, "request_header_too_large",
                                 f"the request head is larger than {cap} bytes (serve.max_head_bytes)")
                    return
            if self._head_bytes is not None:
                self._head_bytes += len(data)
            super().data_received(data)

        def on_headers_complete(self) -> None:
            self._head_bytes = None
            self._head_complete()
            super().on_headers_complete()

        def on_body(self, body: bytes) -> None:
            self._body_received(len(body))
            super().on_body(body)

        def on_message_complete(self) -> None:
            self._body_ended()
            super().on_message_complete()
            self._head_bytes = 0

        def _head_started(self) -> bool:
            return bool(self._head_bytes)

    return BoundedHttpToolsProtocol


def _h11_class():
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class BoundedH11Protocol(_Bounded, H11Protocol):
        """uvicorn's h11 protocol; h11 caps the head itself (``h11_max_incomplete_event_size``,
        see :func:`protocol_class`)."""

        def data_received(self, data: bytes) -> None:
            if not self._refused:
                super().data_received(data)
                if self.conn.their_state is h11.SEND_BODY:
                    self._body_received(len(data))
                else:
                    self._body_ended()

        def send_400_response(self, msg: str) -> None:
            # uvicorn answers every error h11 reports with 400, a head past h11's cap too.
            cap = self.limits.max_head_bytes
            if self.conn.their_state is h11.ERROR and len(self.conn.trailing_data[0]) > cap:
                self._refuse(431, "request_header_too_large",
                             f"the request head is larger than {cap} bytes (serve.max_head_bytes)")
            else:
                super().send_400_response(msg)

        def handle_events(self) -> None:
            before = self.cycle
            super().handle_events()
            if self.cycle is not before:
                self._head_complete()

        def _head_started(self) -> bool:
            return bool(self.conn.trailing_data[0])

    return BoundedH11Protocol


def _fits(base: type, module) -> bool:
    """Whether ``base`` (a uvicorn protocol) has what the subclasses rely on: the methods
    they extend, the per-connection ``cycle``, ``transport``, ``loop`` and
    ``server_state`` its constructor sets, and a cycle that says when its response is
    complete."""
    cycle = getattr(module, "RequestResponseCycle", None)
    init = getattr(getattr(base, "__init__", None), "__code__", None)
    return (all(callable(getattr(base, name, None)) for name in (
                "connection_made", "connection_lost", "data_received", "on_response_complete"))
            and init is not None and {"cycle", "loop", "server_state", "transport"} <= set(init.co_names)
            and cycle is not None
            and {"response_complete", "response_started"} <= set(cycle.__init__.__code__.co_names))


def protocol_class(limits: Limits, *, say: Callable[[str], None] | None = None) -> tuple[type, dict[str, Any]]:
    """The bounded protocol class for one server, and the extra ``uvicorn.Config``
    arguments it needs.

    Raises
    ------
    RuntimeError
        When neither of uvicorn's protocols is one these bounds are written against.
    """
    import uvicorn

    httptools_impl = _httptools_impl()
    if httptools_impl is not None:
        if _fits(httptools_impl.HttpToolsProtocol, httptools_impl) and all(
                callable(getattr(httptools_impl.HttpToolsProtocol, name, None))
                for name in ("on_headers_complete", "on_body", "on_message_complete")):
            return _bind(_httptools_class(), limits), {}
        if say is not None:
            say(f"uvicorn {uvicorn.__version__}'s httptools protocol is not the one boundctx bounds request heads "
                f"in; serving with h11 instead")
    from uvicorn.protocols.http import h11_impl

    if _fits(h11_impl.H11Protocol, h11_impl) and callable(getattr(h11_impl.H11Protocol, "handle_events", None)):
        return _bind(_h11_class(), limits), {"h11_max_incomplete_event_size": limits.max_head_bytes}
    raise RuntimeError(f"uvicorn {uvicorn.__version__}'s HTTP protocols are not ones boundctx can bound (request "
                       f"head size and time, open connections); install a uvicorn boundctx supports")


def _httptools_impl() -> types.ModuleType | None:
    """uvicorn's httptools protocol module, when httptools is installed."""
    try:
        import httptools  # noqa: F401
        from uvicorn.protocols.http import httptools_impl
    except ImportError:
        return None
    return httptools_impl


def _bind(cls: type, limits: Limits) -> type:
    """``cls`` with this server's limits and its own table of open connections."""
    return type(cls.__name__, (cls,), {"limits": limits, "open": _Open(limits.max_connections)})


def listening_socket(host: str, port: int):
    """A socket bound to ``host``:``port`` (an IPv6 address for a host with a colon), as
    uvicorn binds one, handed to uvicorn so the address is taken before anything says
    the server is up.

    Raises
    ------
    OSError
        The address cannot be bound (in use, not this machine's, a privileged port), its
        ``strerror`` naming the address.
    """
    import socket

    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        where = f"[{host}]" if ":" in host else host
        raise OSError(exc.errno, f"cannot listen on {where}:{port}: {exc.strerror or exc}") from exc
    sock.set_inheritable(True)
    return sock


def run_server(app, host: str, port: int, *, settings: config.Settings,
               say: Callable[[str], None] | None = None,
               banner: str | Callable[[int], str] | None = None) -> bool:
    """Serve ``app`` on ``host``:``port`` with uvicorn and the connection bounds of
    ``settings`` until stopped (Ctrl-C, SIGTERM).

    Parameters
    ----------
    say : callable, optional
        Gets what the operator should know: a bound lowered, a protocol fallen back, and
        ``banner`` once the server is ready to start.
    banner : str or callable, optional
        Said once the address is bound and the bounds are in place, before uvicorn
        starts; a callable gets the port bound (the free one chosen for port 0).

    Returns
    -------
    bool
        False when uvicorn did not start (it has logged why).

    Raises
    ------
    OSError
        The address cannot be bound (a port in use): nothing was said or served.
    RuntimeError
        When this uvicorn cannot be run with the bounds (before anything is served).
    """
    import uvicorn

    setting = settings.serve.max_connections
    limit = connection_limit(setting)
    if limit < setting and say is not None:
        say(f"serve.max_connections = {setting} lowered to {limit}: the open-file limit (ulimit -n) leaves no more "
            f"beside the server's own files")
    http, extra = protocol_class(Limits.from_settings(settings, max_connections=limit), say=say)
    # ws="none": boundctx has no WebSocket routes, and an upgrade would hand the
    # connection to a protocol without these bounds.
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off",
                                           http=http, ws="none", **extra))
    # Bound here, not by uvicorn: a port in use is then an error before the banner, not
    # a banner followed by uvicorn's own log line and exit.
    sock = listening_socket(host, port)
    try:
        if banner is not None and say is not None:
            say(banner(sock.getsockname()[1]) if callable(banner) else banner)
        try:
            server.run(sockets=[sock])
        except KeyboardInterrupt:
            pass
    finally:
        sock.close()
    return bool(server.started)
