"""A progress bar for long work, shown only where it helps: on a terminal, for big jobs."""

from __future__ import annotations

import sys
from contextlib import contextmanager

from tqdm import tqdm

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
            bar = tqdm(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024,
                       file=sys.stderr, leave=False)
        bar.update(n - done)
        done = n

    try:
        yield report
    finally:
        if bar is not None:
            bar.close()
