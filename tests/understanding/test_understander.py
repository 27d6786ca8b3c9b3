"""The understanding pipeline with a scripted model: the flow, every shortcut, every
fault, every bound, and fail-closed assembly."""

import json
import threading

import msgspec
import pytest

from boundctx import config
from boundctx.errors import UsageUnavailable
from boundctx.providers import ScriptedProvider, ScriptedReply
from boundctx.understanding import Click, TaskConfig, Understander

from tests._support.booking import CATALOG, GOLD, MESSAGE, RECORDS, catalog
from tests._support.oracle import Oracle, cut, task_kind


def settings(**over):
    return config.load(env={}, overrides={f"understanding.{k}": v for k, v in over.items()})


def understander(respond, *, bounds=None, tasks=None, clock=None, **over):
    provider = ScriptedProvider(respond, **({"clock": clock} if clock else {}))
    kwargs = {"clock": clock} if clock else {}
    return Understander(provider, catalog(), settings=settings(**over), tasks=tasks, bounds=bounds, **kwargs), provider


def kinds(provider):
    return [task_kind(r) for r in provider.requests]


def test_a_two_request_message_becomes_two_acts_on_the_right_records():
    u, provider = understander(Oracle(GOLD, RECORDS))
    plan = u.understand(MESSAGE, records=RECORDS)
    assert plan.status == "ready" and plan.notices == [] and plan.questions == []
    book, cancel = plan.acts
    assert (book.operation, book.record, book.arguments) == ("book_table", "sakura", {"time": "7pm", "party_size": 4})
    assert book.evidence == {"time": "7pm", "party_size": "4 people"}
    assert (cancel.operation, cancel.record, cancel.arguments) == ("cancel_booking", "b1", {})
    # "and" is the only word outside the units: coverage is skipped; "4" is shown by
    # "4 people" and "7pm" by itself: verify is skipped; cancel has no arguments.
    assert sorted(kinds(provider)) == sorted(["segment", "route", "route", "locate", "locate", "extract"])
    assert plan.shortcuts == {"coverage": 1, "verify": 1, "extract": 1}
    assert plan.budget.model_calls == 6 and plan.budget.exhausted is None
    # Chain: segment -> route -> locate -> extract.
    assert plan.budget.chain_depth == 4


def test_every_prompt_carries_the_message_verbatim_and_every_schema_is_strict():
    u, provider = understander(Oracle(GOLD, RECORDS))
    u.understand(MESSAGE, records=RECORDS)

    def strict(schema):
        if isinstance(schema, dict):
            if schema.get("type") == "object":
                assert schema["required"] == list(schema["properties"]) and schema["additionalProperties"] is False
            for v in schema.values():
                strict(v)
        elif isinstance(schema, list):
            for v in schema:
                strict(v)

    for request in provider.requests:
        assert MESSAGE in request.messages[1]["content"]
        strict(request.schema)
        assert "maxLength" not in json.dumps(request.schema)  # length caps are checked in code


def test_a_single_admissible_record_skips_locate_but_a_single_operation_is_still_routed():
    records = [r for r in RECORDS if r.id != "b2"]  # one booking left
    gold = dict(GOLD, units=["cancel the booking"], route={"cancel the booking": ["cancel_booking"]}, locate={})
    u, provider = understander(Oracle(gold, records))
    plan = u.understand("cancel the booking", records=records)
    assert [(a.operation, a.record, a.status) for a in plan.acts] == [("cancel_booking", "b1", "ready")]
    assert "locate" not in kinds(provider) and "route" in kinds(provider)
    assert plan.shortcuts["locate"] == 1


def test_a_click_skips_segment_coverage_route_and_locate():
    gold = dict(GOLD, extract={("Make it 9", "change_time"): {"time": ("9", "9")}})
    u, provider = understander(Oracle(gold, RECORDS))
    plan = u.understand("Make it 9", records=RECORDS, click=Click("change_time", "b2"))
    assert [(a.operation, a.record, a.arguments) for a in plan.acts] == [("change_time", "b2", {"time": "9"})]
    assert kinds(provider) == ["extract"]
    assert plan.shortcuts == {"segment": 1, "coverage": 1, "route": 1, "locate": 1, "verify": 1}


