"""``bench_session_stores.py`` at a tiny size: both stores' rows in the JSON with sane
values, and the append check that can fail (no timing is asserted).

Not part of the default suite (``testpaths = ["tests"]``); run by name::

    python -m pytest bench/test_bench_session_stores.py -q

The run needs PostgreSQL's server programs and psycopg (the suite's throwaway server,
``tests/_support/postgres.py``); without them it skips saying what to install, or fails
where a server is required (CI, or ``BOUNDCTX_REQUIRE_POSTGRES=1``), as ``tests/`` does.
"""

from __future__ import annotations

import json

import pytest

from bench import bench_session_stores as bss
from tests._support.postgres import PostgresUnavailable, find_bindir, import_psycopg, required, server_account

WINDOW_KEYS = ("window_cold", "window_newest", "window_before", "direct_newest", "direct_before", "handler_newest",
               "handler_before")


@pytest.fixture
def postgres_available():
    try:
        find_bindir()
        server_account()
        import_psycopg()
    except PostgresUnavailable as exc:
        if required():
            pytest.fail(f"{exc} (a server is required here: CI or BOUNDCTX_REQUIRE_POSTGRES=1 is set)", pytrace=False)
        pytest.skip(str(exc))


def test_a_tiny_run_writes_both_stores_rows_and_every_append_checks_out(tmp_path, monkeypatch, postgres_available):
    monkeypatch.setenv("BOUNDCTX_CACHE_DIR", str(tmp_path / "cache"))  # main() sets it for the run
    out = tmp_path / "session_stores.json"
    rc = bss.main(["--size", "1M", "--messages", "500", "--appends", "20", "--repeats", "4", "--rounds", "2",
                   "--warmup", "1", "--pg-fsync", "off", "--data-dir", str(tmp_path / "data"),
                   "--json-out", str(out)])
    report = json.loads(out.read_text())
    assert rc == 0, report["meta"]["append_problems"]
    rows = {(r["key"], r["store"]): r for r in report["rows"]}
    for key in WINDOW_KEYS:
        for store in bss.STORES:
            row = rows[key, store]
            assert 0 < row["min_s"] <= row["median_s"] <= row["p90_s"] <= row["max_s"]
            assert row["n"] == (1 if key == "window_cold" else 4)
    for writers in (1, 3):
        for store in bss.STORES:
            row = rows[f"append_{writers}", store]
            assert row["exactly_once"] and row["problems"] == []
            assert row["appends"] == row["messages_found"] == 20 * writers
            assert row["appends_per_s"] > 0 and row["retries_409"] >= 0
    sample_bytes = report["meta"]["data"]["import_sample"]["counts"]["bytes"]
    for key, store in (("import_cp", "file"), ("import_reindex", "file"), ("import_open", "file"),
                       ("import_db", "postgres")):
        assert rows[key, store]["bytes"] == sample_bytes and rows[key, store]["mb_per_s"] > 0
    assert report["meta"]["data"]["messages_file"]["messages"] == 500
    assert report["meta"]["engine"]["package"].endswith("boundctx")  # which boundctx the servers ran
    (goal,) = report["goals"]
    assert goal["target_ms"] == 5 and isinstance(goal["met"], bool)
    res = bss.Results(report["meta"])
    res.rows = report["rows"]
    table = bss.markdown(res)
    assert "| window | newest 100 (GET" in table and "× the rate" in table
    assert ("**met**" in table) != ("**NOT met**" in table)


def test_the_exactly_once_check_passes_a_clean_run_and_names_each_fault():
    acks = {0: [(0, 1), (1, 3)], 1: [(0, 2), (1, 4)]}
    found = [(1, 0, 0), (2, 1, 0), (3, 0, 1), (4, 1, 1)]
    assert bss.check_exactly_once(acks, found) == []
    doubled = sorted(found + found)  # every append there twice
    assert any("2 times" in p for p in bss.check_exactly_once(acks, doubled))
    assert any("missing" in p for p in bss.check_exactly_once(acks, found[:-1]))
    swapped = [(1, 0, 1), (2, 1, 0), (3, 0, 0), (4, 1, 1)]
    assert any("writer 0's records are not in the order" in p for p in bss.check_exactly_once(acks, swapped))
    moved = [(1, 0, 0), (2, 1, 0), (3, 0, 1), (5, 1, 1)]  # not at the line it was acknowledged with
    assert any("acknowledged at line 4" in p for p in bss.check_exactly_once(acks, moved))
    extra = found + [(5, 1, 2)]  # written, never acknowledged
    assert any("no writer was acknowledged" in p for p in bss.check_exactly_once(acks, extra))
    stranger = found + [(5, -1, -1)]  # a message no writer wrote
    assert any("no writer wrote" in p for p in bss.check_exactly_once(acks, stranger))


def test_without_postgresql_the_bench_says_so_and_exits_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BOUNDCTX_CACHE_DIR", str(tmp_path / "cache"))

    def missing(fsync):
        raise PostgresUnavailable("PostgreSQL server binaries not found (initdb, pg_ctl, postgres)")

    monkeypatch.setattr(bss, "start_postgres", missing)
    assert bss.main(["--messages", "500", "--data-dir", str(tmp_path / "data"),
                     "--json-out", str(tmp_path / "out.json")]) == 2
    err = capsys.readouterr().err
    assert "PostgreSQL is not available" in err and "initdb" in err
    assert not (tmp_path / "out.json").exists()
