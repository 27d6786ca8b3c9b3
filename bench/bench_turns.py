"""Turns at the window's edge: what each way of fitting makes the model evaluate.

A conversation of ~60-token user messages and ~60-token assistant replies (fixed texts
from a seed, so every row sees the same conversation) is resent turn after turn on the
embedded model, growing far past its window. Each turn's reply is stopped at its first
token: what is measured is the prompt's evaluation, which is what a long chat costs.

Scenarios, side by side in one run (``--scenarios``):

**fitting**, at each of ``--windows``, on one loaded model:

- **today**: ``chat.low_water = 1``, through ``Engine.reply``: each turn drops the fewest
  old steps that fit, worked out from scratch (the rule before decision 0029).
- **stable**: the default low water, through ``Engine.reply``: a drop goes down to half
  the prompt's limit, and the cut stays while the rest fits (decision 0029).
- **rolling**: the oldest message dropped one at a time until the prompt fits, sent
  straight to the provider (LM Studio's rolling window).

A today or rolling row stops after ``--edge-turns`` turns at the edge: each of them
evaluates the whole window, so more of them repeat the same cost.

**analysed**, at the first window: the stable row with a log pasted (attached as a file,
about twice the window) every ``--paste-every`` turns, read by note-taking workers on the
same model, with the state cache (decision 0030) and without it (``state_cache_mib``
0). The conversation keeps the question and the answer, not the paste (what ``boundctx
ask --transcript --file`` saves).

**serve**, at the first window, through ``boundctx serve`` (a child process, the
``openai`` client streaming): one conversation, then two conversations taking turns,
with the state cache and without it.

Per turn: the prompt's tokens; the tokens llama.cpp decoded (its own counters,
``llama_perf_context``: prompt tokens evaluated, workers' included, in process) and
boundctx's count of the same (the prompt less ``Finish.cached_tokens``, counted under the
model's lock; the only count through serve, where it is the usage's
``prompt_tokens_details.cached_tokens``); the turn's new tokens (what its conversation
grew by); the time to the first token; whether the turn was at the edge (something of the
conversation left out).

Goals (issue 24), as ratios: at the edge, the median time to the first token at most
1.5x the median below the edge; tokens evaluated at most 1.2x the turn's new tokens on
at least 90% of the turns; the turn after an analysed one evaluates at most 1.2x its new
tokens; conversations taking turns on serve likewise on 90% of their turns. The state
cache's memory is reported.

Run: ``python -m bench.bench_turns`` (writes bench/results/turns.json); ``--quick`` for a
short run of every scenario. Each row starts with a reset model.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import random
import statistics
import sys
import tempfile
import threading
import time

from boundctx import config
from boundctx.analysis import Engine
from boundctx.events import AnalysisProgress, Done, Failed, Fitted, ReplyDelta

from bench._harness import ROOT, markdown_table, run_facts

ROWS = ("today", "stable", "rolling")
SCENARIOS = ("fitting", "analysed", "serve")
WORDS = ("the build step ran again after the cache was cleared and the tests passed on the second try but the "
         "deploy job waited for a lock that another pipeline held until its own tests finished").split()
REPLY_TOKENS = 128


def conversation(seed: int, turns: int) -> list[dict]:
    """``turns`` exchanges (user ~60 tokens, assistant ~60 tokens), the last user
    message the question of the last turn."""
    rng = random.Random(seed)

    def words(n: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."

    msgs = []
    for t in range(turns):
        msgs.append({"role": "user", "content": f"Turn {t}: {words(44)} What happened next?"})
        msgs.append({"role": "assistant", "content": words(48)})
    return msgs


def paste(seed: int, tokens: int, counter) -> str:
    """A build log of about ``tokens`` tokens, one failing step in it."""
    rng = random.Random(seed)
    lines, size, k = [], 0, 0
    while size < tokens:
        k += 1
        status = "FAILED id=J%04d" % rng.randrange(10_000) if k == 40 else "ok"
        line = f"step {k}: {' '.join(rng.choice(WORDS) for _ in range(10))} ... {status}"
        lines.append(line)
        size += counter.count_text(line) + 1
    return "\n".join(lines) + "\n"


class LlamaDecodes:
    """Tokens llama.cpp itself decoded in a context, from its performance counters
    (prompt batches and single tokens): what a turn really evaluated, workers included."""

    def __init__(self, provider) -> None:
        self.provider = provider

    def total(self) -> int:
        import llama_cpp

        data = llama_cpp.llama_perf_context(self.provider._model().ctx)
        return int(data.n_p_eval) + int(data.n_eval)


def _first_token(events, cancel: threading.Event, started: float) -> dict:
    """Run a reply's events until its first text, then stop it: what the turn cost."""
    out = {"ttft_s": None, "prompt_tokens": None, "cached_tokens": None, "dropped": 0, "analysed": False,
           "error": None}
    for event in events:
        if isinstance(event, Fitted):
            out["prompt_tokens"], out["dropped"] = event.prompt_tokens, len(event.dropped)
            out["analysed"] = bool(event.analysed)
        elif isinstance(event, AnalysisProgress):
            out["analysed"] = True
        elif isinstance(event, ReplyDelta) and out["ttft_s"] is None:
            out["ttft_s"] = time.perf_counter() - started
            cancel.set()
        elif isinstance(event, Done):
            out["cached_tokens"] = event.usage.get("cached_tokens")
            out["prompt_tokens"] = event.usage.get("prompt_tokens") or out["prompt_tokens"]
        elif isinstance(event, Failed):
            out["error"] = event.error
    return out


