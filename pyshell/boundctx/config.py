"""Settings: one declared schema, four sources.

Every setting is a :class:`Key` in :data:`KEYS`: its type, default, accepted values,
environment name and help. Values come from, in increasing precedence:

1. the defaults declared here;
2. a TOML file: ``$BOUNDCTX_CONFIG``, else ``$XDG_CONFIG_HOME/boundctx/config.toml``
   (``~/.config/boundctx/config.toml``), with one table per group::

       [chat]
       analysis_workers = 3

3. the environment: ``BOUNDCTX_CHAT_ANALYSIS_WORKERS=3``;
4. overrides from the command line or the API (``load(overrides={...})``).

A value outside its accepted range, of the wrong type, or under an unknown key is
refused with :class:`~boundctx.errors.ConfigError`, naming where it came from and what
is accepted. :func:`schema` is what a settings screen renders.
"""

from __future__ import annotations

import difflib
import math
import os
import pathlib
import re
import stat
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar, Literal, TypeVar

import msgspec

from boundctx import _tomledit
from boundctx._atomic import replacing
from boundctx._files import read_bytes
from boundctx.errors import ConfigError, UnknownVariableWarning

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["ENVIRONMENT", "KEYS", "RELATIONS", "VIEWS", "AnalysisSettings", "ChatSettings", "Key", "LocalSettings",
           "RemoteSettings", "ServeSettings", "Settings", "TranscriptSettings", "UnderstandingSettings",
           "check_relations", "config_path", "load", "resolve", "schema", "write_value"]

#: The value types a setting can have, by name.
KeyType = Literal["int", "float", "bool", "str"]
_TYPES = {"int": int, "float": float, "bool": bool, "str": str}


class Key(msgspec.Struct, frozen=True):
    """One setting.

    Attributes
    ----------
    name : str
        ``group.key``, e.g. ``"chat.analysis_workers"``.
    type : KeyType
        ``"int"``, ``"float"``, ``"bool"`` or ``"str"``.
    default : Any
    help : str
    minimum, maximum : float, optional
        Inclusive bounds for numbers.
    exclusive_minimum : bool
        The minimum itself is not accepted (``> 0``).
    choices : tuple, optional
        The accepted values, for a closed set.
    label : str
        Its name in words a person reads, for a settings screen ("Temperature").
    """

    name: str
    type: KeyType
    default: Any
    help: str
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    choices: tuple[Any, ...] | None = None
    label: str = ""

    @property
    def env(self) -> str:
        """The environment variable that sets this key."""
        return "BOUNDCTX_" + self.name.replace(".", "_").upper()

    def accepted(self) -> str:
        """The accepted values in words, for error messages and help."""
        if self.choices is not None:
            return "one of " + ", ".join(map(repr, self.choices))
        if self.minimum is not None and self.maximum is not None:
            if self.exclusive_minimum:
                return f"> {_num(self.minimum)} and ≤ {_num(self.maximum)}"
            return f"{_num(self.minimum)}–{_num(self.maximum)}"
        if self.minimum is not None:
            return f"{'>' if self.exclusive_minimum else '≥'} {_num(self.minimum)}"
        return f"any {self.type}"

    def check(self, value: Any, source: str, *, parse: bool = True) -> Any:
        """``value`` converted to this key's type and checked. With ``parse``, a string
        (from the environment or the command line) is read as the key's type; a typed
        source (a TOML file) must give the type itself."""
        value = _convert(self, value, source, parse)
        problem = None
        if self.choices is not None and value not in self.choices:
            problem = "is not accepted"
        elif self.minimum is not None and (value < self.minimum or (self.exclusive_minimum and value == self.minimum)):
            problem = "is too small"
        elif self.maximum is not None and value > self.maximum:
            problem = "is too large"
        if problem:
            raise ConfigError(f"{self.name} = {value!r} (from {source}) {problem}: accepted {self.accepted()}")
        return value


def _num(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"


def _a(type_name: str) -> str:
    return ("an " if type_name[0] in "aeiou" else "a ") + type_name


_INT = re.compile(r"[+-]?[0-9]+(?:_[0-9]+)*")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _convert(key: Key, value: Any, source: str, parse: bool) -> Any:
    want = _TYPES[key.type]
    if parse and isinstance(value, str) and want is not str:
        text = value.strip()
        try:
            if want is bool:
                lowered = text.lower()
                if lowered in ("1", "true", "yes", "on"):
                    return True
                if lowered in ("0", "false", "no", "off"):
                    return False
                raise ValueError(text)
            # ASCII digits only: int() would take "٣" (and the old comma rule "0,4" as 4).
            if want is int:
                if not _INT.fullmatch(text):
                    raise ValueError(text)
                return int(text)
            if not _FLOAT.fullmatch(text):
                raise ValueError(text)
            number = float(text)
            if not math.isfinite(number):
                raise ValueError(text)
            return number
        except ValueError:
            raise ConfigError(f"{key.name} = {value!r} (from {source}) is not {_a(key.type)}: "
                              f"accepted {key.accepted()}") from None
    if want is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, want) or (want is int and isinstance(value, bool)):
        raise ConfigError(f"{key.name} = {value!r} (from {source}) is not {_a(key.type)}: "
                          f"accepted {key.accepted()}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{key.name} = {value!r} (from {source}) is not a finite number")
    return value


