"""One reply, bounded: fit the conversation, analyse what cannot fit, answer.

:meth:`Engine.reply` yields typed events. Analysis progress
(:class:`~boundctx.events.AnalysisProgress`) and reply text
(:class:`~boundctx.events.ReplyDelta`) never mix, so a voice route that speaks only
``ReplyDelta`` never speaks notes. Every model call is counted against its window
before it is made; a failure that would leave part of the input unread ends the reply
with :class:`~boundctx.events.Failed` rather than an answer from part of it.

A front end that drives an agent offers its own tools with the reply (decision 0020):
the engine adds ``read_chat_section`` for that reply only and answers its calls itself;
a call of one of the caller's tools ends the reply with that call, for the caller to
run and send back as a ``tool`` message.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import re
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from typing import Any, Literal, NamedTuple

import msgspec

from boundctx import config
from boundctx._search import longest_fitting
from boundctx.analysis.fitting import DROPS, fit_conversation
from boundctx.analysis.notes import NoteLedger
from boundctx.analysis.originals import (
    GRAMMAR_UNSAFE,
    MAX_SEARCH_CHARS,
    READ_TOOL_NAME,
    SEARCH_PASSAGE_CHARS,
    Earlier,
    Originals,
    name_originals,
)
from boundctx.analysis.repetition import RepetitionGuard
from boundctx.analysis.stops import StopCut, check_stops
from boundctx.analysis.time_left import TimeLeft
from boundctx.analysis.workers import Notes, iter_read_in_sections
from boundctx.errors import (
    BoundctxError,
    ContextOverflow,
    GenerationError,
    SectionPlanError,
    SectionReadError,
    ToolOfferError,
)
from boundctx.events import CutPrompt, Done, Event, Failed, Fitted, ReplyDelta, Stage, ToolCall, ToolResult
from boundctx.providers.base import Finish, Provider, Sampling, TextChunk, ToolCallChunk, ToolChoice, noting_cuts

__all__ = ["ANSWER_NOTES", "COORDINATOR_NOTES", "Engine"]

COORDINATOR_NOTES = (
    "Part of this conversation was too long to show you whole. It was read completely, section by section, "
    "by note-taking workers; their notes follow, each with the characters of the original it comes "
    "from. Answer in your own words: the notes are for you, not for the answer."
)
_REREAD = (" When an exact string matters (an id, a number, a quote), call read_chat_section with the "
           "original's name and characters the notes give, or with key: the name of what you need (every key the "
           "workers saw can be read this way, even one the notes had no room to list), and answer from what "
           "it returns.")
_NO_GUESS = (" Where a value the answer needs is only indexed (its range without the value) and was not "
             "read again, say it could not be confirmed rather than guess it.")
#: The instructions before notes an answer is written from when no reread can follow it
#: (decision 0044): nothing in them or in the notes is there only for a reread, since
#: what a small model is shown it copies into its answer. Never more tokens than the
#: instructions counted for the notes' room (a test holds it).
ANSWER_NOTES = (
    "Part of this conversation was too long to show you whole. It was read completely, section by section, "
    "by note-taking workers; their notes follow. Answer in your own words: the notes are for you, not for "
    "the answer. Where a value the answer needs is not in the notes, say it could not be confirmed rather "
    "than guess it."
)

#: The constrained step that lets a model without tool calls ask for exact rereads.
REREAD_ASK = (
    "Before you answer: if an exact value the answer needs is not in the notes, but the notes say where "
    "it is, name those characters to be read again exactly, or name the key (any key the workers saw, listed "
    "in the notes or not). Reply with JSON only: "
    '{{"reread": [{{"id": "<the original\'s name>", "start": <first character>, "end": <end character>}}, '
    '{{"id": "<the original\'s name>", "key": "<the key>"}}]}}, '
    'at most {n} in all, or {{"reread": []}} when the notes are enough.{search}'
)
#: Added to :data:`REREAD_ASK` when earlier messages were dropped to fit (decision 0046).
REREAD_ASK_SEARCH = (' To find something said in the earlier messages, which are not shown, add '
                     '{{"id": "{name}", "search": "{example}"}} with the words to look for.')
# Words a search for the question's subject leaves out of its example (see search_example).
_NOT_SEARCHED = frozenset(
    "a an and answer any are as at be been but by can could did do does for from give had has have how i in "
    "is it its me my no not of on only or our please say says tell that the their them then there these this "
    "those to us value was we were what when where which who whom whose why will with would you your".split())


def search_example(question: str) -> str:
    """The example the constrained step is shown for a search (decision 0046): the
    question's own words that say what it is about, in its order, within the longest
    search (:data:`MAX_SEARCH_CHARS`), "what is the door code of project Sharenpim?"
    giving ``door code project Sharenpim``. A small model copies the example it is
    shown; this one is then a search worth making, where ``<a few words>`` was copied
    as it stood."""
    words = [w for w in re.findall(r"[^\W_][\w.\-/]*[^\W_]|[^\W_]", question[:1000])  # a paste's start
             if w.casefold() not in _NOT_SEARCHED and len(w) > 1]
    picked: list[str] = []
    for w in words:
        if len(" ".join(picked + [w])) > MAX_SEARCH_CHARS:
            break
        picked.append(w)
    return GRAMMAR_UNSAFE.sub(" ", " ".join(picked)).strip() or "a few words"


#: What the engine calls the messages dropped to fit when it keeps them to search.
EARLIER_LABEL = "earlier messages"
#: Said where the kept history starts when messages were dropped to fit and can be
#: searched (decision 0046): to a model that calls tools, and to one without (its
#: constrained step is asked to search at the end of its prompt, and its answer, which no
#: search can follow, is given nothing for a search: decision 0044). One text for every
#: call of a reply, and for the turns after it until more is dropped: the prompt's start
#: stays what the model holds.
EARLIER_NOTICE = {
    "tools": ('({n} earlier messages of this conversation are not shown. To find something said in them, call '
              'read_chat_section with section_id "{name}" and search: a few words; it returns the passages '
              "exactly.)"),
    "plain": "({n} earlier messages of this conversation are not shown here.)",
}
#: What a search the constrained step asks for may hold: a few words with no quote,
#: backslash or control character, so its JSON text is the words themselves and its
#: room can be counted (at most 4 bytes a character).
SEARCH_PATTERN = f'^[^"\\\\\\x00-\\x1f\\x7f]{{1,{MAX_SEARCH_CHARS}}}$'
#: Ranges one constrained step may ask for (fewer where its output would not fit).
REREAD_MAX_RANGES = 4
# The widest integer the JSON grammar lets a model write (a sign and 16 digits: the
# schema's minimum is not enforced by llama.cpp's converter), and the one space it allows
# after every token.
_WIDEST_INT = "-" + "9" * 16


#: A key the constrained step's enum may hold: no quote, backslash or control character.
#: llama-cpp-python's server turns a schema's enum into a grammar without escaping these
#: (a key such as ``json.dump({"key"`` made a grammar it could not parse, and the step
#: ran unconstrained); such a key is still read again by the range the notes cite.
_GRAMMAR_SAFE_KEY = re.compile(r'[^"\\\x00-\x1f\x7f]+')


def grammar_safe_keys(keys: Sequence[str]) -> list[str]:
    """The keys the constrained step offers by name (see :data:`_GRAMMAR_SAFE_KEY`)."""
    return [k for k in keys if _GRAMMAR_SAFE_KEY.fullmatch(k)]


def reread_output_room(ids: Sequence[str], ranges: int, keys: Sequence[str] = (), *, search: bool = False) -> int:
    """Tokens the constrained step's answer may take, counted from the real JSON of its
    largest request: ``ranges`` ranges of the longest id, every number at its widest, the
    longest key (escaped, the widest way to write it), every optional space written; with
    ``search``, an item may be a search instead, of :data:`MAX_SEARCH_CHARS` characters
    of 4 bytes each (its pattern leaves nothing to escape). Counted in bytes, one token
    each at least, so it holds on any tokenizer, whatever pieces the model picks (a model
    need not pick the ones its tokenizer would)."""
    # The longest in bytes: names are a file's, in any script.
    longest = max((json.dumps(i, ensure_ascii=False) for i in ids), key=lambda s: len(s.encode()))
    key = f' , "key" : {max((json.dumps(k) for k in keys), key=len)}' if keys else ""
    item = f'{{ "id" : {longest} , "start" : {_WIDEST_INT} , "end" : {_WIDEST_INT}{key} }} '
    if search:
        looked_for = f'{{ "id" : {longest} , "search" : "{"𝕏" * MAX_SEARCH_CHARS}" }} '
        item = max(item, looked_for, key=lambda text: len(text.encode()))
    return len(f'{{ "reread" : [ {" , ".join([item] * ranges)} ] }} '.encode())
REREAD_HEADER = "From the text itself (where the notes differ, this is right):"
#: How a value or passage the step read again is given to the answer: as the text's own,
#: never as a reread (decision 0044), e.g. ``job id, as the text has it: «7f3a9c11»``.
AS_THE_TEXT_HAS_IT = ", as the text has it: «"

#: Tokens allowed for where a text is joined to the prompt (a system message's end, a
#: block's start): a tokenizer may merge across a join, never by more than this.
_JOIN_TOKENS = 8


def _label_of_message(item: Mapping[str, Any], at: int) -> str:
    """What a message read in sections is called in its notes and placeholder (``at``:
    its place among the caller's messages)."""
    role = item.get("role")
    return ("the user's message" if role == "user" else
            f"assistant message {at}" if role == "assistant" else
            f"system message {at}" if role == "system" else
            f"tool result {at}")


def _sections_said(sections: Sequence[int]) -> str:
    """A worker's sections in a few numbers: workers take sections in turn, so they are
    every ``workers``-th one ("1, 3, … 19"), and a header of a fixed size is what the
    notes' room can bound."""
    if len(sections) > 3 and len({b - a for a, b in zip(sections, sections[1:])}) == 1:
        return f"{sections[0]}, {sections[1]}, … {sections[-1]}"
    return ", ".join(map(str, sections))


def _count_salt(provider: Provider, tools: Sequence[Mapping[str, Any]] | None) -> bytes:
    """What a conversation's counts depend on besides its messages: the model (its
    kind, its file or name and server), its window and the tools offered. Drops
    remembered under one salt are never reused under another."""
    # The counter's id: two counters of one kind may count differently (a calibrated
    # estimate, another tokenizer); the memo is this process's, and so are ids.
    model = (type(provider).__name__, type(provider.counter).__name__, id(provider.counter),
             getattr(provider, "model_path", None),
             getattr(provider, "model", None), getattr(provider, "base_url", None), provider.context_window)
    return repr(model).encode() + msgspec.json.encode(tools or [], order="sorted")


class _Origin(NamedTuple):
    """Where a message of the fitted conversation came from: the caller's message at
    ``at``, the attached file at ``at``, or inserted by the engine (the system prompt)."""

    kind: Literal["caller", "file", "inserted"]
    at: int


def _files_as_messages(files: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"File {label}:\n{text}"} for label, text in files]


