"""A scripted model that answers every understanding task from a gold annotation.

It reads each prompt the way a model would (which task, which unit, which ids stand for
which operation or record) and answers the gold choice in the task's schema, so a
pipeline run against it is exact by construction: any deviation is a bug in the
pipeline's prompts, schemas, checks or assembly. ``faults`` injects failures per call.

Gold::

    {"units": ["Book Sakura for 4 at 7pm", "cancel the Luigi's booking"],
     "route": {"Book Sakura for 4 at 7pm": ["book_table"], ...},
     "locate": {("Book Sakura for 4 at 7pm", "book_table"): "sakura", ...},      # record id or None
     "extract": {("Book Sakura for 4 at 7pm", "book_table"): {"time": ("7pm", "7pm"), ...}},
     "coverage": ["words that carry a request"],          # optional
     "verify": {"time": "supported"}}                     # optional, default supported
"""

from __future__ import annotations

import json
import re
import threading

from boundctx.providers import ScriptedReply
from boundctx.understanding import Param
from boundctx.understanding.normalise import supports
from boundctx.understanding.tasks import INSTRUCTIONS, Words

KIND_OF = {text: kind for kind, text in INSTRUCTIONS.items()}


def task_kind(request) -> str:
    return KIND_OF[request.messages[0]["content"]]


def _message(body: str) -> str:
    return body.split("<<<\n", 1)[1].split("\n>>>\n", 1)[0]


def span(message: str, text: str, near: str = "") -> dict:
    """The word span of ``text`` in ``message`` (searched inside ``near`` first)."""
    base = message.find(near) if near and near in message else 0
    at = message.find(text, base)
    if at < 0:
        at = message.find(text)
    assert at >= 0, f"{text!r} is not in {message!r}"
    numbers = Words(message).of(at, at + len(text))
    return {"first": numbers[0], "last": numbers[-1]}


def _lines(body: str, header: str) -> dict[str, str]:
    """``id: text`` lines after ``header`` -> {text's first field: id}."""
    block = body.split(header, 1)[1]
    out = {}
    for line in block.splitlines():
        m = re.match(r"^(\w+): (.*)$", line)
        if m:
            out[m.group(2)] = m.group(1)
    return out