#: The largest context window accepted: 16 Mi tokens, past every model there is.
MAX_CONTEXT = 1 << 24
#: The largest count or size: what the section planner and the native core take (their
#: offsets are ssize_t), and what a setting's value can be as JSON (the settings route,
#: ``boundctx config show --json``) or in TOML (64-bit integers).
LARGEST = sys.maxsize
#: The longest time limit, in seconds: the longest wait a lock can be given (a local
#: model's turn waits on one with the time that is left; Python refuses a longer one).
MAX_SECONDS = float(math.floor(threading.TIMEOUT_MAX))
#: The window route's caps (``MESSAGE_LIMIT_MAX`` and ``CONTENT_LIMIT_MAX`` in
#: ``serve/sessions.py``): the ``transcript.window_*`` defaults may not pass them.
WINDOW_MESSAGES_MAX = 1000
WINDOW_CONTENT_BYTES_MAX = 1 << 20
WINDOW_PAGE_BYTES_MAX = 64 << 20


def _declare(*keys: Key) -> dict[str, Key]:
    return {k.name: k for k in keys}


#: Every setting boundctx reads (DESIGN.md, "Limits").
KEYS: dict[str, Key] = _declare(
    Key("chat.analysis_workers", "int", 2, "note-taking workers that read inputs too large for "
        "the context, one at a time; 0 turns section analysis off", minimum=0, maximum=8, label="Note-taking workers"),
    # A maximum keeps a value from wrapping on its way into llama.cpp's 32-bit fields
    # (2**32 + 2048 opened a 2,048-token context while boundctx counted 4.29 G).
    Key("chat.n_ctx", "int", 8192, "the chat model's context window in tokens (remote models; "
        "local models are opened with it)", minimum=512, maximum=MAX_CONTEXT, label="Context window (tokens)"),
    Key("chat.tool_result_clip_chars", "int", 4000, "with analysis off, tool results are cut "
        "to this many characters", minimum=0, maximum=LARGEST, label="Tool result cut (characters, analysis off)"),
    # Decision 0029: a drop at the window's edge goes down to this share of the prompt's
    # limit, so the turns after it append to a prefix a model's cache still holds.
    Key("chat.low_water", "float", 0.5, "when old history must be dropped, drop down to this share "
        "of the prompt's limit, so the next turns keep the same start (and the model's cache of it); "
        "1 drops only what must go, every turn at the window's edge", minimum=0, exclusive_minimum=True,
        maximum=1, label="History kept when dropping (share)"),
    Key("analysis.worker_n_ctx", "int", 4096, "context of each note-taking worker prompt, in "
        "tokens", minimum=512, maximum=MAX_CONTEXT, label="Worker context (tokens)"),
    # Decision 0038: the limit grows with the call's size, bounded by the worker context.
    Key("analysis.worker_timeout_s", "float", 120.0, "wall-clock limit of one note-taking worker call, in "
        "seconds per 1,000 tokens of it (its prompt and notes budget; never less than this): a larger "
        "section gets longer. Raise it on a slow or busy machine", minimum=0, exclusive_minimum=True,
        maximum=MAX_SECONDS, label="Worker time limit (seconds per 1,000 tokens)"),
    # A worker prompt holds the notes and keeps as many tokens free for the worker's
    # output: twice the notes must be under the worker context (RELATIONS).
    Key("analysis.notes_max_tokens", "int", 384, "most tokens a worker's notes may take; twice this "
        "must be under analysis.worker_n_ctx", minimum=16, maximum=(MAX_CONTEXT - 1) // 2,
        label="Notes per worker (tokens)"),
    Key("analysis.max_source_chars", "int", 1_000_000, "longest input analysed in one reply, "
        "in characters", minimum=1, maximum=LARGEST, label="Longest input read (characters)"),
    Key("analysis.max_sections", "int", 64, "most sections analysed in one reply", minimum=1,
        maximum=LARGEST, label="Most sections per reply"),
    Key("analysis.overlap_chars", "int", 64, "characters each section repeats from the one "
        "before; less than analysis.max_source_chars", minimum=0, maximum=LARGEST - 1,
        label="Section overlap (characters)"),
    Key("analysis.constrained_rereads", "bool", True, "a model that cannot call tools may still "
        "ask for exact rereads of the ranges the notes cite, in one step its decoder holds to a "
        "JSON schema, before it answers (one more model call when something was analysed)",
        label="Exact rereads without tool calls"),
    # Decision 0046: history dropped to fit stays one search away, within these bounds.
    Key("analysis.history_search", "bool", True, "when old history is dropped to fit, the model may search "
        "the dropped messages and read them exactly (read_chat_section, or the constrained step of a model "
        "without tool calls); needs chat.analysis_workers above 0", label="Search dropped history"),
    Key("analysis.search_max_chars", "int", 16_000_000, "most characters one search reads, newest "
        "first: what lies before is said not to have been searched", minimum=1_000, maximum=LARGEST,
        label="Most characters one search reads"),
    Key("analysis.search_max_hits", "int", 6, "most passages one search returns (each at most 400 "
        "characters, all within one reread's 4,000)", minimum=1, maximum=50, label="Passages per search"),
    Key("analysis.search_max_seconds", "float", 5.0, "wall-clock limit of one search; what it had not "
        "read by then is said not to have been searched", minimum=0, exclusive_minimum=True,
        maximum=MAX_SECONDS, label="Search time limit (seconds)"),
    Key("understanding.max_model_calls", "int", 24, "most model calls one turn of understanding "
        "makes (repairs, votes and escalations included)", minimum=1, maximum=LARGEST,
        label="Most model calls per turn"),
    Key("understanding.max_chain_depth", "int", 12, "most dependent model calls in a row in one "
        "turn (each repair or escalation is one more)", minimum=1, maximum=LARGEST, label="Longest chain of calls"),
    Key("understanding.max_parallel", "int", 4, "most understanding tasks running at once "
        "(local models still take turns on the inference lock)", minimum=1, maximum=64, label="Tasks at once"),
    Key("understanding.max_prompt_tokens", "int", 65536, "most prompt tokens one turn spends; "
        "0 = no bound (a backend without usage reports needs 0)", minimum=0, maximum=LARGEST,
        label="Most prompt tokens per turn"),
    Key("understanding.wall_clock_s", "float", 300.0, "wall-clock limit of one turn in seconds; "
        "0 = no bound", minimum=0, maximum=MAX_SECONDS, label="Time limit per turn (seconds)"),
    Key("understanding.repairs", "int", 1, "extra attempts for a task whose output failed "
        "validation, each told what was wrong", minimum=0, maximum=4, label="Repair attempts"),
    Key("understanding.votes", "int", 1, "samples per task; an answer needs a strict majority",
        minimum=1, maximum=9, label="Votes per task"),
    Key("understanding.max_units", "int", 8, "most units (separate requests) one message is "
        "segmented into", minimum=1, maximum=32, label="Most requests per message"),
    Key("chat.temperature", "float", 0.2, "sampling temperature of replies (0 = always the most "
        "likely token); note-taking workers and understanding tasks keep their own", minimum=0, maximum=2,
        label="Temperature"),
    Key("chat.system_prompt", "str", "", "a system message put first in every reply's conversation "
        "(unless the conversation starts with its own); empty = none", label="System prompt"),
    Key("chat.repeat_penalty", "float", 1.1, "local models: how much a token already in the reply is "
        "penalised (1 = not at all); keeps a small model from repeating itself", minimum=1, maximum=2,
        label="Repetition penalty"),
    # The providers' registry (boundctx.providers.registry.PROVIDERS) has these names; a
    # test holds the two together (config imports no provider).
    Key("chat.provider", "str", "local", "which model answers: local (llama.cpp in this process, local.*) "
        "or remote (an OpenAI-compatible server, remote.*)", choices=("local", "remote"), label="Model provider"),
    Key("local.model", "str", "", "the local model's GGUF file; empty = the embedded SmolLM2-135M-Instruct",
        label="Local model file"),
    Key("local.threads", "int", 0, "CPU threads for local inference; 0 = llama.cpp's choice",
        minimum=0, maximum=1024, label="CPU threads"),
    # llama.cpp's n_gpu_layers is a 32-bit int: a larger value would wrap.
    Key("local.gpu_layers", "int", 0, "model layers offloaded to a GPU (a GPU build of "
        "llama-cpp-python); -1 = all, 0 = none", minimum=-1, maximum=2**31 - 1, label="GPU layers"),
    Key("local.seed", "int", 1234, "sampling seed of local models (the same seed, prompt and "
        "settings give the same reply)", minimum=0, maximum=2**32 - 1, label="Sampling seed"),
    Key("local.extra_buffers", "str", "auto", "llama.cpp's extra CPU buffer types (repacked and AMX "
        "kernels); auto = off on AMX hosts, where llama-cpp-python 0.3.36 crashes with SIGILL",
        choices=("auto", "on", "off"), label="Extra CPU buffer types"),
    # Decision 0030: evaluated prompt states copied out before a call throws them away.
    Key("local.state_cache_mib", "int", 512, "MiB of evaluated prompt states a local model keeps, so "
        "conversations taking turns on it, and a reply after section workers, evaluate only their "
        "new tokens; 0 = none (the least recently used go first)", minimum=0, maximum=2**40,
        label="Kept prompt states (MiB)"),
    Key("remote.base_url", "str", "", "the OpenAI-compatible server of the remote provider, e.g. "
        "http://127.0.0.1:8080 (a trailing /v1 is accepted)", label="Model server address"),
    Key("remote.model", "str", "", "the model name sent to the remote server; empty = the one model its "
        "/v1/models lists, else 'default'", label="Model name"),
    # A file, not the key itself: settings are shown (config show, the settings route)
    # and a key must never be.
    Key("remote.api_key_file", "str", "", "a file holding the remote server's bearer token on one line "
        "(# starts a comment); --api-key and BOUNDCTX_API_KEY win over it; empty = none",
        label="Model server key file"),
    Key("remote.timeout_s", "float", 60.0, "seconds the remote server has to accept a connection and "
        "between the chunks of a reply", minimum=0, exclusive_minimum=True, maximum=MAX_SECONDS,
        label="Model server time limit (seconds)"),
    Key("remote.max_retries", "int", 2, "attempts after the first when the remote server refuses a "
        "connection or answers 429/503 (Retry-After is followed)", minimum=0, maximum=16, label="Model server retries"),
    Key("transcript.window_messages", "int", 100, "messages in a renderer window "
        "(Transcript.window(preset=\"renderer\"), boundctx session get)", minimum=1,
        maximum=WINDOW_MESSAGES_MAX, label="Messages per page"),
    Key("transcript.window_content_bytes", "int", 65536, "bytes of text shown per message in "
        "a renderer window (Transcript.window(preset=\"renderer\"), boundctx session get)", minimum=1,
        maximum=WINDOW_CONTENT_BYTES_MAX, label="Text per message on a page (bytes)"),
    Key("transcript.window_page_bytes", "int", 1 << 20, "bytes of the file a renderer window shows in "
        "all (its messages' shown bytes together; the newest message always comes): the newest messages "
        "that fit, fewer than transcript.window_messages when they are long (Transcript.window(preset="
        "\"renderer\"), boundctx session get, the sessions window route)", minimum=1,
        maximum=WINDOW_PAGE_BYTES_MAX, label="Bytes per page"),
    Key("serve.host", "str", "127.0.0.1", "address boundctx serve binds; anything but loopback needs an "
        "API key (--api-key, serve.api_key_file or BOUNDCTX_SERVE_API_KEY)", label="Address"),
    Key("serve.port", "int", 8765, "port boundctx serve listens on (0 = any free port)", minimum=0,
        maximum=65535, label="Port"),
    Key("serve.api_key_file", "str", "", "a file of API keys, one per line, any of which a client may "
        "send as 'Authorization: Bearer KEY' (empty: none, unless BOUNDCTX_SERVE_API_KEY is set)",
        label="API key file"),
    Key("serve.max_body_bytes", "int", 32 << 20, "largest request body boundctx serve reads; larger "
        "ones get 413", minimum=1024, maximum=LARGEST, label="Largest request (bytes)"),
    Key("serve.active_replies", "int", 1, "replies generated at once (a local model runs one at a "
        "time whatever this says)", minimum=1, maximum=256, label="Replies at once"),
    Key("serve.queue_depth", "int", 8, "replies waiting for a turn; past this a request gets 503 with "
        "Retry-After", minimum=0, maximum=4096, label="Replies waiting"),
    Key("serve.sse_ping_seconds", "float", 15.0, "a ': ping' comment after this long without an event "
        "on a stream (0 = never)", minimum=0, maximum=MAX_SECONDS, label="Keep-alive ping (seconds)"),
    Key("serve.send_timeout_seconds", "float", 30.0, "a client that takes longer than this to take "
        "one event is dropped and its reply cancelled", minimum=0, exclusive_minimum=True,
        maximum=MAX_SECONDS, label="Slow client limit (seconds)"),
    Key("serve.progress_max_hz", "float", 4.0, "most analysis-progress chunks per second on a stream",
        minimum=0, exclusive_minimum=True, label="Progress updates per second"),
    Key("serve.progress_openwebui", "bool", True, "progress chunks also carry Open WebUI's status "
        "'event' object", label="Open WebUI status lines"),
    Key("serve.sessions_dir", "str", "", "the folder of sessions (transcripts) boundctx serve reads and "
        "writes under /boundctx/v1/sessions (empty: $XDG_DATA_HOME/boundctx/sessions, or "
        "~/.local/share/boundctx/sessions), or a postgresql:// URL of the database that keeps them, for "
        "serve processes on several machines (pip install 'boundctx[postgres]')", label="Sessions folder"),
    Key("serve.cors_origins", "str", "", "origins (scheme://host[:port], comma-separated; * for any) whose "
        "pages may call boundctx serve from a browser; empty sends no CORS headers. Credentials are never "
        "allowed: send the API key as a bearer token", label="Allowed web origins (CORS)"),
    Key("serve.max_head_bytes", "int", 64 << 10, "largest request head (request line and headers) boundctx "
        "serve reads; a larger one gets 431 and the connection is closed", minimum=4096, maximum=16 << 20,
        label="Largest request head (bytes)"),
    Key("serve.head_timeout_seconds", "float", 10.0, "time a connection has to send a complete request head, "
        "from when it opens or its previous response ends; then it is closed (408 if part of a head came)",
        minimum=0, exclusive_minimum=True, maximum=3600.0, label="Request head time limit (seconds)"),
    Key("serve.max_connections", "int", 512, "most connections open at once (lowered to what the open-file "
        "limit allows); past it a new connection closes the one that has waited longest without a request",
        minimum=2, maximum=1 << 20, label="Most connections"),
)


