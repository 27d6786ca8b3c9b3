#!/usr/bin/env python
"""Fitting a long history into the window: cost per reply, in exact counts.

One run, same conversations, same tokenizer (the embedded model's, through
``LlamaCounter``), side by side:

* **boundctx** ``fit_conversation``, *cold* (the counter has remembered nothing) and
  *warm* (the conversation of the turn before was fitted; only the newest message is
  new — what a front end that resends the whole history every turn costs), by the rule
  of low water 1 (only what must go) and by the engine's *stable* rule (decision 0029:
  cold replays every earlier turn, warm finds the turn before remembered);
* **one at a time**: the reference twin (``tests/reference/fitting.py``): drop a step,
  count everything again (the old fitting), run where it finishes in reasonable time;
* **LangChain** ``trim_messages`` (strategy ``last``, system kept, starting on a human
  message) with the same exact count as its ``token_counter``.

Every time is reported as a ratio to **one exact count of the whole conversation** with
the same tokenizer, counted cold; the goals (issue 12): ≤ 1.5 counts cold, ≤ 0.05 warm,
the warm cost flat from 100 to 10,000 messages. Rows are medians.

Usage::

    python -m bench.bench_fitting            # the full run (a few minutes)
    python -m bench.bench_fitting --quick    # 100 and 1,000 messages only
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time

from boundctx.analysis.fitting import current_turn_start, fit_conversation

from bench._harness import ROOT, markdown_table, run_facts, timed
from bench._textgen import chat

WINDOW = 8192
REPLY_TOKENS = 512
LIMIT = WINDOW - REPLY_TOKENS
SHARED = ROOT.parent / "shared" / "data" / "pi-sessions"


def real_session(name: str) -> list[dict] | None:
    from boundctx.transcript import Transcript
    from boundctx.transcript.chat import chat_messages

    path = SHARED / name
    if not path.exists():
        return None
    with Transcript.open(path) as t:  # opening writes a sidecar; ../shared is read-only
        msgs = chat_messages(t.window()).messages
    msgs.append({"role": "user", "content": "What did we change last?"})
    return msgs


def median_s(fn, repeats: int) -> float:
    """The median wall time of ``repeats`` calls (no warm-up: a cold call is cold)."""
    return statistics.median(timed(fn, repeats, warmup=0).wall_s)


def fit(counter, msgs):
    return fit_conversation(msgs, count=counter.count_prompt, limit=LIMIT, analysis_on=True,
                            notes_room=0, clip_chars=10**9)


def fit_stable(counter, msgs, memo):
    """The engine's rule (decision 0029): a low water of half the limit, the turns
    before remembered in ``memo`` (a fresh one: the conversation replayed from its start)."""
    return fit_conversation(msgs, count=counter.count_prompt, limit=LIMIT, analysis_on=True, notes_room=0,
                            clip_chars=10**9, low_water=0.5, memo=memo, salt=b"bench")


def langchain_trim(counter, msgs):
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage, trim_messages

    kinds = {"system": SystemMessage, "user": HumanMessage, "assistant": AIMessage}
    roles = {SystemMessage: "system", HumanMessage: "user", AIMessage: "assistant", ToolMessage: "tool"}
    lc = [kinds[m["role"]](content=m.get("content") or "") if m["role"] in kinds
          else ToolMessage(content=m.get("content") or "", tool_call_id=m.get("tool_call_id", "x")) for m in msgs]

    def count(messages):
        return uncached_count(counter, [{"role": roles[type(m)], "content": m.content} for m in messages])

    return trim_messages(lc, max_tokens=LIMIT, token_counter=count, strategy="last", include_system=True,
                         start_on="human", allow_partial=False)


def uncached_count(counter, msgs):
    return len(counter.prompt_tokens(msgs))


def engine_times(counter, msgs, repeats: int) -> dict:
    """A whole reply with a model that answers at once (the scripted provider, the same
    counter): every second is boundctx's, fitting and counting included."""
    from boundctx import config
    from boundctx.analysis import Engine
    from boundctx.providers.scripted import ScriptedProvider

    settings = config.load(env={}, overrides={"chat.n_ctx": WINDOW})
    provider = ScriptedProvider(lambda request: "ok", context_window=WINDOW, counter=counter)

    def reply(conversation):
        return list(Engine(provider, settings=settings, max_reply_tokens=REPLY_TOKENS).reply(conversation))

    def cold():
        counter.clear_cache()
        reply(msgs)

    warm = []
    for r in range(repeats):
        reply(msgs)
        grown = msgs + [{"role": "assistant", "content": f"ok {r}"}, {"role": "user", "content": f"and then? {r}"}]
        started = time.perf_counter()
        reply(grown)
        warm.append(time.perf_counter() - started)
    return {"engine_cold_s": median_s(cold, repeats), "engine_warm_s": statistics.median(warm)}


