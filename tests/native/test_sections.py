"""The native cut rule == its twin; clusters are never cut; the table is current."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from boundctx._native import sections as native

from tests._support.strategies import hard_texts
from tests.reference import graphemes
from tests.reference import sections as ref
from tests.reference import tokenmap as ref_tokenmap

regex = pytest.importorskip("regex", reason="the grapheme oracle needs the regex module (pip install regex)")


def cluster_interiors(text):
    """Positions strictly inside an extended grapheme cluster, by regex's \\X."""
    inside = set()
    for m in regex.finditer(r"\X", text):
        inside.update(range(m.start() + 1, m.end()))
    return inside


def test_the_committed_grapheme_table_is_what_the_generator_writes():
    # The test extra pins regex to the release the table was made from; a different
    # regex (newer Unicode data) shows up here first.
    assert graphemes.HEADER.read_text() == graphemes.render_header(), (
        f"native/boundctx/_native/grapheme_table.h does not match regex {regex.__version__}'s Unicode data: "
        "run python tests/reference/graphemes.py and pin that regex release in pyproject.toml's test extra")


def test_every_code_point_has_its_table_value():
    values = graphemes.property_values()
    wrong = [cp for cp in range(0x110000) if native.grapheme_value(chr(cp)) != values[cp]]
    assert wrong == []


def test_whitespace_is_what_python_calls_whitespace():
    assert [cp for cp in range(0x110000) if native.is_space(chr(cp)) != chr(cp).isspace()] == []


@given(hard_texts(surrogates=True), st.data())
def test_boundaries_match_the_twin_and_never_fall_inside_a_cluster(text, data):
    floor = data.draw(st.integers(0, len(text)))
    for i in range(len(text) + 1):
        assert native.is_boundary(text, i, floor) == graphemes.is_boundary(text, i, floor)
    inside = cluster_interiors(text)
    assert not [i for i in range(len(text) + 1) if i in inside and native.is_boundary(text, i, 0)]


@pytest.mark.parametrize("text", ["\r\n", "a\u0301", "\U0001F469\u200D\U0001F4BB", "\U0001F1EB\U0001F1F7",
                                  "\U0001F44D\U0001F3FD", "\u2764\uFE0F", "\u1100\u1161\u11A8", "\u0915\u094D\u0937"])
def test_no_boundary_inside_known_clusters(text):
    assert not any(native.is_boundary(text, i) for i in range(1, len(text)))


def test_flags_pair_from_the_start_of_the_run():
    flags = "\U0001F1EB\U0001F1F7" * 3
    assert [i for i in range(len(flags) + 1) if native.is_boundary(flags, i)] == [0, 2, 4, 6]


@st.composite
def cut_cases(draw):
    text = draw(hard_texts(60, surrogates=True).filter(bool))
    total = ref_tokenmap.utf8_length(text)
    cuts = sorted(draw(st.lists(st.integers(0, total), max_size=40)))
    edges = [0, *cuts, total]
    pieces = [b - a for a, b in zip(edges, edges[1:])]
    start = draw(st.integers(0, len(text) - 1))
    return text, pieces, start, draw(st.integers(1, 30)), draw(st.integers(0, 20))


@given(cut_cases())
def test_next_cut_matches_the_twin(case):
    text, pieces, start, max_tokens, overlap = case
    s, e = ref_tokenmap.token_spans(text, pieces)
    got = native.next_cut(text, np.asarray(s, np.int64), np.asarray(e, np.int64), start, max_tokens, overlap)
    assert got == native.next_cut(text, np.asarray(s, np.int64), np.asarray(e, np.int64), start, max_tokens,
                                  overlap, start)
    assert got == ref.next_cut(text, s, e, start, max_tokens, overlap)
    end, next_start, kind = got
    if end >= 0:
        assert end > start
        if end < len(text):
            assert start < next_start <= end - overlap and end - overlap - next_start < native.MAX_SNAP


def test_next_cut_checks_its_arguments():
    z = np.zeros(1, np.int64)
    one = np.ones(1, np.int64)
    with pytest.raises(ValueError, match="start"):
        native.next_cut("a", z, one, 1, 1, 0)
    with pytest.raises(ValueError, match="max_tokens"):
        native.next_cut("a", z, one, 0, 0, 0)
    with pytest.raises(ValueError, match="overlap"):
        native.next_cut("a", z, one, 0, 1, -1)
    with pytest.raises(ValueError, match="one entry per token"):
        native.next_cut("a", z, np.ones(2, np.int64), 0, 1, 0)
    with pytest.raises(ValueError, match="end of the text"):
        native.next_cut("ab", z, one, 0, 1, 0)


@given(hard_texts(40), st.data(), st.booleans(), st.booleans())
def test_newline_sync_points_match_the_twin(text, data, after_text, at_spaces):
    from boundctx.tokens import ByteEstimateCounter

    tok_start, _ = ref.spans(text, ByteEstimateCounter()) if text else ([], [])
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, len(text)))
    got = native.newline_sync(text, np.asarray(tok_start, dtype=np.int64), start, end, after_text, at_spaces)
    assert got == ref.newline_sync(text, tok_start, start, end, after_text, at_spaces)
