"""Servers on loopback for tests: llama-cpp-python's OpenAI-compatible server running
the embedded model, and a scripted HTTP server for exact replies and failures."""

from __future__ import annotations

import contextlib
import http.server
import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
import time

import httpx

SERVER_EXTRA = ("fastapi", "uvicorn", "sse_starlette", "starlette_context", "pydantic_settings")


def missing_server_extra() -> list[str]:
    return [m for m in SERVER_EXTRA if importlib.util.find_spec(m) is None]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# `python -m llama_cpp.server`, with its models loaded as boundctx loads them: on an
# AMX host without llama.cpp's extra buffer types, which crash there (decision 0013).
# The server has no option for it; it creates models through `llama_cpp.Llama`.
_SERVER_ON_ANY_HOST = """
import sys
import llama_cpp
from boundctx.providers import local

class Llama(local._llama_class()):
    def __init__(self, *args, **kwargs):
        decision = local.cpu.decide_extra_buffers("auto", local.cpu.cpu_flags())
        super().__init__(*args, use_extra_bufts=decision.enabled, **kwargs)

llama_cpp.Llama = Llama
sys.argv[0] = "llama_cpp.server"
from llama_cpp.server.__main__ import main
main()
"""


@contextlib.contextmanager
def running_process(argv: list[str], ready_url: str, *, what: str, log_path=None, timeout: float = 120,
                    **popen):
    """``argv`` as a child process until the block ends; yields it once ``ready_url``
    answers 200. Its output goes to ``log_path`` (shown when it fails to start) or
    nowhere. Stopped with SIGTERM, then SIGKILL."""
    log = open(log_path, "wb") if log_path is not None else subprocess.DEVNULL
    try:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, **popen)
    finally:
        if log_path is not None:
            log.close()

    def said() -> str:
        return open(log_path, errors="replace").read()[-2000:] if log_path is not None else ""

    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{what} exited:\n{said()}")
            try:
                if httpx.get(ready_url, timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not become ready in {timeout:g} s:\n{said()}")
            time.sleep(0.05)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@contextlib.contextmanager
def llama_cpp_server(log_path, *, n_ctx: int = 512, extra: tuple[str, ...] = ()):
    """``python -m llama_cpp.server`` on the embedded model; yields its base URL once
    ``/v1/models`` answers, and stops it (by its own pid) afterwards."""
    from boundctx.tokens.llama import default_model_path

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-c", _SERVER_ON_ANY_HOST, "--model", default_model_path(), "--n_ctx", str(n_ctx),
            "--n_threads", "1", "--host", "127.0.0.1", "--port", str(port), *extra]
    with running_process(argv, url + "/v1/models", what="llama_cpp.server", log_path=log_path,
                         env={**os.environ, "PYTHONUNBUFFERED": "1"}):
        yield url


class Scripted(http.server.ThreadingHTTPServer):
    """Answers POST /v1/chat/completions from a list of (status, body or SSE events);
    in a list of events, None drops the connection and a float pauses that long."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.requests = []
        self.headers = []
        super().__init__(("127.0.0.1", 0), _Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(body)
        self.server.headers.append(dict(self.headers))
        status, payload = self.server.answers.pop(0)
        self.send_response(status)
        if isinstance(payload, list):  # SSE events; None = drop the connection there
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for event in payload:
                if isinstance(event, float):  # a pause, seconds: a model that is slow to answer
                    self.wfile.flush()
                    time.sleep(event)
                    continue
                if event is None:
                    self.wfile.flush()
                    self.connection.shutdown(2)
                    return
                self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
            self.wfile.write(b"data: [DONE]\n\n")
        else:
            data = json.dumps(payload).encode()
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)


def delta(text=None, finish=None, **extra):
    d = {"content": text} if text is not None else {}
    d.update(extra)
    return {"choices": [{"index": 0, "delta": d, "finish_reason": finish}]}
