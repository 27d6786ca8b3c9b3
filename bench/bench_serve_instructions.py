#!/usr/bin/env python
"""Instructions the server spends on one request, counted by callgrind: a measure of
``boundctx serve``'s own work per request that two versions of ``serve/`` compare by
without the shared machine's load in the numbers (wall times on a busy 2-core machine
move 30% between runs; instruction counts move well under 1%).

Each case drives the ASGI application in-process (no socket, no uvicorn: what is
counted is the guard, routing, body reading, the reply service, the engine with a
scripted model answering at once, and the wire format) in a child Python under
``valgrind --tool=callgrind``, twice: with N requests and with 2N. The difference over N
is one request's instructions, start-up and imports cancelled out.

Cases: ``models`` (GET /v1/models), ``chat`` (a whole chat completion), ``chat_stream``
(a streamed one, 20 pieces), ``window`` (a session window of 100 messages),
``sessions`` (the list of 20 sessions, each with its title: the first line of its first
question, one bounded read of its first messages),
``not_found`` (an unknown path, the one error handler), ``too_large`` (a body over the
cap, refused from its declared length).

Usage::

    python -m bench.bench_serve_instructions --label after       # about 5 minutes
    python -m bench.bench_serve_instructions --label before --only chat
    # another checkout's package, past this checkout's editable install (-S: no site
    # hooks; its site-packages on PYTHONPATH for the dependencies):
    PYTHONPATH=/tmp/old/pyshell:$(python -c "import site; print(site.getsitepackages()[0])") \
        python -S -m bench.bench_serve_instructions --label before --only window

Results: ``bench/results/serve-instructions.json`` (runs by label; the ratio of
``after`` to ``before`` when both are there).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import pathlib
import tempfile

from bench._harness import ROOT, callgrind_instructions, command_output, labelled_run, run_facts

MODEL = "bench"
CASES = ("models", "chat", "chat_stream", "window", "sessions", "not_found", "too_large")
ASK = {"model": MODEL, "messages": [{"role": "user", "content": "Tell me about the build."}]}


def _app(folder: str):
    from boundctx import config
    from boundctx.providers import ScriptedProvider
    from boundctx.serve import create_app
    from boundctx.transcript.store import Transcript

    with Transcript.open(os.path.join(folder, "s1.jsonl"), create=True) as t:
        if t.message_count == 0:
            for i in range(100):
                t.append({"type": "message", "id": f"m{i}", "message": {
                    "role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " * 20}})
    for k in range(2, 21):  # the list shows 20 sessions
        with Transcript.open(os.path.join(folder, f"s{k}.jsonl"), create=True) as t:
            if t.message_count == 0:
                t.append({"type": "message", "message": {"role": "user", "content": f"Question {k} of the list\nmore"}})
                t.append({"type": "message", "message": {"role": "assistant", "content": "An answer."}})
    pieces = [f"piece {i} " for i in range(20)]
    settings = config.load(env={}, overrides={"serve.max_body_bytes": 64 * 1024, "serve.sse_ping_seconds": 0})
    return create_app(ScriptedProvider(lambda request: pieces), settings=settings, model_id=MODEL,
                      host="127.0.0.1", sessions_dir=folder)


def _request(case: str) -> tuple[str, str, bytes, list[tuple[bytes, bytes]]]:
    json_type = [(b"content-type", b"application/json")]
    if case == "models":
        return "GET", "/v1/models", b"", []
    if case == "chat":
        return "POST", "/v1/chat/completions", json.dumps(ASK).encode(), json_type
    if case == "chat_stream":
        return "POST", "/v1/chat/completions", json.dumps({**ASK, "stream": True}).encode(), json_type
    if case == "window":
        return "GET", "/boundctx/v1/sessions/s1/messages", b"", []
    if case == "sessions":
        return "GET", "/boundctx/v1/sessions", b"", []
    if case == "not_found":
        return "GET", "/nope", b"", []
    if case == "too_large":
        return "POST", "/v1/chat/completions", b"", [*json_type, (b"content-length", b"1000000")]
    raise ValueError(case)


async def _one(app, case: str) -> int:
    """One request through the application; its status."""
    method, path, body, headers = _request(case)
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(b"host", b"127.0.0.1:8000"), *headers], "client": ("127.0.0.1", 5000),
             "server": ("127.0.0.1", 8000)}
    done = asyncio.Event()
    sent_body = False
    status = 0

    async def receive():
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message):
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body" and not message.get("more_body", False):
            done.set()

    await app(scope, receive, send)
    return status


def child(case: str, count: int) -> None:
    """Run ``count`` requests of ``case`` (after two to warm up) and print their statuses."""
    with tempfile.TemporaryDirectory() as folder:
        app = _app(folder)

        async def run() -> list[int]:
            for _ in range(2):
                await _one(app, case)
            # What start-up made is frozen out of the collector's reach: a full
            # collection walks every object alive, and whether the N or the 2N child
            # happens to run one more would swamp one request's count.
            gc.collect()
            gc.freeze()
            return [await _one(app, case) for _ in range(count)]

        statuses = asyncio.run(run())
    print(" ".join(sorted({str(s) for s in statuses})))


def counted(case: str, count: int) -> tuple[int, str]:
    total, _, printed = callgrind_instructions("bench.bench_serve_instructions", "--child", case, str(count))
    return total, printed.strip()


EXPECTED = {"models": "200", "chat": "200", "chat_stream": "200", "window": "200", "sessions": "200",
            "not_found": "404", "too_large": "413"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", help="the version's name in the JSON (before, after, ...)")
    parser.add_argument("--requests", type=int, default=20, help="N: the children run N and 2N (default 20)")
    parser.add_argument("--only", action="append", choices=CASES)
    parser.add_argument("--json-out", default=str(ROOT / "bench" / "results" / "serve-instructions.json"))
    parser.add_argument("--child", nargs=2, metavar=("CASE", "COUNT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]))
        return
    if not args.label:
        parser.error("--label is required")
    import boundctx

    # The commit of the package measured (another checkout's, run as the usage says).
    package = pathlib.Path(boundctx.__file__).parent
    run = {"commit": command_output("git", "-C", str(package), "rev-parse", "HEAD"), "package": str(package),
           "facts": run_facts(("starlette", "msgspec", "boundctx")),
           "valgrind": command_output("valgrind", "--version"), "requests": args.requests, "cases": {}}
    for case in args.only or CASES:
        once, said_once = counted(case, args.requests)
        twice, said_twice = counted(case, 2 * args.requests)
        if said_once != EXPECTED[case] or said_twice != EXPECTED[case]:
            raise SystemExit(f"{case}: statuses {said_once!r} / {said_twice!r}, expected {EXPECTED[case]}")
        per_request = (twice - once) // args.requests
        run["cases"][case] = {"instructions_per_request": per_request, "child_n": once, "child_2n": twice}
        print(f"{args.label:>8} {case:<12} {per_request:>12,} instructions a request", flush=True)
    labelled_run(pathlib.Path(args.json_out), args.label, run, measure="instructions_per_request",
                 how=("callgrind instruction counts (Ir, user space, every thread) of a child driving the ASGI "
                      "app in-process: 2N requests minus N, over N; python -m bench.bench_serve_instructions "
                      "--label <v>"))

if __name__ == "__main__":
    main()
