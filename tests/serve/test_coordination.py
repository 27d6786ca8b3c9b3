"""Several boundctx serve processes on one sessions database share cancels and settings
(docs/decisions/0049): a cancel sent to any of them stops the reply where it runs, a
settings change sent to one applies in all from their next reply (and in one started
later), nothing is lost while the database is away, and a dead process's replies are not
in flight anywhere. Real servers on loopback, the official client, a real PostgreSQL."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

pytest.importorskip("uvicorn", reason="boundctx serve needs the serve extra (pip install 'boundctx[serve]')")
openai = pytest.importorskip("openai", reason="the official client is in the test extra")

from boundctx.serve import create_app  # noqa: E402

from tests._support import eventually  # noqa: E402

API = "/boundctx/v1"
ASK = [{"role": "user", "content": "hello"}]


class Model:
    """A scripted model: each reply answers a word every 50 ms until released (a minute and
    more at the budgets asked here), and says what temperature it was asked with."""

    def __init__(self) -> None:
        self.temperatures: list[float] = []
        self.release = threading.Event()

    def __call__(self, request):
        self.temperatures.append(request.temperature)

        def words():
            for i in range(100_000):
                if self.release.is_set():
                    return
                time.sleep(0.05)
                yield f"w{i} "
        return words()


def start(url: str, model: Model):
    from boundctx.providers import ScriptedProvider

    from tests._support.running import Running

    running = Running(create_app(ScriptedProvider(model), host="127.0.0.1", sessions_dir=url, model_id="m"))
    running.http = httpx.Client(base_url=running.url, timeout=20)
    running.client = openai.OpenAI(base_url=running.url + "/v1", api_key="none", max_retries=0)
    return running


@pytest.fixture
def deployment(postgres_db):
    """Two serve processes' apps on one database (each with its own connections and
    listener, as two processes have)."""
    started = []

    def more(n: int = 1):
        for _ in range(n):
            model = Model()
            running = start(postgres_db.url, model)
            running.model = model
            started.append(running)
        return started[-n:]

    more(2)
    yield started, more
    for running in started:
        running.model.release.set()
        running.http.close()
        running.stop()


def cancelled(stream) -> bool:
    """Whether a streamed chat completion ended cancelled (OpenAI's wire says ``stop``;
    boundctx's extension on the last chunk says why)."""
    last = [c for c in stream if c.choices and c.choices[0].finish_reason][-1]
    return last.choices[0].finish_reason == "stop" and last.model_extra["boundctx"]["cancelled"] is True


def setting(running, name: str) -> dict:
    view = running.http.get(f"{API}/settings").json()
    return next(item for item in view["data"] if item["name"] == name)


def test_a_cancel_sent_to_another_process_stops_the_reply_where_it_runs(deployment):
    (a, b), _ = deployment
    stream = a.client.chat.completions.create(model="m", messages=ASK, stream=True, max_tokens=4000)
    first = next(iter(stream))
    answer = b.http.post(f"{API}/replies/{first.id}/cancel")
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"object": "boundctx.reply", "id": first.id, "cancelled": True}
    assert cancelled(stream)
    # Over: no process runs it, and each says so alike.
    for running in (a, b):
        gone = eventually(lambda r=running: r.http.post(f"{API}/replies/{first.id}/cancel").status_code == 404)
        assert gone


def test_an_id_no_process_runs_is_404_in_every_process(deployment):
    (a, b), _ = deployment
    for running in (a, b):
        answer = running.http.post(f"{API}/replies/chatcmpl-nosuch/cancel")
        assert answer.status_code == 404 and answer.json()["error"]["code"] == "reply_not_found"


def test_a_session_reply_is_cancelled_from_another_process(deployment):
    (a, b), _ = deployment
    assert a.http.post(f"{API}/sessions", json={"id": "s1"}).status_code in (200, 201)
    with a.http.stream("POST", f"{API}/sessions/s1/replies", json={"content": "hi", "max_tokens": 4000}) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        reply_id = None
        for line in lines:
            if line.startswith("data:") and '"type":"reply"' in line:
                reply_id = json.loads(line[5:])["id"]
                break
        assert reply_id and reply_id.startswith("reply-")
        assert b.http.post(f"{API}/replies/{reply_id}/cancel").status_code == 200
        rest = [json.loads(line[5:]) for line in lines if line.startswith("data:")]
    assert rest[-1]["type"] == "done" and rest[-1]["finish_reason"] == "cancelled"


