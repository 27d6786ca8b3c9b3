"""Native token maps == the reference twin, on text that stresses UTF-8."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from boundctx._native import tokenmap as native

from tests.reference import tokenmap as ref

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


# Hostile piece lengths, as a custom TokenCounter's piece_bytes may return them.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
int64s = st.one_of(st.integers(INT64_MIN, INT64_MAX),
                   st.sampled_from([INT64_MIN, INT64_MAX, -1, 0, 1, 2**62, 2**32]))


def wrapped_to(total, values):
    """The int64 that makes ``values`` add up to ``total`` once the sum wraps."""
    last = (total - sum(values)) % 2**64
    return last - 2**64 if last > INT64_MAX else last


@st.composite
def hostile_pieces(draw):
    """A text and piece lengths that are not a partition of its bytes: huge, negative,
    or summing (with int64 wraparound) to exactly the text's length."""
    text = draw(texts)
    total = ref.utf8_length(text)
    values = draw(st.lists(int64s, min_size=1, max_size=8))
    if draw(st.booleans()):
        values = [*values, wrapped_to(total, values)]
    # A valid partition drawn by chance is not hostile.
    if all(0 <= v for v in values) and sum(values) == total:
        values = [*values, INT64_MAX]
    return text, values


@given(hostile_pieces())
def test_hostile_piece_lengths_raise_value_error_like_the_twin(case):
    text, pieces = case
    with pytest.raises(ValueError):
        ref.token_spans(text, pieces)
    with pytest.raises(ValueError, match="negative byte length|add up to"):
        spans(text, pieces)


@pytest.mark.parametrize("pieces", [
    [2**63 - 1, 2**63 - 1, 5],
    [2**63 - 1, 2**63 - 1, 2, 3],
    [5, 2**63 - 1, 2**63 - 1],
    [-(2**63), -(2**63), 3],
])
def test_pieces_whose_int64_sum_wraps_to_the_length_are_refused(pieces):
    assert (sum(pieces) + 2**63) % 2**64 - 2**63 == 3  # an int64 sum says "3 bytes, like abc"
    with pytest.raises(ValueError, match="negative byte length|add up to more than"):
        spans("abc", pieces)


def test_pieces_that_run_past_the_text_name_the_token():
    with pytest.raises(ValueError, match="token 4 has 1 bytes, 0 are left"):
        spans("abc", [0, 0, 3, 0, 1])


def test_wrapping_pieces_do_not_crash_the_process():
    # Before the fix this child died of SIGSEGV (the walk read past the end of the str):
    # the reproduction runs in a subprocess so that a crash fails the test, not the suite.
    import subprocess
    import sys
    child = subprocess.run([sys.executable, "-c", (
        "import numpy as np\n"
        "from boundctx._native import tokenmap\n"
        "pb = np.array([2**63 - 1, 2**63 - 1, 5], np.int64)\n"
        "try:\n"
        "    tokenmap.token_spans('abc', pb, np.empty(3, np.int64), np.empty(3, np.int64))\n"
        "except ValueError as e:\n"
        "    print('ValueError:', e)\n"
    )], capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, (child.returncode, child.stderr)
    assert child.stdout.startswith("ValueError: token byte lengths add up to more than")


@pytest.mark.parametrize("bad_end", [-(2**63), -5, 1])
def test_next_cut_refuses_token_spans_that_are_not_non_decreasing(bad_end):
    # The spans token_spans writes feed sections.next_cut, which trusts them as sorted;
    # a hostile end before the section's start made `e - start` wrap (undefined in C)
    # and came back as a silent "budget too small". (Belongs with tests/native/test_sections.py.)
    from boundctx._native import sections

    starts = np.arange(6, dtype=np.int64)
    ends = np.array([3, 4, bad_end, 6, 7, 8], np.int64)
    with pytest.raises(ValueError, match="not non-decreasing"):
        sections.next_cut("abcdefgh", starts, ends, 1, 3, 0)
