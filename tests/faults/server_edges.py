"""The fault campaign at the server's edges (issue 22): a real ``boundctx serve`` on
loopback, met by real clients and real racing processes.

Every campaign here starts the server as a child process of its own (``python -m
tests.faults.server_edges serve ...``, run from the repository root): the app of ``create_app`` on the
scripted model of ``tests/_support/scripted.py``, over a real sessions folder, served by
``boundctx.serve.connections.run_server``, the path ``boundctx serve`` takes, so the
bounds on request heads, their time and open connections are the ones a user gets. The
clients are threads of the campaign (each with its own HTTP connections) and processes
of their own (rewriters, appenders, a swapper, hostile clients), started the same way
with another role.

Five campaigns, each returning a :class:`~tests.faults.core.Tally`:

- :func:`cross_origin`: requests from other web pages (every route and method, every
  content type a page can send without asking first, origins that look like the
  server's own) must be refused with 403 and change nothing; the server's own page,
  a configured origin, a proxy's ``X-Forwarded-Host`` and clients without ``Origin``
  must be served.
- :func:`cursor_edits`: clients edit and delete messages by index with the
  ``layout_version`` of the window they read, while other processes rewrite and append;
  an accepted edit must have changed exactly the message the client saw.
- :func:`hostile_connections`: huge request heads sent in pieces, heads trickled a byte
  at a time, idle sockets past ``serve.max_connections``, half-closed and reset
  connections, while a probe keeps asking ``/health`` and appending.
- :func:`settings_extremes`: every setting the API can change, at its minimum and its
  maximum (and just past them), then a chat completion and a session reply that need
  analysis.
- :func:`path_races`: a process swaps a session's name between its file and a symlink
  out of the folder (to a file, a FIFO, a directory), a FIFO, a directory and nothing,
  while clients append, read, edit, delete and list.

What every message must hold is judged by its content, which is unique in a session:
:class:`Ledger` keeps what was acknowledged, refused and left unanswered, and says what
the file must hold at the end.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import json
import math
import os
import random
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import httpx

from .core import CHILD_TIMEOUT, Child, ChildDied, ChildHung, Tally, pump

ROOT = Path(__file__).resolve().parents[2]  # the repository root: where ``-m tests...`` imports from
MODEL = "boundctx-test"
API = "/boundctx/v1/sessions"
SETTINGS = "/boundctx/v1/settings"
#: The settings every campaign's server starts from, as the serve tests' ``settings()``.
BASE_SETTINGS = {"analysis.notes_max_tokens": 256}
#: How long one request may go unanswered before it counts as a hang: generous, for a
#: loaded 2-core machine; a hang is a failure, not a slow run.
REQUEST_TIMEOUT = 60.0

_decode = json.loads


def record(content: str, role: str = "user") -> dict:
    """A session message whose content is ``content`` (unique within its session)."""
    return {"type": "message", "message": {"role": role, "content": content}}


def file_contents(path: Path) -> list[str]:
    """The content of every line of a session file, read as bytes (not through boundctx);
    a line that is no message of :func:`record` is returned as ``"!bad: ..."``."""
    out = []
    for line in Path(path).read_bytes().split(b"\n")[:-1]:
        try:
            content = _decode(line)["message"]["content"]
        except (ValueError, KeyError, TypeError):
            content = None
        out.append(content if isinstance(content, str) else f"!bad: {line[:120]!r}")
    return out


def seed_session(folder: Path, sid: str, contents: list[str]) -> Path:
    path = Path(folder) / f"{sid}.jsonl"
    path.write_bytes(b"".join(json.dumps(record(c)).encode() + b"\n" for c in contents))
    return path


def content_of(entry: dict) -> str | None:
    """The content of a window entry of the sessions API."""
    rec = entry.get("record")
    msg = rec.get("message") if isinstance(rec, dict) else None
    content = msg.get("content") if isinstance(msg, dict) else None
    return content if isinstance(content, str) else None


# -- the server under test ------------------------------------------------------------------


class Server:
    """``boundctx serve`` with the scripted model in a process of its own, on a free
    loopback port, until :meth:`stop`.

    ``overrides`` are settings over :data:`BASE_SETTINGS` (``config.load(env={},
    overrides=...)``: no config file, no environment). Its log (uvicorn's and the app's)
    is ``server.log`` in ``workdir``; its layout cache (where sidecars go that cannot lie
    beside a transcript) is ``server-cache``, which must stay empty while the sessions
    folder is writable.
    """

    def __init__(self, workdir: Path, overrides: dict | None = None) -> None:
        from tests._support.servers import free_port

        self.workdir = Path(workdir)
        self.folder = self.workdir / "sessions"
        self.cache = self.workdir / "server-cache"
        self.log_path = self.workdir / "server.log"
        for d in (self.folder, self.cache):
            d.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("BOUNDCTX_")}
        env["BOUNDCTX_CACHE_DIR"] = str(self.cache)
        env["PYTHONUNBUFFERED"] = "1"
        for attempt in range(5):
            self.port = free_port()
            self.url = f"http://127.0.0.1:{self.port}"
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "tests.faults.server_edges", "serve", str(self.folder), str(self.port),
                     json.dumps(overrides or {})], cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT)
            if self._ready():
                return
            if "address already in use" not in self.log_tail().lower():
                raise ChildDied(f"boundctx serve did not start: {self.log_tail()}")
        raise ChildDied(f"boundctx serve found no free port: {self.log_tail()}")

    def _ready(self) -> bool:
        deadline = time.monotonic() + CHILD_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                if httpx.get(self.url + "/health", timeout=5).status_code == 200:
                    return True
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        self.stop()
        raise ChildHung(f"boundctx serve did not answer /health within {CHILD_TIMEOUT:.0f} s: {self.log_tail()}")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, n: int = 1500) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def tracebacks(self) -> list[str]:
        """Tracebacks in the server's log: an exception that escaped a handler or a thread."""
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        out = []
        for part in text.split("Traceback (most recent call last):")[1:]:
            lines = part.strip().splitlines()
            said = [i for i, line in enumerate(lines) if line and not line[0].isspace()
                    and not line.startswith(("ERROR:", "WARNING:", "INFO:"))]
            i = said[-1] if said else len(lines) - 1
            out.append(f"{lines[i][:300]} (at {lines[i - 1].strip()[:200] if i else '?'})")
        return out

    def stop(self) -> int | None:
        """SIGTERM (uvicorn's graceful stop), then SIGKILL; the exit status (None: killed)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                return self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
                return None
        return self.proc.returncode

    def judge_end(self, tally: Tally) -> None:
        """The server must still be running, stop cleanly, and have logged no traceback;
        its layout cache must be empty (nothing written for a file outside the folder)."""
        if not self.alive():
            tally.crashes += 1
            tally.problem(f"the server died (exit status {self.proc.returncode}): {self.log_tail()}")
        rc = self.stop()
        # uvicorn stops gracefully on SIGTERM, then raises the signal again as it was
        # caught: -SIGTERM is a clean stop.
        if rc not in (0, -signal.SIGTERM, None) and tally.crashes == 0:
            tally.crashes += 1
            tally.problem(f"the server exited with {rc} when stopped: {self.log_tail()}")
        for tb in self.tracebacks():
            tally.crashes += 1
            tally.problem(f"the server logged a traceback: {tb}")
        cached = [p.name for p in self.cache.rglob("*") if p.is_file()]
        if cached:
            tally.wrong += 1
            tally.problem(f"the server wrote into its layout cache, outside the sessions folder: {cached[:5]}")

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def client(server: Server, **kw) -> httpx.Client:
    return httpx.Client(base_url=server.url, timeout=REQUEST_TIMEOUT, **kw)


class Racer(Child):
    """A role of this module in its own process (``python -m tests.faults.server_edges ROLE``),
    read line by line with deadlines as the other campaigns' children are."""

    def __init__(self, role: str, *args) -> None:
        super().__init__(role, *args, module=__name__)


