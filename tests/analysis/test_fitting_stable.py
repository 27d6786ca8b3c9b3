"""A conversation that grows turn by turn keeps the start of its prompt: drops come at
most once per ``1 - low_water`` of the limit, go down to the low water, and are the
same whether they are remembered or worked out again (decision 0029)."""

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from boundctx.analysis.fitting import (
    DropMemo,
    current_turn_start,
    drop_order,
    fit_conversation,
    previous_cut,
    stable_drops,
)
from boundctx.errors import ContextOverflow

from tests._support.strategies import conversation, nonadditive_counter
from tests.reference.fitting import drops_turn_by_turn, fit_analysing_stable


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32), st.integers(0, 160), st.booleans(), st.floats(0.02, 1.2), st.floats(0.05, 1.0),
       st.booleans())
def test_stable_drops_are_what_replaying_the_turns_one_step_at_a_time_gives(seed, n, system, where, low_water,
                                                                          remembered):
    rng = random.Random(seed)
    msgs = conversation(rng, n, system=system)
    if rng.random() < 0.3:  # a turn that goes on: a tool call and its result after the question
        msgs += [{"role": "assistant", "content": "", "tool_calls": [{"id": "t", "function": {}}]},
                 {"role": "tool", "tool_call_id": "t", "content": "r" * rng.randint(0, 400)}]
    count, _ = nonadditive_counter(rng)
    limit = max(1, int(count(msgs) * where))
    turn = current_turn_start(msgs)
    memo = DropMemo() if remembered else None
    if memo is not None:  # the turns before were asked first, as a front end resending them does
        earlier = [u for u in range(turn) if msgs[u]["role"] == "user"]
        for u in earlier[-3:]:
            stable_drops(msgs[:u + 1], u, system, count, limit, low_water, memo=memo)
    fast = stable_drops(msgs, turn, system, count, limit, low_water, memo=memo)
    assert (set(fast[0]), fast[1]) == drops_turn_by_turn(msgs, count, limit, turn, system, low_water)


def grow(rng: random.Random, turns: int):
    """A conversation resent turn after turn: each request is the one before, its reply,
    and a new question (sometimes with a tool exchange in between)."""
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello " * rng.randint(1, 30)}]
    for _ in range(turns):
        yield list(msgs)
        if rng.random() < 0.2:
            msgs += [{"role": "assistant", "content": "", "tool_calls": [{"id": "c", "function": {}}]},
                     {"role": "tool", "tool_call_id": "c", "content": "x" * rng.randint(1, 300)}]
        msgs += [{"role": "assistant", "content": "a " * rng.randint(1, 80)},
                 {"role": "user", "content": "q " * rng.randint(1, 60)}]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32), st.sampled_from([0.3, 0.5, 0.75, 0.9]), st.integers(300, 1500))
def test_a_growing_conversation_keeps_its_prefix_and_drops_once_per_low_water(seed, low_water, limit):
    rng = random.Random(seed)
    count, _ = nonadditive_counter(rng)
    memo = DropMemo()
    target = int(limit * low_water)
    before = None  # (messages, dropped, kept) of the turn before
    drops = 0
    for msgs in grow(rng, 60):
        fit = fit_conversation(msgs, count=count, limit=limit, analysis_on=True, notes_room=0, clip_chars=10**9,
                               low_water=low_water, memo=memo)
        if fit.analysed_at:  # a single turn over the limit: outside what stability is about
            before = None
            continue
        assert count(fit.messages) <= limit
        dropped = set(fit.dropped_at)
        if before is not None:
            old_msgs, old_dropped, old_kept = before
            assert old_dropped <= dropped  # nothing dropped comes back
            if dropped == old_dropped:
                # No drop: the prompt is the one before with the new messages after it.
                assert fit.messages[:len(old_kept)] == old_kept
            else:
                drops += 1
                # A drop only when the last one's cut no longer fits...
                assert count([m for i, m in enumerate(msgs) if i not in old_dropped]) > limit
                # ...and down to the low water, unless even every old step dropped is above it.
                droppable = {i for new, _ in drop_order(msgs, current_turn_start(msgs), True) for i in new}
                floor = count([m for i, m in enumerate(msgs) if i not in droppable])
                assert count(fit.messages) <= target or floor > target
        before = (msgs, dropped, list(fit.messages))
    # A drop is no more often than the growth it makes room for: with each turn adding
    # at most ~250 tokens here, that is one per (1 - low_water) * limit / 250 turns.
    room = (1 - low_water) * limit
    assert drops <= 1 + 60 * 250 / max(room, 1)


