"""Reading request bodies: what is accepted, and the 400 for the rest.

On ``POST /v1/chat/completions`` every field of OpenAI's that changes the answer is
honoured (sampling, ``stop``, ``tool_choice``, ``response_format``...) or, where boundctx
cannot honour it, refused at any value but its neutral one with the field named
(:data:`REFUSED`, ``n > 1``, image parts, a tool message with no id): nothing a client
asks for is dropped without a word; so are OpenAI's legacy ``functions`` and other
servers' fields that change an answer (:data:`EXTRAS`: ``grammar``, ``guided_json``,
``repeat_penalty``...). Fields that only label a request (``user``, ``metadata``,
``store``, ``service_tier``) are ignored, as OpenAI-compatible servers do; the README's
table lists every field. boundctx's own routes
refuse unknown fields: no front end sends them by habit, and a misspelt option ignored is
a surprise.
"""

from __future__ import annotations

from typing import Any

import msgspec

from boundctx.serve.http import ApiError

__all__ = ["EXTRAS", "REFUSED", "SAMPLING_RANGES", "BadRequest", "ChatCompletionRequest", "CountRequest",
           "SessionCreateRequest", "SessionPatchRequest", "SessionReplyRequest", "UnderstandRequest",
           "check_messages", "check_tools", "decode", "parse_chat_request", "parse_count_request",
           "parse_session_reply", "response_schema"]

_ROLES = ("system", "developer", "user", "assistant", "tool")


