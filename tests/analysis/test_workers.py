"""Sequential note-taking workers, checked exactly with the scripted provider."""

import re
import threading

import pytest

from boundctx import config
from boundctx.analysis.workers import TIMEOUT_TOKENS, iter_read_in_sections, worker_time_limit
from boundctx.errors import GenerationTimeout, IncompleteCoverage, SourceTooLarge, TooManySections
from boundctx.events import AnalysisProgress
from boundctx.providers import ScriptedProvider

#: The id the engine would keep the read text under (any id of its shape).
SOURCE_ID = "src-0a1b2c3d-1"

LOG = "".join(f"2026-11-30 step {i:04d}: {'ok' if i != 377 else 'FAILED id=7f3a9c11'}\n" for i in range(900))


def settings(**over):
    return config.load(env={}, overrides={"analysis.worker_n_ctx": 2048, "analysis.notes_max_tokens": 128,
                                          **{k.replace("__", "."): v for k, v in over.items()}})


def section_of(request):
    """(number, total, start, end, text) of the section in a worker prompt."""
    body = request.messages[-1]["content"]
    m = re.search(r"Section (\d+) of (\d+) of (.+?), characters (\d+)-(\d+):\n(.*)\Z", body, re.S)
    return int(m.group(1)), int(m.group(2)), int(m.group(4)), int(m.group(5)), m.group(6)


def notes_of(request):
    return re.search(r"Your notes so far:\n(.*?)\n\nSection", request.messages[-1]["content"], re.S).group(1)


def note_taker(request):
    """A worker that notes one fact per section (only this section's: the engine keeps
    the notes)."""
    number, _, start, end, _ = section_of(request)
    return f"section {number}: read (characters {start}-{end})"


def read_completely(provider, text, **kw):
    """(the notes, every event) of one complete ``iter_read_in_sections`` run."""
    steps = iter_read_in_sections(provider, text, **kw)
    events = []
    while True:
        try:
            events.append(next(steps))
        except StopIteration as done:
            return done.value, events


def run(provider, text=LOG, **over):
    return read_completely(provider, text, question="What failed?", source_id=SOURCE_ID, label="build.log",
                            settings=settings(**over))


def test_every_section_is_read_once_in_order_one_generation_at_a_time():
    p = ScriptedProvider(note_taker, context_window=4096)
    notes, events = run(p)
    numbers = [section_of(r)[0] for r in p.requests]
    total = section_of(p.requests[0])[1]
    assert numbers == list(range(1, total + 1)) and total > 3
    assert p.max_active == 1  # strictly sequential
    spans = [section_of(r)[2:4] for r in p.requests]
    assert spans[0][0] == 0 and spans[-1][1] == len(LOG)
    assert all(b[0] == a[1] - 64 for a, b in zip(spans, spans[1:]))  # contiguous, 64-char overlap
    for r in p.requests:  # each prompt holds exactly its slice of the original
        _, _, start, end, body = section_of(r)
        assert body == LOG[start:end]


def test_assignments_rotate_and_each_worker_keeps_its_own_notes():
    p = ScriptedProvider(note_taker, context_window=4096)
    notes, _ = run(p, chat__analysis_workers=3, analysis__notes_max_tokens=384, analysis__worker_n_ctx=4096)
    assert [n.worker for n in notes] == [0, 1, 2]
    total = len(p.requests)
    for n in notes:
        assert n.sections == list(range(n.worker + 1, total + 1, 3))
        assert n.text.count("read (characters ") == len(n.sections)  # rewritten from its own notes only


def test_a_worker_sees_only_its_own_previous_notes():
    p = ScriptedProvider(note_taker, context_window=4096)
    run(p, chat__analysis_workers=2)
    for i, r in enumerate(p.requests):
        mine = re.findall(r"\[S(\d+) ", notes_of(r))
        assert all((int(k) - 1) % 2 == i % 2 for k in mine)


def test_every_worker_prompt_fits_the_worker_context():
    p = ScriptedProvider(lambda r: "note " * 200, context_window=4096)  # notes at their limit
    run(p)
    assert all(p.count_prompt(r.messages) + 128 <= 2048 for r in p.requests)
    assert all(p.counter.count_text(notes_of(r)) <= 128 + 16 for r in p.requests[1:])


def test_progress_events_bracket_each_section_and_carry_no_notes():
    p = ScriptedProvider(lambda r: "SECRET NOTE", context_window=4096)
    _, events = run(p)
    assert all(isinstance(e, AnalysisProgress) for e in events)
    total = events[0].sections
    assert [(e.section, e.phase) for e in events[:2]] == [(1, "reading"), (1, "noted")]
    assert events[-1].phase == "done" and len(events) == 2 * total + 1
    assert not any("SECRET" in repr(e) for e in events)


def test_a_failing_worker_fails_the_call_and_names_the_unread_sections():
    p = ScriptedProvider(lambda r: GenerationTimeout("too slow") if section_of(r)[0] == 3 else "ok",
                         context_window=4096)
    with pytest.raises(IncompleteCoverage, match="failed on section 3") as info:
        run(p)
    total = section_of(p.requests[0])[1]
    assert [u[0] for u in info.value.uncovered] == list(range(3, total + 1))
    assert len(p.requests) == 3  # nothing ran after the failure


