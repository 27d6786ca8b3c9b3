"""What every chat page has, in the real browser: an attachment checked before it is read
(its size against the server's limits, its kind from its first bytes) and shown as a
chip; an answer's Markdown rendered as nodes, never as markup, with Copy on each
message and each code block; the model's name and the shortcuts in the page; one
scrollbar with the composer in reach on a narrow screen."""

import pytest

from boundctx.providers import ScriptedProvider
from boundctx.transcript.store import Transcript

from .test_front_end import ask, open_app, open_empty_session
from tests._support.scripted import MODEL, settings

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

# Every way a text could try to become markup on the page.
PAYLOADS = ('<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'
            '<a href="javascript:window.__pwned=3">x</a> &lt;b&gt; [link](javascript:window.__pwned=4)')

# Records Blob.text() and .arrayBuffer() calls (a File is a Blob): which sizes were read.
RECORD_READS = """
window.__reads = [];
for (const name of ["text", "arrayBuffer"]) {
  const real = Blob.prototype[name];
  Blob.prototype[name] = function () { window.__reads.push([name, this.size]); return real.call(this); };
}
"""


def claude_session(folder, shared_file, sid):
    """A real Claude Code session (from ../shared/data) as session ``sid``; its path."""
    import shutil

    path = folder / f"{sid}.jsonl"
    shutil.copyfile(shared_file("claude-code-sessions/4d5611e5-241a-462a-8d15-5122611a9569.jsonl"), path)
    return path


def attach(page, path):
    page.get_by_label("Attach a text file").set_input_files(str(path))


def test_a_file_larger_than_the_server_takes_is_refused_before_it_is_read(page, serve, folder, tmp_path):
    server = serve(ScriptedProvider(lambda r: "x"), settings=settings(**{"serve.max_body_bytes": 1 << 20}),
                   model_id=MODEL, sessions_dir=str(folder))
    page.add_init_script(RECORD_READS)
    big = tmp_path / "big.log"
    big.write_bytes(b"log line\n" * 300_000)  # 2.7 MB, over the 1 MiB the server takes
    open_empty_session(page, server, folder, "big")
    attach(page, big)
    page.wait_for_selector("#attach-note:has-text('Not attached')")
    note = page.inner_text("#attach-note")
    assert "big.log is 2.6 MB" in note and "serve.max_body_bytes" in note and "1.0 MB" in note
    assert page.evaluate("() => window.__reads") == []  # not a byte of it was read
    assert page.locator("#attached .chip").count() == 0
    # The composer still works: a question without the file goes out as usual.
    ask(page, "still here?")
    page.wait_for_selector("#session-meta:has-text('2 messages')")


def test_a_file_with_more_characters_than_a_reply_reads_is_refused_naming_the_setting(page, serve, folder, tmp_path):
    server = serve(ScriptedProvider(lambda r: "x"), settings=settings(**{"analysis.max_source_chars": 50_000}),
                   model_id=MODEL, sessions_dir=str(folder))
    page.add_init_script(RECORD_READS)
    open_empty_session(page, server, folder, "chars")
    far = tmp_path / "far.log"
    far.write_text("y" * 250_000)  # over 4 bytes for each of 50,000 characters: not read
    attach(page, far)
    page.wait_for_selector("#attach-note:has-text('analysis.max_source_chars')")
    assert page.evaluate("() => window.__reads") == []
    near = tmp_path / "near.log"
    near.write_text("é" * 60_000)  # 120,000 bytes: read, then counted (60,000 characters)
    attach(page, near)
    page.wait_for_selector("#attach-note:has-text('has 60,000 characters')")
    assert "50,000" in page.inner_text("#attach-note")
    assert page.locator("#attached .chip").count() == 0


def test_an_image_is_refused_as_what_it_is_and_never_sent_as_text(page, serve, folder, tmp_path):
    seen = []
    server = serve(ScriptedProvider(lambda r: seen.append(r) or "x"), settings=settings(), model_id=MODEL,
                   sessions_dir=str(folder))
    png = tmp_path / "shot.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 200)
    open_empty_session(page, server, folder, "png")
    attach(page, png)
    page.wait_for_selector("#attach-note:has-text('shot.png is a PNG image')")
    assert "only text files" in page.inner_text("#attach-note")
    blob = tmp_path / "data.bin"
    blob.write_bytes(b"abc\x00def" * 100)
    attach(page, blob)
    page.wait_for_selector("#attach-note:has-text('data.bin is a binary file')")
    latin1 = tmp_path / "old.txt"
    latin1.write_bytes("caf\xe9 cr\xe8me\n".encode("latin-1"))
    attach(page, latin1)
    page.wait_for_selector("#attach-note:has-text('old.txt is not UTF-8 text')")
    assert seen == [] and page.locator("#attached .chip").count() == 0