_TOOL_SHAPE = "{'type': 'function', 'function': {'name': ..., 'description': ..., 'parameters': {...}}}"


def _tool_name(tool: Mapping[str, Any]) -> str:
    return tool["function"]["name"]


class _Asked(NamedTuple):
    """What the caller asked of the answering calls beyond the conversation: stop
    strings, a schema, sampling, a tool choice (not of the note-taking workers or the
    reread step, which keep their own)."""

    stops: list[str]
    schema: dict[str, Any] | None = None
    sampling: Sampling | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None


def _checked_tool_choice(choice: Any, callers: list[dict[str, Any]], provider: Provider) -> ToolChoice | None:
    """``choice`` as the answering calls send it, checked against the tools offered and
    what the provider can do (ToolOfferError naming what is wrong)."""
    if choice is None or choice in ("auto", "none"):
        return choice
    function = choice.get("function") if isinstance(choice, Mapping) and choice.get("type") == "function" else None
    if choice == "required":
        name = None
    elif isinstance(function, Mapping) and isinstance(function.get("name"), str):
        name = function["name"]
    else:
        raise ToolOfferError(f"tool_choice {choice!r} is none of 'auto', 'none', 'required' or "
                             '{"type": "function", "function": {"name": ...}}', "tool_choice")
    if not callers:
        raise ToolOfferError(f"tool_choice {choice!r} asks for a tool call, but no tools are offered; send tools, "
                             "or leave tool_choice out", "tool_choice")
    if name is not None and name not in {_tool_name(t) for t in callers}:
        raise ToolOfferError(f"tool_choice names the function {name!r}, which is not among the tools offered "
                             f"({', '.join(map(_tool_name, callers))})", "tool_choice")
    if not provider.supports_tool_choice:
        raise ToolOfferError(f"{provider.name} cannot be held to calling a tool (its chat template decides), so "
                             f"tool_choice {choice!r} could not be honoured; send 'auto' or 'none', or use a remote "
                             "model", "tool_choice")
    return {"type": "function", "function": {"name": name}} if name is not None else choice


