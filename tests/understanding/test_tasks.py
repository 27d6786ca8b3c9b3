"""Task building blocks: numbered word spans and the one-clause shortcut."""

import pytest

from boundctx.errors import TaskOutputInvalid
from boundctx.understanding.tasks import Words, gaps, whole_message_unit


def test_a_span_cuts_the_message_verbatim_without_trailing_clause_punctuation():
    words = Words("Book Sakura, at 7pm.  Thanks!")
    assert words.numbered() == "[1] Book [2] Sakura, [3] at [4] 7pm. [5] Thanks!"
    assert words.cut({"first": 1, "last": 2}, "u") == (0, 11)  # "Book Sakura" without the comma
    start, end = words.cut({"first": 5, "last": 5}, "u")
    assert words.message[start:end] == "Thanks!"  # "!" says something: kept
    assert words.of(5, 14) == [2, 3]
    for bad in ({"first": 3, "last": 2}, {"first": 0, "last": 1}, {"first": 1, "last": 6}):
        with pytest.raises(TaskOutputInvalid, match="not a span"):
            words.cut(bad, "u")
    assert words.schema()["properties"]["first"]["enum"] == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("message, whole", [
    ("cancel the booking", "cancel the booking"),
    ("  Book Sakura for 4 at 7pm.  ", "Book Sakura for 4 at 7pm"),
    ("What bookings do I have?", "What bookings do I have?"),
    ("Book Sakura and cancel Luigi's", None),
    ("Book Sakura, cancel Luigi's", None),
    ("Book Sakura. Cancel Luigi's", None),
    ("Book Sakura then cancel Luigi's", None),
    ("book it\nand list them", None),
])
def test_one_clause_is_one_unit_and_anything_that_can_join_two_is_segmented(message, whole):
    unit = whole_message_unit(message)
    assert (unit.text if unit else None) == whole
    if unit:
        assert message[unit.start:unit.end] == unit.text


def test_gaps_skip_connectors_and_keep_everything_else():
    from boundctx.understanding.tasks import Unit
    message = "Book Sakura and please, no shellfish"
    units = [Unit("u1", "Book Sakura", 0, 11)]
    assert [g.text for g in gaps(message, units)] == ["and please, no shellfish"]
    assert gaps("Book Sakura and please", units) == []


def test_the_task_kinds_are_one_closed_set_with_a_prompt_and_a_budget_each():
    import typing

    from boundctx.understanding.tasks import INSTRUCTIONS, MAX_TOKENS, TASK_KINDS, TaskKind

    kinds = typing.get_args(TaskKind)
    assert kinds == TASK_KINDS + ("single_call",)
    assert set(INSTRUCTIONS) == set(MAX_TOKENS) == set(kinds)


def test_the_whole_plan_call_is_the_single_call_baseline():
    from boundctx.understanding.tasks import whole_plan_call

    from tests._support.booking import RECORDS, catalog

    call = whole_plan_call("cancel the Luigi's booking", catalog().operations, RECORDS, max_acts=4)
    assert (call.kind, call.unit, call.key) == ("single_call", None, "")
    assert call.schema["properties"]["acts"]["maxItems"] == 4