def test_an_attachment_can_be_removed_and_an_unfinished_turn_gives_it_back_to_edit(page, serve, folder, tmp_path):
    from boundctx.providers import ScriptedReply

    server = serve(ScriptedProvider(lambda r: ScriptedReply("partial", finish_reason="length")),
                   settings=settings(), model_id=MODEL, sessions_dir=str(folder))
    notes = tmp_path / "notes.md"
    notes.write_text("first\nsecond\n")
    open_empty_session(page, server, folder, "edit")
    attach(page, notes)
    page.get_by_role("button", name="Remove the attachment notes.md").click()
    assert page.locator("#attached .chip").count() == 0
    attach(page, notes)
    page.wait_for_selector("#attached .chip:has-text('notes.md')")
    ask(page, "sum up")
    page.wait_for_selector("#messages .message.assistant.unfinished .ending")
    page.get_by_role("button", name="Edit").click()
    assert page.input_value("#question") == "sum up"  # what was typed, not the file's text
    assert page.inner_text("#attached .chip").startswith("📎 notes.md")


def test_an_answer_in_markdown_is_rendered_as_nodes_and_never_as_markup(page, serve, folder):
    answer = ("# Result\n\nThe step **377** failed in `make test`:\n\n```sh\nmake test\n```\n\n"
              "- first\n- second\n\n1. one\n2. two\n\n> quoted\n\n[docs](https://example.org/x) " + PAYLOADS)
    server = serve(ScriptedProvider(lambda r: answer), settings=settings(), model_id=MODEL, sessions_dir=str(folder))
    open_empty_session(page, server, folder, "md")
    ask(page, PAYLOADS)
    page.wait_for_selector("#session-meta:has-text('2 messages')")
    card = "#messages .message.assistant .text.markdown"
    page.wait_for_selector(f"{card} h3")
    assert page.inner_text(f"{card} h3") == "Result"
    assert page.inner_text(f"{card} strong") == "377"
    assert page.eval_on_selector_all(f"{card} code", "cs => cs.map(c => c.textContent)") == ["make test", "make test"]
    assert page.eval_on_selector_all(f"{card} li", "ls => ls.map(l => l.textContent)") == \
        ["first", "second", "one", "two"]
    assert page.inner_text(f"{card} blockquote") == "quoted"
    assert page.eval_on_selector_all(f"{card} a", "as => as.map(a => a.href)") == ["https://example.org/x"]
    # Nothing the model or the person wrote became an element, ran, or lost a character.
    assert page.locator("#messages img, #messages script").count() == 0
    assert page.evaluate("() => window.__pwned") is None
    assert PAYLOADS in page.eval_on_selector(card, "n => n.textContent")
    assert page.eval_on_selector("#messages .message.user .text", "n => n.textContent") == PAYLOADS
    # After a reload the saved answer is rendered the same way.
    page.reload()
    page.wait_for_selector(f"{card} h3")
    assert page.locator("#messages img, #messages script").count() == 0
    assert page.evaluate("() => window.__pwned") is None


def test_a_transcript_carrying_html_and_scripts_shows_them_as_text(page, serve, folder):
    with Transcript.open(str(folder / "payloads.jsonl"), create=True) as t:
        for role in ("user", "assistant", "tool", "system"):
            t.append({"type": "message", "message": {"role": role, "content": f"{role}: {PAYLOADS}"}})
    server = serve(ScriptedProvider(lambda r: "x"), settings=settings(), model_id=MODEL, sessions_dir=str(folder))
    open_app(page, server, "#/s/payloads")
    page.wait_for_selector("#session-meta:has-text('4 messages')")
    texts = page.eval_on_selector_all("#messages .message .text", "ns => ns.map(n => n.textContent)")
    assert texts == [f"{role}: {PAYLOADS}" for role in ("user", "assistant", "tool", "system")]
    assert page.locator("#messages img, #messages script").count() == 0
    assert page.evaluate("() => window.__pwned") is None


