"""Exact token counts from a remote llama.cpp ``llama-server``, through its HTTP API.

A chat request is counted the way the server itself counts it: the server renders the
messages with its own chat template (``POST /apply-template``), then tokenizes that
prompt (``POST /tokenize``) with the same switches its chat path uses. Text on its own
is tokenized with special tokens off, so ``<|im_end|>`` typed by a user is text. Servers
that lack these endpoints get the conservative byte estimate instead, and say so.

What this relies on (llama.cpp ``tools/server/server-context.cpp``, ``server-common.cpp``,
``common/chat.cpp`` and ``tools/server/README.md``; older builds kept the server in
``examples/server/server.cpp``):

- ``POST /tokenize`` reads ``content``, ``add_special`` (default false: no BOS/EOS),
  ``parse_special`` (default true) and ``with_pieces`` (default false). It answers
  ``{"tokens": [id, ...]}``, or with pieces ``{"tokens": [{"id": id, "piece": p}, ...]}``
  where ``p`` is a string when the piece's bytes are valid UTF-8 on their own and a
  list of byte values otherwise (the README's example: ``á`` on a byte-level vocabulary
  comes back as ``[195]`` then ``[161]``). Pieces are rendered with special tokens shown.
- ``parse_special`` only exists since llama.cpp PR #14783 (July 2025); earlier builds
  always turn special-token text into special tokens, whatever the request says. The
  counter probes for this once and warns, since text counts can then come out low.
- ``POST /apply-template`` runs the chat-completions request parser
  (``oaicompat_chat_params_parse``) and returns its ``{"prompt": ...}`` without
  inference, so it takes what a chat request takes: ``messages``, ``tools``,
  ``add_generation_prompt`` (default true) and ``chat_template_kwargs``. The README
  documents only ``messages``. Tools on a build started without ``--jinja`` are refused
  (``"tools param requires --jinja flag"``), exactly as a chat request would be.
- BOS: after rendering, llama.cpp drops a leading BOS text from the prompt when the
  vocabulary adds BOS itself (``llama_vocab_get_add_bos``), then the chat path tokenizes
  the prompt with ``add_special=true, parse_special=true``. ``/tokenize`` with those two
  switches therefore yields the chat request's token count, BOS included or not as the
  model's metadata says.
- ``GET /props`` gives ``default_generation_settings.n_ctx``, the context of one slot
  (by default the server's ``-c`` shared out among its ``total_slots``, so it can be
  smaller than ``-c``), plus ``total_slots``, ``chat_template``, ``bos_token``, ``eos_token``,
  ``model_path`` and ``build_info``.
- Errors come back as ``{"error": {"code": ..., "message": ..., "type": ...}}``.
- ``python -m llama_cpp.server`` (llama-cpp-python 0.3.36) has none of ``/props``,
  ``/tokenize`` and ``/apply-template``: each answers 404 (checked by running it).
"""

from __future__ import annotations

import sys
import threading
import types
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import msgspec
import numpy as np

from boundctx._http import bearer, error_detail, map_httpx_exceptions, server_root
from boundctx.errors import ConfigError, InexactCountWarning, ServerResponseError
from boundctx.tokens.base import Message, TokenCounter
from boundctx.tokens.estimate import ByteEstimateCounter
from boundctx.tokens.llama import align_pieces

__all__ = ["LlamaServerCounter", "LlamaServerProps"]


class LlamaServerProps(msgspec.Struct, frozen=True):
    """What a llama-server's ``GET /props`` says, in the fields boundctx uses.

    Attributes
    ----------
    n_ctx : int or None
        Tokens one request may hold: the context of one slot (None if not reported).
    total_slots : int
        Parallel slots the server's context is divided among.
    chat_template : str
        The Jinja chat template the server renders prompts with.
    bos_token, eos_token : str
        The text of the model's BOS and EOS tokens.
    model_path, build_info : str
        The model file and the llama.cpp build, for reports.
    """

    n_ctx: int | None
    total_slots: int
    chat_template: str
    bos_token: str
    eos_token: str
    model_path: str
    build_info: str


