"""A throwaway PostgreSQL server for the tests and the benchmarks, started by them.

``PostgresServer`` makes a cluster with ``initdb`` in a fresh temporary folder, starts it
with ``pg_ctl -w`` on a Unix socket in that folder (and, if asked, a loopback TCP port),
and hands out ``postgresql://`` URLs and libpq DSNs psycopg connects with. Its
``stop()``, ``start()``, ``restart()`` and ``kill()`` are the faults the store's tests
need: a clean stop, a restart that drops every connection, and a database that dies
(SIGKILL of the postmaster and every process it started, as an out-of-memory kill
would).

Why it is shaped so:

- ``initdb``, ``pg_ctl`` and ``postgres`` refuse to run as root. Run as root (a fresh CI
  container), the server runs as an unprivileged account, ``postgres`` where the server
  package made one, else ``nobody`` (every Debian has it), and its folder is handed to
  that account; run as anyone else, it runs as that user and nothing switches.
- A keeper process starts with the server and outlives nothing: it runs every ``pg_ctl``
  (as that account), adopts the postmaster and its children as they are orphaned
  (``PR_SET_CHILD_SUBREAPER``) and reaps them, and when the process that started it goes
  (closed, crashed, killed; the end of its stdin says so) it stops the server and
  removes the folder. So no server outlives the tests, and a killed postmaster is never
  left a zombie whose stale ``postmaster.pid`` would stop the next start (init does not
  reap on every machine).
- For speed the cluster is made with ``initdb --no-sync`` and runs with ``fsync = off``:
  what a commit wrote reaches the kernel and survives ``kill()`` (the tests of a database
  that dies rely on that), not an operating system crash, which no test makes.
- Authentication is ``trust`` (the socket is in a folder only the server's account and
  root can reach; TCP, when asked, listens on 127.0.0.1 only); the superuser is
  ``postgres``.

Benchmarks import it too (``python -m bench.<script>`` from the repository root), so it
imports nothing of pytest; psycopg is imported only to create and drop databases. The
fixtures are in ``tests/conftest.py``.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import glob
import json
import os
import pathlib
import pwd
import re
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import urllib.parse
import uuid

from tests._support import ROOT, importable_env

#: The programs a server needs; a folder is the one only if it has all three.
SERVER_PROGRAMS = ("initdb", "pg_ctl", "postgres")
#: Where Debian and Ubuntu put each major version's programs (pg_config may name a
#: folder without them: Debian's /usr/bin/pg_config comes with libpq-dev).
DEBIAN_BINDIRS = ("/usr/lib/postgresql/*/bin",)
INSTALL = ("apt-get install postgresql (Debian, Ubuntu; .ci/run does), or put the folder of "
           "initdb, pg_ctl and postgres on PATH")
PSYCOPG_INSTALL = "pip install '.[postgres]' (the test extra has it too)"
#: The superuser initdb makes, whoever runs it.
SUPERUSER = "postgres"
#: The accounts a server started as root runs as, the first that exists.
ACCOUNTS = ("postgres", "nobody")


class PostgresUnavailable(RuntimeError):
    """What this machine lacks to run a server (its programs, psycopg, an account to
    run it as); the message says what to install. The fixtures skip on it, or fail
    where a server is required (:func:`required`)."""


def required(environ=None) -> bool:
    """Whether a missing server fails the tests that need one instead of skipping them:
    in CI (``CI`` set to anything but ``""``, ``0`` or ``false``) or with
    ``BOUNDCTX_REQUIRE_POSTGRES=1``. A skip must never hide a missing server there."""
    environ = os.environ if environ is None else environ
    return (environ.get("CI", "").strip().lower() not in ("", "0", "false")
            or environ.get("BOUNDCTX_REQUIRE_POSTGRES", "") == "1")


def _version(bindir: str) -> tuple[int, ...]:
    # /usr/lib/postgresql/<version>/bin: 16 before 9.6 (a string sort would say otherwise)
    name = pathlib.Path(bindir).parent.name
    return tuple(int(part) for part in re.findall(r"\d+", name))


def find_bindir(*, pg_config: str | None = "pg_config", patterns=DEBIAN_BINDIRS,
                path: str | None = None) -> pathlib.Path:
    """The folder of the server's programs: what ``pg_config --bindir`` names, then
    Debian's ``/usr/lib/postgresql/<version>/bin`` newest first, then the folder of
    ``initdb`` on ``path`` (default PATH). The first holding all of
    :data:`SERVER_PROGRAMS` wins; none raises :class:`PostgresUnavailable` naming
    where it looked and what to install."""
    candidates = []
    config = shutil.which(pg_config, path=path) if pg_config else None
    if config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run([config, "--bindir"], capture_output=True, text=True, timeout=10)
            if out.returncode == 0 and out.stdout.strip():
                candidates.append(out.stdout.strip())
    for pattern in patterns:
        candidates.extend(sorted(glob.glob(pattern), key=_version, reverse=True))
    initdb = shutil.which("initdb", path=path)
    if initdb:
        candidates.append(str(pathlib.Path(initdb).parent))
    for folder in dict.fromkeys(candidates):
        if all(os.access(os.path.join(folder, name), os.X_OK) for name in SERVER_PROGRAMS):
            return pathlib.Path(folder)
    looked = [f"{config} --bindir" if config else None, *patterns, "PATH"]
    raise PostgresUnavailable(f"PostgreSQL server binaries not found ({', '.join(SERVER_PROGRAMS)}; looked at "
                              f"{', '.join(filter(None, looked))}): {INSTALL}")


def server_account() -> pwd.struct_passwd | None:
    """The account the server runs as when this process is root (None otherwise: it runs
    as this user): the first of :data:`ACCOUNTS` that exists and is not root."""
    if os.geteuid() != 0:
        return None
    for name in ACCOUNTS:
        with contextlib.suppress(KeyError):
            account = pwd.getpwnam(name)
            if account.pw_uid != 0:
                return account
    raise PostgresUnavailable(f"running as root, and none of the accounts {', '.join(ACCOUNTS)} exists to run "
                              "PostgreSQL as (initdb and pg_ctl refuse root): apt-get install postgresql makes "
                              "'postgres', or run the tests as an ordinary user")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _conninfo_value(value: str) -> str:
    # libpq's key=value syntax: quote anything but a plain word
    if value and re.fullmatch(r"[\w./:-]+", value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def cluster_pids(data: pathlib.Path) -> list[int]:
    """The live processes of the cluster in ``data``: every PostgreSQL process works in
    its data folder (each is in a session of its own, so no process group holds them).
    Zombies have no working folder and are left out. Linux ``/proc``."""
    data = os.path.realpath(data)
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{entry.name}/cwd") == data:
                    pids.append(int(entry.name))
    return pids


def postmaster_pid(data: pathlib.Path) -> int | None:
    """The postmaster's pid from ``data/postmaster.pid``, None without the file."""
    try:
        first = (pathlib.Path(data) / "postmaster.pid").read_text().split("\n", 1)[0]
    except (FileNotFoundError, PermissionError):
        return None
    return int(first) if first.strip().isdigit() else None


