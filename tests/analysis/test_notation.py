"""The coordinator's prompt teaches no engine notation, and the classifier the first-answer
benchmark counts with finds what it should (decision 0041)."""

import re

from boundctx.analysis import Engine
from boundctx.config import load
from boundctx.providers.scripted import ScriptedProvider

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
    assert "Notes on build.log (" in notes and "failed step: test_overlap (characters " in notes
    # nothing of the old notation, and no form the classifier counts, but the notes' own
    # headings and the placeholder the file became
    assert notation_in(prompt.replace("read completely by note-taking workers", "")) == []


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
