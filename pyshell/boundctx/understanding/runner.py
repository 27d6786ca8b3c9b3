"""One turn of understanding: a message becomes a plan, through small verified tasks.

:meth:`Understander.understand` runs, for one message:

1. **segment** the message into verbatim units (skipped for a click: the UI already
   said what is asked);
2. **coverage** of the words no unit holds (skipped when every left-over word is a
   connector such as "and"); a gap that carries a request sends segmentation back once,
   told the words; a constraint still left out after that is lost, and the turn fails
   closed;
3. per unit, concurrently up to ``max_parallel``: **route** to every operation the unit
   asks for (each becomes its own act); per act **locate** its record (skipped when one
   record is admissible), **extract** its arguments as quotes then values, **verify**
   values the code cannot confirm from their quotes, and **question_frame** what to ask
   when something required is missing (skipped when exactly one thing is); a value
   code cannot see in the message at all is asked for without verify, unless verify
   is configured for independent votes (decision 0017);
4. code assembles every task's output into one :class:`Plan`.

All understanding completes before any effect: the plan is data, and nothing is carried
out here. A task that fails validation is repaired (told what was wrong), voted on and
escalated as configured, drawing on the turn's one :class:`~.budget.Budget`; a unit that
is still not understood becomes a notice and every act on a record it may touch is
held; a failed segmentation or a lost constraint fails the whole turn closed. An
exhausted bound never leaves a partial effect: it is one more reason a unit is not
understood, reported as ``budget.exhausted{bound}``. A model call that ends cancelled
(its caller's or its reply's cancel token) stops the turn at its next step: no call
starts after it, and the turn fails closed with a notice saying it was cancelled.

This module is the pipeline. What a turn produces, and the code that assembles it, is
:mod:`.plan`; one task call run to a checked answer (votes, repairs, escalation, the
budget and the replay log) is :mod:`.attempts`.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import msgspec

from boundctx import config
from boundctx.errors import ReplayDiverged, UsageUnavailable
from boundctx.providers.base import Provider
from boundctx.understanding.attempts import NotUnderstood, TaskConfig, TaskRunner, TurnCancelled
from boundctx.understanding.budget import Bounds, Budget, BudgetReport
from boundctx.understanding.catalog import Catalog, Operation, Record, check_records
from boundctx.understanding.normalise import supports
from boundctx.understanding.plan import (
    HOLD_ALL,
    HOLD_OPERATION,
    RECORD,
    Act,
    Click,
    Notice,
    NoticeKind,
    Plan,
    Question,
    UnitResult,
    assemble,
    failed_closed,
    finish_act,
    is_held,
    no_ground_notice,
    render_question,
    without_ground,
)
from boundctx.understanding.replay import ReplayLog, ReplayProvider, TurnFinished, TurnStarted, plan_hash, read_log
from boundctx.understanding.tasks import (
    CONNECTORS,
    TASK_KINDS,
    Extracted,
    TaskCall,
    TaskKind,
    Unit,
    coverage_call,
    extract_call,
    gaps,
    locate_call,
    question_frame_call,
    route_call,
    segment_call,
    verify_call,
    whole_message_unit,
    whole_plan_call,
)

# The plan's names and TaskConfig are imported from here too.
__all__ = ["HOLD_ALL", "HOLD_OPERATION", "RECORD", "Act", "Click", "Notice", "Plan", "Question", "TaskConfig",
           "Understander", "is_held", "replay_turn"]

#: The task name a lost constraint is reported under.
LOST = "lost"


@dataclass(frozen=True)
class _Context:
    """What a turn reads of its :class:`Understander`, fixed when the turn starts."""

    catalog: Catalog
    #: The most units a message is split into (``understanding.max_units``).
    max_units: int
    #: The most units read at once (``understanding.max_parallel``).
    max_parallel: int


class _Turn:
    """One turn through the pipeline (shared by its threads; lists are appended under
    the GIL)."""

    def __init__(self, context: _Context, tasks: TaskRunner, message: str, records: list[Record]) -> None:
        self.context = context
        self.tasks = tasks
        self.message = message
        self.records = records
        self.turn = tasks.turn
        self.budget = tasks.budget
        self.shortcuts: Counter[str] = Counter()
        self._lock = threading.Lock()  # units run in threads; counters are read-modify-write

    def skip(self, kind: TaskKind) -> None:
        """Count a task skipped because its answer was determined."""
        with self._lock:
            self.shortcuts[kind] += 1

    def _run(self, call: TaskCall, depth: int) -> tuple[Any, int]:
        return self.tasks.run(call, depth)

    def _instructions(self, kind: TaskKind) -> str | None:
        return self.tasks.config(kind).instructions

    def cancelled(self, exc: TurnCancelled) -> Plan:
        """The plan of a turn a cancelled call stopped: no act at all, one notice saying so."""
        return failed_closed(self.turn, Notice("not_understood", None, str(exc), None, [HOLD_ALL]),
                             self.budget.report(), self.shortcuts)

    # -- the pipeline --------------------------------------------------------------------

    def understand(self, click: Click | None) -> Plan:
        """The plan: segment (and coverage), then every unit, then assembly."""
        message = self.message
        budget = self.budget
        if click is not None:
            units = [Unit("u1", message, 0, len(message))]
            self.skip("segment")
            self.skip("coverage")
            depth = 0
        else:
            try:
                units, depth = self.segment()
            except NotUnderstood as exc:
                kind: NoticeKind = "lost_constraint" if exc.task == LOST else "segmentation_failed"
                return failed_closed(self.turn, Notice(kind, None, exc.reason, exc.bound), budget.report(),
                                     self.shortcuts)
        pool_size = min(self.context.max_parallel, len(units))
        before_units = dict(self.shortcuts)
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(pool_size, 1)) as pool:
            results = list(pool.map(lambda u: self.unit_chain(u, depth, click), units))
        if pool_size > 1 and budget.exhausted is not None:
            # Which parallel unit got the last call before the bound is a race; so the
            # turn does not depend on it, none of its units counts as understood.
            bound = budget.exhausted
            why = (f"budget.exhausted{{{bound}}} while {pool_size} units were read in parallel; raise "
                   f"understanding.{bound}, or set understanding.max_parallel = 1 to keep what was understood "
                   "before the bound")
            return Plan(self.turn, "incomplete", units, [], [],
                        [Notice("not_understood", u.id, why, bound, [HOLD_ALL]) for u in units],
                        budget.report(), before_units)
        return assemble(self.turn, units, results, budget.report(), self.shortcuts)

    def single_call(self) -> Plan:
        """The baseline's plan: every act from one call (see :meth:`Understander.single_call`)."""
        message = self.message
        call = whole_plan_call(message, self.context.catalog.operations, self.records,
                               max_acts=self.context.max_units * 2, instructions=self._instructions("single_call"))
        try:
            acts_out, _ = self._run(call, 1)
        except NotUnderstood as exc:
            return failed_closed(self.turn, Notice("not_understood", None, exc.reason, exc.bound),
                                 self.budget.report(), {})
        unit = Unit("u1", message, 0, len(message))
        acts: list[Act] = []
        questions: list[Question] = []
        notices: list[Notice] = []
        # The baseline has no verify, so its one call is all the word a value has: one
        # the message does not show is asked for (decision 0017).
        voting = self.tasks.independent_votes("single_call")
        for op, record, values in acts_out:
            candidates = [r for r in self.records if op.record_kind and r.kind == op.record_kind]
            if op.record_kind and record is None and len(candidates) == 1:
                record = candidates[0]
            given = {n: e for n, e in values.items() if e.value is not None}
            asked = {} if voting else without_ground(message, op, given)
            act = finish_act(unit, op, record, candidates, {n: e for n, e in given.items() if n not in asked},
                             [RECORD] if op.record_kind and record is None else [], list(asked))
            acts.append(act)
            if act.missing:
                questions.append(render_question(unit, op, act.missing, candidates))
            if asked:
                notices.append(no_ground_notice(unit, op, asked, "single_call"))
        if not acts:
            notices.append(Notice("no_operation", None, "the message asks for no operation this assistant has"))
        return assemble(self.turn, [unit], [(acts, questions, notices)], self.budget.report(), self.shortcuts)

    def segment(self) -> tuple[list[Unit], int]:
        """Units (after at most one re-segmentation), or NotUnderstood."""
        m = self.message
        max_units = self.context.max_units
        whole = whole_message_unit(m)
        if whole is not None:
            self.skip("segment")
            units, depth = [whole], 0
        else:
            units, depth = self._run(segment_call(m, max_units=max_units, instructions=self._instructions("segment")),
                                     1)
        found = gaps(m, units)
        if not found:
            self.skip("coverage")
            return units, depth
        flagged, depth = self._run(coverage_call(m, units, found, instructions=self._instructions("coverage")),
                                   depth + 1)
        if not flagged:
            return units, depth
        units, depth = self._run(segment_call(m, max_units=max_units, left_out=[g.text for g in flagged],
                                              instructions=self._instructions("segment")), depth + 1)
        covered = [(u.start, u.end) for u in units]
        lost = [g for g in flagged if not _covered(g.start, g.end, m, covered)]
        if lost:
            raise NotUnderstood(LOST, "a request or condition is in no unit even after re-segmentation: "
                                + "; ".join(repr(g.text) for g in lost))
        # Words the new split left out that the first split covered: coverage once more,
        # and anything it flags now is lost (no second re-segmentation).
        before = [(g.start, g.end) for g in found]
        fresh = [g for g in gaps(m, units) if not _covered(g.start, g.end, m, before)]
        if fresh:
            flagged, depth = self._run(coverage_call(m, units, fresh, instructions=self._instructions("coverage")),
                                       depth + 1)
            if flagged:
                raise NotUnderstood(LOST, "re-segmentation left out a request or condition: "
                                    + "; ".join(repr(g.text) for g in flagged))
        else:
            self.skip("coverage")
        return units, depth

    def unit_chain(self, unit: Unit, depth: int, click: Click | None) -> UnitResult:
        """Acts, questions and notices of one unit. A notice for a part not understood
        says in ``holds`` which acts it holds (see :class:`Notice`)."""
        catalog = self.context.catalog
        acts: list[Act] = []
        questions: list[Question] = []
        notices: list[Notice] = []
        try:
            if click is not None:
                operations = [catalog.operation(click.operation)]
                self.skip("route")
                route_depth = depth
            else:
                operations, route_depth = self._run(route_call(self.message, unit, catalog.operations,
                                                               instructions=self._instructions("route")), depth + 1)
        except NotUnderstood as exc:
            # Not knowing what the unit asks for, it may correct or cancel anything.
            return [], [], [Notice("not_understood", unit.id, exc.reason, exc.bound, [HOLD_ALL])]
        if not operations:
            notices.append(Notice("no_operation", unit.id, f"{unit.text!r} asks for no operation this assistant has"))
        for op in operations:
            try:
                act, question, notice = self.act_chain(unit, op, route_depth, click)
            except NotUnderstood as exc:
                notices.append(Notice("not_understood", unit.id, f"{op.name}: {exc.reason}", exc.bound,
                                      list(exc.holds)))
                continue
            if act is not None:
                acts.append(act)
            if question is not None:
                questions.append(question)
            if notice is not None:
                notices.append(notice)
        if any(n.kind == "not_understood" for n in notices):
            # A unit understood only in part: what it did understand must not go ahead
            # without the rest, so its own acts' records (or operations) are held too.
            own = [a.record or f"{HOLD_OPERATION}{a.operation}" for a in acts]
            notices = [msgspec.structs.replace(n, holds=list(dict.fromkeys(n.holds + own)))
                       if n.kind == "not_understood" else n for n in notices]
        return acts, questions, notices

    def act_chain(self, unit: Unit, op: Operation, depth: int, click: Click | None
                  ) -> tuple[Act | None, Question | None, Notice | None]:
        """One act: its record (:meth:`_locate`), then its arguments. A NotUnderstood
        raised from it holds the acts it may touch: its record once known, else every
        record of its kind, and for an operation on no record, other acts of the same
        operation (a second request may correct the first)."""
        if op.record_kind is None:
            any_record = [f"{HOLD_OPERATION}{op.name}"]
        else:
            any_record = [r.id for r in self.records if r.kind == op.record_kind]
        try:
            located = self._locate(unit, op, depth, click)
        except NotUnderstood as exc:
            raise exc.holding(any_record) from None
        if isinstance(located, Notice):
            return None, None, located
        record, candidates, missing, depth = located
        try:
            return self._arguments(unit, op, depth, record, candidates, missing)
        except NotUnderstood as exc:
            raise exc.holding([record.id] if record is not None else any_record) from None

    def _locate(self, unit: Unit, op: Operation, depth: int, click: Click | None
                ) -> Notice | tuple[Record | None, list[Record], list[str], int]:
        """The act's record, the records it could be, what is missing (:data:`RECORD`
        when the message does not say which) and the depth; or the notice of an act
        that can have no record."""
        if op.record_kind is None:
            return None, [], [], depth
        candidates = [r for r in self.records if r.kind == op.record_kind]
        if click is not None and click.record is not None:
            record = next((r for r in candidates if r.id == click.record), None)
            if record is None:
                return Notice("no_record", unit.id, f"the clicked record {click.record!r} is not a "
                                                    f"{op.record_kind} of this turn")
            self.skip("locate")
            return record, candidates, [], depth
        if not candidates:
            return Notice("no_record", unit.id, f"{op.name} acts on a {op.record_kind}, and this turn offers none")
        if len(candidates) == 1:
            self.skip("locate")
            return candidates[0], candidates, [], depth
        record, depth = self._run(locate_call(self.message, unit, op, candidates,
                                              instructions=self._instructions("locate")), depth + 1)
        return record, candidates, [] if record is not None else [RECORD], depth

    def _arguments(self, unit: Unit, op: Operation, depth: int, record: Record | None, candidates: list[Record],
                   missing: list[str]) -> tuple[Act | None, Question | None, Notice | None]:
        """Extract, verify and (when more than one thing is missing) question_frame."""
        m = self.message
        values: dict[str, Extracted] = {}
        if op.params:
            values, depth = self._run(extract_call(m, unit, op, record, instructions=self._instructions("extract")),
                                      depth + 1)
        else:
            self.skip("extract")
        given = {n: e for n, e in values.items() if e.value is not None}
        # A value code cannot see in the message is one model's word alone, and one
        # verify answer is one more (a wrong "supported" let "Zebra" through for a
        # message saying "Dana"): it is asked for without verify, unless verify's
        # independent votes are to agree on it (decision 0017).
        unfounded = without_ground(m, op, given)
        asked = {} if self.tasks.independent_votes("verify") else unfounded
        for name in asked:
            del given[name]
        unconfirmed = {n: e for n, e in given.items()
                       if n in unfounded or not supports(e.value, e.evidence or "", op.param(n))}
        rejected: list[str] = list(asked)
        notice = no_ground_notice(unit, op, asked, "verify") if asked else None
        if unconfirmed:
            verdicts, depth = self._run(verify_call(m, unit, op, unconfirmed,
                                                    instructions=self._instructions("verify")), depth + 1)
            for name, ok in verdicts.items():
                if not ok:
                    # Not supported by its words: asked for, never guessed, and never
                    # replaced by a default (the user did say something).
                    del given[name]
                    rejected.append(name)
        elif op.params:
            self.skip("verify")
        act = finish_act(unit, op, record, candidates, given, missing, rejected)
        missing = act.missing
        if not missing:
            return act, None, notice
        if len(missing) == 1:
            about = missing
            self.skip("question_frame")
        else:
            described = [(x, f"which {op.record_kind} (one of {len(candidates)})" if x == RECORD
                          else f"{x}: {op.param(x).description}") for x in missing]
            about, depth = self._run(question_frame_call(m, unit, op, described,
                                                         instructions=self._instructions("question_frame")),
                                     depth + 1)
        return act, render_question(unit, op, about, candidates), notice


