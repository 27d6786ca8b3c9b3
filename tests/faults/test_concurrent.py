"""Several processes at once: appenders under the write lock, a reader paging while
others append and rewrite.

The contract these state (not how store.py meets it): one writer at a time, a second
is refused (TranscriptLocked) and may retry; an append either lands whole or not at
all; a rewrite replaces the file from a complete history that no acknowledged append
is missing from (or is refused with TranscriptChanged); a reader sees each window as
a run of records exactly as written, or gets a clear error.
"""

from . import concurrent_appenders, core, paging
from .core import assert_clean


def test_concurrent_appenders_lose_and_interleave_nothing_even_when_some_are_killed(tmp_path):
    tally = concurrent_appenders.concurrent_appenders(tmp_path, writers=3, records=core.scaled(12),
                                                      kills=core.scaled(3), seed=4242)
    assert_clean(tally)
    assert tally.faults == core.scaled(3)
    assert tally.acknowledged > 0


def test_a_reader_paging_backwards_sees_consistent_pages_while_others_append_and_rewrite(tmp_path):
    tally = paging.reader_under_rewrites(tmp_path, appenders=2, records=core.scaled(15), rewrites=core.scaled(8),
                                         seed=777)
    assert_clean(tally)
    # Both kinds of change happened under the reader, and it read all the while.
    assert tally.notes["rewrites committed under the reader"] == core.scaled(8)
    assert tally.acknowledged == 2 * core.scaled(15) + core.scaled(8)
    assert tally.notes["reader pages"] > 0 and tally.notes["reader passes"] > 0