def test_one_unit_asking_for_two_operations_gives_two_acts():
    text = "cancel the Luigi's booking and show me my bookings"
    gold = {"units": [text], "route": {text: ["cancel_booking", "list_bookings"]},
            "locate": {(text, "cancel_booking"): "b1"}, "extract": {}}
    u, _ = understander(Oracle(gold, RECORDS))
    plan = u.understand(text, records=RECORDS)
    assert [(a.operation, a.record) for a in plan.acts] == [("cancel_booking", "b1"), ("list_bookings", None)]


def test_a_message_asking_for_nothing_in_the_catalog_is_a_notice_not_an_act():
    text = "What's the weather in Paris?"
    u, _ = understander(Oracle({"units": [text], "route": {}, "locate": {}, "extract": {}}, RECORDS))
    plan = u.understand(text, records=RECORDS)
    assert plan.status == "nothing" and plan.acts == []
    assert [n.kind for n in plan.notices] == ["no_operation"]


def test_missing_arguments_and_an_unresolved_record_become_a_question_never_a_guess():
    text = "book a table for 2"
    gold = {"units": [text], "route": {text: ["book_table"]}, "locate": {(text, "book_table"): None},
            "extract": {(text, "book_table"): {"party_size": ("2", "2")}}}
    u, provider = understander(Oracle(gold, RECORDS))
    plan = u.understand(text, records=RECORDS)
    assert plan.status == "needs_input"
    act, = plan.acts
    assert act.status == "needs_input" and act.record is None and act.missing == ["@record", "time"]
    question, = plan.questions
    assert question.about == ["@record", "time"] and question.candidates == ["luigis", "sakura"]
    assert "Luigi's" in question.text and "time" in question.text
    assert "question_frame" in kinds(provider)


def test_one_missing_item_frames_its_question_without_a_call():
    text = "book Sakura for 2"
    gold = {"units": [text], "route": {text: ["book_table"]}, "locate": {(text, "book_table"): "sakura"},
            "extract": {(text, "book_table"): {"party_size": ("2", "2")}}}
    u, provider = understander(Oracle(gold, RECORDS))
    plan = u.understand(text, records=RECORDS)
    assert plan.questions[0].about == ["time"] and "question_frame" not in kinds(provider)
    assert plan.shortcuts["question_frame"] == 1


def test_a_value_its_quote_does_not_show_is_verified_and_dropped_when_unsupported():
    # "5" is in the quote (so it has ground) but is not all the quote says: verify decides.
    text = "book Sakura at 7pm for 4 or 5 of us"
    gold = {"units": [text], "route": {text: ["book_table"]}, "locate": {(text, "book_table"): "sakura"},
            "extract": {(text, "book_table"): {"time": ("7pm", "7pm"), "party_size": ("4 or 5 of us", "5")}},
            "verify": {"party_size": "unsupported"}}
    u, provider = understander(Oracle(gold, RECORDS))
    plan = u.understand(text, records=RECORDS)
    verify = next(r for r in provider.requests if task_kind(r) == "verify")
    assert "party_size" in verify.messages[1]["content"] and "- time:" not in verify.messages[1]["content"]
    act, = plan.acts
    assert "party_size" not in act.arguments and act.missing == ["party_size"]


def test_words_left_out_of_every_unit_send_segmentation_back_once():
    text = "Book Sakura for 4 people at 7pm, no shellfish please"
    gold = {"units": ["Book Sakura for 4 people at 7pm"], "coverage": ["no shellfish"],
            "resegmented": ["Book Sakura for 4 people at 7pm, no shellfish"],
            "route": {"Book Sakura for 4 people at 7pm, no shellfish": ["book_table"]},
            "locate": {("Book Sakura for 4 people at 7pm, no shellfish", "book_table"): "sakura"},
            "extract": {("Book Sakura for 4 people at 7pm, no shellfish", "book_table"): {
                "time": ("7pm", "7pm"), "party_size": ("4", "4"), "note": ("no shellfish", "no shellfish")}}}
    u, provider = understander(Oracle(gold, RECORDS))
    plan = u.understand(text, records=RECORDS)
    assert kinds(provider)[:3] == ["segment", "coverage", "segment"]
    assert "no shellfish" in provider.requests[2].messages[1]["content"]
    assert plan.acts[0].arguments["note"] == "no shellfish" and plan.status == "ready"