# -- typed views of the groups -----------------------------------------------------------
#
# One frozen struct per group of KEYS, written out so that a type checker sees the type
# of each field: ``settings.chat.analysis_workers`` is an int, and a misspelt name is a
# type error where ``settings["chat.analysis_workrs"]`` was a KeyError mid-reply. KEYS
# stays the one declaration: the fields carry no defaults (a view is only ever built from
# resolved settings), and tests/config/test_setting_views.py holds the structs to KEYS,
# name for name, type for type and in order (decision 0032).


class _View(msgspec.Struct, frozen=True, kw_only=True):
    group: ClassVar[str]


class ChatSettings(_View, frozen=True, kw_only=True):
    """``chat.*``: the reply and the chat model."""

    group: ClassVar[str] = "chat"
    analysis_workers: int
    n_ctx: int
    tool_result_clip_chars: int
    low_water: float
    temperature: float
    system_prompt: str
    repeat_penalty: float
    provider: Literal["local", "remote"]


class AnalysisSettings(_View, frozen=True, kw_only=True):
    """``analysis.*``: the note-taking workers that read inputs too large for the context."""

    group: ClassVar[str] = "analysis"
    worker_n_ctx: int
    worker_timeout_s: float
    notes_max_tokens: int
    max_source_chars: int
    max_sections: int
    overlap_chars: int
    constrained_rereads: bool
    history_search: bool
    search_max_chars: int
    search_max_hits: int
    search_max_seconds: float