def _covered(start: int, end: int, message: str, spans: Sequence[tuple[int, int]]) -> bool:
    """Every word of message[start:end] other than a connector lies inside ``spans``."""
    for word in re.finditer(r"\w+", message[start:end]):
        if word.group(0).lower() in CONNECTORS:
            continue
        a, b = start + word.start(), start + word.end()
        if not any(lo <= a and b <= hi for lo, hi in spans):
            return False
    return True


class Understander:
    """Turns messages into plans over one catalog.

    Parameters
    ----------
    provider : Provider
        The model every task uses unless its :class:`TaskConfig` names another.
    catalog : Catalog
    settings : mapping, optional
        Settings (``understanding.*``): resolved ones, or a partial mapping applied over
        :func:`boundctx.config.load`.
    tasks : mapping, optional
        Task kind -> :class:`TaskConfig` (``"single_call"`` configures the baseline).
    log : ReplayLog, optional
        Where every attempt is recorded (default: in memory only).
    bounds : Bounds, optional
        Default: from ``settings``.
    clock : callable
        Seconds, for the wall-clock bound (tests pass a fake clock).
    progress : callable, optional
        ``progress(kind, role)`` just before each model call starts: the task kind
        (``"route"``...) and ``"call"``, ``"vote"``, ``"repair"`` or ``"escalation"``.
        Called from the turn's worker threads.
    """

    def __init__(self, provider: Provider, catalog: Catalog, *, settings: Mapping[str, Any] | None = None,
                 tasks: Mapping[str, TaskConfig] | None = None, log: ReplayLog | None = None,
                 bounds: Bounds | None = None, clock: Callable[[], float] = time.monotonic,
                 progress: Callable[[str, str], None] | None = None) -> None:
        self.provider = provider
        self.catalog = catalog
        self.settings = config.resolve(settings)
        self.progress = progress
        unknown = set(tasks or {}) - set(TASK_KINDS) - {"single_call"}
        if unknown:
            raise ValueError(f"no task kinds {sorted(unknown)}; the kinds are {', '.join(TASK_KINDS)} "
                             "(and single_call, the baseline)")
        self.tasks = dict(tasks or {})
        self.log = log if log is not None else ReplayLog()
        self.bounds = bounds if bounds is not None else Bounds.from_settings(self.settings)
        self.clock = clock

    def task_config(self, kind: str) -> TaskConfig:
        return self.tasks.get(kind) or TaskConfig()

    def _start(self, message: str, records: Sequence[Record | Mapping[str, Any]], click: Click | None,
               turn: str | None, system: str | None = None) -> _Turn:
        """Checks before any call, and the turn's state; ``system`` ("pipeline" or
        "single_call") puts the turn's inputs on the replay log."""
        if not isinstance(message, str) or not message.strip():
            raise ValueError("the message is empty; there is nothing to understand")
        checked = check_records(records, self.catalog)
        if click is not None:
            self.catalog.operation(click.operation)  # a KeyError naming it, before any call
        providers = {self.provider} | {c.provider for c in self.tasks.values() if c.provider} | \
            {c.escalate_to for c in self.tasks.values() if c.escalate_to}
        if self.bounds.max_prompt_tokens is not None:
            blind = [p.name for p in providers if not p.reports_usage]
            if blind:
                raise UsageUnavailable(
                    f"{', '.join(blind)} reports no token usage, so a turn bounded to "
                    f"{self.bounds.max_prompt_tokens} prompt tokens cannot be checked; set "
                    "understanding.max_prompt_tokens = 0 to run without a token bound")
        tasks = TaskRunner(turn or secrets.token_hex(6), Budget(self.bounds, clock=self.clock),
                           provider=self.provider, configs=MappingProxyType(dict(self.tasks)),
                           votes=self.settings.understanding.votes,
                           repairs=self.settings.understanding.repairs, log=self.log, progress=self.progress)
        context = _Context(self.catalog, max_units=self.settings.understanding.max_units,
                           max_parallel=self.bounds.max_parallel)
        t = _Turn(context, tasks, message, checked)
        if system is not None:
            self.log.add(TurnStarted(
                t.turn, system, message, [msgspec.to_builtins(r) for r in checked],
                msgspec.to_builtins(click) if click is not None else None, self.catalog.sha256,
                {k: self.settings[k] for k in config.KEYS if k.startswith("understanding.")},
                msgspec.to_builtins(self.bounds)))
        return t

    def _finish(self, plan: Plan) -> Plan:
        self.log.add(TurnFinished(plan.turn, plan.status, plan_hash(plan)))
        return plan

    def run_task(self, call: TaskCall, *, records: Sequence[Record | Mapping[str, Any]] = (),
                 turn: str | None = None) -> tuple[Any, str | None, BudgetReport]:
        """One task on its own, under a fresh turn budget (for evaluating a task kind
        against gold inputs): (its checked result or None, why not, the budget report)."""
        t = self._start(call.message, records, None, turn)
        try:
            result, _ = t.tasks.run(call, 1)
            return result, None, t.budget.report()
        except NotUnderstood as exc:
            return None, exc.reason, t.budget.report()
        except TurnCancelled as exc:
            return None, str(exc), t.budget.report()

    def single_call(self, message: str, *, records: Sequence[Record | Mapping[str, Any]] = (),
                    turn: str | None = None) -> Plan:
        """The baseline: the whole plan from one call with one schema (the same model,
        catalog, bounds, checks, repairs and log as :meth:`understand`, and the same
        plan assembly, with no segmentation, coverage, verification or framing).

        A failed call fails the turn closed; a missing argument or record becomes a
        question rendered by code, and so does a value the message does not show
        (unless ``single_call`` is configured for independent votes: decision 0017)."""
        t = self._start(message, records, None, turn, "single_call")
        try:
            plan = t.single_call()
        except TurnCancelled as exc:
            plan = t.cancelled(exc)
        return self._finish(plan)

    def understand(self, message: str, *, records: Sequence[Record | Mapping[str, Any]] = (),
                   click: Click | None = None, turn: str | None = None) -> Plan:
        """The plan for ``message``.

        Parameters
        ----------
        message : str
            The user's message, verbatim.
        records : sequence of Record or dict
            The records this turn may touch.
        click : Click, optional
            A structural event: the operation (and record) chosen in the UI.
        turn : str, optional
            An id for the replay log (default: random).

        Raises
        ------
        UsageUnavailable
            A prompt-token bound with a provider that reports no usage.
        CatalogError
            Bad records, or a click naming an unknown operation.
        """
        t = self._start(message, records, click, turn, "pipeline")
        try:
            plan = t.understand(click)
        except TurnCancelled as exc:
            plan = t.cancelled(exc)
        return self._finish(plan)


