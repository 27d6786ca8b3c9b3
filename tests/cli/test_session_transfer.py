"""``boundctx session import`` and ``session export`` on a real PostgreSQL server: JSONL
files go in and come back out byte for byte, each file or session whole or not at all,
and every error a user can act on is one line naming what failed, never a traceback."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from boundctx.cli import main
from boundctx.stores.postgres import PostgresStore
from boundctx.transcript import encode_record

from tests._support import importable_env, rewound_session

REAL = "claude-code-sessions/ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl"


def boundctx(*argv: str) -> subprocess.CompletedProcess:
    """The command line as a user runs it: ``python -m boundctx`` in a process of its own."""
    return subprocess.run([sys.executable, "-m", "boundctx", *argv], capture_output=True, text=True, timeout=300,
                          env=importable_env())


def generated(path, *, seed: int = 1, torn: bytes = b""):
    """A seeded synthetic transcript (several scripts, big tool outputs, compactions),
    with ``torn`` after its last line, as a writer killed mid-line leaves one."""
    assert main(["sample", str(path), "--size", "500K", "--seed", str(seed)]) == 0
    with open(path, "ab") as f:
        f.write(torn)
    return path


def message_lines(path, n: int, text: str = "line {k}"):
    path.write_bytes(b"".join(encode_record({"type": "message", "id": f"m{k}",
                                             "message": {"role": "user", "content": text.format(k=k)}})
                              for k in range(n)))
    return path


def stored(url) -> list[str]:
    with PostgresStore(url) as store:
        return store.ids()


def free_port() -> int:
    """A loopback port nothing listens on (bound, then let go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_real_session_goes_in_and_comes_back_byte_for_byte_with_progress(postgres_db, shared_file, tmp_path):
    path = shared_file(REAL)
    run = boundctx("session", "import", str(path), "--to", postgres_db.url, "--progress")
    assert run.returncode == 0, run.stderr
    assert f"{path}: session '{path.stem}', " in run.stdout and f"{path.stat().st_size} bytes" in run.stdout
    assert "import:" in run.stderr and "%|" in run.stderr  # the bar, forced on where stderr is no terminal
    out = tmp_path / "back.jsonl"
    run = boundctx("session", "export", path.stem, "--from", postgres_db.url, "--out", str(out), "--progress")
    assert run.returncode == 0, run.stderr
    assert f"export {path.stem}:" in run.stderr
    assert run.stdout.startswith(f"session '{path.stem}': {out}, {path.stat().st_size} bytes (")
    assert out.read_bytes() == path.read_bytes()


def test_two_files_go_in_at_once_and_come_back_through_a_folder(postgres_db, tmp_path, capsys):
    a = generated(tmp_path / "a.jsonl", seed=1)
    b = generated(tmp_path / "b.jsonl", seed=2, torn=b'{"type": "message", "message": {"role": "us')
    capsys.readouterr()
    assert main(["session", "import", str(a), str(b), "--to", postgres_db.url]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out] == [str(a), str(b)]
    assert ", 0 compactions" not in out[0] and "torn bytes at the end" in out[1]
    assert stored(postgres_db.url) == ["a", "b"]
    folder = tmp_path / "back"
    assert main(["session", "export", "a", "b", "--from", postgres_db.url, "--dir", str(folder)]) == 0
    assert (folder / "a.jsonl").read_bytes() == a.read_bytes()
    assert (folder / "b.jsonl").read_bytes() == b.read_bytes()
    assert sorted(p.name for p in folder.iterdir()) == ["a.jsonl", "b.jsonl"]  # no temporary file left


def test_an_existing_session_is_refused_and_kept_and_replace_swaps_it_in_one_go(postgres_db, tmp_path, capsys):
    first = message_lines(tmp_path / "s.jsonl", 5, "first {k}")
    other = message_lines(tmp_path / "other.jsonl", 3, "second {k}")
    assert main(["session", "import", str(first), "--to", postgres_db.url]) == 0
    with PostgresStore(postgres_db.url) as store:
        version = store.open("s").version()
    capsys.readouterr()
    assert main(["session", "import", str(other), "--id", "s", "--to", postgres_db.url]) == 1
    err = capsys.readouterr().err
    assert f"{other}: FAILED: session 's' is in the database already; --replace replaces it" in err
    assert "1 of 1 failed" in err and "Traceback" not in err
    back = tmp_path / "back.jsonl"
    assert main(["session", "export", "s", "--from", postgres_db.url, "--out", str(back)]) == 0
    assert back.read_bytes() == first.read_bytes()

    assert main(["session", "import", str(other), "--id", "s", "--replace", "--to", postgres_db.url]) == 0
    assert main(["session", "export", "s", "--from", postgres_db.url, "--out", str(back), "--force"]) == 0
    assert back.read_bytes() == other.read_bytes()
    with PostgresStore(postgres_db.url) as store:
        assert store.ids() == ["s"] and store.open("s").message_count == 3
        assert store.open("s").version() != version  # a reader's cached windows are not taken for the new ones


def test_replace_keeps_the_old_session_when_the_new_file_is_refused(postgres_db, tmp_path, capsys):
    first = message_lines(tmp_path / "s.jsonl", 4)
    rewound = tmp_path / "rewound.jsonl"
    rewound.write_bytes(b"".join(encode_record(r) for r in rewound_session()))
    assert main(["session", "import", str(first), "--to", postgres_db.url]) == 0
    assert main(["session", "import", str(rewound), "--id", "s", "--replace", "--to", postgres_db.url]) == 1
    back = tmp_path / "back.jsonl"
    assert main(["session", "export", "s", "--from", postgres_db.url, "--out", str(back)]) == 0
    assert back.read_bytes() == first.read_bytes()


def test_a_replace_that_fails_midway_leaves_the_old_session_whole(postgres_db, tmp_path):
    # The store's own replace=, which --replace calls: the old session is removed in the
    # transaction that stores the new one, so a failure after the removal undoes it too.
    old = message_lines(tmp_path / "old.jsonl", 4, "old {k}")
    new = message_lines(tmp_path / "new.jsonl", 6, "new {k}")

    def fail(done: int, total: int) -> None:
        raise OSError("the disk went away")

    with PostgresStore(postgres_db.url) as store:
        store.import_jsonl("s", old)
        version = store.open("s").version()
        with pytest.raises(OSError, match="the disk went away"):
            store.import_jsonl("s", new, replace=True, progress=fail)
        assert store.ids() == ["s"] and store.open("s").version() == version
        store.export_jsonl("s", tmp_path / "back.jsonl")
        assert (tmp_path / "back.jsonl").read_bytes() == old.read_bytes()
        assert store.import_jsonl("t", new, replace=True).messages == 6  # nothing there to replace: stored


def test_a_file_that_forks_is_refused_with_the_reason_and_the_others_go_on(postgres_db, tmp_path, capsys):
    rewound = tmp_path / "rewound.jsonl"
    rewound.write_bytes(b"".join(encode_record(r) for r in rewound_session()))
    good = message_lines(tmp_path / "good.jsonl", 3)
    missing = tmp_path / "missing.jsonl"
    assert main(["session", "import", str(rewound), str(missing), str(good), "--to", postgres_db.url]) == 1
    captured = capsys.readouterr()
    assert f"{rewound}: FAILED: " in captured.err and "forks" in captured.err and "kept as a file" in captured.err
    assert f"{missing}: FAILED: no such file" in captured.err
    assert "2 of 3 failed" in captured.err and "Traceback" not in captured.err
    assert f"{good}: session 'good', 3 messages" in captured.out
    assert stored(postgres_db.url) == ["good"]  # nothing of the refused file


def test_export_of_a_missing_session_fails_alone(postgres_db, tmp_path, capsys):
    path = message_lines(tmp_path / "a.jsonl", 2)
    assert main(["session", "import", str(path), "--to", postgres_db.url]) == 0
    folder = tmp_path / "out"
    assert main(["session", "export", "nope", "a", "--from", postgres_db.url, "--dir", str(folder)]) == 1
    captured = capsys.readouterr()
    assert "session 'nope': FAILED: no session 'nope'" in captured.err and "1 of 2 failed" in captured.err
    assert sorted(p.name for p in folder.iterdir()) == ["a.jsonl"]


def test_export_leaves_a_file_that_is_there_unless_forced(postgres_db, tmp_path, capsys):
    path = message_lines(tmp_path / "a.jsonl", 2)
    assert main(["session", "import", str(path), "--to", postgres_db.url]) == 0
    there = tmp_path / "there.jsonl"
    there.write_bytes(b"mine\n")
    assert main(["session", "export", "a", "--from", postgres_db.url, "--out", str(there)]) == 1
    assert "is there already; --force replaces it" in capsys.readouterr().err
    assert there.read_bytes() == b"mine\n"
    assert main(["session", "export", "a", "--from", postgres_db.url, "--out", str(there), "--force"]) == 0
    assert there.read_bytes() == path.read_bytes()


@pytest.mark.parametrize("argv, message", [
    (["export", "a", "b", "--out", "x.jsonl", "--from"], "--out names one file, and 2 sessions were given"),
    (["import", "a.jsonl", "b.jsonl", "--id", "s", "--to"], "--id names one session, and 2 files were given"),
])
def test_one_name_for_several_is_refused_before_any_work(postgres_db, tmp_path, monkeypatch, capsys, argv, message):
    monkeypatch.chdir(tmp_path)
    assert main(["session", *argv, postgres_db.url]) == 2
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == [] and stored(postgres_db.url) == []


def test_a_database_that_does_not_answer_is_one_line_without_the_password(tmp_path):
    pytest.importorskip("psycopg", reason="the PostgreSQL store needs psycopg (pip install 'boundctx[postgres]')")
    path = message_lines(tmp_path / "a.jsonl", 2)
    url = f"postgresql://bob:s3cret@127.0.0.1:{free_port()}/db"
    for argv in (["import", str(path), "--to", url], ["export", "a", "--from", url, "--dir", str(tmp_path / "o")]):
        run = boundctx("session", *argv)
        assert run.returncode == 2 and run.stdout == ""
        assert len(run.stderr.splitlines()) == 1, run.stderr
        assert run.stderr.startswith(f"boundctx session {argv[0]}: cannot connect to the database at "
                                     "postgresql://bob:***@127.0.0.1:")
        assert "Connection refused" in run.stderr and "check that the server runs" in run.stderr
        assert "s3cret" not in run.stderr
    assert not (tmp_path / "o").exists()


def test_a_url_that_is_no_url_is_said_without_the_password(tmp_path, capsys):
    pytest.importorskip("psycopg", reason="the PostgreSQL store needs psycopg (pip install 'boundctx[postgres]')")
    path = message_lines(tmp_path / "a.jsonl", 2)
    assert main(["session", "import", str(path), "--to", "postgresql:/bob:s3cret@host"]) == 2
    err = capsys.readouterr().err
    assert "is no PostgreSQL URL" in err and "bob:***@host" in err and "s3cret" not in err


def test_without_psycopg_the_commands_say_what_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if it were not installed
    monkeypatch.setitem(sys.modules, "psycopg_pool", None)
    path = message_lines(tmp_path / "a.jsonl", 2)
    assert main(["session", "import", str(path), "--to", "postgresql:///x"]) == 2
    assert "pip install 'boundctx[postgres]'" in capsys.readouterr().err
    assert main(["session", "export", "a", "--from", "postgresql:///x", "--out", str(tmp_path / "b.jsonl")]) == 2
    assert "pip install 'boundctx[postgres]'" in capsys.readouterr().err
