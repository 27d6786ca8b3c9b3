"""Lossless JSONL transcripts opened in bounded windows (decision record 1).

The names below are imported when first used, so ``boundctx reindex`` (which needs only
:mod:`boundctx.transcript.reindexing`) never loads the store and numpy.
"""

from __future__ import annotations

import importlib

__all__ = [
    "RENDERER_PRESET",
    "Entry",
    "History",
    "LineKind",
    "RawLine",
    "ReindexReport",
    "Transcript",
    "Window",
    "encode_record",
    "iter_transcripts",
    "reindex",
]

_HOME = {
    "Entry": "entries", "RawLine": "entries", "Window": "entries",
    "History": "writing", "LineKind": "kinds",
    "encode_record": "lineformat",
    "ReindexReport": "reindexing", "reindex": "reindexing",
    "RENDERER_PRESET": "store", "Transcript": "store",
    "iter_transcripts": "opening",
}


def __getattr__(name: str):
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'boundctx.transcript' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"boundctx.transcript.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
