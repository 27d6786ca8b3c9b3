"""The coordinator's prompt teaches no engine notation, and the classifier the first-answer
benchmark counts with finds what it should (decision 0041)."""

import json
import re

from boundctx.analysis import Engine
from boundctx.analysis.engine import _NO_GUESS, ANSWER_NOTES, AS_THE_TEXT_HAS_IT, COORDINATOR_NOTES, REREAD_HEADER
from boundctx.analysis.notes import ANSWER_INDEX_HEADER, INDEX_HEADER, UNNOTED_HEADER
from boundctx.config import load
from boundctx.providers.scripted import ScriptedProvider
from boundctx.tokens import ByteEstimateCounter

from tests._support import notes_text
from tests._support.notation import notation_in

LOG = "\n".join(f"[{i:04d}] build: step {i} ok ({i % 900} ms)" for i in range(1200)) + \
    "\n[1200] link: test_overlap FAILED (job id 7f3a9c11, exit 1)\n"


def test_the_classifier_finds_each_form_and_passes_prose():
    assert notation_in("The failing step is test_overlap, job 7f3a9c11.") == []
    assert notation_in("step failed [S2 2089-4144] [536 ms]") == ["section citation"]
    assert notation_in("S3: [0149] module 2515-3764") == ["section label"]
    assert notation_in("see src-36425d87-1") == ["original id"]
    assert notation_in('{"reread": []}') == ["reread request"]
    assert notation_in("build.log key 'x': not read (it does not fit)") == ["reread line"]
    assert notation_in("0x876543B at 2127-4175", [(2127, 4175)]) == ["cited range"]
    assert notation_in("0x876543B at 2127-4175", [(2127, 4176)]) == []
    # today's headings and reread lines, copied
    assert notation_in("The step: Notes on build.log (5,577 characters): failed") == ["notes heading"]
    assert notation_in(f"{ANSWER_INDEX_HEADER} job id.") == ["notes heading"]
    assert notation_in("A passage of build.log, read again exactly: «FAILED»") == ["reread line"]
    assert notation_in(f"job id{AS_THE_TEXT_HAS_IT}7f3a9c11»") == ["reread line"]
    assert notation_in("2 passages of earlier messages hold words of 'job'") == ["reread line"]


def test_the_coordinator_sees_its_notes_in_words_and_originals_by_name():
    def model(request):
        body = request.messages[-1]["content"]
        if request.messages[0]["content"].startswith("You read one section"):
            m = re.search(r"characters (\d+)-(\d+):\n(.*)\Z", body, re.S)
            hit = m.group(3).find("FAILED")
            if hit < 0:
                return "nothing relevant"
            at = int(m.group(1)) + hit
            return f"failed step: test_overlap (characters {at}-{at + 6})\njob id: 7f3a9c11"
        return "The failing step is test_overlap."

    p = ScriptedProvider(model, context_window=4096)
    p.supports_tools = False
    settings = load(env={}, overrides={"chat.n_ctx": 4096, "analysis.constrained_rereads": False})
    list(Engine(p, settings=settings, max_reply_tokens=128).reply(
        [{"role": "user", "content": "Which step failed?"}], files=[("build.log", LOG)]))
    prompt = "\n".join(str(m["content"]) for m in p.requests[-1].messages)
    notes = notes_text(p.requests[-1])
    # No reread can follow this answer: the notes give the values, in the workers' words,
    # and nothing a reread needs (decision 0044).
    assert "Notes on build.log (41,929 characters):\n" in notes and "\nfailed step: test_overlap" in notes
    assert "characters 4" not in notes.partition("Notes on")[2] and "section" not in notes.partition("Notes on")[2]
    # nothing of the old notation, and no form the classifier counts, but the notes' own
    # heading and the placeholder the file became
    assert notation_in(re.sub(r"Notes on build.log \(41,929 characters", "",
                              prompt.replace("read completely by note-taking workers", ""))) == []


SHORT_LOG = LOG[:6000]


def _keys_model(step_asks):
    """Workers note 3 keys a section with their ranges (more than the notes keep); the
    reread step asks for ``step_asks``; the answer is "ok"."""
    def model(request):
        body = request.messages[-1]["content"]
        if request.messages[0]["content"].startswith("You read one section"):
            m = re.search(r"characters (\d+)-(\d+):\n(.*)\Z", body, re.S)
            a = int(m.group(1))
            return "\n".join(f"key {a}.{k}: value {k} (characters {a + k}-{a + k + 5})" for k in range(3))
        if request.schema is not None:
            return json.dumps({"reread": step_asks})
        return "ok"
    return model


