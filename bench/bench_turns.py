"""Turns at the window's edge: what each way of fitting makes the model evaluate.

A conversation of ~60-token user messages and ~60-token assistant replies (fixed texts
from a seed, so every row sees the same conversation) is resent turn after turn on the
embedded model, growing far past its window. Each turn's reply is stopped at its first
token: what is measured is the prompt's evaluation, which is what a long chat costs.

Rows, side by side in one run on one loaded model:

- **today**: ``chat.low_water = 1``, through ``Engine.reply``: each turn drops the fewest
  old steps that fit, worked out from scratch (the rule before decision 0029).
- **stable**: the default low water, through ``Engine.reply``: a drop goes down to half
  the prompt's limit, and the cut stays while the rest fits (decision 0029).
- **rolling**: the oldest message dropped one at a time until the prompt fits, sent
  straight to the provider (LM Studio's rolling window).

Per turn: the prompt's tokens, the tokens llama.cpp evaluated (the prompt less what it
kept, ``Finish.cached_tokens``, counted under the model's lock), the turn's new tokens
(what the whole conversation grew by), the time to the first token, and whether the
turn was at the edge (something of the conversation left out).

Goals (issue 24), per row and window: at the edge, the median time to the first token
at most 1.5x the median below the edge; tokens evaluated at most 1.2x the turn's new
tokens on at least 90% of the turns.

Run: ``python bench/bench_turns.py`` (writes bench/results/turns.json); ``--windows``,
``--turns``, ``--rows`` to choose. The first turns of a row run after another row's
last: the model holds the other row's prompt, so each row starts with a reset model.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import random
import statistics
import sys
import threading
import time

from boundctx import config
from boundctx.analysis import Engine
from boundctx.events import Done, Fitted, ReplyDelta

from _harness import ROOT, markdown_table, run_facts

ROWS = ("today", "stable", "rolling")
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


def _first_token(events, cancel: threading.Event, started: float) -> dict:
    """Run a reply's events until its first text, then stop it: what the turn cost."""
    out = {"ttft_s": None, "prompt_tokens": None, "cached_tokens": None, "dropped": 0}
    for event in events:
        if isinstance(event, Fitted):
            out["prompt_tokens"], out["dropped"] = event.prompt_tokens, len(event.dropped)
        elif isinstance(event, ReplyDelta) and out["ttft_s"] is None:
            out["ttft_s"] = time.perf_counter() - started
            cancel.set()
        elif isinstance(event, Done):
            out["cached_tokens"] = event.usage.get("cached_tokens")
            out["prompt_tokens"] = event.usage.get("prompt_tokens") or out["prompt_tokens"]
    return out


def engine_turn(provider, settings, history: list[dict]) -> dict:
    cancel = threading.Event()
    engine = Engine(provider, settings=settings, max_reply_tokens=REPLY_TOKENS)
    started = time.perf_counter()
    return _first_token(engine.reply(history, cancel=cancel), cancel, started)


def rolling_turn(provider, history: list[dict]) -> dict:
    """LM Studio's rolling window: drop the oldest message until the prompt fits."""
    limit = provider.context_window - REPLY_TOKENS
    kept = list(history)
    started = time.perf_counter()
    while len(kept) > 1 and provider.count_prompt(kept) > limit:
        kept.pop(0)
    cancel = threading.Event()
    out = {"ttft_s": None, "prompt_tokens": provider.count_prompt(kept), "cached_tokens": None,
           "dropped": len(history) - len(kept)}
    for chunk in provider.stream_chat(kept, max_tokens=REPLY_TOKENS, temperature=0.2, cancel=cancel):
        if getattr(chunk, "text", None) and out["ttft_s"] is None:
            out["ttft_s"] = time.perf_counter() - started
            cancel.set()
        if hasattr(chunk, "cached_tokens"):
            out["cached_tokens"] = chunk.cached_tokens
    return out


def run_row(row: str, provider, window: int, convo: list[dict]) -> list[dict]:
    settings = config.load(env={}, overrides={"chat.n_ctx": window, "chat.analysis_workers": 2,
                                              **({"chat.low_water": 1.0} if row == "today" else {})})
    provider._forget_evaluation(provider._model())  # each row starts with nothing held
    turns = []
    previous = None
    for t in range(1, len(convo) // 2 + 1):
        history = convo[:2 * t - 1]  # up to this turn's question
        whole = provider.count_prompt(history)
        got = rolling_turn(provider, history) if row == "rolling" else engine_turn(provider, settings, history)
        got["turn"] = t
        got["new_tokens"] = whole - previous if previous is not None else whole
        got["evaluated"] = (got["prompt_tokens"] - got["cached_tokens"]
                            if got["cached_tokens"] is not None and got["prompt_tokens"] is not None else None)
        previous = whole
        turns.append(got)
        print(f"{window} {row:<8} turn {t:>3}: prompt {got['prompt_tokens']:>5} evaluated {got['evaluated']!s:>5} "
              f"new {got['new_tokens']:>4} dropped {got['dropped']:>3} ttft {got['ttft_s'] or 0:6.2f} s", flush=True)
    return turns


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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--windows", type=int, nargs="+", default=[2048])
    ap.add_argument("--turns", type=int, default=200)
    ap.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS))
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--json-out", default=str(ROOT / "bench" / "results" / "turns.json"))
    args = ap.parse_args(argv)
    from boundctx.providers.local import LlamaCppProvider

    convo = conversation(args.seed, args.turns)
    report = {"meta": {"turns": args.turns, "windows": args.windows, "rows": args.rows, "seed": args.seed,
                       "reply_tokens": REPLY_TOKENS, "versions": run_facts(("boundctx", "llama_cpp_python"))},
              "runs": []}
    started = time.perf_counter()
    for window in args.windows:
        provider = LlamaCppProvider(n_ctx=window)
        for row in args.rows:
            turns = run_row(row, provider, window, convo)
            report["runs"].append({"window": window, "row": row, "goals": goals(turns), "turns": turns})
        provider.close()
    report["meta"]["wall_s"] = time.perf_counter() - started
    pathlib.Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.json_out).write_text(json.dumps(report, indent=1))
    print()
    print(markdown_table(
        ("window", "row", "turns at the edge", "median first token below / at the edge (s)", "ratio",
         "turns evaluating ≤ 1.2x their new tokens", "tokens evaluated / new"),
        [(r["window"], r["row"], f"{r['goals']['edge_turns']}/{r['goals']['turns']}",
          f"{r['goals']['median_ttft_below_s'] or 0:.2f} / {r['goals']['median_ttft_edge_s'] or 0:.2f}",
          f"{r['goals']['ttft_edge_over_below'] or 0:.2f} ({'met' if r['goals']['ttft_goal_met'] else 'not met'})",
          f"{100 * (r['goals']['share_evaluating_new_only'] or 0):.0f}% "
          f"({'met' if r['goals']['evaluation_goal_met'] else 'not met'})",
          f"{r['goals']['evaluated_total']:,} / {r['goals']['new_total']:,}") for r in report["runs"]]))
    print(f"\nwall {report['meta']['wall_s']:.0f} s; [json] {args.json_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
