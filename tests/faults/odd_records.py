"""The fault campaign's odd records: valid JSON lines of every dialect with one field of
another JSON type.

A transcript of each dialect (boundctx / pi v3 and older pi, Claude Code, Codex) is
written from valid record templates that reach every branch of
``boundctx.transcript.chat``. An *odd record* is one of those records with one field, at
any depth, replaced by a value of another JSON type (null, boolean, number, string,
array, object). :func:`judge` says what must hold of a transcript holding it:

- ``chat_messages`` returns (never raises);
- every message is well-formed for every provider (``support.assert_well_formed``, and
  the exact shape of a tool call);
- every other record's message is still there: whatever the conversation holds both with
  the valid record and with no record on that line at all (a tool result whose call the
  odd record held cannot be sent without it, and is not asked for);
- a message line whose messages are all gone is named in a notice (unless its field was
  given an empty value: null, "", [] or {} hold nothing to send).

:func:`odd_records` runs the campaign: every odd record of every template (or a seeded
sample) through real files and ``chat_messages``, and a sample of them through
``boundctx ask --transcript`` in real processes against a scripted model server, counted
in a :class:`~tests.faults.core.Tally`. The tests (``tests/transcript/test_chat_odd_records.py``,
``tests/faults/test_odd_records.py``) and the reliability benchmark share it.
"""

from __future__ import annotations

import collections
import copy
import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

from boundctx import Transcript
from boundctx.transcript.chat import chat_messages

from .core import CHILD_TIMEOUT, Tally

Path_ = tuple  # keys and indexes from a record's root to one field

# -- the valid templates ------------------------------------------------------------


def _pi(i: str, message: dict, parent: str | None = None) -> dict:
    return {"type": "message", "id": i, "parentId": parent, "timestamp": "2026-12-01T10:00:00.000Z",
            "message": message}


def _cc(kind: str, uuid: str, content: Any, **extra) -> dict:
    return {"type": kind, "uuid": uuid, "parentUuid": None, "sessionId": "s1", "isSidechain": False,
            "message": {"role": kind, "content": content}, **extra}


def _cx(kind: str, payload: dict) -> dict:
    return {"timestamp": "2026-12-01T10:00:00.000Z", "type": kind, "payload": payload}


def _text(text: str, kind: str = "text") -> dict:
    return {"type": kind, "text": text}


