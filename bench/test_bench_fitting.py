"""The fitting benchmark's cases run (once each, small) and say what they measured."""

import pytest

pytest.importorskip("llama_cpp", reason="the benchmark counts with the embedded model's tokenizer")

from boundctx.tokens.llama import LlamaCounter  # noqa: E402

from bench import bench_fitting  # noqa: E402 - after the skip: it needs llama-cpp-python


def test_a_small_case_runs_and_the_search_chooses_what_the_walk_does():
    row = bench_fitting.case(LlamaCounter(), "smoke", bench_fitting.chat(180, seed=1), repeats=1, old=True,
                             peers=False)
    assert row["same_choice_as_one_at_a_time"] and row["dropped"] > 0
    assert row["cold_counts"] > 0 and row["warm_counts"] > 0 and row["engine_warm_s"] > 0
