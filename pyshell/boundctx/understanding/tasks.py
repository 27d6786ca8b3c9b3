"""The task kinds: for each, the prompt, the strict schema of this turn, and the check.

Every task sees the user's message verbatim and only the context its decision needs:

============== ========================================== =====================================
task           decides                                    answers (closed sets built per turn)
============== ========================================== =====================================
segment        the separate requests in the message       ``{"units": [span]}``
coverage       which uncovered words carry a request      ``{"constraints": [gap | "none"]}``
route          every operation one unit asks for          ``{"operations": [op | "none"]}``
locate         the record one request acts on             ``{"record": record | "none"}``
extract        each argument: its words, then its value   ``{"arguments": {name: {"evidence":
                                                          span, "value"}}}`` (null: not given)
verify         whether each value follows from its words  ``{"verdicts": {name: "supported" |
                                                          "unsupported"}}``
question_frame what to ask when a request cannot go ahead ``{"ask_about": [missing id]}``
============== ========================================== =====================================

A span is ``{"first": i, "last": j}``, numbers of the message's words as the prompt
lists them (:class:`Words`): quotes are verbatim by construction.

A :class:`TaskCall` carries one call's messages, schema and check; the check runs on the
parsed output after the schema check and returns the task's result or raises
:class:`~boundctx.errors.TaskOutputInvalid` with what a repair should be told.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import msgspec

from boundctx.errors import TaskOutputInvalid
from boundctx.understanding import schema as S
from boundctx.understanding.catalog import Operation, Param, Record
from boundctx.understanding.normalise import normalise

__all__ = ["CONNECTORS", "INSTRUCTIONS", "MAX_TOKENS", "TASK_KINDS", "Extracted", "Gap", "TaskCall", "TaskKind", "Unit",
           "Words", "coverage_call", "extract_call", "gaps", "locate_call", "question_frame_call", "route_call",
           "segment_call", "verify_call", "whole_message_unit", "whole_plan_call"]

#: Every task kind: the pipeline's, and ``single_call``, the baseline's one call.
TaskKind = Literal["segment", "coverage", "route", "locate", "extract", "verify", "question_frame", "single_call"]

#: The pipeline's task kinds, in the order a turn runs them.
TASK_KINDS: tuple[TaskKind, ...] = ("segment", "coverage", "route", "locate", "extract", "verify", "question_frame")

#: The default instructions of each task (a task's configuration may replace them).
INSTRUCTIONS = {
    "segment": (
        "Split the user's message into units. A unit is one separate request (or one statement the requests "
        "depend on), given as the numbers of its first and last words. Keep each request's details (times, "
        "names, numbers, conditions) inside its unit. Units follow the message's order and do not overlap. "
        "Answer with JSON only."),
    "coverage": (
        "Some words of the user's message are in no unit. For each numbered gap, decide whether it carries a "
        "request or a condition on one (a time, a name, a number, a 'but not', a correction). Answer with "
        "the ids of the gaps that do, or [\"none\"]. Answer with JSON only."),
    "route": (
        "Which operations does this part of the user's message ask for? List every one it asks for, or "
        "[\"none\"] when it asks for none of them. Answer with JSON only."),
    "locate": (
        "Which record does this request act on? Answer with its id, or \"none\" when the request does not "
        "say which one. Answer with JSON only."),
    "extract": (
        "For each argument, first give the numbers of the first and last words of the message that give it "
        "(evidence), then write its value. When the message does not give an argument, answer null for both. "
        "Never guess. Answer with JSON only."),
    "verify": (
        "For each argument, does the value follow from the quoted words of the message? Answer \"supported\" "
        "or \"unsupported\". Answer with JSON only."),
    "single_call": (
        "List every operation the user's message asks for, as acts: the operation, the record it acts on "
        "(or \"none\"), and each argument as the numbers of the first and last words of the message that give "
        "it (evidence), then its value; null for both when the message does not give it. Never guess. An "
        "empty list when the message asks for none of the operations. Answer with JSON only."),
    "question_frame": (
        "The request cannot be carried out yet. Which of the missing items should the assistant ask the user "
        "about? Choose every item that must be known. Answer with JSON only."),
}

#: Output budget of each task's call, in tokens: room for the longest valid answer even
#: as a byte estimate counts it (a constrained decoder stops at the closing brace, so
#: the room costs nothing; an unconstrained one that rambles is cut and repaired).
MAX_TOKENS = {"segment": 512, "coverage": 64, "route": 96, "locate": 32, "extract": 512, "verify": 128,
              "question_frame": 96, "single_call": 1024}

#: Gaps made only of these words join requests; they carry nothing to lose.
CONNECTORS = frozenset(
    "and also then plus please thanks thank you too as well but so ok okay oh hi hello hey just".split())


class Unit(msgspec.Struct, frozen=True):
    """One request in the message: a verbatim span."""

    id: str
    text: str
    start: int
    end: int


class Gap(msgspec.Struct, frozen=True):
    """Words of the message in no unit."""

    id: str
    text: str
    start: int
    end: int


class TaskCall(msgspec.Struct, frozen=True):
    """One task, ready to run.

    Attributes
    ----------
    kind : TaskKind
    unit : str or None
        The unit it is about (None for whole-message tasks).
    key : str
        What else tells it apart within its unit (the operation for extract).
    messages : list of dict
    schema : dict
    check : callable
        ``check(parsed_output) -> result``; raises TaskOutputInvalid.
    message : str
        The user's message (every prompt quotes it verbatim).
    max_tokens : int, optional
        This call's output budget when it depends on its inputs (default:
        :data:`MAX_TOKENS` of its kind).
    """

    kind: TaskKind
    unit: str | None
    key: str
    messages: list[dict[str, Any]]
    schema: dict[str, Any]
    check: Callable[[Any], Any]
    message: str
    max_tokens: int | None = None


def _messages(kind: TaskKind, instructions: str | None, body: str) -> list[dict[str, Any]]:
    return [{"role": "system", "content": instructions or INSTRUCTIONS[kind]}, {"role": "user", "content": body}]


def _quoted(message: str) -> str:
    return f"User's message:\n<<<\n{message}\n>>>"


def _ids(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i + 1}" for i in range(n)]


# -- words: the closed set every quote is taken from --------------------------------------

#: Above this many words a span's ends are integers checked in code, not an enum.
_ENUM_WORDS = 400
_TRAILING = ",.;:"  # a closing "?" or "!" says something; keep it


class Words:
    """The message's words (whitespace-separated), numbered from 1.

    Quotes are word spans, ``{"first": i, "last": j}``: the model picks numbers from a
    closed set and code cuts the text, so every quote is verbatim by construction (a
    small model asked to copy words paraphrases them: decision 0012).
    """

    def __init__(self, message: str) -> None:
        self.message = message
        self.spans = [(m.start(), m.end()) for m in re.finditer(r"\S+", message)]

    def __len__(self) -> int:
        return len(self.spans)

    def numbered(self) -> str:
        return " ".join(f"[{i + 1}] {self.message[a:b]}" for i, (a, b) in enumerate(self.spans))

    def schema(self, first: int = 1, last: int | None = None) -> dict[str, Any]:
        """A span's schema; ``first``..``last`` narrow it to part of the message (a
        unit's own words)."""
        last = len(self) if last is None else last
        count = last - first + 1
        ends = S.enum(list(range(first, last + 1))) if 0 < count <= _ENUM_WORDS else {"type": "integer"}
        return S.obj({"first": ends, "last": ends})

    def cut(self, span: Mapping[str, int], where: str, lo: int = 1, hi: int | None = None) -> tuple[int, int]:
        """The character range of words ``first``..``last`` (a trailing ``, ; :`` or a
        lone final ``.`` left out); TaskOutputInvalid for numbers outside ``lo``..``hi``
        or reversed."""
        hi = len(self) if hi is None else hi
        first, last = span["first"], span["last"]
        if not lo <= first <= last <= hi:
            raise TaskOutputInvalid(f"{where}: words {first}-{last} are not a span of words {lo}-{hi} "
                                    "(first <= last)")
        start, end = self.spans[first - 1][0], self.spans[last - 1][1]
        while end > start + 1 and self.message[end - 1] in _TRAILING:
            if self.message[end - 1] == "." and "." in self.message[self.spans[last - 1][0]:end - 1]:
                break  # "p.m." and "etc." keep their point
            end -= 1
        return start, end

    def of(self, start: int, end: int) -> list[int]:
        """The numbers of the words inside ``start``..``end``."""
        return [i + 1 for i, (a, b) in enumerate(self.spans) if a < end and b > start]


