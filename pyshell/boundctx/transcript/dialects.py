"""Which top-level ``"type"`` values are messages and compactions, per transcript dialect.

boundctx's own lines and pi session v3 lines share entry types (``message``,
``compaction``, ``session``, ...). Claude Code and Codex CLI session files use other
type values for the same roles; reading them only needs these tables, because the line
index classifies by the ``"type"`` key wherever it sits in the object.

The names of the three dialects never collide, so ``auto`` (the default) is their union
and a file of any of them opens without being told what it is.
"""

from __future__ import annotations

from functools import lru_cache

from boundctx._native import load

_li = load("lineindex")

MESSAGE: int = _li.MESSAGE
COMPACTION: int = _li.COMPACTION
OTHER: int = _li.OTHER

__all__ = ["DIALECTS", "dialect_kinds", "native_table"]

#: dialect name -> {type value: kind}; values not listed are "other" lines.
DIALECTS: dict[str, dict[str, int]] = {
    # boundctx and pi session v3: {"type":"message",...}, {"type":"compaction",...}
    "boundctx": {"message": MESSAGE, "compaction": COMPACTION},
    # Claude Code: user/assistant turns; "summary" lines carry compaction summaries.
    "claude-code": {"user": MESSAGE, "assistant": MESSAGE, "summary": COMPACTION},
    # Codex CLI rollouts: every response item (message, tool call, tool output,
    # reasoning) is a turn of the conversation; "compacted" replaces history.
    "codex": {"response_item": MESSAGE, "compacted": COMPACTION},
}
DIALECTS["pi"] = DIALECTS["boundctx"]
DIALECTS["auto"] = {k: v for name in ("boundctx", "claude-code", "codex") for k, v in DIALECTS[name].items()}


def dialect_kinds(name: str) -> dict[str, int]:
    """The type-value table of dialect ``name``; a ValueError lists the known names."""
    try:
        return DIALECTS[name]
    except KeyError:
        raise ValueError(
            f"unknown transcript dialect {name!r}; choose one of {', '.join(sorted(DIALECTS))}"
        ) from None


@lru_cache(maxsize=None)
def native_table(name: str):
    """The compiled lookup table for dialect ``name`` (built once per process)."""
    return _li.DialectTable(dialect_kinds(name))
