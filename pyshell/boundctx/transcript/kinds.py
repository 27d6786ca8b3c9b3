"""What the line index says a line is.

The numbering is the native scan's, and it is written into every layout sidecar, so it
is never renumbered (a test holds it equal to ``boundctx._native.lineindex``). The shell
speaks of kinds only through :class:`LineKind`.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["DEFAULT_CLASSIFY_WINDOW", "SEQUENCE_KINDS", "LineKind"]


class LineKind(IntEnum):
    """The kind of one complete line of a transcript."""

    #: a record of a message type (of the dialect): a turn of the conversation
    MESSAGE = 1
    #: a record that replaces the history before it with a summary
    COMPACTION = 2
    #: any other record (session headers, model changes, titles, events)
    OTHER = 3
    #: a line that is not a JSON object; it keeps its place (decision 0001)
    CORRUPT = 4
    #: a line of whitespace only
    BLANK = 5
    #: well-formed as far as the classify window reaches, but what decides lies past it:
    #: a full parse settles it before a layout is used
    UNDECIDED = 6


#: The message sequence: messages, and corrupt lines in the places they occupy
#: (docs/decisions/0001-corrupt-lines-keep-their-place.md).
SEQUENCE_KINDS = (LineKind.MESSAGE, LineKind.CORRUPT)

#: How many leading bytes of a line the classifier reads (1 MiB; the native default).
DEFAULT_CLASSIFY_WINDOW = 1 << 20
