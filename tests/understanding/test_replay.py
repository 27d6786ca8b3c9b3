"""The replay log: one line per attempt (and per turn's start and end) through the
transcript store, and a recorded turn replayed with no model gives the same plan and
the same records, byte for byte."""

import json

import msgspec
import pytest

from boundctx import config
from boundctx.errors import GenerationTimeout, ReplayDiverged
from boundctx.providers import ScriptedProvider, ScriptedReply
from boundctx.transcript import Transcript
from boundctx.understanding import Catalog, ReplayLog, Understander, read_attempts, replay_turn
from boundctx.understanding.replay import plan_hash

from tests._support.booking import CATALOG, GOLD, MESSAGE, RECORDS, catalog
from tests._support.oracle import Oracle


def run(respond, log, *, system="pipeline", message=MESSAGE, clock=None, **over):
    settings = config.load(env={}, overrides={"understanding.max_parallel": 1,
                                              **{f"understanding.{k}": v for k, v in over.items()}})
    u = Understander(ScriptedProvider(respond, **({"clock": clock} if clock else {})), catalog(), settings=settings,
                     log=log, **({"clock": clock} if clock else {}))
    if system == "single_call":
        return u.single_call(message, records=RECORDS, turn="turn-1")
    return u.understand(message, records=RECORDS, turn="turn-1")


def test_every_attempt_is_one_line_of_a_transcript_file(tmp_path):
    path = tmp_path / "replay.jsonl"
    flaky = Oracle(GOLD, RECORDS, faults=lambda kind, n: "oops" if kind == "extract" and n == 1 else None)
    with ReplayLog(str(path)) as log:
        plan = run(flaky, log)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["type"] for line in lines] == ["turn_started"] + ["task_attempt"] * plan.budget.model_calls + [
        "turn_finished"]
    assert all(next(iter(line)) == "type" for line in lines)
    started, first = lines[0], lines[1]
    assert started["message"] == MESSAGE and started["catalog_sha256"] == catalog().sha256
    assert started["settings"]["understanding.max_parallel"] == 1 and len(started["records"]) == len(RECORDS)
    assert set(first) >= {"turn", "unit", "task", "attempt", "prompt_sha256", "model", "sampling", "raw_output",
                          "valid", "problems", "prompt_tokens", "completion_tokens", "elapsed_s", "counted_prompt"}
    extract = [line for line in lines if line.get("task") == "extract"]
    assert [(e["attempt"], e["role"], e["valid"], e["raw_output"]) for e in extract][0] == (1, "call", False, "oops")
    assert lines[-1]["status"] == plan.status
    with Transcript.open(path) as t:  # the store reads it like any transcript
        assert t.line_count == len(lines)
    assert read_attempts(str(path), turn="turn-1") == log.attempts


FAULTS = {
    "none": None,
    "invalid output": lambda kind, n: "not json" if kind == "route" and n == 1 else None,
    "a call that raised": lambda kind, n: GenerationTimeout("slow") if kind == "locate" and n == 1 else None,
    "a built-in error": lambda kind, n: OSError("connection reset") if kind == "extract" and n == 1 else None,
}


@pytest.mark.parametrize("system", ["pipeline", "single_call"])
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_recorded_turn_replays_byte_for_byte_with_no_model(tmp_path, fault, system):
    path = tmp_path / "replay.jsonl"
    with ReplayLog(str(path)) as log:
        recorded = run(Oracle(GOLD, RECORDS, faults=FAULTS[fault]), log, system=system)
    if fault != "none" and system == "pipeline":
        assert not all(a.valid for a in log.attempts) and recorded.status == "ready"
    again = tmp_path / "again.jsonl"
    with ReplayLog(str(again)) as replayed_log:
        replayed = replay_turn(str(path), "turn-1", catalog())
        assert replayed_log.attempts == []  # replay_turn keeps its own log
    log2 = ReplayLog(str(again))
    settings = config.load(env={}, overrides={"understanding.max_parallel": 1})
    from boundctx.understanding import ReplayProvider
    provider = ReplayProvider(read_attempts(str(path)))
    u = Understander(provider, catalog(), settings=settings, log=log2, clock=provider.clock)
    (u.single_call if system == "single_call" else u.understand)(MESSAGE, records=RECORDS, turn="turn-1")
    log2.close()
    assert msgspec.json.encode(replayed) == msgspec.json.encode(
        msgspec.structs.replace(recorded,
                                budget=msgspec.structs.replace(recorded.budget, wall_s=replayed.budget.wall_s)))
    # The replayed log is the recorded one, byte for byte.
    assert again.read_bytes() == path.read_bytes()


