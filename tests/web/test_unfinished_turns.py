"""A reply that does not end with a complete answer loses none of the person's work: the
question and the answer so far stay on the page, beside them why it ended (stopped, cut at
the length limit, refused, failed) and Retry, Edit and Dismiss; the page keeps that turn
and the composer's unsent draft in the browser, per session and bounded, so a reload
shows them again. The session's file keeps only complete exchanges, as before."""

import pytest

from boundctx.providers import ScriptedProvider, ScriptedReply

from .test_front_end import UNFINISHED, ask, fails_after, open_empty_session
from tests._support.scripted import MODEL, Slow, settings

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

QUESTION = f"{UNFINISHED.split()[0]} .message.user.unfinished"
HTML = '<b>bold</b><img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'


def keep_limits(page):
    return page.evaluate("() => import('/ui/keep.js').then(m => m.KEEP)")


def stored(page, prefix):
    """Every localStorage entry whose key starts with ``prefix``: key -> length of its value."""
    return page.evaluate("""(prefix) => Object.fromEntries(Object.keys(localStorage)
        .filter(k => k.startsWith(prefix)).map(k => [k, localStorage.getItem(k).length]))""", prefix)


def type_draft(page, text):
    """Put ``text`` in the composer as a paste does (at once, with its input event)."""
    page.eval_on_selector("#question", "(q, text) => { q.value = text; q.dispatchEvent(new Event('input')); }", text)


def reload_session(page, count):
    page.reload()
    page.wait_for_selector(f"#session-meta:has-text('{count} messages')")


def turn_shown(page):
    """What the page shows of the unfinished turn: question, answer, ending, buttons."""
    return {"question": page.inner_text(f"{QUESTION} .text"),
            "answer": page.eval_on_selector(f"{UNFINISHED} .text", "n => n.textContent"),
            "ending": page.inner_text(f"{UNFINISHED} .ending"),
            "buttons": page.eval_on_selector_all(f"{UNFINISHED} .actions button", "bs => bs.map(b => b.textContent)")}


def slow_reply_under_way(page, serve, folder, session, question):
    """A session ``session`` asked ``question`` on a model that answers slowly, once the
    answer has begun on the page."""
    slow = Slow(pieces=2000, gap=0.01)
    server = serve(ScriptedProvider(slow), settings=settings(), model_id=MODEL, sessions_dir=str(folder))
    open_empty_session(page, server, folder, session)
    ask(page, question)
    page.wait_for_function("() => document.querySelector('#messages .message.assistant .text').textContent.length > 10")


def test_a_stopped_reply_keeps_the_question_and_the_answer_so_far_marked_beside_it(page, serve, folder):
    slow_reply_under_way(page, serve, folder, "stop", "go on and on")
    page.get_by_role("button", name="Stop").click()
    page.wait_for_selector(f"{UNFINISHED} .ending")
    shown = turn_shown(page)
    assert shown["question"] == "go on and on"
    assert shown["answer"].startswith("w0 w1 ")
    assert shown["ending"].startswith("Stopped: you pressed Stop") and "Not saved" in shown["ending"]
    assert shown["buttons"] == ["Retry", "Edit", "Dismiss"]
    assert (folder / "stop.jsonl").read_bytes() == b""  # the session's file is as it was
    # After a reload: the same turn, the same marks, the same buttons.
    reload_session(page, 0)
    page.wait_for_selector(f"{UNFINISHED} .ending")
    assert turn_shown(page) == shown


