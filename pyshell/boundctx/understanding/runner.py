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
understood, reported as ``budget.exhausted{bound}``.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import re
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from boundctx import config
from boundctx.errors import (
    BudgetExhausted,
    GenerationTimeout,
    ReplayDiverged,
    TaskOutputInvalid,
    UsageUnavailable,
)
from boundctx.providers.base import Finish, Provider, TextChunk, make_request
from boundctx.understanding import schema as S
from boundctx.understanding.budget import Bounds, Budget, BudgetReport
from boundctx.understanding.catalog import Catalog, Operation, Record, check_records
from boundctx.understanding.normalise import supports, ungrounded
from boundctx.understanding.replay import (
    Attempt,
    ReplayLog,
    TurnFinished,
    TurnStarted,
    messages_hash,
    plan_hash,
    prompt_hash,
)
from boundctx.understanding.tasks import (
    CONNECTORS,
    MAX_TOKENS,
    TASK_KINDS,
    Extracted,
    TaskCall,
    Unit,
    coverage_call,
    extract_call,
    gaps,
    locate_call,
    question_frame_call,
    route_call,
    segment_call,
    single_call_call,
    verify_call,
    whole_message_unit,
)

__all__ = ["HOLD_ALL", "HOLD_OPERATION", "RECORD", "Act", "Click", "Notice", "Plan", "Question", "TaskConfig",
           "Understander", "is_held", "replay_turn"]