def test_a_settings_change_applies_in_every_process_from_its_next_reply(deployment):
    (a, b), more = deployment
    answer = a.http.patch(f"{API}/settings", json={"chat.temperature": 0.7})
    assert answer.status_code == 200, answer.text
    assert answer.json()["shared"] is True
    for running in (a, b):
        seen = eventually(lambda r=running: setting(r, "chat.temperature")["value"] == 0.7)
        assert seen, setting(running, "chat.temperature")
        assert setting(running, "chat.temperature")["source"] == "PATCH /boundctx/v1/settings"
    b.model.release.set()
    b.client.chat.completions.create(model="m", messages=ASK, max_tokens=8)
    assert b.model.temperatures[-1] == pytest.approx(0.7)
    # A process that starts later runs with the change too.
    (c,) = more()
    assert setting(c, "chat.temperature")["value"] == 0.7
    # null puts the key back everywhere, each to the value it started with.
    assert c.http.patch(f"{API}/settings", json={"chat.temperature": None}).status_code == 200
    for running in (a, b, c):
        back = eventually(lambda r=running: setting(r, "chat.temperature")["value"] == 0.2)
        assert back, setting(running, "chat.temperature")
        assert setting(running, "chat.temperature")["source"] == "default"


def test_a_refused_change_changes_nothing_anywhere(deployment):
    (a, b), _ = deployment
    assert a.http.patch(f"{API}/settings", json={"chat.temperature": 0.5}).status_code == 200
    refused = b.http.patch(f"{API}/settings", json={"chat.temperature": 0.9, "chat.low_water": 7})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "chat.low_water"
    fixed = b.http.patch(f"{API}/settings", json={"serve.sessions_dir": "/tmp"})
    assert fixed.status_code == 400
    time.sleep(0.5)  # a notification, had one been sent, would have arrived
    for running in (a, b):
        assert setting(running, "chat.temperature")["value"] == 0.5


def test_changes_made_at_once_in_two_processes_end_the_same_everywhere(deployment):
    (a, b), _ = deployment
    results = []

    def change(running, value):
        for _ in range(10):
            results.append(running.http.patch(f"{API}/settings", json={"chat.temperature": value}).status_code)

    threads = [threading.Thread(target=change, args=(a, 0.3)), threading.Thread(target=change, args=(b, 0.6))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [200] * 20
    # Whichever came last, both processes agree on it.
    agreed = eventually(lambda: setting(a, "chat.temperature")["value"] == setting(b, "chat.temperature")["value"])
    assert agreed


def test_while_the_database_is_away_and_after_it_returns(deployment, postgres_server):
    (a, b), _ = deployment
    postgres_server.stop()
    try:
        # A reply that needs no session runs without the database...
        stream = a.client.chat.completions.create(model="m", messages=ASK, stream=True, max_tokens=4000)
        first = next(iter(stream))
        # ...a cancel of it here still works; elsewhere it cannot be asked, and says so.
        away = b.http.post(f"{API}/replies/{first.id}/cancel")
        assert away.status_code == 503 and away.json()["error"]["code"] == "store_unavailable"
        assert away.headers["retry-after"]
        changed = b.http.patch(f"{API}/settings", json={"chat.temperature": 0.4})
        assert changed.status_code == 503 and changed.json()["error"]["code"] == "store_unavailable"
    finally:
        postgres_server.start()
    # Back: the reply that started while it was away is registered by its process's
    # catch-up, and a cancel from the other process reaches it.
    reached = eventually(lambda: b.http.post(f"{API}/replies/{first.id}/cancel").status_code == 200, within=60)
    assert reached
    assert cancelled(stream)
    assert eventually(lambda: b.http.patch(f"{API}/settings", json={"chat.temperature": 0.4}).status_code == 200)
    assert eventually(lambda: setting(a, "chat.temperature")["value"] == 0.4)


def test_a_cancel_asked_while_the_owner_was_not_listening_is_carried_out(postgres_db):
    """The owner's listening connection drops (killed by the database); a cancel marks
    the row meanwhile; the owner, listening again, does it."""
    import psycopg

    model = Model()
    a = start(postgres_db.url, model)
    try:
        stream = a.client.chat.completions.create(model="m", messages=ASK, stream=True, max_tokens=4000)
        first = next(iter(stream))
        with psycopg.connect(postgres_db.url, autocommit=True) as conn:
            # The cancel's row update without its notification: as if it had been sent while
            # the owner was not listening.
            assert conn.execute("UPDATE boundctx_replies SET cancel_asked = true WHERE id = %s",
                                (first.id,)).rowcount == 1
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                         "WHERE query LIKE 'LISTEN%%' OR pid IN (SELECT backend FROM boundctx_replies)")
        assert cancelled(stream)
    finally:
        model.release.set()
        a.stop()
