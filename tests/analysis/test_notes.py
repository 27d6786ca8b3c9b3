"""Notes kept by code: every key findable, the latest value winning, always in bound."""

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from boundctx.analysis.notes import INDEX_HEADER, NoteLedger, parse_worker_lines
from boundctx.tokens import ByteEstimateCounter

count = ByteEstimateCounter().count_text


def test_a_worker_answer_is_read_line_by_line_with_its_citations_checked():
    text = ("- timeout of db-7: 45s [S2 120-140]\n"
            "Notes:\n"                                   # a heading, not a fact
            "owner of db-7: ops-team [S1 0-10]\n"       # another section: the worker read S2 only
            "the build failed at step 377\n"             # no key, no citation
            "nothing relevant\n")
    assert parse_worker_lines(text, section=2, start=100, end=300) == [
        ("timeout of db-7", "45s", 120, 140),
        ("owner of db-7", "ops-team", 100, 300),
        ("the build failed at step 377", "the build failed at step 377", 100, 300)]
    assert parse_worker_lines("Nothing relevant.", section=1, start=0, end=9) == []


def test_a_citation_in_words_is_read_like_the_older_notation_and_an_unfilled_form_is_dropped():
    in_words = parse_worker_lines("port of api: 8080 (characters 110-120)\nhost: db-7 (chars 130-140)",
                                  section=2, start=100, end=200)
    older = parse_worker_lines("port of api: 8080 [S2 110-120]\nhost: db-7 [S2 130-140]", section=2, start=100, end=200)
    assert in_words == older == [("port of api", "8080", 110, 120), ("host", "db-7", 130, 140)]
    # outside this section's characters: cited as the whole section
    assert parse_worker_lines("port: 1 (characters 10-20)", section=2, start=100, end=200) == [("port", "1", 100, 200)]
    # the form's own placeholders, copied as they stand, are said nowhere
    assert parse_worker_lines("port: 1 [S<k> start-end]\nhost: x (characters start-end)", section=1, start=0,
                              end=9) == [("port", "1", 0, 9), ("host", "x", 0, 9)]
    # as a model may write it: capitalised, with a full stop; a value's own "(start-end)" stays
    assert parse_worker_lines("Port: 1 (Characters 110-120).\nspan: (start-end) of it (characters 130-140)",
                              section=2, start=100, end=200) == [("Port", "1", 110, 120),
                                                                 ("span", "(start-end) of it", 130, 140)]
    # a rendered note given back (a worker repeating its notes) reads as it was noted
    assert parse_worker_lines("port: 2 (characters 150-160) (corrects the value at characters 110-120)",
                              section=2, start=100, end=200) == [("port", "2", 150, 160)]


def test_a_correction_wins_and_the_stale_value_is_marked():
    ledger = NoteLedger()
    ledger.add_answer("port of api: 8080 [S1 10-20]", section=1, start=0, end=100)
    ledger.add_answer("Port of API: 8080 [S2 110-120]", section=2, start=100, end=200)  # the same again
    ledger.add_answer("port of api: 9090 [S3 210-220]", section=3, start=200, end=300)
    text = ledger.render(1000, count)
    assert text == "port of api: 9090 (characters 210-220) (corrects the value at characters 10-20)"


def test_over_the_bound_old_values_go_first_and_their_keys_stay_with_their_ranges():
    ledger = NoteLedger()
    for i in range(10):
        ledger.add(f"key {i}", "v" * 80, section=i + 1, start=i * 100, end=i * 100 + 50)
    text = ledger.render(480, count)
    assert count(text) <= 480 and INDEX_HEADER in text
    assert all(f"key {i}" in text for i in range(10))
    kept = [i for i in range(10) if f"key {i}: " in text]
    assert kept and kept == list(range(10 - len(kept), 10))  # the newest values are kept
    assert "key 0 (characters 0-50)" in text.split(INDEX_HEADER)[1]


def test_workers_notes_merge_with_the_later_place_in_the_text_winning():
    a, b = NoteLedger(), NoteLedger()
    a.add("depot of Kalo", "1111-AB", section=1, start=5, end=30)
    b.add("depot of Kalo", "2222-CD", section=4, start=900, end=925)
    a.add("depot of Kalo", "1111-AB", section=3, start=600, end=625)
    merged = NoteLedger.merged([a, b]).render(1000, count)
    assert merged == "depot of Kalo: 2222-CD (characters 900-925) (corrects the value at characters 5-30)"


facts = st.lists(st.tuples(st.integers(0, 30), st.text("abc xyz", min_size=1, max_size=40),
                           st.integers(1, 9)), max_size=60)


@settings(max_examples=200, deadline=None)
@given(facts, st.integers(0, 2000))
def test_the_notes_never_pass_their_bound(entries, budget):
    ledger = NoteLedger()
    for key, value, section in entries:
        ledger.add(f"k{key}", value, section=section, start=section * 100, end=section * 100 + 10)
    text = ledger.render(budget, count)
    assert count(text) <= budget or text == ""
    if text and INDEX_HEADER not in text:
        # Everything fits: every key with its latest value.
        latest = {}
        for key, value, _ in entries:
            latest.setdefault(key, [])
            if not latest[key] or " ".join(latest[key][-1].casefold().split()) != " ".join(value.casefold().split()):
                latest[key].append(value)
        for key, values in latest.items():
            assert f"k{key}: {values[-1]} " in text + " "


def test_keys_past_even_the_compact_index_are_said_with_the_characters_to_reread():
    ledger = NoteLedger()
    for i in range(30):
        ledger.add(f"a rather long key number {i}", "v", section=1 + i // 10, start=100 * i, end=100 * i + 40)
    text = ledger.render(300, count)
    assert count(text) <= 300
    listed = [i for i in range(30) if re.search(rf"key number {i}(?!\d)", text)]
    assert listed == list(range(30 - len(listed), 30))  # the newest keys stay listed
    dropped_end = 100 * (29 - len(listed)) + 40
    assert f"more keys, at characters 0-{dropped_end} (sections 1" in text
