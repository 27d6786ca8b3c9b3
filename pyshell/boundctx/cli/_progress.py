"""A progress bar for long work, shown only where it helps: on a terminal, for big jobs."""

from __future__ import annotations

import sys
from contextlib import contextmanager

from tqdm import tqdm

# Jobs smaller than this finish before a bar would be worth drawing.
MIN_BYTES_FOR_BAR = 64 << 20


@contextmanager
def byte_progress(total: int, desc: str, *, enabled: bool | None = None):
    """Yield ``advance(nbytes)``; draws a bar on stderr when enabled (default: the
    job is big and stderr is a terminal)."""
    if enabled is None:
        enabled = total >= MIN_BYTES_FOR_BAR and sys.stderr.isatty()
    if not enabled:
        yield lambda n: None
        return
    with tqdm(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024,
              file=sys.stderr, leave=False) as bar:
        yield bar.update
