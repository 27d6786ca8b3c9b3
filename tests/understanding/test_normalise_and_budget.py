"""Typed values from quoted text, and the per-turn meter."""

import threading

import pytest

from boundctx.errors import BudgetExhausted
from boundctx.understanding import Bounds, Budget, Param
from boundctx.understanding.normalise import normalise, number_in, supports


@pytest.mark.parametrize("text, ptype, items, expected", [
    ("5", "integer", None, 5), ("five", "integer", None, 5), ("twenty-five", "integer", None, 25),
    ("1,000", "integer", None, 1000), ("a hundred", "integer", None, 100), ("3.0", "integer", None, 3),
    ("2.5", "number", None, 2.5), ("-4", "number", None, -4.0), ("yes", "boolean", None, True),
    ("off", "boolean", None, False), ("3 and 5", "array", "integer", [3, 5]), ("[1, 2]", "array", "integer", [1, 2]),
    ("Paris, London", "array", "string", ["Paris", "London"]), ('"7pm"', "string", None, "7pm"),
    ('{"a": 1}', "object", None, {"a": 1}),
])
def test_normalise_reads_the_declared_type(text, ptype, items, expected):
    assert normalise(text, Param("p", ptype, items=items)) == expected


@pytest.mark.parametrize("text, ptype", [("3.5", "integer"), ("many", "integer"), ("maybe", "boolean"),
                                          ("", "string"), ("[1", "object")])
def test_normalise_refuses_what_is_not_the_type(text, ptype):
    with pytest.raises(ValueError):
        normalise(text, Param("p", ptype))


def test_enum_values_are_matched_without_case_and_kept_as_declared():
    p = Param("seat", "string", enum=["Inside", "Terrace"])
    assert normalise("terrace", p) == "Terrace"
    with pytest.raises(ValueError, match="not one of"):
        normalise("roof", p)


def test_supports_confirms_only_a_quote_that_is_the_value_and_nothing_else():
    assert number_in("the first five primes, then 1,200") == [1200, 1, 5]
    assert supports(4, "4 people", Param("n", "integer"))
    assert not supports(5, "first five prime numbers", Param("n", "integer"))  # two numbers: verify decides
    assert not supports(7, "book Sakura for 4 people at 7pm", Param("n", "integer"))  # a clause, not a number
    assert not supports(6, "the usual crowd", Param("n", "integer"))
    assert supports("Paris", "paris.", Param("city", "string"))
    assert not supports("Ann", "book for Joanna", Param("name", "string"))
    assert not supports("Paris", "fly to paris", Param("city", "string"))
    assert not supports("2026-12-01", "tomorrow", Param("date", "string"))
    assert supports([3, 5], "multiples of 3 and 5", Param("m", "array", items="integer"))
    assert not supports([3, 5], "3, 5 and 7", Param("m", "array", items="integer"))
    assert supports(True, "yes", Param("b", "boolean")) and not supports(True, "on Friday", Param("b", "boolean"))
    assert not supports(True, "no", Param("b", "boolean"))


N = Param("n", "integer")


@pytest.mark.parametrize("quote, numbers", [
    ("Close T-101", []), ("2024-05-01", []), ("3-4", []), ("5-year", []), ("a 5-year plan", []), ("at 7pm", []),
    ("T101", []), ("3:30", []), ("\u22125", []),
    ("-5", [-5]), ("(-5)", [-5]), ("minus 5", [-5]), ("negative five", [-5]), ("+3", [3]), ("5.", [5]),
])
def test_a_number_is_read_only_from_a_token_that_is_one(quote, numbers):
    assert number_in(quote) == numbers


@pytest.mark.parametrize("value, quote", [
    (-101, "Close T-101"), (101, "Close T-101"), (2024, "2024-05-01"), (-5, "2024-05-01"), (3, "3-4"), (-4, "3-4"),
    (5, "5-year"), (5, "minus 5"), (7, "at 7pm"), (4, "4 people at 7pm"),
])
def test_code_never_confirms_a_number_from_an_id_a_date_or_a_range(value, quote):
    assert not supports(value, quote, N)
    assert not supports(float(value), quote, Param("x", "number"))
    assert not supports([value], quote, Param("m", "array", items="integer"))


@pytest.mark.parametrize("value, quote", [(-5, "-5"), (-5, "minus 5"), (-5, "negative five"), (5, "5"), (3, "+3")])
def test_code_confirms_a_quote_that_is_the_number_with_its_sign(value, quote):
    assert supports(value, quote, N)


