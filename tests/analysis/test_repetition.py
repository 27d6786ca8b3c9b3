"""The repetition guard: a loop is stopped and not passed on; anything else streams
through whole, however it is cut into chunks."""

from hypothesis import given
from hypothesis import strategies as st

from boundctx.analysis.repetition import RepetitionGuard


def run(chunks):
    g = RepetitionGuard()
    out = []
    for c in chunks:
        out.append(g.feed(c))
        if g.looping:
            break
    out.append(g.finish())
    return "".join(out), g


def chunked(text, cuts):
    points = sorted({min(c, len(text)) for c in cuts})
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)])]


@given(st.text(alphabet="ab \n.", max_size=300), st.lists(st.integers(0, 300), max_size=20))
def test_whatever_is_passed_on_is_the_text_or_a_prefix_with_a_loop_cut(text, cuts):
    out, g = run(chunked(text, cuts))
    if g.looping:
        assert text.startswith(out) and g.withheld_chars > 0
    else:
        assert out == text and g.withheld_chars == 0


@given(st.lists(st.integers(0, 120), max_size=12))
def test_a_line_repeated_until_the_budget_is_said_once_however_it_is_chunked(cuts):
    text = "Answer: the failing step is\n" + "It is step 12, job 7f3a.\n\n" * 12
    out, g = run(chunked(text, cuts))
    assert g.looping and out == "Answer: the failing step is\nIt is step 12, job 7f3a.\n\n"


def test_distinct_lines_and_short_repeated_lines_stream_through():
    text = "".join(f"step {i}: ok\n" for i in range(50)) + "}\n}\n}\n}\n" + "---\n" * 5
    out, g = run([text])
    assert out == text and not g.looping


def test_a_phrase_looping_inside_one_line_is_stopped():
    text = "The answer is " + "the job id is 42 and " * 10
    out, g = run([w + " " for w in text.split(" ")])  # a word at a time, as a model streams
    assert g.looping and text.startswith(out) and out.count("job id") == 4


def test_a_repeated_hex_string_is_data_not_a_loop():
    text = "digest: " + "deadbeef" * 8 + "\n"
    out, g = run([text])
    assert out == text and not g.looping


def test_text_is_held_only_while_it_may_be_a_copy():
    g = RepetitionGuard()
    assert g.feed("The first line here\nThe fi") == "The first line here\n"  # may be a copy: held
    assert g.feed("nal word") == "The final word"  # it was not


def test_a_whole_sentence_said_again_and_again_on_one_line_is_stopped():
    # As the embedded model did on a CI log: one 170-character sentence, over and over.
    sentence = ('is the error message "C++: Cannot compile C header <boundctx.h> (2018-03-24 09:57:36) '
                'at /lib/systemd_cxx_run_test_lineindex.so: No such file or directory" ')
    text = "The error message " + sentence * 8
    out, g = run([w + " " for w in text.split(" ")])
    assert g.looping and text.startswith(out) and out.count("Cannot compile") == 3


def test_an_indented_loop_is_caught_when_the_indentation_is_a_token_of_its_own():
    line = "The failing step is step 12.\n"
    out, g = run(["Answer:\n"] + ["  ", line] * 10)
    assert g.looping and out == "Answer:\n  " + line


def test_loop_detection_does_not_depend_on_line_endings():
    for end in ("\n", "\r\n"):
        out, g = run(["The answer is " + "the job id is 42 and " * 6 + end])
        assert g.looping, repr(end)


def test_rows_of_numbers_and_nulls_are_data_not_loops():
    for text in ("The matrix is [" + "0, " * 40 + "0]\n", "Scores: " + "10 " * 40 + "\n",
                 "row: " + "null, " * 30 + "\n"):
        out, g = run([w + " " for w in text.split(" ")][:-1] + [text.split(" ")[-1]])
        assert not g.looping and out == text, text


@given(st.lists(st.integers(0, 400), max_size=30))
def test_whether_a_text_loops_does_not_depend_on_how_it_is_chunked(cuts):
    text = "Notes:\n" + "  - step 12 failed with job 7f3a\n" * 5 + "done\n"
    _, whole = run([text])
    _, pieces = run(chunked(text, cuts))
    assert whole.looping and pieces.looping
