"""The reliability benchmark runs its campaigns end to end and writes the table's JSON.

A smoke run (``--quick``, a few categories): the campaigns themselves are tested, at a
size that finds things, in ``tests/faults/``.
"""

from __future__ import annotations

import json

from bench import bench_reliability as br


def test_a_quick_run_writes_one_clean_row_per_category(tmp_path, monkeypatch):
    monkeypatch.setenv("BOUNDCTX_CACHE_DIR", str(tmp_path / "cache"))  # main() sets it for the run
    out = tmp_path / "reliability.json"
    rc = br.main(["--quick", "--only", "kill", "--only", "replace", "--only", "fuzz", "--fuzz-seconds", "2",
                  "--workdir", str(tmp_path / "work"), "--json-out", str(out)])
    report = json.loads(out.read_text())
    assert rc == 0, report["categories"]
    assert report["meta"]["versions"]["python"] and report["meta"]["sizes"]["kill"] == br.QUICK["kill"]
    rows = {r["key"]: r for r in report["categories"]}
    assert list(rows) == ["kill", "replace", "fuzz"]
    for key in ("kill", "replace"):
        row = rows[key]
        assert row["faults"] > 0 and row["acknowledged"] > 0
        assert row["lost"] == row["wrong"] == row["crashes"] == row["hangs"] == 0, row["problems"]
    assert rows["fuzz"]["faults"] > 0 or "skipped" in rows["fuzz"]["notes"]
    assert "| kill -9 of a writer" in br.table(report["categories"])
