"""A value the message does not show is never kept on one model's word (decision 0017):
the issue's two examples, the rule value by value, the votes that may keep such a
value, what the plan says, and a model answering at random under every bound."""

import json
import re
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from boundctx import config
from boundctx.providers import ScriptedProvider
from boundctx.understanding import Bounds, Catalog, Click, Param, Record, TaskConfig, Understander
from boundctx.understanding.normalise import ungrounded

from .random_model import RandomModel
from tests._support.oracle import Oracle, task_kind

TRACKER = {
    "name": "tracker",
    "operations": [
        {"name": "create_task", "description": "Create a task",
         "params": [{"name": "assignee", "type": "string", "description": "who does it"},
                    {"name": "due_days", "type": "integer", "description": "days until it is due"},
                    {"name": "priority", "type": "string", "enum": ["low", "high", "urgent_now"], "required": False,
                     "default": "low"}]},
        {"name": "close_task", "description": "Close a task", "record_kind": "task"},
        {"name": "reassign", "description": "Give a task to someone else", "record_kind": "task",
         "params": [{"name": "assignee", "type": "string"},
                    {"name": "level", "type": "integer", "enum": [1, 2, 3], "required": False}]},
        {"name": "estimate", "description": "Estimate a task", "record_kind": "task",
         "params": [{"name": "hours", "type": "number"}]},
        {"name": "tag", "description": "Tag a task", "record_kind": "task",
         "params": [{"name": "tags", "type": "array", "items": "string"}]},
        {"name": "rate", "description": "Rate the week",
         "params": [{"name": "stars", "type": "integer"},
                    {"name": "scores", "type": "array", "items": "integer", "required": False}]},
        {"name": "notify", "description": "Turn notices on or off",
         "params": [{"name": "on", "type": "boolean", "required": False, "default": True}]},
        {"name": "annotate", "description": "Attach data to the week", "params": [{"name": "meta", "type": "object"}]},
    ],
}
TASKS = [Record("T-101", "task", {"title": "the report"}, "T-101"),
         Record("T-102", "task", {"title": "slides"}, "T-102")]
#: The issue's message: it says "Dana", and its "and" is no number.
DANA = "Create a task for Dana and file it"
DANA_GOLD = {"units": [DANA], "route": {DANA: ["create_task"]}, "locate": {},
             "extract": {(DANA, "create_task"): {"assignee": ("Dana", "Zebra"), "due_days": ("and", "10")}},
             # schema-valid and wrong: the verify answer that let both values through
             "verify": {"assignee": "supported", "due_days": "supported"}}


def tracker() -> Catalog:
    return Catalog.from_dict(TRACKER, source="tracker")


def understander(respond, *, tasks=None, **over):
    settings_ = config.load(env={}, overrides={f"understanding.{k}": v for k, v in over.items()})
    provider = ScriptedProvider(respond)
    return Understander(provider, tracker(), settings=settings_, tasks=tasks), provider


# -- the examples ------------------------------------------------------------


def test_a_name_the_message_does_not_say_is_asked_for_not_taken_from_a_wrong_verify():
    u, provider = understander(Oracle(DANA_GOLD))
    plan = u.understand(DANA)
    act, = plan.acts
    assert act.status == "needs_input" and act.missing == ["assignee", "due_days"]
    assert "assignee" not in act.arguments and "due_days" not in act.arguments
    assert plan.status == "needs_input" and plan.questions[0].about == ["assignee", "due_days"]
    # Verify is not asked: one more single answer could not keep either value.
    assert "verify" not in [task_kind(r) for r in provider.requests] and plan.shortcuts["verify"] == 1
    notice, = plan.notices
    assert notice.kind == "no_ground" and notice.unit == act.unit and notice.holds == []
    assert '"Zebra" is not in the message' in notice.message
    assert 'no word of its quote "and" says 10' in notice.message
    assert notice.message.startswith("create_task: assignee and due_days asked for")


