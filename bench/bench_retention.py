"""Fact retention: what each way of handling an oversized input keeps.

Seeded documents of invented facts in filler prose, 1.5x to 6x the model's window, are
asked one question per reply under five conditions on the same window:

- **A clip**: keep the prefix that fits (the old behaviour), answer from it.
- **B notes**: section analysis, the coordinator answers from the workers' notes only.
- **C notes + rereads**: as B, and the coordinator may call ``read_chat_section``.
- **O oracle**: only the sentence holding the fact.
- **Z closed book**: no input at all.

The model is scripted and deterministic (exact by construction): a worker extracts
``The <attribute> of <Entity> is <value>.`` sentences from its section into typed notes
(key, value, section, range), a later value supersedes an earlier one, and when the notes
would pass their token budget the oldest *values* are evicted while the key -> range
index stays. The coordinator answers from the note with the latest section; if its value
was evicted it rereads the recorded range (condition C) or answers "unknown" (B). So any
deviation from the expected table is a bug in splitting, overlap, coverage, offsets or
tool plumbing, not model noise.

Buckets per document: 3 early, 3 middle, 3 late facts, 1 corrected later (v1 in the
first third, "is now v2" in the last), 1 distractor (same attribute, another entity).

Run: ``python bench/bench_retention.py`` (writes ``bench/results/retention.json``).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import random
import re
import sys
import time

from _harness import ROOT, markdown_table, run_facts
from boundctx import config
from boundctx._search import longest_fitting
from boundctx.analysis import READ_TOOL_NAME, Engine
from boundctx.analysis.workers import WORKER_INSTRUCTIONS
from boundctx.events import AnalysisProgress, Done, ReplyDelta, ToolCall
from boundctx.providers import ScriptedProvider, ToolCallChunk

WINDOW = 2048
REPLY_TOKENS = 128
NOTES_TOKENS = 384
SIZES = (1.5, 3.0, 6.0)
WORDS = ("river stone quiet number window paper garden signal morning harbor lantern copper thread valley "
         "engine winter circle market ladder orchard silver meadow anchor candle bridge canvas").split()
ATTRIBUTES = ("code", "depot", "badge", "locker", "channel", "ticket", "vault", "route")
FACT = re.compile(r"The (\w+) of (\w+) is (?:now )?([\w-]+)\.")


def _name(rng: random.Random) -> str:
    syllables = ("ka", "lo", "mi", "ren", "tu", "sha", "vo", "zel", "dra", "pim", "quo", "bex")
    return "".join(rng.choice(syllables) for _ in range(3)).capitalize()


def _value(rng: random.Random) -> str:
    return f"{rng.randint(1000, 9999)}-{rng.choice('ABCDEFGHJKLMNPQRSTUVWXYZ')}{rng.choice('ABCDEFGHJKLMNPQRSTUVWXYZ')}"


def _filler(rng: random.Random, n_chars: int) -> str:
    out, size = [], 0
    while size < n_chars:
        sentence = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14))).capitalize() + ". "
        if rng.random() < 0.15:
            sentence += "\n"
        out.append(sentence)
        size += len(sentence)
    return "".join(out)[:n_chars]


def make_document(seed: int, n_chars: int, *, extra_facts: int = 0) -> tuple[str, list[dict]]:
    """A document and its questions (attribute, entity, answer, bucket, stale answer).
    ``extra_facts`` more facts, never asked, fill the workers' notes past their budget."""
    rng = random.Random(seed)
    used: set[tuple[str, str]] = set()

    def key():
        while True:
            k = (rng.choice(ATTRIBUTES), _name(rng))
            if k not in used:
                used.add(k)
                return k

    placements = []  # (fraction, sentence)
    questions = []
    for bucket, lo, hi in (("early", 0.0, 0.1), ("middle", 0.45, 0.55), ("late", 0.9, 1.0)):
        for _ in range(3):
            attr, ent = key()
            v = _value(rng)
            placements.append((rng.uniform(lo, hi), f"The {attr} of {ent} is {v}. "))
            questions.append({"attribute": attr, "entity": ent, "answer": v, "bucket": bucket, "stale": None})
    attr, ent = key()
    v1, v2 = _value(rng), _value(rng)
    placements.append((rng.uniform(0.05, 0.3), f"The {attr} of {ent} is {v1}. "))
    placements.append((rng.uniform(0.7, 0.95), f"Correction: the {attr} of {ent} is now {v2}. ".replace(
        "Correction: the", "Correction. The")))
    questions.append({"attribute": attr, "entity": ent, "answer": v2, "bucket": "corrected", "stale": v1})
    attr, ent = key()
    other = _name(rng)
    v, w = _value(rng), _value(rng)
    at = rng.uniform(0.2, 0.8)
    placements.append((at, f"The {attr} of {ent} is {v}. "))
    placements.append((min(0.99, at + 0.02), f"The {attr} of {other} is {w}. "))
    questions.append({"attribute": attr, "entity": ent, "answer": v, "bucket": "distractor", "stale": w})
    for _ in range(extra_facts):
        attr, ent = key()
        placements.append((rng.uniform(0.0, 1.0), f"The {attr} of {ent} is {_value(rng)}. "))
    filler = _filler(rng, n_chars)
    text, last = [], 0
    for frac, sentence in sorted(placements):
        cut = max(last, int(frac * len(filler)))
        cut = filler.rfind(". ", last, cut + 1) + 2 if filler.rfind(". ", last, cut + 1) >= 0 else cut
        text.append(filler[last:cut])
        text.append(sentence)
        last = cut
    text.append(filler[last:])
    return "".join(text), questions