def test_replay_meets_the_bounds_the_recording_met(tmp_path):
    """Estimated usage, counts and the clock come from the log, not from the replaying
    provider: a turn that hit a bound replays to the same bound."""
    now = [0.0]

    def slow(request):  # every call takes 10 s
        now[0] += 10
        return Oracle(GOLD, RECORDS)(request)

    path = tmp_path / "replay.jsonl"
    with ReplayLog(str(path)) as log:
        recorded = run(slow, log, clock=lambda: now[0], wall_clock_s=25)
    assert recorded.budget.exhausted == "wall_clock_s"
    assert replay_turn(str(path), "turn-1", catalog()).budget.exhausted == "wall_clock_s"

    def estimated(request):
        return ScriptedReply(Oracle(GOLD, RECORDS)(request), "stop", 50, 5, usage_estimated=True)

    with ReplayLog(str(tmp_path / "est.jsonl")) as log:
        recorded = run(estimated, log)
    assert recorded.budget.exhausted == "max_prompt_tokens" and recorded.status == "failed_closed"
    assert plan_hash(replay_turn(str(tmp_path / "est.jsonl"), "turn-1", catalog())) == plan_hash(recorded)


def test_a_replay_that_differs_from_its_recording_says_so(tmp_path):
    path = tmp_path / "replay.jsonl"
    with ReplayLog(str(path)) as log:
        run(Oracle(GOLD, RECORDS), log)
    other = Catalog.from_dict({"operations": [{k: v for k, v in op.items() if k != "workflow"}
                                              for op in CATALOG["operations"][:2]]})
    with pytest.raises(ReplayDiverged, match="another catalog"):
        replay_turn(str(path), "turn-1", other)
    with pytest.raises(LookupError, match="no turn 'turn-9'"):
        replay_turn(str(path), "turn-9", catalog())
    # Prompts that changed since the recording (here: another route instruction).
    from boundctx.understanding import TaskConfig
    with pytest.raises(ReplayDiverged, match="record it again"):
        replay_turn(str(path), "turn-1", catalog(), tasks={"route": TaskConfig(instructions="Route it.")})


def test_plans_prompts_and_messages_are_hashed_as_one_canonical_json():
    """Keys sorted, no spaces, characters as they are: the one form all three hashes
    take (a lone surrogate a message may hold included)."""
    import hashlib

    from boundctx.understanding.replay import messages_hash, prompt_hash

    def sha(value):
        text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()

    plan = run(Oracle(GOLD, RECORDS), ReplayLog())
    data = msgspec.to_builtins(plan)
    data["budget"]["wall_s"] = 0
    assert plan_hash(plan) == sha(data)
    odd = [{"role": "user", "content": "caf\u00e9 \ud800"}]
    assert messages_hash(odd) == sha(odd)
    assert prompt_hash({"messages": odd}) == sha({"messages": odd})
    lone = msgspec.structs.replace(plan, units=[msgspec.structs.replace(plan.units[0], text="\ud800")])
    assert plan_hash(lone) != plan_hash(plan)


def test_a_log_line_outside_the_closed_sets_is_refused_when_read(tmp_path):
    path = tmp_path / "replay.jsonl"
    with ReplayLog(str(path)) as log:
        run(Oracle(GOLD, RECORDS), log)
    lines = path.read_text().splitlines()
    for field, line_no in (("role", 1), ("status", len(lines) - 1)):
        bad = tmp_path / f"bad-{field}.jsonl"
        record = json.loads(lines[line_no])
        record[field] = "guessed"
        bad.write_text("\n".join(lines[:line_no] + [json.dumps(record)] + lines[line_no + 1:]) + "\n")
        with pytest.raises(msgspec.ValidationError, match=f"Invalid enum value 'guessed' - at `\\$.{field}`"):
            read_attempts(str(bad))