#: dialect -> transcripts (lists of records) whose lines reach every converter branch.
TEMPLATES: dict[str, list[list[dict]]] = {
    "boundctx/pi": [
        [  # pi session v3: a compaction that keeps from an id, then each kind of message
            {"type": "session", "version": 3, "id": "sess", "timestamp": "2026-12-01T10:00:00.000Z", "cwd": "/w"},
            _pi("p01", {"role": "user", "content": [_text("pi old question")], "timestamp": 1}),
            _pi("p02", {"role": "assistant", "content": [_text("pi old answer")], "stopReason": "stop",
                        "usage": {"input": 1, "output": 2}}, "p01"),
            _pi("p03", {"role": "user", "content": [_text("pi kept question")]}, "p02"),
            _pi("p04", {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "private", "thinkingSignature": "sig"}, _text("pi kept answer"),
                {"type": "toolCall", "id": "pc1", "name": "read", "arguments": {"path": "a.txt"}}]}, "p03"),
            _pi("p05", {"role": "toolResult", "toolCallId": "pc1", "toolName": "read",
                        "content": [_text("pi file a")], "isError": False}, "p04"),
            {"type": "compaction", "id": "p06", "parentId": "p05", "summary": "pi summary",
             "firstKeptEntryId": "p03", "tokensBefore": 100},
            {"type": "model_change", "id": "p07", "provider": "x", "modelId": "y"},
            _pi("p08", {"role": "user", "content": "pi new question"}, "p07"),
            _pi("p09", {"role": "assistant", "content": "pi calls", "tool_calls": [
                {"id": "pc2", "type": "function", "function": {"name": "grep", "arguments": "{\"q\": \"x\"}"}}]}),
            _pi("p10", {"role": "tool", "tool_call_id": "pc2", "content": "pi grep out"}),
            _pi("p11", {"role": "bashExecution", "command": "ls", "output": "pi ls out", "exitCode": 0,
                        "cancelled": False, "truncated": False}),
            _pi("p12", {"role": "developer", "content": "pi developer note"}),
            _pi("p13", {"role": "system", "content": [_text("pi system note")]}),
            _pi("p14", {"role": "assistant", "content": [_text("pi last answer")]}),
        ],
        [  # older pi sessions: a compaction that keeps from a line number
            {"type": "session", "id": "old", "timestamp": "2026-12-01T10:00:00.000Z", "cwd": "/w"},
            {"type": "message", "message": {"role": "user", "content": [_text("old pi first")]}},
            {"type": "message", "message": {"role": "assistant", "content": [_text("old pi second")]}},
            {"type": "message", "message": {"role": "user", "content": [_text("old pi kept")]}},
            {"type": "compaction", "summary": "old pi summary", "firstKeptEntryIndex": 3, "tokensBefore": 9},
            {"type": "message", "message": {"role": "assistant", "content": [_text("old pi after")]}},
        ],
    ],
    "claude-code": [[
        {"type": "summary", "summary": "cc title", "leafUuid": "c09"},
        _cc("user", "c01", "cc old question"),
        _cc("assistant", "c02", [_text("cc old answer")]),
        {"type": "system", "subtype": "compact_boundary", "content": "Conversation compacted", "uuid": "c03",
         "compactMetadata": {"trigger": "auto", "preTokens": 100}},
        _cc("user", "c04", "cc summary", isCompactSummary=True),
        _cc("user", "c05", [_text("cc question"), {"type": "image", "source": {
            "type": "base64", "media_type": "image/png", "data": "AAAA"}}]),
        _cc("assistant", "c06", [{"type": "thinking", "thinking": "hmm", "signature": "sig"}, _text("cc looking"),
                                 {"type": "tool_use", "id": "tu1", "name": "Read", "input": {"file_path": "a"}},
                                 {"type": "tool_use", "id": "tu2", "name": "Bash", "input": {"command": "ls"},
                                  "caller": {"type": "direct"}}]),
        _cc("user", "c07", [{"type": "tool_result", "tool_use_id": "tu1", "content": [_text("cc file a")]},
                            {"type": "tool_result", "tool_use_id": "tu2", "content": "cc ls out", "is_error": False}]),
        {"type": "progress", "uuid": "c08", "data": {"type": "hook_progress"}},
        {"type": "system", "subtype": "turn_duration", "durationMs": 5},
        _cc("assistant", "c09", [_text("cc answer")]),
    ]],
    "codex": [[
        _cx("session_meta", {"id": "s", "cwd": "/w", "originator": "codex_cli_rs"}),
        _cx("response_item", {"type": "message", "role": "user", "content": [_text("cx old question", "input_text")]}),
        _cx("compacted", {"message": "cx summary", "replacement_history": [
            {"type": "message", "role": "user", "content": [_text("cx kept question", "input_text")]},
            {"type": "compaction", "encrypted_content": "xx"},
            {"type": "message", "role": "assistant", "content": [_text("cx kept answer", "output_text")]}]}),
        _cx("event_msg", {"type": "context_compacted"}),
        _cx("turn_context", {"cwd": "/w", "model": "m"}),
        _cx("response_item", {"type": "message", "role": "developer",
                               "content": [_text("cx developer", "input_text")]}),
        _cx("response_item", {"type": "message", "role": "user", "content": [_text("cx question", "input_text")]}),
        _cx("event_msg", {"type": "user_message", "message": "cx question", "images": [], "local_images": [],
                          "text_elements": []}),
        _cx("response_item", {"type": "reasoning", "summary": [], "content": None, "encrypted_content": "e"}),
        _cx("response_item", {"type": "function_call", "name": "exec_command", "arguments": "{\"cmd\": \"ls\"}",
                              "call_id": "cc1"}),
        _cx("response_item", {"type": "custom_tool_call", "name": "apply_patch", "input": "*** Begin Patch",
                              "call_id": "cc2", "status": "completed"}),
        _cx("response_item", {"type": "function_call_output", "call_id": "cc1", "output": "cx ls out"}),
        _cx("response_item", {"type": "custom_tool_call_output", "call_id": "cc2",
                              "output": {"content": "cx patched", "success": True}}),
        _cx("event_msg", {"type": "agent_message", "message": "cx answer"}),
        _cx("response_item", {"type": "message", "role": "assistant", "phase": "final_answer",
                              "content": [_text("cx answer", "output_text")]}),
        _cx("event_msg", {"type": "user_message", "message": "cx desktop question",
                          "images": ["data:image/png;base64,AAAA"], "local_images": []}),
        _cx("response_item", {"type": "web_search_call", "status": "completed",
                              "action": {"type": "search", "query": "q"}}),
    ]],
}
DIALECTS = tuple(TEMPLATES)

