"""Rebuild transcript layouts on purpose: the same code path as an automatic rebuild."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import msgspec

from boundctx.transcript.layout import build_layout, save_layout
from boundctx.transcript.store import Transcript

__all__ = ["ReindexReport", "reindex"]


class ReindexReport(msgspec.Struct, kw_only=True):
    """What one ``reindex`` did to one file."""

    path: str
    ok: bool
    bytes: int = 0
    lines: int = 0
    messages: int = 0
    compactions: int = 0
    corrupt: int = 0
    torn_bytes: int = 0
    sidecar: str | None = None
    seconds: float = 0.0
    error: str | None = None


def reindex(path: str | os.PathLike, *, dialect: str = "auto",
            progress: Callable[[int], object] | None = None) -> ReindexReport:
    """Scan ``path`` from scratch and write its layout sidecar.

    Never raises for a bad file: the report says what went wrong (``ok=False``).
    """
    from boundctx._native import load

    li = load("lineindex")
    path = os.fspath(path)
    t0 = time.perf_counter()
    try:
        # Transcript.open validates the path the same way a reader would.
        with Transcript.open(path, dialect=dialect) as t:
            fd = t._fd
            layout = build_layout(fd, dialect=dialect, progress=progress)
            layout.outcome = "rebuilt"
            sidecar = save_layout(layout, path)
            kinds = layout.kinds.all()
            t._layout = layout
            return ReindexReport(
                path=path, ok=True, bytes=layout.scanned_end, lines=layout.line_count,
                messages=layout.message_count, compactions=len(layout.compactions),
                corrupt=int((kinds == li.CORRUPT).sum()), torn_bytes=layout.torn_bytes,
                sidecar=sidecar, seconds=time.perf_counter() - t0)
    except (OSError, ValueError) as exc:
        return ReindexReport(path=path, ok=False, error=str(exc),
                             seconds=time.perf_counter() - t0)
