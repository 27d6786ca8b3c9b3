"""Checks of ``bench_native_instructions.py`` without valgrind: the children it counts
make the call (and find the sample's lines) or do everything but the call.

Not part of the default suite (``testpaths = ["tests"]``): ``python -m pytest
bench/test_bench_native_instructions.py -q``.
"""

from __future__ import annotations

import pytest

from bench import bench_native_instructions as bni


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    return bni.ensure_sample(tmp_path_factory.mktemp("data"), 2 * bni.MB)


@pytest.mark.parametrize("case", sorted(bni.CASES))
def test_a_child_with_the_call_finds_the_sample_s_lines(case, sample, capsys):
    path, meta = sample
    bni.child(case, str(path), call=True)
    assert int(capsys.readouterr().out) == meta["lines"] > 1000


@pytest.mark.parametrize("case", sorted(bni.CASES))
def test_a_child_without_the_call_prints_nothing(case, sample, capsys):
    path, _ = sample
    bni.child(case, str(path), call=False)
    assert capsys.readouterr().out == ""


def test_the_sample_is_generated_once_and_the_same_for_a_seed(sample, tmp_path):
    path, meta = sample
    again_path, again = bni.ensure_sample(path.parent, 2 * bni.MB)
    assert (again_path, again) == (path, meta)
    assert bni.ensure_sample(tmp_path, 2 * bni.MB)[1]["sha256"] == meta["sha256"]