def test_an_answer_no_reread_can_follow_sees_values_and_what_was_read_again_without_ranges():
    p = ScriptedProvider(_keys_model([{"id": "build.log", "start": 4000, "end": 4020}]), context_window=2048)
    p.supports_tools = False
    settings = load(env={}, overrides={"chat.n_ctx": 2048, "analysis.notes_max_tokens": 160})
    events = list(Engine(p, settings=settings, max_reply_tokens=128).reply(
        [{"role": "user", "content": "Which step failed?"}], files=[("build.log", SHORT_LOG)]))
    assert type(events[-1]).__name__ == "Done"
    step, answer = [r for r in p.requests if r.schema is not None], p.requests[-1]
    # The step was shown the ranges (it asks for them) and the index of keys not kept.
    step_notes = notes_text(step[0])
    assert re.search(r"characters \d+-\d+", step_notes) and INDEX_HEADER in step_notes
    assert COORDINATOR_NOTES in step_notes
    # The answer was shown values and the keys not kept, in words; what was read again,
    # by name; and no range, no section, no advice to read again.
    notes = notes_text(answer)
    assert ANSWER_NOTES in notes and COORDINATOR_NOTES not in notes
    assert ANSWER_INDEX_HEADER in notes and INDEX_HEADER not in notes and UNNOTED_HEADER not in notes
    assert f"{REREAD_HEADER}\nFrom build.log{AS_THE_TEXT_HAS_IT}{SHORT_LOG[4000:4020]}»" in notes
    said = notes.partition("Notes on build.log")[2].replace(SHORT_LOG[4000:4020], "")
    assert not re.search(r"characters \d|\d+-\d+|section|reread", said), said
    # and it is never more than the step's own prompt held
    assert p.count_prompt(answer.messages) <= p.count_prompt(step[0].messages[:-1]) + 64


def test_a_model_that_can_reread_while_answering_still_sees_the_ranges():
    p = ScriptedProvider(_keys_model([]), context_window=2048)
    p.supports_tools = True
    settings = load(env={}, overrides={"chat.n_ctx": 2048, "analysis.notes_max_tokens": 160})
    list(Engine(p, settings=settings, max_reply_tokens=128).reply(
        [{"role": "user", "content": "Which step failed?"}], files=[("build.log", SHORT_LOG)]))
    notes = notes_text(p.requests[-1])
    assert re.search(r"characters \d+-\d+", notes) and "read_chat_section" in notes and ANSWER_NOTES not in notes


def test_the_notes_for_an_answer_take_no_more_tokens_than_the_notes_for_a_reread():
    # The answer's instructions and each block are rendered within what the room was
    # counted on: the instructions for a reread step (the longest a model without tools
    # is shown), and the tokens the notes for a reread took.
    count = ByteEstimateCounter().count_text
    assert count(ANSWER_NOTES) <= count(COORDINATOR_NOTES + _NO_GUESS)
    from boundctx.analysis.notes import NoteLedger
    ledger = NoteLedger()
    for k in range(60):
        ledger.add(f"key {k}", f"value {k} " * (k % 5 + 1), section=k // 20 + 1, start=k * 10, end=k * 10 + 9)
    ledger.add("key 3", "corrected", section=3, start=700, end=709)
    ledger.add_unnoted(2, 300, 400)
    for budget in (8, 30, 60, 120, 250, 500, 2000):
        rereadable = ledger.render(budget, count)
        answer = ledger.render(count(rereadable), count, for_answer=True)
        assert count(answer) <= count(rereadable) <= budget
        if budget == 2000:  # every value: a corrected one by its correction only
            assert "key 3: corrected" in answer and "key 3: value" not in answer and "key 59: value 59" in answer


def test_each_original_gets_the_name_its_room_was_counted_on_whatever_order_it_is_read_in():
    """Items are read largest first; each keeps the name of its place (the one the rooms
    and the reread tool were counted on), never a longer one made in reading order."""
    def model(request):
        return "nothing relevant" if request.messages[0]["content"].startswith("You read one section") else "ok"

    p = ScriptedProvider(model, context_window=4096)
    p.supports_tools = False
    small, big = "short\n" * 1500, "line of a log\n" * 2000
    list(Engine(p, settings=load(env={}, overrides={"chat.n_ctx": 4096}), max_reply_tokens=128).reply(
        [{"role": "user", "content": "q?"}], files=[("x", small), ("x (2)", small), ("x", big)]))
    prompt = "\n".join(str(m["content"]) for m in p.requests[-1].messages)
    assert re.findall(r"Notes on (.+?) \([\d,]+ characters", prompt) == ["x", "x (2)", "x (3)"]