class Oracle:
    """``Oracle(gold, records)(request)`` answers like a perfect model.

    Parameters
    ----------
    gold : dict
    records : list of Record
        To map record ids in the gold to the prompt's r-ids.
    faults : callable, optional
        ``faults(kind, n) -> ScriptedReply | str | Exception | None``: n counts calls of
        that kind from 1; None answers normally.
    """

    def __init__(self, gold, records=(), faults=None):
        self.gold = gold
        self.records = list(records)
        self.faults = faults
        self.calls = {}
        self.lock = threading.Lock()

    def __call__(self, request):
        kind = task_kind(request)
        with self.lock:
            self.calls[kind] = n = self.calls.get(kind, 0) + 1
        if self.faults is not None:
            fault = self.faults(kind, n)
            if fault is not None:
                return fault
        # messages[1] is the task's own prompt, also in a repair (which appends to it).
        return json.dumps(getattr(self, kind)(request.messages[1]["content"]))

    # -- per task ---------------------------------------------------------------------

    def segment(self, body):
        units = self.gold["units"]
        if "A previous split left out" in body and "resegmented" in self.gold:
            units = self.gold["resegmented"]
        message, out, pos = _message(body), [], 0
        for u in units:
            at = message.find(u, pos)
            out.append(span(message, u, message[at:]))
            pos = at + len(u)
        return {"units": out}

    def coverage(self, body):
        """Flags a gap holding words the gold calls a constraint, or a gold unit's words."""
        gaps = _lines(body, "Gaps (words in no unit):\n")
        carried = list(self.gold.get("coverage", ())) + list(self.gold["units"])
        chosen = [gid for text, gid in gaps.items() if any(w in text or text in w for w in carried)]
        return {"constraints": chosen or ["none"]}

    def _inside(self, unit):
        """The gold units within ``unit`` (itself, or the parts of a whole-message unit)."""
        known = list(dict.fromkeys(self.gold["units"] + self.gold.get("resegmented", [])))
        return [unit] if unit in known else [g for g in known if g in unit]

    def _keyed(self, table, unit, op):
        for g in self._inside(unit):
            if (g, op) in table:
                return table[(g, op)]
        return table.get((unit, op))

    def route(self, body):
        unit = re.search(r"The part to route:\n(.*?)\n\nOperations:", body, re.S).group(1)
        ops = {text.split(" - ", 1)[0]: oid for text, oid in _lines(body, "Operations:\n").items()}
        names = [n for g in self._inside(unit) for n in self.gold["route"].get(g, [])]
        return {"operations": [ops[n] for n in dict.fromkeys(names)] or ["none"]}

    def _unit_op(self, body):
        unit = re.search(r"The request:\n(.*?)\n\n", body, re.S).group(1)
        op = re.search(r"(?:It asks to |Operation: )([\w.]+)", body).group(1)
        return unit, op

    def locate(self, body):
        unit, op = self._unit_op(body)
        want = self._keyed(self.gold["locate"], unit, op)
        if want is None:
            return {"record": "none"}
        listed = [line.split(": ", 1)[0] for line in body.split("Records, in the order the user sees them:\n", 1)[1]
                  .splitlines() if line]
        kind_records = [r for r in self.records if r.id == want]
        described = kind_records[0]
        # r-ids follow the candidates' order: the records of this kind, as given
        candidates = [r for r in self.records if r.kind == described.kind]
        return {"record": listed[[r.id for r in candidates].index(want)]}

    def extract(self, body):
        unit, op = self._unit_op(body)
        gold = self._keyed(self.gold["extract"], unit, op) or {}
        names = re.findall(r"^- (\w+) \(", re.split(r"Arguments[^\n]*:\n", body, maxsplit=1)[1], re.M)
        m = _message(body)
        return {"arguments": {n: {"evidence": span(m, gold[n][0], unit), "value": gold[n][1]} if n in gold
                              else {"evidence": None, "value": None} for n in names}}

    def verify(self, body):
        """Supported when the value is what its words say (or as the gold overrides)."""
        verdicts = {}
        for name, value, words in re.findall(r"^- (\w+): value (.*) from the words (.*)$", body, re.M):
            value, words = json.loads(value), json.loads(words)
            kind = {bool: "boolean", int: "integer", float: "number", list: "array"}.get(type(value), "string")
            ok = supports(value, words, Param(name, kind)) or words.strip().lower() == str(value).lower()
            verdicts[name] = self.gold.get("verify", {}).get(name, "supported" if ok else "unsupported")
        return {"verdicts": verdicts}

    def single_call(self, body):
        ops = {text.split(" - ", 1)[0]: oid for text, oid in _lines(body.split("\n\nRecords:", 1)[0],
                                                                     "Operations:\n").items()}
        acts = []
        for unit in self.gold["units"]:
            for name in self.gold["route"].get(unit, []):
                want = self.gold["locate"].get((unit, name))
                record = f"r{[r.id for r in self.records].index(want) + 1}" if want else "none"
                gold = self.gold["extract"].get((unit, name), {})
                params = re.search(rf"^{ops[name]}: .*? Arguments: (.*)$", body, re.M).group(1)
                names = [] if params == "no arguments" else re.findall(r"(?:^|, )(\w+) \(", params)
                m = _message(body)
                acts.append({"operation": ops[name], "record": record, "arguments": {
                    n: {"evidence": span(m, gold[n][0], unit), "value": gold[n][1]} if n in gold
                    else {"evidence": None, "value": None} for n in names}})
        return {"acts": acts}

    def question_frame(self, body):
        missing = re.findall(r"^([@\w]+): ", body.split("Missing:\n", 1)[1], re.M)
        return {"ask_about": missing}


def cut(text: str = '{"units": [{"first": 1, "la') -> ScriptedReply:
    """An output cut at max_tokens."""
    return ScriptedReply(text, "length")