def _callers_tools(tools: Any) -> list[dict[str, Any]]:
    """The caller's tools, checked, as a private deep copy: what the model is offered
    cannot change under a reply, and the caller's own objects are never touched."""
    if tools is None:
        return []
    if not isinstance(tools, (list, tuple)):
        raise ToolOfferError(f"tools must be a list of OpenAI function tools ({_TOOL_SHAPE}), "
                             f"got {type(tools).__name__}")
    first_at: dict[str, int] = {}
    copies: list[dict[str, Any]] = []
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, Mapping):
            raise ToolOfferError(f"{where} is a {type(tool).__name__}, not a dict; each tool is {_TOOL_SHAPE}")
        if tool.get("type") != "function":
            raise ToolOfferError(f"{where} has type {tool.get('type')!r}; only function tools can be offered: "
                                 f"{_TOOL_SHAPE}")
        fn = tool.get("function")
        if not isinstance(fn, Mapping):
            raise ToolOfferError(f"{where} has no 'function' object; give {_TOOL_SHAPE}")
        name = fn.get("name")
        if not isinstance(name, str) or not name.strip():
            raise ToolOfferError(f"{where} has no function name: set tools[{i}]['function']['name'] to the name "
                                 "the model is to call it by")
        where = f"tools[{i}] ({name!r})"
        if name == READ_TOOL_NAME:
            raise ToolOfferError(f"{where} has the name of the engine's own tool, which it adds to a reply "
                                 "that has originals to reread; give yours another name")
        if name in first_at:
            raise ToolOfferError(f"{where} has the same name as tools[{first_at[name]}]; a call names its "
                                 "tool, so names must be unique")
        first_at[name] = i
        description = fn.get("description")
        if description is not None and not isinstance(description, str):
            raise ToolOfferError(f"{where} has a description of type {type(description).__name__}; it must be "
                                 "text")
        params = fn.get("parameters")
        # An empty schema ({}) is how some clients write a tool without arguments.
        if params is not None and not (isinstance(params, Mapping) and (not params or params.get("type") == "object")):
            got = f"type {params.get('type')!r}" if isinstance(params, Mapping) else type(params).__name__
            raise ToolOfferError(f"{where} has parameters of {got}; they must be a JSON schema of an object: "
                                 "{'type': 'object', 'properties': {...}, 'required': [...]}")
        if isinstance(params, Mapping) and not isinstance(params.get("properties", {}), Mapping):
            raise ToolOfferError(f"{where} has parameters whose 'properties' is not an object mapping each "
                                 "argument's name to its schema")
        try:
            # The schema is rendered as JSON into the prompt and counted there.
            copies.append(msgspec.json.decode(msgspec.json.encode(tool)))
        except (TypeError, ValueError, msgspec.EncodeError) as exc:
            raise ToolOfferError(f"{where} cannot be written as JSON ({exc}); a tool holds only JSON "
                                 "values") from None
    return copies