def test_copy_puts_the_message_and_the_code_block_on_the_clipboard(browser, serve, folder):
    answer = "Run this:\n\n```python\nprint('hi')\n```\n\nThen **check**."
    server = serve(ScriptedProvider(lambda r: answer), settings=settings(), model_id=MODEL, sessions_dir=str(folder))
    context = browser.new_context(permissions=["clipboard-read", "clipboard-write"])
    page = context.new_page()
    page.set_default_timeout(15_000)
    try:
        open_empty_session(page, server, folder, "copy")
        ask(page, "how?")
        page.wait_for_selector("#messages .message.assistant .code-block")
        page.get_by_role("button", name="Copy code").click()
        assert page.evaluate("() => navigator.clipboard.readText()") == "print('hi')"
        page.locator("#messages .message.assistant .message-head .copy").click()
        assert page.evaluate("() => navigator.clipboard.readText()") == answer  # the Markdown as written
        page.wait_for_selector("#messages .message.assistant .message-head .copy:has-text('Copied')")
    finally:
        context.close()


def test_the_model_name_and_the_shortcuts_are_in_the_page_and_work(page, serve, folder):
    from tests._support.scripted import Slow

    server = serve(ScriptedProvider(Slow(pieces=2000, gap=0.01)), settings=settings(), model_id=MODEL,
                   sessions_dir=str(folder))
    open_empty_session(page, server, folder, "keys")
    page.wait_for_selector(f"#model:has-text('{MODEL}')")
    hints = page.inner_text(".shortcuts")
    assert "Ctrl+Enter sends" in hints and "Esc stops" in hints and "Ctrl+Shift+O" in hints
    page.fill("#question", "go on")
    page.press("#question", "Control+Enter")
    page.wait_for_function("() => document.querySelector('#messages .message.assistant .text').textContent.length > 5")
    page.keyboard.press("Escape")
    page.wait_for_selector("#messages .message.assistant.unfinished .ending:has-text('Stopped')")
    page.keyboard.press("Control+Shift+O")
    page.wait_for_function("() => location.hash.startsWith('#/s/') && location.hash !== '#/s/keys'")
    page.wait_for_selector("#session-meta:has-text('0 messages')")
    assert page.evaluate("() => document.activeElement.id") == "question"
    assert len(list(folder.glob("*.jsonl"))) == 2


@pytest.mark.parametrize("width", [360, 1280])
def test_one_scrollbar_and_the_composer_in_reach_at_any_width(browser, serve, folder, width):
    with Transcript.open(str(folder / "long.jsonl"), create=True) as t:
        for i in range(120):
            t.append({"type": "message", "message": {"role": "user" if i % 2 == 0 else "assistant",
                                                     "content": f"message {i} " + "words " * 40}})
    server = serve(ScriptedProvider(lambda r: "x"), settings=settings(), model_id=MODEL, sessions_dir=str(folder))
    page = browser.new_page(viewport={"width": width, "height": 640})
    page.set_default_timeout(15_000)
    try:
        open_app(page, server, "#/s/long")
        page.wait_for_selector("#session-meta:has-text('120 messages')")
        # The window itself does not scroll: only the messages do.
        assert page.evaluate("() => document.documentElement.scrollHeight <= window.innerHeight + 1")
        assert page.evaluate("() => document.querySelector('#messages').scrollHeight > "
                             "document.querySelector('#messages').clientHeight")
        box = page.locator("#send").bounding_box()
        assert box is not None and box["y"] + box["height"] <= 640 and box["x"] + box["width"] <= width
        assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
    finally:
        page.close()