def engine_turn(provider, settings, history: list[dict], files=()) -> dict:
    cancel = threading.Event()
    engine = Engine(provider, settings=settings, max_reply_tokens=REPLY_TOKENS)
    started = time.perf_counter()
    return _first_token(engine.reply(history, files=files, cancel=cancel), cancel, started)


def rolling_turn(provider, history: list[dict]) -> dict:
    """LM Studio's rolling window: drop the oldest message until the prompt fits."""
    limit = provider.context_window - REPLY_TOKENS
    kept = list(history)
    started = time.perf_counter()
    while len(kept) > 1 and provider.count_prompt(kept) > limit:
        kept.pop(0)
    cancel = threading.Event()
    out = {"ttft_s": None, "prompt_tokens": provider.count_prompt(kept), "cached_tokens": None,
           "dropped": len(history) - len(kept), "analysed": False, "error": None}
    for chunk in provider.stream_chat(kept, max_tokens=REPLY_TOKENS, temperature=0.2, cancel=cancel):
        if getattr(chunk, "text", None) and out["ttft_s"] is None:
            out["ttft_s"] = time.perf_counter() - started
            cancel.set()
        if hasattr(chunk, "cached_tokens"):
            out["cached_tokens"] = chunk.cached_tokens
    return out


def _settings(window: int, **extra) -> config.Settings:
    return config.load(env={}, overrides={"chat.n_ctx": window, "chat.analysis_workers": 2, **extra})


def _finish(got: dict, t: int, whole: int, previous: int | None, decoded: int | None) -> dict:
    got["turn"] = t
    got["new_tokens"] = whole - previous if previous is not None else whole
    got["counted"] = (got["prompt_tokens"] - got["cached_tokens"]
                      if got["cached_tokens"] is not None and got["prompt_tokens"] is not None else None)
    got["decoded"] = decoded
    # llama.cpp's own count where there is one (in process), else boundctx's.
    got["evaluated"] = decoded if decoded is not None else got["counted"]
    return got


def _say(label: str, got: dict) -> None:
    print(f"{label:<28} turn {got['turn']:>3}: prompt {got['prompt_tokens']!s:>5} evaluated {got['evaluated']!s:>5} "
          f"(counted {got['counted']!s:>5}) new {got['new_tokens']:>4} dropped {got['dropped']:>3}"
          f"{' analysed' if got['analysed'] else ''} ttft {got['ttft_s'] or 0:6.2f} s", flush=True)