#: The issue's examples, one per converter it named (each was an exception before):
#: name -> (records, the notice, the texts of the messages sent).
ISSUE_EXAMPLES: dict[str, tuple[list[dict], str, list[str]]] = {
    "OpenAI-style tool_calls without a string id": (
        [{"type": "message", "id": "a", "message": {"role": "user", "content": "list it"}},
         {"type": "message", "id": "b", "message": {"role": "assistant", "content": "listing", "tool_calls": [
             {"type": "function", "function": {"name": "ls", "arguments": "{}"}}]}},
         {"type": "message", "id": "c", "message": {"role": "assistant", "content": "done"}}],
        "message 1: a tool call whose id is null; not sent", ["list it", "listing", "done"]),
    "a call whose function is a string": (
        [{"type": "message", "message": {"role": "user", "content": "grep it"}},
         {"type": "message", "message": {"role": "assistant", "content": "", "tool_calls": [
             {"id": "c1", "type": "function", "function": "grep"}]}},
         {"type": "message", "message": {"role": "tool", "tool_call_id": "c1", "content": "found"}},
         {"type": "message", "message": {"role": "assistant", "content": "done"}}],
        "message 1: a tool call whose function is 'grep'; not sent", ["grep it", "done"]),
    "a compact summary whose message is a string": (
        [{"type": "user", "message": {"role": "user", "content": "old"}},
         {"type": "system", "subtype": "compact_boundary"},
         {"type": "user", "isCompactSummary": True, "message": "we fixed E42"},
         {"type": "user", "message": {"role": "user", "content": "and now?"}}],
        "message 1 (line 2, a compaction summary): its message is 'we fixed E42', not an object; no summary is sent",
        ["and now?"]),
    "Codex user_message images that are a number": (
        [{"type": "event_msg", "payload": {"type": "user_message", "message": "what is this?", "images": 3}},
         {"type": "response_item", "payload": {"type": "message", "role": "assistant",
                                               "content": [{"type": "output_text", "text": "a cat"}]}}],
        "message 0: the user message's images is a number, not a list; ignored", ["what is this?", "a cat"]),
    "a tool_use whose id is an object": (
        [{"type": "assistant", "message": {"role": "assistant", "content": [
            {"type": "text", "text": "reading"}, {"type": "tool_use", "id": {"x": 1}, "name": "Read", "input": {}}]}},
         {"type": "user", "message": {"role": "user", "content": "thanks"}}],
        "message 0: a tool call whose id is an object; not sent", ["reading", "thanks"]),
}
#: A line in place of a record, for "the conversation without it": no dialect's type.
REMOVED = {"type": "removed-for-reference"}


# -- odd values -----------------------------------------------------------------------


def json_type(value: Any) -> str:
    """The JSON type of a decoded value (a boolean is not a number)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


#: Values of each JSON type an odd record is given: empty ones, and ones shaped like
#: what the converters look for (a part, a call) with fields of the wrong type again.
ODD_VALUES: tuple = (None, True, 0, 7.5, "", "odd", [], ["odd", None, {"type": 1}],
                     {}, {"type": "text", "id": 1, "text": [], "content": 2})
EMPTY_VALUES = (None, "", [], {})


def fields(value: Any, path: Path_ = ()) -> Iterator[Path_]:
    """The path of every field of a record, at any depth (not the record itself)."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        yield (*path, key)
        yield from fields(child, (*path, key))


def field(record: Any, path: Path_) -> Any:
    for key in path:
        record = record[key]
    return record


def with_field(record: dict, path: Path_, value: Any) -> dict:
    """A copy of ``record`` whose field at ``path`` is ``value``."""
    out = copy.deepcopy(record)
    parent = field(out, path[:-1])
    parent[path[-1]] = value
    return out


class Odd:
    """One odd record: template ``template`` of ``dialect``, its record ``at`` with the
    field at ``path`` given ``value``."""

    __slots__ = ("dialect", "template", "at", "path", "value")

    def __init__(self, dialect: str, template: int, at: int, path: Path_, value: Any) -> None:
        self.dialect, self.template, self.at, self.path, self.value = dialect, template, at, path, value

    @property
    def records(self) -> list[dict]:
        records = TEMPLATES[self.dialect][self.template]
        return [*records[:self.at], with_field(records[self.at], self.path, self.value), *records[self.at + 1:]]

    def __repr__(self) -> str:
        return (f"{self.dialect} template {self.template}, record {self.at}, field "
                f"{'.'.join(map(str, self.path))} = {json.dumps(self.value)}")


