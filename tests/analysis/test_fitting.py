"""Fitting a long history: the same choice as dropping one step at a time and counting
everything again after each (the reference twin), for a handful of exact counts."""

import math
import random

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from boundctx.analysis.fitting import current_turn_start, drop_order, fit_conversation
from boundctx.errors import ContextOverflow

from reference.fitting import fit_analysing, fit_by_dropping


def conversation(rng: random.Random, n: int, *, system: bool) -> list[dict]:
    """A history with plain exchanges, tool exchanges (a call and its results), a
    stray result, and a current turn at the end."""
    msgs = [{"role": "system", "content": "be brief"}] if system else []
    while len(msgs) < n:
        r = rng.random()
        words = " ".join("w" * rng.randint(1, 9) for _ in range(rng.randint(0, 60)))
        if r < 0.45:
            msgs.append({"role": "user", "content": words})
        elif r < 0.8:
            msgs.append({"role": "assistant", "content": words})
        elif r < 0.97:
            calls = [{"id": f"c{len(msgs)}-{j}", "type": "function",
                      "function": {"name": "read", "arguments": "{}"}} for j in range(rng.randint(1, 3))]
            msgs.append({"role": "assistant", "content": "", "tool_calls": calls})
            msgs.extend({"role": "tool", "tool_call_id": c["id"], "content": words * rng.randint(1, 4)}
                        for c in calls)
        else:
            msgs.append({"role": "tool", "tool_call_id": "orphan", "content": words})
    msgs.append({"role": "user", "content": "the question " + "q" * rng.randint(0, 300)})
    return msgs


def counter(rng: random.Random):
    """An exact count that is not additive: tokens per character vary by message, each
    message adds framing, and each join between neighbours adds a little; dropping a
    message never adds tokens (each message costs more than any join it removes)."""
    per_char = rng.choice([0.2, 0.25, 0.33, 0.5, 1.0])
    base = rng.randint(0, 40)

    def cost(m):
        text = m.get("content") or ""
        return 4 + math.ceil(len(text) * per_char) + 7 * len(m.get("tool_calls") or ())

    def join(a, b):
        return (len(a.get("content") or "") + len(b.get("content") or "")) % 3

    calls = []

    def count(msgs):
        calls.append(len(msgs))
        return base + sum(cost(m) for m in msgs) + sum(join(a, b) for a, b in zip(msgs, msgs[1:]))

    return count, calls


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
       st.integers(0, 200))
def test_history_kept_beside_analysis_is_what_dropping_one_step_at_a_time_gives(seed, n, system, where,
                                                                                notes_room, item_room):
    rng = random.Random(seed)
    msgs = conversation(rng, n, system=system)
    # The current turn holds something large: a tool result of the agent's own call.
    msgs += [{"role": "assistant", "content": "", "tool_calls": [{"id": "big", "type": "function",
                                                                  "function": {"name": "read", "arguments": "{}"}}]},
             {"role": "tool", "tool_call_id": "big", "content": "z" * rng.randint(2000, 20000)}]
    count, _ = counter(rng)
    limit = max(1, int(count(msgs) * where))
    turn = current_turn_start(msgs)
    expected = fit_analysing(msgs, count, limit, turn, system, notes_room, item_room)
    whole_fits = count(msgs) <= limit
    try:
        fit = fit_conversation(msgs, count=count, limit=limit, analysis_on=True, notes_room=notes_room,
                               item_room=item_room, clip_chars=10**9)
    except ContextOverflow:
        assert expected is None and not whole_fits
        return
    if not fit.analysed_at:  # dropping history alone made it fit: the other property's case
        assert fit_by_dropping(msgs, count, limit, turn, system) is not None
        return
    dropped, research, chosen = expected
    kept = [i for i in range(len(msgs)) if i not in set(fit.dropped_at)]
    assert (fit.dropped_at, fit.dropped_research) == (dropped, research)
    assert [kept[j] for j in fit.analysed_at] == chosen
    assert fit.messages == [msgs[i] for i in kept]  # sent whole; the engine reads what is analysed


@pytest.mark.parametrize("limit", [0, 1])
def test_a_limit_nothing_meets_drops_everything_old(limit):
    msgs = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": ""}]
    with pytest.raises(ContextOverflow) as info:
        fit_conversation(msgs, count=lambda ms: 5 * len(ms), limit=limit, analysis_on=True,
                         notes_room=0, clip_chars=1)
    assert info.value.prompt_tokens == 5  # the current turn alone, every old step dropped
