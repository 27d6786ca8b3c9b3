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
  RSS of the process before and after (they must come back).

Goals (issue 13): p99 first chunk ≤ 50 ms at 64 streams; overhead ≤ 2% of model time.

Usage::

    python bench/bench_serve.py               # about a minute
    python bench/bench_serve.py --streams 16 --requests 100
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pathlib
import statistics
import subprocess
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

from _environment import run_facts  # noqa: E402

MODEL = "bench"
MESSAGES = [{"role": "user", "content": "Tell me about the build."}]


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


async def one_stream(client, url: str) -> dict:
    started = time.perf_counter()
    out = {"status": None, "role_s": None, "first_content_s": None, "total_s": None}
    async with client.stream("POST", url, json={"model": MODEL, "messages": MESSAGES, "stream": True}) as r:
        out["status"] = r.status_code
        if r.status_code != 200:
            await r.aread()
            return out
        async for line in r.aiter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            now = time.perf_counter() - started
            delta = chunk["choices"][0]["delta"] if chunk.get("choices") else {}
            if out["role_s"] is None and delta.get("role"):
                out["role_s"] = now
            if out["first_content_s"] is None and delta.get("content"):
                out["first_content_s"] = now
    out["total_s"] = time.perf_counter() - started
    return out


async def load(url: str, streams: int, requests: int) -> list[dict]:
    import httpx

    limits = httpx.Limits(max_connections=streams, max_keepalive_connections=streams)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        gate = asyncio.Semaphore(streams)

        async def bounded():
            async with gate:
                return await one_stream(client, url)

        return await asyncio.gather(*(bounded() for _ in range(requests)))


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def main() -> int:
    if sys.argv[1:2] == ["--clients-only"]:
        url, streams, requests = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
        print(json.dumps(asyncio.run(load(url, streams, requests))))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--requests", type=int, default=500)
    ap.add_argument("--tokens", type=int, default=40)
    ap.add_argument("--gap-ms", type=float, default=5.0, help="scripted time per token (default 5 ms)")
    ap.add_argument("--json-out", default=str(ROOT / "bench" / "results" / "serve.json"))
    args = ap.parse_args()
    from boundctx import config
    from serve.running import Running
    from boundctx.serve import create_app

    gap = args.gap_ms / 1000
    base = direct(args.tokens, gap, 5)
    settings = config.load(env={}, overrides={"serve.active_replies": args.streams, "serve.queue_depth": args.streams})
    threads_before, rss_before = threading.active_count(), rss_kib()
    server = Running(create_app(provider(args.tokens, gap), settings=settings, model_id=MODEL))
    url = server.url + "/v1/chat/completions"
    single = [asyncio.run(load(url, 1, 1))[0] for _ in range(5)]
    # The concurrent clients run in a process of their own: in this one they would share
    # the server's interpreter lock and be measured as the server's latency.
    child = subprocess.run([sys.executable, __file__, "--clients-only", url, str(args.streams), str(args.requests)],
                           capture_output=True, text=True, check=True, timeout=1800)
    results = json.loads(child.stdout)
    time.sleep(1)
    server.stop()
    time.sleep(0.5)
    threads_after, rss_after = threading.active_count(), rss_kib()
    ok = [r for r in results if r["status"] == 200]
    model_s = args.tokens * gap
    one_total = statistics.median(r["total_s"] for r in single)
    report = {
        "direct": base,
        "serve_one_client": {"role_s": statistics.median(r["role_s"] for r in single),
                             "first_content_s": statistics.median(r["first_content_s"] for r in single),
                             "total_s": one_total,
                             "overhead_share_of_model_time": (one_total - base["total_s"]) / model_s},
        "load": {"streams": args.streams, "requests": args.requests, "answered": len(ok),
                 "busy_503_share": sum(r["status"] == 503 for r in results) / len(results),
                 "role_p50_s": pct([r["role_s"] for r in ok], 0.5), "role_p99_s": pct([r["role_s"] for r in ok], 0.99),
                 "first_content_p50_s": pct([r["first_content_s"] for r in ok], 0.5),
                 "first_content_p99_s": pct([r["first_content_s"] for r in ok], 0.99)},
        "threads": {"before": threads_before, "after": threads_after},
        "rss_kib": {"before": rss_before, "after": rss_after},
        "tokens": args.tokens, "gap_ms": args.gap_ms, "model_time_s": model_s,
        "versions": run_facts(("boundctx", "starlette", "uvicorn", "httpx")),
    }
    pathlib.Path(args.json_out).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