class UnderstandingSettings(_View, frozen=True, kw_only=True):
    """``understanding.*``: the bounds of one turn of understanding."""

    group: ClassVar[str] = "understanding"
    max_model_calls: int
    max_chain_depth: int
    max_parallel: int
    max_prompt_tokens: int
    wall_clock_s: float
    repairs: int
    votes: int
    max_units: int


class LocalSettings(_View, frozen=True, kw_only=True):
    """``local.*``: a local (llama.cpp) model."""

    group: ClassVar[str] = "local"
    model: str
    threads: int
    gpu_layers: int
    seed: int
    extra_buffers: Literal["auto", "on", "off"]
    state_cache_mib: int


class RemoteSettings(_View, frozen=True, kw_only=True):
    """``remote.*``: a model behind an OpenAI-compatible server."""

    group: ClassVar[str] = "remote"
    base_url: str
    model: str
    api_key_file: str
    timeout_s: float
    max_retries: int


class TranscriptSettings(_View, frozen=True, kw_only=True):
    """``transcript.*``: a renderer's window."""

    group: ClassVar[str] = "transcript"
    window_messages: int
    window_content_bytes: int
    window_page_bytes: int


class ServeSettings(_View, frozen=True, kw_only=True):
    """``serve.*``: ``boundctx serve``."""

    group: ClassVar[str] = "serve"
    host: str
    port: int
    api_key_file: str
    max_body_bytes: int
    active_replies: int
    queue_depth: int
    sse_ping_seconds: float
    send_timeout_seconds: float
    progress_max_hz: float
    progress_openwebui: bool
    sessions_dir: str
    cors_origins: str
    max_head_bytes: int
    head_timeout_seconds: float
    max_connections: int