@pytest.mark.parametrize("value, quote, kept", [
    ("Zebra", "Dana", False), ("Dana", "for Dana", True), ("dana", "Dana", True),
])
def test_a_name_is_kept_only_when_the_message_says_it(value, quote, kept):
    gold = dict(DANA_GOLD, extract={(DANA, "create_task"): {"assignee": (quote, value), "due_days": ("and", "10")}})
    plan = understander(Oracle(gold))[0].understand(DANA)
    act, = plan.acts
    assert (act.arguments.get("assignee") == value) is kept and ("assignee" in act.missing) is not kept


@pytest.mark.parametrize("quote, value", [("and", "10"), ("and", "ten"), ("a task", "1"), ("Dana and", "-1")])
def test_a_number_no_word_of_its_quote_says_is_asked_for(quote, value):
    gold = dict(DANA_GOLD, extract={(DANA, "create_task"): {"assignee": ("Dana", "Dana"), "due_days": (quote, value)}})
    plan = understander(Oracle(gold))[0].understand(DANA)
    act, = plan.acts
    assert "due_days" not in act.arguments and act.missing == ["due_days"]
    assert [n.kind for n in plan.notices] == ["no_ground"] and "due_days" in plan.notices[0].message


def test_a_number_its_quote_says_among_others_still_goes_to_verify():
    text = "Create a task for Dana due in 10 or 12 days"
    gold = {"units": [text], "route": {text: ["create_task"]}, "locate": {},
            "extract": {(text, "create_task"): {"assignee": ("Dana", "Dana"), "due_days": ("10 or 12 days", "12")}}}
    for verdict, ready in (("supported", True), ("unsupported", False)):
        u, provider = understander(Oracle(dict(gold, verify={"due_days": verdict})))
        plan = u.understand(text)
        assert [task_kind(r) for r in provider.requests].count("verify") == 1
        act, = plan.acts
        assert (act.status == "ready") is ready and (act.arguments.get("due_days") == 12) is ready
        assert [n.kind for n in plan.notices] == []  # it had ground; verify decided


def test_the_baseline_asks_for_a_value_the_message_does_not_show_too():
    u, _ = understander(Oracle(DANA_GOLD))
    plan = u.single_call(DANA)
    act, = plan.acts
    assert act.missing == ["assignee", "due_days"] and act.arguments == {"priority": "low"}
    assert [n.kind for n in plan.notices] == ["no_ground"] and "configure single_call" in plan.notices[0].message


# -- votes ---------------------------------------------------------------------------


def test_independent_agreeing_votes_of_verify_may_keep_a_value_without_ground():
    u, provider = understander(Oracle(DANA_GOLD), tasks={"verify": TaskConfig(votes=3, temperature=0.7)})
    plan = u.understand(DANA)
    act, = plan.acts
    assert act.status == "ready" and act.arguments["assignee"] == "Zebra" and act.arguments["due_days"] == 10
    assert [task_kind(r) for r in provider.requests].count("verify") == 3 and plan.notices == []


@pytest.mark.parametrize("tasks, over", [
    ({"verify": TaskConfig(votes=3)}, {}),  # at temperature 0 a vote repeats the first answer
    ({}, {"votes": 3}),  # the same, from the setting
    ({"verify": TaskConfig(votes=1, temperature=0.9)}, {}),
], ids=["votes at temperature 0", "understanding.votes at temperature 0", "one vote"])
def test_votes_that_are_not_independent_keep_nothing_without_ground(tasks, over):
    u, provider = understander(Oracle(DANA_GOLD), tasks=tasks, **over)
    plan = u.understand(DANA)
    act, = plan.acts
    assert act.missing == ["assignee", "due_days"] and "verify" not in [task_kind(r) for r in provider.requests]


def test_votes_that_disagree_keep_nothing_without_ground():
    verdicts = iter(['{"verdicts": {"assignee": "supported", "due_days": "supported"}}',
                     '{"verdicts": {"assignee": "unsupported", "due_days": "supported"}}',
                     '{"verdicts": {"assignee": "unsupported", "due_days": "unsupported"}}'])
    oracle = Oracle(DANA_GOLD, faults=lambda kind, n: next(verdicts) if kind == "verify" else None)
    u, _ = understander(oracle, tasks={"verify": TaskConfig(votes=3, temperature=0.7)})
    plan = u.understand(DANA)
    assert plan.status == "incomplete" and plan.acts == []  # no majority: not understood, nothing goes ahead
    assert "majority" in plan.notices[0].message


