"""Connections before a request reaches the app: a head that grows without end, heads
that never complete, idle sockets by the hundred (issue 22, findings 4 and 8).

Each is met as a user meets it: a real ``boundctx serve`` process on loopback and raw
sockets; the protocol classes themselves also under a real uvicorn in this process, with
httptools and with h11 (the fallback when httptools is absent).
"""

import contextlib
import json
import os
import pathlib
import resource
import socket
import sys
import threading
import time

import httpx
import pytest

from boundctx import config
from boundctx.providers import ScriptedProvider
from boundctx.serve import connections as connections_module
from boundctx.serve import create_app
from boundctx.serve.connections import Limits, protocol_class

from tests._support.running import Running
from tests._support.servers import delta, free_port, running_process


def _env(tmp_path, settings):
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOUNDCTX_")}
    env["BOUNDCTX_CONFIG"] = str(tmp_path / "no-config.toml")
    env.update({config.KEYS[name].env: str(value) for name, value in settings.items()})
    return env


@contextlib.contextmanager
def boundctx_serve(tmp_path, *flags, settings=(), upstream="http://127.0.0.1:9", nofile=None):
    """``python -m boundctx serve`` on a free loopback port with a remote model at
    ``upstream`` (nothing listens at the default: no test here asks it for a reply);
    yields (url, process) once /health answers."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "boundctx", "serve", "--provider", "remote", "--base-url", upstream,
            "--model", "scripted", "--port", str(port), "--sessions-dir", str(tmp_path / "sessions"), *flags]
    popen = {}
    if nofile is not None:
        popen["preexec_fn"] = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
    with running_process(argv, url + "/health", what="boundctx serve", log_path=tmp_path / "serve.log",
                         env=_env(tmp_path, dict(settings)), timeout=60, **popen) as proc:
        yield url, proc


def _port(url):
    return int(url.rsplit(":", 1)[1])


def _feed_until_answered(port, opening, *, piece, total, gap):
    """Send ``opening``, then ``piece`` after ``piece`` each time ``gap`` seconds pass
    without an answer, up to ``total`` bytes: (bytes of them sent, what the server
    answered before closing)."""
    sent, answer = 0, b""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(opening)
        s.settimeout(gap)
        try:
            while sent < total:
                try:
                    chunk = s.recv(65536)
                except TimeoutError:
                    s.sendall(piece)
                    sent += len(piece)
                    continue
                answer += chunk
                break
            s.settimeout(10)
            while chunk := s.recv(65536):
                answer += chunk
        except (ConnectionResetError, BrokenPipeError, TimeoutError):
            pass
    return sent, answer


def _send_growing_head(port, *, total, piece):
    """One header ``total`` bytes long, sent ``piece`` bytes at a time, each after a look
    for an answer: (bytes of it sent, what the server answered before closing)."""
    return _feed_until_answered(port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Filler: ",
                                piece=b"a" * piece, total=total, gap=0.02)


def _closed(s, timeout):
    """Whether the server closed ``s`` within ``timeout`` seconds (it sends nothing)."""
    s.settimeout(timeout)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _response(data):
    head, _, body = data.partition(b"\r\n\r\n")
    return head.split(b"\r\n")[0], json.loads(body)


def test_a_growing_request_head_gets_431_long_before_it_ends_and_other_clients_are_served(tmp_path):
    with boundctx_serve(tmp_path) as (url, proc):
        waits, stop = [], threading.Event()

        def poll_health():
            with httpx.Client(timeout=30) as client:
                while not stop.is_set():
                    started = time.monotonic()
                    status = client.get(url + "/health").status_code
                    waits.append((status, time.monotonic() - started))

        poller = threading.Thread(target=poll_health)
        poller.start()
        try:
            while not waits and poller.is_alive():
                time.sleep(0.01)
            sent, answer = _send_growing_head(_port(url), total=10 << 20, piece=64 << 10)
            during = len(waits)
            while len(waits) == during and poller.is_alive():
                time.sleep(0.01)
        finally:
            stop.set()
            poller.join(60)
        status_lines = pathlib.Path(f"/proc/{proc.pid}/status").read_text().splitlines()
        rss_kib = int(next(line.split()[1] for line in status_lines if line.startswith("VmHWM")))
    status, body = _response(answer)
    assert status == b"HTTP/1.1 431 Request Header Fields Too Large"
    assert body == {"error": {"message": "the request head is larger than 65536 bytes (serve.max_head_bytes)",
                              "type": "invalid_request_error", "param": None, "code": "request_header_too_large"}}
    assert sent <= 4 * (64 << 10)  # cut off at the cap, not after the 10 MiB
    assert len(waits) > during and {s for s, _ in waits} == {200}  # answered before, during and after
    print(f"\nhead cut off after {sent} bytes sent; /health answered {len(waits)} times, slowest "
          f"{max(w for _, w in waits) * 1000:.1f} ms; server peak RSS {rss_kib / 1024:.0f} MiB")


def test_connections_without_a_complete_head_are_closed_at_the_head_timeout(tmp_path):
    with boundctx_serve(tmp_path, settings={"serve.head_timeout_seconds": 1}) as (url, _):
        opened = time.monotonic()
        silent = [socket.create_connection(("127.0.0.1", _port(url))) for _ in range(3)]
        partial = socket.create_connection(("127.0.0.1", _port(url)))
        partial.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        try:
            assert all(_closed(s, 15) for s in silent)
            closed_after = time.monotonic() - opened
            partial.settimeout(15)
            answer = b""
            while chunk := partial.recv(65536):
                answer += chunk
            # A client that sends its head whole is served as before.
            assert httpx.get(url + "/health", timeout=10).status_code == 200
        finally:
            for s in (*silent, partial):
                s.close()
    assert closed_after >= 0.5  # by the deadline, not at once
    status, body = _response(answer)
    assert status == b"HTTP/1.1 408 Request Timeout" and body["error"]["code"] == "request_timeout"
    assert body["error"]["type"] == "invalid_request_error" and "serve.head_timeout_seconds" in body["error"]["message"]
    print(f"\nidle connections closed after {closed_after:.2f} s (head timeout 1 s)")


def test_a_flood_of_idle_connections_past_the_descriptor_limit_does_not_lock_clients_out(tmp_path):
    # The process may open 256 descriptors; 400 idle sockets would take them all.
    with boundctx_serve(tmp_path, settings={"serve.max_connections": 8, "serve.head_timeout_seconds": 60},
                        nofile=256) as (url, proc):
        before = len(os.listdir(f"/proc/{proc.pid}/fd"))
        flood = [socket.create_connection(("127.0.0.1", _port(url))) for _ in range(400)]
        try:
            started = time.monotonic()
            assert httpx.get(url + "/health", timeout=20).status_code == 200
            answered = time.monotonic() - started
            with httpx.Client(timeout=20) as client:  # and again, on one connection and on new ones
                assert all(client.get(url + "/v1/models").status_code == 200 for _ in range(3))
            assert all(httpx.get(url + "/health", timeout=20).status_code == 200 for _ in range(3))
            open_fds = len(os.listdir(f"/proc/{proc.pid}/fd"))
            still_open = [s for s in flood if not _closed(s, 0.05)]
        finally:
            for s in flood:
                s.close()
    # The server closed the idle ones, oldest first, and holds about as many as allowed.
    assert len(still_open) <= 8 and flood[0] not in still_open
    assert open_fds <= before + 8 + 2
    print(f"\n/health answered in {answered * 1000:.0f} ms behind 400 idle sockets; {len(still_open)} left open; "
          f"server descriptors {before} -> {open_fds}")


def test_a_request_in_progress_is_never_closed_to_make_room(tmp_path, scripted_server):
    upstream = scripted_server((200, [delta("one"), 1.0, delta(" two"), 1.0, delta(" three"), delta(finish="stop")]))
    with boundctx_serve(tmp_path, settings={"serve.max_connections": 4, "serve.head_timeout_seconds": 60},
                        upstream=upstream.url) as (url, _):
        with httpx.Client(timeout=30) as client:
            with client.stream("POST", url + "/v1/chat/completions", json={
                    "model": "scripted", "stream": True, "messages": [{"role": "user", "content": "count"}]}) as r:
                assert r.status_code == 200
                lines = r.iter_lines()
                text, flood = "", []
                for line in lines:
                    if line.startswith("data: {"):
                        text += "".join(c["delta"].get("content") or "" for c in json.loads(line[6:])["choices"])
                        if text and not flood:  # the stream is under way: now flood the server
                            flood = [socket.create_connection(("127.0.0.1", _port(url))) for _ in range(50)]
                    if line == "data: [DONE]":
                        break
        try:
            assert text == "one two three"
            assert sum(_closed(s, 0.05) for s in flood) >= 50 - 4
        finally:
            for s in flood:
                s.close()


# -- the protocol classes under a real uvicorn in this process ----------------------------


@pytest.fixture(params=["httptools", "h11"])
def bounded(request):
    """``bounded(limits)`` -> a real uvicorn serving a scripted app with the bounded
    protocol of the kind the test is for (h11 is what runs where httptools is absent)."""
    started = []

    def start(limits):
        if request.param == "httptools":
            http, extra = protocol_class(limits)
            assert http.__name__ == "BoundedHttpToolsProtocol"
        else:
            http = connections_module._bind(connections_module._h11_class(), limits)
            extra = {"h11_max_incomplete_event_size": limits.max_head_bytes}
        app = create_app(ScriptedProvider(lambda r: "ok"), settings=config.load(env={}), model_id="scripted")
        started.append(Running(app, http=http, ws="none", **extra))
        return started[-1]

    yield start
    for running in started:
        running.stop()


def test_either_protocol_refuses_a_head_past_the_cap_and_serves_one_within_it(bounded):
    server = bounded(Limits(max_head_bytes=8192, head_timeout=30, max_connections=64))
    ok = httpx.get(server.url + "/health", headers={"x-pad": "a" * 7000}, timeout=10)
    assert ok.status_code == 200
    sent, answer = _send_growing_head(server.port, total=1 << 20, piece=4096)
    assert sent < 64 << 10
    status, body = _response(answer)
    assert status == b"HTTP/1.1 431 Request Header Fields Too Large"
    assert body["error"]["code"] == "request_header_too_large" and "8192 bytes" in body["error"]["message"]
    # A body far past the head cap is not a head: it is read as before.
    r = httpx.post(server.url + "/boundctx/v1/count", timeout=30,
                   json={"messages": [{"role": "user", "content": "b" * (1 << 20)}]})
    assert r.status_code == 200 and r.json()["prompt_tokens"] > 1 << 20


def test_either_protocol_closes_a_slow_head_and_keeps_serving(bounded):
    server = bounded(Limits(max_head_bytes=65536, head_timeout=0.5, max_connections=64))
    silent = socket.create_connection(("127.0.0.1", server.port))
    with httpx.Client(timeout=10) as client:  # a kept-alive connection between requests is waiting too
        assert client.get(server.url + "/health").status_code == 200
        try:
            assert _closed(silent, 10)
        finally:
            silent.close()
        assert client.get(server.url + "/health").status_code == 200


def test_either_protocol_makes_room_by_closing_the_longest_waiting_idle_connection(bounded):
    server = bounded(Limits(max_head_bytes=65536, head_timeout=60, max_connections=3))
    first = socket.create_connection(("127.0.0.1", server.port))
    time.sleep(0.1)  # accepted in order
    others = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(2)]
    try:
        assert httpx.get(server.url + "/health", timeout=10).status_code == 200
        assert _closed(first, 5)
        assert not any(_closed(s, 0.1) for s in others)
    finally:
        for s in (first, *others):
            s.close()


def test_uvicorn_internals_that_differ_fall_back_to_h11_and_never_to_no_bounds(monkeypatch):
    from uvicorn.protocols.http import h11_impl, httptools_impl

    limits = Limits(max_head_bytes=65536, head_timeout=10, max_connections=64)
    said = []
    monkeypatch.delattr(httptools_impl.HttpToolsProtocol, "on_headers_complete")
    http, extra = protocol_class(limits, say=said.append)
    assert http.__name__ == "BoundedH11Protocol" and extra == {"h11_max_incomplete_event_size": 65536}
    assert said and "serving with h11" in said[0]
    monkeypatch.delattr(h11_impl.H11Protocol, "handle_events")
    with pytest.raises(RuntimeError, match="not ones boundctx can bound"):
        protocol_class(limits)


def test_the_connection_cap_leaves_descriptors_for_the_server_itself():
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert connections_module.connection_limit(8) == min(8, soft)
    assert connections_module.connection_limit(10 ** 6) <= soft - connections_module.RESERVED_DESCRIPTORS


def _trickle_body(port, *, declared, gap):
    """A POST whose head is whole and whose body comes a byte every ``gap`` seconds:
    (bytes of the body sent, what the server answered, seconds until it answered)."""
    started = time.monotonic()
    sent, answer = _feed_until_answered(
        port, b"POST /boundctx/v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % declared, piece=b" ", total=declared, gap=gap)
    return sent, answer, time.monotonic() - started


def test_a_body_trickled_a_byte_at_a_time_gets_408_and_a_body_sent_at_speed_is_served(tmp_path):
    with boundctx_serve(tmp_path, settings={"serve.head_timeout_seconds": 1}) as (url, _):
        sent, answer, took = _trickle_body(_port(url), declared=10_000, gap=0.2)
        # A body of some MiB, sent as fast as loopback goes, is read as ever; so is one
        # with no body at all.
        assert httpx.post(url + "/boundctx/v1/sessions", json={"id": "fast"}, timeout=30).status_code == 201
        r = httpx.post(url + "/boundctx/v1/sessions/fast/messages", timeout=60,
                       json={"type": "message", "message": {"role": "user", "content": "x" * (4 << 20)}})
        assert r.status_code == 201, r.text[:300]
        assert httpx.get(url + "/health", timeout=10).status_code == 200
    status, body = _response(answer)
    assert status == b"HTTP/1.1 408 Request Timeout", answer[:300]
    assert body["error"]["code"] == "request_timeout" and "serve.head_timeout_seconds" in body["error"]["message"]
    assert sent < 10_000  # cut off long before the body was whole
    print(f"\ntrickled body refused after {sent} bytes, {took:.1f} s")


def test_either_protocol_refuses_a_trickled_body(bounded):
    server = bounded(Limits(max_head_bytes=65536, head_timeout=1, max_connections=64))
    sent, answer, _ = _trickle_body(server.port, declared=10_000, gap=0.2)
    status, body = _response(answer)
    assert status == b"HTTP/1.1 408 Request Timeout" and body["error"]["code"] == "request_timeout"
    assert sent < 10_000
    assert httpx.get(server.url + "/health", timeout=10).status_code == 200