class BadRequest(ApiError, ValueError):
    """A request boundctx will not run (400); ``param`` names the field."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(400, message, code, param)


class StreamOptions(msgspec.Struct, forbid_unknown_fields=False):
    include_usage: bool = False


class ChatCompletionRequest(msgspec.Struct, forbid_unknown_fields=False):
    model: str
    messages: list[dict[str, Any]]
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float | None = None
    n: int = 1
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    #: Checked and made a list (or None) by :func:`parse_chat_request`.
    stop: str | list[str] | None = None
    # Sampling (boundctx.providers.base.Sampling); top_k and min_p are llama.cpp's.
    seed: int | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    #: Made a JSON schema (or None) by :func:`parse_chat_request`.
    response_format: Any = None
    # Refused unless neutral (REFUSED): accepted here so the refusal can name them.
    logprobs: bool | None = None
    top_logprobs: int | None = None
    logit_bias: dict[str, float] | None = None
    modalities: list[str] | None = None
    audio: Any = None
    prediction: Any = None
    # OpenAI's legacy function calling, and other servers' fields that change an answer
    # (EXTRAS): refused unless neutral, never ignored.
    functions: Any = None
    function_call: Any = None
    grammar: Any = None
    json_schema: Any = None
    guided_json: Any = None
    guided_regex: Any = None
    guided_choice: Any = None
    guided_grammar: Any = None
    repeat_penalty: Any = None
    repetition_penalty: Any = None
    typical_p: Any = None
    tfs_z: Any = None
    mirostat: Any = None
    min_tokens: Any = None
    ignore_eos: Any = None
    best_of: Any = None
    use_beam_search: Any = None
    n_predict: Any = None


#: Sampling fields and their accepted ranges (OpenAI's; llama.cpp's for top_k, min_p).
SAMPLING_RANGES: dict[str, tuple[float, float]] = {
    "seed": (-(2**63), 2**63 - 1), "top_p": (0.0, 1.0), "top_k": (0, 2**31 - 1), "min_p": (0.0, 1.0),
    "presence_penalty": (-2.0, 2.0), "frequency_penalty": (-2.0, 2.0)}

#: Fields of OpenAI's chat completions that boundctx serve does not honour, and why. Each
#: is accepted at its neutral value (what a client sends when it means "none") and
#: refused with a 400 naming it otherwise: never taken and dropped.
REFUSED: dict[str, str] = {
    "logprobs": "token log-probabilities are not returned; send logprobs false or leave it out",
    "top_logprobs": "token log-probabilities are not returned; leave top_logprobs out",
    "logit_bias": "token ids are each model's own, and a bias is not applied; leave logit_bias out",
    "modalities": "boundctx serve answers in text only; send [\"text\"] or leave modalities out",
    "audio": "boundctx serve answers in text only; leave audio out",
    "prediction": "predicted outputs are not used; leave prediction out",
}


_SCHEMA = "hold the answer to a JSON schema with response_format"
#: Fields that OpenAI's legacy API or other servers (llama.cpp's, vLLM's) read and that
#: change an answer, with the values that mean "none" (besides absent or null) and what
#: to send instead: a client that sends one expects its effect, so it is refused, not
#: ignored as the fields that only label a request are.
EXTRAS: dict[str, tuple[tuple[Any, ...], str]] = {
    "functions": ((), "the legacy function API is not read; send the functions as tools"),
    "function_call": ((), "the legacy function API is not read; send tool_choice (with tools)"),
    "grammar": ((), f"a llama.cpp grammar is not applied; {_SCHEMA}"),
    "json_schema": ((), f"llama.cpp's json_schema field is not read; {_SCHEMA}"),
    "guided_json": ((), f"vLLM's guided decoding is not applied; {_SCHEMA}"),
    "guided_regex": ((), "vLLM's guided decoding is not applied; hold a string to a pattern with "
                         "response_format"),
    "guided_choice": ((), f"vLLM's guided decoding is not applied; {_SCHEMA} (an enum)"),
    "guided_grammar": ((), f"vLLM's guided decoding is not applied; {_SCHEMA}"),
    "repeat_penalty": ((1, 1.0), "not applied per request; send frequency_penalty or presence_penalty, or set "
                                 "local.repeat_penalty for the server"),
    "repetition_penalty": ((1, 1.0), "not applied; send frequency_penalty or presence_penalty"),
    "typical_p": ((1, 1.0), "locally typical sampling is not applied; send top_p or min_p"),
    "tfs_z": ((1, 1.0), "tail-free sampling is not applied; send top_p or min_p"),
    "mirostat": ((0, False), "mirostat sampling is not applied; send temperature and top_p"),
    "min_tokens": ((0,), "a least reply length is not applied"),
    "ignore_eos": ((False,), "the model's end of text always ends the reply"),
    "best_of": ((1,), "one reply is generated; send best_of 1 or leave it out"),
    "use_beam_search": ((False,), "beam search is not applied"),
    "n_predict": ((), "send max_tokens (or max_completion_tokens)"),
}


class SessionReplyRequest(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /boundctx/v1/sessions/{id}/replies``: boundctx's own route, so a field it
    does not know is refused rather than ignored."""

    content: str
    history: int = 50
    max_tokens: int | None = None
    temperature: float | None = None
    #: As on chat completions: checked and made a list (or None).
    stop: str | list[str] | None = None
    save: bool = True


