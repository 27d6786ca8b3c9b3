"""The replay log: one record per task attempt, and replay without a model.

Every attempt (first call, vote, repair, escalation) becomes an :class:`Attempt`
appended as one line, ``{"type": "task_attempt", ...}``, to a JSONL file through the
transcript store (so it gets the store's whole-line appends, lock and torn-tail
handling, and opens in milliseconds however long it grows).

:class:`ReplayProvider`, a :class:`~boundctx.providers.ScriptedProvider`, plays
recorded attempts back: each request is answered with the raw output recorded for the
same prompt (same messages, schema and sampling), in recorded order, with the recorded
ending and usage. ``runner.replay_turn`` replays a recorded turn through it with no
model and checks it yields the same plan. Requests, messages and plans are hashed as
one canonical JSON (:func:`plan_hash`, :func:`prompt_hash`, :func:`messages_hash`).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import msgspec

from boundctx import errors
from boundctx.errors import ReplayDiverged
from boundctx.providers.base import ChatRequest, finish_reason
from boundctx.providers.scripted import ScriptedProvider, ScriptedReply
from boundctx.understanding.plan import PlanStatus

__all__ = ["Attempt", "AttemptRole", "ReplayLog", "ReplayProvider", "TurnFinished", "TurnStarted", "messages_hash",
           "plan_hash", "prompt_hash", "read_attempts", "read_log"]

#: What an attempt was: a task's first call, another vote, a repair, the escalation,
#: or a call the budget refused before it was made.
AttemptRole = Literal["call", "vote", "repair", "escalation", "refused"]


class Attempt(msgspec.Struct, frozen=True, tag="task_attempt", tag_field="type"):
    """One model call made by one task.

    Attributes
    ----------
    turn : str
    unit : str or None
        The unit it was about (None: the whole message).
    task : str
        The task kind.
    key : str
        What tells it apart within its unit (the operation for extract).
    attempt : int
        1-based, per (turn, unit, task, key).
    role : AttemptRole
        ``"call"``, ``"vote"``, ``"repair"``, ``"escalation"``, or ``"refused"`` for a
        call a bound stopped before it was made (``finish_reason`` ``"refused:<bound>"``;
        no model was asked).
    depth : int
        Its place in the chain of dependent calls.
    prompt_sha256 : str
        Hash of the request (messages, schema, sampling): what replay matches on.
    model : str
    sampling : dict
        ``temperature``, ``max_tokens``.
    raw_output : str
        Exactly what the model returned.
    finish_reason : str or None
    valid : bool
    problems : list of str
        Why it was not valid (empty when it was).
    prompt_tokens, completion_tokens : int or None
        As the backend reported them.
    elapsed_s : float
    counted_prompt : int
        The prompt as counted before the call (what the budget reserved).
    usage_estimated : bool
        The backend reported no usage; the tokens are the provider's own count.
    error : str or None
        The message of the exception a failed call raised (its class is in
        ``finish_reason``, ``"error:<Class>"``).
    messages_sha256 : str
        Hash of the messages alone (how the prompt was counted).
    """

    turn: str
    unit: str | None
    task: str
    key: str
    attempt: int
    role: AttemptRole
    depth: int
    prompt_sha256: str
    model: str
    sampling: dict[str, Any]
    raw_output: str
    finish_reason: str | None
    valid: bool
    problems: list[str]
    prompt_tokens: int | None
    completion_tokens: int | None
    elapsed_s: float
    counted_prompt: int = 0
    usage_estimated: bool = False
    error: str | None = None
    messages_sha256: str = ""


class TurnStarted(msgspec.Struct, frozen=True, tag="turn_started", tag_field="type"):
    """What a turn was asked: enough to replay it from the log with the catalog."""

    turn: str
    system: str
    message: str
    records: list[dict[str, Any]]
    click: dict[str, Any] | None
    catalog_sha256: str
    settings: dict[str, Any]
    bounds: dict[str, Any]


class TurnFinished(msgspec.Struct, frozen=True, tag="turn_finished", tag_field="type"):
    """How a turn ended: its plan's status and hash (wall time left out)."""

    turn: str
    status: PlanStatus
    plan_sha256: str


def _sha256(value: Any) -> str:
    """The hash of ``value`` as canonical JSON: keys sorted, no spaces, characters as
    they are (a lone surrogate a message may hold included)."""
    canonical = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


def plan_hash(plan: Any) -> str:
    """The hash of a plan, its wall-clock time left out (the one thing a replay cannot
    reproduce)."""
    data = msgspec.to_builtins(plan)
    data["budget"]["wall_s"] = 0
    return _sha256(data)


def messages_hash(messages: Any) -> str:
    """The hash of a prompt's messages alone (how it was counted)."""
    return _sha256(list(messages))


def prompt_hash(request: ChatRequest | Mapping[str, Any]) -> str:
    """The hash replay matches on: the request's messages, schema and sampling."""
    if isinstance(request, ChatRequest):
        request = {"messages": request.messages, "schema": request.schema, "temperature": request.temperature,
                   "max_tokens": request.max_tokens}
    return _sha256(request)


