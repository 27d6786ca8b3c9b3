"""A progress bar for long work, shown only where it helps: on a terminal, for big jobs."""

from __future__ import annotations

import math
import sys
from contextlib import contextmanager

# Jobs smaller than this finish before a bar would be worth drawing.
MIN_BYTES_FOR_BAR = 64 << 20


@contextmanager
def byte_progress(total: int, desc: str, *, enabled: bool | None = None):
    """Yield ``report(bytes_done)``, to be called with a running total. A bar is drawn
    on stderr when enabled (default: the job is big and stderr is a terminal), and only
    once work is actually reported, so a job that turns out to need no work draws none."""
    if enabled is None:
        enabled = total >= MIN_BYTES_FOR_BAR and sys.stderr.isatty()
    bar = None
    done = 0

    def report(n: int) -> None:
        nonlocal bar, done
        if not enabled or n <= done:
            return
        if bar is None:
            from tqdm import tqdm  # only when a bar is drawn: it costs the start-up

            bar = tqdm(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024,
                       file=sys.stderr, leave=False)
        bar.update(n - done)
        done = n

    try:
        yield report
    finally:
        if bar is not None:
            bar.close()


class LiveStatus:
    """One status line on stderr that keeps moving while a reply is worked on.

    On a terminal the line is redrawn in place every ``interval`` seconds, so the
    elapsed time ticks even while a single model call takes half a minute; elsewhere
    (a log file, CI) each new step is one plain line and nothing ticks.

    Parameters
    ----------
    live : bool, optional
        Redraw in place (default: stderr is a terminal).
    enabled : bool
        False draws nothing at all (``-q``).
    """

    def __init__(self, *, live: bool | None = None, enabled: bool = True, interval: float = 0.25,
                 clock=None) -> None:
        import threading
        import time

        self.live = sys.stderr.isatty() if live is None else live
        self.enabled = enabled
        self.interval = interval
        self._clock = clock or time.monotonic
        self.started = self._clock()
        self._text = ""
        self._eta: float | None = None
        self._eta_at = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._shown = False
        self._thread = None
        if self.enabled and self.live:
            self._thread = threading.Thread(target=self._tick, name="boundctx-status", daemon=True)
            self._thread.start()

    def elapsed(self) -> float:
        return self._clock() - self.started

    def line(self) -> str:
        """The status as it reads now: the step, seconds so far, what remains. An
        estimate that has run out while the work goes on is said to be running over,
        never "0 s left"."""
        now = self._clock()
        text = f"{self._text} · {now - self.started:.0f} s"
        if self._eta is not None:
            left = self._eta - (now - self._eta_at)
            text += f" · about {math.ceil(left)} s left" if left > 0 else " · running over the estimate"
        return text

    def set(self, text: str, *, eta_s: float | None = None) -> None:
        """A new step; ``eta_s``: the seconds the work left is expected to take from
        now (counted down until the next step), None for none said."""
        with self._lock:
            self._text, self._eta, self._eta_at = text, eta_s, self._clock()
            if not self.enabled or self._stop.is_set():
                return  # closed: the answer (or an error) owns the terminal now
            if self.live:
                self._draw()
            else:
                print(self.line(), file=sys.stderr, flush=True)

    def note(self, text: str) -> None:
        """A line of its own on stderr (a notice), with the status line kept below it."""
        with self._lock:
            self._erase()
            print(text, file=sys.stderr, flush=True)
            if self._text and self.live and self.enabled and not self._stop.is_set():
                self._draw()

    def close(self) -> None:
        """Erase the line and stop redrawing it (before the answer is written)."""
        self._stop.set()
        with self._lock:
            self._erase()

    def _erase(self) -> None:
        if self._shown:
            print("\r\x1b[K", end="", file=sys.stderr, flush=True)
            self._shown = False

    def _draw(self) -> None:
        print("\r" + self.line() + "\x1b[K", end="", file=sys.stderr, flush=True)
        self._shown = True

    def _tick(self) -> None:
        while not self._stop.wait(self.interval):
            with self._lock:
                if self._text and not self._stop.is_set():
                    self._draw()