class SessionCreateRequest(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /boundctx/v1/sessions``: an id to create (checked as a session id by the
    route, so any JSON value is taken here), or none for a random one; with
    ``continue_from``, the session whose newest ``history`` messages the new one starts
    with (as a reply on it would read them)."""

    id: Any = None
    continue_from: Any = None
    history: int | None = None  # with continue_from only; 50 when it is left out


class SessionPatchRequest(msgspec.Struct, forbid_unknown_fields=True):
    """``PATCH /boundctx/v1/sessions/{id}``: the session's title (``""`` clears it)."""

    title: str


class CountRequest(msgspec.Struct, forbid_unknown_fields=True):
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None


class UnderstandRequest(msgspec.Struct, forbid_unknown_fields=True):
    message: str
    catalog: dict[str, Any] | None = None
    bfcl: list[dict[str, Any]] | None = None
    records: list[dict[str, Any]] = []
    click: dict[str, Any] | None = None
    single_call: bool = False


#: The most history a session reply starts from (the window read before fitting).
HISTORY_MAX = 1000
#: The most stop strings a request may give: OpenAI's API takes up to 4, and a client
#: written for it sends no more.
STOP_MAX = 4


def decode(body: bytes, type: Any) -> Any:
    """``body`` as ``type``, or a :class:`BadRequest` naming the field."""
    try:
        return msgspec.json.decode(body, type=type)
    except msgspec.ValidationError as exc:
        where = str(exc).rpartition(" - at `$.")[2].rstrip("`") or None
        raise BadRequest(f"invalid request: {exc}", param=where) from None
    except (msgspec.DecodeError, RecursionError):
        raise BadRequest("the request body is not valid JSON") from None


def parse_session_reply(body: bytes) -> SessionReplyRequest:
    req = decode(body, SessionReplyRequest)
    if not req.content.strip():
        raise BadRequest("content is empty: send the question to answer", param="content")
    if not 0 <= req.history <= HISTORY_MAX:
        raise BadRequest(f"history must be 0 to {HISTORY_MAX} messages, got {req.history}", param="history")
    _check_options(req)
    return req


def parse_count_request(body: bytes) -> CountRequest:
    req = decode(body, CountRequest)
    req.messages = check_messages(req.messages)
    check_tools(req.tools)
    return req


def _check_options(req: Any) -> None:
    for name in ("max_tokens", "max_completion_tokens"):
        value = getattr(req, name, None)
        if value is not None and value < 1:
            raise BadRequest(f"{name} must be at least 1, got {value}", param=name)
    if req.temperature is not None and not 0 <= req.temperature <= 2:
        raise BadRequest(f"temperature must be between 0 and 2, got {req.temperature}", param="temperature")
    req.stop = _stop(req.stop)


def _stop(stop: str | list[str] | None) -> list[str] | None:
    """``stop`` as a list of stop strings, None for none (its type is checked by the
    decoder, which names the item at fault)."""
    if stop is None:
        return None
    if isinstance(stop, str):
        if not stop:
            raise BadRequest("stop is an empty string; a stop string needs at least one character (or send no "
                             "stop)", param="stop")
        return [stop]
    if len(stop) > STOP_MAX:
        raise BadRequest(f"stop holds {len(stop)} strings; at most {STOP_MAX} are accepted", param="stop")
    for i, s in enumerate(stop):
        if not s:
            raise BadRequest(f"stop[{i}] is an empty string; a stop string needs at least one character",
                             param=f"stop[{i}]")
    return stop or None


def check_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` in the plain form the engine takes: one message at least, of any
    role, as OpenAI's API takes them (a title request sends a system message alone)."""
    if not messages:
        raise BadRequest("messages is empty: send at least one message", param="messages")
    return [_message(m, i) for i, m in enumerate(messages)]


def check_tools(tools: list[dict[str, Any]] | None) -> None:
    for i, tool in enumerate(tools or ()):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise BadRequest("each tool needs {\"type\": \"function\", \"function\": {\"name\": ...}}",
                             param=f"tools[{i}]")


def parse_chat_request(body: bytes) -> ChatCompletionRequest:
    """The checked request, its messages in the plain form the engine takes.

    Raises
    ------
    BadRequest
    """
    req = decode(body, ChatCompletionRequest)
    if req.n != 1:
        raise BadRequest(f"n = {req.n}: boundctx serve returns one choice; send n = 1", param="n")
    neutral = {"logprobs": req.logprobs in (None, False), "top_logprobs": req.top_logprobs in (None, 0),
               "logit_bias": not req.logit_bias, "modalities": req.modalities in (None, ["text"]),
               "audio": req.audio is None, "prediction": req.prediction is None}
    for name, ok in neutral.items():
        if not ok:
            raise BadRequest(f"{name}: {REFUSED[name]}", param=name, code="unsupported_parameter")
    for name, (neutral_values, advice) in EXTRAS.items():
        value = getattr(req, name)
        if value is not None and value not in ([], {}) and not any(value == v and type(value) is type(v)
                                                                   for v in neutral_values):
            raise BadRequest(f"{name}: {advice}", param=name, code="unsupported_parameter")
    for name, (low, high) in SAMPLING_RANGES.items():
        value = getattr(req, name)
        if value is not None and not low <= value <= high:
            raise BadRequest(f"{name} must be between {low:g} and {high:g}, got {value}", param=name)
    req.response_format = response_schema(req.response_format)
    _check_options(req)
    req.messages = check_messages(req.messages)
    check_tools(req.tools)
    return req


def _message(m: dict[str, Any], i: int) -> dict[str, Any]:
    where = f"messages[{i}]"
    role = m.get("role")
    if role not in _ROLES:
        raise BadRequest(f"{where}.role is {role!r}; accepted: {', '.join(_ROLES)}", param=f"{where}.role")
    out: dict[str, Any] = {"role": "system" if role == "developer" else role,
                           "content": _content(m.get("content"), f"{where}.content")}
    if role == "tool":
        call_id = m.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise BadRequest(f"{where} is a tool result without a tool_call_id", param=f"{where}.tool_call_id")
        out["tool_call_id"] = call_id
    if role == "assistant" and m.get("tool_calls"):
        calls = m["tool_calls"]
        if not isinstance(calls, list) or not all(isinstance(c, dict) and isinstance(c.get("function"), dict)
                                                  for c in calls):
            raise BadRequest(f"{where}.tool_calls must be a list of function calls", param=f"{where}.tool_calls")
        for k, call in enumerate(calls):
            _check_arguments(call["function"].get("arguments"), f"{where}.tool_calls[{k}].function.arguments")
        out["tool_calls"] = calls
    if isinstance(m.get("name"), str):
        out["name"] = m["name"]
    return out


def _check_arguments(arguments: Any, where: str) -> None:
    """A call's arguments as OpenAI sends them: a string holding a JSON object. Other
    arguments would reach the model as a call it never made (or fail in a template)."""
    if not isinstance(arguments, str):
        raise BadRequest(f"{where} must be a string of JSON (an object of the arguments), got "
                         f"{type(arguments).__name__}", param=where)
    try:
        parsed = msgspec.json.decode(arguments)
    except (msgspec.DecodeError, RecursionError):
        raise BadRequest(f"{where} is not valid JSON: {arguments[:80]!r}", param=where) from None
    if not isinstance(parsed, dict):
        raise BadRequest(f"{where} must be a JSON object of the arguments, got {type(parsed).__name__}",
                         param=where)


def _content(content: Any, where: str) -> str:
    """Text content: a string, null, or text parts (joined); other parts are refused."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for k, part in enumerate(content):
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            else:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise BadRequest(f"{where}[{k}] is a {kind!r} part; boundctx serve reads text parts only",
                                 param=f"{where}[{k}]")
        return "".join(texts)
    raise BadRequest(f"{where} must be a string or a list of text parts", param=where)


#: The JSON schema of ``{"type": "json_object"}``: any object.
JSON_OBJECT: dict[str, Any] = {"type": "object"}


def response_schema(response_format: Any) -> dict[str, Any] | None:
    """The JSON schema a ``response_format`` holds the answer to: None for ``text`` or
    none, any object for ``json_object``, the given schema for ``json_schema``.

    Raises
    ------
    BadRequest
        Another type, or a ``json_schema`` without a schema object, naming the field.
    """
    if response_format is None:
        return None
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return JSON_OBJECT
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise BadRequest('response_format json_schema needs {"json_schema": {"name": ..., "schema": {...}}}',
                             param="response_format.json_schema")
        return schema
    raise BadRequest(f"response_format type {kind!r} is not accepted: send 'text', 'json_object' or "
                     "'json_schema'", param="response_format.type")
