"""The shared benchmark harness (plain tests: ``python -m pytest bench/test_harness.py``)."""

from __future__ import annotations

import json
import math

from hypothesis import given
from hypothesis import strategies as st

from bench._harness import percentile, summary

_values = st.lists(st.floats(min_value=-1e9, max_value=1e9), min_size=1, max_size=50)
_q = st.floats(min_value=0.01, max_value=1.0)


@given(_values, _q)
def test_percentile_is_the_smallest_value_with_q_of_them_at_or_below(values, q):
    got = percentile(values, q)
    assert got in values
    at_or_below = sum(v <= got for v in values)
    assert at_or_below >= q * len(values) - 1e-9
    # no smaller value of the list has enough at or below it
    assert all(sum(w <= v for w in values) < q * len(values) - 1e-9 for v in values if v < got)


def test_percentile_of_nothing_is_nan_and_summary_uses_it():
    assert math.isnan(percentile([], 0.9))
    samples = [float(i) for i in range(1, 11)]
    assert percentile(samples, 0.5) == 5.0 and percentile(samples, 0.99) == 10.0
    assert percentile(samples, 0.7) == 7.0  # 0.7 * 10 is a hair over 7 in floating point
    assert summary(samples)["p90_s"] == percentile(samples, 0.9) == 9.0


def test_labelled_runs_keep_each_other_and_give_the_ratio_once_both_are_there(tmp_path):
    from bench._harness import labelled_run

    path = tmp_path / "r.json"
    doc = labelled_run(path, "before", {"cases": {"a": {"n": 200}, "b": {"n": 10}}}, measure="n", how="h")
    assert "ratio_after_to_before" not in doc
    doc = labelled_run(path, "after", {"cases": {"a": {"n": 150}}}, measure="n", how="h")
    assert doc["ratio_after_to_before"] == {"a": 0.75}
    assert set(json.loads(path.read_text())["runs"]) == {"before", "after"}