def case(counter, name: str, msgs: list[dict], *, repeats: int, old: bool, peers: bool) -> dict:
    counter.clear_cache()
    whole = median_s(lambda: uncached_count(counter, msgs), max(1, repeats // 2))
    tokens = uncached_count(counter, msgs)

    def cold():
        counter.clear_cache()
        return fit(counter, msgs)

    cold_s = median_s(cold, repeats)
    result = cold()
    # Warm: the turn before was fitted; each repeat adds a different newest message.
    warm_times = []
    for r in range(repeats):
        counter.clear_cache()
        before = msgs[:-1] + [{"role": "user", "content": f"an earlier question {r}"}]
        fit(counter, before)
        turn = before + [{"role": "assistant", "content": f"an answer {r}"},
                         msgs[-1] | {"content": f"{msgs[-1]['content']} ({r})"}]
        started = time.perf_counter()
        fit(counter, turn)
        warm_times.append(time.perf_counter() - started)
    warm_s = statistics.median(warm_times)
    # The same turns under the stable rule: cold replays every earlier turn (a process
    # that never saw the conversation); warm finds the turn before in the memo.
    from boundctx.analysis.fitting import DropMemo

    def stable_cold():
        counter.clear_cache()
        return fit_stable(counter, msgs, DropMemo())

    stable_cold_s = median_s(stable_cold, repeats)
    stable_warm = []
    for r in range(repeats):
        counter.clear_cache()
        memo = DropMemo()
        before = msgs[:-1] + [{"role": "user", "content": f"an earlier question {r}"}]
        fit_stable(counter, before, memo)
        turn = before + [{"role": "assistant", "content": f"an answer {r}"},
                         msgs[-1] | {"content": f"{msgs[-1]['content']} ({r})"}]
        started = time.perf_counter()
        fit_stable(counter, turn, memo)
        stable_warm.append(time.perf_counter() - started)
    row = {"case": name, "messages": len(msgs), "tokens": tokens, "window": WINDOW, "limit": LIMIT,
           "whole_count_s": whole, "kept": len(result.messages), "dropped": result.dropped,
           "cold_s": cold_s, "cold_counts": cold_s / whole, "warm_s": warm_s, "warm_counts": warm_s / whole,
           "stable_cold_counts": stable_cold_s / whole, "stable_warm_counts": statistics.median(stable_warm) / whole}
    row |= engine_times(counter, msgs, repeats)
    if old:
        from tests.reference.fitting import fit_by_dropping
        started = time.perf_counter()
        ref = fit_by_dropping(msgs, lambda m: uncached_count(counter, m), LIMIT, current_turn_start(msgs),
                              msgs[0]["role"] == "system")
        row["one_at_a_time_s"] = time.perf_counter() - started
        row["one_at_a_time_counts"] = row["one_at_a_time_s"] / whole
        row["same_choice_as_one_at_a_time"] = ref is not None and ref[0] == result.messages
    if peers:
        try:
            started = time.perf_counter()
            trimmed = langchain_trim(counter, msgs)
            row["langchain_s"] = time.perf_counter() - started
            row["langchain_counts"] = row["langchain_s"] / whole
            row["langchain_kept"] = len(trimmed)
        except ImportError:
            row["langchain"] = "not installed (pip install langchain-core)"
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json-out", default=str(ROOT / "bench" / "results" / "fitting.json"))
    args = ap.parse_args()
    from boundctx.tokens.llama import LlamaCounter

    counter = LlamaCounter()
    sizes = [100, 1000] if args.quick else [100, 200, 300, 1000, 3000, 10000]
    rows = []
    for n in sizes:
        rows.append(case(counter, f"chat of {n:,} messages", chat(n, seed=n), repeats=args.repeats,
                         old=n <= 300, peers=n <= 3000))
        print(json.dumps(rows[-1]), flush=True)
    if not args.quick:
        for name in ("large-session.jsonl", "before-compaction.jsonl"):
            msgs = real_session(name)
            if msgs is None:
                print(f"skipped {name}: ../shared/data not found", file=sys.stderr)
                continue
            rows.append(case(counter, f"real pi session {name}", msgs, repeats=args.repeats, old=False, peers=True))
            print(json.dumps(rows[-1]), flush=True)
    report = {"rows": rows, "versions": run_facts(("boundctx", "llama_cpp_python", "langchain_core"))}
    pathlib.Path(args.json_out).write_text(json.dumps(report, indent=1) + "\n")
    print(markdown_table(
        ("case", "messages", "tokens", "one count", "cold", "warm", "stable cold / warm", "one at a time",
         "LangChain", "engine reply cold / warm"),
        [(r["case"], f"{r['messages']:,}", f"{r['tokens']:,}", f"{r['whole_count_s'] * 1e3:.1f} ms",
          f"{r['cold_counts']:.3f}", f"{r['warm_counts']:.4f} ({r['warm_s'] * 1e3:.2f} ms)",
          f"{r['stable_cold_counts']:.3f} / {r['stable_warm_counts']:.4f}",
          f"{r['one_at_a_time_counts']:.1f}" if "one_at_a_time_counts" in r else "not run",
          f"{r['langchain_counts']:.2f}" if "langchain_counts" in r else "not run",
          f"{r['engine_cold_s'] * 1e3:.0f} / {r['engine_warm_s'] * 1e3:.0f} ms") for r in rows]))
    print(f"JSON: {args.json_out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
