"""Fitting a long history: the same choice as dropping one step at a time and counting
everything again after each (the reference twin), for a handful of exact counts."""

import math
import random

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from boundctx.analysis.fitting import current_turn_start, drop_order, fit_conversation
from boundctx.errors import ContextOverflow

from tests._support.strategies import conversation
from tests._support.strategies import nonadditive_counter as counter
from tests.reference.fitting import fit_analysing, fit_by_dropping


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32), st.integers(0, 220), st.booleans(), st.floats(0.0, 1.2))
@example(1, 16, False, 0.0625)  # no step fits, and history comes back beside the analysis
def test_the_fitted_history_is_what_dropping_one_step_at_a_time_gives(seed, n, system, where):
    rng = random.Random(seed)
    msgs = conversation(rng, n, system=system)
    count, calls = counter(rng)
    whole = count(msgs)
    limit = max(1, int(whole * where))
    turn = current_turn_start(msgs)
    expected = fit_by_dropping(msgs, count, limit, turn, system)
    calls.clear()
    steps = len(drop_order(msgs, turn, system))
    try:
        fit = fit_conversation(msgs, count=count, limit=limit, analysis_on=True, notes_room=0, clip_chars=10**9)
    except ContextOverflow:
        assert expected is None  # only when no step fits and analysis cannot help either
        return
    if expected is None:  # no step fits: analysis, and the history that fits beside it (decision 0023)
        assert fit.analysed_at
        assert (fit.dropped_at, fit.dropped_research) == fit_analysing(msgs, count, limit, turn, system, 0, 0)[:2]
        return
    kept, dropped_at, research = expected
    assert (fit.messages, fit.dropped_at, fit.dropped_research) == (kept, dropped_at, research)
    assert fit.dropped == len(dropped_at) and fit.analysed_at == [] and fit.clipped == []
    # A handful of counts, not one per step: bounded by the bisection's worst case.
    assert len(calls) <= 2 * math.ceil(math.log2(steps + 2)) + 3


def test_a_long_history_takes_a_few_counts_of_about_the_window_not_one_per_step():
    rng = random.Random(7)
    msgs = conversation(rng, 3000, system=True)
    count, calls = counter(rng)
    whole = count(msgs)
    calls.clear()
    fit = fit_conversation(msgs, count=count, limit=whole // 20, analysis_on=True, notes_room=0, clip_chars=10**9)
    assert fit.dropped > 2000
    assert len(calls) <= 6
    assert sum(calls) <= 6 * len(fit.messages) * 1.5  # each count is of about the kept size


def test_an_analysed_turn_keeps_the_history_that_fits_beside_its_notes():
    # A long paste into a conversation: the paste is analysed, and the conversation
    # before it stays as far as it fits beside the notes (decision 0023).
    count = lambda ms: sum(len(m["content"]) for m in ms)  # noqa: E731
    msgs = [{"role": "user", "content": "old " * 50}, {"role": "assistant", "content": "ok " * 50},
            {"role": "user", "content": "x" * 4000}]
    fit = fit_conversation(msgs, count=count, limit=1000, analysis_on=True, notes_room=100, clip_chars=10)
    assert fit.dropped_at == [] and fit.analysed_at == [2] and fit.messages[2]["content"] == "x" * 4000
    # Only the newer exchange fits beside the notes: the older one goes, by its indexes.
    msgs = [{"role": "user", "content": "a" * 300}, {"role": "assistant", "content": "b" * 300},
            {"role": "user", "content": "c" * 100}, {"role": "assistant", "content": "d" * 100},
            {"role": "user", "content": "x" * 4000}]
    fit = fit_conversation(msgs, count=count, limit=700, analysis_on=True, notes_room=50, item_room=50,
                           clip_chars=10)
    assert fit.dropped_at == [0, 1] and fit.analysed_at == [2]
    assert [m["content"][0] for m in fit.messages] == ["c", "d", "x"]
    # With analysis off, the clipped turn keeps the history that fits beside it too.
    tool_turn = msgs[:4] + [{"role": "user", "content": "q"},
                            {"role": "assistant", "content": "", "tool_calls": [{"id": "t", "function": {}}]},
                            {"role": "tool", "tool_call_id": "t", "content": "r" * 5000}]
    fit = fit_conversation(tool_turn, count=count, limit=400, analysis_on=False, notes_room=0, clip_chars=150)
    assert fit.dropped_at == [0, 1] and fit.clipped == [4] and fit.messages[4]["content"] == "r" * 150


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32), st.integers(0, 120), st.booleans(), st.floats(0.02, 0.9), st.integers(0, 200),
       st.integers(0, 200), st.one_of(st.none(), st.integers(0, 200)))
def test_history_kept_beside_analysis_is_what_dropping_one_step_at_a_time_gives(seed, n, system, where,
                                                                                notes_room, item_room, least):
    rng = random.Random(seed)
    msgs = conversation(rng, n, system=system)
    # The current turn holds something large: a tool result of the agent's own call.
    msgs += [{"role": "assistant", "content": "", "tool_calls": [{"id": "big", "type": "function",
                                                                  "function": {"name": "read", "arguments": "{}"}}]},
             {"role": "tool", "tool_call_id": "big", "content": "z" * rng.randint(2000, 20000)}]
    count, _ = counter(rng)
    limit = max(1, int(count(msgs) * where))
    turn = current_turn_start(msgs)
    # With a least room, the full one is tried first, and the least only if it fails.
    expected = fit_analysing(msgs, count, limit, turn, system, notes_room, item_room)
    room = item_room
    if expected is None and least is not None and least < item_room:
        expected = fit_analysing(msgs, count, limit, turn, system, notes_room, least)
        room = least
    whole_fits = count(msgs) <= limit
    try:
        fit = fit_conversation(msgs, count=count, limit=limit, analysis_on=True, notes_room=notes_room,
                               item_room=item_room, item_room_least=least, clip_chars=10**9)
    except ContextOverflow:
        assert expected is None and not whole_fits
        return
    if not fit.analysed_at:  # dropping history alone made it fit: the other property's case
        assert fit_by_dropping(msgs, count, limit, turn, system) is not None
        return
    dropped, research, chosen = expected
    kept = [i for i in range(len(msgs)) if i not in set(fit.dropped_at)]
    assert (fit.dropped_at, fit.dropped_research, fit.item_room) == (dropped, research, room)
    assert [kept[j] for j in fit.analysed_at] == chosen
    assert fit.messages == [msgs[i] for i in kept]  # sent whole; the engine reads what is analysed


@pytest.mark.parametrize("limit", [0, 1])
def test_a_limit_nothing_meets_drops_everything_old(limit):
    msgs = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": ""}]
    with pytest.raises(ContextOverflow) as info:
        fit_conversation(msgs, count=lambda ms: 5 * len(ms), limit=limit, analysis_on=True,
                         notes_room=0, clip_chars=1)
    assert info.value.prompt_tokens == 5  # the current turn alone, every old step dropped
