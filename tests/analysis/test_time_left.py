"""The one estimate of a reply's time left (``analysis/time_left.py``), exactly: scripted
events at given times, and the engine's events carrying it."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boundctx.analysis import Engine
from boundctx.analysis.time_left import TimeLeft
from boundctx.events import AnalysisProgress, Done, Fitted, ReplyDelta, Stage
from boundctx.providers import ScriptedProvider

from tests.analysis.test_engine import LOG, Model, settings


def reading(k, n, at, worker=0):
    return AnalysisProgress(k, n, worker, "reading", at)


def noted(k, n, at, worker=0, *, notes=0, prompt=1000, wrote=0):
    return AnalysisProgress(k, n, worker, "noted", at, notes_tokens=notes, prompt_tokens=prompt,
                            completion_tokens=wrote)


def fed(left, *timed):
    """``left`` fed each (event, time): the estimate each event would carry."""
    out = []
    for event, at in timed:
        left.observe(event, at)
        out.append(left.remaining_s(at))
    return out


def test_sections_at_a_pace_then_the_answer_at_the_pace_per_token():
    left = TimeLeft(max_reply_tokens=100)
    # 300 prompt tokens, 100 of them held by the model already: 200 to evaluate.
    fitted = Fitted(1, 1, analysed=["a.log"], prompt_tokens=300, reused_tokens=100, analysed_chars=[3000])
    assert fed(left, (fitted, 0.0), (reading(1, 3, 0.0), 0.0)) == [None, None]  # nothing measured: unknown
    # One section: 10 s for 1000 tokens. Two sections left at 10 s; the answer: its 200
    # prompt tokens, 40 of notes and 100 to write, at 0.01 s a token.
    assert fed(left, (noted(1, 3, 10.0, notes=40), 10.0), (reading(2, 3, 10.0, worker=1), 10.0)) == \
        pytest.approx([23.4, 23.4])
    # Between events it counts down, the section under way never below the rest.
    assert left.remaining_s(15.0) == pytest.approx(18.4)
    assert left.remaining_s(25.0) == pytest.approx(13.4)


def test_a_slow_section_corrects_the_pace_of_sections_and_of_the_answer():
    left = TimeLeft(max_reply_tokens=100)
    fed(left, (Fitted(1, 1, analysed=["a.log"], prompt_tokens=200, analysed_chars=[3000]), 0.0),
        (reading(1, 3, 0.0), 0.0), (noted(1, 3, 10.0, notes=40), 10.0), (reading(2, 3, 10.0, 1), 10.0))
    assert left.remaining_s(30.0) == pytest.approx(13.4)  # the estimate ran on, the section did too
    # It took 20 s: 15 s a section, 0.015 s a token; one section and the answer
    # (200 + 40 + 60 + 100 tokens) left.
    assert fed(left, (noted(2, 3, 30.0, 1, notes=60), 30.0)) == pytest.approx([15.0 + 6.0])
    assert fed(left, (reading(3, 3, 30.0), 30.0), (noted(3, 3, 45.0, notes=50), 45.0),
               (AnalysisProgress(3, 3, 0, "done", 45.0), 45.0)) == pytest.approx([21.0, 6.15, 6.15])


def test_the_answer_is_paced_apart_for_its_prompt_and_its_output_once_sections_tell_them_apart():
    left = TimeLeft(max_reply_tokens=100)
    fed(left, (Fitted(1, 1, analysed=["a.log"], prompt_tokens=500, analysed_chars=[3000]), 0.0),
        (reading(1, 3, 0.0), 0.0))
    # One section cannot tell evaluating from writing: 8 s for 3100 tokens, one pace for both.
    assert fed(left, (noted(1, 3, 8.0, prompt=3000, wrote=100), 8.0)) == pytest.approx([2 * 8.0 + 8.0 / 3100 * 600])
    # The second wrote 100 tokens more in 5 s more: 0.05 s a token written, 0.001 s one read.
    # The answer: 500 tokens to evaluate (0.5 s) and 100 to write (5 s), not 600 at one pace.
    fed(left, (reading(2, 3, 8.0), 8.0))
    assert fed(left, (noted(2, 3, 21.0, prompt=3000, wrote=200), 21.0)) == pytest.approx([10.5 + 0.5 + 5.0])


def test_a_fit_that_would_make_a_pace_negative_falls_back_to_one_pace():
    left = TimeLeft(max_reply_tokens=100)
    fed(left, (Fitted(1, 1, analysed=["a.log"], prompt_tokens=500, analysed_chars=[3000]), 0.0),
        (reading(1, 3, 0.0), 0.0), (noted(1, 3, 13.0, prompt=3000, wrote=100), 13.0), (reading(2, 3, 13.0), 13.0))
    # Writing more took less time (a busy machine, say): 21 s for 6300 tokens, whatever kind.
    assert fed(left, (noted(2, 3, 21.0, prompt=3000, wrote=200), 21.0)) == pytest.approx([10.5 + 21.0 / 6300 * 600])


def answered(left):
    fed(left, (Fitted(1, 1, analysed=["a.log"], prompt_tokens=200, analysed_chars=[2000]), 0.0),
        (reading(1, 2, 0.0), 0.0), (noted(1, 2, 10.0, notes=50), 10.0),
        (reading(2, 2, 10.0), 10.0), (noted(2, 2, 20.0, notes=50), 20.0),
        (AnalysisProgress(2, 2, 0, "done", 20.0), 20.0))


def test_the_answer_counts_down_and_is_never_said_done_before_it_is():
    left = TimeLeft(max_reply_tokens=100)
    answered(left)
    # 0.01 s a token: 200 prompt + 50 notes (worker 0's latest) + 100 to write.
    assert fed(left, (Stage("answering", 20.0), 20.0)) == pytest.approx([3.5])
    assert left.remaining_s(22.0) == pytest.approx(1.5)
    assert left.remaining_s(23.5) is None  # past its estimate: unknown, never 0
    assert left.remaining_s(40.0) is None
    assert fed(left, (ReplyDelta("the answer"), 40.0), (Done("stop"), 41.0)) == [None, 0.0]


def test_a_reread_round_is_one_more_answering_call():
    left = TimeLeft(max_reply_tokens=100)
    answered(left)
    assert fed(left, (Stage("answering", 20.0), 20.0)) == pytest.approx([3.5])
    assert fed(left, (Stage("rereading", 30.0, 1), 30.0)) == pytest.approx([3.5])  # the model asked again
    assert left.remaining_s(31.0) == pytest.approx(2.5)


def test_the_constrained_reread_step_comes_before_the_answer():
    left = TimeLeft(max_reply_tokens=100, reread_step=True)
    answered(left)
    # The step evaluates the prompt and the notes (250 tokens, 2.5 s), then the answer (3.5 s).
    assert left.remaining_s(20.0) == pytest.approx(6.0)
    assert fed(left, (Stage("rereading", 20.0, 1), 20.0)) == pytest.approx([6.0])
    assert left.remaining_s(21.0) == pytest.approx(5.0)
    assert left.remaining_s(30.0) == pytest.approx(3.5)  # the step ran long: the answer is still ahead
    assert fed(left, (Stage("answering", 30.0), 30.0)) == pytest.approx([3.5])


def test_a_model_that_holds_what_it_evaluated_evaluates_the_prompt_and_notes_once():
    left = TimeLeft(max_reply_tokens=100, reread_step=True)
    # reused_tokens said (0 here): the model keeps its state, as a local one does.
    fed(left, (Fitted(1, 1, analysed=["a.log"], prompt_tokens=200, reused_tokens=0, analysed_chars=[2000]), 0.0),
        (reading(1, 2, 0.0), 0.0), (noted(1, 2, 10.0, notes=50), 10.0),
        (reading(2, 2, 10.0), 10.0), (noted(2, 2, 20.0, notes=50), 20.0))
    # The step evaluates the 250 tokens of prompt and notes (2.5 s); the answer after it
    # only writes its 100 (1 s), and so does a reread round after that.
    assert fed(left, (AnalysisProgress(2, 2, 0, "done", 20.0), 20.0)) == pytest.approx([3.5])
    assert fed(left, (Stage("rereading", 20.0, 1), 20.0), (Stage("answering", 25.0), 25.0),
               (Stage("rereading", 30.0, 1), 30.0)) == pytest.approx([3.5, 1.0, 1.0])


def test_a_later_inputs_sections_are_estimated_from_its_length_until_it_is_planned():
    left = TimeLeft(max_reply_tokens=100)
    fitted = Fitted(2, 0, analysed=["a.log", "b.log"], prompt_tokens=0, analysed_chars=[3000, 6000])
    fed(left, (fitted, 0.0), (reading(1, 3, 0.0), 0.0))
    # a.log: 3 sections for 3000 characters, so b.log's 6000 are about 6; 10 s each,
    # and the answer's 100 tokens at 0.01 s.
    assert fed(left, (noted(1, 3, 10.0), 10.0)) == pytest.approx([(2 + 6) * 10.0 + 1.0])
    fed(left, (reading(2, 3, 10.0), 10.0), (noted(2, 3, 20.0), 20.0), (reading(3, 3, 20.0), 20.0),
        (noted(3, 3, 30.0), 30.0))
    assert fed(left, (AnalysisProgress(3, 3, 0, "done", 30.0), 30.0)) == pytest.approx([61.0])
    # b.log is planned into 5 sections: the estimate takes them.
    assert fed(left, (reading(1, 5, 30.0), 30.0)) == pytest.approx([51.0])


def test_without_lengths_a_later_input_is_taken_as_long_as_the_ones_planned():
    left = TimeLeft(max_reply_tokens=100)
    fed(left, (Fitted(2, 0, analysed=["a", "b"]), 0.0), (reading(1, 3, 0.0), 0.0))
    assert fed(left, (noted(1, 3, 10.0), 10.0)) == pytest.approx([(2 + 3) * 10.0 + 1.0])


def test_a_reply_without_section_analysis_has_no_estimate_until_it_ends():
    left = TimeLeft(max_reply_tokens=100)
    assert left.remaining_s(0.0) is None
    assert fed(left, (Fitted(1, 1, prompt_tokens=50), 0.0), (Stage("answering", 0.0), 0.0),
               (ReplyDelta("hi"), 1.0), (Done("stop"), 2.0)) == [None, None, None, 0.0]


def test_stamped_gives_progress_and_stages_the_estimate_and_leaves_other_events_alone():
    left = TimeLeft(max_reply_tokens=100)
    fitted = Fitted(1, 1, analysed=["a.log"], prompt_tokens=200, analysed_chars=[2000])
    assert left.stamped(fitted, 0.0) is fitted
    assert left.stamped(reading(1, 2, 0.0), 0.0).remaining_s is None
    assert left.stamped(noted(1, 2, 10.0), 10.0).remaining_s == pytest.approx(10.0 + 3.0)
    assert left.stamped(Stage("answering", 20.0), 20.0).remaining_s == pytest.approx(3.0)


@given(st.lists(st.floats(0.001, 100.0), min_size=1, max_size=6), st.integers(1, 2000),
       st.lists(st.floats(0.0, 3.0), min_size=12, max_size=12))
def test_the_estimate_is_never_zero_while_work_remains(durations, max_tokens, fractions):
    left = TimeLeft(max_reply_tokens=max_tokens, reread_step=True)
    n = len(durations)
    timed = [(Fitted(1, 1, analysed=["x"], prompt_tokens=10, analysed_chars=[100 * n]), 0.0)]
    at = 0.0
    for k, spent in enumerate(durations, 1):
        timed += [(reading(k, n, at), at), (noted(k, n, at + spent, notes=7, prompt=500, wrote=k), at + spent)]
        at += spent
    timed += [(AnalysisProgress(n, n, 0, "done", at), at), (Stage("rereading", at, 1), at),
              (Stage("answering", at + 1.0), at + 1.0)]
    for (event, when), (_, after), fraction in zip(timed, timed[1:] + [(None, at + 10.0)], fractions * 3):
        left.observe(event, when)
        for moment in (when, when + fraction * (after - when)):
            estimate = left.remaining_s(moment)
            assert estimate is None or estimate > 0, (event, moment, estimate)
    left.observe(Done("stop"), at + 20.0)
    assert left.remaining_s(at + 20.0) == 0.0


# -- the engine's events carry it ---------------------------------------------------------------


def test_the_engines_progress_carries_the_estimate_a_replay_of_its_events_gives():
    p = ScriptedProvider(Model(), context_window=8192)
    events = list(Engine(p, settings=settings(), max_reply_tokens=256).reply(
        [{"role": "user", "content": "Which step failed?"}], files=[("build.log", LOG)]))
    fitted = events[0]
    assert isinstance(fitted, Fitted) and fitted.analysed_chars == [len(LOG)]
    notes = [e for e in events if isinstance(e, AnalysisProgress) and e.phase == "noted"]
    assert notes and all(e.prompt_tokens > 0 for e in notes) and any(e.completion_tokens > 0 for e in notes)
    (answering,) = [e for e in events if isinstance(e, Stage)]
    assert answering.remaining_s is not None and answering.remaining_s > 0
    # Agreement by construction: every front end counts down the number the events carry,
    # the one the estimator gives from the same events at their times.
    replay = TimeLeft(max_reply_tokens=256, reread_step=not p.supports_tools)
    for event in events:
        again = replay.stamped(event, getattr(event, "elapsed_s", 0.0))
        if isinstance(event, (AnalysisProgress, Stage)):
            assert again.remaining_s == event.remaining_s, event


def test_a_reply_without_analysis_says_no_estimate():
    p = ScriptedProvider(Model(), context_window=8192)
    events = list(Engine(p, settings=settings(), max_reply_tokens=256).reply(
        [{"role": "user", "content": "Say hi"}]))
    (answering,) = [e for e in events if isinstance(e, Stage)]
    assert answering.remaining_s is None
