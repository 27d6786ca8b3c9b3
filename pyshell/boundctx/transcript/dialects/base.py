"""What every transcript dialect is, and what their readers share.

A :class:`Dialect` is one transcript format: which lines are messages and compactions
(its ``kinds``, handed to the native classifier), how its message lines become chat
messages, what its compactions summarise, how an entry reads for a person, and whether
boundctx may write into a file of it. Each format is one module beside this one; the
package's ``__init__`` holds the table of them.

The helpers below are the rules the formats share: content parts as text, tool calls and
results as OpenAI-style messages, and the notices that say what could not be sent
(:class:`Notes`; :func:`boundctx.transcript.chat.chat_messages` explains the contract).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable

from boundctx._native import lineindex
from boundctx.transcript.kinds import LineKind

if TYPE_CHECKING:
    from boundctx.transcript.entries import Entry

__all__ = ["COMPACTION", "MESSAGE", "NOT_TEXT", "SUMMARY", "TEXT_PARTS", "Dialect", "Notes", "QualifiedKind",
           "assistant_turn", "call_arguments", "display_text", "openai_calls", "parts_text", "said", "short",
           "tool_call", "tool_result"]

MESSAGE, COMPACTION = LineKind.MESSAGE, LineKind.COMPACTION
QualifiedKind = lineindex.QualifiedKind

#: Content parts that carry text, and parts that are not sent as text on purpose (tool
#: calls and results are read by the caller; reasoning is private). Tuples, not sets: a
#: part's type may be any JSON value, and a list or an object cannot be hashed.
TEXT_PARTS = ("text", "input_text", "output_text")
NOT_TEXT = ("thinking", "redacted_thinking", "reasoning", "toolCall", "tool_use", "tool_result")
#: What a compaction's summary is said to be when it is sent.
SUMMARY = "Summary of the earlier conversation (compacted):\n"
#: Characters of a string a notice quotes.
_QUOTED = 40


class Dialect:
    """One transcript format. Subclasses set the attributes and override what differs.

    Attributes
    ----------
    name : str
        What ``--dialect`` and ``Transcript.open(dialect=...)`` call it.
    kinds : mapping
        Top-level ``"type"`` value -> what such a line is (:class:`LineKind`, or a
        :class:`QualifiedKind` where a second key decides); values not listed are
        "other" lines. The formats' type values never collide (``auto`` is their union;
        a test proves it).
    writable : bool
        Whether boundctx appends replies to a file of this format (it writes its own
        lines; another agent's files are read, never written).
    links : mapping
        Top-level key -> what it links (``"id"``: the entry's own id; ``"parent"``: the
        entry it follows; ``"logical_parent"``: the entry a compaction boundary follows
        when its parent is null; ``"answers"``: the entry whose tool call a result
        answers). A format without parents has none, and its files read as lists
        (:mod:`boundctx.transcript.tree`).
    """

    name: str = ""
    kinds: Mapping[str, int] = {}
    writable: bool = False
    links: Mapping[str, str] = {}

    def messages(self, record: dict[str, Any], where: str, notes: Notes) -> list[dict[str, Any]]:
        """The chat messages of one message line (a record whose type is in ``kinds``)."""
        raise NotImplementedError

    def replaces_history(self, record: dict[str, Any]) -> bool:
        """Whether this line (a compaction, or a message line) is a compaction in force:
        what it summarises is not sent, its summary is."""
        return False

    def summary(self, record: dict[str, Any], where: str, notes: Notes) -> str | None:
        """The summary text of a compaction; None (with a notice) when it is not text."""
        return None

    def replacement(self, record: dict[str, Any], where: str, notes: Notes) -> list[Any] | None:
        """The items a compaction puts in place of the history (Codex), or None."""
        return None

    def history_item(self, item: Any, where: str, notes: Notes) -> list[dict[str, Any]]:
        """The chat messages of one item of a compaction's :meth:`replacement`."""
        raise NotImplementedError

    def echoed(self, entries: list[Entry], converted: list[list[dict[str, Any]]]) -> set[int]:
        """Positions of lines that repeat a turn another line of the window already sent
        (Codex writes some questions twice): not sent again."""
        return set()

    def display(self, record: dict[str, Any]) -> tuple[str, str]:
        """(role, text) of a line, for a person: the text blocks of its message."""
        return self._display(record, _message_of(record))

    def kind(self, record: dict[str, Any]) -> tuple[str, str | None]:
        """What a line is for a person, beside its text: ``"tool_call"`` (with the tool's
        name), ``"tool_result"``, ``"reasoning"`` or ``"text"``, so a front end can fold
        an agent's tool traffic into blocks without reading its JSON."""
        return self._kind(_message_of(record))

    def shown(self, record: dict[str, Any]) -> tuple[str, str, str, str | None]:
        """``display`` and ``kind`` of a line together: role, text, kind and tool, its
        message found once (a window shows a hundred lines)."""
        msg = _message_of(record)
        return (*self._display(record, msg), *self._kind(msg))

    def _display(self, record: dict[str, Any], msg: dict[str, Any]) -> tuple[str, str]:
        role = msg.get("role") or record.get("type") or "?"
        content = msg.get("content", msg.get("summary", record.get("summary")))
        text = display_text(msg if content is None else content)
        calls = msg.get("tool_calls")
        if isinstance(calls, list):  # OpenAI-style calls beside (or instead of) the words
            text = "\n".join([text] * bool(text) + [call_text(c["function"]) for c in calls
                                                     if isinstance(c, dict) and isinstance(c.get("function"), dict)])
        return str(role), text

    def _kind(self, msg: dict[str, Any]) -> tuple[str, str | None]:
        type_ = msg.get("type")
        if type_ in TOOL_CALLS:
            return "tool_call", _name(msg)
        if type_ in TOOL_RESULTS or msg.get("role") in ("tool", "toolResult"):
            return "tool_result", _name(msg)
        if type_ in REASONING:
            return "reasoning", None
        content = msg.get("content")
        blocks = [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
        if blocks:
            types = {b.get("type") for b in blocks}
            if types <= _CALLS_OR_REASONING and types & TOOL_CALLS:
                return "tool_call", next(_name(b) for b in blocks if b.get("type") in TOOL_CALLS)
            if types <= TOOL_RESULTS:
                return "tool_result", None
            if types <= REASONING:
                return "reasoning", None
        if msg.get("tool_calls") and not (isinstance(content, str) and content.strip()):
            calls = msg["tool_calls"]
            first = calls[0] if isinstance(calls, list) and calls and isinstance(calls[0], dict) else {}
            function = first.get("function")
            return "tool_call", _name(function) if isinstance(function, dict) else None
        return "text", None

    def __repr__(self) -> str:
        return f"<dialect {self.name}>"


#: Block or payload types of a tool call, its result, and a model's reasoning, in the
#: formats boundctx reads (Claude Code, Codex CLI, pi).
TOOL_CALLS = frozenset({"tool_use", "toolCall", "function_call", "custom_tool_call", "local_shell_call"})
TOOL_RESULTS = frozenset({"tool_result", "function_call_output", "custom_tool_call_output"})
REASONING = frozenset({"thinking", "redacted_thinking", "reasoning"})
_CALLS_OR_REASONING = TOOL_CALLS | REASONING


def _message_of(record: dict[str, Any]) -> dict[str, Any]:
    msg = record.get("message") if isinstance(record.get("message"), dict) else record.get("payload")
    return msg if isinstance(msg, dict) else record


def _name(block: dict[str, Any]) -> str | None:
    name = block.get("name", block.get("toolName"))
    return name if isinstance(name, str) else None


def call_text(block: dict[str, Any]) -> str:
    """A tool call as a person reads it: the tool's name, then its arguments, a lone
    string argument as it is (a shell command reads as the command), else as indented
    JSON."""
    args = block.get("input", block.get("arguments", block.get("action")))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            pass
    if isinstance(args, dict):
        strings = [v for v in args.values() if isinstance(v, str)]
        body = strings[0] if len(args) == 1 and strings else json.dumps(args, ensure_ascii=False, indent=2)
    else:
        body = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    return f"{_name(block) or 'tool'}: {body}" if body else _name(block) or "tool"


def display_text(content: Any) -> str:
    """Content as a person reads it: a string as it is; a tool call as its name and
    arguments; a list of blocks one a line (a block's text, thinking or output where it
    has one, a tool call as above, else its JSON); anything else as JSON."""
    if isinstance(content, str):
        return content
    if isinstance(content, dict) and content.get("type") in TOOL_CALLS:
        return call_text(content)
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, dict):
                if block.get("type") in TOOL_CALLS:
                    parts.append(call_text(block))
                    continue
                for key in ("text", "thinking", "output", "content"):
                    if isinstance(block.get(key), str):
                        parts.append(block[key])
                        break
                else:
                    parts.append(json.dumps(block, ensure_ascii=False))
            else:
                parts.append(str(block))
        return "\n".join(parts)
    if isinstance(content, dict) and isinstance(content.get("output"), str):
        return content["output"]  # a tool's output as a payload of its own (Codex)
    return json.dumps(content, ensure_ascii=False)


class Notes:
    """What one record's conversion could not send: its notices, and the ids of the tool
    calls it left out (a set the whole window shares, so a result of such a call is named
    for what it is, not as a result whose call is older than the window)."""

    __slots__ = ("notices", "unsent_calls")

    def __init__(self, unsent_calls: set[str]) -> None:
        self.notices: list[str] = []
        self.unsent_calls = unsent_calls

    def add(self, text: str) -> None:
        self.notices.append(text)


def short(text: str) -> str:
    return text if len(text) <= _QUOTED else text[:_QUOTED] + "…"


def said(value: Any) -> str:
    """A field's value as a notice names it: a string quoted (cut short), anything else by
    its JSON type, never whole (it may be megabytes)."""
    if isinstance(value, str):
        return repr(short(value))
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"


def parts_text(content: Any, where: str, notes: Notes, *,
               text_types: tuple[str, ...] = TEXT_PARTS) -> str | None:
    """The text of a content value: a string, or the text parts of a list, joined by
    blank lines; ``""`` for none. Images and other parts a text model cannot take become
    notices; content that is neither text nor a list of parts is None, with a notice."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if not isinstance(content, list):
        notes.add(f"{where}: content that is {said(content)}, not text or content parts; not sent")
        return None
    texts = []
    for part in content:
        if not isinstance(part, dict):
            notes.add(f"{where}: a content part that is {said(part)}, not an object; not sent")
            continue
        kind = part.get("type")
        if kind in text_types:
            text = part.get("text")
            if isinstance(text, str):
                texts.append(text)
            else:
                notes.add(f"{where}: a {kind} part whose text is {said(text)}; not sent")
        elif kind in NOT_TEXT:
            continue
        elif isinstance(kind, str):
            notes.add(f"{where}: a {short(kind)} part is not sent to a text model")
        else:
            notes.add(f"{where}: a content part whose type is {said(kind)}; not sent")
    return "\n\n".join(texts)


def call_arguments(value: Any) -> str:
    """A call's arguments as the JSON text a chat message carries (a string is taken as
    it is: Codex's custom tools take free text)."""
    if isinstance(value, str):
        return value
    return json.dumps({} if value is None else value, ensure_ascii=False)


def tool_call(call_id: Any, name: Any, arguments: Any, where: str, notes: Notes) -> dict[str, Any] | None:
    """A tool call, or None (with a notice) when its id or name is not a string: a call
    cannot be answered without its id, nor run without its name."""
    for field, value in (("id", call_id), ("name", name)):
        if not isinstance(value, str):
            if isinstance(call_id, str):
                notes.unsent_calls.add(call_id)
            notes.add(f"{where}: a tool call whose {field} is {said(value)}; not sent")
            return None
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": call_arguments(arguments)}}


def openai_calls(value: Any, where: str, notes: Notes) -> list[dict[str, Any] | None]:
    """The calls of a message written with OpenAI-style ``tool_calls``."""
    if value is None:
        return []
    if not isinstance(value, list):
        notes.add(f"{where}: tool_calls that is {said(value)}, not a list; not sent")
        return []
    out: list[dict[str, Any] | None] = []
    for call in value:
        if not isinstance(call, dict):
            notes.add(f"{where}: a tool call that is {said(call)}, not an object; not sent")
            continue
        kind, fn = call.get("type", "function"), call.get("function")
        if kind != "function" or not isinstance(fn, dict):
            if isinstance(call.get("id"), str):
                notes.unsent_calls.add(call["id"])
            what = f"of type {said(kind)}" if kind != "function" else f"whose function is {said(fn)}"
            notes.add(f"{where}: a tool call {what}; not sent")
            continue
        out.append(tool_call(call.get("id"), fn.get("name"), fn.get("arguments"), where, notes))
    return out


def assistant_turn(text: str | None, calls: list[dict[str, Any] | None]) -> list[dict[str, Any]]:
    sent = [c for c in calls if c is not None]
    if not text and not sent:
        return []  # an aborted turn that produced nothing, or nothing of it could be sent
    out: dict[str, Any] = {"role": "assistant", "content": text or ""}
    if sent:
        out["tool_calls"] = sent
    return [out]


def tool_result(call_id: Any, text: Callable[[], str | None], where: str, notes: Notes) -> list[dict[str, Any]]:
    """A tool result; its content is read only once its call id is known to be one. A
    result whose content cannot be sent is sent empty, so its call stays answered."""
    if not isinstance(call_id, str):
        notes.add(f"{where}: a tool result whose call id is {said(call_id)}; not sent")
        return []
    return [{"role": "tool", "tool_call_id": call_id, "content": text() or ""}]
