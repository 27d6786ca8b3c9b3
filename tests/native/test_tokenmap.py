"""Native token maps == the reference twin, on text that stresses UTF-8."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from boundctx._native import tokenmap as native
from reference import tokenmap as ref

# Code points of every UTF-8 width, combining marks, ZWJ, emoji, CJK, lone surrogates.
chars = st.one_of(
    st.characters(codec="utf-8"),
    st.sampled_from(["é", "\u0301", "\u200d", "👩", "\U0001F3FD", "中", "\r", "\n", "\ud800", "\udfff"]),
)
texts = st.text(alphabet=chars, max_size=60)


@st.composite
def tokenized(draw):
    """A text and a random partition of its UTF-8 bytes into pieces (some empty)."""
    text = draw(texts)
    total = ref.utf8_length(text)
    cuts = sorted(draw(st.lists(st.integers(0, total), max_size=20)))
    edges = [0, *cuts, total]
    return text, [b - a for a, b in zip(edges, edges[1:])]


def spans(text, pieces):
    pb = np.asarray(pieces, dtype=np.int64)
    s, e = np.empty(len(pb), np.int64), np.empty(len(pb), np.int64)
    native.token_spans(text, pb, s, e)
    return s.tolist(), e.tolist()


@given(texts)
def test_utf8_length_and_offsets_match_encoding(text):
    assert native.utf8_length(text) == ref.utf8_length(text)
    out = np.empty(len(text) + 1, np.int64)
    native.code_point_byte_offsets(text, out)
    assert out.tolist() == ref.code_point_byte_offsets(text)


@given(tokenized())
def test_token_spans_match_reference(case):
    text, pieces = case
    assert spans(text, pieces) == ref.token_spans(text, pieces)


@given(tokenized())
def test_token_spans_cover_every_byte_of_their_token(case):
    text, pieces = case
    starts, ends = spans(text, pieces)
    offsets = ref.code_point_byte_offsets(text)
    pos = 0
    for n, s, e in zip(pieces, starts, ends):
        assert offsets[s] <= pos and pos + n <= offsets[e]  # snapped outwards, never in
        assert 0 <= s <= e <= len(text)
        pos += n
    assert starts == sorted(starts) and ends == sorted(ends)


def test_a_character_split_over_two_tokens_maps_both_to_it():
    text = "a😀b"
    assert spans(text, [1, 2, 2, 1]) == ([0, 1, 1, 2], [1, 2, 2, 3])


@pytest.mark.parametrize("pieces, message", [
    ([1, 1], "add up to 2, but the text is 3"),
    ([4, -1], "negative byte length"),
])
def test_token_spans_refuse_pieces_from_another_text(pieces, message):
    with pytest.raises(ValueError, match=message):
        spans("abc", pieces)


def test_output_buffers_must_fit():
    with pytest.raises(ValueError, match="len\\(text\\) \\+ 1 = 4"):
        native.code_point_byte_offsets("abc", np.empty(3, np.int64))
    with pytest.raises(ValueError, match="one per token"):
        native.token_spans("ab", np.array([1, 1], np.int64), np.empty(1, np.int64), np.empty(2, np.int64))