def replay_turn(source: str | ReplayLog, turn: str, catalog: Catalog, *,
                tasks: Mapping[str, TaskConfig] | None = None) -> Plan:
    """Replay a recorded turn with no model: its inputs and settings from the log's
    ``turn_started`` record, every model answer from its attempts
    (:class:`~boundctx.understanding.replay.ReplayProvider`).

    Parameters
    ----------
    source : str or ReplayLog
        A replay log file, or an in-memory log.
    turn : str
    catalog : Catalog
        The catalog the turn was recorded with (checked by hash).
    tasks : mapping, optional
        The task configurations the turn ran with, if not the defaults.

    Raises
    ------
    LookupError
        The log has no such turn.
    ReplayDiverged
        Another catalog, or a replay that asked for a call, or ended in a plan, the
        recording does not have.
    """
    attempts, turns = read_log(source) if isinstance(source, str) else (source.attempts, source.turns)
    started = next((t for t in turns if isinstance(t, TurnStarted) and t.turn == turn), None)
    if started is None:
        raise LookupError(f"no turn {turn!r} in the replay log (turns: "
                          f"{', '.join(t.turn for t in turns if isinstance(t, TurnStarted))[:300]})")
    if started.catalog_sha256 != catalog.sha256:
        raise ReplayDiverged(f"turn {turn!r} was recorded with another catalog (hash {started.catalog_sha256[:12]}, "
                             f"this one {catalog.sha256[:12]}); replay it with the catalog it ran on")
    provider = ReplayProvider([a for a in attempts if a.turn == turn])
    settings = config.load(path=os.devnull, env={}, overrides=started.settings)
    u = Understander(provider, catalog, settings=settings, tasks=tasks, bounds=msgspec.convert(started.bounds, Bounds),
                     clock=provider.clock)
    click = msgspec.convert(started.click, Click) if started.click is not None else None
    if started.system == "single_call":
        plan = u.single_call(started.message, records=started.records, turn=turn)
    else:
        plan = u.understand(started.message, records=started.records, click=click, turn=turn)
    finished = next((t for t in turns if isinstance(t, TurnFinished) and t.turn == turn), None)
    if finished is not None and plan_hash(plan) != finished.plan_sha256:
        raise ReplayDiverged(f"turn {turn!r} replayed to another plan ({plan.status}) than the one recorded "
                             f"({finished.status}); the code or the task configuration changed since")
    return plan
