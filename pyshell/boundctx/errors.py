"""Exceptions raised by boundctx.

Every error derives from :class:`BoundctxError` and from the built-in exception a caller
would already catch for that kind of failure. This module imports nothing from boundctx.

::

    BoundctxError
    ├── ConfigError(ValueError)                  a setting has a value outside its range
    ├── PromptTemplateError(ValueError)          a model's chat template refused or failed
    ├── ToolOfferError(ValueError)               tools given to a reply cannot be offered as given
    ├── ResponseSchemaError(ValueError)          an answer cannot be held to the schema given
    ├── SectionPlanError(ValueError)             a source cannot be cut into sections as asked
    │   ├── SourceTooLarge                          more characters than analysis.max_source_chars
    │   ├── TooManySections                         more sections than analysis.max_sections
    │   └── SectionBudgetTooSmall                   the prompt leaves no room for a section
    ├── AnalysisError                            section analysis could not read the whole input
    │   ├── IncompleteCoverage                      a failure or limit left sections unread
    │   └── SectionReadError(LookupError)           read_chat_section got a bad id or range
    ├── GenerationError                          a model call did not complete
    │   ├── GenerationTimeout(TimeoutError)         it ran past its wall-clock limit
    │   └── ContextOverflow(ValueError)             the prompt does not fit the model's window
    ├── ServerError                              a model server could not be used as asked
    │   ├── ServerUnreachable(ConnectionError)      no connection: refused, unknown host, reset
    │   │   └── ServerTimeout(TimeoutError)         no answer within the timeout
    │   └── ServerResponseError(RuntimeError)       an error status, or a body of the wrong shape
    ├── TranscriptError
    │   ├── TranscriptNotFound(FileNotFoundError)   no file at the path
    │   ├── TranscriptNotAFile(IsADirectoryError)   the path is a directory or a device
    │   ├── TranscriptPermission(PermissionError)   the file cannot be read or written
    │   ├── TranscriptCorrupt(ValueError)           bytes that are not a transcript record
    │   ├── TranscriptChanged(RuntimeError)         the file changed under a read
    │   ├── TranscriptLocked(BlockingIOError)       another writer holds the transcript
    │   ├── StoreUnavailable(ConnectionError)       the database holding the sessions cannot be reached
    │   ├── EntryInvalid(ValueError)                an entry given to append/rewrite is unusable
    │   └── PartialHistoryRewrite(ValueError)       a rewrite would drop history it never read
    └── UnderstandingError                       a message could not be understood as asked
        ├── CatalogError(ValueError)                a catalog of workflows and records is invalid
        ├── BudgetExhausted(RuntimeError)           the next model call would pass a turn's bound
        ├── UsageUnavailable(RuntimeError)          a token bound met a backend that reports no usage
        ├── ReplayDiverged(LookupError)             a replay asked for a call never recorded
        └── TaskOutputInvalid(ValueError)           a task's output failed its checks

The tree is the classes' own (``tests/shell/test_package.py`` compares them).

Warnings: ``InexactCountWarning(UserWarning)`` when counts fall back to an estimate;
``UnknownVariableWarning(UserWarning)`` for a ``BOUNDCTX_*`` variable that is no setting.
"""

__all__ = [
    "AnalysisError",
    "BoundctxError",
    "BudgetExhausted",
    "CatalogError",
    "ConfigError",
    "ContextOverflow",
    "EntryInvalid",
    "GenerationError",
    "GenerationTimeout",
    "IncompleteCoverage",
    "InexactCountWarning",
    "PartialHistoryRewrite",
    "PromptTemplateError",
    "ReplayDiverged",
    "ResponseSchemaError",
    "SectionBudgetTooSmall",
    "SectionPlanError",
    "SectionReadError",
    "ServerError",
    "ServerResponseError",
    "ServerTimeout",
    "ServerUnreachable",
    "SourceTooLarge",
    "StoreUnavailable",
    "TaskOutputInvalid",
    "TooManySections",
    "ToolOfferError",
    "TranscriptChanged",
    "TranscriptCorrupt",
    "TranscriptError",
    "TranscriptLocked",
    "TranscriptNotAFile",
    "TranscriptNotFound",
    "TranscriptPermission",
    "UnderstandingError",
    "UnknownVariableWarning",
    "UsageUnavailable",
]


