"""``read_chat_section``'s search: exact passages of an original that hold words of a
query, chosen as the slow twin chooses them (tests/reference/search.py), bounded in
what it reads and returns whatever the original's size, and saying what it did not
search (decision 0046)."""

import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from boundctx.analysis.originals import MAX_SEARCH_CHARS, SEARCH_PASSAGE_CHARS, Originals
from boundctx.errors import SectionReadError

from tests.reference.search import chosen_lines, searched_from

PASSAGE = re.compile(r"^characters (\d+)-(\d+): «", re.M)


def passages(result):
    return [(int(a), int(b)) for a, b in PASSAGE.findall(result)]


def search(text, query, **bounds):
    originals = Originals(max_read_chars=10**9, **bounds)
    return originals.search(originals.add(text, "earlier messages"), query)


# Letters that fold in odd ways (ß, İ, K and the Kelvin sign) beside plain ones.
TEXT = st.text(alphabet="abAB xy-\nßİKK", max_size=400)
QUERY = st.lists(st.text(alphabet="abABxyßİKK-", min_size=1, max_size=4), min_size=1, max_size=4).map(" ".join)


@settings(max_examples=400, deadline=None)
@given(TEXT, QUERY, st.integers(1, 500), st.integers(1, 8))
@example("ab\nab ab\nx", "ab", 500, 8)
@example("Kx\nkx\nKX", "k", 3, 2)
def test_a_search_chooses_the_lines_the_slow_twin_chooses(text, query, max_chars, max_hits):
    if len(query) > MAX_SEARCH_CHARS:
        return
    result = search(text, query, search_max_chars=max_chars, search_max_hits=max_hits)
    expected = chosen_lines(text, query, max_chars, max_hits)
    want = sorted(_clipped(a, b, first) for a, b, first in expected)
    assert passages(result) == want, result
    for a, b in passages(result):
        assert f"characters {a}-{b}: «{text[a:b]}»" in result  # the exact text
    unsearched = searched_from(text, max_chars)
    assert (f"characters 0-{unsearched} were not searched" in result) == (unsearched > 0)


def _clipped(a, b, first):
    if b - a <= SEARCH_PASSAGE_CHARS:
        return a, b
    start = max(a, min(first - SEARCH_PASSAGE_CHARS // 4, b - SEARCH_PASSAGE_CHARS))
    return start, start + SEARCH_PASSAGE_CHARS


def test_a_long_line_is_cut_around_its_first_word_and_the_whole_answer_within_one_read():
    line = "x" * 5000 + " job id J42 " + "y" * 5000
    originals = Originals(max_read_chars=1000, search_max_hits=6)
    oid = originals.add("\n".join([line] * 6), "earlier messages")
    result = originals.search(oid, "J42")
    got = passages(result)
    assert got and all(b - a == SEARCH_PASSAGE_CHARS for a, b in got)
    assert all("J42" in originals.read(oid, a, b) for a, b in got)
    assert len(result) <= 1000 + 200  # the passages within one read, and a heading


def test_the_newest_lines_are_searched_first_and_what_was_not_is_said():
    text = "".join(f"message {i}: the build of job J{i:04d} passed\n" for i in range(100_000))
    result = search(text, "J0007 passed", search_max_chars=50_000, search_max_hits=3)
    assert re.search(r"characters 0-\d+ were not searched \(one search reads at most "
                     r"analysis.search_max_chars characters\)", result)
    assert [text[a:b].split(":")[0] for a, b in passages(result)] == [
        "message 99997", "message 99998", "message 99999"]  # 'passed' alone, the newest of equals
    whole = search(text, "J0007 passed", search_max_hits=3)
    assert "not searched" not in whole and "message 7:" in whole  # both words: first


def test_a_search_out_of_time_says_where_it_stopped():
    text = "a line that matches\n" * 2_000_000
    result = search(text, "matches", search_max_seconds=1e-9)
    stopped = int(re.search(r"characters 0-(\d+) were not searched \(the search's time ran out", result).group(1))
    assert 0 < stopped < len(text) and passages(result)  # one block read at least: what it found is given


@pytest.mark.parametrize("arguments, said", [
    ({"section_id": "earlier messages", "search": ""}, "a few words"),
    ({"section_id": "earlier messages", "search": "x" * (MAX_SEARCH_CHARS + 1)}, "a few words"),
    ({"section_id": "earlier messages", "search": 7}, "a few words"),
    ({"section_id": "earlier messages", "search": "job", "start": 0, "end": 3}, "search alone"),
    ({"section_id": "elsewhere", "search": "job"}, "no original"),
])
def test_a_bad_search_is_an_error_the_model_can_act_on(arguments, said):
    originals = Originals()
    originals.add("job 1\n", "earlier messages")
    with pytest.raises(SectionReadError, match=said):
        originals.call(arguments)


def test_no_match_says_so_and_the_tool_offers_search():
    originals = Originals()
    oid = originals.add("one\ntwo\n", "earlier messages")
    assert originals.call({"section_id": oid, "search": "three"}) == \
        "No passage of earlier messages holds any of the words of 'three'."
    schema = originals.tool_schema()["function"]
    assert schema["parameters"]["properties"]["search"]["maxLength"] == MAX_SEARCH_CHARS
    assert "search" in schema["description"]


def test_a_call_is_described_in_words_for_the_progress_line():
    from boundctx.analysis.originals import described
    assert described('{"section_id": "earlier messages", "search": "deploy key"}') == \
        "searching earlier messages for 'deploy key'"
    assert described('{"section_id": "build.log", "start": 10, "end": 40}') == \
        "rereading characters 10-40 of build.log"
    assert described('{"section_id": "build.log", "key": "job id"}') == \
        "rereading the value noted as 'job id' in build.log"
    assert described("{nope") == "rereading: {nope"
