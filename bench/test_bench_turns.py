"""The turns benchmark computes what its table says: the conversation is the same for
every row, and the goals are read off the turns as the issue states them."""

from __future__ import annotations

from bench import bench_turns as bt


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


def test_the_turn_after_a_paste_must_evaluate_only_its_new_tokens():
    turns = [turn(t, 0, 100, 100, 1.0) for t in range(6)]
    turns[2]["pasted"], turns[2]["decoded"], turns[2]["error"] = True, 3000, None
    for t in turns:
        t.setdefault("pasted", False), t.setdefault("decoded", t["evaluated"]), t.setdefault("error", None)
    g = bt.after_analysed(turns)
    assert [a["turn"] for a in g["after"]] == [3] and g["after_met"] and g["pasted_decoded"] == [3000]
    turns[3]["evaluated"] = 200  # the history evaluated again after the workers
    assert not bt.after_analysed(turns)["after_met"]


def test_conversations_taking_turns_are_judged_from_their_second_turn():
    turns = [{**turn(t, 0, 900 if t == 1 else 110, 100, 1.0), "conversation": c} for t in (1, 2, 3) for c in (0, 1)]
    g = bt.taking_turns(turns)
    assert g["share_evaluating_new_only"] == 1.0 and g["goal_met"]  # the first turns (whole prompts) not judged
    turns[-1]["evaluated"] = 900
    assert bt.taking_turns(turns)["share_evaluating_new_only"] == 0.75 and not bt.taking_turns(turns)["goal_met"]


def test_the_paste_is_about_the_size_asked_and_holds_one_failing_step():
    class Words:
        @staticmethod
        def count_text(text):
            return len(text.split())

    text = bt.paste(3, 5000, Words())
    sizes = [len(line.split()) + 1 for line in text.splitlines()]
    assert sum(sizes) >= 5000 > sum(sizes[:-1]) and text.count("FAILED") == 1
