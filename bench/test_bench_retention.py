"""The retention benchmark's scripted model gives the table its construction promises.

The byte estimate (a token per byte) is an upper bound, ~3.5x SmolLM2's count of this
prose and ~1.5x of the notes' digits: at the run's 2,048-token window the engine's bound
on the coordinator's prompt (instructions, the reread tool's schema, two workers' notes
at their budget, headers at their widest) is over the window in those units, so these
tests count with it at ``BYTES_WINDOW``, the same notes budget and two workers. There the
notes hold fewer values than on the real tokenizer, and dense documents leave keys out of
the index: what is checked then is that a key the notes do not list is answered
"unknown", never guessed. The goal itself is checked on the real tokenizer.
"""

from __future__ import annotations

import json
import random

import pytest

from boundctx.tokens import ByteEstimateCounter

from bench import bench_retention as br


def test_conditions_keep_what_they_should_on_a_small_document():
    counter = ByteEstimateCounter()
    settings = br.condition_settings(br.BYTES_WINDOW)
    doc, questions = br.make_document(11, br.BYTES_WINDOW * 3)  # 3x the window in bytes, so > the window in tokens
    assert counter.count_text(doc) > br.BYTES_WINDOW
    late = [q for q in questions if q["bucket"] == "late"]
    corrected = next(q for q in questions if q["bucket"] == "corrected")
    for q in late + [corrected]:
        assert br.ask("O", doc, q, counter, settings["O"])[0] == q["answer"]
        assert br.ask("Z", doc, q, counter, settings["Z"])[0] == "unknown"
        for c in ("B", "C", "R"):
            answer, info = br.ask(c, doc, q, counter, settings[c])
            assert answer == q["answer"] and info["ok"] and info["max_active"] == 1, (c, answer, info["error"])
        assert br.ask("A", doc, q, counter, settings["A"])[0] != q["answer"]  # clipped away (or stale)
    assert br.ask("A", doc, corrected, counter, settings["A"])[0] in (*corrected["stale"], "unknown")


def test_a_straddle_sentence_lies_on_the_edge_it_was_put_on():
    counter = ByteEstimateCounter()
    settings = br.condition_settings(br.BYTES_WINDOW)["B"]
    doc, questions = br.make_document(5, br.BYTES_WINDOW * 3, line_breaks=False)
    doc = br.place_straddles(doc, questions, random.Random(5), counter=counter, settings=settings)
    placed = [q for q in questions if "straddle" in q]
    assert [q["straddle"] for q in placed] == ["end", "start", "wide"]
    for q in placed:
        a, b = q["span"]
        assert br.FACT.fullmatch(doc[a:b]) and q["answer"] in doc[a:b]
        sections = br.engine_sections(doc, br.question_text(q), counter, settings)
        assert br.straddles(q["straddle"], (a, b), sections)
    assert len(placed[2]["span"]) == 2 and placed[2]["span"][1] - placed[2]["span"][0] > 64  # wider than the overlap


