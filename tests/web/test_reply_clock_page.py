"""The page's reply clock (clock.js, called by chat.js) in headless Chromium: one line
under the reply that ticks every second while it is worked on, says about how long is
left from the events' estimate (never "about 0 s left"), and the time it took at the end."""

import re

import pytest

from boundctx.providers import ScriptedProvider

from tests._support.scripted import LOG, MODEL, Slow, answer, settings
from tests.web.test_front_end import ask, open_empty_session, watch

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

CLOCK = "#progress .clock"


def test_the_reply_clock_ticks_between_events_and_says_the_time_it_took(page, serve, folder):
    slow = Slow(pieces=1, gap=2.5)  # one piece after 2.5 s: no event comes in between
    server = serve(ScriptedProvider(slow), settings=settings(), model_id=MODEL, sessions_dir=str(folder))
    errors = open_empty_session(page, server, folder, "clock")
    ask(page, "Say one word")
    page.wait_for_selector(f"{CLOCK}:has-text('0 s so far')")
    page.wait_for_selector(f"{CLOCK}:has-text('2 s so far')")  # it moved with no event to move it
    page.wait_for_selector("#messages .message.assistant:not([aria-busy])")
    assert re.fullmatch(r"\d+ s in all", page.inner_text(CLOCK))
    assert errors == []


def test_the_reply_clock_says_what_is_left_from_the_events_estimate(page, serve, folder):
    server = serve(ScriptedProvider(answer, context_window=4096),
                   settings=settings(**{"serve.progress_max_hz": 1000.0}), model_id=MODEL, sessions_dir=str(folder))
    errors = open_empty_session(page, server, folder, "left")
    seen = []
    page.expose_function("sawClock", lambda text: seen.append(text))
    watch(page, "#progress .clock", "sawClock")
    ask(page, "Which step failed?\n\n" + LOG)  # read in sections: the events carry an estimate
    page.wait_for_selector("#messages .message.assistant:not([aria-busy])")
    assert any(re.search(r"about [1-9]\d* s left", text) for text in seen), seen
    assert not any("about 0 s left" in text for text in seen), seen
    assert errors == []