class Engine:
    """Replies from one provider within its bounds.

    Parameters
    ----------
    provider : Provider
    settings : mapping, optional
        Settings: resolved ones, or a partial mapping such as
        ``{"chat.analysis_workers": 0}`` applied over :func:`boundctx.config.load`
        (checked here, so a bad key fails at construction, not mid-reply).
    max_reply_tokens : int
        The reply's own output budget; always kept free in the window.
    max_tool_rounds : int
        Most ``read_chat_section`` rounds in one reply.
    """

    def __init__(self, provider: Provider, *, settings: Mapping[str, Any] | None = None,
                 max_reply_tokens: int = 512, max_tool_rounds: int = 4) -> None:
        self.provider = provider
        self.settings = config.resolve(settings)
        if max_reply_tokens < 1:
            raise ValueError(f"max_reply_tokens must be >= 1, got {max_reply_tokens}")
        self.max_reply_tokens = max_reply_tokens
        self.max_tool_rounds = max_tool_rounds

    def reply(self, messages: Sequence[Mapping[str, Any]], *, files: Sequence[tuple[str, str]] = (),
              cancel: Any = None, tools: Sequence[Mapping[str, Any]] | None = None,
              stop: str | Sequence[str] | None = None, tool_choice: ToolChoice | None = None,
              parallel_tool_calls: bool | None = None, sampling: Sampling | None = None,
              response_schema: Mapping[str, Any] | None = None, earlier: Earlier | None = None) -> Iterator[Event]:
        """Answer the last user message of ``messages`` (with ``files`` attached to it);
        in a conversation without one (a system message alone, as a title request
        sends), answer the conversation as it stands, ``files`` after it.

        Parameters
        ----------
        messages : sequence of dict
            The conversation, OpenAI-style. The current turn is the last user message
            and what follows it: after a reply that ended with calls of the caller's
            tools, the assistant message with those ``tool_calls`` and one
            ``{"role": "tool", "tool_call_id": ..., "content": ...}`` result each. Current
            tool results are sent whole when they fit and read in sections when they do
            not; earlier tool exchanges are the first history dropped to fit. Without a
            user message, all of it is the current turn.
        files : sequence of (label, text)
            Attached to the last user message.
        cancel : threading.Event, optional
        tools : list of dict, optional
            The caller's own tools, OpenAI function tools (``{"type": "function",
            "function": {"name", "description", "parameters"}}``), offered to the model
            in every answering call and counted in its budget. ``read_chat_section`` is
            added beside them for this reply only when analysis kept originals. A call
            of one of them is not run here: the reply ends ``Done("tool_calls")`` with
            the calls, and the caller runs them and sends the results back. Neither the
            list nor its dicts are changed.
        stop : str or sequence of str, optional
            Stop strings: the answer ends where the first of them is complete
            (``Done("stop")``), and no part of it is in any ``ReplyDelta``. Text that
            could be the start of one is held back until the next text shows it is not
            (at most the longest stop string less one character). The model is asked
            to stop there too; the engine cuts the answer itself all the same, since a
            server may ignore the field (decision 0036). Only the answer is cut: the
            note-taking workers' notes and the reread step are not.
        tool_choice : str or dict, optional
            OpenAI's: ``"auto"`` (the default), ``"none"`` (the model answers in text;
            a provider that cannot be told so is not offered the tools), ``"required"``
            or ``{"type": "function", "function": {"name": ...}}`` (a provider that
            :attr:`~boundctx.providers.base.Provider.supports_tool_choice`).
        parallel_tool_calls : bool, optional
            Whether the model may call several tools in one reply (forwarded).
        sampling : Sampling, optional
            The answer's seed, cut-offs and penalties; note-taking workers keep theirs.
        earlier : Earlier, optional
            Messages before ``messages`` the caller keeps (a transcript's older ones):
            with history search on, the model may search them with those dropped to fit
            (decision 0046); they are read only if it does, within
            ``analysis.search_max_chars``.
        response_schema : dict, optional
            A JSON schema the answer is held to: a local model's decoder by a grammar,
            a server by its ``response_format``. Only the answer: the workers' notes and
            the reread step keep their own forms, and the answer is written from them.

        Returns
        -------
        iterator of Event
            ``Fitted`` first (what is sent, dropped, clipped or analysed),
            ``AnalysisProgress`` while inputs are read, ``Stage`` when the answer (or a
            reread) starts, ``ReplyDelta`` for the answer, ``ToolCall``/``ToolResult``
            around rereads (``ToolCall.internal``), ``ToolCall(internal=False)`` for
            each call of a caller's tool, then ``Done`` or ``Failed``.

        Raises
        ------
        ResponseSchemaError
            At the call, before any event: the provider cannot hold the answer to
            ``response_schema`` (a keyword its grammar would not hold).
        ToolOfferError
            At the call, before any event: ``tools`` is not a list of function tools, a
            name is missing, given twice or ``read_chat_section``, parameters are not an
            object schema, the provider cannot call tools (an agent turn answered
            without them would look like a choice not to call any), or ``tool_choice``
            cannot be honoured (no tools, a name not offered, a provider that cannot be
            held to a call).
        TypeError, ValueError
            At the call: ``messages`` is empty, or ``stop`` is not a string or a list of
            strings, or one is empty.
        """
        if not messages:
            raise ValueError("the conversation is empty: give at least one message to answer")
        stops = check_stops(stop)
        offered = _callers_tools(tools)
        choice = _checked_tool_choice(tool_choice, offered, self.provider)
        if choice == "none" and not (self.provider.supports_tools and self.provider.supports_tool_choice):
            offered, choice = [], None  # a model never shown the tools cannot call them
        if offered and not self.provider.supports_tools:
            names = ", ".join(map(_tool_name, offered))
            raise ToolOfferError(f"{self.provider.name} cannot call tools (decision 0010), so the tools offered "
                                 f"({names}) could never be called; use a tool-capable model (a remote one, or a "
                                 "local one whose chat template renders tools) or send no tools")
        if response_schema is not None:
            self.provider.check_schema(response_schema)  # ResponseSchemaError, before any event
        asked = _Asked(stops, dict(response_schema) if response_schema is not None else None, sampling,
                       choice if offered else None, parallel_tool_calls if offered else None)
        return self._events(messages, files, cancel, offered, asked, earlier)

    def _events(self, messages: Sequence[Mapping[str, Any]], files: Sequence[tuple[str, str]], cancel: Any,
                callers: list[dict[str, Any]], asked: _Asked, older: Earlier | None) -> Iterator[Event]:
        started = time.monotonic()
        conversation = [dict(m) for m in messages]
        system = self.settings.chat.system_prompt
        if system and not (conversation and conversation[0].get("role") == "system"):
            conversation.insert(0, {"role": "system", "content": system})
            shift = 1  # Fitted.dropped names indexes of the caller's messages
        else:
            shift = 0
        s = self.settings
        # One estimate of the whole reply's time, carried by its progress events, so
        # every front end (the CLI, the page) counts down the same number.
        clock = TimeLeft(max_reply_tokens=self.max_reply_tokens,
                         reread_step=bool(s.chat.analysis_workers) and not self.provider.supports_tools
                         and s.analysis.constrained_rereads)
        events = self._reply(conversation, files, cancel, started, shift, callers, asked, older)
        try:
            for event in events:
                yield clock.stamped(event, getattr(event, "elapsed_s", time.monotonic() - started))
        except BoundctxError as exc:
            yield Failed(str(exc), type(exc).__name__)
        finally:
            events.close()  # a reply stopped early stops its model call now

    def _reply(self, messages: list[dict[str, Any]], files: Sequence[tuple[str, str]], cancel: Any,
               started: float, shift: int, callers: list[dict[str, Any]],
               asked: _Asked, older: Earlier | None) -> Generator[Event, None, None]:
        s = self.settings
        cuts: list[CutPrompt] = []  # this reply's model calls whose server cut the prompt
        provider = self.provider
        workers = s.chat.analysis_workers
        limit = provider.context_window - self.max_reply_tokens
        if limit < 1:
            raise ContextOverflow(f"max_reply_tokens ({self.max_reply_tokens}) leaves no room in the "
                                  f"{provider.context_window}-token window", context_window=provider.context_window)
        question_at = len(messages) - 1
        while question_at >= 0 and messages[question_at].get("role") != "user":
            question_at -= 1
        if question_at >= 0:
            files_at = turn_start = question_at
        else:
            # No user message: a system message alone (a front end's request for a
            # title), answered as it stands, as OpenAI's API does. It has no earlier
            # exchange to drop, so all of the caller's conversation is the current turn
            # (and can be read in sections); files follow it, and its last message is
            # the question the workers take notes for.
            files_at, turn_start = len(messages), shift
            question_at = len(messages) - 1
        question = str(messages[question_at].get("content") or "")
        convo = messages[:files_at] + _files_as_messages(files) + messages[files_at:]
        # The caller's tools go with every answering call, so every count made to fit the
        # conversation includes their schemas, exactly as the model's template renders them.
        base_tools = callers or None
        if callers:
            schemas = provider.count_prompt([], tools=base_tools)
            if schemas >= limit:
                raise ContextOverflow(
                    f"the schemas of the {len(callers)} tools offered take {schemas} tokens, leaving nothing of "
                    f"the {limit} the prompt may take; offer fewer or shorter tools, or raise chat.n_ctx",
                    prompt_tokens=schemas, context_window=limit)

        def count(msgs: Sequence[Mapping[str, Any]]) -> int:
            return provider.count_prompt(msgs, tools=base_tools)

        # Where each message of convo came from, by place, never by text: two files may
        # hold the same text, and a message may read like a file.
        origins = ([_Origin("inserted", 0)] * shift
                   + [_Origin("caller", c - shift) for c in range(shift, files_at)]
                   + [_Origin("file", k) for k in range(len(files))]
                   + [_Origin("caller", c - shift) for c in range(files_at, len(messages))])
        originals = Originals(search_max_chars=s.analysis.search_max_chars, search_max_hits=s.analysis.search_max_hits,
                              search_max_seconds=s.analysis.search_max_seconds)
        # Messages dropped to fit stay one search away (decision 0046), where the model
        # can ask: by the tool, or in the constrained step.
        searchable = bool(workers) and s.analysis.history_search and (
            provider.supports_tools or s.analysis.constrained_rereads)
        # What could be read in sections (the current turn's messages and files), each as
        # (label, the name its original would get): the rooms are counted on these.
        labels = [files[origins[c].at][0] if origins[c].kind == "file" else _label_of_message(convo[c], origins[c].at)
                  for c in range(turn_start, len(convo))]
        names = name_originals(labels + [EARLIER_LABEL])
        candidates = list(zip(labels, names))
        earlier_name = names[-1]
        stepping = not provider.supports_tools and s.analysis.constrained_rereads
        # What the constrained step is told of a search, its example drawn from the question.
        search_clause = (REREAD_ASK_SEARCH.format(name=earlier_name, example=search_example(question))
                         if searchable and stepping else "")
        reread_room = 0
        if workers and provider.supports_tools:
            # read_chat_section joins the tools only if something is analysed or dropped:
            # its schema (with an id for every item that could be) is kept free beside.
            schema = originals.tool_schema_for([name for _, name in candidates] + [earlier_name] * searchable)
            reread_room = provider.count_prompt([], tools=callers + [schema]) - count([])
        notes_room, item_room, framing = self._notes_rooms(workers, candidates, provider.supports_tools)
        notes_max = s.analysis.notes_max_tokens
        fitting = functools.partial(fit_conversation, convo, count=count, analysis_on=workers > 0, item_room=item_room,
                                    item_room_least=framing + notes_max, clip_chars=s.chat.tool_result_clip_chars,
                                    turn_start=turn_start, low_water=s.chat.low_water, memo=DROPS,
                                    salt=_count_salt(provider, base_tools))
        fit = fitting(limit=limit, notes_room=notes_room + reread_room)
        older_count = older.count if older is not None else 0
        searching = searchable and (bool(fit.dropped_at) or older_count > 0)
        if searching:
            # History goes: fit again with room for the notice that says so and for the
            # tool (always kept free, as it is offered whether or not anything is analysed).
            sample = "\n".join(str(convo[i].get("content") or "") for i in fit.dropped_at[:50])
            rooms = self._earlier_rooms(len(convo) + older_count, earlier_name, provider.supports_tools, stepping,
                                        sample, search_clause)
            # With room for a search's result where the window has it, else without.
            for room in rooms:
                if limit - room - reread_room < 1:
                    continue
                try:
                    fit = fitting(limit=limit - room - reread_room, notes_room=notes_room)
                    break
                except ContextOverflow:
                    continue
            else:
                searching = False  # no room to say it: the history goes unsearched, as before
        final = list(fit.messages)
        blocks: list[tuple[int, tuple[str, str, int, list]]] = []  # (index in final, _notes_block arguments)
        dropped = set(fit.dropped_at)
        final_at = [c for c in range(len(origins)) if c not in dropped]  # final[j] is convo[final_at[j]]

        def label_of(index: int) -> tuple[str, str]:
            """An analysed item's label and text (analysed items are of the current turn)."""
            c = final_at[index]
            if origins[c].kind == "file":
                # An attached file is kept (and reread) as the file itself, without its header.
                return files[origins[c].at]
            return labels[c - turn_start], str(final[index].get("content") or "")

        earlier: str | None = None
        if searching:
            # Dropped to fit, kept to search: the notice that says so opens the kept
            # history, and the tool that searches is offered from here on.
            dropped_text = _earlier_text(convo, fit.dropped_at, origins)
            if older is None or older_count <= 0:
                earlier = originals.add(dropped_text, EARLIER_LABEL, name=earlier_name)
            else:
                earlier = originals.add_later(_with_older(older, dropped_text, s.analysis.search_max_chars),
                                              EARLIER_LABEL, name=earlier_name)
            said = EARLIER_NOTICE["tools" if provider.supports_tools else "plain"].format(
                n=len(fit.dropped_at) + older_count, name=earlier)
            first = final[0]
            final[0] = {**first, "content": (f"{first.get('content') or ''}\n\n{said}" if first.get("role") == "system"
                                             else f"{said}\n\n{first.get('content') or ''}")}
        shown_tools = callers + [originals.tool_schema()] if earlier is not None and provider.supports_tools \
            else base_tools
        # An inserted system prompt is never dropped (the first system message is kept)
        # and is not one of the caller's messages.
        # What the model holds of this prompt already (a local model's kept state): a
        # front end can say why a turn starts at once or must evaluate the window.
        fitted_prompt = [({**m, "content": ""} if j in fit.analysed_at else m) for j, m in enumerate(final)]
        prompt_tokens = provider.count_prompt(fitted_prompt, tools=shown_tools)
        yield Fitted(len(convo) - shift, len(final) - len(fit.analysed_at) - shift,
                     [origins[i].at for i in fit.dropped_at],
                     fit.dropped_research, len(fit.clipped), [label_of(i)[0] for i in fit.analysed_at], limit,
                     prompt_tokens, provider.reusable_prefix(fitted_prompt, tools=shown_tools),
                     [len(label_of(i)[1]) for i in fit.analysed_at])
        for index in fit.analysed_at:
            item = final[index]
            label, text = label_of(index)
            try:
                # The name counted for this item's place (items are read largest first, and
                # a name given in that order could be longer than the one counted).
                oid = originals.add(text, label, name=candidates[final_at[index] - turn_start][1])
                notes = yield from iter_read_in_sections(provider, text, question=question, source_id=oid,
                                                         label=label, settings=s, cancel=cancel, started=started,
                                                         cuts=cuts)
            except BoundctxError:
                raise
            except ValueError as exc:
                # The section planner's own check of its arguments (before any model call):
                # settings in their ranges never fail it, settings built by hand may. The
                # reply ends Failed with the reason, never with the bare error.
                raise SectionPlanError(f"{label} could not be planned into sections ({exc}); the analysis.* "
                                       "settings are outside what the planner takes: `boundctx config schema` "
                                       "gives their ranges") from exc
            if notes is None:
                yield Done("cancelled")
                return
            merged = NoteLedger.merged(n.ledger for n in notes if n.ledger is not None)
            originals.set_keys(oid, [(e.key, e.start, e.end) for e in merged.entries()])
            final[index] = {**item, "content": f"[{label}: {len(text):,} characters, read completely by "
                                               f"note-taking workers; see the notes on {oid} below]"}
            blocks.append((index, (oid, label, len(text), notes)))
        tools = base_tools
        notes_at = blocks[-1][0] if blocks else None
        # The question's place in the prompt: what the step reads, without notes, joins it.
        ask_at = final_at.index(question_at + (len(files) if files_at <= question_at else 0))
        if blocks:
            instructions = COORDINATOR_NOTES + (_REREAD if provider.supports_tools else "") + _NO_GUESS
            bare = list(final)  # the prompt the notes are added to, each time anew

            def with_notes(room: int, *, for_answer: bool = False) -> list[dict[str, Any]]:
                """``final`` with every analysed item's notes rendered in ``room`` tokens, each
                in the item's own place (the instructions before the first): the prompt
                up to the first analysed item is the conversation's own, the start a
                model still holds from the turns before (decision 0031). ``for_answer``:
                as an answer no reread can follow is written from (decision 0044)."""
                out = list(bare)
                for k, (index, block) in enumerate(blocks):
                    said = ((ANSWER_NOTES if for_answer else instructions) + "\n\n" if k == 0 else "") \
                        + self._notes_block(*block, room, for_answer=for_answer)
                    out[index] = {**out[index], "content": f"{out[index]['content']}\n\n{said}"}
                return out

            # The notes get the room fitting left them: every worker's budget where that
            # fit, else one worker's (the rest evicted to the index, each key still one
            # reread away by its name).
            room = fit.item_room - framing
            if stepping:
                # The step must have room to ask for one reread at least: the notes give
                # way to it (what they no longer show stays readable by key).
                room = self._room_for_one_reread(with_notes, room, originals,
                                                 clause=search_clause if earlier is not None else "")
        else:
            bare, room = list(final), 0

            def with_notes(room: int, *, for_answer: bool = False) -> list[dict[str, Any]]:
                return list(bare)

        if blocks or earlier is not None:
            final = with_notes(room)
            if provider.supports_tools:
                tools = callers + [originals.tool_schema()]  # this reply's only: a fresh list
            else:
                # No reread can follow the answer: it is written from the notes in words
                # (with what the step read again), when that fits where the notes as the
                # step saw them did; else from those (decision 0044).
                # What the step read joins the last notes (the question, without notes).
                read_again, last = "", notes_at if notes_at is not None else ask_at
                if stepping:
                    read_again = yield from self._constrained_rereads(
                        final, last, originals, limit, cancel, started, cuts, earlier,
                        search_clause if earlier is not None else "")
                    if read_again is None:
                        yield Done("cancelled")
                        return
                answering = with_notes(room, for_answer=True)
                if read_again:
                    answering, final = (_added_to_notes(answering, last, read_again),
                                        _added_to_notes(final, last, read_again))
                if provider.count_prompt(answering) <= limit:
                    final = answering
        yield from self._coordinate(final, notes_at, tools, callers, originals, limit, cancel, started, asked, cuts)

    def _earlier_rooms(self, messages: int, name: str, tools: bool, stepping: bool, sample: str,
                       clause: str) -> tuple[int, int]:
        """Tokens searching the earlier messages may add to the prompt, with room for a
        search's result and without. Without: the notice (with the most messages there
        can be) and, for a model without tools, the constrained step's request with its
        answer for one search (the notes, if any, give way to more:
        :meth:`_room_for_one_reread`). With: also the result of one search of one passage
        (and a tool call's round for a model with tools), so a search has room to give
        what it finds best even at the window's edge. A passage's tokens are estimated
        from ``sample``, text of the history (its tokens a character there): a denser
        passage may still not fit, and the search then says so."""
        count_text, count = self.provider.counter.count_text, self.provider.count_prompt
        said = EARLIER_NOTICE["tools" if tools else "plain"].format(n=messages, name=name)
        room = count_text("\n\n" + said) + _JOIN_TOKENS
        if stepping:
            ask = REREAD_ASK.format(n=1, search=clause)
            room += count([{"role": "user", "content": ask}]) - count([]) \
                + reread_output_room([name], 1, search=True) + _JOIN_TOKENS
        # One passage, with the search's usual heading and its characters (a search that
        # also says what it did not read says it in a few tokens more).
        heading = (f"1 passage of {name} holds words of {'x' * MAX_SEARCH_CHARS!r} (the best 1 of 50 found):\n"
                   f"characters {10**9}-{10**9}: «»")
        sample = sample[:8000]
        per_char = count_text(sample) / len(sample) if sample else 1.0
        result = count_text(heading) + math.ceil(per_char * SEARCH_PASSAGE_CHARS) + _JOIN_TOKENS
        if tools:
            arguments = json.dumps({"section_id": name, "search": "x" * MAX_SEARCH_CHARS})
            call = {"id": "call_0123456789abcdef", "type": "function",
                    "function": {"name": READ_TOOL_NAME, "arguments": arguments}}
            result += count([{"role": "assistant", "content": "", "tool_calls": [call]},
                             {"role": "tool", "tool_call_id": call["id"], "content": ""}]) - count([])
        return room + result, room

    def _notes_rooms(self, workers: int, candidates: Sequence[tuple[str, str]], rereads: bool) -> tuple[int, int, int]:
        """Upper bounds, in the coordinator's tokens, of what analysis adds to the prompt:
        once (the notes' instructions), and for each analysed item (its notes block: the
        header and the merged notes at their bound, and the line the item becomes), and
        of that, what is not notes (the header and the line). The
        header is counted at its longest: the longest label an item can have, the largest
        numbers there can be (the sections read are said in a few numbers, see
        :func:`_sections_said`)."""
        if not workers:
            return 0, 0, 0
        s = self.settings
        text = self.provider.counter.count_text
        max_sections = s.analysis.max_sections
        length = f"{s.analysis.max_source_chars:,}"
        instructions = text(COORDINATOR_NOTES + (_REREAD if rereads else "") + _NO_GUESS + "\n\n") + _JOIN_TOKENS
        top = str(max_sections)
        # Counted on the names and labels an item read in sections can have: a name
        # given to fewer originals is the same or shorter (no " (2)").
        widest = (f"{top}, {top}, … {top}", f"{top}, {top}, {top}")
        block = max(text(f"\n\nNotes on {oid} ({length} characters, read in sections {said}):\n")
                    for _, oid in candidates or [("", "")] for said in widest) + _JOIN_TOKENS
        placeholder = max(text(f"[{label}: {length} characters, read completely by note-taking workers; see the "
                               f"notes on {oid} below]") for label, oid in candidates or [("", "")]) + _JOIN_TOKENS
        per_item = block + placeholder + workers * s.analysis.notes_max_tokens
        return instructions, per_item, block + placeholder

    def _notes_block(self, oid: str, label: str, length: int, notes: list[Notes], room: int, *,
                     for_answer: bool = False) -> str:
        """The notes on one input for the coordinator: every worker's merged (the value
        from the later place in the text wins), within ``room`` tokens (what fitting left
        them: at most every worker's budget, ``workers × analysis.notes_max_tokens``).
        ``for_answer``: in words, within the tokens the notes for a reread take (so
        never more), for an answer no reread can follow (decision 0044)."""
        count = self.provider.counter.count_text
        budget = min(room, self.settings.analysis.notes_max_tokens * max(len(notes), 1))
        merged = NoteLedger.merged(n.ledger for n in notes if n.ledger is not None)
        text = merged.render(budget, count)
        if for_answer:
            text = merged.render(count(text), count, for_answer=True) if text else ""
            if not text:
                text = ("Nothing in it bears on the question." if not len(merged) and not merged.unnoted else
                        "There was no room to show its notes here.")
            return f"Notes on {oid} ({length:,} characters):\n{text}"
        read = sorted(k for n in notes for k in n.sections)
        if not text:  # nothing noted, or no room to show what was
            text = ("(nothing relevant)" if not len(merged) and not merged.unnoted else
                    "(no room to show the notes here: read a key again by its name)")
        return f"Notes on {oid} ({length:,} characters, read in sections {_sections_said(read)}):\n{text}"

    def _room_for_one_reread(self, with_notes: Callable[[int], list[dict[str, Any]]], room: int,
                             originals: Originals, *, clause: str = "") -> int:
        """``room``, or the most notes room below it that leaves the constrained step
        room to ask for one reread (its largest answer for one item, counted as the step
        counts it); 0 when none does (the step then says it had no room)."""
        provider = self.provider
        need = reread_output_room(list(originals), 1, grammar_safe_keys(originals.noted_keys()), search=bool(clause))

        def fits(r: int) -> bool:
            ask = with_notes(r) + [{"role": "user", "content": REREAD_ASK.format(n=1, search=clause)}]
            return provider.count_prompt(ask) + need <= provider.context_window

        if fits(room):
            return room
        return longest_fitting(room, fits)

    def _constrained_rereads(self, messages: list[dict[str, Any]], notes_at: int, originals: Originals, limit: int,
                             cancel: Any, started: float, cuts: list[CutPrompt], earlier: str | None = None,
                             search_clause: str = ""):
        """For a model without tool calls: one step, held by its decoder to a JSON schema,
        in which it names the ranges of this reply's originals it needs exactly (and,
        where ``earlier`` names the messages dropped to fit, words to search them for);
        the engine checks them as ``read_chat_section`` would and adds the exact text to
        the notes, as far as the window allows (decisions 0026, 0046). Each reread is a
        ``ToolCall``/``ToolResult`` pair; what could not be read says why. Returns the
        text to add to the notes for the answer, in words ("" for nothing; counted to
        fit beside ``messages``), as the generator's value, or None when cancelled."""
        provider = self.provider
        ids = list(originals)
        keys = grammar_safe_keys(originals.noted_keys())
        searching = earlier is not None

        # As many ranges as the step's largest answer leaves room for beside its prompt.
        ranges = REREAD_MAX_RANGES
        while True:
            ask = messages + [{"role": "user", "content": REREAD_ASK.format(n=ranges, search=search_clause)}]
            room = reread_output_room(ids, ranges, keys, search=searching)
            if provider.count_prompt(ask) + room <= provider.context_window:
                break
            ranges -= 1
            if not ranges:
                # No room to ask: the answer is told nothing of the step (a small model
                # copies what it is told); its instructions say to call what the notes
                # do not show unconfirmed.
                return ""
        item = {"type": "object", "additionalProperties": False, "required": ["id"],
                "properties": {"id": {"type": "string", "enum": ids},
                               "start": {"type": "integer", "minimum": 0},
                               "end": {"type": "integer", "minimum": 0},
                               **({"key": {"type": "string", "enum": keys}} if keys else {})}}
        if searching:
            item = {"anyOf": [item, {"type": "object", "additionalProperties": False, "required": ["id", "search"],
                                     "properties": {"id": {"type": "string", "enum": ids},
                                                    "search": {"type": "string", "pattern": SEARCH_PATTERN}}}]}
        schema = {"type": "object", "additionalProperties": False, "required": ["reread"], "properties": {
            "reread": {"type": "array", "maxItems": ranges, "items": item}}}
        yield Stage("rereading", time.monotonic() - started, 1)
        pieces: list[str] = []
        stream = noting_cuts(provider.stream_chat(ask, schema=schema, max_tokens=room, temperature=0.0, cancel=cancel),
                             cuts, "reread step")
        with _model_call(stream, "the reread step"):
            for chunk in stream:
                if isinstance(chunk, TextChunk):
                    pieces.append(chunk.text)
                elif isinstance(chunk, Finish) and chunk.reason == "cancelled":
                    return None
        try:
            asked = msgspec.json.decode("".join(pieces).strip() or "null", type=_RereadAsk)
        except msgspec.DecodeError:
            return ""  # not a request the step can act on: as above, nothing is said
        read_back: list[str] = []

        def fits(line: str) -> bool:
            return provider.count_prompt(_added_to_notes(messages, notes_at, _reread_text(read_back + [line]))) <= limit

        def add(line: str) -> bool:
            # Every line is counted before it joins the notes.
            if not fits(line):
                return False
            read_back.append(line)
            return True

        for k, want in enumerate(asked.reread[:ranges]):
            call_id = f"reread-{k + 1}"
            given = {name: value for name, value in (("start", want.start), ("end", want.end), ("key", want.key),
                                                     ("search", want.search)) if value is not None}
            arguments = msgspec.json.encode({"section_id": want.id, **given}).decode()
            # Said as the text's own, with nothing of the reread: no reread follows, and a
            # small model copies these lines into its answer (decision 0044).
            where = want.key if want.key is not None else f"From {want.id}"
            yield ToolCall(call_id, READ_TOOL_NAME, arguments)
            try:
                if want.search is not None and not given.keys() - {"search"}:
                    text = originals.search(want.id, want.search)
                    said = originals.search(want.id, want.search, cite=False)
                else:
                    text = originals.call({"section_id": want.id, **given})
                    said = f"{where}{AS_THE_TEXT_HAS_IT}{text}»"
            except SectionReadError as exc:
                # Said to the caller (the event), not to the answer: its instructions say
                # to call a value the notes do not show unconfirmed.
                yield ToolResult(call_id, f"error: {exc}")
                continue
            if not add(said):
                # A search gives the best of what it found that fits; a range is refused.
                fewer = _fewest_hits_that_fit(arguments, originals, fits, cite=False) if want.search else None
                if fewer is None:
                    yield ToolResult(call_id, f"error: {len(said)} characters do not fit the remaining context")
                    continue
                add(fewer)
                text = fewer
            yield ToolResult(call_id, text)
        return _reread_text(read_back) if read_back else ""

    def _coordinate(self, messages: list[dict[str, Any]], notes_at: int | None, tools: list[dict[str, Any]] | None,
                    callers: list[dict[str, Any]], originals: Originals, limit: int, cancel: Any,
                    started: float, asked: _Asked, cuts: list[CutPrompt]) -> Iterator[Event]:
        """The answering calls (and the rereads a tool-calling model makes between them);
        the reply's Done carries ``cuts``, its calls whose server cut their prompt."""
        provider = self.provider
        temperature = self.settings.chat.temperature
        theirs = {_tool_name(t) for t in callers}
        names = [_tool_name(t) for t in tools or ()]
        for round_ in range(self.max_tool_rounds + 1):
            # The provider counts this prompt against its window (with max_tokens = the
            # reply budget, the same bound as `limit`) before any model call.
            calls: list[ToolCallChunk] = []
            finish = Finish("stop")
            # With the rereads spent, the caller's tools are still offered: calling them
            # is the agent's next step, not a reread.
            offered = tools if round_ < self.max_tool_rounds else (callers or None)
            yield Stage("rereading" if round_ else "answering", time.monotonic() - started, round_)
            guard = RepetitionGuard()
            # The stop strings are cut before the guard sees the text: what follows one is
            # not the answer, so it is neither shown nor judged.
            cut = StopCut(asked.stops)
            stream = noting_cuts(provider.stream_chat(
                messages, tools=offered, max_tokens=self.max_reply_tokens, temperature=temperature,
                stop=asked.stops or None, cancel=cancel, schema=asked.schema, sampling=asked.sampling,
                tool_choice=asked.tool_choice if offered else None,
                parallel_tool_calls=asked.parallel_tool_calls if offered else None), cuts, "answer")
            with _model_call(stream, "the model call"):
                for chunk in stream:
                    if isinstance(chunk, TextChunk):
                        text = guard.feed(cut.feed(chunk.text))
                        if text:
                            yield ReplyDelta(text)
                        if guard.looping or cut.hit:
                            # The model's output ends here, as if it had stopped itself;
                            # closing the stream stops the generation.
                            break
                    elif isinstance(chunk, ToolCallChunk):
                        calls.append(chunk)
                    else:
                        finish = chunk
                else:
                    # The stream ended: what was held as a possible stop string is not one.
                    text = guard.feed(cut.finish())
                    if text:
                        yield ReplyDelta(text)
            if guard.looping:
                yield Done("repetition", {"prompt_tokens": finish.prompt_tokens,
                                          "completion_tokens": finish.completion_tokens,
                                          "withheld_chars": guard.withheld_chars}, cut_prompts=cuts)
                return
            rest = guard.finish()
            if rest:
                yield ReplyDelta(rest)
            usage = {"prompt_tokens": finish.prompt_tokens, "completion_tokens": finish.completion_tokens}
            if finish.cached_tokens is not None:
                usage["cached_tokens"] = finish.cached_tokens
            if finish.reason == "cancelled" or not calls:
                yield Done(finish.reason, usage, cut_prompts=cuts)
                return
            if any(c.name in theirs for c in calls):
                # The caller's calls end the reply. A reread asked for in the same turn is
                # not answered: its result could reach the model only after the caller's
                # results, in a later reply whose originals have other ids, and the
                # caller's history must not hold calls of a tool it never offered.
                ended: list[ToolCall] = []
                called = ", ".join(dict.fromkeys(c.name for c in calls if c.name in theirs))
                for c in calls:
                    if c.name in theirs:
                        ended.append(ToolCall(c.id, c.name, c.arguments, internal=False))
                        yield ended[-1]
                    else:
                        yield ToolCall(c.id, c.name, c.arguments)
                        yield ToolResult(c.id, f"not run: the same turn called the caller's {called}, which "
                                               "ends the reply for the caller to run")
                # A call cut at the output budget keeps "length": its arguments may be cut.
                yield Done("length" if finish.reason == "length" else "tool_calls", usage, ended, cut_prompts=cuts)
                return
            # The round (the model's calls and their results) joins the prompt only if it
            # fits, each part counted before it is added: a result that does not fit is
            # refused in a line, and a round that does not fit even so is left out whole,
            # and the rereads stop (the model answers from its notes and says what it
            # could not confirm), never a prompt past the window.
            with_round = messages + [{"role": "assistant", "content": "", "tool_calls": [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in calls]}]
            for c in calls:
                yield ToolCall(c.id, c.name, c.arguments)
                result = self._run_tool(c, originals, names)
                trial = with_round + [{"role": "tool", "tool_call_id": c.id, "content": result}]
                if provider.count_prompt(trial, tools=tools) > limit:
                    # A search gives the best of what it found that fits; a range is refused.
                    fewer = _fewest_hits_that_fit(c.arguments, originals, lambda text: provider.count_prompt(
                        with_round + [{"role": "tool", "tool_call_id": c.id, "content": text}], tools=tools) <= limit)
                    result = fewer if fewer is not None else (
                        f"error: {len(result)} characters do not fit the remaining context; "
                        + ("search for rarer words" if _search_of(c.arguments) else "ask for a narrower range"))
                    trial = with_round + [{"role": "tool", "tool_call_id": c.id, "content": result}]
                yield ToolResult(c.id, result)
                with_round = trial
            if provider.count_prompt(with_round, tools=tools) <= limit:
                messages = with_round
                continue
            tools, names = callers or None, [_tool_name(t) for t in callers]
            if notes_at is None:  # no notes (a caller's tool was misnamed as the reread): nothing to add to
                continue
            said = _added_to_notes(messages, notes_at, "No more exact text can be read in this reply (the context "
                                                       "window is full): where a value the answer needs is only "
                                                       "indexed, say it could not be confirmed.")
            if provider.count_prompt(said, tools=tools) <= limit:
                messages = said
        yield Done("tool_rounds_exhausted", cut_prompts=cuts)

    @staticmethod
    def _run_tool(call: ToolCallChunk, originals: Originals, names: list[str]) -> str:
        if call.name != READ_TOOL_NAME or READ_TOOL_NAME not in names:
            offered = ", ".join(names) or "none"
            return f"error: no tool named {call.name!r} is offered in this reply (its tools: {offered})"
        try:
            return originals.call(call.arguments)
        except SectionReadError as exc:
            return f"error: {exc}"