def test_a_remembered_cut_that_no_longer_fits_is_checked_and_dropped_past():
    # A memo is a shortcut, never a bound: drops found there are counted again, and a
    # prompt over the limit drops more, whatever the memo said.
    count = lambda ms: sum(len(m["content"]) for m in ms)  # noqa: E731
    msgs = [{"role": "user", "content": "a" * 300}, {"role": "assistant", "content": "b" * 300},
            {"role": "user", "content": "c" * 300}, {"role": "assistant", "content": "d" * 300},
            {"role": "user", "content": "q" * 10}]
    memo = DropMemo()
    honest, _ = stable_drops(msgs, 4, False, count, 1000, 0.5, memo=memo)
    assert honest == {0, 1, 2, 3} or count([m for i, m in enumerate(msgs) if i not in honest]) <= 500
    wrong = DropMemo()
    stable_drops(msgs[:3], 2, False, count, 1000, 0.5, memo=wrong)
    for key in list(wrong._found):
        wrong._found[key] = ()  # claims that nothing was dropped, for every turn
    dropped, fits = stable_drops(msgs, 4, False, count, 1000, 0.5, memo=wrong)
    assert fits and count([m for i, m in enumerate(msgs) if i not in dropped]) <= 1000


def test_the_memo_keeps_only_its_most_recent_entries():
    memo = DropMemo(entries=3)
    for k in range(5):
        memo.put(bytes([k]), frozenset({k}))
    assert len(memo) == 3 and memo.get(bytes([0])) is None and memo.get(bytes([4])) == {4}
    memo.get(bytes([2]))  # used: kept over the older one
    memo.put(bytes([9]), frozenset())
    assert memo.get(bytes([2])) == {2} and memo.get(bytes([3])) is None


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32), st.integers(2, 120), st.booleans(), st.floats(0.02, 0.9), st.floats(0.05, 1.0),
       st.integers(0, 200), st.integers(0, 200), st.booleans())
def test_history_beside_notes_comes_back_from_the_previous_requests_cut(seed, n, system, where, low_water,
                                                                        notes_room, item_room, remembered):
    # Decision 0031: an analysed turn keeps the start the turns around it have (the cut
    # of the request before), dropping more one step at a time only where that is needed.
    rng = random.Random(seed)
    msgs = conversation(rng, n, system=system)
    msgs += [{"role": "assistant", "content": "", "tool_calls": [{"id": "big", "type": "function",
                                                                  "function": {"name": "read", "arguments": "{}"}}]},
             {"role": "tool", "tool_call_id": "big", "content": "z" * rng.randint(2000, 20000)}]
    count, _ = nonadditive_counter(rng)
    limit = max(1, int(count(msgs) * where))
    turn = current_turn_start(msgs)
    memo = DropMemo() if remembered else None
    expected = fit_analysing_stable(msgs, count, limit, turn, system, notes_room, item_room, low_water)
    try:
        fit = fit_conversation(msgs, count=count, limit=limit, analysis_on=True, notes_room=notes_room,
                               item_room=item_room, clip_chars=10**9, low_water=low_water, memo=memo)
    except ContextOverflow:
        assert expected is None and count(msgs) > limit
        return
    if count(msgs) <= limit or not fit.analysed_at:  # fits without analysis: the stable rule alone
        return
    assert expected is not None
    assert (fit.dropped_at, fit.dropped_research) == tuple(expected[:2])
    previous = previous_cut(msgs, turn, system, count, limit, low_water)
    assert previous <= set(fit.dropped_at) or not previous  # never brings back what the turn before dropped


def test_an_analysed_turn_keeps_the_cut_of_the_turn_before():
    count = lambda ms: sum(len(str(m.get("content") or "")) // 4 + 4 for m in ms)  # noqa: E731
    msgs = [m for i in range(12) for m in ({"role": "user", "content": f"question {i} " * 20},
                                           {"role": "assistant", "content": f"answer {i} " * 20})]
    memo = DropMemo()
    before = fit_conversation(msgs[:-1], count=count, limit=1200, analysis_on=True, notes_room=0, item_room=0,
                              low_water=0.5, memo=memo, clip_chars=10**9)  # the request before, up to question 11
    assert before.dropped_at  # the window's edge: the stable cut dropped the oldest exchanges
    # Answer 11, then a file attached to question 12 (the engine puts it before the question).
    pasted = msgs + [{"role": "user", "content": "log line " * 2000}, {"role": "user", "content": "next " * 20}]
    fit = fit_conversation(pasted, count=count, limit=1200, analysis_on=True, notes_room=20, item_room=60,
                           low_water=0.5, memo=memo, turn_start=len(msgs), clip_chars=10**9)
    assert fit.analysed_at and fit.dropped_at == before.dropped_at  # not one message more or fewer
    fewest = fit_conversation(pasted, count=count, limit=1200, analysis_on=True, notes_room=20, item_room=60,
                              low_water=1.0, turn_start=len(msgs), clip_chars=10**9)
    assert len(fewest.dropped_at) < len(before.dropped_at)  # from nothing, more history would have come back
