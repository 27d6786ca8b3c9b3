"""Planning sections by the whole worker prompt they will be sent in."""

import pytest

from boundctx.errors import SectionBudgetTooSmall, SourceTooLarge, TooManySections
from boundctx.sections import JOIN_ALLOWANCE, plan, split
from boundctx.tokens import ByteEstimateCounter

from tests._support import SHARED_DATA

QUESTION = "What failed in this log, and why?"


def worker_prompt(section):
    return [{"role": "system", "content": "You take notes on one section of a long text."},
            {"role": "user", "content": f"Question: {QUESTION}\nNotes so far: \n\nSection:\n{section}"}]


def assert_tiles(text, sections, overlap):
    assert sections[0].start == 0 and sections[-1].end == len(text)
    for prev, nxt in zip(sections, sections[1:]):
        assert prev.start < nxt.start <= prev.end - overlap


def test_every_worker_prompt_fits_the_context_counted_exactly(smollm2):
    text = "".join(f"2026-11-30T02:{i % 60:02d} worker[{i}] step {i}: ok\n" if i % 7 else
                   f"ERROR step {i}: disk full <|im_end|> retrying \u4E2D\u6587 \U0001F469\u200D\U0001F4BB\n"
                   for i in range(400))
    p = plan(text, counter=smollm2, prompt=worker_prompt, context=1024, output_tokens=128, notes_tokens=96)
    assert p.limit == 1024 - 128
    assert p.fixed_tokens == smollm2.count_prompt(worker_prompt("")) + 96 + JOIN_ALLOWANCE
    assert len(p.sections) > 3
    assert_tiles(text, p.sections, 64)
    for s in p.sections:
        # An independent exact count of the very prompt the worker will get.
        exact = smollm2.count_prompt(worker_prompt(text[s.start:s.end])) + 96 + JOIN_ALLOWANCE
        assert s.tokens == exact <= p.limit
    # The budget is used, not wasted: all but the last are filled to near the limit.
    assert min(s.tokens for s in p.sections[:-1]) > p.limit * 0.8


class SlicesCostMore(ByteEstimateCounter):
    """A tokenizer whose slices tokenize longer than the whole text suggested (as BPE
    slices may at their edges), to make the planner shrink and cut again."""

    def count_text(self, text):
        return super().count_text(text) + 12


def test_a_section_over_its_limit_is_cut_again_smaller():
    counter = SlicesCostMore()
    text = "abcdefgh " * 400
    sections = split(text, counter=counter, max_tokens=100, overlap=8)
    assert all(s.tokens <= 100 for s in sections)
    assert all(s.tokens == counter.count_text(text[s.start:s.end]) for s in sections)
    assert max(s.tokens for s in sections) > 90  # shrunk by the excess, not to nothing


def test_a_source_over_the_character_limit_is_refused_before_any_count():
    class Refuses(ByteEstimateCounter):
        def count_prompt(self, *a, **k):
            raise AssertionError("counted a source that should have been refused")

    with pytest.raises(SourceTooLarge, match="1,001 characters, over the limit of 1,000") as info:
        plan("x" * 1001, counter=Refuses(), prompt=worker_prompt, context=4096, output_tokens=0,
             max_source_chars=1000)
    assert (info.value.chars, info.value.limit) == (1001, 1000)


def test_too_many_sections_says_how_many_the_source_needs_without_counting_all_of_it():
    class Counting(ByteEstimateCounter):
        def __init__(self):
            super().__init__()
            self.counted = 0

        def count_prompt(self, messages, **kw):
            self.counted += sum(len(m["content"]) for m in messages)
            return super().count_prompt(messages, **kw)

    text = "line of the log\n" * 2000
    counter = Counting()
    with pytest.raises(TooManySections,
                       match=r"needs more than 4 sections .*about \d+ at the pace of the first 5") as info:
        plan(text, counter=counter, prompt=worker_prompt, context=600, output_tokens=100, max_sections=4)
    full = plan(text, counter=ByteEstimateCounter(), prompt=worker_prompt, context=600, output_tokens=100,
                max_sections=10_000)
    assert len(full.sections) > 5 and info.value.limit == 4
    assert info.value.needed == 5  # a lower bound: one section past the limit
    assert abs(info.value.estimated - len(full.sections)) <= 0.1 * len(full.sections)
    # Only what could still fit was counted: about five sections' worth, not the source.
    assert counter.counted < 6 * full.sections[0].end + 2_000 < len(text)


def test_a_prompt_that_leaves_no_room_is_refused_with_the_numbers():
    counter = ByteEstimateCounter()
    with pytest.raises(SectionBudgetTooSmall, match="Raise the worker context"):
        plan("some text " * 100, counter=counter, prompt=worker_prompt, context=200, output_tokens=100,
             notes_tokens=50)


def test_an_empty_source_is_one_empty_section():
    p = plan("", counter=ByteEstimateCounter(), prompt=worker_prompt, context=1000, output_tokens=10)
    assert [(s.start, s.end) for s in p.sections] == [(0, 0)]


def test_bad_limits_are_refused():
    for kwargs in ({"context": 0}, {"output_tokens": -1}, {"notes_tokens": -1}, {"max_sections": 0},
                   {"max_source_chars": 0}, {"overlap": -1}):
        args = {"counter": ByteEstimateCounter(), "prompt": worker_prompt, "context": 1000,
                "output_tokens": 10, **kwargs}
        with pytest.raises(ValueError, match=next(iter(kwargs))):
            plan("x", **args)


def test_a_real_transcript_pasted_whole_is_planned_within_bounds():
    sessions = SHARED_DATA / "pi-sessions"
    files = sorted(sessions.glob("*.jsonl"), key=lambda f: f.stat().st_size) if sessions.exists() else []
    if not files:
        pytest.skip(f"real pi sessions not found at {sessions} (a clone without ../shared)")
    text = files[-1].read_text(encoding="utf-8", errors="surrogateescape")[:300_000]
    tiktoken = pytest.importorskip("tiktoken")  # noqa: F841
    from boundctx.tokens import TiktokenCounter
    counter = TiktokenCounter("cl100k_base")
    p = plan(text, counter=counter, prompt=worker_prompt, context=4096, output_tokens=512, notes_tokens=384)
    assert_tiles(text, p.sections, 64)
    assert all(s.tokens <= p.limit for s in p.sections)


def test_a_prompt_that_quotes_the_section_twice_still_plans():
    text = "lorem ipsum dolor sit amet " * 200
    p = plan(text, counter=ByteEstimateCounter(), prompt=lambda s: [{"role": "user", "content": s + "\n---\n" + s}],
             context=1000, output_tokens=0)
    assert_tiles(text, p.sections, 64)
    assert all(s.tokens <= 1000 for s in p.sections)
    assert max(s.tokens for s in p.sections) > 800  # shrunk in proportion, not to nothing