def test_an_id_quoted_for_a_number_is_never_confirmed_and_is_asked_for():
    from boundctx import config
    from boundctx.providers import ScriptedProvider
    from boundctx.understanding import TaskConfig, Understander

    from tests._support.booking import RECORDS, catalog
    from tests._support.oracle import Oracle, task_kind

    text = "book Sakura at 7pm for T-4"
    gold = {"units": [text], "route": {text: ["book_table"]}, "locate": {(text, "book_table"): "sakura"},
            "extract": {(text, "book_table"): {"time": ("7pm", "7pm"), "party_size": ("T-4", "-4")}},
            "verify": {"party_size": "unsupported"}}
    # No word of "T-4" says -4, so the value has no ground: asked for without a verify
    # call; and where verify votes, they are asked and their verdict holds.
    for tasks, verify_calls in (({}, 0), ({"verify": TaskConfig(votes=2, temperature=0.5)}, 2)):
        provider = ScriptedProvider(Oracle(gold, RECORDS))
        plan = Understander(provider, catalog(), settings=config.load(env={}), tasks=tasks).understand(
            text, records=RECORDS)
        verify = [r for r in provider.requests if task_kind(r) == "verify"]
        assert len(verify) == verify_calls and all("party_size" in r.messages[1]["content"] for r in verify)
        act, = plan.acts
        assert "party_size" not in act.arguments and act.missing == ["party_size"]


def test_big_and_odd_numbers_are_read_exactly_or_refused():
    assert normalise("12345678901234567891", Param("n", "integer")) == 12345678901234567891
    assert supports(12345678901234567891, "12345678901234567891", Param("n", "integer"))
    assert not supports(12345678901234567168, "12345678901234567891", Param("n", "integer"))
    for text, ptype in [("1e999", "integer"), ("1e999", "number")]:
        with pytest.raises(ValueError):
            normalise(text, Param("n", ptype))
    assert normalise("true", Param("b", "boolean", enum=[True, False])) is True
    with pytest.raises(ValueError):
        normalise("1", Param("b", "boolean", enum=[True, False]))


def test_each_bound_refuses_the_call_that_would_pass_it_and_every_call_after():
    budget = Budget(Bounds(max_model_calls=2, max_chain_depth=3, max_prompt_tokens=100, wall_clock_s=None))
    budget.reserve(depth=1, prompt_tokens=40)
    budget.settle(counted_prompt=40, prompt_tokens=45, completion_tokens=3)
    with pytest.raises(BudgetExhausted, match="max_prompt_tokens") as info:
        budget.reserve(depth=2, prompt_tokens=60)
    assert info.value.bound == "max_prompt_tokens"
    with pytest.raises(BudgetExhausted, match="an earlier call"):
        budget.reserve(depth=2, prompt_tokens=1)  # monotonic: the turn stops calling
    report = budget.report()
    assert (report.model_calls, report.prompt_tokens, report.completion_tokens, report.exhausted,
            report.refused_calls) == (1, 45, 3, "max_prompt_tokens", 2)

    for bounds, kwargs, bound in [(Bounds(max_model_calls=1), {}, "max_model_calls"),
                                  (Bounds(max_chain_depth=2), {"depth": 3}, "max_chain_depth")]:
        b = Budget(bounds)
        if bound == "max_model_calls":
            b.reserve(depth=1, prompt_tokens=1)
            b.release()
        with pytest.raises(BudgetExhausted) as info:
            b.reserve(**{"depth": 1, "prompt_tokens": 1, **kwargs})
        assert info.value.bound == bound


def test_the_wall_clock_and_missing_usage():
    now = [0.0]
    budget = Budget(Bounds(wall_clock_s=10), clock=lambda: now[0])
    budget.reserve(depth=1, prompt_tokens=1)
    budget.settle(counted_prompt=1, prompt_tokens=1, completion_tokens=1)
    now[0] = 10.0
    assert budget.remaining_s() == 0
    with pytest.raises(BudgetExhausted, match="wall_clock_s"):
        budget.reserve(depth=1, prompt_tokens=1)

    blind = Budget(Bounds(max_prompt_tokens=100))
    blind.reserve(depth=1, prompt_tokens=10)
    with pytest.raises(BudgetExhausted, match="no token usage"):
        blind.settle(counted_prompt=10, prompt_tokens=None, completion_tokens=None)
    free = Budget(Bounds(max_prompt_tokens=None))
    free.reserve(depth=1, prompt_tokens=10)
    free.settle(counted_prompt=10, prompt_tokens=None, completion_tokens=None)  # no bound: nothing to check
    assert free.report().exhausted is None


def test_bounds_are_checked_and_read_from_settings():
    from boundctx import config
    with pytest.raises(ValueError, match="max_parallel"):
        Bounds(max_parallel=0)
    settings = config.load(env={}, overrides={"understanding.max_prompt_tokens": 0, "understanding.wall_clock_s": 0})
    bounds = Bounds.from_settings(settings)
    assert bounds.max_prompt_tokens is None and bounds.wall_clock_s is None and bounds.max_model_calls == 24


def test_the_meter_counts_concurrent_calls_exactly():
    budget = Budget(Bounds(max_model_calls=1000, max_prompt_tokens=None))
    start = threading.Barrier(8)

    def work():
        start.wait()
        for _ in range(100):
            budget.reserve(depth=1, prompt_tokens=1)
            budget.settle(counted_prompt=1, prompt_tokens=2, completion_tokens=1)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    report = budget.report()
    assert (report.model_calls, report.prompt_tokens, report.completion_tokens) == (800, 1600, 800)
    assert budget.active == 0