def _body_with_words(message: str, words: Words) -> str:
    return _quoted(message) + "\n\nIts words, numbered:\n" + words.numbered()


# -- segment ------------------------------------------------------------------------------


#: What can join two requests in one message: clause punctuation, a sentence break
#: followed by more text, a line break, or a joining word.
_CLAUSE_BREAK = re.compile(
    r"[,;:\n]|[.!?]\s+\S|\b(?:and|then|also|plus|but|or|after|before|instead|as well|too)\b", re.I)


def whole_message_unit(message: str) -> Unit | None:
    """The message as its only unit when nothing in it can join two requests (no clause
    punctuation, sentence break or joining word): segmentation is then determined and
    skipped. Two requests run together without a joint still reach route, which lists
    every operation a unit asks for."""
    if _CLAUSE_BREAK.search(message.strip()):
        return None
    words = Words(message)
    if not len(words):
        return None
    start, end = words.cut({"first": 1, "last": len(words)}, "message")
    return Unit("u1", message[start:end], start, end)


def _units_from_spans(words: Words, spans: Sequence[Mapping[str, int]]) -> list[Unit]:
    units: list[Unit] = []
    last = 0
    for i, span in enumerate(spans):
        if span["first"] <= last:
            raise TaskOutputInvalid(f"unit {i + 1} starts at word {span['first']}, inside or before unit {i} "
                                    f"(which ends at word {last}); units follow the message and do not overlap")
        start, end = words.cut(span, f"unit {i + 1}")
        units.append(Unit(f"u{i + 1}", words.message[start:end], start, end))
        last = span["last"]
    return units