def test_a_constraint_still_left_out_after_resegmentation_fails_the_turn_closed():
    text = "Book Sakura for 4 people at 7pm, no shellfish please"
    gold = dict(GOLD, units=["Book Sakura for 4 people at 7pm"], coverage=["no shellfish"],
                resegmented=["Book Sakura for 4 people at 7pm"])
    u, provider = understander(Oracle(gold, RECORDS))
    plan = u.understand(text, records=RECORDS)
    assert plan.status == "failed_closed" and plan.acts == []
    assert plan.notices[0].kind == "lost_constraint" and "no shellfish" in plan.notices[0].message
    assert kinds(provider) == ["segment", "coverage", "segment"]


@pytest.mark.parametrize("fault, why", [
    ("not json at all", "not JSON"),
    ('{"units": [{"first": 1, "last": 2}], "extra": 1}', "unexpected field"),
    ('{"units": [{"first": 5, "last": 2}]}', "not a span of words"),
    ('{"units": [{"first": 1, "last": 99}]}', "is not one of"),
    ('{"units": [{"first": 1, "last": 7}, {"first": 5, "last": 12}]}', "do not overlap"),
    (cut(), "cut at max_tokens"),
])
def test_an_invalid_output_is_repaired_once_told_what_was_wrong(fault, why):
    oracle = Oracle(GOLD, RECORDS, faults=lambda kind, n: fault if kind == "segment" and n == 1 else None)
    u, provider = understander(oracle)
    plan = u.understand(MESSAGE, records=RECORDS)
    assert plan.status == "ready" and len(plan.acts) == 2
    repair = provider.requests[1]
    assert task_kind(repair) == "segment" and why in repair.messages[-1]["content"]
    attempts = [a for a in u.log.attempts if a.task == "segment"]
    assert [(a.attempt, a.role, a.valid) for a in attempts] == [(1, "call", False), (2, "repair", True)]
    assert why in attempts[0].problems[0]
    assert plan.budget.chain_depth == 5  # the repair is one more link in the chain


def test_an_out_of_set_id_is_refused_and_repaired():
    oracle = Oracle(GOLD, RECORDS, faults=lambda kind, n: '{"operations": ["o9"]}' if kind == "route" and n == 1
                    else None)
    u, _ = understander(oracle, max_parallel=1)
    plan = u.understand(MESSAGE, records=RECORDS)
    assert plan.status == "ready"
    bad = next(a for a in u.log.attempts if a.task == "route" and not a.valid)
    assert "is not one of" in bad.problems[0]


def test_a_unit_still_invalid_after_repairs_is_a_notice_and_holds_acts_on_any_record():
    # route of the second unit always answers garbage: that unit may touch any record,
    # so the first unit's act on a record is held too.
    def faults(kind, n):
        return "garbage" if kind == "route" and n >= 2 else None
    u, _ = understander(Oracle(GOLD, RECORDS, faults=faults), max_parallel=1)
    plan = u.understand(MESSAGE, records=RECORDS)
    assert plan.status == "incomplete"
    assert [(a.operation, a.status) for a in plan.acts] == [("book_table", "held")]
    assert [n.kind for n in plan.notices] == ["not_understood"] and plan.notices[0].unit == "u2"


def test_a_failure_after_locate_holds_only_acts_on_that_record():
    text = "cancel the Luigi's booking and show me my bookings"
    gold = {"units": ["cancel the Luigi's booking", "show me my bookings"],
            "route": {"cancel the Luigi's booking": ["change_time"], "show me my bookings": ["list_bookings"]},
            "locate": {("cancel the Luigi's booking", "change_time"): "b1"}, "extract": {}}
    u, _ = understander(Oracle(gold, RECORDS, faults=lambda kind, n: "x" if kind == "extract" else None))
    plan = u.understand(text, records=RECORDS)
    assert plan.status == "incomplete"
    assert [(a.operation, a.status) for a in plan.acts] == [("list_bookings", "ready")]
    assert plan.notices[0].kind == "not_understood" and "change_time" in plan.notices[0].message


def test_a_failed_segmentation_fails_the_turn_closed():
    u, provider = understander(Oracle(GOLD, RECORDS, faults=lambda kind, n: "nope"))
    plan = u.understand(MESSAGE, records=RECORDS)
    assert plan.status == "failed_closed" and plan.acts == [] and plan.units == []
    assert plan.notices[0].kind == "segmentation_failed"
    assert kinds(provider) == ["segment", "segment"]  # the call and its one repair