def run_row(row: str, provider, window: int, convo: list[dict], edge_turns: int | None = None) -> list[dict]:
    settings = _settings(window, **({"chat.low_water": 1.0} if row == "today" else {}))
    provider._forget_evaluation(provider._model())  # each row starts with nothing held
    if provider.state_cache is not None:
        provider.state_cache.clear()
    llama = LlamaDecodes(provider)
    turns: list[dict] = []
    previous = None
    for t in range(1, len(convo) // 2 + 1):
        history = convo[:2 * t - 1]  # up to this turn's question
        whole = provider.count_prompt(history)
        before = llama.total()
        got = rolling_turn(provider, history) if row == "rolling" else engine_turn(provider, settings, history)
        turns.append(_finish(got, t, whole, previous, llama.total() - before))
        previous = whole
        _say(f"{window} {row}", got)
        if edge_turns is not None and row != "stable" and sum(1 for x in turns if x["dropped"]) >= edge_turns:
            break
    return turns


def run_analysed(provider, window: int, convo: list[dict], every: int, text: str) -> list[dict]:
    """The stable row with ``text`` attached every ``every`` turns (read in sections)."""
    settings = _settings(window, **{"analysis.worker_n_ctx": window, "analysis.notes_max_tokens": 128})
    provider._forget_evaluation(provider._model())
    if provider.state_cache is not None:
        provider.state_cache.clear()
    llama = LlamaDecodes(provider)
    turns: list[dict] = []
    previous = None
    label = f"{window} analysed{'' if provider.state_cache is not None else ' no cache'}"
    for t in range(1, len(convo) // 2 + 1):
        history = convo[:2 * t - 1]
        whole = provider.count_prompt(history)
        files = [("build.log", text)] if t % every == 0 else []
        before = llama.total()
        got = engine_turn(provider, settings, history, files)
        got["pasted"] = bool(files)
        turns.append(_finish(got, t, whole, previous, llama.total() - before))
        previous = whole
        _say(label, got)
    return turns


def prefix_cost(provider, convo: list[dict]) -> dict:
    """What saying the reusable prefix adds to a turn (``Fitted.reused_tokens``: the
    prompt tokenized again and compared with what the model holds), beside an exact count
    of the same prompt, on a prompt that fills the window: medians of 5, in ms."""
    provider.load()
    kept = list(convo)
    while provider.count_prompt(kept) > provider.context_window - REPLY_TOKENS:
        kept = kept[2:]

    def median_ms(fn) -> float:
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            fn()
            times.append(1000 * (time.perf_counter() - t0))
        return statistics.median(times)

    return {"window": provider.context_window, "prompt_tokens": provider.count_prompt(kept),
            "count_ms": median_ms(lambda: provider.count_prompt(kept)),
            "reusable_prefix_ms": median_ms(lambda: provider.reusable_prefix(kept))}


# -- through boundctx serve -------------------------------------------------------------


@contextlib.contextmanager
def served(window: int, cache_mib: int | None):
    """``boundctx serve`` on the embedded model in a child process, until the block ends
    (started and stopped as the serve tests do)."""
    from tests._support import servers
    port = servers.free_port()
    folder = tempfile.mkdtemp(prefix="bench-turns-")
    argv = [sys.executable, "-m", "boundctx", "serve", "--n-ctx", str(window), "--port", str(port),
            "--sessions-dir", folder]
    if cache_mib is not None:
        argv += ["--state-cache-mib", str(cache_mib)]
    url = f"http://127.0.0.1:{port}"
    with servers.running_process(argv, url + "/health", what="boundctx serve", timeout=180,
                                 log_path=os.path.join(folder, "serve.log")) as proc:
        yield url, proc


def _resident_mib(pid: int) -> float | None:
    with contextlib.suppress(OSError):
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return None


def serve_turn(client, model: str, history: list[dict]) -> dict:
    """One streamed reply of one token: the time to it, and the usage the server gave."""
    started = time.perf_counter()
    out = {"ttft_s": None, "prompt_tokens": None, "cached_tokens": None, "dropped": 0, "analysed": False,
           "error": None}
    stream = client.chat.completions.create(model=model, messages=history, max_tokens=1, temperature=0.2,
                                            stream=True, stream_options={"include_usage": True})
    for chunk in stream:
        ext = (chunk.model_extra or {}).get("boundctx") or {}
        if ext.get("type") == "fitted":
            out["dropped"] = len(ext.get("dropped") or [])
        if chunk.choices and chunk.choices[0].delta.content and out["ttft_s"] is None:
            out["ttft_s"] = time.perf_counter() - started
        if chunk.usage is not None:
            out["prompt_tokens"] = chunk.usage.prompt_tokens
            details = chunk.usage.prompt_tokens_details
            out["cached_tokens"] = details.cached_tokens if details is not None else None
    if out["ttft_s"] is None:
        out["ttft_s"] = time.perf_counter() - started
    return out


def run_serve(window: int, convos: list[list[dict]], cache_mib: int | None, label: str, counter) -> dict:
    """The conversations of ``convos`` taking turns on one ``boundctx serve``."""
    import httpx
    import openai

    turns: list[dict] = []
    with served(window, cache_mib) as (url, proc):
        client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=600)
        model = client.models.list().data[0].id
        previous: dict[int, int] = {}
        peak = 0.0
        for t in range(1, len(convos[0]) // 2 + 1):
            for c, convo in enumerate(convos):
                history = convo[:2 * t - 1]
                whole = counter.count_prompt(history)
                got = serve_turn(client, model, history)
                got["conversation"] = c
                turns.append(_finish(got, t, whole, previous.get(c), None))
                previous[c] = whole
                _say(f"{window} {label} [{c}]", got)
            peak = max(peak, _resident_mib(proc.pid) or 0.0)
        meta = httpx.get(url + "/v1/models").json()["data"][0]["meta"]
    return {"turns": turns, "state_cache": meta.get("state_cache"), "peak_resident_mib": peak}


# -- goals --------------------------------------------------------------------------------


def goals(turns: list[dict]) -> dict:
    edge = [t for t in turns if t["dropped"]]
    below = [t for t in turns if not t["dropped"]]
    measured = [t for t in turns if t["evaluated"] is not None]
    cheap = [t for t in measured if t["evaluated"] <= 1.2 * t["new_tokens"]]
    out = {"turns": len(turns), "edge_turns": len(edge),
           "median_ttft_below_s": statistics.median(t["ttft_s"] for t in below) if below else None,
           "median_ttft_edge_s": statistics.median(t["ttft_s"] for t in edge) if edge else None,
           "share_evaluating_new_only": len(cheap) / len(measured) if measured else None,
           "evaluated_total": sum(t["evaluated"] for t in measured),
           "new_total": sum(t["new_tokens"] for t in measured)}
    ratio = (out["median_ttft_edge_s"] / out["median_ttft_below_s"]
             if out["median_ttft_edge_s"] and out["median_ttft_below_s"] else None)
    out["ttft_edge_over_below"] = ratio
    out["ttft_goal_met"] = ratio is not None and ratio <= 1.5
    share = out["share_evaluating_new_only"]
    out["evaluation_goal_met"] = share is not None and share >= 0.9
    return out


def after_analysed(turns: list[dict]) -> dict:
    """The turns right after an analysed one: each must evaluate at most 1.2x its new
    tokens. The analysed turns' own answering call is reported beside them."""
    after = [b for a, b in zip(turns, turns[1:]) if a.get("pasted")]
    pasted = [t for t in turns if t.get("pasted")]
    return {"after": [{"turn": t["turn"], "evaluated": t["evaluated"], "new_tokens": t["new_tokens"]} for t in after],
            "after_met": bool(after) and all(t["evaluated"] is not None and t["evaluated"] <= 1.2 * t["new_tokens"]
                                             for t in after),
            # What llama.cpp decoded in each pasted turn, its workers included: the
            # history evaluated again after them, or not, is the difference with and
            # without the state cache.
            "pasted_decoded": [t["decoded"] for t in pasted],
            "pasted_median_ttft_s": statistics.median(t["ttft_s"] for t in pasted) if pasted else None,
            "failed": [t["turn"] for t in turns if t["error"]]}


def taking_turns(turns: list[dict]) -> dict:
    """Conversations taking turns: from each one's second turn on, evaluated at most 1.2x
    its new tokens on at least 90% of turns."""
    later = [t for t in turns if t["turn"] > 1 and t["evaluated"] is not None]
    cheap = [t for t in later if t["evaluated"] <= 1.2 * t["new_tokens"]]
    share = len(cheap) / len(later) if later else None
    return {"turns": len(turns), "share_evaluating_new_only": share, "goal_met": share is not None and share >= 0.9,
            "median_ttft_s": statistics.median(t["ttft_s"] for t in later) if later else None,
            "evaluated_total": sum(t["evaluated"] for t in later), "new_total": sum(t["new_tokens"] for t in later)}


# -- the run ------------------------------------------------------------------------------


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    ap.add_argument("--windows", type=int, nargs="+", default=[2048, 8192])
    ap.add_argument("--turns", type=int, default=200)
    ap.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS))
    ap.add_argument("--edge-turns", type=int, default=12,
                    help="a today or rolling row stops after this many turns at the edge (0: never)")
    ap.add_argument("--analysed-turns", type=int, default=40)
    ap.add_argument("--paste-every", type=int, default=10)
    ap.add_argument("--serve-turns", type=int, default=30, help="turns of each conversation through serve")
    ap.add_argument("--quick", action="store_true", help="a short run of every scenario (a smoke test)")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--json-out", default=str(ROOT / "bench" / "results" / "turns.json"))
    args = ap.parse_args(argv)
    if args.quick:
        args.windows, args.turns, args.edge_turns = args.windows[:1], 24, 4
        args.analysed_turns, args.paste_every, args.serve_turns = 8, 4, 12
    from boundctx.providers.local import LlamaCppProvider

    report = {"meta": {**vars(args), "reply_tokens": REPLY_TOKENS,
                       "versions": run_facts(("boundctx", "llama_cpp_python"))},
              "runs": [], "analysed": [], "serve": []}
    started = time.perf_counter()
    first = args.windows[0]
    if "fitting" in args.scenarios:
        convo = conversation(args.seed, args.turns)
        for window in args.windows:
            provider = LlamaCppProvider(n_ctx=window)
            report["meta"].setdefault("reusable_prefix_cost", []).append(prefix_cost(provider, convo))
            for row in args.rows:
                turns = run_row(row, provider, window, convo, args.edge_turns or None)
                report["runs"].append({"window": window, "row": row, "goals": goals(turns), "turns": turns})
            provider.close()
    if "analysed" in args.scenarios:
        convo = conversation(args.seed + 1, args.analysed_turns)
        for cache_mib in (None, 0):
            provider = LlamaCppProvider(n_ctx=first, state_cache_mib=cache_mib)
            text = paste(args.seed, 2 * first, provider.counter)
            turns = run_analysed(provider, first, convo, args.paste_every, text)
            report["analysed"].append({"window": first, "state_cache": cache_mib is None,
                                       "state_cache_stats": provider.state_cache.stats() if provider.state_cache
                                       else None, "goals": {**goals(turns), **after_analysed(turns)},
                                       "turns": turns})
            provider.close()
    if "serve" in args.scenarios:
        from boundctx.tokens.llama import LlamaCounter

        counter = LlamaCounter()
        one = conversation(args.seed + 2, 2 * args.serve_turns)
        two = [conversation(args.seed + 3, args.serve_turns), conversation(args.seed + 4, args.serve_turns)]
        for label, convos, cache_mib in (("serve one", [one], None), ("serve taking turns", two, None),
                                         ("serve taking turns, no cache", two, 0)):
            got = run_serve(first, convos, cache_mib, label, counter)
            report["serve"].append({"window": first, "row": label, "conversations": len(convos),
                                    **got,
                                    "goals": {**goals(got["turns"]), "taking_turns": taking_turns(got["turns"])}})
    report["meta"]["wall_s"] = time.perf_counter() - started
    pathlib.Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.json_out).write_text(json.dumps(report, indent=1))
    print_tables(report)
    for cost in report["meta"].get("reusable_prefix_cost", []):
        print(f"window {cost['window']}: a {cost['prompt_tokens']:,}-token prompt counts in {cost['count_ms']:.1f} ms; "
              f"its reusable prefix takes {cost['reusable_prefix_ms']:.1f} ms more")
    print(f"\nwall {report['meta']['wall_s']:.0f} s; [json] {args.json_out}")
    return 0


