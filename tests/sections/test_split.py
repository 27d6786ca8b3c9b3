"""Section splitting: the invariants on every input, native == twin, real tokenizers."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from boundctx._native import sections as native
from boundctx.errors import SectionBudgetTooSmall
from boundctx.sections import split
from boundctx.tokens import ByteEstimateCounter

from tests._support.strategies import hard_texts
from tests.reference import graphemes
from tests.reference import sections as ref

regex = pytest.importorskip("regex", reason="the grapheme oracle needs the regex module (pip install regex)")


def check_invariants(text, sections, counter, max_tokens, overlap):
    """Everything the splitter promises, checked from the outside."""
    assert sections[0].start == 0 and sections[-1].end == len(text)
    inside = set()
    for m in regex.finditer(r"\X", text):
        inside.update(range(m.start() + 1, m.end()))
    for i, s in enumerate(sections):
        assert s.index == i and s.start < s.end or len(text) == 0
        assert s.tokens == counter.count_text(text[s.start:s.end]) <= max_tokens
        if s.cut == "newline":
            assert text[s.end - 1] == "\n"
        elif s.cut == "whitespace":
            assert text[s.end - 1].isspace()
        if s.cut != "hard":
            assert s.end not in inside, f"section {i} ends inside a grapheme cluster"
    for prev, nxt in zip(sections, sections[1:]):
        # Exact overlap, moved back only to a cluster boundary and only a little.
        assert prev.start < nxt.start <= prev.end - overlap
        wanted = prev.end - overlap
        if nxt.start != wanted:
            assert wanted - nxt.start < native.MAX_SNAP
            assert graphemes.is_boundary(text, nxt.start) and not graphemes.is_boundary(text, wanted)
        elif not graphemes.is_boundary(text, wanted):
            # Left inside a cluster only when no boundary lay between it and the
            # previous start (within the snap limit).
            assert not any(graphemes.is_boundary(text, j)
                           for j in range(max(prev.start + 1, wanted - native.MAX_SNAP + 1), wanted))


estimate = ByteEstimateCounter()


@given(hard_texts(60, surrogates=True), st.integers(8, 80), st.integers(0, 6))
def test_invariants_hold_on_adversarial_text_and_the_twin_agrees(text, max_tokens, overlap):
    try:
        sections = split(text, counter=estimate, max_tokens=max_tokens, overlap=overlap)
    except SectionBudgetTooSmall:
        with pytest.raises(ValueError, match="budget"):
            ref.split(text, counter=estimate, max_tokens=max_tokens, overlap=overlap)
        return
    check_invariants(text, sections, estimate, max_tokens, overlap)
    assert [(s.start, s.end, s.tokens, s.cut) for s in sections] == ref.split(
        text, counter=estimate, max_tokens=max_tokens, overlap=overlap)


@pytest.fixture(scope="module", params=["cl100k", "smollm2"])
def real_counter(request):
    return request.getfixturevalue(request.param)


@settings(max_examples=40)
@given(hard_texts(80), st.integers(12, 64))
def test_invariants_hold_with_real_tokenizers(real_counter, text, max_tokens):
    try:
        sections = split(text, counter=real_counter, max_tokens=max_tokens, overlap=8)
    except SectionBudgetTooSmall:  # emoji take up to 7 tokens each: 8 of them may not fit
        with pytest.raises(ValueError, match="budget"):
            ref.split(text, counter=real_counter, max_tokens=max_tokens, overlap=8)
        return
    check_invariants(text, sections, real_counter, max_tokens, 8)
    assert [(s.start, s.end, s.tokens, s.cut) for s in sections] == ref.split(
        text, counter=real_counter, max_tokens=max_tokens, overlap=8)


PATHOLOGICAL = {
    "line_without_spaces": "aGVsbG8gd29ybGQ" * 2000,
    "equals_run": "=" * 9000,
    "cjk_run": "\u4E2D\u6587\u65E5\u672C\u8A9E\u306E\u30C6\u30AD\u30B9\u30C8" * 1200,
    "emoji_run": "\U0001F469\u200D\U0001F4BB\U0001F44D\U0001F3FD\U0001F1EB\U0001F1F7" * 800,
    "crlf_lines": "line of text\r\n" * 2000,
    "zalgo": "Z" + "\u0300\u0301\u0302\u0316" * 3000,
}


@pytest.mark.parametrize("name", sorted(PATHOLOGICAL))
def test_pathological_shapes_keep_every_invariant(real_counter, name):
    text = PATHOLOGICAL[name]
    sections = split(text, counter=real_counter, max_tokens=512, overlap=64)
    check_invariants(text, sections, real_counter, 512, 64)
    if name == "crlf_lines":
        assert all(s.cut in ("newline", "end") for s in sections)
    if name in ("emoji_run", "cjk_run"):
        assert all(s.cut in ("grapheme", "end") for s in sections)
    if name == "zalgo":  # one cluster wider than any window: the only honest cut is inside it
        assert {s.cut for s in sections[:-1]} == {"hard"}


def test_newline_is_preferred_over_whitespace_and_whitespace_over_anywhere(cl100k):
    text = ("word " * 60 + "\n") * 20
    assert {s.cut for s in split(text, counter=cl100k, max_tokens=100, overlap=16)[:-1]} == {"newline"}
    text = "word " * 2000
    assert {s.cut for s in split(text, counter=cl100k, max_tokens=100, overlap=16)[:-1]} == {"whitespace"}


def test_special_token_text_is_split_as_text(cl100k):
    text = "<|endoftext|> " * 500
    sections = split(text, counter=cl100k, max_tokens=50, overlap=10)
    check_invariants(text, sections, cl100k, 50, 10)


def test_empty_text_is_one_empty_section():
    (only,) = split("", counter=estimate, max_tokens=10)
    assert (only.start, only.end, only.cut) == (0, 0, "end")


def test_a_budget_that_cannot_pass_the_overlap_is_refused_clearly(cl100k):
    with pytest.raises(SectionBudgetTooSmall, match="raise max_tokens or lower overlap"):
        split("\u4E2D\u6587" * 500, counter=cl100k, max_tokens=10, overlap=64)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="max_tokens"):
        split("x", counter=estimate, max_tokens=0)
    with pytest.raises(ValueError, match="overlap"):
        split("x", counter=estimate, max_tokens=5, overlap=-1)


def test_a_budget_whose_overlap_leaves_no_whole_cluster_is_refused_not_cut_inside(cl100k):
    # 64 characters of family emoji already take most of the budget: the only cut past
    # the overlap would split a cluster, so the budget is too small.
    family = "\U0001F468\u200D\U0001F469\u200D\U0001F467"
    with pytest.raises(SectionBudgetTooSmall):
        split(family * 60, counter=cl100k, max_tokens=169, overlap=64)
    with pytest.raises(SectionBudgetTooSmall):
        split("ab\r\ncd", counter=estimate, max_tokens=3, overlap=2)


def test_a_text_the_tokenizer_drops_entirely_is_still_one_section(smollm2):
    (only,) = split("\x16", counter=smollm2, max_tokens=5, overlap=0)
    assert (only.start, only.end, only.tokens) == (0, 1, 0)


def test_a_huge_overlap_means_everything_and_does_not_overflow():
    import sys
    with pytest.raises(SectionBudgetTooSmall):
        split("abc def " * 20, counter=estimate, max_tokens=10, overlap=sys.maxsize)


def test_a_calibrated_estimate_sizes_sections_by_its_ratio():
    calibrated = ByteEstimateCounter()
    calibrated.ratio = 0.25
    text = "word " * 2000
    sections = split(text, counter=calibrated, max_tokens=100, overlap=8)
    assert max(s.tokens for s in sections) > 90  # ~400 bytes per section, not ~100


LOG_LINES = ["2026-11-30T10:00:{:02d} step {} ok: compiled 12 files in 0.4s\n",
             "2026-11-30T10:00:{:02d} step {} retried: cache miss \n", "    at frame {} (worker.js:{})\n",
             "\n\n", "ERROR  job {} failed: exit {}\n"]


def test_the_llama_shortcut_re_counts_only_the_edges_and_stays_exact(smollm2, monkeypatch):
    # A log of 3,000 lines, blank runs and indented lines included, split with the
    # embedded model's tokenizer: every section's count is the full count of its text
    # (check_invariants), and what was re-counted is far less than the sections.
    assert smollm2.newline_sync and smollm2.sync_after_text
    text = "".join(LOG_LINES[i % 5].format(i % 60, i) for i in range(3000))
    assert text.count("\n2026") > 1000  # sync points: a newline between two characters
    recounted = []
    real = smollm2.count_text
    monkeypatch.setattr(smollm2, "count_text", lambda t: recounted.append(len(t)) or real(t))
    sections = split(text, counter=smollm2, max_tokens=300, overlap=32)
    monkeypatch.undo()
    check_invariants(text, sections, smollm2, 300, 32)
    assert len(sections) > 20
    assert sum(recounted) < 0.25 * sum(s.end - s.start for s in sections)