class Threads:
    """Client threads of a campaign. Each counts into a tally of its own (``target(tally,
    *args)``), merged into the campaign's at :meth:`join`, so no count is lost to two
    threads adding at once; an exception in one is a problem of the campaign (counted as
    a crash of the harness), never a silent end."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self.tallies: list[Tally] = []
        self.errors: list[str] = []

    def start(self, target: Callable[..., None], *args) -> None:
        own = Tally("")
        self.tallies.append(own)

        def run() -> None:
            try:
                target(own, *args)
            except Exception:  # noqa: BLE001 - reported as the campaign's own failure
                self.errors.append(traceback.format_exc(limit=6))

        t = threading.Thread(target=run, daemon=True)
        t.start()
        self.threads.append(t)

    def alive(self) -> bool:
        return any(t.is_alive() for t in self.threads)

    def join(self, tally: Tally, timeout: float = CHILD_TIMEOUT * 2) -> None:
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.1, deadline - time.monotonic()))
            if t.is_alive():
                tally.hangs += 1
                tally.problem("a client thread did not end in time")
        for own in self.tallies:
            tally.merge(own)
        self.tallies = []
        for e in self.errors:
            tally.crashes += 1
            tally.problem(f"a client thread failed: {e}")


# -- what a session must hold ------------------------------------------------------------------


class Ledger:
    """What a session must hold at the end, when every message's content is unique.

    Appends and edits add a content; edits and deletes remove the one the client saw.
    Each is recorded as acknowledged (the server or the process said it was done),
    refused (it said nothing was written) or unsure (no answer). At the end, the file
    must hold exactly the initial contents plus the acknowledged additions minus the
    acknowledged removals, give or take what was unsure; nothing twice, nothing never
    written, nothing refused.
    """

    def __init__(self, initial: list[str], *, answers_hold: bool = False) -> None:
        self.initial = list(initial)
        #: Whether a write answered with a refusal (4xx) but of unknown outcome must not
        #: have happened (where nothing but the server's own answer can explain it).
        self.answers_hold = answers_hold
        self.added: dict[str, str] = {}  # content -> "append" or "edit", acknowledged
        self.removed: collections.Counter = collections.Counter()  # contents acknowledged removed
        self.removed_by: dict[str, str] = {}
        self.refused: set[str] = set()  # added contents that must never appear
        self.unsure_added: set[str] = set()
        self.unsure_removed: set[str] = set()
        self.unsure: list[tuple[str | None, str | None, str]] = []  # (removed, added, answer) of each
        self.lock = threading.Lock()

    def append(self, content: str, outcome: str, answer: str = "no answer") -> None:
        with self.lock:
            if outcome == "acked":
                self.added[content] = "append"
            elif outcome == "refused":
                self.refused.add(content)
            else:
                self.unsure_added.add(content)
                self.unsure.append((None, content, answer))

    def change(self, old: str, new: str | None, outcome: str, who: str, answer: str = "no answer") -> None:
        """``old`` replaced by ``new`` (an edit) or removed (``new`` None: a delete) by
        ``who``; ``answer`` says what an unsure one was answered."""
        with self.lock:
            if outcome == "acked":
                self.removed[old] += 1
                self.removed_by[old] = who
                if new is not None:
                    self.added[new] = "edit"
            elif outcome == "refused":
                if new is not None:
                    self.refused.add(new)
            else:
                self.unsure_removed.add(old)
                self.unsure.append((old, new, answer))
                if new is not None:
                    self.unsure_added.add(new)

    def expected(self) -> set[str]:
        return (set(self.initial) | set(self.added)) - set(self.removed)

    def judge(self, tally: Tally, final: list[str], where: str) -> None:
        counts = collections.Counter(final)
        written = set(self.initial) | set(self.added) | self.refused | self.unsure_added
        for content, n in counts.items():
            if content.startswith("!bad"):
                tally.wrong += 1
                tally.problem(f"{where}: a line that is no message: {content}")
            elif n > 1:
                tally.wrong += 1
                tally.problem(f"{where}: {content!r} is in the file {n} times")
            elif content not in written:
                tally.wrong += 1
                tally.problem(f"{where}: {content!r} is in the file but was never written")
            elif content in self.refused:
                tally.wrong += 1
                tally.problem(f"{where}: {content!r} is in the file though its write was refused")
        for old, n in self.removed.items():
            if n > 1:
                tally.wrong += 1
                tally.problem(f"{where}: {old!r} was removed by {n} acknowledged edits or deletes: one of them "
                              "changed another message")
            if old in counts:
                tally.wrong += 1
                tally.problem(f"{where}: {self.removed_by[old]} was acknowledged as changing {old!r}, which is "
                              "still there: it changed another message")
        for old, new, answer in self.unsure:
            what = "appends" if old is None else "edits and deletes"
            happened = (new in counts) if new is not None else (old not in counts and old not in self.removed)
            tally.note(f"{what} of unknown outcome ({answer}): {'done' if happened else 'not done'}")
            if happened and self.answers_hold and str(answer).startswith("4"):
                tally.wrong += 1
                done = "the append of" if old is None else "the edit of" if new is not None else "the delete of"
                tally.problem(f"{where}: {done} {old or new!r} was answered {answer}, but it happened")
        for content in sorted(self.expected() - set(counts) - self.unsure_removed):
            if self.added.get(content) == "append":
                tally.lost += 1
                tally.problem(f"{where}: the acknowledged append {content!r} is missing")
            else:
                tally.wrong += 1
                tally.problem(f"{where}: {content!r} is missing, and no acknowledged edit or delete removed it")


# -- campaign 1: requests from other web pages ------------------------------------------------

#: The origin configured in ``serve.cors_origins`` for the cross-origin campaign.
LISTED_ORIGIN = "http://localhost:3000"
#: What a page can send to another site without asking first (and a JSON body, which a
#: fetch in no-cors mode or a beacon carries as text/plain).
CONTENT_TYPES = (None, "text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
                 "multipart/form-data; boundary=----b", "application/json")


def foreign_origins(port: int) -> list[tuple[str, dict]]:
    """(Origin, extra headers) of pages that are not the server's own: other ports, look-alike
    hosts, other schemes, ``null``, and DNS rebinding (a foreign Host the check must stop)."""
    other = port + 1 if port < 65535 else port - 1
    look_alike = [
        "null", f"http://127.0.0.1:{other}", f"http://localhost:{other}", "http://127.0.0.1", "https://127.0.0.1",
        "http://localhost", "https://localhost", f"http://127.0.0.2:{port}", f"http://0.0.0.0:{port}",
        f"http://[::1]:{port}", f"http://127.0.0.1:{port}.evil.example", f"http://127.0.0.1.evil.example:{port}",
        f"http://localhost.evil.example:{port}", f"http://evil.example:{port}", "https://evil.example",
        "HTTP://EVIL.EXAMPLE", f"http://user@127.0.0.1:{port}", f"http://127.0.0.1:{port}/", "http://localhost:30000",
        "http://localhost:3000.evil.example", "https://localhost:3000", "http://localhost:3001", "file://",
        "file:///etc/passwd", "chrome-extension://abcdefghijklmnop", f"ws://127.0.0.1:{port}",
    ]
    out = [(o, {}) for o in look_alike]
    # DNS rebinding: the page's own name resolved to 127.0.0.1, so Host is the page's.
    out += [(f"http://evil.example:{port}", {"Host": f"evil.example:{port}"}),
            ("http://evil.example", {"Host": "evil.example"})]
    return out


def control_origins(port: int) -> list[tuple[str, str | None, dict]]:
    """(name, Origin, extra headers) the server must serve: its own page (by every name of
    loopback, https too: the scheme is not compared), a configured origin, a proxy's
    public name, and clients that send no Origin."""
    return [
        ("own page", f"http://127.0.0.1:{port}", {}),
        ("own page over https", f"https://127.0.0.1:{port}", {}),
        ("own page as localhost", f"http://localhost:{port}", {"Host": f"localhost:{port}"}),
        ("own page as [::1]", f"http://[::1]:{port}", {"Host": f"[::1]:{port}"}),
        ("serve.cors_origins", LISTED_ORIGIN, {}),
        ("behind a proxy", "https://chat.example", {"X-Forwarded-Host": "chat.example"}),
        ("behind two proxies", "https://chat.example", {"X-Forwarded-Host": "chat.example, inner.example"}),
        ("no Origin", None, {}),
    ]


def _routes(tag: str, chat: dict) -> list[tuple[str, str, bytes | None, dict]]:
    """Every route and method of the server, each with a body that would change
    something (named by ``tag``) if it were carried out."""
    j = lambda value: json.dumps(value).encode()  # noqa: E731
    return [
        ("GET", "/health", None, {}), ("GET", "/v1/health", None, {}), ("GET", "/v1/models", None, {}),
        ("GET", "/models", None, {}), ("GET", "/", None, {}), ("GET", "/ui/app.js", None, {}),
        ("GET", "/favicon.ico", None, {}),
        ("POST", "/v1/chat/completions", j(chat), {}), ("POST", "/chat/completions", j({**chat, "stream": True}), {}),
        ("GET", API, None, {}), ("POST", API, j({"id": tag}), {}), ("POST", API, b"", {}),
        ("GET", f"{API}/s1", None, {}), ("HEAD", f"{API}/s1", None, {}),
        ("GET", f"{API}/s1/messages", None, {}), ("HEAD", f"{API}/s1/messages", None, {}),
        ("POST", f"{API}/s1/messages", j(record(tag)), {}),
        ("GET", f"{API}/s1/messages/0", None, {}), ("PATCH", f"{API}/s1/messages/0", j(record(tag)), {}),
        ("DELETE", f"{API}/s1/messages/0", None, {}),
        ("POST", f"{API}/s1/replies", j({"content": tag, "save": True}), {}),
        ("GET", SETTINGS, None, {}), ("GET", SETTINGS + "/schema", None, {}),
        ("PATCH", SETTINGS, j({"chat.temperature": 1.5, "chat.system_prompt": tag}), {}),
        ("POST", "/boundctx/v1/count", j({"messages": chat["messages"]}), {}),
        ("POST", "/boundctx/v1/understand", j({"message": tag}), {}),
        ("POST", "/boundctx/v1/replies/reply-0123456789abcdef01234567/cancel", None, {}),
        ("OPTIONS", API, None, {"Access-Control-Request-Method": "POST",
                                "Access-Control-Request-Headers": "content-type"}),
        ("PUT", f"{API}/s1", j(record(tag)), {}), ("GET", "/v2/nothing", None, {}),
    ]


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(Path(folder).iterdir()) if p.is_file()}


def cross_origin(workdir: Path, *, rounds: int, foreign: int, seed: int, threads: int = 4) -> Tally:
    """Requests from other web pages, then the server's own page and other controls,
    ``rounds`` times against one server (``serve.cors_origins`` = :data:`LISTED_ORIGIN`).

    Each round sends ``foreign`` requests drawn from every route and method (with bodies
    that would create, append, edit, delete, reply, change settings), every content type
    a page can send without a preflight, and every origin of :func:`foreign_origins`,
    from ``threads`` clients at once. Each must be refused with 403 (``origin_not_allowed``,
    or ``host_not_allowed`` for a rebound name) without CORS headers, and the sessions
    folder (every file, byte for byte) and the settings must be as before.

    Then every route is asked once from each of :func:`control_origins`: none may be
    refused (403) or fail (5xx); a configured origin gets its CORS header; the appends
    acknowledged must be in the session at the end.
    """
    tally = Tally("requests from other web pages (cross-origin)")
    rng = random.Random(seed)
    started = time.monotonic()
    workdir = Path(workdir)
    with Server(workdir, {"serve.cors_origins": LISTED_ORIGIN}) as server:
        folder = server.folder
        seed_session(folder, "s1", [f"s1.{i}" for i in range(5)])
        chat = {"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": "Which step failed?"}]}
        with client(server) as http:
            settings_before = http.get(SETTINGS).json()
        ledger = Ledger(file_contents(folder / "s1.jsonl"))
        n = 0
        for r in range(rounds):
            # -- foreign requests, several clients at once; nothing may change
            before = _snapshot(folder)
            plan = []
            for _ in range(foreign):
                n += 1
                origin, extra = rng.choice(foreign_origins(server.port))
                method, path, body, headers = rng.choice(_routes(f"foreign-{n}", chat))
                ctype = rng.choice(CONTENT_TYPES) if body is not None else None
                plan.append((origin, {**headers, **extra}, method, path, body, ctype))
            work = collections.deque(plan)

            def send_foreign(tally: Tally) -> None:
                with client(server) as http:
                    while True:
                        try:
                            origin, extra, method, path, body, ctype = work.popleft()
                        except IndexError:
                            return
                        headers = {"Origin": origin, **extra}
                        if ctype is not None:
                            headers["Content-Type"] = ctype
                        try:
                            resp = http.request(method, path, content=body, headers=headers)
                        except httpx.TimeoutException:
                            tally.hangs += 1
                            tally.problem(f"{method} {path} from {origin!r} was not answered")
                            continue
                        tally.faults += 1
                        tally.note(f"foreign requests answered {resp.status_code}")
                        code = None
                        if method != "HEAD":
                            with contextlib.suppress(ValueError, KeyError, TypeError):
                                code = resp.json()["error"]["code"]
                        if resp.status_code != 403 or (method != "HEAD" and code not in (
                                "origin_not_allowed", "host_not_allowed")):
                            tally.wrong += 1
                            tally.problem(f"{method} {path} ({ctype}) from {origin!r} {extra or ''} was answered "
                                          f"{resp.status_code} {code}, not refused: {resp.text[:200]}")
                        elif "access-control-allow-origin" in resp.headers:
                            tally.wrong += 1
                            tally.problem(f"{method} {path} from {origin!r}: a refusal carries CORS headers")
                        else:
                            tally.note(f"refused: {code or 'HEAD'}")

            pool = Threads()
            for _ in range(threads):
                pool.start(send_foreign)
            pool.join(tally)
            after = _snapshot(folder)
            if after != before:
                changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
                tally.wrong += 1
                tally.problem(f"round {r}: foreign requests changed the sessions folder: {changed}")
            with client(server) as http:
                if http.get(SETTINGS).json() != settings_before:
                    tally.wrong += 1
                    tally.problem(f"round {r}: foreign requests changed the settings")
            # -- controls: each route from each of the server's own origins, one at a time
            seed_session(folder, "c", [f"c.{i}" for i in range(40)])
            with client(server) as http:
                for name, origin, extra in control_origins(server.port):
                    for method, path, body, headers in _routes("", chat):
                        n += 1
                        tag = f"ctl-{n}"
                        if path == API and method == "POST" and body:
                            body = json.dumps({"id": tag}).encode()
                        elif path.startswith(f"{API}/s1/messages") and body:
                            body = json.dumps(record(tag)).encode()
                            if method == "PATCH":
                                path = f"{API}/c/messages/0"  # edits go to a session of their own
                        elif path.endswith("/replies"):
                            body = json.dumps({"content": tag, "save": False}).encode()
                        elif path == SETTINGS and method == "PATCH":
                            body = json.dumps({"chat.temperature": 0.5}).encode()
                        elif method == "DELETE":
                            path = f"{API}/c/messages/0"
                        if method == "OPTIONS" and origin != LISTED_ORIGIN:
                            continue  # a preflight is answered only for a configured origin
                        h = {**headers, **extra}
                        if origin is not None:
                            h["Origin"] = origin
                        if body:
                            h["Content-Type"] = "application/json"
                        try:
                            resp = http.request(method, path, content=body, headers=h)
                        except httpx.TimeoutException:
                            tally.hangs += 1
                            tally.problem(f"control {method} {path} ({name}) was not answered")
                            continue
                        if method == "POST" and path == f"{API}/s1/messages":
                            ledger.append(tag, "acked" if resp.status_code == 201 else "refused")
                        _judge_control(tally, name, origin, method, path, resp)
                if http.patch(SETTINGS, json={"chat.temperature": None}).status_code != 200:
                    tally.problem("the settings could not be put back")
            ledger.judge(tally, file_contents(folder / "s1.jsonl"), f"round {r}")
        server.judge_end(tally)
    tally.seconds = time.monotonic() - started
    return tally


def _judge_control(tally: Tally, name: str, origin: str | None, method: str, path: str, resp) -> None:
    status = resp.status_code
    where = f"control {method} {path} ({name})"
    if status == 403:
        tally.wrong += 1
        tally.problem(f"{where} was refused: {resp.text[:300]}")
        return
    if status >= 500:
        tally.crashes += 1
        tally.problem(f"{where} failed: {status} {resp.text[:300]}")
        return
    if status < 400:
        tally.acknowledged += 1
        tally.note("control requests served")
    else:
        tally.note(f"control requests answered {status} (not a refusal by origin)")
    if origin == LISTED_ORIGIN and resp.headers.get("access-control-allow-origin") != LISTED_ORIGIN:
        tally.wrong += 1
        tally.problem(f"{where}: no CORS header for the configured origin")


# -- racers: processes of their own, read while the clients run ---------------------------------


def run_racers(tally: Tally, racers: list[Racer], handle: Callable[[Racer, str], None],
               until: Callable[[], bool]) -> None:
    """Start ``racers`` together ("go" once each said "ready"), hand each line they print
    to ``handle`` until ``until()`` is true, then close their input (they stop after the
    operation in hand) and read them to the end. A racer that hangs or exits with an
    error is counted."""
    try:
        for r in racers:
            r.expect("ready")
        for r in racers:
            r.send("go")
        while not until():
            open_ = [r for r in racers if not r.eof]
            for r in select.select(open_, [], [], 0.2)[0] if open_ else ():
                r._fill()
            for r in racers:
                for line in r.pending():
                    handle(r, line)
            if not open_:
                time.sleep(0.05)
        for r in racers:
            r.end_input()
        while any(not r.eof for r in racers):
            for r, line in pump(racers):
                handle(r, line)
        for r in racers:
            for line in r.pending():
                handle(r, line)
            rc = r.wait()
            if rc != 0:
                tally.crashes += 1
                tally.problem(f"{r.role} exited with {rc}{r.stderr_tail()}")
    except (ChildHung, ChildDied) as exc:
        tally.child_failed(exc)
    finally:
        for r in racers:
            r.close()


def ledger_racer_line(ledger: Ledger, tally: Tally, pending: dict, racer: Racer, line: str) -> None:
    """A rewriter's or appender's line: ``try OP``, then ``ack OP`` or ``no OP``, where OP
    is ``["edit", old, new]``, ``["delete", old, null]`` or ``["append", null, new]``."""
    word, _, body = line.partition(" ")
    if word == "done":
        tally.note(f"{racer.role}s refused (lock taken, or the message moved), then retried", int(body.split()[1]))
        return
    op, old, new = json.loads(body)
    if word == "try":
        pending[racer] = (op, old, new)
        return
    pending.pop(racer, None)
    outcome = "acked" if word == "ack" else "refused"
    if op == "append":
        ledger.append(new, outcome)
    else:
        ledger.change(old, new, outcome, f"another process's {op}")
    if outcome == "acked":
        tally.faults += 1
        tally.note(f"{op}s by other processes")
        if op == "append":
            tally.acknowledged += 1


# -- campaign 2: edits by cursor against rewriters --------------------------------------------


def _edit_client(tally: Tally, server: Server, sid: str, ledger: Ledger, seed: int, tag: str,
                 attempts: int) -> None:
    """Read a window, pick one of its messages, edit or delete it by index with the
    window's ``layout_version``; sometimes append. An accepted edit is read back at the
    version it answered with."""
    rng = random.Random(seed)
    count = None
    with client(server) as http:
        for k in range(attempts):
            if rng.random() < 0.2:
                content = f"{tag}.a{k}"
                outcome = _append(http, tally, sid, content)
                ledger.append(content, outcome)
            params: dict[str, Any] = {"message_limit": rng.randint(1, 40)}
            if count and rng.random() < 0.4:
                params["message_before"] = rng.randint(1, count)
            r = _request(http, tally, "GET", f"{API}/{sid}/messages", params=params)
            if r is None or r.status_code != 200:
                tally.note(f"window reads answered {r and r.status_code}")
                continue
            w = r.json()
            count = w["message_count"]
            entries = [(e["index"], content_of(e)) for e in w["messages"]]
            if not entries:
                continue
            index, old = rng.choice(entries)
            op = "delete" if rng.random() < 0.3 and count > 15 else "edit"
            new = f"{tag}.e{k}" if op == "edit" else None
            time.sleep(rng.uniform(0, 0.01))  # a user between reading and editing: others rewrite meanwhile
            url = f"{API}/{sid}/messages/{index}"
            query = {"layout_version": w["layout_version"]}
            r = (_request(http, tally, "PATCH", url, params=query, json=record(new)) if op == "edit"
                 else _request(http, tally, "DELETE", url, params=query))
            if r is None:
                ledger.change(old, new, "unsure", "")
                continue
            if r.status_code == 200:
                ledger.change(old, new, "acked", f"the client's {op} of message {index}")
                tally.acknowledged += 1
                tally.note(f"client {op}s accepted")
                if op == "edit":
                    _read_back(http, tally, sid, index, new, r.json()["layout_version"])
            elif r.status_code == 409 and _code(r) == "session_changed":
                # "Replaced while it was being opened; try again": said before the lock,
                # where nothing was written, and also (the ledger tells which) after.
                ledger.change(old, new, "unsure", "", f"409 {_code(r)}")
                tally.note(f"client {op}s answered: 409 session_changed")
            elif r.status_code in (404, 409):
                ledger.change(old, new, "refused", "")
                tally.note(f"client {op}s refused: {r.status_code} {_code(r)}")
            else:
                ledger.change(old, new, "refused", "")
                tally.wrong += 1
                tally.problem(f"{op} of message {index}: {r.status_code} {r.text[:300]}")


def _code(resp) -> str | None:
    try:
        return resp.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None


def _request(http: httpx.Client, tally: Tally, method: str, url: str, *, judged: bool = False, **kw):
    """The response, or None when none came in time (a hang, counted). A 5xx is a crash
    (the response is still returned), unless the caller judges it (``judged``: a reply
    that failed for a reason is a 500 in the API's shape)."""
    try:
        resp = http.request(method, url, **kw)
    except httpx.TimeoutException:
        tally.hangs += 1
        tally.problem(f"{method} {url} was not answered within {REQUEST_TIMEOUT:.0f} s")
        return None
    except httpx.TransportError as exc:  # the server closed the connection, or is gone
        tally.crashes += 1
        tally.problem(f"{method} {url}: no answer, {type(exc).__name__}: {exc}")
        return None
    if resp.status_code >= 500 and not judged:
        tally.crashes += 1
        tally.problem(f"{method} {url}: {resp.status_code} {resp.text[:300]}")
    return resp


def _append(http: httpx.Client, tally: Tally, sid: str, content: str) -> str:
    """POST one message; "acked" (201), "refused" (409: another writer, or the file
    changed under it; 404: the session is gone) or "unsure"."""
    r = _request(http, tally, "POST", f"{API}/{sid}/messages", json=record(content))
    if r is None:
        return "unsure"
    if r.status_code == 201:
        tally.acknowledged += 1
        tally.note("appends acknowledged")
        return "acked"
    tally.note(f"appends refused: {r.status_code} {_code(r)}")
    if r.status_code not in (404, 409):
        tally.wrong += r.status_code < 500
        tally.problem(f"an append was answered {r.status_code}: {r.text[:300]}")
    return "refused" if r.status_code < 500 else "unsure"


def _read_back(http: httpx.Client, tally: Tally, sid: str, index: int, new: str, version: str) -> None:
    """Message ``index`` at ``version`` (the one an edit answered with) is the edit, or the
    version is gone (409)."""
    r = _request(http, tally, "GET", f"{API}/{sid}/messages/{index}", params={"layout_version": version})
    if r is None:
        return
    if r.status_code == 200:
        tally.note("edits read back at their new version")
        if content_of(r.json()) != new:
            tally.wrong += 1
            tally.problem(f"message {index} at the edit's version is {content_of(r.json())!r}, not {new!r}")
    elif r.status_code == 409 and _code(r) == "stale_cursor":
        tally.note("edits rewritten again before they were read back")
    elif r.status_code == 409:  # a rewrite replaced the file as it was opened: asked to try again
        tally.note(f"edits read back answered 409 {_code(r)}")
    else:
        tally.wrong += 1
        tally.problem(f"reading back the edit of message {index}: {r.status_code} {r.text[:200]}")


def _judge_window(server: Server, tally: Tally, sid: str, final: list[str], where: str) -> None:
    """The server's window of the whole session shows exactly the file."""
    with client(server) as http:
        r = _request(http, tally, "GET", f"{API}/{sid}/messages", params={"message_limit": 1000})
    if r is None or r.status_code != 200:
        tally.wrong += 1
        tally.problem(f"{where}: the final window was answered {r and r.status_code}")
        return
    shown = [content_of(e) for e in r.json()["messages"]]
    if len(final) <= 1000 and shown != final:
        tally.wrong += 1
        tally.problem(f"{where}: the server's window ({len(shown)} messages) is not the file ({len(final)})")


def cursor_edits(workdir: Path, *, rounds: int, clients: int, attempts: int, rewriters: int = 2,
                 appenders: int = 1, seed: int) -> Tally:
    """``clients`` client threads each make ``attempts`` edits or deletes of one message by
    index, with the ``layout_version`` of the window they read just before (and some
    appends), while ``rewriters`` processes edit and delete messages of the same session
    with ``Transcript.edit/delete`` directly and ``appenders`` processes append.

    An accepted edit or delete must have changed exactly the message the client saw at
    that index in that version (every message's content is unique: :class:`Ledger`); an
    accepted edit reads back at the version it answered with; a refusal (409 stale cursor
    or lock taken, 404) changes nothing, and neither may a 409 ``session_changed`` (the
    file says whether it did); acknowledged appends are all there. Faults are the
    rewrites and appends of the other processes; acknowledged, the accepted edits and
    deletes and the acknowledged appends.
    """
    tally = Tally("edits by cursor against rewriters")
    rng = random.Random(seed)
    started = time.monotonic()
    with Server(Path(workdir)) as server:
        for r in range(rounds):
            sid = f"r{r}"
            path = seed_session(server.folder, sid, [f"{sid}.seed.{i}" for i in range(60)])
            ledger = Ledger(file_contents(path), answers_hold=True)
            racers = [Racer("rewriter", path, rng.randrange(2**32), f"{sid}.w{i}") for i in range(rewriters)]
            racers += [Racer("appender", path, rng.randrange(2**32), f"{sid}.p{i}") for i in range(appenders)]
            pool = Threads()
            pending: dict = {}

            def begin() -> None:
                for i in range(clients):
                    pool.start(_edit_client, server, sid, ledger, rng.randrange(2**32), f"{sid}.c{i}", attempts)

            begun = []

            def until() -> bool:
                if not begun:
                    begin()
                    begun.append(True)
                return not pool.alive()

            run_racers(tally, racers, lambda racer, line: ledger_racer_line(ledger, tally, pending, racer, line),
                       until)
            for op, old, new in pending.values():  # a racer that said "try" and never the outcome
                if op == "append":
                    ledger.append(new, "unsure")
                else:
                    ledger.change(old, new, "unsure", "")
            pool.join(tally)
            final = file_contents(path)
            ledger.judge(tally, final, f"round {r}")
            _judge_window(server, tally, sid, final, f"round {r}")
            tally.note("messages at the end of each round", len(final))
        server.judge_end(tally)
    tally.seconds = time.monotonic() - started
    return tally


# -- campaign 3: hostile connections ------------------------------------------------------

#: The bounds the hostile campaign's server runs with: small, so that the hostile
#: clients meet them all the time.
HOSTILE_SETTINGS = {"serve.max_head_bytes": 4096, "serve.head_timeout_seconds": 1.0, "serve.max_connections": 16}
#: How much longer than ``serve.head_timeout_seconds`` a connection without a complete
#: head may stay open before it counts as held (the server is loaded by the campaign).
HELD_SLACK = 15.0
#: The hostile kinds a campaign runs by default (see :func:`role_hostile`). Two more,
#: ``slow-body`` (a body trickled a byte at a time) and ``cut-body`` (a client gone in the
#: middle of its body), run on their own.
HOSTILE_KINDS = ("huge-head", "trickle", "idle", "half-open")


def _probe(tally: Tally, server: Server, ledger: Ledger, stop: threading.Event, what: str,
           latencies: list, timeout: float) -> None:
    """Ask the server until ``stop``: ``/health`` and ``/v1/models``, or appends to the
    session ``probe`` (and a window of it), each on a new connection. A request whose
    connection was closed before an answer is sent again (a connection without a request
    in progress may be closed to make room); one not answered within ``timeout``,
    retries included, is a hang."""
    n = 0
    with httpx.Client(base_url=server.url, timeout=timeout,
                      limits=httpx.Limits(max_keepalive_connections=0)) as http:
        while not stop.is_set():
            n += 1
            if what == "health":
                calls = [("GET", "/health", None, 200), ("GET", "/v1/models", None, 200)]
            else:
                content = f"probe.{n}"
                calls = [("POST", f"{API}/probe/messages", record(content), 201),
                         ("GET", f"{API}/probe/messages", None, 200)]
            for method, url, body, want in calls:
                began = time.monotonic()
                resp = None
                while time.monotonic() - began < timeout and not (resp is None and stop.is_set()):
                    try:
                        resp = http.request(method, url, json=body)
                        break
                    except httpx.TimeoutException:
                        break
                    except httpx.TransportError:
                        tally.note("probe requests sent again after their connection was closed unanswered")
                        time.sleep(0.01)
                took = time.monotonic() - began
                if resp is None:
                    if not stop.is_set():
                        tally.hangs += 1
                        tally.problem(f"the probe's {method} {url} was not answered in {took:.0f} s")
                    if body is not None:
                        ledger.append(content, "unsure")
                    break
                latencies.append(took)
                if resp.status_code != want:
                    tally.crashes += resp.status_code >= 500
                    tally.wrong += resp.status_code < 500
                    tally.problem(f"the probe's {method} {url} was answered {resp.status_code}: {resp.text[:200]}")
                tally.note(f"probe {method} {url.replace(API, '...')} answered")
                if body is not None:
                    ledger.append(content, "acked" if resp.status_code == want else "refused")
                    tally.acknowledged += resp.status_code == want


def hostile_connections(workdir: Path, *, seconds: float, seed: int, kinds: tuple[str, ...] = HOSTILE_KINDS,
                        settings: dict | None = None, probe_timeout: float = REQUEST_TIMEOUT) -> Tally:
    """For ``seconds``, one process per kind of :func:`role_hostile` attacks a server
    running with small bounds (:data:`HOSTILE_SETTINGS`): request heads far past
    ``serve.max_head_bytes`` sent in pieces (one header, many, a long request line, after
    a good request), heads trickled a byte at a time, bursts of idle sockets (half
    ``serve.max_connections``, or three times it), half-closed and reset connections; on
    their own, bodies trickled a byte at a time and clients gone mid-body.

    Meanwhile a probe asks ``/health`` and ``/v1/models`` and appends to a session, each on
    a new connection. Hangs: probe requests unanswered within ``probe_timeout``;
    crashes: the server died or logged a traceback; lost: probe appends acknowledged and
    not in the session; wrong: a head past the cap answered as a request, a connection
    without a complete head held past the head timeout (plus :data:`HELD_SLACK`), a good
    request on a half-closed connection not answered.
    """
    tally = Tally("hostile heads and idle connections")
    rng = random.Random(seed)
    started = time.monotonic()
    limits = {**HOSTILE_SETTINGS, **(settings or {})}
    with Server(Path(workdir), limits) as server:
        seed_session(server.folder, "probe", [])
        ledger = Ledger([])
        stop = threading.Event()
        latencies: list[float] = []
        racers = [Racer("hostile", server.port, kind, seconds, rng.randrange(2**32), limits["serve.max_head_bytes"],
                        limits["serve.max_connections"]) for kind in kinds]
        pool = Threads()
        results = []

        def handle(racer: Racer, line: str) -> None:
            if line.startswith("result "):
                results.append(json.loads(line[7:]))
            elif line == "attacking" and not pool.threads:
                for what in ("health", "append"):
                    pool.start(_probe, server, ledger, stop, what, latencies, probe_timeout)

        run_racers(tally, racers, handle, lambda: len(results) == len(racers) or not server.alive())
        stop.set()
        pool.join(tally)
        for res in results:
            kind = res["kind"]
            tally.faults += res["attacks"]
            tally.note(f"{kind} connections", res["attacks"])
            for outcome, n in sorted(res["outcomes"].items()):
                tally.note(f"{kind}: {outcome}", n)
            if res.get("held_max") is not None:
                tally.notes[f"{kind}: longest a connection stayed open (s)"] = round(res["held_max"], 2)
            for v in res["violations"]:
                tally.wrong += 1
                tally.problem(f"{kind}: {v}")
            for e in res["errors"]:
                tally.crashes += 1
                tally.problem(f"the {kind} client failed: {e}")
        if latencies:
            latencies.sort()
            tally.notes["probe latency median (ms)"] = round(latencies[len(latencies) // 2] * 1000, 1)
            tally.notes["probe latency max (ms)"] = round(latencies[-1] * 1000, 1)
        ledger.judge(tally, file_contents(server.folder / "probe.jsonl"), "probe")
        server.judge_end(tally)
    tally.seconds = time.monotonic() - started
    return tally


# -- campaign 4: settings at their extremes -------------------------------------------------

#: A system prompt at the far end of "any string": long, with every kind of character a
#: prompt can carry (quotes, escapes, controls, surrogates' neighbours, right-to-left).
LONG_TEXT = ("Answer \"exactly\"\\ \n\t\u0000\u001f\u2028\u2029\u202e \ud7ff\ue000\U0001f600 " * 2000)[:100_000]


def _ends(item: dict) -> tuple[list, list]:
    """(values at the ends of what ``item`` of GET /settings accepts, values just past
    them or of another type); each value is sent as JSON, a str value starting with
    ``RAW:`` as the JSON text after it (numbers JSON has but Python's json cannot write)."""
    kind = item["type"]
    if "choices" in item:
        return list(item["choices"]), ["not-one-of-them", str(item["choices"][0]).upper() + "!", 1, True, ["x"]]
    if kind == "bool":
        return [True, False], [0, 1, "true", "yes", {}]
    if kind == "str":
        return ["", LONG_TEXT], [5, True, ["x"], {"a": "b"}]
    low, high = item.get("minimum"), item.get("maximum")
    if kind == "int":
        ends = [low + 1 if item.get("exclusive_minimum") else low, high]
        past = [low if item.get("exclusive_minimum") else low - 1, 1.5, "5", True, "RAW:1e999", None]
        past[-1] = high + 1 if high is not None else 2**64
        return [int(v) for v in ends if v is not None], past
    lowest = math.nextafter(low, math.inf) if item.get("exclusive_minimum") else float(low)
    highest = float(high) if high is not None else sys.float_info.max
    past = [low if item.get("exclusive_minimum") else math.nextafter(low, -math.inf), "0.5", True, "RAW:1e999",
            "RAW:-1e999"]
    if high is not None:
        past.append(math.nextafter(high, math.inf))
    return [lowest, highest], past


def _patch(http: httpx.Client, tally: Tally, changes: dict):
    """PATCH the settings; a ``RAW:`` value goes as raw JSON text."""
    parts = [f"{json.dumps(k)}: {v[4:] if isinstance(v, str) and v.startswith('RAW:') else json.dumps(v)}"
             for k, v in changes.items()]
    return _request(http, tally, "PATCH", SETTINGS, content=("{" + ", ".join(parts) + "}").encode(),
                    headers={"Content-Type": "application/json"})


def _partners(name: str, value, current: dict) -> dict:
    """``{name: value}`` with the other key of each relation it takes part in moved as far
    as ``value`` needs (``config.RELATIONS``)."""
    from boundctx import config

    over = {name: value}
    for key, other, most, least, _ in config.RELATIONS:
        if name == key and value > most(current[other]):
            over[other] = least(value)
        elif name == other and current[key] > most(value):
            over[key] = most(value)
    return over


def _sse_events(resp) -> list[tuple[str | None, str]]:
    """(event name, data) of each server-sent event of a response read whole."""
    out, name = [], None
    for line in resp.text.splitlines():
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            out.append((name, line[6:]))
            name = None
    return out


def _judge_reply(tally: Tally, where: str, resp, *, stream: bool) -> str:
    """How a chat completion ended: "reply", a clean failure (its code), or a crash
    (an internal error, a 5xx that is no failed reply, a stream that did not end)."""
    if resp is None:
        return "unanswered"
    body = resp.text
    if not stream or resp.status_code != 200:
        code = _code(resp)
        if resp.status_code == 200:
            return "reply"
        if code == "internal_error" or code is None:
            tally.crashes += 1
            tally.problem(f"{where}: {resp.status_code} {body[:300]}")
            return "crash"
        return f"{resp.status_code} {code}"
    events = _sse_events(resp)
    errors = [json.loads(d)["error"] for _, d in events if d.startswith('{"error"')]
    if not events or events[-1][1] != "[DONE]":
        tally.crashes += 1
        tally.problem(f"{where}: the stream did not end with [DONE]: {body[-300:]}")
        return "crash"
    if errors:
        if errors[0].get("code") == "internal_error":
            tally.crashes += 1
            tally.problem(f"{where}: the stream failed: {errors[0]}")
            return "crash"
        return f"failed in the stream: {errors[0].get('code')}"
    return "reply"


def _session_reply(http: httpx.Client, tally: Tally, ledger: Ledger, where: str, question: str, save: bool) -> str:
    resp = _request(http, tally, "POST", f"{API}/log/replies", judged=True,
                    json={"content": question, "history": 50, "save": save})
    if resp is None:
        ledger.append(question, "unsure")
        return "unanswered"
    if resp.status_code != 200:
        ledger.append(question, "refused")
        return _judge_reply(tally, where, resp, stream=False)
    events = _sse_events(resp)
    last = (events[-1][0], json.loads(events[-1][1])) if events else (None, {})
    if last[0] == "done":
        saved = bool(last[1].get("saved"))
        ledger.append(question, "acked" if saved else "refused")
        tally.acknowledged += saved
        return "reply, saved" if saved else "reply, not saved"
    ledger.append(question, "refused")
    if last[0] == "failed" and last[1].get("kind") != "internal_error":
        return f"failed: {last[1].get('kind')}"
    tally.crashes += 1
    tally.problem(f"{where}: the session reply ended with {last}: {resp.text[-300:]}")
    return "crash"


def _understand(http: httpx.Client, tally: Tally, where: str) -> str:
    import msgspec

    from tests._support.booking import CATALOG, MESSAGE, RECORDS

    resp = _request(http, tally, "POST", "/boundctx/v1/understand", judged=True,
                    json={"message": MESSAGE, "catalog": CATALOG, "records": msgspec.to_builtins(RECORDS)})
    if resp is None:
        return "unanswered"
    if resp.status_code == 200:
        return f"plan {resp.json().get('status')}"
    return _judge_reply(tally, where, resp, stream=False)


def settings_extremes(workdir: Path, *, rounds: int, seed: int, combinations: int = 8) -> Tally:
    """Every setting GET /boundctx/v1/settings says is writable, PATCHed to each end of
    what it accepts (its schema's minimum and maximum, both booleans, every choice, an
    empty and a 100,000-character string) and to values just past each end or of another
    type (1e999 too), ``rounds`` times in a shuffled order; each round then also sets
    ``combinations`` random groups of two to six settings at their ends at once.

    A value at an end must be accepted, with the other key of a relation moved as far as
    it needs (``config.RELATIONS``: alone, such a value is refused with 400, which is
    right; a group whose ends cannot go together is refused so too); a value past an end
    must be refused with 400. At each accepted end: a chat completion (streamed or not) of
    a tool result far larger than the window, a session reply (saved, or not) on a
    session holding such a log, a window of that session, and an understanding turn.
    Crashes: an internal error, a stream that does not end, a dead server; a reply that
    fails for a reason (a context overflow, a source over its limit, a worker timing out
    at once) is a clean ending, counted by kind. A saved exchange must be in the session
    (lost otherwise). The settings are put back after each, and must read as they started.
    """
    tally = Tally("settings at their extremes")
    rng = random.Random(seed)
    started = time.monotonic()
    with Server(Path(workdir)) as server, client(server) as http:
        items = http.get(SETTINGS).json()["data"]
        start = {i["name"]: i["value"] for i in items}
        writable = [i for i in items if i["writable"]]
        tally.notes["writable settings"] = len(writable)
        serial = iter(range(10**9))
        for _ in range(rounds):
            order = list(writable)
            rng.shuffle(order)
            for item in order:
                name = item["name"]
                ends, past = _ends(item)
                for value in past:
                    tally.faults += 1
                    resp = _patch(http, tally, {name: value})
                    if resp is None:
                        continue
                    if resp.status_code == 200:
                        tally.wrong += 1
                        tally.problem(f"{name} = {str(value)[:60]} was accepted, though past what it takes")
                        _patch(http, tally, {name: None})
                    elif resp.status_code != 400 or (resp.json()["error"].get("param") != name
                                                     and _code(resp) != "invalid_json"):
                        tally.wrong += 1
                        tally.problem(f"{name} = {str(value)[:60]}: {resp.status_code} {resp.text[:200]}")
                    else:
                        tally.note("values past an end refused")
                for value in ends:
                    tally.faults += 1
                    _at_ends(http, tally, server, {name: value}, start, rng, next(serial))
                if not server.alive():
                    break
            for _ in range(combinations):
                group = rng.sample(writable, rng.randint(2, min(6, len(writable))))
                tally.faults += 1
                _at_ends(http, tally, server, {i["name"]: rng.choice(_ends(i)[0]) for i in group}, start, rng,
                         next(serial), group=True)
            if not server.alive():
                break
        now = {i["name"]: i["value"] for i in http.get(SETTINGS).json()["data"]}
        if now != start:
            tally.wrong += 1
            tally.problem(f"the settings did not read as they started: "
                          f"{sorted(k for k in now if now[k] != start[k])}")
        server.judge_end(tally)
    tally.seconds = time.monotonic() - started
    return tally


def _at_ends(http: httpx.Client, tally: Tally, server: Server, values: dict, start: dict, rng: random.Random,
             n: int, *, group: bool = False) -> None:
    """PATCH ``values`` (moving the partners of a relation if refused for one), run the
    replies at them, put the settings back."""
    from tests._support.scripted import LOG, WITH_LOG

    shown = ", ".join(f"{k} = {v!r}"[:60] for k, v in values.items())
    over = dict(values)
    resp = _patch(http, tally, over)
    if resp is not None and resp.status_code == 400 and "does not go with" in resp.text:
        for name, value in values.items():
            over.update(_partners(name, value, {**start, **over}))
        if over == values:
            tally.note("groups of ends that cannot go together, refused")
            return
        tally.note("ends refused for a relation, then taken with the other key moved")
        resp = _patch(http, tally, over)
    if resp is None:
        return
    if resp.status_code != 200:
        if group and "does not go with" in resp.text:
            tally.note("groups of ends that cannot go together, refused")
            return
        tally.wrong += 1
        tally.problem(f"{shown} (as {over}) was refused: {resp.text[:300]}")
        return
    tally.note("groups of ends taken" if group else "ends taken")
    seed_session(server.folder, "log", ["Here is the build log:\n" + LOG, "Noted."])
    ledger = Ledger(file_contents(server.folder / "log.jsonl"))
    stream = rng.random() < 0.5
    chat = {"model": MODEL, "max_tokens": 64, "messages": WITH_LOG, "stream": stream}
    outcome = _judge_reply(tally, f"{shown}: chat completion",
                           _request(http, tally, "POST", "/v1/chat/completions", judged=True, json=chat), stream=stream)
    tally.note(f"chat completions: {outcome}")
    question = f"q{n}: which step failed?"
    outcome = _session_reply(http, tally, ledger, f"{shown}: session reply", question, save=rng.random() < 0.5)
    tally.note(f"session replies: {outcome}")
    final = file_contents(server.folder / "log.jsonl")
    ledger.judge(tally, [c for c in final if c.startswith("q") or c in ledger.initial], f"{shown}: the session")
    w = _request(http, tally, "GET", f"{API}/log/messages")
    most = min({**start, **over}["transcript.window_messages"], 1000)
    if w is None or w.status_code != 200 or len(w.json()["messages"]) > most:
        tally.wrong += 1
        tally.problem(f"{shown}: the session's window: {w and w.status_code} {w and w.text[:200]}")
    tally.note(f"understanding turns: {_understand(http, tally, shown + ': understanding')}")
    tally.acknowledged += 1  # the values were taken and every request at them ended
    reset = _patch(http, tally, dict.fromkeys(over))
    if reset is None or reset.status_code != 200:
        tally.problem(f"{shown}: the settings could not be put back")


# -- campaign 5: the session's name swapped under the requests -------------------------------

#: What the swapper puts at a session's name (:func:`role_swapper`).
SWAPS = ("symlink to a file outside", "symlink to a FIFO outside", "symlink to a folder outside",
         "symlink to /dev/null", "dangling symlink", "FIFO", "folder", "nothing")


def _outside(folder: Path) -> dict[str, Any]:
    """What lies in the folder outside the sessions folder: names, kinds, bytes."""
    out = {}
    for p in sorted(Path(folder).iterdir()):
        st = p.lstat()
        out[p.name] = (stat.S_IFMT(st.st_mode), p.read_bytes() if stat.S_ISREG(st.st_mode) else
                       sorted(os.listdir(p)) if stat.S_ISDIR(st.st_mode) else None)
    return out


def _race_client(tally: Tally, server: Server, sid: str, ledger: Ledger, seed: int, tag: str,
                 stop: threading.Event, created: list) -> None:
    """Until ``stop``: append, read (window, metadata, one message), edit and delete by
    cursor, list, create sessions. Any 5xx is wrong."""
    rng = random.Random(seed)
    ops = ["append"] * 4 + ["window"] * 2 + ["edit"] * 2 + ["delete", "get", "message", "list", "create"]
    k = 0
    with client(server) as http:
        def call(method: str, url: str, allowed: tuple, **kw):
            resp = _request(http, tally, method, url, judged=True, **kw)
            if resp is not None:
                tally.note(f"{method} answered {resp.status_code} {_code(resp) or ''}".rstrip())
                if resp.status_code not in allowed:
                    tally.wrong += 1
                    tally.problem(f"{method} {url}: {resp.status_code} {resp.text[:300]}")
            return resp

        while not stop.is_set():
            k += 1
            op = rng.choice(ops)
            base = f"{API}/{sid}"
            if op == "append":
                content = f"{tag}.{k}"
                resp = call("POST", base + "/messages", (201, 404, 409), json=record(content))
                outcome = ("unsure" if resp is None or resp.status_code >= 500 else
                           "acked" if resp.status_code == 201 else "refused")
                if outcome == "refused" and "went to the replaced file" in resp.text:
                    # Written, then the name was found swapped: the record is in the file
                    # that was at the name, which the swapper may well put back.
                    outcome = "unsure"
                ledger.append(content, outcome, resp and f"{resp.status_code} {_code(resp)}")
                tally.acknowledged += outcome == "acked"
            elif op in ("window", "edit", "delete"):
                resp = call("GET", base + "/messages", (200, 404, 409), params={"message_limit": rng.randint(1, 30)})
                if op == "window" or resp is None or resp.status_code != 200 or not resp.json()["messages"]:
                    continue
                w = resp.json()
                entry = rng.choice(w["messages"])
                old, index = content_of(entry), entry["index"]
                new = f"{tag}.e{k}" if op == "edit" else None
                url, query = f"{base}/messages/{index}", {"layout_version": w["layout_version"]}
                resp = (call("PATCH", url, (200, 404, 409), params=query, json=record(new)) if op == "edit"
                        else call("DELETE", url, (200, 404, 409), params=query))
                # A rewrite refused after its rename (the name swapped again before the
                # file was reopened) has happened: 404 and 409 are not known to be refusals.
                outcome = ("acked" if resp is not None and resp.status_code == 200 else
                           "refused" if resp is not None and resp.status_code == 409
                           and _code(resp) == "stale_cursor" else "unsure")
                ledger.change(old, new, outcome, f"the client's {op} of message {index}",
                              resp and f"{resp.status_code} {_code(resp)}")
                tally.acknowledged += outcome == "acked"
            elif op == "get":
                call("GET", base, (200, 404, 409))
            elif op == "message":
                call("GET", f"{base}/messages/{rng.randint(0, 20)}", (200, 404, 409))
            elif op == "list":
                call("GET", API, (200,))
            else:
                new_id = f"{tag}-s{k}".replace(".", "_")
                resp = call("POST", API, (201,), json={"id": new_id})
                if resp is not None and resp.status_code == 201:
                    created.append(new_id)


def path_races(workdir: Path, *, rounds: int, seconds: float, clients: int, seed: int) -> Tally:
    """``rounds`` times for ``seconds``: a swapper process (:func:`role_swapper`) puts at a
    session's name, again and again, a symlink out of the sessions folder (to a file, a
    FIFO, a folder, /dev/null, nowhere), a FIFO, a folder or nothing, and puts the
    session's file back, while ``clients`` client threads append, read (window, metadata,
    one message), edit and delete by cursor, list and create sessions.

    Wrong: any byte written or file created outside the sessions folder (the folder of
    targets byte for byte, the server's layout cache empty), anything created inside the
    folder put at the name, a 5xx, a message changed that no acknowledged request
    changed. Lost: acknowledged appends missing from the session's file. Hangs: requests
    unanswered (a FIFO opened and read would block). Faults: the swaps.
    """
    tally = Tally("the session's name swapped under the requests (path races)")
    rng = random.Random(seed)
    started = time.monotonic()
    workdir = Path(os.path.realpath(workdir))
    outside = workdir / "outside"
    outside.mkdir(parents=True, exist_ok=True)
    seed_session(outside, "victim", [f"victim.{i}" for i in range(3)])
    os.mkfifo(outside / "fifo")
    (outside / "folder").mkdir()
    before = _outside(outside)
    with Server(workdir) as server:
        for r in range(rounds):
            sid = f"p{r}"
            path = seed_session(server.folder, sid, [f"{sid}.seed.{i}" for i in range(20)])
            ledger = Ledger(file_contents(path))
            created: list[str] = []
            stop = threading.Event()
            pool = Threads()
            counts: dict = {}
            swapper = Racer("swapper", path, outside, seconds, rng.randrange(2**32))

            def handle(racer: Racer, line: str) -> None:
                word, _, body = line.partition(" ")
                if word == "swapped":
                    counts.update(json.loads(body))
                elif word == "wrong":
                    tally.wrong += 1
                    tally.problem(f"round {r}: {body}")

            def until() -> bool:
                if not pool.threads:
                    for i in range(clients):
                        pool.start(_race_client, server, sid, ledger, rng.randrange(2**32), f"{sid}.c{i}", stop,
                                   created)
                return bool(counts) or swapper.eof

            run_racers(tally, [swapper], handle, until)
            stop.set()
            pool.join(tally)
            for kind, n in counts.items():
                tally.faults += n if kind in SWAPS else 0  # the others say what a rewrite met
                tally.note(f"swaps: {kind}", n)
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode):
                tally.problem(f"round {r}: the swapper left no file at the session's name")
                continue
            ledger.judge(tally, file_contents(path), f"round {r}")
            for new_id in created:
                p = server.folder / f"{new_id}.jsonl"
                if not (p.is_file() and not p.is_symlink()):
                    tally.wrong += 1
                    tally.problem(f"round {r}: the created session {new_id} is not a file in the folder")
            tally.note("messages at the end of each round", len(file_contents(path)))
        after = _outside(outside)
        if after != before:
            changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
            tally.wrong += 1
            tally.problem(f"something outside the sessions folder changed: {changed}")
        strays = sorted(p.name for p in workdir.iterdir())
        if strays != sorted(["outside", "sessions", "server-cache", "server.log"]):
            tally.wrong += 1
            tally.problem(f"files beside the sessions folder: {strays}")
        server.judge_end(tally)
    tally.seconds = time.monotonic() - started
    return tally


# ======================================================================================
# Child roles: each prints "ready", then protocol lines on stdout.
# ======================================================================================


def say(text: str) -> None:
    os.write(1, (text + "\n").encode())


def _stopped() -> bool:
    """Whether the parent closed our stdin (the signal to stop)."""
    return bool(select.select([0], [], [], 0)[0])


def role_serve(folder: str, port: str, overrides: str) -> None:
    """The server under test: ``create_app`` on the scripted model, ``run_server``."""
    from boundctx import config
    from boundctx.providers import ScriptedProvider
    from boundctx.serve import create_app
    from boundctx.serve.connections import run_server

    from tests._support.scripted import answer

    settings = config.load(path=os.devnull, env={}, overrides={**BASE_SETTINGS, **json.loads(overrides)})
    app = create_app(ScriptedProvider(answer), settings=settings, model_id=MODEL, host="127.0.0.1",
                     sessions_dir=folder)

    def tell(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    try:
        started = run_server(app, "127.0.0.1", int(port), settings=settings, say=tell)
    except OSError as exc:  # the port was taken between choosing it and binding it
        tell(f"cannot listen: {exc}")
        started = False
    sys.exit(0 if started else 3)


def _content(rec) -> str | None:
    msg = rec.get("message") if isinstance(rec, dict) else None
    return msg.get("content") if isinstance(msg, dict) else None


def _open_retrying(path: str):
    """``Transcript.open``, again while a rewrite elsewhere replaces the file under the
    open (TranscriptChanged: "open it again")."""
    from boundctx import Transcript
    from boundctx.errors import TranscriptChanged

    for _ in range(100):
        try:
            return Transcript.open(path)
        except TranscriptChanged:
            time.sleep(0.001)
    return Transcript.open(path)


def role_rewriter(path: str, seed: str, tag: str) -> None:
    """Until stdin closes: read a window, pick a message, edit it (into ``TAG.N``, N
    counting attempts) or delete it with ``Transcript.edit/delete``, checking under the
    lock that the index still holds the message seen (else refused, and tried again
    after a pause)."""
    from boundctx.errors import TranscriptChanged, TranscriptLocked

    rng = random.Random(int(seed))
    say("ready")
    sys.stdin.readline()
    n = done = refused = 0
    while not _stopped():
        n += 1
        with _open_retrying(path) as t:
            entries = [(e.index, _content(e.record)) for e in t.window(message_limit=rng.randint(5, 60)).messages]
            if not entries:
                time.sleep(0.01)
                continue
            index, old = rng.choice(entries)
            op = "delete" if rng.random() < 0.35 and t.message_count > 15 else "edit"
            new = f"{tag}.{n}" if op == "edit" else None

            def check(history, index=index, old=old) -> None:
                if index >= history.message_count or _content(history.message(index)) != old:
                    raise TranscriptChanged("the message moved")

            say("try " + json.dumps([op, old, new]))
            try:
                if op == "edit":
                    t.edit(index, record(new), check=check)
                else:
                    t.delete(index, check=check)
            except (TranscriptChanged, TranscriptLocked):
                say("no " + json.dumps([op, old, new]))
                refused += 1
            else:
                say("ack " + json.dumps([op, old, new]))
                done += 1
        time.sleep(rng.uniform(0.02, 0.12))  # think time, as a user between edits
    say(f"done {done} {refused}")


def role_appender(path: str, seed: str, tag: str) -> None:
    """Until stdin closes: open, append ``TAG.N`` (waiting up to 1 s for the lock), close."""
    from boundctx.errors import TranscriptLocked

    rng = random.Random(int(seed))
    say("ready")
    sys.stdin.readline()
    n = refused = 0
    while not _stopped():
        content = f"{tag}.{n}"
        say("try " + json.dumps(["append", None, content]))
        with _open_retrying(path) as t:
            try:
                t.append(record(content), lock_wait=1.0)
            except TranscriptLocked:
                say("no " + json.dumps(["append", None, content]))
                refused += 1
            else:
                say("ack " + json.dumps(["append", None, content]))
        n += 1
        time.sleep(rng.uniform(0.01, 0.05))
    say(f"done {n} {refused}")


# -- hostile clients ------------------------------------------------------------------------


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def _status_lines(data: bytes) -> list[str]:
    """The status lines of the responses in ``data``."""
    return [line.decode("latin-1") for line in data.split(b"\r\n") if line.startswith(b"HTTP/1.1 ")]


def _read_until_closed(sock: socket.socket, timeout: float) -> tuple[bytes, bool]:
    """What the server sends until it closes (True) or ``timeout`` passes (False)."""
    data = b""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return data, False
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            return data, False
        except (ConnectionResetError, BrokenPipeError):
            return data, True
        if not chunk:
            return data, True
        data += chunk


class _Hostile:
    """One hostile client process: attacks of one kind from a few threads."""

    def __init__(self, port: int, seconds: float, seed: int, cap: int, max_connections: int) -> None:
        self.port, self.cap, self.max_connections = port, cap, max_connections
        self.end = time.monotonic() + seconds
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.attacks = 0
        self.outcomes: collections.Counter = collections.Counter()
        self.violations: list[str] = []
        self.errors: list[str] = []
        self.held_max: float | None = None

    def count(self, outcome: str) -> None:
        with self.lock:
            self.attacks += 1
            self.outcomes[outcome] += 1

    def violation(self, text: str) -> None:
        with self.lock:
            if len(self.violations) < 20:
                self.violations.append(text)

    def held(self, seconds: float) -> None:
        with self.lock:
            self.held_max = max(self.held_max or 0.0, seconds)

    def running(self) -> bool:
        return time.monotonic() < self.end

    # -- the kinds

    def huge_head(self, rng: random.Random) -> None:
        """A head far past the cap, in pieces, looking for an answer between them."""
        shape = rng.choice(["one header", "many headers", "long request line", "after a good request"])
        total = rng.randint(2 * self.cap, 4 << 20)
        host = f"Host: 127.0.0.1:{self.port}\r\n".encode()
        if shape == "long request line":
            start, unit = b"GET /health?", b"a"
        elif shape == "many headers":
            start, unit = b"GET /health HTTP/1.1\r\n" + host, b"X-A: b\r\n"
        elif shape == "one header":
            start, unit = b"POST /v1/chat/completions HTTP/1.1\r\n" + host + b"X-Filler: ", b"f"
        else:
            start = b"GET /health HTTP/1.1\r\n" + host + b"\r\nGET /health HTTP/1.1\r\n" + host + b"X-Filler: "
            unit = b"f"
        sent, answer, closed = 0, b"", False
        with _connect(self.port) as s:
            s.sendall(start)
            s.settimeout(0.01)
            try:
                while sent < total:
                    try:
                        chunk = s.recv(65536)
                    except TimeoutError:
                        piece = unit * max(1, rng.randint(1 << 10, 64 << 10) // len(unit))
                        try:
                            sent += s.send(piece)
                        except TimeoutError:
                            pass
                        continue
                    answer += chunk
                    closed = not chunk
                    break
                more, closed_after = _read_until_closed(s, 30.0) if not closed else (b"", True)
                answer += more
                closed = closed_after
            except (ConnectionResetError, BrokenPipeError):
                closed = True
        statuses = _status_lines(answer)
        want = (["HTTP/1.1 200 OK"] if shape == "after a good request" else []) + [
            "HTTP/1.1 431 Request Header Fields Too Large"]
        if statuses and statuses != want and statuses != want[:1]:
            self.violation(f"a head of {sent + len(start)} bytes ({shape}) was answered {statuses}")
        if not closed:
            self.violation(f"a head past the cap ({shape}) was neither answered nor closed in 30 s")
        self.count(f"{shape}: {', '.join(st[9:12] for st in statuses) or 'closed or reset before an answer'}")

    def trickle(self, rng: random.Random) -> None:
        """A head a byte at a time, slower than the head timeout allows."""
        self._trickled(rng, f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nX-Slow: ".encode(), b"x",
                       (0.2, 0.6), "a trickled head", lambda statuses: "408" if statuses else "closed before an answer")

    def _trickled(self, rng: random.Random, opening: bytes, piece: bytes, gaps: tuple[float, float], what: str,
                  counted) -> None:
        """Send ``opening``, then ``piece`` every so often (``gaps`` seconds) until the
        server closes: it must close within 60 s, with a 408 or with nothing said."""
        opened = time.monotonic()
        answer, closed = b"", False
        with _connect(self.port) as s:
            s.sendall(opening)
            while not closed and time.monotonic() - opened < 60:
                more, closed = _read_until_closed(s, rng.uniform(*gaps))
                answer += more
                if not closed:
                    try:
                        s.sendall(piece)
                    except (ConnectionResetError, BrokenPipeError):
                        closed = True
        took = time.monotonic() - opened
        self.held(took)
        statuses = _status_lines(answer)
        if not closed:
            self.violation(f"{what} was kept open {took:.0f} s")
        elif statuses not in ([], ["HTTP/1.1 408 Request Timeout"]):
            self.violation(f"{what} was answered {statuses}")
        self.count(counted(statuses))

    def idle(self, rng: random.Random) -> None:
        """Bursts of 1-3 s of sockets that never send a byte, half ``max_connections`` or
        three times it, each closed one opened again; between bursts, as long a pause
        (so that the other kinds meet the head timeout too, not only eviction)."""
        socks: dict[socket.socket, float] = {}
        try:
            while self.running():
                burst_end = time.monotonic() + rng.uniform(1, 3)
                size = rng.choice([max(1, self.max_connections // 2), 3 * self.max_connections])
                self._idle_burst(socks, size, burst_end)
                for s in socks:
                    s.close()
                    self.count("open at the end of its burst")
                socks.clear()
                time.sleep(min(rng.uniform(1, 3), max(0.0, self.end - time.monotonic())))
        finally:
            for s in socks:
                s.close()

    def _idle_burst(self, socks: dict, size: int, burst_end: float) -> None:
        while self.running() and time.monotonic() < burst_end:
            while len(socks) < size:
                socks[_connect(self.port)] = time.monotonic()
            for s in select.select(list(socks), [], [], 0.1)[0]:
                try:
                    data = s.recv(1)
                except (ConnectionResetError, TimeoutError):
                    data = b""
                self.held(time.monotonic() - socks[s])
                self.count("closed by the server" if not data else "answered with nothing asked")
                del socks[s]
                s.close()
            now = time.monotonic()
            for s, opened in socks.items():
                if now - opened > HOSTILE_SETTINGS["serve.head_timeout_seconds"] + HELD_SLACK:
                    self.violation(f"an idle connection was kept open {now - opened:.0f} s")
                    self.held(now - opened)
                    socks[s] = now  # said once per period
            time.sleep(0.1)  # reopened in bursts, not in a tight loop

    def half_open(self, rng: random.Random) -> None:
        """Half-closed after part of a head or a whole request; reset mid-head or at once."""
        shape = rng.choice(["part of a head, then no more to send", "a whole request, then no more to send",
                            "part of a head, then reset", "reset at once"])
        head = f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n".encode()
        opened = time.monotonic()
        with _connect(self.port) as s:
            if shape.startswith("reset"):
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                self.count(shape)
                return
            if shape.endswith("reset"):
                s.sendall(head[: rng.randint(1, len(head))])
                time.sleep(rng.uniform(0, 0.2))
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                self.count(shape)
                return
            whole = shape.startswith("a whole")
            s.sendall(head + b"\r\n" if whole else head[: rng.randint(1, len(head))])
            s.shutdown(socket.SHUT_WR)
            answer, closed = _read_until_closed(s, HOSTILE_SETTINGS["serve.head_timeout_seconds"] + HELD_SLACK)
        statuses = _status_lines(answer)
        if not closed:
            self.violation(f"{shape}: the connection was kept open {time.monotonic() - opened:.0f} s")
        if whole and statuses != ["HTTP/1.1 200 OK"]:
            self.violation(f"{shape}: answered {statuses}, not 200")
        self.count(f"{shape}: {statuses[0] if statuses else 'closed'}")

    def slow_body(self, rng: random.Random) -> None:
        """A whole head, then a body that comes a byte now and then: far slower than the
        server takes (it must answer 408 once the head timeout and the pace allow)."""
        self._trickled(rng, f"POST /boundctx/v1/count HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
                       "Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{\"messages\"".encode(),
                       b" ", (0.3, 1.0), "a body trickled a byte at a time",
                       lambda statuses: ", ".join(st[9:12] for st in statuses) or "closed before an answer")

    def cut_body(self, rng: random.Random) -> None:
        """A whole head, part of the body, then gone."""
        with _connect(self.port) as s:
            s.sendall(f"POST /boundctx/v1/count HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
                      "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"messages\"".encode())
            time.sleep(rng.uniform(0, 0.1))
        self.count("gone mid-body")

    def run(self, kind: str, threads: int) -> dict:
        attack = getattr(self, kind.replace("-", "_"))

        def loop(seed: int) -> None:
            rng = random.Random(seed)
            while self.running():
                try:
                    attack(rng)
                except OSError as exc:  # the server refusing a connection is an outcome, not an error
                    self.count(f"socket error: {exc.strerror or exc}")
                    time.sleep(0.05)
                except Exception:  # noqa: BLE001 - the client's own failure, reported as such
                    with self.lock:
                        self.errors.append(traceback.format_exc(limit=5))
                    return

        pool = [threading.Thread(target=loop, args=(self.rng.randrange(2**32),)) for _ in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        return {"kind": kind, "attacks": self.attacks, "outcomes": dict(self.outcomes),
                "violations": self.violations, "errors": self.errors, "held_max": self.held_max}


#: Threads per hostile kind.
_HOSTILE_THREADS = {"huge-head": 2, "trickle": 4, "idle": 1, "half-open": 2, "slow-body": 6, "cut-body": 2}


def role_hostile(port: str, kind: str, seconds: str, seed: str, cap: str, max_connections: str) -> None:
    """Attack the server at ``port`` with connections of ``kind`` for ``seconds``; print
    ``attacking`` once started and ``result {json}`` at the end."""
    hostile = _Hostile(int(port), float(seconds), int(seed), int(cap), int(max_connections))
    say("ready")
    sys.stdin.readline()
    say("attacking")
    say("result " + json.dumps(hostile.run(kind, _HOSTILE_THREADS[kind])))
    sys.stdin.read()  # until the parent is done with us



# -- the swapper ------------------------------------------------------------------------------

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: str, b: str) -> None:
    """Swap what the names ``a`` and ``b`` hold, in one step (``renameat2`` with
    ``RENAME_EXCHANGE``)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), a)


def _remove(path: str) -> str | None:
    """Remove the hostile thing at ``path``; what was wrong with it, if anything."""
    st = os.lstat(path)
    if stat.S_ISDIR(st.st_mode):
        inside = os.listdir(path)
        if inside:
            shutil.rmtree(path)
            return f"the server wrote into the folder put at the session's name: {inside}"
        os.rmdir(path)
    else:
        os.unlink(path)
    return None


def role_swapper(name: str, outside: str, seconds: str, seed: str) -> None:
    """For ``seconds`` (or until stdin closes): put at the session's ``name`` one of
    :data:`SWAPS` and, a moment later, put the session's file back; print ``swapped
    {kind: count}`` at the end, and ``wrong ...`` for what the server did wrong.

    The swap itself ignores the write lock, as any other program would: a request may
    meet it at any point. The file is put back under the write lock (so no write of the
    server's falls between the look at the name and the exchange back); if a rewrite by
    the server replaced the hostile thing with the session's new file meanwhile, that
    file stays and the old one is dropped."""
    from boundctx.transcript.writing import take_write_lock

    rng = random.Random(int(seed))
    folder = os.path.dirname(name)
    held, aside = os.path.join(folder, "swap-held"), os.path.join(folder, "swap-aside")
    targets = {"symlink to a file outside": os.path.join(outside, "victim.jsonl"),
               "symlink to a FIFO outside": os.path.join(outside, "fifo"),
               "symlink to a folder outside": os.path.join(outside, "folder"),
               "symlink to /dev/null": "/dev/null", "dangling symlink": os.path.join(outside, "nowhere")}
    counts: collections.Counter = collections.Counter()
    say("ready")
    sys.stdin.readline()
    end = time.monotonic() + float(seconds)
    while time.monotonic() < end and not _stopped():
        kind = rng.choice(SWAPS)
        if kind == "nothing":
            os.rename(name, aside)
        else:
            if kind in targets:
                os.symlink(targets[kind], held)
            elif kind == "FIFO":
                os.mkfifo(held)
            else:
                os.mkdir(held)
            _exchange(held, name)  # the name holds the hostile thing; "held" the session's file
        time.sleep(rng.uniform(0, 0.004))
        lock = take_write_lock(name, wait=CHILD_TIMEOUT / 2)
        try:
            if kind == "nothing":
                if os.path.lexists(name):  # a rewrite put the session's new file there
                    os.unlink(aside)
                    counts["rewrites that landed while the name was empty"] += 1
                else:
                    os.rename(aside, name)
            elif stat.S_ISREG(os.lstat(name).st_mode):
                os.unlink(held)  # a rewrite replaced the hostile thing: its file is the session's now
                counts["rewrites that replaced the hostile thing"] += 1
            else:
                _exchange(held, name)
                if (problem := _remove(held)) is not None:
                    say(f"wrong {kind}: {problem}")
        finally:
            os.close(lock)
        counts[kind] += 1
        time.sleep(rng.uniform(0, 0.004))
    say("swapped " + json.dumps(counts))
    sys.stdin.read()


ROLES: dict[str, Callable[..., None]] = {"serve": role_serve, "rewriter": role_rewriter, "appender": role_appender,
                                         "hostile": role_hostile, "swapper": role_swapper}

if __name__ == "__main__":
    ROLES[sys.argv[1]](*sys.argv[2:])