#: Every group's view, in the order of KEYS.
VIEWS: tuple[type[_View], ...] = (ChatSettings, AnalysisSettings, UnderstandingSettings, LocalSettings,
                                  RemoteSettings, TranscriptSettings, ServeSettings)

_V = TypeVar("_V", bound=_View)


def _view(cls: type[_V], values: Mapping[str, Any]) -> _V:
    """``cls`` filled from resolved ``values`` (checked already: no second check here)."""
    return cls(**{name: values[f"{cls.group}.{name}"] for name in cls.__struct_fields__})


#: The BOUNDCTX_* variables that are not settings, and what each is for.
ENVIRONMENT: dict[str, str] = {
    "BOUNDCTX_CONFIG": "the config file to read instead of ~/.config/boundctx/config.toml",
    "BOUNDCTX_CACHE_DIR": "where layout sidecars go: those of other tools' transcripts, and of boundctx's own "
                          "when their folder is read-only",
    "BOUNDCTX_API_KEY": "the remote server's bearer token (--api-key wins, on serve --upstream-api-key; it wins "
                        "over remote.api_key_file)",
    "BOUNDCTX_SERVE_API_KEY": "an API key boundctx serve accepts (with those of serve.api_key_file)",
}

_warned: set[str] = set()


def _warn_unknown_variables(env: Mapping[str, str]) -> None:
    """Warn, once per name and process, about ``BOUNDCTX_*`` variables boundctx does not
    read: a misspelt one would otherwise be ignored without a word."""
    known = {key.env for key in KEYS.values()} | set(ENVIRONMENT)
    for name in env:
        if name.startswith("BOUNDCTX_") and name not in known and name not in _warned:
            _warned.add(name)
            near = difflib.get_close_matches(name, sorted(known), n=1)
            hint = f"; did you mean {near[0]}?" if near else "; `boundctx config schema` lists the settings"
            import warnings

            warnings.warn(f"the environment variable {name} is not a boundctx setting and is ignored{hint}",
                          UnknownVariableWarning, stacklevel=3)


