"""The replay log: one record per task attempt, and replay without a model.

Every attempt (first call, vote, repair, escalation) becomes an :class:`Attempt`
appended as one line, ``{"type": "task_attempt", ...}``, to a JSONL file through the
transcript store (so it gets the store's whole-line appends, lock and torn-tail
handling, and opens in milliseconds however long it grows).

:func:`replay_script` turns recorded attempts back into a script for
:class:`~boundctx.providers.ScriptedProvider`: each request is answered with the raw
output recorded for the same prompt (same messages, schema and sampling), in recorded
order, with the recorded ending and usage. A recorded turn replays through it with no
model and yields the same plan, attempt for attempt.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from boundctx import errors
from boundctx.providers.base import ChatRequest
from boundctx.providers.scripted import ScriptedReply

__all__ = ["Attempt", "ReplayLog", "prompt_hash", "read_attempts", "replay_script"]


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
    role : str
        ``"call"``, ``"vote"``, ``"repair"`` or ``"escalation"``.
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
    """

    turn: str
    unit: str | None
    task: str
    key: str
    attempt: int
    role: str
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


def prompt_hash(request: ChatRequest | Mapping[str, Any]) -> str:
    """The hash replay matches on: the request's messages, schema and sampling."""
    if isinstance(request, ChatRequest):
        request = {"messages": request.messages, "schema": request.schema, "temperature": request.temperature,
                   "max_tokens": request.max_tokens}
    canonical = json.dumps(request, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


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
        self.sync = sync
        self._lock = threading.Lock()
        self._transcript = None
        if path is not None:
            from boundctx.transcript import Transcript

            self._transcript = Transcript.open(path, create=True)

    def add(self, attempt: Attempt) -> None:
        with self._lock:
            self.attempts.append(attempt)
            if self._transcript is not None:
                self._transcript.append(msgspec.to_builtins(attempt), sync=self.sync)

    def close(self) -> None:
        if self._transcript is not None:
            self._transcript.close()
            self._transcript = None

    def __enter__(self) -> "ReplayLog":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def read_attempts(path: str, *, turn: str | None = None) -> list[Attempt]:
    """The attempts recorded in a replay log file (of one ``turn``, if given), in file
    order; other lines are skipped."""
    from boundctx.transcript import Transcript

    out = []
    with Transcript.open(path) as t:
        for entry in t.read_lines(0, t.line_count):
            if entry.record is not None and entry.record.get("type") == "task_attempt":
                attempt = msgspec.convert(entry.record, Attempt)
                if turn is None or attempt.turn == turn:
                    out.append(attempt)
    return out


def replay_script(attempts: Iterable[Attempt]):
    """A script for :class:`~boundctx.providers.ScriptedProvider` that answers each
    request with the output recorded for the same prompt hash.

    A request with no recorded answer raises ``LookupError`` naming the prompt hash: a
    replay that asks for something the recording never did has diverged.
    """
    queues: dict[str, deque[Attempt]] = defaultdict(deque)
    for a in attempts:
        queues[a.prompt_sha256].append(a)
    lock = threading.Lock()

    def respond(request: ChatRequest) -> ScriptedReply | BaseException:
        key = prompt_hash(request)
        with lock:
            queue = queues.get(key)
            if not queue:
                return LookupError(f"replay diverged: no recorded output for prompt {key[:12]}")
            a = queue.popleft()
        if a.finish_reason and a.finish_reason.startswith("error:"):
            # The call raised: raise the same kind of error with the recorded words.
            cls = getattr(errors, a.finish_reason[len("error:"):], None)
            cls = cls if isinstance(cls, type) and issubclass(cls, errors.BoundctxError) else errors.GenerationError
            detail = a.problems[0].split(": ", 2)[-1] if a.problems else "recorded failure"
            return cls(detail)
        return ScriptedReply(a.raw_output, a.finish_reason or "stop", a.prompt_tokens, a.completion_tokens)

    return respond
