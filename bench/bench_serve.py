#!/usr/bin/env python
"""boundctx serve under load, against the engine called directly, on loopback.

One run, the scripted provider answering at a fixed token rate (every second not spent
generating is the server's):

* **direct**: ``Engine.reply`` in-process, the same provider and conversation: the
  floor for time to the first token and the time per token;
* **serve, one client**: time to the role chunk and to the first content chunk, and the
  overhead per token over direct;
* **serve, N concurrent streams** (default 64, 500 requests): p50/p99 time to the role
  chunk and to the first content chunk, the share answered 503, and the threads and
  RSS of the process before and after (they must come back);
* the same two runs on uvicorn's fallbacks (asyncio's loop, h11), for what the serve
  extra's uvloop and httptools buy;
* **a long history resent every turn** (default 1,000 messages, the embedded model's
  tokenizer and template, each turn one exchange longer): time to the first content
  chunk through serve and directly, cold and warm.

The clients run in a process of their own, on raw sockets: a full HTTP client parsing
every chunk as JSON cost more CPU than the server and measured itself.

Goals (issue 13): p99 first chunk ≤ 50 ms at 64 streams; overhead ≤ 2% of model time.

Usage::

    python -m bench.bench_serve               # about a minute
    python -m bench.bench_serve --streams 16 --requests 100
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pathlib
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse

from bench._harness import ROOT, percentile, run_facts

MODEL = "bench"
MESSAGES = [{"role": "user", "content": "Tell me about the build."}]
#: A chunk carrying text: its content is not the empty string of a progress chunk.
_TEXT = re.compile(rb'"delta":\{"content":"[^"]')


def rss_kib() -> int:
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def provider(tokens: int, gap_s: float):
    from boundctx.providers import ScriptedProvider

    def respond(request):
        def gen():
            for i in range(tokens):
                time.sleep(gap_s)
                yield f"t{i} "
        return gen()

    return ScriptedProvider(respond, context_window=8192)


def direct(tokens: int, gap_s: float, repeats: int) -> dict:
    from boundctx import config
    from boundctx.analysis import Engine
    from boundctx.events import ReplyDelta

    first, total = [], []
    for _ in range(repeats):
        engine = Engine(provider(tokens, gap_s), settings=config.load(env={}), max_reply_tokens=512)
        started = time.perf_counter()
        t_first = None
        for event in engine.reply(MESSAGES):
            if isinstance(event, ReplyDelta) and t_first is None:
                t_first = time.perf_counter() - started
        total.append(time.perf_counter() - started)
        first.append(t_first)
    return {"first_token_s": statistics.median(first), "total_s": statistics.median(total)}


async def one_stream(host: str, port: int, path: str, messages: list[dict] | None = None) -> dict:
    """One streamed request on a raw socket, timing when the role and the first content
    chunk arrive. A full HTTP client (httpx parsing every line into JSON) costs more CPU
    per chunk than the server does: at 64 streams it saturated its own core and measured
    itself. This one only looks for markers in the bytes as they come."""
    body = json.dumps({"model": MODEL, "messages": messages or MESSAGES, "stream": True}).encode()
    request = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body
    started = time.perf_counter()
    out = {"status": None, "role_s": None, "first_content_s": None, "total_s": None}
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(request)
        seen = b""
        while True:
            data = await reader.read(65536)
            if not data:
                break
            now = time.perf_counter() - started
            seen = seen[-64:] + data  # a marker may straddle two reads
            if out["status"] is None and seen.startswith(b"HTTP/1.1 "):
                out["status"] = int(seen[9:12])
            if out["role_s"] is None and b'"role":"assistant"' in seen:
                out["role_s"] = now
            # Text, not the empty content of a progress chunk ("content":"").
            if out["first_content_s"] is None and _TEXT.search(seen):
                out["first_content_s"] = now
    finally:
        writer.close()
    out["total_s"] = time.perf_counter() - started
    return out


async def load(url: str, streams: int, requests: int, messages: list[dict] | None = None) -> list[dict]:
    parts = urllib.parse.urlsplit(url)
    gate = asyncio.Semaphore(streams)

    async def bounded():
        async with gate:
            return await one_stream(parts.hostname, parts.port, parts.path, messages)

    return await asyncio.gather(*(bounded() for _ in range(requests)))


def clients(url: str, streams: int, requests: int, messages: list[dict] | None = None) -> list[dict]:
    child = subprocess.run([sys.executable, "-m", "bench.bench_serve", "--clients-only", url, str(streams),
                            str(requests)], cwd=ROOT, input=json.dumps(messages or MESSAGES), capture_output=True,
                           text=True, check=True, timeout=1800)
    return json.loads(child.stdout)


def long_history(messages: int, turns: int) -> dict:
    """A front end resending a long conversation every turn, each turn one exchange
    longer: time to the first content chunk through serve and directly, with the
    embedded model's real tokenizer and template (a model that answers at once, so the
    time is fitting and counting). Turn 0 is cold (nothing counted yet)."""
    from boundctx import config
    from boundctx.analysis import Engine
    from boundctx.events import ReplyDelta
    from boundctx.providers.scripted import ScriptedProvider
    from boundctx.serve import create_app
    from boundctx.tokens.llama import LlamaCounter

    from bench._textgen import chat
    from tests._support.running import Running
    settings = config.load(env={}, overrides={"chat.n_ctx": 8192})
    base = chat(messages, seed=messages)

    def turn(k: int) -> list[dict]:
        grown = list(base)
        for i in range(k):
            grown += [{"role": "assistant", "content": f"ok {i}"}, {"role": "user", "content": f"and then? {i}"}]
        return grown

    def counter() -> LlamaCounter:
        made = LlamaCounter()
        made.count_text("warm up")  # the vocabulary loads on first use: not fitting's cost
        made.clear_cache()
        return made

    direct_provider = ScriptedProvider(lambda request: "ok", context_window=8192, counter=counter())
    direct_s = []
    for k in range(turns):
        started = time.perf_counter()
        for event in Engine(direct_provider, settings=settings, max_reply_tokens=512).reply(turn(k)):
            if isinstance(event, ReplyDelta):
                break
        direct_s.append(time.perf_counter() - started)
    served = ScriptedProvider(lambda request: "ok", context_window=8192, counter=counter())
    server = Running(create_app(served, settings=settings, model_id=MODEL))
    try:
        serve_s = [clients(server.url + "/v1/chat/completions", 1, 1, turn(k))[0]["first_content_s"]
                   for k in range(turns)]
    finally:
        server.stop()
    return {"messages": len(base), "turns": turns, "direct_first_content_s": direct_s,
            "serve_first_content_s": serve_s,
            "cold_ratio": serve_s[0] / direct_s[0],
            "warm_ratio": statistics.median(serve_s[1:]) / statistics.median(direct_s[1:])}


def one_client(single: list[dict], base: dict, model_s: float) -> dict:
    total = statistics.median(r["total_s"] for r in single)
    return {"role_s": statistics.median(r["role_s"] for r in single),
            "first_content_s": statistics.median(r["first_content_s"] for r in single),
            "total_s": total, "overhead_share_of_model_time": (total - base["total_s"]) / model_s}


def load_summary(results: list[dict], streams: int, requests: int) -> dict:
    ok = [r for r in results if r["status"] == 200]
    return {"streams": streams, "requests": requests, "answered": len(ok),
            "busy_503_share": sum(r["status"] == 503 for r in results) / len(results),
            "role_p50_s": percentile([r["role_s"] for r in ok], 0.5),
            "role_p99_s": percentile([r["role_s"] for r in ok], 0.99),
            "first_content_p50_s": percentile([r["first_content_s"] for r in ok], 0.5),
            "first_content_p99_s": percentile([r["first_content_s"] for r in ok], 0.99)}


def _stack(running) -> dict:
    """The event loop and HTTP parser uvicorn chose ("auto": uvloop and httptools when
    installed)."""
    config = running.server.config
    return {"loop": "uvloop" if config.loop == "auto" and _importable("uvloop") else config.loop,
            "http": "httptools" if config.http == "auto" and _importable("httptools") else config.http}


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def main() -> int:
    if sys.argv[1:2] == ["--clients-only"]:
        url, streams, requests = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
        print(json.dumps(asyncio.run(load(url, streams, requests, json.loads(sys.stdin.read())))))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--requests", type=int, default=500)
    ap.add_argument("--tokens", type=int, default=40)
    ap.add_argument("--gap-ms", type=float, default=5.0, help="scripted time per token (default 5 ms)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of both stacks (default 3)")
    ap.add_argument("--history", type=int, default=1000,
                    help="messages in the resent conversation (default 1,000; 0 skips that part)")
    ap.add_argument("--json-out", default=str(ROOT / "bench" / "results" / "serve.json"))
    args = ap.parse_args()
    from boundctx import config
    from boundctx.serve import create_app

    from tests._support.running import Running
    gap = args.gap_ms / 1000
    base = direct(args.tokens, gap, 10)
    settings = config.load(env={}, overrides={"serve.active_replies": args.streams, "serve.queue_depth": args.streams})
    threads_before, rss_before = threading.active_count(), rss_kib()
    model_s = args.tokens * gap
    # Each round runs both stacks, alternating which goes first (the machine is shared
    # and noisy; medians over rounds): the serve extra's (uvloop, httptools, what
    # uvicorn's "auto" picks) and uvicorn's fallbacks where those are not installed
    # (asyncio's loop, h11).
    stacks = {"auto": {}, "fallback": {"loop": "asyncio", "http": "h11"}}
    rounds: dict[str, list[dict]] = {name: [] for name in stacks}
    chosen = None
    for r in range(args.rounds):
        for name in (list(stacks) if r % 2 == 0 else list(stacks)[::-1]):
            server = Running(create_app(provider(args.tokens, gap), settings=settings, model_id=MODEL),
                             **stacks[name])
            if name == "auto":
                chosen = _stack(server)
            url = server.url + "/v1/chat/completions"
            # The clients run in a process of their own: in this one they would share
            # the server's interpreter lock and be measured as the server's latency.
            # One client, one connection after another; the first request a warm-up.
            single = clients(url, 1, 11)[1:]
            results = clients(url, args.streams, args.requests)
            server.stop()
            rounds[name].append({"serve_one_client": one_client(single, base, model_s),
                                 "load": load_summary(results, args.streams, args.requests)})
    history = long_history(args.history, 5) if args.history else None
    time.sleep(0.5)
    threads_after, rss_after = threading.active_count(), rss_kib()

    def medians(runs: list[dict]) -> dict:
        return {part: {key: statistics.median(run[part][key] for run in runs) for key in runs[0][part]}
                for part in ("serve_one_client", "load")}

    report = {
        "direct": base,
        "rounds": args.rounds,
        "stack": {**chosen, **medians(rounds["auto"])},
        "fallback_stack": {**{k: v for k, v in stacks["fallback"].items()}, **medians(rounds["fallback"])},
        "every_round": rounds,
        "long_history": history,
        "threads": {"before": threads_before, "after": threads_after},
        "rss_kib": {"before": rss_before, "after": rss_after},
        "tokens": args.tokens, "gap_ms": args.gap_ms, "model_time_s": model_s,
        "client": "raw asyncio sockets, markers found in the bytes (no JSON parsing)",
        "versions": run_facts(("boundctx", "starlette", "uvicorn", "uvloop", "httptools")),
    }
    pathlib.Path(args.json_out).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