def test_a_quick_run_answers_what_the_notes_list_and_never_guesses(tmp_path):
    out = tmp_path / "retention-quick.json"
    assert br.main(["--quick", "--json-out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["meta"]["counter"] == "ByteEstimateCounter" and report["meta"]["window"] == br.BYTES_WINDOW
    totals, accuracy = report["totals"], report["accuracy"]
    assert all(t["failed"] == 0 and t["max_active"] == 1 for t in totals.values())
    assert report["straddle_placements"]["checked"] == 9 and report["straddle_placements"]["held"] == 9
    assert all(v["right"] == v["asked"] for v in accuracy["O"].values())
    assert not any(v["right"] for v in accuracy["Z"].values())
    assert report["stale_answers"]["A"] > 0  # the clipped prefix holds first values only
    for c in ("B", "C", "R"):
        assert report["stale_answers"][c] == 0 and report["decoy_answers"][c] == 0
    for miss in report["misses"]:
        if miss["condition"] == "O":
            continue
        assert miss["answer"] == "unknown", miss  # never a value the notes did not give
        if miss["condition"] in ("C", "R"):
            # Rereads recover every key the notes list; what is lost was never listed.
            assert miss["bucket"] == "wide straddle" or not miss["listed"], miss
    assert totals["C"]["rereads"] > 0 and totals["R"]["rereads"] == totals["C"]["rereads"]
    assert totals["R"]["calls"] > totals["B"]["calls"]  # the constrained step is a call of its own


def test_on_the_real_tokenizer_rereads_answer_every_fact_a_section_holds_whole(tmp_path):
    pytest.importorskip("llama_cpp")
    out = tmp_path / "retention-quick.json"
    assert br.main(["--quick", "--counter", "llama", "--json-out", str(out)]) == 0
    report = json.loads(out.read_text())
    for c in ("C", "R"):
        assert report["goal"][c]["met"], (c, [m for m in report["misses"] if m["condition"] == c])
    wide = [m for m in report["misses"] if m["bucket"] == "wide straddle"]
    assert {m["condition"] for m in wide} == {"B", "C", "R"}  # no section holds it whole: outside the goal


def test_an_at_budget_section_answers_exactly_its_budget_and_the_next_passes_it():
    pytest.importorskip("llama_cpp")
    from boundctx.tokens.llama import LlamaCounter

    counter = LlamaCounter()
    settings = br.condition_settings(1536, notes=256)["B"]
    docs = br.at_budget_documents(21, 1536 * 3 * 3, counter, settings)
    assert [qs[0]["answer_tokens"] for _, qs in docs][0] <= 256 < docs[1][1][0]["answer_tokens"]
    for doc, questions in docs:
        assert br.cluster_section(doc, questions, counter, settings) is not None  # one section holds it whole


def test_a_keys_document_asks_a_spread_sample_with_its_first_and_last_key():
    doc, questions = br.make_document(3, 30_000, extra_facts=120, ask_extra=True)
    keys = sorted((q for q in questions if q["bucket"] == "key"), key=lambda q: q["span"][0])
    asked = [q for q in br.sample_keys(questions, 10) if q["bucket"] == "key"]
    assert len(asked) == 10 and asked[0] is keys[0] and asked[-1] is keys[-1]
    assert len(list(br.facts(doc))) == 120 + br.REGULAR_KEYS + 1  # the corrected key has two sentences


@pytest.mark.slow
def test_dense_inputs_meet_the_goal_at_the_tightest_window_notes_and_most_workers(tmp_path):
    """One cell of the matrix run (the smallest window and notes, four workers), one
    document of each dense family: the 40-record cluster, the 300-key document, both
    at-budget ones. The whole matrix is ``bench_retention.py --matrix`` (RESULTS.md)."""
    pytest.importorskip("llama_cpp")
    out = tmp_path / "matrix.json"
    assert br.main(["--matrix", "--windows", "1536", "--notes", "256", "--workers", "4", "--documents", "1",
                    "--conditions", "C", "R", "--json-out", str(out)]) == 0
    report = json.loads(out.read_text())
    rows = {row["family"]: row for row in report["rows"]}
    assert set(rows) == {"clustered", "keys", "at-budget"}
    assert rows["keys"]["keys_per_document"] == [300]
    assert rows["at-budget"]["answer_tokens"][0] <= 256 < rows["at-budget"]["answer_tokens"][1]
    for row in rows.values():
        for c in ("C", "R"):
            assert row["goal"][c]["met"], (row["family"], c, row["goal"][c], row["misses"], row["errors"])
    for family in ("clustered", "keys"):  # more facts than the notes show: rereads were needed, and made
        assert rows[family]["rereads"]["C"] > 0 and rows[family]["rereads"]["R"] > 0, family
    # A worker cut one word past its budget reads on, so the at-budget notes hold every
    # value: answered from the notes, with or without a reread.