def test_another_agents_session_is_asked_without_saving_and_says_so_in_the_page(page, serve, folder, shared_file):
    seen = []
    server = serve(ScriptedProvider(lambda r: seen.append(r) or "It ran the tests."), settings=settings(),
                   model_id=MODEL, sessions_dir=str(folder))
    path = claude_session(folder, shared_file, "claude")
    before = path.read_bytes()
    open_app(page, server, "#/s/claude")
    page.wait_for_selector("#read-only:has-text('This is a Claude Code session')")
    ask(page, "What did it do?")
    page.wait_for_selector("#messages .message.assistant.unsaved")
    assert page.inner_text("#messages .message.assistant.unsaved .text") == "It ran the tests."
    assert "not saved" in page.inner_text("#messages .message.assistant.unsaved .role")
    # A second question is answered too, and the first answer stays on the page.
    ask(page, "And then?")
    page.wait_for_function("() => document.querySelectorAll('#messages .message.assistant.unsaved').length === 2")
    assert len(seen) == 2 and path.read_bytes() == before  # the agent's file is untouched
    # Advice meant for the CLI or the API never reaches the page.
    shown = page.inner_text("body")
    assert "--no-save" not in shown and '"save"' not in shown and "Refused" not in shown
    # Continued in a new session of boundctx's own: its newest messages carried over, said,
    # and a reply there is saved.
    page.get_by_role("button", name="Continue in a new session").click()
    page.wait_for_selector("#notice:has-text('Continued from claude')")
    page.wait_for_function("() => location.hash.startsWith('#/s/') && location.hash !== '#/s/claude'")
    page.wait_for_selector("#messages .message[data-index]")
    assert page.is_hidden("#read-only")
    sid = page.evaluate("() => decodeURIComponent(location.hash.slice(4))")
    count = int(page.inner_text("#session-meta").split()[0].replace(",", ""))
    assert count > 0 and f"newest {count} messages" in page.inner_text("#notice")
    ask(page, "Go on.")
    page.wait_for_selector(f"#session-meta:has-text('{count + 2:,} messages')")
    assert path.read_bytes() == before and (folder / f"{sid}.jsonl").stat().st_size > 0
    # A boundctx session says nothing of the kind.
    (folder / "own.jsonl").touch()
    page.goto(page.url.split("#")[0] + "#/s/own")
    page.wait_for_selector("#session-meta:has-text('0 messages')")
    assert page.is_hidden("#read-only")


def own_session(folder, sid, texts):
    with Transcript.open(str(folder / f"{sid}.jsonl"), create=True) as t:
        for i, text in enumerate(texts):
            t.append({"type": "message", "message": {"role": "user" if i % 2 == 0 else "assistant", "content": text}})


def contents(folder, sid):
    with Transcript.open(str(folder / f"{sid}.jsonl")) as t:
        w = t.window(message_limit=100, content_limit=None)
    return [m.record["message"]["content"] for m in w.messages]


def buttons_of(page, index):
    return page.eval_on_selector_all(f'#messages .message[data-index="{index}"] .message-actions button',
                                     "bs => bs.map(b => b.textContent)")


def test_delete_regenerate_and_edit_and_resend_change_the_session_as_said(page, serve, folder):
    answers = iter(["second answer", "third answer"])
    server = serve(ScriptedProvider(lambda r: next(answers)), settings=settings(), model_id=MODEL,
                   sessions_dir=str(folder))
    own_session(folder, "e", ["q0", "a1", "q2", "first answer"])
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.accept()))
    open_app(page, server, "#/s/e")
    page.wait_for_selector('#messages .message[data-index="3"] .message-actions button')
    assert buttons_of(page, 0) == ["Edit and resend", "Delete"] and buttons_of(page, 1) == ["Delete"]
    assert buttons_of(page, 2) == ["Edit and resend", "Delete"] and buttons_of(page, 3) == ["Regenerate", "Delete"]
    # Regenerate: the last answer is replaced by a new one, the question asked again.
    page.locator('#messages .message[data-index="3"]').get_by_role("button", name="Regenerate").click()
    page.wait_for_selector('#messages .message[data-index="3"]:has-text("second answer") .message-actions button')
    assert contents(folder, "e") == ["q0", "a1", "q2", "second answer"]
    assert buttons_of(page, 3) == ["Regenerate", "Delete"]  # the new last exchange has them
    # Edit and resend: the exchange leaves the session, the question goes to the composer.
    page.locator('#messages .message[data-index="2"]').get_by_role("button", name="Edit and resend").click()
    page.wait_for_selector("#session-meta:has-text('2 messages')")
    assert page.input_value("#question") == "q2" and contents(folder, "e") == ["q0", "a1"]
    page.fill("#question", "q2, better")
    page.get_by_role("button", name="Send", exact=True).click()
    page.wait_for_selector("#session-meta:has-text('4 messages')")
    assert contents(folder, "e") == ["q0", "a1", "q2, better", "third answer"]
    # Delete: one message, after the person said yes.
    page.locator('#messages .message[data-index="1"]').get_by_role("button", name="Delete").click()
    page.wait_for_selector("#session-meta:has-text('3 messages')")
    assert contents(folder, "e") == ["q0", "q2, better", "third answer"]
    assert any("cannot be undone" in d for d in dialogs)