# -- the rule, value by value --------------------------------------------------------

MESSAGE = "Give T-101 to Dana, due in ten days at 7pm: a 5-year plan, minus 5, 2.5 points, window seat"
STRING, INTEGER, NUMBER = Param("s", "string"), Param("n", "integer"), Param("x", "number")
SEAT = Param("seat", "string", enum=["window_seat", "aisle"])


@pytest.mark.parametrize("value, quote, param, grounded", [
    ("Dana", "to Dana", STRING, True), ("DANA", "x", STRING, True), ("Zebra", "to Dana", STRING, False),
    ("Dan", "to Dana", STRING, False),  # a part of a word is not the word
    ("Dana ,", "to Dana", STRING, False), ("to  Dana", "x", STRING, True),
    ("T-101", "T-101", STRING, True), ("T", "T-101", STRING, False), ("101", "T-101", STRING, False),
    ("5-year", "x", STRING, True), ("", "x", Param("e", "string", enum=["", "a"]), False),
    ("window_seat", "window seat", SEAT, True), ("aisle", "window seat", SEAT, False),
    ("window_seat", "window seat", STRING, False),  # only a closed set's member reads "_" as a space
    (10, "due in ten days", INTEGER, True), (10, "and", INTEGER, False), (7, "at 7pm", INTEGER, True),
    (5, "a 5-year plan", INTEGER, True), (-5, "minus 5", INTEGER, True), (5, "minus 5", INTEGER, False),
    (2.5, "2.5 points", NUMBER, True), (2.0, "2.5 points", NUMBER, False),
    # the 101 of an id is no number, with or without the sign its hyphen looks like (item 19)
    (101, "T-101", INTEGER, False), (-101, "T-101", INTEGER, False),
    (10, "ten days, Dana", INTEGER, False),  # the quote must be words of the message
    ([10, 5], "due in ten days at 7pm: a 5-year plan", Param("a", "array", items="integer"), True),
    ([10, 6], "due in ten days at 7pm: a 5-year plan", Param("a", "array", items="integer"), False),
    (["Dana", "T-101"], "x", Param("a", "array", items="string"), True),
    (["Dana", "Ed"], "x", Param("a", "array", items="string"), False),
    ({"who": "Dana", "days": 10}, "due in ten days", Param("o", "object"), True),
    ({"who": "Zebra"}, "due in ten days", Param("o", "object"), False),
    ({"days": float("inf")}, "due in ten days", Param("o", "object"), False),
    (True, "window seat", Param("b", "boolean"), True),  # a yes/no has no word to find
])
def test_a_value_is_grounded_when_code_can_see_it_in_the_message(value, quote, param, grounded):
    why = ungrounded(value, quote, MESSAGE, param)
    assert (why is None) is grounded, why
    if not grounded:
        assert why and "\n" not in why


# -- what the plan says --------------------------------------------------------------


def test_boundctx_plan_says_which_values_were_asked_for_and_why(tmp_path, monkeypatch, capsys):
    from boundctx.cli import main
    from boundctx.cli import plan as plan_command

    path = tmp_path / "tracker.json"
    path.write_text(json.dumps(TRACKER))
    monkeypatch.setattr(plan_command, "make_provider", lambda args, settings: ScriptedProvider(Oracle(DANA_GOLD)))
    assert main(["plan", "--catalog", str(path), "-q", DANA]) == 0
    out = capsys.readouterr().out
    assert "[needs_input] create_task(" in out and "missing: assignee, due_days" in out
    assert 'notice (no_ground): create_task: assignee and due_days asked for' in out and '"Zebra"' in out
    assert main(["plan", "--catalog", str(path), "-q", "--json", DANA]) == 0
    plan = json.loads(capsys.readouterr().out)
    notice, = plan["notices"]
    assert notice["kind"] == "no_ground" and '"Zebra" is not in the message' in notice["message"]
    assert plan["acts"][0]["missing"] == ["assignee", "due_days"]


