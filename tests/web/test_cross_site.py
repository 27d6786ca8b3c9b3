"""Another web site the user opens cannot act through their loopback boundctx serve.

A browser sends a "simple" cross-origin POST (``text/plain``, no custom header) without
asking the server first; the page cannot read the answer, but it does not need to: the
request alone would create a session, append to one, or run a reply that is saved. The
same requests from the server's own page land, so the browser did send them."""

import functools
import http.server
import json
import threading

import pytest

from boundctx.providers import ScriptedProvider
from boundctx.transcript.lineformat import encode_record

from tests._support.scripted import MODEL, settings

ATTACK = """async (target) => {
    const plain = {"Content-Type": "text/plain"};
    const post = (path, body) => fetch(target + path, {method: "POST", mode: "no-cors", headers: plain,
                                                       body: JSON.stringify(body)}).catch(() => null);
    await post("/boundctx/v1/sessions", {id: ID});
    await post("/boundctx/v1/sessions/s1/messages", {type: "message", message: {role: "user", content: ID}});
    await post("/boundctx/v1/sessions/s1/replies", {content: "planted question " + ID});
    navigator.sendBeacon(target + "/boundctx/v1/sessions/s1/messages",
                         JSON.stringify({type: "message", message: {role: "user", content: "beacon " + ID}}));
    await new Promise((done) => setTimeout(done, 500));
    return true;
}"""


@pytest.fixture
def other_site(tmp_path):
    """A static site on another port of this machine, reached as ``localhost`` (another
    origin, another site name) while the server is addressed as 127.0.0.1."""
    root = tmp_path / "site"
    root.mkdir()
    (root / "index.html").write_text("<!doctype html><title>another site</title><p>hello</p>")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://localhost:{httpd.server_address[1]}/index.html"
    httpd.shutdown()
    httpd.server_close()


def lines(path):
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def test_a_page_on_another_site_cannot_create_append_or_reply_through_the_server(serve, page, other_site, tmp_path):
    folder = tmp_path / "sessions"
    folder.mkdir()
    session = folder / "s1.jsonl"
    session.write_bytes(encode_record({"type": "message", "message": {"role": "user", "content": "mine"}}))
    server = serve(ScriptedProvider(lambda r: "an answer"), settings=settings(), model_id=MODEL,
                   sessions_dir=str(folder))

    page.goto(other_site)
    assert page.evaluate(ATTACK.replace("ID", '"evil"'), server.url)
    assert sorted(p.name for p in folder.glob("*.jsonl")) == ["s1.jsonl"]
    assert lines(session) == [{"type": "message", "message": {"role": "user", "content": "mine"}}]

    # The server's own page sends the very same requests, and they land: the browser
    # sent them above too, and only the server's refusal kept them out.
    page.goto(server.url + "/")
    assert page.evaluate(ATTACK.replace("ID", '"own"'), server.url)
    assert sorted(p.name for p in folder.glob("*.jsonl")) == ["own.jsonl", "s1.jsonl"]
    contents = [r["message"]["content"] for r in lines(session)]
    assert "own" in contents and "beacon own" in contents and "planted question own" in contents