def test_an_earlier_question_edited_and_sent_again_replaces_the_conversation_it_started(page, serve, folder):
    server = serve(ScriptedProvider(lambda r: "a new answer"), settings=settings(), model_id=MODEL,
                   sessions_dir=str(folder))
    own_session(folder, "h", ["q0", "a1", "q2", "a3", "q4", "a5"])
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.accept()))
    open_app(page, server, "#/s/h")
    page.wait_for_selector('#messages .message[data-index="5"] .message-actions button')
    page.locator('#messages .message[data-index="2"]').get_by_role("button", name="Edit and resend").click()
    # what goes is said before it goes: the question and the 3 messages after it
    page.wait_for_selector("#session-meta:has-text('2 messages')")
    assert "the 3 messages after it" in dialogs[-1]
    assert page.input_value("#question") == "q2" and contents(folder, "h") == ["q0", "a1"]
    page.fill("#question", "q2, asked better")
    page.get_by_role("button", name="Send", exact=True).click()
    page.wait_for_selector("#session-meta:has-text('4 messages')")
    assert contents(folder, "h") == ["q0", "a1", "q2, asked better", "a new answer"]


def test_a_delete_the_person_declines_or_another_client_overtook_changes_nothing(page, serve, folder):
    import httpx

    server = serve(ScriptedProvider(lambda r: "x"), settings=settings(), model_id=MODEL, sessions_dir=str(folder))
    own_session(folder, "d", ["q0", "a1", "q2", "a3"])
    answer = {"yes": False}
    page.on("dialog", lambda d: d.accept() if answer["yes"] else d.dismiss())
    open_app(page, server, "#/s/d")
    page.wait_for_selector('#messages .message[data-index="0"] .message-actions button')
    page.locator('#messages .message[data-index="0"]').get_by_role("button", name="Delete").click()
    assert contents(folder, "d") == ["q0", "a1", "q2", "a3"]
    # Another client deletes message 3 meanwhile: the page's delete is refused, not misplaced.
    httpx.delete(f"{server.url}/boundctx/v1/sessions/d/messages/3").raise_for_status()
    answer["yes"] = True
    page.locator('#messages .message[data-index="0"]').get_by_role("button", name="Delete").click()
    page.wait_for_selector("#notice:not([hidden])")
    assert contents(folder, "d") == ["q0", "a1", "q2"]


def test_another_agents_session_offers_no_edits(page, serve, folder, shared_file):
    server = serve(ScriptedProvider(lambda r: "x"), settings=settings(), model_id=MODEL, sessions_dir=str(folder))
    claude_session(folder, shared_file, "agent")
    open_app(page, server, "#/s/agent")
    page.wait_for_selector("#read-only:not([hidden])")
    page.wait_for_selector("#messages .message[data-index]")
    assert page.locator("#messages .message-actions button").count() == 0


def test_sessions_are_listed_by_title_searched_and_renamed(page, serve, folder):
    server = serve(ScriptedProvider(lambda r: "x"), settings=settings(), model_id=MODEL, sessions_dir=str(folder))
    own_session(folder, "build", ["Why does the build fail?", "step 377"])
    own_session(folder, "trip", ["Plan a trip to Lisbon", "ok"])
    (folder / "blank.jsonl").touch()
    open_app(page, server, "#/")
    page.wait_for_selector("#session-list li a")
    names = page.eval_on_selector_all("#session-list li a", "as => as.map(a => a.textContent)")
    assert sorted(names) == ["Plan a trip to Lisbon", "Why does the build fail?", "blank"]
    page.fill("#session-search", "BUILD fail")
    visible = page.eval_on_selector_all("#session-list li:not([hidden]) a", "as => as.map(a => a.textContent)")
    assert visible == ["Why does the build fail?"]
    page.fill("#session-search", "nothing like it")
    page.wait_for_selector("#search-note:has-text('No session')")
    page.fill("#session-search", "")
    assert page.locator("#session-list li:not([hidden])").count() == 3
    # Renamed in the session's view: kept by the server, shown after a reload and listed.
    page.goto(page.url.split("#")[0] + "#/s/build")
    page.wait_for_selector("#session-title:has-text('Why does the build fail?')")
    page.get_by_role("button", name="Rename").click()
    page.fill("#rename-input", "Build failure, step 377")
    page.press("#rename-input", "Enter")
    page.wait_for_selector("#session-title:has-text('Build failure, step 377')")
    page.reload()
    page.wait_for_selector("#session-title:has-text('Build failure, step 377')")
    assert (folder / "build.title").read_text() == "Build failure, step 377"
    page.goto(page.url.split("#")[0] + "#/")
    page.wait_for_selector("#session-list li a:has-text('Build failure, step 377')")