# -- wire shapes (unknown fields are ignored) ----------------------------------------


class _GenerationSettings(msgspec.Struct):
    n_ctx: int | None = None


class _Props(msgspec.Struct):
    # No default: a body without it is not a llama-server's /props.
    default_generation_settings: _GenerationSettings
    total_slots: int = 1
    chat_template: str | None = None
    bos_token: str | None = None
    eos_token: str | None = None
    model_path: str | None = None
    build_info: str | None = None


class _Prompt(msgspec.Struct):
    prompt: str


class _TokenIds(msgspec.Struct):
    tokens: list[int]


class _Piece(msgspec.Struct):
    id: int
    piece: str | list[int]


class _TokenPieces(msgspec.Struct):
    tokens: list[_Piece]


class _EndpointMissing(Exception):
    """An endpoint answered 404/405: the server is not (this version of) llama-server."""


_SERVER = "server"
_ESTIMATE = "estimate"
_PROBE_MESSAGES = [{"role": "user", "content": "x"}]


def _stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the first caller outside boundctx
    (the user's code, not the counter or a cache built on it)."""
    frame: types.FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and str(frame.f_globals.get("__name__")).partition(".")[0] == "boundctx":
        frame, level = frame.f_back, level + 1
    return level


class LlamaServerCounter(TokenCounter):
    """Token counts from a llama.cpp ``llama-server``: exact, or a conservative estimate
    when the server has no tokenizer endpoints.

    The first use probes the server (``GET /props``, one tiny ``/apply-template`` and
    two ``/tokenize`` calls) and remembers what it found; :meth:`refresh` forgets it.
    When the server lacks ``/props``, ``/apply-template`` or ``/tokenize`` (an older
    llama-server, ``python -m llama_cpp.server``, vLLM, ...) every count comes from a
    :class:`~boundctx.tokens.ByteEstimateCounter`, :attr:`exact` is False,
    :attr:`fallback_reason` says why, and one :class:`InexactCountWarning` is
    issued per counter. Counting never silently mixes exact and estimated numbers.

    Parameters
    ----------
    base_url : str
        The server's address, e.g. ``"http://127.0.0.1:8080"``. The OpenAI base URL
        of the same server (ending in ``/v1``) is accepted too: llama-server serves
        these endpoints at its root.
    timeout : float
        Seconds to wait for the connection and for each answer.
    api_key : str, optional
        Sent as ``Authorization: Bearer ...`` (llama-server's ``--api-key``).
    chat_template_kwargs : mapping, optional
        Extra template variables sent with every render, as your chat requests send
        them (e.g. ``{"enable_thinking": False}``); they change the prompt.
    estimate : ByteEstimateCounter, optional
        The estimate to fall back on (a calibrated one, say); default: a new one.
    client : httpx.Client, optional
        A client to send requests with (its own base URL and timeout are ignored);
        the counter then leaves closing it to you.

    Attributes
    ----------
    url : str
        The server's root URL (a trailing ``/v1`` removed).
    estimate : ByteEstimateCounter
        The estimate counts come from after a fallback; ``observe`` with the ``usage``
        your chat responses report keeps it safe (it never lowers it: decision 0016).
    fallback_reason : str or None
        Why counts are estimated (which endpoint answered what); None while exact.
    text_counts_exact : bool
        False on builds that ignore ``parse_special`` (llama.cpp before PR #14783):
        their ``count_text`` and ``piece_bytes`` read special-token text such as
        ``<|im_end|>`` as the special token. Prompt counts are unaffected.

    Raises
    ------
    ConfigError
        For a URL that is not http(s) or a timeout that is not positive.

    Notes
    -----
    Counting methods raise :class:`ServerUnreachable` (refused, unknown host, reset),
    :class:`ServerTimeout` (no answer in time; also a ``TimeoutError``) or
    :class:`ServerResponseError` (an error status other than 404/405, or a body
    without the documented shape); a failed probe is retried on the next call.

    A request ending with an assistant message is treated by recent servers as a
    prefill (no generation prompt, last turn left open): the count follows the server.

    Examples
    --------
    With ``llama-server -m SmolLM2-135M-Instruct.gguf -c 8192 -np 2``:

    >>> counter = LlamaServerCounter("http://127.0.0.1:8080")   # doctest: +SKIP
    >>> counter.count_prompt([{"role": "user", "content": "hi"}])  # doctest: +SKIP
    31
    >>> counter.context_window  # one slot's share of -c  # doctest: +SKIP
    4096
    """

    def __init__(self, base_url: str, *, timeout: float = 30.0, api_key: str | None = None,
                 chat_template_kwargs: Mapping[str, Any] | None = None,
                 estimate: ByteEstimateCounter | None = None,
                 client: httpx.Client | None = None) -> None:
        if not (timeout > 0):
            raise ConfigError(f"timeout must be > 0 seconds, got {timeout!r}")
        self.url = server_root(base_url, what="the llama-server URL")
        self.timeout = float(timeout)
        self.chat_template_kwargs = dict(chat_template_kwargs) if chat_template_kwargs else None
        self.estimate = estimate if estimate is not None else ByteEstimateCounter()
        self._own_client = client is None
        self._client = client if client is not None else httpx.Client(timeout=self.timeout)
        self._headers = bearer(api_key)
        self._lock = threading.Lock()
        self._mode: str | None = None
        self._props: LlamaServerProps | None = None
        self.fallback_reason: str | None = None
        #: False when the server ignores ``parse_special`` (llama.cpp before PR #14783).
        self.text_counts_exact = True

    # -- lifecycle ----------------------------------------------------------------

    def close(self) -> None:
        """Close the HTTP connections (only those of a client the counter created)."""
        if self._own_client:
            self._client.close()

    def __enter__(self) -> LlamaServerCounter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = {None: "not probed yet", _SERVER: "exact", _ESTIMATE: "estimate"}[self._mode]
        return f"LlamaServerCounter({self.url!r}, {state})"

    def refresh(self) -> None:
        """Forget what the server said (window, template, endpoints): the next use
        probes it again, e.g. after it was restarted with another ``-c``."""
        with self._lock:
            self._mode = None
            self._props = None
            self.fallback_reason = None
            self.text_counts_exact = True

    # -- what the server says -----------------------------------------------------

    @property
    def exact(self) -> bool:  # type: ignore[override]
        """True when counts come from the server's tokenizer; False once the counter
        fell back on the byte estimate (probes the server on first use)."""
        return self._resolve() == _SERVER

    @property
    def props(self) -> LlamaServerProps | None:
        """The server's ``/props`` (cached), or None for a server without them."""
        self._resolve()
        return self._props

    @property
    def context_window(self) -> int | None:
        """Tokens one request may hold: ``default_generation_settings.n_ctx``, the
        per-slot context (cached; None when the server does not report it)."""
        props = self.props
        return props.n_ctx if props is not None else None

    @property
    def total_slots(self) -> int | None:
        """Parallel slots sharing the server's context (None when unknown)."""
        props = self.props
        return props.total_slots if props is not None else None

    @property
    def chat_template(self) -> str | None:
        """The chat template the server renders with (None when unknown)."""
        props = self.props
        return props.chat_template if props is not None else None

    # -- counting -----------------------------------------------------------------

    def count_text(self, text: str) -> int:
        """Tokens of ``text`` alone: no BOS, special-token text counted as text.

        Raises
        ------
        UnicodeEncodeError
            For text with lone surrogates, which cannot be sent as JSON.
        """
        if not text:
            return 0
        if self._resolve() == _SERVER:
            try:
                return len(self._tokenize(text, add_special=False, parse_special=False).tokens)
            except _EndpointMissing as exc:
                self._fall_back(str(exc))
        return self.estimate.count_text(text)

    def count_prompt(self, messages: Sequence[Message], *,
                     tools: Sequence[Mapping[str, Any]] | None = None,
                     add_generation_prompt: bool = True) -> int:
        """Tokens the server will process for a chat request with ``messages`` (and
        ``tools``): its own template, rendered and tokenized as its chat path does.

        Raises
        ------
        ServerResponseError
            When the server refuses the render (a malformed message; tools on a server
            started without ``--jinja``), with the server's own message.
        """
        if self._resolve() == _SERVER:
            try:
                prompt = self._apply_template(messages, tools=tools,
                                              add_generation_prompt=add_generation_prompt)
                return len(self._tokenize(prompt, add_special=True, parse_special=True).tokens)
            except _EndpointMissing as exc:
                self._fall_back(str(exc))
        return self.estimate.count_prompt(messages, tools=tools,
                                          add_generation_prompt=add_generation_prompt)

    def piece_bytes(self, text: str) -> np.ndarray:
        """UTF-8 byte length of each of ``text``'s tokens, from the server's pieces.

        Pieces arrive as strings or, when not valid UTF-8 alone, as byte lists; their
        bytes must tile the text. Where llama.cpp changed the text (it drops some
        control characters, rewrites unassigned code points) the pieces are aligned
        with it as for the local model (:func:`boundctx.tokens.llama.align_pieces`).

        Raises
        ------
        ServerResponseError
            When the pieces cannot be aligned with the text at all: inventing token
            boundaries would silently break every span computed from them, so this
            is an error rather than a fallback.
        UnicodeEncodeError
            For text with lone surrogates, which cannot be sent as JSON.
        """
        raw = text.encode("utf-8")
        if not raw:
            return np.empty(0, dtype=np.int64)
        if self._resolve() == _SERVER:
            try:
                answer = self._tokenize(text, add_special=False, parse_special=False,
                                        with_pieces=True)
            except _EndpointMissing as exc:
                self._fall_back(str(exc))
            else:
                return self._tile(raw, answer.tokens)
        return self.estimate.piece_bytes(text)

    def _tile(self, raw: bytes, tokens: list[_Piece]) -> np.ndarray:
        try:
            pieces = [p.piece.encode("utf-8") if isinstance(p.piece, str) else bytes(p.piece)
                      for p in tokens]
        except ValueError:  # a "byte" outside 0..255
            raise ServerResponseError(
                f"{self.url}/tokenize returned a piece with byte values outside 0..255") from None
        lengths = np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces))
        if int(lengths.sum()) == len(raw) and b"".join(pieces) == raw:
            return lengths
        try:
            return np.asarray(align_pieces(raw, pieces), dtype=np.int64)
        except ValueError as exc:
            raise ServerResponseError(
                f"the token pieces from {self.url}/tokenize do not match the text sent ({exc}); "
                "a proxy may be rewriting the text, or the server mis-renders pieces") from None

    # -- probing and fallback -----------------------------------------------------

    def _resolve(self) -> str:
        mode = self._mode
        if mode is not None:
            return mode
        with self._lock:
            if self._mode is None:
                try:
                    caveat = self._probe()
                except _EndpointMissing as exc:
                    self._fall_back_locked(str(exc))
                else:
                    # Decided before warning: a warning turned into an error must not
                    # make every later call probe again.
                    self._mode = _SERVER
                    if caveat:
                        warnings.warn(caveat, InexactCountWarning, stacklevel=_stacklevel())
            return self._mode  # type: ignore[return-value]

    def _probe(self) -> str | None:
        """Ask the server what it is; returns a caveat to warn about, if any.

        Raises ``_EndpointMissing`` for a server without llama-server's endpoints."""
        try:
            wire = msgspec.json.decode(self._request("GET", "/props", None, None), type=_Props)
        except msgspec.DecodeError:
            # Another kind of server that happens to answer /props (or a web UI that
            # answers every path): not one whose tokenizer we can ask.
            raise _EndpointMissing("GET /props does not answer llama-server's properties "
                                   "(no default_generation_settings)") from None
        self._props = LlamaServerProps(
            n_ctx=wire.default_generation_settings.n_ctx,
            total_slots=wire.total_slots,
            chat_template=wire.chat_template or "",
            bos_token=wire.bos_token or "",
            eos_token=wire.eos_token or "",
            model_path=wire.model_path or "",
            build_info=wire.build_info or "",
        )
        self._apply_template(_PROBE_MESSAGES, tools=None, add_generation_prompt=True)
        marker = self._props.eos_token or self._props.bos_token
        if marker:
            # A build that ignores parse_special turns this special token's text into
            # the one special token; a build that honours it splits the text.
            as_text = self._tokenize(marker, add_special=False, parse_special=False).tokens
            as_special = self._tokenize(marker, add_special=False, parse_special=True).tokens
            if len(as_special) == 1 and as_text == as_special:
                self.text_counts_exact = False
                return (f"the llama-server at {self.url} ignores parse_special (llama.cpp before "
                        f"PR #14783, July 2025): text containing special-token strings such as "
                        f"{marker!r} counts as those tokens, fewer than the text's own; prompt "
                        "counts stay exact. Upgrade llama-server for exact text counts.")
        return None

    def _fall_back(self, reason: str) -> None:
        with self._lock:
            self._fall_back_locked(reason)

    def _fall_back_locked(self, reason: str) -> None:
        if self._mode == _ESTIMATE:
            return
        self._mode = _ESTIMATE
        self.fallback_reason = reason
        warnings.warn(
            f"no exact token counts from {self.url}: {reason}. Counting with the "
            "conservative byte estimate instead (never fewer tokens than the model sees, "
            "often several times more); point the counter at a llama.cpp llama-server "
            "for exact counts.", InexactCountWarning, stacklevel=_stacklevel())

    # -- HTTP edge ----------------------------------------------------------------

    def _apply_template(self, messages: Sequence[Message], *,
                        tools: Sequence[Mapping[str, Any]] | None,
                        add_generation_prompt: bool) -> str:
        body: dict[str, Any] = {"messages": [dict(m) for m in messages],
                                "add_generation_prompt": add_generation_prompt}
        if tools:
            body["tools"] = [dict(t) for t in tools]
        if self.chat_template_kwargs:
            body["chat_template_kwargs"] = self.chat_template_kwargs
        return self._request("POST", "/apply-template", body, _Prompt).prompt

    def _tokenize(self, content: str, *, add_special: bool, parse_special: bool,
                  with_pieces: bool = False) -> Any:
        body = {"content": content, "add_special": add_special,
                "parse_special": parse_special, "with_pieces": with_pieces}
        return self._request("POST", "/tokenize", body, _TokenPieces if with_pieces else _TokenIds)

    def _request(self, method: str, path: str, body: Any, shape: type | None) -> Any:
        """Send one request; decode a 2xx body as ``shape`` (the raw bytes for None)."""
        # Encoding first: a text msgspec cannot send fails before any connection.
        content = msgspec.json.encode(body) if body is not None else None
        headers = dict(self._headers)
        if content is not None:
            headers["Content-Type"] = "application/json"
        with map_httpx_exceptions(self.url, self.timeout, during="request", request=f"{method} {path}"):
            response = self._client.request(method, self.url + path, content=content,
                                            headers=headers, timeout=self.timeout)
        status = response.status_code
        if status in (404, 405):
            raise _EndpointMissing(f"{method} {path} answered {status} (the server has no such "
                                   "endpoint: not a llama.cpp llama-server, or an older build)")
        if status >= 400:
            raise ServerResponseError(self._status_message(method, path, response))
        if shape is None:
            return response.content
        try:
            return msgspec.json.decode(response.content, type=shape)
        except msgspec.DecodeError as exc:
            raise ServerResponseError(
                f"{method} {self.url}{path} answered {status} with a body without the "
                f"documented shape ({exc})") from None

    def _status_message(self, method: str, path: str, response: httpx.Response) -> str:
        status = response.status_code
        said, _ = error_detail(response)
        text = f"{method} {self.url}{path} failed with HTTP {status}: {said}"
        if status in (401, 403):
            text += " (pass api_key= with the key the server was started with, --api-key)"
        elif status == 503:
            text += " (the server is still loading its model or is overloaded: try again)"
        elif "--jinja" in said:
            text += " (start llama-server with --jinja to send tools)"
        return text
