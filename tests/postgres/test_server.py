"""The PostgreSQL server the suite starts itself (tests/_support/postgres.py) and its
fixtures (tests/conftest.py): it answers psycopg, keeps databases apart, drops
connections on a restart, dies on kill() and recovers on start(), carries LISTEN/NOTIFY
between connections (the coordination across serve processes will), runs as an
unprivileged account when the tests run as root, and leaves no process or folder
behind, even when the process that started it is killed.

psycopg is imported inside the tests: the fixtures skip (or, in CI, fail) saying how to
install it, where an import here would be a collection error."""

import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from tests._support import importable_env, running_as_root
from tests._support.postgres import (
    PostgresServer,
    PostgresUnavailable,
    cluster_pids,
    find_bindir,
    postmaster_pid,
    required,
)


def eventually(condition, timeout=60.0):
    """Poll ``condition`` until it holds; False if it did not within ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_psycopg_connects_by_url_and_by_dsn_and_runs_a_query(postgres_db):
    import psycopg

    for target in (postgres_db.url, postgres_db.dsn):
        with psycopg.connect(target) as conn:
            name, version = conn.execute("SELECT current_database(), current_setting('server_version_num')").fetchone()
        assert name == postgres_db.name
        assert int(version) >= 130000  # DROP DATABASE ... WITH (FORCE), how postgres_db drops its database


def test_two_databases_are_isolated(postgres_server, postgres_db):
    import psycopg

    other = postgres_server.create_database()
    try:
        with psycopg.connect(postgres_db.url) as conn:
            conn.execute("CREATE TABLE records (line text)")
            conn.execute("INSERT INTO records VALUES ('only here')")
        with psycopg.connect(other.url) as conn:
            assert conn.execute("SELECT to_regclass('records')").fetchone() == (None,)
        with psycopg.connect(postgres_db.url) as conn:
            assert conn.execute("SELECT line FROM records").fetchall() == [("only here",)]
    finally:
        postgres_server.drop_database(other.name)


def test_a_restart_drops_connections_and_a_new_one_works(postgres_server, postgres_db):
    import psycopg

    with psycopg.connect(postgres_db.url, autocommit=True) as conn:
        conn.execute("CREATE TABLE records (line text)")
        conn.execute("INSERT INTO records VALUES ('kept')")
        postgres_server.restart()
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
    with psycopg.connect(postgres_db.url) as conn:
        assert conn.execute("SELECT line FROM records").fetchall() == [("kept",)]


def test_kill_fails_connections_and_start_recovers_what_was_committed(postgres_server, postgres_db):
    import psycopg

    with psycopg.connect(postgres_db.url, autocommit=True) as conn:
        conn.execute("CREATE TABLE records (line text)")
        conn.execute("INSERT INTO records VALUES ('committed')")
        postgres_server.kill()
        assert not postgres_server.running and cluster_pids(postgres_server.data) == []
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(postgres_db.url, connect_timeout=10)
    postgres_server.start()
    # crash recovery: with fsync off a commit still reached the kernel before it returned
    with psycopg.connect(postgres_db.url) as conn:
        assert conn.execute("SELECT line FROM records").fetchall() == [("committed",)]


def test_listen_notify_carries_committed_notifications_to_another_connection(postgres_db):
    import psycopg

    with psycopg.connect(postgres_db.url, autocommit=True) as listener, \
            psycopg.connect(postgres_db.url) as notifier:
        listener.execute("LISTEN boundctx_test")
        notifier.execute("SELECT pg_notify('boundctx_test', 'rolled back')")
        notifier.rollback()
        notifier.execute("SELECT pg_notify('boundctx_test', 'cancel 42')")
        notifier.commit()
        # delivered in commit order: had the rolled-back one been sent, it would be first
        got = [(n.channel, n.payload, n.pid) for n in listener.notifies(timeout=30, stop_after=1)]
        assert got == [("boundctx_test", "cancel 42", notifier.info.backend_pid)]


def test_the_server_runs_as_an_unprivileged_account_when_the_tests_are_root(postgres_server):
    pid = postmaster_pid(postgres_server.data)
    uid = os.stat(f"/proc/{pid}").st_uid
    if running_as_root():
        assert uid != 0 and uid == postgres_server.account.pw_uid
    else:
        assert uid == os.geteuid() and postgres_server.account is None


def test_a_server_of_its_own_on_tcp_leaves_no_process_or_folder_behind(postgres_server):
    # postgres_server: only for its skip or failure when there is no server to start
    import psycopg

    with PostgresServer(tcp=True) as server:
        with psycopg.connect(server.tcp_url) as conn:
            assert conn.execute("SELECT inet_server_addr()::text").fetchone() == ("127.0.0.1/32",)
        base, pids = server.base, cluster_pids(server.data)
        assert pids
    assert not base.exists()
    assert not [pid for pid in pids if os.path.exists(f"/proc/{pid}")]


CRASHING_STARTER = """
import os, signal
from tests._support.postgres import PostgresServer
server = PostgresServer()
server.start()
print(server.data, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_server_whose_starter_is_killed_is_stopped_and_its_folder_removed(postgres_server):
    # postgres_server: only for its skip or failure when there is no server to start
    starter = subprocess.run([sys.executable, "-c", CRASHING_STARTER], capture_output=True, text=True,
                             env=importable_env(), timeout=120)
    assert starter.returncode == -signal.SIGKILL, starter.stderr
    data = pathlib.Path(starter.stdout.strip())
    assert data.name == "data", starter.stdout
    assert eventually(lambda: not data.parent.exists() and not cluster_pids(data)), \
        f"the server in {data} outlived the process that started it"


def test_missing_binaries_say_what_to_install(tmp_path):
    with pytest.raises(PostgresUnavailable, match=r"PostgreSQL server binaries not found .*apt-get install postgresql"):
        find_bindir(pg_config=None, patterns=(str(tmp_path / "*" / "bin"),), path=str(tmp_path))


def test_the_newest_version_with_every_program_is_chosen(tmp_path):
    for version, programs in (("9.6", ("initdb", "pg_ctl", "postgres")), ("14", ("initdb", "pg_ctl", "postgres")),
                              ("16", ("initdb", "pg_ctl"))):
        (tmp_path / version / "bin").mkdir(parents=True)
        for name in programs:
            program = tmp_path / version / "bin" / name
            program.write_text("#!/bin/sh\n")
            program.chmod(0o755)
    found = find_bindir(pg_config=None, patterns=(str(tmp_path / "*" / "bin"),), path=str(tmp_path / "none"))
    assert found == tmp_path / "14" / "bin"


@pytest.mark.parametrize(("environ", "fails"), [
    ({}, False),
    ({"CI": "true"}, True),
    ({"CI": "1"}, True),
    ({"CI": ""}, False),
    ({"CI": "false"}, False),
    ({"BOUNDCTX_REQUIRE_POSTGRES": "1"}, True),
    ({"BOUNDCTX_REQUIRE_POSTGRES": "0"}, False),
])
def test_a_missing_server_fails_in_ci_and_when_required(environ, fails):
    assert required(environ) is fails