def test_a_reply_cut_at_the_length_limit_stays_under_the_saved_history_across_a_reload(page, serve, folder):
    replies = iter(["The first answer.", ScriptedReply("The second answer, cut", finish_reason="length")])
    server = serve(ScriptedProvider(lambda r: next(replies)), settings=settings(), model_id=MODEL,
                   sessions_dir=str(folder))
    open_empty_session(page, server, folder, "cut")
    ask(page, "first question")
    page.wait_for_selector("#session-meta:has-text('2 messages')")
    ask(page, "second question")
    page.wait_for_selector(f"{UNFINISHED} .ending")
    shown = turn_shown(page)
    assert shown["ending"].startswith("Cut at the length limit")
    assert shown["answer"] == "The second answer, cut"
    reload_session(page, 2)
    page.wait_for_selector(f"{UNFINISHED} .ending")
    assert turn_shown(page) == shown
    cards = page.eval_on_selector_all("#messages .message", "ns => ns.map(n => [n.className, n.textContent])")
    assert [c[0] for c in cards] == ["message user", "message assistant", "message user unfinished",
                                     "message assistant unfinished"]  # under the saved history, in order
    assert "first question" in cards[0][1] and "The first answer." in cards[1][1]
    assert len((folder / "cut.jsonl").read_text().splitlines()) == 2  # only the complete exchange


def test_a_refused_question_can_be_edited_back_into_the_composer(page, serve, folder):
    server = serve(ScriptedProvider(lambda r: "x"), settings=settings(), model_id=MODEL, sessions_dir=str(folder))
    open_empty_session(page, server, folder, "gone")
    (folder / "gone.jsonl").unlink()  # the session is no longer there: the server refuses
    ask(page, "a question worth keeping")
    page.wait_for_selector(f"{UNFINISHED} .ending")
    shown = turn_shown(page)
    assert shown["ending"].startswith("Refused: this session is not on the server")
    assert shown["question"] == "a question worth keeping"
    assert page.input_value("#question") == ""  # the question moved into the turn...
    page.get_by_role("button", name="Edit").click()
    assert page.input_value("#question") == "a question worth keeping"  # ...and back
    assert not page.query_selector(UNFINISHED)  # edited: the turn is done with
    assert stored(page, "boundctx-turn:") == {}
    (folder / "gone.jsonl").touch()
    reload_session(page, 0)
    assert page.input_value("#question") == "a question worth keeping"  # now a draft, kept
    assert not page.query_selector(UNFINISHED)


def test_a_failed_reply_is_kept_and_retry_sends_the_same_question_again(page, serve, folder):
    asked = []

    def respond(request):
        asked.append(request.messages[-1]["content"])
        return "a complete answer" if len(asked) > 1 else fails_after("partial ")

    server = serve(ScriptedProvider(respond), settings=settings(), model_id=MODEL, sessions_dir=str(folder))
    open_empty_session(page, server, folder, "retry")
    ask(page, "the same question")
    page.wait_for_selector(f"{UNFINISHED} .ending")
    shown = turn_shown(page)
    assert shown["ending"].startswith("Failed:") and shown["answer"] == "partial "
    assert "went away" in page.inner_text(f"{UNFINISHED} .detail")  # the server's reason, beside it
    reload_session(page, 0)
    page.wait_for_selector(f"{UNFINISHED} .ending")
    page.get_by_role("button", name="Retry").click()
    page.wait_for_selector("#session-meta:has-text('2 messages')")
    assert asked == ["the same question", "the same question"]
    assert not page.query_selector(UNFINISHED)
    assert page.inner_text("#messages .message.assistant .text") == "a complete answer"
    reload_session(page, 2)
    assert not page.query_selector(UNFINISHED)  # retried: nothing unfinished is kept


def test_a_reply_interrupted_by_a_reload_is_kept_with_what_it_said(page, serve, folder):
    slow_reply_under_way(page, serve, folder, "reload", "a long job")
    reload_session(page, 0)
    page.wait_for_selector(f"{UNFINISHED} .ending")
    shown = turn_shown(page)
    assert shown["question"] == "a long job"
    assert shown["answer"].startswith("w0 w1 ")
    assert shown["ending"].startswith("Interrupted")
    page.get_by_role("button", name="Dismiss").click()
    assert not page.query_selector(UNFINISHED)
    reload_session(page, 0)
    assert not page.query_selector(UNFINISHED)  # dismissed: gone for good


