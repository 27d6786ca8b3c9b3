"""boundctx: a bounded-context engine for chat with local and remote language models."""

from boundctx.errors import (
    BoundctxError,
    PartialHistoryRewrite,
    TranscriptChanged,
    TranscriptCorrupt,
    TranscriptError,
    TranscriptLocked,
    TranscriptNotFound,
)

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

# The transcript store (numpy, the native core) is imported when first used, not with
# the package: `boundctx --help` and commands that never open a transcript start fast.
_LAZY = {"Entry", "History", "Transcript", "Window", "reindex"}


def __getattr__(name: str):
    if name in _LAZY:
        from boundctx import transcript

        value = getattr(transcript, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'boundctx' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _LAZY)
