"""Three boundctx serve processes on one sessions database, as replicas behind a balancer
are (docs/decisions/0048, 0049), and the faults such a deployment meets: a cancel and a
settings change sent to one process reach the others; a process killed with SIGKILL
mid-reply leaves no reply in flight anywhere; processes killed while appending and
editing lose nothing they acknowledged and double nothing; a database restart under a
reply leaves it saved whole. Real processes, real HTTP, a real PostgreSQL."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

pytest.importorskip("uvicorn", reason="boundctx serve needs the serve extra (pip install 'boundctx[serve]')")

from tests._support import eventually, importable_env  # noqa: E402

API = "/boundctx/v1"


class Replicas:
    """``boundctx serve`` processes (the scripted model) on one database."""

    def __init__(self, url: str, mode: str) -> None:
        self.url, self.mode = url, mode
        self.procs: list[subprocess.Popen] = []
        self.urls: list[str] = []

    def start(self) -> str:
        proc = subprocess.Popen([sys.executable, "-m", "tests._support.scripted_server", self.url, self.mode],
                                stdout=subprocess.PIPE, text=True, env=importable_env())
        url = f"http://127.0.0.1:{int(proc.stdout.readline())}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # bound before printed; wait for the app itself
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)
        self.procs.append(proc)
        self.urls.append(url)
        return url

    def kill(self, url: str) -> None:
        """SIGKILL: no handler runs, no connection is closed politely."""
        proc = self.procs[self.urls.index(url)]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(30)
            proc.stdout.close()


@pytest.fixture
def replicas(postgres_db):
    made: list[Replicas] = []

    def make(n: int, mode: str = "slow") -> Replicas:
        r = Replicas(postgres_db.url, mode)
        made.append(r)
        for _ in range(n):
            r.start()
        return r

    yield make
    for r in made:
        r.close()


def first_chunk_id(lines) -> str:
    """The reply's id from its first chunk (``lines``: one iterator kept for the whole
    stream; a second ``iter_lines()`` would close the response, and a closed response is a
    client gone, whose reply stops)."""
    for line in lines:
        if line.startswith("data: ") and line != "data: [DONE]":
            return json.loads(line[6:])["id"]
    raise AssertionError("the stream ended before its first chunk")


def last_extension(lines) -> dict:
    ext = {}
    for line in lines:
        if line.startswith("data: ") and line != "data: [DONE]":
            ext = json.loads(line[6:]).get("boundctx") or ext
    return ext


def temperature(url: str) -> float:
    view = httpx.get(url + API + "/settings", timeout=10).json()
    return next(item["value"] for item in view["data"] if item["name"] == "chat.temperature")


def test_cancel_and_settings_cross_between_three_processes(replicas):
    r = replicas(3)
    p0, p1, p2 = r.urls
    body = {"model": "scripted", "messages": [{"role": "user", "content": "go"}], "stream": True,
            "max_tokens": 4000}
    with httpx.stream("POST", p0 + "/v1/chat/completions", json=body, timeout=60) as stream:
        lines = stream.iter_lines()
        reply_id = first_chunk_id(lines)
        answer = httpx.post(f"{p1}{API}/replies/{reply_id}/cancel", timeout=10)
        assert answer.status_code == 200, answer.text
        assert last_extension(lines)["cancelled"] is True
    assert httpx.patch(p2 + API + "/settings", json={"chat.temperature": 0.9}, timeout=10).status_code == 200
    for url in r.urls:
        assert eventually(lambda u=url: temperature(u) == 0.9), url


def test_a_process_killed_mid_reply_leaves_that_reply_in_flight_nowhere(replicas, postgres_db):
    import psycopg

    r = replicas(2)
    p0, p1 = r.urls
    body = {"model": "scripted", "messages": [{"role": "user", "content": "go"}], "stream": True,
            "max_tokens": 4000}
    with httpx.stream("POST", p0 + "/v1/chat/completions", json=body, timeout=60) as stream:
        lines = stream.iter_lines()
        reply_id = first_chunk_id(lines)
        with psycopg.connect(postgres_db.url) as conn:  # in flight, registered
            assert conn.execute("SELECT count(*) FROM boundctx_replies WHERE id = %s", (reply_id,)).fetchone()[0] == 1
        r.kill(p0)
    gone = eventually(lambda: httpx.post(f"{p1}{API}/replies/{reply_id}/cancel", timeout=10).status_code == 404)
    assert gone
    answer = httpx.post(f"{p1}{API}/replies/{reply_id}/cancel", timeout=10).json()
    assert answer["error"]["code"] == "reply_not_found"


def test_processes_killed_while_appending_and_editing_lose_nothing_acknowledged_and_double_nothing(
        replicas, postgres_db):
    """Three writers append through three processes and one edits seeded messages through
    them, while a process is killed with SIGKILL and a new one started, three times. An
    append or edit that was answered is there exactly once; one whose answer was lost with
    the process is there once or not at all; each writer's appends keep its order."""
    from boundctx.stores.postgres import PostgresStore

    r = replicas(3, mode="")
    seeded = 30
    assert httpx.post(r.urls[0] + API + "/sessions", json={"id": "shared"}, timeout=10).status_code == 201
    for i in range(seeded):
        record = {"type": "message", "message": {"role": "user", "content": f"seed {i}"}}
        assert httpx.post(r.urls[0] + API + "/sessions/shared/messages", json=record, timeout=10).status_code == 201
    acked: dict[int, list[int]] = {w: [] for w in range(3)}
    unsure: dict[int, list[int]] = {w: [] for w in range(3)}
    edits_acked: list[int] = []
    edits_unsure: list[int] = []
    live = list(r.urls)  # the writers' view of which processes answer now
    stop = threading.Event()
    unexpected: list[tuple] = []

    def url_for(slot: int) -> str:
        return live[slot % len(live)]

    def append(writer: int) -> None:
        for i in range(10_000):
            if stop.is_set():
                return
            text = f"writer {writer} record {i} " + "x" * 3000
            record = {"type": "message", "message": {"role": "user", "content": text}}
            try:
                answer = httpx.post(url_for(writer) + API + "/sessions/shared/messages", json=record, timeout=10)
            except httpx.TransportError:
                unsure[writer].append(i)  # the process died with the request: done or not
                continue
            if answer.status_code == 201:
                acked[writer].append(i)
            elif answer.status_code in (409, 503):  # retry-shortly answers: not done
                continue
            else:
                unexpected.append((writer, i, answer.status_code, answer.text))

    def edit() -> None:
        for j in range(seeded):
            if stop.is_set():
                return
            record = {"type": "message", "message": {"role": "user", "content": f"edited {j}"}}
            try:
                answer = httpx.patch(url_for(j) + API + f"/sessions/shared/messages/{j}", json=record, timeout=20)
            except httpx.TransportError:
                edits_unsure.append(j)
                continue
            if answer.status_code == 200:
                edits_acked.append(j)
            elif answer.status_code not in (409, 503):
                unexpected.append(("edit", j, answer.status_code, answer.text))
            time.sleep(0.05)

    threads = [threading.Thread(target=append, args=(w,)) for w in range(3)] + [threading.Thread(target=edit)]
    for t in threads:
        t.start()
    rng = random.Random(0)
    try:
        for _ in range(3):
            time.sleep(rng.uniform(0.5, 1.5))
            victim = live[rng.randrange(len(live))]
            r.kill(victim)
            live[live.index(victim)] = r.start()
        time.sleep(0.5)
    finally:
        stop.set()
        for t in threads:
            t.join(120)
    assert unexpected == []
    assert sum(map(len, acked.values())) > 30 and edits_acked  # the campaign did write

    with PostgresStore(postgres_db.url) as store, store.open("shared") as session:
        n = session.message_count
        contents = [e.record["message"]["content"] for e in session.window(message_limit=n, content_limit=None,
                                                                            page_bytes=None).messages]
    assert len(contents) == n
    for j in range(seeded):
        if j in edits_acked:
            assert contents[j] == f"edited {j}"
        else:
            assert contents[j] in (f"seed {j}", f"edited {j}")
    seen: dict[int, list[int]] = {w: [] for w in range(3)}
    for content in contents[seeded:]:
        words = content.split()
        seen[int(words[1])].append(int(words[3]))
    for w in range(3):
        assert len(seen[w]) == len(set(seen[w])), f"writer {w}: an append stored twice"
        assert seen[w] == sorted(seen[w]), f"writer {w}: appends out of order"
        assert set(acked[w]) <= set(seen[w]), f"writer {w}: acknowledged appends lost"
        assert set(seen[w]) <= set(acked[w]) | set(unsure[w]), f"writer {w}: an append nobody made"


def test_a_database_restart_under_a_reply_leaves_it_saved_whole(replicas, postgres_server):
    r = replicas(1, mode="words=150")  # three seconds of answer
    (p0,) = r.urls
    assert httpx.post(p0 + API + "/sessions", json={"id": "s"}, timeout=10).status_code == 201
    events = []
    with httpx.stream("POST", p0 + API + "/sessions/s/replies", json={"content": "go on", "max_tokens": 2000},
                      timeout=60) as reply:
        for line in reply.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
                if len(events) == 3:
                    postgres_server.restart()
    done = events[-1]
    assert done["type"] == "done" and done["finish_reason"] == "stop"
    assert done["saved"] is True, done
    window = httpx.get(p0 + API + "/sessions/s/messages", timeout=10).json()
    texts = [m["text"] for m in window["messages"]]
    assert len(texts) == 2 and texts[0] == "go on" and texts[1].startswith("w0 w1 ")
