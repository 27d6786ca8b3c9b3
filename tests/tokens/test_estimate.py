"""The remote byte estimate: conservative by construction, calibrated only on evidence."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boundctx.tokens import ByteEstimateCounter, message_text


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


@given(st.lists(st.tuples(st.text(min_size=1, max_size=200), st.floats(0.0, 3.0)), min_size=1, max_size=8))
def test_calibration_only_ever_makes_the_estimate_safer(observations):
    """Whatever a server reports (0, far too few, more than the bytes), no count goes
    down, and every prompt seen is counted at least as reported."""
    c = ByteEstimateCounter()
    probe = msgs("a probe text, 40 bytes of it, no more..")
    seen = []
    for text, ratio in observations:
        m = msgs(text)
        before = c.count_prompt(probe)
        reported = c._overhead(m, True) + math.ceil(ratio * len(text.encode("utf-8", "surrogatepass")))
        c.observe(m, reported)
        seen.append((m, reported))
        assert c.count_prompt(probe) >= before and c.ratio == 1.0
    for m, reported in seen:
        assert c.count_prompt(m) >= reported


def test_a_server_that_reports_zero_tokens_changes_nothing():
    c = ByteEstimateCounter()
    text = "x" * 196_000
    for _ in range(10):
        c.observe(msgs(text), 0)
    assert c.count_text(text) == 196_000  # a 196K-character file is still counted whole


def test_an_unpredicted_overflow_resets_a_lowered_ratio_to_the_byte_bound():
    c = ByteEstimateCounter()
    c.ratio = 0.25  # a caller who knows the tokenizer
    c.observe_overflow()
    assert c.ratio == 1.0 and c.count_text("y" * 400) == 400


def test_a_report_above_a_lowered_ratio_brings_back_the_byte_bound():
    c = ByteEstimateCounter()
    c.ratio = 0.25
    c.observe(msgs("y" * 400), c._overhead(msgs("y"), True) + 300)
    assert c.ratio == 1.0


def test_a_template_heavier_than_assumed_grows_the_overhead():
    c = ByteEstimateCounter(per_prompt_overhead=4)
    c.observe(msgs("ab"), 60)
    assert c.count_prompt(msgs("ab")) >= 60


@pytest.mark.parametrize("kwargs", [{"per_message_overhead": -1}, {"per_prompt_overhead": -1}])
def test_bad_settings_are_refused(kwargs):
    with pytest.raises(ValueError):
        ByteEstimateCounter(**kwargs)
