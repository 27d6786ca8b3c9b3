"""One task call run to a checked answer: each attempt's outcome, the request built once
(hashed and sent), the provider's turn around each call, the attempts logged."""

import contextlib
import threading

import pytest

from boundctx import config
from boundctx.errors import GenerationTimeout
from boundctx.providers import ScriptedProvider
from boundctx.understanding import Bounds, ReplayLog, TaskConfig, Understander, Unit
from boundctx.understanding import attempts as attempts_module
from boundctx.understanding.attempts import NotUnderstood, Outcome, TaskRunner
from boundctx.understanding.budget import Budget
from boundctx.understanding.replay import prompt_hash
from boundctx.understanding.tasks import route_call

from tests._support.booking import GOLD, MESSAGE, RECORDS, catalog
from tests._support.oracle import Oracle, task_kind

UNIT = Unit("u1", "cancel the Luigi's booking", 0, 26)
ROUTE = route_call("cancel the Luigi's booking", UNIT, catalog().operations)
CANCEL = '{"operations": ["o2"]}'  # cancel_booking, the catalog's second operation


def runner(respond, *, log=None, clock=None, **over):
    settings = config.load(env={}, overrides={f"understanding.{k}": v for k, v in over.items()})
    provider = ScriptedProvider(respond, **({"clock": clock} if clock else {}))
    budget = Budget(Bounds.from_settings(settings), **({"clock": clock} if clock else {}))
    tasks = TaskRunner("t1", budget, provider=provider, configs={}, votes=int(settings["understanding.votes"]),
                       repairs=int(settings["understanding.repairs"]), log=log if log is not None else ReplayLog())
    return tasks, provider


def test_an_attempt_comes_to_an_outcome_that_says_why_it_is_not_valid():
    tasks, provider = runner(lambda request: "not json")
    bad = tasks._attempt(ROUTE, provider, ROUTE.messages, 1, TaskConfig(), "call")
    assert isinstance(bad, Outcome) and not bad.valid
    assert (bad.parsed, bad.result, bad.raw) == (None, None, "not json") and "JSON" in bad.problems
    with pytest.raises(AttributeError):
        bad.valid = True  # frozen
    tasks, provider = runner(lambda request: CANCEL)
    good = tasks._attempt(ROUTE, provider, ROUTE.messages, 1, TaskConfig(), "call")
    assert good == Outcome(valid=True, parsed={"operations": ["o2"]}, result=[catalog().operation("cancel_booking")],
                           problems="", raw=CANCEL)


def test_a_repair_is_told_the_problem_and_every_attempt_is_logged_by_name():
    answers = iter(["not json", CANCEL])
    log = ReplayLog()
    tasks, provider = runner(lambda request: next(answers), log=log)
    result, depth = tasks.run(ROUTE, 1)
    assert [op.name for op in result] == ["cancel_booking"] and depth == 2
    assert "That answer is not valid" in provider.requests[1].messages[-1]["content"]
    assert not any(r.keep_state for r in provider.requests)  # one-off work: a local model keeps the reply's state
    first, repair = log.attempts
    assert (first.role, first.attempt, first.valid, first.depth) == ("call", 1, False, 1)
    assert (repair.role, repair.attempt, repair.valid, repair.depth) == ("repair", 2, True, 2)
    assert (repair.turn, repair.unit, repair.task, repair.key) == ("t1", "u1", "route", "")
    assert repair.sampling == {"temperature": 0.0, "max_tokens": ROUTE.max_tokens or 96}
    assert repair.raw_output == CANCEL and repair.problems == [] and repair.model == "scripted"