class _Range(msgspec.Struct, forbid_unknown_fields=True):
    id: str
    start: int | None = None
    end: int | None = None
    key: str | None = None
    search: str | None = None


class _RereadAsk(msgspec.Struct, forbid_unknown_fields=True):
    reread: list[_Range]


def _earlier_text(convo: Sequence[Mapping[str, Any]], dropped: Sequence[int], origins: Sequence[_Origin]) -> str:
    """The messages dropped to fit, as one text to search and read exactly: each headed
    by its place among the caller's messages and its role, its tool calls written out."""
    parts = []
    for i in dropped:
        m = convo[i]
        text = m.get("content")
        body = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False) if text else ""
        for call in m.get("tool_calls") or ():
            fn = call.get("function") if isinstance(call, Mapping) else None
            if isinstance(fn, Mapping):
                body += f"\n(called {fn.get('name')} with {fn.get('arguments')})"
        parts.append(f"[message {origins[i].at}, {m.get('role')}]\n{body}")
    return "\n\n".join(parts)


def _search_of(arguments: str) -> tuple[str, str] | None:
    """``(section_id, search)`` of a call's arguments that ask for a search, else None."""
    try:
        args = msgspec.json.decode(arguments)
    except msgspec.DecodeError:
        return None
    if isinstance(args, dict) and isinstance(args.get("search"), str) and isinstance(args.get("section_id"), str):
        return args["section_id"], args["search"]
    return None


