"""The remote byte estimate: conservative by construction, calibrated only on evidence."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boundctx.tokens import ByteEstimateCounter, PromptCountCache, message_text


def msgs(*texts):
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(texts)]


@given(st.text())
def test_an_uncalibrated_estimate_is_the_utf8_byte_bound(text):
    c = ByteEstimateCounter()
    assert c.count_text(text) == len(text.encode("utf-8", "surrogatepass"))
    assert c.piece_bytes(text).sum() == c.count_text(text)


def test_prompt_counts_add_template_overhead_per_message_and_prompt():
    c = ByteEstimateCounter(per_message_overhead=5, per_prompt_overhead=11)
    assert c.count_prompt(msgs("ab", "cde")) == 5 + 2 * 5 + 11
    assert c.count_prompt(msgs("ab"), add_generation_prompt=False) == 2 + 5 + 5
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    assert c.count_prompt(msgs("ab"), tools=tools) > c.count_prompt(msgs("ab"))


def test_message_text_takes_parts_tool_calls_and_ids():
    m = {"role": "assistant", "content": [{"type": "text", "text": "a"}, "b"],
         "tool_calls": [{"id": "c1", "function": {"name": "grep", "arguments": "{\"q\":1}"}}]}
    assert message_text(m) == "abgrep{\"q\":1}"
    assert message_text({"role": "tool", "content": "out", "tool_call_id": "c1"}) == "outc1"


@given(st.lists(st.tuples(st.text(min_size=1, max_size=200), st.floats(0.05, 1.0)), min_size=1, max_size=8))
def test_calibration_never_under_counts_what_it_has_seen(observations):
    c = ByteEstimateCounter(min_observations=2)
    seen = []
    for text, true_ratio in observations:
        m = msgs(text)
        reported = c._overhead(m, True) + math.ceil(true_ratio * len(text.encode("utf-8", "surrogatepass")))
        c.observe(m, reported)
        seen.append((m, reported))
        assert 0 < c.ratio <= 1.0
    for m, reported in seen:
        assert c.count_prompt(m) >= reported


def test_calibration_needs_evidence_before_lowering_the_ratio():
    c = ByteEstimateCounter(min_observations=3, margin=1.25)
    text = "x" * 1000
    for i in range(2):
        c.observe(msgs(text), c._overhead(msgs(text), True) + 250)
        assert c.ratio == 1.0
    c.observe(msgs(text), c._overhead(msgs(text), True) + 250)
    assert c.ratio == pytest.approx(0.25 * 1.25)


def test_an_unpredicted_overflow_resets_to_the_byte_bound():
    c = ByteEstimateCounter(min_observations=1)
    c.observe(msgs("y" * 400), c._overhead(msgs("y"), True) + 100)
    assert c.ratio < 1
    c.observe_overflow()
    assert c.ratio == 1.0 and c.count_text("y" * 400) == 400


def test_a_template_heavier_than_assumed_grows_the_overhead():
    c = ByteEstimateCounter(per_prompt_overhead=4)
    c.observe(msgs("ab"), 60)
    assert c.count_prompt(msgs("ab")) >= 60


@pytest.mark.parametrize("kwargs", [{"margin": 0.9}, {"min_observations": 0},
                                    {"per_message_overhead": -1}])
def test_bad_settings_are_refused(kwargs):
    with pytest.raises(ValueError):
        ByteEstimateCounter(**kwargs)


def test_prompt_cache_counts_each_new_message_once():
    c = ByteEstimateCounter()
    cache = PromptCountCache(c)
    convo = msgs("hello", "world")
    first = cache.estimate(convo)
    assert (cache.hits, cache.misses) == (0, 2)
    convo.append({"role": "user", "content": "again"})
    assert cache.estimate(convo) > first
    assert (cache.hits, cache.misses) == (2, 3)


def test_prompt_cache_checks_the_full_render_near_the_limit():
    class Strict(ByteEstimateCounter):
        full_renders = 0

        def count_prompt(self, messages, **kw):
            if len(messages) > 1:
                Strict.full_renders += 1
            return super().count_prompt(messages, **kw)

    cache = PromptCountCache(Strict())
    convo = msgs("a" * 100, "b" * 100)
    assert cache.fits(convo, 10_000) and Strict.full_renders == 0  # far under: no render
    exact = Strict().count_prompt(convo)
    assert cache.fits(convo, exact) and Strict.full_renders >= 1   # at the limit: rendered
    assert not cache.fits(convo, exact - 1)
