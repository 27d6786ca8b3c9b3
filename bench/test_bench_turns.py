"""The turns benchmark computes what its table says: the conversation is the same for
every row, and the goals are read off the turns as the issue states them."""

from __future__ import annotations

import bench_turns as bt


def test_every_row_gets_the_same_conversation_of_whole_exchanges():
    a, b = bt.conversation(3, 12), bt.conversation(3, 12)
    assert a == b and len(a) == 24
    assert [m["role"] for m in a[:4]] == ["user", "assistant", "user", "assistant"]
    assert bt.conversation(4, 12) != a


def turn(t, dropped, evaluated, new, ttft):
    return {"turn": t, "dropped": dropped, "evaluated": evaluated, "new_tokens": new, "ttft_s": ttft,
            "prompt_tokens": 1000, "cached_tokens": 1000 - evaluated}


def test_the_goals_are_the_issues_ratios():
    # Below the edge: 1 s, only new tokens. At the edge: one drop (slow, the whole window)
    # and the turns after it cheap again: the median at the edge is a cheap turn.
    turns = [turn(t, 0, 100, 100, 1.0) for t in range(10)]
    turns += [turn(10, 4, 900, 100, 9.0)] + [turn(t, 4, 110, 100, 1.2) for t in range(11, 20)]
    g = bt.goals(turns)
    assert g["edge_turns"] == 10 and g["median_ttft_edge_s"] == 1.2 and g["ttft_goal_met"]
    assert g["share_evaluating_new_only"] == 19 / 20 and g["evaluation_goal_met"]
    # Every edge turn evaluating the window: both goals missed.
    turns = [turn(t, 0, 100, 100, 1.0) for t in range(10)] + [turn(t, 4, 900, 100, 9.0) for t in range(10, 20)]
    g = bt.goals(turns)
    assert g["ttft_edge_over_below"] == 9.0 and not g["ttft_goal_met"] and not g["evaluation_goal_met"]
