"""Fact retention: what each way of handling an oversized input keeps.

Seeded documents of invented facts in filler prose, 1.5x to 6x the model's window, are
asked one question per reply under six conditions on the same window:

- **A clip**: keep the prefix that fits (the old behaviour), answer from it.
- **B notes**: section analysis, the coordinator answers from the notes only
  (``analysis.constrained_rereads`` off, no tools).
- **C notes + tool rereads**: as B, and the coordinator may call ``read_chat_section``
  (a tool-capable model).
- **R notes + constrained rereads**: as B for a model without tools, with the
  constrained reread step on: before answering, one call whose output must follow a
  JSON schema (``{"reread": [{"id", "start", "end"}]}``) asks for ranges the notes cite,
  and the answering call gets their exact text.
- **O oracle**: only the sentence holding the fact.
- **Z closed book**: no input at all.

The scripted model is deterministic (exact by construction). A worker writes, for every
``The <attribute> of <Entity> is [now] <value>.`` sentence whole in its section, one line
``<attribute> of <Entity>: <value> (characters <a>-<b>)`` (a-b: the sentence's characters
in the original), or ``nothing relevant``; it never rewrites notes: keeping them within
their budget is the engine's (values evicted oldest first, every key kept in an index
with its range). The coordinator finds the asked key's latest range in the engine's
rendering of the notes (a kept value, or an index line ``<key> (characters <a>-<b>)`` under
"Values not kept here"); it answers a kept value, rereads an index-only one (C: a
``read_chat_section`` call; R: that range in the schema'd call, then the fact in the
"Exact text read again" part of its prompt), and otherwise says "unknown". So any
deviation from the expected table is the engine's (splitting, overlap, coverage,
offsets, the notes' bound, rereads), not model noise.

Families (each document also has the regular buckets):

- **regular**: per document 3 early, 3 middle, 3 late facts, 1 corrected later (v1 in
  the first third, "is now v2" in the last) and 1 distractor (same attribute, another
  entity, just after it).
- **dense**: 16 more facts, never asked, push the notes past their budget.
- **recorrected**: one more key, corrected three times (v1, v2, v3, v4 at 0.1, 0.35,
  0.6 and 0.85 of the document): the answer is v4, and each of v1-v3 is a stale answer.
- **straddle**: three more facts, each placed on a section boundary of the plan the
  engine makes (``boundctx.sections.plan`` with the engine's planning prompt and
  settings; the filler has no line breaks there, so cuts fall at spaces, inside the
  sentence): one across the end of a section (whole in the next, inside the overlap),
  one across the start of a section (whole in the previous one), and one "wide" fact
  (a quoted 14-word message, ~110 characters) longer than the overlap, laid over a whole
  overlap so that no section holds it whole. (A long value with no space in it cannot be
  laid so: the planner cuts at the space before it, and the next section, starting an
  overlap earlier, holds the sentence whole.) A placement is re-planned until the sentence crosses the
  boundary it was put on, and every reply checks it against the sections the workers
  were actually sent. The wide fact is outside what the design can promise: no worker
  ever sees the sentence, so it is reported apart from the goal.

A stale answer is an answer equal to a value a later sentence corrected.

Run: ``python -m bench.bench_retention`` (writes ``bench/results/retention.json``);
``--quick`` is a seconds-long run of one document per family with the byte-estimate
counter (``retention-quick.json``); ``--model embedded`` runs SmolLM2 (A, B, R, O, Z).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import random
import re
import sys
import time

from boundctx import config
from boundctx._search import longest_fitting
from boundctx.analysis import READ_TOOL_NAME, Engine
from boundctx.analysis.engine import REREAD_HEADER
from boundctx.analysis.notes import ANSWER_INDEX_HEADER
from boundctx.analysis.workers import WORKER_INSTRUCTIONS, worker_messages, worker_question
from boundctx.events import Done, Failed, ReplyDelta, ToolCall
from boundctx.providers import ScriptedProvider, ToolCallChunk
from boundctx.sections import plan as plan_sections

from bench._harness import ROOT, markdown_table, run_facts

WINDOW = 2048
#: The byte estimate counts a token per byte, ~3.5x SmolLM2's count of this prose, and
#: the engine's bound on the coordinator's prompt (instructions, the reread tool's schema,
#: two workers' notes at their budget, headers at their widest) passes 2,048 of those.
BYTES_WINDOW = 4096
REPLY_TOKENS = 128
NOTES_TOKENS = 384
SIZES = (1.5, 3.0, 6.0)
FAMILIES = ("regular", "dense", "recorrected", "straddle", "clustered", "keys", "at-budget")
DENSE_EXTRA = 16
#: The matrix run (issue 23): dense inputs at every window, notes budget and worker count.
MATRIX_FAMILIES = ("clustered", "keys", "at-budget")
MATRIX_WINDOWS = (1536, 2048, 4096)
MATRIX_NOTES = (256, 384)
MATRIX_WORKERS = (2, 3, 4)
#: Records in the clustered family's one run, hardest first (a run of one document takes 40).
CLUSTERS = (40, 10, 25)
#: Keys in a keys document, hardest first; each asks a sample of KEYS_ASKED of them.
KEY_COUNTS = (300, 60, 150)
KEYS_ASKED = 24
#: Keys a document has before any family's extras (9 placed, a corrected one, a distractor's two).
REGULAR_KEYS = 12
WORDS = ("river stone quiet number window paper garden signal morning harbor lantern copper thread valley "
         "engine winter circle market ladder orchard silver meadow anchor candle bridge canvas").split()
ATTRIBUTES = ("code", "depot", "badge", "locker", "channel", "ticket", "vault", "route")
#: A fact sentence; a value is one word (``4721-KX``) or a quoted phrase.
FACT = re.compile(r'The (\w+) of (\w+) is (?:now )?(?:"([^"\n]+)"|([\w-]+))\.')
CONDITIONS = ("A", "B", "C", "R", "O", "Z")
NAMES = {"A": "A clip", "B": "B notes", "C": "C notes + tool rereads", "R": "R notes + constrained rereads",
         "O": "O oracle", "Z": "Z closed book"}
BUCKETS = {"regular": ("early", "middle", "late", "corrected", "distractor"),
           "dense": ("early", "middle", "late", "corrected", "distractor"),
           "recorrected": ("early", "middle", "late", "corrected", "distractor", "recorrected"),
           "straddle": ("early", "middle", "late", "corrected", "distractor", "straddle", "wide straddle"),
           "clustered": ("early", "middle", "late", "corrected", "distractor", "cluster", "cluster corrected"),
           "keys": ("early", "middle", "late", "corrected", "distractor", "key"),
           "at-budget": ("early", "middle", "late", "corrected", "distractor", "cluster", "cluster corrected")}
#: Buckets no section holds whole (see the module docstring): outside the goal.
OUTSIDE_GOAL = ("wide straddle",)


def _name(rng: random.Random) -> str:
    syllables = ("ka", "lo", "mi", "ren", "tu", "sha", "vo", "zel", "dra", "pim", "quo", "bex")
    return "".join(rng.choice(syllables) for _ in range(3)).capitalize()


def _value(rng: random.Random) -> str:
    return f"{rng.randint(1000, 9999)}-{rng.choice('ABCDEFGHJKLMNPQRSTUVWXYZ')}{rng.choice('ABCDEFGHJKLMNPQRSTUVWXYZ')}"


def _filler(rng: random.Random, n_chars: int, *, line_breaks: bool = True) -> str:
    out, size = [], 0
    while size < n_chars:
        sentence = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14))).capitalize() + ". "
        if rng.random() < 0.15 and line_breaks:
            sentence += "\n"
        out.append(sentence)
        size += len(sentence)
    return "".join(out)[:n_chars]


def question_text(q: dict) -> str:
    return f"What is the {q['attribute']} of {q['entity']}? Answer with the value only."


def make_document(seed: int, n_chars: int, *, extra_facts: int = 0, recorrected: bool = False,
                  line_breaks: bool = True, ask_extra: bool = False, cluster: int = 0,
                  cluster_at: float = 0.5, cluster_pad: int = 0) -> tuple[str, list[dict]]:
    """A document and its questions: attribute, entity, answer, bucket, ``stale`` (the
    values a later sentence corrected), ``decoy`` (the distractor's other value) and
    ``span`` (the answer's sentence in the document). ``extra_facts`` more facts fill the
    notes past their budget (asked, bucket "key", with ``ask_extra``); ``recorrected``
    adds a key corrected three times; ``cluster`` facts in a row at ``cluster_at`` of the
    document, one record a line like a table's, are followed at once by corrections of
    their first and middle ones (buckets "cluster" and "cluster corrected"), and
    ``cluster_pad`` > 0 ends the records with one whose value is a quote of that many
    words (the same words and the same filler whatever the number, so a search over it
    moves one answer's length a token or so at a time). The regular facts are drawn
    first, so a family's extras leave them as they are."""
    rng = random.Random(seed)
    used: set[tuple[str, str]] = set()

    def key():
        while True:
            k = (rng.choice(ATTRIBUTES), _name(rng))
            if k not in used:
                used.add(k)
                return k

    def question(attr, ent, answer, bucket, stale=(), decoy=None):
        return {"attribute": attr, "entity": ent, "answer": answer, "bucket": bucket, "stale": list(stale),
                "decoy": decoy, "span": None}

    placements = []  # (fraction, sentence)
    questions = []
    for bucket, lo, hi in (("early", 0.0, 0.1), ("middle", 0.45, 0.55), ("late", 0.9, 1.0)):
        for _ in range(3):
            attr, ent = key()
            v = _value(rng)
            placements.append((rng.uniform(lo, hi), f"The {attr} of {ent} is {v}. "))
            questions.append(question(attr, ent, v, bucket))
    attr, ent = key()
    v1, v2 = _value(rng), _value(rng)
    placements.append((rng.uniform(0.05, 0.3), f"The {attr} of {ent} is {v1}. "))
    placements.append((rng.uniform(0.7, 0.95), f"Correction. The {attr} of {ent} is now {v2}. "))
    questions.append(question(attr, ent, v2, "corrected", [v1]))
    attr, ent = key()
    other = _name(rng)
    v, w = _value(rng), _value(rng)
    at = rng.uniform(0.2, 0.8)
    placements.append((at, f"The {attr} of {ent} is {v}. "))
    placements.append((min(0.99, at + 0.02), f"The {attr} of {other} is {w}. "))
    questions.append(question(attr, ent, v, "distractor", decoy=w))
    for _ in range(extra_facts):
        attr, ent = key()
        v = _value(rng)
        placements.append((rng.uniform(0.0, 1.0), f"The {attr} of {ent} is {v}. "))
        if ask_extra:
            questions.append(question(attr, ent, v, "key"))
    if cluster:
        records, corrections = [], []
        members = [(*key(), _value(rng)) for _ in range(cluster)]
        for i, (attr, ent, v) in enumerate(members):
            records.append(f"The {attr} of {ent} is {v}.\n")
            if i in (0, cluster // 2):
                v2 = _value(rng)
                corrections.append(f"Correction. The {attr} of {ent} is now {v2}. ")
                questions.append(question(attr, ent, v2, "cluster corrected", [v]))
            else:
                questions.append(question(attr, ent, v, "cluster"))
        if cluster_pad:
            attr, ent = "memo", key()[1]
            v = " ".join(random.Random(seed).choice(WORDS) for _ in range(cluster_pad))
            records.append(f'The {attr} of {ent} is "{v}".\n')
            questions.append(question(attr, ent, v, "cluster"))
        placements.append((cluster_at, "".join(records) + "".join(corrections)))
    if recorrected:
        attr, ent = key()
        values = [_value(rng) for _ in range(4)]
        placements.append((0.1, f"The {attr} of {ent} is {values[0]}. "))
        for frac, value in zip((0.35, 0.6, 0.85), values[1:]):
            placements.append((frac, f"Correction. The {attr} of {ent} is now {value}. "))
        questions.append(question(attr, ent, values[-1], "recorrected", values[:-1]))
    filler = _filler(rng, n_chars, line_breaks=line_breaks)
    text, last = [], 0
    for frac, sentence in sorted(placements):
        cut = max(last, int(frac * len(filler)))
        cut = filler.rfind(". ", last, cut + 1) + 2 if filler.rfind(". ", last, cut + 1) >= 0 else cut
        text.append(filler[last:cut])
        text.append(sentence)
        last = cut
    text.append(filler[last:])
    document = "".join(text)
    _set_spans(document, questions)
    return document, questions


def facts(text: str):
    """(attribute, entity, value, start, end) of each fact sentence in ``text``."""
    for f in FACT.finditer(text):
        yield f.group(1), f.group(2), f.group(3) or f.group(4), f.start(), f.end()


def _set_spans(document: str, questions: list[dict]) -> None:
    found = {(attr, ent, value): (a, b) for attr, ent, value, a, b in facts(document)}
    for q in questions:
        q["span"] = found[(q["attribute"], q["entity"], q["answer"])]


# -- the straddle family ----------------------------------------------------------------


def engine_sections(text: str, question: str, counter, settings) -> list[tuple[int, int]]:
    """The sections the engine plans for ``text`` when asked ``question``: its planning
    prompt (the widest header, notes left out and allowed for) and its settings."""
    top = int(settings["analysis.max_sections"])
    notes = int(settings["analysis.notes_max_tokens"])
    quoted = worker_question(question)

    def prompt(section: str):
        return worker_messages(quoted, "", section, number=top, total=top, source_id="document",
                               start=len(text), end=len(text))

    planned = plan_sections(text, counter=counter, prompt=prompt,
                            context=min(int(settings["analysis.worker_n_ctx"]), int(settings["chat.n_ctx"])),
                            output_tokens=notes, notes_tokens=notes, overlap=int(settings["analysis.overlap_chars"]),
                            max_source_chars=int(settings["analysis.max_source_chars"]), max_sections=top)
    return [(s.start, s.end) for s in planned.sections]


def straddles(kind: str, span: tuple[int, int], sections: list[tuple[int, int]]) -> bool:
    """Whether ``span`` lies on a section edge as ``kind`` says: "end" and "start" cross
    a section's end or start and lie whole in a neighbour; "wide" is cut by an edge and
    whole in no section."""
    a, b = span
    cut = any(a < s < b or a < e < b for s, e in sections)
    whole = any(s <= a and b <= e for s, e in sections)
    return cut and (not whole if kind == "wide" else whole)


def _free_spaces(text: str) -> list[int]:
    """Positions just after a space that no fact sentence covers: where a sentence can
    go in without splitting a word or another fact."""
    taken = [(a, b) for _, _, _, a, b in facts(text)]
    spaces = [i + 1 for i, ch in enumerate(text) if ch == " "]
    return [p for p in spaces if not any(a < p < b + 1 for a, b in taken)]


def place_straddles(document: str, questions: list[dict], rng: random.Random, *, counter, settings) -> str:
    """``document`` with the straddle family's three facts on section edges (the
    module docstring says how), their questions appended to ``questions``."""
    used = {(q["attribute"], q["entity"]) for q in questions}
    n = len(engine_sections(document, "What is the code of Kalomiren? Answer with the value only.", counter,
                            settings))
    if n < 5:
        raise ValueError(f"a straddle document needs at least 5 sections, this one has {n}: make it longer")
    overlap = int(settings["analysis.overlap_chars"])
    # Boundaries are placed left to right: planning is greedy from the start, so a
    # sentence put in later leaves the sections before it as they were.
    for boundary, kind in zip((n // 4, n // 2, 3 * n // 4), ("end", "start", "wide")):
        boundary = max(1, boundary)
        while True:
            attr, ent = ("message" if kind == "wide" else rng.choice(ATTRIBUTES)), _name(rng)
            if (attr, ent) not in used:
                used.add((attr, ent))
                break
        value = " ".join(rng.choice(WORDS) for _ in range(14)) if kind == "wide" else _value(rng)
        sentence = f'The {attr} of {ent} is "{value}". ' if kind == "wide" else f"The {attr} of {ent} is {value}. "
        q = {"attribute": attr, "entity": ent, "answer": value, "bucket": "wide straddle" if kind == "wide"
             else "straddle", "stale": [], "decoy": None, "span": None, "straddle": kind}
        asked = question_text(q)
        sections = engine_sections(document, asked, counter, settings)
        # Where the sentence's middle should fall, in the document without it.
        prev_end, next_start = sections[boundary - 1][1], sections[boundary][0]
        target = {"end": prev_end, "start": next_start, "wide": next_start + overlap // 2}[kind]
        free = _free_spaces(document)
        for _ in range(12):
            at = min(free, key=lambda p: abs(p + len(sentence) // 2 - target))
            trial = document[:at] + sentence + document[at:]
            span = (at, at + len(sentence) - 1)  # the sentence without its trailing space
            planned = engine_sections(trial, asked, counter, settings)
            if straddles(kind, span, planned):
                break
            # Aim at the edge of the plan made with the sentence in (it moved a little).
            edges = {"end": planned[boundary - 1][1], "start": planned[boundary][0],
                     "wide": planned[boundary][0] + overlap // 2}
            edge = edges[kind] if edges[kind] < at else edges[kind] - len(sentence)
            if edge == target:
                target += rng.choice((-7, 7))
            else:
                target = edge
        else:
            raise RuntimeError(f"could not put a {kind} straddle on section edge {boundary} of {len(planned)}")
        document = trial
        questions.append(q)
    _set_spans(document, questions)
    for q in questions:
        if "straddle" in q and not straddles(q["straddle"], tuple(q["span"]),
                                             engine_sections(document, question_text(q), counter, settings)):
            raise RuntimeError(f"the {q['straddle']} straddle moved off its edge when a later one was placed")
    return document


# -- the at-budget family ----------------------------------------------------------------


def cluster_section(document: str, questions: list[dict], counter, settings) -> tuple[int, int, int] | None:
    """(number, start, end) of the first planned section holding the whole cluster (its
    records and their corrections), or None when an edge cuts it."""
    spans = [q["span"] for q in questions if q["bucket"].startswith("cluster")]
    first = min(a for a, _ in spans)
    last = max(b for _, b in _corrections(document, questions))
    planned = engine_sections(document, question_text(questions[0]), counter, settings)
    return next(((k + 1, s, e) for k, (s, e) in enumerate(planned) if s <= first and last <= e), None)


def _corrections(document: str, questions: list[dict]) -> list[tuple[int, int]]:
    """The spans of every sentence of a cluster question's key (its records and corrections)."""
    keys = {(q["attribute"], q["entity"]) for q in questions if q["bucket"].startswith("cluster")}
    return [(a, b) for attr, ent, _, a, b in facts(document) if (attr, ent) in keys]


def at_budget_documents(seed: int, n_chars: int, counter, settings) -> list[tuple[str, list[dict]]]:
    """Two documents whose cluster lies whole in one section: in the first, that
    section's whole worker answer is as long as ``analysis.notes_max_tokens`` allows
    (the most records that fit, the last one's quote as long as fits: as a rule exactly
    the budget); the second's quote has one word more, and passes it. Each question
    carries ``answer_tokens``: that section's whole answer, counted."""
    notes = int(settings["analysis.notes_max_tokens"])

    def build(n: int, pad: int = 0):
        for at in (0.3, 0.7, 0.5, 0.38, 0.62):
            doc, questions = make_document(seed, n_chars, cluster=n, cluster_at=at, cluster_pad=pad)
            where = cluster_section(doc, questions, counter, settings)
            if where is not None:
                k, start, end = where
                tokens = counter.count_text(worker_answer(k, start, doc[start:end]))
                for q in questions:
                    q["answer_tokens"] = tokens
                return doc, questions, tokens
        raise RuntimeError(f"no placement puts a cluster of {n} records whole in one section")

    n = 1
    while build(n + 1)[2] <= notes:
        n += 1
    # One record fewer leaves room for the quoted record, whose words fill it to the edge.
    n = max(1, n - 1)
    fitting = build(n)
    for pad in range(1, 400):
        padded = build(n, pad)
        if padded[2] > notes:
            return [fitting[:2], padded[:2]]
        fitting = padded
    raise RuntimeError("no quote reached the notes budget")


# -- the scripted model -----------------------------------------------------------------

#: A line of the engine's notes: a kept value (``key: value (characters 10-40)``, maybe
#: followed by a correction's mark) or an index line (``key (characters 10-40)``); the
#: index may also come a range to a line (``characters 10-40: key; key``). In the notes
#: an answer no reread can follow is written from (decision 0044), a kept value has no
#: range (``key: value``) and the keys not kept are one line (:data:`ANSWER_INDEX_HEADER`).
NOTE = re.compile(r"^(\w+) of (\w+)(?:: (.+?))?(?: \(characters (\d+)-(\d+)\))?(?: \(corrects [^)]*\))?$")
INDEX_LINE = re.compile(r"^characters (\d+)-(\d+): (.+)$")
INDEX_ENTRY = re.compile(r"^(\w+) of (\w+)$")
SOURCE = re.compile(r"^Notes on (.+?) \([\d,]+ characters(?:, read in sections |\):)")
EXACT = REREAD_HEADER
QUESTION = re.compile(r"What is the (\w+) of (\w+)\?")


def worker_answer(k: int, start: int, section: str) -> str:
    """The scripted worker's whole answer for section ``k`` starting at ``start``."""
    lines = [f"{attr} of {ent}: {value} (characters {start + a}-{start + b})"
             for attr, ent, value, a, b in facts(section)]
    return "\n".join(lines) or "nothing relevant"


def _worker(request) -> str:
    body = request.messages[-1]["content"]
    m = re.search(r"\n\nSection (\d+) of \d+ of .+?, characters (\d+)-(\d+):\n(.*)\Z", body, re.S)
    return worker_answer(int(m.group(1)), int(m.group(2)), m.group(4))


def read_notes(system: str) -> list[tuple[str, str, str | None, str, int, int]]:
    """The notes' lines in a coordinator prompt: (attribute, entity, value or None for
    an index line, original id, start, end)."""
    out, oid = [], None
    for line in system.split(EXACT)[0].splitlines():
        header = SOURCE.match(line)
        if header:
            oid = header.group(1)
        if not oid:
            continue
        n = NOTE.match(line)
        if n:
            at = (int(n.group(4)), int(n.group(5))) if n.group(4) else (-1, -1)  # no range: the latest value
            out.append((n.group(1), n.group(2), n.group(3), oid, *at))
            continue
        if line.startswith(ANSWER_INDEX_HEADER):
            for entry in line[len(ANSWER_INDEX_HEADER):].strip(" .").split("; "):
                e = INDEX_ENTRY.match(entry)
                if e:
                    out.append((e.group(1), e.group(2), None, oid, -1, -1))
            continue
        grouped = INDEX_LINE.match(line)
        for entry in grouped.group(3).split("; ") if grouped else ():
            e = INDEX_ENTRY.match(entry)
            if e:
                out.append((e.group(1), e.group(2), None, oid, int(grouped.group(1)), int(grouped.group(2))))
    return out


UNLISTED = re.compile(r"^\(\d+ more keys, .* are not listed"
                      r"|^" + re.escape(ANSWER_INDEX_HEADER) + r".*\b\d+ (?:more|keys)\.$", re.M)
UNNOTED_RANGE = re.compile(r"^characters (\d+)-(\d+)$", re.M)


def _reread_wanted(system: str, attr: str, ent: str) -> dict | None:
    """What the scripted coordinator reads again for the asked key, as
    ``read_chat_section`` arguments: the range of an index-only key; the key by its name
    when the notes list it nowhere but say keys were left out; else the first range the
    workers could not note. None when the notes hold the value or nothing is left."""
    notes = system.split(EXACT)[0]
    latest = _latest(system, attr, ent)
    ids = [m.group(1) for m in map(SOURCE.match, notes.splitlines()) if m]
    if latest is not None:
        return None if latest[2] is not None else {"section_id": latest[3], "start": latest[4], "end": latest[5]}
    if ids and UNLISTED.search(notes):
        return {"section_id": ids[0], "key": f"{attr} of {ent}"}
    unnoted = UNNOTED_RANGE.search(notes)
    if ids and unnoted:
        start = int(unnoted.group(1))
        return {"section_id": ids[0], "start": start, "end": min(int(unnoted.group(2)), start + 2000)}
    return None


def _latest(system: str, attr: str, ent: str):
    """The asked key's latest note (by where in the original it comes from; a kept value
    before an index line of the same range), or None."""
    notes = [n for n in read_notes(system) if n[0] == attr and n[1] == ent]
    return max(notes, key=lambda n: (n[4], n[2] is not None), default=None)


def _fact_in(text: str, attr: str, ent: str) -> str | None:
    found = [value for a, e, value, _, _ in facts(text) if a == attr and e == ent]
    return found[-1] if found else None


def _notes_text(messages) -> str:
    """The notes of a coordinator prompt: each sits in the message of the item it notes
    (decision 0031); "" when nothing was analysed."""
    mark = "read completely by note-taking workers"
    return "\n\n".join(m["content"] for m in messages if isinstance(m.get("content"), str) and mark in m["content"])


def _coordinator(request) -> list:
    messages = request.messages
    attr, ent = next(QUESTION.search(m["content"]) for m in reversed(messages)
                     if m["role"] == "user" and QUESTION.search(m["content"])).groups()
    system = _notes_text(messages)
    latest = _latest(system, attr, ent)
    wanted = _reread_wanted(system, attr, ent)
    if request.schema is not None:  # R: the constrained reread step
        item = {("id" if k == "section_id" else k): v for k, v in (wanted or {}).items()}
        return [json.dumps({"reread": [item] if item else []})]
    if messages[-1]["role"] == "tool":  # C: the reread's result
        return [_fact_in(str(messages[-1]["content"]), attr, ent) or "unknown"]
    if EXACT in system:  # R: the exact text the step read
        found = _fact_in(system[system.rindex(EXACT):], attr, ent)
        if found:
            return [found]
    if not re.search(r"^Notes on ", system, re.M):
        # No notes: answer from whatever text is in the prompt (conditions A, O, Z).
        return [_fact_in("\n".join(str(m.get("content") or "") for m in messages), attr, ent) or "unknown"]
    if latest is not None and latest[2] is not None:
        return [latest[2]]
    if wanted and request.tools and any(t["function"]["name"] == READ_TOOL_NAME for t in request.tools):
        return [ToolCallChunk("r1", READ_TOOL_NAME, json.dumps(wanted))]
    return ["unknown"]


def scripted_model(request):
    if request.messages and request.messages[0]["content"] == WORKER_INSTRUCTIONS:
        return _worker(request)
    return _coordinator(request)


# -- conditions ---------------------------------------------------------------------------


def condition_settings(window: int, *, notes: int = NOTES_TOKENS, workers: int = 2) -> dict:
    """Each condition's settings: the same window, notes budget and workers; the
    constrained reread step on for R only (B is notes alone)."""
    base = {"chat.n_ctx": window, "analysis.worker_n_ctx": window, "analysis.notes_max_tokens": notes,
            "chat.analysis_workers": workers}
    return {c: config.load(env={}, overrides={**base, **({} if c == "C" else
                                                         {"analysis.constrained_rereads": c == "R"})})
            for c in CONDITIONS}


def record_requests(provider) -> None:
    """Keep every request a provider is sent in ``provider.requests`` (the scripted one
    does already): the calls are counted, and the workers' sections read off them."""
    if hasattr(provider, "requests"):
        return
    provider.requests = []
    send = provider.stream

    def stream(request, **kwargs):
        provider.requests.append(request)
        return send(request, **kwargs)

    provider.stream = stream


SECTION_HEADER = re.compile(r"\n\nSection \d+ of \d+ of .+?, characters (\d+)-(\d+):\n")


def ask(condition: str, document: str, q: dict, counter, settings, provider=None) -> tuple[str, dict]:
    """One reply under ``condition`` with that condition's ``settings``; ``provider``
    is a real model (wrapped by :func:`record_requests`), or None for the scripted one.

    Returns the answer and what the reply took: ``ok`` (it ended in Done), the model
    calls, the rereads (``read_chat_section`` calls, by the tool or the constrained
    step), the sections the workers were sent, and the notes the coordinator saw (kept
    values, index-only keys, whether a line said keys were left out)."""
    window = int(settings["chat.n_ctx"])
    question = question_text(q)
    if provider is None:
        provider = ScriptedProvider(scripted_model, context_window=window, counter=counter)
        provider.supports_tools = condition == "C"
    calls_before = len(provider.requests)
    files: list[tuple[str, str]] = []
    if condition in ("B", "C", "R"):
        files = [("document", document)]
    elif condition == "A":  # the old behaviour: the prefix that fits
        room = window - REPLY_TOKENS - counter.count_prompt([{"role": "user", "content": question}]) - 32
        keep = longest_fitting(len(document), lambda k: counter.count_text(document[:k]) <= room)
        files = [("document", document[:keep])]
    elif condition == "O":
        a, b = q["span"]
        files = [("document", document[a:b])]
    engine = Engine(provider, settings=settings, max_reply_tokens=REPLY_TOKENS)
    started = time.perf_counter()
    events = list(engine.reply([{"role": "user", "content": question}], files=files))
    answer = "".join(e.text for e in events if isinstance(e, ReplyDelta)).strip()
    done = events[-1]
    requests = provider.requests[calls_before:]
    workers = [r for r in requests if r.messages and r.messages[0]["content"] == WORKER_INSTRUCTIONS]
    sections = [(int(m.group(1)), int(m.group(2))) for r in workers
                for m in [SECTION_HEADER.search(r.messages[-1]["content"])] if m]
    worker_calls = set(map(id, workers))
    answering = [r for r in requests if id(r) not in worker_calls and r.schema is None]
    system = _notes_text(answering[-1].messages) if answering else ""
    notes = read_notes(system)
    return answer, {"ok": isinstance(done, Done), "error": done.error if isinstance(done, Failed) else None,
                    "calls": len(requests),
                    "rereads": sum(isinstance(e, ToolCall) and e.name == READ_TOOL_NAME for e in events),
                    "sections": sections, "kept": sum(n[2] is not None for n in notes),
                    "index_only": sum(n[2] is None for n in notes),
                    "listed": any(n[0] == q["attribute"] and n[1] == q["entity"] for n in notes),
                    "keys_left_out": bool(UNLISTED.search(system.split(EXACT)[0])),
                    "max_active": getattr(provider, "max_active", 1), "wall_s": time.perf_counter() - started,
                    "over_window": sum(provider.count_prompt(r.messages, tools=r.tools) + r.max_tokens > window
                                       for r in requests)}


def right(answer: str, value: str) -> bool:
    """The answer gives ``value`` (the scripted model answers exactly the value; a real
    one may wrap it in words)."""
    return value in answer


# -- the run --------------------------------------------------------------------------------


def family_documents(family: str, sizes: tuple[float, ...], documents: int, seed: int, chars_per_token: float,
                     window: int, counter, settings) -> list[tuple[str, list[dict]]]:
    """The seeded documents of one family (regular and dense ones as earlier runs had).
    The families of dense inputs take ``documents`` of theirs (at most 3 clustered and 3
    keys ones, the 2 at-budget ones always): the first is the hardest."""
    out = []
    chars = int(window * 3.0 * chars_per_token)
    if family == "clustered":
        return [make_document(seed * 1000 + 500 + n, chars, cluster=n) for n in CLUSTERS[:documents]]
    if family == "keys":
        for n in KEY_COUNTS[:documents]:
            doc, questions = make_document(seed * 1000 + 600 + n, chars, extra_facts=n - REGULAR_KEYS, ask_extra=True)
            out.append((doc, sample_keys(questions, KEYS_ASKED)))
        return out
    if family == "at-budget":
        return at_budget_documents(seed * 1000 + 700, chars, counter, settings)
    plan = {"regular": [(size, 0) for size in sizes], "dense": [(max(3.0, sizes[-1]), DENSE_EXTRA)],
            "recorrected": [(3.0, 100)], "straddle": [(3.0, 200)]}[family]
    for size, shift in plan:
        for d in range(documents):
            rng_seed = seed * 1000 + int(size * 10) * 10 + d + shift
            doc, questions = make_document(rng_seed, int(window * size * chars_per_token),
                                           extra_facts=DENSE_EXTRA if family == "dense" else 0,
                                           recorrected=family == "recorrected",
                                           line_breaks=family != "straddle")
            if family == "straddle":
                doc = place_straddles(doc, questions, random.Random(rng_seed), counter=counter, settings=settings)
            out.append((doc, questions))
    return out


def sample_keys(questions: list[dict], n: int) -> list[dict]:
    """The questions with at most ``n`` of the "key" ones, spread evenly over the
    document by where their facts are (the first and the last always among them)."""
    keys = sorted((q for q in questions if q["bucket"] == "key"), key=lambda q: q["span"][0])
    if len(keys) > n:
        keys = [keys[round(i * (len(keys) - 1) / (n - 1))] for i in range(n)]
    return [q for q in questions if q["bucket"] != "key"] + keys


def evaluate(documents: list[tuple[str, str, list[dict]]], conditions: tuple[str, ...], settings: dict, counter,
             provider=None, *, echo: bool = False) -> dict:
    """Ask every question of ``documents`` ((family, text, questions)) under each
    condition; the tallies: right and asked by "family bucket", stale and decoy answers,
    calls, rereads, failed replies, prompts over the window, the notes B saw, the
    straddle placements that held, and the misses (or, with ``echo``, every answer)."""
    t = {"results": {c: {} for c in conditions}, "stale": dict.fromkeys(conditions, 0),
         "decoys": dict.fromkeys(conditions, 0),
         "totals": {c: {"calls": 0, "rereads": 0, "failed": 0, "over_window": 0, "max_active": 0, "wall_s": 0.0}
                    for c in conditions},
         "notes_seen": {}, "straddle": {"checked": 0, "held": 0}, "answers": [], "misses": [], "errors": []}
    for family, doc, questions in documents:
        for q in questions:
            for c in conditions:
                answer, info = ask(c, doc, q, counter, settings[c], provider)
                bucket = t["results"][c].setdefault(f"{family} {q['bucket']}", [0, 0])
                ok = right(answer, q["answer"])
                bucket[0] += ok
                bucket[1] += 1
                t["stale"][c] += not ok and any(right(answer, s) for s in q["stale"])
                t["decoys"][c] += not ok and q["decoy"] is not None and right(answer, q["decoy"])
                totals = t["totals"][c]
                for k in ("calls", "rereads", "wall_s", "over_window"):
                    totals[k] += info[k]
                totals["failed"] += not info["ok"]
                totals["max_active"] = max(totals["max_active"], info["max_active"])
                if info["error"] and len(t["errors"]) < 20:
                    t["errors"].append({"condition": c, "family": family, "error": info["error"]})
                if c == "B":
                    seen = t["notes_seen"].setdefault(family, {"replies": 0, "kept": 0, "index_only": 0,
                                                               "most_index_only": 0, "keys_left_out": 0})
                    seen["replies"] += 1
                    seen["kept"] += info["kept"]
                    seen["index_only"] += info["index_only"]
                    seen["most_index_only"] = max(seen["most_index_only"], info["index_only"])
                    seen["keys_left_out"] += info["keys_left_out"]
                if c in ("B", "C", "R") and "straddle" in q:
                    t["straddle"]["checked"] += 1
                    t["straddle"]["held"] += straddles(q["straddle"], tuple(q["span"]), info["sections"])
                if echo:
                    t["answers"].append({"condition": c, "bucket": q["bucket"], "expected": q["answer"],
                                         "answer": answer, "right": ok, "calls": info["calls"],
                                         "rereads": info["rereads"], "wall_s": round(info["wall_s"], 1)})
                    print(f"{c} {q['bucket']:<10} {q['answer']:<8} {'ok ' if ok else '-- '} "
                          f"{info['wall_s']:6.1f} s  {answer[:70]!r}", flush=True)
                elif not ok and c in ("B", "C", "R", "O"):
                    t["misses"].append({"condition": c, "family": family, "bucket": q["bucket"],
                                        "expected": q["answer"], "answer": answer, "span": q["span"],
                                        "rereads": info["rereads"], "listed": info["listed"],
                                        "index_only": info["index_only"], "keys_left_out": info["keys_left_out"]})
    return t


def goal(tallies: dict, conditions: tuple[str, ...]) -> dict:
    """Per rereading condition (C, R): right of asked (outside-the-goal buckets left
    out), stale answers, failed replies, prompts over the window, and whether the goal
    is met: every one right, none stale, failed or over."""
    out = {}
    for c in ("C", "R"):
        if c in conditions:
            inside = [v for k, v in tallies["results"][c].items() if not k.endswith(OUTSIDE_GOAL)]
            totals = tallies["totals"][c]
            g = {"right": sum(r for r, _ in inside), "asked": sum(n for _, n in inside), "stale": tallies["stale"][c],
                 "failed": totals["failed"], "over_window": totals["over_window"]}
            g["met"] = g["right"] == g["asked"] and not g["stale"] and not g["failed"] and not g["over_window"]
            out[c] = g
    return out


# -- the run --------------------------------------------------------------------------------


def _chars_per_token(counter, seed: int) -> float:
    sample = _filler(random.Random(seed), 20_000)
    return len(sample) / counter.count_text(sample)


def _scripted_counter(name: str):
    if name == "llama":
        from boundctx.tokens.llama import LlamaCounter
        return LlamaCounter()
    from boundctx.tokens import ByteEstimateCounter
    return ByteEstimateCounter()


def matrix_cell(job: tuple) -> dict:
    """One configuration of the matrix run (a process of its own may run it): every
    family of dense inputs on its window, notes budget and workers, under the rereading
    conditions (C and R; B too if asked, for what the notes alone keep)."""
    window, notes, workers, families, documents, seed, counter_name, conditions = job
    counter = _scripted_counter(counter_name)
    settings = condition_settings(window, notes=notes, workers=workers)
    cpt = _chars_per_token(counter, seed)
    started = time.perf_counter()
    rows = []
    for family in families:
        docs = [(family, doc, qs) for doc, qs in family_documents(family, (3.0,), documents, seed, cpt, window,
                                                                   counter, settings["B"])]
        tallies = evaluate(docs, conditions, settings, counter)
        rows.append({"window": window, "notes": notes, "workers": workers, "family": family,
                     "documents": len(docs), "questions": sum(len(qs) for _, _, qs in docs),
                     "keys_per_document": [len({(a, e) for a, e, *_ in facts(doc)}) for _, doc, _ in docs],
                     "answer_tokens": [qs[0].get("answer_tokens") for _, _, qs in docs] if family == "at-budget"
                     else None,
                     "goal": goal(tallies, conditions),
                     "B": {"right": sum(r for r, _ in tallies["results"]["B"].values()),
                           "asked": sum(n for _, n in tallies["results"]["B"].values()),
                           "stale": tallies["stale"]["B"], "failed": tallies["totals"]["B"]["failed"]}
                     if "B" in conditions else None,
                     "calls": {c: tallies["totals"][c]["calls"] for c in conditions},
                     "rereads": {c: tallies["totals"][c]["rereads"] for c in conditions},
                     "misses": tallies["misses"][:20], "errors": tallies["errors"][:5]})
    return {"rows": rows, "wall_s": time.perf_counter() - started}


def run_matrix(args) -> int:
    """The dense families over every window, notes budget and worker count of the
    matrix, one configuration a process (as many at once as cores)."""
    import multiprocessing
    import os

    counter_name = args.counter or "llama"
    documents = args.documents or 3
    conditions = tuple(args.conditions or ("C", "R"))
    families = tuple(f for f in (args.families or MATRIX_FAMILIES))
    jobs = [(w, n, k, families, documents, args.seed, counter_name, conditions)
            for w in args.windows for n in args.notes for k in args.workers]
    started = time.perf_counter()
    facts_at_start = run_facts(("boundctx", "llama_cpp_python"))  # the commit the run loaded, not a later one
    with multiprocessing.Pool(min(len(jobs), os.cpu_count() or 1)) as pool:
        cells = []
        for cell in pool.imap(matrix_cell, jobs):
            cells.append(cell)
            for row in cell["rows"]:
                print(_matrix_line(row), flush=True)
    rows = [row for cell in cells for row in cell["rows"]]
    met = all(g["met"] for row in rows for g in row["goal"].values())
    json_out = args.json_out or str(ROOT / "bench" / "results" / "retention-matrix.json")
    report = {"meta": {"model": "scripted", "counter": counter_name, "windows": args.windows, "notes": args.notes,
                       "workers": args.workers, "families": families, "documents_per_family": documents,
                       "clusters": CLUSTERS[:documents], "key_counts": KEY_COUNTS[:documents],
                       "keys_asked_per_document": KEYS_ASKED, "reply_tokens": REPLY_TOKENS, "seed": args.seed,
                       "conditions": conditions, "wall_s": time.perf_counter() - started,
                       "versions": facts_at_start},
              "met": met, "rows": rows}
    pathlib.Path(json_out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(json_out).write_text(json.dumps(report, indent=1))
    print(f"\ngoal in every row: {'met' if met else 'NOT met'}; wall {report['meta']['wall_s']:.0f} s; "
          f"[json] {json_out}")
    return 0


def _matrix_line(row: dict) -> str:
    said = "; ".join(f"{c} {g['right']}/{g['asked']} stale {g['stale']} failed {g['failed']} over "
                     f"{g['over_window']}" for c, g in row["goal"].items())
    met = all(g["met"] for g in row["goal"].values())
    return (f"window {row['window']} notes {row['notes']} workers {row['workers']} {row['family']:<10} "
            f"{said}: {'met' if met else 'NOT met'}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=("scripted", "embedded"), default="scripted",
                    help="scripted (exact by construction, default) or the embedded SmolLM2 through "
                         "llama-cpp-python (reported, not gated; minutes per document)")
    ap.add_argument("--quick", action="store_true",
                    help="one document per family, the byte-estimate counter: a run of seconds")
    ap.add_argument("--matrix", action="store_true",
                    help="scripted: the families of dense inputs over every --windows, --notes and --workers "
                         "(writes retention-matrix.json)")
    ap.add_argument("--windows", type=int, nargs="+", default=list(MATRIX_WINDOWS), help="--matrix windows")
    ap.add_argument("--notes", type=int, nargs="+", default=list(MATRIX_NOTES), help="--matrix notes budgets")
    ap.add_argument("--workers", type=int, nargs="+", default=list(MATRIX_WORKERS), help="--matrix worker counts")
    ap.add_argument("--counter", choices=("llama", "bytes"), default=None,
                    help="scripted only: SmolLM2's tokenizer (default; needs llama-cpp-python) or the byte "
                         "estimate (default with --quick)")
    ap.add_argument("--window", type=int, default=None,
                    help=f"the window in tokens (default {WINDOW}; {BYTES_WINDOW} with the byte estimate)")
    ap.add_argument("--documents", type=int, default=None,
                    help="documents per size (default 3; embedded, quick 1); of the clustered and keys families, "
                         "the first ones of theirs")
    ap.add_argument("--sizes", type=float, nargs="+", default=None,
                    help=f"regular document sizes as multiples of the window (default {' '.join(map(str, SIZES))}; "
                         "embedded and quick 1.5); dense documents take the largest (at least 3), the others are 3")
    ap.add_argument("--families", nargs="+", choices=FAMILIES, default=None,
                    help="default the first four (embedded: regular; --matrix: the dense inputs' three)")
    ap.add_argument("--conditions", nargs="+", choices=CONDITIONS, default=None,
                    help="run only these (default all the model can run; --matrix: C R); e.g. B R on the "
                         "embedded model to see what the constrained reread step adds, in half the time")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json-out", default=None,
                    help="default bench/results/retention.json (embedded: retention-embedded.json; quick: "
                         "retention-quick.json; matrix: retention-matrix.json)")
    args = ap.parse_args(argv)
    if args.matrix:
        if args.model != "scripted":
            ap.error("--matrix runs the scripted model")
        return run_matrix(args)
    embedded = args.model == "embedded"
    documents = args.documents or (1 if embedded or args.quick else 3)
    sizes = tuple(sorted(args.sizes or ((1.5,) if embedded or args.quick else SIZES)))
    families = tuple(args.families or (("regular",) if embedded else FAMILIES[:4]))
    json_out = args.json_out or str(ROOT / "bench" / "results" / (
        "retention-embedded.json" if embedded else "retention-quick.json" if args.quick else "retention.json"))
    provider = None
    if embedded:
        from boundctx.providers.local import LlamaCppProvider
        window = args.window or WINDOW
        provider = LlamaCppProvider(n_ctx=window)
        record_requests(provider)
        counter = provider.counter
        # A tool-capable model rereads with the tool, one without by the constrained step.
        conditions = tuple(c for c in CONDITIONS if c != ("R" if provider.supports_tools else "C"))
    else:
        name = args.counter or ("bytes" if args.quick else "llama")
        counter = _scripted_counter(name)
        window = args.window or (WINDOW if name == "llama" else BYTES_WINDOW)
        conditions = CONDITIONS
    if args.conditions:
        conditions = tuple(c for c in conditions if c in args.conditions)
    settings = condition_settings(window)
    started = time.perf_counter()
    facts_at_start = run_facts(("boundctx", "llama_cpp_python"))  # the commit the run loaded, not a later one
    chars_per_token = _chars_per_token(counter, args.seed)
    documents_run, sizes_seen = [], []
    for family in families:
        for doc, questions in family_documents(family, sizes, documents, args.seed, chars_per_token, window,
                                               counter, settings["B"]):
            sizes_seen.append((family, round(counter.count_text(doc) / window, 2)))
            documents_run.append((family, doc, questions))
    t = evaluate(documents_run, conditions, settings, counter, provider, echo=embedded)
    results, stale, totals = t["results"], t["stale"], t["totals"]
    report = {"meta": {"model": args.model, "window": window, "notes_tokens": NOTES_TOKENS,
                       "workers": int(settings["B"]["chat.analysis_workers"]), "reply_tokens": REPLY_TOKENS,
                       "families": families, "sizes_x_window": sizes_seen, "documents_per_size": documents,
                       "seed": args.seed, "counter": type(counter).__name__, "quick": args.quick,
                       "wall_s": time.perf_counter() - started,
                       "versions": facts_at_start},
              "accuracy": {c: {b: {"right": r, "asked": n, "share": r / n} for b, (r, n) in results[c].items()}
                           for c in conditions},
              "stale_answers": stale, "decoy_answers": t["decoys"], "totals": totals, "goal": goal(t, conditions),
              "notes_seen_in_B": t["notes_seen"], "straddle_placements": t["straddle"], "errors": t["errors"],
              "misses": t["misses"], "answers": t["answers"]}
    pathlib.Path(json_out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(json_out).write_text(json.dumps(report, indent=1))
    for family in families:
        buckets = [b for b in BUCKETS[family] if f"{family} {b}" in results[conditions[0]]]
        print(f"\n{family} documents\n")
        print(markdown_table(("condition", *buckets), [
            (NAMES[c], *(f"{results[c][f'{family} {b}'][0]}/{results[c][f'{family} {b}'][1]}" for b in buckets))
            for c in conditions]))
    print()
    print(markdown_table(
        ("condition", "stale answers", "decoy answers", "model calls", "rereads", "failed replies",
         "prompts over the window", "most generations at once", "reply wall s"),
        [(NAMES[c], stale[c], t["decoys"][c], totals[c]["calls"], totals[c]["rereads"], totals[c]["failed"],
          totals[c]["over_window"], totals[c]["max_active"], f"{totals[c]['wall_s']:.0f}") for c in conditions]))
    print("\nnotes the coordinator saw (B, per reply): " + "; ".join(
        f"{f} {s['kept'] / max(1, s['replies']):.1f} kept, {s['index_only'] / max(1, s['replies']):.1f} index only "
        f"(most {s['most_index_only']}), {s['keys_left_out']} with keys left out"
        for f, s in t["notes_seen"].items()))
    if "straddle" in families:
        print(f"straddle placements that held in the workers' sections: {t['straddle']['held']}/"
              f"{t['straddle']['checked']}")
    for c, g in report["goal"].items():
        print(f"goal ({NAMES[c]}): {g['right']}/{g['asked']} right, {g['stale']} stale, {g['failed']} failed, "
              f"{g['over_window']} over the window: {'met' if g['met'] else 'NOT met'}")
    for e in t["errors"][:5]:
        print(f"failed: {e}")
    print(f"\nsizes (x window): {sizes_seen}; wall {report['meta']['wall_s']:.1f} s; [json] {json_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
