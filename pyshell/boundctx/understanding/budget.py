"""Per-turn bounds, checked before every model call.

A turn may make at most ``max_model_calls`` calls, none deeper than ``max_chain_depth``
dependent calls, at most ``max_parallel`` at once, within ``max_prompt_tokens`` prompt
tokens and ``wall_clock_s`` seconds. Repairs, votes and escalations draw from the same
budget. A call that would pass a bound is not made: :meth:`Budget.reserve` raises
:class:`~boundctx.errors.BudgetExhausted`, the bound is recorded, and every later
reservation in the turn is refused too, so what a turn understood never depends on which
of two racing calls came first past the line.

Prompt tokens are charged as counted before the call and settled from the usage the
backend reports after it. A backend that reports no usage cannot run under a token bound:
the turn is refused up front where the provider says so, and a call that comes back
without usage exhausts the bound rather than guess.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from boundctx.errors import BudgetExhausted

__all__ = ["BOUNDS", "Bounds", "Budget", "BudgetReport"]

#: The bound names, in the order a report lists them.
BOUNDS = ("max_model_calls", "max_chain_depth", "max_parallel", "max_prompt_tokens", "wall_clock_s")


class Bounds(msgspec.Struct, frozen=True):
    """The limits of one turn (see ``understanding.*`` in ``boundctx config schema``).

    ``max_prompt_tokens`` and ``wall_clock_s`` may be None (no bound)."""

    max_model_calls: int = 24
    max_chain_depth: int = 12
    max_parallel: int = 4
    max_prompt_tokens: int | None = 65536
    wall_clock_s: float | None = 300.0

    def __post_init__(self) -> None:
        for name in ("max_model_calls", "max_chain_depth", "max_parallel"):
            if getattr(self, name) < 1:
                raise ValueError(f"understanding.{name} must be >= 1, got {getattr(self, name)}")
        if self.max_prompt_tokens is not None and self.max_prompt_tokens < 1:
            raise ValueError(f"understanding.max_prompt_tokens must be >= 1, or None (0 in settings) for no bound; "
                             f"got {self.max_prompt_tokens}")
        if self.wall_clock_s is not None and not self.wall_clock_s > 0:
            raise ValueError(f"understanding.wall_clock_s must be > 0, or None (0 in settings) for no bound; "
                             f"got {self.wall_clock_s}")

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], **overrides: Any) -> "Bounds":
        """Bounds from resolved settings (``understanding.*``); 0 means no bound for
        prompt tokens and wall clock."""
        values = {name: settings[f"understanding.{name}"] for name in BOUNDS}
        values.update(overrides)
        for name in ("max_prompt_tokens", "wall_clock_s"):
            if values[name] == 0:
                values[name] = None
        return cls(**values)


class BudgetReport(msgspec.Struct, frozen=True):
    """What a turn spent, next to its bounds.

    Attributes
    ----------
    model_calls, prompt_tokens, completion_tokens : int
    chain_depth : int
        The deepest dependent call made.
    most_parallel : int
        The most calls that were running at once.
    wall_s : float
    exhausted : str or None
        The first bound hit (``budget.exhausted{bound}``), or None.
    refused_calls : int
        Calls not made because a bound was hit.
    bounds : Bounds
    """

    model_calls: int
    prompt_tokens: int
    completion_tokens: int
    chain_depth: int
    most_parallel: int
    wall_s: float
    exhausted: str | None
    refused_calls: int
    bounds: Bounds


class Budget:
    """The meter of one turn; safe to share between the threads of parallel tasks.

    Parameters
    ----------
    bounds : Bounds
    clock : callable
        Seconds (tests pass a fake clock).
    """

    def __init__(self, bounds: Bounds, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.bounds = bounds
        self.clock = clock
        self.started = clock()
        self._lock = threading.Lock()
        self.calls = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.depth = 0
        self.active = 0
        self.most_parallel = 0
        self.exhausted: str | None = None
        self.refused = 0

    def _exhaust(self, bound: str, why: str, *, refused: bool = True) -> BudgetExhausted:
        if self.exhausted is None:
            self.exhausted = bound
        self.refused += refused
        hint = {"max_prompt_tokens": " (set understanding.max_prompt_tokens higher, or 0 for no bound)",
                "wall_clock_s": " (set understanding.wall_clock_s higher, or 0 for no bound)"}.get(
            bound, f" (set understanding.{bound} higher)")
        return BudgetExhausted(f"budget.exhausted{{{bound}}}: {why}{hint}", bound=bound)

    def remaining_s(self) -> float | None:
        """Seconds left on the wall clock (None: no bound)."""
        if self.bounds.wall_clock_s is None:
            return None
        return self.bounds.wall_clock_s - (self.clock() - self.started)

    def reserve(self, *, depth: int, prompt_tokens: int) -> None:
        """Account for one call about to be made, or refuse it.

        Parameters
        ----------
        depth : int
            Its place in its chain of dependent calls (1 = depends on nothing).
        prompt_tokens : int
            Its prompt as counted.

        Raises
        ------
        BudgetExhausted
            When a bound would be passed, or one was already hit in this turn.
        """
        b = self.bounds
        with self._lock:
            if self.exhausted is not None:
                raise self._exhaust(self.exhausted, "an earlier call in this turn hit this bound; no more calls "
                                                    "are made")
            if self.calls + 1 > b.max_model_calls:
                raise self._exhaust("max_model_calls", f"{self.calls} calls made, the bound is {b.max_model_calls}")
            if depth > b.max_chain_depth:
                raise self._exhaust("max_chain_depth", f"a call at depth {depth} passes the bound "
                                                       f"{b.max_chain_depth}")
            if b.max_prompt_tokens is not None and self.prompt_tokens + prompt_tokens > b.max_prompt_tokens:
                raise self._exhaust("max_prompt_tokens", f"{self.prompt_tokens} prompt tokens spent, this call "
                                                         f"needs {prompt_tokens}, the bound is {b.max_prompt_tokens}")
            left = self.remaining_s()
            if left is not None and left <= 0:
                raise self._exhaust("wall_clock_s", f"{b.wall_clock_s} s have passed")
            self.calls += 1
            self.prompt_tokens += prompt_tokens
            self.depth = max(self.depth, depth)
            self.active += 1
            self.most_parallel = max(self.most_parallel, self.active)

    def settle(self, *, counted_prompt: int, prompt_tokens: int | None, completion_tokens: int | None) -> None:
        """Replace a reserved call's counted prompt with the usage the backend reported.

        Raises
        ------
        BudgetExhausted
            Under a token bound, when the backend reported no usage (never guessed),
            or when the reported usage passed the bound.
        """
        b = self.bounds
        with self._lock:
            self.active -= 1
            if prompt_tokens is None:
                if b.max_prompt_tokens is not None:
                    raise self._exhaust("max_prompt_tokens", "the backend reported no token usage, so spending "
                                                             "cannot be checked against the bound; 0 runs the "
                                                             "turn without a token bound", refused=False)
                return
            self.prompt_tokens += prompt_tokens - counted_prompt
            self.completion_tokens += completion_tokens or 0
            if b.max_prompt_tokens is not None and self.prompt_tokens > b.max_prompt_tokens:
                raise self._exhaust("max_prompt_tokens", f"the backend reported {prompt_tokens} prompt tokens; "
                                                         f"{self.prompt_tokens} in all passes {b.max_prompt_tokens}",
                                    refused=False)

    def release(self) -> None:
        """End a reserved call that produced no usage (it failed)."""
        with self._lock:
            self.active -= 1

    def timed_out(self) -> BudgetExhausted:
        """Record that a call ran into the wall-clock bound."""
        with self._lock:
            return self._exhaust("wall_clock_s", f"a call ran past the turn's {self.bounds.wall_clock_s} s",
                                 refused=False)

    def report(self) -> BudgetReport:
        with self._lock:
            return BudgetReport(self.calls, self.prompt_tokens, self.completion_tokens, self.depth,
                                self.most_parallel, round(self.clock() - self.started, 6), self.exhausted,
                                self.refused, self.bounds)