def config_path(env: Mapping[str, str] | None = None) -> pathlib.Path:
    """Where the config file is read from and written to."""
    env = os.environ if env is None else env
    if env.get("BOUNDCTX_CONFIG"):
        return pathlib.Path(env["BOUNDCTX_CONFIG"]).expanduser()
    base = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return pathlib.Path(base) / "boundctx" / "config.toml"


def _unknown(name: str, source: str) -> ConfigError:
    near = difflib.get_close_matches(name, KEYS, n=1)
    hint = f"; did you mean {near[0]!r}?" if near else f"; known keys: {', '.join(KEYS)}"
    return ConfigError(f"unknown setting {name!r} (from {source}){hint}")


def _file_text(path: pathlib.Path) -> str | None:
    """The config file's text; None when there is none (a missing file, or
    ``os.devnull``: the one device read, "no config file", as the replay runner asks)."""
    if os.fspath(path) == os.devnull:
        return None
    try:
        return read_bytes(path, what="TOML settings file").decode("utf-8")
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise ConfigError(f"the config path {str(path)!r} is a directory, not a TOML file") from None
    except OSError as exc:  # a FIFO or a device (never read: it could block or never end)
        raise ConfigError(f"cannot read the config file: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"the config file {str(path)!r} is not valid TOML: {exc}") from None


def _read_file(path: pathlib.Path, text: str | None = None) -> dict[str, Any]:
    """``{"group.key": value}`` from a TOML file (or its ``text``, read already); no file
    is empty."""
    if text is None:
        text = _file_text(path)
    if text is None:
        return {}
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"the config file {str(path)!r} is not valid TOML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"the config file {str(path)!r} nests too deeply to be a settings file") from None
    out: dict[str, Any] = {}
    for group, table in data.items():
        if not isinstance(table, dict):
            raise ConfigError(f"{group!r} in {str(path)!r} should be a table such as [{group}] "
                              f"with keys under it, not a value")
        for key, value in table.items():
            out[f"{group}.{key}"] = value
    return out


class Settings(Mapping[str, Any]):
    """Resolved settings: a read-only mapping of key name to value, plus where each
    value came from (:meth:`source`), and a typed view of each group, built once here:
    ``settings.chat.analysis_workers`` is ``settings["chat.analysis_workers"]`` as an
    int (:class:`ChatSettings`, :class:`AnalysisSettings`, :class:`UnderstandingSettings`,
    :class:`LocalSettings`, :class:`RemoteSettings`, :class:`TranscriptSettings`, :class:`ServeSettings`)."""

    def __init__(self, values: dict[str, Any], sources: dict[str, str]) -> None:
        self._values = values
        self._sources = sources
        self.chat = _view(ChatSettings, values)
        self.analysis = _view(AnalysisSettings, values)
        self.understanding = _view(UnderstandingSettings, values)
        self.local = _view(LocalSettings, values)
        self.remote = _view(RemoteSettings, values)
        self.transcript = _view(TranscriptSettings, values)
        self.serve = _view(ServeSettings, values)

    def __getitem__(self, name: str) -> Any:
        if name not in self._values:
            raise _unknown(name, "a lookup")
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def source(self, name: str) -> str:
        """``"default"``, ``"file <path>"``, ``"environment <NAME>"`` or ``"override"``."""
        self[name]
        return self._sources[name]

    def __repr__(self) -> str:
        return f"Settings({self._values!r})"


#: What two settings must satisfy together, where neither key's own range can say it:
#: (key, other key, the most the key may be given the other's value, the least the other
#: may be given the key's value, why). Checked when settings are resolved, by ``boundctx
#: config set``, and by the server's live settings.
RELATIONS: tuple[tuple[str, str, Callable[[int], int], Callable[[int], int], str], ...] = (
    # The section planner keeps the notes' room and as much output headroom in every
    # worker prompt: with twice the notes at the context it refuses every input.
    ("analysis.notes_max_tokens", "analysis.worker_n_ctx", lambda ctx: (ctx - 1) // 2, lambda notes: 2 * notes + 1,
     "each worker prompt holds the notes and keeps as many tokens free for the worker's output, so there would "
     "be no room for a section and every input too long for the context would be refused"),
    # A section repeats the overlap from the one before: with an overlap as long as the
    # longest source, no source could be cut into two sections.
    ("analysis.overlap_chars", "analysis.max_source_chars", lambda most: most - 1, lambda overlap: overlap + 1,
     "each section repeats the overlap from the one before, so no input could be cut into two sections"),
)


def check_relations(values: Mapping[str, Any], source: Callable[[str], str] | None = None) -> None:
    """Refuse settings that are each in range but do not go together (:data:`RELATIONS`).

    Parameters
    ----------
    values : mapping
        Every key's value (resolved :class:`Settings`, or a plain mapping).
    source : callable, optional
        ``source(name)`` -> where a value came from, for the message.

    Raises
    ------
    ConfigError
        Naming both keys, their values, why they do not go together and what is accepted;
        its ``keys`` attribute is the two names.
    """
    def said(name: str) -> str:
        return f"{name} = {values[name]!r}" + (f" (from {source(name)})" if source is not None else "")

    for name, other, most, least, why in RELATIONS:
        if values[name] > most(values[other]):
            error = ConfigError(f"{said(name)} does not go with {said(other)}: {why}; accepted {name} ≤ "
                                f"{_num(most(values[other]))} with that {other}, or {other} ≥ "
                                f"{_num(least(values[name]))}")
            error.keys = (name, other)  # for a caller that names one of them (the server's 400)
            raise error


def load(*, path: str | os.PathLike | None = None, env: Mapping[str, str] | None = None,
         overrides: Mapping[str, Any] | None = None) -> Settings:
    """Resolve every setting from its four sources.

    Parameters
    ----------
    path : path, optional
        The config file (default :func:`config_path`). A missing file is no error.
    env : mapping, optional
        The environment (default ``os.environ``).
    overrides : mapping, optional
        ``{"chat.analysis_workers": 3}`` from the command line or the API; strings are
        parsed as the environment's are.

    Raises
    ------
    ConfigError
        An unknown key, a value of the wrong type or out of range, values that do not go
        together (:data:`RELATIONS`), a file that is not TOML; the message names the
        source and the accepted values.
    """
    if env is None and path is None and not overrides:
        # The settings of this process's own file and environment are resolved again only
        # when either changed: a renderer window reads them on every page, and resolving
        # every key costs more than the window's own reads.
        held = _LOADED.get("memo")
        if held is not None and held.holds():
            return _LOADED["settings"]
        memo = _Memo.now()
        settings = load(path=memo.file if memo is not None else config_path(), env=os.environ)
        _LOADED.update(memo=memo, settings=settings)
        return settings
    env = os.environ if env is None else env
    _warn_unknown_variables(env)
    file = pathlib.Path(path) if path is not None else config_path(env)
    values = {name: key.default for name, key in KEYS.items()}
    sources = dict.fromkeys(KEYS, "default")
    for name, value in _read_file(file).items():
        if name not in KEYS:
            raise _unknown(name, f"file {file}")
        values[name] = KEYS[name].check(value, f"file {file}", parse=False)
        sources[name] = f"file {file}"
    for name, key in KEYS.items():
        if key.env in env:
            values[name] = key.check(env[key.env], f"environment {key.env}")
            sources[name] = f"environment {key.env}"
    for name, value in (overrides or {}).items():
        if name not in KEYS:
            raise _unknown(name, "an override")
        values[name] = KEYS[name].check(value, "an override")
        sources[name] = "override"
    check_relations(values, sources.__getitem__)
    return Settings(values, sources)


#: The last settings :func:`load` resolved from the process's own file and environment,
#: and what they were resolved from.
_LOADED: dict[str, Any] = {}


class _Memo:
    """What the process's settings are a function of: its environment (a copy of the raw
    table) and the config file's identity and times. :meth:`holds` compares them with
    the process as it is now in a few microseconds (a dict compare in C and one
    ``stat``): a renderer window asks on every page."""

    __slots__ = ("env", "file", "stamp")

    def __init__(self, env: dict, file: str, stamp: tuple | None) -> None:
        self.env = env
        self.file = file
        self.stamp = stamp

    @staticmethod
    def _raw_env() -> Mapping:
        raw = getattr(os.environ, "_data", None)
        return raw if isinstance(raw, dict) else os.environ

    @staticmethod
    def _stamp(file: str) -> tuple | None:
        """The file's identity and times, None when it is absent; OSError otherwise."""
        try:
            st = os.stat(file)
        except FileNotFoundError:
            return None
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    @classmethod
    def now(cls) -> _Memo | None:
        """The process as it is now (None when the file's state cannot be said)."""
        env = dict(cls._raw_env())
        file = str(config_path())
        try:
            return cls(env, file, cls._stamp(file))
        except OSError:
            return None

    def holds(self) -> bool:
        # The path is a function of the environment alone, so it is not derived again.
        if self.env != self._raw_env():
            return False
        try:
            return self._stamp(self.file) == self.stamp
        except OSError:
            return False


def resolve(settings: Mapping[str, Any] | None) -> Settings:
    """``settings`` as complete, checked :class:`Settings`.

    Resolved settings are returned as they are; a partial mapping such as
    ``{"chat.analysis_workers": 0}`` is applied over :func:`load` (as overrides, so
    every value is checked and an unknown key is refused up front, not mid-reply);
    None is :func:`load`.
    """
    if isinstance(settings, Settings):
        return settings
    return load(overrides=settings)


def schema() -> list[dict[str, Any]]:
    """Every key as a settings screen needs it: name, label, type, default, accepted values
    (``minimum``/``maximum``/``exclusive_minimum`` or ``choices``), environment name, help."""
    out = []
    for key in KEYS.values():
        item: dict[str, Any] = {"name": key.name, "label": key.label, "type": key.type, "default": key.default,
                                "env": key.env, "help": key.help, "accepted": key.accepted()}
        for attr in ("minimum", "maximum", "choices"):
            if getattr(key, attr) is not None:
                item[attr] = getattr(key, attr)
        if key.exclusive_minimum:
            item["exclusive_minimum"] = True
        out.append(item)
    return out


def write_value(name: str, value: Any, *, path: str | os.PathLike | None = None) -> pathlib.Path:
    """Check ``value`` and store it under ``name`` in the config file, changing only that
    key's line(s): every comment, blank line, key order and other setting of the file
    stays as it was. A key the file lacks goes after the last key of its table (a new
    table at the end). The file is replaced whole or not at all, keeping its permissions.

    Returns
    -------
    pathlib.Path
        The file written.

    Raises
    ------
    ConfigError
        An unknown key or a value out of range (or out of step with another value in the
        file, :data:`RELATIONS`); a file that is already wrong; a file where the key cannot
        be changed without rewriting more than its own lines (an inline table, say): the
        message names the file and what to do. The file is left as it was.
    """
    if name not in KEYS:
        raise _unknown(name, "config set")
    file = pathlib.Path(path) if path is not None else config_path()
    value = KEYS[name].check(value, "config set")
    if os.fspath(file) == os.devnull:  # read as "no config file"; never replaced
        raise ConfigError(f"the config file is {os.devnull} (no config file): nothing can be stored there; set "
                          "BOUNDCTX_CONFIG to a file's path")
    text = _file_text(file)
    current = _read_file(file, text)
    for other, v in current.items():  # refuse to rewrite a file that is already wrong
        if other not in KEYS:
            raise _unknown(other, f"file {file}")
        KEYS[other].check(v, f"file {file}", parse=False)
    current[name] = value
    # The file's values must go together (the environment may still change them).
    check_relations({**{n: k.default for n, k in KEYS.items()}, **current},
                    lambda n: "config set" if n == name else f"file {file}" if n in current else "default")
    group, key = name.split(".", 1)
    try:
        new = _tomledit.set_value(text or "", group, key, value)
    except UnicodeEncodeError:
        raise ConfigError(f"{name} = {value!r} (from config set) is not text that can be stored (it holds "
                          "bytes that are not UTF-8)") from None
    except _tomledit.CannotEditInPlace as exc:
        raise ConfigError(f"cannot set {name} in {str(file)!r} by changing only its own line: {exc}. Nothing was "
                          f"written; edit the file by hand (for example `{key} = {_tomledit.render(value)}` under "
                          f"[{group}]), or move it away and run `boundctx config set` again") from None
    try:
        mode: int | None = stat.S_IMODE(os.stat(file).st_mode)
    except OSError:
        mode = None  # a new file: 0666 less the umask, as open() makes it
    file.parent.mkdir(parents=True, exist_ok=True)
    with replacing(file, mode=mode) as f:  # the old file or the new one, never half of either
        f.write(new.encode("utf-8"))
    return file
