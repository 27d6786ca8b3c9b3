"""The shared benchmark harness (plain tests: ``python -m pytest bench/test_harness.py``)."""

from __future__ import annotations

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
