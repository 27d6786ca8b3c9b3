"""The history benchmark's quick run: facts dropped to fit are answered from a search of
the earlier messages (T: the tool, S: the constrained step), never stale; without the
search (D) they are gone and only the kept control is answered; every request fits its
window.

A search whose result does not fit the room left gives the best of its passages that do
(the newest of equals first, so a correction is never the one cut): at a 2,048-token
window, before this, a search's result was refused whole and the fact answered
"unknown".
"""

from __future__ import annotations

import json

import pytest

from bench import bench_history as bh


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("history") / "history-quick.json"
    assert bh.main(["--quick", "--json-out", str(out)]) == 0
    return json.loads(out.read_text())


def test_a_conversation_places_its_facts_where_its_buckets_say():
    messages, questions = bh.make_conversation(5, 200)
    assert len(messages) == 200 and [m["role"] for m in messages[:4]] == ["user", "assistant"] * 2
    at = {q["bucket"]: [] for q in questions}
    for q in questions:
        said = messages[q["at"]]["content"]
        assert messages[q["at"]]["role"] == "user" and q["answer"] in said and q["entity"] in said
        at[q["bucket"]].append(q["at"])
    assert all(i < 10 for i in at["early"]) and all(80 <= i < 120 for i in at["middle"])
    assert at["control"] == [198]
    for q in questions:
        if q["bucket"] == "corrected":
            assert q["stale_at"] < 50 <= 100 <= q["at"] < 180
            assert q["stale"][0] in messages[q["stale_at"]]["content"] and "is now" in messages[q["at"]]["content"]
    lengths = sorted(len(m["content"]) for m in messages)
    assert lengths[0] < 100 and lengths[-1] > 800  # short and long messages alike


def test_the_quick_run_keeps_every_request_in_its_window_and_never_answers_a_stale_value(quick):
    run = quick["runs"]["bytes"]
    assert quick["meta"]["counters"] == ["bytes"] and quick["meta"]["window"] == bh.WINDOW
    assert run["fact_placement"]["held"] == run["fact_placement"]["checked"] > 0  # dropped or kept, as placed
    rows = run["rows"]
    for key, row in rows.items():
        assert row["over_window"] == 0 and row["failed"] == 0 and row["requests_checked"] >= row["asked"], key
        assert row["stale"] == 0 and row["other"] == 0, key  # the value asked, or "unknown": never a wrong one
    assert run["goal"]["D"]["met"]  # without the search: no dropped fact answered, the kept one is
    for size in quick["meta"]["sizes"]:
        for c in ("T", "S"):
            assert rows[f"{size} {c} control"]["right"] == rows[f"{size} {c} control"]["asked"]
            assert rows[f"{size} {c} early"]["right"] > 0  # the search does reach dropped history
        assert rows[f"{size} T early"]["calls_per_reply"] == 2 and rows[f"{size} S early"]["calls_per_reply"] == 2
    # What a search missed, it missed because its result was refused for want of room.
    for miss in run["misses"]:
        if miss["condition"] != "D":
            assert miss["answer"] == "unknown" and miss["refused"], miss


def test_the_goal_every_dropped_fact_is_answered_from_a_search_none_stale(quick):
    goal = quick["runs"]["bytes"]["goal"]
    for c in ("T", "S"):
        assert goal[c]["met"], (c, goal[c])
        assert goal[c]["from_search"] == goal[c]["dropped_asked"] and goal[c]["stale"] == 0


def test_on_the_real_tokenizer_both_searches_meet_the_goal(tmp_path):
    """SmolLM2's tokenizer: every dropped fact is answered from a search, by the tool and
    by the step, and none stale."""
    pytest.importorskip("llama_cpp")
    out = tmp_path / "history-quick-llama.json"
    assert bh.main(["--quick", "--counters", "llama", "--json-out", str(out)]) == 0
    run = json.loads(out.read_text())["runs"]["llama"]
    assert all(row["over_window"] == 0 and row["failed"] == 0 for row in run["rows"].values())
    for c in ("D", "T", "S"):
        assert run["goal"][c]["met"], (c, run["goal"][c], run["misses"])
    for c in ("T", "S"):
        assert run["goal"][c]["from_search"] == run["goal"][c]["dropped_asked"] > 0 and run["goal"][c]["stale"] == 0