def _met(flag: bool) -> str:
    return "met" if flag else "not met"


def print_tables(report: dict) -> None:
    if report["runs"]:
        print()
        print(markdown_table(
            ("window", "row", "turns at the edge", "median first token below / at the edge (s)", "ratio",
             "turns evaluating ≤ 1.2x their new tokens", "tokens evaluated / new"),
            [(r["window"], r["row"], f"{r['goals']['edge_turns']}/{r['goals']['turns']}",
              f"{r['goals']['median_ttft_below_s'] or 0:.2f} / {r['goals']['median_ttft_edge_s'] or 0:.2f}",
              f"{r['goals']['ttft_edge_over_below'] or 0:.2f} ({_met(r['goals']['ttft_goal_met'])})",
              f"{100 * (r['goals']['share_evaluating_new_only'] or 0):.0f}% "
              f"({_met(r['goals']['evaluation_goal_met'])})",
              f"{r['goals']['evaluated_total']:,} / {r['goals']['new_total']:,}") for r in report["runs"]]))
    if report["analysed"]:
        print()
        print(markdown_table(
            ("window", "state cache", "pasted turns: tokens llama.cpp decoded, workers included", "median first "
             "token of a pasted turn (s)", "turns after a paste: evaluated / new", "goal", "cache memory"),
            [(r["window"], "on" if r["state_cache"] else "off",
              ", ".join(f"{d:,}" for d in r["goals"]["pasted_decoded"] if d is not None),
              f"{r['goals']['pasted_median_ttft_s'] or 0:.1f}",
              ", ".join(f"{a['evaluated']:,}/{a['new_tokens']:,}" for a in r["goals"]["after"]),
              _met(r["goals"]["after_met"]),
              f"{(r['state_cache_stats'] or {}).get('bytes', 0) / 2**20:.0f} MiB") for r in report["analysed"]]))
    if report["serve"]:
        print()
        print(markdown_table(
            ("window", "row", "turns", "median first token (s)", "turns evaluating ≤ 1.2x their new tokens",
             "tokens evaluated / new", "state cache", "peak resident"),
            [(r["window"], r["row"], r["goals"]["turns"], f"{r['goals']['taking_turns']['median_ttft_s'] or 0:.2f}",
              f"{100 * (r['goals']['taking_turns']['share_evaluating_new_only'] or 0):.0f}% "
              f"({_met(r['goals']['taking_turns']['goal_met'])})",
              f"{r['goals']['taking_turns']['evaluated_total']:,} / {r['goals']['taking_turns']['new_total']:,}",
              (f"{r['state_cache']['bytes'] / 2**20:.0f} MiB in {r['state_cache']['entries']}, "
               f"{r['state_cache']['restored']} restores") if r["state_cache"] else "off",
              f"{r['peak_resident_mib']:.0f} MiB") for r in report["serve"]]))


if __name__ == "__main__":
    sys.exit(main())
