"""A session reply on a transcript with a valid JSON line of another shape (issue 22,
item 5): a 200 stream whose ``reply`` event carries the line's notice, and a model that
gets every other message, on a real server on loopback; never a 500."""

import httpx
import pytest

from boundctx.providers import ScriptedProvider

from .test_boundctx_routes import API, events_of
from tests._support import assert_well_formed
from tests._support.scripted import MODEL, settings
from tests.faults.odd_records import ISSUE_EXAMPLES, write


@pytest.mark.parametrize("name", sorted(ISSUE_EXAMPLES))
def test_a_session_reply_on_an_odd_line_streams_its_notice_and_answers(serve, tmp_path, name):
    records, notice, texts = ISSUE_EXAMPLES[name]
    seen = []

    def respond(request):
        seen.append(request.messages)
        return "fine"

    server = serve(ScriptedProvider(respond), settings=settings(), model_id=MODEL)
    (tmp_path / "sessions").mkdir(exist_ok=True)
    write(tmp_path / "sessions" / "odd.jsonl", records)
    writable = records[-1]["type"] == "message"  # boundctx's own format is continued; the others only read
    with httpx.stream("POST", f"{server.url}{API}/sessions/odd/replies", json={"content": "go on", "save": writable},
                      timeout=60) as r:
        assert r.status_code == 200, r.read()
        events = events_of(r)
    (first, opening), (last, done) = events[0], events[-1]
    assert first == "reply" and notice in opening["notices"]
    assert last == "done" and done["finish_reason"] == "stop" and done["saved"] is writable
    assert "".join(d["text"] for n, d in events if n == "reply_delta") == "fine"
    assert_well_formed(seen[-1])
    assert [m["content"] for m in seen[-1] if m["content"] and m["role"] != "system"] == [*texts, "go on"]