def segment_call(message: str, *, max_units: int, left_out: Sequence[str] = (), instructions: str | None = None
                 ) -> TaskCall:
    """Split ``message`` into units, each a span of its numbered words; ``left_out``:
    words a previous split left out that carry a request (the one re-segmentation
    coverage may ask for)."""
    words = Words(message)
    body = _body_with_words(message, words)
    if left_out:
        body += ("\n\nA previous split left out these words, which carry a request or a condition; include each "
                 "in the unit it belongs to: " + "; ".join(json.dumps(w) for w in left_out))
    schema = S.obj({"units": S.array(words.schema(), min_items=1, max_items=max_units)})
    return TaskCall("segment", None, "resegment" if left_out else "", _messages("segment", instructions, body),
                    schema, lambda out: _units_from_spans(words, out["units"]), message=message)


# -- coverage -----------------------------------------------------------------------------


def gaps(message: str, units: Sequence[Unit]) -> list[Gap]:
    """The stretches of ``message`` no unit covers that hold a word other than a
    connector ("and", "please"), in order."""
    covered = sorted((u.start, u.end) for u in units)
    out: list[Gap] = []
    pos = 0
    for start, end in covered + [(len(message), len(message))]:
        if start > pos:
            text = message[pos:start]
            words = re.findall(r"\w+", text.lower())
            if any(w not in CONNECTORS for w in words):
                out.append(Gap(f"g{len(out) + 1}", text.strip(), pos, start))
        pos = max(pos, end)
    return out


def coverage_call(message: str, units: Sequence[Unit], found: Sequence[Gap], *, instructions: str | None = None
                  ) -> TaskCall:
    body = (_quoted(message) + "\n\nUnits:\n" + "\n".join(f"{u.id}: {u.text}" for u in units)
            + "\n\nGaps (words in no unit):\n" + "\n".join(f"{g.id}: {g.text}" for g in found))
    ids = [g.id for g in found]
    schema = S.obj({"constraints": S.array(S.enum(ids + [S.NONE]), min_items=1, max_items=len(ids))})

    def check(out: Any) -> list[Gap]:
        chosen = S.chosen(out["constraints"], "$.constraints")
        return [g for g in found if g.id in chosen]

    return TaskCall("coverage", None, "", _messages("coverage", instructions, body), schema, check, message=message)


# -- route --------------------------------------------------------------------------------


def route_call(message: str, unit: Unit, operations: Sequence[Operation], *, instructions: str | None = None
               ) -> TaskCall:
    ids = _ids("o", len(operations))
    body = (_quoted(message) + f"\n\nThe part to route:\n{unit.text}\n\nOperations:\n"
            + "\n".join(f"{i}: {op.name} - {op.description}" for i, op in zip(ids, operations)))
    schema = S.obj({"operations": S.array(S.enum(ids + [S.NONE]), min_items=1, max_items=len(ids))})

    def check(out: Any) -> list[Operation]:
        chosen = S.chosen(out["operations"], "$.operations")
        return [op for i, op in zip(ids, operations) if i in chosen]

    return TaskCall("route", unit.id, "", _messages("route", instructions, body), schema, check, message=message)


# -- locate -------------------------------------------------------------------------------