def test_the_request_is_built_once_and_the_one_hashed_is_the_one_sent(monkeypatch):
    built = []
    build = attempts_module.make_request

    def make_request(*args, **kwargs):
        built.append(build(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(attempts_module, "make_request", make_request)
    log = ReplayLog()
    provider = ScriptedProvider(Oracle(GOLD, RECORDS))
    Understander(provider, catalog(), log=log).understand(MESSAGE, records=RECORDS)
    assert len(built) == len(provider.requests) == len(log.attempts) == 6
    # Task calls may run side by side, so the two lists need not share an order: each
    # request sent must be one of the objects built, and each built one sent once.
    assert sorted(map(id, provider.requests)) == sorted(map(id, built))
    assert sorted(a.prompt_sha256 for a in log.attempts) == sorted(prompt_hash(r) for r in provider.requests)


class TakesTurns(ScriptedProvider):
    """A model that takes one generation at a time: each turn waits ``wait_s`` of fake
    time for the model, and every stream must run inside a turn."""

    serialises = True

    def __init__(self, respond, *, now, wait_s):
        super().__init__(respond, clock=lambda: now[0])
        self.now = now
        self.wait_s = wait_s
        self.model = threading.Lock()
        self.turn_timeouts = []
        self.stream_timeouts = []
        self.outside = 0
        self.in_turn = threading.local()

    @contextlib.contextmanager
    def turn(self, *, timeout_s=None):
        self.turn_timeouts.append(timeout_s)
        with self.model:
            self.now[0] += self.wait_s
            self.in_turn.held = True
            try:
                yield
            finally:
                self.in_turn.held = False

    def _stream(self, request, *, cancel, timeout_s):
        if not getattr(self.in_turn, "held", False):
            self.outside += 1
        self.stream_timeouts.append(timeout_s)
        return super()._stream(request, cancel=cancel, timeout_s=timeout_s)


def test_each_call_waits_for_the_providers_turn_and_the_wait_counts_against_the_turns_clock():
    now = [0.0]
    provider = TakesTurns(Oracle(GOLD, RECORDS), now=now, wait_s=10.0)
    settings = config.load(env={}, overrides={"understanding.max_parallel": 1, "understanding.wall_clock_s": 75})
    log = ReplayLog()
    plan = Understander(provider, catalog(), settings=settings, log=log, clock=lambda: now[0]).understand(
        MESSAGE, records=RECORDS)
    assert provider.outside == 0 and len(provider.stream_timeouts) == plan.budget.model_calls == 6
    # The turn is waited for within what is left of the turn's clock ...
    assert provider.turn_timeouts == [75.0 - 10 * k for k in range(6)]
    # ... and a call's own limit (60 s) is cut to what is left once it has its turn.
    assert provider.stream_timeouts == [60.0, 55.0, 45.0, 35.0, 25.0, 15.0]
    # The wait is the turn's time, not the call's.
    assert [a.elapsed_s for a in log.attempts] == [0.0] * 6 and plan.budget.wall_s == 60.0


def test_units_read_in_parallel_take_the_providers_turns_one_at_a_time():
    now = [0.0]
    provider = TakesTurns(Oracle(GOLD, RECORDS), now=now, wait_s=0.0)
    settings = config.load(env={}, overrides={"understanding.max_parallel": 2})
    plan = Understander(provider, catalog(), settings=settings).understand(MESSAGE, records=RECORDS)
    assert plan.status == "ready" and provider.outside == 0 and provider.max_active == 1
    assert sorted(task_kind(r) for r in provider.requests).count("route") == 2


def test_a_turn_the_model_does_not_give_in_time_is_a_failed_attempt():
    class Busy(ScriptedProvider):
        @contextlib.contextmanager
        def turn(self, *, timeout_s=None):
            raise GenerationTimeout("another local generation held the model for 1 s")
            yield  # pragma: no cover

    log = ReplayLog()
    provider = Busy(lambda request: CANCEL)
    settings = config.load(env={}, overrides={"understanding.repairs": 0})
    budget = Budget(Bounds.from_settings(settings))
    tasks = TaskRunner("t1", budget, provider=provider, configs={}, votes=1, repairs=0, log=log)
    with pytest.raises(NotUnderstood, match="held the model"):
        tasks.run(ROUTE, 1)
    assert provider.requests == [] and budget.active == 0
    assert [(a.finish_reason, a.valid) for a in log.attempts] == [("error:GenerationTimeout", False)]


def test_a_failure_carries_the_acts_it_holds_from_its_constructor():
    exc = NotUnderstood("extract", "no valid answer", bound="max_model_calls")
    assert exc.holds == [] and str(exc) == "no valid answer"
    held = exc.holding(["b1"])
    assert (held.task, held.reason, held.bound, held.holds) == ("extract", "no valid answer", "max_model_calls",
                                                                ["b1"])
    assert exc.holds == []  # the first is left as it was
    assert NotUnderstood("route", "why", holds=("*",)).holds == ["*"]

