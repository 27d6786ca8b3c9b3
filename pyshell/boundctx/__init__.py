"""boundctx: a bounded-context engine for chat with local and remote language models."""

from boundctx.errors import (
    BoundctxError,
    TranscriptChanged,
    TranscriptCorrupt,
    TranscriptError,
    TranscriptLocked,
    TranscriptNotFound,
    PartialHistoryRewrite,
)
from boundctx.transcript import Entry, History, Transcript, Window, reindex

__version__ = "0.1.0"

__all__ = [
    "BoundctxError",
    "Entry",
    "History",
    "PartialHistoryRewrite",
    "Transcript",
    "TranscriptChanged",
    "TranscriptCorrupt",
    "TranscriptError",
    "TranscriptLocked",
    "TranscriptNotFound",
    "Window",
    "reindex",
]