def test_votes_need_a_strict_majority():
    two = '{"units": [{"first": 1, "last": 7}, {"first": 9, "last": 12}]}'
    answers = iter([two, '{"units": [{"first": 1, "last": 12}]}', two])
    oracle = Oracle(GOLD, RECORDS, faults=lambda kind, n: next(answers) if kind == "segment" else None)
    u, _ = understander(oracle, votes=3)
    plan = u.understand(MESSAGE, records=RECORDS, turn="t1")
    assert len(plan.units) == 2
    roles = [a.role for a in u.log.attempts if a.task == "segment"]
    assert roles == ["call", "vote", "vote"]

    split = iter(['{"units": [{"first": 1, "last": 7}]}', '{"units": [{"first": 9, "last": 12}]}'])
    oracle = Oracle(GOLD, RECORDS, faults=lambda kind, n: next(split) if kind == "segment" else None)
    u, _ = understander(oracle, tasks={"segment": TaskConfig(votes=2)})
    plan = u.understand(MESSAGE, records=RECORDS)
    assert plan.status == "failed_closed" and "majority" in plan.notices[0].message


def test_escalation_asks_another_model_once_when_repairs_are_spent():
    strong = ScriptedProvider(Oracle(GOLD, RECORDS))
    oracle = Oracle(GOLD, RECORDS, faults=lambda kind, n: "nope" if kind == "segment" else None)
    u, provider = understander(oracle, tasks={"segment": TaskConfig(escalate_to=strong, repairs=0)})
    plan = u.understand(MESSAGE, records=RECORDS)
    assert plan.status == "ready"
    assert [task_kind(r) for r in strong.requests] == ["segment"]
    assert [a.role for a in u.log.attempts if a.task == "segment"] == ["call", "escalation"]


def test_a_task_can_have_its_own_prompt_model_and_sampling():
    other = ScriptedProvider(lambda request: '{"operations": ["o2"]}')
    text = "cancel the Luigi's booking"
    gold = dict(GOLD, units=[text])
    u, provider = understander(Oracle(gold, RECORDS), tasks={
        "route": TaskConfig(provider=other, temperature=0.7, max_tokens=40)})
    plan = u.understand(text, records=RECORDS)
    assert plan.acts[0].operation == "cancel_booking"
    assert [r.temperature for r in other.requests] == [0.7] and other.requests[0].max_tokens == 40
    assert "route" not in kinds(provider)
    with pytest.raises(ValueError, match="no task kinds"):
        Understander(provider, catalog(), tasks={"rout": TaskConfig()})


# -- bounds --------------------------------------------------------------------------


def full_plan():
    u, provider = understander(Oracle(GOLD, RECORDS), max_parallel=1)
    return u.understand(MESSAGE, records=RECORDS), len(provider.requests)


def assert_no_partial_effect(plan, full):
    """Every act that may go ahead is exactly one the full-budget plan has; and no act
    goes ahead beside a unit not understood that (in the full plan) acts on the same
    record, or on the same operation when it acts on no record."""
    full_acts = {msgspec.json.encode(a) for a in full.acts}
    failed = {n.unit for n in plan.notices if n.kind == "not_understood"}
    touched = {(a.record or f"op:{a.operation}") for a in full.acts if a.unit in failed}
    for act in plan.acts:
        if act.status == "ready":
            assert msgspec.json.encode(act) in full_acts
            assert (act.record or f"op:{act.operation}") not in touched, (act, touched)
    if plan.status == "failed_closed":
        assert plan.acts == []


@pytest.mark.parametrize("calls", range(1, 8))
def test_every_model_call_bound_ends_in_a_plan_with_no_partial_effect(calls):
    full, needed = full_plan()
    u, provider = understander(Oracle(GOLD, RECORDS), max_parallel=1, max_model_calls=calls)
    plan = u.understand(MESSAGE, records=RECORDS)
    assert len(provider.requests) == min(calls, needed)
    assert_no_partial_effect(plan, full)
    if calls < needed:
        assert plan.budget.exhausted == "max_model_calls" and plan.status != "ready"
        assert any(n.bound == "max_model_calls" for n in plan.notices)
    else:
        assert plan == msgspec.structs.replace(full, turn=plan.turn, budget=plan.budget)


@pytest.mark.parametrize("depth", range(1, 6))
def test_every_chain_depth_bound_ends_in_a_plan_with_no_partial_effect(depth):
    full, _ = full_plan()
    u, _ = understander(Oracle(GOLD, RECORDS), max_parallel=1, max_chain_depth=depth)
    plan = u.understand(MESSAGE, records=RECORDS)
    assert plan.budget.chain_depth <= depth
    assert_no_partial_effect(plan, full)
    assert (plan.budget.exhausted == "max_chain_depth") == (depth < 4)