def test_an_agents_tool_calls_and_results_are_folded_into_readable_blocks(page, serve, folder, shared_file):
    server = serve(ScriptedProvider(lambda r: "x"), settings=settings(), model_id=MODEL, sessions_dir=str(folder))
    claude_session(folder, shared_file, "agent")
    open_app(page, server, "#/s/agent")
    page.wait_for_selector("#messages details.folded.tool_call")
    summaries = page.eval_on_selector_all("#messages details.folded.tool_call summary",
                                          "s => s.map(x => x.textContent)")
    assert "Tool call · Bash · git status 2>&1" in summaries  # the command, not the call's JSON
    assert not any('"type": "tool_use"' in s for s in summaries)
    results = page.eval_on_selector_all("#messages details.folded.tool_result summary",
                                        "s => s.map(x => x.textContent)")
    assert results and all(r.startswith("Tool result · ") for r in results)
    # Folded until opened; opened, the text is there as it is.
    # The newest one: older pages load above it meanwhile, and a locator by position would move.
    first = page.query_selector_all("#messages details.folded.tool_call")[-1]
    assert first.get_attribute("open") is None and not first.query_selector(".text").is_visible()
    first.query_selector("summary").click()
    assert first.query_selector(".text").is_visible()
    # The person's and the model's own words are not folded.
    texts = page.eval_on_selector_all("#messages .message.assistant:not(.tool) .text",
                                      "ns => ns.map(n => n.textContent)")
    assert any(t.startswith("All done.") for t in texts)


def test_what_the_page_hides_is_not_shown_whatever_its_layout(page, serve, folder):
    server = serve(ScriptedProvider(lambda r: "x"), settings=settings(), model_id=MODEL, sessions_dir=str(folder))
    open_empty_session(page, server, folder, "h")
    hidden = page.eval_on_selector_all("[hidden]", "ns => ns.filter(n => getComputedStyle(n).display !== 'none')"
                                                   ".map(n => n.id || n.className)")
    assert hidden == []
    assert page.is_hidden("#rename-form") and page.is_visible("#session-heading")


def test_the_window_gauge_shows_the_last_prompt_and_a_draft_over_the_limit_is_said_before_sending(page, serve, folder):
    provider = ScriptedProvider(lambda r: "short answer", context_window=1024)
    server = serve(provider, settings=settings(), model_id=MODEL, sessions_dir=str(folder))
    errors = open_empty_session(page, server, folder, "g")
    assert page.is_hidden("#window-line")
    ask(page, "a short question")
    page.wait_for_selector("#window-line:not([hidden])")
    said = page.text_content("#window-said")
    limit = 1024 - 256  # a reply without max_tokens keeps a quarter of this window for its answer
    assert f"of the {limit:,} tokens a prompt may take" in said, said
    assert page.eval_on_selector("#window-gauge", "m => [m.value, m.max]") == [
        pytest.approx(float(said.split(" took ")[1].split(" of ")[0].replace(",", ""))), limit]
    # Typed (the input event), a draft over the limit is said to be read in sections before it is sent.
    page.fill("#question", "word " * 2000)
    page.wait_for_selector("#sections-note:not([hidden])")
    assert "it will be read in sections" in page.text_content("#sections-note")
    page.fill("#question", "a short one again")
    page.wait_for_selector("#sections-note", state="hidden")
    # With section analysis off the server refuses such a message: the page says that instead.
    import httpx

    httpx.patch(f"{server.url}/boundctx/v1/settings", json={"chat.analysis_workers": 0}).raise_for_status()
    page.fill("#question", "word " * 2000)
    page.wait_for_selector("#sections-note:not([hidden])")
    assert "so it will be refused" in page.text_content("#sections-note")
    assert not errors