# -- the scripted model ---------------------------------------------------------------

NOTE = re.compile(r"^(\w+) of (\w+) = (\S+) \[S(\d+) (\d+)-(\d+)\]$")


def _worker(request, counter) -> str:
    body = request.messages[-1]["content"]
    m = re.search(r"Your notes so far:\n(.*?)\n\nSection S(\d+) of \d+ \(\S+, characters (\d+)-(\d+)\):\n(.*)\Z",
                  body, re.S)
    notes_text, k, start, section = m.group(1), int(m.group(2)), int(m.group(3)), m.group(5)
    notes = {} if notes_text == "(none yet)" else {
        (n.group(1), n.group(2)): n.groups()[2:] for n in map(NOTE.match, notes_text.splitlines()) if n}
    for fact in FACT.finditer(section):
        attr, ent, value = fact.groups()
        notes[(attr, ent)] = (value, str(k), str(start + fact.start()), str(start + fact.end()))
    lines = [f"{a} of {e} = {v} [S{s} {b}-{c}]" for (a, e), (v, s, b, c) in notes.items()]
    # Over budget: evict the oldest values, keep the key -> range index; if even the
    # index does not fit, drop its oldest lines (whole lines, never a cut one).
    i = 0
    while counter.count_text("\n".join(lines)) > NOTES_TOKENS - 8 and i < len(lines):
        lines[i] = re.sub(r" = \S+ ", " = ? ", lines[i])
        i += 1
    while counter.count_text("\n".join(lines)) > NOTES_TOKENS - 8:
        lines.pop(0)
    return "\n".join(lines)


def _coordinator(request, rereads: bool) -> list:
    messages = request.messages
    question = re.search(r"What is the (\w+) of (\w+)\?", messages[-1]["content"] if messages[-1]["role"] == "user"
                         else next(m["content"] for m in reversed(messages) if m["role"] == "user"))
    attr, ent = question.groups()
    if messages[-1]["role"] == "tool":
        fact = FACT.search(messages[-1]["content"])
        return [fact.group(3) if fact and fact.group(1) == attr and fact.group(2) == ent else "unknown"]
    system = messages[0]["content"] if messages[0]["role"] == "system" else ""
    best = None
    for n in map(NOTE.match, system.splitlines()):
        if n and n.group(1) == attr and n.group(2) == ent and (best is None or int(n.group(4)) > int(best.group(4))):
            best = n
    if best is None:  # no notes: answer from whatever text is in the prompt (conditions A, O, Z)
        seen = [f for m in messages for f in FACT.finditer(str(m.get("content") or ""))
                if f.group(1) == attr and f.group(2) == ent]
        return [seen[-1].group(3) if seen else "unknown"]
    if best.group(3) != "?":
        return [best.group(3)]
    if rereads:
        oid = re.search(r"id (src-\S+),", system).group(1)
        return [ToolCallChunk("r1", READ_TOOL_NAME, json.dumps(
            {"section_id": oid, "start": int(best.group(5)), "end": int(best.group(6))}))]
    return ["unknown"]