class ReplayLog:
    """Attempts of every turn, in memory and (when ``path`` is given) appended to a
    JSONL file through the transcript store.

    Parameters
    ----------
    path : str, optional
    sync : bool
        fsync each line (default True: an acknowledged turn survives a power cut).
    """

    def __init__(self, path: str | None = None, *, sync: bool = True) -> None:
        self.attempts: list[Attempt] = []
        self.turns: list[TurnStarted | TurnFinished] = []
        self.sync = sync
        self._lock = threading.Lock()
        self._transcript = None
        if path is not None:
            from boundctx.transcript import Transcript

            self._transcript = Transcript.open(path, create=True)

    def add(self, entry: Attempt | TurnStarted | TurnFinished) -> None:
        with self._lock:
            if isinstance(entry, Attempt):
                self.attempts.append(entry)
            else:
                self.turns.append(entry)
            if self._transcript is not None:
                self._transcript.append(msgspec.to_builtins(entry), sync=self.sync)

    def close(self) -> None:
        if self._transcript is not None:
            self._transcript.close()
            self._transcript = None

    def __enter__(self) -> "ReplayLog":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def read_log(path: str) -> tuple[list[Attempt], list[TurnStarted | TurnFinished]]:
    """Every attempt and turn record of a replay log file, in file order (other lines
    are skipped)."""
    from boundctx.transcript import Transcript

    attempts: list[Attempt] = []
    turns: list[TurnStarted | TurnFinished] = []
    kinds = {"task_attempt": Attempt, "turn_started": TurnStarted, "turn_finished": TurnFinished}
    with Transcript.open(path) as t:
        for entry in t.read_lines(0, t.line_count):
            kind = entry.record.get("type") if entry.record is not None else None
            if kind in kinds:
                item = msgspec.convert(entry.record, kinds[kind])
                (attempts if kind == "task_attempt" else turns).append(item)
    return attempts, turns


def read_attempts(path: str, *, turn: str | None = None) -> list[Attempt]:
    """The attempts recorded in a replay log file (of one ``turn``, if given)."""
    return [a for a in read_log(path)[0] if turn is None or a.turn == turn]


class ReplayProvider(ScriptedProvider):
    """A scripted provider that plays recorded attempts back.

    Each request is answered with the output recorded for the same prompt hash, in
    recorded order, with the recorded ending, usage and error; prompts are counted as
    they were counted when recorded; and :meth:`clock` advances by each call's recorded
    time, so the budget meets the same numbers it met then. A request the recording
    never made raises :class:`~boundctx.errors.ReplayDiverged`.
    """

    name = "replay"

    def __init__(self, attempts: Iterable[Attempt]) -> None:
        attempts = list(attempts)
        self._now = 0.0
        super().__init__(self._respond, context_window=2**31, clock=self.clock)
        self._queues: dict[str, deque[Attempt]] = defaultdict(deque)
        for a in attempts:
            if not (a.finish_reason or "").startswith("refused"):  # refused calls were never made
                self._queues[a.prompt_sha256].append(a)
        self._counted = {a.messages_sha256: a.counted_prompt for a in attempts}
        self._lock = threading.Lock()
        models = {a.model for a in attempts}
        #: The recorded model's name, logged for replayed calls (one model served the turn).
        self.label = models.pop() if len(models) == 1 else "replay"

    def clock(self) -> float:
        return self._now

    def count_prompt(self, messages, *, tools=None) -> int:
        key = messages_hash(messages)
        if key in self._counted:
            return self._counted[key]
        raise ReplayDiverged(f"replay diverged: no recorded call had this prompt (messages {key[:12]}); the "
                             "catalog, records, settings or prompt texts differ from the recorded turn's: "
                             "record it again")

    def _check_fits(self, prompt_tokens: int, max_tokens: int) -> None:
        return None  # it fitted when it was recorded

    def _respond(self, request: ChatRequest) -> ScriptedReply | BaseException:
        key = prompt_hash(request)
        with self._lock:
            queue = self._queues.get(key)
            if not queue:
                return ReplayDiverged(f"replay diverged: no recorded output for prompt {key[:12]}; the catalog, "
                                      "records, settings or prompt texts differ from the recorded turn's: record "
                                      "it again")
            a = queue.popleft()
            self._now += a.elapsed_s
        if a.finish_reason and a.finish_reason.startswith("error:"):
            return _error(a.finish_reason[len("error:"):], a.error or "recorded failure")
        return ScriptedReply(a.raw_output, finish_reason(a.finish_reason), a.prompt_tokens, a.completion_tokens,
                             usage_estimated=a.usage_estimated)


def _error(name: str, message: str) -> BaseException:
    """An exception of the recorded class: a boundctx error or a built-in one."""
    import builtins

    cls = getattr(errors, name, None) or getattr(builtins, name, None)
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        cls = errors.GenerationError
    try:
        return cls(message)
    except TypeError:  # a class whose constructor wants more
        return errors.GenerationError(f"{name}: {message}")