class BoundctxError(Exception):
    """Base class of every error boundctx raises on purpose."""


class ConfigError(BoundctxError, ValueError):
    """A setting has a value outside its accepted range."""

    #: The two keys whose values do not go together, when that is the problem
    #: (``config.RELATIONS``); else empty.
    keys: tuple[str, ...] = ()


class PromptTemplateError(BoundctxError, ValueError):
    """A model's chat template did not compile, refused the messages, or failed on them."""


class ToolOfferError(BoundctxError, ValueError):
    """The tools given to ``Engine.reply`` cannot be offered to the model: not a list of
    OpenAI function tools, a name given twice or taken by the engine's own
    ``read_chat_section``, or a model that cannot call tools; or a ``tool_choice`` that
    cannot be honoured. Raised at the call, before any model call; the message names the
    tool and what to change, and ``about`` the argument at fault (``"tools"`` or
    ``"tool_choice"``)."""

    def __init__(self, message: str, about: str = "tools") -> None:
        super().__init__(message)
        self.about = about


class ResponseSchemaError(BoundctxError, ValueError):
    """The JSON schema given to ``Engine.reply`` is one the model's answer cannot be held
    to: the local model's grammar would not hold a keyword of it (``minimum``, a string
    format it does not know), or it cannot be made a grammar at all. Raised at the call,
    before any model call; ``at`` is where in the schema (``properties.n.minimum``, or
    ``""`` for the whole)."""

    def __init__(self, message: str, at: str = "") -> None:
        super().__init__(message)
        self.at = at


class SectionPlanError(BoundctxError, ValueError):
    """A source cannot be cut into sections within the limits asked for.

    Raised before any model call; the message says what was asked, what the limit is
    and what to change.
    """


class SourceTooLarge(SectionPlanError):
    """The source has more characters than ``analysis.max_source_chars``.

    Attributes
    ----------
    chars, limit : int
    """

    def __init__(self, message: str, *, chars: int, limit: int) -> None:
        super().__init__(message)
        self.chars = chars
        self.limit = limit


class TooManySections(SectionPlanError):
    """The source needs more sections than ``analysis.max_sections``.

    The plan stops cutting one section past the limit (the rest of the source is never
    counted), so the count it knows is a lower bound.

    Attributes
    ----------
    needed : int
        A lower bound: sections cut before the plan stopped (``limit + 1``, or the
        whole source's count when that is all it needs).
    estimated : int
        Sections the whole source would need at the pace of those cut (an estimate).
    limit : int
    """

    def __init__(self, message: str, *, needed: int, limit: int, estimated: int | None = None) -> None:
        super().__init__(message)
        self.needed = needed
        self.limit = limit
        self.estimated = needed if estimated is None else estimated


class SectionBudgetTooSmall(SectionPlanError):
    """The worker prompt leaves too few tokens for a section longer than the overlap."""


class AnalysisError(BoundctxError):
    """Section analysis could not read the whole input as asked."""


class IncompleteCoverage(AnalysisError):
    """A worker failure, a timeout or a limit left sections unread; the reply fails
    rather than answer from part of the input.

    Attributes
    ----------
    uncovered : list of tuple
        ``(section_number, start, end)`` of each section not read.
    """

    def __init__(self, message: str, *, uncovered: list[tuple[int, int, int]]) -> None:
        super().__init__(message)
        self.uncovered = uncovered


class SectionReadError(AnalysisError, LookupError):
    """``read_chat_section`` was given an id this reply does not have, or a bad range."""


class GenerationError(BoundctxError):
    """A model call did not complete."""


