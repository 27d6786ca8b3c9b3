"""The cut at the caller's stop strings: the same text whatever the pieces, never a part
of a stop string passed on, and nothing held back that cannot be one."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boundctx.analysis.stops import StopCut, check_stops


def reference(text, stops):
    """The text before the first stop string completed (by its last character; the
    longer one where two end together), and whether one was."""
    found = [(text.find(s) + len(s), text.find(s)) for s in stops if s in text]
    return (text[:min(found)[1]], True) if found else (text, False)


def held_tail(text, stops):
    """The longest tail of ``text`` that a stop string starts with (and is longer than)."""
    return max((k for s in stops for k in range(1, min(len(s) - 1, len(text)) + 1) if text.endswith(s[:k])),
               default=0)


def chunked(text, cuts):
    points = sorted({min(c, len(text)) for c in cuts})
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)])]


def run(pieces, stops):
    cut = StopCut(stops)
    out = [cut.feed(p) for p in pieces]
    return "".join(out) + cut.finish(), cut.hit


stop_strings = st.lists(st.text(alphabet="ab\n", min_size=1, max_size=5), min_size=1, max_size=4)


@given(st.text(alphabet="abc\n", max_size=120), stop_strings, st.lists(st.integers(0, 120), max_size=30))
def test_the_cut_is_the_same_however_the_text_is_split(text, stops, cuts):
    assert run(chunked(text, cuts), stops) == reference(text, stops)


@given(st.text(alphabet="abc\n", max_size=80), stop_strings)
def test_text_is_passed_on_as_soon_as_it_cannot_be_part_of_a_stop_string(text, stops):
    # One character at a time: what has been passed on is always everything but the
    # tail that a stop string could still begin with, and never a part of one.
    cut = StopCut(stops)
    passed = ""
    for n in range(1, len(text) + 1):
        passed += cut.feed(text[n - 1])
        if cut.hit:
            assert passed == reference(text[:n], stops)[0]
            return
        assert passed == text[:n - held_tail(text[:n], stops)]


def test_a_stop_string_split_over_pieces_is_held_until_it_is_known():
    cut = StopCut(["\n\nUser:"])
    assert cut.feed("Hello") == "Hello"
    assert cut.feed("!\n") == "!"
    assert cut.feed("\nUs") == ""
    assert cut.feed("ed to") == "\n\nUsed to"  # not the stop string after all: all of it, at once
    assert cut.feed(" it.\n\nUse") == " it."
    assert cut.feed("r: and more") == "" and cut.hit
    assert cut.feed("anything") == "" and cut.finish() == ""


def test_the_stop_completed_first_wins_and_at_the_same_character_the_longer():
    assert run(["abcd"], ["abcd", "c"]) == ("ab", True)  # "c" is complete before "abcd" is
    assert run(["abc"], ["c", "bc"]) == ("a", True)
    assert run(["x", "yz"], ["xyz", "yz"]) == ("", True)


def test_without_stop_strings_text_passes_whole_and_what_is_held_comes_out_at_the_end():
    assert run(["any", " text"], []) == ("any text", False)
    cut = StopCut(["END"])
    assert cut.feed("the E") == "the " and cut.finish() == "E" and not cut.hit


def test_a_long_self_overlapping_stop_string_is_held_and_cut_exactly():
    # "aaa...ab" against "aaa...a": every tail could begin it (and a naive tail check
    # is quadratic here; the matcher's work is linear, which no test times).
    stop = "a" * 50_000 + "b"
    cut = StopCut([stop])
    assert cut.feed("a" * 60_000) == "a" * 10_000
    assert cut.feed("b") == "" and cut.hit


def test_stop_values_are_checked():
    assert check_stops(None) == [] and check_stops("###") == ["###"] and check_stops(("a", "b")) == ["a", "b"]
    with pytest.raises(ValueError, match=r"stop\[1\] is empty"):
        check_stops(["a", ""])
    with pytest.raises(ValueError, match=r"stop\[0\] is empty"):
        check_stops("")
    with pytest.raises(TypeError, match=r"stop\[0\] is of type int"):
        check_stops([5])
    with pytest.raises(TypeError, match="got int"):
        check_stops(5)
