"""What a turn produces, and how code assembles it: no model and no threads here.

A :class:`Plan` is data: the units of the message, one :class:`Act` per operation asked
for, the :class:`Question` to ask before an act can go ahead, and a :class:`Notice`
for whatever the turn could not do. The pipeline (:mod:`.runner`) calls the helpers
below with its tasks' checked results; :func:`assemble` makes the plan, holding every
act a part not understood may touch (:func:`is_held`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import msgspec

from boundctx.understanding.budget import BudgetReport
from boundctx.understanding.catalog import Operation, Record
from boundctx.understanding.normalise import ungrounded
from boundctx.understanding.tasks import Extracted, Unit

__all__ = ["HOLD_ALL", "HOLD_OPERATION", "RECORD", "Act", "ActStatus", "Click", "Notice", "NoticeKind", "Plan",
           "PlanStatus", "Question", "UnitResult", "assemble", "failed_closed", "finish_act", "is_held",
           "no_ground_notice", "render_question", "without_ground"]

#: Where an act stands: it can go ahead, it waits for the user's answers, or a part of
#: the turn not understood may touch its record.
ActStatus = Literal["ready", "needs_input", "held"]
#: What a notice says the turn could not do.
NoticeKind = Literal["not_understood", "no_operation", "no_record", "lost_constraint", "segmentation_failed",
                     "no_ground"]
#: How a turn ended (see :class:`Plan`).
PlanStatus = Literal["ready", "needs_input", "incomplete", "nothing", "failed_closed"]


class Click(msgspec.Struct, frozen=True):
    """A structural event from the UI: the user chose the operation (and record)."""

    operation: str
    record: str | None = None


class Act(msgspec.Struct, frozen=True):
    """One operation the message asks for.

    Attributes
    ----------
    unit : str
    operation : str
    record : str or None
    arguments : dict
        Typed values (declared defaults filled in for optional arguments not given).
    evidence : dict
        For each argument given, the message's words it came from.
    status : ActStatus
        ``"ready"``, ``"needs_input"`` (see the plan's questions) or ``"held"`` (a unit
        of this turn that may touch the same record was not understood).
    missing : list of str
        ``"@record"`` (which record) and the arguments not known: required ones not
        given, and any whose value its words did not support or the message does not
        show (a ``"no_ground"`` notice says which).
    """

    unit: str
    operation: str
    record: str | None
    arguments: dict[str, Any]
    evidence: dict[str, str]
    status: ActStatus
    missing: list[str] = []


class Question(msgspec.Struct, frozen=True):
    """What to ask the user before an act can be carried out."""

    unit: str
    operation: str
    about: list[str]
    text: str
    candidates: list[str] = []


#: The missing item that stands for "which record" (no argument name starts with "@").
RECORD = "@record"
#: In ``Notice.holds``: every act of the turn.
HOLD_ALL = "*"
#: In ``Notice.holds``: a prefix naming an operation on no record.
HOLD_OPERATION = "op:"


class Notice(msgspec.Struct, frozen=True):
    """Something the turn could not do, said instead of guessed.

    Attributes
    ----------
    kind : NoticeKind
        ``"not_understood"``, ``"no_operation"`` (the unit asks for nothing in the
        catalog), ``"no_record"``, ``"lost_constraint"``, ``"segmentation_failed"``,
        ``"no_ground"`` (arguments asked for because the message does not show the
        value a model gave: the message names each and why).
    unit : str or None
    message : str
    bound : str, optional
        The bound whose exhaustion caused it (``budget.exhausted{bound}``).
    holds : list of str
        For a part not understood, the acts it holds: record ids, ``"op:<name>"`` for
        acts of an operation on no record, or ``"*"`` for every act of the turn.
    """

    kind: NoticeKind
    unit: str | None
    message: str
    bound: str | None = None
    holds: list[str] = []


class Plan(msgspec.Struct, frozen=True):
    """The understanding of one message.

    Attributes
    ----------
    turn : str
    status : PlanStatus
        ``"ready"`` (every unit understood; acts to carry out, nothing to ask),
        ``"needs_input"`` (questions to ask first), ``"incomplete"`` (a unit was not
        understood: see the notices; acts on records it may touch are held, the others
        may go ahead), ``"nothing"`` (understood, and no act asked for), or
        ``"failed_closed"`` (segmentation or a constraint failed: no act at all).
    units : list of Unit
    acts : list of Act
    questions : list of Question
    notices : list of Notice
    budget : BudgetReport
    shortcuts : dict
        Task kind -> how many times it was skipped because its answer was determined.
    """

    turn: str
    status: PlanStatus
    units: list[Unit]
    acts: list[Act]
    questions: list[Question]
    notices: list[Notice]
    budget: BudgetReport
    shortcuts: dict[str, int]


#: What one unit of a turn came to: its acts, its questions and its notices.
UnitResult = tuple[list[Act], list[Question], list[Notice]]


def is_held(act: Act, notices: Sequence[Notice]) -> bool:
    """Whether a notice of this plan holds ``act``."""
    for n in notices:
        for h in n.holds:
            if h == HOLD_ALL or h == act.record or (act.record is None and h == f"{HOLD_OPERATION}{act.operation}"):
                return True
    return False


def assemble(turn: str, units: list[Unit], results: Sequence[UnitResult], report: BudgetReport,
             shortcuts: Mapping[str, int]) -> Plan:
    """One plan from every unit's outputs; an act a part not understood may touch is
    held."""
    acts = [a for r in results for a in r[0]]
    questions = [q for r in results for q in r[1]]
    notices = [n for r in results for n in r[2]]
    acts = [msgspec.structs.replace(a, status="held") if is_held(a, notices) else a for a in acts]
    status: PlanStatus
    if any(n.kind == "not_understood" for n in notices):
        status = "incomplete"
    elif questions:
        status = "needs_input"
    elif acts:
        status = "ready"
    else:
        status = "nothing"
    return Plan(turn, status, units, acts, questions, notices, report, dict(shortcuts))


def failed_closed(turn: str, notice: Notice, report: BudgetReport, shortcuts: Mapping[str, int]) -> Plan:
    """The plan of a turn that fails closed: no unit and no act, one notice saying why."""
    return Plan(turn, "failed_closed", [], [], [], [notice], report, dict(shortcuts))


def finish_act(unit: Unit, op: Operation, record: Record | None, candidates: Sequence[Record],
               given: dict[str, Extracted], missing: list[str], rejected: Sequence[str] = ()) -> Act:
    """The act from what is known: declared defaults for optional arguments the message
    does not mention; required ones not given, values their words did not support and
    an unresolved record listed as missing."""
    arguments = {n: e.value for n, e in given.items()}
    for p in op.params:
        if p.name not in arguments and p.name not in rejected and not p.required and p.default is not None:
            arguments[p.name] = p.default
    missing = list(missing) + [p.name for p in op.params
                               if p.name not in arguments and (p.required or p.name in rejected)]
    return Act(unit.id, op.name, record.id if record else None, arguments,
               {n: e.evidence for n, e in given.items() if e.evidence is not None},
               "needs_input" if missing else "ready", missing)


def render_question(unit: Unit, op: Operation, about: list[str], candidates: Sequence[Record]) -> Question:
    """The question about ``about`` (missing items: :data:`RECORD` and argument names),
    in words code writes."""
    parts = []
    for item in about:
        if item == RECORD:
            names = ", ".join(c.label or c.id for c in candidates)
            parts.append(f"Which {op.record_kind} do you mean ({names})?")
        else:
            p = op.param(item)
            parts.append(f"What {item.replace('_', ' ')} should I use" + (f" ({p.description})" if p.description
                                                                         else "") + "?")
    return Question(unit.id, op.name, about, " ".join(parts),
                    [c.id for c in candidates] if RECORD in about else [])


def without_ground(message: str, op: Operation, given: Mapping[str, Extracted]) -> dict[str, str]:
    """Argument -> why the message does not show its value, for each given value code
    cannot find there (:func:`~.normalise.ungrounded`)."""
    out = {}
    for name, e in given.items():
        why = ungrounded(e.value, e.evidence or "", message, op.param(name))
        if why is not None:
            out[name] = why
    return out


def no_ground_notice(unit: Unit, op: Operation, asked: Mapping[str, str], voter: str) -> Notice:
    """The notice naming the arguments asked for because the message does not show
    them; ``voter`` is the task kind whose votes could keep such a value."""
    names = list(asked)
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return Notice("no_ground", unit.id,
                  f"{op.name}: {listed} asked for, since the message does not show the value a model gave ("
                  + "; ".join(f"{n}: {why}" for n, why in asked.items()) + "); one model's word is not enough for "
                  f"a value with no ground in the message (configure {voter} with votes >= 2 and a temperature "
                  "above 0 to let agreeing votes keep one)")