class GenerationTimeout(GenerationError, TimeoutError):
    """A generation ran past its wall-clock limit; its generator has been closed."""


class ContextOverflow(GenerationError, ValueError):
    """The prompt does not fit the model's context window.

    Attributes
    ----------
    prompt_tokens : int or None
        The prompt's size, when known.
    context_window : int or None
    """

    def __init__(self, message: str, *, prompt_tokens: int | None = None,
                 context_window: int | None = None) -> None:
        super().__init__(message)
        self.prompt_tokens = prompt_tokens
        self.context_window = context_window


class ServerError(BoundctxError):
    """A model server could not be used as asked."""


class ServerUnreachable(ServerError, ConnectionError):
    """No connection to the server: refused, unknown host, TLS failure, reset."""


class ServerTimeout(ServerUnreachable, TimeoutError):
    """The server did not answer within the timeout."""


class ServerResponseError(ServerError, RuntimeError):
    """The server answered with an error status or a body without the documented shape."""


class InexactCountWarning(UserWarning):
    """Counts will not be exact: a conservative estimate stands in, or the server cannot
    count some text exactly."""


class UnknownVariableWarning(UserWarning):
    """A ``BOUNDCTX_*`` environment variable that boundctx does not read (a misspelt
    setting, most likely); it is ignored."""


class TranscriptError(BoundctxError):
    """A transcript could not be read or written as asked."""


class TranscriptNotFound(TranscriptError, FileNotFoundError):
    """There is no file at the transcript path."""


class TranscriptNotAFile(TranscriptError, IsADirectoryError):
    """The transcript path names a directory or something else that is not a file."""


class TranscriptPermission(TranscriptError, PermissionError):
    """The transcript (or its folder) cannot be read or written by this user."""


class TranscriptCorrupt(TranscriptError, ValueError):
    """Bytes that should hold a transcript record do not."""


class TranscriptChanged(TranscriptError, RuntimeError):
    """The transcript changed under a read, even after one rebuild of its layout."""


class TranscriptLocked(TranscriptError, BlockingIOError):
    """Another writer holds the transcript's write lock."""


class StoreUnavailable(TranscriptError, ConnectionError):
    """The database that holds the sessions cannot be reached (down, restarting, or the
    connection was lost); the message says which and why. Nothing was changed by the call
    that raised it; the same call succeeds once the database is back."""


class EntryInvalid(TranscriptError, ValueError):
    """An entry given to ``append`` or ``rewrite`` cannot be stored as a record."""


class PartialHistoryRewrite(TranscriptError, ValueError):
    """A rewrite was built from a partial window and would delete older history."""


class UnderstandingError(BoundctxError):
    """Understanding a message as a plan could not proceed as asked."""


class CatalogError(UnderstandingError, ValueError):
    """A catalog (workflows, operations, records) is not valid; the message names the
    field and what is accepted."""


class BudgetExhausted(UnderstandingError, RuntimeError):
    """A per-turn bound (model calls, chain depth, prompt tokens, wall clock) would be
    passed by the next model call, which is therefore not made.

    Attributes
    ----------
    bound : str
        ``"max_model_calls"``, ``"max_chain_depth"``, ``"max_prompt_tokens"`` or
        ``"wall_clock_s"``.
    """

    def __init__(self, message: str, *, bound: str) -> None:
        super().__init__(message)
        self.bound = bound


class UsageUnavailable(UnderstandingError, RuntimeError):
    """A turn under a prompt-token bound met a backend that does not report token usage;
    it is refused rather than guessed."""


class ReplayDiverged(UnderstandingError, LookupError):
    """A replay asked for a call the recording never made: the catalog, records,
    settings or prompts differ from the recorded turn's. Record the turn again."""


class TaskOutputInvalid(UnderstandingError, ValueError):
    """A task's output failed validation (not JSON, outside its schema or closed sets, a
    quote not in the message, cut at max_tokens)."""
