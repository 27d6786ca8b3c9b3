"""The understanding benchmark: its corpus is well formed, its scoring is right, and on
the scripted gold model it gives the table its construction promises."""

from __future__ import annotations

import json

import msgspec
import pytest

from boundctx import config

from bench import bench_understanding as bu


def test_every_gold_quote_is_in_its_message():
    catalog, records, turns = bu.booking_corpus()
    ids = {r.id for r in records}
    for turn in turns:
        for unit in bu.oracle_gold(turn)["units"]:
            assert unit in turn["message"]
        for act in turn["acts"]:
            assert act["unit"] in turn["message"] and (act["record"] is None or act["record"] in ids)
            op = catalog.operation(act["operation"])
            for name, (evidence, _) in act["arguments"].items():
                assert evidence in act["unit"] and op.param(name)


def test_scoring_follows_bfcl_acceptable_values():
    gold = [("f", {"a": [5], "b": ["New York", "NYC"], "c": ["", 1]})]
    assert bu.score([("f", {"a": 5.0, "b": "new york"})], gold)["whole_plan"]
    assert bu.score([("f", {"a": 5, "b": "NYC", "c": 1})], gold)["whole_plan"]
    wrong = bu.score([("f", {"a": 6, "b": "NYC"})], gold)
    assert not wrong["whole_plan"] and wrong["op_set"] and (wrong["args_right"], wrong["args_total"]) == (2, 3)
    assert not bu.score([("f", {"a": 5, "b": "NYC", "d": 0})], gold)["whole_plan"]  # an argument gold lacks
    assert not bu.score([("f", {"a": 5, "b": "NYC"})] * 2, gold)["whole_plan"]  # one call too many
    assert bu.score([], [])["whole_plan"] and not bu.score([("f", {})], [])["whole_plan"]
    assert not bu.score([("f", {"a": 5})], gold)["whole_plan"]  # a required argument missing


def test_the_scripted_run_is_exact_and_never_a_partial_effect():
    settings = config.load(env={}, overrides={"understanding.max_parallel": 1})
    rows = bu.end_to_end("scripted", settings, 0, lambda entry: None)
    summary = bu.summarise(rows)
    for system in ("pipeline", "baseline"):
        s = summary[f"booking | {system} | all"]
        assert s["whole_plan"] == 1.0 and s["unwarranted_notices"] == 0 and s["failed_closed"] == 0
    assert summary["booking | baseline | all"]["calls_per_turn"] == 1.0
    tasks = bu.per_task("scripted", settings, lambda entry: None)
    assert all(t["right"] == t["asked"] for t in tasks.values())

    def settings_for(calls=None):
        over = {"understanding.max_parallel": 1}
        if calls is not None:
            over["understanding.max_model_calls"] = calls
        return config.load(env={}, overrides=over)

    sweep = bu.budget_sweep("scripted", settings_for, lambda entry: None, None)
    assert all(s["partial_effects"] == 0 for s in sweep)
    bounded = [s["whole_plan_right"] for s in sweep[1:]]
    assert bounded == sorted(bounded)  # more calls never understand less
    assert sweep[1]["whole_plan_right"] < sweep[0]["whole_plan_right"] == len(rows) // 2


@pytest.mark.parametrize("model", ["scripted", "embedded"])
def test_a_recorded_run_replays_with_no_model_to_the_same_plans(model):
    """The recorded baseline and pipeline turns (bench/results) replay through the
    scripted provider, answer for answer, to the plans they produced."""
    from boundctx.understanding import replay_turn

    results = bu.ROOT / "bench" / "results" / f"understanding-{model}.json"
    log = results.with_suffix(".replay.jsonl")
    if not results.exists() or not log.exists():
        pytest.skip(f"no recorded run at {results} (python -m bench.bench_understanding --model {model})")
    report = json.loads(results.read_text())
    catalog, _, turns = bu.booking_corpus()
    replayed = 0
    for row in report["rows"]:
        if row["corpus"] != "booking":
            continue
        turn = f"booking-{row['item']}-{row['system']}"
        got = msgspec.to_builtins(replay_turn(str(log), turn, catalog))  # ReplayDiverged on any difference
        want = row["plan"]
        got["budget"].pop("wall_s"), want["budget"].pop("wall_s")
        assert got == want, turn
        replayed += 1
    assert replayed == 2 * len(turns)
