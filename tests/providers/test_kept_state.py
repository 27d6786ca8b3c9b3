"""The state cache: bounded in bytes, least recently used out first, and it names the
kept prefix that spares the most of a prompt (checked against a slow twin)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from boundctx.providers.kept_state import StateCache, common_prefix

from tests.reference.kept_state import ListStateCache, shared_start

TOKEN = np.dtype(np.intc).itemsize


def arr(*tokens):
    return np.asarray(tokens, dtype=np.intc)


def test_the_longest_common_start_wins_and_a_shorter_prefix_of_a_new_entry_goes():
    cache = StateCache(10_000)
    cache.put(arr(1, 2, 3), b"x" * 10)
    cache.put(arr(5, 6), b"y" * 10)
    assert cache.best([1, 2, 9])[0] == 2 and cache.best([5, 6, 7])[0] == 2 and cache.best([8])[0] == 0
    assert cache.best([8])[1] is None
    cache.put(arr(1, 2, 3, 4), b"z" * 10)  # [1, 2, 3] is its start: nothing is lost by dropping it
    assert len(cache) == 2 and cache.holds(arr(1, 2, 3)) and not cache.holds(arr(1, 2, 4))
    assert cache.best([1, 2, 3, 4, 5])[1].data == b"z" * 10


def test_the_limit_holds_and_the_least_recently_used_go_first():
    size = 100 + 4 * TOKEN
    cache = StateCache(3 * size)
    for first in (1, 2, 3):
        assert cache.put(arr(first, 0, 0, 0), b"s" * 100)
    cache.used(cache.best([1, 0])[1])  # 1 is now the most recently used
    cache.put(arr(4, 0, 0, 0), b"s" * 100)
    assert cache.bytes <= cache.limit_bytes and len(cache) == 3
    assert cache.best([2])[0] == 0 and cache.best([1])[0] == 1 and cache.best([3])[0] == 1
    assert cache.stats()["evicted"] == 1 and cache.stats()["restored"] == 1
    assert not cache.put(arr(9), b"s" * (3 * size))  # alone over the limit: not kept, nothing pushed out
    assert len(cache) == 3


def test_a_forgotten_entry_frees_its_bytes():
    cache = StateCache(1000)
    cache.put(arr(1, 2), b"s" * 50)
    cache.forget(cache.best([1])[1])
    assert len(cache) == 0 and cache.bytes == 0


def test_a_negative_limit_is_refused():
    with pytest.raises(ValueError, match="limit_bytes"):
        StateCache(-1)


prompts = st.lists(st.integers(0, 3), min_size=0, max_size=8)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["put", "use", "best"]), prompts, st.integers(0, 60)), max_size=40),
       st.integers(0, 200))
def test_the_cache_agrees_with_its_slow_twin(ops, limit):
    fast, slow = StateCache(limit), ListStateCache(limit)
    for op, tokens, payload in ops:
        tokens = arr(*tokens)
        if op == "put":
            assert fast.put(tokens, b"\0" * payload) == slow.put(tuple(tokens.tolist()), payload + tokens.nbytes)
        elif op == "use":
            n, entry = fast.best(tokens)
            if entry is not None:
                assert tuple(entry.tokens.tolist()) == slow.best_entry(tokens.tolist())
                fast.used(entry)
                slow.use(entry.tokens.tolist())
        n, entry = fast.best(tokens)
        assert n == slow.best(tokens.tolist())
        assert fast.holds(tokens) == slow.holds(tokens.tolist())
        kept = [tuple(e.tokens.tolist()) for e in fast._entries.values()]
        assert kept == [t for t, _ in slow.entries]
        assert fast.bytes == slow.used_bytes() <= limit


@given(prompts, prompts)
def test_common_prefix_agrees_with_counting_one_token_at_a_time(a, b):
    assert common_prefix(arr(*a), arr(*b)) == shared_start(a, b)