def slow_machine(seconds_per_token):
    """A scripted model on a machine that takes ``seconds_per_token`` for every token of
    a call (its prompt and its notes budget), on a fake clock; and the seconds each call
    took."""
    now = [0.0]
    took = []

    def respond(request):
        took.append(seconds_per_token * (p.count_prompt(request.messages) + request.max_tokens))
        now[0] += took[-1]
        return ["section read"]

    p = ScriptedProvider(respond, context_window=4096, clock=lambda: now[0])
    return p, took


def test_a_worker_gets_time_in_proportion_to_its_section():
    # 0.1 s a token: a full section takes longer than 120 s, but under 120 s per 1,000 tokens.
    p, took = slow_machine(0.1)
    notes, _ = run(p, analysis__worker_timeout_s=120)
    assert max(took) > 120 and sum(len(n.sections) for n in notes) == len(p.requests) > 3  # every section read


def test_a_worker_timeout_names_the_setting_its_value_and_what_to_do():
    p, took = slow_machine(1.0)  # far too slow for the limit
    with pytest.raises(IncompleteCoverage) as info:
        run(p, analysis__worker_timeout_s=120)
    said = str(info.value)
    tokens = p.count_prompt(p.requests[0].messages) + p.requests[0].max_tokens
    assert "failed on section 1" in said and "GenerationTimeout" in said
    assert f"analysis.worker_timeout_s = 120 s per 1,000 tokens of it (this one: {tokens:,} tokens, " in said
    assert "raise it, e.g. BOUNDCTX_ANALYSIS_WORKER_TIMEOUT_S=240 or boundctx config set " \
           "analysis.worker_timeout_s 240, or use a faster model" in said
    # Other failures are not about time, and say nothing of it.
    with pytest.raises(IncompleteCoverage) as info:
        run(ScriptedProvider(lambda r: RuntimeError("decode failed"), context_window=4096))
    assert "worker_timeout_s" not in str(info.value)


def test_the_worker_time_limit_grows_with_the_call_and_is_bounded():
    assert worker_time_limit(120, 10) == worker_time_limit(120, TIMEOUT_TOKENS) == 120  # never less
    assert worker_time_limit(120, 2 * TIMEOUT_TOKENS) == 240
    assert worker_time_limit(120, 4096) == pytest.approx(491.52)  # the default worker context: at most this
    assert worker_time_limit(config.MAX_SECONDS, 1 << 24) == config.MAX_SECONDS


def test_limits_refuse_before_any_model_call():
    p = ScriptedProvider(note_taker, context_window=4096)
    with pytest.raises(TooManySections, match="needs"):
        run(p, analysis__max_sections=2)
    with pytest.raises(SourceTooLarge):
        run(p, analysis__max_source_chars=1000)
    assert p.requests == []


def test_cancel_stops_before_the_next_section():
    cancel = threading.Event()

    def respond(request):
        if section_of(request)[0] == 2:
            cancel.set()
        return "ok"

    p = ScriptedProvider(respond, context_window=4096)
    result, _ = read_completely(p, LOG, question="q", source_id=SOURCE_ID, label="x", settings=settings(),
                                 cancel=cancel)
    assert result is None and len(p.requests) == 2


def test_every_section_names_the_original_it_is_kept_under():
    p = ScriptedProvider(note_taker, context_window=4096)
    read_completely(p, LOG, question="q", source_id="build.log (2)", label="build.log", settings=settings())
    assert section_of(p.requests[0])[2:4] == (0, section_of(p.requests[0])[3])
    assert all(re.search(r"\n\nSection \d+ of \d+ of build\.log \(2\), characters \d+-\d+:\n",
                         r.messages[-1]["content"]) for r in p.requests)


def test_notes_over_their_budget_stay_within_it_and_keep_every_key_with_its_range():
    from boundctx.analysis.notes import INDEX_HEADER
    from boundctx.tokens import ByteEstimateCounter

    class GeneratesMoreThanItCounts(ScriptedProvider):
        """A model whose output passes its max_tokens when counted again (as a real
        model's non-canonical token choices can)."""

        def _fit(self, text, piece, max_tokens):
            return piece

    def many_facts(request):  # long values: they do not all fit, their keys do
        number, _, start, end, _ = section_of(request)
        return "".join(f"fact {i} of S{number}: {'a long value ' * 6}{i} [S{number} {start}-{end}]\n"
                       for i in range(12))

    p = GeneratesMoreThanItCounts(many_facts, context_window=4096, counter=ByteEstimateCounter())
    _, events = run(p, analysis__notes_max_tokens=600, analysis__worker_n_ctx=4096)
    noted = [e for e in events if e.phase == "noted"]
    assert noted and all(e.notes_tokens <= 600 for e in noted)
    seen = notes_of(p.requests[2])  # worker 0's notes after section 1, over its budget
    assert INDEX_HEADER in seen and "a long value" in seen  # the newest values stay...
    assert all(f"fact {i} of S1" in seen for i in range(12))  # ...and every key, with its range


def test_notes_that_loop_are_stopped_and_the_section_still_counts_as_read():
    from boundctx.providers import ScriptedProvider

    line = "step 12 failed\n"  # short: three copies fit the notes budget
    p = ScriptedProvider(lambda r: ["notes:\n"] + [line] * 60, context_window=4096)
    notes, _ = read_completely(p, LOG[:3000], question="What failed?", source_id=SOURCE_ID, label="build.log",
                                settings=settings())
    # The heading is not a fact, and the line repeated in every section is noted once.
    assert all(n.text.count("step 12 failed") == 1 and "notes" not in n.text for n in notes), notes
    assert p.closed_early == sum(len(n.sections) for n in notes)  # every looping worker was stopped early
