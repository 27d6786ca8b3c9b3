"""One task call run to a checked answer: attempts, votes, repairs and escalation.

:meth:`TaskRunner.run` asks for as many votes as the task kind is configured for and
keeps the answer a majority gave. Each vote is an attempt; an attempt whose output
fails the schema or the task's check is repaired (the model is told what was wrong),
and when the repairs are spent the task may be escalated once to another model.
Every attempt reserves its call on the turn's :class:`~.budget.Budget` before it is
made, settles it with the usage the backend reported, and is logged as an
:class:`~.replay.Attempt`, a call the budget refused included. A call that ends
cancelled (``Finish("cancelled")``: the caller or the client stopped it) is neither
repaired nor escalated: :class:`TurnCancelled` ends the turn, and no call of the turn
starts after it.

An attempt's request is built once: the same :class:`~boundctx.providers.ChatRequest`
is hashed for the replay log and sent to the model.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from boundctx.errors import BudgetExhausted, GenerationTimeout, ReplayDiverged, TaskOutputInvalid
from boundctx.providers.base import ChatRequest, Finish, Provider, TextChunk, make_request
from boundctx.understanding import schema as S
from boundctx.understanding.budget import Budget
from boundctx.understanding.replay import Attempt, AttemptRole, ReplayLog, messages_hash, prompt_hash
from boundctx.understanding.tasks import MAX_TOKENS, TaskCall, TaskKind

__all__ = ["NotUnderstood", "Outcome", "TaskConfig", "TaskRunner", "TurnCancelled"]


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


class NotUnderstood(Exception):
    """A task gave no valid answer (or no majority), or a bound was hit: the pipeline
    turns it into a notice; it never leaves the package.

    Parameters
    ----------
    task : str
        The task kind (or the pipeline's name for the step that failed).
    reason : str
    bound : str, optional
        The bound whose exhaustion caused it.
    holds : sequence of str
        The acts it holds (see :class:`~.plan.Notice`), once the pipeline knows them.
    """

    def __init__(self, task: str, reason: str, *, bound: str | None = None, holds: Sequence[str] = ()) -> None:
        super().__init__(reason)
        self.task = task
        self.reason = reason
        self.bound = bound
        self.holds = list(holds)

    def holding(self, holds: Sequence[str]) -> NotUnderstood:
        """The same failure, holding ``holds``."""
        return NotUnderstood(self.task, self.reason, bound=self.bound, holds=holds)


class TurnCancelled(Exception):
    """A call of the turn ended cancelled: the turn stops at its next step (no repair,
    vote, escalation or further task), and the pipeline ends it with a plan that acts on
    nothing; it never leaves the package."""


class Outcome(msgspec.Struct, frozen=True):
    """What one attempt came to.

    Attributes
    ----------
    valid : bool
        The output passed the schema and the task's check.
    parsed : any
        The output as parsed (None when it could not be).
    result : any
        What the task's check made of it (None unless valid).
    problems : str
        Why it is not valid (what a repair is told); empty when it is.
    raw : str
        Exactly what the model returned.
    """

    valid: bool
    parsed: Any
    result: Any
    problems: str
    raw: str


def _vote_key(value: Any) -> str:
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
    """The model's name as the replay log records it."""
    label = getattr(provider, "label", None)
    if isinstance(label, str) and label:
        return label
    for attr in ("model", "model_path"):
        value = getattr(provider, attr, None)
        if isinstance(value, str) and value:
            return f"{provider.name}:{value.rsplit('/', 1)[-1]}"
    return provider.name


class TaskRunner:
    """Runs the task calls of one turn (shared by the turn's threads).

    Parameters
    ----------
    turn : str
        The turn's id in the replay log.
    budget : Budget
        The turn's budget: every call is reserved on it before it is made.
    provider : Provider
        The model of every task whose configuration names none.
    configs : mapping
        Task kind -> :class:`TaskConfig` (a kind not in it runs with the defaults).
    votes, repairs : int
        The defaults for a configuration that leaves them out.
    log : ReplayLog
        Where every attempt is recorded.
    progress : callable, optional
        ``progress(kind, role)`` just before each model call starts.
    """

    def __init__(self, turn: str, budget: Budget, *, provider: Provider, configs: Mapping[str, TaskConfig],
                 votes: int, repairs: int, log: ReplayLog,
                 progress: Callable[[str, str], None] | None = None) -> None:
        self.turn = turn
        self.budget = budget
        self.provider = provider
        self.configs = configs
        self.votes = votes
        self.repairs = repairs
        self.log = log
        self.progress = progress
        self._attempt_numbers: Counter[tuple[str | None, str, str]] = Counter()
        self._lock = threading.Lock()  # calls run in threads; the numbers are read-modify-write
        #: Why the turn was cancelled, once a call ended cancelled (then no call starts).
        self.cancelled: str | None = None

    def config(self, kind: TaskKind) -> TaskConfig:
        return self.configs.get(kind) or TaskConfig()

    def _votes(self, cfg: TaskConfig) -> int:
        return cfg.votes if cfg.votes is not None else self.votes

    def independent_votes(self, kind: TaskKind) -> bool:
        """Whether ``kind`` answers by the agreement of independent samples: two votes
        or more (a winning answer is then given by at least two), drawn at a
        temperature above 0 (at 0 a model gives one answer again, which is still one
        model's word)."""
        cfg = self.config(kind)
        return self._votes(cfg) >= 2 and cfg.temperature > 0

    def run(self, call: TaskCall, depth: int) -> tuple[Any, int]:
        """The checked result of ``call`` and the depth of its last call.

        Raises
        ------
        NotUnderstood
            No valid answer (or no majority), or a bound was hit.
        """
        cfg = self.config(call.kind)
        votes = self._votes(cfg)
        answers: list[tuple[str, Any]] = []
        reasons: list[str] = []
        last_depth = depth
        try:
            for v in range(votes):
                try:
                    parsed, result, d = self._answer(call, depth, cfg, "call" if v == 0 else "vote")
                    answers.append((_vote_key(parsed), result))
                    last_depth = max(last_depth, d)
                except NotUnderstood as exc:
                    reasons.append(exc.reason)
        except BudgetExhausted as exc:
            raise NotUnderstood(call.kind, str(exc), bound=exc.bound) from None
        tally = Counter(key for key, _ in answers)
        if tally:
            key, n = tally.most_common(1)[0]
            if n * 2 > votes:
                return next(r for k, r in answers if k == key), last_depth
            raise NotUnderstood(call.kind, f"{call.kind}: no answer won a majority of {votes} votes "
                                           f"({dict(tally.most_common(3))})")
        raise NotUnderstood(call.kind, f"{call.kind}: " + (reasons[-1] if reasons else "no valid answer"))

    def _answer(self, call: TaskCall, depth: int, cfg: TaskConfig, role: AttemptRole) -> tuple[Any, Any, int]:
        """One vote: (parsed output, result, depth of its last call), after repairs and
        escalation as configured."""
        repairs = cfg.repairs if cfg.repairs is not None else self.repairs
        provider = cfg.provider or self.provider
        messages = call.messages
        problems = ""
        for k in range(repairs + 1):
            outcome = self._attempt(call, provider, messages, depth + k, cfg, role if k == 0 else "repair")
            if outcome.valid:
                return outcome.parsed, outcome.result, depth + k
            problems = outcome.problems
            messages = call.messages + [
                {"role": "assistant", "content": outcome.raw},
                {"role": "user", "content": f"That answer is not valid: {problems}. Answer again, with JSON only."}]
        if cfg.escalate_to is not None:
            d = depth + repairs + 1
            outcome = self._attempt(call, cfg.escalate_to, call.messages, d, cfg, "escalation")
            if outcome.valid:
                return outcome.parsed, outcome.result, d
            problems = outcome.problems
        raise NotUnderstood(call.kind, problems)

    def _attempt(self, call: TaskCall, provider: Provider, messages: list[dict[str, Any]], depth: int,
                 cfg: TaskConfig, role: AttemptRole) -> Outcome:
        """One model call, checked, settled and logged.

        Raises
        ------
        BudgetExhausted
            The budget refused the call, or the call passed a bound.
        ReplayDiverged
            A replay met a call the recording does not have.
        TurnCancelled
            This call ended cancelled, or one before it did (then it is not made).
        """
        if self.cancelled is not None:
            raise TurnCancelled(self.cancelled)
        max_tokens = cfg.max_tokens or call.max_tokens or MAX_TOKENS[call.kind]
        request = make_request(messages, tools=None, max_tokens=max_tokens, temperature=cfg.temperature, stop=None,
                               schema=S.for_decoder(call.schema), timeout_s=None, keep_state=False)
        sampling = {"temperature": cfg.temperature, "max_tokens": max_tokens}
        counted = provider.count_prompt(messages)
        clock = self.budget.clock
        try:
            self.budget.reserve(depth=depth, prompt_tokens=counted)
        except BudgetExhausted as exc:
            # No call is made; the refusal is logged so a replay meets it at the same place.
            self._log(call, request, provider=provider, role="refused", depth=depth, sampling=sampling,
                      counted=counted, raw="", finish_reason=f"refused:{exc.bound}", problems=[str(exc)],
                      finish=None, elapsed=0.0, error=None)
            raise
        raw, finish, error, started = self._generate(call, provider, request, cfg, role)
        if error is None and finish is not None and finish.reason == "cancelled":
            self.budget.release()
            why = (f"cancelled: the {call.kind} call was stopped (the caller cancelled the turn, or its client "
                   "left), so no further model call was made and nothing is acted on")
            self._log(call, request, provider=provider, role=role, depth=depth, sampling=sampling, counted=counted,
                      raw=raw, finish_reason="cancelled", problems=[why], finish=finish,
                      elapsed=round(clock() - started, 6), error=None)
            self.cancelled = why
            raise TurnCancelled(why)
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
                reported = finish if finish is not None and not finish.usage_estimated else None
                self.budget.settle(counted_prompt=counted,
                                   prompt_tokens=reported.prompt_tokens if reported is not None else None,
                                   completion_tokens=reported.completion_tokens if reported is not None else None)
            except BudgetExhausted as exc:
                exhausted = exc
            parsed, result, problems = _check(call, raw, finish)
        if exhausted is not None:
            problems = (problems + "; " if problems else "") + str(exhausted)
        self._log(call, request, provider=provider, role=role, depth=depth, sampling=sampling, counted=counted,
                  raw=raw,
                  finish_reason=f"error:{type(error).__name__}" if error is not None else (
                      finish.reason if finish else None),
                  problems=[problems] if problems else [], finish=finish, elapsed=round(clock() - started, 6),
                  error=error)
        if exhausted is not None:
            raise exhausted
        return Outcome(valid=not problems, parsed=parsed, result=result, problems=problems, raw=raw)

    def _generate(self, call: TaskCall, provider: Provider, request: ChatRequest, cfg: TaskConfig,
                  role: AttemptRole) -> tuple[str, Finish | None, Exception | None, float]:
        """Send ``request``: (the raw output, its Finish, the exception a failed call
        raised, and the clock when the call had its turn on the model)."""
        clock = self.budget.clock
        pieces: list[str] = []
        finish: Finish | None = None
        error: Exception | None = None
        started = clock()
        try:
            # A model that takes one generation at a time is waited for here, so the
            # wait counts against the turn's clock instead of the call's own limit.
            with provider.turn(timeout_s=self.budget.remaining_s()):
                started = clock()
                left = self.budget.remaining_s()
                timeout = cfg.timeout_s if left is None else min(cfg.timeout_s, left)
                if timeout <= 0:
                    raise GenerationTimeout(f"the turn's {self.budget.bounds.wall_clock_s} s were spent before this "
                                            "call could start")
                if self.progress is not None:
                    self.progress(call.kind, role)
                for chunk in provider.stream(request, timeout_s=timeout):
                    if isinstance(chunk, TextChunk):
                        pieces.append(chunk.text)
                    elif isinstance(chunk, Finish):
                        finish = chunk
        except ReplayDiverged:
            self.budget.release()
            raise
        except Exception as exc:  # any failure of the backend is a failed attempt, never an escape
            error = exc
        return "".join(pieces), finish, error, started

    def _log(self, call: TaskCall, request: ChatRequest, *, provider: Provider, role: AttemptRole, depth: int,
             sampling: dict[str, Any], counted: int, raw: str, finish_reason: str | None, problems: list[str],
             finish: Finish | None, elapsed: float, error: BaseException | None) -> None:
        key = (call.unit, call.kind, call.key)
        with self._lock:
            self._attempt_numbers[key] += 1
            number = self._attempt_numbers[key]
        self.log.add(Attempt(
            turn=self.turn, unit=call.unit, task=call.kind, key=call.key, attempt=number, role=role, depth=depth,
            prompt_sha256=prompt_hash(request), model=_model_name(provider), sampling=sampling, raw_output=raw,
            finish_reason=finish_reason, valid=not problems, problems=problems,
            prompt_tokens=finish.prompt_tokens if finish else None,
            completion_tokens=finish.completion_tokens if finish else None, elapsed_s=elapsed,
            counted_prompt=counted, usage_estimated=bool(finish and finish.usage_estimated),
            error=str(error) if error is not None else None, messages_sha256=messages_hash(request.messages)))


def _check(call: TaskCall, raw: str, finish: Finish | None) -> tuple[Any, Any, str]:
    """(parsed output, the check's result, problems) of a call's raw output."""
    parsed = None
    try:
        parsed = S.parse(raw, call.schema, finish_reason=finish.reason if finish else None)
        return parsed, call.check(parsed), ""
    except TaskOutputInvalid as exc:
        return parsed, None, str(exc)
    except (ValueError, ArithmeticError, RecursionError, TypeError) as exc:
        return parsed, None, f"the output could not be read ({type(exc).__name__}: {exc})"
