"""Several boundctx serve processes on one sessions folder (how one scales past a
machine: many servers behind a balancer): appends through the API from both, at once,
are all kept, whole and unmixed, and both servers page the result alike. And one process
starting: the banner only once its address is bound, a port in use refused before it."""

import subprocess
import sys
import threading

import httpx
import pytest

pytest.importorskip("uvicorn", reason="boundctx serve needs the serve extra (pip install 'boundctx[serve]')")

from boundctx.transcript.lineformat import decode_record  # noqa: E402
from boundctx.transcript.store import Transcript  # noqa: E402

from tests._support import importable_env  # noqa: E402

API = "/boundctx/v1/sessions"


@pytest.fixture
def two_servers(tmp_path):
    folder = tmp_path / "sessions"
    folder.mkdir()
    procs, urls = [], []
    for _ in range(2):
        p = subprocess.Popen([sys.executable, "-m", "tests._support.scripted_server", str(folder)],
                             stdout=subprocess.PIPE, text=True, env=importable_env())
        procs.append(p)
        urls.append(f"http://127.0.0.1:{int(p.stdout.readline())}")
    for url in urls:  # the socket is bound before it is printed; wait for the app itself
        for _ in range(300):
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                threading.Event().wait(0.05)
    yield folder, urls
    for p in procs:
        p.terminate()
        p.wait(30)
        p.stdout.close()


def test_two_server_processes_appending_to_one_session_lose_and_mix_nothing(two_servers):
    folder, (a, b) = two_servers
    assert httpx.post(a + API, json={"id": "shared"}).status_code == 201
    per_writer, writers = 25, [(a, 0), (a, 1), (b, 2), (b, 3)]
    failures, retries = [], []

    def write(url, writer):
        with httpx.Client(base_url=url, timeout=30) as http:
            for i in range(per_writer):
                # Large enough records that an unlocked write would interleave.
                text = f"writer {writer} record {i} " + chr(ord("a") + writer) * 60_000
                record = {"type": "message", "message": {"role": "user", "content": text}}
                for _ in range(20):  # a 409 says "retry shortly" (Retry-After): a client does
                    r = http.post(API + "/shared/messages", json=record)
                    if r.status_code != 409:
                        break
                    retries.append(writer)
                    threading.Event().wait(float(r.headers["retry-after"]) / 10)
                if r.status_code != 201:
                    failures.append((writer, i, r.status_code, r.text))

    threads = [threading.Thread(target=write, args=w) for w in writers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert failures == []
    lines = (folder / "shared.jsonl").read_bytes().split(b"\n")
    assert lines[-1] == b""  # every record ended with its newline
    seen = []
    for line in lines[:-1]:
        content = decode_record(line)["message"]["content"]  # each line whole JSON, nothing mixed in
        writer, i = int(content.split()[1]), int(content.split()[3])
        assert content == f"writer {writer} record {i} " + chr(ord("a") + writer) * 60_000
        seen.append((writer, i))
    assert sorted(seen) == [(w, i) for w in range(4) for i in range(per_writer)]  # each once
    for writer in range(4):  # and each writer's own records in the order it sent them
        assert [i for w, i in seen if w == writer] == list(range(per_writer))
    # Both servers see the same session: the same count, the same layout version.
    views = [httpx.get(url + API + "/shared").json() for url in (a, b)]
    assert views[0]["message_count"] == views[1]["message_count"] == 4 * per_writer
    assert views[0]["layout_version"] == views[1]["layout_version"]
    with Transcript.open(str(folder / "shared.jsonl")) as t:
        assert t.message_count == 4 * per_writer


def _serve(tmp_path, port, *, stderr=subprocess.PIPE):
    return subprocess.Popen([sys.executable, "-m", "boundctx", "serve", "--port", str(port), "--sessions-dir",
                             str(tmp_path / "sessions"), "--provider", "remote", "--base-url", "http://127.0.0.1:9",
                             "--model", "m"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
                            text=True, env=importable_env())


def test_serve_on_a_port_in_use_says_so_without_a_banner_and_exits_2(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = _serve(tmp_path, port)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err  # documented (README, "Exit codes"), not uvicorn's 3
    assert f"cannot listen on 127.0.0.1:{port}" in err and "--port" in err
    assert "http://" not in err and "Ctrl-C stops" not in err  # no banner: nothing was served
    assert "Traceback" not in err


def test_the_serve_banner_comes_once_bound_and_names_the_port_chosen_for_port_0(tmp_path):
    proc = _serve(tmp_path, 0)
    try:
        banner = ""
        for line in proc.stderr:
            if "Ctrl-C stops" in line:
                banner = line
                break
        url = banner.split(" on ", 1)[1].split("/v1", 1)[0]
        assert url.startswith("http://127.0.0.1:") and not url.endswith(":0"), banner
        for _ in range(300):  # bound before the banner; the app comes up after it
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                threading.Event().wait(0.05)
        assert httpx.get(url + "/v1/models", timeout=10).status_code == 200
    finally:
        proc.terminate()
        proc.wait(30)
        proc.stderr.close()