def scripted_model(counter, *, rereads: bool):
    def respond(request):
        if request.messages and request.messages[0]["content"] == WORKER_INSTRUCTIONS:
            return _worker(request, counter)
        return _coordinator(request, rereads)
    return respond


# -- conditions -----------------------------------------------------------------------


def ask(condition: str, document: str, q: dict, counter, settings, provider=None) -> tuple[str, dict]:
    """One reply under ``condition``; ``provider`` is a real model, or None for the
    scripted one."""
    question = f"What is the {q['attribute']} of {q['entity']}? Answer with the value only."
    if provider is None:
        provider = ScriptedProvider(scripted_model(counter, rereads=condition == "C"), context_window=WINDOW,
                                    counter=counter)
        provider.supports_tools = condition == "C"
    calls_before = len(getattr(provider, "requests", ()))
    started = time.perf_counter()
    files: list[tuple[str, str]] = []
    if condition in ("B", "C"):
        files = [("document", document)]
    elif condition == "A":  # the old behaviour: the prefix that fits
        room = WINDOW - REPLY_TOKENS - counter.count_prompt([{"role": "user", "content": question}]) - 32
        keep = longest_fitting(len(document), lambda k: counter.count_text(document[:k]) <= room)
        files = [("document", document[:keep])]
    elif condition == "O":
        sentence = next(f.group(0) for f in FACT.finditer(document)
                        if f.group(1) == q["attribute"] and f.group(2) == q["entity"] and f.group(3) == q["answer"])
        files = [("document", sentence)]
    engine = Engine(provider, settings=settings, max_reply_tokens=REPLY_TOKENS)
    events = list(engine.reply([{"role": "user", "content": question}], files=files))
    answer = "".join(e.text for e in events if isinstance(e, ReplyDelta)).strip()
    done = events[-1]
    return answer, {"ok": isinstance(done, Done),
                    "calls": (len(provider.requests) - calls_before if hasattr(provider, "requests")
                              else 1 + sum(isinstance(e, AnalysisProgress) and e.phase == "noted" for e in events)),
                    "rereads": sum(isinstance(e, ToolCall) for e in events),
                    "max_active": getattr(provider, "max_active", 1), "wall_s": time.perf_counter() - started}


