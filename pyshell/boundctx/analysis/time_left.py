"""How long the rest of a reply will take: one estimate for all of it, from its own events
(decision 0040).

A reply's work is known in outline once it is fitted (:class:`~boundctx.events.Fitted`):
the inputs to read in sections, then (for a model without tool calls, when
``analysis.constrained_rereads`` is on) one constrained reread step, then the answering
call, which evaluates the prompt and the notes and writes at most ``max_reply_tokens``.
:class:`TimeLeft` is fed the reply's events in order, with the time each came, and
says at any moment how many seconds all of what is left should take, corrected by
every event:

* **sections**, at the mean pace of the sections read so far in this reply (from a
  section's ``"reading"`` to its ``"noted"``). How many sections a later input has is
  not known until its first section starts (the planner runs then); until then it is
  estimated from its length (``Fitted.analysed_chars``) at the sections per character
  of the inputs planned so far.
* **model calls after the analysis** (the reread step, the answer): the answer's prompt
  as fitted less what the model holds already (``Fitted.reused_tokens``) and its notes
  (the workers' latest ``notes_tokens``), at the pace the model evaluates a prompt, and
  its output at its bound, at the pace it writes. Both paces come from the worker calls
  measured (``AnalysisProgress.prompt_tokens`` and ``completion_tokens`` of each
  section, with its time): the least-squares fit of ``seconds = a * prompt + b *
  written``. Where the sections cannot tell the two apart (one section, or every
  section writing about as much), one pace per token of either kind stands for both: an
  answer that writes more than the workers did is then underestimated, and the next
  event corrects it. A model that holds what it evaluated (a local model's kept state,
  known where ``Fitted.reused_tokens`` is said) evaluates the prompt and the notes once:
  a call after the first (the answer after the reread step, a reread round) is paced by
  its output alone.
* **reread rounds** are not foreseen: the model decides whether it asks for one (at
  most the engine's ``max_tool_rounds``); each that starts is one more answering call.

Nothing is invented: before any section is measured, and in a reply with no section
analysis, the estimate is None (unknown). It is never 0 while work is known to remain:
once the work left has run past its estimate, it is None too, and a countdown that
reached its end says it is running over the estimate rather than "0 s left".

Pure logic: no clock of its own; times are passed in (seconds since the reply began),
so a sequence of events with given times gives an exact estimate.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec

from boundctx.events import AnalysisProgress, Done, Failed, Fitted, Stage

__all__ = ["TimeLeft"]


class TimeLeft:
    """The seconds a reply still needs, estimated from the events it yielded so far.

    Parameters
    ----------
    max_reply_tokens : int
        The answer's output budget: its generation is counted at this bound.
    reread_step : bool
        The model asks for exact rereads in one constrained step before it answers (a
        model without tool calls, ``analysis.constrained_rereads`` on): one more call
        after the analysis, when there was any.

    Examples
    --------
    >>> from boundctx.events import AnalysisProgress, Fitted
    >>> left = TimeLeft(max_reply_tokens=100)
    >>> left.observe(Fitted(1, 1, analysed=["a.log"], prompt_tokens=100), 0.0)
    >>> left.observe(AnalysisProgress(1, 2, 0, "reading", 0.0), 0.0)
    >>> left.remaining_s(0.0) is None  # nothing measured yet
    True
    >>> left.observe(AnalysisProgress(1, 2, 0, "noted", 10.0, notes_tokens=50, prompt_tokens=900,
    ...                               completion_tokens=100), 10.0)
    >>> left.remaining_s(10.0)  # one section at 10 s, an answer of 100 + 50 + 100 tokens at 0.01 s each
    12.5
    """

    def __init__(self, *, max_reply_tokens: int, reread_step: bool = False) -> None:
        if max_reply_tokens < 1:
            raise ValueError(f"max_reply_tokens must be >= 1, got {max_reply_tokens}")
        self.max_reply_tokens = max_reply_tokens
        self.reread_step = reread_step
        self._fitted = False
        self._ended = False
        self._chars: list[int] = []  # of each analysed input, in the order they are read
        self._inputs = 0
        self._planned: list[int] = []  # sections of each input started so far
        self._noted = 0  # sections of the current input noted
        self._reading_at: float | None = None  # when the section being read started
        self._section_s = 0.0  # seconds of the sections measured
        self._sections = 0  # how many were measured
        # The sections whose calls' tokens are known: sums of products of their seconds
        # (t), prompt tokens (p) and tokens written (c), for the least-squares fit.
        self._fit = dict.fromkeys(("t", "p", "c", "pp", "pc", "cc", "pt", "ct"), 0.0)
        self._notes: dict[tuple[int, int], int] = {}  # (input, worker): tokens of its notes now
        self._prompt_tokens = 0  # the answer's prompt to evaluate, notes aside
        self._keeps_state = False  # the model holds what it evaluated (Fitted.reused_tokens is said)
        self._called = False  # a call after the analysis (the step, an answer) has started
        self._step_pending = False
        self._call_at: float | None = None  # when the model call under way started
        self._call_s: float | None = None  # what it was estimated to take then
        self._in_step = False  # that call is the reread step (the answer follows it)

    # -- what happened ------------------------------------------------------------------

    def observe(self, event: Any, at: float) -> None:
        """Take ``event``, which came ``at`` seconds after the reply started. Events
        that carry no time of the work (text, tool calls and results) change nothing."""
        if isinstance(event, Fitted):
            self._fitted = True
            self._inputs = len(event.analysed)
            self._chars = list(event.analysed_chars)
            self._prompt_tokens = event.prompt_tokens - (event.reused_tokens or 0)
            self._keeps_state = event.reused_tokens is not None
            self._step_pending = self.reread_step and self._inputs > 0
        elif isinstance(event, AnalysisProgress):
            self._progress(event, at)
        elif isinstance(event, Stage):
            if event.stage == "rereading" and self._step_pending:
                self._step_pending = False  # the constrained step: the answer still follows
                self._start_call(at, self._step_s(), step=True)
            else:  # the answer, or a reread round: one answering call from here
                self._step_pending = False
                self._start_call(at, self._answer_s(after_a_call=self._called), step=False)
        elif isinstance(event, (Done, Failed)):
            self._ended = True

    def _progress(self, event: AnalysisProgress, at: float) -> None:
        if event.phase == "reading":
            if event.section == 1 and self._noted_all_of_current():
                self._planned.append(event.sections)  # a new input: its sections are known now
                self._noted = 0
            self._reading_at = at
        elif event.phase == "noted":
            if self._reading_at is not None:
                spent = at - self._reading_at
                self._section_s += spent
                self._sections += 1
                p, c = event.prompt_tokens, event.completion_tokens
                if p + c > 0:
                    for key, value in (("t", spent), ("p", p), ("c", c), ("pp", p * p), ("pc", p * c),
                                       ("cc", c * c), ("pt", p * spent), ("ct", c * spent)):
                        self._fit[key] += value
            self._reading_at = None
            self._noted = event.section
            self._notes[(len(self._planned) - 1, event.worker)] = event.notes_tokens
        else:  # "done": every section of this input read
            self._noted = event.sections

    def _noted_all_of_current(self) -> bool:
        return not self._planned or self._noted >= self._planned[-1]

    def _start_call(self, at: float, estimate: float | None, *, step: bool) -> None:
        self._call_at, self._call_s, self._in_step = at, estimate, step
        self._called = True
        self._reading_at = None

    # -- what is left -------------------------------------------------------------------

    def _paces(self) -> tuple[float, float] | None:
        """Seconds per prompt token evaluated and per token written, fitted to the
        sections measured; one pace for both where they cannot be told apart; None
        before any section with its tokens is measured."""
        f = self._fit
        if f["p"] + f["c"] <= 0:
            return None
        det = f["pp"] * f["cc"] - f["pc"] ** 2
        # Told apart only where the sections' tokens are far from proportional (their
        # vectors' squared cosine below 0.99), and the fit says neither pace is negative.
        if det > 0.01 * f["pp"] * f["cc"]:
            a = (f["pt"] * f["cc"] - f["ct"] * f["pc"]) / det
            b = (f["ct"] * f["pp"] - f["pt"] * f["pc"]) / det
            if a >= 0 and b >= 0:
                return a, b
        one = f["t"] / (f["p"] + f["c"])
        return one, one

    def _eval_tokens(self, *, after_a_call: bool = False) -> int:
        if after_a_call and self._keeps_state:
            # The call before this one evaluated the prompt and the notes, and the model
            # holds them: only what the engine added since (rereads, a round's calls and
            # results, unsized by the events) is new.
            return 0
        return max(self._prompt_tokens, 0) + sum(self._notes.values())

    def _answer_s(self, *, after_a_call: bool) -> float | None:
        paces = self._paces()
        if paces is None:
            return None
        return paces[0] * self._eval_tokens(after_a_call=after_a_call) + paces[1] * self.max_reply_tokens

    def _step_s(self) -> float | None:
        # Its output is a short request for ranges: its prompt is what takes the time.
        paces = self._paces()
        return None if paces is None else paces[0] * self._eval_tokens()

    def _sections_left(self) -> float | None:
        """Sections not yet noted, of every input, the one being read counted whole."""
        if self._inputs == 0:
            return 0.0
        started = len(self._planned)
        left = float(self._planned[-1] - self._noted) if started else 0.0
        later = range(started, self._inputs)
        if not later:
            return left
        if not started:
            return None  # no input planned yet: nothing to tell its size by
        if len(self._chars) == self._inputs and sum(self._chars[:started]) > 0:
            per_char = sum(self._planned) / sum(self._chars[:started])
            return left + sum(max(1, math.ceil(self._chars[k] * per_char)) for k in later)
        # Lengths not given: the later inputs as long as the ones planned, on average.
        return left + len(later) * sum(self._planned) / started

    def remaining_s(self, at: float) -> float | None:
        """Seconds the rest of the reply should take, ``at`` seconds after it started;
        None when that is not known (nothing measured yet, or the work left has run past
        its estimate); 0.0 only once the reply has ended.

        Parameters
        ----------
        at : float
            Seconds since the reply started, at or after the last event observed.
        """
        if self._ended:
            return 0.0
        if not self._fitted:
            return None
        # The answer to come: after the step (pending or under way) it follows a call.
        answer = self._answer_s(after_a_call=self._step_pending or self._in_step)
        if self._call_at is not None:  # the reread step, or an answering call, under way
            if self._call_s is None or answer is None:
                return None
            # What the call has taken so far comes off its own estimate, never more.
            left = max(self._call_s - (at - self._call_at), 0.0) + (answer if self._in_step else 0.0)
            return left if left > 0 else None  # an answer past its estimate: how far, nothing can tell
        sections = self._sections_left()
        step = self._step_s() if self._step_pending else 0.0
        if sections is None or answer is None or step is None:
            return None
        left = answer + step
        if sections:
            pace = self._section_s / self._sections if self._sections else None
            if pace is None:
                return None
            within = at - self._reading_at if self._reading_at is not None else 0.0
            # The section being read is counted whole above; what it has taken so far
            # comes off, never more than its own share.
            left += sections * pace - min(within, pace)
        return left if left > 0 else None

    def stamped(self, event: Any, at: float) -> Any:
        """``event`` observed, and given back with the estimate as of ``at`` in its
        ``remaining_s`` where it has one (:class:`AnalysisProgress`, :class:`Stage`)."""
        self.observe(event, at)
        if isinstance(event, (AnalysisProgress, Stage)):
            return msgspec.structs.replace(event, remaining_s=self.remaining_s(at))
        return event