def every_odd_record(dialect: str) -> Iterator[Odd]:
    """Every odd record of ``dialect``'s templates, with the values of :data:`ODD_VALUES`."""
    for t, records in enumerate(TEMPLATES[dialect]):
        for at, record in enumerate(records):
            for path in fields(record):
                kind = json_type(field(record, path))
                for value in ODD_VALUES:
                    if json_type(value) != kind:
                        yield Odd(dialect, t, at, path, value)


# -- reading and judging ------------------------------------------------------------------


def write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def read(path: Path):
    """(window, conversation) of the whole transcript at ``path``, as ``ask`` reads it."""
    with Transcript.open(path) as t:
        window = t.window(message_limit=max(1, t.message_count), content_limit=None)
    return window, chat_messages(window)


def atoms(messages: list[dict]) -> collections.Counter:
    """What a conversation says, piece by piece: each text, each call, each result
    (calls merged into another message stay the same pieces). Values are taken by their
    ``repr``, so a malformed message is counted, not raised on."""
    out: collections.Counter = collections.Counter()
    for m in messages:
        if not isinstance(m, dict):
            out[("not a message", repr(m))] += 1
            continue
        if m.get("role") == "tool":
            out[("result", repr(m.get("tool_call_id")), repr(m.get("content")))] += 1
            continue
        if m.get("content"):
            out[(repr(m.get("role")), repr(m.get("content")))] += 1
        calls = m.get("tool_calls")
        for call in calls if isinstance(calls, list) else [calls] if calls else []:
            call = call if isinstance(call, dict) else {"id": call}
            fn = call.get("function") if isinstance(call.get("function"), dict) else {"name": call.get("function")}
            out[("call", repr(call.get("id")), repr(fn.get("name")), repr(fn.get("arguments")))] += 1
    return out


def well_formed_problems(messages: list[dict]) -> list[str]:
    """What keeps ``messages`` from being sent to every provider (empty: nothing)."""
    from tests._support import assert_well_formed

    try:
        assert_well_formed(messages, json_arguments=False)  # Codex's custom tools take free text
    except (AssertionError, KeyError, TypeError) as exc:
        return [f"not well-formed ({type(exc).__name__} {exc}): {json.dumps(messages)[:400]}"]
    problems = []
    for m in messages:
        if not set(m) <= {"role", "content", "tool_calls", "tool_call_id"}:
            problems.append(f"a message with keys {sorted(m)}")
        if m["role"] == "tool" and not isinstance(m.get("tool_call_id"), str):
            problems.append(f"a tool result whose call id is {m.get('tool_call_id')!r}")
        calls = m.get("tool_calls", [])
        if not isinstance(calls, list) or (calls and m["role"] != "assistant"):
            problems.append(f"tool_calls {calls!r} on a {m['role']} message")
            continue
        for c in calls:
            ok = (isinstance(c, dict) and set(c) == {"id", "type", "function"} and isinstance(c["id"], str)
                  and c["type"] == "function" and isinstance(c["function"], dict)
                  and set(c["function"]) == {"name", "arguments"}
                  and all(isinstance(v, str) for v in c["function"].values()))
            if not ok:
                problems.append(f"a tool call not of the form {{id, type, function: {{name, arguments}}}}: {c!r}")
    return problems


class Reference:
    """A template read once valid and once without each of its records (cached)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.cache: dict = {}

    def atoms(self, dialect: str, template: int, without: int | None = None) -> collections.Counter:
        key = (dialect, template, without)
        if key not in self.cache:
            records = list(TEMPLATES[dialect][template])
            if without is not None:
                records[without] = REMOVED
            path = write(self.workdir / f"reference-{len(self.cache)}.jsonl", records)
            self.cache[key] = atoms(read(path)[1].messages)
        return self.cache[key]


def judge(odd: Odd, window, conversation, reference: Reference) -> tuple[list[str], int, int]:
    """(problems, messages expected to stay, of them lost) for ``conversation`` read from
    ``window``, the transcript of ``odd``; see the module docstring for what must hold."""
    problems = well_formed_problems(conversation.messages)
    valid = reference.atoms(odd.dialect, odd.template)
    without = reference.atoms(odd.dialect, odd.template, odd.at)
    expected = valid & without  # what every other record contributes
    got = atoms(conversation.messages)
    lost = expected - got
    if lost:
        problems.append(f"lost {sorted(lost)[:4]}")
    line = odd.at  # one record per line, no blank lines
    entry = next((e for e in [*window.messages, *window.compactions] if e.line == line), None)
    own = valid - without
    if (entry is not None and own and not (got - without) and not any(odd.value == e and type(odd.value) is type(e)
                                                                       for e in EMPTY_VALUES)):
        name = rf"message {entry.index}\b" if entry.index is not None else rf"compaction at line {line}\b"
        if not any(re.search(name, n) for n in conversation.notices):
            problems.append(f"its messages are gone and no notice names it ({name!r}): {conversation.notices}")
    return problems, sum(expected.values()), sum(lost.values())


# -- the campaign -------------------------------------------------------------------------


def _ask(path: Path, url: str) -> subprocess.CompletedProcess:
    """``boundctx ask --transcript`` on ``path`` in a process of its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOUNDCTX_") or k == "BOUNDCTX_CACHE_DIR"}
    env["BOUNDCTX_CONFIG"] = str(path.with_suffix(".toml"))  # none: the defaults
    return subprocess.run([sys.executable, "-m", "boundctx", "ask", "--transcript", str(path), "--no-save",
                           "--provider", "remote", "--base-url", url, "--max-tokens", "16", "go on"],
                          capture_output=True, text=True, timeout=CHILD_TIMEOUT, env=env, stdin=subprocess.DEVNULL)


