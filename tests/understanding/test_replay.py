"""The replay log: one line per attempt through the transcript store, and a recorded
turn replayed with no model gives the same plan and the same records."""

import json

import msgspec
import pytest

from booking import GOLD, MESSAGE, RECORDS, catalog
from boundctx import config
from boundctx.errors import GenerationTimeout
from boundctx.providers import ScriptedProvider
from boundctx.transcript import Transcript
from boundctx.understanding import ReplayLog, Understander, read_attempts, replay_script
from oracle import Oracle


def run(respond, log, **over):
    settings = config.load(env={}, overrides={"understanding.max_parallel": 1, **over})
    u = Understander(ScriptedProvider(respond), catalog(), settings=settings, log=log, clock=lambda: 0.0)
    return u.understand(MESSAGE, records=RECORDS, turn="turn-1")


def test_every_attempt_is_one_line_of_a_transcript_file(tmp_path):
    path = tmp_path / "replay.jsonl"
    flaky = Oracle(GOLD, RECORDS, faults=lambda kind, n: "oops" if kind == "extract" and n == 1 else None)
    with ReplayLog(str(path)) as log:
        plan = run(flaky, log)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) == plan.budget.model_calls == len(log.attempts)
    assert all(next(iter(line)) == "type" and line["type"] == "task_attempt" for line in lines)
    first = lines[0]
    assert set(first) >= {"turn", "unit", "task", "attempt", "prompt_sha256", "model", "sampling", "raw_output",
                          "valid", "problems", "prompt_tokens", "completion_tokens", "elapsed_s"}
    extract = [line for line in lines if line["task"] == "extract"]
    assert [(e["attempt"], e["role"], e["valid"], e["raw_output"]) for e in extract][0] == (1, "call", False, "oops")
    with Transcript.open(path) as t:  # the store reads it like any transcript
        assert t.line_count == len(lines)
    assert read_attempts(str(path), turn="turn-1") == log.attempts


FAULTS = {
    "none": None,
    "invalid output": lambda kind, n: "not json" if kind == "route" and n == 1 else None,
    "a call that raised": lambda kind, n: GenerationTimeout("slow") if kind == "locate" and n == 1 else None,
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_recorded_turn_replays_byte_for_byte_with_no_model(tmp_path, fault):
    faults = FAULTS[fault]
    path = tmp_path / "replay.jsonl"
    with ReplayLog(str(path)) as log:
        recorded = run(Oracle(GOLD, RECORDS, faults=faults), log)
    if fault == "a call that raised":
        assert '"finish_reason":"error:GenerationTimeout"' in path.read_text()
    if fault != "none":
        assert not all(a.valid for a in log.attempts) and recorded.status == "ready"

    replayed_log = ReplayLog(str(tmp_path / "again.jsonl"))
    replayed = run(replay_script(read_attempts(str(path))), replayed_log)
    replayed_log.close()
    assert msgspec.json.encode(replayed) == msgspec.json.encode(recorded)
    # Model name aside (scripted both times), the attempt records are the same bytes.
    assert (tmp_path / "again.jsonl").read_bytes() == path.read_bytes()


def test_a_replay_that_asks_something_new_says_it_diverged(tmp_path):
    with ReplayLog() as log:
        run(Oracle(GOLD, RECORDS), log)
    settings = config.load(env={}, overrides={"understanding.max_parallel": 1, "understanding.repairs": 0})
    u = Understander(ScriptedProvider(replay_script(log.attempts)), catalog(), settings=settings)
    plan = u.understand("cancel everything, and more", records=RECORDS)
    assert plan.status == "failed_closed" and "replay diverged" in plan.notices[0].message
