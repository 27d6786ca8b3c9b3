"""boundctx: a bounded-context engine for chat with local and remote language models.

The front door: what a user imports. Everything but the errors is imported when first
used, not with the package, so ``boundctx --help`` and commands that never open a
transcript or load a model start fast (a test holds that).
"""

from __future__ import annotations

import importlib

from boundctx.errors import (
    BoundctxError,
    PartialHistoryRewrite,
    TranscriptChanged,
    TranscriptCorrupt,
    TranscriptError,
    TranscriptLocked,
    TranscriptNotFound,
)

# Kept here, not read from the installed metadata: importlib.metadata costs more than
# all of `boundctx --help` on a slow machine. A test holds it equal to pyproject.toml.
__version__ = "0.1.0"

#: name -> the module it lives in
_LAZY = {
    # replies with bounded context, and their events
    "Engine": "boundctx.analysis",
    "AnalysisProgress": "boundctx.events",
    "Done": "boundctx.events",
    "Failed": "boundctx.events",
    "Fitted": "boundctx.events",
    "ReplyDelta": "boundctx.events",
    "ToolCall": "boundctx.events",
    "ToolResult": "boundctx.events",
    # understanding a message as a plan
    "Catalog": "boundctx.understanding",
    "Understander": "boundctx.understanding",
    # models
    "Provider": "boundctx.providers",
    "ScriptedProvider": "boundctx.providers",
    "LlamaCppProvider": "boundctx.providers.local",
    "OpenAICompatibleProvider": "boundctx.providers.remote",
    # transcripts
    "Entry": "boundctx.transcript",
    "History": "boundctx.transcript",
    "LineKind": "boundctx.transcript",
    "Transcript": "boundctx.transcript",
    "Window": "boundctx.transcript",
    "reindex": "boundctx.transcript",
    # settings
    "config": "boundctx",
}

__all__ = [
    "AnalysisProgress",
    "BoundctxError",
    "Catalog",
    "Done",
    "Engine",
    "Entry",
    "Failed",
    "Fitted",
    "History",
    "LineKind",
    "LlamaCppProvider",
    "OpenAICompatibleProvider",
    "PartialHistoryRewrite",
    "Provider",
    "ReplyDelta",
    "ScriptedProvider",
    "ToolCall",
    "ToolResult",
    "Transcript",
    "TranscriptChanged",
    "TranscriptCorrupt",
    "TranscriptError",
    "TranscriptLocked",
    "TranscriptNotFound",
    "Understander",
    "Window",
    "config",
    "reindex",
]


def __getattr__(name: str):
    home = _LAZY.get(name)
    if home is None:
        raise AttributeError(f"module 'boundctx' has no attribute {name!r}")
    if name == "config":
        value = importlib.import_module("boundctx.config")
    else:
        value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
