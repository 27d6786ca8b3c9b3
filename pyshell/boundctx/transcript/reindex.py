"""Rebuild transcript layouts on purpose: the same code path as an automatic rebuild."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import msgspec

from boundctx._native import load
from boundctx.transcript.dialects import dialect_kinds
from boundctx.transcript.layout import build_layout, save_layout
from boundctx.transcript.store import open_transcript_fd

__all__ = ["ReindexReport", "reindex"]

_li = load("lineindex")


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
    """Scan ``path`` from scratch (one scan, whatever sidecar exists) and write its
    layout sidecar.

    Never raises for a bad file: the report says what went wrong (``ok=False``).
    """
    path = os.fspath(path)
    t0 = time.perf_counter()
    try:
        dialect_kinds(dialect)
        fd = open_transcript_fd(path)
        try:
            layout = build_layout(fd, dialect=dialect, progress=progress)
        finally:
            os.close(fd)
        sidecar = save_layout(layout, path)
        kinds = layout.kinds.all()
        return ReindexReport(
            path=path, ok=True, bytes=layout.scanned_end, lines=layout.line_count,
            messages=layout.message_count, compactions=len(layout.compactions),
            corrupt=int((kinds == _li.CORRUPT).sum()), torn_bytes=layout.torn_bytes,
            sidecar=sidecar, seconds=time.perf_counter() - t0)
    except (OSError, ValueError) as exc:
        return ReindexReport(path=path, ok=False, error=str(exc),
                             seconds=time.perf_counter() - t0)
