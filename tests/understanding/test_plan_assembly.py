"""What a turn produces: the closed sets of a plan are said in types, and code assembles
the plan (holds included) with no model."""

import typing

import msgspec
import pytest

from boundctx import config
from boundctx.providers import ScriptedProvider
from boundctx.understanding import (
    Act,
    ActStatus,
    Bounds,
    Click,
    Notice,
    NoticeKind,
    Plan,
    PlanStatus,
    Understander,
    Unit,
    is_held,
)
from boundctx.understanding.budget import Budget
from boundctx.understanding.plan import HOLD_ALL, HOLD_OPERATION, assemble, failed_closed

from tests._support.booking import GOLD, MESSAGE, RECORDS, catalog
from tests._support.oracle import Oracle

BOOK_2 = "book a table for 2"
WEATHER = "What's the weather in Paris?"
SHELLFISH = "Book Sakura for 4 people at 7pm, no shellfish please"


def _plans():
    """One scripted turn for every way a turn can end, and for every notice."""
    def run(gold, text=MESSAGE, faults=None, click=None, **over):
        settings = config.load(env={}, overrides={f"understanding.{k}": v for k, v in over.items()})
        u = Understander(ScriptedProvider(Oracle(gold, RECORDS, faults=faults)), catalog(), settings=settings)
        return u.understand(text, records=RECORDS, click=click)

    return [
        run(GOLD),  # ready
        run({"units": [WEATHER], "route": {}, "locate": {}, "extract": {}}, WEATHER),  # nothing, no_operation
        run({"units": [BOOK_2], "route": {BOOK_2: ["book_table"]}, "locate": {(BOOK_2, "book_table"): None},
             "extract": {(BOOK_2, "book_table"): {"party_size": ("2", "2")}}}, BOOK_2),  # needs_input
        run(GOLD, faults=lambda kind, n: "garbage" if kind == "route" and n >= 2 else None,
            max_parallel=1),  # incomplete, held, not_understood
        run(GOLD, faults=lambda kind, n: "nope"),  # failed_closed, segmentation_failed
        run(dict(GOLD, units=["Book Sakura for 4 people at 7pm"], coverage=["no shellfish"],
                 resegmented=["Book Sakura for 4 people at 7pm"]), SHELLFISH),  # lost_constraint
        run(GOLD, "cancel it", click=Click("cancel_booking", "nowhere")),  # no_record
        run(dict(GOLD, extract={("Book Sakura for 4 people at 7pm", "book_table"): {
            "time": ("7pm", "9pm"), "party_size": ("4 people", "4")}})),  # no_ground
    ]


@pytest.fixture(scope="module")
def plans():
    return _plans()


def test_the_plan_statuses_are_exactly_the_ways_a_turn_ends(plans):
    assert {p.status for p in plans} == set(typing.get_args(PlanStatus))


def test_the_act_statuses_are_exactly_the_states_an_act_is_left_in(plans):
    assert {a.status for p in plans for a in p.acts} == set(typing.get_args(ActStatus))


def test_the_notice_kinds_are_exactly_what_a_turn_reports(plans):
    assert {n.kind for p in plans for n in p.notices} == set(typing.get_args(NoticeKind))


@pytest.mark.parametrize(("cls", "data"), [
    (Act, {"unit": "u1", "operation": "book_table", "record": None, "arguments": {}, "evidence": {},
           "status": "maybe"}),
    (Notice, {"kind": "shrug", "unit": None, "message": "?"}),
])
def test_a_value_outside_its_closed_set_is_refused_on_decode(cls, data):
    with pytest.raises(msgspec.ValidationError, match="Invalid enum value"):
        msgspec.convert(data, cls)


def test_a_plan_round_trips_through_json_and_an_unknown_status_is_refused(plans):
    for plan in plans:
        assert msgspec.json.decode(msgspec.json.encode(plan), type=Plan) == plan
    data = msgspec.to_builtins(plans[0])
    data["status"] = "done"
    with pytest.raises(msgspec.ValidationError, match=r"\$.status"):
        msgspec.convert(data, Plan)


def _act(operation, record, status="ready"):
    return Act("u1", operation, record, {}, {}, status)


def test_a_notice_holds_its_records_its_operations_or_everything():
    on_b1, on_nothing = _act("cancel_booking", "b1"), _act("list_bookings", None)
    by_record = [Notice("not_understood", "u2", "why", holds=["b1"])]
    by_operation = [Notice("not_understood", "u2", "why", holds=[f"{HOLD_OPERATION}list_bookings"])]
    everything = [Notice("not_understood", "u2", "why", holds=[HOLD_ALL])]
    assert is_held(on_b1, by_record) and not is_held(on_nothing, by_record)
    assert is_held(on_nothing, by_operation) and not is_held(on_b1, by_operation)
    assert is_held(on_b1, everything) and is_held(on_nothing, everything)
    # An operation prefix never holds an act that has a record of its own.
    assert not is_held(_act("list_bookings", "b1"), by_operation)


def test_assembly_holds_what_a_part_not_understood_may_touch_and_names_the_status():
    report = Budget(Bounds.from_settings(config.load(env={}))).report()
    units = [Unit("u1", "a", 0, 1), Unit("u2", "b", 2, 3)]
    on_b1, on_b2 = _act("cancel_booking", "b1"), _act("cancel_booking", "b2")
    held = [Notice("not_understood", "u2", "why", holds=["b1"])]
    plan = assemble("t", units, [([on_b1, on_b2], [], []), ([], [], held)], report, {"locate": 1})
    assert plan.status == "incomplete" and [a.status for a in plan.acts] == ["held", "ready"]
    assert plan.shortcuts == {"locate": 1} and plan.notices == held
    assert assemble("t", units, [([on_b1], [], [])], report, {}).status == "ready"
    assert assemble("t", units, [([], [], [])], report, {}).status == "nothing"
    closed = failed_closed("t", Notice("segmentation_failed", None, "why"), report, {"segment": 1})
    assert (closed.status, closed.units, closed.acts, closed.shortcuts) == ("failed_closed", [], [], {"segment": 1})