# -- a model answering at random -----------------------------------------------------

_UNITS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
          "seventeen eighteen nineteen").split()
_WORD_VALUES = {w: i for i, w in enumerate(_UNITS)} | {
    w: 10 * (i + 2) for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split())}
_ORDINALS = {w: i + 1 for i, w in enumerate("first second third fourth fifth sixth seventh eighth ninth tenth".split())}
_DIGITS = re.compile(r"([-+]?)(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?|\.\d+)((?:-?[a-z]+)*)", re.I)


def _said(quote: str) -> set[Fraction]:
    """Every number a word of ``quote`` may be read as, generously: digits (with their
    sign, or "minus" before them, and a unit after: "7pm"), a number word, and every
    run of number words added up ("twenty five" is 20, 5 and 25). Never a number
    inside an id or a date ("T-101", "2024-05-01"): a token must start with it."""
    tokens = quote.split()
    bare = [t.strip("()[]{}\"'").rstrip(".,;:!?").lower() for t in tokens]
    out: set[Fraction] = set()
    for i, tok in enumerate(bare):
        negated = i > 0 and bare[i - 1] in ("minus", "negative")
        m = _DIGITS.fullmatch(tok)
        if m:
            v = Fraction(m.group(2).replace(",", ""))
            out.add(-v if m.group(1) == "-" or (negated and not m.group(1)) else v)
        if tok in _ORDINALS:
            out.add(Fraction(-_ORDINALS[tok] if negated else _ORDINALS[tok]))
        total = 0
        for j in range(i, len(bare)):
            if bare[j] == "and" and j > i:
                continue
            if bare[j] not in _WORD_VALUES:
                break
            total += _WORD_VALUES[bare[j]]
            out.add(Fraction(-total if negated else total))
    return out


def _flat(text: str, loose: bool) -> str:
    return " ".join(re.split(r"[\s_\-]+" if loose else r"\s+", text.casefold())).strip()


def _supported(value, quote: str, message: str, member: bool) -> bool:
    """The test's own reading of "the message supports this value"."""
    if value is None or isinstance(value, bool):
        return True
    if isinstance(value, (int, float)):
        try:
            exact = Fraction(repr(value)) if isinstance(value, float) else Fraction(value)
        except ValueError:  # inf, nan
            return False
        return quote in message and exact in _said(quote)
    if isinstance(value, str):
        return bool(_flat(value, member)) and _flat(value, member) in _flat(message, member)
    if isinstance(value, list):
        return all(_supported(v, quote, message, member) for v in value)
    if isinstance(value, dict):
        return all(_supported(v, quote, message, False) for v in value.values())
    return False


def _votes_agreed(u, plan, act, name: str, baseline: bool) -> bool:
    """Whether the task that may keep a value without ground was configured for
    independent votes, and at least two of its valid answers in this turn kept it."""
    kind = "single_call" if baseline else "verify"
    cfg = u.tasks.get(kind) or TaskConfig()
    votes = cfg.votes if cfg.votes is not None else u.settings["understanding.votes"]
    if votes < 2 or not cfg.temperature > 0:
        return False
    attempts = [a for a in u.log.attempts if a.turn == plan.turn and a.task == kind and a.valid]
    if kind == "single_call":
        return len(attempts) >= 2
    said = [json.loads(a.raw_output)["verdicts"].get(name) for a in attempts
            if a.unit == act.unit and a.key == act.operation]
    return said.count("supported") >= 2


_VOCABULARY = ("create a task for Dana Ed due in 10 ten days and close T-101 T-102 at 7pm minus 5 -3 2.5 first "
               "twenty five urgent now high priority window seat the report please then , give it to 5-year "
               "1,000 rate stars 3 scores x").split()
_FIXED = [DANA, "Create a task for Dana due in 10 days", "close T-101 and give T-102 to Ed",
          "rate the week 5 stars, scores 3 and 4", "create a task for Ed due in ten days, urgent now"]