def _describe(record: Record) -> str:
    fields = ", ".join(f"{k}: {v}" for k, v in record.fields.items())
    return f"{record.label or record.kind}" + (f" ({fields})" if fields else "")


def locate_call(message: str, unit: Unit, operation: Operation, candidates: Sequence[Record], *,
                instructions: str | None = None) -> TaskCall:
    ids = _ids("r", len(candidates))
    body = (_quoted(message) + f"\n\nThe request:\n{unit.text}\n\nIt asks to {operation.name}: "
            f"{operation.description}\n" + (f"Guidance: {operation.guidance}\n" if operation.guidance else "")
            + "\nRecords, in the order the user sees them:\n"
            + "\n".join(f"{i}: {_describe(r)}" for i, r in zip(ids, candidates)))
    schema = S.obj({"record": S.enum(ids + [S.NONE])})

    def check(out: Any) -> Record | None:
        return None if out["record"] == S.NONE else candidates[ids.index(out["record"])]

    return TaskCall("locate", unit.id, operation.name, _messages("locate", instructions, body), schema, check,
                    message=message)


# -- extract ------------------------------------------------------------------------------


class Extracted(msgspec.Struct, frozen=True):
    """One argument as extracted: the quote, the model's value text and the typed value
    (None when the message does not give it)."""

    evidence: str | None
    value_text: str | None
    value: Any = None


def _value_schema(param: Param) -> dict[str, Any]:
    if param.enum is not None:
        return S.enum(param.enum)
    return S.string()


def extract_call(message: str, unit: Unit, operation: Operation, record: Record | None, *,
                 instructions: str | None = None) -> TaskCall:
    params = operation.params
    words = Words(message)
    inside = words.of(unit.start, unit.end) or [1, len(words)]
    lo, hi = inside[0], inside[-1]  # evidence comes from the request's own words
    lines = []
    for p in params:
        kind = p.type + (f" of {p.items}" if p.items else "") + (f", one of {p.enum}" if p.enum else "")
        lines.append(f"- {p.name} ({kind}{'' if p.required else ', optional'}): {p.description}")
    body = (_body_with_words(message, words) + f"\n\nThe request:\n{unit.text}\n\nOperation: {operation.name} - "
            f"{operation.description}\n" + (f"Guidance: {operation.guidance}\n" if operation.guidance else "")
            + (f"It acts on: {_describe(record)}\n" if record is not None else "")
            + f"Arguments (evidence from words {lo}-{hi}):\n" + "\n".join(lines))
    schema = S.obj({"arguments": _arguments_schema(operation, words, lo, hi)})

    def check(out: Any) -> dict[str, Extracted]:
        return _check_arguments(operation, out["arguments"], words, "", lo, hi)

    return TaskCall("extract", unit.id, operation.name, _messages("extract", instructions, body), schema, check,
                    message=message, max_tokens=_arguments_budget(len(params), message))


# -- verify -------------------------------------------------------------------------------


def verify_call(message: str, unit: Unit, operation: Operation, values: dict[str, Extracted], *,
                instructions: str | None = None) -> TaskCall:
    names = list(values)
    body = (_quoted(message) + f"\n\nOperation: {operation.name} - {operation.description}\n"
            + (f"Guidance: {operation.guidance}\n" if operation.guidance else "") + "Arguments:\n"
            + "\n".join(f"- {n}: value {json.dumps(values[n].value, default=str)} from the words "
                        f"{json.dumps(values[n].evidence)}" for n in names))
    schema = S.obj({"verdicts": S.obj({n: S.enum(["supported", "unsupported"]) for n in names})})
    return TaskCall("verify", unit.id, operation.name, _messages("verify", instructions, body), schema,
                    lambda out: {n: out["verdicts"][n] == "supported" for n in names}, message=message)


# -- the single-call baseline -------------------------------------------------------------