@dataclass(frozen=True)
class TaskConfig:
    """How one task kind runs (every field optional: None = the turn's default).

    Attributes
    ----------
    instructions : str, optional
        Replaces the task's system prompt.
    provider : Provider, optional
        Another model for this task.
    temperature : float
        0 by default (votes > 1 need some temperature to differ).
    max_tokens : int, optional
    votes, repairs : int, optional
        Default: ``understanding.votes`` / ``understanding.repairs``.
    escalate_to : Provider, optional
        Asked once more, with the original prompt, when repairs are spent.
    timeout_s : float
        Wall-clock limit of one call (the turn's remaining clock may cut it shorter).
    """

    instructions: str | None = None
    provider: Provider | None = None
    temperature: float = 0.0
    max_tokens: int | None = None
    votes: int | None = None
    repairs: int | None = None
    escalate_to: Provider | None = None
    timeout_s: float = 60.0

    def __post_init__(self) -> None:
        problems = []
        if not self.temperature >= 0:
            problems.append(f"temperature must be >= 0, got {self.temperature}")
        if self.max_tokens is not None and self.max_tokens < 1:
            problems.append(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.votes is not None and self.votes < 1:
            problems.append(f"votes must be >= 1, got {self.votes}")
        if self.repairs is not None and self.repairs < 0:
            problems.append(f"repairs must be >= 0, got {self.repairs}")
        if not self.timeout_s > 0:
            problems.append(f"timeout_s must be > 0, got {self.timeout_s}")
        if problems:
            raise ValueError("TaskConfig: " + "; ".join(problems))


class Click(msgspec.Struct, frozen=True):
    """A structural event from the UI: the user chose the operation (and record)."""

    operation: str
    record: str | None = None


class Act(msgspec.Struct, frozen=True):
    """One operation the message asks for.

    Attributes
    ----------
    unit : str
    operation : str
    record : str or None
    arguments : dict
        Typed values (declared defaults filled in for optional arguments not given).
    evidence : dict
        For each argument given, the message's words it came from.
    status : str
        ``"ready"``, ``"needs_input"`` (see the plan's questions) or ``"held"`` (a unit
        of this turn that may touch the same record was not understood).
    missing : list of str
        ``"@record"`` (which record) and the arguments not known: required ones not
        given, and any whose value its words did not support or the message does not
        show (a ``"no_ground"`` notice says which).
    """

    unit: str
    operation: str
    record: str | None
    arguments: dict[str, Any]
    evidence: dict[str, str]
    status: str
    missing: list[str] = []


class Question(msgspec.Struct, frozen=True):
    """What to ask the user before an act can be carried out."""

    unit: str
    operation: str
    about: list[str]
    text: str
    candidates: list[str] = []


#: The missing item that stands for "which record" (no argument name starts with "@").
RECORD = "@record"
#: In ``Notice.holds``: every act of the turn.
HOLD_ALL = "*"
#: In ``Notice.holds``: a prefix naming an operation on no record.
HOLD_OPERATION = "op:"


class Notice(msgspec.Struct, frozen=True):
    """Something the turn could not do, said instead of guessed.

    Attributes
    ----------
    kind : str
        ``"not_understood"``, ``"no_operation"`` (the unit asks for nothing in the
        catalog), ``"no_record"``, ``"lost_constraint"``, ``"segmentation_failed"``,
        ``"no_ground"`` (arguments asked for because the message does not show the
        value a model gave: the message names each and why).
    unit : str or None
    message : str
    bound : str, optional
        The bound whose exhaustion caused it (``budget.exhausted{bound}``).
    holds : list of str
        For a part not understood, the acts it holds: record ids, ``"op:<name>"`` for
        acts of an operation on no record, or ``"*"`` for every act of the turn.
    """

    kind: str
    unit: str | None
    message: str
    bound: str | None = None
    holds: list[str] = []


class Plan(msgspec.Struct, frozen=True):
    """The understanding of one message.

    Attributes
    ----------
    turn : str
    status : str
        ``"ready"`` (every unit understood; acts to carry out, nothing to ask),
        ``"needs_input"`` (questions to ask first), ``"incomplete"`` (a unit was not
        understood: see the notices; acts on records it may touch are held, the others
        may go ahead), ``"nothing"`` (understood, and no act asked for), or
        ``"failed_closed"`` (segmentation or a constraint failed: no act at all).
    units : list of Unit
    acts : list of Act
    questions : list of Question
    notices : list of Notice
    budget : BudgetReport
    shortcuts : dict
        Task kind -> how many times it was skipped because its answer was determined.
    """

    turn: str
    status: str
    units: list[Unit]
    acts: list[Act]
    questions: list[Question]
    notices: list[Notice]
    budget: BudgetReport
    shortcuts: dict[str, int]


#: The task name a lost constraint is reported under.
LOST = "lost"


#: Held while a task waits for and runs a generation on a model that serialises them.
_SERIAL = threading.Lock()


class _NotUnderstood(Exception):
    def __init__(self, task: str, reason: str, bound: str | None = None) -> None:
        super().__init__(reason)
        self.task = task
        self.reason = reason
        self.bound = bound


def _canonical(value: Any) -> str:
    """The vote key of an output: key order and the order of a choice of ids do not
    make two answers different."""
    def norm(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: norm(v[k]) for k in sorted(v)}
        if isinstance(v, list):
            items = [norm(x) for x in v]
            return sorted(items) if all(isinstance(x, str) for x in items) else items
        return v
    return json.dumps(norm(value), ensure_ascii=False)


def _model_name(provider: Provider) -> str:
    label = getattr(provider, "label", None)
    if isinstance(label, str) and label:
        return label
    for attr in ("model", "model_path"):
        value = getattr(provider, attr, None)
        if isinstance(value, str) and value:
            return f"{provider.name}:{value.rsplit('/', 1)[-1]}"
    return provider.name


class _Turn:
    """The state of one turn (shared by its threads; lists are appended under the GIL)."""

    def __init__(self, owner: "Understander", message: str, records: list[Record], turn: str, budget: Budget):
        self.owner = owner
        self.message = message
        self.records = records
        self.turn = turn
        self.budget = budget
        self.shortcuts: Counter[str] = Counter()
        self.attempt_numbers: Counter[tuple] = Counter()
        self._lock = threading.Lock()  # units run in threads; counters are read-modify-write

    def skip(self, kind: str) -> None:
        """Count a task skipped because its answer was determined."""
        with self._lock:
            self.shortcuts[kind] += 1

    # -- one task, with repairs, votes and escalation ------------------------------------

    def run(self, call: TaskCall, depth: int) -> tuple[Any, int]:
        """The checked result of ``call`` and the depth of its last call.

        Raises
        ------
        _NotUnderstood
            No valid answer (or no majority), or a bound was hit.
        """
        cfg = self.owner.task_config(call.kind)
        votes = self._votes(cfg)
        answers: list[tuple[str, Any]] = []
        reasons: list[str] = []
        last_depth = depth
        try:
            for v in range(votes):
                try:
                    parsed, result, d = self._attempt_chain(call, depth, cfg, "call" if v == 0 else "vote")
                    answers.append((_canonical(parsed), result))
                    last_depth = max(last_depth, d)
                except _NotUnderstood as exc:
                    reasons.append(exc.reason)
        except BudgetExhausted as exc:
            raise _NotUnderstood(call.kind, str(exc), exc.bound) from None
        tally = Counter(key for key, _ in answers)
        if tally:
            key, n = tally.most_common(1)[0]
            if n * 2 > votes:
                return next(r for k, r in answers if k == key), last_depth
            raise _NotUnderstood(call.kind, f"{call.kind}: no answer won a majority of {votes} votes "
                                            f"({dict(tally.most_common(3))})")
        raise _NotUnderstood(call.kind, f"{call.kind}: " + (reasons[-1] if reasons else "no valid answer"))

    def _votes(self, cfg: TaskConfig) -> int:
        return cfg.votes if cfg.votes is not None else int(self.owner.settings["understanding.votes"])

    def independent_votes(self, kind: str) -> bool:
        """Whether ``kind`` answers by the agreement of independent samples: two votes
        or more (a winning answer is then given by at least two), drawn at a
        temperature above 0 (at 0 a model gives one answer again, which is still one
        model's word)."""
        cfg = self.owner.task_config(kind)
        return self._votes(cfg) >= 2 and cfg.temperature > 0

    def _attempt_chain(self, call: TaskCall, depth: int, cfg: TaskConfig, role: str) -> tuple[Any, Any, int]:
        repairs = cfg.repairs if cfg.repairs is not None else int(self.owner.settings["understanding.repairs"])
        provider = cfg.provider or self.owner.provider
        messages = call.messages
        problems = ""
        for k in range(repairs + 1):
            outcome = self._call(call, provider, messages, depth + k, cfg, role if k == 0 else "repair")
            if outcome[0]:
                return outcome[1], outcome[2], depth + k
            problems, raw = outcome[3], outcome[4]
            messages = call.messages + [
                {"role": "assistant", "content": raw},
                {"role": "user", "content": f"That answer is not valid: {problems}. Answer again, with JSON only."}]
        if cfg.escalate_to is not None:
            d = depth + repairs + 1
            outcome = self._call(call, cfg.escalate_to, call.messages, d, cfg, "escalation")
            if outcome[0]:
                return outcome[1], outcome[2], d
            problems = outcome[3]
        raise _NotUnderstood(call.kind, problems)

    def _call(self, call: TaskCall, provider: Provider, messages: list[dict[str, Any]], depth: int,
              cfg: TaskConfig, role: str) -> tuple[bool, Any, Any, str, str]:
        """One model call: (valid, parsed, result, problems, raw output)."""
        max_tokens = cfg.max_tokens or call.max_tokens or MAX_TOKENS[call.kind]
        decoder_schema = S.for_decoder(call.schema)
        request = make_request(messages, tools=None, max_tokens=max_tokens, temperature=cfg.temperature, stop=None,
                               schema=decoder_schema, timeout_s=None)
        counted = provider.count_prompt(messages)
        clock = self.budget.clock
        try:
            self.budget.reserve(depth=depth, prompt_tokens=counted)
        except BudgetExhausted as exc:
            # No call is made; the refusal is logged so a replay meets it at the same place.
            self._log(call, provider, request, messages, depth, role, cfg, max_tokens, counted, "",
                      f"refused:{exc.bound}", [str(exc)], None, 0.0, None)
            raise
        pieces: list[str] = []
        finish = None
        error: BaseException | None = None
        # A model that takes one generation at a time: wait for the turn here, so the
        # wait counts against the turn's clock instead of starting a fresh timeout.
        with _SERIAL if provider.serialises else contextlib.nullcontext():
            started = clock()
            left = self.budget.remaining_s()
            timeout = cfg.timeout_s if left is None else min(cfg.timeout_s, left)
            try:
                if timeout <= 0:
                    raise GenerationTimeout(f"the turn's {self.budget.bounds.wall_clock_s} s were spent before this "
                                            "call could start")
                if self.owner.progress is not None:
                    self.owner.progress(call.kind, role)
                for chunk in provider.stream_chat(messages, max_tokens=max_tokens, temperature=cfg.temperature,
                                                  schema=decoder_schema, timeout_s=timeout):
                    if isinstance(chunk, TextChunk):
                        pieces.append(chunk.text)
                    elif isinstance(chunk, Finish):
                        finish = chunk
            except ReplayDiverged:
                self.budget.release()
                raise
            except Exception as exc:  # any failure of the backend is a failed attempt, never an escape
                error = exc
        raw = "".join(pieces)
        exhausted: BudgetExhausted | None = None
        parsed = result = None
        problems = ""
        if error is not None:
            self.budget.release()
            problems = f"the call failed: {type(error).__name__}: {error}"
            left = self.budget.remaining_s()
            if isinstance(error, GenerationTimeout) and left is not None and left <= 0:
                exhausted = self.budget.timed_out()
        else:
            try:
                reported = finish is not None and not finish.usage_estimated
                self.budget.settle(counted_prompt=counted, prompt_tokens=finish.prompt_tokens if reported else None,
                                   completion_tokens=finish.completion_tokens if reported else None)
            except BudgetExhausted as exc:
                exhausted = exc
            try:
                parsed = S.parse(raw, call.schema, finish_reason=finish.reason if finish else None)
                result = call.check(parsed)
            except TaskOutputInvalid as exc:
                problems = str(exc)
            except (ValueError, ArithmeticError, RecursionError, TypeError) as exc:
                problems = f"the output could not be read ({type(exc).__name__}: {exc})"
        if exhausted is not None:
            problems = (problems + "; " if problems else "") + str(exhausted)
        self._log(call, provider, request, messages, depth, role, cfg, max_tokens, counted, raw,
                  f"error:{type(error).__name__}" if error is not None else (finish.reason if finish else None),
                  [problems] if problems else [], finish, round(clock() - started, 6), error)
        if exhausted is not None:
            raise exhausted
        return not problems, parsed, result, problems, raw

    def _log(self, call: TaskCall, provider: Provider, request: Any, messages: list[dict[str, Any]], depth: int,
             role: str, cfg: TaskConfig, max_tokens: int, counted: int, raw: str, finish_reason: str | None,
             problems: list[str], finish: Finish | None, elapsed: float, error: BaseException | None) -> None:
        key = (call.unit, call.kind, call.key)
        with self._lock:
            self.attempt_numbers[key] += 1
            number = self.attempt_numbers[key]
        self.owner.log.add(Attempt(
            self.turn, call.unit, call.kind, call.key, number, role if not (finish_reason or "").startswith(
                "refused") else "refused", depth, prompt_hash(request), _model_name(provider),
            {"temperature": cfg.temperature, "max_tokens": max_tokens}, raw, finish_reason, not problems, problems,
            finish.prompt_tokens if finish else None, finish.completion_tokens if finish else None, elapsed, counted,
            bool(finish and finish.usage_estimated), str(error) if error is not None else None,
            messages_hash(messages)))

    # -- the turn ------------------------------------------------------------------------

    def instructions(self, kind: str) -> str | None:
        return self.owner.task_config(kind).instructions

    def segment(self) -> tuple[list[Unit], int]:
        """Units (after at most one re-segmentation), or _NotUnderstood."""
        m = self.message
        max_units = int(self.owner.settings["understanding.max_units"])
        whole = whole_message_unit(m)
        if whole is not None:
            self.skip("segment")
            units, depth = [whole], 0
        else:
            units, depth = self.run(segment_call(m, max_units=max_units, instructions=self.instructions("segment")), 1)
        found = gaps(m, units)
        if not found:
            self.skip("coverage")
            return units, depth
        flagged, depth = self.run(coverage_call(m, units, found, instructions=self.instructions("coverage")),
                                  depth + 1)
        if not flagged:
            return units, depth
        units, depth = self.run(segment_call(m, max_units=max_units, left_out=[g.text for g in flagged],
                                             instructions=self.instructions("segment")), depth + 1)
        covered = [(u.start, u.end) for u in units]
        lost = [g for g in flagged if not _covered(g.start, g.end, m, covered)]
        if lost:
            raise _NotUnderstood(LOST, "a request or condition is in no unit even after re-segmentation: "
                                 + "; ".join(repr(g.text) for g in lost), None)
        # Words the new split left out that the first split covered: coverage once more,
        # and anything it flags now is lost (no second re-segmentation).
        before = [(g.start, g.end) for g in found]
        fresh = [g for g in gaps(m, units) if not _covered(g.start, g.end, m, before)]
        if fresh:
            flagged, depth = self.run(coverage_call(m, units, fresh, instructions=self.instructions("coverage")),
                                      depth + 1)
            if flagged:
                raise _NotUnderstood(LOST, "re-segmentation left out a request or condition: "
                                     + "; ".join(repr(g.text) for g in flagged), None)
        else:
            self.skip("coverage")
        return units, depth

    def unit_chain(self, unit: Unit, depth: int, click: Click | None
                   ) -> tuple[list[Act], list[Question], list[Notice]]:
        """Acts, questions and notices of one unit. A notice for a part not understood
        says in ``holds`` which acts it holds (see :class:`Notice`)."""
        catalog = self.owner.catalog
        acts: list[Act] = []
        questions: list[Question] = []
        notices: list[Notice] = []
        try:
            if click is not None:
                operations = [catalog.operation(click.operation)]
                self.skip("route")
                route_depth = depth
            else:
                operations, route_depth = self.run(route_call(self.message, unit, catalog.operations,
                                                              instructions=self.instructions("route")), depth + 1)
        except _NotUnderstood as exc:
            # Not knowing what the unit asks for, it may correct or cancel anything.
            return [], [], [Notice("not_understood", unit.id, exc.reason, exc.bound, [HOLD_ALL])]
        if not operations:
            notices.append(Notice("no_operation", unit.id, f"{unit.text!r} asks for no operation this assistant has"))
        for op in operations:
            try:
                act, question, notice = self.act_chain(unit, op, route_depth, click)
            except _NotUnderstood as exc:
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
        """One act. A _NotUnderstood raised from it carries ``holds``: the acts it may
        touch — its record once known, else every record of its kind, and for an
        operation on no record, other acts of the same operation (a second request may
        correct the first)."""
        try:
            return self._act_chain(unit, op, depth, click)
        except _NotUnderstood as exc:
            if not hasattr(exc, "holds"):
                if op.record_kind is None:
                    exc.holds = [f"{HOLD_OPERATION}{op.name}"]
                else:
                    exc.holds = [r.id for r in self.records if r.kind == op.record_kind]
            raise

    def _act_chain(self, unit: Unit, op: Operation, depth: int, click: Click | None
                   ) -> tuple[Act | None, Question | None, Notice | None]:
        m = self.message
        record: Record | None = None
        candidates: list[Record] = []
        missing: list[str] = []
        if op.record_kind is not None:
            candidates = [r for r in self.records if r.kind == op.record_kind]
            if click is not None and click.record is not None:
                record = next((r for r in candidates if r.id == click.record), None)
                if record is None:
                    return None, None, Notice("no_record", unit.id, f"the clicked record {click.record!r} is not a "
                                                                    f"{op.record_kind} of this turn")
                self.skip("locate")
            elif not candidates:
                return None, None, Notice("no_record", unit.id, f"{op.name} acts on a {op.record_kind}, and this "
                                                                "turn offers none")
            elif len(candidates) == 1:
                record = candidates[0]
                self.skip("locate")
            else:
                record, depth = self.run(locate_call(m, unit, op, candidates, instructions=self.instructions("locate")),
                                         depth + 1)
                if record is None:
                    missing.append(RECORD)
        try:
            return self._arguments(unit, op, depth, record, candidates, missing)
        except _NotUnderstood as exc:
            if record is not None:
                exc.holds = [record.id]
            raise

    def _arguments(self, unit: Unit, op: Operation, depth: int, record: Record | None, candidates: list[Record],
                   missing: list[str]) -> tuple[Act | None, Question | None, Notice | None]:
        m = self.message
        values: dict[str, Extracted] = {}
        if op.params:
            values, depth = self.run(extract_call(m, unit, op, record, instructions=self.instructions("extract")),
                                     depth + 1)
        else:
            self.skip("extract")
        given = {n: e for n, e in values.items() if e.value is not None}
        # A value code cannot see in the message is one model's word alone, and one
        # verify answer is one more (a wrong "supported" let "Zebra" through for a
        # message saying "Dana"): it is asked for without verify, unless verify's
        # independent votes are to agree on it (decision 0017).
        unfounded = _without_ground(m, op, given)
        asked = {} if self.independent_votes("verify") else unfounded
        for name in asked:
            del given[name]
        unconfirmed = {n: e for n, e in given.items()
                       if n in unfounded or not supports(e.value, e.evidence or "", op.param(n))}
        rejected: list[str] = list(asked)
        notice = _no_ground_notice(unit, op, asked, "verify") if asked else None
        if unconfirmed:
            verdicts, depth = self.run(verify_call(m, unit, op, unconfirmed, instructions=self.instructions("verify")),
                                       depth + 1)
            for name, ok in verdicts.items():
                if not ok:
                    # Not supported by its words: asked for, never guessed, and never
                    # replaced by a default (the user did say something).
                    del given[name]
                    rejected.append(name)
        elif op.params:
            self.skip("verify")
        act = _finish_act(unit, op, record, candidates, given, missing, rejected)
        missing = act.missing
        if not missing:
            return act, None, notice
        if len(missing) == 1:
            about = missing
            self.skip("question_frame")
        else:
            described = [(x, f"which {op.record_kind} (one of {len(candidates)})" if x == RECORD
                          else f"{x}: {op.param(x).description}") for x in missing]
            about, depth = self.run(question_frame_call(m, unit, op, described,
                                                        instructions=self.instructions("question_frame")), depth + 1)
        return act, _question(unit, op, about, candidates), notice


def _without_ground(message: str, op: Operation, given: Mapping[str, Extracted]) -> dict[str, str]:
    """Argument -> why the message does not show its value, for each given value code
    cannot find there (:func:`~.normalise.ungrounded`)."""
    out = {}
    for name, e in given.items():
        why = ungrounded(e.value, e.evidence or "", message, op.param(name))
        if why is not None:
            out[name] = why
    return out


def _no_ground_notice(unit: Unit, op: Operation, asked: Mapping[str, str], voter: str) -> Notice:
    names = list(asked)
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return Notice("no_ground", unit.id,
                  f"{op.name}: {listed} asked for, since the message does not show the value a model gave ("
                  + "; ".join(f"{n}: {why}" for n, why in asked.items()) + "); one model's word is not enough for "
                  f"a value with no ground in the message (configure {voter} with votes >= 2 and a temperature "
                  "above 0 to let agreeing votes keep one)")


def _finish_act(unit: Unit, op: Operation, record: Record | None, candidates: Sequence[Record],
                given: dict[str, Extracted], missing: list[str], rejected: Sequence[str] = ()) -> Act:
    """The act from what is known: declared defaults for optional arguments the message
    does not mention; required ones not given, values their words did not support and
    an unresolved record listed as missing."""
    arguments = {n: e.value for n, e in given.items()}
    for p in op.params:
        if p.name not in arguments and p.name not in rejected and not p.required and p.default is not None:
            arguments[p.name] = p.default
    missing = list(missing) + [p.name for p in op.params
                               if p.name not in arguments and (p.required or p.name in rejected)]
    return Act(unit.id, op.name, record.id if record else None, arguments,
               {n: e.evidence for n, e in given.items() if e.evidence is not None},
               "needs_input" if missing else "ready", missing)


def _covered(start: int, end: int, message: str, spans: Sequence[tuple[int, int]]) -> bool:
    """Every word of message[start:end] other than a connector lies inside ``spans``."""
    for word in re.finditer(r"\w+", message[start:end]):
        if word.group(0).lower() in CONNECTORS:
            continue
        a, b = start + word.start(), start + word.end()
        if not any(lo <= a and b <= hi for lo, hi in spans):
            return False
    return True


def _question(unit: Unit, op: Operation, about: list[str], candidates: Sequence[Record]) -> Question:
    parts = []
    for item in about:
        if item == RECORD:
            names = ", ".join(c.label or c.id for c in candidates)
            parts.append(f"Which {op.record_kind} do you mean ({names})?")
        else:
            p = op.param(item)
            parts.append(f"What {item.replace('_', ' ')} should I use" + (f" ({p.description})" if p.description
                                                                         else "") + "?")
    return Question(unit.id, op.name, about, " ".join(parts),
                    [c.id for c in candidates] if RECORD in about else [])


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
               turn: str | None, system: str | None = None) -> "_Turn":
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
        t = _Turn(self, message, checked, turn or secrets.token_hex(6), Budget(self.bounds, clock=self.clock))
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
            result, _ = t.run(call, 1)
            return result, None, t.budget.report()
        except _NotUnderstood as exc:
            return None, exc.reason, t.budget.report()

    def single_call(self, message: str, *, records: Sequence[Record | Mapping[str, Any]] = (),
                    turn: str | None = None) -> Plan:
        """The baseline: the whole plan from one call with one schema (the same model,
        catalog, bounds, checks, repairs and log as :meth:`understand`, and the same
        plan assembly, with no segmentation, coverage, verification or framing).

        A failed call fails the turn closed; a missing argument or record becomes a
        question rendered by code, and so does a value the message does not show
        (unless ``single_call`` is configured for independent votes: decision 0017)."""
        t = self._start(message, records, None, turn, "single_call")
        return self._finish(self._single_call(t))

    def _single_call(self, t: "_Turn") -> Plan:
        message = t.message
        call = single_call_call(message, self.catalog.operations, t.records,
                                max_acts=int(self.settings["understanding.max_units"]) * 2,
                                instructions=t.instructions("single_call"))
        try:
            acts_out, _ = t.run(call, 1)
        except _NotUnderstood as exc:
            return Plan(t.turn, "failed_closed", [], [], [], [Notice("not_understood", None, exc.reason, exc.bound)],
                        t.budget.report(), {})
        unit = Unit("u1", message, 0, len(message))
        acts: list[Act] = []
        questions: list[Question] = []
        notices: list[Notice] = []
        # The baseline has no verify, so its one call is all the word a value has: one
        # the message does not show is asked for (decision 0017).
        voting = t.independent_votes("single_call")
        for op, record, values in acts_out:
            candidates = [r for r in t.records if op.record_kind and r.kind == op.record_kind]
            if op.record_kind and record is None and len(candidates) == 1:
                record = candidates[0]
            given = {n: e for n, e in values.items() if e.value is not None}
            asked = {} if voting else _without_ground(message, op, given)
            act = _finish_act(unit, op, record, candidates, {n: e for n, e in given.items() if n not in asked},
                              [RECORD] if op.record_kind and record is None else [], list(asked))
            acts.append(act)
            if act.missing:
                questions.append(_question(unit, op, act.missing, candidates))
            if asked:
                notices.append(_no_ground_notice(unit, op, asked, "single_call"))
        if not acts:
            notices.append(Notice("no_operation", None, "the message asks for no operation this assistant has"))
        return _assemble(t, [unit], [(acts, questions, notices)])

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
        return self._finish(self._understand(t, click))

    def _understand(self, t: "_Turn", click: Click | None) -> Plan:
        message = t.message
        budget = t.budget
        if click is not None:
            units = [Unit("u1", message, 0, len(message))]
            t.skip("segment")
            t.skip("coverage")
            depth = 0
        else:
            try:
                units, depth = t.segment()
            except _NotUnderstood as exc:
                kind = "lost_constraint" if exc.task == LOST else "segmentation_failed"
                return Plan(t.turn, "failed_closed", [], [], [], [Notice(kind, None, exc.reason, exc.bound)],
                            budget.report(), dict(t.shortcuts))
        workers = min(self.bounds.max_parallel, len(units))
        before_units = dict(t.shortcuts)
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(workers, 1)) as pool:
            results = list(pool.map(lambda u: t.unit_chain(u, depth, click), units))
        if workers > 1 and budget.exhausted is not None:
            # Which parallel unit got the last call before the bound is a race; so the
            # turn does not depend on it, none of its units counts as understood.
            bound = budget.exhausted
            why = (f"budget.exhausted{{{bound}}} while {workers} units were read in parallel; raise "
                   f"understanding.{bound}, or set understanding.max_parallel = 1 to keep what was understood "
                   "before the bound")
            return Plan(t.turn, "incomplete", units, [], [],
                        [Notice("not_understood", u.id, why, bound, [HOLD_ALL]) for u in units],
                        budget.report(), before_units)
        return _assemble(t, units, results)


def is_held(act: Act, notices: Sequence[Notice]) -> bool:
    """Whether a notice of this plan holds ``act``."""
    for n in notices:
        for h in n.holds:
            if h == HOLD_ALL or h == act.record or (act.record is None and h == f"{HOLD_OPERATION}{act.operation}"):
                return True
    return False


def _assemble(t: _Turn, units: list[Unit], results: list[tuple[list[Act], list[Question], list[Notice]]]) -> Plan:
    """One plan from every unit's outputs; an act a part not understood may touch is
    held."""
    acts = [a for r in results for a in r[0]]
    questions = [q for r in results for q in r[1]]
    notices = [n for r in results for n in r[2]]
    acts = [msgspec.structs.replace(a, status="held") if is_held(a, notices) else a for a in acts]
    if any(n.kind == "not_understood" for n in notices):
        status = "incomplete"
    elif questions:
        status = "needs_input"
    elif acts:
        status = "ready"
    else:
        status = "nothing"
    return Plan(t.turn, status, units, acts, questions, notices, t.budget.report(), dict(t.shortcuts))


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
    from boundctx.understanding.replay import ReplayProvider, read_log

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