def _gone(pid: int) -> bool:
    # reaped, not only dead: a zombie still holds its pid (the lock file check sees it)
    return not os.path.exists(f"/proc/{pid}")


def _kill_cluster(data: pathlib.Path) -> None:
    # the postmaster first, so it starts no one else; then whatever of the cluster lives
    pid = postmaster_pid(data)
    if pid is not None and pid in cluster_pids(data):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for other in cluster_pids(data):
        with contextlib.suppress(ProcessLookupError):
            os.kill(other, signal.SIGKILL)


@dataclasses.dataclass(frozen=True)
class Database:
    """One database of a :class:`PostgresServer`: its name, a ``postgresql://`` URL and
    the same as a libpq DSN (psycopg takes either)."""

    name: str
    url: str
    dsn: str


class PostgresServer:
    """A PostgreSQL cluster of its own in a temporary folder, started by :meth:`start`
    (or ``with``) and gone, folder and processes, after :meth:`close`.

    Parameters
    ----------
    tcp
        Also listen on a free loopback port (``tcp_url``); the Unix socket always.
    bindir
        The folder of ``initdb``, ``pg_ctl`` and ``postgres`` (default: :func:`find_bindir`).
    timeout
        Seconds any one ``pg_ctl`` step may take.
    """

    def __init__(self, *, tcp: bool = False, bindir=None, timeout: float = 60.0):
        self.bindir = pathlib.Path(bindir) if bindir is not None else find_bindir()
        self.account = server_account()
        self.port = _free_port() if tcp else 5432
        self.tcp = tcp
        self.timeout = timeout
        self.base: pathlib.Path | None = None
        self._keeper: subprocess.Popen | None = None

    # -- where things are

    @property
    def data(self) -> pathlib.Path:
        return self._base() / "data"

    @property
    def socket_dir(self) -> pathlib.Path:
        return self._base() / "socket"

    @property
    def log(self) -> pathlib.Path:
        return self._base() / "server.log"

    def _base(self) -> pathlib.Path:
        if self.base is None:
            raise RuntimeError("the server was never started (or is closed): start() it first")
        return self.base

    # -- how to reach it

    def url_for(self, dbname: str = "postgres") -> str:
        """``postgresql://postgres@/<dbname>?host=<socket folder>&port=<port>``."""
        query = urllib.parse.urlencode({"host": str(self.socket_dir), "port": self.port}, safe="/")
        return f"postgresql://{SUPERUSER}@/{urllib.parse.quote(dbname, safe='')}?{query}"

    def dsn_for(self, dbname: str = "postgres") -> str:
        """``host=<socket folder> port=<port> user=postgres dbname=<dbname>``."""
        parts = {"host": str(self.socket_dir), "port": str(self.port), "user": SUPERUSER, "dbname": dbname}
        return " ".join(f"{key}={_conninfo_value(value)}" for key, value in parts.items())

    @property
    def url(self) -> str:
        return self.url_for()

    @property
    def dsn(self) -> str:
        return self.dsn_for()

    @property
    def tcp_url(self) -> str:
        """``postgresql://postgres@127.0.0.1:<port>/postgres`` (with ``tcp=True`` only)."""
        if not self.tcp:
            raise RuntimeError("this server listens on its Unix socket only: PostgresServer(tcp=True)")
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/postgres"

    # -- its life

    def __enter__(self) -> PostgresServer:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def running(self) -> bool:
        """Whether the postmaster named by ``postmaster.pid`` lives."""
        if self.base is None:
            return False
        pid = postmaster_pid(self.data)
        return pid is not None and pid in cluster_pids(self.data)

    def start(self) -> None:
        """Make the cluster (first call only) and start it, waiting until it accepts
        connections; nothing when it runs."""
        if self._keeper is None:
            self._make()
        if not self.running:
            self._pg_ctl("start", "-l", str(self.log))
        self.wait_ready()

    def stop(self, mode: str = "fast") -> None:
        """``pg_ctl stop -m <mode>`` (``smart``, ``fast``: connections are ended,
        ``immediate``: no shutdown checkpoint); nothing when it is not running."""
        if self.running:
            self._pg_ctl("stop", "-m", mode)

    def restart(self) -> None:
        """``pg_ctl restart -m fast``: every connection is dropped, the data stays."""
        self._pg_ctl("restart", "-m", "fast", "-l", str(self.log))
        self.wait_ready()

    def kill(self) -> None:
        """The database dies: SIGKILL to the postmaster and then to every process of the
        cluster, returning once all are gone. :meth:`start` recovers it (crash recovery
        replays the WAL: what was committed stays)."""
        pid = postmaster_pid(self.data)
        deadline = time.monotonic() + self.timeout
        while cluster_pids(self.data) or (pid is not None and not _gone(pid)):
            _kill_cluster(self.data)
            if time.monotonic() > deadline:
                raise TimeoutError(f"the PostgreSQL processes of {self.data} outlived SIGKILL for {self.timeout} s")
            time.sleep(0.01)  # the keeper reaps them: poll for it

    def wait_ready(self, timeout: float | None = None) -> None:
        """Return once the postmaster says it accepts connections (the ``ready`` status
        of ``postmaster.pid``, what ``pg_ctl -w`` waits for); TimeoutError naming the
        log otherwise."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            with contextlib.suppress(FileNotFoundError, PermissionError):
                lines = (self.data / "postmaster.pid").read_text().splitlines()
                if len(lines) >= 8 and lines[7].strip() == "ready" and self.running:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"PostgreSQL in {self.data} is not ready: {self._log_tail()}")
            time.sleep(0.01)

    def close(self) -> None:
        """Stop the server and remove its folder (the keeper does both, and would
        without this call once this process ends); safe to call twice."""
        atexit.unregister(self.close)
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            with contextlib.suppress(OSError):
                keeper.stdin.close()
            try:
                keeper.wait(self.timeout)
            except subprocess.TimeoutExpired:
                keeper.kill()
                keeper.wait()
                _kill_cluster(self.data)
            keeper.stdout.close()
        if self.base is not None:
            shutil.rmtree(self.base, ignore_errors=True)
            self.base = None

    # -- databases (psycopg)

    def create_database(self, name: str | None = None) -> Database:
        """``CREATE DATABASE`` (a fresh unique name unless given) -> :class:`Database`."""
        psycopg, sql = import_psycopg()
        name = name or f"t_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return Database(name, self.url_for(name), self.dsn_for(name))

    def drop_database(self, name: str) -> None:
        """``DROP DATABASE IF EXISTS ... WITH (FORCE)``: its connections are ended first."""
        psycopg, sql = import_psycopg()
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    # -- inside

    def _make(self) -> None:
        base = pathlib.Path(tempfile.mkdtemp(prefix="boundctx-pg-"))
        self.base = base
        self.socket_dir.mkdir()
        if self.account is not None:
            for path in (base, self.socket_dir):
                os.chown(path, self.account.pw_uid, self.account.pw_gid)
            for parent in base.parents:
                if not parent.stat().st_mode & stat.S_IXOTH:
                    self.close()
                    raise RuntimeError(
                        f"{parent} cannot be entered by the account {self.account.pw_name} that PostgreSQL runs "
                        f"as, so neither can {base}: set TMPDIR to a folder it can reach (/tmp)")
        uid, gid = (self.account.pw_uid, self.account.pw_gid) if self.account else (-1, -1)
        self._keeper = subprocess.Popen(
            [sys.executable, "-m", "tests._support.postgres", "keep", str(base), str(self.bindir), str(uid), str(gid)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT, env=importable_env(), start_new_session=True)
        atexit.register(self.close)
        self._run("initdb", "-D", str(self.data), "-U", SUPERUSER, "-A", "trust", "-E", "UTF8", "--locale=C",
                  "--no-sync")
        listen = "127.0.0.1" if self.tcp else ""
        with open(self.data / "postgresql.conf", "a", encoding="utf-8") as conf:
            conf.write(f"\n# boundctx tests (tests/_support/postgres.py): a throwaway cluster\n"
                       f"listen_addresses = '{listen}'\n"
                       f"port = {self.port}\n"
                       f"unix_socket_directories = '{self.socket_dir}'\n"
                       "# what a commit wrote reaches the kernel, so it survives a killed server;\n"
                       "# only an operating system crash could lose it, and no test makes one\n"
                       "fsync = off\n")

    def _pg_ctl(self, *args: str) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-w", "-t", str(int(self.timeout)), *args)

    def _run(self, program: str, *args: str) -> None:
        if self._keeper is None:
            raise RuntimeError("the server is closed")
        request = {"argv": [str(self.bindir / program), *args], "timeout": self.timeout + 10}
        self._keeper.stdin.write(json.dumps(request).encode() + b"\n")
        self._keeper.stdin.flush()
        line = self._keeper.stdout.readline()
        if not line:
            raise RuntimeError(f"the PostgreSQL keeper process ended (exit status {self._keeper.wait()})")
        done = json.loads(line)
        if done["returncode"] != 0:
            raise RuntimeError(f"{program} {' '.join(args)} failed ({done['returncode']}): {done['output'].strip()}\n"
                               f"{self._log_tail()}")

    def _log_tail(self, lines: int = 20) -> str:
        try:
            tail = self.log.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return f"no server log at {self.log}"
        return f"the end of {self.log}:\n" + "\n".join(tail)


def import_psycopg():
    """``(psycopg, psycopg.sql)``; :class:`PostgresUnavailable` saying how to install it."""
    try:
        import psycopg
        from psycopg import sql
    except ImportError as exc:
        raise PostgresUnavailable(f"psycopg is not installed: {PSYCOPG_INSTALL}") from exc
    return psycopg, sql


# -- the keeper: python -m tests._support.postgres keep BASE BINDIR UID GID


def _environment(base: str) -> dict:
    # no PGDATA, PGHOST, PGPORT, ... of the caller's; the C locale whatever the caller's
    env = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
    env.update(HOME=base, LC_ALL="C", LANG="C")
    return env


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def keep(base: str, bindir: str, uid: int, gid: int) -> None:
    """Run the ``pg_ctl``/``initdb`` requests that come on stdin (one JSON line each,
    answered by one on stdout), reaping the server's processes as they are orphaned; at
    the end of stdin, stop the server and remove ``base``."""
    import ctypes

    PR_SET_CHILD_SUBREAPER = 36  # Linux 3.4
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        sys.exit(f"the PostgreSQL keeper cannot adopt the server's processes: {os.strerror(ctypes.get_errno())}")
    as_account = {"user": uid, "group": gid, "extra_groups": []} if uid >= 0 else {}
    env = _environment(base)
    data = pathlib.Path(base) / "data"
    try:
        _serve_requests(env, base, as_account)
    finally:
        _end(data, base, bindir, env, as_account)


def _serve_requests(env: dict, base: str, as_account: dict) -> None:
    pending = b""
    while True:
        _reap()
        ready, _, _ = select.select([0], [], [], 0.02)
        if not ready:
            continue
        chunk = os.read(0, 65536)
        if not chunk:
            return
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            request = json.loads(line)
            try:
                done = subprocess.run(request["argv"], cwd=base, env=env, stdin=subprocess.DEVNULL,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      timeout=request["timeout"], start_new_session=True, **as_account)
                answer = {"returncode": done.returncode, "output": done.stdout}
            except (OSError, subprocess.SubprocessError) as exc:
                answer = {"returncode": -1, "output": str(exc)}
            os.write(1, json.dumps(answer).encode() + b"\n")


def _end(data: pathlib.Path, base: str, bindir: str, env: dict, as_account: dict) -> None:
    # the end: no shutdown checkpoint is worth waiting for in a folder about to go
    if postmaster_pid(data) is not None:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run([os.path.join(bindir, "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "-t", "30",
                            "stop"], cwd=base, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=40, start_new_session=True, **as_account)
    deadline = time.monotonic() + 30
    while cluster_pids(data) and time.monotonic() < deadline:
        _kill_cluster(data)
        _reap()
        time.sleep(0.01)
    _reap()
    shutil.rmtree(base, ignore_errors=True)


def _ended(signum, frame):
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    if sys.argv[1:2] != ["keep"] or len(sys.argv) != 6:
        sys.exit("usage: python -m tests._support.postgres keep BASE BINDIR UID GID")
    # a Ctrl-C meant for the tests is theirs to handle (they close the server); a
    # SIGTERM still stops the server and removes the folder on the way out
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _ended)
    keep(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