def test_the_unsent_draft_survives_a_reload_per_session(page, serve, folder):
    server = serve(ScriptedProvider(lambda r: "x"), settings=settings(), model_id=MODEL, sessions_dir=str(folder))
    (folder / "other.jsonl").touch()
    open_empty_session(page, server, folder, "draft")
    paste = "".join(f"log line {i:05d}: something happened\n" for i in range(1300))  # a 44 KB paste
    type_draft(page, paste)
    reload_session(page, 0)
    assert page.input_value("#question") == paste
    assert page.is_hidden("#draft-note")  # under the limit: nothing cut, nothing said
    page.goto(page.url.replace("#/s/draft", "#/s/other"))
    page.wait_for_selector("#session-title:has-text('other')")
    assert page.input_value("#question") == ""  # another session's composer
    page.goto(page.url.replace("#/s/other", "#/s/draft"))
    page.wait_for_selector("#session-title:has-text('draft')")
    assert page.input_value("#question") == paste


def test_what_the_browser_keeps_is_bounded_and_a_cut_is_said(page, serve, folder):
    server = serve(ScriptedProvider(lambda r: ScriptedReply("y" * 60_000, finish_reason="length"),
                                    context_window=1_000_000),
                   settings=settings(), model_id=MODEL, sessions_dir=str(folder))
    open_empty_session(page, server, folder, "big")
    limits = keep_limits(page)
    # A draft over the limit: the page says so while it is typed, keeps its start, says so after.
    type_draft(page, "d" * (limits["draft"] + 5000))
    assert "keeps only its first" in page.inner_text("#draft-note")
    reload_session(page, 0)
    assert page.input_value("#question") == "d" * limits["draft"]
    assert f"had {limits['draft'] + 5000:,} characters" in page.inner_text("#draft-note")
    # A question and an answer over their limits, kept cut, the cut said, Retry off.
    question = "q" * (limits["question"] + 5000)
    ask(page, question)
    page.wait_for_selector(f"{UNFINISHED} .ending")
    overhead = 1000
    assert max(stored(page, "boundctx-turn:").values()) < limits["question"] + limits["answer"] + overhead
    reload_session(page, 0)
    page.wait_for_selector(f"{UNFINISHED} .ending")
    assert page.inner_text(f"{QUESTION} .text") == "q" * limits["question"]
    assert len(page.eval_on_selector(f"{UNFINISHED} .text", "n => n.textContent")) == limits["answer"]
    notes = page.inner_text(UNFINISHED)
    assert f"first {limits['question']:,} of this question's {len(question):,} characters" in notes
    assert f"first {limits['answer']:,} of this answer's 60,000 characters" in notes
    assert page.get_by_role("button", name="Retry").is_disabled()  # it would send less than was asked
    assert page.get_by_role("button", name="Edit").is_enabled()
    # At most so many sessions keep a draft: the least recently written go first.
    for i in range(limits["sessions"] + 2):
        (folder / f"s{i}.jsonl").touch()
        page.goto(server.url + f"/#/s/s{i}")
        page.wait_for_selector(f"#session-title:text-is('s{i}')")
        page.wait_for_selector("#session-meta:has-text('0 messages')")
        type_draft(page, f"draft {i}")
    drafts = stored(page, "boundctx-draft:")
    assert sorted(drafts) == sorted(f"boundctx-draft:s{i}" for i in range(2, limits["sessions"] + 2))


def test_html_in_a_kept_answer_is_shown_as_text(page, serve, folder):
    server = serve(ScriptedProvider(lambda r: ScriptedReply(HTML, finish_reason="length")), settings=settings(),
                   model_id=MODEL, sessions_dir=str(folder))
    open_empty_session(page, server, folder, "html")
    ask(page, HTML)
    page.wait_for_selector(f"{UNFINISHED} .ending")
    reload_session(page, 0)
    page.wait_for_selector(f"{UNFINISHED} .ending")
    assert page.eval_on_selector(f"{UNFINISHED} .text", "n => n.textContent") == HTML
    assert page.inner_text(f"{QUESTION} .text") == HTML
    assert page.query_selector_all("#messages b, #messages img, #messages script") == []
    assert page.evaluate("() => window.__pwned") is None