def _judge_ask(tally: Tally, odd: Odd, out: subprocess.CompletedProcess, notices: list[str]) -> None:
    if "Traceback" in out.stderr or out.returncode != 0:
        tally.crashes += 1
        tally.problem(f"{odd!r}: boundctx ask exited {out.returncode}: {out.stderr[-800:]}")
    elif out.stdout.strip() != "ok":
        tally.wrong += 1
        tally.problem(f"{odd!r}: boundctx ask answered {out.stdout[:200]!r}")
    elif not all(n in out.stderr for n in notices):
        tally.wrong += 1
        tally.problem(f"{odd!r}: boundctx ask did not print the notices {notices}: {out.stderr[-800:]}")


def odd_records(workdir: Path, *, per_dialect: int | None = None, asks: int = 0, seed: int = 0) -> Tally:
    """Odd records of every dialect through ``chat_messages`` (real files), and ``asks``
    of them per dialect through ``boundctx ask --transcript`` (real processes, a scripted
    model server).

    ``per_dialect``: a seeded sample of that many odd records per dialect (None: every
    one). The tally counts odd records as faults, the messages of the other records that
    must stay as acknowledged, those missing as lost, malformed messages, lines gone
    without a notice and wrong answers as wrong, exceptions and tracebacks as crashes.
    """
    from tests._support.servers import Scripted, delta

    tally = Tally("odd-but-valid records of every dialect")
    started = time.monotonic()
    rng = random.Random(seed)
    workdir.mkdir(parents=True, exist_ok=True)
    reference = Reference(workdir)
    server = Scripted([(200, [delta("ok"), delta(finish="stop")])] * (asks * len(DIALECTS) + 1)) if asks else None
    try:
        for dialect in DIALECTS:
            odds = list(every_odd_record(dialect))
            tally.note(f"odd records possible: {dialect}", len(odds))
            if per_dialect is not None and per_dialect < len(odds):
                odds = rng.sample(odds, per_dialect)
            asked = set(rng.sample(range(len(odds)), min(asks, len(odds))))
            for n, odd in enumerate(odds):
                tally.faults += 1
                tally.note(f"odd records tried: {dialect}")
                path = write(workdir / f"{dialect.replace('/', '-')}-{n}.jsonl", odd.records)
                try:
                    window, conversation = read(path)
                except Exception as exc:  # noqa: BLE001 - any exception is what the campaign counts
                    tally.crashes += 1
                    tally.problem(f"{odd!r}: chat_messages raised {type(exc).__name__}: {exc}")
                    continue
                problems, expected, lost = judge(odd, window, conversation, reference)
                tally.acknowledged += expected
                tally.lost += lost
                tally.wrong += sum(1 for p in problems if not p.startswith("lost "))
                for p in problems:
                    tally.problem(f"{odd!r}: {p}")
                if n in asked:
                    tally.note(f"boundctx ask runs: {dialect}")
                    try:
                        out = _ask(path, server.url)
                    except subprocess.TimeoutExpired:
                        tally.hangs += 1
                        tally.problem(f"{odd!r}: boundctx ask did not end within {CHILD_TIMEOUT:.0f} s")
                        continue
                    _judge_ask(tally, odd, out, conversation.notices)
                path.unlink()
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
    tally.seconds = time.monotonic() - started
    return tally