def _arguments_budget(n_params: int, message: str) -> int:
    """Output tokens for ``n_params`` arguments: a span and a value each, the value no
    longer than about the message. Small enough that a value running away (a small
    model's failure mode) is cut within seconds, not minutes."""
    return 32 + n_params * (64 + len(message) // 2)


def _arguments_schema(operation: Operation, words: Words, lo: int = 1, hi: int | None = None) -> dict[str, Any]:
    return S.obj({p.name: S.obj({"evidence": S.nullable(words.schema(lo, hi)), "value": S.nullable(_value_schema(p))})
                  for p in operation.params})


def _check_arguments(operation: Operation, arguments: dict[str, Any], words: Words, where: str, lo: int = 1,
                     hi: int | None = None) -> dict[str, Extracted]:
    """Evidence is a span of the message's words, values normalise to their declared
    types (shared by extract and the single-call baseline)."""
    result: dict[str, Extracted] = {}
    problems = []
    for p in operation.params:
        item = arguments[p.name]
        span, value = item["evidence"], item["value"]
        if span is None and value is None:
            result[p.name] = Extracted(None, None)
            continue
        if span is None:
            problems.append(f"{where}{p.name}: a value needs the words of the message that give it (evidence), "
                            "or null for both")
            continue
        if value is None:
            problems.append(f"{where}{p.name}: evidence without a value; give the value, or null for both")
            continue
        try:
            start, end = words.cut(span, f"{where}{p.name}", lo, hi)
        except TaskOutputInvalid as exc:
            problems.append(str(exc))
            continue
        text = value if isinstance(value, str) else json.dumps(value)
        try:
            typed = normalise(text, p)
        except ValueError as exc:
            problems.append(f"{where}{p.name}: {exc}")
            continue
        result[p.name] = Extracted(words.message[start:end], text, typed)
    if problems:
        raise TaskOutputInvalid("; ".join(problems))
    return result


def whole_plan_call(message: str, operations: Sequence[Operation], records: Sequence[Record], *,
                    max_acts: int, instructions: str | None = None) -> TaskCall:
    """The whole plan in one call, one schema: the baseline the pipeline is measured
    against. Each act's shape depends on its operation (``anyOf`` one form per
    operation), so arguments are as strictly typed as extract's."""
    op_ids = _ids("o", len(operations))
    rec_ids = _ids("r", len(records))
    words = Words(message)
    forms = []
    for oid, op in zip(op_ids, operations):
        admissible = [rid for rid, r in zip(rec_ids, records) if op.record_kind and r.kind == op.record_kind]
        forms.append(S.obj({"operation": S.enum([oid]), "record": S.enum(admissible + [S.NONE]),
                            "arguments": _arguments_schema(op, words)}))
    lines = []
    for oid, op in zip(op_ids, operations):
        params = ", ".join(f"{p.name} ({p.type}{'' if p.required else ', optional'}): {p.description}"
                           for p in op.params) or "no arguments"
        acts_on = f" Acts on a {op.record_kind}." if op.record_kind else ""
        lines.append(f"{oid}: {op.name} - {op.description}.{acts_on} Arguments: {params}")
    body = _body_with_words(message, words) + "\n\nOperations:\n" + "\n".join(lines)
    if records:
        body += "\n\nRecords:\n" + "\n".join(f"{rid}: {_describe(r)}" for rid, r in zip(rec_ids, records))
    schema = S.obj({"acts": S.array({"anyOf": forms}, max_items=max_acts)})

    def check(out: Any) -> list[tuple[Operation, Record | None, dict[str, Extracted]]]:
        acts = []
        for k, act in enumerate(out["acts"]):
            op = operations[op_ids.index(act["operation"])]
            record = None if act["record"] == S.NONE else records[rec_ids.index(act["record"])]
            acts.append((op, record, _check_arguments(op, act["arguments"], words, f"acts[{k}].")))
        return acts

    most = max((len(op.params) for op in operations), default=0)
    budget = min(MAX_TOKENS["single_call"], 32 + 4 * (48 + _arguments_budget(most, message)))
    return TaskCall("single_call", None, "", _messages("single_call", instructions, body), schema, check,
                    message=message, max_tokens=budget)


# -- question_frame -----------------------------------------------------------------------


def question_frame_call(message: str, unit: Unit, operation: Operation, missing: Sequence[tuple[str, str]], *,
                        instructions: str | None = None) -> TaskCall:
    """``missing``: (id, description) of what is not known: ``"record"`` and argument
    names."""
    ids = [m[0] for m in missing]
    body = (_quoted(message) + f"\n\nThe request:\n{unit.text}\n\nOperation: {operation.name} - "
            f"{operation.description}\n\nMissing:\n" + "\n".join(f"{i}: {d}" for i, d in missing))
    schema = S.obj({"ask_about": S.array(S.enum(ids), min_items=1, max_items=len(ids))})

    def check(out: Any) -> list[str]:
        about = S.chosen(out["ask_about"], "$.ask_about")
        return [i for i in ids if i in about]

    return TaskCall("question_frame", unit.id, operation.name, _messages("question_frame", instructions, body),
                    schema, check, message=message)