def right(answer: str, value: str) -> bool:
    """The answer gives ``value`` (the scripted model answers exactly the value; a real
    one may wrap it in words)."""
    return value in answer


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=("scripted", "embedded"), default="scripted",
                    help="scripted (exact by construction, default) or the embedded SmolLM2 through "
                         "llama-cpp-python (reported, not gated; minutes per document)")
    ap.add_argument("--documents", type=int, default=None, help="documents per size (default 3; embedded 1)")
    ap.add_argument("--sizes", type=float, nargs="+", default=None,
                    help=f"document sizes as multiples of the window (default {' '.join(map(str, SIZES))}; "
                         "embedded 1.5)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json-out", default=None,
                    help="default bench/results/retention.json (embedded: retention-embedded.json)")
    args = ap.parse_args(argv)
    embedded = args.model == "embedded"
    documents = args.documents or (1 if embedded else 3)
    sizes = tuple(args.sizes or ((1.5,) if embedded else SIZES))
    json_out = args.json_out or str(ROOT / "bench" / "results" /
                                   ("retention-embedded.json" if embedded else "retention.json"))
    provider = None
    if embedded:
        from boundctx.providers.local import LlamaCppProvider
        provider = LlamaCppProvider(n_ctx=WINDOW)
        counter = provider.counter
    else:
        try:
            from boundctx.tokens.llama import LlamaCounter
            counter = LlamaCounter()
        except ImportError:
            from boundctx.tokens import ByteEstimateCounter
            counter = ByteEstimateCounter()
    settings = config.load(env={}, overrides={"chat.n_ctx": WINDOW, "analysis.worker_n_ctx": WINDOW,
                                              "analysis.notes_max_tokens": NOTES_TOKENS})
    # Rereads need a tool-capable model (decision 0010); SmolLM2's template has no tools.
    conditions = tuple(c for c in ("A", "B", "C", "O", "Z") if not embedded or c != "C" or provider.supports_tools)
    results = {c: {} for c in conditions}
    stale = {c: 0 for c in conditions}
    totals = {c: {"calls": 0, "rereads": 0, "failed": 0, "max_active": 0, "wall_s": 0.0} for c in conditions}
    started = time.perf_counter()
    sample = _filler(random.Random(args.seed), 20_000)
    chars_per_token = len(sample) / counter.count_text(sample)
    sizes_seen = []
    families = [(size, 0) for size in sizes]
    if not embedded:
        families.append((sizes[-1], 16))  # dense: forces the notes past their budget
    answers = []
    for size, extra in families:
        for d in range(documents):
            doc, questions = make_document(args.seed * 1000 + int(size * 10) * 10 + d + extra,
                                           int(WINDOW * size * chars_per_token), extra_facts=extra)
            sizes_seen.append((round(counter.count_text(doc) / WINDOW, 2), extra))
            for q in questions:
                for c in conditions:
                    answer, info = ask(c, doc, q, counter, settings, provider)
                    family = "dense" if extra else "regular"
                    bucket = results[c].setdefault(f"{family} {q['bucket']}", [0, 0])
                    ok = right(answer, q["answer"])
                    bucket[0] += ok
                    bucket[1] += 1
                    stale[c] += q["bucket"] == "corrected" and not ok and right(answer, q["stale"])
                    for k in ("calls", "rereads", "wall_s"):
                        totals[c][k] += info[k]
                    totals[c]["failed"] += not info["ok"]
                    totals[c]["max_active"] = max(totals[c]["max_active"], info["max_active"])
                    if embedded:
                        answers.append({"condition": c, "bucket": q["bucket"], "expected": q["answer"],
                                        "answer": answer, "right": ok, "wall_s": round(info["wall_s"], 1)})
                        print(f"{c} {q['bucket']:<10} {q['answer']:<8} {'ok ' if ok else '-- '} "
                              f"{info['wall_s']:6.1f} s  {answer[:70]!r}", flush=True)
    report = {"meta": {"model": args.model, "window": WINDOW, "notes_tokens": NOTES_TOKENS,
                       "sizes_x_window": sizes_seen, "documents_per_size": documents, "seed": args.seed,
                       "counter": type(counter).__name__, "wall_s": time.perf_counter() - started,
                       "versions": run_facts(("boundctx", "llama_cpp_python"))},
              "accuracy": {c: {b: {"right": r, "asked": n, "share": r / n} for b, (r, n) in results[c].items()}
                           for c in conditions},
              "stale_corrected": stale, "totals": totals, "answers": answers}
    pathlib.Path(json_out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(json_out).write_text(json.dumps(report, indent=1))
    buckets = ("early", "middle", "late", "corrected", "distractor")
    names = {"A": "A clip", "B": "B notes", "C": "C notes + rereads", "O": "O oracle", "Z": "Z closed book"}
    for family in ("regular", "dense"):
        if not any(k.startswith(family) for k in results[conditions[0]]):
            continue
        print(f"\n{family} documents\n")
        print(markdown_table(("condition", *buckets), [
            (names[c], *(f"{results[c][f'{family} {b}'][0]}/{results[c][f'{family} {b}'][1]}" for b in buckets))
            for c in conditions]))
    print()
    print(markdown_table(
        ("condition", "stale corrected", "model calls", "rereads", "failed replies", "most generations at once",
         "model wall s"),
        [(names[c], stale[c], totals[c]["calls"], totals[c]["rereads"], totals[c]["failed"], totals[c]["max_active"],
          f"{totals[c]['wall_s']:.0f}") for c in conditions]))
    print(f"\nsizes (x window): {sizes_seen}; wall {report['meta']['wall_s']:.1f} s; [json] {json_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
