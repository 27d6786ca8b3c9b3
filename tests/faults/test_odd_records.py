"""Odd-but-valid records of every dialect: a seeded sample of the campaign, through
chat_messages on real files and through ``boundctx ask --transcript`` in real processes.
Nothing raises, every message is well-formed, no other record's message is lost, and a
line whose messages are gone is named in a notice."""

from . import core
from .core import assert_clean
from .odd_records import DIALECTS, odd_records


def test_odd_records_of_every_dialect_are_notices_and_lose_no_other_message(tmp_path):
    per_dialect = core.scaled(80)
    tally = odd_records(tmp_path, per_dialect=per_dialect, asks=1, seed=20261201)
    assert_clean(tally)
    for dialect in DIALECTS:
        assert tally.notes[f"odd records tried: {dialect}"] == per_dialect
        assert tally.notes[f"odd records possible: {dialect}"] > per_dialect
        assert tally.notes[f"boundctx ask runs: {dialect}"] == 1
    assert tally.faults == per_dialect * len(DIALECTS) and tally.acknowledged > tally.faults