@st.composite
def turns(draw):
    message = draw(st.sampled_from(_FIXED) | st.lists(st.sampled_from(_VOCABULARY), min_size=1, max_size=14).map(
        " ".join))
    records = draw(st.sampled_from([[], TASKS[:1], TASKS, TASKS]))
    click = None
    if draw(st.booleans()):  # straight to extract and verify, where values are made
        op = draw(st.sampled_from([o["name"] for o in TRACKER["operations"]]))
        click = Click(op, draw(st.sampled_from([None, "T-101", "T-102", "T-9"])))
    return message, records, click, draw(st.integers(0, 3)) == 0  # the baseline one turn in four


@st.composite
def understanders(draw):
    """Bounds anywhere from one call to plenty (the generous ones often, so that turns
    get as far as extract and verify), settings, task configurations, the model's seed
    and the fake seconds each call takes."""
    def bound(generous, tight):  # tight one time in four
        return draw(tight if draw(st.integers(0, 3)) == 3 else st.sampled_from(generous))

    bounds = Bounds(max_model_calls=bound([24, 40], st.integers(1, 24)),
                    max_chain_depth=bound([12, 14], st.integers(1, 12)),
                    max_parallel=draw(st.integers(1, 4)),
                    max_prompt_tokens=bound([None, 65_536, 30_000], st.integers(50, 30_000)),
                    wall_clock_s=bound([None, 300.0], st.floats(1, 300)))
    # Votes on random answers rarely agree, so only a few turns vote on every task;
    # verify's votes (which may keep a value without ground) are drawn often.
    over = {"understanding.repairs": draw(st.integers(0, 2)), "understanding.votes": draw(
        st.sampled_from([1, 1, 1, 1, 2])), "understanding.max_units": draw(st.integers(1, 8))}
    tasks = {}
    for kind, chance in (("verify", 2), ("single_call", 4), ("extract", 6)):
        if draw(st.integers(1, chance)) == 1:
            tasks[kind] = TaskConfig(votes=draw(st.integers(1, 3)), temperature=draw(st.sampled_from([0.0, 0.7])))
    return bounds, over, tasks, draw(st.integers(0, 2**32)), draw(st.sampled_from([0.0, 0.0, 0.5, 4.0, 30.0]))


@settings(max_examples=150, deadline=None)
@given(understanders(), st.lists(turns(), min_size=1, max_size=3))
def test_a_model_answering_at_random_never_gets_a_value_without_ground_past_the_plan(setup, turns_):
    """Across turns and every bound, whatever schema-valid output the model gives: no
    act carries a value the message does not support (unless independent votes agreed
    on it), nothing escapes, and every plan keeps its own invariants."""
    bounds, over, tasks, seed, step_s = setup
    now = [0.0]
    model = RandomModel(seed)

    def respond(request):
        now[0] += step_s  # each call takes fake time, so the clock bound is met too
        return model(request)

    catalog = tracker()
    u = Understander(ScriptedProvider(respond, clock=lambda: now[0]), catalog,
                     settings=config.load(env={}, overrides=over), tasks=tasks, bounds=bounds, clock=lambda: now[0])
    for message, records, click, baseline in turns_:
        now[0] = 0.0
        plan = (u.single_call(message, records=records) if baseline
                else u.understand(message, records=records, click=click))
        assert plan.status in ("ready", "needs_input", "incomplete", "nothing", "failed_closed")
        assert plan.budget.model_calls <= bounds.max_model_calls
        assert plan.budget.chain_depth <= bounds.max_chain_depth
        if plan.status == "failed_closed":
            assert plan.acts == []
        for act in plan.acts:
            op = catalog.operation(act.operation)
            assert act.status in ("ready", "needs_input", "held")
            assert (act.status == "ready") <= (not act.missing)
            for name, value in act.arguments.items():
                p = op.param(name)
                assert name not in act.missing
                if name not in act.evidence:  # not given: only its declared default
                    assert not p.required and value == p.default, (act, name)
                    continue
                quote = act.evidence[name]
                assert quote in message
                assert _supported(value, quote, message, p.enum is not None) or \
                    _votes_agreed(u, plan, act, name, baseline), (message, act, name)