def test_every_prompt_token_bound_ends_in_a_plan_with_no_partial_effect():
    full, _ = full_plan()
    spent = full.budget.prompt_tokens
    for cap in range(50, spent + 200, 97):
        u, _ = understander(Oracle(GOLD, RECORDS), max_parallel=1, max_prompt_tokens=cap)
        plan = u.understand(MESSAGE, records=RECORDS)
        assert plan.budget.prompt_tokens <= cap
        assert_no_partial_effect(plan, full)
        assert (plan.budget.exhausted == "max_prompt_tokens") == (cap < spent)


def test_the_wall_clock_bound_with_a_fake_clock():
    now = [0.0]

    def slow(request):  # every call takes 10 s of fake time
        now[0] += 10
        return Oracle(GOLD, RECORDS)(request)

    full, _ = full_plan()
    for limit in (5, 15, 35, 1000):
        now[0] = 0.0
        u, provider = understander(slow, max_parallel=1, wall_clock_s=limit, clock=lambda: now[0])
        plan = u.understand(MESSAGE, records=RECORDS)
        assert_no_partial_effect(plan, full)
        assert (plan.budget.exhausted == "wall_clock_s") == (limit < 60)
        assert len(provider.requests) == min(6, int(limit // 10) + 1)


def test_a_backend_without_usage_cannot_run_under_a_token_bound():
    provider = ScriptedProvider(Oracle(GOLD, RECORDS))
    provider.reports_usage = False
    with pytest.raises(UsageUnavailable, match="max_prompt_tokens = 0"):
        Understander(provider, catalog(), settings=settings()).understand(MESSAGE, records=RECORDS)
    plan = Understander(provider, catalog(), settings=settings(max_prompt_tokens=0)).understand(MESSAGE,
                                                                                              records=RECORDS)
    assert plan.status == "ready"


def test_a_reply_without_usage_exhausts_the_token_bound_instead_of_guessing():
    def no_usage(request):
        return ScriptedReply(Oracle(GOLD, RECORDS)(request), "stop", None, None)
    u, _ = understander(no_usage)
    plan = u.understand(MESSAGE, records=RECORDS)
    assert plan.budget.exhausted == "max_prompt_tokens" and plan.status == "failed_closed"
    assert "no token usage" in plan.notices[0].message


def test_units_run_concurrently_up_to_max_parallel():
    barrier = threading.Barrier(2, timeout=5)
    oracle = Oracle(GOLD, RECORDS)

    def respond(request):
        if task_kind(request) == "route":
            barrier.wait()  # both routes must be in flight at once, or this times out
        return oracle(request)

    u, provider = understander(respond, max_parallel=2)
    plan = u.understand(MESSAGE, records=RECORDS)
    assert plan.status == "ready" and plan.budget.most_parallel == 2
    u, provider = understander(Oracle(GOLD, RECORDS), max_parallel=1)
    assert u.understand(MESSAGE, records=RECORDS).budget.most_parallel == 1 and provider.max_active == 1


def test_bad_input_is_refused_before_any_call():
    u, provider = understander(Oracle(GOLD, RECORDS))
    with pytest.raises(ValueError, match="empty"):
        u.understand("   ")
    with pytest.raises(KeyError, match="no operation 'fly'"):
        u.understand("x", click=Click("fly"))
    from boundctx.errors import CatalogError
    with pytest.raises(CatalogError, match="kind 'car'"):
        u.understand("x", records=[{"id": "c", "kind": "car"}])
    assert provider.requests == []


# -- the single-call baseline --------------------------------------------------------


def test_the_single_call_baseline_gives_the_same_plan_from_one_call():
    u, provider = understander(Oracle(GOLD, RECORDS))
    plan = u.single_call(MESSAGE, records=RECORDS)
    assert kinds(provider) == ["single_call"] and plan.budget.model_calls == 1
    pipeline, _ = full_plan()
    assert [(a.operation, a.record, a.arguments, a.status) for a in plan.acts] == \
        [(a.operation, a.record, a.arguments, a.status) for a in pipeline.acts]
    schema = provider.requests[0].schema
    forms = schema["properties"]["acts"]["items"]["anyOf"]
    assert len(forms) == 4  # one act form per operation, each with its own arguments
    book = forms[0]["properties"]
    assert book["operation"] == {"type": "string", "enum": ["o1"]} and set(book["arguments"]["properties"]) == {
        "time", "party_size", "note"}
    assert book["record"]["enum"] == ["r1", "r2", "none"]  # only restaurants


def test_the_baseline_fails_closed_and_asks_like_the_pipeline():
    u, provider = understander(Oracle(GOLD, RECORDS, faults=lambda kind, n: "[]"))
    plan = u.single_call(MESSAGE, records=RECORDS)
    assert plan.status == "failed_closed" and plan.acts == [] and len(provider.requests) == 2  # + one repair
    text = "book a table for 2"
    gold = {"units": [text], "route": {text: ["book_table"]}, "locate": {(text, "book_table"): None},
            "extract": {(text, "book_table"): {"party_size": ("2", "2")}}}
    u, _ = understander(Oracle(gold, RECORDS))
    plan = u.single_call(text, records=RECORDS)
    assert plan.status == "needs_input" and plan.acts[0].missing == ["@record", "time"]
    assert plan.questions[0].candidates == ["luigis", "sakura"]
    u, _ = understander(Oracle({"units": ["hi"], "route": {}, "locate": {}, "extract": {}}, RECORDS))
    plan = u.single_call("hi", records=RECORDS)
    assert plan.status == "nothing" and plan.notices[0].kind == "no_operation"


def test_an_operations_guidance_reaches_the_tasks_that_read_its_requests():
    u, provider = understander(Oracle(GOLD, RECORDS))
    u.understand(MESSAGE, records=RECORDS)
    readers = [r for r in provider.requests if task_kind(r) in ("locate", "extract")
               and "book_table" in r.messages[1]["content"]]
    assert len(readers) == 2
    for request in readers:
        assert "Guidance: The party size counts the user." in request.messages[1]["content"]


# -- holds, from the review's mutations ----------------------------------------------


def test_a_failure_on_a_record_holds_every_act_on_that_record_and_only_those():
    """u1 cancels b1 and fails in extract (change_time on b1); u2 adds a note to b1 and
    u3 lists bookings: u2's act shares b1 and is held, u3's is not."""
    text = "move Luigi's booking, add a note to it, and show my bookings"
    units = ["move Luigi's booking", "add a note to it", "show my bookings"]
    gold = {"units": units, "route": {units[0]: ["change_time"], units[1]: ["add_note"], units[2]: ["list_bookings"]},
            "locate": {(units[0], "change_time"): "b1", (units[1], "add_note"): "b1"},
            "extract": {(units[1], "add_note"): {"note": ("a note", "a note")}}}
    catalog_data = json.loads(json.dumps(CATALOG))
    catalog_data["operations"].append({"name": "add_note", "description": "Add a note to a booking",
                                       "record_kind": "booking",
                                       "params": [{"name": "note", "type": "string", "description": "the note"}]})
    catalog_data["workflows"][0]["operations"].append("add_note")
    from boundctx.understanding import Catalog
    u = Understander(ScriptedProvider(Oracle(gold, RECORDS, faults=lambda kind, n: "x" if kind == "extract" and
                                             n <= 2 else None)),
                     Catalog.from_dict(catalog_data), settings=settings(max_parallel=1))
    plan = u.understand(text, records=RECORDS)
    assert [(a.operation, a.record, a.status) for a in plan.acts] == [
        ("add_note", "b1", "held"), ("list_bookings", None, "ready")]
    notice, = [n for n in plan.notices if n.kind == "not_understood"]
    assert notice.unit == "u1" and notice.holds == ["b1"]


def test_a_failure_on_an_operation_without_records_holds_that_operations_other_acts():
    """Two requests for the same record-less operation: when the second (a correction,
    say) is not understood, the first must not go ahead alone."""
    from boundctx.understanding import Catalog
    catalog_ = Catalog.from_dict({"operations": [
        {"name": "send", "description": "Send a message", "params": [{"name": "text", "type": "string"}]},
        {"name": "list_bookings", "description": "Show bookings"}]})
    units = ["send hi", "no, send hello", "show bookings"]
    text = "send hi, no, send hello, show bookings"
    gold = {"units": units, "route": {units[0]: ["send"], units[1]: ["send"], units[2]: ["list_bookings"]},
            "locate": {}, "extract": {(units[0], "send"): {"text": ("hi", "hi")}}}
    faults = lambda kind, n: "x" if kind == "extract" and n in (2, 3) else None  # noqa: E731 - u2's call, repair
    u = Understander(ScriptedProvider(Oracle(gold, [], faults=faults)), catalog_, settings=settings(max_parallel=1))
    plan = u.understand(text)
    assert [(a.operation, a.status) for a in plan.acts] == [("send", "held"), ("list_bookings", "ready")]
    assert [n.holds for n in plan.notices if n.kind == "not_understood"] == [["op:send"]]


def test_a_unit_whose_operations_are_unknown_holds_every_act_even_on_no_record():
    def faults(kind, n):
        return "garbage" if kind == "route" and n >= 2 else None
    text = "show my bookings and cancel the Luigi's booking"
    gold = {"units": ["show my bookings", "cancel the Luigi's booking"],
            "route": {"show my bookings": ["list_bookings"], "cancel the Luigi's booking": ["cancel_booking"]},
            "locate": {("cancel the Luigi's booking", "cancel_booking"): "b1"}, "extract": {}}
    u, _ = understander(Oracle(gold, RECORDS, faults=faults), max_parallel=1)
    plan = u.understand(text, records=RECORDS)
    assert [(a.operation, a.status) for a in plan.acts] == [("list_bookings", "held")]


def test_a_single_offered_operation_is_still_routed_and_may_be_refused():
    from boundctx.understanding import Catalog
    one = Catalog.from_dict({"operations": [{"name": "list_bookings", "description": "Show the user's bookings"}]})
    text = "what's the weather"
    u = Understander(ScriptedProvider(Oracle({"units": [text], "route": {}, "locate": {}, "extract": {}}, [])), one,
                     settings=settings())
    plan = u.understand(text)
    assert [task_kind(r) for r in u.provider.requests] == ["route"]
    assert plan.status == "nothing" and plan.notices[0].kind == "no_operation"


def test_words_a_resegmentation_newly_leaves_out_are_checked_once_more():
    """The second split covers the flagged words but drops words the first split had:
    coverage runs again, and what it flags now is lost."""
    text = "Book Sakura for 4 people at 7pm, no shellfish, and a window seat"
    first = ["Book Sakura for 4 people at 7pm", "and a window seat"]
    second = ["Book Sakura for 4 people at 7pm, no shellfish"]
    gold = {"units": first, "resegmented": second, "coverage": ["no shellfish", "a window seat"], "route": {},
            "locate": {}, "extract": {}}
    u, provider = understander(Oracle(gold, RECORDS))
    plan = u.understand(text, records=RECORDS)
    assert kinds(provider) == ["segment", "coverage", "segment", "coverage"]
    assert plan.status == "failed_closed" and plan.notices[0].kind == "lost_constraint"
    assert "window seat" in plan.notices[0].message


def test_a_bound_hit_while_units_run_in_parallel_gives_one_plan_whatever_the_timing():
    import time as _time

    def slow_in(unit_text):
        def respond(request):
            if task_kind(request) == "route" and unit_text in request.messages[1]["content"].split(
                    "The part to route:\n", 1)[1]:
                _time.sleep(0.05)
            return Oracle(GOLD, RECORDS)(request)
        return respond

    plans = []
    for unit_text in ("Book Sakura", "cancel the Luigi"):
        u, _ = understander(slow_in(unit_text), max_parallel=2, max_model_calls=4)
        plan = u.understand(MESSAGE, records=RECORDS)
        plans.append(msgspec.json.encode(msgspec.structs.replace(plan, turn="t", budget=None)))
        assert plan.status == "incomplete" and plan.acts == []
        assert {n.bound for n in plan.notices} == {"max_model_calls"}
    assert plans[0] == plans[1]


def test_a_value_its_words_do_not_support_is_asked_for_even_when_optional():
    text = "book Sakura for 4 people at 7pm with no shellfish"
    gold = {"units": [text], "route": {text: ["book_table"]}, "locate": {(text, "book_table"): "sakura"},
            "extract": {(text, "book_table"): {"time": ("7pm", "7pm"), "party_size": ("4 people", "4"),
                                               "note": ("no shellfish", "no nuts")}},
            "verify": {"note": "unsupported"}}
    u, _ = understander(Oracle(gold, RECORDS))
    plan = u.understand(text, records=RECORDS)
    act, = plan.acts
    assert "note" not in act.arguments and act.missing == ["note"] and act.status == "needs_input"
    assert plan.status == "needs_input"


@pytest.mark.parametrize("fault", [
    RuntimeError("llama_decode returned -1"),
    '{"units": [{"first": 1, "last": 7}], "x": ' + "[" * 5000,
])
def test_no_backend_failure_or_output_escapes_the_plan(fault):
    u, _ = understander(Oracle(GOLD, RECORDS, faults=lambda kind, n: fault if kind == "segment" else None))
    plan = u.understand(MESSAGE, records=RECORDS)
    assert plan.status == "failed_closed" and plan.acts == []


def test_an_absurd_number_is_an_invalid_output_not_a_crash():
    gold = dict(GOLD, extract={("Book Sakura for 4 people at 7pm", "book_table"): {
        "time": ("7pm", "7pm"), "party_size": ("4 people", "1e999")}})
    u, _ = understander(Oracle(gold, RECORDS), max_parallel=1, repairs=0)
    plan = u.understand(MESSAGE, records=RECORDS)
    assert plan.status == "incomplete" and "too large" in plan.notices[0].message


SCENARIOS = {
    "two requests": (MESSAGE, GOLD),
    "re-segmentation": ("Book Sakura for 4 people at 7pm, no shellfish please", {
        "units": ["Book Sakura for 4 people at 7pm"], "coverage": ["no shellfish"],
        "resegmented": ["Book Sakura for 4 people at 7pm, no shellfish"],
        "route": {"Book Sakura for 4 people at 7pm, no shellfish": ["book_table"]},
        "locate": {("Book Sakura for 4 people at 7pm, no shellfish", "book_table"): "sakura"},
        "extract": {("Book Sakura for 4 people at 7pm, no shellfish", "book_table"): {
            "time": ("7pm", "7pm"), "party_size": ("4", "4"), "note": ("no shellfish", "no shellfish")}}}),
    "verify and a question": ("book Sakura for 4 or 5 of us, and cancel the Luigi's booking", {
        "units": ["book Sakura for 4 or 5 of us", "cancel the Luigi's booking"],
        "route": {"book Sakura for 4 or 5 of us": ["book_table"], "cancel the Luigi's booking": ["cancel_booking"]},
        "locate": {("book Sakura for 4 or 5 of us", "book_table"): "sakura",
                   ("cancel the Luigi's booking", "cancel_booking"): "b1"},
        "extract": {("book Sakura for 4 or 5 of us", "book_table"): {"party_size": ("4 or 5 of us", "5")}},
        "verify": {"party_size": "unsupported"}}),
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_call_bound_on_every_task_path_leaves_no_partial_effect(scenario):
    """Bounds that fall inside coverage, re-segmentation, verify and question framing,
    not only on the common path."""
    message, gold = SCENARIOS[scenario]
    u, provider = understander(Oracle(gold, RECORDS), max_parallel=1)
    full = u.understand(message, records=RECORDS)
    needed = len(provider.requests)
    assert full.budget.exhausted is None and needed >= 4
    for calls in range(1, needed + 1):
        u, provider = understander(Oracle(gold, RECORDS), max_parallel=1, max_model_calls=calls)
        plan = u.understand(message, records=RECORDS)
        assert len(provider.requests) == min(calls, needed)
        assert_no_partial_effect(plan, full)
        assert (plan.budget.exhausted == "max_model_calls") == (calls < needed)


def test_a_unit_understood_in_part_holds_its_own_acts_too():
    """One unit asks for two operations; one is understood (cancel b2), the other fails
    (change_time on b1): the understood one must not go ahead alone."""
    text = "cancel Sakura and move Luigi's"
    gold = {"units": [text], "route": {text: ["cancel_booking", "change_time"]},
            "locate": {(text, "cancel_booking"): "b2", (text, "change_time"): "b1"}, "extract": {}}
    u, _ = understander(Oracle(gold, RECORDS, faults=lambda kind, n: "x" if kind == "extract" else None),
                        max_parallel=1)
    plan = u.understand(text, records=RECORDS)
    assert [(a.operation, a.record, a.status) for a in plan.acts] == [("cancel_booking", "b2", "held")]
    assert plan.notices[0].holds == ["b1", "b2"]


def test_progress_is_reported_before_every_model_call_with_its_task():
    seen = []
    provider = ScriptedProvider(Oracle(GOLD, RECORDS))
    u = Understander(provider, catalog(), settings={"understanding.max_parallel": 1},
                     progress=lambda kind, role: seen.append((kind, role)))
    u.understand(MESSAGE, records=RECORDS)
    assert [kind for kind, _ in seen] == kinds(provider) and {role for _, role in seen} == {"call"}