def _fewest_hits_that_fit(arguments: str, originals: Originals, fits: Callable[[str], bool], *,
                          cite: bool = True) -> str | None:
    """For a search that does not fit: the most of its best-ranked passages that do
    (``fits`` of the result; each try is the same search, not read again), or None when
    it is no search, or not even one passage fits."""
    asked = _search_of(arguments)
    if asked is None:
        return None
    oid, query = asked
    try:
        def result(k: int) -> str:
            return originals.search(oid, query, cite=cite, hits=k)

        most = originals.search_max_hits
        k = longest_fitting(most - 1, lambda k: k == 0 or fits(result(k)))
    except SectionReadError:
        return None
    return result(k) if k > 0 else None


def _with_older(older: Earlier, dropped: str, max_chars: int) -> Callable[[], tuple[str, str | None]]:
    """How the earlier messages are read when first searched: the caller's older ones
    (within what one search reads), then those dropped to fit."""
    def load() -> tuple[str, str | None]:
        try:
            # Within what one search reads, with those dropped to fit (the newest) in it.
            text, first = older.read(max(0, max_chars - len(dropped) - 2))
        except (OSError, ValueError, BoundctxError) as exc:
            raise SectionReadError(f"the earlier messages could not be read ({type(exc).__name__}: {exc}); "
                                   "answer from what is shown") from None
        unread = (f"the oldest {first:,} earlier messages were not read (one search reads at most "
                  "analysis.search_max_chars characters)" if first > 0 else None)
        return "\n\n".join(part for part in (text, dropped) if part), unread
    return load


def _reread_text(lines: Sequence[str]) -> str:
    return REREAD_HEADER + "\n" + "\n".join(lines)


def _added_to_notes(messages: list[dict[str, Any]], at: int, text: str) -> list[dict[str, Any]]:
    """``messages`` with ``text`` added to the notes (after the last notes, in message
    ``at``: what comes before it stays as the model may hold it)."""
    out = list(messages)
    out[at] = {**out[at], "content": f"{out[at]['content']}\n\n{text}"}
    return out


@contextlib.contextmanager
def _model_call(stream: Any, what: str) -> Iterator[None]:
    """Around reading ``stream``: a backend's own failure ends the reply as ``Failed``
    (a GenerationError naming ``what``), and the stream is closed when the block ends,
    so a stopped loop stops the model now, not at garbage collection."""
    try:
        yield
    except BoundctxError:
        raise
    except Exception as exc:  # noqa: BLE001 - any backend failure, whatever its type
        raise GenerationError(f"{what} failed ({type(exc).__name__}: {exc}); the reply is not complete") from exc
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()
